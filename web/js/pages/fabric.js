// Fabric: the map (tiers learned from the paths, hosts by address, links by utilization and
// drops over the range, nodes by their ongoing incidents) and the nodes' table.

import { incidents } from '../api.js';
import { fabricModel } from '../data.js';
import { esc, ns, num, pct } from '../fmt.js';
import { emptyRow, emptySvg, loadingRow, loadingSvg } from '../states.js';
import { LEGEND, drawMap } from '../topology.js';

/** A node's state: down (flows left it), else its worst ongoing incident's severity, else ok. */
const state = (m, id) => (m.down.nodes.has(id) ? 'down' : m.severity.get(id) || 'ok');

const portText = (p) => `${p.port}: ${ns(p.hop_latency)}, ${pct(p.utilization)}`;

export async function render(ctx) {
  ctx.main.innerHTML = `<div class="panel"><h2>Fabric <span class="muted">tiers from the flows' paths · hosts by the
    addresses entering at their port</span></h2><svg id="topo" width="100%" height="380" data-test="fabric">
      ${loadingSvg}</svg>${LEGEND}</div>
    <div class="panel scroll"><h2>Nodes</h2><table><thead><tr><th>node</th><th>tier</th><th>state</th>
      <th>reports sent</th>
    <th>seen as hop</th><th>drops</th><th>ports (egress latency, Tx utilization)</th></tr></thead><tbody id="nodes">
      ${loadingRow(7)}</tbody>
    </table></div>`;
  await ctx.every(3000, async () => {
    const r = ctx.range;
    const list = await incidents({ since: r.since, until: r.until });
    const m = await fabricModel(r, list);
    const svg = document.getElementById('topo');
    if (!ctx.alive || !svg) return;
    if (!m.nodes.length) {
      svg.innerHTML = emptySvg('no node yet: no telemetry report has reached this collector');
      document.getElementById('nodes').innerHTML = emptyRow('none yet', 7);
      return;
    }
    const { svg: content, height } = drawMap(svg.clientWidth || 1000, m);
    svg.setAttribute('height', height);
    svg.innerHTML = content;
    document.getElementById('nodes').innerHTML = m.nodes
      .map(
        (n) => `<tr data-test="node-row"><td><a href="#/flows?node=${n.node_id}">${n.node_id}</a></td>
      <td>${m.tiers.get(n.node_id)}</td><td>${state(m, n.node_id)}</td>
        <td class="num">${num(n.reports_sent)}</td>
      <td class="num">${num(n.hops_seen)}</td>
      <td>${n.drops.map((d) => `${esc(d.name || d.reason)}: ${num(d.count)}`).join(', ') || '–'}</td>
      <td class="muted wrapcell">${n.ports.map(portText).join(' · ')}</td></tr>`,
      )
      .join('');
  });
}
