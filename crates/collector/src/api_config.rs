//! The API server's settings (access, limits, TLS), shared by the live API (`api`) and the
//! fabric API over a shared store (`api_cluster`), below both.

use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls;

use crate::http::HttpLimits;

/// Settings of the API server: access, limits, TLS.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Bearer token every `/api/` and `/metrics` request must carry (`Authorization: Bearer`;
    /// the event stream may pass it as `access_token`, since browsers' EventSource cannot set
    /// headers). `None`: open (the default on loopback).
    pub token: Option<String>,
    /// TLS (HTTPS) when set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Connection limits and timeouts.
    pub http: HttpLimits,
    /// Longest time to produce a response's head (503 after it).
    pub request_timeout: Duration,
    /// Longest a history query may run, waiting for a reader included (504 after it).
    pub query_timeout: Duration,
    /// History queries running or waiting at once (503 beyond).
    pub max_queries: usize,
    /// Live event streams open at once (503 beyond).
    pub max_streams: usize,
    /// Requests for the large live lists (flows, nodes, links, queues, events, incidents,
    /// `/metrics`) handled at once; more wait their turn (within `request_timeout`). Each
    /// keeps a worker thread busy while it builds its answer, so a flood of them must leave
    /// room for every other request.
    pub max_list_requests: usize,
    /// Most series `/metrics` renders; the rest are counted in
    /// `intscope_metrics_series_truncated`.
    pub max_series: usize,
    /// History series (queues, a flow's latency) over a range longer than this are answered
    /// per minute from the rollups, shorter ones per store interval (each answer says which:
    /// `resolution`).
    pub rollup_after: Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            token: None,
            tls: None,
            http: HttpLimits::default(),
            request_timeout: Duration::from_secs(30),
            query_timeout: crate::store::DEFAULT_QUERY_TIMEOUT,
            max_queries: 16,
            max_streams: 32,
            max_list_requests: 1,
            max_series: 10_000,
            rollup_after: crate::store::DEFAULT_ROLLUP_AFTER,
        }
    }
}
