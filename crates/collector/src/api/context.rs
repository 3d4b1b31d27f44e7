//! What every handler shares: the API's state ([`Api`]) and counters, its errors, the query
//! extractor, the list limits and paging by cursor.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{FromRequestParts, Query, State as AxState};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use intscope_core::counters::{self, Samples};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::api_config::ApiConfig;
use crate::http::{ErrorBody, HttpStats};
use crate::hub::{Collector, Published};
use crate::store::{HistoryQuery, Store, StoreError};

use intscope_core::Snapshot;

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
    pub(super) queries: Arc<Semaphore>,
    pub(super) streams: Arc<Semaphore>,
    pub(super) lists: Arc<Semaphore>,
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

pub(super) type Shared = AxState<Arc<Api>>;

/// An HTTP error: status and a JSON body `{"error": message, "status": code}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(super) fn bad(api: &Api, message: impl Into<String>) -> Self {
        api.stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(super) fn store(api: &Api, e: StoreError) -> Self {
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
pub(super) struct Q<T>(pub(super) T);

impl<T: serde::de::DeserializeOwned> FromRequestParts<Arc<Api>> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| Q(v))
            .map_err(|e| ApiError::bad(api, e.body_text()))
    }
}

/// Runs `f` on the latest published snapshot of the live state: reads never take the shard
/// locks ingest writes under (see [`Collector::snapshot`]).
pub(super) fn with_snapshot<T>(
    c: &Collector,
    f: impl FnOnce(&Snapshot) -> T,
) -> Result<T, ApiError> {
    with_published(&c.snapshot(), f)
}

pub(super) fn with_published<T>(
    p: &Published,
    f: impl FnOnce(&Snapshot) -> T,
) -> Result<T, ApiError> {
    Ok(f(&p.state))
}

/// Checks a `limit` against its maximum: the default when absent, a 400 when 0 or above.
pub(super) fn limit(
    api: &Api,
    given: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
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
pub(super) fn parse_cursor<const N: usize>(
    api: &Api,
    c: Option<&str>,
) -> Result<Option<[u64; N]>, ApiError> {
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

pub(super) fn cursor_text(key: &[u64]) -> String {
    key.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

/// A page of an array endpoint: the rows after `after` (sorted by key), at most `limit`, and the
/// `Link: <...>; rel="next"` header (RFC 8288) when more follow.
pub(super) fn array_page<const N: usize, T: Serialize>(
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
pub(super) async fn store_query<T: Send + 'static>(
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
