//! The history incidents route and the fabric routes of a collector's API, over its store.

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use intscope_collector::api::router;
use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::{
    Batch, Incident, IncidentCounts, IncidentKind, IncidentPlace, IncidentState, Severity,
};
use serde_json::Value;
use tower::ServiceExt;

fn incident(id: u64, kind: IncidentKind) -> Incident {
    Incident {
        id,
        kind,
        place: IncidentPlace {
            node: Some(id as u32 % 3),
            ..IncidentPlace::default()
        },
        cause: None,
        state: IncidentState::Ongoing,
        severity: Severity::Major,
        start_ns: id * 1_000,
        start_uncertainty_ns: 0,
        last_update_ns: id * 1_000 + 10,
        end_ns: None,
        end_uncertainty_ns: 0,
        end_reason: None,
        received_ns: None,
        updates: 1,
        counts: IncidentCounts::default(),
        peak: None,
        threshold: None,
        baseline: None,
        flows: Vec::new(),
        symptoms: Vec::new(),
        evidence: None,
    }
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let r = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = r.status();
    let body = axum::body::to_bytes(r.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn history_and_fabric_incidents_page_and_filter() {
    let dir = common::tempdir("fabric-api");
    let c: Arc<Collector> = Collector::open(CollectorConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        data: Some(dir.path().to_path_buf()),
        ..CollectorConfig::default()
    })
    .unwrap();
    let store = c.store.clone().unwrap();
    store
        .write(&Batch {
            incidents: (1..=9)
                .map(|i| {
                    incident(
                        i,
                        if i % 3 == 0 {
                            IncidentKind::Drop
                        } else {
                            IncidentKind::Latency
                        },
                    )
                })
                .collect(),
            ..Batch::default()
        })
        .unwrap();
    let app = router(Arc::clone(&c));
    let (status, page) = get(&app, "/api/history/incidents?limit=4").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let ids: Vec<u64> = page["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [9, 8, 7, 6]);
    let next = page["next"].as_str().unwrap().to_string();
    let (_, page2) = get(
        &app,
        &format!("/api/history/incidents?limit=4&cursor={next}"),
    )
    .await;
    assert_eq!(page2["incidents"][0]["id"], 5);
    let (_, drops) = get(&app, "/api/fabric/incidents?kind=drop").await;
    assert_eq!(drops["incidents"].as_array().unwrap().len(), 3);
    let (status, bad) = get(&app, "/api/history/incidents?cursor=zzz").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let (status, _) = get(&app, "/api/history/incidents?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, stats) = get(&app, "/api/fabric/stats").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stats["rows"]["incidents"], 9);
    let (status, _) = get(
        &app,
        "/api/fabric/flow?src=10.0.0.1&dst=10.0.0.2&proto=6&src_port=1&dst_port=2",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    drop(app);
    drop(c);
}

/// The fabric's flow views answer what the store's typed reads hold, serialized as they are:
/// the list page by page, and one flow with its path and its series per store interval.
#[tokio::test]
async fn fabric_flow_views_serve_the_stored_rows() {
    use intscope_collector::store::HistoryQuery;

    let dir = common::tempdir("fabric-flows");
    let c = common::open_collector(Some(dir.path()));
    let store = c.store.clone().unwrap();
    // Two store intervals, every flow reported in each.
    common::feed_load(&c, common::v2_load(12, 1000), 400, 200);
    let app = router(Arc::clone(&c));
    let mut cursor = String::new();
    let mut listed = Vec::new();
    loop {
        let q = HistoryQuery {
            limit: Some(5),
            cursor: Some(cursor.clone()),
            ..HistoryQuery::default()
        };
        let page = store.flows(&q).unwrap();
        let (status, served) =
            get(&app, &format!("/api/fabric/flows?limit=5&cursor={cursor}")).await;
        assert_eq!(status, StatusCode::OK, "{served}");
        assert_eq!(served, serde_json::to_value(&page).unwrap());
        listed.extend(page.items);
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(listed.len(), 12, "every flow once");
    for f in &listed {
        assert_eq!(f.path.len(), 4, "{f:?}");
        let k = &f.flow;
        let (status, one) = get(
            &app,
            &format!(
                "/api/fabric/flow?src={}&dst={}&proto={}&src_port={}&dst_port={}",
                k.src, k.dst, k.proto, k.src_port, k.dst_port
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{one}");
        assert_eq!(one["flow"], serde_json::to_value(f).unwrap());
        let series = store.flow_series(k, &HistoryQuery::default()).unwrap();
        assert_eq!(series.len(), 2, "one row per interval: {series:?}");
        assert!(series[0].time_ns < series[1].time_ns, "oldest first");
        assert!(series.iter().all(|s| s.hop_latency_max.len() == 4));
        assert_eq!(one["intervals"], serde_json::to_value(&series).unwrap());
    }
    drop(app);
    drop(c);
}
