// The collector's JSON API. A collector served off loopback asks for its bearer token (401):
// asked once, kept for the tab.

import { set, state } from './store.js';

let token = sessionStorage.getItem('intscope-token') || '';

/** An HTTP error with its status and the API's message. */
export class ApiError extends Error {
  constructor(path, status, message) {
    super(`${path}: HTTP ${status}${message ? ` (${message})` : ''}`);
    this.status = status;
    this.apiMessage = message;
  }
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
export async function incidents({ since, until, state: st, kind, node, limit = 200 }) {
  if (state.incidents === 'unavailable') return null;
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
  const byId = new Map();
  if (st !== 'ongoing') {
    try {
      const stored = await pages('/api/history/incidents', { since, until, kind, node }, 'incidents', limit);
      for (const i of stored) if (!st || i.state === st) byId.set(i.id, i);
    } catch {
      // No store (404) or a busy one: the live list alone.
    }
  }
  for (const i of live) byId.set(i.id, i);
  return [...byId.values()].sort((a, b) => b.start_ns - a.start_ns || b.id - a.id);
}
