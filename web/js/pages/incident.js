// One incident: what, where and since when; its timeline (start and end with their
// uncertainty, the peak), its place on the map, the flows involved, the fault's other symptoms,
// the queue's occupancy around it, the evidence and the events at the place meanwhile.

import { events, incidentById, incidentOnCollectorClock, incidents, measureSkew, onSwitchClock, qs } from '../api.js';
import { chart } from '../chart.js';
import { fabricModel, queueSeries } from '../data.js';
import {
  clock,
  esc,
  eventPlace,
  evidence,
  flowText,
  incidentPlace,
  lasted,
  node,
  ns,
  num,
  peakText,
  stamp,
} from '../fmt.js';
import { emptyRow, emptySvg, loadingBlock, loadingRow, loadingSvg } from '../states.js';
import { state } from '../store.js';
import { nowNs } from '../time.js';
import { LEGEND, drawMap } from '../topology.js';

/** The timeline as SVG: the incident's span, the uncertainty before its start and its end, the peak. */
function timeline(i, w) {
  const end = i.end_ns ?? i.last_update_ns;
  const t0 = i.start_ns - Math.max(i.start_uncertainty_ns, (end - i.start_ns) * 0.1, 1e6);
  const t1 = end + Math.max((end - i.start_ns) * 0.1, 1e6);
  const x = (t) => 10 + ((t - t0) / (t1 - t0)) * (w - 20);
  const bar = (a, b, cls) =>
    `<rect x="${x(a)}" y="20" width="${Math.max(1, x(b) - x(a))}" height="18" class="${cls}"/>`;
  let s = bar(i.start_ns - i.start_uncertainty_ns, i.start_ns, 'unc');
  s += bar(i.start_ns, end, `span ${i.state}`);
  if (i.end_ns != null) s += bar(i.end_ns - i.end_uncertainty_ns, i.end_ns, 'unc');
  if (i.peak) s += `<line x1="${x(i.peak.at_ns)}" x2="${x(i.peak.at_ns)}" y1="12" y2="46" class="peak"/>`;
  const label = (t, text, anchor) =>
    `<text x="${x(t)}" y="62" text-anchor="${anchor}" font-size="11">${esc(text)}</text>`;
  s += label(i.start_ns, `start ${clock(i.start_ns)}`, 'start');
  s += label(end, `${i.end_ns != null ? 'end' : 'last update'} ${clock(end)}`, 'end');
  if (i.peak) s += `<text x="${x(i.peak.at_ns)}" y="10" text-anchor="middle" font-size="11">peak</text>`;
  return `<svg width="100%" height="70" data-test="incident-timeline">${s}</svg>`;
}

/** The events at `node` around an incident: the live log's, or the store's under `serve`. */
async function placeLog(node, around) {
  if (state.mode !== 'fabric') return events(`/api/events?node=${node}&limit=1000`);
  const [since, until] = [onSwitchClock(around.since), onSwitchClock(around.until)];
  return (await events(`/api/history/events${qs({ node, since, until, limit: 1000 })}`, 'events')).events;
}

/** A flow of the incident: a link to its page where there is one (a collector's live flows). */
const flowCell = (f) =>
  state.mode === 'fabric' ? esc(flowText(f.flow)) : `<a href="#/flow/${f.flow_id}">${esc(flowText(f.flow))}</a>`;

export async function render(ctx) {
  let i;
  try {
    const at = Number(ctx.params.get('at'));
    const near = Number(ctx.params.get('near'));
    const [found] = await Promise.all([incidentById(ctx.arg, { at, near }), measureSkew()]);
    i = incidentOnCollectorClock(found);
  } catch (e) {
    if (e.status !== 404 && e.status !== 400) throw e;
    // A 404 is either no such incident or no incident API at all: the list tells which.
    if (state.incidents === 'unknown') await incidents({ limit: 1 }).catch(() => null);
    const none = state.incidents === 'unavailable';
    const why = state.mode === 'fabric' && e.apiMessage ? ` (${esc(e.apiMessage)})` : '';
    if (!ctx.alive) return;
    ctx.main.innerHTML = `<div class="panel" data-test="not-found">
      <h2>${none ? 'Incidents unavailable' : 'No such incident'}</h2>
      <p>${none ? 'This collector serves no incident API.' : `No incident with ID <b>${esc(ctx.arg)}</b>${why}.`}
      See <a href="#/incidents">the incidents</a> or <a href="#/events">the events</a>.</p></div>`;
    return;
  }
  if (!ctx.alive) return;
  const p = i.place;
  const end = i.end_ns ?? i.last_update_ns;
  // `intscope serve`: the shared store's incident, without a collector's live state.
  const shared = state.mode === 'fabric';
  const fact = (k, v) => `<tr><th>${k}</th><td>${v}</td></tr>`;
  const unc = (u) => (u ? ` (within ${ns(u)} before)` : '');
  // The switch's own time beside the collector's, where the two clocks differ.
  const own =
    i.switch_start_ns != null
      ? fact('start, switch clock', `<span data-test="incident-switch-start">${stamp(i.switch_start_ns)}</span>`)
      : '';
  // An ongoing incident lasts until now (an outage sends no updates while it lasts); the shared
  // store knows it as of its last stored update (its collector may have stopped since).
  const lasting =
    i.state !== 'ongoing'
      ? lasted(end - i.start_ns)
      : shared
        ? `${lasted(end - i.start_ns)} by its last stored update`
        : `${lasted(Math.max(end, nowNs()) - i.start_ns)} so far`;
  const cause = i.cause ? ` · ${esc(i.cause)}` : '';
  ctx.main.innerHTML = `<div class="panel" data-test="incident-detail" data-kind="${esc(i.kind)}">
      <h2><span class="sev ${esc(i.severity)}">${esc(i.severity)}</span> ${esc(i.kind)}${cause}
        at <span data-test="incident-place">${esc(incidentPlace(p))}</span>
        <span class="state ${i.state}">${i.state}</span></h2>
      <div id="timeline"></div>
      <div class="grid"><table class="facts"><tbody>
        ${fact('start', `<span data-test="incident-start">${stamp(i.start_ns)}</span>${unc(i.start_uncertainty_ns)}`)}
        ${own}
        ${i.end_ns != null ? fact('end', `${stamp(end)}${unc(i.end_uncertainty_ns)}`) : fact('last update', stamp(end))}
        ${fact('duration', lasting)}
        ${fact('peak', i.peak ? `${esc(peakText(i.peak))} at ${clock(i.peak.at_ns)}` : '–')}
        ${fact('threshold', i.threshold != null ? esc(peakText({ ...i.peak, value: i.threshold })) : '–')}
        ${fact('baseline', i.baseline != null ? esc(peakText({ ...i.peak, value: i.baseline })) : '–')}
      </tbody></table><table class="facts"><tbody>
        ${fact('samples', num(i.counts.samples))}${fact('reports', num(i.counts.reports))}
        ${fact('packets dropped', num(i.counts.packets_dropped))}${fact('reports lost', num(i.counts.reports_lost))}
        ${fact('flows', num(i.counts.flows))}${fact('updates', num(i.updates))}
        ${fact('received by the collector', i.received_ns != null ? stamp(i.received_ns) : '–')}
      </tbody></table></div></div>
    <div class="grid"><div class="panel"><h2>Place on the map</h2><svg id="map" width="100%" height="300"
      data-test="incident-map">${loadingSvg}</svg>${shared ? '' : LEGEND}</div>
      <div class="panel scroll">
        <h2>Flows involved <span class="muted">(${num(i.counts.flows)}, the most involved first)</span></h2>
      <table data-test="incident-flows"><thead><tr><th>flow</th><th>share</th><th>samples</th></tr></thead><tbody>${
        i.flows
          .map(
            (f) => `<tr data-test="incident-flow"><td>${flowCell(f)}</td>
          <td class="num">${f.share != null ? `${(f.share * 100).toFixed(1)}%` : '–'}</td>
            <td class="num">${num(f.samples)}</td></tr>`,
          )
          .join('') || emptyRow('none listed', 3)
      }</tbody></table></div></div>
    <div class="panel scroll"><h2>Symptoms <span class="muted">of the same fault, besides the root cause above</span>
      </h2><table data-test="incident-symptoms"><thead><tr><th>kind</th><th>place</th><th>cause</th><th>start</th>
      <th>end</th><th>samples</th><th>flows</th><th>peak</th></tr></thead><tbody>${
        (i.symptoms || [])
          .map(
            (s) => `<tr data-test="incident-symptom"><td>${esc(s.kind)}</td><td class="nowrap">${esc(
              incidentPlace(s.place),
            )}</td><td>${esc(s.cause ?? '–')}</td><td class="nowrap">${clock(s.start_ns)}</td>
            <td class="nowrap">${s.end_ns != null ? clock(s.end_ns) : i.state === 'ongoing' ? 'ongoing' : '–'}</td>
            <td class="num">${num(s.samples)}</td><td class="num">${num(s.flows)}</td>
            <td class="num">${esc(peakText(s.peak))}</td></tr>`,
          )
          .join('') || emptyRow('none: the root cause alone', 8)
      }</tbody></table></div>
    <div class="grid"><div class="panel"><div id="occ">${loadingBlock}</div></div>
      <div class="panel scroll"><h2>Evidence <span class="muted">the first, in full</span></h2>
      <pre data-test="incident-evidence">${esc(JSON.stringify(i.evidence, null, 1) ?? '–')}</pre></div></div>
    <div class="panel scroll"><h2>Events at the place meanwhile</h2><table class="wrap">
      <tbody id="evs">${loadingRow(4)}</tbody>
      </table></div>`;
  const $ = (id) => document.getElementById(id);
  $('timeline').innerHTML = timeline(i, $('timeline').clientWidth || 1000);
  // Around the incident: a tenth of its length (at least a second) either side.
  const pad = Math.max((end - i.start_ns) / 10, 1e9);
  const around = { since: i.start_ns - pad, until: end + pad, live: false };
  const [model, queues, placeEvents] = await Promise.all([
    shared ? null : fabricModel(ctx.range, await incidents({ since: ctx.range.since, until: ctx.range.until })),
    p.node != null && p.port != null ? queueSeries(around, p.node) : null,
    p.node != null ? placeLog(p.node, around) : [],
  ]);
  if (!ctx.alive) return;
  const svg = $('map');
  if (model) {
    const { svg: content, height } = drawMap(svg.clientWidth || 600, { ...model, highlight: p });
    svg.setAttribute('height', height);
    svg.innerHTML = content;
  } else {
    // The map is learned from a collector's live state (nodes, links), which the store lacks.
    svg.innerHTML = emptySvg("the map is each collector's: open it in that collector's console");
    svg.setAttribute('height', 60);
  }
  $('evs').innerHTML =
    placeEvents
      .filter((e) => e.time_ns >= around.since && e.time_ns <= around.until && (p.port == null || e.port === p.port))
      .slice(0, 200)
      .map(
        (e) => `<tr><td class="muted nowrap">${clock(e.time_ns)}</td><td><span class="kind ${e.kind}">${e.kind}</span>
          </td>
        <td class="nowrap">${esc(eventPlace(e))}</td><td>${esc(evidence(e))}</td></tr>`,
      )
      .join('') || emptyRow(shared ? 'none stored' : 'none in the live log');
  if (queues) {
    const rows = [...queues.series].filter(
      ([k]) => k.startsWith(`${p.node}/${p.port}/`) && (p.queue == null || k.endsWith(`/${p.queue}`)),
    );
    const times = [...new Set(rows.flatMap(([, s]) => s.map(([t]) => t)))].sort((a, b) => a - b);
    const series = rows.map(([k, s]) => {
      const m = new Map(s);
      return { label: k, values: times.map((t) => m.get(t) ?? null) };
    });
    ctx.own(
      chart($('occ'), {
        title: `queue occupancy at ${node(p.node)} port ${p.port}`,
        yLabel: 'occupancy',
        unit: 'cells',
        times: times.map((t) => t / 1e9),
        series,
        range: around,
        marks: [i.start_ns / 1e9, end / 1e9],
        empty: `no samples of this queue from ${clock(around.since, 0)} to ${clock(around.until, 0)}`,
      }),
    );
  } else {
    $('occ').innerHTML = '<p class="muted">no queue at this place</p>';
  }
}
