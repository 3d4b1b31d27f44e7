// One flow: its path hop by hop, latency and occupancy over the range (the store's intervals,
// or the recent samples in memory), path history and events. An unknown ID says so.

import { api, onCollectorClock } from '../api.js';
import { chart } from '../chart.js';
import { clock, count, esc, eventPlace, evidence, flowText, node, ns } from '../fmt.js';
import { emptyRow, loadingBlock } from '../states.js';
import { href, sawTime } from '../store.js';

export async function render(ctx) {
  let f;
  try {
    f = await api(`/api/flows/${encodeURIComponent(ctx.arg)}`);
  } catch (e) {
    if (e.status !== 404 && e.status !== 400) throw e;
    const why = e.apiMessage ? ` (${esc(e.apiMessage)})` : '';
    ctx.main.innerHTML = `<div class="panel" data-test="not-found"><h2>No such flow</h2>
      <p>The collector knows no flow with ID <b>${esc(ctx.arg)}</b>${why}: it may
      have expired from memory. Its history may still be in <a href="#/events?flow=${esc(ctx.arg)}">the events</a>;
      <a href="#/flows">all flows</a>.</p></div>`;
    return;
  }
  if (!ctx.alive) return;
  sawTime(f.last_seen_ns);
  const r = ctx.range;
  const hop = (h, i, n) => `<div class="hop"><b>${i === 0 ? 'source' : i === n - 1 ? 'sink' : `hop ${i}`}</b><br>
    <a href="#/flows?node=${h.node_id}">${esc(node(h.node_id))}</a><br>
    <span class="muted">in ${h.ingress_if ?? '–'} · out ${h.egress_if ?? '–'}</span></div>`;
  const inRange = (t) => t >= r.since && t <= r.until;
  const events = onCollectorClock(f.events)
    .filter((e) => inRange(e.time_ns))
    .reverse();
  ctx.main.innerHTML = `<div class="panel" data-test="flow-detail"><h2>${esc(flowText(f.flow))}</h2>
      <p class="muted">${count(f.reports, 'report')} · ${count(f.drops, 'drop')} ·
        e2e p50 ${ns(f.e2e_latency_p50)} · p99
        <span data-test="flow-p99">${ns(f.e2e_latency_p99)}</span> · ${count(f.path_changes, 'path change')} ·
        first seen ${clock(f.first_seen_ns)} · last seen ${clock(f.last_seen_ns)}</p>
      <div class="path" data-test="flow-path">${f.path_detail.map((h, i, all) => hop(h, i, all.length)).join('')}
      </div>
      <p class="muted" id="range-note"></p></div>
    <div class="grid"><div class="panel"><div id="lat" data-test="latency-chart">${loadingBlock}</div></div>
      <div class="panel"><div id="occ">${loadingBlock}</div></div></div>
    <div class="grid"><div class="panel"><h2>Path history</h2><table><tbody>${f.path_history
      .map(
        (p) =>
          `<tr><td class="muted">${clock(p.since_ns)}</td><td>${p.path.map((h) => h.node_id).join(' → ')}</td></tr>`,
      )
      .join('')}</tbody></table></div>
    <div class="panel scroll"><h2>Events in the range <a class="muted" data-test="flow-events-link"
      href="${href('events', null, { flow: f.id, live: 0 })}">all of this flow's events →</a></h2>
      <table class="wrap" data-test="flow-events"><thead><tr><th>time</th><th>kind</th><th>where</th>
        <th>evidence</th></tr></thead>
      <tbody>${
        events
          .map(
            (e) => `<tr><td class="muted nowrap">${clock(e.time_ns)}</td><td>
              <span class="kind ${e.kind}">${e.kind}</span></td>
          <td class="nowrap">${esc(eventPlace(e))}</td><td>${esc(evidence(e))}</td></tr>`,
          )
          .join('') || emptyRow('none in the range', 4)
      }</tbody></table></div></div>`;
  // The store's per-interval series reaches back further than the samples kept in memory.
  const intervals = f.intervals ?? [];
  const stored = intervals.length > 1;
  let rows = (stored ? intervals : f.series).filter((s) => inRange(s.time_ns));
  if (!rows.length) {
    rows = stored ? intervals : f.series;
    document.getElementById('range-note').textContent =
      'No samples of this flow in the chosen range: the charts show all that is known of it.';
  }
  rows = [...rows].sort((a, b) => a.time_ns - b.time_ns);
  // The range, from the flow's first sample when it began later (its samples fill the chart).
  const first = rows.length ? rows[0].time_ns : r.since;
  const extent = rows.every((s) => inRange(s.time_ns))
    ? { since: Math.max(r.since, first - 1e9), until: r.until }
    : null;
  const times = rows.map((s) => s.time_ns / 1e9);
  const hops = f.path_detail.length;
  const key = (k) => (stored ? `${k}_max` : k);
  const per = (k) =>
    Array.from({ length: hops }, (_, i) => ({
      label: node(f.path_detail[i].node_id),
      values: rows.map((s) => s[key(k)]?.[i] ?? null),
    }));
  // Path changes: dashed lines at the times a new path was first seen (the first is no change).
  const marks = f.path_history.slice(1).map((p) => p.since_ns / 1e9);
  const e2e = stored
    ? { label: 'end to end (mean)', values: rows.map((s) => s.e2e_latency_avg) }
    : { label: 'end to end', values: rows.map((s) => s.e2e_latency) };
  const perWhat = stored ? ', maximum per interval' : '';
  const brush = (a, b) => ctx.brush(a, b);
  ctx.own(
    chart(document.getElementById('lat'), {
      title: `latency${perWhat} (dashed: path change; drag to zoom)`,
      yLabel: 'latency',
      unit: 'ns',
      times,
      series: [e2e, ...per('hop_latency')],
      marks,
      range: extent,
      onBrush: brush,
    }),
  );
  ctx.own(
    chart(document.getElementById('occ'), {
      title: `queue occupancy${perWhat}`,
      yLabel: 'occupancy',
      unit: 'cells',
      times,
      series: per('queue_occupancy'),
      marks,
      range: extent,
      onBrush: brush,
    }),
  );
}
