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

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

use crate::api_config::ApiConfig;
use crate::hub::Collector;

mod auth;
mod context;
mod events;
mod fabric;
mod flows;
mod history;
mod incidents;
mod metrics;
mod stats;
mod stream;

use auth::{auth, one_list_at_a_time};
pub use context::{Api, ApiError, ApiStats};
use events::events;
use fabric::{links, nodes, queues};
use flows::{flow, flows};
use history::{history_events, history_flows, history_incidents, history_queues};
use incidents::{incident, incidents};
use metrics::metrics;
pub use metrics::render_metrics;
pub use stats::sample_counters;
use stats::{names, stats};
use stream::event_stream;

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
