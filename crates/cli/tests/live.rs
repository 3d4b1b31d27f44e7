//! `intscope node` on live Linux interfaces (a build with `--features live`): two veth pairs,
//! frames injected into one, the node between them as an INT source, INT checked on the frames
//! that come out of the other. Needs root (CAP_NET_ADMIN for veth, CAP_NET_RAW for capture);
//! without it the test says so and returns.
#![cfg(feature = "live")]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Temp, bin, repo};
use etherparse::PacketBuilder;
use intscope_wire::locate::{DetectConfig, Packet, Start};

struct Veth(String);

impl Veth {
    /// A veth pair `name`0 / `name`1, up, without IPv6 (no neighbour discovery noise).
    fn new(name: &str) -> Option<Veth> {
        let ok = Command::new("ip")
            .args([
                "link",
                "add",
                &format!("{name}0"),
                "type",
                "veth",
                "peer",
                "name",
            ])
            .arg(format!("{name}1"))
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
        for end in ["0", "1"] {
            let dev = format!("{name}{end}");
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
            let _ = Command::new("ip")
                .args(["link", "set", &dev, "up"])
                .status();
        }
        Some(Veth(name.to_string()))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &format!("{}0", self.0)])
            .status();
    }
}

/// Two veth pairs named after `prefix` and the test process (tests run in parallel), with
/// their ends' names `[a0, a1, b0, b1]`; `None`, said on stderr, without root.
fn two_pairs(prefix: &str) -> Option<((Veth, Veth), [String; 4])> {
    let tag = std::process::id() % 10_000;
    let pairs = Veth::new(&format!("{prefix}a{tag}-")).zip(Veth::new(&format!("{prefix}b{tag}-")));
    let Some((a, b)) = pairs else {
        eprintln!("cannot create veth pairs (not root?): live test skipped");
        return None;
    };
    let ends = [&a.0, &a.0, &b.0, &b.0]
        .into_iter()
        .zip(["0", "1", "0", "1"])
        .map(|(p, end)| format!("{p}{end}"))
        .collect::<Vec<_>>()
        .try_into()
        .ok()?;
    Some(((a, b), ends))
}

#[test]
fn a_source_node_between_two_interfaces() {
    let Some((_pairs, [a0, a1, b0, b1])) = two_pairs("is") else {
        return;
    };
    let mut watch = open_dev(&b1);
    let config = std::fs::read_to_string(repo("examples/node-source.toml")).unwrap();
    let summary = run_node(&config, (&a1, &b0, &a0), &udp_frames(20, 4), &[], || {});
    let with_int = frames_with_int(&mut watch, 20, |parsed, block| {
        assert_eq!(block.stack(None).0.count(), 1, "the source's own hop");
        assert_eq!(
            parsed.flow.unwrap().dst_port,
            5001,
            "the original port in the shim"
        );
        assert!(!parsed.warnings.has(intscope_wire::Warning::BadL4Checksum));
    });
    assert_eq!(with_int, 20, "every injected frame left with INT");
    assert_eq!(
        (summary["frames"].as_u64(), summary["inserted"].as_u64()),
        (Some(20), Some(20))
    );
}

/// Reads frames from `watch` until `n` carrying INT (UDP port 17768, checksums verified) were
/// seen or 10 s passed, calling `each` with every one; returns how many.
fn frames_with_int(
    watch: &mut pcap::Capture<pcap::Active>,
    n: usize,
    mut each: impl FnMut(&Packet<'_>, &intscope_wire::int::IntBlock<'_>),
) -> usize {
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        verify_checksums: true,
        ..DetectConfig::default()
    };
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen < n && Instant::now() < deadline {
        let Ok(p) = watch.next_packet() else { continue };
        let Ok(parsed) = Packet::parse(p.data, Start::Ethernet, &cfg) else {
            continue;
        };
        if let Some((_, block)) = &parsed.int {
            each(&parsed, block);
            seen += 1;
        }
    }
    seen
}

#[test]
fn probes_leave_on_time_without_any_traffic() {
    let Some((_pairs, [_, a1, b0, b1])) = two_pairs("ip") else {
        return;
    };
    let config = Temp::path("probes.toml");
    let source = std::fs::read_to_string(repo("examples/node-source.toml")).unwrap();
    std::fs::write(
        &config.0,
        format!(
            "{source}\n[[probes]]\nsrc = \"10.0.1.9\"\ndst = \"10.0.3.9\"\ninterval_ns = 100000000\n"
        ),
    )
    .unwrap();
    let mut watch = pcap::Capture::from_device(b1.as_str())
        .unwrap()
        .immediate_mode(true)
        .timeout(100)
        .open()
        .unwrap();
    let node = bin()
        .args(["node", "--config"])
        .arg(&config.0)
        .args(["--interface", &a1, "--out-interface", &b0])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Nothing is injected: the probes (every 100 ms) must come from the clock alone.
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        ..DetectConfig::default()
    };
    let mut probes = 0;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let Ok(p) = watch.next_packet() else { continue };
        let Ok(parsed) = Packet::parse(p.data, Start::Ethernet, &cfg) else {
            continue;
        };
        if parsed.int.is_some() && parsed.flow.is_some_and(|f| f.dst_port == 50001) {
            probes += 1;
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status();
    // An idle interface must not keep the node from hearing the signal.
    let mut node = node;
    let stopped_by = Instant::now() + Duration::from_secs(5);
    while node.try_wait().unwrap().is_none() {
        if Instant::now() > stopped_by {
            let _ = node.kill();
            panic!("the node did not stop on SIGTERM ({probes} probes seen)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = node.wait_with_output().unwrap();
    assert!(out.status.success());
    // Three seconds at 10 a second, less the node's start-up.
    assert!(probes >= 15, "{probes} probes on the wire");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["frames"].as_u64(), Some(0));
    assert!(summary["probes"].as_u64() >= Some(probes));
}

/// Frames built for injection: UDP from 10.0.1.1 to 10.0.3.1 (the example source's watchlist),
/// `payload` bytes each.
fn udp_frames(n: u16, payload: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut f = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
                .udp(41000 + i, 5001)
                .write(&mut f, &vec![0x5a; payload])
                .unwrap();
            f
        })
        .collect()
}

fn open_dev(dev: &str) -> pcap::Capture<pcap::Active> {
    pcap::Capture::from_device(dev)
        .unwrap()
        .immediate_mode(true)
        .timeout(100)
        .open()
        .unwrap()
}

/// `intscope node` as a source from `input` to `output` with `config` (TOML text), for `count`
/// frames, with `extra` flags; the frames are injected at `inject` once it runs (and `meanwhile`
/// has run).
fn run_node(
    config: &str,
    (input, output, inject): (&str, &str, &str),
    frames: &[Vec<u8>],
    extra: &[&str],
    meanwhile: impl FnOnce(),
) -> serde_json::Value {
    let path = Temp::path(&format!("{input}.toml"));
    std::fs::write(&path.0, config).unwrap();
    let node = bin()
        .args(["node", "--config"])
        .arg(&path.0)
        .args(["--interface", input, "--out-interface", output])
        .args(["--count", &frames.len().to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    meanwhile();
    let mut tx = open_dev(inject);
    for f in frames {
        tx.sendpacket(f.as_slice()).unwrap();
    }
    let mut node = node;
    let status = common::exit_within(&mut node, Duration::from_secs(20)).expect("the node ended");
    let out = node.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn source_config(instructions: &str) -> String {
    std::fs::read_to_string(repo("examples/node-source.toml"))
        .unwrap()
        .replace(
            "instructions = 0x9000",
            &format!("instructions = {instructions}"),
        )
}

/// A live node's hop metadata is measured: the kernel's receive time, the time of sending and
/// their difference, not the configuration's model; what it cannot see (its queue) is the
/// spec's invalid value.
#[test]
fn live_hop_metadata_is_measured_not_configured() {
    let Some((_pairs, [a0, a1, b0, b1])) = two_pairs("im") else {
        return;
    };
    let mut watch = open_dev(&b1);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // Node ID, hop latency, queue, ingress and egress timestamps.
    let summary = run_node(
        &source_config("0xbc00"),
        (&a1, &b0, &a0),
        &udp_frames(10, 64),
        &[],
        || {},
    );
    assert_eq!(summary["inserted"], 10, "{summary}");
    assert!(
        summary["capture_dropped"].is_u64() && summary["tx_errors"] == 0,
        "{summary}"
    );
    let seen = frames_with_int(&mut watch, 10, |_, block| {
        let hop = block.stack(None).0.next().unwrap().unwrap();
        let (i, e, lat) = (
            hop.ingress_ts().unwrap(),
            hop.egress_ts().unwrap(),
            hop.hop_latency().unwrap(),
        );
        assert!(
            i >= before && i < before + 30_000_000_000,
            "ingress {i}, test began {before}"
        );
        assert_eq!(e - i, u64::from(lat), "hop latency = egress - ingress");
        assert!(lat < 1_000_000_000, "{lat}");
        assert_eq!(hop.queue(), None, "no queue seen from userspace: all ones");
    });
    assert_eq!(seen, 10);
}

/// An output that refuses frames (down) and frames over its MTU are counted; the node goes on
/// and exits with its summary.
#[test]
fn refused_and_oversize_frames_are_counted_not_fatal() {
    let Some((_pairs, [a0, a1, b0, _])) = two_pairs("ir") else {
        return;
    };
    assert!(
        Command::new("ip")
            .args(["link", "set", &b0, "mtu", "1000"])
            .status()
            .unwrap()
            .success()
    );
    let mut frames = udp_frames(4, 64);
    frames.extend(udp_frames(3, 1200));
    let summary = run_node(
        &source_config("0x9000"),
        (&a1, &b0, &a0),
        &frames,
        &[],
        || {},
    );
    assert_eq!(summary["frames"], 4, "{summary}");
    assert_eq!(summary["oversize"], 3, "{summary}");
    assert_eq!(summary["forwarded"], 4);
    assert_eq!(summary["tx_errors"], 0);
    // The output goes down under the running node.
    let down = || {
        let ok = Command::new("ip")
            .args(["link", "set", &b0, "down"])
            .status();
        assert!(ok.unwrap().success());
    };
    let summary = run_node(
        &source_config("0x9000"),
        (&a1, &b0, &a0),
        &udp_frames(5, 64),
        &[],
        down,
    );
    assert_eq!(
        summary["tx_errors"], 5,
        "a down output refuses every frame: {summary}"
    );
    assert_eq!(summary["frames"], 5);
}

/// Frames whose sender left the UDP checksum to its NIC (the pseudo-header's sum in the field)
/// are counted, or completed with --finish-checksums so the receiver takes them.
#[test]
fn unfinished_checksums_are_counted_or_finished() {
    let Some((_pairs, [a0, a1, b0, b1])) = two_pairs("ic") else {
        return;
    };
    let partial: Vec<Vec<u8>> = udp_frames(6, 32)
        .into_iter()
        .map(|mut f| {
            f[14 + 20 + 6] ^= 0x5a;
            f
        })
        .collect();
    let summary = run_node(
        &source_config("0x9000"),
        (&a1, &b0, &a0),
        &partial,
        &[],
        || {},
    );
    assert_eq!(summary["bad_checksums"], 6, "{summary}");
    let mut watch = open_dev(&b1);
    let summary = run_node(
        &source_config("0x9000"),
        (&a1, &b0, &a0),
        &partial,
        &["--finish-checksums"],
        || {},
    );
    assert_eq!(summary["checksums_finished"], 6, "{summary}");
    assert_eq!(summary["bad_checksums"], 0);
    // frames_with_int reads with checksums verified.
    let good = frames_with_int(&mut watch, 6, |parsed, _| {
        assert!(
            !parsed.warnings.has(intscope_wire::Warning::BadL4Checksum),
            "a finished checksum verifies after INT is inserted"
        );
    });
    assert_eq!(good, 6);
}
