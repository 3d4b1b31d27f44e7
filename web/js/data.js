// Data shared by pages: the fabric model (nodes, links, tiers, hosts, per-port state over a
// range) and queue occupancy over a range (live samples and the store's per-interval maxima).

import { events, api, incidents, qs } from './api.js';
import { flowText, num } from './fmt.js';
import { sawTime, state } from './store.js';
import { nowNs } from './time.js';
import { learnTiers } from './topology.js';

/** Most flows read for the paths that place nodes in tiers. */
export const PATH_FLOWS = 1000;
/** Store queries of a range run in this many windows, at most this many rows each. */
const QUEUE_WINDOWS = 30;
const QUEUE_WINDOW_ROWS = 2000;
/** Windows that ended this long ago are written: their rows are kept (at most WINDOW_CACHE). */
const SETTLED_NS = 5e9;
const WINDOW_CACHE = 240;
const windowCache = new Map();

/** Most ongoing incidents read for the map (every kind keeps at most 256 ongoing). */
const ONGOING = 1000;

/** Events this recent mark their node (when there is no incident API to say what is ongoing). */
const RECENT_NS = 10e9;

/** Host addresses by the 'node/port' they entered the fabric at (learned, then kept per tab). */
const hosts = new Map();

/** Learns hosts from flows' first hops (`path_detail`): the source address entered the fabric at that port. */
function learnHosts(flows) {
  for (const f of flows) {
    const first = f.path_detail?.[0];
    if (!first || first.ingress_if == null) continue;
    const key = `${first.node_id}/${first.ingress_if}`;
    const list = hosts.get(key) || [];
    if (!list.includes(f.flow.src)) hosts.set(key, [...list, f.flow.src].sort());
  }
  return hosts;
}

/**
 * Queue occupancy over a range: Map 'node/port/queue' → [[t_ns, max]] from the store's
 * intervals (oldest first) and the live samples. `sampled` is true when a window held more rows
 * than read (long ranges: each window shows its first rows).
 */
export async function queueSeries(range, node) {
  const out = new Map();
  const add = (k, t, v) => {
    if (!out.has(k)) out.set(k, []);
    out.get(k).push([t, v]);
  };
  let sampled = false;
  let stored = true;
  // Windows on fixed boundaries (multiples of their length), so a relative range that moves on
  // reads again only the windows that are new or still being written.
  const span = Math.max(1e6, Math.round((range.until - range.since) / QUEUE_WINDOWS));
  const first = Math.floor(range.since / span) * span;
  const windows = [];
  for (let a = first; a < range.until; a += span) windows.push([a, a + span - 1]);
  const settled = nowNs() - SETTLED_NS;
  for (let i = 0; i < windows.length && stored; i += 4) {
    const part = windows.slice(i, i + 4).map(([a, b]) => {
      const key = `${node ?? ''}|${a}|${b}`;
      if (windowCache.has(key)) return windowCache.get(key);
      const q = api(`/api/history/queues${qs({ since: a, until: b, node, limit: QUEUE_WINDOW_ROWS })}`);
      if (b < settled) {
        windowCache.set(key, q);
        q.catch(() => windowCache.delete(key));
        if (windowCache.size > WINDOW_CACHE) windowCache.delete(windowCache.keys().next().value);
      }
      return q;
    });
    const pages = await Promise.all(part).catch((e) => {
      if (e.status !== 404) throw e;
      stored = false;
      return [];
    });
    for (const p of pages) {
      if (p.next) sampled = true;
      for (const r of p.queues) {
        if (r.time_ns >= range.since && r.time_ns <= range.until) {
          add(`${r.node_id}/${r.port}/${r.queue_id}`, r.time_ns, r.max_occupancy);
        }
      }
    }
  }
  // `intscope serve` keeps no live samples: the store's alone.
  const live = state.mode === 'fabric' ? [] : await api('/api/queues');
  for (const q of live) {
    if (node != null && q.node_id !== Number(node)) continue;
    sawTime(q.last_seen_ns);
    const k = `${q.node_id}/${q.port}/${q.queue_id}`;
    const lastStored = out.get(k)?.at(-1)?.[0] ?? 0;
    for (const [t, o] of q.series) if (t > lastStored && t >= range.since && t <= range.until) add(k, t, o);
    if (!out.has(k)) out.set(k, []);
  }
  return { series: out, live, sampled, stored };
}

/** The highest value of a series. */
export const peak = (s) => s.reduce((m, [, v]) => Math.max(m, v), 0);

/**
 * The fabric model over a range: nodes, links, tiers, hosts, per-port state and the worst
 * ongoing severity per node (from incidents, or when unavailable from the range's drop and
 * congestion events).
 */
export async function fabricModel(range, incidentList) {
  const [nodes, links, flows] = await Promise.all([
    api('/api/nodes'),
    api('/api/links'),
    api(`/api/flows${qs({ limit: PATH_FLOWS, sort: 'reports' })}`),
  ]);
  for (const n of nodes) sawTime(n.last_seen_ns);
  const tiers = learnTiers(
    nodes.map((n) => n.node_id),
    flows.flows.map((f) => f.path),
    links,
  );
  const hostMap = learnHosts(flows.flows);
  const { series, live } = await queueSeries(range);
  const ports = new Map();
  for (const n of nodes) {
    for (const p of n.ports) ports.set(`${n.node_id}/${p.port}`, { util: p.utilization, occ: null, drops: 0 });
  }
  for (const [k, s] of series) {
    const [n, p] = k.split('/');
    const e = ports.get(`${n}/${p}`) || { util: null, occ: null, drops: 0 };
    e.occ = Math.max(e.occ ?? 0, peak(s));
    ports.set(`${n}/${p}`, e);
  }
  const severity = new Map();
  // What is ongoing is read apart from the range's list: that list is the newest first and
  // bounded, so an outage older than many newer incidents would fall off it.
  const ongoing = incidentList ? await incidents({ state: 'ongoing', limit: ONGOING }) : [];
  const down = outages(ongoing || []);
  const order = ['info', 'warning', 'major', 'critical'];
  const worse = (n, sev) => {
    if (order.indexOf(sev) > order.indexOf(severity.get(n))) severity.set(n, sev);
  };
  if (incidentList) {
    for (const i of incidentList) {
      if (i.kind === 'drop' && i.place.node != null && i.place.port != null) {
        const e = ports.get(`${i.place.node}/${i.place.port}`);
        if (e) e.drops += i.counts.packets_dropped ?? i.counts.reports;
      }
    }
    for (const i of ongoing || []) if (i.place.node != null) worse(i.place.node, i.severity);
  } else {
    // No incident API: drops and congestion of the range's events; a node is marked while its
    // drops are recent (within RECENT_NS of the range's end), or while a queue whose congestion
    // started without an end (a microburst ends one too) still holds more than its threshold.
    const ev = await events('/api/events?limit=2000');
    const open = new Map();
    for (const e of [...ev].reverse()) {
      if (e.time_ns < range.since || e.time_ns > range.until || e.node_id == null) continue;
      if (e.kind === 'drop') {
        const p = ports.get(`${e.node_id}/${e.port}`);
        if (p) p.drops += 1;
        if (e.time_ns > range.until - RECENT_NS) worse(e.node_id, 'major');
      }
      const q = `${e.node_id}/${e.port}/${e.queue_id}`;
      if (e.kind === 'congestion-start') open.set(q, { node: e.node_id, threshold: e.evidence?.threshold ?? 0 });
      if (e.kind === 'congestion-end' || e.kind === 'microburst') open.delete(q);
    }
    const now = new Map(live.map((l) => [`${l.node_id}/${l.port}/${l.queue_id}`, l.occupancy]));
    for (const [q, o] of open) if ((now.get(q) ?? 0) >= o.threshold) worse(o.node, 'warning');
  }
  return { nodes, links, tiers, hosts: hostMap, ports, severity, down, flows: flows.flows, state };
}

/**
 * The links and nodes that flows left and have not come back to: ongoing path changes caused by
 * a link or a node (an incident's root or one of its symptoms). A link is keyed by both of its
 * ends ('node/port'), so both directions are drawn down. Values: {since, incident} (the outage's
 * start and the incident that holds it).
 */
export function outages(incidentList) {
  const links = new Map();
  const nodes = new Map();
  for (const i of incidentList) {
    if (i.state !== 'ongoing') continue;
    for (const o of [i, ...(i.symptoms || [])]) {
      if (o.kind !== 'path-change' || o.end_ns != null || o.place?.node == null) continue;
      const p = o.place;
      const what = { since: o.start_ns, incident: i.id };
      if (o.cause === 'node') nodes.set(p.node, what);
      if (o.cause !== 'link' || p.port == null) continue;
      links.set(`${p.node}/${p.port}`, what);
      if (p.peer_node != null && p.peer_port != null) links.set(`${p.peer_node}/${p.peer_port}`, what);
    }
  }
  return { links, nodes };
}

/** Sort keys of flow rows (the API's flow summaries). */
export const FLOW_KEYS = { p99: 'e2e_latency_p99', drops: 'drops', reports: 'reports', path_changes: 'path_changes' };
/** Most stored flow summaries read for a past range. */
const STORED = 1000;

/** Larger first by `key`, ties by p99, p50, reports. */
export const byFlowKey = (key) => (a, b) =>
  (b[key] ?? 0) - (a[key] ?? 0) ||
  (b.e2e_latency_p99 ?? 0) - (a.e2e_latency_p99 ?? 0) ||
  (b.e2e_latency_p50 ?? 0) - (a.e2e_latency_p50 ?? 0) ||
  b.reports - a.reports;

/** The stored flows of a past range that match the filters (the store has no text filter). */
export async function storedFlows(r, q, node, sort) {
  const d = await api(`/api/history/flows${qs({ since: r.since, until: r.until, limit: STORED })}`);
  const text = q.toLowerCase();
  const rows = d.flows.filter(
    (f) => (!text || flowText(f.flow).toLowerCase().includes(text)) && (!node || (f.path || []).includes(Number(node))),
  );
  rows.sort(byFlowKey(FLOW_KEYS[sort] || 'last_seen_ns'));
  const more = d.next ? ` (of the ${num(STORED)} seen last)` : '';
  const note = `${num(rows.length)} stored flows seen in the range${more}`;
  return { rows, note };
}
