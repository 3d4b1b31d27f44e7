//! Outages of a replicated ClickHouse cluster (2 shards × 2 replicas, ZooKeeper, on loopback)
//! during ingest: a replica killed, then a whole shard killed, while a collector takes reports
//! and `intscope serve` and the collector's API are asked every 200 ms. Nothing is lost once the
//! servers are back (every report decoded is in the store, each flow once), no answer is a 500,
//! and while a whole shard is down the answers are 503s that say so. Then, on the same cluster:
//! an incident that ended during an outage is stored as ended, and a writer killed during an
//! outage leaves its spool to the next run.
//!
//! Cost: one cluster start (~1 s), ~15 s of ingest with the outages in it (5 s each), ~10 s of
//! store-level cases; about 35 s of wall time in all (the 20 s outages:
//! `scripts/cluster-bench.sh --outage 20`).

#[path = "../../collector/tests/ch/mod.rs"]
mod ch;
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use intscope_collector::store::{ClickHouseStore, HistoryQuery, Store};
use intscope_core::{
    Batch, Incident, IncidentCounts, IncidentKind, IncidentPlace, IncidentState, RowSink, Severity,
};
use serde_json::Value;

/// Says how far the test is, for its wall time (`--nocapture`).
macro_rules! mark {
    ($t:expr, $what:expr) => {
        eprintln!("[{:>6.1} s] {}", $t.elapsed().as_secs_f64(), $what)
    };
}

/// `(status, body)` of a GET.
fn get_status(http: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .arg(format!("http://{http}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn get(http: &str, path: &str) -> Value {
    let (code, body) = get_status(http, path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// Every row of a paged list endpoint.
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
        rows.extend(page[name].as_array().unwrap().iter().cloned());
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

fn incident(id: u64, end: Option<u64>) -> Incident {
    let s = 1_000_000_000;
    Incident {
        id,
        kind: IncidentKind::Congestion,
        place: IncidentPlace {
            node: Some(7),
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
        last_update_ns: id * s + 5,
        end_ns: end,
        end_uncertainty_ns: 0,
        end_reason: end.map(|_| intscope_core::EndReason::Normal),
        received_ns: None,
        updates: 2,
        counts: IncidentCounts::default(),
        peak: None,
        threshold: None,
        baseline: None,
        flows: Vec::new(),
        symptoms: Vec::new(),
        evidence: None,
    }
}

/// Waits until every local table of every server has fetched what its replica holds.
fn sync_replicas(cluster: &ch::ClickHouse) {
    for k in 0..cluster.shards * cluster.replicas {
        let tables = cluster.query(
            k,
            "SELECT name FROM system.tables WHERE database = 'intscope' AND engine LIKE 'Replicated%'",
        );
        for t in tables.lines() {
            let r = cluster.query(k, &format!("SYSTEM SYNC REPLICA intscope.`{t}`"));
            assert!(r.is_empty(), "server {k}: sync {t}: {r}");
        }
    }
}

#[test]
fn replica_and_shard_outages_during_ingest_lose_nothing_and_never_500() {
    let t0 = Instant::now();
    // The collectors' logs and spools, and the writers' spools: removed with it.
    let tmp = tempdir("outage");
    let dir = tmp.path();
    let cluster = ch::ClickHouse::start_replicated(2, 2);
    mark!(t0, "cluster up");
    let urls = cluster.urls();
    assert!(urls.contains('|'), "{urls}");
    let spool = dir.join("spool");
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
            "c1",
        ])
        .arg("--spool")
        .arg(&spool)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("collector.log")).unwrap())
        .spawn()
        .unwrap();
    let line = startup_line(&mut child);
    let mut collector = Proc(child);
    let http = line["http"].as_str().unwrap().to_string();
    let udp = line["listen"][0].as_str().unwrap().to_string();
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
    let served = startup_line(&mut serve)["http"]
        .as_str()
        .unwrap()
        .to_string();
    let _serve = Proc(serve);

    // The API asked throughout: every answer's status, and what the 503s said.
    let done = Arc::new(AtomicBool::new(false));
    let prober = {
        let (done, http, served) = (Arc::clone(&done), http.clone(), served.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<(u16, String, String)> = Vec::new();
            while !done.load(Ordering::Relaxed) {
                for (at, path) in [
                    (&http, "/api/history/events?limit=5"),
                    (&http, "/api/history/flows?limit=5"),
                    (&served, "/api/flows?limit=5"),
                    (&served, "/api/incidents?limit=5"),
                    (&served, "/api/stats"),
                ] {
                    let (code, body) = get_status(at, path);
                    seen.push((code, path.to_string(), body));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        })
    };

    let flows = 200u64;
    let blast = bin()
        .args(["blast", "--to", &udp, "--rate", "3000", "--duration", "14"])
        .args(["--flows", &flows.to_string(), "--hops", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let at = |s: u64| {
        let t = Duration::from_secs(s);
        if let Some(left) = t.checked_sub(start.elapsed()) {
            std::thread::sleep(left);
        }
    };
    // A replica down: the one writes and reads went to first (shard 0's first).
    at(1);
    cluster.kill(0);
    at(6);
    cluster.revive(0);
    // A whole shard down: shard 1, both replicas.
    at(7);
    cluster.kill(2);
    cluster.kill(3);
    at(12);
    mark!(t0, "shard 1 down, reviving");
    let during = get(&http, "/api/stats");
    cluster.revive(2);
    cluster.revive(3);
    mark!(t0, "blast waited");
    let out = blast.wait_with_output().unwrap();
    assert!(out.status.success());
    let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent["send_errors"], 0);
    let sent_reports = sent["reports"].as_u64().unwrap();
    let s = wait_until_accounted(
        sent["datagrams"].as_u64().unwrap(),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || get(&http, "/api/stats"),
    );
    // Every report decoded: none dropped by the kernel or discarded.
    assert_eq!(
        s["ingest"]["kernel_dropped"].as_u64().unwrap_or(0),
        0,
        "{s}"
    );
    // The outage spooled rows, and the spool empties once the shard is back.
    let spooled = &during["store"]["spool"];
    assert!(spooled["rows"].as_u64().unwrap() > 0, "{during}");
    mark!(t0, "accounted");
    let deadline = Instant::now() + Duration::from_secs(40);
    let s = loop {
        let s = get(&http, "/api/stats");
        if s["store"]["spool"]["rows"] == 0 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(s["store"]["spool"]["rows"], 0, "{s}");
    assert_eq!(s["store"]["spool"]["dropped_full_rows"], 0, "{s}");
    assert_eq!(s["store"]["spool"]["dropped_io_rows"], 0, "{s}");
    assert!(
        s["store"]["spool"]["replayed_rows"].as_u64().unwrap() > 0,
        "{s}"
    );
    mark!(t0, "spool empty");
    done.store(true, Ordering::Relaxed);
    let seen = prober.join().unwrap();
    let pid = collector.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(collector.0.wait().unwrap().success());

    mark!(t0, "collector ended");
    // Never a 500; the 503s (a shard down) say so in plain words.
    let bad: Vec<_> = seen
        .iter()
        .filter(|(c, ..)| *c != 200 && *c != 503)
        .collect();
    assert!(
        bad.is_empty(),
        "{} answers neither 200 nor 503: {:?}",
        bad.len(),
        bad.first()
    );
    let unavailable: Vec<_> = seen.iter().filter(|(c, ..)| *c == 503).collect();
    assert!(!unavailable.is_empty(), "a whole shard down must show");
    for (_, path, body) in &unavailable {
        assert!(
            body.contains("unreachable") || body.contains("answered"),
            "{path}: {body}"
        );
        assert!(
            !body.contains("DB::"),
            "{path}: ClickHouse's own text: {body}"
        );
    }
    assert!(seen.iter().filter(|(c, ..)| *c == 200).count() > unavailable.len());

    // Nothing lost: every report decoded is stored, each flow once, from every replica.
    mark!(t0, "checks");
    sync_replicas(&cluster);
    mark!(t0, "replicas synced");
    let stats = get(&served, "/api/stats");
    assert_eq!(stats["totals"]["reports_v2"], sent_reports, "{stats}");
    let list = all_pages(&served, "/api/flows?limit=100", "flows");
    assert_eq!(list.len() as u64, flows);
    let keys: BTreeSet<String> = list.iter().map(|f| f["flow"].to_string()).collect();
    assert_eq!(keys.len() as u64, flows, "a flow listed twice");
    let total: u64 = list.iter().map(|f| f["reports"].as_u64().unwrap()).sum();
    assert_eq!(total, sent_reports);
    // serve's /metrics says the same.
    let (code, text) = get_status(&served, "/metrics");
    assert_eq!(code, 200);
    assert!(
        text.contains(&format!(
            "intscope_fabric_counter_total{{name=\"reports_v2\"}} {sent_reports}\n"
        )),
        "{text}"
    );
    assert!(text.contains("intscope_fabric_queries_failed_total{reason=\"unavailable\"}"));
    // The replicas of each shard come to hold the same rows: a replica fetches the parts the
    // other took in the background, and `SYSTEM SYNC REPLICA` waits only for the entries it
    // has pulled from ZooKeeper so far, so the comparison is polled (at most 30 s).
    for shard in 0..2 {
        let count = |k| cluster.query(k, "SELECT sum(samples) FROM intscope.flow_stats_local");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (a, b) = (count(shard * 2), count(shard * 2 + 1));
            if a == b || Instant::now() > deadline {
                assert_eq!(a, b, "shard {shard}");
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            sync_replicas(&cluster);
        }
    }
    mark!(t0, "stored rows checked");

    incidents_ended_in_an_outage_are_stored_ended(&cluster, dir);
    mark!(t0, "incident case done");
    a_writer_killed_in_an_outage_leaves_its_spool_to_the_next(&cluster, dir);
    mark!(t0, "kill case done");
    a_collector_killed_in_an_outage_loses_nothing_it_flushed(&cluster, &urls, dir);
    mark!(t0, "collector kill -9 case done");
}

/// An incident's end written while its shard is down is stored once the shard is back: the
/// store does not keep it "ongoing".
fn incidents_ended_in_an_outage_are_stored_ended(cluster: &ch::ClickHouse, dir: &Path) {
    let mut cfg = cluster.config("intscope", "w1");
    cfg.spool_dir = Some(dir.join("spool-w1"));
    let w = ClickHouseStore::open(cfg.clone()).unwrap();
    // Incident 1 is on shard 1 (by its ID).
    let batch = |i| Batch {
        incidents: vec![i],
        ..Batch::default()
    };
    w.write(&batch(incident(1, None))).unwrap();
    cluster.kill(2);
    cluster.kill(3);
    w.write(&batch(incident(1, Some(1_000_000_500)))).unwrap();
    let spool = w.spool_stats().unwrap();
    assert_eq!(spool.rows, 1, "{spool:?}");
    cluster.revive(2);
    cluster.revive(3);
    assert!(w.replay_spools(), "{:?}", w.spool_stats());
    sync_replicas(cluster);
    let q = HistoryQuery {
        node: Some(7),
        ..HistoryQuery::default()
    };
    let page = w.incidents(&q).unwrap();
    let mine: Vec<_> = page
        .items
        .iter()
        .filter(|i| i.id == 1 && i.start_ns == 1_000_000_000)
        .collect();
    assert!(!mine.is_empty());
    assert!(
        mine.iter().all(|i| i.state == IncidentState::Resolved),
        "{mine:?}"
    );
    drop(w);
    assert!(!cfg.spool_path().exists(), "an empty spool leaves nothing");
}

/// A writer whose shard is down spools to disk before it acknowledges: dropped without a
/// replay (as a kill -9 would leave it), its spool is taken up by the next run, even one
/// started while the shard is still down, and replayed once the shard is back.
fn a_writer_killed_in_an_outage_leaves_its_spool_to_the_next(cluster: &ch::ClickHouse, dir: &Path) {
    let mut cfg = cluster.config("intscope", "w2");
    cfg.spool_dir = Some(dir.join("spool-w2"));
    cluster.kill(0);
    cluster.kill(1);
    // Incidents of even IDs: all on shard 0.
    let batch = Batch {
        incidents: (1..=10).map(|i| incident(i * 2, None)).collect(),
        ..Batch::default()
    };
    let w = ClickHouseStore::open(cfg.clone()).unwrap();
    w.write(&batch).unwrap();
    assert_eq!(w.spool_stats().unwrap().rows, 10);
    // Dropped with its shard down: the spool stays on disk as a kill would leave it (every
    // entry is synced before the write returns).
    drop(w);
    assert!(cfg.spool_path().join("shard0").read_dir().unwrap().count() > 0);
    // Started during the outage (shard 0 still down): it opens and takes up the spool.
    let w = ClickHouseStore::open(cfg.clone()).unwrap();
    assert_eq!(w.spool_stats().unwrap().rows, 10);
    cluster.revive(0);
    cluster.revive(1);
    assert!(w.replay_spools(), "{:?}", w.spool_stats());
    sync_replicas(cluster);
    let n = cluster.query(
        2,
        "SELECT uniqExact(id) FROM intscope.incidents WHERE source = 'w2'",
    );
    assert_eq!(n, "10");
    drop(w);
}

/// Starts `intscope collect` named `name` with `spool`, its log `<name>.log` beside the spool,
/// returning it, its HTTP and UDP addresses.
fn start_collector(urls: &str, name: &str, spool: &Path) -> (Proc, String, String) {
    let log = spool.with_file_name(format!("{name}.log"));
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
        .arg(spool)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| startup_line(&mut child)))
        .unwrap_or_else(|_| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("collector {name} did not start: {log}")
        });
    (
        Proc(child),
        line["http"].as_str().unwrap().to_string(),
        line["listen"][0].as_str().unwrap().to_string(),
    )
}

/// Polls the collector's `/api/stats` until `done` holds of it (or 20 s passed), returning it.
fn stats_until(http: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = get(http, "/api/stats");
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A collector started while a shard is down (it starts: that shard's schema waits), killed
/// with SIGKILL once its input was flushed: the next run with the same name and spool replays
/// what the first spooled, and every report the first decoded is stored.
fn a_collector_killed_in_an_outage_loses_nothing_it_flushed(
    cluster: &ch::ClickHouse,
    urls: &str,
    dir: &Path,
) {
    cluster.kill(2);
    cluster.kill(3);
    let spool = dir.join("spool-c3");
    let (mut first, http, udp) = start_collector(urls, "c3", &spool);
    let out = bin()
        .args(["blast", "--to", &udp, "--rate", "3000", "--duration", "2"])
        .args(["--flows", "50", "--hops", "3"])
        .output()
        .unwrap();
    let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent_reports = sent["reports"].as_u64().unwrap();
    wait_until_accounted(
        sent["datagrams"].as_u64().unwrap(),
        Duration::from_secs(20),
        Duration::from_millis(100),
        || get(&http, "/api/stats"),
    );
    // Two flush intervals (1 s) after the last datagram: everything decoded was flushed.
    std::thread::sleep(Duration::from_millis(2500));
    let s = get(&http, "/api/stats");
    assert_eq!(
        s["ingest"]["kernel_dropped"].as_u64().unwrap_or(0),
        0,
        "{s}"
    );
    assert!(s["store"]["spool"]["rows"].as_u64().unwrap() > 0, "{s}");
    let _ = first.0.kill();
    let _ = first.0.wait();
    drop(first);

    let (mut second, http, _) = start_collector(urls, "c3", &spool);
    cluster.revive(2);
    cluster.revive(3);
    let s = stats_until(&http, |s| {
        s["store"]["spool"]["rows"] == 0 && s["store"]["totals"]["reports_v2"] == sent_reports
    });
    assert_eq!(s["store"]["spool"]["rows"], 0, "{s}");
    assert!(
        s["store"]["spool"]["replayed_rows"].as_u64().unwrap() > 0,
        "{s}"
    );
    assert_eq!(s["store"]["totals"]["reports_v2"], sent_reports, "{s}");
    let _ = Command::new("kill")
        .args(["-TERM", &second.0.id().to_string()])
        .status();
    assert!(second.0.wait().unwrap().success());
}
