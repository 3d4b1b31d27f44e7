//! The web UI (`web/`), embedded in the binary at build time: nothing to install or fetch at run
//! time, no CDN, no build step. `include_str!` rather than rust-embed: the files are few and
//! known at compile time. The console is ES modules (`web/js/`), loaded by the browser as they
//! are; uPlot is vendored (`web/vendor/`).

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Each file of the UI: its URL path, MIME type and content.
macro_rules! files {
    ($($path:literal => $mime:expr),* $(,)?) => {
        &[$(($path, $mime, include_str!(concat!("../../../web", $path)))),*]
    };
}

/// The UI's files (`/` is `index.html`).
pub const FILES: &[(&str, &str, &str)] = files!(
    "/index.html" => HTML,
    "/style.css" => CSS,
    "/js/main.js" => JS,
    "/js/store.js" => JS,
    "/js/api.js" => JS,
    "/js/fmt.js" => JS,
    "/js/time.js" => JS,
    "/js/chart.js" => JS,
    "/js/data.js" => JS,
    "/js/topology.js" => JS,
    "/js/states.js" => JS,
    "/js/pages/index.js" => JS,
    "/js/pages/overview.js" => JS,
    "/js/pages/incidents.js" => JS,
    "/js/pages/incident.js" => JS,
    "/js/pages/fabric.js" => JS,
    "/js/pages/flows.js" => JS,
    "/js/pages/flow.js" => JS,
    "/js/pages/events.js" => JS,
    "/js/pages/queues.js" => JS,
    "/vendor/uPlot.iife.min.js" => JS,
    "/vendor/uPlot.min.css" => CSS,
);

fn file(mime: &'static str, body: &'static str) -> impl IntoResponse {
    // Modules import each other by URL: a new binary must not mix with a cached older module.
    ([(CONTENT_TYPE, mime), (CACHE_CONTROL, "no-cache")], body)
}

/// Routes of the UI's files.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new();
    for &(path, mime, body) in FILES {
        router = router.route(path, get(move || async move { file(mime, body) }));
        if path == "/index.html" {
            router = router.route("/", get(move || async move { file(mime, body) }));
        }
    }
    router
}

#[cfg(test)]
mod tests {
    use super::FILES;

    /// Every module the UI imports is served: a missing entry would be a 404 in the browser.
    #[test]
    fn every_imported_module_is_served() {
        let served: Vec<&str> = FILES.iter().map(|f| f.0).collect();
        for &(path, _, body) in FILES
            .iter()
            .filter(|f| f.0.ends_with(".js") && f.0.starts_with("/js/"))
        {
            let dir = &path[..path.rfind('/').unwrap_or(0)];
            for spec in body
                .split(" from '")
                .skip(1)
                .filter_map(|s| s.split('\'').next())
            {
                let mut parts: Vec<&str> = dir.split('/').collect();
                for seg in spec.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let url = parts.join("/");
                assert!(
                    served.contains(&url.as_str()),
                    "{path} imports {spec} ({url}), not served"
                );
            }
        }
        for dir in ["js", "js/pages"] {
            let path = format!("{}/../../web/{dir}", env!("CARGO_MANIFEST_DIR"));
            let on_disk = std::fs::read_dir(path)
                .expect("web/js")
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".js"))
                .count();
            let prefix = format!("/{dir}/");
            let served_here = served
                .iter()
                .filter(|p| {
                    p.strip_prefix(&prefix)
                        .is_some_and(|rest| !rest.contains('/'))
                })
                .count();
            assert_eq!(served_here, on_disk, "every module of web/{dir} is served");
        }
    }
}
