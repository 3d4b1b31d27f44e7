// Flows: the live flows seen in the range (or, for a brushed past range, the store's flow
// summaries), filtered by text and node, sorted by the header clicked (the server's sorts; ties
// separated by p99, then p50, then reports). Filter and sort are in the URL.

import { api, qs } from '../api.js';
import { FLOW_KEYS, byFlowKey, storedFlows } from '../data.js';
import { clock, count, esc, flowText, ns, num, sortHeader } from '../fmt.js';
import { emptyRow, loadingRow } from '../states.js';
import { sawTime, setParams } from '../store.js';

/** The server's sorts, larger first; p99 is the default (it separates flows; last seen did not). */
const SORTS = ['p99', 'drops', 'reports', 'path_changes', 'last_seen', 'first_seen'];

export async function render(ctx) {
  const p = ctx.params;
  const sort = SORTS.includes(p.get('sort')) ? p.get('sort') : 'p99';
  ctx.main.innerHTML = `<div class="panel"><h2>Flows <span id="total" class="muted"></span></h2>
    <p><input id="q" placeholder="filter: address, port…" size="30" value="${esc(p.get('q') || '')}">
      <input id="node" placeholder="node" size="6" value="${esc(p.get('node') || '')}">
      <span class="muted">click a column header with ▾ to sort</span></p>
    <table data-test="flows-table"><thead><tr><th>flow</th><th>path</th><th>e2e p50</th>
      ${sortHeader('e2e p99', 'p99', sort)}${sortHeader('reports', 'reports', sort)}
      ${sortHeader('drops', 'drops', sort)}
      ${sortHeader('path changes', 'path_changes', sort)}${sortHeader('last seen', 'last_seen', sort)}</tr></thead>
    <tbody id="rows">${loadingRow(8)}</tbody></table></div>`;
  const $ = (id) => document.getElementById(id);
  for (const th of ctx.main.querySelectorAll('th[data-sort]')) th.onclick = () => setParams({ sort: th.dataset.sort });
  const load = async () => {
    const q = $('q').value.trim();
    const node = $('node').value.trim();
    let rows;
    let note;
    if (ctx.range.live) {
      const d = await api(`/api/flows${qs({ limit: 200, sort, q, node })}`);
      rows = (FLOW_KEYS[sort] ? [...d.flows].sort(byFlowKey(FLOW_KEYS[sort])) : d.flows).filter(
        (f) => f.last_seen_ns >= ctx.range.since,
      );
      note = `${count(d.total, 'flow')}${d.total > rows.length ? `, ${rows.length} shown (seen in the range)` : ''}`;
    } else {
      ({ rows, note } = await storedFlows(ctx.range, q, node, sort));
    }
    if (!ctx.alive) return;
    for (const f of rows) sawTime(f.last_seen_ns);
    $('total').textContent = note;
    $('rows').innerHTML =
      rows
        .map(
          (f) => `<tr ${f.id != null ? `class="clickable" data-href="#/flow/${f.id}"` : ''} data-test="flow-row"
        data-p99="${f.e2e_latency_p99 ?? 0}" data-drops="${f.drops}">
      <td>${f.id != null ? `<a href="#/flow/${f.id}">${esc(flowText(f.flow))}</a>` : esc(flowText(f.flow))}</td>
      <td>${(f.path || []).join(' → ')}</td>
      <td class="num">${ns(f.e2e_latency_p50)}</td><td class="num">${ns(f.e2e_latency_p99)}</td>
        <td class="num">${num(f.reports)}</td>
      <td class="num">${num(f.drops)}</td><td class="num">${num(f.path_changes)}</td>
        <td class="muted">${clock(f.last_seen_ns, 3)}</td></tr>`,
        )
        .join('') || emptyRow('no flows match', 8);
  };
  ctx.main.onclick = (e) => {
    const row = e.target.closest('tr[data-href]');
    if (row && !e.target.closest('a')) location.hash = row.dataset.href;
  };
  const filter = () => {
    setParams({ q: $('q').value.trim(), node: $('node').value.trim() }, { rerender: false });
    load().catch(ctx.error);
  };
  $('q').oninput = filter;
  $('node').onchange = filter;
  await ctx.every(3000, load);
}
