//! Scale-out end to end: a two-shard ClickHouse cluster on loopback, two `intscope collect`
//! processes writing to it, reports blasted at both, and `intscope serve` answering for the
//! whole fabric: every flow, path, event and incident there exactly once, and every report sent
//! either stored or counted as discarded.

#[path = "../../collector/tests/ch/mod.rs"]
mod ch;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use intscope_collector::store::ClickHouseStore;
use intscope_core::{
    Batch, Incident, IncidentCounts, IncidentKind, IncidentPlace, IncidentState, RowSink, Severity,
};
use serde_json::Value;

fn get(http: &str, path: &str) -> Value {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", &format!("http://{http}{path}")])
        .output()
        .expect("curl");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Every row of a paged list endpoint (`{name: [...], "next"}`), in order.
fn all_pages(http: &str, path: &str, name: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = match &cursor {
            Some(c) => format!("{path}{sep}cursor={c}"),
            None => path.to_string(),
        };
        let page = get(http, &url);
        rows.extend(
            page[name]
                .as_array()
                .unwrap_or_else(|| panic!("{page}"))
                .iter()
                .cloned(),
        );
        match page["next"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return rows,
        }
    }
    panic!("{path}: more than 1000 pages");
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Ends a process with SIGTERM (a collector's final flush) and waits for it.
fn terminate(p: &mut Proc) {
    let pid = p.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = p.0.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A collector writing to the cluster at `urls`, its spool in `spool` (not the product's
/// default under the system's temporary folder, which would outlive the test).
fn collector(urls: &str, name: &str, spool: &std::path::Path) -> (Proc, String, String) {
    let mut child = bin()
        .args([
            "collect",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .args([
            "--store",
            &format!("clickhouse:{urls}"),
            "--collector-name",
            name,
        ])
        .arg("--spool")
        .arg(spool.join(name))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = startup_line(&mut child);
    (
        Proc(child),
        line["http"].as_str().unwrap().to_string(),
        line["listen"][0].as_str().unwrap().to_string(),
    )
}

fn incident(id: u64, node: u32, updates: u64, end: Option<u64>) -> Incident {
    let s = 1_000_000_000;
    Incident {
        id,
        kind: IncidentKind::Congestion,
        place: IncidentPlace {
            node: Some(node),
            port: Some(1),
            queue: Some(0),
            ..IncidentPlace::default()
        },
        cause: None,
        state: if end.is_some() {
            IncidentState::Resolved
        } else {
            IncidentState::Ongoing
        },
        severity: Severity::Warning,
        start_ns: id * s,
        start_uncertainty_ns: 0,
        last_update_ns: id * s + updates,
        end_ns: end,
        end_uncertainty_ns: 0,
        end_reason: end.map(|_| intscope_core::EndReason::Normal),
        received_ns: None,
        updates,
        counts: IncidentCounts::default(),
        peak: None,
        threshold: None,
        baseline: None,
        flows: Vec::new(),
        symptoms: Vec::new(),
        evidence: None,
    }
}

#[test]
fn two_collectors_into_a_two_shard_cluster_answer_for_the_fabric_once() {
    let cluster = ch::ClickHouse::start(2);
    let urls = cluster.urls();
    let spools = common::tempdir("cluster-spools");
    let (mut c1, http1, udp1) = collector(&urls, "c1", spools.path());
    let (mut c2, http2, udp2) = collector(&urls, "c2", spools.path());

    // The same 300 flows through both collectors (complete INT-MD paths: each collector sees
    // whole paths, the store sums each flow's reports over both).
    let flows = 300u64;
    let blasts: Vec<_> = [&udp1, &udp2]
        .iter()
        .map(|to| {
            bin()
                .args(["blast", "--to", to, "--rate", "20000", "--duration", "1"])
                .args(["--flows", &flows.to_string(), "--hops", "3"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut sent_reports = 0u64;
    let mut sent_datagrams = Vec::new();
    let mut sent_each = Vec::new();
    for b in blasts {
        let out = b.wait_with_output().unwrap();
        assert!(out.status.success());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["send_errors"], 0);
        sent_reports += v["reports"].as_u64().unwrap();
        sent_each.push(v["reports"].as_u64().unwrap());
        sent_datagrams.push(v["datagrams"].as_u64().unwrap());
    }
    // Garbage each collector must count and discard: empty, and an unknown version.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let garbage = 12u64;
    for to in [&udp1, &udp2] {
        for i in 0..garbage {
            let d: &[u8] = if i % 2 == 0 { &[] } else { &[0xf0, 0, 0, 0] };
            sock.send_to(d, to).unwrap();
        }
    }
    let mut discarded = 0u64;
    for (http, sent) in [(&http1, sent_datagrams[0]), (&http2, sent_datagrams[1])] {
        let s = wait_until_accounted(
            sent + garbage,
            Duration::from_secs(30),
            Duration::from_millis(100),
            || get(http, "/api/stats"),
        );
        assert_eq!(
            s["ingest"]["kernel_dropped"].as_u64().unwrap_or(0),
            0,
            "{s}"
        );
        let d: u64 = s["ingest"]["discarded"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k != "malformed")
            .map(|(_, v)| v.as_u64().unwrap())
            .sum();
        discarded += d;
    }
    // Each collector's stats name its own stored totals apart from the fabric's (both
    // collectors'), as the writer last read them (every 2 s at most).
    for (http, own) in [(&http1, sent_each[0]), (&http2, sent_each[1])] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = get(http, "/api/stats");
            let store = &s["store"];
            let done = store["totals"]["reports_v2"] == own
                && store["fabric_totals"]["reports_v2"] == sent_reports;
            if done || std::time::Instant::now() > deadline {
                assert_eq!(store["totals"]["reports_v2"], own, "{store}");
                assert_eq!(
                    store["fabric_totals"]["reports_v2"], sent_reports,
                    "{store}"
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // The final flush of each, on SIGTERM.
    terminate(&mut c1);
    terminate(&mut c2);

    // Incidents of two more writers (their IDs overlap: 1..=20 each), in versions, beside the
    // incidents the collectors raised themselves (theirs start in report time, these in 1970).
    for source in ["w1", "w2"] {
        let mut cfg = cluster.config("intscope", source);
        cfg.cluster = Some("intscope".into());
        let w = ClickHouseStore::open(cfg).unwrap();
        let batch = |incidents| Batch {
            incidents,
            ..Batch::default()
        };
        w.write(&batch(
            (1..=20).map(|i| incident(i, i as u32, 1, None)).collect(),
        ))
        .unwrap();
        w.write(&batch(
            (1..=20).map(|i| incident(i, i as u32, 3, None)).collect(),
        ))
        .unwrap();
        w.write(&batch(
            (1..=10)
                .map(|i| incident(i, i as u32, 3, Some(i * 1_000_000_000 + 7)))
                .collect(),
        ))
        .unwrap();
    }

    let mut serve = bin()
        .args([
            "serve",
            "--store",
            &format!("clickhouse:{urls}"),
            "--http",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http = startup_line(&mut serve)["http"]
        .as_str()
        .unwrap()
        .to_string();
    let _serve = Proc(serve);

    // Every report is stored or was counted as discarded.
    let stats = get(&http, "/api/stats");
    assert_eq!(stats["totals"]["reports_v2"], sent_reports, "{stats}");
    assert_eq!(
        stats["totals"]["reports_v2"].as_u64().unwrap() + discarded,
        sent_reports + 2 * garbage
    );

    // Every flow once, its reports from both collectors summed, its path whole.
    let list = all_pages(&http, "/api/flows?limit=70", "flows");
    assert_eq!(list.len() as u64, flows);
    let keys: BTreeSet<String> = list.iter().map(|f| f["flow"].to_string()).collect();
    assert_eq!(keys.len() as u64, flows, "a flow listed twice");
    let total: u64 = list.iter().map(|f| f["reports"].as_u64().unwrap()).sum();
    assert_eq!(total, sent_reports);
    let short: Vec<&serde_json::Value> = list
        .iter()
        .filter(|f| f["path"].as_array().unwrap().len() != 3)
        .collect();
    assert!(
        short.is_empty(),
        "{} flows: {:?}",
        short.len(),
        short.first()
    );
    // One flow: the same summary and path, and its series.
    for f in list.iter().step_by(97) {
        let k = &f["flow"];
        let one = get(
            &http,
            &format!(
                "/api/flow?src={}&dst={}&proto={}&src_port={}&dst_port={}",
                k["src"].as_str().unwrap(),
                k["dst"].as_str().unwrap(),
                k["proto"],
                k["src_port"],
                k["dst_port"]
            ),
        );
        assert_eq!(one["flow"], *f, "{one}");
        let series = one["intervals"].as_array().unwrap();
        assert!(!series.is_empty());
        assert!(
            series
                .iter()
                .all(|s| s["hop_latency_max"].as_array().unwrap().len() == 3)
        );
    }

    // Events: each once (the rows counted by the store, paged without a repeat).
    let events = all_pages(&http, "/api/events?limit=50", "events");
    assert_eq!(
        events.len() as u64,
        stats["rows"]["events"].as_u64().unwrap()
    );
    assert!(!events.is_empty());
    let distinct: BTreeSet<String> = events.iter().map(Value::to_string).collect();
    // Two collectors may raise identical events (same ID, time and place) for the same flows:
    // they are two rows, and the page order keeps both.
    assert!(distinct.len() * 2 >= events.len());

    // Incidents: each once, as its newest version: the collectors' own, and the 40 written
    // above (two writers × 20).
    let incidents = all_pages(&http, "/api/incidents?limit=200", "incidents");
    assert_eq!(
        incidents.len() as u64,
        stats["rows"]["incidents"].as_u64().unwrap(),
        "{stats}"
    );
    let written: Vec<&Value> = incidents
        .iter()
        .filter(|i| i["start_ns"].as_u64().unwrap() < 1_000_000_000_000)
        .collect();
    assert_eq!(written.len(), 40);
    assert!(
        incidents.len() > 40,
        "the collectors stored incidents of their own"
    );
    let mut by_id: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for i in &written {
        by_id.entry(i["id"].as_u64().unwrap()).or_default().push(i);
    }
    assert_eq!(by_id.len(), 20);
    for (id, versions) in &by_id {
        assert_eq!(versions.len(), 2, "incident {id}: one per writer");
        for v in versions {
            assert_eq!(v["updates"], 3);
            assert_eq!(v["state"], if *id <= 10 { "resolved" } else { "ongoing" });
        }
    }
    let at_4 = get(&http, "/api/incidents?node=4&limit=1000")["incidents"]
        .as_array()
        .unwrap()
        .clone();
    assert!(at_4.iter().all(|i| i["place"]["node"] == 4));
    assert_eq!(
        at_4.iter()
            .filter(|i| i["start_ns"].as_u64().unwrap() < 1_000_000_000_000)
            .count(),
        2
    );

    // Both shards hold part of the flows (sharded by flow hash).
    for shard in 0..2u16 {
        let out = Command::new("curl")
            .args([
                "-sS",
                &format!("http://127.0.0.1:{}/", cluster.port + shard),
                "--data-binary",
                "SELECT uniqExact(flow_hash) FROM intscope.flows_local",
            ])
            .output()
            .unwrap();
        let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(n > 0 && n < flows, "shard {shard} holds {n} flows");
    }
}
