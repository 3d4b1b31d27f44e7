//! Hostile input against the collector's bounds: made-up node IDs, ports and flows stay within
//! the configured limits (the least recently seen go, counted), random sequence numbers are
//! resets rather than loss, random bytes are discarded by reason, and every datagram — empty
//! ones too — is counted once. Scaled down from the million with small limits.

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use intscope_collector::api::{Api, render_metrics};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_collector::ingest::Discard;
use intscope_collector::ingest::recv::spawn_receivers;
use intscope_core::{Limits, RecordBatch};

/// Deterministic random numbers (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn config(limits: Limits) -> CollectorConfig {
    CollectorConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        int_udp_ports: vec![INT_PORT],
        data: None,
        threads: 1,
        limits,
        ..CollectorConfig::default()
    }
}

fn g(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Datagrams accepted plus those discarded, by any reason.
fn accounted(c: &Collector) -> u64 {
    g(&c.stats.accepted)
        + Discard::ALL
            .iter()
            .map(|&d| g(c.stats.discarded(d)))
            .sum::<u64>()
}

const SRC: &str = "192.0.2.1";

/// A flood of reports from made-up nodes over made-up ports and queues, with a real path's
/// reports among them: every table stays at its limit, the evictions are counted, the real
/// nodes (seen often) stay, and `/metrics` stays as small as the limits make it.
#[test]
fn random_node_ids_and_ports_stay_within_the_limits() {
    let limits = Limits {
        nodes: 256,
        sources: 128,
        ports: 512,
        queues: 256,
        links: 256,
        ..Limits::default()
    };
    let c = Collector::open(config(limits)).unwrap();
    let mut batch = RecordBatch::default();
    let src: IpAddr = SRC.parse().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let real = Rep::new(1, &[H(1, 3, 800, 10), H(101, 2, 900, 10)], H(2, 5, 800, 10));
    let n = 60_000u64;
    for i in 0..n {
        let t = i * 1_000;
        if i % 16 == 0 {
            let mut r = real.clone();
            r.seq = (i / 16) as u32;
            c.ingest(&r.datagram(), src, t, &mut batch);
            continue;
        }
        // Reporters with made-up IDs; hops from a few made-up nodes, over made-up ports.
        let mut hop = |nodes: u64| {
            let v = rng.next();
            let node = 0x10_0000 + (v % nodes) as u32 % 0xfff0_0000;
            H(node, (v >> 32) as u16, 100, (v >> 48) as u32 & 0xff)
        };
        let path = [hop(200), hop(200), hop(200)];
        let mut r = Rep::new(i as u16, &path, hop(1 << 40));
        r.seq = rng.next() as u32;
        c.ingest(&r.datagram(), src, t, &mut batch);
    }
    assert_eq!(g(&c.stats.received), n);
    assert_eq!(g(&c.stats.accepted), n, "made-up IDs are valid reports");
    let metrics = render_metrics(&Api::new(Arc::clone(&c), ApiConfig::default()));
    let s = c.state.read();
    let held: std::collections::HashMap<_, _> = s.held().into_iter().collect();
    assert!(held["node"] <= 256, "{held:?}");
    assert!(held["source"] <= 128, "{held:?}");
    assert!(held["port"] <= 512, "{held:?}");
    assert!(held["queue"] <= 512, "{held:?}");
    assert!(held["link"] <= 512, "{held:?}");
    assert_eq!(s.nodes().count(), held["node"]);
    assert_eq!(
        s.nodes().map(|(_, n)| n.ports.len()).sum::<usize>(),
        held["port"],
        "the counts kept through evictions are the tables' sizes"
    );
    assert_eq!(s.queues().count(), held["queue"]);
    assert_eq!(s.links().count(), held["link"]);
    assert_eq!(s.sources().count(), held["source"]);
    let evicted = s.evicted();
    // A made-up reporter a datagram: far more than the limit, each counted when it went.
    assert!(evicted.nodes > 50_000, "{evicted:?}");
    assert!(evicted.sources > 50_000, "{evicted:?}");
    assert!(evicted.ports > 0 && evicted.queues > 0 && evicted.links > 0);
    for node in [1, 101, 2] {
        assert!(s.node(node).is_some(), "the real node {node} stays");
    }
    assert!(
        s.sources()
            .any(|((node, _), st)| node == 2 && st.groups_lost == 0),
        "the real source stays, with its sequence intact"
    );
    // Series: per source, queue (two gauges), port (two gauges), drop reason, and a fixed few.
    let series = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    assert!(series < 128 + 2 * 512 + 2 * 512 + 100, "{series} series");
    drop(s);
    assert!(
        metrics.contains("intscope_state_evicted_total{kind=\"node\"}"),
        "{metrics}"
    );
}

/// A million flows is the figure; a thousand-flow limit with twenty times as many makes
/// the same point in a test's time. The flows left are the newest, and the list of flows to
/// store (which nothing empties without a store) holds no evicted flow.
#[test]
fn random_flows_stay_within_the_flow_limit() {
    let limits = Limits {
        flows: 1000,
        ..Limits::default()
    };
    let c = Collector::open(config(limits)).unwrap();
    let mut batch = RecordBatch::default();
    let src: IpAddr = SRC.parse().unwrap();
    let n = 20_000u64;
    for i in 0..n {
        let r = Rep::new(i as u16, &[H(1, 3, 800, 10)], H(2, 5, 800, 10));
        c.ingest(&r.datagram(), src, i * 1_000, &mut batch);
    }
    let s = c.state.read();
    let flows = s.flow_count();
    assert!((875..=1000).contains(&flows), "{flows}");
    assert_eq!(s.evicted().flows, n - flows as u64);
    assert!(s.flows_to_store() <= flows);
    // The newest flow (ID n) is held, the oldest (ID 1) is not.
    assert!(s.flow_by_id(n).is_some());
    assert!(s.flow_by_id(1).is_none());
}

/// Random sequence numbers from one source (spoofed, or corrupted on the way): nothing
/// continues them, so they count as implausible, not as resets and not as loss.
#[test]
fn random_sequence_numbers_are_implausible_not_loss() {
    let c = Collector::open(config(Limits::default())).unwrap();
    let mut batch = RecordBatch::default();
    let src: IpAddr = SRC.parse().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut r = Rep::new(1, &[H(1, 3, 800, 10)], H(2, 5, 800, 10));
    let n = 20_000u64;
    for i in 0..n {
        r.seq = rng.next() as u32 & 0x3f_ffff;
        c.ingest(&r.datagram(), src, i * 1_000, &mut batch);
    }
    let s = c.state.read();
    let (lost, implausible) = (s.reports_lost(), s.sequence_implausible());
    assert!(implausible > n * 99 / 100, "{implausible}");
    // Only two random numbers within 64 of each other confirm anything: 64 / 2²² per pair.
    // Before: an eighth of a report per report (the half-space rule: a million per report).
    assert!(lost < n / 200, "{lost}");
    let st = s.sources().find(|(k, _)| *k == (2, 0)).unwrap().1;
    assert_eq!(st.implausible, implausible);
    assert_eq!(st.groups_received, n);
}

/// Random bytes, and random bytes behind each known version nibble: every datagram is accepted
/// or discarded for one reason, each reason the validation has shows up, and nearly nothing is
/// accepted. A source outside the allowlist is discarded as such before its bytes are read.
#[test]
fn random_bytes_are_discarded_by_reason() {
    let cfg = CollectorConfig {
        allow: vec!["192.0.2.0/24".parse().unwrap()],
        ..config(Limits::default())
    };
    let c = Collector::open(cfg).unwrap();
    let mut batch = RecordBatch::default();
    let src: IpAddr = SRC.parse().unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let n = 40_000u64;
    for i in 0..n {
        let len = 1 + (rng.next() % 600) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Half of them get a version nibble the collector knows, to reach the deeper checks.
        if i % 2 == 0 {
            bytes[0] = (bytes[0] & 0x0f) | (((i / 2) % 3) as u8) << 4;
        }
        c.ingest(&bytes, src, i, &mut batch);
    }
    let got = |d: Discard| g(c.stats.discarded(d));
    assert_eq!(accounted(&c), n);
    let accepted = g(&c.stats.accepted);
    // What passes has every field the formats define in range: an Inner Only report of
    // domain-specific data (which the spec leaves undefined), or a v1.0 report whose bytes after
    // the header happen to start like an IPv6 header (one nibble to check).
    assert!(
        accepted * 250 < n,
        "{accepted} of {n} random datagrams accepted"
    );
    for reason in [
        Discard::UnknownVersion,
        Discard::Truncated,
        Discard::BadLength,
        Discard::UnknownType,
        Discard::BadInner,
    ] {
        assert!(got(reason) > 100, "{}: {}", reason.label(), got(reason));
    }
    assert_eq!(
        g(&c.stats.malformed),
        Discard::ALL
            .iter()
            .filter(|d| d.is_malformed())
            .map(|&d| got(d))
            .sum::<u64>()
    );
    // A valid report from outside the allowlist, and an empty datagram.
    let good = Rep::new(1, &[H(1, 3, 800, 10)], H(2, 5, 800, 10)).datagram();
    c.ingest(&good, "198.51.100.7".parse().unwrap(), n, &mut batch);
    assert_eq!(got(Discard::NotAllowed), 1);
    c.ingest(&[], src, n + 1, &mut batch);
    assert_eq!(got(Discard::ZeroLength), 1);
    c.ingest(&good, src, n + 2, &mut batch);
    assert_eq!(g(&c.stats.accepted), accepted + 1, "a valid report passes");
    assert_eq!(accounted(&c), n + 3);
    assert_eq!(g(&c.stats.received), n + 3);
}

/// The spec's own examples and every report the test builder makes pass the validation; each
/// rule fails the report it is about.
#[test]
fn validation_rejects_what_the_spec_reserves() {
    let c = Collector::open(config(Limits::default())).unwrap();
    let mut batch = RecordBatch::default();
    let src: IpAddr = SRC.parse().unwrap();
    let good = Rep::new(1, &[H(1, 3, 800, 10)], H(2, 5, 800, 10)).datagram();
    let cases: Vec<(Vec<u8>, Option<Discard>)> = vec![
        (good.clone(), None),
        // RepType 2 (IOAM, contents undefined) and 3 (reserved).
        (
            with(&good, 8, |b| (b & 0x0f) | 0x20),
            Some(Discard::UnknownType),
        ),
        (
            with(&good, 8, |b| (b & 0x0f) | 0x30),
            Some(Discard::UnknownType),
        ),
        // InType 6 (reserved).
        (
            with(&good, 8, |b| (b & 0xf0) | 6),
            Some(Discard::UnknownType),
        ),
        // MD Length one word short of what RepMdBits describe; one word too long.
        (with(&good, 10, |b| b - 1), Some(Discard::BadLength)),
        (with(&good, 10, |b| b + 1), Some(Discard::BadLength)),
        // The packet's EtherType is not IP, ARP or MPLS.
        (with(&good, 44, |_| 0x12), Some(Discard::BadInner)),
        // A group header and no report.
        (good[..8].to_vec(), Some(Discard::Truncated)),
        // Cut inside the first header.
        (good[..3].to_vec(), Some(Discard::Truncated)),
    ];
    for (i, (bytes, expected)) in cases.iter().enumerate() {
        let before: Vec<u64> = Discard::ALL
            .iter()
            .map(|&d| g(c.stats.discarded(d)))
            .collect();
        let accepted = g(&c.stats.accepted);
        c.ingest(bytes, src, i as u64, &mut batch);
        match expected {
            None => assert_eq!(g(&c.stats.accepted), accepted + 1, "case {i}"),
            Some(d) => {
                let at = Discard::ALL.iter().position(|x| x == d).unwrap();
                assert_eq!(
                    g(c.stats.discarded(*d)),
                    before[at] + 1,
                    "case {i}: {:?}",
                    c.stats.last_error.lock().unwrap()
                );
            }
        }
    }
}

fn with(bytes: &[u8], at: usize, f: impl Fn(u8) -> u8) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] = f(b[at]);
    b
}

/// Over a real socket: an empty datagram is received and counted once, as zero length.
#[test]
fn a_zero_length_datagram_is_counted() {
    let c = Collector::open(config(Limits::default())).unwrap();
    let (bound, handles) = spawn_receivers(&c).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&[], bound[0]).unwrap();
    let good = Rep::new(1, &[H(1, 3, 800, 10)], H(2, 5, 800, 10)).datagram();
    tx.send_to(&good, bound[0]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while g(&c.stats.received) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(g(&c.stats.received), 2);
    assert_eq!(g(c.stats.discarded(Discard::ZeroLength)), 1);
    assert_eq!(g(&c.stats.accepted), 1);
    c.stop();
    for h in handles {
        h.join().unwrap();
    }
}

/// A second collector on a port the first holds fails with a clear error, unless both ask to
/// share the port; the first keeps receiving.
#[test]
fn a_port_in_use_is_an_error_without_reuse_port() {
    let lone = Collector::open(config(Limits::default())).unwrap();
    let (bound, lone_handles) = spawn_receivers(&lone).unwrap();
    // The holder did not ask to share: even a collector that asks is refused.
    let asks = Collector::open(CollectorConfig {
        listen: vec![bound[0]],
        reuse_port: true,
        ..config(Limits::default())
    })
    .unwrap();
    let err = spawn_receivers(&asks).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains("does not share"), "{err}");
    lone.stop();
    for h in lone_handles {
        h.join().unwrap();
    }
    let first = Collector::open(CollectorConfig {
        reuse_port: true,
        ..config(Limits::default())
    })
    .unwrap();
    let (bound, handles) = spawn_receivers(&first).unwrap();
    let taken: SocketAddr = bound[0];
    let second = Collector::open(CollectorConfig {
        listen: vec![taken],
        ..config(Limits::default())
    })
    .unwrap();
    let err = spawn_receivers(&second).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains("--reuse-port"), "{err}");
    let shared = Collector::open(CollectorConfig {
        listen: vec![taken],
        reuse_port: true,
        ..config(Limits::default())
    })
    .unwrap();
    let (again, more) = spawn_receivers(&shared).unwrap();
    assert_eq!(again[0], taken);
    for c in [&first, &shared] {
        c.stop();
    }
    for h in handles.into_iter().chain(more) {
        h.join().unwrap();
    }
    let _ = Arc::clone(&first);
}
