//! `intscope collect` and `intscope blast` as a user runs them: replay a capture, blast over
//! loopback, query the API, stop with SIGTERM.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, interop_file, repo, startup_line, succeed, tempdir, wait_until_accounted};

struct Running {
    child: Child,
    http: String,
    listen: Vec<String>,
    /// The history folder of its own, when `args` named no store: held for its removal when
    /// the `Running` is dropped.
    _data: Option<tempfile::TempDir>,
}

/// Collectors started by this test binary (each its own history folder).
static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Running {
    /// `intscope collect` with `args`, plus an ephemeral API port, the INT UDP port 17768 and
    /// a history folder of its own unless `args` name them: tests run at once, and two
    /// collectors on one store are refused (one writer per store).
    fn start(args: &[&str]) -> Running {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let has = |args: &[String], flag: &str| args.iter().any(|a| a == flag);
        if !has(&args, "--http") {
            args.extend(["--http".into(), "127.0.0.1:0".into()]);
        }
        if !has(&args, "--int-udp-port") {
            args.extend(["--int-udp-port".into(), "17768".into()]);
        }
        let data = ["--data", "--store", "--no-store", "--discard"]
            .iter()
            .all(|f| !has(&args, f))
            .then(|| {
                let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let d = tempdir(&format!("test-running-{n}"));
                args.extend(["--data".into(), d.path().display().to_string()]);
                d
            });
        let mut child = bin()
            .arg("collect")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let v = startup_line(&mut child);
        let listen = v["listen"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        Running {
            child,
            http: v["http"].as_str().unwrap().to_string(),
            listen,
            _data: data,
        }
    }

    /// The API's address to connect to (a wildcard bind is reached on loopback).
    fn url(&self, path: &str) -> String {
        let http = self.http.replace("0.0.0.0:", "127.0.0.1:");
        format!("http://{http}{path}")
    }

    /// The HTTP status of GET `path` with extra curl arguments.
    fn status(&self, path: &str, extra: &[&str]) -> u16 {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(extra)
            .arg(self.url(path))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let out = Command::new("curl")
            .args(["-sf", &self.url(path)])
            .output()
            .expect("curl");
        assert!(out.status.success(), "GET {path}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn stop(self) -> String {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let out = self.child.wait_with_output().unwrap();
        assert!(out.status.success(), "clean exit on SIGTERM");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

#[test]
fn replay_of_the_sample_capture_is_served() {
    let sample = repo("examples/sample.pcap");
    let c = Running::start(&["--replay", &sample]);
    let stats = c.get("/api/stats");
    assert_eq!(
        stats["ingest"]["datagrams_received"], 3,
        "three report frames in the sample"
    );
    assert_eq!(stats["reports"]["v2"], 2);
    assert_eq!(stats["reports"]["v05"], 1);
    let flows = c.get("/api/flows");
    assert_eq!(flows["total"], 2);
    let drops = c.get("/api/events?kind=drop");
    let reasons: Vec<_> = drops
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["evidence"]["drop_reason_name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        reasons.contains(&"traffic-manager".to_string())
            && reasons.contains(&"routing-miss".to_string()),
        "{reasons:?}"
    );
    let stderr = c.stop();
    assert!(stderr.contains("replayed"), "{stderr}");
}

#[test]
fn replay_of_an_onos_v05_capture() {
    let Some(file) = interop_file(
        "replay_of_an_onos_v05_capture",
        "serkantul_prometheus_int_exporter__src_test_resources_int_report.pcap",
    ) else {
        return;
    };
    let c = Running::start(&[
        "--replay",
        file.to_str().unwrap(),
        "--report-port",
        "1234",
        "--int-udp-port",
        "1",
    ]);
    let flows = c.get("/api/flows");
    assert_eq!(flows["total"], 1);
    let f = &flows["flows"][0];
    assert_eq!(f["flow"]["dst_port"], 1234, "the v0.5 tail's original port");
    assert_eq!(
        f["path"],
        serde_json::json!([1, 3, 2]),
        "switch ids 2, 3, 1 newest first: the path source first"
    );
    c.stop();
}

/// Runs `intscope blast --to` the collector with `args`, then waits until every datagram it sent
/// is accounted for — received, or dropped and counted by the kernel — and returns the
/// collector's statistics then.
fn blast_and_account(c: &Running, args: &[&str]) -> serde_json::Value {
    let out = succeed(bin().args(["blast", "--to", &c.listen[0]]).args(args));
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let datagrams = sent["datagrams"].as_u64().unwrap();
    assert!(datagrams > 1000, "{sent}");
    wait_until_accounted(
        datagrams,
        Duration::from_secs(20),
        Duration::from_millis(50),
        || c.get("/api/stats"),
    )
}

#[test]
fn blast_to_collect_every_datagram_accounted() {
    let c = Running::start(&["--listen", "127.0.0.1:0"]);
    let s = blast_and_account(
        &c,
        &["--rate", "50000", "--duration", "1", "--flows", "100"],
    );
    assert_eq!(
        s["ingest"]["datagrams_accepted"],
        s["ingest"]["datagrams_received"]
    );
    assert_eq!(s["flows"], 100);
    let stderr = c.stop();
    assert!(stderr.contains("stopped"), "{stderr}");
}

/// Report v2.0 INT-XD postcards from every node of the paths: each datagram accounted for, each
/// flow's path joined from its nodes' postcards.
#[test]
fn blast_postcards_join_into_paths() {
    let c = Running::start(&["--listen", "127.0.0.1:0"]);
    let s = blast_and_account(
        &c,
        &[
            "--rate",
            "50000",
            "--duration",
            "1",
            "--flows",
            "100",
            "--hops",
            "4",
            "--postcards",
        ],
    );
    assert_eq!(
        s["ingest"]["datagrams_accepted"],
        s["ingest"]["datagrams_received"]
    );
    assert_eq!(s["flows"], 100);
    assert_eq!(
        s["ingest"]["reports_decoded"], s["ingest"]["datagrams_accepted"],
        "one postcard a datagram"
    );
    let flows = c.get("/api/flows?limit=100");
    let paths: Vec<usize> = flows["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_array().map_or(0, Vec::len))
        .collect();
    assert!(
        paths.iter().all(|&n| n == 4),
        "joined 4-node paths: {paths:?}"
    );
    c.stop();
}

/// Overload (the sender batches with GSO, faster than the pipeline): what the collector did not
/// take, the kernel counted — datagram by datagram, since GRO stays off on its sockets.
#[test]
fn overload_is_accounted_for_datagram_by_datagram() {
    let c = Running::start(&["--listen", "127.0.0.1:0"]);
    blast_and_account(&c, &["--rate", "0", "--duration", "1", "--version", "0.5"]);
    c.stop();
}

/// The bare receive loop (`--discard`) counts every datagram and decodes none: the baseline the
/// pipeline's rate is compared with.
#[test]
fn discard_mode_counts_without_decoding() {
    let c = Running::start(&["--listen", "127.0.0.1:0", "--discard"]);
    let s = blast_and_account(&c, &["--rate", "20000", "--duration", "1"]);
    assert_eq!(s["ingest"]["datagrams_accepted"], 0, "nothing decoded");
    assert_eq!(s["flows"], 0);
    c.stop();
}

/// Kill -9 during ingest, restart on the same `--data`: the store opens, nothing committed is
/// lost, and event IDs continue after the stored ones.
#[test]
fn kill_9_during_ingest_loses_nothing_committed() {
    let tmp = tempdir("test-kill9");
    let dir = tmp.path();
    let data = dir.to_str().unwrap();
    let c = Running::start(&["--listen", "127.0.0.1:0", "--data", data]);
    let mut blast = bin()
        .args([
            "blast",
            "--to",
            &c.listen[0],
            "--rate",
            "20000",
            "--duration",
            "4",
            "--flows",
            "50",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for a few committed batches while traffic is still flowing.
    let deadline = Instant::now() + Duration::from_secs(10);
    let committed = loop {
        let s = c.get("/api/stats");
        let rows = &s["store"]["rows"];
        if s["store"]["batches"].as_u64().unwrap_or(0) >= 2
            && rows["events"].as_u64().unwrap_or(0) > 0
            && rows["flows"].as_u64().unwrap_or(0) > 0
        {
            break rows.clone();
        }
        assert!(Instant::now() < deadline, "no batch committed: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let max_event = c.get("/api/history/events?limit=1")["events"][0]["id"]
        .as_u64()
        .unwrap();
    c.kill9();
    let _ = blast.kill();
    let _ = blast.wait();

    let c = Running::start(&["--listen", "127.0.0.1:0", "--data", data]);
    // The store's row counts, as the writer read them at start.
    let deadline = Instant::now() + Duration::from_secs(10);
    let rows = loop {
        let rows = c.get("/api/stats")["store"]["rows"].clone();
        if rows.is_object() {
            break rows;
        }
        assert!(Instant::now() < deadline, "no row counts");
        std::thread::sleep(Duration::from_millis(50));
    };
    for table in ["events", "flows", "queue_stats", "raw_reports"] {
        assert!(
            rows[table].as_u64().unwrap() >= committed[table].as_u64().unwrap(),
            "{table}: {rows} < {committed}"
        );
    }
    let history = c.get("/api/history/events?limit=10000");
    assert!(
        history["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"].as_u64() == Some(max_event))
    );
    let flows = c.get("/api/history/flows");
    assert_eq!(
        flows["flows"].as_array().unwrap().len(),
        50,
        "every flow's summary survived"
    );
    // New events continue the numbering.
    let out = bin()
        .args([
            "blast",
            "--to",
            &c.listen[0],
            "--rate",
            "20000",
            "--duration",
            "1",
            "--flows",
            "50",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(300));
    let live = c.get("/api/events?limit=1");
    if let Some(e) = live.as_array().unwrap().first() {
        assert!(
            e["id"].as_u64().unwrap() > max_event,
            "event ids continue after a restart"
        );
    }
    c.stop();
}

/// The real Prometheus server (Debian's, installed by .ci/run) scrapes `/metrics` and can query
/// what it scraped.
#[test]
fn prometheus_scrapes_the_metrics() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "prometheus is required in CI (.ci/run installs it)"
        );
        eprintln!("prometheus not installed: skipped outside CI");
        return;
    }
    let sample = repo("examples/sample.pcap");
    let c = Running::start(&["--replay", &sample]);
    let tmp = tempdir("test-prometheus");
    let dir = tmp.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: intscope\n    static_configs:\n      - targets: ['{}']\n", c.http),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let query = |q: &str| -> Option<serde_json::Value> {
        let out = Command::new("curl")
            .args([
                "-sf",
                "--get",
                "--data-urlencode",
                &format!("query={q}"),
                &format!("http://127.0.0.1:{port}/api/v1/query"),
            ])
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        if let Some(v) = query("intscope_reports_total{version=\"2.0\"}")
            && v["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped intscope_reports_total"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        result["data"]["result"][0]["value"][1], "2",
        "two v2.0 reports in the sample"
    );
    let targets = Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{port}/api/v1/targets")])
        .output()
        .unwrap();
    let targets: serde_json::Value = serde_json::from_slice(&targets.stdout).unwrap();
    let t = &targets["data"]["activeTargets"][0];
    assert_eq!(t["health"], "up", "{t}");
    assert_eq!(t["lastError"], "", "{t}");
    let drops = query("intscope_drops_total").unwrap();
    assert_eq!(
        drops["data"]["result"].as_array().unwrap().len(),
        2,
        "drops by node and reason"
    );
    let _ = prom.kill();
    let _ = prom.wait();
    c.stop();
}

/// `intscope demo` runs the collector and the simulated fabric; the scripted incast at 3 s is
/// detected as a microburst.
#[test]
fn demo_runs_and_detects_the_scripted_faults() {
    let tmp = tempdir("test-demo");
    let dir = tmp.path();
    let out = bin()
        .args(["demo", "--duration", "4", "--http", "127.0.0.1:0", "--data"])
        .arg(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("collector API on http://127.0.0.1:"),
        "{stderr}"
    );
    let events = stderr
        .lines()
        .find(|l| l.contains("events detected:"))
        .unwrap_or_default();
    assert!(events.contains("microburst"), "{stderr}");
    assert!(
        !events.contains("lost-reports"),
        "no report is lost on loopback: {events}"
    );
    assert!(dir.join("intscope.db").exists());
}

/// The demo's "events detected" line (counts per kind) after a run of `secs` fabric seconds, and
/// its stderr.
fn demo_events(secs: &str) -> (String, String) {
    let data = tempdir(&format!("test-demo-events-{secs}"));
    let out = bin()
        .args([
            "demo",
            "--duration",
            secs,
            "--http",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(data.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let events = stderr
        .lines()
        .find_map(|l| {
            l.split_once("events detected: ")
                .map(|(_, e)| e.to_string())
        })
        .unwrap_or_else(|| panic!("no events line: {stderr}"));
    eprintln!("demo {secs} s: {events}");
    (events, stderr)
}

/// What the demo detects depends on the simulated traffic only, not on how fast this machine
/// runs it: the same fabric on a quiet machine and under a CPU hog (threads spinning on every
/// core, so the fabric falls behind the wall clock) yields the same events, kind by kind.
#[test]
fn demo_detection_does_not_depend_on_the_machines_load() {
    let (quiet, _) = demo_events("4");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..2 * std::thread::available_parallelism().map_or(2, |n| n.get()))
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let (busy, stderr) = demo_events("4");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert_eq!(quiet, busy, "events on a quiet machine vs under load");
    // Behind the wall clock under the hog, and said once, with the lag, when that passed the
    // second the demo says it from (an otherwise idle machine may keep it under that).
    let lag: f64 = stderr
        .split("\"max_behind_real_time_seconds\":")
        .nth(1)
        .and_then(|s| s.split(['}', ',']).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no lag in the summary: {stderr}"));
    assert!(lag > 0.0, "the hog slows the fabric: {stderr}");
    assert_eq!(
        stderr.matches("the fabric runs behind real time (").count(),
        usize::from(lag >= 1.0),
        "{stderr}"
    );
}

#[test]
fn sim_with_random_faults_to_pcap_replays_into_the_collector() {
    let tmp = tempdir("test-sim-random");
    let dir = tmp.path();
    let pcap = dir.join("reports.pcap");
    succeed(
        bin()
            .args([
                "sim",
                "--topology",
                &repo("examples/sim-random.toml"),
                "--duration",
                "3",
            ])
            .args(["--speed", "max", "--reports"])
            .arg(&pcap),
    );
    let c = Running::start(&[
        "--replay",
        pcap.to_str().unwrap(),
        "--data",
        dir.join("store").to_str().unwrap(),
    ]);
    let stats = c.get("/api/stats");
    assert!(
        stats["ingest"]["datagrams_received"].as_u64().unwrap() > 1000,
        "{stats}"
    );
    assert_eq!(stats["ingest"]["discarded"]["malformed"], 0, "{stats}");
    let nodes = c.get("/api/nodes");
    let ids: Vec<u64> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_id"].as_u64().unwrap())
        .collect();
    assert!(
        ids.contains(&6) && ids.contains(&103),
        "the file's 6 leaves and 3 spines report: {ids:?}"
    );
    assert!(c.get("/api/flows")["total"].as_u64().unwrap() >= 90);
    let links = c.get("/api/links");
    let links = links.as_array().unwrap();
    // 6 leaves x 3 spines, both ways, less a few the random faults keep quiet.
    assert!(links.len() >= 30, "{links:?}");
    for l in links {
        // The simulator reports per mille; the API scales by tx_util_full_scale (1000).
        let raw = l["tx_util"].as_u64().unwrap_or_else(|| panic!("{l}"));
        assert_eq!(
            l["utilization"].as_f64().unwrap(),
            raw as f64 / 1000.0,
            "{l}"
        );
    }
    let events = c.get("/api/events?limit=1000");
    assert!(
        !events.as_array().unwrap().is_empty(),
        "the scripted and random faults show"
    );
    c.stop();
}

/// The stderr of `intscope collect` with `args`, which must refuse to start.
fn collect_refuses(args: &[&str]) -> String {
    let out = bin().arg("collect").args(args).output().unwrap();
    assert!(!out.status.success(), "collect {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A second `collect` on a port the first holds fails at start with a clear error (it used to
/// start and silently take a share of the reports); with `--reuse-port` it shares the port.
#[test]
fn a_second_collect_on_the_same_port_fails_without_reuse_port() {
    // Sharing takes both sides asking for it: a collector without --reuse-port keeps its port.
    let first = Running::start(&["--listen", "127.0.0.1:0", "--no-store", "--reuse-port"]);
    let port = first.listen[0].clone();
    let stderr = collect_refuses(&["--listen", &port, "--http", "127.0.0.1:0", "--no-store"]);
    assert!(
        stderr.contains("already in use") && stderr.contains("--reuse-port"),
        "{stderr}"
    );
    let second = Running::start(&["--listen", &port, "--no-store", "--reuse-port"]);
    assert_eq!(second.listen, [port]);
    // Serving, so its signal handler is in place before the SIGTERM.
    second.get("/api/stats");
    first.get("/api/stats");
    second.stop();
    first.stop();
}

/// Listening off loopback with no allowlist says so at start; `--allow` takes the config key's
/// place, and a report from outside it is counted as not allowed.
#[test]
fn listening_off_loopback_without_an_allowlist_warns() {
    let open = Running::start(&["--listen", "0.0.0.0:0", "--no-store"]);
    open.get("/api/stats");
    let stderr = open.stop();
    assert!(
        stderr.contains("warning") && stderr.contains("--allow"),
        "{stderr}"
    );
    let guarded = Running::start(&[
        "--listen",
        "0.0.0.0:0",
        "--no-store",
        "--allow",
        "10.0.0.0/8",
    ]);
    let port = guarded.listen[0].rsplit(':').next().unwrap().to_string();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&[0x20; 40], format!("127.0.0.1:{port}"))
        .unwrap();
    tx.send_to(&[], format!("127.0.0.1:{port}")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = guarded.get("/api/stats");
        if s["ingest"]["datagrams_received"] == 2 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(s["ingest"]["discarded"]["not_allowed"], 2, "{s}");
    let stderr = guarded.stop();
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// Two graceful restarts over one `--data`: the stored counters are the sums of every run
/// (a restart adds, it never overwrites).
#[test]
fn graceful_restarts_add_to_the_stored_counters() {
    let tmp = tempdir("test-restarts");
    let dir = tmp.path();
    let data = dir.to_str().unwrap();
    let mut expected = 0u64;
    for _ in 0..2 {
        let c = Running::start(&["--listen", "127.0.0.1:0", "--data", data]);
        let s = blast_and_account(&c, &["--rate", "20000", "--duration", "1", "--flows", "50"]);
        // What this run correlated (the datagrams the kernel dropped are not in it).
        expected += s["reports"]["v2"].as_u64().unwrap();
        c.stop();
    }
    assert!(expected > 30_000, "{expected}");
    let c = Running::start(&["--listen", "127.0.0.1:0", "--data", data]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let totals = loop {
        let s = c.get("/api/stats");
        if s["store"]["totals"].is_object() {
            break s["store"]["totals"].clone();
        }
        assert!(Instant::now() < deadline, "no store snapshot: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(totals["reports_v2"], expected, "{totals}");
    let flows = c.get("/api/history/flows?limit=10000");
    let stored: u64 = flows["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reports"].as_u64().unwrap())
        .sum();
    assert_eq!(stored, expected, "the flows' stored reports are the sums");
    c.stop();
}

/// At more than 100 000 reports a second offered, with the store's writer busy (20 000 flows
/// change every interval), a kill -9 loses no more than the collector said was at risk:
/// - by default ingest never waits for the store, and the loss is at most what `store.lag_ms`
///   said was not yet stored just before the kill;
/// - with `store.backpressure = true`, at most one flush interval: the file holds every report
///   correlated up to the last interval (what the collector cannot take while it waits for the
///   writer the kernel drops and counts).
///
/// The two runs are one after the other: two loads at once would share the machine's cores.
#[test]
fn kill_9_under_load_loses_at_most_what_was_at_risk() {
    kill_9_under_load(false);
    kill_9_under_load(true);
}

fn kill_9_under_load(backpressure: bool) {
    let tmp = tempdir("test-kill9-load");
    let dir = tmp.path();
    let interval_ms = 500u64;
    let config = dir.join("collect.toml");
    std::fs::write(
        &config,
        // Flushes put off for ingest stretch to at most 2 s here, so that the 4 s of load see
        // some committed. The writer at ingest's priority (`nice = 0`): what is tested is the
        // loss at a kill, not the writer's share of a machine that other tests (run in
        // parallel) keep busy, where at nice 10 it may commit nothing for many seconds.
        format!(
            "[store]\nflush_interval_ms = {interval_ms}\nbackpressure = {backpressure}\nmax_stretch = 4\nnice = 0\n"
        ),
    )
    .unwrap();
    let data = dir.join("data");
    let c = Running::start(&[
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--data",
        data.to_str().unwrap(),
    ]);
    let blast = bin()
        .args([
            "blast",
            "--to",
            &c.listen[0],
            "--rate",
            "150000",
            "--duration",
            "12",
            "--flows",
            "20000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // (time, reports correlated, batches committed) while the load runs: 4 s, longer (up to
    // 11 s) until the store committed what the checks below compare with. The writer yields
    // the CPU to ingest by design, so on a machine busy with other work it may commit nothing
    // for seconds.
    let needed = if backpressure { 3 } else { 1 };
    let mut samples: Vec<(Instant, u64, u64)> = Vec::new();
    let (mut lag_ms, mut pauses) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(4000)
        || (samples.last().is_none_or(|s| s.2 < needed)
            && start.elapsed() < Duration::from_millis(11_000))
    {
        let s = c.get("/api/stats");
        samples.push((
            Instant::now(),
            s["reports"]["v2"].as_u64().unwrap(),
            s["store"]["batches"].as_u64().unwrap(),
        ));
        lag_ms = s["store"]["lag_ms"].as_u64().unwrap();
        pauses = s["store"]["ingest_pauses"].as_u64().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill9();
    if !backpressure {
        assert_eq!(pauses, 0, "ingest waited for the store");
    }
    let sent: serde_json::Value =
        serde_json::from_slice(&blast.wait_with_output().unwrap().stdout).unwrap();
    let offered = sent["reports_per_second"].as_f64().unwrap();
    assert!(offered >= 100_000.0, "load {sent}");
    let (t_last, seen, batches) = *samples.last().unwrap();
    // Back-pressure keeps the writer on pace; without it the store may fall behind (its
    // threads yield the CPU to ingest) but must have committed something to compare.
    assert!(
        batches >= needed,
        "intervals committed before the kill: {batches}"
    );
    // What the collector correlated per second, for the messages.
    let rate = (seen - samples[0].1) as f64 / (t_last - samples[0].0).as_secs_f64();
    // What one interval of ingest can hold at this load: the fastest correlation rate seen
    // (over stretches of 100 to 300 ms: ingest runs in bursts between the writer's commits)
    // for an interval, plus the flusher's 10 ms tick and the last receive batch.
    let mut fastest = 0f64;
    for (i, a) in samples.iter().enumerate() {
        for b in &samples[i + 1..] {
            let dt = (b.0 - a.0).as_secs_f64();
            if (0.1..=0.3).contains(&dt) {
                fastest = fastest.max((b.1 - a.1) as f64 / dt);
            }
        }
    }
    // With back-pressure one interval; without, the lag stated at the last sample, with the
    // same slack (the sample is at most 20 ms and one request old at the kill).
    let at_risk_ms = if backpressure { interval_ms } else { lag_ms };
    let one_interval = (fastest * (at_risk_ms + 50) as f64 / 1000.0) as u64;

    let c = Running::start(&["--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let stored = loop {
        let s = c.get("/api/stats");
        if let Some(v) = s["store"]["totals"]["reports_v2"].as_u64() {
            break v;
        }
        assert!(Instant::now() < deadline, "no store snapshot: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    c.stop();
    assert!(stored > 0);
    let lost = seen.saturating_sub(stored);
    eprintln!(
        "offered {offered:.0}/s, correlated {rate:.0}/s, {batches} batches, lag {lag_ms} ms; \
         at the kill: {seen} correlated, {stored} stored, {lost} lost; {at_risk_ms} ms hold {one_interval}"
    );
    assert!(
        lost <= one_interval,
        "lost {lost} reports of {seen}: more than {at_risk_ms} ms' {one_interval} (load {rate:.0}/s)"
    );
}

/// The demo's API follows the same access policy: off loopback it refuses to start open.
#[test]
fn the_demo_api_off_loopback_needs_a_token() {
    let out = bin()
        .args(["demo", "--http", "0.0.0.0:0", "--duration", "1"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the demo served an open API off loopback"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("off loopback") && err.contains("--api-token-file"),
        "{err}"
    );
}

/// Off loopback the API needs a token, or an explicit --insecure-no-auth; either is said on
/// start.
#[test]
fn the_api_off_loopback_needs_a_token() {
    let err = collect_refuses(&[
        "--http",
        "0.0.0.0:0",
        "--listen",
        "127.0.0.1:0",
        "--no-store",
    ]);
    assert!(
        err.contains("off loopback")
            && err.contains("--api-token-file")
            && err.contains("--insecure-no-auth"),
        "{err}"
    );

    let c = Running::start(&[
        "--http",
        "0.0.0.0:0",
        "--listen",
        "127.0.0.1:0",
        "--no-store",
        "--insecure-no-auth",
    ]);
    assert_eq!(c.status("/api/stats", &[]), 200);
    let stderr = c.stop();
    assert!(stderr.contains("NO authentication"), "{stderr}");

    let tmp = tempdir("test-token");
    let dir = tmp.path();
    let token = dir.join("token");
    std::fs::write(&token, "an-api-token\n").unwrap();
    let c = Running::start(&[
        "--http",
        "0.0.0.0:0",
        "--listen",
        "127.0.0.1:0",
        "--no-store",
        "--api-token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(c.status("/api/stats", &[]), 401);
    assert_eq!(c.status("/metrics", &[]), 401);
    assert_eq!(
        c.status("/api/stats", &["-H", "Authorization: Bearer wrong"]),
        401
    );
    assert_eq!(
        c.status("/api/stats", &["-H", "Authorization: Bearer an-api-token"]),
        200
    );
    assert_eq!(
        c.status("/metrics", &["-H", "Authorization: Bearer an-api-token"]),
        200
    );
    let stderr = c.stop();
    assert!(stderr.contains("bearer token required"), "{stderr}");
    // An empty token file is an error, not an open API.
    std::fs::write(&token, "\n").unwrap();
    let stderr = collect_refuses(&[
        "--http",
        "0.0.0.0:0",
        "--no-store",
        "--api-token-file",
        token.to_str().unwrap(),
    ]);
    assert!(stderr.contains("empty"), "{stderr}");
}

/// `--tls-cert`/`--tls-key`: the API over HTTPS, with a certificate made for the test; a
/// certificate that does not load stops the start with the file named.
#[test]
fn the_api_over_tls() {
    let tmp = tempdir("test-tls");
    let dir = tmp.path();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let c = Running::start(&[
        "--listen",
        "127.0.0.1:0",
        "--no-store",
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ]);
    let port = c.http.rsplit(':').next().unwrap().to_string();
    let out = Command::new("curl")
        .args(["-sf", "--cacert", cert_file.to_str().unwrap()])
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .arg(format!("https://localhost:{port}/api/stats"))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(stats["ingest"].is_object());
    // Plain HTTP on the TLS port gets no answer.
    assert_eq!(c.status("/api/stats", &["-m", "5"]), 0);
    let stderr = c.stop();
    assert!(stderr.contains("https://"), "{stderr}");

    let stderr = collect_refuses(&[
        "--no-store",
        "--http",
        "127.0.0.1:0",
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        dir.join("missing.pem").to_str().unwrap(),
    ]);
    assert!(stderr.contains("missing.pem"), "{stderr}");
}

/// Signals as a daemon takes them: SIGHUP, SIGUSR1 and SIGUSR2 (whose default action ends a
/// process) are said and ignored, the collector answering on; SIGQUIT stops it as SIGTERM
/// does, with its stop summary and the final flush of what it received into its store.
#[test]
fn hangup_and_user_signals_are_ignored_quit_stops_with_a_flush() {
    let tmp = tempdir("signals");
    let data = tmp.path();
    let mut c = Running::start(&["--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()]);
    let s = blast_and_account(&c, &["--rate", "20000", "--duration", "1", "--flows", "50"]);
    assert_eq!(s["flows"], 50);
    for sig in ["-HUP", "-USR1", "-USR2"] {
        let ok = Command::new("kill")
            .args([sig, &c.child.id().to_string()])
            .status();
        assert!(ok.unwrap().success());
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(c.child.try_wait().unwrap().is_none(), "still running");
    assert_eq!(c.get("/api/stats")["flows"], 50, "and answering");
    Command::new("kill")
        .args(["-QUIT", &c.child.id().to_string()])
        .status()
        .unwrap();
    let out = c.child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "clean exit on SIGQUIT: {stderr}");
    for name in ["SIGHUP", "SIGUSR1", "SIGUSR2"] {
        assert!(stderr.contains(&format!("{name} ignored")), "{stderr}");
    }
    assert!(stderr.contains("stopped"), "{stderr}");
    // What it received is in the store: a replay of nothing over it serves the flows.
    let served = Running::start(&[
        "--replay",
        &repo("examples/sample.pcap"),
        "--data",
        data.to_str().unwrap(),
    ]);
    let flows = served.get("/api/history/flows?limit=1000");
    assert!(
        flows.to_string().matches("\"src_port\"").count() >= 50,
        "the 50 flows were flushed before the stop: {flows}"
    );
    served.stop();
}

/// One writer per store: a second collector, or a replay, on a data directory a collector is
/// writing is refused with the writer's process ID (before, both wrote, their event IDs
/// colliding); `serve` reads beside it; once the first stops, the directory is free again.
#[test]
fn a_second_writer_on_one_store_is_refused() {
    let data = tempdir("onewriter");
    let dir = data.path().to_str().unwrap();
    let first = Running::start(&["--listen", "127.0.0.1:0", "--data", dir]);
    first.get("/api/stats");
    let pid = first.child.id().to_string();
    for extra in [
        vec!["--listen", "127.0.0.1:0"],
        vec!["--replay", "examples/sample.pcap"],
    ] {
        let out = bin()
            .current_dir(repo(""))
            .args(["collect", "--http", "127.0.0.1:0", "--data", dir])
            .args(&extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("being written by another intscope") && stderr.contains(&pid),
            "{extra:?}: {stderr}"
        );
    }
    let mut serve = bin()
        .args([
            "serve",
            "--store",
            &format!("sqlite:{dir}"),
            "--http",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        serve.try_wait().unwrap().is_none(),
        "serve reads beside the writer"
    );
    serve.kill().unwrap();
    let _ = serve.wait();
    first.stop();
    let again = Running::start(&["--listen", "127.0.0.1:0", "--data", dir]);
    again.get("/api/stats");
    again.stop();
}

/// `--topology FILE` names the nodes (`/api/names`, the console's labels): from an ONOS network
/// configuration, from a lab file as the lab names its namespaces, and from the config file's
/// `topology`; a file that names nothing is refused with the reason.
#[test]
fn a_topology_file_names_the_nodes() {
    let tmp = tempdir("test-topology");
    let netcfg = tmp.path().join("netcfg.json");
    std::fs::write(
        &netcfg,
        r#"{"devices": {"device:leaf1": {"segmentrouting": {"ipv4NodeSid": 101},
            "basic": {"name": "leaf-1"}}, "device:spine1": {"segmentrouting": {"ipv4NodeSid": 201}}}}"#,
    )
    .unwrap();
    let c = Running::start(&[
        "--listen",
        "127.0.0.1:0",
        "--no-store",
        "--topology",
        netcfg.to_str().unwrap(),
    ]);
    assert_eq!(
        c.get("/api/names"),
        serde_json::json!({"nodes": {"101": "leaf-1", "201": "spine1"}})
    );
    c.stop();

    let lab = tmp.path().join("lab.toml");
    std::fs::write(
        &lab,
        "[topology]\nleaves = 2\nspines = 1\nhosts_per_leaf = 1\n",
    )
    .unwrap();
    let config = tmp.path().join("collect.toml");
    std::fs::write(&config, format!("topology = {:?}\n", lab.to_str().unwrap())).unwrap();
    let c = Running::start(&[
        "--listen",
        "127.0.0.1:0",
        "--no-store",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(
        c.get("/api/names")["nodes"],
        serde_json::json!({"1": "leaf1", "2": "leaf2", "101": "spine1",
            "1001": "host1-1", "2001": "host2-1"})
    );
    c.stop();

    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"links": []}"#).unwrap();
    let err = collect_refuses(&[
        "--listen",
        "127.0.0.1:0",
        "--no-store",
        "--topology",
        bad.to_str().unwrap(),
    ]);
    assert!(
        err.contains("--topology") && err.contains("neither"),
        "{err}"
    );
}
