// The console's state in one place: the route (page, argument, URL parameters), what is known
// about the collector (incident API present, newest data time) and subscribers to changes.
// Pages read it and change it only through `set` and `setParams`, so the URL stays the source of
// truth for what is shown: a copied URL shows the same view.

const listeners = new Set();

/** The state. `incidents`: 'unknown' until probed, then 'available' or 'unavailable'. */
export const state = {
  page: 'overview',
  arg: null,
  params: new URLSearchParams(),
  incidents: 'unknown',
  /** 'live' (a collector), 'fabric' (`intscope serve`: stored history only), or null until asked. */
  mode: null,
  latestNs: 0,
  /** The collector's clock minus the switches' (median over events' receive times), ns. */
  skewNs: 0,
  /** Whether `skewNs` has been measured (0 then means the clocks agree, not "not known yet"). */
  skewKnown: false,
};

/** Merges `patch` into the state and tells the subscribers. */
export function set(patch) {
  Object.assign(state, patch);
  for (const fn of listeners) fn(state);
}

/** Calls `fn` after every change; returns the function that unsubscribes. */
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Records the newest switch time seen in any response (the clock of relative ranges). */
export function sawTime(ns) {
  if (ns && ns > state.latestNs) state.latestNs = ns;
}

/** The hash of a route: `#/page/arg?k=v`. */
export function href(page, arg, params) {
  const q = params ? new URLSearchParams(params).toString() : '';
  return `#/${page}${arg != null ? `/${encodeURIComponent(arg)}` : ''}${q ? `?${q}` : ''}`;
}

/** Parses `location.hash` into page, argument and parameters. */
export function parseHash(hash) {
  const [path, query] = hash.replace(/^#/, '').split('?');
  const [, page, arg] = (path || '').split('/');
  return { page: page || 'overview', arg: arg ? decodeURIComponent(arg) : null, params: new URLSearchParams(query) };
}

/**
 * Changes URL parameters of the current route (null or '' removes one). With `rerender` the page
 * is drawn again (a hash change); without, only the URL changes and the caller reloads its data
 * (a text filter keeps its focus).
 */
export function setParams(patch, { rerender = true } = {}) {
  const params = new URLSearchParams(state.params);
  for (const [k, v] of Object.entries(patch)) {
    if (v == null || v === '') params.delete(k);
    else params.set(k, String(v));
  }
  const hash = href(state.page, state.arg, params);
  if (rerender) {
    location.hash = hash;
  } else {
    history.replaceState(null, '', hash);
    state.params = params;
  }
}
