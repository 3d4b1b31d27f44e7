//! The incidents as the API serves them: pages newest first with filters, and the documented
//! properties (the detectors' incidents themselves are tested in core).

mod common;

use common::*;
use intscope_core::DetectConfig;

const LEAF1: H = H(1, 3, 800, 10);
const LEAF2: H = H(2, 5, 700, 10);
const US: u64 = 1_000;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use intscope_collector::hub::{Collector, CollectorConfig};
use serde_json::Value;
use tower::ServiceExt;

fn get(app: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = app
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 64 << 20).await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    })
}

/// A collector with 30 congestion incidents at spine 101's ports 1..=30 (the even ports'
/// resolved) and one drop incident.
fn collector() -> std::sync::Arc<Collector> {
    // No store: the default `./intscope-data` is locked by one collector at a time, and
    // the tests of this module run at once.
    let c = Collector::open(CollectorConfig {
        int_udp_ports: vec![INT_PORT],
        data: None,
        // Published at once: the incidents here are 1 ms apart, inside the default
        // grouping window.
        detect: DetectConfig {
            incident_grouping_ns: 0,
            ..DetectConfig::default()
        },
        ..CollectorConfig::default()
    })
    .unwrap();
    for port in 1..=30u16 {
        let mut r =
            last_record(&Rep::new(port, &[LEAF1, H(101, port, 900, 4000)], LEAF2).datagram());
        r.time_ns = u64::from(port) * MS;
        c.state.process(&r);
        if port % 2 == 0 {
            let mut r =
                last_record(&Rep::new(port, &[LEAF1, H(101, port, 900, 10)], LEAF2).datagram());
            r.time_ns = u64::from(port) * MS + 100 * US;
            c.state.process(&r);
        }
    }
    let mut r = Rep::new(99, &[LEAF1], LEAF2);
    r.drop = Some(80);
    let mut rec = last_record(&r.datagram());
    rec.time_ns = 40 * MS;
    c.state.process(&rec);
    c
}

#[test]
fn incidents_page_newest_first_with_filters() {
    let c = collector();
    let app = intscope_collector::api::router(std::sync::Arc::clone(&c));
    let (st, v) = get(&app, "/api/incidents");
    assert_eq!(st, StatusCode::OK);
    let all = v["incidents"].as_array().unwrap();
    assert_eq!(all.len(), 31);
    assert!(v["next"].is_null());
    let ids: Vec<u64> = all.iter().map(|i| i["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    // Paging by cursor returns each once.
    let mut seen = Vec::new();
    let mut uri = "/api/incidents?limit=7".to_string();
    loop {
        let (st, v) = get(&app, &uri);
        assert_eq!(st, StatusCode::OK);
        seen.extend(
            v["incidents"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_u64().unwrap()),
        );
        match v["next"].as_str() {
            Some(n) => uri = format!("/api/incidents?limit=7&cursor={n}"),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let count = |uri: &str| get(&app, uri).1["incidents"].as_array().unwrap().len();
    assert_eq!(count("/api/incidents?state=ongoing&kind=congestion"), 15);
    assert_eq!(count("/api/incidents?state=resolved"), 15);
    assert_eq!(count("/api/incidents?kind=microburst"), 15);
    assert_eq!(count("/api/incidents?kind=drop&node=2"), 1);
    assert_eq!(count("/api/incidents?node=101&until=10000000"), 10);
    // After every resolved congestion ended: the drop, and the ongoing congestions, which
    // last until now however long ago their last update was.
    assert_eq!(count("/api/incidents?since=35000000"), 16);
    assert_eq!(count("/api/incidents?since=35000000&state=resolved"), 0);
    assert_eq!(count("/api/incidents?since=35000000&kind=congestion"), 15);
    for bad in [
        "/api/incidents?limit=1001",
        "/api/incidents?limit=0",
        "/api/incidents?kind=congestion-start",
        "/api/incidents?state=open",
        "/api/incidents?cursor=x",
    ] {
        let (st, v) = get(&app, bad);
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}");
        assert!(v["error"].is_string(), "{bad}: {v}");
    }
    let (st, one) = get(&app, &format!("/api/incidents/{}", ids[0]));
    assert_eq!(st, StatusCode::OK);
    assert_eq!(one, all[0]);
    let (st, v) = get(&app, "/api/incidents/999999");
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(v["error"].as_str().unwrap().contains("999999"));
    let (st, _) = get(&app, "/api/incidents/abc");
    assert_eq!(st, StatusCode::BAD_REQUEST);
    // Metrics by kind and state.
    let api = intscope_collector::api::Api::new(c, Default::default());
    let text = intscope_collector::api::render_metrics(&api);
    assert!(
        text.contains("intscope_incidents{kind=\"congestion\",state=\"ongoing\"} 15"),
        "{text}"
    );
    assert!(text.contains("intscope_incidents_started_total{kind=\"drop\"} 1"));
}

/// The property names of schema `name` in the OpenAPI file, at `indent` spaces.
fn schema_properties(doc: &str, start: &str, indent: usize) -> Vec<String> {
    let at = doc
        .find(start)
        .unwrap_or_else(|| panic!("{start} in the OpenAPI"));
    let body = &doc[at..];
    let props = body.find("properties:").unwrap();
    let pad = " ".repeat(indent);
    body[props..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with(&pad) || l.trim().is_empty())
        .filter(|l| l.len() > indent && !l[indent..].starts_with(' '))
        .filter_map(|l| l.trim().split(':').next().map(str::to_string))
        .collect()
}

#[test]
fn a_served_incident_has_the_documented_properties() {
    let c = collector();
    let app = intscope_collector::api::router(c);
    let (_, v) = get(&app, "/api/incidents?kind=drop");
    let served = &v["incidents"][0];
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/collector-api.openapi.yaml"),
    )
    .unwrap();
    let documented = schema_properties(&doc, "\n    Incident:\n", 8);
    let keys: Vec<String> = served.as_object().unwrap().keys().cloned().collect();
    let mut a = documented.clone();
    let mut b = keys.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "schema Incident vs the served JSON");
    for (field, indent) in [("place", 12), ("counts", 12)] {
        let start = format!("\n        {field}:\n");
        let mut documented = schema_properties(
            &doc[doc.find("\n    Incident:\n").unwrap()..],
            &start,
            indent,
        );
        let mut served: Vec<String> = served[field].as_object().unwrap().keys().cloned().collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served, "{field}");
    }
}
