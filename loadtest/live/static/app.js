// The live page of stocklock: a form that starts a race through the
// server's JSON API, and the harness's events (Server-Sent Events from
// /api/events) drawn as they arrive: a row of numbers per strategy, a lock
// timeline per SKU in SVG, and, at the end, the CLI's verdict, table and
// chart. Plain ES module, no dependencies: it works offline.

import { drawFlash, flashAnswers, flashCaption, flashLegend, flashSellOut } from './flash.js';

const $ = (sel, root = document) => root.querySelector(sel);
const SVGNS = 'http://www.w3.org/2000/svg';

// Labels of the fault buttons, by the server's fault names; an unknown
// fault gets its own name.
const FAULT_LABELS = {
  crash: 'Kill the lock holder (kill -9)',
  pause: 'Pause the holder past its TTL',
  'redis-restart': 'Restart Redis',
  'mongo-restart': 'Restart MongoDB',
  'store-partition': 'Cut a replica off from MongoDB',
  latency: 'Slow a replica\'s store links',
  resets: 'Reset a replica\'s store connections',
};
// One colour per replica lane (a, b, c, ...), distinguishable on a projector.
const REPLICA_COLORS = ['#0b5cad', '#b34700', '#1d7a12', '#7a2bb8', '#00707a', '#a3006d', '#5e5a00', '#333333'];

const MAX_LOG = 400;

// The lanes of a checkout's holds, by the harness's event types.
const HOLD_KINDS = [
  { kind: 'held', label: 'held', text: 'holds created' },
  { kind: 'confirmed', label: 'confirmed', text: 'holds confirmed in time: sold' },
  { kind: 'expired', label: 'expired', text: 'holds seen expired (a late buyer read it so, or a probe bought its unit again)' },
  { kind: 'late-refused', label: 'refused', text: 'confirms refused, the hold expired' },
];
const LATE_WHY = "the confirm reached the store after the hold had expired by the store's clock, and its unit was on sale again: a confirm that sold it could sell it twice. A late buyer does this on purpose, confirming only after a read said the hold expired";
const BUCKETS = 100; // a holds lane counts its events in this many time slices

// What each reason of a redis-stock reload means, for the log and the
// tooltips (mongostore.RedisStockReloadReasons).
const RELOAD_TEXT = {
  first_load: 'the first sale loaded the stock from MongoDB',
  redis_lost: 'Redis had lost its copy (a restart without persistence, a failover): loaded again from MongoDB',
  refused: 'MongoDB refused a batch of sales taken in Redis (its epoch or stock had moved): loaded again',
  item_ahead: 'Redis said sold out while MongoDB held more (a PUT or a restock): loaded again',
  dead_take: 'a sale taken in Redis was never written (its replica died): reconciled by a reload',
};

const S = {
  state: null, // the last /api/state
  running: false,
  strategies: new Map(), // name -> {name, safe, lock, doc}
  replicas: [], // replica ids of the race
  runs: new Map(), // strategy -> run model
  duration: 8, // seconds per strategy, for the timeline's scale
  dirty: new Set(), // strategies whose timeline needs drawing
  starting: false, // our own POST /api/start is under way
  strike: {}, // what a fault button strikes now (the server's strike event)
  brushing: null, // the run whose timeline is being dragged across
  flash: false, // the race this page started is a flash sale
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
  renderStrike();
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
  $('#abandon').value = d.abandon ?? 0.5;
  $('#late').value = d.late ?? 0.1;
  $('#hold-ttl').value = d.hold_ttl ?? '2s';
  $('#buyers').value = d.buyers ?? 5000;
  $('#over').value = d.over ?? '2s';
  $('#patience').value = d.patience ?? '2s';
  $('#flash-preset').addEventListener('click', () => flashPreset(d));
  for (const k of document.querySelectorAll('input[name=kind]')) k.addEventListener('change', setKind);
  setKind();
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
    }, FAULT_LABELS[f.name] ?? f.name, ' ', el('code', { class: 'fault-name', text: f.name }),
    el('span', { id: 'fault-doc-' + f.name, class: 'sr-only', text: f.doc })));
  }
  faults.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-fault]');
    if (b && !b.disabled) strike(b);
  });
}

// setKind shows the checkout's knobs when a checkout is chosen, and lets
// only the strategies that take holds be chosen for it.
function setKind() {
  const checkout = $('#kind-checkout').checked;
  $('#checkout-knobs').hidden = !checkout;
  $('#flash-knobs').hidden = !$('#kind-flash').checked;
  // A flash sale's buyers arrive as its own knobs say: no rate, no duration.
  $('#rate').disabled = $('#duration').disabled = $('#kind-flash').checked;
  for (const i of document.querySelectorAll('#strategies input[name=strategy]')) {
    const off = checkout && !S.strategies.get(i.value)?.holds;
    if (off) i.checked = false;
    i.disabled = off;
  }
}

// flashPreset chooses a flash sale with the page's defaults (d, the
// server's): 100 units, its buyers, arrival and patience; the strategies
// stay as ticked.
function flashPreset(d) {
  $('#kind-flash').checked = true;
  $('#stock').value = 100;
  $('#buyers').value = d.buyers ?? 5000;
  $('#over').value = d.over ?? '2s';
  $('#patience').value = d.patience ?? '2s';
  setKind();
  $('#buyers').focus();
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
  const body = { strategies, stock, rate, duration, replicas, fencing: $('#fencing').checked, write_stall: writeStall };
  if ($('#kind-checkout').checked) {
    Object.assign(body, { kind: 'checkout', abandon: parseFloat($('#abandon').value), late: parseFloat($('#late').value), hold_ttl: $('#hold-ttl').value.trim() });
    if (!(body.abandon >= 0 && body.late >= 0 && body.abandon + body.late <= 1)) problems.push('the abandon and late shares must be 0 or more, together at most 1');
    if (!(parseDuration(body.hold_ttl) >= 1)) problems.push('the hold TTL must be 1s or more, like 2s');
  }
  if ($('#kind-flash').checked) {
    Object.assign(body, { kind: 'flash', buyers: parseInt($('#buyers').value, 10), over: $('#over').value.trim(), patience: $('#patience').value.trim() });
    if (!(body.buyers >= 1 && body.buyers <= 20000)) problems.push('buyers must be between 1 and 20,000');
    if (Number.isNaN(parseDuration(body.over))) problems.push('arriving over must look like 2s or 1500ms');
    if (!(parseDuration(body.patience) > 0)) problems.push('patience must look like 2s or 1500ms');
  }
  return { body, problems };
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
  newRace(body.strategies, body.kind === 'flash' ? parseDuration(body.over) + parseDuration(body.patience) : parseDuration(body.duration));
  S.flash = body.kind === 'flash';
  try {
    const r = await api('POST', '/api/start', body);
    if (r.status === 202) {
      if (body.kind === 'flash') log(`started run ${r.data?.run ?? ''}, a flash sale: ${body.strategies.join(', ')}; ${body.stock} units, ${body.buyers} buyers over ${body.over}, patience ${body.patience}, ${body.replicas} replicas`, 'ui');
      else log(`started run ${r.data?.run ?? ''}${body.kind ? ', a checkout' : ''}: ${body.strategies.join(', ')}; stock ${body.stock}, ${body.rate} ${body.kind ? 'buyers' : 'req'}/s for ${body.duration}, ${body.replicas} replicas, fencing ${body.fencing ? 'on' : 'off'}`, 'ui');
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
    if (r.status === 202 && r.data?.waits_for) {
      log(`${name} waits: nothing sells now; it strikes ${r.data.waits_for} once its attack sells, and is marked on its timeline`, 'ui');
    } else if (r.status === 202) {
      log(`${name} strikes ${r.data?.strikes || 'the strategy selling'} now, and is marked on its timeline`, 'ui');
    } else if (r.status === 409) {
      log(`fault ${name}: ${r.data?.error === 'not_running' ? 'no race is running right now' : (r.data?.message || r.data?.error || 'busy')}`, 'error');
    } else {
      log(`fault ${name}: ${r.data?.message || r.data?.error || 'HTTP ' + r.status}`, 'error');
    }
  } catch (err) {
    log(`fault ${name}: ${err.message}`, 'error');
  } finally {
    button.removeAttribute('aria-busy');
  }
}

// renderStrike says what a fault button would strike now, and enables the
// buttons only when one would strike something and none waits.
function renderStrike() {
  const st = S.running ? S.strike ?? {} : {};
  const p = $('#strike');
  p.dataset.strategy = st.strategy ?? '';
  p.dataset.now = st.now ? 'true' : 'false';
  p.dataset.pending = st.pending ?? '';
  let text = 'Enabled only while a race runs. Each fault is marked on the timeline of the strategy it strikes, as the span it lasted.';
  if (S.running && st.pending) {
    text = `${st.pending} waits for ${st.strategy}'s attack: it strikes once ${st.strategy} sells.`;
  } else if (S.running && st.now) {
    text = `A fault strikes ${st.strategy} now: it is selling.`;
  } else if (S.running && st.strategy && st.after) {
    text = `${st.after} sells no more (sold out, or its attack is over): a fault waits for ${st.strategy}'s attack and strikes it then.`;
  } else if (S.running && st.strategy) {
    text = `A fault waits for ${st.strategy}'s attack to start and strikes it then.`;
  } else if (S.running && st.after) {
    text = `${st.after} sells no more and no strategy follows: nothing is left to strike.`;
  }
  // The harness takes faults only during a race's attack: a flash sale has none.
  const flash = S.running && (S.flash || [...S.runs.values()].some((r) => r.flash));
  if (flash) text = 'A flash sale takes no faults: the page strikes only a race\'s attack or a checkout.';
  p.textContent = text;
  for (const b of document.querySelectorAll('#faults button')) {
    b.disabled = !S.running || !st.strategy || !!st.pending || flash;
    b.dataset.waiting = st.pending === b.dataset.fault ? 'true' : 'false';
  }
}

// ---- the race's model ----------------------------------------------------

// newRace forgets the previous race and lays out a waiting row per strategy.
function newRace(strategies, durationSec) {
  S.runs.clear();
  S.flash = false;
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
    // redis-stock: samples of its copy in Redis and of the item, by sku,
    // and the reloads of that copy.
    redis: new Map(), reloads: [],
    // queued: samples of its log's depth and of the buyers waiting.
    queue: [],
    // a checkout's holds by what became of them (HOLD_KINDS), null in a race.
    holds: null,
    // soldOut is when the stock ran out by the acknowledged sales, lastSale
    // the latest sale, attackEnd when the attack ended (ms); view is the
    // time range zoomed into, null for the whole run.
    soldOut: NaN, lastSale: NaN, attackEnd: NaN, view: null,
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
  // A flash sale's progress has no latency: its report has each kind's.
  const lat = r.flash || S.flash ? {} : p.latency ?? {};
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
  // A checkout's holds are expected, but for the late confirms refused.
  const expected = (k) => order(k) < 2 || (k !== 'late-refused' && HOLD_KINDS.some((h) => h.kind === k));
  f.replaceChildren(...kinds.map((k) => el('span', {
    class: 'answer' + (expected(k) ? '' : ' odd'), 'data-answer': k,
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
      const t = at(r, m);
      r.sales.get(m.sku).push({ at: t, replica: m.replica, fence: m.fence ?? 0 });
      if (!(r.lastSale >= t)) r.lastSale = t;
      if (!r.skus.includes(m.sku)) r.skus.push(m.sku);
    }
    if (p.remaining <= 0 && !Number.isFinite(r.soldOut)) r.soldOut = Number.isFinite(r.lastSale) ? r.lastSale : parseTime(ev.at);
    if (p.final) r.attackEnd = parseTime(ev.at);
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
    r.faults.push({ at: at(r, ev), until: parseTime(ev.until), fault: ev.fault, replica: ev.replica, shape: ev.shape, note: ev.text });
    S.dirty.add(r.strategy);
  },
  'redis-stock'(ev) {
    const r = withRun(ev);
    if (!r || !ev.redis || !ev.sku) return;
    if (!r.redis.has(ev.sku)) r.redis.set(ev.sku, []);
    r.redis.get(ev.sku).push({ at: at(r, ev), ...ev.redis });
    if (!r.skus.includes(ev.sku)) r.skus.push(ev.sku);
    S.dirty.add(r.strategy);
  },
  queue(ev) {
    const r = withRun(ev);
    if (!r || !ev.queue) return;
    r.queue.push({ at: at(r, ev), ...ev.queue });
    S.dirty.add(r.strategy);
  },
  reload(ev) {
    const r = withRun(ev);
    if (!r) return;
    const n = ev.count ?? 1;
    // It happened between the replica's previous sample and this one.
    const t = at(r, ev);
    const since = parseTime(ev.since);
    r.reloads.push({ at: t, since: Number.isFinite(since) ? since : t, replica: ev.replica ?? '', reason: ev.reason ?? '', count: n, sku: ev.sku ?? '' });
    log(`${ev.strategy}: ${ev.replica} reloaded Redis${n > 1 ? ' ' + n + ' times' : ''}: ${RELOAD_TEXT[ev.reason] ?? ev.reason}`, 'reload', ev.at);
    S.dirty.add(r.strategy);
  },
  'run-end'(ev) {
    const r = withRun(ev);
    if (!r) return;
    r.result = ev.result;
    renderResult(r);
    S.dirty.add(r.strategy);
  },
  answers(ev) {
    const r = withRun(ev);
    if (!r) return;
    if (!r.flash) setPhase(r, 'running', 'buyers arriving');
    flashAnswers(r, ev);
    S.dirty.add(r.strategy);
  },
  'sell-out'(ev) {
    const r = withRun(ev);
    if (!r) return;
    flashSellOut(r, ev);
    log(`${ev.strategy}: the last unit sold, its sale answered ${(ev.progress?.elapsed ?? 0).toFixed(2)} s after the first buyer arrived`, 'ui', ev.at);
    S.dirty.add(r.strategy);
  },
  held(ev) { holdEvent('held', ev); },
  confirmed(ev) { holdEvent('confirmed', ev); },
  expired(ev) { holdEvent('expired', ev); },
  'late-refused'(ev) { holdEvent('late-refused', ev); },
  strike(d) {
    S.strike = d ?? {};
    renderStrike();
  },
  done(d) { renderDone(d); },
};

// holdEvent notes a hold event of a checkout; its timeline counts them.
function holdEvent(kind, ev) {
  const r = withRun(ev);
  if (!r) return;
  if (!r.holds) {
    r.holds = Object.fromEntries(HOLD_KINDS.map((k) => [k.kind, []]));
    setPhase(r, 'running', 'buyers holding');
  }
  r.holds[kind].push({ at: at(r, ev), id: ev.hold, text: ev.text ?? '' });
  if (kind === 'late-refused' && r.holds[kind].length === 1) {
    log(`${ev.strategy}: the confirm of hold ${ev.hold} was refused (${ev.text}): ${LATE_WHY}`, 'fault', ev.at);
  }
  S.dirty.add(r.strategy);
}

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
    if (r.ok) {
      S.strike = r.data.strike ?? {};
      setRunning(!!r.data.running);
    }
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

// flush draws every timeline with news now, but for one being brushed:
// it is drawn when the brush is let go.
function flush() {
  for (const name of [...S.dirty]) {
    const r = S.runs.get(name);
    if (r && S.brushing === r) continue;
    if (r) drawRun(r);
    S.dirty.delete(name);
  }
}

function ensureTimeline(r) {
  const id = 'tl-' + r.strategy;
  let sec = document.getElementById(id);
  if (sec) return sec;
  const info = S.strategies.get(r.strategy);
  const note = r.holds ? 'a checkout: its holds, counted per time slice; a red cross is a late confirm refused'
    : info && !info.lock
    ? 'no lock: only sales (and faults) to draw'
    : info ? `${info.lock} lock: a diamond is a grant with its fencing token` : '';
  const zoom = el('div', { class: 'zoom', role: 'group', 'aria-label': 'time range of ' + r.strategy + "'s timeline" },
    el('span', { class: 'range', 'aria-live': 'polite' }),
    ...[['in', 'Zoom in'], ['out', 'Zoom out'], ['earlier', '◀ Earlier'], ['later', 'Later ▶'], ['all', 'Whole run']]
      .map(([act, text]) => el('button', { type: 'button', 'data-zoom': act, text })));
  zoom.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-zoom]');
    if (b) zoomRun(r, b.dataset.zoom);
  });
  sec = el('section', { id, class: 'run-timeline', 'data-strategy': r.strategy, 'aria-label': 'timeline of ' + r.strategy },
    el('h3', {}, el('span', { class: 'name', text: r.strategy }), ' ', el('span', { class: 'hint', text: note })),
    zoom, el('div', { class: 'skus' }));
  // Keep the timelines in the order of the rows.
  const order = [...S.runs.keys()];
  const after = [...$('#timeline').children].find((c) => order.indexOf(c.dataset.strategy) > order.indexOf(r.strategy));
  $('#timeline').insertBefore(sec, after ?? null);
  return sec;
}

// Layout of a timeline, in the SVG's user units (CSS pixels at 1000 wide).
const W = 1000;
const LEFT = 76;
const RIGHT = 16;
const PW = W - LEFT - RIGHT; // the plot's width
const MARK = 34; // a lane's strip of marks: sales, grants, refused writes
const BOTTOM = 30; // the time axis
const GAP = 6; // between two labels side by side
const COL = 4; // sales are counted per column this wide
const GCOL = 12; // grants closer than this in a lane are drawn as one band
// Rows of token labels a lane may take: few over the whole run, more once
// zoomed in, so that a second of grants at 100 req/s has all its tokens.
const MAX_ROWS = 2;
const MAX_ROWS_ZOOMED = 8;
const MIN_VIEW = 0.05; // the narrowest time range, in seconds

// span is the run's length on its timeline, in seconds.
function span(r) {
  return Math.max(S.duration + 0.5, rel(r, r.last) + 0.25, 1);
}

// viewOf is the time range the run's timeline shows: the whole run, or
// the range zoomed into.
function viewOf(r) {
  return r.view ?? [0, span(r)];
}

function zoomRun(r, act) {
  const [a, b] = viewOf(r);
  const w = b - a;
  const mid = (a + b) / 2;
  const whole = span(r);
  let next = [a, b];
  if (act === 'in') next = [mid - w / 4, mid + w / 4];
  if (act === 'out') next = [mid - w, mid + w];
  if (act === 'earlier') next = [a - w / 2, b - w / 2];
  if (act === 'later') next = [a + w / 2, b + w / 2];
  setView(r, act === 'all' ? null : next, whole);
}

// setView zooms the run's timelines into [from, to] seconds, kept within
// the run; null or the whole run shows it all.
function setView(r, v, whole = span(r)) {
  if (v) {
    let [a, b] = v[0] <= v[1] ? v : [v[1], v[0]];
    const w = Math.min(Math.max(b - a, MIN_VIEW), whole);
    a = Math.min(Math.max(a, 0), whole - w);
    b = a + w;
    v = b - a >= whole - 1e-9 ? null : [a, b];
  }
  r.view = v;
  S.dirty.add(r.strategy);
  flush();
}

function drawRun(r) {
  const sec = ensureTimeline(r);
  const box = sec.querySelector('.skus');
  if (r.flash) { // a flash sale: one figure of its answers instead of lanes
    drawFlashRun(r, sec, box);
    return;
  }
  // A checkout's holds, over its sku and its probes', are one figure.
  const real = r.skus.length > 0 && !r.holds;
  const skus = r.holds ? ['holds'] : real ? r.skus : ['(waiting for the first sale)'];
  for (const sku of skus) {
    let fig = box.querySelector(`figure[data-sku="${CSS.escape(sku)}"]`);
    if (!fig) {
      fig = el('figure', { class: 'sku', 'data-sku': sku }, el('figcaption'));
      box.append(fig);
    }
    if (real || r.holds) box.querySelector('figure[data-sku="(waiting for the first sale)"]')?.remove();
    const old = fig.querySelector('svg');
    const next = drawSKU(r, real ? sku : null);
    if (old) old.replaceWith(next); else fig.append(next);
    renderRedisNow(fig, r, real ? sku : null);
    renderQueueNow(fig, r, real ? sku : null);
    const hidden = Number(next.dataset.hidden);
    fig.querySelector('figcaption').textContent = r.holds ? holdsCaption(r, next)
      : (real ? 'SKU ' + sku : sku) + (hidden ? ` · ${hidden} fencing tokens do not fit as labels here: drag across the part to read, or hover a grant` : '');
  }
  if (r.holds && r.phase !== 'done') {
    renderAnswers(r.strategy, Object.fromEntries(HOLD_KINDS.map((k) => [k.kind, r.holds[k.kind].length])));
  }
  const [a, b] = viewOf(r);
  sec.querySelector('.range').textContent = r.view
    ? `showing ${secs(a, b - a)} to ${secs(b, b - a)} of ${secs(span(r), span(r))}: drag across a timeline to zoom`
    : 'the whole run: drag across a timeline to zoom into a time range';
  sec.dataset.zoomed = r.view ? 'true' : 'false';
}

// drawFlashRun draws a flash sale's figure: its answers by kind, goodput
// and sell-out.
function drawFlashRun(r, sec, box) {
  let fig = box.querySelector('figure.flash');
  if (!fig) {
    box.replaceChildren(fig = el('figure', { class: 'flash', 'data-sku': 'flash' }, el('figcaption'), flashLegend()));
    sec.querySelector('.zoom').hidden = true;
    sec.querySelector('h3 .hint').textContent = 'a flash sale: every buyer\'s final answer by kind, per 100 ms from the first arrival';
  }
  const old = fig.querySelector('svg');
  const next = drawFlash(r, S.duration);
  if (old) old.replaceWith(next); else fig.insertBefore(next, fig.querySelector('.flash-legend'));
  fig.querySelector('figcaption').textContent = flashCaption(r);
}

// secs writes a time in seconds with the decimals a range this wide needs.
function secs(t, width) {
  const d = width >= 5 ? 1 : width >= 0.5 ? 2 : 3;
  return (+t.toFixed(d)) + ' s';
}

// measure returns the width, height and ascent of text drawn with the
// timeline's class cls, in user units, measured once in a hidden SVG.
const measured = new Map();
let meter = null;
function measure(text, cls) {
  const key = cls + '\n' + text;
  let m = measured.get(key);
  if (m) return m;
  if (!meter) {
    meter = svg('svg', { class: 'tl meter', 'aria-hidden': 'true' });
    meter.append(svg('text', { x: 0, y: 0 }));
    document.body.append(meter);
  }
  const t = meter.firstChild;
  t.setAttribute('class', cls);
  t.textContent = text;
  const bb = t.getBBox();
  m = { w: bb.width, h: bb.height, asc: -bb.y };
  measured.set(key, m);
  return m;
}

// rowsFor puts labels, each {x0, x1} sorted by x0, into rows in which
// none overlaps another, each in the first row with room (for intervals,
// the fewest rows), at most max rows: it returns the labels that found a
// row, with their row set, and the number of rows.
function rowsFor(labels, max) {
  const ends = [];
  const placed = [];
  for (const l of labels) {
    let row = ends.findIndex((end) => end + GAP <= l.x0);
    if (row < 0 && ends.length < max) row = ends.push(0) - 1;
    if (row < 0) continue;
    ends[row] = l.x1;
    l.row = row;
    placed.push(l);
  }
  return { placed, rows: ends.length };
}

// placed keeps a label of width w near x within the plot.
function within(x, w) {
  return Math.min(Math.max(x, LEFT), W - RIGHT - w);
}

function drawSKU(r, sku) {
  // A checkout's timeline has its holds' lanes instead of the replicas'.
  const lanes = r.holds ? [] : r.replicas.length ? r.replicas : S.replicas.length ? S.replicas : ['a', 'b'];
  const [v0, v1] = viewOf(r);
  const xs = (t) => LEFT + ((t - v0) / (v1 - v0)) * PW;
  const inView = (t) => t >= v0 && t <= v1;
  const laneOf = (id) => Math.max(0, lanes.indexOf(id) < 0 ? lanes.length - 1 : lanes.indexOf(id));

  // Grants in time order, with the handoff each one is.
  const grants = (sku ? r.grants.get(sku) ?? [] : []).toSorted((p, q) => p.at - q.at)
    .map((g, i, all) => ({ ...g, t: rel(r, g.at), from: i > 0 && all[i - 1].replica !== g.replica ? all[i - 1] : null }));
  const shown = grants.filter((g) => inView(g.t));
  // Redis and MongoDB tokens can be long numbers: the labels show their
  // last digits (the tooltip has the whole token), enough to see them grow.
  const long = grants.some((gr) => String(gr.fence).length > 6);
  const tokenLabel = (f) => (long ? '…' + String(f).slice(-4) : '#' + f);

  // Token labels: one per grant in view, in rows above its lane's marks,
  // as many as fit in the rows a lane may take.
  const tokenH = measure('#0123456789…', 'fence');
  const ROW = Math.ceil(tokenH.h) + 2;
  const labels = lanes.map((id) => {
    const ls = shown.filter((g) => laneOf(g.replica) === laneOf(id)).map((g) => {
      const text = tokenLabel(g.fence);
      const w = measure(text, 'fence').w;
      const x0 = within(xs(g.t) - w / 2, w);
      return { g, text, x0, x1: x0 + w };
    }).sort((p, q) => p.x0 - q.x0);
    const { placed, rows } = rowsFor(ls, r.view ? MAX_ROWS_ZOOMED : MAX_ROWS);
    return { list: placed, rows: Math.max(rows, 1), hidden: ls.length - placed.length };
  });
  const hidden = labels.reduce((n, l) => n + l.hidden, 0);

  // Faults: a span across the lanes, labelled in rows above them.
  const faults = r.faults.map((f) => {
    const t0 = rel(r, f.at);
    // No end: it lasted to the end of the attack (so far, while it runs).
    const t1 = rel(r, Number.isFinite(f.until) ? f.until : Number.isFinite(r.attackEnd) ? r.attackEnd : r.last);
    const idle = Number.isFinite(r.soldOut) && !(r.lastSale >= f.at);
    const label = [f.fault || 'fault', f.replica, f.shape].filter(Boolean).join(' ') + (idle ? ' · struck no sale' : '');
    return { ...f, t0, t1: Math.max(t0, t1), idle, label };
  }).filter((f) => f.t1 >= v0 && f.t0 <= v1);
  const faultH = measure('fault', 'fault-label');
  const FROW = Math.ceil(faultH.h) + 2;
  const flabels = faults.map((f) => {
    const w = measure(f.label, 'fault-label').w;
    const x0 = within(xs(Math.max(f.t0, v0)), w);
    return { f, x0, x1: x0 + w };
  }).sort((p, q) => p.x0 - q.x0);
  const frows = Math.max(1, rowsFor(flabels, flabels.length).rows);

  // Vertical layout: the fault rows, then each lane (its token rows, then
  // its marks), then the axis.
  const TOP = 6 + FROW * frows;
  const laneTop = [];
  let y = TOP;
  for (const l of labels) {
    laneTop.push(y);
    y += l.rows * ROW + MARK;
  }
  // redis-stock's chart, under the lanes: its reload labels, then the chart.
  const rs = redisLayout(r, sku, xs, v0, v1);
  if (rs) {
    y += 8;
    rs.labelTop = y;
    y += rs.rows * rs.rowH;
    rs.top = y;
    y += CHART;
  }
  // queued's chart, under the lanes of its first sku: the log is every
  // sku's.
  const qs = queueLayout(r, sku);
  if (qs) {
    y += 8;
    qs.top = y;
    y += CHART;
  }
  const hs = r.holds ? { top: y } : null;
  if (hs) y += HOLD_KINDS.length * HOLD_LANE;
  const axisY = y;
  const H = axisY + BOTTOM;
  const markY = (i) => laneTop[i] + labels[i].rows * ROW; // top of lane i's marks
  const midY = (i) => markY(i) + MARK / 2;

  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'tl', role: 'img',
    'aria-label': `${r.holds ? 'holds' : 'lock'} timeline of ${r.strategy}${sku ? ', sku ' + sku : ''}: ${lanes.length} replica lanes, ${secs(v0, v1 - v0)} to ${secs(v1, v1 - v0)}`,
    'data-from': v0, 'data-to': v1,
  });

  // Lanes.
  lanes.forEach((id, i) => {
    const h = labels[i].rows * ROW + MARK;
    root.append(svg('rect', { x: LEFT, y: laneTop[i], width: PW, height: h, class: i % 2 ? 'lane odd' : 'lane' }));
    root.append(svg('text', { x: LEFT - 20, y: laneTop[i] + h / 2 + 7, class: 'lane-label', 'text-anchor': 'end', fill: replicaColor(id) }, id));
  });
  HOLD_KINDS.forEach((k, i) => {
    if (!hs) return;
    const y0 = hs.top + i * HOLD_LANE;
    root.append(svg('rect', { x: LEFT, y: y0, width: PW, height: HOLD_LANE, class: i % 2 ? 'lane odd' : 'lane' }));
    root.append(svg('text', { x: LEFT - 6, y: y0 + HOLD_LANE / 2 + 5, class: 'hold-label', 'data-kind': k.kind, 'text-anchor': 'end' }, k.label));
  });

  // Time axis: about ten ticks whatever the range.
  const w = v1 - v0;
  const step = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120].find((s) => w / s <= 10) ?? 300;
  const dec = step >= 1 ? 0 : step >= 0.1 && step !== 0.25 ? 1 : 2;
  for (let k = Math.ceil(v0 / step - 1e-9); k * step <= v1 + 1e-9; k++) {
    const t = k * step;
    root.append(svg('line', { x1: xs(t), x2: xs(t), y1: TOP, y2: axisY + 5, class: 'grid' }));
    root.append(svg('text', { x: xs(t), y: axisY + 22, class: 'axis', 'text-anchor': 'middle' }, (+t.toFixed(dec)) + 's'));
  }

  // Fault spans, under the marks.
  for (const fl of flabels) {
    const f = fl.f;
    const a = xs(Math.max(f.t0, v0));
    const b = xs(Math.min(f.t1, v1));
    const m = svg('g', { class: 'fault' + (f.idle ? ' idle' : ''), 'data-fault': f.fault ?? '', 'data-replica': f.replica ?? '' });
    m.append(svg('rect', { x: a, y: TOP, width: Math.max(b - a, 2), height: axisY - TOP, class: 'span' }));
    if (f.replica && lanes.includes(f.replica)) {
      const i = laneOf(f.replica);
      m.append(svg('rect', { x: a, y: markY(i), width: Math.max(b - a, 2), height: MARK, class: 'victim' }));
    }
    if (inView(f.t0)) m.append(svg('line', { x1: a, x2: a, y1: 6 + FROW * fl.row + FROW / 2, y2: axisY, class: 'start' }));
    m.append(svg('text', { x: fl.x0, y: 6 + FROW * fl.row + faultH.asc + 1, class: 'fault-label' }, f.label));
    m.append(title(`${f.label}: ${f.note ?? ''}` +
      (Number.isFinite(f.until) ? '' : '; it lasted to the end of the attack') +
      (f.idle ? '; the stock had sold out before it struck, and no sale came after it' : '')));
    root.append(m);
  }

  // Sales: counted per column of each lane; a column with one sale is a
  // tick, with more a band as dark as it is busy.
  const sales = (sku ? r.sales.get(sku) ?? [] : []).map((s) => ({ ...s, t: rel(r, s.at) })).filter((s) => inView(s.t));
  const cols = new Map();
  for (const s of sales) {
    const key = laneOf(s.replica) + ':' + Math.floor((xs(s.t) - LEFT) / COL);
    const c = cols.get(key) ?? { lane: laneOf(s.replica), col: Math.floor((xs(s.t) - LEFT) / COL), n: 0, first: s, last: s };
    c.n++;
    c.last = s;
    cols.set(key, c);
  }
  const busiest = Math.max(1, ...[...cols.values()].map((c) => c.n));
  const g = svg('g', { class: 'sales' });
  for (const c of cols.values()) {
    const id = lanes[c.lane];
    const top = markY(c.lane) + 4;
    let mark;
    if (c.n === 1) {
      const x = xs(c.first.t);
      mark = svg('line', { x1: x, x2: x, y1: top, y2: top + MARK - 8, class: 'sale', stroke: replicaColor(id), 'data-replica': id });
      mark.append(title(`sale by ${id} at ${secs(c.first.t, w)}`));
    } else {
      mark = svg('rect', {
        x: LEFT + c.col * COL, y: top, width: COL, height: MARK - 8, class: 'sale band', fill: replicaColor(id),
        'fill-opacity': (0.3 + 0.7 * c.n / busiest).toFixed(2), 'data-replica': id, 'data-n': c.n,
      });
      mark.append(title(`${c.n} sales by ${id}, ${secs(c.first.t, w)} to ${secs(c.last.t, w)}: zoom in to tell them apart`));
    }
    g.append(mark);
  }
  root.append(g);

  // Handoffs: a dashed line between the lanes, one per column (every
  // handoff stays visible; the tooltip counts them).
  const hcols = new Map();
  for (const gr of shown) {
    if (!gr.from) continue;
    const col = Math.floor((xs(gr.t) - LEFT) / COL);
    const h = hcols.get(col) ?? { x: xs(gr.t), lo: Infinity, hi: -Infinity, list: [] };
    for (const id of [gr.from.replica, gr.replica]) {
      h.lo = Math.min(h.lo, laneOf(id));
      h.hi = Math.max(h.hi, laneOf(id));
    }
    h.list.push(gr);
    hcols.set(col, h);
  }
  for (const h of hcols.values()) {
    const first = h.list[0];
    const line = svg('line', { x1: h.x, x2: h.x, y1: midY(h.lo), y2: midY(h.hi), class: 'handoff',
      'data-from': first.from.replica, 'data-to': first.replica, 'data-n': h.list.length });
    line.append(title(h.list.map((gr) => `handoff: ${gr.from.replica} → ${gr.replica} (token ${gr.from.fence} → ${gr.fence})`).join('\n')));
    root.append(line);
  }

  // Grants: a diamond each, or, where they crowd, one band per lane and
  // column with their tokens in its tooltip.
  const groups = [];
  for (const gr of shown) {
    const lane = laneOf(gr.replica);
    const x = xs(gr.t);
    const last = groups.findLast((p) => p.lane === lane);
    if (last && x - last.x0 < GCOL) { last.list.push(gr); last.x1 = x; } else groups.push({ lane, x0: x, x1: x, list: [gr] });
  }
  for (const gp of groups) {
    const id = lanes[gp.lane];
    const cy = midY(gp.lane);
    const first = gp.list[0];
    const lastG = gp.list[gp.list.length - 1];
    let mark;
    if (gp.list.length === 1) {
      mark = svg('g', { class: 'grant', 'data-replica': id, 'data-fence': first.fence, 'data-at': first.t.toFixed(3) });
      mark.append(svg('path', { d: `M${gp.x0} ${cy - 8} L${gp.x0 + 8} ${cy} L${gp.x0} ${cy + 8} L${gp.x0 - 8} ${cy} Z`, fill: replicaColor(id) }));
      mark.append(title(`lock granted to ${id} at ${secs(first.t, w)}, fencing token ${first.fence}`));
    } else {
      mark = svg('g', { class: 'grant many', 'data-replica': id, 'data-n': gp.list.length });
      mark.append(svg('rect', { x: gp.x0 - 6, y: cy - 6, width: gp.x1 - gp.x0 + 12, height: 12, rx: 3, fill: replicaColor(id) }));
      mark.append(title(`${gp.list.length} grants to ${id}, ${secs(first.t, w)} to ${secs(lastG.t, w)}: tokens ${gp.list.map((x) => x.fence).join(', ')}`));
    }
    root.append(mark);
  }
  labels.forEach((l, i) => {
    for (const lb of l.list) {
      // Row 0 is the nearest to the marks.
      const t = svg('text', { x: lb.x0, y: markY(i) - ROW * (lb.row + 1) + tokenH.asc + 1, class: 'fence', 'data-fence': lb.g.fence }, lb.text);
      t.append(title(`fencing token ${lb.g.fence}, granted to ${lanes[i]} at ${secs(lb.g.t, w)}`));
      root.append(t);
    }
  });

  // Refused writes: a red cross each in the refused replica's lane.
  for (const f of r.refused) {
    const t = rel(r, f.at);
    if (!inView(t)) continue;
    const cy = markY(laneOf(f.replica)) + MARK - 9;
    const fx = xs(t);
    const m = svg('g', { class: 'refused', 'data-replica': f.replica ?? '' });
    m.append(svg('path', { d: `M${fx - 6} ${cy - 6} L${fx + 6} ${cy + 6} M${fx - 6} ${cy + 6} L${fx + 6} ${cy - 6}` }));
    m.append(title(`write refused on ${f.replica || 'a replica'} at ${secs(t, w)}: ${f.text}`));
    root.append(m);
  }

  if (rs) drawRedis(root, rs, xs, w);
  if (qs) drawQueue(root, qs, xs, w);
  if (hs) drawHolds(root, r, hs.top, v0, v1, xs, w);

  brush(root, r, TOP, axisY);
  root.dataset.hidden = hidden;
  return root;
}

// ---- a checkout's holds ---------------------------------------------------

const HOLD_LANE = 36; // a holds lane's height, in user units

// drawHolds draws a checkout's holds from top: a lane per kind of hold
// event, each a bar per time slice (BUCKETS over the view) as tall as its
// count, on one scale; late confirms refused are a red cross per slice,
// whatever the count, its tooltip the holds' ids and why. The peak count and the
// slice's width go on the svg for the caption.
function drawHolds(root, r, top, v0, v1, xs, w) {
  const bw = (v1 - v0) / BUCKETS;
  const count = HOLD_KINDS.map((k) => {
    const b = new Map();
    for (const h of r.holds[k.kind]) {
      const t = rel(r, h.at);
      if (t < v0 || t > v1) continue;
      const i = Math.min(BUCKETS - 1, Math.floor((t - v0) / bw));
      if (!b.has(i)) b.set(i, []);
      b.get(i).push(h);
    }
    return b;
  });
  const peak = Math.max(1, ...count.flatMap((b) => [...b.values()].map((l) => l.length)));
  const g = svg('g', { class: 'holds', 'data-peak': peak });
  HOLD_KINDS.forEach((k, lane) => {
    const y0 = top + lane * HOLD_LANE;
    const lg = svg('g', { class: 'hold-lane', 'data-kind': k.kind, 'data-n': r.holds[k.kind].length });
    for (const [i, list] of count[lane]) {
      const a = v0 + i * bw;
      const when = `${secs(a, w)} to ${secs(a + bw, w)}`;
      const x = xs(a);
      let m;
      if (k.kind === 'late-refused') {
        const cx = x + PW / BUCKETS / 2;
        const cy = y0 + HOLD_LANE / 2;
        m = svg('g', { class: 'late-refused', 'data-n': list.length, 'data-hold': list[0].id });
        m.append(svg('path', { d: `M${cx - 4} ${cy - 7} L${cx + 4} ${cy + 7} M${cx - 4} ${cy + 7} L${cx + 4} ${cy - 7}` }));
        const ids = list.slice(0, 6).map((h) => h.id).join(', ') + (list.length > 6 ? ` and ${list.length - 6} more` : '');
        m.append(title(`${list.length} confirm${list.length > 1 ? 's' : ''} refused late, ${when}: hold ${ids}. Why: ${LATE_WHY}. The store said: ${list[0].text}`));
      } else {
        const h = Math.max(2, (list.length / peak) * (HOLD_LANE - 6));
        m = svg('rect', { x: x + 0.5, y: y0 + HOLD_LANE - 3 - h, width: Math.max(PW / BUCKETS - 1, 1), height: h, class: 'hold-bar', 'data-n': list.length });
        const why = k.kind === 'expired' ? ` (${list.filter((e) => e.text === 'read').length} read so by a late buyer, ${list.filter((e) => e.text === 'sold again').length} sold again to a probe)` : '';
        m.append(title(`${list.length} ${k.text}, ${when}${why}`));
      }
      lg.append(m);
    }
    g.append(lg);
  });
  root.append(g);
  root.dataset.peak = peak;
  root.dataset.slice = bw;
}

// holdsCaption says what a checkout's figure counts.
function holdsCaption(r, fig) {
  const n = (k) => r.holds[k].length;
  return `Holds: ${n('held')} created, ${n('confirmed')} confirmed, ${n('expired')} seen expired, ${n('late-refused')} confirms refused (expired)` +
    ` · bars count them per ${ms(Number(fig.dataset.slice) * 1000)}, the tallest ${fig.dataset.peak}`;
}

// ---- redis-stock's chart ------------------------------------------------

const CHART = 100; // the chart's height, in user units
let clips = 0; // ids of the charts' clip paths

// redisLayout gathers what redis-stock's chart of sku shows in [v0, v1]:
// the samples of its copy in Redis and of the item, and the reloads, their
// labels in rows; null when the run has neither (not redis-stock).
function redisLayout(r, sku, xs, v0, v1) {
  const samples = (sku ? r.redis.get(sku) ?? [] : []).map((s) => ({ ...s, t: rel(r, s.at) })).sort((p, q) => p.t - q.t);
  const reloads = r.reloads.filter((x) => !x.sku || x.sku === sku).map((x) => ({ ...x, t0: rel(r, x.since), t: rel(r, x.at) }));
  if (!samples.length && !reloads.length) return null;
  const shown = reloads.filter((x) => x.t >= v0 && x.t0 <= v1);
  const ls = shown.map((x) => {
    const text = `${x.reason} ${x.replica}` + (x.count > 1 ? ` ×${x.count}` : '');
    const w = measure(text, 'reload-label').w;
    const x0 = within(xs(Math.max(x.t0, v0)), w);
    return { x, text, x0, x1: x0 + w };
  }).sort((p, q) => p.x0 - q.x0);
  const { placed, rows } = rowsFor(ls, 2);
  const m = measure('first_load', 'reload-label');
  // The scale starts from the stock each sku started with.
  const initial = r.skus.length ? r.initial / r.skus.length : 0;
  return { sku, samples, initial, reloads: shown, labels: placed, rows: Math.max(rows, 1), rowH: Math.ceil(m.h) + 2, asc: m.asc, v0, v1 };
}

// drawRedis draws redis-stock's chart: the units its copy in Redis can
// still sell (a solid line), the MongoDB item's stock (dashed), the units
// taken in Redis and not yet written to MongoDB between the two (amber:
// the ledger's lag), and each reload of the copy (a vertical line,
// labelled with its reason and replica).
function drawRedis(root, rs, xs, w) {
  const { samples, top } = rs;
  const peak = Math.max(1, Math.round(rs.initial), ...samples.map((s) => Math.max(s.stock + s.unwritten, s.item ?? 0)));
  const ys = (v) => top + CHART - 4 - (Math.max(v, 0) / peak) * (CHART - 10);
  const g = svg('g', { class: 'redis-view', 'data-samples': samples.length, 'data-reloads': rs.reloads.length });
  g.append(svg('rect', { x: LEFT, y: top, width: PW, height: CHART, class: 'chart' }));
  const id = 'rs-clip-' + (++clips);
  const clip = svg('clipPath', { id });
  clip.append(svg('rect', { x: LEFT, y: top, width: PW, height: CHART }));
  g.append(clip);
  const plot = svg('g', { 'clip-path': `url(#${id})` });
  // Each sample holds until the next: the lag between them as a band.
  samples.forEach((s, i) => {
    if (s.unwritten <= 0) return;
    const x0 = xs(s.t);
    const x1 = i + 1 < samples.length ? xs(samples[i + 1].t) : x0 + 2;
    const band = svg('rect', { x: x0, y: ys(s.stock + s.unwritten), width: Math.max(x1 - x0, 1), height: Math.max(ys(s.stock) - ys(s.stock + s.unwritten), 1), class: 'lag' });
    band.append(title(`${s.unwritten} units taken in Redis and not yet in MongoDB at ${secs(s.t, w)}, the oldest ${ms(s.age_ms)} old`));
    plot.append(band);
  });
  const steps = (val) => {
    let d = '';
    for (const s of samples) {
      const v = val(s);
      if (v === null || v === undefined) continue;
      d += d === '' ? `M${xs(s.t)} ${ys(v)}` : ` H${xs(s.t)} V${ys(v)}`;
    }
    return d;
  };
  const item = svg('path', { d: steps((s) => s.item), class: 'item-line' });
  item.append(title("the MongoDB item's stock: the truth"));
  const redis = svg('path', { d: steps((s) => s.stock), class: 'redis-line' });
  redis.append(title('the units the copy in Redis can still sell'));
  plot.append(item, redis);
  // Reloads: a band each, from the replica's sample before it to the one
  // that counted it, under its label.
  for (const x of rs.reloads) {
    const a = xs(Math.max(x.t0, rs.v0));
    const b = xs(Math.min(x.t, rs.v1));
    const m = svg('g', { class: 'reload', 'data-reason': x.reason, 'data-replica': x.replica });
    m.append(svg('rect', { x: a, y: rs.labelTop, width: Math.max(b - a, 2), height: top + CHART - rs.labelTop, class: 'when' }));
    m.append(svg('line', { x1: a, x2: a, y1: rs.labelTop, y2: top + CHART }));
    m.append(title(`${x.replica} reloaded Redis between ${secs(x.t0, w)} and ${secs(x.t, w)}${x.count > 1 ? ' (' + x.count + ' times)' : ''}: ${RELOAD_TEXT[x.reason] ?? x.reason}`));
    g.append(m);
  }
  g.append(plot);
  for (const lb of rs.labels) {
    const t = svg('text', { x: lb.x0, y: rs.labelTop + rs.rowH * lb.row + rs.asc + 1, class: 'reload-label', 'data-reason': lb.x.reason }, lb.text);
    t.append(title(RELOAD_TEXT[lb.x.reason] ?? lb.x.reason));
    g.append(t);
  }
  // The scale: the highest value at the top, 0 at the bottom.
  g.append(svg('text', { x: LEFT - 6, y: top + 16, class: 'chart-axis', 'text-anchor': 'end' }, String(peak)));
  g.append(svg('text', { x: LEFT - 6, y: top + CHART - 4, class: 'chart-axis', 'text-anchor': 'end' }, '0'));
  root.append(g);
}

// renderRedisNow writes under a redis-stock timeline what its last sample
// said: Redis's copy, the item, the units between them, and the reloads.
function renderRedisNow(fig, r, sku) {
  const samples = sku ? r.redis.get(sku) ?? [] : [];
  const reloads = r.reloads.filter((x) => !x.sku || x.sku === sku);
  let p = fig.querySelector('.redis-now');
  if (!samples.length && !reloads.length) { p?.remove(); return; }
  if (!p) {
    p = el('p', { class: 'redis-now' });
    fig.append(p);
  }
  const last = samples.at(-1);
  const part = (field, label, value, cls = '') => el('span', { class: 'part ' + cls, 'data-field': field, 'data-value': String(value ?? '') },
    el('span', { class: 'k', text: label + ' ' }), el('span', { class: 'n', text: value === null || value === undefined ? '–' : String(value) }));
  const byReason = {};
  for (const x of reloads) byReason[x.reason] = (byReason[x.reason] ?? 0) + x.count;
  p.replaceChildren(
    part('redis', 'in Redis', last?.stock, 'redis'),
    part('item', 'in MongoDB', last?.item, 'item'),
    part('unwritten', 'taken, not yet in MongoDB', last?.unwritten, 'lag'),
    part('age', 'oldest of those', last ? (last.unwritten > 0 ? ms(last.age_ms) : 'none') : null),
    part('epoch', 'epoch', last?.epoch),
    part('reloads', 'reloads', Object.entries(byReason).map(([k, n]) => `${k} ${n}`).join(', ') || 'none'),
  );
}

// ---- queued's chart ------------------------------------------------------

// queueLayout gathers the samples of queued's log for the chart under the
// timeline of sku, the run's first; null for any other sku, or when the
// run has none (not queued).
function queueLayout(r, sku) {
  if (!r.queue.length || !sku || sku !== r.skus[0]) return null;
  return { samples: r.queue.map((s) => ({ ...s, t: rel(r, s.at) })).sort((p, q) => p.t - q.t) };
}

// drawQueue draws queued's chart: the sales in its log that no consumer
// has acknowledged yet (a solid line: the queue's depth, as the NATS
// server counts it) and the buyers waiting for their answers (dashed).
function drawQueue(root, qs, xs, w) {
  const { samples, top } = qs;
  const peak = Math.max(1, ...samples.map((s) => Math.max(s.depth, s.waiting)));
  const ys = (v) => top + CHART - 4 - (Math.max(v, 0) / peak) * (CHART - 10);
  const g = svg('g', { class: 'queue-view', 'data-samples': samples.length, 'data-peak': peak });
  g.append(svg('rect', { x: LEFT, y: top, width: PW, height: CHART, class: 'chart' }));
  const id = 'q-clip-' + (++clips);
  const clip = svg('clipPath', { id });
  clip.append(svg('rect', { x: LEFT, y: top, width: PW, height: CHART }));
  g.append(clip);
  const plot = svg('g', { 'clip-path': `url(#${id})` });
  const steps = (val) => {
    let d = '';
    for (const s of samples) {
      const v = val(s);
      if (v < 0) continue; // the broker did not answer that scrape
      d += d === '' ? `M${xs(s.t)} ${ys(v)}` : ` H${xs(s.t)} V${ys(v)}`;
    }
    return d;
  };
  const depth = svg('path', { d: steps((s) => s.depth), class: 'queue-depth' });
  depth.append(title("the sales in the log no consumer has acknowledged yet (the NATS server's count)"));
  const waiting = svg('path', { d: steps((s) => s.waiting), class: 'queue-waiting' });
  waiting.append(title('the buyers waiting for their answers, every replica\'s'));
  plot.append(depth, waiting);
  // The longest wait at each sample, on hover.
  for (const s of samples) {
    const dot = svg('circle', { cx: xs(s.t), cy: ys(s.depth), r: 2, class: 'queue-dot' });
    dot.append(title(`at ${secs(s.t, w)}: ${s.depth < 0 ? 'the log not read' : s.depth + ' sales in the log'}, ${s.waiting} buyers waiting, the longest for ${ms(s.oldest_wait_ms)}`));
    plot.append(dot);
  }
  g.append(plot);
  g.append(svg('text', { x: LEFT - 6, y: top + 16, class: 'chart-axis', 'text-anchor': 'end' }, String(peak)));
  g.append(svg('text', { x: LEFT - 6, y: top + CHART - 4, class: 'chart-axis', 'text-anchor': 'end' }, '0'));
  root.append(g);
}

// renderQueueNow writes under queued's first timeline what its last sample
// said: the log's depth, the buyers waiting, the longest wait.
function renderQueueNow(fig, r, sku) {
  let p = fig.querySelector('.queue-now');
  if (!r.queue.length || !sku || sku !== r.skus[0]) { p?.remove(); return; }
  if (!p) {
    p = el('p', { class: 'queue-now' });
    fig.append(p);
  }
  const last = r.queue.at(-1);
  const most = Math.max(...r.queue.map((s) => s.depth));
  const part = (field, label, value, cls = '') => el('span', { class: 'part ' + cls, 'data-field': field, 'data-value': String(value) },
    el('span', { class: 'k', text: label + ' ' }), el('span', { class: 'n', text: String(value) }));
  p.replaceChildren(
    part('depth', 'in the log', last.depth < 0 ? '–' : last.depth, 'depth'),
    part('waiting', 'buyers waiting', last.waiting, 'waiting'),
    part('oldest', 'the longest wait', last.waiting > 0 ? ms(last.oldest_wait_ms) : 'none'),
    part('most', 'deepest log', most < 0 ? '–' : most),
  );
}

// brush lets a drag across a timeline zoom into the time range dragged.
function brush(root, r, top, bottom) {
  const toUnits = (e) => ((e.clientX - root.getBoundingClientRect().left) / root.getBoundingClientRect().width) * W;
  const band = svg('rect', { class: 'brush', y: top, height: bottom - top, width: 0, x: 0 });
  let from = null;
  root.addEventListener('pointerdown', (e) => {
    if (e.button !== 0) return;
    from = Math.min(Math.max(toUnits(e), LEFT), W - RIGHT);
    S.brushing = r;
    root.setPointerCapture?.(e.pointerId);
    band.setAttribute('x', from);
    band.setAttribute('width', 0);
    root.append(band);
    e.preventDefault();
  });
  root.addEventListener('pointermove', (e) => {
    if (from === null) return;
    const to = Math.min(Math.max(toUnits(e), LEFT), W - RIGHT);
    band.setAttribute('x', Math.min(from, to));
    band.setAttribute('width', Math.abs(to - from));
  });
  const end = (e, apply) => {
    if (from === null) return;
    const to = Math.min(Math.max(toUnits(e), LEFT), W - RIGHT);
    const a = from;
    from = null;
    S.brushing = null;
    band.remove();
    const [v0, v1] = viewOf(r);
    const t = (x) => v0 + ((x - LEFT) / PW) * (v1 - v0);
    if (apply && Math.abs(to - a) >= 4) setView(r, [t(a), t(to)]);
    else { S.dirty.add(r.strategy); flush(); }
  };
  root.addEventListener('pointerup', (e) => end(e, true));
  root.addEventListener('pointercancel', (e) => end(e, false));
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
  const checkout = [...S.runs.values()].some((r) => r.holds);
  if (d.checks?.length) v.append(checksList(d.checks, checkout));
  if (d.report) v.append(el('p', {}, el('a', { id: 'report-link', href: d.report, target: '_blank', text: 'The whole report, one page that opens offline (report.html)' })));
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
    // A checkout's runs have no result: their checks say.
    const mine = (d.checks ?? []).filter((c) => c.scope === (r.flash ? 'flash · ' : 'checkout · ') + r.strategy);
    const verdict = r.result?.verdict ?? (mine.length ? (mine.some((c) => !c.pass && c.kind === 'safety') ? 'fail' : 'pass') : 'not run');
    if (r.phase !== 'done') setPhase(r, 'done', verdict);
    if (mine.length) document.querySelector(`#live-rows tr[data-strategy="${CSS.escape(r.strategy)}"]`).dataset.verdict = verdict;
  }
  setRunning(false);
}

// checksList is the report's checks as a table, folded unless open.
function checksList(checks, open) {
  const failed = checks.filter((c) => !c.pass).length;
  const rows = checks.map((c) => el('tr', { 'data-check': c.name, 'data-scope': c.scope ?? '', 'data-pass': String(c.pass) },
    el('td', { text: c.scope ?? '' }), el('th', { scope: 'row', text: c.name }), el('td', { text: c.observed }), el('td', { text: c.bound }),
    el('td', { class: c.pass ? 'good' : 'bad', text: c.pass ? 'pass' : `not passed (${c.kind})` })));
  return el('details', { class: 'checks', open },
    el('summary', { text: `The checks: ${checks.length}, ${failed ? failed + ' not passed' : 'every one passed'}` }),
    el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, ...['scope', 'check', 'observed', 'bound', 'result'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows))));
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
    S.strike = r.data.strike ?? {};
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
