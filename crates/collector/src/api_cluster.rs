//! The API in cluster mode: answers for the whole fabric from the history store (ClickHouse
//! written by every collector; SQLite works too, for one collector's history), with no live
//! state. `intscope serve` serves it, with the console ([`console_app`]); a collector mounts the
//! same routes under `/api/fabric`.
//!
//! Routes (JSON: the store's typed reads, [`crate::store::read`], serialized as they are; each
//! route's schema in `docs/collector-api.openapi.yaml`, `docs/scale-out.md`):
//! `GET /api/stats` (rows per table, counters summed over every collector and run),
//! `/api/flows` (flow summaries, newest first, paged), `/api/flow?src&dst&proto&src_port&dst_port`
//! (one flow: summary with its path, and its latency series), `/api/queues` (queue aggregates,
//! oldest first, paged), `/api/events`, `/api/incidents` (each incident's newest version), and
//! the same under `/api/history/`. Every list is bounded by `limit` (at most
//! [`MAX_HISTORY_LIMIT`](crate::store::MAX_HISTORY_LIMIT)); at most `max_queries` queries run at
//! once (503 beyond), each within `query_timeout` (504 after); a bearer token guards `/api/`
//! when configured.

use crate::view::FlowSummary;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Query, Request, State as AxState};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use tokio::sync::Semaphore;

use crate::api_config::ApiConfig;
use crate::store::{
    FlowInterval, HistoryQuery, Page, QueueInterval, Resolution, RowCounts, Store, StoreError,
    StoredEvent, StoredIncident, Totals,
};
use intscope_core::FlowRef;

/// The cluster API's shared state.
pub struct FabricApi {
    store: Arc<dyn Store>,
    cfg: ApiConfig,
    queries: Arc<Semaphore>,
    /// Queries refused or failed, by reason ([`FAILURES`]).
    failed: [AtomicU64; 5],
    /// The nodes' names (`serve --topology`), for the console.
    names: Arc<crate::names::NodeNames>,
}

/// The reasons of `intscope_fabric_queries_failed_total`, in [`FabricApi::failed`]'s order.
const FAILURES: [&str; 5] = ["bad_request", "busy", "timeout", "unavailable", "failed"];

fn failure(e: &StoreError) -> usize {
    match e {
        StoreError::BadRequest(_) => 0,
        StoreError::Busy => 1,
        StoreError::Timeout => 2,
        StoreError::Unavailable(_) => 3,
        _ => 4,
    }
}

impl std::fmt::Debug for FabricApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricApi").finish_non_exhaustive()
    }
}

impl FabricApi {
    /// The API over `store` with `cfg`'s token, query deadline and query bound.
    pub fn new(store: Arc<dyn Store>, cfg: ApiConfig) -> Arc<Self> {
        Self::named(store, cfg, Arc::default())
    }

    /// [`FabricApi::new`], answering `names` at `/names` (`crate::names`).
    pub fn named(
        store: Arc<dyn Store>,
        cfg: ApiConfig,
        names: Arc<crate::names::NodeNames>,
    ) -> Arc<Self> {
        Arc::new(FabricApi {
            store,
            queries: Arc::new(Semaphore::new(cfg.max_queries.max(1))),
            cfg,
            failed: Default::default(),
            names,
        })
    }
}

type Shared = AxState<Arc<FabricApi>>;

/// The routes, with the token check and the request timeout (paths as in the module
/// documentation; `prefix` is `/api` for `serve`, `/api/fabric` inside a collector).
pub fn app(api: Arc<FabricApi>, prefix: &str) -> Router {
    let timeout = tower_http::timeout::TimeoutLayer::with_status_code(
        StatusCode::SERVICE_UNAVAILABLE,
        api.cfg.request_timeout,
    );
    let p = |s: &str| format!("{prefix}{s}");
    Router::new()
        .route(&p("/stats"), get(stats))
        .route(&p("/names"), get(names))
        .route(&p("/flows"), get(flows))
        .route(&p("/history/flows"), get(flows))
        .route(&p("/flow"), get(flow))
        .route(&p("/queues"), get(queues))
        .route(&p("/history/queues"), get(queues))
        .route(&p("/events"), get(events))
        .route(&p("/history/events"), get(events))
        .route(&p("/incidents"), get(incidents))
        .route(&p("/history/incidents"), get(incidents))
        .layer(timeout)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&api), auth))
        .with_state(api)
}

/// The nodes' names by ID, as a collector's `/api/names` answers them.
async fn names(AxState(api): Shared) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "nodes": &*api.names }))
}

/// The web console (`ui`) for `intscope serve`, and a JSON 404 for whatever else is asked: the
/// console's live-state calls (nodes, links, the event stream) then read why they are missing
/// here, and show it, rather than an empty 404.
pub fn console_app() -> Router {
    crate::ui::routes().fallback(not_served)
}

async fn not_served(uri: axum::http::Uri) -> Response {
    let path = uri.path();
    let error = if path.starts_with("/api/") {
        format!(
            "{path} is not served by `intscope serve`, which reads the shared history store \
             (/api/stats, /api/names, /api/flows, /api/flow, /api/queues, /api/events, /api/incidents and \
             the same under /api/history/); live state (nodes, links, a flow or an incident by \
             ID, the event stream) is each collector's: open its console"
        )
    } else {
        format!("{path}: no such page; the console is at /")
    };
    Error(StatusCode::NOT_FOUND, error).into_response()
}

/// An HTTP error as JSON `{"error", "status"}`.
#[derive(Debug)]
struct Error(StatusCode, String);

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let body = Json(crate::http::ErrorBody {
            error: self.1,
            status: self.0.as_u16(),
        });
        (self.0, body).into_response()
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        let status = match e {
            StoreError::BadRequest(_) => StatusCode::BAD_REQUEST,
            StoreError::Timeout => StatusCode::GATEWAY_TIMEOUT,
            StoreError::Busy | StoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Error(status, e.public_message())
    }
}

/// A query string, its errors answered as JSON 400s.
struct Q<T>(T);

impl<T: serde::de::DeserializeOwned> FromRequestParts<Arc<FabricApi>> for Q<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &Arc<FabricApi>) -> Result<Self, Error> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| Q(v))
            .map_err(|e| Error(StatusCode::BAD_REQUEST, e.body_text()))
    }
}

async fn auth(AxState(api): Shared, req: Request, next: Next) -> Response {
    let Some(token) = api.cfg.token.as_deref() else {
        crate::http::mark_authenticated(&req);
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let ok = given.is_some_and(|g| {
        use subtle::ConstantTimeEq;
        g.as_bytes().ct_eq(token.as_bytes()).into()
    });
    if ok {
        crate::http::mark_authenticated(&req);
        next.run(req).await
    } else {
        Error(
            StatusCode::UNAUTHORIZED,
            "a bearer token is required (Authorization: Bearer <token>)".into(),
        )
        .into_response()
    }
}

/// Runs a store query on the blocking pool, bounded in number and time.
async fn query<T: Send + 'static>(
    api: &Arc<FabricApi>,
    mut q: HistoryQuery,
    f: impl FnOnce(&dyn Store, &HistoryQuery) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, Error> {
    let Ok(slot) = Arc::clone(&api.queries).try_acquire_owned() else {
        api.failed[failure(&StoreError::Busy)].fetch_add(1, Ordering::Relaxed);
        return Err(StoreError::Busy.into());
    };
    q.timeout = Some(api.cfg.query_timeout);
    q.rollup_after = Some(api.cfg.rollup_after);
    q.resolution = Some(q.pick_resolution());
    let store = Arc::clone(&api.store);
    let task = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        f(&*store, &q)
    });
    let r = match tokio::time::timeout(api.cfg.query_timeout + Duration::from_secs(1), task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(StoreError::Corrupt(format!("the query's task failed: {e}"))),
        Err(_) => Err(StoreError::Timeout),
    };
    r.map_err(|e| {
        api.failed[failure(&e)].fetch_add(1, Ordering::Relaxed);
        Error::from(e)
    })
}

/// `/metrics` of `intscope serve`: the fabric's rows and counters as the store holds them, and
/// this API's failures, in the OpenMetrics text format. A store that does not answer leaves its
/// series out (the failures say why), rather than failing the scrape.
pub fn metrics_app(api: Arc<FabricApi>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&api), auth))
        .with_state(api)
}

async fn metrics(AxState(api): Shared) -> impl IntoResponse {
    use intscope_core::counters;
    let read = query(&api, HistoryQuery::default(), |s, _| {
        Ok((s.rows_stored()?, s.totals()?))
    })
    .await;
    let mut out = counters::Samples::default();
    if let Ok((rows, totals)) = read {
        for (table, n) in &rows {
            out.add(&counters::FABRIC_ROWS, &[table], *n);
        }
        for (name, n) in &totals {
            out.add(&counters::FABRIC_COUNTER, &[name], *n);
        }
    }
    for (reason, n) in FAILURES.iter().zip(&api.failed) {
        out.add(
            &counters::FABRIC_QUERIES_FAILED,
            &[reason],
            n.load(Ordering::Relaxed),
        );
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::openmetrics::text(out),
    )
}

/// `stats` of the fabric: what the store holds.
#[derive(Debug, serde::Serialize)]
pub struct FabricStats {
    /// Always `"fabric"`.
    pub mode: &'static str,
    /// Rows per table ([`COUNTED_TABLES`](crate::store::COUNTED_TABLES)).
    pub rows: RowCounts,
    /// The collectors' counters summed over every run that wrote to the store.
    pub totals: Totals,
}

/// One flow of the fabric: its stored summary and its series.
#[derive(Debug, serde::Serialize)]
pub struct FabricFlow {
    /// The stored summary.
    pub flow: FlowSummary,
    /// Its series, oldest first, at `resolution`.
    pub intervals: Vec<FlowInterval>,
    /// The series' resolution: per store interval (`raw`) or per minute (`1m`), by the range.
    pub resolution: Resolution,
}

async fn stats(AxState(api): Shared) -> Result<Json<FabricStats>, Error> {
    let v = query(&api, HistoryQuery::default(), |s, _| {
        Ok(FabricStats {
            mode: "fabric",
            rows: s.counts()?,
            totals: s.totals()?,
        })
    })
    .await?;
    Ok(Json(v))
}

async fn flows(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<FlowSummary>>, Error> {
    query(&api, q, |s, q| s.flows(q)).await.map(Json)
}

/// One flow's key and the series' window.
#[derive(Debug, serde::Deserialize)]
struct FlowQuery {
    src: String,
    dst: String,
    proto: u8,
    src_port: u16,
    dst_port: u16,
    since: Option<u64>,
    until: Option<u64>,
    limit: Option<u32>,
    resolution: Option<Resolution>,
}

async fn flow(AxState(api): Shared, Q(f): Q<FlowQuery>) -> Result<Json<FabricFlow>, Error> {
    let key = FlowRef {
        src: f.src,
        dst: f.dst,
        proto: f.proto,
        src_port: f.src_port,
        dst_port: f.dst_port,
    };
    let mut q = HistoryQuery {
        since: f.since,
        until: f.until,
        limit: f.limit,
        resolution: f.resolution,
        rollup_after: Some(api.cfg.rollup_after),
        ..HistoryQuery::default()
    };
    let resolution = q.pick_resolution();
    q.resolution = Some(resolution);
    let v = query(&api, q, move |s, q| {
        Ok(match s.flow(&key, q)? {
            Some(summary) => Some(FabricFlow {
                flow: summary,
                intervals: s.flow_series(&key, q)?,
                resolution,
            }),
            None => None,
        })
    })
    .await?;
    v.map(Json)
        .ok_or_else(|| Error(StatusCode::NOT_FOUND, "no such flow in the store".into()))
}

async fn queues(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<QueueInterval>>, Error> {
    query(&api, q, |s, q| s.queue_series(q)).await.map(Json)
}

async fn events(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredEvent>>, Error> {
    query(&api, q, |s, q| s.events(q)).await.map(Json)
}

async fn incidents(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredIncident>>, Error> {
    query(&api, q, |s, q| s.incidents(q)).await.map(Json)
}
