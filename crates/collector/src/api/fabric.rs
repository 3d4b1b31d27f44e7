//! `/api/nodes`, `/api/links` and `/api/queues`: the live fabric, a page at a time.

use axum::extract::State as AxState;
use axum::response::IntoResponse;
use serde::Serialize;

use super::context::{
    ApiError, MAX_LIST_LIMIT, MAX_QUEUES_LIMIT, Q, Shared, array_page, limit, parse_cursor,
    with_snapshot,
};

/// A reported Tx utilization as a fraction of line rate (`tx_util_full_scale` is 1.0).
pub(super) fn utilization(tx_util: Option<u32>, full_scale: u32) -> Option<f64> {
    let u = f64::from(tx_util?) / f64::from(full_scale.max(1));
    Some((u * 1000.0).round() / 1000.0)
}

/// Query of the array endpoints (`/api/nodes`, `/api/links`, `/api/queues`).
#[derive(Debug, serde::Deserialize)]
pub struct ListQuery {
    /// Page size (default and maximum: [`MAX_LIST_LIMIT`], queues [`MAX_QUEUES_LIMIT`]).
    pub limit: Option<usize>,
    /// Continue after this row (from the `Link` header of the previous page).
    pub cursor: Option<String>,
}

/// A node of `/api/nodes`.
#[derive(Debug, Serialize)]
pub struct NodeRow {
    /// Node ID.
    pub node_id: u32,
    /// First report or hop, ns.
    pub first_seen_ns: u64,
    /// Last report or hop, ns.
    pub last_seen_ns: u64,
    /// Reports it sent.
    pub reports_sent: u64,
    /// Times it was a hop of a path.
    pub hops_seen: u64,
    /// Drop reports by reason.
    pub drops: Vec<DropCount>,
    /// Its ports, by port ID.
    pub ports: Vec<PortRow>,
}

/// Drop reports of one reason.
#[derive(Debug, Serialize)]
pub struct DropCount {
    /// The reason code.
    pub reason: u8,
    /// Its name, when known.
    pub name: Option<&'static str>,
    /// Drop reports.
    pub count: u64,
}

/// A port of a node.
#[derive(Debug, Serialize)]
pub struct PortRow {
    /// Port ID.
    pub port: u32,
    /// Last Tx utilization reported (device units).
    pub tx_util: Option<u32>,
    /// `tx_util` as a fraction of line rate.
    pub utilization: Option<f64>,
    /// Last hop latency, ns.
    pub hop_latency: Option<u32>,
    /// The latency baseline, ns.
    pub hop_latency_baseline: f64,
    /// Drop reports at this port.
    pub drops: u64,
}

pub(super) async fn nodes(
    AxState(api): Shared,
    Q(q): Q<ListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = limit(&api, q.limit, MAX_LIST_LIMIT, MAX_LIST_LIMIT)?;
    let after = parse_cursor::<1>(&api, q.cursor.as_deref())?;
    let full_scale = api.collector.config.tx_util_full_scale;
    with_snapshot(&api.collector, |s| {
        let mut nodes: Vec<_> = s
            .nodes()
            .filter(|(id, _)| after.is_none_or(|[a]| u64::from(*id) > a))
            .collect();
        nodes.sort_unstable_by_key(|(id, _)| *id);
        nodes.truncate(limit + 1);
        let rows = nodes
            .into_iter()
            .map(|(id, n)| {
                let ports = n
                    .ports
                    .in_id_order()
                    .into_iter()
                    .map(|(p, ps)| PortRow {
                        port: p,
                        tx_util: ps.tx_util,
                        utilization: utilization(ps.tx_util, full_scale),
                        hop_latency: ps.last_latency,
                        hop_latency_baseline: ps.latency_baseline().round(),
                        drops: ps.drops,
                    })
                    .collect();
                let drops = n
                    .drops
                    .iter()
                    .map(|(r, c)| DropCount {
                        reason: *r,
                        name: intscope_wire::report::drop_reason_name(*r),
                        count: *c,
                    })
                    .collect();
                let row = NodeRow {
                    node_id: id,
                    first_seen_ns: n.first_seen_ns,
                    last_seen_ns: n.last_seen_ns,
                    reports_sent: n.reports_sent,
                    hops_seen: n.hops_seen,
                    drops,
                    ports,
                };
                ([u64::from(id)], row)
            })
            .collect();
        array_page("/api/nodes", rows, None, limit)
    })
}

/// A link of `/api/links`.
#[derive(Debug, Serialize)]
pub struct LinkRow {
    /// Upstream node.
    pub from_node: u32,
    /// Its egress port.
    pub from_port: u32,
    /// Downstream node.
    pub to_node: u32,
    /// Its ingress port.
    pub to_port: u32,
    /// Reports that crossed it.
    pub reports: u64,
    /// Last crossing, ns.
    pub last_seen_ns: u64,
    /// The upstream port's last Tx utilization (device units).
    pub tx_util: Option<u32>,
    /// `tx_util` as a fraction of line rate.
    pub utilization: Option<f64>,
}

pub(super) async fn links(
    AxState(api): Shared,
    Q(q): Q<ListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = limit(&api, q.limit, MAX_LIST_LIMIT, MAX_LIST_LIMIT)?;
    let after = parse_cursor::<4>(&api, q.cursor.as_deref())?;
    let full_scale = api.collector.config.tx_util_full_scale;
    with_snapshot(&api.collector, |s| {
        let rows: Vec<([u64; 4], LinkRow)> = s
            .links()
            .map(|((a, ap, b, bp), l)| {
                let key = [u64::from(a), u64::from(ap), u64::from(b), u64::from(bp)];
                (key, (a, ap, b, bp, l))
            })
            .filter(|(k, _)| after.is_none_or(|a| *k > a))
            .map(|(k, (a, ap, b, bp, l))| {
                // The link carries what the upstream node's egress port sends.
                let tx_util = s
                    .node(a)
                    .and_then(|n| n.ports.get(&ap))
                    .and_then(|p| p.tx_util);
                let row = LinkRow {
                    from_node: a,
                    from_port: ap,
                    to_node: b,
                    to_port: bp,
                    reports: l.reports,
                    last_seen_ns: l.last_seen_ns,
                    tx_util,
                    utilization: utilization(tx_util, full_scale),
                };
                (k, row)
            })
            .collect();
        array_page("/api/links", rows, None, limit)
    })
}

/// A queue of `/api/queues`.
#[derive(Debug, Serialize)]
pub struct QueueRow {
    /// Node ID.
    pub node_id: u64,
    /// Port ID.
    pub port: u64,
    /// Queue ID.
    pub queue_id: u64,
    /// Last occupancy reported.
    pub occupancy: u32,
    /// Largest occupancy reported.
    pub max_occupancy: u32,
    /// Last hop latency, ns.
    pub hop_latency: Option<u32>,
    /// Reports of it.
    pub reports: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// Recent `[time_ns, occupancy]` samples.
    pub series: Vec<[u64; 2]>,
}

pub(super) async fn queues(
    AxState(api): Shared,
    Q(q): Q<ListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = limit(&api, q.limit, MAX_QUEUES_LIMIT, MAX_QUEUES_LIMIT)?;
    let after = parse_cursor::<3>(&api, q.cursor.as_deref())?;
    with_snapshot(&api.collector, |s| {
        let mut queues: Vec<_> = s
            .queues()
            .map(|(k, q)| {
                (
                    [
                        u64::from(k.node()),
                        u64::from(k.port()),
                        u64::from(k.queue()),
                    ],
                    q,
                )
            })
            .filter(|(k, _)| after.is_none_or(|a| *k > a))
            .collect();
        queues.sort_unstable_by_key(|(k, _)| *k);
        queues.truncate(limit + 1);
        let rows = queues
            .into_iter()
            .map(|(k, q)| {
                let series: Vec<[u64; 2]> = q.series().map(|(t, o)| [t, u64::from(o)]).collect();
                let row = QueueRow {
                    node_id: k[0],
                    port: k[1],
                    queue_id: k[2],
                    occupancy: q.occupancy,
                    max_occupancy: q.max_occupancy,
                    hop_latency: q.hop_latency,
                    reports: q.reports,
                    last_seen_ns: q.last_seen_ns,
                    series,
                };
                (k, row)
            })
            .collect();
        array_page("/api/queues", rows, None, limit)
    })
}
