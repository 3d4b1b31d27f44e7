// Formatting: escaping, times to the microsecond, durations and values in units that scale.

/** HTML-escapes a value. */
export const esc = (s) =>
  String(s ?? '').replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c],
  );

/** Node names by ID (from the collector's topology, `/api/names`); empty when none is known. */
let names = {};

/** Sets the node names (`{"<id>": "<name>"}`). */
export function setNames(byId) {
  names = byId && typeof byId === 'object' ? byId : {};
}

/** A node's name, or undefined. */
export const nodeName = (id) => (id == null ? undefined : names[id]);

/** A node as the operator knows it: `spine1 (101)` when named, else `node 101`. */
export const node = (id) => {
  const n = nodeName(id);
  return n ? `${n} (${id})` : `node ${id}`;
};

const NS_UNITS = [
  [1e9, 's'],
  [1e6, 'ms'],
  [1e3, 'µs'],
  [1, 'ns'],
];

/** The unit in which `maxNs` reads best: [divisor, suffix]. */
export function nsUnit(maxNs) {
  return NS_UNITS.find(([d]) => Math.abs(maxNs) >= d) || NS_UNITS[3];
}

/** A duration or latency in ns, in the unit that reads best (3 significant digits). */
export function ns(v) {
  if (v == null || Number.isNaN(v)) return '–';
  const [d, u] = nsUnit(v);
  return `${d === 1 ? Math.round(v) : +(v / d).toPrecision(3)} ${u}`;
}

/** A number with a thousands separator. */
export const num = (v) => (v == null ? '–' : Number(v).toLocaleString('en-US'));

/**
 * A count with its noun, in one number format and the right number: `1 drop`, `13,977 reports`,
 * `0 path changes`; `many` for nouns whose plural is not `one` + s.
 */
export const count = (v, one, many = `${one}s`) => (v == null ? '–' : `${num(v)} ${Number(v) === 1 ? one : many}`);

/** A fraction as a percentage. */
export const pct = (u) => (u == null ? '–' : `${(u * 100).toFixed(1)}%`);

const pad = (n, w = 2) => String(n).padStart(w, '0');

/** Wall-clock time of ns since the epoch, local, to the microsecond: `14:03:07.123456`. */
export function clock(t, digits = 6) {
  if (t == null) return '–';
  const d = new Date(Math.floor(t / 1e6));
  const frac = String(Math.floor(t / 1e3) % 1e6).padStart(6, '0');
  const hms = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return digits ? `${hms}.${frac.slice(0, digits)}` : hms;
}

/** Date and time to the microsecond (for times that may not be today). */
export function stamp(t) {
  if (t == null) return '–';
  const d = new Date(Math.floor(t / 1e6));
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(t)}`;
}

/** A span of time (ns): as `ns` up to two minutes, then in minutes, then in hours (`3 h`). */
export function span(d) {
  if (d == null || Number.isNaN(d)) return '–';
  if (Math.abs(d) < 120e9) return ns(d);
  return Math.abs(d) < 7200e9 ? `${+(d / 60e9).toPrecision(3)} min` : `${+(d / 3600e9).toPrecision(3)} h`;
}

/** A moment (ns) as `clock` when it falls on `now`'s day, else with its date (`stamp`). */
export function moment(t, now) {
  if (t == null) return '–';
  return new Date(t / 1e6).toDateString() === new Date(now / 1e6).toDateString() ? clock(t) : stamp(t);
}

/** How long something lasted (ns), where under a microsecond reads as such, not as `0 ns`. */
export const lasted = (d) => (d == null || Number.isNaN(d) ? '–' : d < 1e3 ? 'under 1 µs' : span(d));

/** How long ago `t` was relative to `now` (both ns): `12.3 s ago`, `just now` within 1 µs. */
export const ago = (t, now) => (t == null ? '–' : now - t < 1e3 ? 'just now' : `${span(now - t)} ago`);

export const proto = (p) => (p === 6 ? 'tcp' : p === 17 ? 'udp' : `ip/${p}`);

/** A flow's 5-tuple. */
export const flowText = (f) => (f ? `${f.src}:${f.src_port} → ${f.dst}:${f.dst_port} ${proto(f.proto)}` : '–');

/** An event's place. */
export const eventPlace = (e) =>
  [
    e.node_id != null ? node(e.node_id) : null,
    e.port != null ? `port ${e.port}` : null,
    e.queue_id != null ? `q${e.queue_id}` : null,
  ]
    .filter(Boolean)
    .join(' · ');

/**
 * An incident's place: node, port, queue, the link's far end, the reporter's hw_id:
 * `leaf1 (1) · port 3 → spine1 (101) port 2 · hw 7`.
 */
export function incidentPlace(p) {
  if (!p) return '–';
  const parts = [];
  if (p.node != null) parts.push(node(p.node));
  if (p.port != null) parts.push(`port ${p.port}`);
  if (p.queue != null) parts.push(`q${p.queue}`);
  // The far end continues the near one (a link), not another item of the list.
  const peer =
    p.peer_node != null ? `→ ${node(p.peer_node)}${p.peer_port != null ? ` port ${p.peer_port}` : ''}` : null;
  if (peer && parts.length) parts[parts.length - 1] += ` ${peer}`;
  else if (peer) parts.push(peer);
  if (p.hw_id != null) parts.push(`hw ${p.hw_id}`);
  return parts.join(' · ') || '–';
}

/** A peak value in its unit. */
export function peakText(peak) {
  if (!peak) return '–';
  const units = { occupancy: 'cell', reports: 'report', packets: 'packet', hops: 'hop', flows: 'flow' };
  if (peak.unit === 'nanoseconds') return ns(peak.value);
  return units[peak.unit] ? count(peak.value, units[peak.unit]) : `${num(peak.value)} ${peak.unit}`;
}

const culprits = (list) =>
  (list || [])
    .slice(0, 3)
    .map((c) => `${c.flow.src}→${c.flow.dst} ${(c.share * 100).toFixed(0)}%`)
    .join(', ');

/** One line of an event's evidence. */
export function evidence(e) {
  const v = e.evidence || {};
  const hops = (p) => (p || []).map((h) => h.node_id ?? h).join('→');
  switch (e.kind) {
    case 'path-change':
      return `${hops(v.old_path)} ⇒ ${hops(v.new_path)}`;
    case 'drop':
      return v.drop_reason_name || `reason ${v.drop_reason}`;
    case 'microburst':
    case 'congestion-end':
      return `${ns(v.duration_ns)}, max ${count(v.max_occupancy, 'cell')}; culprits: ${culprits(v.culprit_flows)}`;
    case 'congestion-start':
      return `occupancy ${num(v.queue_occupancy)} (threshold ${num(v.threshold)})`;
    case 'latency-anomaly':
      return `${ns(v.hop_latency)} vs baseline ${ns(v.baseline)} (×${v.factor})`;
    case 'lost-reports':
      return `${count(v.lost, 'report')} lost from hw ${v.hw_id}`;
    case 'non-int-hops':
      return `${count(v.non_int_hops, 'hop')} without INT (TTL ${v.ip_ttl})`;
    case 'hop-limit':
    case 'mtu-exceeded':
      return `path ${hops(v.path)}; nothing added after node ${v.last_recorded_node ?? '–'} port ${
        v.last_recorded_egress_port ?? '–'
      } (reported by ${v.reported_by})`;
    default:
      return JSON.stringify(v).slice(0, 160);
  }
}

/** Every event kind, as the API names them. */
export const EVENT_KINDS = [
  'path-change',
  'latency-anomaly',
  'drop',
  'congestion-start',
  'congestion-end',
  'microburst',
  'lost-reports',
  'hop-limit',
  'mtu-exceeded',
  'non-int-hops',
];

/** Every incident kind. */
export const INCIDENT_KINDS = [
  'congestion',
  'microburst',
  'latency',
  'drop',
  'report-loss',
  'path-change',
  'hop-limit',
  'mtu',
  'non-int-hops',
];

/** Severities, least first. */
export const SEVERITIES = ['info', 'warning', 'major', 'critical'];

/**
 * Orders incidents by what hurts most now: the ongoing ones first, most severe first (then the
 * newest); then the resolved ones, the most recently ended first (then the most severe).
 */
export const byHurt = (a, b) => {
  const ongoing = (i) => (i.state === 'ongoing' ? 0 : 1);
  const sev = (i) => SEVERITIES.indexOf(i.severity);
  const end = (i) => i.end_ns ?? i.last_update_ns ?? i.start_ns;
  if (ongoing(a) !== ongoing(b)) return ongoing(a) - ongoing(b);
  if (a.state === 'ongoing') return sev(b) - sev(a) || b.start_ns - a.start_ns;
  return end(b) - end(a) || sev(b) - sev(a);
};

/** A sortable table header: a link that sets `param` to `key` (the sort shown with an arrow). */
export const sortHeader = (label, key, current, extra = '') =>
  `<th class="sortable${current === key ? ' sorted' : ''}" data-sort="${key}" ${extra}>${label}${
    current === key ? ' ▾' : ''
  }</th>`;
