//! The web UI (`web/`), embedded in the binary at build time: nothing to install or fetch at run
//! time, no CDN. `include_str!` rather than rust-embed: five files, known at compile time.

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("../../../web/index.html");
const APP: &str = include_str!("../../../web/app.js");
const STYLE: &str = include_str!("../../../web/style.css");
const UPLOT_JS: &str = include_str!("../../../web/vendor/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../web/vendor/uPlot.min.css");

fn file(mime: &'static str, body: &'static str) -> impl IntoResponse {
    ([(CONTENT_TYPE, mime)], body)
}

/// Routes of the UI's files.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/app.js",
            get(|| async { file("text/javascript; charset=utf-8", APP) }),
        )
        .route(
            "/style.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/vendor/uPlot.iife.min.js",
            get(|| async { file("text/javascript; charset=utf-8", UPLOT_JS) }),
        )
        .route(
            "/vendor/uPlot.min.css",
            get(|| async { file("text/css; charset=utf-8", UPLOT_CSS) }),
        )
}
