//! The API's bounds and access control: limits answered with 400s, cursor paging that returns
//! every row once, history queries stopped at their deadline, the connection limit and timeouts,
//! the bearer token, TLS, bounded event streams and `/metrics`.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use intscope_collector::api::{self, Api};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::http::HttpLimits;
use intscope_collector::hub::Collector;
use intscope_collector::store::{HistoryQuery, StoreError};
use intscope_core::RecordBatch;
use intscope_core::loadgen::{Generator, LoadConfig, LoadVersion};
use serde_json::Value;
use tower::ServiceExt;

/// A collector fed `datagrams` of `flows` flows (with drops, so events), its state flushed to a
/// store in `flushes` batches when `data` is given.
fn collector(
    data: Option<&std::path::Path>,
    flows: u32,
    datagrams: u64,
    flushes: u64,
) -> Arc<Collector> {
    let c = common::open_collector(data);
    let flush_every = datagrams.checked_div(flushes).unwrap_or(0);
    common::feed_load(&c, common::v2_load(flows, 50), datagrams, flush_every);
    c
}

/// The response to GET `uri` (with `token` as a bearer token), its body unread: event streams
/// stay open while the test holds it.
async fn respond(app: &axum::Router, uri: &str, token: Option<&str>) -> axum::response::Response {
    let mut req = Request::get(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    app.clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, axum::http::HeaderMap, Value) {
    get_with(app, uri, None).await
}

async fn get_with(
    app: &axum::Router,
    uri: &str,
    token: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let (parts, body) = respond(app, uri, token).await.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, v)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn limits_above_the_maximum_are_400s_with_a_json_error() {
    let tmp = common::tempdir("api-limits");
    let dir = tmp.path();
    let c = collector(Some(dir), 20, 200, 1);
    let app = api::router(c);
    rt().block_on(async {
        for uri in [
            "/api/flows?limit=10001",
            "/api/flows?offset=100001",
            "/api/flows?limit=0",
            "/api/flows?sort=bogus",
            "/api/flows?limit=4294967295",
            "/api/flows?limit=-1",
            "/api/events?limit=10001",
            "/api/nodes?limit=10001",
            "/api/links?limit=10001",
            "/api/queues?limit=5001",
            "/api/history/events?limit=4294967295",
            "/api/history/events?limit=10001",
            "/api/history/flows?limit=10001",
            "/api/history/queues?limit=10001",
            "/api/history/events?cursor=f.1.2",
            "/api/history/events?kind=bogus",
            "/api/history/incidents?kind=congestion-start",
            "/api/events?kind=bogus",
            "/api/incidents?kind=bogus",
            "/api/flows?cursor=reports.1.2",
            "/api/nodes?cursor=x",
            "/api/flows/abc",
        ] {
            let (status, _, body) = get(&app, uri).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
            assert_eq!(body["status"], 400, "{uri}");
            assert!(
                body["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{uri}"
            );
        }
        let (_, _, body) = get(&app, "/api/history/events?limit=10001").await;
        assert!(body["error"].as_str().unwrap().contains("10000"), "{body}");
        // At the maximum: fine.
        for uri in ["/api/flows?limit=10000", "/api/history/events?limit=10000"] {
            assert_eq!(get(&app, uri).await.0, StatusCode::OK, "{uri}");
        }
    });
}

/// Follows `next` from `first` until it is null; returns every row.
async fn follow_body(app: &axum::Router, first: &str, key: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut uri = first.to_string();
    for _ in 0..10_000 {
        let (status, _, body) = get(app, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        rows.extend(body[key].as_array().unwrap().iter().cloned());
        match body["next"].as_str() {
            Some(next) => {
                let sep = if first.contains('?') { '&' } else { '?' };
                uri = format!("{first}{sep}cursor={next}");
            }
            None => return rows,
        }
    }
    panic!("paging did not end");
}

/// Follows the `Link: <...>; rel="next"` header; returns every row.
async fn follow_link(app: &axum::Router, first: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut uri = first.to_string();
    for _ in 0..10_000 {
        let (status, headers, body) = get(app, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        rows.extend(body.as_array().unwrap().iter().cloned());
        match headers.get("link") {
            Some(l) => {
                let l = l.to_str().unwrap();
                uri = l[l.find('<').unwrap() + 1..l.find('>').unwrap()].to_string();
            }
            None => return rows,
        }
    }
    panic!("paging did not end");
}

fn assert_once(rows: &[Value], id: impl Fn(&Value) -> String, expected: usize, what: &str) {
    let ids: HashSet<String> = rows.iter().map(&id).collect();
    assert_eq!(ids.len(), rows.len(), "{what}: a row came twice");
    assert_eq!(rows.len(), expected, "{what}: every row once");
}

#[test]
fn cursor_paging_returns_every_row_exactly_once() {
    let tmp = common::tempdir("api-paging");
    let dir = tmp.path();
    let c = collector(Some(dir), 300, 3000, 10);
    let store = c.store.clone().unwrap();
    let (flows, events, queues, nodes, links, live_events) = {
        let s = c.state.read();
        (
            s.flow_count(),
            store.counts().unwrap()["events"] as usize,
            store.counts().unwrap()["queue_stats"] as usize,
            s.nodes().count(),
            s.links().count(),
            s.events().len(),
        )
    };
    assert_eq!(flows, 300);
    assert!(
        events > 50 && queues > 50 && live_events > 50,
        "{events} {queues} {live_events}"
    );
    let app = api::router(Arc::clone(&c));
    rt().block_on(async {
        for sort in [
            "last_seen",
            "reports",
            "drops",
            "p99",
            "path_changes",
            "first_seen",
        ] {
            let rows = follow_body(&app, &format!("/api/flows?limit=7&sort={sort}"), "flows").await;
            assert_once(&rows, |f| f["id"].to_string(), flows, sort);
        }
        // A search narrows the pages too.
        let rows = follow_body(&app, "/api/flows?limit=9&q=10.0.0.1", "flows").await;
        let (_, _, all) = get(&app, "/api/flows?limit=10000&q=10.0.0.1").await;
        assert_eq!(rows.len() as u64, all["total"].as_u64().unwrap());
        // Offset paging still works, and agrees with the cursor's order.
        let (_, _, page) = get(&app, "/api/flows?limit=5&offset=10&sort=reports").await;
        let by_cursor = follow_body(&app, "/api/flows?limit=5&sort=reports", "flows").await;
        assert_eq!(page["flows"].as_array().unwrap()[..], by_cursor[10..15]);

        let rows = follow_body(&app, "/api/history/events?limit=13", "events").await;
        assert_once(&rows, |e| e["id"].to_string(), events, "history events");
        let rows = follow_body(&app, "/api/history/flows?limit=11", "flows").await;
        assert_once(&rows, |f| f["flow"].to_string(), flows, "history flows");
        let rows = follow_body(&app, "/api/history/queues?limit=17", "queues").await;
        assert_once(
            &rows,
            |q| {
                format!(
                    "{}-{}-{}-{}",
                    q["time_ns"], q["node_id"], q["port"], q["queue_id"]
                )
            },
            queues,
            "history queues",
        );
        let rows = follow_link(&app, "/api/nodes?limit=2").await;
        assert_once(&rows, |n| n["node_id"].to_string(), nodes, "nodes");
        let rows = follow_link(&app, "/api/links?limit=3").await;
        assert_once(&rows, |l| l.to_string(), links, "links");
        let rows = follow_link(&app, "/api/queues?limit=3").await;
        let (_, _, all) = get(&app, "/api/queues").await;
        assert_once(
            &rows,
            |q| format!("{}-{}-{}", q["node_id"], q["port"], q["queue_id"]),
            all.as_array().unwrap().len(),
            "queues",
        );
        let rows = follow_link(&app, "/api/events?limit=6").await;
        assert_once(&rows, |e| e["id"].to_string(), live_events, "live events");
        assert!(
            rows.windows(2)
                .all(|w| w[0]["id"].as_u64() > w[1]["id"].as_u64()),
            "newest first"
        );
    });
}

/// Rows enough that a query scanning them all takes well over a millisecond.
fn fill_events(dir: &std::path::Path, n: u64) {
    let conn = rusqlite::Connection::open(dir.join("intscope.db")).unwrap();
    conn.execute(
        "WITH RECURSIVE k(x) AS (SELECT 1000000 UNION ALL SELECT x + 1 FROM k WHERE x < 1000000 + ?1)
         INSERT INTO events(id,time_ns,kind,evidence) SELECT x, x, 'drop', '{}' FROM k",
        [n as i64],
    )
    .unwrap();
}

#[test]
fn a_slow_history_query_is_stopped_at_its_deadline() {
    let tmp = common::tempdir("api-slow");
    let dir = tmp.path();
    let c = collector(Some(dir), 10, 50, 1);
    fill_events(dir, 1_000_000);
    // Directly: a kind no row has (all are drops) makes SQLite scan every row.
    let store = c.store.clone().unwrap();
    let q = HistoryQuery {
        kind: Some("microburst".into()),
        timeout: Some(Duration::from_millis(20)),
        ..HistoryQuery::default()
    };
    let t = Instant::now();
    assert!(matches!(store.events(&q), Err(StoreError::Timeout)));
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "stopped promptly: {:?}",
        t.elapsed()
    );
    // The reader is back in the pool: a quick query still answers.
    let ok = store
        .events(&HistoryQuery {
            limit: Some(3),
            ..HistoryQuery::default()
        })
        .unwrap();
    assert_eq!(ok.items.len(), 3);

    // Through the API: 504 with a JSON error; meanwhile the rest of the API answers.
    let a = Api::new(
        Arc::clone(&c),
        ApiConfig {
            query_timeout: Duration::from_millis(20),
            max_queries: 2,
            ..ApiConfig::default()
        },
    );
    let app = api::app(Arc::clone(&a));
    rt().block_on(async {
        let slow = "/api/history/events?kind=microburst";
        let (status, _, body) = get(&app, slow).await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
        assert_eq!(body["status"], 504);
        // Many at once: each is stopped or refused (503), none hangs, and stats still answer.
        let started = Instant::now();
        let many: Vec<_> = (0..8)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { get(&app, slow).await.0 })
            })
            .collect();
        let (status, _, _) = get(&app, "/api/stats").await;
        assert_eq!(status, StatusCode::OK);
        for h in many {
            let s = h.await.unwrap();
            assert!(
                s == StatusCode::GATEWAY_TIMEOUT || s == StatusCode::SERVICE_UNAVAILABLE,
                "{s}"
            );
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    });
    assert!(a.stats.query_timeouts.load(Ordering::Relaxed) >= 2);

    // A request that outlasts the request timeout is answered 503 at that timeout.
    let a = Api::new(
        Arc::clone(&c),
        ApiConfig {
            query_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_millis(20),
            ..ApiConfig::default()
        },
    );
    let app = api::app(a);
    rt().block_on(async {
        let t = Instant::now();
        let (status, _, _) = get(&app, "/api/history/events?kind=microburst").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
    });
}

/// Serves `api` on an ephemeral loopback port on `rt`; returns the address.
fn serve(rt: &tokio::runtime::Runtime, api: Arc<Api>) -> SocketAddr {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(api::serve_with(listener, api, std::future::pending()));
    addr
}

fn http_get(addr: SocketAddr, path: &str, extra: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {out:?}")))?;
    Ok((status, out))
}

#[test]
fn idle_connections_beyond_the_limit_do_not_lock_the_api_out() {
    let rt = rt();
    let c = collector(None, 10, 50, 1);
    let a = Api::new(
        c,
        ApiConfig {
            http: HttpLimits {
                max_connections: 8,
                header_timeout: Duration::from_millis(1500),
                idle_timeout: Duration::from_secs(30),
                ..HttpLimits::default()
            },
            ..ApiConfig::default()
        },
    );
    let addr = serve(&rt, Arc::clone(&a));
    assert_eq!(http_get(addr, "/api/stats", "").unwrap().0, 200);
    // Many connections that never send a byte (the flood that exhausted file descriptors): at
    // the limit each new one makes the oldest silent one close.
    let silent: Vec<TcpStream> = (0..64).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(3);
    while a.http.evicted_silent.load(Ordering::Relaxed) < 56 {
        assert!(
            Instant::now() < deadline,
            "evicted {:?}",
            a.http.evicted_silent
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(a.http.open.load(Ordering::Relaxed) <= 8);
    // A real request gets through at once, long before the silent ones would time out.
    let t = Instant::now();
    assert_eq!(http_get(addr, "/api/stats", "").unwrap().0, 200);
    assert!(
        t.elapsed() < Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
    drop(silent);

    // Connections that send half a request head (slowloris) give way to a new client: the
    // oldest of them is closed (counted) and the new one is answered at once.
    let accepted = a.http.accepted.load(Ordering::Relaxed);
    let gave_way = || {
        a.http.evicted_partial.load(Ordering::Relaxed)
            + a.http.evicted_silent.load(Ordering::Relaxed)
    };
    let before = gave_way();
    let half: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /api/stats HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(3);
    while a.http.accepted.load(Ordering::Relaxed) < accepted + 8 {
        assert!(
            Instant::now() < deadline,
            "the half heads were not all accepted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Time for the server to read the heads' bytes (else they are silent, and go first too).
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(http_get(addr, "/api/stats", "").unwrap().0, 200);
    assert!(
        t.elapsed() < Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
    // Within the limit: the new client got in because a half head (or, if the server had not
    // yet read its bytes, a connection still silent) gave way; which one depends on timing.
    assert!(a.http.open.load(Ordering::Relaxed) <= 8);
    assert!(gave_way() > before, "none of the half heads was closed");
    assert!(a.http.evicted_partial.load(Ordering::Relaxed) > 0);
    drop(half);

    // Connections that made a whole request (no token needed here) keep their slots: at the
    // limit with only those, a new connection is refused (counted) until the header timeout
    // closes the kept-alive ones; then the API answers again.
    let kept: Vec<TcpStream> = (0..8)
        .filter_map(|_| {
            let mut s = TcpStream::connect(addr).ok()?;
            s.write_all(b"GET /api/stats HTTP/1.1\r\nHost: x\r\n\r\n")
                .ok()?;
            s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
            let mut buf = [0u8; 512];
            (s.read(&mut buf).ok()? > 0).then_some(s)
        })
        .collect();
    assert_eq!(kept.len(), 8);
    let refused = a.http.refused_over_limit.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(1);
    while http_get(addr, "/api/stats", "").is_ok() {
        assert!(Instant::now() < deadline, "never refused at the limit");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        a.http.refused_over_limit.load(Ordering::Relaxed),
        refused + 1
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok((200, _)) = http_get(addr, "/api/stats", "") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "API unreachable after the header timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(kept);
}

#[test]
fn a_connection_with_no_bytes_moving_is_closed_at_the_idle_timeout() {
    let rt = rt();
    let c = collector(None, 10, 50, 1);
    let a = Api::new(
        c,
        ApiConfig {
            http: HttpLimits {
                idle_timeout: Duration::from_millis(300),
                ..HttpLimits::default()
            },
            ..ApiConfig::default()
        },
    );
    let addr = serve(&rt, Arc::clone(&a));
    // An event stream nobody writes to: the keep-alive comes every 15 s, so after 300 ms of
    // silence the connection is closed.
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /api/events/stream HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(a.http.idle_closed.load(Ordering::Relaxed), 1);
}

#[test]
fn the_token_is_required_when_configured() {
    let c = collector(None, 10, 50, 1);
    let a = Api::new(
        c,
        ApiConfig {
            token: Some("s3cret-token".into()),
            ..ApiConfig::default()
        },
    );
    let app = api::app(Arc::clone(&a));
    rt().block_on(async {
        for uri in ["/api/stats", "/api/flows", "/metrics", "/api/events/stream"] {
            let (status, headers, body) = get(&app, uri).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri}");
            assert_eq!(body["status"], 401);
            assert!(headers.get("www-authenticate").is_some());
            assert_eq!(
                get_with(&app, uri, Some("wrong")).await.0,
                StatusCode::UNAUTHORIZED
            );
            assert_eq!(
                get_with(&app, uri, Some("s3cret-token-")).await.0,
                StatusCode::UNAUTHORIZED
            );
        }
        for uri in ["/api/stats", "/api/flows", "/api/nodes"] {
            assert_eq!(
                get_with(&app, uri, Some("s3cret-token")).await.0,
                StatusCode::OK,
                "{uri}"
            );
        }
        // The UI's files carry no data: they load without the token.
        assert_eq!(get(&app, "/").await.0, StatusCode::OK);
        // The browser's EventSource cannot send headers: the stream takes the token in the URL.
        let resp = respond(&app, "/api/events/stream?access_token=s3cret-token", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        // Only there.
        assert_eq!(
            get(&app, "/api/stats?access_token=s3cret-token").await.0,
            StatusCode::UNAUTHORIZED
        );
    });
    assert!(a.stats.unauthorized.load(Ordering::Relaxed) >= 13);
}

#[test]
fn event_streams_are_limited_and_metrics_bounded() {
    let c = collector(None, 50, 500, 1);
    let queues = c.state.read().queues().count();
    assert!(queues > 5);
    let a = Api::new(
        c,
        ApiConfig {
            max_streams: 1,
            max_series: 5,
            ..ApiConfig::default()
        },
    );
    let app = api::app(Arc::clone(&a));
    rt().block_on(async {
        let first = respond(&app, "/api/events/stream?after=0", None).await;
        assert_eq!(first.status(), StatusCode::OK);
        let (status, _, body) = get(&app, "/api/events/stream").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        drop(first);
        let again = respond(&app, "/api/events/stream", None).await;
        assert_eq!(
            again.status(),
            StatusCode::OK,
            "the slot is free once the stream ends"
        );

        let resp = respond(&app, "/metrics", None).await;
        let text = String::from_utf8(
            axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap()
                .to_vec(),
        )
        .unwrap();
        let per_queue = text
            .lines()
            .filter(|l| l.starts_with("intscope_queue_occupancy{"))
            .count();
        let per_source = text
            .lines()
            .filter(|l| l.starts_with("intscope_reports_lost_total{"))
            .count();
        assert!(per_queue + per_source <= 5, "{text}");
        let truncated: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("intscope_metrics_series_truncated "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(truncated as usize >= queues - 5, "{truncated}");
    });
    assert_eq!(a.stats.streams_refused.load(Ordering::Relaxed), 1);
}

#[test]
fn tls_round_trip_with_a_self_signed_certificate() {
    let tmp = common::tempdir("api-tls");
    let dir = tmp.path();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    std::fs::write(dir.join("cert.pem"), &cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), &key_pem).unwrap();
    let tls =
        intscope_collector::http::tls_config(&dir.join("cert.pem"), &dir.join("key.pem")).unwrap();
    // A key that is not PEM is a clear error, not a panic.
    std::fs::write(dir.join("bad.pem"), "not a key").unwrap();
    assert!(
        intscope_collector::http::tls_config(&dir.join("cert.pem"), &dir.join("bad.pem")).is_err()
    );

    let rt = rt();
    let c = collector(None, 10, 50, 1);
    let a = Api::new(
        c,
        ApiConfig {
            tls: Some(tls),
            token: Some("tok".into()),
            ..ApiConfig::default()
        },
    );
    let addr = serve(&rt, Arc::clone(&a));
    let response = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_rustls::rustls;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /api/stats HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        String::from_utf8(out).unwrap()
    });
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"ingest\""));
    // Plain HTTP to the TLS port is refused (a failed handshake, counted).
    let _ = http_get(addr, "/api/stats", "");
    std::thread::sleep(Duration::from_millis(100));
    assert!(a.http.tls_failed.load(Ordering::Relaxed) >= 1);
}

/// `/api/stats` and history queries do not wait for a big flush: stats read the writer's last
/// snapshot, history queries have their own connections (WAL readers never wait on a commit).
#[test]
fn readers_do_not_wait_for_a_big_flush() {
    let tmp = common::tempdir("api-flush");
    let dir = tmp.path();
    // Not flushed yet: the collector's own flusher takes every flow in its first batch.
    let c = collector(Some(dir), 100_000, 30_000, 0);
    let store = c.start_store().unwrap();
    let app = api::router(Arc::clone(&c));
    let pending = || c.store_stats.pending.load(Ordering::Relaxed);
    // The first flush (after one interval) commits 100 000 flows.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pending() == 0 {
        assert!(Instant::now() < deadline, "no flush started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut during = 0;
    let mut slowest = Duration::ZERO;
    rt().block_on(async {
        while pending() > 0 {
            for uri in [
                "/api/stats",
                "/api/history/events?limit=5",
                "/api/flows?limit=5",
            ] {
                let t = Instant::now();
                let (status, _, body) = get(&app, uri).await;
                assert_eq!(status, StatusCode::OK, "{uri}: {body}");
                slowest = slowest.max(t.elapsed());
            }
            during += 1;
        }
    });
    eprintln!("{during} rounds of reads during the flush, the slowest read {slowest:?}");
    assert!(
        during >= 3,
        "the flush ended before the readers could ask: {during}"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a reader waited {slowest:?}"
    );
    c.stop();
    store.finish();
}

/// A client that reads an event stream too slowly for the in-memory log is dropped: a last
/// `lagged` event says how many it missed and where to resume, the stream ends, and it is
/// counted. Memory per client stays one batch, whatever it does not read.
#[test]
fn a_lagging_event_stream_is_dropped_and_counted() {
    use futures_util::StreamExt;
    let c = collector(None, 50, 10, 1);
    let a = Api::new(Arc::clone(&c), ApiConfig::default());
    let app = api::app(Arc::clone(&a));
    // Drop reports with their own times a second apart: one event each.
    let mut g = Generator::new(LoadConfig {
        flows: 1000,
        hops: 4,
        version: LoadVersion::V2,
        batch: 8,
        drop_every: 1,
        ..LoadConfig::default()
    });
    let (mut buf, mut rec) = (Vec::new(), RecordBatch::default());
    let mut t = 10_000_000_000u64;
    let mut feed = |n: usize| {
        for _ in 0..n {
            g.next_datagram(&mut buf);
            t += 2_000_000_000;
            c.ingest(&buf, "10.0.0.1".parse().unwrap(), t, &mut rec);
        }
    };
    feed(100);
    rt().block_on(async {
        let resp = respond(&app, "/api/events/stream?after=0", None).await;
        let mut body = resp.into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("id:"));
        // The client stops reading while more than a log's worth of events happens.
        feed(3000);
        assert!(c.state.events().next_id() > 10_000 + 300);
        let mut rest = String::new();
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(chunk) = body.next().await {
                rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            }
        })
        .await;
        assert!(ended.is_ok(), "the stream ended");
        let lagged = rest.split("event: lagged").nth(1).expect("a lagged event");
        assert!(lagged.contains("\"missed\""), "{lagged}");
        assert!(lagged.contains("\"resume_after\""));
    });
    assert_eq!(a.stats.streams_dropped_lagged.load(Ordering::Relaxed), 1);
}
