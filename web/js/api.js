// The collector's JSON API. A collector served off loopback asks for its bearer token (401):
// asked once, kept for the tab.

import { href, set, state } from './store.js';

let token = sessionStorage.getItem('intscope-token') || '';

/** An HTTP error with its status and the API's message. */
export class ApiError extends Error {
  constructor(path, status, message) {
    super(`${path}: HTTP ${status}${message ? ` (${message})` : ''}`);
    this.status = status;
    this.apiMessage = message;
  }
}

/**
 * Two clocks: events and incidents carry the switches' time, the rest (queue samples, flows'
 * last seen, the range picker) the collector's. With synchronized switches they agree; when they
 * differ by more than SKEW_MIN_NS (a simulator's clock starting at zero, a switch without PTP),
 * switch times are shifted onto the collector's clock by the median difference between events'
 * receive and switch times, so one range and one time axis hold both. The original is kept as
 * `switch_ns` (`switch_start_ns` for incidents).
 */
const SKEW_MIN_NS = 1e9;
/** How often the difference is measured again (it drifts when a switch's clock does). */
const SKEW_EVERY_MS = 10000;
let skewAt = 0;

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The shift onto the collector's clock (0 when the clocks agree). */
export const shift = () => (Math.abs(state.skewNs) > SKEW_MIN_NS ? state.skewNs : 0);

/** A time of the collector's clock on the switches' (for queries; never before zero). */
export const onSwitchClock = (t) => Math.max(0, Math.round(t - shift()));

/** Learns the clocks' difference from events (those that carry their receive time). */
function learnSkew(list) {
  // `intscope serve` answers /api/events with a page ({events, next}), a collector with a list.
  const rows = Array.isArray(list) ? list : list?.events || [];
  const xs = rows.filter((e) => e.received_ns != null && e.time_ns != null).map((e) => e.received_ns - e.time_ns);
  if (!xs.length) return;
  state.skewNs = median(xs);
  state.skewKnown = true;
}

/** Measures the clocks' difference now and then, from the newest events (or incidents). */
export async function measureSkew() {
  if (Date.now() - skewAt < SKEW_EVERY_MS) return;
  skewAt = Date.now();
  const ev = await api('/api/events?limit=100').catch(() => []);
  learnSkew(ev);
  // `intscope serve` answers a page of stored events, which keep no receive time.
  const rows = Array.isArray(ev) ? ev : ev?.events || [];
  if (!rows.some((e) => e.received_ns != null) && state.incidents !== 'unavailable') {
    const d = await api('/api/incidents?limit=20').catch(() => ({ incidents: [] }));
    learnSkew((d.incidents || []).map((i) => ({ received_ns: i.received_ns, time_ns: i.start_ns })));
  }
}

/**
 * Events on the collector's clock: each at its own receive time when it has one (a switch clock
 * that drifts, or a simulator that lags, makes any one difference wrong for older events), else
 * shifted by the median.
 */
export function onCollectorClock(list) {
  learnSkew(list);
  const s = shift();
  return s ? list.map((e) => ({ ...e, switch_ns: e.time_ns, time_ns: e.received_ns ?? e.time_ns + s })) : list;
}

/** GETs an event list (`/api/events...`, or `key` of a history page) on the collector's clock. */
export async function events(path, key) {
  await measureSkew();
  const d = await api(path);
  if (!key) return onCollectorClock(d);
  return { ...d, [key]: onCollectorClock(d[key] || []) };
}

/**
 * An incident on the collector's clock: shifted by its own receive time's difference when it has
 * one (placed where the collector saw it begin), else by the median. Its own difference alone
 * tells the clocks apart before any median is known (a page opened the moment it began).
 */
export function incidentOnCollectorClock(i) {
  const s = shift();
  const own = i.received_ns != null ? i.received_ns - i.start_ns : null;
  let d = s;
  // With the median measured and the clocks agreeing, a late report is no clock difference.
  const alone = !state.skewKnown && own != null && Math.abs(own) > SKEW_MIN_NS;
  if (own != null && ((s && Math.abs(own - s) < 3600e9) || alone)) d = own;
  if (!d) return i;
  const t = (v) => (v == null ? v : v + d);
  const symptoms = (i.symptoms || []).map((m) => ({
    ...m,
    start_ns: t(m.start_ns),
    last_update_ns: t(m.last_update_ns),
    end_ns: t(m.end_ns),
  }));
  return {
    ...i,
    switch_start_ns: i.start_ns,
    start_ns: t(i.start_ns),
    last_update_ns: t(i.last_update_ns),
    end_ns: t(i.end_ns),
    peak: i.peak ? { ...i.peak, at_ns: t(i.peak.at_ns) } : i.peak,
    ...(i.symptoms ? { symptoms } : {}),
  };
}

/**
 * The route of incident `id`'s page. `intscope serve` holds the incidents of every collector,
 * whose IDs are each collector's own: there the link also carries `when` (switch clock, ns), the
 * incident's start `{at}` or the time of one of its events `{near}` ([`incidentById`]).
 */
export const incidentRoute = (id, when) => href('incident', id, state.mode === 'fabric' ? when : null);

/** The route of incident `i`'s page ([`incidentRoute`], by its start). */
export const incidentHref = (i) => incidentRoute(i.id, { at: i.switch_start_ns ?? i.start_ns });

/** Most incidents around an instant read to find one by ID and start in the shared store. */
const AROUND_AT = 1000;

/**
 * An incident by ID: the collector's `/api/incidents/ID`; under `intscope serve`, the stored
 * incident of that ID that started at `at` (switch clock, ns; within a microsecond, as a URL's
 * number may have lost the last digits), or else the one of that ID that lasted over `near` (an
 * event of it). Throws an ApiError 404 when there is none.
 */
export async function incidentById(id, { at, near } = {}) {
  if (state.mode !== 'fabric') return api(`/api/incidents/${encodeURIComponent(id)}`);
  const path = `/api/incidents/${id}`;
  const t = at > 0 ? at : near;
  if (!(t > 0)) throw new ApiError(path, 404, 'the shared store finds an incident by its ID and its start (at=)');
  const d = await api(`/api/incidents${qs({ since: Math.max(0, t - 1e6), until: t + 1e6, limit: AROUND_AT })}`);
  const same = (d.incidents || []).filter((i) => String(i.id) === String(id));
  const found = at > 0 ? same.find((i) => Math.abs(i.start_ns - at) < 1e3) : same[0];
  if (!found) throw new ApiError(path, 404, 'no such incident in the shared store');
  return found;
}

/** GETs `path` as JSON; throws ApiError on a non-2xx answer. */
export async function api(path) {
  const opts = () => (token ? { headers: { Authorization: `Bearer ${token}` } } : {});
  let r = await fetch(path, opts());
  if (r.status === 401) {
    token = (window.prompt('This collector needs its API token:') || '').trim();
    sessionStorage.setItem('intscope-token', token);
    r = await fetch(path, opts());
  }
  if (!r.ok) {
    let message = '';
    try {
      message = (await r.json()).error || '';
    } catch {
      // A body that is not JSON: the status says enough.
    }
    throw new ApiError(path, r.status, message);
  }
  return r.json();
}

/** The URL of the live event stream (EventSource cannot send headers: the token goes in the URL). */
export function streamUrl(query) {
  const t = token ? `&access_token=${encodeURIComponent(token)}` : '';
  return `/api/events/stream?${query}${t}`;
}

/** `?a=1&b=2` from an object, leaving out null and empty values. */
export function qs(o) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v != null && v !== '') p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : '';
}

/** Page size of incident queries (a cursor fetches the rest). */
const INCIDENT_PAGE = 100;

/** Up to `limit` rows of a list endpoint (`{<key>: [...], next}`), following its cursor. */
async function pages(path, params, key, limit) {
  const out = [];
  let cursor = null;
  do {
    const d = await api(`${path}${qs({ ...params, limit: Math.min(INCIDENT_PAGE, limit - out.length), cursor })}`);
    out.push(...(d[key] || []));
    cursor = d.next;
  } while (cursor && out.length < limit);
  return out;
}

/**
 * Incidents of a range, newest first: the live list and the store's, merged by ID (the live copy
 * wins). Returns null when this collector has no incident API (404 on the list), which pages show
 * as "incidents unavailable".
 */
export async function incidents({ since: from, until: to, state: st, kind, node, limit = 200 }) {
  if (state.incidents === 'unavailable') return null;
  await measureSkew();
  // The range on the switches' clock.
  const since = from == null ? from : onSwitchClock(from);
  const until = to == null ? to : onSwitchClock(to);
  let live;
  try {
    live = await pages('/api/incidents', { state: st, kind, node, since, until }, 'incidents', limit);
    if (state.incidents !== 'available') set({ incidents: 'available' });
  } catch (e) {
    if (e.status === 404) {
      set({ incidents: 'unavailable' });
      return null;
    }
    throw e;
  }
  // `intscope serve` answers the store on both routes, and its IDs are each collector's: keyed by
  // ID and start there.
  const shared = state.mode === 'fabric';
  const key = (i) => (shared ? `${i.id}/${i.start_ns}` : i.id);
  const byId = new Map();
  if (st !== 'ongoing' && !shared) {
    try {
      const stored = await pages('/api/history/incidents', { since, until, kind, node }, 'incidents', limit);
      for (const i of stored) if (!st || i.state === st) byId.set(key(i), i);
    } catch {
      // No store (404) or a busy one: the live list alone.
    }
  }
  for (const i of live) byId.set(key(i), i);
  return [...byId.values()].map(incidentOnCollectorClock).sort((a, b) => b.start_ns - a.start_ns || b.id - a.id);
}
