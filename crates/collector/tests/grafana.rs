//! `docs/grafana-dashboard.json` is a Grafana dashboard model whose queries name only metrics a
//! collector exports: a renamed counter breaks this test, not an operator's dashboard.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use intscope_collector::api::{Api, render_metrics};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::webhook::{ReceiverStats, WebhookStats};
use intscope_core::{RecordBatch, counters};
use serde_json::Value;

fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana-dashboard.json"
    );
    let text = std::fs::read_to_string(path).expect("docs/grafana-dashboard.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// The metric names (`intscope_...`) a PromQL expression reads.
fn names(expr: &str) -> Vec<String> {
    expr.match_indices("intscope_")
        .map(|(at, _)| {
            expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// The sample names a collector with a store, a queue and a webhook renders in `/metrics`, and
/// the declared per-entity series (per source, node: they appear with loss and drops).
fn exported() -> BTreeSet<String> {
    let dir = tempdir("grafana");
    let c = open_collector(Some(dir.path()));
    let d = Rep::new(
        1,
        &[H(1, 3, 800, 10), H(101, 2, 900, 3000)],
        H(2, 5, 700, 10),
    )
    .datagram();
    c.ingest(
        &d,
        "10.0.0.1".parse().unwrap(),
        S,
        &mut RecordBatch::default(),
    );
    let api = Api::new(Arc::clone(&c), ApiConfig::default());
    let _ = api.webhook.set(Arc::new(WebhookStats {
        receivers: vec![ReceiverStats::default()],
        ..WebhookStats::default()
    }));
    let text = render_metrics(&api);
    drop(api);
    drop(c);
    drop(dir);
    let mut names: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_string())
        .collect();
    names.extend(
        counters::ALL
            .iter()
            .filter(|m| matches!(m.json, counters::Json::Inventory(_)))
            .map(|m| m.sample_name()),
    );
    names
}

#[test]
fn the_dashboard_reads_only_metrics_the_collector_exports() {
    let d = dashboard();
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["uid"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let panels = d["panels"].as_array().expect("panels");
    let exported = exported();
    let mut exprs = Vec::new();
    let mut ids = BTreeSet::new();
    let mut graphs = 0;
    for p in panels {
        let title = p["title"].as_str().expect("every panel has a title");
        assert!(
            ids.insert(p["id"].as_u64().expect("id")),
            "{title}: id repeated"
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(x + w <= 24 && g["h"].as_u64().unwrap() > 0, "{title}: {g}");
        if p["type"] == "row" {
            continue;
        }
        graphs += 1;
        assert_eq!(p["datasource"]["type"], "prometheus", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(refs.insert(t["refId"].as_str().unwrap()), "{title}");
            exprs.push((
                title.to_string(),
                t["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    assert!(graphs >= 10, "{graphs} panels");
    for v in d["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["definition"].as_str() {
            exprs.push((format!("variable {}", v["name"]), q.to_string()));
        }
    }
    let mut read = BTreeSet::new();
    for (title, e) in &exprs {
        let n = names(e);
        assert!(!n.is_empty(), "{title}: {e} reads no intscope metric");
        for name in n {
            assert!(
                exported.contains(&name),
                "{title}: {e} reads {name}, which /metrics does not export"
            );
            read.insert(name);
        }
    }
    // What the issue asks the dashboard to show.
    for want in [
        "intscope_ingest_datagrams_received_total",
        "intscope_ingest_reports_decoded_total",
        "intscope_ingest_datagrams_total",
        "intscope_incidents",
        "intscope_store_batches_total",
        "intscope_webhook_notifications_sent_total",
        "intscope_webhook_notifications_dropped_total",
        "intscope_webhook_attempts_failed_total",
        "intscope_webhook_queue_depth",
    ] {
        assert!(read.contains(want), "no panel shows {want}");
    }
}
