//! The API's gates: the bearer token off loopback, and at most one list request of a client at
//! a time.

use std::sync::atomic::Ordering;

use axum::extract::{Query, Request, State as AxState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::context::{ApiError, Shared};

/// The token check: `/api/` and `/metrics` need the bearer token when one is configured; the
/// UI's files (code, no data) do not.
pub(super) async fn auth(AxState(api): Shared, req: Request, next: Next) -> Response {
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
pub(super) async fn one_list_at_a_time(AxState(api): Shared, req: Request, next: Next) -> Response {
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
