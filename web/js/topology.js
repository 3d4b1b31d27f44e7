// The fabric map: tiers learned from the flows' paths, hosts named by the addresses seen
// behind a port, links coloured by utilization and drops over the chosen range, nodes by their
// ongoing incidents.

import { count, esc, moment, node, nodeName, pct } from './fmt.js';
import { nowNs } from './time.js';

/**
 * Tiers from paths (arrays of node IDs, source first). A path's first node is an edge (tier 0):
 * the switch the packet entered by. Any other node's tier is, over the paths it is on, the most
 * common of its distance to the nearer edge of the path (the source, or the next edge node after
 * it, when there is one). Nodes on no path take one tier above their highest linked neighbour.
 */
export function learnTiers(nodeIds, paths, links) {
  const edges = new Set(paths.filter((p) => p.length).map((p) => p[0]));
  const votes = new Map();
  for (const p of paths) {
    p.forEach((n, i) => {
      if (edges.has(n)) return;
      let next = Number.POSITIVE_INFINITY;
      for (let j = i + 1; j < p.length; j++) {
        if (edges.has(p[j])) {
          next = j - i;
          break;
        }
      }
      const d = Math.min(i, next);
      const v = votes.get(n) || new Map();
      v.set(d, (v.get(d) || 0) + 1);
      votes.set(n, v);
    });
  }
  const tier = new Map();
  for (const n of nodeIds) {
    if (edges.has(n)) tier.set(n, 0);
    else if (votes.has(n)) {
      const best = [...votes.get(n)].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0][0];
      tier.set(n, best);
    }
  }
  // Nodes no path crossed: above their neighbours, or with the edges when alone.
  for (const n of nodeIds) {
    if (tier.has(n)) continue;
    const near = links
      .filter((l) => l.from_node === n || l.to_node === n)
      .map((l) => (l.from_node === n ? l.to_node : l.from_node));
    const known = near.map((m) => tier.get(m)).filter((t) => t != null);
    tier.set(n, known.length ? Math.max(...known) + 1 : 0);
  }
  return tier;
}

// Link colour: the sending port's Tx utilization; red when it dropped packets in the range.
const utilColor = (u) => (u == null ? '#3a4654' : u < 0.5 ? 'var(--ok)' : u < 0.8 ? 'var(--warn)' : 'var(--bad)');
// Dot colour: the highest queue occupancy of the port in the range (cells).
const occColor = (o) => (o == null ? '#3a4654' : o < 200 ? 'var(--ok)' : o < 1000 ? 'var(--warn)' : 'var(--bad)');
const SEV_COLOR = { info: 'var(--accent)', warning: 'var(--warn)', major: 'var(--bad)', critical: '#ff2d55' };

/** The legend of the map's colours. */
export const LEGEND = `<div class="legend muted">link: Tx utilization
  <span style="background:var(--ok)"></span>&lt; 50%<span style="background:var(--warn)"></span>&lt; 80%
  <span style="background:var(--bad)"></span>≥ 80%, dashed red: drops in the range, grey ✕: down (flows left it)
  · dot: highest queue occupancy in the range<span style="background:var(--ok)"></span>&lt; 200 cells
  <span style="background:var(--warn)"></span>&lt; 1000
  <span style="background:var(--bad)"></span>≥ 1000 · node ring: its worst ongoing incident</div>`;

/** The text of an outage ({since, incident}) for a title: what is known is that flows left it. */
const downText = (o) => `down: no flow since ${moment(o.since, nowNs())} (incident ${o.incident})`;

/**
 * One direction of a link (or a port's stub to its hosts) from `a` to `b`, coloured by its port's
 * state. `how`: its `title`, `offset` sideways (px), `highlight` (an incident's place), `down` (an
 * outage: {since, incident}; drawn grey and crossed) and `link` (its key, for readers).
 */
function portLine(a, b, port, { title, offset = 0, highlight = false, down = null, link = null }) {
  const [dx, dy] = [b[0] - a[0], b[1] - a[1]];
  const len = Math.hypot(dx, dy) || 1;
  const [ox, oy] = [(-dy / len) * offset, (dx / len) * offset];
  const [x1, y1, x2, y2] = [a[0] + ox, a[1] + oy, b[0] + ox, b[1] + oy];
  const [qx, qy] = [x1 + dx * 0.3, y1 + dy * 0.3];
  const util = port.util;
  const dropped = port.drops > 0;
  const stroke = down ? 'var(--down)' : dropped ? 'var(--bad)' : utilColor(util);
  const width = down ? 2 : 2 + 4 * Math.min(util ?? 0, 1);
  const dash = down ? '3 5' : dropped ? '6 3' : null;
  const occ = port.occ == null ? '–' : count(port.occ, 'cell');
  const state = down ? `${downText(down)}; ` : '';
  const text = `${title}: ${state}utilization ${pct(util)}, queue max ${occ}, ${count(port.drops || 0, 'drop')}`;
  // A cross halfway along a link that is down.
  const [mx, my] = [x1 + dx * 0.5, y1 + dy * 0.5];
  const cross = down
    ? `<path d="M${mx - 5} ${my - 5}L${mx + 5} ${my + 5}M${mx - 5} ${my + 5}L${mx + 5} ${my - 5}" class="down-x"/>`
    : '';
  return `<g data-test="fabric-port"${highlight ? ' class="hl"' : ''}${link ? ` data-link="${link}"` : ''}
    data-state="${down ? 'down' : 'up'}"><title>${esc(text)}</title>
    <line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" stroke="${stroke}" stroke-width="${width}"${
      dash ? ` stroke-dasharray="${dash}"` : ''
    }/>${highlight ? `<line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" class="hl-line"/>` : ''}${cross}
    <circle cx="${qx}" cy="${qy}" r="4" fill="${occColor(port.occ)}"/></g>`;
}

/**
 * The map as SVG content for a box `w` wide.
 *   m.nodes, m.links: the API's; m.tiers: learnTiers'; m.hosts: Map 'node/port' → addresses;
 *   m.ports: Map 'node/port' → {util, occ, drops}; m.severity: Map node → worst ongoing
 *   severity; m.down: outages() (links by either end's 'node/port', nodes by ID: drawn down);
 *   m.highlight: {node, port, peer_node} to mark (an incident's place).
 * Returns {svg, height}.
 */
export function drawMap(w, m) {
  const tiers = m.tiers;
  const maxTier = Math.max(0, ...tiers.values());
  const rowH = 120;
  const y = (t) => 40 + (maxTier - t) * rowH;
  const byTier = new Map();
  for (const n of m.nodes) {
    const t = tiers.get(n.node_id) ?? 0;
    if (!byTier.has(t)) byTier.set(t, []);
    byTier.get(t).push(n.node_id);
  }
  const pos = new Map();
  for (const [t, ids] of byTier) {
    ids.sort((a, b) => a - b);
    ids.forEach((id, i) => pos.set(id, [((i + 1) * w) / (ids.length + 1), y(t)]));
  }
  const hostY = y(0) + 100;
  const port = (n, p) => m.ports.get(`${n}/${p}`) || {};
  const hl = m.highlight || {};
  const down = m.down || { links: new Map(), nodes: new Map() };
  let s = '';
  const linked = new Set();
  for (const l of m.links) {
    const a = pos.get(l.from_node);
    const b = pos.get(l.to_node);
    if (!a || !b) continue;
    linked.add(`${l.from_node}/${l.from_port}`);
    const mark = hl.node === l.from_node && (hl.port == null || hl.port === l.from_port);
    const title = `${node(l.from_node)} port ${l.from_port} → ${node(l.to_node)} port ${l.to_port}`;
    const out =
      down.links.get(`${l.from_node}/${l.from_port}`) ||
      down.links.get(`${l.to_node}/${l.to_port}`) ||
      down.nodes.get(l.from_node) ||
      down.nodes.get(l.to_node);
    s += portLine(a, b, port(l.from_node, l.from_port), {
      title,
      offset: 4,
      highlight: mark && (hl.port != null || hl.peer_node === l.to_node),
      down: out,
      link: `${l.from_node}/${l.from_port}-${l.to_node}/${l.to_port}`,
    });
  }
  // Ports that lead to hosts (the addresses seen entering or leaving there): stubs below.
  const edgeIds = byTier.get(0) || [];
  for (const id of edgeIds) {
    const hostPorts = [...m.hosts.keys()]
      .filter((k) => k.startsWith(`${id}/`) && !linked.has(k))
      .map((k) => Number(k.split('/')[1]))
      .sort((a, b) => a - b);
    const [x, yy] = pos.get(id);
    const span = Math.min(w / (edgeIds.length + 1) - 30, 70 * Math.max(0, hostPorts.length - 1));
    hostPorts.forEach((p, i) => {
      const hx = x - span / 2 + (hostPorts.length > 1 ? (i * span) / (hostPorts.length - 1) : span / 2);
      const addrs = m.hosts.get(`${id}/${p}`);
      const name = addrs.length > 1 ? `${addrs[0]} +${addrs.length - 1}` : addrs[0];
      const mark = hl.node === id && hl.port === p;
      const title = `${node(id)} port ${p} → ${addrs.join(', ')}`;
      s += portLine([x, yy], [hx, hostY], port(id, p), { title, highlight: mark, down: down.links.get(`${id}/${p}`) });
      // Neighbouring labels alternate between two rows so addresses do not overlap.
      s += `<text x="${hx}" y="${hostY + 14 + (i % 2) * 13}" text-anchor="middle" class="host" data-test="fabric-host"
        font-size="10">${esc(name)}</text>`;
    });
  }
  for (const [id, [x, yy]] of pos) {
    const sev = m.severity.get(id);
    const out = down.nodes.get(id);
    const stroke = out ? 'var(--down)' : sev ? SEV_COLOR[sev] : 'var(--accent)';
    const mark = hl.node === id || hl.peer_node === id;
    const name = nodeName(id);
    const label =
      name != null
        ? `<text x="${x}" y="${yy - 28}" text-anchor="middle" font-size="11"
          data-test="fabric-node-name">${esc(name)}</text>`
        : '';
    const says = [sev ? `${sev} incident ongoing` : null, out ? downText(out) : null].filter(Boolean).join('; ');
    s += `<g data-test="fabric-node" data-node="${id}" data-tier="${tiers.get(id)}" data-state="${sev || 'ok'}"${
      out ? ' data-down="true"' : ''
    }>
      <a href="#/flows?node=${id}"><title>${esc(node(id))}${says ? `: ${esc(says)}` : ''}</title>
      <circle cx="${x}" cy="${yy}" r="22" fill="${mark ? '#2d3f57' : '#1e2a38'}" stroke="${stroke}"
        stroke-width="${sev || mark ? 4 : 2}"${out ? ' stroke-dasharray="4 3"' : ''}/>
      <text x="${x}" y="${yy + 4}" text-anchor="middle">${id}</text>${label}</a></g>`;
  }
  return { svg: s, height: hostY + 36 };
}
