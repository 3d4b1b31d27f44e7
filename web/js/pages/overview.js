// Overview: what hurts now, ranked — incidents by severity (ongoing first), the hottest queues,
// the worst flows by p99 and by loss, the busiest links — each one click from its evidence.

import { events, api, incidentHref, incidents, qs } from '../api.js';
import { peak, queueSeries, storedFlows } from '../data.js';
import {
  ago,
  byHurt,
  clock,
  count,
  esc,
  flowText,
  incidentPlace,
  lasted,
  moment,
  node,
  ns,
  pct,
  peakText,
} from '../fmt.js';
import { emptyRow, errorRow, loadingRow } from '../states.js';
import { href, sawTime } from '../store.js';
import { within } from '../time.js';

const TOP = 5;
/** Occupancy counted as congested when ranking queues (the collector's default threshold). */
const CONGESTED = 1000;
/** Events of one queue this close in time are one episode (the detector's episodes split). */
const EPISODE_GAP_NS = 2e9;
/** Drops reported this recently are ongoing. */
const RECENT_DROP_NS = 10e9;

const sevBadge = (s) => `<span class="sev ${esc(s)}">${esc(s)}</span>`;

/** A place as a link to its evidence: a queue's heatmap row, else the node's flows. */
function placeLink(p) {
  const text = esc(incidentPlace(p));
  if (p.node != null && p.port != null && p.queue != null) {
    return `<a href="#/queues?focus=${p.node}/${p.port}/${p.queue}">${text}</a>`;
  }
  return p.node != null ? `<a href="#/flows?node=${p.node}">${text}</a>` : text;
}

const short = (f) => `${f.src}:${f.src_port} → ${f.dst}:${f.dst_port}`;

const share = (f) => (f.share != null ? ` <span class="muted">${Math.round(f.share * 100)}%</span>` : '');
const flowLink = (f) =>
  `<a data-test="hurt-flow" href="#/flow/${f.flow_id}" title="${esc(flowText(f.flow))}">${esc(short(f.flow))}</a>`;

const flowLinks = (flows, total) =>
  (flows || [])
    .slice(0, 3)
    .map((f) => flowLink(f) + share(f))
    .join('<br>') + (total > 3 ? `<br><span class="muted">+${total - 3} more</span>` : '');

/** One row of "what hurts now": an incident, or an episode pieced from events (same shape). */
function hurtRow(i, now, href) {
  const p = i.place;
  const end = i.end_ns ?? i.last_update_ns;
  const how =
    i.state === 'ongoing'
      ? `for ${lasted(Math.max(end, now) - i.start_ns)}, last update ${ago(i.last_update_ns, now)}`
      : `lasted ${lasted(end - i.start_ns)}, ended ${clock(end)}`;
  const since = `<span data-test="hurt-since" data-ns="${i.start_ns}">since ${moment(i.start_ns, now)}</span>
    <br><span class="muted">${how}</span>`;
  return `<tr data-test="hurt-row" class="clickable ${i.state}" data-kind="${esc(i.kind)}" data-node="${p.node ?? ''}"
      data-port="${p.port ?? ''}" data-queue="${p.queue ?? ''}" data-start-ns="${i.start_ns}" data-href="${href}">
    <td>${sevBadge(i.severity)}</td><td><a href="${href}">${esc(i.kind)}</a>${
      i.cause
        ? `<br>
      <span class="muted">${esc(i.cause)}</span>`
        : ''
    }
    </td><td data-test="hurt-place">${placeLink(p)}</td><td>${since}</td>
    <td><span class="state ${i.state}">${i.state}</span></td><td>${esc(peakText(i.peak))}</td>
    <td data-test="hurt-flows">${flowLinks(i.flows, i.counts?.flows ?? i.flows?.length ?? 0)}</td></tr>`;
}

/**
 * Episodes from the event log, for a collector without incidents: a congestion from its start
 * event to its end event (the end carries the flows that filled the queue), microbursts, drops
 * per place. Shaped like incidents so one table shows both.
 */
export function episodesFromEvents(events, range) {
  const out = [];
  const open = new Map();
  const last = new Map();
  const drops = new Map();
  // Flows of an episode: the union of what its events named, the largest share kept.
  const mergeFlows = (ep, list) => {
    for (const f of list) {
      const had = ep.flows.find((g) => g.flow_id === f.flow_id);
      if (!had) ep.flows.push({ ...f, samples: f.samples ?? 0 });
      else if ((f.share ?? 0) > (had.share ?? 0)) had.share = f.share;
    }
    ep.flows.sort((a, b) => (b.share ?? 0) - (a.share ?? 0));
    ep.counts = { ...ep.counts, flows: ep.flows.length };
  };
  for (const e of [...events].sort((a, b) => a.id - b.id)) {
    if (!within(range, e.time_ns)) continue;
    const place = { node: e.node_id, port: e.port, queue: e.queue_id };
    const key = `${e.node_id}/${e.port}/${e.queue_id}`;
    const flow = e.flow_id ? [{ flow: e.flow, flow_id: e.flow_id, share: null, samples: 1 }] : [];
    const v = e.evidence || {};
    if (e.kind === 'congestion-start') {
      // A queue congested again within EPISODE_GAP of its last end continues that episode.
      const prev = last.get(key);
      let ep = prev && prev.kind === 'congestion' && e.time_ns - prev.end_ns < EPISODE_GAP_NS ? prev : null;
      if (!ep) {
        ep = { kind: 'congestion', place, severity: 'warning', start_ns: e.time_ns, flows: [], counts: {} };
        ep.threshold = v.threshold;
        out.push(ep);
      }
      Object.assign(ep, { state: 'ongoing', end_ns: null, last_update_ns: e.time_ns });
      ep.peak = { value: Math.max(ep.peak?.value ?? 0, v.queue_occupancy), unit: 'occupancy', at_ns: e.time_ns };
      mergeFlows(ep, flow);
      open.set(key, ep);
      last.set(key, ep);
    } else if (e.kind === 'congestion-end' || e.kind === 'microburst') {
      // A microburst is a congestion that ended within the microburst window: it closes the
      // episode its start event opened.
      let ep = open.get(key);
      if (ep && e.kind === 'microburst' && ep.start_ns >= e.time_ns - v.duration_ns - EPISODE_GAP_NS / 10) {
        Object.assign(ep, { kind: 'microburst', severity: 'info' });
      }
      if (!ep) {
        const kind = e.kind === 'microburst' ? 'microburst' : 'congestion';
        ep = { kind, place, severity: 'info', flows: [], counts: {}, start_ns: e.time_ns - v.duration_ns };
        out.push(ep);
      }
      open.delete(key);
      last.set(key, ep);
      Object.assign(ep, { state: 'resolved', end_ns: e.time_ns, last_update_ns: e.time_ns });
      if (v.max_occupancy > (ep.peak?.value ?? 0))
        ep.peak = { value: v.max_occupancy, unit: 'occupancy', at_ns: e.time_ns };
      mergeFlows(
        ep,
        (v.culprit_flows || []).map((c) => ({ ...c, samples: 0 })),
      );
    } else if (e.kind === 'drop') {
      const k = `${e.node_id}/${e.port}`;
      let ep = drops.get(k);
      if (!ep) {
        ep = {
          kind: 'drop',
          cause: e.evidence.drop_reason_name,
          place: { node: e.node_id, port: e.port },
          state: 'resolved',
          severity: 'major',
          start_ns: e.time_ns,
          flows: [],
          counts: { flows: 0, reports: 0 },
        };
        drops.set(k, ep);
        out.push(ep);
      }
      ep.last_update_ns = e.time_ns;
      ep.end_ns = e.time_ns;
      ep.counts.reports += 1;
      ep.peak = { value: ep.counts.reports, unit: 'reports', at_ns: e.time_ns };
      if (e.flow_id && !ep.flows.some((f) => f.flow_id === e.flow_id)) ep.flows.push(flow[0]);
      ep.counts.flows = ep.flows.length;
    }
  }
  // A congestion that ended less than EPISODE_GAP ago may yet continue: it counts as ongoing.
  for (const ep of out) {
    if (ep.kind === 'congestion' && ep.end_ns > range.until - EPISODE_GAP_NS) {
      Object.assign(ep, { state: 'ongoing', end_ns: null });
    }
  }
  // Drops still reported lately are ongoing (no end event says otherwise).
  for (const ep of drops.values()) {
    if (ep.last_update_ns > range.until - RECENT_DROP_NS) Object.assign(ep, { state: 'ongoing', end_ns: null });
  }
  return out;
}

/** The hottest queues' rows: by the highest occupancy, then by how many samples were congested
 * (equal peaks: the buffer's size). */
function hotQueues(queues) {
  return (
    [...queues.series]
      .map(([k, s]) => [k, peak(s), s.filter(([, v]) => v >= CONGESTED).length])
      .filter(([, v]) => v > 0)
      .sort((a, b) => b[1] - a[1] || b[2] - a[2])
      .slice(0, TOP)
      .map(([k, v]) => {
        const [n, p, q] = k.split('/');
        return `<tr class="clickable" data-href="#/queues?focus=${k}" data-test="hot-queue" data-queue="${k}">
          <td><a href="#/queues?focus=${k}">${esc(node(n))} · port ${p} · q${q}</a></td>
            <td class="num">${count(v, 'cell')}</td></tr>`;
      })
      .join('') || emptyRow('all queues empty in the range')
  );
}

/** The busiest links' rows, by Tx utilization. */
function busyLinks(links) {
  return (
    [...links]
      .sort((a, b) => (b.utilization ?? 0) - (a.utilization ?? 0))
      .slice(0, TOP)
      .map(
        (l) => `<tr class="clickable" data-href="#/fabric" data-test="busy-link"><td>
            <a href="#/fabric">${esc(node(l.from_node))}:${l.from_port} →
              ${esc(node(l.to_node))}:${l.to_port}</a></td>
        <td class="num">${pct(l.utilization)}</td></tr>`,
      )
      .join('') || emptyRow('no links seen')
  );
}

export async function render(ctx) {
  ctx.main.innerHTML = `<div class="panel" data-test="hurts"><h2>What hurts now <span class="muted" id="hurt-note">
    </span></h2>
    <table class="wrap"><thead><tr><th>severity</th><th>what</th><th>where</th><th>since</th><th>state</th><th>peak</th>
    <th>flows (share)</th></tr></thead><tbody id="hurts">${loadingRow(7)}</tbody></table></div>
    <div class="grid">
      <div class="panel"><h2>Hottest queues <span class="muted">highest occupancy in the range</span></h2>
        <table><tbody id="hot-queues" data-test="hot-queues">${loadingRow()}</tbody></table></div>
      <div class="panel"><h2>Worst flows by e2e p99</h2><table>
        <tbody id="worst-p99" data-test="worst-p99">${loadingRow()}</tbody>
        </table></div>
      <div class="panel"><h2>Flows losing packets</h2><table>
        <tbody id="worst-loss" data-test="worst-loss">${loadingRow()}</tbody>
        </table></div>
      <div class="panel"><h2>Busiest links <span class="muted">Tx utilization</span></h2>
        <table><tbody id="busy-links" data-test="busy-links">${loadingRow()}</tbody></table></div>
    </div>`;
  const $ = (id) => document.getElementById(id);
  ctx.main.onclick = (e) => {
    const row = e.target.closest('tr[data-href]');
    if (row && !e.target.closest('a')) location.hash = row.dataset.href;
  };
  /** The rows of "what hurts now": the range's incidents, or episodes pieced from the events. */
  const hurts = async (r) => {
    const list = await incidents({ since: r.since, until: r.until });
    let rows;
    if (list) {
      $('hurt-note').textContent = '';
      rows = list
        .filter((i) => i.start_ns <= r.until && (i.state === 'ongoing' || (i.end_ns ?? i.last_update_ns) >= r.since))
        .sort(byHurt)
        .slice(0, 12)
        .map((i) => hurtRow(i, r.until, incidentHref(i)));
    } else {
      $('hurt-note').innerHTML =
        '· <span data-test="incidents-unavailable">incidents unavailable</span>: episodes pieced from the events';
      const ev = await events('/api/events?limit=2000');
      // A congestion whose end event never came is over once its queue is below its threshold.
      const queues = await api('/api/queues');
      const occ = new Map(queues.map((q) => [`${q.node_id}/${q.port}/${q.queue_id}`, q.occupancy]));
      const over = (ep) => {
        const q = `${ep.place.node}/${ep.place.port}/${ep.place.queue}`;
        const calm = ep.kind === 'congestion' && ep.state === 'ongoing' && (occ.get(q) ?? 0) < (ep.threshold ?? 0);
        if (calm && ep.last_update_ns < r.until - EPISODE_GAP_NS) {
          Object.assign(ep, { state: 'resolved', end_ns: ep.last_update_ns });
        }
        return ep;
      };
      rows = episodesFromEvents(ev, r)
        .map(over)
        .sort(byHurt)
        .slice(0, 12)
        .map((i) =>
          hurtRow(
            i,
            r.until,
            `#/events?node=${i.place.node ?? ''}&kind=${i.kind === 'congestion' ? 'congestion-start' : i.kind}`,
          ),
        );
    }
    return rows.join('') || emptyRow('nothing hurts in this range', 7);
  };

  await ctx.every(3000, async () => {
    const r = ctx.range;
    // A live range: the live flows; a past one: the store's summaries of the flows seen in it.
    const worst = (sort) =>
      r.live
        ? api(`/api/flows${qs({ sort, limit: TOP })}`).then((d) => d.flows)
        : storedFlows(r, '', '', sort).then((d) => d.rows.slice(0, TOP));
    // A stored flow has no live page: its link finds it among the range's stored flows.
    const flowHref = (f) =>
      f.id != null ? `#/flow/${f.id}` : href('flows', null, { q: f.flow.src, from: r.since, to: r.until });
    const flowRow = (f, v) => `<tr class="clickable" data-href="${flowHref(f)}" data-test="overview-flow">
      <td><a href="${flowHref(f)}">${esc(flowText(f.flow))}</a></td><td class="num">${v}</td></tr>`;
    // Each panel from its own answer: one that fails before it ever drew says so in its place,
    // the others still draw; one that drew before keeps what it shows, and the status line says
    // what failed (the first failure is thrown for it).
    const failed = [];
    const fill = async (id, answer, draw) => {
      let html;
      try {
        html = draw(await answer);
      } catch (e) {
        const drawn = !$(id).querySelector('[data-test="panel-loading"], [data-test="panel-error"]');
        if (drawn) failed.push(e);
        else html = errorRow(e, id === 'hurts' ? 7 : 1);
      }
      if (ctx.alive && html != null) $(id).innerHTML = html;
    };
    await Promise.all([
      fill('hurts', hurts(r), (html) => html),
      fill('worst-p99', worst('p99'), (flows) => {
        for (const f of flows) sawTime(f.last_seen_ns);
        return flows.map((f) => flowRow(f, ns(f.e2e_latency_p99))).join('') || emptyRow('no flows');
      }),
      fill(
        'worst-loss',
        worst('drops'),
        (flows) =>
          flows
            .filter((f) => f.drops > 0)
            .map((f) => flowRow(f, count(f.drops, 'drop')))
            .join('') || emptyRow('no drops'),
      ),
      fill('busy-links', api('/api/links'), busyLinks),
      fill('hot-queues', queueSeries(r), hotQueues),
    ]);
    if (failed.length) throw failed[0];
  });
}
