//! The HTTP API (JSON; described in `docs/collector-api.openapi.yaml`, which
//! `tests/openapi.rs` checks every endpoint's answer against) and the Prometheus `/metrics`
//! endpoint, served by axum from the shared [`Collector`]. Each answer is a typed response
//! (`#[derive(Serialize)]`, core's types where they exist); `/api/stats` and `/metrics` render
//! one list of counters declared in [`intscope_core::counters`].
//!
//! Every answer is bounded: lists take a `limit` with a documented maximum (a 400 above it) and
//! page by an opaque cursor; history queries run on the blocking pool, a bounded number at once
//! (503 beyond), each with a deadline SQLite enforces (504); `/metrics` renders at most
//! `max_series` series. Off loopback a bearer token guards the API (see [`ApiConfig`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, Request, State as AxState};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use intscope_core::counters::{self, Samples};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::api_config::ApiConfig;
use crate::http::{ErrorBody, HttpStats};
use crate::hub::{Collector, Published};
use crate::openmetrics;
use crate::store::{
    FlowInterval, HistoryQuery, Page, QueueInterval, RowCounts, Store, StoreError, StoredEvent,
    StoredFlow, StoredIncident, Totals,
};
use intscope_core::{Event, EventKind, FlowRef, Incident};

use intscope_core::{FlowSearch, FlowView, Snapshot};

/// Most flows one `/api/flows` page holds.
pub const MAX_FLOWS_LIMIT: usize = 10_000;
/// Largest `offset` of `/api/flows` (deeper pages: follow `next`).
pub const MAX_FLOWS_OFFSET: usize = 100_000;
/// Most nodes or links one page holds (also the default).
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Most queues one `/api/queues` page holds (each carries its recent series; also the default).
pub const MAX_QUEUES_LIMIT: usize = 5_000;
/// Most sources (node, hw_id) `/api/stats` lists (the count is always complete).
pub const MAX_STATS_SOURCES: usize = 1_000;
/// Most events one server-sent-events message batch carries; the rest follow at once.
pub const STREAM_BATCH: usize = 256;

/// Counters of the API (shown by `/metrics` and `/api/stats`).
#[derive(Debug, Default)]
pub struct ApiStats {
    /// Requests refused for a missing or wrong token.
    pub unauthorized: AtomicU64,
    /// Requests refused as malformed or out of range (400).
    pub bad_requests: AtomicU64,
    /// History queries that ran past `query_timeout` (504).
    pub query_timeouts: AtomicU64,
    /// History queries refused because `max_queries` were under way (503).
    pub queries_refused: AtomicU64,
    /// Event streams refused because `max_streams` were open (503).
    pub streams_refused: AtomicU64,
    /// Event streams ended because the client read too slowly: events it had not been sent
    /// left the in-memory log.
    pub streams_dropped_lagged: AtomicU64,
    /// Series left out of the last `/metrics` answer (`max_series`).
    pub metrics_series_truncated: AtomicU64,
    /// History queries answered 503 because the store (a ClickHouse shard) was unreachable.
    pub store_unavailable: AtomicU64,
}

impl ApiStats {
    /// Adds the requests refused or cut short, by reason, to `out` (the series truncated are
    /// added by whoever renders: `/metrics` its own answer's, `/api/stats` the last one's).
    pub fn sample(&self, out: &mut Samples) {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (reason, n) in [
            ("unauthorized", g(&self.unauthorized)),
            ("bad_request", g(&self.bad_requests)),
            ("query_timeout", g(&self.query_timeouts)),
            ("queries_busy", g(&self.queries_refused)),
            ("streams_busy", g(&self.streams_refused)),
            ("stream_lagged", g(&self.streams_dropped_lagged)),
            ("store_unavailable", g(&self.store_unavailable)),
        ] {
            out.add(&counters::API_REQUESTS_FAILED, &[reason], n);
        }
    }
}

/// What the handlers share: the collector, the settings, the counters and the slots.
#[derive(Debug)]
pub struct Api {
    /// The collector served.
    pub collector: Arc<Collector>,
    /// Settings.
    pub cfg: ApiConfig,
    /// API counters.
    pub stats: ApiStats,
    /// HTTP server counters.
    pub http: Arc<HttpStats>,
    /// The webhook's counters, once one is started (set once: `/metrics` shows them).
    pub webhook: std::sync::OnceLock<Arc<crate::webhook::WebhookStats>>,
    queries: Arc<Semaphore>,
    streams: Arc<Semaphore>,
    lists: Arc<Semaphore>,
}

impl Api {
    /// The API of `collector` with `cfg`.
    pub fn new(collector: Arc<Collector>, cfg: ApiConfig) -> Arc<Self> {
        Arc::new(Api {
            collector,
            queries: Arc::new(Semaphore::new(cfg.max_queries.max(1))),
            streams: Arc::new(Semaphore::new(cfg.max_streams.max(1))),
            lists: Arc::new(Semaphore::new(cfg.max_list_requests.max(1))),
            cfg,
            stats: ApiStats::default(),
            http: Arc::new(HttpStats::default()),
            webhook: std::sync::OnceLock::new(),
        })
    }
}

/// The router of the API with the default settings (open, loopback use).
pub fn router(collector: Arc<Collector>) -> Router {
    app(Api::new(collector, ApiConfig::default()))
}

/// The router of the API: routes, the token check, the request timeout.
pub fn app(api: Arc<Api>) -> Router {
    let timeout = tower_http::timeout::TimeoutLayer::with_status_code(
        StatusCode::SERVICE_UNAVAILABLE,
        api.cfg.request_timeout,
    );
    let app = Router::new()
        .route("/api/stats", get(stats))
        .route("/api/nodes", get(nodes))
        .route("/api/names", get(names))
        .route("/api/links", get(links))
        .route("/api/queues", get(queues))
        .route("/api/flows", get(flows))
        .route("/api/flows/{id}", get(flow))
        .route("/api/events", get(events))
        .route("/api/events/stream", get(event_stream))
        .route("/api/incidents", get(incidents))
        .route("/api/incidents/{id}", get(incident))
        .route("/api/history/events", get(history_events))
        .route("/api/history/flows", get(history_flows))
        .route("/api/history/queues", get(history_queues))
        .route("/api/history/incidents", get(history_incidents))
        .route("/metrics", get(metrics))
        .merge(crate::ui::routes())
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&api),
            one_list_at_a_time,
        ))
        .layer(timeout)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&api), auth));
    // The fabric-wide reads of the store (every collector writing to it), as `intscope serve`
    // answers them.
    let fabric = api.collector.store.clone().map(|store| {
        crate::api_cluster::app(
            crate::api_cluster::FabricApi::named(
                store,
                api.cfg.clone(),
                Arc::clone(&api.collector.config.names),
            ),
            "/api/fabric",
        )
    });
    let app = app.with_state(api);
    match fabric {
        Some(f) => app.merge(f),
        None => app,
    }
}

type Shared = AxState<Arc<Api>>;

/// An HTTP error: status and a JSON body `{"error": message, "status": code}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad(api: &Api, message: impl Into<String>) -> Self {
        api.stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn store(api: &Api, e: StoreError) -> Self {
        match e {
            StoreError::BadRequest(m) => ApiError::bad(api, m),
            StoreError::Timeout => {
                api.stats.query_timeouts.fetch_add(1, Ordering::Relaxed);
                ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "history query ran past {} ms and was stopped; narrow it (since, until, limit)",
                        api.cfg.query_timeout.as_millis()
                    ),
                )
            }
            StoreError::Busy => {
                api.stats.queries_refused.fetch_add(1, Ordering::Relaxed);
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            StoreError::Unavailable(_) => {
                api.stats.store_unavailable.fetch_add(1, Ordering::Relaxed);
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.public_message()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ErrorBody {
            error: self.message,
            status: self.status.as_u16(),
        });
        (self.status, body).into_response()
    }
}

/// A query string, its errors answered as JSON 400s.
struct Q<T>(T);

impl<T: serde::de::DeserializeOwned> FromRequestParts<Arc<Api>> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| Q(v))
            .map_err(|e| ApiError::bad(api, e.body_text()))
    }
}

/// The token check: `/api/` and `/metrics` need the bearer token when one is configured; the
/// UI's files (code, no data) do not.
async fn auth(AxState(api): Shared, req: Request, next: Next) -> Response {
    let Some(token) = api.cfg.token.as_deref() else {
        crate::http::mark_authenticated(&req);
        return next.run(req).await;
    };
    let path = req.uri().path();
    if !(path.starts_with("/api/") || path == "/metrics") {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    #[derive(serde::Deserialize)]
    struct AccessToken {
        access_token: Option<String>,
    }
    let given = header.or_else(|| {
        (path == "/api/events/stream")
            .then(|| Query::<AccessToken>::try_from_uri(req.uri()).ok())
            .flatten()
            .and_then(|Query(q)| q.access_token)
    });
    if given.is_some_and(|g| {
        bool::from(subtle::ConstantTimeEq::ct_eq(
            g.as_bytes(),
            token.as_bytes(),
        ))
    }) {
        crate::http::mark_authenticated(&req);
        return next.run(req).await;
    }
    api.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this API needs a bearer token (Authorization: Bearer <token>)",
    )
    .into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"intscope\""),
    );
    r
}

/// Lets at most `max_list_requests` requests for the large live lists run at once: their
/// handlers build the whole answer on a worker thread, so without a bound a flood of them
/// (slow readers asking again and again) keeps every worker busy and starves the small
/// requests and the accept loop.
async fn one_list_at_a_time(AxState(api): Shared, req: Request, next: Next) -> Response {
    const LISTS: [&str; 7] = [
        "/api/flows",
        "/api/nodes",
        "/api/links",
        "/api/queues",
        "/api/events",
        "/api/incidents",
        "/metrics",
    ];
    if !LISTS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    // Never closed: the semaphore lives as long as the API.
    let _turn = api.lists.acquire().await;
    next.run(req).await
}

/// Runs `f` on the latest published snapshot of the live state: reads never take the shard
/// locks ingest writes under (see [`Collector::snapshot`]).
fn with_snapshot<T>(c: &Collector, f: impl FnOnce(&Snapshot) -> T) -> Result<T, ApiError> {
    with_published(&c.snapshot(), f)
}

fn with_published<T>(p: &Published, f: impl FnOnce(&Snapshot) -> T) -> Result<T, ApiError> {
    Ok(f(&p.state))
}

/// Checks a `limit` against its maximum: the default when absent, a 400 when 0 or above.
fn limit(api: &Api, given: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    match given.unwrap_or(default) {
        0 => Err(ApiError::bad(api, "limit must be at least 1")),
        n if n > max => Err(ApiError::bad(
            api,
            format!("limit {n} is above the maximum of {max}; page with `cursor`"),
        )),
        n => Ok(n),
    }
}

/// Parses a cursor of `N` dot-separated numbers (the key of a page's last row).
fn parse_cursor<const N: usize>(api: &Api, c: Option<&str>) -> Result<Option<[u64; N]>, ApiError> {
    let Some(c) = c.filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    let parts: Vec<u64> = c
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| ApiError::bad(api, format!("cursor {c:?} is not one this endpoint issued")))?;
    <[u64; N]>::try_from(parts)
        .map(Some)
        .map_err(|_| ApiError::bad(api, format!("cursor {c:?} is not one this endpoint issued")))
}

fn cursor_text(key: &[u64]) -> String {
    key.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

/// A page of an array endpoint: the rows after `after` (sorted by key), at most `limit`, and the
/// `Link: <...>; rel="next"` header (RFC 8288) when more follow.
fn array_page<const N: usize, T: Serialize>(
    path: &str,
    mut rows: Vec<([u64; N], T)>,
    after: Option<[u64; N]>,
    limit: usize,
) -> (HeaderMap, Json<Vec<T>>) {
    rows.sort_unstable_by_key(|r| r.0);
    let start = after.map_or(0, |a| rows.partition_point(|(k, _)| *k <= a));
    let more = rows.len() - start > limit;
    let page: Vec<([u64; N], T)> = rows.drain(start..).take(limit).collect();
    let mut headers = HeaderMap::new();
    if more && let Some((k, _)) = page.last() {
        let link = format!(
            "<{path}?limit={limit}&cursor={}>; rel=\"next\"",
            cursor_text(k)
        );
        if let Ok(v) = HeaderValue::from_str(&link) {
            headers.insert(header::LINK, v);
        }
    }
    (headers, Json(page.into_iter().map(|(_, v)| v).collect()))
}

/// Runs a store query on the blocking pool: at most `max_queries` at once (503 beyond), each
/// within `query_timeout` (504 after it: SQLite interrupts the query itself).
async fn store_query<T: Send + 'static>(
    api: &Arc<Api>,
    mut q: HistoryQuery,
    f: impl FnOnce(&dyn Store, &HistoryQuery) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let Some(store) = api.collector.store.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no history store (start with --data DIR)",
        ));
    };
    let Ok(slot) = Arc::clone(&api.queries).try_acquire_owned() else {
        return Err(ApiError::store(api, StoreError::Busy));
    };
    q.timeout = Some(api.cfg.query_timeout);
    q.rollup_after = Some(api.cfg.rollup_after);
    q.resolution = Some(q.pick_resolution());
    let task = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        f(&*store, &q)
    });
    // SQLite stops the query at the deadline; this is the backstop should it not.
    match tokio::time::timeout(api.cfg.query_timeout + Duration::from_secs(1), task).await {
        Ok(Ok(r)) => r.map_err(|e| ApiError::store(api, e)),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.to_string(),
        )),
        Err(_) => Err(ApiError::store(api, StoreError::Timeout)),
    }
}

/// The collector's counters at one moment, declared in [`counters`]: the state's totals and the
/// ingest counts from the published snapshot (read together, so every datagram counted is in the
/// state), the incident and event logs (their own lock, never a shard lock: incidents as of the
/// shards' last hand-over), and the HTTP, API and store counters read now. `/api/stats` and
/// `/metrics` both render these.
pub fn sample_counters(api: &Api, published: &Published, out: &mut Samples) {
    let c = &api.collector;
    {
        // The incident log as the shards last handed over (each tick): reading it takes the
        // log's lock only, never a shard's.
        let log = c.state.events();
        log.incidents.sample(out);
        counters::sample_events_evicted(log.evicted(), out);
    }
    published.ingest.sample(c.stats.kernel_dropped(), out);
    c.stats.port_guard.sample(out);
    api.http.sample(out);
    api.stats.sample(out);
    if let Some(store) = &c.store {
        c.store_stats
            .sample(c.raw_skipped.load(Ordering::Relaxed), out);
        // A store without a spool (SQLite) has nothing waiting: its zeros are true.
        store.spool_stats().unwrap_or_default().sample(out);
    }
    published.state.sample(out);
    let age = crate::clock::now_ns().saturating_sub(published.at_ns) / 1_000_000;
    out.add(&counters::SNAPSHOT_AGE, &[], age);
    out.add(
        &counters::SNAPSHOT_COST,
        &[],
        published.previous_cost_ns / 1_000_000,
    );
}

/// One report source's sequence accounting in `/api/stats`.
#[derive(Debug, Serialize)]
pub struct SourceStats {
    /// Node ID.
    pub node_id: u32,
    /// Hardware ID.
    pub hw_id: u8,
    /// Report groups (datagrams) received.
    pub report_groups_received: u64,
    /// Reports received.
    pub reports_received: u64,
    /// Report groups missing from sequence gaps.
    pub report_groups_lost: u64,
    /// Reports missing from sequence gaps.
    pub reports_lost: u64,
    /// Late report groups that filled a gap.
    pub report_groups_reordered: u64,
    /// Sequence restarts.
    pub restarts: u64,
    /// Sequence numbers later numbers contradicted (corrupt or spoofed).
    pub implausible: u64,
    /// Reports of the other sequence width than the source's.
    pub width_conflicts: u64,
}

/// What `/api/stats` holds besides the counters of [`sample_counters`]: the last decode error,
/// the kernel's drop count (`null` where unknown), the limits, the sources, and the store's row
/// counts and totals as its writer last read them.
#[derive(Debug, Serialize)]
pub struct StatsBase<'a> {
    /// Ingest details that are not counters.
    pub ingest: IngestDetail,
    /// The state's limits.
    pub limits: &'a intscope_core::Limits,
    /// Sources in (node, hw_id) order, at most [`MAX_STATS_SOURCES`].
    pub sources: Vec<SourceStats>,
    /// The store (`null` without one).
    pub store: Option<StoreDetail>,
}

/// The ingest details of `/api/stats` that are not counters.
#[derive(Debug, Serialize)]
pub struct IngestDetail {
    /// Datagrams the kernel dropped (`null` where /proc is not readable; a counter otherwise).
    pub kernel_dropped: Option<u64>,
    /// The last decode error.
    pub last_error: Option<String>,
}

/// The store's contents as its writer last read them (`null` before its first read or where
/// the read failed).
#[derive(Debug, Serialize)]
pub struct StoreDetail {
    /// Rows per table.
    pub rows: Option<RowCounts>,
    /// This collector's stored totals by name (its own runs only).
    pub totals: Option<Totals>,
    /// Every collector's, in a store several share (ClickHouse); `null` otherwise.
    pub fabric_totals: Option<Totals>,
}

/// The nodes' names from the topology (`crate::names`): `{"nodes": {"<id>": "<name>"}}`,
/// empty where none was given. Bounded by the names' own bounds (at most 65 536 of 64 bytes).
async fn names(AxState(api): Shared) -> Json<Value> {
    Json(serde_json::json!({ "nodes": &*api.collector.config.names }))
}

async fn stats(AxState(api): Shared) -> Json<Value> {
    let c = &api.collector;
    let published = c.snapshot();
    let mut samples = Samples::default();
    sample_counters(&api, &published, &mut samples);
    samples.add(
        &counters::METRICS_SERIES_TRUNCATED,
        &[],
        api.stats.metrics_series_truncated.load(Ordering::Relaxed),
    );
    // What the writer last read: the API never waits on the database it is writing.
    let store = c.store.as_ref().map(|_| {
        let snap = c
            .store_stats
            .snapshot
            .lock()
            .map(|s| s.clone())
            .unwrap_or(None)
            .unwrap_or_default();
        StoreDetail {
            rows: snap.rows,
            totals: snap.totals,
            fabric_totals: snap.fabric_totals,
        }
    });
    let s = &published.state;
    let mut sources: Vec<_> = s.sources().collect();
    sources.sort_unstable_by_key(|(k, _)| *k);
    let sources = sources
        .into_iter()
        .take(MAX_STATS_SOURCES)
        .map(|((node, hw), st)| SourceStats {
            node_id: node,
            hw_id: hw,
            report_groups_received: st.groups_received,
            reports_received: st.reports_received,
            report_groups_lost: st.groups_lost,
            reports_lost: st.reports_lost,
            report_groups_reordered: st.reordered,
            restarts: st.restarts,
            implausible: st.implausible,
            width_conflicts: st.width_conflicts,
        })
        .collect();
    let base = StatsBase {
        ingest: IngestDetail {
            kernel_dropped: c.stats.kernel_dropped(),
            last_error: c.stats.last_error.lock().map(|e| e.clone()).unwrap_or(None),
        },
        limits: &c.config.limits,
        sources,
        store,
    };
    let mut v = serde_json::to_value(base).unwrap_or(Value::Null);
    counters::merge_json(&mut v, samples.to_json());
    Json(v)
}

async fn history_events(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredEvent>>, ApiError> {
    store_query(&api, q, |s, q| s.events(q)).await.map(Json)
}

async fn history_flows(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredFlow>>, ApiError> {
    store_query(&api, q, |s, q| s.flows(q)).await.map(Json)
}

/// Stored incidents, each as its newest version, most recently started first:
/// `?since&until&kind&node&limit&cursor` → `{"incidents": [...], "next"}`.
async fn history_incidents(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredIncident>>, ApiError> {
    store_query(&api, q, |s, q| s.incidents(q)).await.map(Json)
}

async fn history_queues(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<QueueInterval>>, ApiError> {
    store_query(&api, q, |s, q| s.queue_series(q))
        .await
        .map(Json)
}

/// A reported Tx utilization as a fraction of line rate (`tx_util_full_scale` is 1.0).
fn utilization(tx_util: Option<u32>, full_scale: u32) -> Option<f64> {
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

async fn nodes(AxState(api): Shared, Q(q): Q<ListQuery>) -> Result<impl IntoResponse, ApiError> {
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
                        hop_latency_baseline: ps.latency_baseline.round(),
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

async fn links(AxState(api): Shared, Q(q): Q<ListQuery>) -> Result<impl IntoResponse, ApiError> {
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

async fn queues(AxState(api): Shared, Q(q): Q<ListQuery>) -> Result<impl IntoResponse, ApiError> {
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

/// Query of `/api/flows`.
#[derive(Debug, serde::Deserialize)]
pub struct FlowQuery {
    /// Page size (default 100, at most [`MAX_FLOWS_LIMIT`]).
    pub limit: Option<usize>,
    /// Rows to skip (at most [`MAX_FLOWS_OFFSET`]).
    pub offset: Option<usize>,
    /// Continue after the last flow of a previous page (its `next`).
    pub cursor: Option<String>,
    /// `last_seen` (default), `reports`, `drops`, `p99`, `path_changes`, `first_seen`.
    pub sort: Option<String>,
    /// Substring of the flow's addresses or ports.
    pub q: Option<String>,
    /// Only flows whose path crosses this node.
    pub node: Option<u32>,
}

/// A flow of `/api/flows` (and the head of a flow's page).
#[derive(Debug, Serialize)]
pub struct FlowSummary {
    /// Dense ID.
    pub id: u64,
    /// The flow's addresses and ports.
    pub flow: FlowRef,
    /// First report, ns.
    pub first_seen_ns: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// Reports.
    pub reports: u64,
    /// Drop reports.
    pub drops: u64,
    /// Last drop reason.
    pub last_drop_reason: Option<u8>,
    /// Node IDs of the current path, source first.
    pub path: Vec<u32>,
    /// Path changes.
    pub path_changes: u64,
    /// Median end-to-end latency, ns.
    pub e2e_latency_p50: Option<u64>,
    /// 99th percentile end-to-end latency, ns.
    pub e2e_latency_p99: Option<u64>,
}

impl From<&FlowView> for FlowSummary {
    fn from(f: &FlowView) -> Self {
        FlowSummary {
            id: f.id,
            flow: FlowRef::from(&f.key),
            first_seen_ns: f.first_seen_ns,
            last_seen_ns: f.last_seen_ns,
            reports: f.reports,
            drops: f.drops,
            last_drop_reason: f.last_drop_reason,
            path: f.path.iter().map(|h| h.node_id).collect(),
            path_changes: u64::from(f.path_changes),
            e2e_latency_p50: f.e2e_p50(),
            e2e_latency_p99: f.e2e_p99(),
        }
    }
}

/// A page of `/api/flows`.
#[derive(Debug, Serialize)]
pub struct FlowPage {
    /// Flows matching the filters (all pages).
    pub total: usize,
    /// This page.
    pub flows: Vec<FlowSummary>,
    /// Cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

/// A path and when it was first seen.
#[derive(Debug, Serialize)]
pub struct PathSince {
    /// When it was first seen, ns.
    pub since_ns: u64,
    /// The path, source first.
    pub path: intscope_core::Path,
}

/// One flow of `/api/flows/{id}`.
#[derive(Debug, Serialize)]
pub struct FlowDetail {
    /// What the flow list shows.
    #[serde(flatten)]
    pub summary: FlowSummary,
    /// The current path, hop by hop.
    pub path_detail: intscope_core::Path,
    /// Recent paths, oldest first, ending with the current one.
    pub path_history: Vec<PathSince>,
    /// The last latency sample (a list of at most one).
    pub series: intscope_core::LastSample,
    /// The flow's events in the in-memory log.
    pub events: Vec<Event>,
    /// With a store: the flow's series per store interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<FlowInterval>>,
}

async fn flows(AxState(api): Shared, Q(q): Q<FlowQuery>) -> Result<Json<FlowPage>, ApiError> {
    let limit = limit(&api, q.limit, 100, MAX_FLOWS_LIMIT)?;
    let offset = q.offset.unwrap_or(0);
    if offset > MAX_FLOWS_OFFSET {
        return Err(ApiError::bad(
            &api,
            format!(
                "offset {offset} is above the maximum of {MAX_FLOWS_OFFSET}; page with `cursor`"
            ),
        ));
    }
    let sort = q.sort.as_deref().unwrap_or("last_seen");
    // One key per flow, read once in the same pass as the filters (the flows are many),
    // larger first; ties by ID.
    let key: fn(&FlowView) -> u64 = match sort {
        "reports" => |f| f.reports,
        "drops" => |f| f.drops,
        "p99" => |f| f.e2e_p99().unwrap_or(0),
        "path_changes" => |f| u64::from(f.path_changes),
        "first_seen" => |f| u64::MAX - f.first_seen_ns,
        "last_seen" => |f| f.last_seen_ns,
        other => {
            return Err(ApiError::bad(
                &api,
                format!(
                    "sort {other:?}: one of last_seen, reports, drops, p99, path_changes, first_seen"
                ),
            ));
        }
    };
    // A cursor is the sort, the key and the ID of the page's last flow: the next page is the
    // flows after it in the same order.
    let after = match q.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => {
            let (s, rest) = c.split_once('.').unwrap_or(("", c));
            if s != sort {
                return Err(ApiError::bad(
                    &api,
                    format!("cursor {c:?} is not one of sort {sort:?}"),
                ));
            }
            let [k, id] = parse_cursor::<2>(&api, Some(rest))?.unwrap_or_default();
            Some((std::cmp::Reverse(k), id))
        }
    };
    // Built before the state is locked: its tables take a millisecond or two.
    let mut search = q.q.as_deref().map(|t| FlowSearch::new(&t.to_lowercase()));
    with_snapshot(&api.collector, |s| {
        // The page is among the `wanted` first flows: only those are kept, so nothing is
        // collected for the rest of a million; one more tells whether a next page exists.
        let wanted = offset.saturating_add(limit).saturating_add(1);
        let mut total = 0usize;
        let matching = s
            .flows()
            .filter(|f| q.node.is_none_or(|n| f.path.iter().any(|h| h.node_id == n)))
            .filter(|f| search.as_mut().is_none_or(|search| search.matches(&f.key)))
            .inspect(|_| total += 1)
            .filter(|f| after.is_none_or(|a| (std::cmp::Reverse(key(f)), f.id) > a));
        // Larger sort key first; ties by ID.
        let first =
            intscope_core::smallest(matching, wanted, |f| (std::cmp::Reverse(key(f)), f.id));
        let more = first.len() == wanted;
        let page: Vec<FlowView> = first.into_iter().skip(offset).take(limit).collect();
        let next = more
            .then(|| page.last().map(|f| format!("{sort}.{}.{}", key(f), f.id)))
            .flatten();
        Json(FlowPage {
            total,
            flows: page.iter().map(FlowSummary::from).collect(),
            next,
        })
    })
}

async fn flow(
    AxState(api): Shared,
    id: Result<Path<u64>, axum::extract::rejection::PathRejection>,
) -> Result<Json<FlowDetail>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad(&api, e.body_text()))?;
    let found = with_snapshot(&api.collector, |s| {
        let f = s.flow_by_id(id)?;
        // Its samples and earlier paths are read from the live flow (one flow under its
        // shard's lock): published rows leave them out to stay small. A flow that left since the
        // snapshot is gone.
        let recent = api.collector.state.flow_recent(&f.key, id)?;
        Some({
            // The event log has its own lock, which the shards take only to append.
            let log = api.collector.state.events();
            let events: Vec<Event> = log
                .events()
                .iter()
                .filter(|e| e.flow_id == Some(id))
                .map(|e| log.linked(e))
                .collect();
            drop(log);
            FlowDetail {
                summary: FlowSummary::from(&f),
                path_detail: Arc::clone(&f.path),
                path_history: recent
                    .paths
                    .into_iter()
                    .map(|(since_ns, path)| PathSince { since_ns, path })
                    .collect(),
                series: recent.samples,
                events,
                intervals: None,
            }
        })
    })?;
    let Some(mut detail) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no flow with id {id}"),
        ));
    };
    // The flow's longer history, per store interval (a disk read, on the blocking pool).
    if api.collector.store.is_some() {
        let key = detail.summary.flow.clone();
        detail.intervals = Some(
            store_query(&api, HistoryQuery::default(), move |s, q| {
                s.flow_series(&key, q)
            })
            .await?,
        );
    }
    Ok(Json(detail))
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
    /// Only events with a smaller ID: the next page back (from the `Link` header).
    pub cursor: Option<String>,
    /// At most this many, newest first (default 200, at most the log's size,
    /// [`intscope_core::EVENT_LOG`]).
    pub limit: Option<usize>,
}

async fn events(AxState(api): Shared, Q(q): Q<EventQuery>) -> Result<impl IntoResponse, ApiError> {
    let limit = limit(&api, q.limit, 200, intscope_core::EVENT_LOG)?;
    let before = parse_cursor::<1>(&api, q.cursor.as_deref())?;
    // Only the event log's own lock, held while the page is copied out: never the shard locks
    // ingest writes under, and no serializing under any lock.
    let page: Vec<Event> = {
        let log = api.collector.state.events();
        log.events()
            .iter()
            .rev()
            .filter(|e| selected(e, q.kind, q.node, q.flow))
            .filter(|e| q.after.is_none_or(|a| e.id > a))
            .filter(|e| before.is_none_or(|[b]| e.id < b))
            .take(limit + 1)
            .map(|e| log.linked(e))
            .collect()
    };
    // Keyed by the reverse of the ID: newest first, and the cursor is the last ID sent.
    let rows: Vec<([u64; 1], Event)> = page.into_iter().map(|e| ([u64::MAX - e.id], e)).collect();
    let (mut headers, body) = array_page("/api/events", rows, None, limit);
    // The Link header names the next page by the last ID, not its reverse.
    if let Some(last) = body.0.last().map(|e| e.id)
        && headers.contains_key(header::LINK)
        && let Ok(v) = HeaderValue::from_str(&format!(
            "</api/events?limit={limit}&cursor={last}>; rel=\"next\""
        ))
    {
        headers.insert(header::LINK, v);
    }
    Ok((headers, body))
}

/// Whether `e` passes the kind, node and flow filters of an events query.
fn selected(e: &Event, kind: Option<EventKind>, node: Option<u32>, flow: Option<u64>) -> bool {
    kind.is_none_or(|k| e.kind == k)
        && node.is_none_or(|n| e.node_id == Some(n))
        && flow.is_none_or(|f| e.flow_id == Some(f))
}

/// Most incidents one page of `/api/incidents` holds (default [`INCIDENTS_DEFAULT`]).
pub const INCIDENTS_MAX: usize = 1000;
/// Incidents a page holds when the query names no `limit`.
pub const INCIDENTS_DEFAULT: usize = 100;

/// Query of `/api/incidents`.
#[derive(Debug, serde::Deserialize)]
pub struct IncidentQuery {
    /// Only `ongoing` or `resolved` ones.
    pub state: Option<intscope_core::IncidentState>,
    /// Only this kind (its label, e.g. `path-change`).
    pub kind: Option<String>,
    /// Only incidents at this node (as the place's node or its peer).
    pub node: Option<u32>,
    /// Only incidents that lasted until this switch time or later (ns).
    pub since: Option<u64>,
    /// Only incidents that started at this switch time or earlier (ns).
    pub until: Option<u64>,
    /// At most this many, newest (highest ID) first: default [`INCIDENTS_DEFAULT`], at most
    /// [`INCIDENTS_MAX`].
    pub limit: Option<usize>,
    /// The `next` of the previous page: only incidents with a smaller ID.
    pub cursor: Option<String>,
}

/// `GET /api/incidents`: `{"incidents": [Incident...], "next": cursor or null}`, newest first.
/// A page of `/api/incidents`.
#[derive(Debug, Serialize)]
pub struct IncidentPage {
    /// Newest (highest ID) first.
    pub incidents: Vec<Incident>,
    /// Cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

async fn incidents(
    AxState(api): Shared,
    Q(q): Q<IncidentQuery>,
) -> Result<Json<IncidentPage>, ApiError> {
    use intscope_core::IncidentKind;
    let limit = limit(&api, q.limit, INCIDENTS_DEFAULT, INCIDENTS_MAX)?;
    let before = parse_cursor::<1>(&api, q.cursor.as_deref())?.map(|[b]| b);
    let kind = match q.kind.as_deref() {
        None => None,
        Some(k) => Some(IncidentKind::from_label(k).ok_or_else(|| {
            let known: Vec<_> = IncidentKind::ALL.iter().map(|k| k.label()).collect();
            ApiError::bad(&api, format!("kind {k:?} is none of {}", known.join(", ")))
        })?),
    };
    let mut page = api.collector.with_incidents(|log| {
        let mut page: Vec<&intscope_core::Incident> = log
            .iter()
            .filter(|i| q.state.is_none_or(|s| i.state == s))
            .filter(|i| kind.is_none_or(|k| i.kind == k))
            .filter(|i| {
                q.node
                    .is_none_or(|n| i.place.node == Some(n) || i.place.peer_node == Some(n))
            })
            // An ongoing incident lasts until now: it overlaps every range after its start (an
            // outage sends no evidence, so its last update can be long before the range).
            .filter(|i| q.since.is_none_or(|t| i.end_ns.is_none_or(|end| end >= t)))
            .filter(|i| q.until.is_none_or(|t| i.start_ns <= t))
            .filter(|i| before.is_none_or(|b| i.id < b))
            .collect();
        page.sort_unstable_by_key(|i| std::cmp::Reverse(i.id));
        page.truncate(limit + 1);
        page.into_iter().cloned().collect::<Vec<Incident>>()
    });
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|i| i.id.to_string())
    });
    Ok(Json(IncidentPage {
        incidents: page,
        next: next.flatten(),
    }))
}

/// `GET /api/incidents/{id}`: the incident, or a JSON 404.
async fn incident(
    AxState(api): Shared,
    id: Result<Path<u64>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Incident>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad(&api, e.body_text()))?;
    api.collector
        .with_incidents(|log| log.get(id).cloned())
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no incident with id {id} (resolved ones leave after the newest 1024 of their kind)"),
            )
        })
}

/// The last message of an event stream whose client fell behind.
#[derive(Debug, Serialize)]
pub struct Lagged {
    /// Events it was not sent.
    pub missed: u64,
    /// The ID to pass as `after` to resume.
    pub resume_after: u64,
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
/// polled every 200 ms, so a slow client never holds the state lock, and a client costs one
/// batch of at most [`STREAM_BATCH`] events: the stream moves only as fast as the client reads.
/// A client so slow that events it was not sent left the log gets a last `lagged` event and is
/// dropped (counted); `max_streams` streams at most are open at once.
async fn event_stream(
    AxState(api): Shared,
    Q(q): Q<StreamQuery>,
) -> Result<
    axum::response::sse::Sse<
        impl futures_util::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
    >,
    ApiError,
> {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    use futures_util::StreamExt;
    let Ok(slot) = Arc::clone(&api.streams).try_acquire_owned() else {
        api.stats.streams_refused.fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} event streams are open, the most allowed",
                api.cfg.max_streams
            ),
        ));
    };
    let start = q
        .after
        .unwrap_or_else(|| api.collector.state.events().next_id().saturating_sub(1));
    // (api, slot, last ID looked at, first poll, query); `None` once the stream is to end.
    let state = Some((api, slot, start, true, q));
    let stream = futures_util::stream::unfold(state, |state| async move {
        let (api, slot, mut last, mut first, q) = state?;
        loop {
            let from = last;
            let mut lagged = None;
            let batch: Vec<SseEvent> = {
                let log = api.collector.state.events();
                let oldest = log.events().front().map(|e| e.id);
                if !first
                    && let Some(o) = oldest
                    && o > from + 1
                {
                    lagged = Some(o - from - 1);
                }
                log.events()
                    .iter()
                    .filter(|e| e.id > from)
                    .take(STREAM_BATCH)
                    .inspect(|e| last = last.max(e.id))
                    .filter(|e| selected(e, q.kind, q.node, q.flow))
                    .map(|e| {
                        SseEvent::default()
                            .event(e.kind.label())
                            .id(e.id.to_string())
                            .data(serde_json::to_string(&log.linked(e)).unwrap_or_default())
                    })
                    .collect()
            };
            if let Some(missed) = lagged {
                api.stats
                    .streams_dropped_lagged
                    .fetch_add(1, Ordering::Relaxed);
                let bye = SseEvent::default().event("lagged").data(
                    serde_json::to_string(&Lagged {
                        missed,
                        resume_after: last,
                    })
                    .unwrap_or_default(),
                );
                return Some((futures_util::stream::iter(vec![Ok(bye)]), None));
            }
            if !batch.is_empty() {
                return Some((
                    futures_util::stream::iter(batch.into_iter().map(Ok).collect::<Vec<_>>()),
                    Some((api, slot, last, false, q)),
                ));
            }
            first = false;
            if last == from {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
    .flatten();
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Series `/metrics` may still render; those beyond are counted instead.
struct Budget {
    left: usize,
    truncated: u64,
}

impl Budget {
    fn take(&mut self) -> bool {
        if self.left == 0 {
            self.truncated += 1;
            false
        } else {
            self.left -= 1;
            true
        }
    }
}

/// Adds the network's per-entity series (loss per source, queues, ports, drops per node, in
/// that order) while `budget` lasts.
fn sample_inventory(s: &Snapshot, full_scale: u32, budget: &mut Budget, out: &mut Samples) {
    for ((node, hw), st) in s.sources() {
        // Two series a source, each within the budget.
        if !budget.take() {
            continue;
        }
        let (node, hw) = (node.to_string(), hw.to_string());
        out.add(&counters::REPORTS_LOST, &[&node, &hw], st.reports_lost);
        if budget.take() {
            out.add(&counters::REPORT_GROUPS_LOST, &[&node, &hw], st.groups_lost);
        }
    }
    for (k, qs) in s.queues() {
        if !budget.take() {
            continue;
        }
        let l = [
            k.node().to_string(),
            k.port().to_string(),
            k.queue().to_string(),
        ];
        let l = [l[0].as_str(), l[1].as_str(), l[2].as_str()];
        out.add(&counters::QUEUE_OCCUPANCY, &l, u64::from(qs.occupancy));
        if let Some(lat) = qs.hop_latency {
            out.add(&counters::QUEUE_HOP_LATENCY, &l, u64::from(lat));
        }
    }
    for (node, n) in s.nodes() {
        let node_s = node.to_string();
        for (port, ps) in &n.ports {
            if let Some(u) = ps.tx_util {
                if !budget.take() {
                    continue;
                }
                let port = port.to_string();
                out.add(
                    &counters::PORT_TX_UTILIZATION,
                    &[&node_s, &port],
                    u64::from(u),
                );
                if let Some(r) = utilization(Some(u), full_scale) {
                    out.add_float(&counters::PORT_TX_UTILIZATION_RATIO, &[&node_s, &port], r);
                }
            }
        }
        for (reason, count) in &n.drops {
            if !budget.take() {
                continue;
            }
            let name = intscope_wire::report::drop_reason_name(*reason)
                .map_or_else(|| reason.to_string(), str::to_string);
            out.add(&counters::DROPS, &[&node_s, &name], *count);
        }
    }
}

/// Renders the metrics in the OpenMetrics text format: the counters of [`sample_counters`] (as
/// `/api/stats` shows them) and the network's per-entity series, all declared in [`counters`].
/// Label values come from small sets (outcome, version, kind) or from the network's own
/// inventory (node, port, queue). The inventory's series stop at `max_series` (in the order
/// sources, queues, ports, drops); `intscope_metrics_series_truncated` says how many were left
/// out, so the answer's size and time stay bounded whatever the input. Everything is read from
/// the published snapshot, never under the shard locks.
pub fn render_metrics(api: &Api) -> String {
    let published = api.collector.snapshot();
    let mut samples = Samples::default();
    sample_counters(api, &published, &mut samples);
    let mut budget = Budget {
        left: api.cfg.max_series,
        truncated: 0,
    };
    sample_inventory(
        &published.state,
        api.collector.config.tx_util_full_scale,
        &mut budget,
        &mut samples,
    );
    api.stats
        .metrics_series_truncated
        .store(budget.truncated, Ordering::Relaxed);
    samples.add(&counters::METRICS_SERIES_TRUNCATED, &[], budget.truncated);
    if let Some(w) = api.webhook.get() {
        w.sample(&mut samples);
    }
    openmetrics::text(samples)
}

async fn metrics(AxState(api): Shared) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        render_metrics(&api),
    )
}

/// Serves the API with the default settings on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    collector: Arc<Collector>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(
        listener,
        Api::new(collector, ApiConfig::default()),
        shutdown,
    )
    .await
}

/// Serves `api` on `listener` (its limits, TLS and token) until `shutdown` completes.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    api: Arc<Api>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (limits, tls, http) = (
        api.cfg.http.clone(),
        api.cfg.tls.clone(),
        Arc::clone(&api.http),
    );
    crate::http::serve(listener, app(api), limits, tls, http, shutdown).await
}
