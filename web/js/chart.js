// Time-series charts (uPlot, vendored): labelled axes whose unit scales with the data
// (ns → µs → ms → s), hover values to the microsecond in the legend, dashed markers, and a
// brush (drag across the plot) that selects a time range.

import { clock, esc, nsUnit } from './fmt.js';
import { emptyBlock } from './states.js';

/* global uPlot */

const PALETTE = ['#4aa3ff', '#3fb950', '#d29922', '#f85149', '#bc8cff', '#39c5cf', '#ff7b72', '#e3b341'];
const AXIS = { stroke: '#8593a3', grid: { stroke: '#232b34' }, ticks: { stroke: '#232b34' } };

/** Dashed vertical lines at `marks` (seconds). */
const markers = (marks) => ({
  hooks: {
    draw: [
      (u) => {
        const { ctx, bbox } = u;
        ctx.save();
        ctx.strokeStyle = '#bc8cff';
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = 1.5;
        for (const t of marks) {
          const x = u.valToPos(t, 'x', true);
          if (x < bbox.left || x > bbox.left + bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(x, bbox.top);
          ctx.lineTo(x, bbox.top + bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      },
    ],
  },
});

/** Fraction digits of the time axis's labels for a view `span` seconds long. */
const clockDigits = (span) => (span < 2 ? 6 : span < 20 ? 3 : 0);

/** Width of an axis that fits its longest tick label (a fixed width clips "100 ms"). */
const fit = (u, values) => {
  const longest = Math.max(1, ...(values || []).map((v) => String(v).length));
  return Math.ceil(longest * 7.5) + 18;
};

/**
 * Draws a chart into `el`; returns the uPlot instance (destroy it when the page goes).
 *   opts.times: seconds; opts.series: [{label, values}]; opts.unit: 'ns' or a unit name;
 *   opts.yLabel: what the values are; opts.range: {since, until} in ns (the x extent);
 *   opts.marks: seconds of dashed markers; opts.onBrush(sinceNs, untilNs): the brush;
 *   opts.empty: what to say when no series has a value (an axis from 0 to 1 would say nothing).
 */
export function chart(el, opts) {
  const { times, series, unit, yLabel, title, range, marks = [], onBrush } = opts;
  if (!series.some((s) => s.values.some((v) => v != null))) {
    const why = esc(opts.empty || 'no samples in the range');
    el.innerHTML = `<h3 class="chart-title">${esc(title)}</h3>${emptyBlock(why)}`;
    return { destroy() {} };
  }
  let max = 0;
  for (const s of series) for (const v of s.values) if (v != null && v > max) max = v;
  const [div, suffix] = unit === 'ns' ? nsUnit(max || 1) : [1, unit];
  const fmtVal = (v) => (v == null ? '–' : `${+(v / div).toPrecision(4)} ${suffix}`);
  const data = [times, ...series.map((s) => s.values)];
  el.innerHTML = '';
  const u = new uPlot(
    {
      title,
      width: el.clientWidth || 600,
      height: 240,
      plugins: [markers(marks)],
      cursor: { drag: { x: true, y: false, setScale: false } },
      select: { show: true },
      scales: {
        x: { time: true, ...(range ? { range: () => [range.since / 1e9, range.until / 1e9] } : {}) },
        y: { range: (_u, _min, mx) => [0, mx > 0 ? mx * 1.08 : 1] },
      },
      series: [
        { label: 'time', value: (_u, v) => (v == null ? '–' : clock(v * 1e9)) },
        ...series.map((s, i) => ({
          label: s.label,
          stroke: PALETTE[i % PALETTE.length],
          width: 2,
          spanGaps: true,
          points: { show: times.length < 60 },
          value: (_u, v) => fmtVal(v),
        })),
      ],
      axes: [
        {
          ...AXIS,
          label: 'time (local)',
          labelSize: 18,
          // 24-hour clock; fractions of a second when the view is that short, with the ticks
          // as far apart as their labels are long (they overlapped at a fixed spacing).
          space: (_p, _i, min, max) => 7.5 * (9 + clockDigits(max - min)) + 16,
          values: (p, splits) => splits.map((v) => clock(v * 1e9, clockDigits(p.scales.x.max - p.scales.x.min))),
        },
        {
          ...AXIS,
          label: `${yLabel} (${suffix})`,
          labelSize: 18,
          size: fit,
          values: (_u, vs) => vs.map((v) => `${+(v / div).toPrecision(3)}`),
        },
      ],
      hooks: {
        // The y axis's labels and width, on the element: what a reader (or a test) can check fits.
        drawAxes: [
          (p) => {
            el.dataset.yTicks = (p.axes[1]._values || []).join('|');
            el.dataset.yWidth = Math.round(p.axes[1]._size || 0);
          },
        ],
        setSelect: [
          (p) => {
            if (!onBrush || p.select.width < 3) return;
            const a = p.posToVal(p.select.left, 'x');
            const b = p.posToVal(p.select.left + p.select.width, 'x');
            p.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
            onBrush(a * 1e9, b * 1e9);
          },
        ],
      },
    },
    data,
    el,
  );
  el.dataset.unit = suffix;
  return u;
}
