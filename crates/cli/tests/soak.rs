//! Soak: a running collector fed legitimate reports and hostile datagrams side by side while the
//! API is read back to back. Asserts what an operator relies on under attack: resident memory
//! stays bounded, the API keeps answering quickly, and every datagram sent is accounted for —
//! received (and then accepted or rejected for a counted reason) or dropped by the kernel.
//!
//! `INTSCOPE_SOAK_SECS` sets the duration (default 45 s, what CI runs; set e.g. 3600 for an hour).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Rng, bin, startup_line, tempdir, wait_until_accounted};
use intscope_core::loadgen::{Generator, LoadConfig};

struct Collector {
    child: Child,
    http: SocketAddr,
    listen: SocketAddr,
}

/// A failed assertion must not leave the collector running.
impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Collector {
    fn start(config: &std::path::Path, data: &std::path::Path) -> Collector {
        let mut child = bin()
            .arg("collect")
            .arg("--config")
            .arg(config)
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--int-udp-port", "17768"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("intscope collect starts");
        let v = startup_line(&mut child);
        Collector {
            http: v["http"].as_str().unwrap().parse().unwrap(),
            listen: v["listen"][0].as_str().unwrap().parse().unwrap(),
            child,
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the collector is alive");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    fn stop(mut self) {
        std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "clean exit on SIGTERM after the soak");
    }
}

/// One HTTP/1.1 GET on a fresh connection; the status code and the body.
fn get(http: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&http, Duration::from_secs(10)).expect("API connects");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("API answers");
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (status, raw[head_end + 4..].to_vec())
}

fn stats(http: SocketAddr) -> serde_json::Value {
    let (status, body) = get(http, "/api/stats");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).expect("stats are JSON")
}

/// Sends until `stop`, pacing to `per_sec` datagrams a second, and counts what it sent.
fn paced(per_sec: u64, stop: &AtomicBool, sent: &AtomicU64, mut next: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if next() {
            n += 1;
            sent.fetch_add(1, Ordering::Relaxed);
        }
        let due = Duration::from_secs_f64(n as f64 / per_sec as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// The hostile mix, in equal shares: random bytes of any length (zero included), Report v2.0
/// groups from random node IDs with random sequence numbers around real individual reports
/// (state growth and loss inflation), and real reports cut short anywhere.
fn hostile(kind: u64, rng: &mut Rng, template: &[u8], out: &mut Vec<u8>) {
    out.clear();
    match kind % 3 {
        0 => {
            out.resize((rng.next() % 1500) as usize, 0);
            rng.fill(out);
        }
        1 => {
            out.extend_from_slice(template);
            // Group header: Ver (4) | HW ID (6) | Sequence Number (22), then the Node ID.
            let word = (2u32 << 28) | (rng.next() as u32 & 0x0fff_ffff);
            out[..4].copy_from_slice(&word.to_be_bytes());
            out[4..8].copy_from_slice(&(rng.next() as u32).to_be_bytes());
        }
        _ => {
            out.extend_from_slice(template);
            out.truncate((rng.next() as usize) % template.len());
        }
    }
}

#[test]
fn soak_with_hostile_traffic_while_the_api_is_read() {
    let secs: u64 = std::env::var("INTSCOPE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    let tmp = tempdir("soak");
    let dir = tmp.path();
    let config = dir.join("collect.toml");
    std::fs::write(&config, SOAK_CONFIG).unwrap();
    let c = Collector::start(&config, &dir.join("data"));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));

    let legit = {
        let (stop, sent, to) = (Arc::clone(&stop), Arc::clone(&sent), c.listen);
        std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut generator = Generator::new(LoadConfig {
                drop_every: 5000,
                burst_every: 20_000,
                ..LoadConfig::coalesced_v2(2000)
            });
            let mut buf = Vec::new();
            paced(4000, &stop, &sent, || {
                generator.next_datagram(&mut buf);
                sock.send_to(&buf, to).is_ok()
            });
        })
    };
    let attack = {
        let (stop, sent, to) = (Arc::clone(&stop), Arc::clone(&sent), c.listen);
        std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut template = Vec::new();
            Generator::new(LoadConfig::coalesced_v2(10)).next_datagram(&mut template);
            let (mut rng, mut buf, mut k) = (Rng(0x5eed_1234_abcd_0001), Vec::new(), 0u64);
            paced(4000, &stop, &sent, || {
                k += 1;
                hostile(k, &mut rng, &template, &mut buf);
                sock.send_to(&buf, to).is_ok()
            });
        })
    };

    // The API read back to back, one connection per request, as dashboards and scripts do.
    const PATHS: &[&str] = &[
        "/api/stats",
        "/api/flows?sort=p99",
        "/api/flows?q=10.0",
        "/api/nodes",
        "/api/queues",
        "/api/links",
        "/api/events",
        "/metrics",
        "/api/history/flows",
        "/api/history/events",
    ];
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut latencies, mut rss, mut i) = (Vec::new(), Vec::new(), 0usize);
    let mut last_rss_at = Instant::now();
    while Instant::now() < deadline {
        let path = PATHS[i % PATHS.len()];
        i += 1;
        let t = Instant::now();
        let (status, body) = get(c.http, path);
        latencies.push(t.elapsed());
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        if last_rss_at.elapsed() >= Duration::from_secs(1) {
            rss.push(c.rss_kib());
            last_rss_at = Instant::now();
        }
    }
    // A request for more than any page holds is refused, not run.
    let (status, _) = get(c.http, "/api/history/flows?limit=4294967295");
    assert_eq!(status, 400, "an unbounded history query is refused");

    stop.store(true, Ordering::Relaxed);
    legit.join().unwrap();
    attack.join().unwrap();
    let sent = sent.load(Ordering::Relaxed);

    // Every datagram sent is received or counted by the kernel, and every received one has an
    // outcome.
    let s = wait_until_accounted(
        sent,
        Duration::from_secs(20),
        Duration::from_millis(100),
        || stats(c.http),
    );
    let ingest = &s["ingest"];
    let received = ingest["datagrams_received"].as_u64().unwrap();
    // `malformed` is the sum of the malformed reasons, kept for older dashboards.
    let outcomes: u64 = ingest["discarded"]
        .as_object()
        .expect("discards by reason")
        .iter()
        .filter(|(reason, _)| *reason != "malformed")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum::<u64>()
        + ingest["datagrams_accepted"].as_u64().unwrap();
    assert_eq!(
        outcomes, received,
        "every received datagram has one outcome: {s}"
    );
    assert!(
        ingest["datagrams_accepted"].as_u64().unwrap() > received / 3,
        "the legitimate half is accepted: {s}"
    );

    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let max_rss = *rss.iter().max().unwrap();
    let settled = rss[rss.len() / 3..].iter().max().unwrap();
    let late = rss[rss.len() * 2 / 3..].iter().max().unwrap();
    eprintln!(
        "soak {secs} s: sent {sent} datagrams, {} API requests, API p99 {p99:?}, \
         RSS max {max_rss} KiB (two thirds in {settled} KiB, last third {late} KiB)",
        latencies.len()
    );
    assert!(
        p99 < Duration::from_millis(500),
        "API p99 {p99:?} over {} requests",
        latencies.len()
    );
    assert!(max_rss < 512 * 1024, "RSS {max_rss} KiB");
    // Caps hold: once they are reached, hostile traffic no longer grows memory.
    assert!(
        *late <= settled + settled / 5,
        "RSS still growing: {rss:?} KiB"
    );
    c.stop();
}

/// Caps far below the defaults, so the hostile traffic reaches them within the soak.
const SOAK_CONFIG: &str = r#"
[limits]
nodes = 512
sources = 1024
ports = 4096
queues = 4096
links = 4096
flows = 20000
"#;
