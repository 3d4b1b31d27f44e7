// Incidents: every incident of the range, most hurting first, filtered by state, kind and node
// (all in the URL); a collector without the incident API says so and points to the events.

import { incidentHref, incidents } from '../api.js';
import { INCIDENT_KINDS, byHurt, esc, incidentPlace, lasted, moment, num, peakText } from '../fmt.js';
import { emptyRow, loadingRow } from '../states.js';
import { setParams, state } from '../store.js';
import { nowNs } from '../time.js';

/**
 * How long an incident lasted: until now while ongoing (an outage sends no updates meanwhile);
 * the shared store knows an ongoing one as of its last stored update.
 */
const duration = (i, now) => {
  if (i.state !== 'ongoing') return lasted((i.end_ns ?? i.last_update_ns) - i.start_ns);
  if (state.mode === 'fabric') return `${lasted(i.last_update_ns - i.start_ns)} by its last update`;
  return `${lasted(Math.max(i.last_update_ns, now) - i.start_ns)} so far`;
};

export async function render(ctx) {
  const p = ctx.params;
  const st = ['ongoing', 'resolved'].includes(p.get('state')) ? p.get('state') : '';
  const kind = INCIDENT_KINDS.includes(p.get('kind')) ? p.get('kind') : '';
  const node = p.get('node') || '';
  const opt = (v, cur, label = v) => `<option value="${v}"${v === cur ? ' selected' : ''}>${label}</option>`;
  ctx.main.innerHTML = `<div class="panel scroll"><h2>Incidents <span class="muted" id="count"></span></h2>
    <p><select id="state">${opt('', st, 'ongoing and resolved')}${opt('ongoing', st)}${opt('resolved', st)}</select>
    <select id="kind">${opt('', kind, 'all kinds')}${INCIDENT_KINDS.map((k) => opt(k, kind)).join('')}</select>
    <input id="node" placeholder="node" size="6" value="${esc(node)}"></p>
    <table class="wrap"><thead><tr><th>severity</th><th>kind</th><th>where</th><th>start</th><th>duration</th>
      <th>state</th>
    <th>peak</th><th>flows</th><th>samples</th></tr></thead><tbody id="rows">${loadingRow(9)}</tbody></table></div>`;
  const $ = (id) => document.getElementById(id);
  $('state').onchange = () => setParams({ state: $('state').value });
  $('kind').onchange = () => setParams({ kind: $('kind').value });
  $('node').onchange = () => setParams({ node: $('node').value.trim() });
  ctx.main.onclick = (e) => {
    const row = e.target.closest('tr[data-href]');
    if (row && !e.target.closest('a')) location.hash = row.dataset.href;
  };
  await ctx.every(3000, async () => {
    const r = ctx.range;
    const now = nowNs();
    const list = await incidents({ since: r.since, until: r.until, state: st || undefined, kind, node, limit: 500 });
    if (!ctx.alive) return;
    if (!list) {
      ctx.main.innerHTML = `<div class="panel" data-test="incidents-unavailable"><h2>Incidents unavailable</h2>
        <p>This collector serves no incident API (<code>/api/incidents</code> answered 404). The same trouble is in
        <a href="#/events">the events</a>, and the overview pieces episodes together from them.</p></div>`;
      return;
    }
    $('count').textContent = `· ${list.length} in the range`;
    $('rows').innerHTML =
      [...list]
        .sort(byHurt)
        .map(
          (i) => `<tr class="clickable ${i.state}" data-test="incident-row" data-href="${incidentHref(i)}">
        <td><span class="sev ${esc(i.severity)}">${esc(i.severity)}</span></td>
        <td><a href="${incidentHref(i)}">${esc(i.kind)}</a>
          ${i.cause ? `<span class="muted">${esc(i.cause)}</span>` : ''}</td>
        <td>${esc(incidentPlace(i.place))}</td><td class="nowrap">${moment(i.start_ns, now)}</td>
        <td class="num">${duration(i, now)}</td><td>
          <span class="state ${i.state}">${i.state}</span></td>
        <td>${esc(peakText(i.peak))}</td><td class="num">${num(i.counts.flows)}</td>
          <td class="num">${num(i.counts.samples)}</td></tr>`,
        )
        .join('') || emptyRow('no incidents in the range', 9);
  });
}
