//! The counters are declared once (`intscope_core::counters`) and rendered twice: every declared
//! metric is in `/metrics` and in `/api/stats` with the same value, and the Prometheus text
//! parses (every sample line belongs to a family with HELP and TYPE).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use intscope_collector::api::{self, Api};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::hub::Collector;
use intscope_core::RecordBatch;
use intscope_core::counters::{self, Json, Kind, Samples};
use serde_json::Value;
use tower::ServiceExt;

fn collector(data: Option<&std::path::Path>) -> Arc<Collector> {
    let c = common::open_collector(data);
    common::feed_load(&c, common::v2_load(40, 20), 600, 0);
    let mut rec = RecordBatch::default();
    // A malformed datagram and an empty one: discard outcomes that are not 0.
    c.ingest(&[2, 0, 0], "10.0.0.1".parse().unwrap(), 9_000_000, &mut rec);
    c.ingest(&[], "10.0.0.1".parse().unwrap(), 9_000_000, &mut rec);
    c
}

/// A parsed OpenMetrics text: family name → (type, help), and sample name with labels → value.
struct Parsed {
    families: BTreeMap<String, (String, String)>,
    samples: BTreeMap<(String, BTreeMap<String, String>), f64>,
}

/// Parses `text` strictly: HELP, TYPE (and UNIT) lines name a family before its samples; every
/// sample line's name is its family's (plus `_total` for counters); labels are `k="v"` pairs; it
/// ends with `# EOF`.
fn parse(text: &str) -> Parsed {
    let mut families = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let mut help: BTreeMap<String, String> = BTreeMap::new();
    assert!(text.ends_with("# EOF\n"), "{text}");
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').expect("HELP name text");
            help.insert(name.to_string(), h.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE name type");
            let h = help
                .get(name)
                .unwrap_or_else(|| panic!("TYPE before HELP: {line}"));
            assert!(
                families
                    .insert(name.to_string(), (ty.to_string(), h.clone()))
                    .is_none(),
                "{name} twice"
            );
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let (name, unit) = rest.split_once(' ').unwrap();
            assert!(name.ends_with(&format!("_{unit}")), "{line}");
        } else {
            assert!(!line.starts_with('#'), "{line}");
            let (series, value) = line.rsplit_once(' ').expect("sample value");
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some((n, l)) => {
                    let l = l.strip_suffix('}').expect("closing brace");
                    let labels = l
                        .split(',')
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').expect("k=v");
                            let v = v
                                .strip_prefix('"')
                                .and_then(|v| v.strip_suffix('"'))
                                .expect("quoted");
                            (k.to_string(), v.to_string())
                        })
                        .collect();
                    (n.to_string(), labels)
                }
            };
            let family = name
                .strip_suffix("_total")
                .filter(|f| families.get(*f).is_some_and(|(t, _)| t == "counter"));
            let family = family.unwrap_or(&name);
            let (ty, _) = families
                .get(family)
                .unwrap_or_else(|| panic!("no HELP/TYPE for {line}"));
            assert!(ty == "counter" || ty == "gauge", "{line}");
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
            assert!(samples.insert((name, labels), v).is_none(), "{line} twice");
        }
    }
    Parsed { families, samples }
}

fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn key(m: &counters::Metric, labels: &[String]) -> (String, BTreeMap<String, String>) {
    (
        m.sample_name(),
        m.labels
            .iter()
            .map(|l| l.to_string())
            .zip(labels.iter().cloned())
            .collect(),
    )
}

/// One set of samples, both renderings: each sample is in the Prometheus text with its value
/// and at each of its JSON paths with the same value; every declared `/api/stats` metric has
/// samples (with a store: all of them).
#[test]
fn every_counter_is_in_both_renderings_with_the_same_value() {
    let dir = common::tempdir("counters");
    for data in [None, Some(dir.path())] {
        let c = collector(data);
        let a = Api::new(Arc::clone(&c), ApiConfig::default());
        let mut samples = Samples::default();
        api::sample_counters(&a, &c.snapshot(), &mut samples);
        samples.add(&counters::METRICS_SERIES_TRUNCATED, &[], 3);
        let json = samples.to_json();
        let text = intscope_collector::openmetrics::text(Samples::default());
        assert_eq!(text, "# EOF\n");
        let mut seen = BTreeSet::new();
        let n = samples.iter().count();
        let copy: Vec<_> = samples.iter().cloned().collect();
        let parsed = parse(&intscope_collector::openmetrics::text(samples));
        assert_eq!(parsed.samples.len(), n, "one line a sample");
        for s in &copy {
            seen.insert(s.metric.name);
            let v = match s.value {
                counters::Value::Int(n) => n as f64,
                counters::Value::Float(x) => x,
            };
            assert_eq!(
                parsed.samples.get(&key(s.metric, &s.labels)),
                Some(&v),
                "{} {:?}",
                s.metric.name,
                s.labels
            );
            let (ty, help) = &parsed.families[&s.metric.family()];
            assert_eq!(
                ty,
                match s.metric.kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                }
            );
            assert_eq!(help, s.metric.help);
            let paths = s.metric.json_paths(&s.labels);
            assert!(
                !paths.is_empty(),
                "{} {:?} has no place in /api/stats",
                s.metric.name,
                s.labels
            );
            for p in paths {
                assert_eq!(at(&json, &p).and_then(Value::as_f64), Some(v), "{p:?}");
            }
        }
        for m in counters::ALL {
            let expected = matches!(m.json, Json::Stats(_))
                && (data.is_some() || !m.name.starts_with("store_"));
            assert_eq!(seen.contains(m.name), expected, "{}", m.name);
        }
        // The figures are the state's: reports decoded, flows, datagrams discarded.
        assert!(json["ingest"]["reports_decoded"].as_u64().unwrap() > 0);
        assert_eq!(json["ingest"]["discarded"]["zero_length"], 1);
        assert_eq!(json["ingest"]["datagrams_received"], 602);
        assert_eq!(json["flows"], 40);
        assert_eq!(json["held"]["flow"], 40);
    }
}

/// The served endpoints: each `/api/stats` metric's family is in `/metrics` and its samples are
/// at their places in `/api/stats` with the values `/metrics` gave (the snapshot's age aside).
#[test]
fn served_metrics_and_stats_agree() {
    let c = collector(None);
    let a = Api::new(
        Arc::clone(&c),
        ApiConfig {
            max_series: 5,
            ..ApiConfig::default()
        },
    );
    let app = api::app(Arc::clone(&a));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (text, stats) = rt.block_on(async {
        let body = |uri: &'static str| {
            let app = app.clone();
            async move {
                let r = app
                    .oneshot(Request::get(uri).body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{uri}");
                let b = axum::body::to_bytes(r.into_body(), 64 << 20).await.unwrap();
                String::from_utf8(b.to_vec()).unwrap()
            }
        };
        let text = body("/metrics").await;
        let stats: Value = serde_json::from_str(&body("/api/stats").await).unwrap();
        // The entries held are the rows the inventory endpoints list.
        for (uri, key) in [
            ("/api/nodes", "nodes"),
            ("/api/queues", "queues"),
            ("/api/links", "link"),
        ] {
            let rows: Value = serde_json::from_str(&body(uri).await).unwrap();
            let held = if key == "link" {
                &stats["held"]["link"]
            } else {
                &stats[key]
            };
            assert_eq!(
                rows.as_array().unwrap().len() as u64,
                held.as_u64().unwrap(),
                "{uri}"
            );
        }
        (text, stats)
    });
    let parsed = parse(&text);
    assert!(stats["api"]["metrics_series_truncated"].as_u64().unwrap() > 0);
    let mut compared = 0;
    for ((name, labels), v) in &parsed.samples {
        let m = counters::ALL
            .iter()
            .find(|m| m.sample_name() == *name)
            .unwrap_or_else(|| panic!("{name} is not declared"));
        if !matches!(m.json, Json::Stats(_)) || m.name == "snapshot_age" {
            continue;
        }
        let values: Vec<String> = m.labels.iter().map(|l| labels[*l].clone()).collect();
        for p in m.json_paths(&values) {
            assert_eq!(
                at(&stats, &p).and_then(Value::as_f64),
                Some(*v),
                "{name} {labels:?} at {p:?}"
            );
            compared += 1;
        }
    }
    assert!(compared > 50, "{compared}");
    for m in counters::ALL {
        if matches!(m.json, Json::Stats(_)) && !m.name.starts_with("store_") {
            assert!(
                parsed.families.contains_key(&m.family()),
                "{} missing from /metrics",
                m.name
            );
        }
    }
    // Names kept from before the declarations.
    for old in [
        "intscope_ingest_datagrams_total{outcome=\"accepted\"}",
        "intscope_http_connections_open ",
        "intscope_state_entries{kind=\"flow\"} 40",
        "intscope_reports_total{version=\"2.0\"}",
        "intscope_events_total{kind=",
        "intscope_metrics_series_truncated ",
    ] {
        assert!(text.contains(old), "{old} missing:\n{text}");
    }
}

/// docs/collector-config.md lists every declared metric by its `/metrics` name.
#[test]
fn the_docs_name_every_metric() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/collector-config.md"
    ))
    .unwrap();
    for m in counters::ALL {
        assert!(
            doc.contains(&format!("`{}", m.sample_name())),
            "{} is not in docs/collector-config.md",
            m.sample_name()
        );
    }
}
