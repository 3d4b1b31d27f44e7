// Events: the live log (and its stream) for a live range, the store's for a brushed one; kind,
// node and flow filters in the URL; times to the microsecond. An incident's events are one group
// (its kinds, its span, a link to it), its newest few shown until asked for all.

import { events, incidentRoute, onCollectorClock, onSwitchClock, qs, streamUrl } from '../api.js';
import { EVENT_KINDS, clock, esc, eventPlace, evidence, flowText, num } from '../fmt.js';
import { emptyRow, loadingRow } from '../states.js';
import { setParams, state } from '../store.js';
import { within } from '../time.js';

const flowLink = (e) =>
  e.flow_id ? `<a data-test="event-flow-link" href="#/flow/${e.flow_id}">${esc(flowText(e.flow))}</a>` : '–';

const row = (e) => `<tr data-test="event-row" data-kind="${e.kind}" data-ns="${e.time_ns}">
  <td class="muted nowrap">${clock(e.time_ns)}</td>
  <td><span class="kind ${e.kind}">${e.kind}</span></td><td class="nowrap">${esc(eventPlace(e))}</td>
  <td>${flowLink(e)}</td>
  <td>${esc(evidence(e))}</td></tr>`;

/** Rows of an incident's group shown before "show all" (the rest are hidden by CSS). */
const SHOWN = 3;

/** The link to a group's incident (under `intscope serve`, by the time of its oldest event). */
const groupHref = (g) => {
  const oldest = g[g.length - 1];
  return incidentRoute(g[0].incident_id, { near: oldest.switch_ns ?? oldest.time_ns });
};

/** One incident's events (newest first) under a header: their kinds, span and incident. */
function group(g) {
  const id = g[0].incident_id;
  const kinds = new Map();
  for (const e of g) kinds.set(e.kind, (kinds.get(e.kind) || 0) + 1);
  const what = [...kinds].map(([k, n]) => `${k} ×${num(n)}`).join(', ');
  const span = `${clock(g[g.length - 1].time_ns)} – ${clock(g[0].time_ns)}`;
  const more = g.length > SHOWN ? ` <button data-test="event-group-more">show all ${num(g.length)}</button>` : '';
  return `<tbody class="group collapsed" data-test="event-group" data-incident="${esc(id)}">
    <tr class="grouphead"><td colspan="5"><a href="${groupHref(g)}">incident ${esc(id)}</a>
      · ${esc(what)} · ${span}${more}</td></tr>${g.map(row).join('')}</tbody>`;
}

/**
 * The events (newest first) as table bodies: each incident's as one group where its first (newest)
 * event falls, the others in runs between them.
 */
function bodies(list) {
  const groups = new Map();
  const order = [];
  for (const e of list) {
    if (e.incident_id == null) {
      order.push(e);
      continue;
    }
    let g = groups.get(e.incident_id);
    if (!g) {
      g = [];
      groups.set(e.incident_id, g);
      order.push(g);
    }
    g.push(e);
  }
  let html = '';
  let run = '';
  for (const x of order) {
    if (Array.isArray(x) && x.length > 1) {
      html += `${run ? `<tbody>${run}</tbody>` : ''}${group(x)}`;
      run = '';
    } else {
      run += row(Array.isArray(x) ? x[0] : x);
    }
  }
  return html + (run ? `<tbody>${run}</tbody>` : '');
}

export async function render(ctx) {
  const p = ctx.params;
  const kind = EVENT_KINDS.includes(p.get('kind')) ? p.get('kind') : '';
  const node = p.get('node') || '';
  const flow = p.get('flow') || '';
  const r = ctx.range;
  // `intscope serve` has the store's events only: no live log, no stream.
  const fabric = state.mode === 'fabric';
  const live = !fabric && r.live && p.get('live') !== '0';
  ctx.main.innerHTML = `<div class="panel scroll"><h2>Events <span class="muted" id="live"></span></h2>
    <p><select id="kind"><option value="">all kinds</option>${EVENT_KINDS.map(
      (k) => `<option${k === kind ? ' selected' : ''}>${k}</option>`,
    ).join('')}</select>
    <input id="node" placeholder="node id" size="8" value="${esc(node)}">
    <input id="flow" placeholder="flow id" size="8" value="${esc(flow)}">
    <label><input type="checkbox" id="livebox" ${live ? 'checked' : ''}
      ${r.live && !fabric ? '' : 'disabled'}> live</label></p>
    <table class="wrap" id="events"><thead><tr><th>time</th><th>kind</th><th>where</th><th>flow</th><th>evidence</th>
    </tr></thead><tbody id="rows">${loadingRow(5)}</tbody></table></div>`;
  const $ = (id) => document.getElementById(id);
  $('kind').onchange = () => setParams({ kind: $('kind').value });
  $('node').onchange = () => setParams({ node: $('node').value.trim() });
  $('flow').onchange = () => setParams({ flow: $('flow').value.trim() });
  $('livebox').onchange = () => setParams({ live: $('livebox').checked ? null : 0 });
  let list;
  let source;
  if (r.live && !fabric) {
    list = (await events(`/api/events${qs({ limit: 1000, kind, node, flow })}`)).filter((e) => within(r, e.time_ns));
    source = 'the live log';
  } else {
    // A past range: the store (which has no flow filter: applied here).
    // The store keeps switch times: the range is asked on that clock.
    if (!fabric) await events('/api/events?limit=1');
    const [since, until] = [onSwitchClock(r.since), onSwitchClock(r.until)];
    const d = await events(`/api/history/events${qs({ since, until, kind, node, limit: 1000 })}`, 'events');
    list = d.events.filter((e) => !flow || String(e.flow_id) === flow);
    source = `the store${d.next ? ', the newest 1000' : ''}`;
  }
  if (!ctx.alive) return;
  // Streamed events go into the first body (#rows), above the groups.
  $('rows').innerHTML = list.length ? '' : emptyRow('no events in the range', 5);
  if (list.length) $('rows').insertAdjacentHTML('afterend', bodies(list));
  $('events').onclick = (ev) => {
    const b = ev.target.closest('button[data-test="event-group-more"]');
    if (!b) return;
    const body = b.closest('tbody');
    body.classList.toggle('collapsed');
    b.textContent = body.classList.contains('collapsed') ? `show all ${num(body.rows.length - 1)}` : 'show fewer';
  };
  $('live').textContent = `· ${list.length} from ${source}${live ? ' · live' : ' · paused'}`;
  if (!live) return;
  // After the newest shown (none shown: only new ones).
  const after = list.length ? list[0].id : null;
  const stream = ctx.own(new EventSource(streamUrl(qs({ after, kind, node, flow }).slice(1))));
  const add = (m) => $('rows')?.insertAdjacentHTML('afterbegin', row(onCollectorClock([JSON.parse(m.data)])[0]));
  for (const k of EVENT_KINDS) stream.addEventListener(k, add);
}
