//! The HTTP API (JSON; described in `docs/collector-api.md`) and the Prometheus `/metrics`
//! endpoint, served by axum from the shared [`Collector`].

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use crate::event::{Event, EventKind, FlowRef};
use crate::flow::FlowState;
use crate::ingest::Collector;
use crate::rank;
use crate::search::FlowSearch;
use crate::state::View;

/// The router of the API.
pub fn router(collector: Arc<Collector>) -> Router {
    Router::new()
        .route("/api/stats", get(stats))
        .route("/api/nodes", get(nodes))
        .route("/api/links", get(links))
        .route("/api/queues", get(queues))
        .route("/api/flows", get(flows))
        .route("/api/flows/{id}", get(flow))
        .route("/api/events", get(events))
        .route("/api/events/stream", get(event_stream))
        .route("/api/history/events", get(history_events))
        .route("/api/history/flows", get(history_flows))
        .route("/api/history/queues", get(history_queues))
        .route("/metrics", get(metrics))
        .merge(crate::ui::routes())
        .with_state(collector)
}

type Shared = AxState<Arc<Collector>>;

/// An HTTP error (status and message).
type ApiError = (StatusCode, String);

fn with_state<T>(c: &Collector, f: impl FnOnce(&View<'_>) -> T) -> Result<T, ApiError> {
    Ok(f(&c.state.read()))
}

async fn stats(AxState(c): Shared) -> Result<Json<Value>, ApiError> {
    let ingest = c.stats.snapshot();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let store = c.store.as_ref().map(|s| {
        json!({
            "rows": s.counts().ok(),
            "batches": g(&c.store_stats.batches),
            "failed": g(&c.store_stats.failed),
            "backlog_dropped": g(&c.store_stats.backlog_dropped),
            "flushes_deferred": g(&c.store_stats.flushes_deferred),
            "events_missed": g(&c.store_stats.events_missed),
            "raw_not_kept": g(&c.raw_skipped),
        })
    });
    with_state(&c, |s| {
        let sources: Vec<Value> = s
            .sources()
            .map(|((node, hw), st)| json!({"node_id": node, "hw_id": hw, "received": st.received, "lost": st.lost, "reordered": st.reordered, "restarts": st.restarts}))
            .collect();
        let events: serde_json::Map<String, Value> = s
            .event_counts()
            .iter()
            .map(|(k, v)| (k.label().to_string(), json!(v)))
            .collect();
        Json(json!({
            "ingest": ingest,
            "reports": s.counters(),
            "reports_lost": s.reports_lost(),
            "sequence_resets": s.sequence_resets(),
            "evicted": s.evicted(),
            "held": s.held().iter().map(|&(k, n)| (k.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "limits": c.config.limits,
            "sources": sources,
            "flows": s.flow_count(),
            "flows_expired": s.flows_expired(),
            "nodes": s.nodes().count(),
            "queues": s.queues().count(),
            "events": events,
            "events_suppressed": s.events_suppressed(),
            "store": store,
        }))
    })
}

fn history(
    c: &Collector,
    f: impl FnOnce(&dyn crate::store::Store) -> Result<Value, crate::store::StoreError>,
) -> Result<Json<Value>, ApiError> {
    let Some(store) = c.store.as_deref() else {
        return Err((
            StatusCode::NOT_FOUND,
            "no history store (start with --data DIR)".into(),
        ));
    };
    f(store)
        .map(Json)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn history_events(
    AxState(c): Shared,
    Query(q): Query<crate::store::HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    history(&c, |s| s.events(&q))
}

async fn history_flows(
    AxState(c): Shared,
    Query(q): Query<crate::store::HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    history(&c, |s| s.flows(&q))
}

async fn history_queues(
    AxState(c): Shared,
    Query(q): Query<crate::store::HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    history(&c, |s| s.queue_series(&q))
}

/// A reported Tx utilization as a fraction of line rate (`tx_util_full_scale` is 1.0).
fn utilization(tx_util: Option<u32>, full_scale: u32) -> Option<f64> {
    let u = f64::from(tx_util?) / f64::from(full_scale.max(1));
    Some((u * 1000.0).round() / 1000.0)
}

async fn nodes(AxState(c): Shared) -> Result<Json<Value>, ApiError> {
    let full_scale = c.config.tx_util_full_scale;
    with_state(&c, |s| {
        let mut nodes: Vec<_> = s.nodes().collect();
        nodes.sort_unstable_by_key(|(id, _)| *id);
        Json(Value::Array(
            nodes
                .into_iter()
                .map(|(id, n)| {
                    let ports: Vec<Value> = n.ports.in_id_order()
                        .into_iter()
                        .map(|(p, ps)| json!({"port": p, "tx_util": ps.tx_util, "utilization": utilization(ps.tx_util, full_scale), "hop_latency": ps.last_latency, "hop_latency_baseline": ps.latency_baseline.round(), "drops": ps.drops}))
                        .collect();
                    let drops: Vec<Value> = n.drops.iter().map(|(r, c)| json!({"reason": r, "name": intscope_wire::report::drop_reason_name(*r), "count": c})).collect();
                    json!({"node_id": id, "first_seen_ns": n.first_seen_ns, "last_seen_ns": n.last_seen_ns, "reports_sent": n.reports_sent, "hops_seen": n.hops_seen, "drops": drops, "ports": ports})
                })
                .collect(),
        ))
    })
}

async fn links(AxState(c): Shared) -> Result<Json<Value>, ApiError> {
    let full_scale = c.config.tx_util_full_scale;
    with_state(&c, |s| {
        let mut v: Vec<Value> = s
            .links()
            .map(|((a, ap, b, bp), l)| {
                // The link carries what the upstream node's egress port sends.
                let tx_util = s.node(a).and_then(|n| n.ports.get(&ap)).and_then(|p| p.tx_util);
                json!({"from_node": a, "from_port": ap, "to_node": b, "to_port": bp, "reports": l.reports,
                       "last_seen_ns": l.last_seen_ns, "tx_util": tx_util, "utilization": utilization(tx_util, full_scale)})
            })
            .collect();
        v.sort_by_key(|x| {
            (
                x["from_node"].as_u64(),
                x["from_port"].as_u64(),
                x["to_node"].as_u64(),
            )
        });
        Json(Value::Array(v))
    })
}

async fn queues(AxState(c): Shared) -> Result<Json<Value>, ApiError> {
    with_state(&c, |s| {
        let mut queues: Vec<_> = s.queues().collect();
        queues.sort_unstable_by_key(|(k, _)| *k);
        Json(Value::Array(
            queues
                .into_iter()
                .map(|(k, q)| {
                    let series: Vec<[u64; 2]> = q.series().map(|(t, o)| [t, u64::from(o)]).collect();
                    json!({"node_id": k.node(), "port": k.port(), "queue_id": k.queue(), "occupancy": q.occupancy, "max_occupancy": q.max_occupancy, "hop_latency": q.hop_latency, "reports": q.reports, "last_seen_ns": q.last_seen_ns, "series": series})
                })
                .collect(),
        ))
    })
}

/// Query of `/api/flows`.
#[derive(Debug, serde::Deserialize)]
pub struct FlowQuery {
    /// Page size (default 100, at most 10 000).
    pub limit: Option<usize>,
    /// Rows to skip.
    pub offset: Option<usize>,
    /// `last_seen` (default), `reports`, `drops`, `p99`, `path_changes`, `first_seen`.
    pub sort: Option<String>,
    /// Substring of the flow's addresses or ports.
    pub q: Option<String>,
    /// Only flows whose path crosses this node.
    pub node: Option<u32>,
}

fn flow_summary(f: &FlowState) -> Value {
    json!({
        "id": f.id,
        "flow": FlowRef::from(&f.key),
        "first_seen_ns": f.first_seen_ns,
        "last_seen_ns": f.last_seen_ns,
        "reports": f.reports,
        "drops": f.drops,
        "last_drop_reason": f.last_drop_reason,
        "path": f.path.iter().map(|h| h.node_id).collect::<Vec<_>>(),
        "path_changes": f.path_changes,
        "e2e_latency_p50": f.e2e.quantile(0.5),
        "e2e_latency_p99": f.e2e.quantile(0.99),
    })
}

async fn flows(AxState(c): Shared, Query(q): Query<FlowQuery>) -> Result<Json<Value>, ApiError> {
    // Built before the state is locked: its tables take a millisecond or two.
    let mut search = q.q.as_deref().map(|t| FlowSearch::new(&t.to_lowercase()));
    with_state(&c, |s| {
        // One key per flow, read once in the same pass as the filters (the flows are many),
        // larger first; ties by ID.
        let key: fn(&FlowState) -> u64 = match q.sort.as_deref().unwrap_or("last_seen") {
            "reports" => |f| f.reports,
            "drops" => |f| f.drops,
            "p99" => |f| f.e2e.quantile(0.99).unwrap_or(0),
            "path_changes" => |f| f.path_changes,
            "first_seen" => |f| u64::MAX - f.first_seen_ns,
            _ => |f| f.last_seen_ns,
        };
        let offset = q.offset.unwrap_or(0);
        let limit = q.limit.unwrap_or(100).min(10_000);
        // The page is among the `wanted` first flows: only those are kept, so nothing is
        // collected for the rest of a million.
        let wanted = offset.saturating_add(limit);
        let mut total = 0usize;
        let matching = s
            .flows()
            .filter(|f| q.node.is_none_or(|n| f.path.iter().any(|h| h.node_id == n)))
            .filter(|f| search.as_mut().is_none_or(|search| search.matches(&f.key)))
            .inspect(|_| total += 1);
        // Larger sort key first; ties by ID.
        let first = rank::smallest(matching, wanted, |f| (std::cmp::Reverse(key(f)), f.id));
        let page: Vec<Value> = first.into_iter().skip(offset).map(flow_summary).collect();
        Json(json!({"total": total, "flows": page}))
    })
}

async fn flow(AxState(c): Shared, Path(id): Path<u64>) -> Result<Json<Value>, ApiError> {
    let found = with_state(&c, |s| {
        s.flow_by_id(id).map(|f| {
            let key = FlowRef::from(&f.key);
            let mut v = flow_summary(f);
            let o = v.as_object_mut().expect("object");
            o.insert("path_detail".into(), json!(&*f.path));
            o.insert(
                "path_history".into(),
                Value::Array(
                    f.path_history()
                        .map(|(t, p)| json!({"since_ns": t, "path": &**p}))
                        .collect(),
                ),
            );
            o.insert("series".into(), json!(f.recent));
            let events: Vec<_> = s
                .events()
                .iter()
                .filter(|e| e.flow_id == Some(id))
                .collect();
            o.insert("events".into(), json!(events));
            (key, v)
        })
    })?;
    let Some((key, mut v)) = found else {
        return Err((StatusCode::NOT_FOUND, format!("no flow with id {id}")));
    };
    // The flow's longer history, per store interval (outside the state lock: a disk read).
    if let Some(store) = c.store.as_deref() {
        let intervals = store
            .flow_series(&key, &crate::store::HistoryQuery::default())
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        v["intervals"] = intervals;
    }
    Ok(Json(v))
}

/// Query of `/api/events`.
#[derive(Debug, serde::Deserialize)]
pub struct EventQuery {
    /// Only this kind (kebab-case, e.g. `path-change`).
    pub kind: Option<EventKind>,
    /// Only events at this node.
    pub node: Option<u32>,
    /// Only events of this flow ID.
    pub flow: Option<u64>,
    /// Only events with a larger ID (for polling).
    pub after: Option<u64>,
    /// At most this many, newest first (default 200).
    pub limit: Option<usize>,
}

async fn events(AxState(c): Shared, Query(q): Query<EventQuery>) -> Result<Json<Value>, ApiError> {
    with_state(&c, |s| {
        let v: Vec<_> = s
            .events()
            .iter()
            .rev()
            .filter(|e| selected(e, q.kind, q.node, q.flow))
            .filter(|e| q.after.is_none_or(|a| e.id > a))
            .take(q.limit.unwrap_or(200))
            .collect();
        Json(json!(v))
    })
}

/// Whether `e` passes the kind, node and flow filters of an events query.
fn selected(e: &Event, kind: Option<EventKind>, node: Option<u32>, flow: Option<u64>) -> bool {
    kind.is_none_or(|k| e.kind == k)
        && node.is_none_or(|n| e.node_id == Some(n))
        && flow.is_none_or(|f| e.flow_id == Some(f))
}

/// Query of `/api/events/stream`.
#[derive(Debug, serde::Deserialize)]
pub struct StreamQuery {
    /// Only this kind.
    pub kind: Option<EventKind>,
    /// Only events at this node.
    pub node: Option<u32>,
    /// Only events of this flow ID.
    pub flow: Option<u64>,
    /// Start after this event ID (default: only new events).
    pub after: Option<u64>,
}

/// Server-sent events: each new event as `event: <kind>` with the event's JSON as data. The log is
/// polled every 200 ms, so a slow client never holds the state lock.
async fn event_stream(
    AxState(c): Shared,
    Query(q): Query<StreamQuery>,
) -> axum::response::sse::Sse<
    impl futures_util::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
> {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    use futures_util::StreamExt;
    let start = q
        .after
        .unwrap_or_else(|| c.state.events().next_id().saturating_sub(1));
    let stream = futures_util::stream::unfold((c, start, q), |(c, mut last, q)| async move {
        loop {
            let from = last;
            let batch: Vec<SseEvent> = c
                .state
                .events()
                .events()
                .iter()
                .filter(|e| e.id > from)
                .inspect(|e| last = last.max(e.id))
                .filter(|e| selected(e, q.kind, q.node, q.flow))
                .map(|e| {
                    SseEvent::default()
                        .event(e.kind.label())
                        .id(e.id.to_string())
                        .data(serde_json::to_string(e).unwrap_or_default())
                })
                .collect();
            if !batch.is_empty() {
                return Some((
                    futures_util::stream::iter(batch.into_iter().map(Ok)),
                    (c, last, q),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .flatten();
    Sse::new(stream).keep_alive(KeepAlive::default())
}

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

/// Renders the metrics in the Prometheus text format. Names follow
/// `intscope_<name>_<unit>_total`; label values come from small sets (outcome, version, kind) or
/// from the network's own inventory (node, port, queue).
pub fn render_metrics(c: &Collector) -> String {
    let mut reg = Registry::with_prefix("intscope");
    let datagrams = Family::<Labels, Counter>::default();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let discarded = crate::ingest::Discard::ALL.map(|d| (d.label(), g(c.stats.discarded(d))));
    for (outcome, v) in discarded.into_iter().chain([
        ("accepted", g(&c.stats.accepted)),
        (
            "kernel_dropped",
            c.stats
                .socket_inodes
                .lock()
                .ok()
                .and_then(|i| crate::ingest::kernel_drops(&i))
                .unwrap_or(0),
        ),
    ]) {
        datagrams
            .get_or_create(&labels(&[("outcome", outcome.into())]))
            .inc_by(v);
    }
    reg.register(
        "ingest_datagrams",
        "Report datagrams received, by outcome",
        datagrams,
    );
    let socket_errors = Counter::<u64>::default();
    socket_errors.inc_by(g(&c.stats.socket_errors));
    reg.register(
        "ingest_socket_errors",
        "Socket receive errors",
        socket_errors,
    );
    let s = c.state.read();
    let counters = s.counters();
    let reports = Family::<Labels, Counter>::default();
    for (v, n) in [
        ("2.0", counters.v2),
        ("1.0", counters.v1),
        ("0.5", counters.v05),
    ] {
        reports
            .get_or_create(&labels(&[("version", v.into())]))
            .inc_by(n);
    }
    reg.register(
        "reports",
        "Individual reports decoded, by report version",
        reports,
    );
    let lost = Family::<Labels, Counter>::default();
    for ((node, hw), st) in s.sources() {
        lost.get_or_create(&labels(&[
            ("node", node.to_string()),
            ("hw_id", hw.to_string()),
        ]))
        .inc_by(st.lost);
    }
    reg.register(
        "reports_lost",
        "Reports missing from sequence gaps, by source",
        lost,
    );
    let resets = Counter::<u64>::default();
    resets.inc_by(s.sequence_resets());
    reg.register(
        "report_sequence_resets",
        "Sequence jumps too far to be loss (restarted or spoofed sources)",
        resets,
    );
    let evicted = Family::<Labels, Counter>::default();
    for (kind, n) in s.evicted().by_kind() {
        evicted
            .get_or_create(&labels(&[("kind", kind.into())]))
            .inc_by(n);
    }
    reg.register(
        "state_evicted",
        "Least recently seen entries evicted at the state's limits, by kind",
        evicted,
    );
    let held = Family::<Labels, Gauge>::default();
    for (kind, n) in s.held() {
        held.get_or_create(&labels(&[("kind", kind.into())]))
            .set(n as i64);
    }
    reg.register("state_entries", "Entries in live state, by kind", held);
    let events = Family::<Labels, Counter>::default();
    for k in EventKind::ALL {
        events
            .get_or_create(&labels(&[("kind", k.label().into())]))
            .inc_by(s.event_counts().get(&k).copied().unwrap_or(0));
    }
    reg.register("events", "Events detected, by kind", events);
    let flows = Gauge::<i64>::default();
    flows.set(s.flow_count() as i64);
    reg.register("flows_active", "Flows in memory", flows);
    let occupancy = Family::<Labels, Gauge>::default();
    let qlat = Family::<Labels, Gauge>::default();
    for (k, qs) in s.queues() {
        let l = labels(&[
            ("node", k.node().to_string()),
            ("port", k.port().to_string()),
            ("queue", k.queue().to_string()),
        ]);
        occupancy.get_or_create(&l).set(i64::from(qs.occupancy));
        if let Some(lat) = qs.hop_latency {
            qlat.get_or_create(&l).set(i64::from(lat));
        }
    }
    reg.register(
        "queue_occupancy",
        "Last queue occupancy reported (device units)",
        occupancy,
    );
    reg.register(
        "queue_hop_latency_nanoseconds",
        "Last hop latency through the queue",
        qlat,
    );
    let util = Family::<Labels, Gauge>::default();
    let util_ratio = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let drops = Family::<Labels, Counter>::default();
    for (node, n) in s.nodes() {
        for (port, ps) in &n.ports {
            if let Some(u) = ps.tx_util {
                let l = labels(&[("node", node.to_string()), ("port", port.to_string())]);
                util.get_or_create(&l).set(i64::from(u));
                if let Some(r) = utilization(Some(u), c.config.tx_util_full_scale) {
                    util_ratio.get_or_create(&l).set(r);
                }
            }
        }
        for (reason, count) in &n.drops {
            let name = intscope_wire::report::drop_reason_name(*reason)
                .map_or_else(|| reason.to_string(), str::to_string);
            drops
                .get_or_create(&labels(&[("node", node.to_string()), ("reason", name)]))
                .inc_by(*count);
        }
    }
    reg.register(
        "port_tx_utilization",
        "Egress port Tx utilization reported (device units)",
        util,
    );
    reg.register(
        "port_tx_utilization_ratio",
        "Egress port Tx utilization as a fraction of line rate (tx_util_full_scale = 1)",
        util_ratio,
    );
    reg.register("drops", "Drops reported, by node and reason", drops);
    drop(s);
    let mut out = String::new();
    let _ = encode(&mut out, &reg);
    out
}

async fn metrics(AxState(c): Shared) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        render_metrics(&c),
    )
}

/// Serves the API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    collector: Arc<Collector>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(collector))
        .with_graceful_shutdown(shutdown)
        .await
}
