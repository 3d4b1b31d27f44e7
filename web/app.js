// intscope web UI: five views over the collector's JSON API. No framework; charts by uPlot.
'use strict';

const main = document.getElementById('main');
const status = document.getElementById('status');
let timers = [];
let stream = null;
let charts = [];

// A collector served off loopback asks for its bearer token (401): asked once, kept for the tab.
let token = sessionStorage.getItem('intscope-token') || '';
const api = async (path) => {
  let r = await fetch(path, token ? { headers: { Authorization: `Bearer ${token}` } } : {});
  if (r.status === 401) {
    token = (window.prompt('This collector needs its API token:') || '').trim();
    sessionStorage.setItem('intscope-token', token);
    r = await fetch(path, { headers: { Authorization: `Bearer ${token}` } });
  }
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
};
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
const ns = (v) => (v == null ? '–' : v < 1e3 ? `${v} ns` : v < 1e6 ? `${(v / 1e3).toFixed(1)} µs` : `${(v / 1e6).toFixed(2)} ms`);
const proto = (p) => (p === 6 ? 'tcp' : p === 17 ? 'udp' : `ip/${p}`);
const flowText = (f) => (f ? `${f.src}:${f.src_port} → ${f.dst}:${f.dst_port} ${proto(f.proto)}` : '–');
const clock = (t) => new Date(t / 1e6).toLocaleTimeString();
const place = (e) => [e.node_id != null ? `node ${e.node_id}` : null, e.port != null ? `port ${e.port}` : null, e.queue_id != null ? `q${e.queue_id}` : null].filter(Boolean).join(' · ');
const every = (ms, fn) => { fn(); timers.push(setInterval(fn, ms)); };

function evidence(e) {
  const v = e.evidence || {};
  switch (e.kind) {
    case 'path-change': return `${(v.old_path || []).map((h) => h.node_id).join('→')} ⇒ ${(v.new_path || []).map((h) => h.node_id).join('→')}`;
    case 'drop': return v.drop_reason_name || `reason ${v.drop_reason}`;
    case 'microburst': case 'congestion-end':
      return `${ns(v.duration_ns)}, max ${v.max_occupancy} cells; culprits: ${(v.culprit_flows || []).slice(0, 3).map((c) => `${c.flow.src}→${c.flow.dst} ${(c.share * 100).toFixed(0)}%`).join(', ')}`;
    case 'congestion-start': return `occupancy ${v.queue_occupancy}`;
    case 'latency-anomaly': return `${ns(v.hop_latency)} vs baseline ${ns(v.baseline)} (×${v.factor})`;
    case 'lost-reports': return `${v.lost} lost from hw ${v.hw_id}`;
    case 'non-int-hops': return `${v.non_int_hops} hop(s) without INT (TTL ${v.ip_ttl})`;
    case 'hop-limit': case 'mtu-exceeded':
      return `path ${(v.path || []).join('→')}; nothing added after node ${v.last_recorded_node ?? '–'} port ${v.last_recorded_egress_port ?? '–'} (reported by ${v.reported_by})`;
    default: return JSON.stringify(v).slice(0, 120);
  }
}

// Link colour: the sending port's Tx utilization; dot colour: its queue's occupancy (cells).
const utilColor = (u) => (u == null ? '#3a4654' : u < 0.5 ? 'var(--ok)' : u < 0.8 ? 'var(--warn)' : 'var(--bad)');
const occColor = (o) => (o == null ? '#3a4654' : o < 200 ? 'var(--ok)' : o < 1000 ? 'var(--warn)' : 'var(--bad)');
const pct = (u) => (u == null ? '–' : `${(u * 100).toFixed(1)}%`);

// One direction of a link (or a leaf's port to a host), offset sideways so both directions show;
// the queue dot sits at the sending end.
function portLine(a, b, util, occ, title, offset) {
  const [dx, dy] = [b[0] - a[0], b[1] - a[1]];
  const len = Math.hypot(dx, dy) || 1;
  const [ox, oy] = [(-dy / len) * offset, (dx / len) * offset];
  const [x1, y1, x2, y2] = [a[0] + ox, a[1] + oy, b[0] + ox, b[1] + oy];
  const [qx, qy] = [x1 + dx * 0.3, y1 + dy * 0.3];
  return `<g data-test="fabric-port"><title>${esc(title)}: utilization ${pct(util)}, queue ${occ ?? '–'} cells</title>
    <line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" stroke="${utilColor(util)}" stroke-width="${2 + 4 * Math.min(util ?? 0, 1)}"/>
    <circle cx="${qx}" cy="${qy}" r="4" fill="${occColor(occ)}"/></g>`;
}

async function fabric() {
  main.innerHTML = `<div class="panel"><h2>Fabric</h2><svg id="topo" width="100%" height="360" data-test="fabric"></svg>
    <div class="legend muted">link: Tx utilization<span style="background:var(--ok)"></span>&lt; 50%<span style="background:var(--warn)"></span>&lt; 80%<span style="background:var(--bad)"></span>≥ 80%
      &nbsp;· dot: queue occupancy<span style="background:var(--ok)"></span>&lt; 200 cells<span style="background:var(--warn)"></span>&lt; 1000<span style="background:var(--bad)"></span>≥ 1000</div></div>
    <div class="panel"><h2>Nodes</h2><table><thead><tr><th>node</th><th>reports sent</th><th>seen as hop</th><th>drops</th><th>ports (egress latency, Tx utilization)</th></tr></thead><tbody id="nodes"></tbody></table></div>`;
  every(2000, async () => {
    const [nodes, links, queues] = await Promise.all([api('/api/nodes'), api('/api/links'), api('/api/queues')]);
    const occ = new Map();
    for (const q of queues) occ.set(`${q.node_id}/${q.port}`, Math.max(occ.get(`${q.node_id}/${q.port}`) ?? 0, q.occupancy));
    const svg = document.getElementById('topo');
    if (!svg) return;
    const w = svg.clientWidth || 1000;
    const spines = nodes.filter((n) => n.node_id > 100).map((n) => n.node_id);
    const leaves = nodes.filter((n) => n.node_id <= 100).map((n) => n.node_id);
    const pos = new Map();
    spines.forEach((id, i) => pos.set(id, [((i + 1) * w) / (spines.length + 1), 50]));
    leaves.forEach((id, i) => pos.set(id, [((i + 1) * w) / (leaves.length + 1), 220]));
    let s = '';
    const linked = new Set();
    for (const l of links) {
      const a = pos.get(l.from_node), b = pos.get(l.to_node);
      if (!a || !b) continue;
      linked.add(`${l.from_node}/${l.from_port}`);
      s += portLine(a, b, l.utilization, occ.get(`${l.from_node}/${l.from_port}`), `${l.from_node}:${l.from_port} → ${l.to_node}:${l.to_port}`, 4);
    }
    // A leaf's other ports lead to hosts: short stubs below it.
    for (const id of leaves) {
      const n = nodes.find((m) => m.node_id === id);
      const hostPorts = n.ports.filter((p) => !linked.has(`${id}/${p.port}`));
      const [x, y] = pos.get(id);
      const span = Math.min(w / (leaves.length + 1) - 20, 30 * hostPorts.length);
      hostPorts.forEach((p, i) => {
        const hx = x - span / 2 + (hostPorts.length > 1 ? (i * span) / (hostPorts.length - 1) : span / 2);
        s += portLine([x, y], [hx, 330], p.utilization, occ.get(`${id}/${p.port}`), `${id}:${p.port} → host`, 0);
        s += `<text x="${hx}" y="348" text-anchor="middle" class="muted" font-size="10">h${p.port}</text>`;
      });
    }
    for (const [id, [x, y]] of pos) {
      const n = nodes.find((m) => m.node_id === id);
      const drops = n.drops.reduce((a, d) => a + d.count, 0);
      s += `<g data-test="fabric-node"><circle cx="${x}" cy="${y}" r="22" fill="#1e2a38" stroke="${drops ? 'var(--bad)' : 'var(--accent)'}" stroke-width="2"/>
        <text x="${x}" y="${y + 4}" text-anchor="middle">${id > 100 ? 'S' : 'L'}${id}</text></g>`;
    }
    svg.innerHTML = s;
    document.getElementById('nodes').innerHTML = nodes.map((n) => `<tr><td>${n.node_id}</td><td>${n.reports_sent}</td><td>${n.hops_seen}</td>
      <td>${n.drops.map((d) => `${esc(d.name || d.reason)}: ${d.count}`).join(', ') || '–'}</td>
      <td class="muted">${n.ports.map((p) => `${p.port}: ${ns(p.hop_latency)}, ${pct(p.utilization)}`).join(' · ')}</td></tr>`).join('');
  });
}

async function flows() {
  main.innerHTML = `<div class="panel"><h2>Flows</h2>
    <p><input id="q" placeholder="filter: address, port…" size="30"> <select id="sort">
      <option value="last_seen">last seen</option><option value="p99">e2e p99</option><option value="drops">drops</option>
      <option value="reports">reports</option><option value="path_changes">path changes</option></select> <span id="total" class="muted"></span></p>
    <table><thead><tr><th>flow</th><th>path</th><th>e2e p50</th><th>e2e p99</th><th>reports</th><th>drops</th><th>path changes</th><th>last seen</th></tr></thead>
    <tbody id="rows"></tbody></table></div>`;
  const load = async () => {
    const q = encodeURIComponent(document.getElementById('q')?.value || '');
    const sort = document.getElementById('sort')?.value || 'last_seen';
    const d = await api(`/api/flows?limit=200&sort=${sort}&q=${q}`);
    const rows = document.getElementById('rows');
    if (!rows) return;
    document.getElementById('total').textContent = `${d.total} flows`;
    rows.innerHTML = d.flows.map((f) => `<tr class="clickable" data-test="flow-row" onclick="location.hash='#/flow/${f.id}'">
      <td>${esc(flowText(f.flow))}</td><td>${f.path.join(' → ')}</td><td>${ns(f.e2e_latency_p50)}</td><td>${ns(f.e2e_latency_p99)}</td>
      <td>${f.reports}</td><td>${f.drops}</td><td>${f.path_changes}</td><td class="muted">${clock(f.last_seen_ns)}</td></tr>`).join('')
      || '<tr><td class="empty" colspan="8">no flows yet</td></tr>';
  };
  document.getElementById('q').oninput = load;
  document.getElementById('sort').onchange = load;
  every(3000, load);
}

/// Dashed vertical lines at `marks` (seconds): where the flow's path changed.
const markers = (marks) => ({
  hooks: {
    draw: [(u) => {
      const { ctx, bbox } = u;
      ctx.save();
      ctx.strokeStyle = '#bc8cff';
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1.5;
      for (const t of marks) {
        const x = u.valToPos(t, 'x', true);
        if (x < bbox.left || x > bbox.left + bbox.width) continue;
        ctx.beginPath();
        ctx.moveTo(x, bbox.top);
        ctx.lineTo(x, bbox.top + bbox.height);
        ctx.stroke();
      }
      ctx.restore();
    }],
  },
});

function chart(el, title, times, series, unit, marks = []) {
  const palette = ['#4aa3ff', '#3fb950', '#d29922', '#f85149', '#bc8cff', '#39c5cf', '#ff7b72', '#e3b341'];
  const opts = {
    title, width: el.clientWidth || 600, height: 220, plugins: [markers(marks)],
    scales: { x: { time: true } },
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: true, value: (u, v) => (v == null ? '–' : unit(v)) }))],
    axes: [{ stroke: '#8593a3', grid: { stroke: '#232b34' } }, { stroke: '#8593a3', grid: { stroke: '#232b34' }, size: 72, values: (u, vs) => vs.map(unit) }],
  };
  charts.push(new uPlot(opts, [times, ...series.map((s) => s.values)], el));
}

async function flow(id) {
  const f = await api(`/api/flows/${id}`);
  main.innerHTML = `<div class="panel" data-test="flow-detail"><h2>${esc(flowText(f.flow))}</h2>
      <p class="muted">${f.reports} reports · ${f.drops} drops · e2e p50 ${ns(f.e2e_latency_p50)} · p99 ${ns(f.e2e_latency_p99)} · ${f.path_changes} path changes</p>
      <div class="path" data-test="flow-path">${f.path_detail.map((h, i) => `<div class="hop"><b>${i === 0 ? 'source' : i === f.path_detail.length - 1 ? 'sink' : 'hop ' + i}</b><br>node ${h.node_id}<br><span class="muted">in ${h.ingress_if ?? '–'} · out ${h.egress_if ?? '–'}</span></div>`).join('')}</div></div>
    <div class="grid"><div class="panel"><div id="lat"></div></div><div class="panel"><div id="occ"></div></div></div>
    <div class="grid"><div class="panel"><h2>Path history</h2><table><tbody>${f.path_history.map((p) => `<tr><td class="muted">${clock(p.since_ns)}</td><td>${p.path.map((h) => h.node_id).join(' → ')}</td></tr>`).join('')}</tbody></table></div>
    <div class="panel"><h2>Events <a class="muted" data-test="flow-events-link" href="#/events?flow=${f.id}&live=0">all of this flow's events →</a></h2><table><tbody>${f.events.map((e) => `<tr><td class="muted">${clock(e.time_ns)}</td><td><span class="kind ${e.kind}">${e.kind}</span></td><td>${esc(place(e))}</td><td>${esc(evidence(e))}</td></tr>`).join('') || '<tr><td class="empty">none</td></tr>'}</tbody></table></div></div>`;
  // The store's per-interval series reaches back further than the last samples kept in memory.
  const intervals = f.intervals ?? [];
  const stored = intervals.length > 1;
  const rows = stored ? intervals : f.series;
  const times = rows.map((s) => s.time_ns / 1e9);
  const hops = f.path_detail.length;
  const key = (k) => (stored ? `${k}_max` : k);
  const per = (k) => Array.from({ length: hops }, (_, i) => ({ label: `node ${f.path_detail[i].node_id}`, values: rows.map((s) => s[key(k)][i] ?? null) }));
  // Path changes: dashed lines at the times a new path was first seen (the first path is not a change).
  const changes = f.path_history.slice(1).map((p) => p.since_ns / 1e9);
  const e2e = stored ? { label: 'end to end (mean)', values: rows.map((s) => s.e2e_latency_avg) } : { label: 'end to end', values: rows.map((s) => s.e2e_latency) };
  const per_what = stored ? ', maximum per interval' : '';
  chart(document.getElementById('lat'), `hop latency${per_what} (dashed: path change)`, times, [e2e, ...per('hop_latency')], ns, changes);
  chart(document.getElementById('occ'), `queue occupancy (cells${per_what})`, times, per('queue_occupancy'), (v) => `${v}`, changes);
}

async function events(params) {
  // `#/events?live=0` (or the checkbox) pauses the live stream.
  const live = params.get('live') !== '0';
  main.innerHTML = `<div class="panel"><h2>Events <span class="muted" id="live"></span></h2>
    <p><select id="kind"><option value="">all kinds</option>${['path-change', 'latency-anomaly', 'drop', 'congestion-start', 'congestion-end', 'microburst', 'lost-reports', 'hop-limit', 'mtu-exceeded', 'non-int-hops'].map((k) => `<option>${k}</option>`).join('')}</select>
    <input id="node" placeholder="node id" size="8" value="${esc(params.get('node') || '')}"> <input id="flow" placeholder="flow id" size="8" value="${esc(params.get('flow') || '')}"> <label><input type="checkbox" id="livebox" ${live ? 'checked' : ''}> live</label></p>
    <table><thead><tr><th>time</th><th>kind</th><th>where</th><th>flow</th><th>evidence</th></tr></thead><tbody id="rows"></tbody></table></div>`;
  const row = (e) => `<tr data-test="event-row"><td class="muted">${clock(e.time_ns)}</td><td><span class="kind ${e.kind}">${e.kind}</span></td><td>${esc(place(e))}</td>
    <td>${e.flow_id ? `<a data-test="event-flow-link" href="#/flow/${e.flow_id}">${esc(flowText(e.flow))}</a>` : '–'}</td><td>${esc(evidence(e))}</td></tr>`;
  const load = async () => {
    const kind = document.getElementById('kind').value;
    const node = document.getElementById('node').value;
    const flow = document.getElementById('flow').value;
    const filters = `${kind ? `&kind=${kind}` : ''}${node ? `&node=${encodeURIComponent(node)}` : ''}${flow ? `&flow=${encodeURIComponent(flow)}` : ''}`;
    const d = await api(`/api/events?limit=300${filters}`);
    document.getElementById('rows').innerHTML = d.map(row).join('') || '<tr><td class="empty" colspan="5">no events yet</td></tr>';
    const last = d.length ? d[0].id : 0;
    if (stream) stream.close();
    stream = null;
    document.getElementById('live').textContent = document.getElementById('livebox').checked ? '· live' : '· paused';
    if (!document.getElementById('livebox').checked) return;
    // EventSource cannot send headers: the stream takes the token as access_token.
    stream = new EventSource(`/api/events/stream?after=${last}${filters}${token ? `&access_token=${encodeURIComponent(token)}` : ''}`);
    stream.onmessage = stream.onerror = null;
    const add = (m) => { const rows = document.getElementById('rows'); if (rows) rows.insertAdjacentHTML('afterbegin', row(JSON.parse(m.data))); };
    ['path-change', 'latency-anomaly', 'drop', 'congestion-start', 'congestion-end', 'microburst', 'lost-reports', 'hop-limit', 'mtu-exceeded', 'non-int-hops'].forEach((k) => stream.addEventListener(k, add));
  };
  document.getElementById('kind').onchange = load;
  document.getElementById('node').onchange = load;
  document.getElementById('flow').onchange = load;
  document.getElementById('livebox').onchange = load;
  await load();
}

async function queues() {
  main.innerHTML = `<div class="panel"><h2>Queue occupancy</h2><p class="muted">rows: node/port/queue · columns: time · colour: maximum occupancy in the column</p>
    <div style="display:flex;gap:8px"><div id="labels" class="muted" style="font-size:11px;line-height:14px"></div><canvas id="heat" class="heat" data-test="heatmap"></canvas></div></div>`;
  every(2000, async () => {
    const qs = await api('/api/queues');
    const canvas = document.getElementById('heat');
    if (!canvas) return;
    const all = qs.flatMap((q) => q.series.map((s) => s[0]));
    if (!all.length) return;
    const t1 = Math.max(...all), t0 = Math.max(Math.min(...all), t1 - 60e9);
    const cols = 120, rowH = 14;
    canvas.width = cols * 6; canvas.height = qs.length * rowH;
    canvas.style.height = `${qs.length * rowH}px`;
    const ctx = canvas.getContext('2d');
    const max = Math.max(1, ...qs.map((q) => q.max_occupancy));
    qs.forEach((q, r) => {
      const cells = new Array(cols).fill(-1);
      for (const [t, o] of q.series) {
        if (t < t0) continue;
        const c = Math.min(cols - 1, Math.floor(((t - t0) / Math.max(1, t1 - t0)) * cols));
        cells[c] = Math.max(cells[c], o);
      }
      cells.forEach((o, c) => {
        if (o < 0) return;
        const x = Math.sqrt(o / max);
        ctx.fillStyle = `rgb(${Math.round(40 + 215 * x)}, ${Math.round(90 + 80 * (1 - x))}, ${Math.round(60 * (1 - x))})`;
        ctx.fillRect(c * 6, r * rowH, 6, rowH - 1);
      });
    });
    document.getElementById('labels').innerHTML = qs.map((q) => `<div>${q.node_id}/${q.port}/q${q.queue_id}</div>`).join('');
  });
}

async function route() {
  timers.forEach(clearInterval);
  timers = [];
  if (stream) { stream.close(); stream = null; }
  charts.forEach((c) => c.destroy());
  charts = [];
  const [path, query] = location.hash.split('?');
  const [, page, arg] = path.split('/');
  const params = new URLSearchParams(query || '');
  document.querySelectorAll('nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === (page === 'flow' ? 'flows' : page || 'fabric')));
  try {
    if (page === 'flow' && arg) await flow(arg);
    else if (page === 'flows') await flows();
    else if (page === 'events') await events(params);
    else if (page === 'queues') await queues();
    else await fabric();
    status.textContent = '';
  } catch (e) {
    status.textContent = e.message;
  }
}

window.addEventListener('hashchange', route);
setInterval(async () => {
  try {
    const s = await api('/api/stats');
    status.textContent = `${s.ingest.reports_decoded} reports · ${s.flows} flows · ${s.reports_lost} reports lost in ${s.report_groups_lost} groups`;
  } catch (e) {
    status.textContent = `collector unreachable: ${e.message}`;
  }
}, 3000);
route();
