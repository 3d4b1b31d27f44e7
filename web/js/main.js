// intscope console: the router, the range picker and the status line. Each page is a module
// with `render(ctx)`; `ctx` owns the page's timers, streams and charts, released when the route
// changes, so no page leaves anything running behind it.

import { api, incidents, shift } from './api.js';
import { clock, count, esc, num, setNames, span } from './fmt.js';
import * as pages from './pages/index.js';
import { failLoading, loadingBlock } from './states.js';
import { parseHash, set, setParams, state, subscribe } from './store.js';
import { RANGES, absolute, rangeOf } from './time.js';

const main = document.getElementById('main');
const status = document.getElementById('status');
const picker = document.getElementById('range');
let current = null;

/** A page's context: its parameters and the things to release when it goes. */
function context(route) {
  const disposers = [];
  const ctx = {
    main,
    arg: route.arg,
    params: route.params,
    range: rangeOf(route.params),
    alive: true,
    /** Runs `fn` now, then every `ms` while the page is shown: for live ranges, or `always`. */
    every(ms, fn, { always = false } = {}) {
      const run = () =>
        fn().then(
          () => ctx.alive && ctx.recovered(),
          (e) => ctx.alive && ctx.error(e),
        );
      const first = run();
      if (always || ctx.range.live) {
        const t = setInterval(() => {
          ctx.range = rangeOf(state.params);
          run();
        }, ms);
        disposers.push(() => clearInterval(t));
      }
      return first;
    },
    /** Releases `x` (a uPlot chart, an EventSource, a function) when the page goes. */
    own(x) {
      disposers.push(() => (typeof x === 'function' ? x() : x.destroy ? x.destroy() : x.close()));
      return x;
    },
    /** A brush selected [since, until] ns: the range becomes absolute. */
    brush(since, until) {
      setParams(absolute(since, until));
    },
    /**
     * Shows an error of the page in the status line; panels still loading say it in their place
     * (those drawn keep what they show, as of the time the status line gives).
     */
    error(e) {
      failLoading(main, e);
      const kept = ctx.drawnAt ? ` (the page shows what was read at ${clock(ctx.drawnAt * 1e6, 0)})` : '';
      status.textContent = `${e.message}${kept}`;
      status.classList.add('bad');
      ctx.failing = true;
    },
    /**
     * A refresh succeeded: an error it showed before is over. The first one marks on the page
     * when it was drawn (ms since the navigation began: what a reader, or a benchmark, waited).
     */
    recovered() {
      if (!ctx.drawnAt) main.dataset.drawnMs = Math.round(performance.now());
      ctx.drawnAt = Date.now();
      if (!ctx.failing) return;
      ctx.failing = false;
      status.classList.remove('bad');
      refreshStatus();
    },
    dispose() {
      ctx.alive = false;
      for (const d of disposers.splice(0)) d();
    },
  };
  return ctx;
}

function drawPicker() {
  const r = rangeOf(state.params);
  const opts = RANGES.map(([k]) => `<option value="${k}"${r.label === k ? ' selected' : ''}>last ${k}</option>`);
  if (!r.live) opts.push('<option value="custom" selected>custom (brushed)</option>');
  picker.innerHTML = opts.join('');
}

/**
 * Whether this is a collector (live state) or `intscope serve` (the shared store's history only:
 * its /api/stats says `mode: "fabric"`), asked once before the first page is drawn.
 */
const modeKnown = Promise.all([
  api('/api/stats')
    .then((s) => set({ mode: s.mode === 'fabric' ? 'fabric' : 'live' }))
    .catch(() => set({ mode: 'live' })),
  // The nodes' names, where the collector knows its topology (an older one, or `serve`: none).
  api('/api/names')
    .then((d) => setNames(d.nodes))
    .catch(() => setNames({})),
]);

/** Pages that read only what `intscope serve` answers (the stored incidents and events). */
const FABRIC_PAGES = new Set(['incidents', 'incident', 'events']);

/** What a live page says under `intscope serve` instead of failing on the calls it cannot make. */
function fabricOnly(page) {
  main.innerHTML = `<div class="panel"><h2>${esc(page)}: a collector's live state</h2>
    <p class="empty">This console is served by <code>intscope serve</code>, which reads the history
    every collector wrote to the shared store; it holds no live state (nodes, links, queues, live
    flows, the event stream), so this page is shown by each collector's own console.</p>
    <p>Here: <a href="#/incidents">incidents</a> and <a href="#/events">events</a> of every
    collector.</p></div>`;
}

async function route() {
  if (current) current.dispose();
  await modeKnown;
  const r = parseHash(location.hash);
  set({ page: r.page, arg: r.arg, params: r.params });
  drawPicker();
  const nav = { flow: 'flows', incident: 'incidents' }[r.page] || r.page;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.page === nav);
  const page = pages[r.page] || pages.overview;
  status.classList.remove('bad');
  const ctx = context(r);
  current = ctx;
  // Until the page draws its panels (a flow's or an incident's page reads it first).
  main.innerHTML = `<div class="panel">${loadingBlock}</div>`;
  delete main.dataset.drawnMs;
  if (state.mode === 'fabric' && !FABRIC_PAGES.has(r.page)) {
    fabricOnly(r.page);
    return;
  }
  try {
    await page.render(ctx);
    // Pages drawn once (a flow, an incident) mark their draw here; refreshing ones at their first.
    if (ctx.alive && !ctx.drawnAt) ctx.recovered();
  } catch (e) {
    if (ctx.alive) ctx.error(e);
  }
}

picker.onchange = () => setParams({ range: picker.value, from: null, to: null });

// The status line: collector totals, and whether incidents are available. It writes only to its
// own element: a page's message (a 404) stays.
async function refreshStatus() {
  if (status.classList.contains('bad')) return;
  try {
    const s = await api('/api/stats');
    if (s.mode === 'fabric') {
      const rows = s.rows || {};
      status.textContent = `intscope serve: the shared store · ${count(rows.flows || 0, 'flow')} · ${count(
        rows.incidents || 0,
        'incident',
      )} · ${count(rows.events || 0, 'event')} stored by every collector`;
      return;
    }
    const inc = state.incidents === 'unavailable' ? ' · incidents unavailable' : '';
    const d = shift();
    const off = Math.abs(d) > 864e11 ? 'on another epoch' : `${span(Math.abs(d))} ${d > 0 ? 'behind' : 'ahead'}`;
    const clocks = d ? ` · switch clock ${off}: its times shown on the collector's` : '';
    // Sequence gaps count every report that did not arrive, those the collector's own kernel
    // dropped too: those are said apart (an estimate, at the average reports per datagram) so
    // the collector's overload is not read as the network's loss.
    const kd = s.ingest.kernel_dropped || 0;
    const perDatagram = s.ingest.datagrams_accepted ? s.ingest.reports_decoded / s.ingest.datagrams_accepted : 0;
    const own = Math.min(s.reports_lost, Math.round(kd * perDatagram));
    const here = kd ? ` (≈${num(own)} of them in ${count(kd, 'datagram')} this collector's kernel dropped)` : '';
    status.textContent = `${count(s.ingest.reports_decoded, 'report')} · ${count(s.flows, 'flow')} · ${count(
      s.reports_lost,
      'report lost',
      'reports lost',
    )}${here}${inc}${clocks}`;
  } catch (e) {
    status.textContent = `collector unreachable: ${esc(e.message)}`;
  }
}

subscribe(() => document.body.classList.toggle('no-incidents', state.incidents === 'unavailable'));
window.addEventListener('hashchange', route);
setInterval(refreshStatus, 3000);
// Probes the incident API once so the navigation can say when it is missing.
incidents({ limit: 1 }).catch(() => {});
refreshStatus();
route();
