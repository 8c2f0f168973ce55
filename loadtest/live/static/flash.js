// The live page's flash sale (loadtest flash, docs/flash.md): every
// buyer's final answer by kind, stacked per 100 ms bin from the first
// arrival, the goodput (sales answered per second, per bin) and a marker
// at the moment the last unit sold. The harness streams the bins
// ("answers" events) and the sell-out ("sell-out").

const SVGNS = 'http://www.w3.org/2000/svg';

// The kinds of final answer, in the harness's order (report.FlashKinds),
// each with its colour and what it means.
export const FLASH_KINDS = [
  { kind: 'sale', color: '#1d7a12', text: '200: sold a unit' },
  { kind: 'sold out', color: '#8a8a8a', text: '409 sold_out' },
  { kind: 'shed', color: '#b34700', text: '503 overloaded: the service shed the request' },
  { kind: 'unavailable', color: '#a3006d', text: 'any other 503' },
  { kind: 'timed out', color: '#c8102e', text: 'no answer within the buyer\'s patience' },
  { kind: 'error', color: '#333333', text: 'anything else' },
];

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// flashOf is the run's flash model, made on its first flash event.
function flashOf(r) {
  r.flash ??= { bins: [], width: 0.1, sellOut: NaN, sold: 0 };
  return r.flash;
}

// flashAnswers adds an "answers" event's bin to the run.
export function flashAnswers(r, ev) {
  const f = flashOf(r);
  const b = ev.bin;
  if (!b || !(b.width > 0)) return;
  f.width = b.width;
  const i = Math.round(b.start / b.width);
  while (f.bins.length <= i) f.bins.push({});
  for (const [k, n] of Object.entries(b.kinds ?? {})) f.bins[i][k] = (f.bins[i][k] ?? 0) + n;
}

// flashSellOut notes when the last unit sold, seconds from the first arrival.
export function flashSellOut(r, ev) {
  const f = flashOf(r);
  f.sellOut = ev.progress?.elapsed ?? NaN;
  f.sold = ev.progress?.sold ?? 0;
}

// flashTotals are the answers so far by kind, and the goodput: the sales
// over the time from the first arrival to the end of the last bin with
// one (to the sell-out, once it came).
export function flashTotals(f) {
  const by = Object.fromEntries(FLASH_KINDS.map((k) => [k.kind, 0]));
  let lastSale = 0;
  f.bins.forEach((b, i) => {
    for (const [k, n] of Object.entries(b)) by[k] = (by[k] ?? 0) + n;
    if (b.sale) lastSale = (i + 1) * f.width;
  });
  const t = Number.isFinite(f.sellOut) ? Math.max(f.sellOut, f.width) : lastSale;
  return { by, goodput: t > 0 ? by.sale / t : 0 };
}

const W = 1000, H = 300, LEFT = 64, RIGHT = 70, TOP = 28, BOTTOM = 34;

// drawFlash returns the figure of the run's answers, spanning at least
// span seconds.
export function drawFlash(r, span) {
  const f = flashOf(r);
  const n = Math.max(f.bins.length, Math.ceil(span / f.width));
  const total = (b) => FLASH_KINDS.reduce((s, k) => s + (b[k.kind] ?? 0), 0);
  const maxBin = Math.max(1, ...f.bins.map(total));
  const maxRate = Math.max(1, ...f.bins.map((b) => (b.sale ?? 0) / f.width));
  const pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
  const x = (t) => LEFT + (t / (n * f.width)) * pw;
  const y = (v) => TOP + ph - (v / maxBin) * ph;
  const yr = (v) => TOP + ph - (v / maxRate) * ph;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'flash-chart', role: 'img', 'data-strategy': r.strategy,
    'aria-label': `${r.strategy}: answers by kind per ${Math.round(f.width * 1000)} ms, goodput and the sell-out` });
  root.append(svg('rect', { x: LEFT, y: TOP, width: pw, height: ph, class: 'plot' }));
  // the stacked bars
  const bw = Math.max(1, pw / n - 1);
  f.bins.forEach((b, i) => {
    let acc = 0;
    for (const k of FLASH_KINDS) {
      const v = b[k.kind] ?? 0;
      if (!v) continue;
      const r0 = svg('rect', { x: x(i * f.width).toFixed(1), y: y(acc + v).toFixed(1), width: bw.toFixed(1), height: (y(acc) - y(acc + v)).toFixed(1),
        fill: k.color, class: 'flash-bar', 'data-kind': k.kind, 'data-bin': i, 'data-n': v });
      r0.append(svg('title', {}, `${(i * f.width).toFixed(1)}–${((i + 1) * f.width).toFixed(1)} s: ${v} ${k.kind}`));
      root.append(r0);
      acc += v;
    }
  });
  // the goodput, sales per second per bin, on the right axis
  const pts = f.bins.map((b, i) => `${x((i + 0.5) * f.width).toFixed(1)},${yr((b.sale ?? 0) / f.width).toFixed(1)}`);
  if (pts.length) root.append(svg('polyline', { points: pts.join(' '), class: 'goodput', fill: 'none' }));
  // axes
  const ticks = Math.min(10, Math.ceil(n * f.width));
  const step = Math.max(1, Math.ceil((n * f.width) / ticks));
  for (let s = 0; s <= n * f.width + 1e-9; s += step) {
    root.append(svg('text', { x: x(s), y: H - 12, 'text-anchor': 'middle', class: 'axis' }, s + ' s'));
  }
  root.append(svg('text', { x: LEFT - 6, y: TOP + 10, 'text-anchor': 'end', class: 'axis' }, String(maxBin)));
  root.append(svg('text', { x: LEFT - 6, y: TOP + ph, 'text-anchor': 'end', class: 'axis' }, '0'));
  root.append(svg('text', { x: 8, y: TOP - 10, class: 'axis' }, `answers per ${Math.round(f.width * 1000)} ms`));
  root.append(svg('text', { x: W - RIGHT + 6, y: TOP + 10, class: 'axis goodput-axis' }, Math.round(maxRate) + '/s'));
  root.append(svg('text', { x: W - 8, y: TOP - 10, 'text-anchor': 'end', class: 'axis goodput-axis' }, 'goodput: sales/s'));
  // the sell-out
  if (Number.isFinite(f.sellOut)) {
    const sx = x(f.sellOut);
    const g = svg('g', { class: 'sell-out', 'data-at': f.sellOut.toFixed(3) });
    g.append(svg('line', { x1: sx, x2: sx, y1: TOP - 4, y2: TOP + ph }),
      svg('text', { x: sx + 4, y: TOP + 12 }, `sold out at ${f.sellOut.toFixed(2)} s`),
      svg('title', {}, `the last unit sold: its sale was answered ${f.sellOut.toFixed(3)} s after the first arrival`));
    root.append(g);
  }
  return root;
}

// flashCaption says what the figure shows so far.
export function flashCaption(r) {
  const f = flashOf(r);
  const { by, goodput } = flashTotals(f);
  const kinds = FLASH_KINDS.filter((k) => by[k.kind]).map((k) => `${k.kind} ${by[k.kind]}`).join(', ') || 'no answer yet';
  const so = Number.isFinite(f.sellOut) ? `sold out at ${f.sellOut.toFixed(2)} s` : 'not sold out yet';
  return `Answers: ${kinds}; goodput ${goodput.toFixed(1)} sales/s; ${so}`;
}

// flashLegend is the kinds' key, as HTML.
export function flashLegend() {
  const ul = document.createElement('ul');
  ul.className = 'flash-legend';
  for (const k of FLASH_KINDS) {
    const li = document.createElement('li');
    li.title = k.text;
    const chip = document.createElement('span');
    chip.className = 'chip';
    chip.style.background = k.color;
    li.append(chip, ' ' + k.kind);
    ul.append(li);
  }
  const li = document.createElement('li');
  li.innerHTML = '<span class="chip goodput-chip"></span> goodput <span class="chip sell-out-chip"></span> sell-out';
  ul.append(li);
  return ul;
}
