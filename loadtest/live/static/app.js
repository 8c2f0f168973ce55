// The live page of stocklock: a form that starts a race through the
// server's JSON API, and the harness's events (Server-Sent Events from
// /api/events) drawn as they arrive: a row of numbers per strategy, a lock
// timeline per SKU in SVG, and, at the end, the CLI's verdict, table and
// chart. Plain ES module, no dependencies: it works offline.

const $ = (sel, root = document) => root.querySelector(sel);
const SVGNS = 'http://www.w3.org/2000/svg';

// Labels of the fault buttons, by the server's fault names; an unknown
// fault gets its own name.
const FAULT_LABELS = {
  crash: 'Kill the lock holder (kill -9)',
  pause: 'Pause the holder past its TTL',
  'redis-restart': 'Restart Redis',
  'mongo-restart': 'Restart MongoDB',
};
const FAULT_SHORT = {
  crash: 'kill -9', pause: 'pause', 'redis-restart': 'Redis restart', 'mongo-restart': 'MongoDB restart',
};

// One colour per replica lane (a, b, c, ...), distinguishable on a projector.
const REPLICA_COLORS = ['#0b5cad', '#b34700', '#1d7a12', '#7a2bb8', '#00707a', '#a3006d', '#5e5a00', '#333333'];

const MAX_LOG = 400;

const S = {
  state: null, // the last /api/state
  running: false,
  strategies: new Map(), // name -> {name, safe, lock, doc}
  replicas: [], // replica ids of the race
  runs: new Map(), // strategy -> run model
  duration: 8, // seconds per strategy, for the timeline's scale
  dirty: new Set(), // strategies whose timeline needs drawing
  starting: false, // our own POST /api/start is under way
};

// ---- small helpers -------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  return e;
}

function title(text) {
  return svg('title', {}, text);
}

// parseTime reads an RFC 3339 time with up to nanoseconds into ms.
function parseTime(s) {
  if (!s) return NaN;
  return Date.parse(String(s).replace(/(\.\d{3})\d+/, '$1'));
}

// parseDuration reads a Go duration ("4s", "1500ms", "1m30s") into seconds.
function parseDuration(s) {
  const units = { ns: 1e-9, us: 1e-6, 'µs': 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;
  let total = 0;
  let matched = '';
  for (const m of String(s).trim().matchAll(re)) {
    total += parseFloat(m[1]) * units[m[2]];
    matched += m[0];
  }
  if (!matched || matched !== String(s).trim()) return NaN;
  return total;
}

function ms(v) {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  if (v >= 1000) return (v / 1000).toFixed(2) + ' s';
  if (v >= 100) return v.toFixed(0) + ' ms';
  if (v >= 10) return v.toFixed(1) + ' ms';
  return v.toFixed(2) + ' ms';
}

function replicaColor(id) {
  let i = S.replicas.indexOf(id);
  if (i < 0) i = id ? id.charCodeAt(0) - 97 : 7;
  return REPLICA_COLORS[((i % REPLICA_COLORS.length) + REPLICA_COLORS.length) % REPLICA_COLORS.length];
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  const text = await res.text();
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
  return { status: res.status, ok: res.ok, data };
}

// ---- log -----------------------------------------------------------------

function log(text, kind = 'log', at) {
  const list = $('#log');
  const t = at ? new Date(parseTime(at)) : new Date();
  const stamp = Number.isNaN(t.getTime()) ? '' : t.toTimeString().slice(0, 8);
  list.append(el('li', { class: 'log-' + kind, 'data-kind': kind },
    el('time', { text: stamp }), ' ', el('span', { text })));
  while (list.childElementCount > MAX_LOG) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
}

// ---- status and controls -------------------------------------------------

function setStatus(state, text) {
  const s = $('#status');
  s.dataset.state = state;
  s.textContent = text;
}

function setRunning(on) {
  S.running = on;
  document.body.dataset.running = on ? 'true' : 'false';
  $('#start').disabled = on || S.starting;
  $('#stop').disabled = !on;
  for (const b of document.querySelectorAll('#faults button')) b.disabled = !on;
  setStatus(on ? 'running' : 'idle', on ? 'A race is running' : 'Idle: choose strategies and start a race');
}

function buildForm(st) {
  const fs = $('#strategies');
  $('#strategies-loading')?.remove();
  const chosen = new Set(st.defaults?.strategies ?? []);
  const list = el('div', { class: 'choices' });
  for (const s of st.strategies) {
    S.strategies.set(s.name, s);
    const id = 'strategy-' + s.name;
    list.append(el('label', { class: 'choice', for: id, 'data-strategy-choice': s.name },
      el('input', { type: 'checkbox', id, name: 'strategy', value: s.name, checked: chosen.has(s.name) }),
      el('span', { class: 'name', text: s.name }),
      el('span', { class: 'badge ' + (s.safe ? 'safe' : 'unsafe'), text: s.safe ? 'safe' : 'unsafe' }),
      s.lock ? el('span', { class: 'hint', text: s.lock + ' lock' }) : null));
  }
  fs.append(list);
  const d = st.defaults ?? {};
  $('#stock').value = d.stock ?? 100;
  $('#rate').value = d.rate ?? 100;
  $('#duration').value = d.duration ?? '8s';
  $('#replicas').value = d.replicas ?? 2;
  $('#fencing').checked = d.fencing ?? true;
  $('#write-stall').value = d.write_stall ?? '0s';
  if (st.fixed_replicas) {
    // The page drives replicas it was given: their count and fencing are theirs.
    $('#replicas').value = (st.replicas ?? []).length || d.replicas;
    $('#replicas').readOnly = true;
    $('#fencing').disabled = true;
    $('#write-stall').readOnly = true;
  }

  const faults = $('#faults');
  faults.replaceChildren();
  if (!(st.faults ?? []).length) {
    faults.append(el('p', { class: 'hint', text: 'No faults here: they need the replicas and stores that the page starts itself.' }));
  }
  for (const f of st.faults ?? []) {
    faults.append(el('button', {
      type: 'button', 'data-fault': f.name, title: f.doc, disabled: true,
      'aria-describedby': 'fault-doc-' + f.name,
    }, FAULT_LABELS[f.name] ?? f.name, el('span', { id: 'fault-doc-' + f.name, class: 'sr-only', text: f.doc })));
  }
  faults.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-fault]');
    if (b && !b.disabled) strike(b);
  });
}

function readForm() {
  const strategies = [...document.querySelectorAll('#strategies input[name=strategy]:checked')].map((i) => i.value);
  const stock = parseInt($('#stock').value, 10);
  const rate = parseInt($('#rate').value, 10);
  const duration = $('#duration').value.trim();
  const replicas = parseInt($('#replicas').value, 10);
  const writeStall = $('#write-stall').value.trim() || '0s';
  const problems = [];
  if (strategies.length === 0) problems.push('choose at least one strategy');
  if (!(stock >= 1)) problems.push('stock must be a whole number of at least 1');
  if (!(rate >= 0)) problems.push('rate must be a whole number, 0 or more');
  if (Number.isNaN(parseDuration(duration)) || parseDuration(duration) <= 0) problems.push('duration must look like 4s or 1500ms');
  if (!(replicas >= 1 && replicas <= 8)) problems.push('replicas must be between 1 and 8');
  if (Number.isNaN(parseDuration(writeStall)) || parseDuration(writeStall) < 0) problems.push('stall before the write must look like 0s or 200ms');
  return { body: { strategies, stock, rate, duration, replicas, fencing: $('#fencing').checked, write_stall: writeStall }, problems };
}

function formError(text) {
  const p = $('#form-error');
  p.textContent = text || '';
  p.hidden = !text;
}

async function start(e) {
  e.preventDefault();
  const { body, problems } = readForm();
  if (problems.length) {
    formError('Cannot start: ' + problems.join('; ') + '.');
    return;
  }
  formError('');
  S.starting = true;
  $('#start').disabled = true;
  newRace(body.strategies, parseDuration(body.duration));
  try {
    const r = await api('POST', '/api/start', body);
    if (r.status === 202) {
      log(`started run ${r.data?.run ?? ''}: ${body.strategies.join(', ')}; stock ${body.stock}, ${body.rate} req/s for ${body.duration}, ${body.replicas} replicas, fencing ${body.fencing ? 'on' : 'off'}`, 'ui');
      setRunning(true);
    } else if (r.status === 409) {
      formError('A race is already running: wait for it to end, or press Stop.');
    } else {
      formError('Cannot start: ' + (r.data?.message || r.data?.error || 'HTTP ' + r.status));
    }
  } catch (err) {
    formError('Cannot reach the server: ' + err.message);
  } finally {
    S.starting = false;
    $('#start').disabled = S.running;
  }
}

async function stop() {
  try {
    const r = await api('POST', '/api/stop');
    log(r.status === 202 ? 'asked to stop the race' : 'stop: HTTP ' + r.status, 'ui');
  } catch (err) {
    log('stop: ' + err.message, 'error');
  }
}

async function strike(button) {
  const name = button.dataset.fault;
  button.setAttribute('aria-busy', 'true');
  try {
    const r = await api('POST', '/api/fault', { name });
    if (r.status === 202) {
      log(`asked for a fault: ${name}; it strikes the strategy under attack and is marked on its timeline`, 'ui');
    } else if (r.status === 409) {
      log(`fault ${name}: ${r.data?.error === 'not_running' ? 'no attack is running right now' : (r.data?.message || r.data?.error || 'busy')}`, 'error');
    } else {
      log(`fault ${name}: ${r.data?.message || r.data?.error || 'HTTP ' + r.status}`, 'error');
    }
  } catch (err) {
    log(`fault ${name}: ${err.message}`, 'error');
  } finally {
    button.removeAttribute('aria-busy');
  }
}

// ---- the race's model ----------------------------------------------------

// newRace forgets the previous race and lays out a waiting row per strategy.
function newRace(strategies, durationSec) {
  S.runs.clear();
  S.dirty.clear();
  if (durationSec > 0) S.duration = durationSec;
  $('#live-rows').replaceChildren();
  $('#timeline').replaceChildren();
  clearResult();
  for (const name of strategies) runOf(name);
}

function runOf(strategy) {
  let r = S.runs.get(strategy);
  if (r) return r;
  r = {
    strategy, run: 0, skus: [], initial: 0, replicas: [...S.replicas], t0: NaN, attack: false, last: 0,
    progress: null, result: null, phase: 'waiting',
    sales: new Map(), grants: new Map(), refused: [], faults: [],
  };
  S.runs.set(strategy, r);
  $('#live-rows').append(makeRow(strategy));
  return r;
}

function makeRow(strategy) {
  const info = S.strategies.get(strategy);
  const td = (field, cls) => el('td', { 'data-field': field, class: cls, text: '–' });
  const name = el('th', { scope: 'row', 'data-field': 'strategy' }, el('span', { class: 'name', text: strategy }));
  if (info) name.append(' ', el('span', { class: 'badge ' + (info.safe ? 'safe' : 'unsafe'), text: info.safe ? 'safe' : 'unsafe' }));
  const row = el('tr', { 'data-strategy': strategy, 'data-phase': 'waiting' }, name,
    td('state'), td('remaining', 'num'), td('sold', 'num'), td('by-replica'),
    td('oversold', 'num counter'), td('lost-updates', 'num counter'),
    el('td', { class: 'num latency', 'data-field': 'latency' },
      ...['p50', 'p95', 'p99'].map((q) => el('span', { class: 'q' }, el('span', { class: 'k', text: q + ' ' }), el('span', { 'data-field': q, text: '–' })))),
    td('answers', 'answers'));
  row.querySelector('[data-field=state]').textContent = 'waiting';
  return row;
}

function field(strategy, name) {
  return document.querySelector(`#live-rows tr[data-strategy="${CSS.escape(strategy)}"] [data-field="${name}"]`);
}

function setCounter(strategy, name, value) {
  const f = field(strategy, name);
  if (!f) return;
  f.textContent = value === null || value === undefined ? '…' : String(value);
  f.dataset.value = value ?? '';
  f.classList.toggle('bad', Number(value) > 0);
  f.classList.toggle('good', Number(value) === 0 && value !== null && value !== undefined);
}

function setPhase(r, phase, text) {
  r.phase = phase;
  const row = document.querySelector(`#live-rows tr[data-strategy="${CSS.escape(r.strategy)}"]`);
  if (row) row.dataset.phase = phase;
  const f = field(r.strategy, 'state');
  if (f) f.textContent = text ?? phase;
}

function renderProgress(r) {
  const p = r.progress;
  if (!p) return;
  // By the acknowledged sales; the store's own figure comes at run-end.
  field(r.strategy, 'remaining').textContent = String(Math.max(0, p.remaining));
  field(r.strategy, 'sold').textContent = String(p.sold);
  setCounter(r.strategy, 'oversold', p.oversold);
  if (!r.result) setCounter(r.strategy, 'lost-updates', null);
  renderByReplica(r.strategy, p.by_replica ?? {});
  const lat = p.latency ?? {};
  field(r.strategy, 'p50').textContent = ms(lat.p50_ms);
  field(r.strategy, 'p95').textContent = ms(lat.p95_ms);
  field(r.strategy, 'p99').textContent = ms(lat.p99_ms);
  renderAnswers(r.strategy, p.answers ?? {});
}

function renderByReplica(strategy, by) {
  const f = field(strategy, 'by-replica');
  const ids = [...new Set([...S.replicas, ...Object.keys(by)])].filter((id) => id !== '');
  f.replaceChildren(...ids.map((id) => el('span', { class: 'rep', 'data-replica': id },
    el('span', { class: 'chip', style: `background:${replicaColor(id)}` }),
    el('span', { class: 'rep-id', text: id }), ' ', el('span', { class: 'rep-n', text: String(by[id] ?? 0) }))));
  if (by['']) f.append(el('span', { class: 'rep', 'data-replica': '' }, 'proxy ' + by['']));
}

function renderAnswers(strategy, answers) {
  const f = field(strategy, 'answers');
  const order = (k) => (k === 'sold' ? 0 : k === 'sold out' ? 1 : 2);
  const kinds = Object.keys(answers).sort((a, b) => order(a) - order(b) || a.localeCompare(b));
  f.replaceChildren(...kinds.map((k) => el('span', {
    class: 'answer' + (order(k) === 2 ? ' odd' : ''), 'data-answer': k,
  }, el('span', { class: 'k', text: k }), ' ', el('span', { class: 'n', text: String(answers[k]) }))));
}

function renderResult(r) {
  const res = r.result;
  field(r.strategy, 'remaining').textContent = String(res.remaining);
  field(r.strategy, 'sold').textContent = String(res.sold);
  setCounter(r.strategy, 'oversold', res.oversold);
  setCounter(r.strategy, 'lost-updates', res.lost_updates);
  if (res.orders_by_replica) renderByReplica(r.strategy, res.orders_by_replica);
  const lat = res.latency ?? {};
  field(r.strategy, 'p50').textContent = ms(lat.p50_ms);
  field(r.strategy, 'p95').textContent = ms(lat.p95_ms);
  field(r.strategy, 'p99').textContent = ms(lat.p99_ms);
  const v = res.verdict || 'done';
  setPhase(r, 'done', v);
  const row = document.querySelector(`#live-rows tr[data-strategy="${CSS.escape(r.strategy)}"]`);
  row.dataset.verdict = v;
  const extra = [];
  if (res.ledger_mismatch) extra.push(`ledger≠ ${res.ledger_mismatch}`);
  if (res.false_sold_out) extra.push(`false sold-out ${res.false_sold_out}`);
  if (res.linearizable) extra.push(`linearizable: ${res.linearizable}`);
  if (extra.length) field(r.strategy, 'state').append(el('span', { class: 'sub', text: extra.join(', ') }));
}

// ---- events --------------------------------------------------------------

// at notes the wall-clock time of an event (ms); the timeline draws it
// relative to the attack's start, which is known from the first progress.
function at(r, ev) {
  const ms = parseTime(ev.at);
  if (Number.isFinite(ms)) r.last = Math.max(r.last, ms);
  return ms;
}

// rel is a time of the run in seconds since its attack started.
function rel(r, ms) {
  return (ms - r.t0) / 1000;
}

function withRun(ev) {
  if (!ev.strategy) return null;
  const r = runOf(ev.strategy);
  if (Number.isNaN(r.t0)) r.t0 = parseTime(ev.at);
  return r;
}

const handlers = {
  state(d) {
    // A race started elsewhere (another tab, or the stream's replay after
    // a reconnect) begins with this event: start from a clean page.
    if (d.running && !S.running && !S.starting) newRace([], 0);
    setRunning(!!d.running);
  },
  log(ev) { log(ev.text ?? '', 'log', ev.at); },
  setup(ev) {
    S.replicas = ev.replicas ?? [];
    log('replicas: ' + S.replicas.join(', ') + (ev.text ? ' (' + ev.text + ')' : ''), 'setup', ev.at);
  },
  'run-start'(ev) {
    const r = runOf(ev.strategy);
    r.run = ev.run;
    r.t0 = parseTime(ev.at);
    r.skus = ev.skus ?? [];
    r.initial = ev.initial ?? 0;
    if (ev.replicas?.length) { r.replicas = ev.replicas; S.replicas = ev.replicas; }
    setPhase(r, 'running', 'attacking');
    field(r.strategy, 'remaining').textContent = String(r.initial);
    ensureTimeline(r);
    S.dirty.add(r.strategy);
  },
  progress(ev) {
    const r = withRun(ev);
    if (!r) return;
    const p = ev.progress;
    r.progress = p;
    if (!r.attack && Number.isFinite(parseTime(ev.at))) {
      // The attack started elapsed seconds before this event: the
      // timeline's zero (the run-start event came before the stock reset).
      r.t0 = parseTime(ev.at) - (p.elapsed ?? 0) * 1000;
      r.attack = true;
    }
    at(r, ev);
    for (const m of p.sales ?? []) {
      if (!r.sales.has(m.sku)) r.sales.set(m.sku, []);
      r.sales.get(m.sku).push({ at: at(r, m), replica: m.replica, fence: m.fence ?? 0 });
      if (!r.skus.includes(m.sku)) r.skus.push(m.sku);
    }
    if (!r.result) {
      if (p.final) setPhase(r, 'checking', 'reading back, checking');
      else if (r.phase !== 'running') setPhase(r, 'running', 'attacking');
      renderProgress(r);
    }
    S.dirty.add(r.strategy);
  },
  grant(ev) {
    const r = withRun(ev);
    if (!r) return;
    if (!r.grants.has(ev.sku)) r.grants.set(ev.sku, []);
    r.grants.get(ev.sku).push({ at: at(r, ev), replica: ev.replica, fence: ev.fence });
    if (!r.skus.includes(ev.sku)) r.skus.push(ev.sku);
    S.dirty.add(r.strategy);
  },
  refused(ev) {
    const r = withRun(ev);
    if (!r) return;
    r.refused.push({ at: at(r, ev), replica: ev.replica, text: ev.text });
    S.dirty.add(r.strategy);
  },
  fault(ev) {
    const r = withRun(ev);
    log(`fault on ${ev.strategy || 'the run'}: ${ev.text}`, 'fault', ev.at);
    if (!r) return;
    r.faults.push({ at: at(r, ev), replica: ev.replica, text: ev.text });
    S.dirty.add(r.strategy);
  },
  'run-end'(ev) {
    const r = withRun(ev);
    if (!r) return;
    r.result = ev.result;
    renderResult(r);
    S.dirty.add(r.strategy);
  },
  done(d) { renderDone(d); },
};

function connect() {
  const es = new EventSource('/api/events');
  es.onopen = () => {
    // The server replays the current (or last) race from its start on
    // every connection, so the page forgets what it drew and redraws it.
    document.body.dataset.connected = 'true';
    if (!S.starting) newRace([], 0);
    refreshState();
  };
  es.onerror = () => {
    document.body.dataset.connected = 'false';
    setStatus('offline', 'Lost the server; reconnecting…');
  };
  for (const [type, fn] of Object.entries(handlers)) {
    es.addEventListener(type, (e) => {
      let d;
      try { d = JSON.parse(e.data); } catch { return; }
      try { fn(d); } catch (err) { console.error(type, err); }
      schedule();
    });
  }
}

async function refreshState() {
  try {
    const r = await api('GET', '/api/state');
    if (r.ok) setRunning(!!r.data.running);
  } catch { /* the event stream retries */ }
}

// ---- timeline ------------------------------------------------------------

// The timelines are drawn at most once a frame, whatever the rate of events.
let frame = 0;
function schedule() {
  if (frame || S.dirty.size === 0) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    flush();
  });
}

// flush draws every timeline with news now.
function flush() {
  for (const name of S.dirty) {
    const r = S.runs.get(name);
    if (r) drawRun(r);
  }
  S.dirty.clear();
}

function ensureTimeline(r) {
  const id = 'tl-' + r.strategy;
  let sec = document.getElementById(id);
  if (sec) return sec;
  const info = S.strategies.get(r.strategy);
  const note = info && !info.lock
    ? 'no lock: only sales (and faults) to draw'
    : info ? `${info.lock} lock: a diamond is a grant with its fencing token` : '';
  sec = el('section', { id, class: 'run-timeline', 'data-strategy': r.strategy, 'aria-label': 'timeline of ' + r.strategy },
    el('h3', {}, el('span', { class: 'name', text: r.strategy }), ' ', el('span', { class: 'hint', text: note })),
    el('div', { class: 'skus' }));
  // Keep the timelines in the order of the rows.
  const order = [...S.runs.keys()];
  const after = [...$('#timeline').children].find((c) => order.indexOf(c.dataset.strategy) > order.indexOf(r.strategy));
  $('#timeline').insertBefore(sec, after ?? null);
  return sec;
}

const W = 1000; // the SVG's user units across
const LEFT = 76;
const RIGHT = 16;
const TOP = 30;
const LANE = 46;
const BOTTOM = 28;

function drawRun(r) {
  const sec = ensureTimeline(r);
  const box = sec.querySelector('.skus');
  const skus = r.skus.length ? r.skus : ['(waiting for the first sale)'];
  for (const sku of skus) {
    let fig = box.querySelector(`figure[data-sku="${CSS.escape(sku)}"]`);
    if (!fig) {
      fig = el('figure', { class: 'sku', 'data-sku': sku },
        el('figcaption', { text: r.skus.length ? 'SKU ' + sku : sku }));
      box.append(fig);
    }
    if (r.skus.length) box.querySelector('figure[data-sku="(waiting for the first sale)"]')?.remove();
    const old = fig.querySelector('svg');
    const next = drawSKU(r, r.skus.length ? sku : null);
    if (old) old.replaceWith(next); else fig.append(next);
  }
}

function drawSKU(r, sku) {
  const lanes = r.replicas.length ? r.replicas : S.replicas.length ? S.replicas : ['a', 'b'];
  const H = TOP + LANE * lanes.length + BOTTOM;
  const span = Math.max(S.duration + 0.5, rel(r, r.last) + 0.25, 1);
  const x = (ms) => LEFT + (Math.min(span, Math.max(0, rel(r, ms))) / span) * (W - LEFT - RIGHT);
  const xs = (t) => LEFT + (t / span) * (W - LEFT - RIGHT);
  const laneY = (id) => {
    const i = lanes.indexOf(id);
    return TOP + LANE * (i < 0 ? lanes.length - 1 : i);
  };
  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'tl', role: 'img',
    'aria-label': `lock timeline of ${r.strategy}${sku ? ', sku ' + sku : ''}: ${lanes.length} replica lanes`,
  });

  // Lanes.
  lanes.forEach((id, i) => {
    const y = TOP + LANE * i;
    root.append(svg('rect', { x: LEFT, y, width: W - LEFT - RIGHT, height: LANE, class: i % 2 ? 'lane odd' : 'lane' }));
    root.append(svg('text', { x: LEFT - 20, y: y + LANE / 2 + 7, class: 'lane-label', 'text-anchor': 'end', fill: replicaColor(id) }, id));
  });

  // Time axis.
  const step = span <= 5 ? 0.5 : span <= 12 ? 1 : span <= 30 ? 2 : span <= 90 ? 10 : 30;
  const axisY = TOP + LANE * lanes.length;
  for (let t = 0; t <= span + 1e-9; t += step) {
    root.append(svg('line', { x1: xs(t), x2: xs(t), y1: TOP, y2: axisY + 5, class: 'grid' }));
    root.append(svg('text', { x: xs(t), y: axisY + 22, class: 'axis', 'text-anchor': 'middle' }, (Math.round(t * 10) / 10) + 's'));
  }

  // Sales: a tick in the seller's lane.
  const sales = sku ? r.sales.get(sku) ?? [] : [];
  const g = svg('g', { class: 'sales' });
  for (const s of sales) {
    const y = laneY(s.replica);
    const line = svg('line', {
      x1: x(s.at), x2: x(s.at), y1: y + 8, y2: y + LANE - 8, class: 'sale', stroke: replicaColor(s.replica),
      'data-replica': s.replica,
    });
    g.append(line);
  }
  root.append(g);

  // Grants: a diamond with the fencing token; a handoff joins the lanes.
  // Grants are sent as their sales are answered: draw them in time order.
  const grants = (sku ? r.grants.get(sku) ?? [] : []).toSorted((p, q) => p.at - q.at);
  // Redis and MongoDB tokens can be long numbers: the labels show their
  // last digits (the tooltip has the whole token), enough to see them grow.
  const long = grants.some((gr) => String(gr.fence).length > 6);
  const tokenLabel = (f) => (long ? '…' + String(f).slice(-4) : '#' + f);
  const lastLabel = new Map();
  let prev = null;
  for (const gr of grants) {
    const y = laneY(gr.replica);
    const gx = x(gr.at);
    if (prev && prev.replica !== gr.replica) {
      const h = svg('line', {
        x1: gx, x2: gx, y1: laneY(prev.replica) + LANE / 2, y2: y + LANE / 2, class: 'handoff',
        'data-from': prev.replica, 'data-to': gr.replica,
      });
      h.append(title(`handoff: ${prev.replica} → ${gr.replica} (token ${prev.fence} → ${gr.fence})`));
      root.append(h);
    }
    const mark = svg('g', { class: 'grant', 'data-replica': gr.replica, 'data-fence': gr.fence });
    const cy = y + LANE / 2;
    mark.append(svg('path', { d: `M${gx} ${cy - 8} L${gx + 8} ${cy} L${gx} ${cy + 8} L${gx - 8} ${cy} Z`, fill: replicaColor(gr.replica) }));
    mark.append(title(`lock granted to ${gr.replica}, fencing token ${gr.fence}`));
    const label = tokenLabel(gr.fence);
    if (gx >= (lastLabel.get(gr.replica) ?? -1e9)) {
      mark.append(svg('text', { x: gx + 10, y: cy - 9, class: 'fence' }, label));
      lastLabel.set(gr.replica, gx + 10 + 9 * label.length + 8);
    }
    root.append(mark);
    prev = gr;
  }

  // Refused writes: a red cross in the refused replica's lane.
  for (const f of r.refused) {
    const y = laneY(f.replica) + LANE - 10;
    const fx = x(f.at);
    const m = svg('g', { class: 'refused', 'data-replica': f.replica ?? '' });
    m.append(svg('path', { d: `M${fx - 6} ${y - 6} L${fx + 6} ${y + 6} M${fx - 6} ${y + 6} L${fx + 6} ${y - 6}` }));
    m.append(title(`write refused on ${f.replica || 'a replica'}: ${f.text}`));
    root.append(m);
  }

  // Faults: a vertical line across every lane, labelled on top.
  for (const f of r.faults) {
    const fx = x(f.at);
    const m = svg('g', { class: 'fault', 'data-replica': f.replica ?? '' });
    m.append(svg('line', { x1: fx, x2: fx, y1: TOP - 4, y2: axisY }));
    if (f.replica && lanes.includes(f.replica)) {
      m.append(svg('circle', { cx: fx, cy: laneY(f.replica) + LANE / 2, r: 10 }));
    }
    const label = faultLabel(f.text) + (f.replica ? ' ' + f.replica : '');
    const anchor = fx > W - 200 ? 'end' : 'start';
    m.append(svg('text', { x: anchor === 'end' ? fx - 6 : fx + 6, y: TOP - 10, 'text-anchor': anchor }, label));
    m.append(title('fault: ' + f.text));
    root.append(m);
  }
  return root;
}

function faultLabel(text) {
  const t = String(text ?? '').toLowerCase();
  if (t.includes('kill')) return FAULT_SHORT.crash;
  if (t.includes('sigstop') || t.includes('pause')) return FAULT_SHORT.pause;
  if (t.includes('redis')) return FAULT_SHORT['redis-restart'];
  if (t.includes('mongo') || t.includes('ferret')) return FAULT_SHORT['mongo-restart'];
  return 'fault';
}

// ---- the end -------------------------------------------------------------

function clearResult() {
  const v = $('#verdict');
  v.replaceChildren(el('p', { class: 'hint', text: 'The verdict appears when the race ends.' }));
  delete v.dataset.ok;
  delete $('#result').dataset.done;
  $('#table').textContent = '';
  $('#table').hidden = true;
  $('#chart-figure').hidden = true;
  $('#chart').removeAttribute('src');
  $('#files').replaceChildren();
  $('#docs').replaceChildren();
}

function renderDone(d) {
  if (!d) return;
  const v = $('#verdict');
  v.dataset.ok = d.ok ? 'true' : 'false';
  const lines = (d.lines ?? []).map((l) => el('p', { class: 'line', text: l }));
  const head = el('p', { class: 'headline ' + (d.ok ? 'pass' : 'fail'),
    text: d.error ? 'The race did not finish' : d.ok ? 'Every safe strategy kept the books straight.' : 'A safe strategy failed.' });
  v.replaceChildren(head, ...lines);
  if (d.error) v.append(el('p', { class: 'error', text: d.error }));
  const table = $('#table');
  table.textContent = d.table ?? '';
  table.hidden = !d.table;
  if (d.chart) {
    $('#chart').src = d.chart;
    $('#chart-figure').hidden = false;
  }
  $('#files').replaceChildren(...(d.files ?? []).map((f) => el('li', {}, el('a', { href: f.url, 'data-file': f.name, text: f.name }))));
  const names = S.runs.size ? [...S.runs.keys()] : [...S.strategies.keys()];
  $('#docs').replaceChildren(...names.filter((n) => S.strategies.get(n)?.doc).map((n) => el('li', {},
    el('a', { href: '/docs/' + S.strategies.get(n).doc, 'data-doc': n, text: `${n}: ${S.strategies.get(n).doc}` }))));
  flush(); // the end is complete only with the timelines drawn
  $('#result').dataset.done = 'true';
  for (const r of S.runs.values()) {
    if (r.phase !== 'done') setPhase(r, 'done', r.result ? r.result.verdict : 'not run');
  }
  setRunning(false);
}

// ---- start ---------------------------------------------------------------

async function init() {
  $('#run-form').addEventListener('submit', start);
  $('#stop').addEventListener('click', stop);
  try {
    const r = await api('GET', '/api/state');
    if (!r.ok) throw new Error('HTTP ' + r.status);
    S.state = r.data;
    S.replicas = r.data.replicas ?? [];
    const d = parseDuration(r.data.defaults?.duration ?? '');
    if (d > 0) S.duration = d;
    buildForm(r.data);
    setRunning(!!r.data.running);
    // The last race's end comes with its replay on the event stream, after
    // its timelines: drawing it from here could show the end before them.
  } catch (err) {
    setStatus('offline', 'Cannot read the server\'s state: ' + err.message);
  }
  connect();
  document.body.dataset.ready = 'true';
}

init();
