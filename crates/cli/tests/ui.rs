//! The web UI end to end in headless Chromium (Debian's, installed by .ci/run) against a running
//! `intscope demo`: every page shows real data, an event links to its flow, and each page is
//! screenshotted (target/ui-screenshots/; with INTSCOPE_SCREENSHOTS=1 also docs/screenshots/).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chromium(args: &[&str], url: &str, profile: &str) -> String {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
        ])
        .args([
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
            "--timeout=4000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            std::env::temp_dir()
                .join(format!(
                    "intscope-chromium-{profile}-{}",
                    std::process::id()
                ))
                .display()
        ))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn count(dom: &str, marker: &str) -> usize {
    dom.matches(&format!("data-test=\"{marker}\"")).count()
}

#[test]
fn every_page_shows_real_data_and_events_link_to_flows() {
    if Command::new("chromium").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is required in CI (.ci/run installs it)"
        );
        eprintln!("chromium not installed: skipped outside CI");
        return;
    }
    let mut demo = Command::new(env!("CARGO_BIN_EXE_intscope"))
        .args([
            "demo",
            "--duration",
            "60",
            "--http",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(std::env::temp_dir().join(format!("intscope-ui-{}", std::process::id())))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut base = String::new();
    let mut lines = BufReader::new(demo.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split("collector API on ").nth(1) {
            base = rest
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches('/')
                .to_string();
            break;
        }
    }
    // Keep draining the demo's stderr (progress), or its writes would fail.
    std::thread::spawn(move || lines.for_each(drop));
    assert!(base.starts_with("http://127.0.0.1:"), "demo did not start");
    // The scripted incast happens at 3 s of fabric time; wait until events exist.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("curl")
            .args(["-sf", &format!("{base}/api/events?kind=microburst")])
            .output()
            .unwrap();
        if serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .is_ok_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no microburst detected");
        std::thread::sleep(Duration::from_millis(500));
    }

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let docs = std::env::var_os("INTSCOPE_SCREENSHOTS")
        .map(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots"));
    let page = |name: &str, hash: &str| -> String {
        let url = format!("{base}/#/{hash}");
        let png = shots.join(format!("{name}.png"));
        chromium(&[&format!("--screenshot={}", png.display())], &url, name);
        assert!(
            std::fs::metadata(&png)
                .map(|m| m.len() > 10_000)
                .unwrap_or(false),
            "screenshot of {name}"
        );
        if let Some(d) = &docs {
            std::fs::create_dir_all(d).unwrap();
            std::fs::copy(&png, d.join(format!("{name}.png"))).unwrap();
        }
        // The DOM once the page's requests have rendered (virtual time; the live event stream
        // is paused for it, since a never-ending request would hold virtual time).
        let dom_url = if hash == "events" {
            format!("{base}/#/events?live=0")
        } else {
            url
        };
        chromium(
            &["--virtual-time-budget=3000", "--dump-dom"],
            &dom_url,
            &format!("{name}-dom"),
        )
    };

    let fabric = page("fabric", "fabric");
    assert!(
        count(&fabric, "fabric-node") >= 6,
        "4 leaves and 2 spines drawn"
    );
    assert!(
        count(&fabric, "fabric-port") >= 2 * 8 + 16,
        "leaf-spine links both ways and the ports to hosts, colored by utilization"
    );
    assert!(
        fabric.contains("utilization 0.") || fabric.contains("utilization 1"),
        "utilization figures in the ports' titles"
    );
    let flows = page("flows", "flows");
    assert!(count(&flows, "flow-row") >= 20, "flows listed");
    assert!(!flows.contains("no flows yet"));
    let events = page("events", "events");
    assert!(count(&events, "event-row") >= 1);
    // Click from an event to its flow: follow the event's flow link.
    let link = events
        .split("data-test=\"event-flow-link\" href=\"#/")
        .nth(1)
        .expect("an event with a flow link");
    let target = link.split('"').next().unwrap().to_string();
    assert!(target.starts_with("flow/"), "{target}");
    let detail = page("flow", &target);
    // Behind the charts: the store's per-interval series of the flow (the demo flushes each second).
    let api_detail = Command::new("curl")
        .args([
            "-sf",
            &format!("{base}/api/flows/{}", target.trim_start_matches("flow/")),
        ])
        .output()
        .unwrap();
    let api_detail: serde_json::Value = serde_json::from_slice(&api_detail.stdout).unwrap();
    let intervals = api_detail["intervals"]
        .as_array()
        .expect("intervals from the store");
    assert!(
        !intervals.is_empty() && intervals.iter().all(|i| i["samples"].as_u64() > Some(0)),
        "{intervals:?}"
    );
    assert!(count(&detail, "flow-detail") == 1, "the flow's page");
    assert!(
        detail.matches("class=\"hop\"").count() >= 2,
        "its path hop by hop"
    );
    assert!(
        detail.contains("uplot"),
        "latency and occupancy charts drawn"
    );
    // From the flow to all its events: the event list filtered by flow.
    let own = detail
        .split("data-test=\"flow-events-link\" href=\"#/")
        .nth(1)
        .expect("a link to the flow's events");
    let own = own.split('"').next().unwrap().replace("&amp;", "&");
    assert!(own.starts_with("events?flow="), "{own}");
    let filtered = page("flow-events", &own);
    assert!(count(&filtered, "event-row") >= 1, "the flow's events");
    assert_eq!(
        count(&filtered, "event-flow-link"),
        filtered.matches(&format!("href=\"#/{target}\"")).count(),
        "only events of that flow"
    );
    let queues = page("queues", "queues");
    assert!(count(&queues, "heatmap") == 1);
    assert!(queues.matches("/q0</div>").count() >= 10, "queues labelled");

    let _ = Command::new("kill")
        .args(["-INT", &demo.id().to_string()])
        .status();
    let _ = demo.wait();
}
