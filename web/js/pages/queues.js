// Queue occupancy over the range as a heatmap: a row per queue, a column per slice of time,
// colour by the highest occupancy in the slice (scale shown), hover for values, drag to zoom.

import { queueSeries } from '../data.js';
import { clock, count, esc, nodeName, node as nodeText, num, pct } from '../fmt.js';
import { sawTime } from '../store.js';

const COLS = 150;
const ROW_H = 16;

/** Occupancy → colour: dark green (empty) through yellow to red (the highest in view). */
export function heat(x) {
  const h = 120 - 120 * Math.min(1, Math.max(0, x));
  return `hsl(${h}, 75%, ${22 + 30 * Math.min(1, x * 1.5)}%)`;
}

/** `node/port/queue` as `node/port/qN`, the node by its name where the topology gives one. */
const qname = (k) => {
  const [n, p, q] = k.split('/');
  return `${nodeName(n) ?? n}/${p}/q${q}`;
};

export async function render(ctx) {
  const focus = ctx.params.get('focus') || '';
  const node = ctx.params.get('node') || '';
  ctx.main.innerHTML = `<div class="panel"><h2>Queue occupancy <span class="muted" id="qnote"></span></h2>
    <p class="muted">rows: node/port/queue · columns: time · colour: the highest occupancy in the column
      (black: no sample) · drag across
      to zoom into a time range · hover for values</p>
    <div class="heatwrap"><div id="labels" class="qlabels"></div>
      <div class="heatcol"><canvas id="heat" class="heat" data-test="heatmap"></canvas><div id="xaxis" class="xaxis">
        </div></div></div>
    <div class="scale"><span>0</span><canvas id="scale" width="200" height="10"></canvas><span id="scalemax"></span>
      <span class="muted"> cells</span></div><div id="tip" class="tip" hidden></div></div>`;
  const $ = (id) => document.getElementById(id);
  const sc = $('scale').getContext('2d');
  for (let i = 0; i < 200; i++) {
    sc.fillStyle = heat(i / 199);
    sc.fillRect(i, 0, 1, 10);
  }
  let grid = null;
  await ctx.every(3000, async () => {
    const r = ctx.range;
    const { series, sampled, stored } = await queueSeries(r, node || undefined);
    if (!ctx.alive) return;
    const keys = [...series.keys()].sort((a, b) => {
      const [x, y] = [a.split('/').map(Number), b.split('/').map(Number)];
      return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
    });
    const span = Math.max(1, r.until - r.since);
    let first = Number.POSITIVE_INFINITY;
    const cells = keys.map((k) => {
      const c = new Array(COLS).fill(-1);
      for (const [t, o] of series.get(k)) {
        sawTime(t);
        if (t >= r.since && t < first) first = t;
        const i = Math.min(COLS - 1, Math.floor(((t - r.since) / span) * COLS));
        if (i >= 0) c[i] = Math.max(c[i], o);
      }
      return c;
    });
    const max = Math.max(1, ...cells.flat());
    const canvas = $('heat');
    canvas.width = COLS * 6;
    canvas.height = Math.max(1, keys.length * ROW_H);
    canvas.style.height = `${keys.length * ROW_H}px`;
    const g = canvas.getContext('2d');
    g.fillStyle = '#0b0f13';
    g.fillRect(0, 0, canvas.width, canvas.height);
    cells.forEach((row, y) => {
      row.forEach((o, x) => {
        if (o < 0) return;
        g.fillStyle = heat(Math.sqrt(o / max));
        g.fillRect(x * 6, y * ROW_H, 6, ROW_H - 1);
      });
    });
    $('labels').innerHTML = keys
      .map((k, y) => {
        const cls = k === focus ? 'focus' : '';
        const top = Math.max(0, ...cells[y]);
        const [n, p, q] = k.split('/');
        const title = `${nodeText(n)} · port ${p} · q${q}`;
        return `<div data-test="queue-label" data-key="${esc(k)}" data-max="${top}" class="${cls}" title="${esc(
          title,
        )}">${esc(qname(k))}</div>`;
      })
      .join('');
    canvas.dataset.max = max;
    $('scalemax').textContent = `${num(max)} (colour by square root)`;
    $('xaxis').innerHTML = [0, 0.25, 0.5, 0.75, 1]
      .map((f) => `<span style="left:${f * 100}%">${clock(r.since + f * span, 3)}</span>`)
      .join('');
    const notes = [];
    if (!stored) notes.push(esc('no history store: the recent samples in memory only'));
    if (sampled) notes.push(esc('long range: each column shows its first stored intervals'));
    // A collector (or store) younger than the range: say where its samples start, so the black
    // before them reads as "not recorded", not as idle queues.
    const any = Number.isFinite(first);
    const covered = any ? (r.until - first) / span : 0;
    if (covered < 1 - 1 / COLS) {
      const what = any
        ? `samples from ${clock(first, 0)} on: ${pct(covered)} of the range; none recorded before`
        : 'no samples in the range';
      notes.push(`<span data-test="queue-coverage">${esc(what)}</span>`);
    }
    $('qnote').innerHTML = notes.length ? `· ${notes.join(' · ')}` : '';
    grid = { keys, cells, r, span };
  });
  // Hover: the cell's queue, time slice and value.
  const canvas = $('heat');
  const cellAt = (ev) => {
    const b = canvas.getBoundingClientRect();
    return [Math.floor(((ev.clientX - b.left) / b.width) * COLS), Math.floor((ev.clientY - b.top) / ROW_H), b];
  };
  canvas.onmousemove = (ev) => {
    if (!grid) return;
    const [x, y] = cellAt(ev);
    const tip = $('tip');
    const v = grid.cells[y]?.[x];
    if (v == null) return;
    const t0 = grid.r.since + (x * grid.span) / COLS;
    tip.hidden = false;
    tip.style.left = `${ev.pageX + 12}px`;
    tip.style.top = `${ev.pageY + 12}px`;
    const what = v < 0 ? 'no sample' : `max ${count(v, 'cell')}`;
    tip.textContent = `${qname(grid.keys[y])} · ${clock(t0)} – ${clock(t0 + grid.span / COLS)} · ${what}`;
  };
  canvas.onmouseleave = () => {
    $('tip').hidden = true;
  };
  // Brush: drag across columns to zoom into their time range.
  let start = null;
  canvas.onmousedown = (ev) => {
    start = cellAt(ev)[0];
  };
  const up = (ev) => {
    if (start == null || !grid) return;
    const end = cellAt(ev)[0];
    const [a, b] = [Math.min(start, end), Math.max(start, end) + 1];
    start = null;
    if (b - a < 2) return;
    ctx.brush(grid.r.since + (a * grid.span) / COLS, grid.r.since + (b * grid.span) / COLS);
  };
  window.addEventListener('mouseup', up);
  ctx.own(() => window.removeEventListener('mouseup', up));
}
