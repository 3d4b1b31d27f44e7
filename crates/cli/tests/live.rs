//! `intscope node` on live Linux interfaces (a build with `--features live`): two veth pairs,
//! frames injected into one, the node between them as an INT source, INT checked on the frames
//! that come out of the other. Needs root (CAP_NET_ADMIN for veth, CAP_NET_RAW for capture);
//! without it the test says so and returns.
#![cfg(feature = "live")]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, repo};
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

/// Two veth pairs named after `prefix` and the test process (tests run in parallel); `None`,
/// said on stderr, without root.
fn two_pairs(prefix: &str) -> Option<(Veth, Veth)> {
    let tag = std::process::id() % 10_000;
    let pairs = Veth::new(&format!("{prefix}a{tag}-")).zip(Veth::new(&format!("{prefix}b{tag}-")));
    if pairs.is_none() {
        eprintln!("cannot create veth pairs (not root?): live test skipped");
    }
    pairs
}

#[test]
fn a_source_node_between_two_interfaces() {
    let Some((a, b)) = two_pairs("is") else {
        return;
    };
    let (a0, a1, b0, b1) = (
        format!("{}0", a.0),
        format!("{}1", a.0),
        format!("{}0", b.0),
        format!("{}1", b.0),
    );
    let open = |dev: &str| {
        pcap::Capture::from_device(dev)
            .unwrap()
            .immediate_mode(true)
            .timeout(100)
            .open()
            .unwrap()
    };
    let mut watch = open(&b1);
    let node = bin()
        .args(["node", "--config", &repo("examples/node-source.toml")])
        .args(["--interface", &a1, "--out-interface", &b0, "--count", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut inject = open(&a0);
    for i in 0..20u16 {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
            .udp(40000 + i, 5001)
            .write(&mut f, b"live")
            .unwrap();
        inject.sendpacket(f).unwrap();
    }
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        verify_checksums: true,
        ..DetectConfig::default()
    };
    let mut with_int = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while with_int < 20 && Instant::now() < deadline {
        let Ok(p) = watch.next_packet() else { continue };
        let Ok(parsed) = Packet::parse(p.data, Start::Ethernet, &cfg) else {
            continue;
        };
        if let Some((_, block)) = parsed.int {
            assert_eq!(block.stack(None).0.count(), 1, "the source's own hop");
            assert_eq!(
                parsed.flow.unwrap().dst_port,
                5001,
                "the original port in the shim"
            );
            with_int += 1;
        }
    }
    let out = node.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(with_int, 20, "every injected frame left with INT");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (summary["frames"].as_u64(), summary["inserted"].as_u64()),
        (Some(20), Some(20))
    );
}

#[test]
fn probes_leave_on_time_without_any_traffic() {
    let Some((a, b)) = two_pairs("ip") else {
        return;
    };
    let tag = std::process::id() % 10_000;
    let (a1, b0, b1) = (
        format!("{}1", a.0),
        format!("{}0", b.0),
        format!("{}1", b.0),
    );
    let config = std::env::temp_dir().join(format!("intscope-live-probes-{tag}.toml"));
    let source = std::fs::read_to_string(repo("examples/node-source.toml")).unwrap();
    std::fs::write(
        &config,
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
        .arg(&config)
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
    let _ = std::fs::remove_file(&config);
    assert!(out.status.success());
    // Three seconds at 10 a second, less the node's start-up.
    assert!(probes >= 15, "{probes} probes on the wire");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["frames"].as_u64(), Some(0));
    assert!(summary["probes"].as_u64() >= Some(probes));
}
