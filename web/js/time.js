// Time ranges: relative ones that follow the data ("last 15 min", the default) and absolute ones
// (a brush on a chart, a shared URL). The URL carries `range=15m`, or `from` and `to` in ns.

import { state } from './store.js';

/** The picker's relative ranges, in seconds. */
export const RANGES = [
  ['5m', 300],
  ['15m', 900],
  ['1h', 3600],
  ['6h', 6 * 3600],
  ['24h', 24 * 3600],
];

export const DEFAULT_RANGE = '15m';

/**
 * "Now" for relative ranges: the newest switch time the console has seen, or the browser's
 * clock when that is later (a replayed capture's times are in its own past).
 */
export function nowNs() {
  const wall = Date.now() * 1e6;
  return state.latestNs && state.latestNs < wall - 3600e9 ? state.latestNs : wall;
}

/**
 * The range of URL parameters: `{since, until, live, label, seconds}` (ns). A relative range is
 * `live` (it follows the data and pages refresh); an absolute one is fixed.
 */
export function rangeOf(params) {
  const from = Number(params.get('from'));
  const to = Number(params.get('to'));
  if (from > 0 && to > from) {
    return { since: from, until: to, live: false, label: 'custom', seconds: (to - from) / 1e9 };
  }
  const key = params.get('range') || DEFAULT_RANGE;
  const secs = (RANGES.find(([k]) => k === key) || RANGES.find(([k]) => k === DEFAULT_RANGE))[1];
  const until = nowNs();
  return { since: until - secs * 1e9, until, live: true, label: key, seconds: secs };
}

/** URL parameters of an absolute range (the brush). */
export const absolute = (since, until) => ({ from: Math.round(since), to: Math.round(until), range: null });

/** Whether `t` (ns) lies within the range. */
export const within = (r, t) => t >= r.since && t <= r.until;
