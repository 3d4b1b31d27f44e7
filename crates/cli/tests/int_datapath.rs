//! The eBPF INT-MD / INT-MX data path (`intscope agent --int-port NAME=ROLE`) on a real Linux
//! data path: h1 — r1 — r2 — r3 — h2 in network namespaces, kernel routing, default veth
//! offloads (TSO, GSO, checksum offload on), the source at r1's egress towards r2, transit at
//! r2's towards r3, the sink at r3's ingress from r2, `intscope collect` in a management namespace
//! bridged to the routers. The INT domain's links (r1 — r2 — r3) have an MTU of 1600 so that
//! full-size packets have room for INT (INT v2.1 §"MTU Settings").
//!
//! Checked, in INT-MD and INT-MX, over IPv4 and IPv6: every byte of a TCP stream and every UDP
//! datagram h2 receives is what h1 sent (compared byte for byte); the routers' counters say INT
//! was inserted, pushed and removed and that nothing was malformed or dropped; the collector
//! joins the path [1, 2, 3]; the sink's reports carry per-hop latencies from the kernel that
//! are positive and not constant; a `tbf` rate limit at r2's egress raises latency (over 20
//! ms; as its own incident or as the symptom of the port's congestion incident) at r2's port.
//!
//! Needs root, iproute2, tcpdump, curl and an intscope built with its BPF programs; without
//! them the test says what is missing and returns, unless `INTSCOPE_AGENT_REQUIRE_BPF` is set
//! (CI sets it), when it fails.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Rng, bin, exit_within, tempdir};

/// Software hosts jitter by tens of microseconds; the agent reports queue occupancy in bytes.
const COLLECTOR_TOML: &str = "[detect]\nlatency_min_excess_ns = 2000000\nlatency_confirm_ns = 20000000\n\
    congestion_start = 16384\ncongestion_end = 8192\n";

fn missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("root (network namespaces, BPF)".into());
    }
    common::missing_tool(&["ip", "tc", "tcpdump", "curl", "ethtool"])
}

fn skip(what: &str) -> bool {
    if std::env::var_os("INTSCOPE_AGENT_REQUIRE_BPF").is_some() {
        panic!("INTSCOPE_AGENT_REQUIRE_BPF is set and this test cannot run: {what}");
    }
    eprintln!("skipped: {what}");
    true
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const NODES: [&str; 6] = ["h1", "r1", "r2", "r3", "h2", "mg"];

/// Namespaces `<prefix><node>`; removed, with the processes started in them, on drop (a failed
/// assertion too). A killed earlier run's namespaces are removed at the start.
struct Lab {
    prefix: String,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl Lab {
    fn ns(&self, node: &str) -> String {
        format!("{}{node}", self.prefix)
    }

    fn exec(&self, node: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(node)]).args(args);
        c
    }

    fn run(&self, node: &str, args: &[&str]) -> String {
        let out = self.exec(node, args).output().unwrap();
        assert!(
            out.status.success(),
            "{node}: {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn sh(&self, node: &str, line: &str) -> String {
        self.run(node, &line.split_whitespace().collect::<Vec<_>>())
    }

    fn ifindex(&self, node: &str, dev: &str) -> u64 {
        self.run(node, &["cat", &format!("/sys/class/net/{dev}/ifindex")])
            .trim()
            .parse()
            .unwrap()
    }

    fn api(&self, path: &str) -> serde_json::Value {
        let text = self.run(
            "mg",
            &[
                "curl",
                "-sf",
                "--max-time",
                "10",
                &format!("http://127.0.0.1:8080{path}"),
            ],
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
    }

    fn up() -> Lab {
        // Leftovers of a killed run (their processes died with them or hold nothing); another
        // run's, whose process lives, are left alone.
        let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
        for line in String::from_utf8_lossy(&listed.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let Some(rest) = name.strip_prefix("imd") else {
                continue;
            };
            let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if pid.is_empty() || !std::path::Path::new("/proc").join(&pid).exists() {
                let _ = Command::new("ip").args(["netns", "del", name]).status();
            }
        }
        let prefix = format!("imd{}", std::process::id());
        let lab = Lab {
            dir: tempdir(&prefix),
            prefix,
            children: Vec::new(),
        };
        for n in NODES {
            sh(&["ip", "netns", "add", &lab.ns(n)]);
            sh(&["ip", "-n", &lab.ns(n), "link", "set", "lo", "up"]);
        }
        let link = |a: &str, da: &str, b: &str, db: &str| {
            sh(&[
                "ip",
                "link",
                "add",
                da,
                "netns",
                &lab.ns(a),
                "type",
                "veth",
                "peer",
                "name",
                db,
                "netns",
                &lab.ns(b),
            ]);
        };
        link("h1", "eth0", "r1", "h1");
        link("r1", "r2", "r2", "r1");
        link("r2", "r3", "r3", "r2");
        link("r3", "h2", "h2", "eth0");
        let mg = lab.ns("mg");
        sh(&["ip", "-n", &mg, "link", "add", "br0", "type", "bridge"]);
        sh(&[
            "ip",
            "-n",
            &mg,
            "addr",
            "add",
            "10.9.0.100/24",
            "dev",
            "br0",
        ]);
        sh(&["ip", "-n", &mg, "link", "set", "br0", "up"]);
        for (i, n) in ["r1", "r2", "r3"].iter().enumerate() {
            let leg = format!("m{n}");
            link(n, "mg", "mg", &leg);
            sh(&["ip", "-n", &mg, "link", "set", &leg, "master", "br0", "up"]);
            let ns = lab.ns(n);
            let a = format!("10.9.0.{}/24", i + 1);
            sh(&["ip", "-n", &ns, "addr", "add", &a, "dev", "mg"]);
            sh(&["ip", "-n", &ns, "link", "set", "mg", "up"]);
        }
        let addr = |n: &str, v4: &str, v6: &str, dev: &str| {
            let ns = lab.ns(n);
            sh(&["ip", "-n", &ns, "addr", "add", v4, "dev", dev]);
            sh(&["ip", "-n", &ns, "addr", "add", v6, "dev", dev, "nodad"]);
            sh(&["ip", "-n", &ns, "link", "set", dev, "up"]);
        };
        addr("h1", "10.2.1.1/24", "fd02:1::1/64", "eth0");
        addr("r1", "10.2.1.254/24", "fd02:1::fe/64", "h1");
        addr("r1", "10.2.2.1/30", "fd02:2::1/64", "r2");
        addr("r2", "10.2.2.2/30", "fd02:2::2/64", "r1");
        addr("r2", "10.2.3.1/30", "fd02:3::1/64", "r3");
        addr("r3", "10.2.3.2/30", "fd02:3::2/64", "r2");
        addr("r3", "10.2.4.254/24", "fd02:4::fe/64", "h2");
        addr("h2", "10.2.4.1/24", "fd02:4::1/64", "eth0");
        // The INT domain's links carry INT on full-size packets.
        for (n, dev) in [("r1", "r2"), ("r2", "r1"), ("r2", "r3"), ("r3", "r2")] {
            sh(&["ip", "-n", &lab.ns(n), "link", "set", dev, "mtu", "1600"]);
        }
        let route = |n: &str, to: &str, via: &str| {
            sh(&["ip", "-n", &lab.ns(n), "route", "add", to, "via", via]);
        };
        route("h1", "default", "10.2.1.254");
        route("h1", "default", "fd02:1::fe");
        for to in ["10.2.3.0/30", "10.2.4.0/24"] {
            route("r1", to, "10.2.2.2");
        }
        for to in ["fd02:3::/64", "fd02:4::/64"] {
            route("r1", to, "fd02:2::2");
        }
        route("r2", "10.2.1.0/24", "10.2.2.1");
        route("r2", "10.2.4.0/24", "10.2.3.2");
        route("r2", "fd02:1::/64", "fd02:2::1");
        route("r2", "fd02:4::/64", "fd02:3::2");
        for to in ["10.2.1.0/24", "10.2.2.0/30"] {
            route("r3", to, "10.2.3.1");
        }
        for to in ["fd02:1::/64", "fd02:2::/64"] {
            route("r3", to, "fd02:3::1");
        }
        route("h2", "default", "10.2.4.254");
        route("h2", "default", "fd02:4::fe");
        for r in ["r1", "r2", "r3"] {
            lab.sh(
                r,
                "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1",
            );
        }
        lab
    }

    fn collector(&mut self) {
        let path = self.dir.path().join("collector.toml");
        std::fs::write(&path, COLLECTOR_TOML).unwrap();
        let args = [
            env!("CARGO_BIN_EXE_intscope"),
            "collect",
            "--no-store",
            "--listen",
            "10.9.0.100:32766",
            "--http",
            "127.0.0.1:8080",
            // The domain's INT port: the collector reads the INT in the reported packets.
            "--int-udp-port",
            "17768",
            "--config",
            path.to_str().unwrap(),
        ];
        let child = self
            .exec("mg", &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// `intscope agent` in router `node` with `role` on its egress `dev`, ingress times on
    /// `from`, INT `mode` in encapsulation `encap`, a report for every INT packet
    /// (`--every-packet`) unless `filtered`; its index among the children once it said
    /// "attached". `None`: no BPF build.
    #[allow(clippy::too_many_arguments)]
    fn agent(
        &mut self,
        node: &str,
        id: u32,
        from: &str,
        dev: &str,
        role: &str,
        (mode, encap): (&str, &str),
        filtered: bool,
    ) -> Option<usize> {
        let port = format!("{dev}={role}");
        let mut args = vec![
            "--watch-subnet",
            "10.2.0.0/16",
            "--watch-subnet",
            "fd02::/16",
            "--interface",
            from,
            "--int-port",
            &port,
        ];
        if !filtered {
            args.push("--every-packet");
        }
        let config = format!("mode = \"{mode}\"\nencap = \"{encap}\"\nmtu = 1600\n");
        self.spawn_agent(node, &format!("{node}.toml"), &config, id, &args)
    }

    /// A drop-reporting agent in `node` as `intscope lab` runs beside the INT data path: it
    /// watches no flow (a documentation prefix) and reports every drop of `interfaces`.
    fn drop_agent(&mut self, node: &str, id: u32, interfaces: &[&str]) -> Option<usize> {
        let mut args = vec!["--watch-subnet", "192.0.2.255/32"];
        for i in interfaces {
            args.extend(["--interface", i]);
        }
        let config = "drop_reports = \"all\"\n";
        self.spawn_agent(node, &format!("{node}-drops.toml"), config, id, &args)
    }

    /// `intscope agent` as node `id` in `node`, configured by `config` (written to file `name`),
    /// reporting to the collector, with `extra` arguments; its index among the children once it
    /// said "attached". `None` when this intscope has no BPF programs.
    fn spawn_agent(
        &mut self,
        node: &str,
        name: &str,
        config: &str,
        id: u32,
        extra: &[&str],
    ) -> Option<usize> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, config).unwrap();
        let id = id.to_string();
        let mut args = vec![
            env!("CARGO_BIN_EXE_intscope"),
            "agent",
            "--config",
            path.to_str().unwrap(),
            "--node-id",
            &id,
            "--collector",
            "10.9.0.100:32766",
        ];
        args.extend(extra);
        let mut child = self
            .exec(node, &args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let _ = child.wait();
                if said.contains("built without its BPF programs") {
                    return None;
                }
                panic!("agent in {node} ended before attaching: {said}");
            }
            said.push_str(&line);
            if line.contains("attached") {
                break;
            }
        }
        std::thread::spawn(move || for _ in stderr.lines() {});
        self.children.push(child);
        Some(self.children.len() - 1)
    }

    /// SIGTERM to child `i`; its JSON summary's `agent` counters.
    fn stop(&mut self, i: usize) -> serde_json::Value {
        let child = &mut self.children[i];
        sh(&["kill", "-TERM", &child.id().to_string()]);
        let status = exit_within(child, Duration::from_secs(20)).expect("stopped within 20 s");
        assert!(status.success(), "agent exit {status}");
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        v["agent"].clone()
    }

    /// Runs `f` on a thread inside namespace `node`.
    fn inside<T: Send + 'static>(
        &self,
        node: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let file = std::fs::File::open(format!("/run/netns/{}", self.ns(node))).unwrap();
        std::thread::spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in NODES {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// `len` bytes of the stream seeded `seed`.
fn stream(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng(seed | 1).fill(&mut v);
    v
}

/// A TCP stream of `len` bytes from h1 to h2 at `to`: h2 must read exactly what h1 wrote.
fn tcp_exact(lab: &Lab, to: SocketAddr, len: usize) {
    let sent = stream(to.port().into(), len);
    let expect = sent.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = lab.inside("h2", move || {
        let l = TcpListener::bind(to).unwrap();
        ready_tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::with_capacity(len);
        c.read_to_end(&mut got).unwrap();
        got
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let client = lab.inside("h1", move || {
        let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
        // A stream the path stalls fails the test instead of hanging it.
        c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(&sent).unwrap();
    });
    client.join().unwrap();
    let got = server.join().unwrap();
    assert_eq!(got.len(), expect.len(), "TCP to {to}: bytes received");
    let first = got.iter().zip(&expect).position(|(a, b)| a != b);
    assert_eq!(
        first, None,
        "TCP to {to}: the stream differs from byte {first:?}"
    );
}

/// `n` UDP datagrams (sizes 1..=1400, seeded contents, paced) from h1 to h2 at `to`: every one
/// h2 receives is one h1 sent, byte for byte; at least 95 % arrive.
fn udp_exact(lab: &Lab, to: SocketAddr, n: u32) {
    let datagram = move |i: u32| {
        let len = 8 + (u64::from(i) * 7919 % 1393) as usize;
        let mut d = stream(u64::from(i) * 31 + u64::from(to.port()), len);
        d[..4].copy_from_slice(&i.to_be_bytes());
        d
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = lab.inside("h2", move || {
        let s = UdpSocket::bind(to).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(k) = s.recv(&mut buf) {
            got.push(buf[..k].to_vec());
        }
        got
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let client = lab.inside("h1", move || {
        let s = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
        for i in 0..n {
            s.send_to(&datagram(i), to).unwrap();
            // ~10 k datagrams/s: a receiver on a loaded machine keeps up.
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    client.join().unwrap();
    let got = server.join().unwrap();
    for d in &got {
        let i = u32::from_be_bytes(d[..4].try_into().unwrap());
        assert!(
            i < n && *d == datagram(i),
            "UDP to {to}: datagram {i} changed"
        );
    }
    assert!(
        got.len() as u32 >= n * 95 / 100,
        "UDP to {to}: {} of {n} datagrams arrived",
        got.len()
    );
}

/// The peak hop latencies at `node`'s `port`: of latency incidents there, and of latency
/// symptoms there of any incident (a queue that fills is one congestion incident with its
/// latency as a symptom).
fn latency_peaks(all: &serde_json::Value, node: u64, port: u64) -> Vec<u64> {
    let at = |x: &serde_json::Value| x["place"]["node"] == node && x["place"]["port"] == port;
    let mut peaks = Vec::new();
    for i in all["incidents"].as_array().into_iter().flatten() {
        if i["kind"] == "latency" && at(i) {
            peaks.extend(i["peak"]["value"].as_u64());
        }
        for s in i["symptoms"].as_array().into_iter().flatten() {
            if s["kind"] == "latency" && at(s) {
                peaks.extend(s["peak"]["value"].as_u64());
            }
        }
    }
    peaks
}

/// The IDs of the incidents with queue drops (`traffic-manager`) at `node`'s `port`.
fn tail_drop_incidents(all: &serde_json::Value, node: u64, port: u64) -> Vec<u64> {
    let tail_drop = |x: &serde_json::Value| {
        x["kind"] == "drop"
            && x["cause"] == "traffic-manager"
            && x["place"]["node"] == node
            && x["place"]["port"] == port
    };
    all["incidents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            tail_drop(i)
                || i["symptoms"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(tail_drop)
        })
        .filter_map(|i| i["id"].as_u64())
        .collect()
}

fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    f()
}

/// The counter `name` of an agent's summary.
fn counter(c: &serde_json::Value, name: &str) -> u64 {
    c[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {c}"))
}

/// The data path's drop and failure counters are zero; every packet seen ends in one outcome.
fn clean(node: &str, c: &serde_json::Value) {
    for bad in [
        "int_malformed",
        "int_drop_helper",
        "int_adjust_failed",
        "int_ring_full",
        "int_unsupported_int",
        "int_too_long",
        "int_sink_egress_lost",
        "int_sink_pending_full",
        "bad_events",
        "send_errors",
    ] {
        assert_eq!(counter(c, bad), 0, "{node}: {bad}: {c}");
    }
    let outcomes: u64 = [
        "int_not_ip",
        "int_unsupported_ip",
        "int_fragments",
        "int_unwatched",
        "int_report_traffic",
        "int_gso_skipped",
        "int_has_int",
        "int_inserted",
        "int_inserted_m",
        "int_too_big",
        "int_not_int",
        "int_added",
        "int_hop_limit",
        "int_mtu",
        "int_mx",
        "int_sunk",
        "int_malformed",
        "int_unsupported_int",
        "int_adjust_failed",
        "int_drop_helper",
        "int_drop_discard",
        "int_marked_without_int",
        "int_too_long",
    ]
    .iter()
    .map(|n| counter(c, n))
    .sum();
    assert_eq!(outcomes, counter(c, "int_seen"), "{node}: outcomes: {c}");
}

/// The sink's reports in `pcap` (as `intscope dump` reads them): per node, the hop latencies.
fn hop_latencies(pcap: &std::path::Path) -> std::collections::BTreeMap<u64, Vec<u64>> {
    let dump = common::succeed(bin().args(["dump", "--format", "json"]).arg(pcap));
    let mut out = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for line in String::from_utf8_lossy(&dump.stdout).lines() {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let r = &f["report"];
        for ind in r["reports"].as_array().into_iter().flatten() {
            if let Some(l) = ind["metadata"]["hop_latency"].as_u64() {
                out.entry(r["node_id"].as_u64().unwrap())
                    .or_default()
                    .push(l);
            }
            for hop in ind["inner"]["int"]["hops"].as_array().into_iter().flatten() {
                if let (Some(n), Some(l)) = (hop["node_id"].as_u64(), hop["hop_latency"].as_u64()) {
                    out.entry(n).or_default().push(l);
                }
            }
        }
    }
    out
}

#[test]
fn int_md_and_mx_chain_keeps_every_byte_and_reports_the_path() {
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let started = Instant::now();
    let mut lab = Lab::up();
    lab.collector();
    // Reports as the collector receives them, for the hop latencies.
    let pcap = lab.dir.path().join("reports.pcap");
    let dump = lab
        .exec(
            "mg",
            &[
                "tcpdump",
                "-U",
                "-ni",
                "br0",
                "-w",
                pcap.to_str().unwrap(),
                "udp",
                "port",
                "32766",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    lab.children.push(dump);
    let v4: std::net::IpAddr = "10.2.4.1".parse().unwrap();
    let v6: std::net::IpAddr = "fd02:4::1".parse().unwrap();
    // NPT 2 (udp-new) under the kernel's default offloads: every TCP/UDP packet in the chain
    // is CHECKSUM_PARTIAL, its checksum never computed. Then INT behind the L4 header (NPT 0
    // under a DSCP, NPT 1 behind UDP's own header), with r1's egress computing checksums in
    // software (tx checksumming off): the seed the source left is summed there, transit and sink
    // update a whole checksum, and h2's kernel checks it (a wrong one drops the packet, and the
    // byte counts below fail).
    let rounds = [
        ("md", "udp-new"),
        ("mx", "udp-new"),
        ("md", "dscp"),
        ("md", "udp-port"),
        ("mx", "dscp"),
    ];
    for (round, (mode, encap)) in rounds.iter().enumerate() {
        let what = format!("{mode} {encap}");
        let mode = &what;
        if *encap != "udp-new" {
            lab.sh("r1", "ethtool -K r2 tx off");
        }
        let Some(a1) = lab.agent("r1", 1, "h1", "r2", "source", rounds[round], false) else {
            skip("this intscope was built without its BPF programs");
            return;
        };
        let a2 = lab
            .agent("r2", 2, "r1", "r3", "transit", rounds[round], false)
            .unwrap();
        let a3 = lab
            .agent("r3", 3, "r2", "r2", "sink", rounds[round], false)
            .unwrap();
        let port = 6000 + 10 * round as u16;
        tcp_exact(&lab, SocketAddr::new(v4, port), 8 << 20);
        tcp_exact(&lab, SocketAddr::new(v6, port + 1), 8 << 20);
        udp_exact(&lab, SocketAddr::new(v4, port + 2), 2000);
        udp_exact(&lab, SocketAddr::new(v6, port + 3), 2000);
        let (c1, c2, c3) = (lab.stop(a1), lab.stop(a2), lab.stop(a3));
        clean("r1", &c1);
        clean("r2", &c2);
        clean("r3", &c3);
        let inserted = counter(&c1, "int_inserted");
        // UDP datagrams are never GSO: each of the 4000 (and TCP's small segments) got INT.
        assert!(inserted >= 4000, "{mode}: r1 inserted {inserted}: {c1}");
        assert_eq!(counter(&c1, "int_too_big"), 0, "{mode}: {c1}");
        assert_eq!(counter(&c1, "int_remarked"), 0, "{mode}: {c1}");
        if rounds[round].0 == "md" {
            assert_eq!(counter(&c2, "int_added"), inserted, "{mode}: r2 {c2}");
            assert_eq!(counter(&c1, "int_events"), 0);
        } else {
            assert_eq!(counter(&c2, "int_mx"), inserted, "{mode}: r2 {c2}");
            assert_eq!(counter(&c1, "int_reports"), inserted, "{mode}: r1 {c1}");
            assert_eq!(counter(&c2, "int_reports"), inserted, "{mode}: r2 {c2}");
        }
        assert_eq!(counter(&c3, "int_sunk"), inserted, "{mode}: r3 {c3}");
        // r3 forwards every packet to h2: each report waited for its packet's egress, and each
        // packet was seen leaving.
        assert_eq!(
            counter(&c3, "int_sink_deferred"),
            inserted,
            "{mode}: r3 {c3}"
        );
        assert_eq!(counter(&c3, "int_sink_egress"), inserted, "{mode}: r3 {c3}");
        assert_eq!(counter(&c3, "int_sink_unseen_egress"), 0, "{mode}: r3 {c3}");
        assert_eq!(counter(&c3, "int_reports"), inserted, "{mode}: r3 {c3}");
        assert_eq!(counter(&c3, "sent"), inserted, "{mode}: r3 {c3}");
        // The collector joins r1, r2, r3 for each flow of this round, by its original ports
        // (NPT 1: the destination port from the shim): every UDP datagram was reported, TCP's
        // segments small enough to be sent without GSO.
        let mut flows = serde_json::Value::Null;
        for (to, least) in [(port, 1), (port + 1, 1), (port + 2, 1000), (port + 3, 1000)] {
            assert!(
                eventually(Duration::from_secs(10), || {
                    flows = lab.api("/api/flows?limit=1000");
                    flows["flows"].as_array().unwrap().iter().any(|f| {
                        f["flow"]["dst_port"] == to
                            && f["path"] == serde_json::json!([1, 2, 3])
                            && f["reports"].as_u64().unwrap_or(0) >= least
                    })
                }),
                "{mode}: no flow to port {to} with the path [1, 2, 3] and {least} reports: \
                 {flows}"
            );
        }
    }
    lab.sh("r1", "ethtool -K r2 tx on");
    // The hop latencies r1 and r2 wrote (INT-MD stacks, INT-MX reports) and the sink r3 reported
    // as its own (its reports wait for the packet to leave towards h2), measured by the kernel.
    let lat = hop_latencies(&pcap);
    for node in 1..=3u64 {
        let l = lat
            .get(&node)
            .unwrap_or_else(|| panic!("no hop latency of node {node}: {lat:?}"));
        assert!(l.len() >= 4000, "node {node}: {} latencies", l.len());
        // Positive, under the 4 s past which an ingress time is refused, and mostly a few
        // microseconds (a first packet may wait a second for neighbour discovery: a residence
        // the kernel really had; seen once, 1.0006 s at r1).
        assert!(
            l.iter().all(|&x| x > 0 && x < 4_000_000_000),
            "node {node}: {l:?}"
        );
        let mut sorted = l.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        eprintln!(
            "node {node}: median hop latency {median} ns of {} reported",
            l.len()
        );
        assert!(
            median < 1_000_000,
            "node {node}: median hop latency {median} ns"
        );
        let distinct: std::collections::BTreeSet<_> = l.iter().collect();
        assert!(
            distinct.len() > 10,
            "node {node}: latencies not measured: {distinct:?}"
        );
    }

    // The flow filter in the kernel (the default): every INT packet a hop would report is
    // reported or held back, counted; at the INT-MX sink, whose own ports and latency do not
    // change, a flow is reported about once a second.
    for (round, mode) in ["md", "mx"].iter().enumerate() {
        let a1 = lab
            .agent("r1", 1, "h1", "r2", "source", (mode, "udp-new"), true)
            .unwrap();
        let a2 = lab
            .agent("r2", 2, "r1", "r3", "transit", (mode, "udp-new"), true)
            .unwrap();
        let a3 = lab
            .agent("r3", 3, "r2", "r2", "sink", (mode, "udp-new"), true)
            .unwrap();
        let began = Instant::now();
        let port = 6100 + 10 * round as u16;
        tcp_exact(&lab, SocketAddr::new(v4, port), 2 << 20);
        udp_exact(&lab, SocketAddr::new(v4, port + 2), 2000);
        udp_exact(&lab, SocketAddr::new(v6, port + 3), 2000);
        let seconds = began.elapsed().as_secs();
        let (c1, c2, c3) = (lab.stop(a1), lab.stop(a2), lab.stop(a3));
        clean("r1", &c1);
        clean("r2", &c2);
        clean("r3", &c3);
        let inserted = counter(&c1, "int_inserted");
        assert!(
            inserted >= 4000,
            "{mode} filtered: r1 inserted {inserted}: {c1}"
        );
        // A report due is handed over, filtered, lost to a full ring, or held for its packet's
        // egress (a sink's); a held one is handed over at the egress, lost there, or handed over
        // without it later.
        let told = |c: &serde_json::Value| {
            counter(c, "int_events")
                + counter(c, "int_filtered")
                + counter(c, "int_ring_full")
                + counter(c, "int_sink_deferred")
        };
        let handed = |c: &serde_json::Value| {
            counter(c, "int_events")
                + counter(c, "int_sink_egress")
                + counter(c, "int_sink_unseen_egress")
        };
        assert_eq!(
            counter(&c3, "int_sink_deferred"),
            counter(&c3, "int_sink_egress")
                + counter(&c3, "int_sink_egress_lost")
                + counter(&c3, "int_sink_unseen_egress"),
            "{mode} filtered: r3 {c3}"
        );
        assert_eq!(
            told(&c3),
            counter(&c3, "int_sunk"),
            "{mode} filtered: r3 {c3}"
        );
        assert_eq!(counter(&c3, "int_reports"), handed(&c3), "{c3}");
        assert!(
            counter(&c3, "int_filtered") > 0,
            "{mode}: nothing filtered at r3: {c3}"
        );
        if *mode == "mx" {
            assert_eq!(told(&c1), inserted, "{mode} filtered: r1 {c1}");
            assert_eq!(
                told(&c2),
                counter(&c2, "int_mx"),
                "{mode} filtered: r2 {c2}"
            );
            assert!(counter(&c1, "int_filtered") > 0, "{c1}");
            assert!(counter(&c2, "int_filtered") > 0, "{c2}");
            // Three flows (and a collision's early report at most per flow and second).
            let bound = 3 * 2 * (seconds + 2);
            assert!(
                handed(&c3) <= bound,
                "{mode} filtered: r3 reported {} times in {seconds} s (at most {bound}): {c3}",
                handed(&c3)
            );
        } else {
            assert_eq!(counter(&c1, "int_events"), 0, "{c1}");
            assert_eq!(counter(&c1, "int_filtered"), 0, "{c1}");
        }
    }

    // A 10 Mbit/s limit at r2's egress towards r3 under 30 Mbit/s of UDP: r2's queue fills.
    let a1 = lab
        .agent("r1", 1, "h1", "r2", "source", ("md", "udp-new"), false)
        .unwrap();
    let a2 = lab
        .agent("r2", 2, "r1", "r3", "transit", ("md", "udp-new"), false)
        .unwrap();
    let a3 = lab
        .agent("r3", 3, "r2", "r2", "sink", ("md", "udp-new"), false)
        .unwrap();
    let drops = lab.drop_agent("r2", 2, &["r1", "r3"]).unwrap();
    lab.sh(
        "r2",
        "tc qdisc add dev r3 root tbf rate 10mbit burst 16kb latency 200ms",
    );
    udp_flood(&lab, SocketAddr::new(v4, 7000), Duration::from_secs(3));
    lab.sh("r2", "tc qdisc del dev r3 root");
    let r2_port = lab.ifindex("r2", "r3");
    // r2's hop latency carries its qdisc's queueing (the sojourn measured after the qdisc):
    // a latency incident there, or the latency of the congestion incident at the port.
    let mut all = serde_json::Value::Null;
    assert!(
        eventually(Duration::from_secs(15), || {
            all = lab.api("/api/incidents?limit=1000");
            !latency_peaks(&all, 2, r2_port).is_empty()
        }),
        "no latency at r2's port {r2_port}: {all}"
    );
    let peaks = latency_peaks(&all, 2, r2_port);
    assert!(
        peaks.iter().any(|&p| p > 20_000_000),
        "10 Mbit/s under 30 Mbit/s queues for up to 200 ms at r2: {peaks:?}\n{all}"
    );
    eprintln!("latency peaks at r2's port: {peaks:?} ns");
    // The tail drops, reported by an agent that keeps no ingress record of the (unwatched)
    // packets, are placed at the queue's port all the same, so they are the symptoms of the
    // same incident as its latency: one fault, one incident.
    assert!(
        eventually(Duration::from_secs(10), || {
            all = lab.api("/api/incidents?limit=1000");
            !tail_drop_incidents(&all, 2, r2_port).is_empty()
        }),
        "no tail drop at r2's port {r2_port}: {all}"
    );
    let with_drops = tail_drop_incidents(&all, 2, r2_port);
    let with_latency: Vec<u64> = all["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| !latency_peaks(&serde_json::json!({ "incidents": [i] }), 2, r2_port).is_empty())
        .filter_map(|i| i["id"].as_u64())
        .collect();
    assert_eq!(with_drops, with_latency, "one incident at r2's port: {all}");
    assert!(
        tail_drop_incidents(&all, 2, 0).is_empty(),
        "a tail drop placed at no port: {all}"
    );
    // Packets the sink forwards but its egress queue drops never leave: their reports, held for
    // the egress, go without it (after 1 s, or as the agent stops), each one counted.
    lab.sh(
        "r3",
        "tc qdisc add dev h2 root tbf rate 1mbit burst 1600 limit 3200",
    );
    udp_flood(&lab, SocketAddr::new(v4, 7001), Duration::from_secs(1));
    lab.sh("r3", "tc qdisc del dev h2 root");
    lab.stop(drops);
    let stopped = [a1, a2, a3].map(|a| lab.stop(a));
    for c in &stopped {
        assert_eq!(counter(c, "int_drop_helper"), 0, "{c}");
    }
    let c3 = &stopped[2];
    assert_eq!(
        counter(c3, "int_sink_deferred"),
        counter(c3, "int_sink_egress")
            + counter(c3, "int_sink_egress_lost")
            + counter(c3, "int_sink_unseen_egress"),
        "r3: {c3}"
    );
    assert!(
        counter(c3, "int_sink_unseen_egress") > 0,
        "r3's queue to h2 dropped packets whose reports waited for their egress: {c3}"
    );
    assert_eq!(
        counter(c3, "int_reports"),
        counter(c3, "int_events")
            + counter(c3, "int_sink_egress")
            + counter(c3, "int_sink_unseen_egress"),
        "r3: {c3}"
    );
    eprintln!("the chain test took {:?}", started.elapsed());
}

/// 1000-byte UDP datagrams from h1 to `to`, 4 000 a second, for `how_long`.
fn udp_flood(lab: &Lab, to: SocketAddr, how_long: Duration) {
    let flood = lab.inside("h1", move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let d = vec![0x5au8; 1000];
        let end = Instant::now() + how_long;
        while Instant::now() < end {
            for _ in 0..40 {
                let _ = s.send_to(&d, to);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    flood.join().unwrap();
}

/// Settings the data path cannot run with are refused with the reason, before anything loads.
#[test]
fn int_port_misuse_says_why() {
    let run = |args: &[&str]| {
        let out = bin()
            .arg("agent")
            .args(["--collector", "127.0.0.1:32766"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--int-port", "eth0=router"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("source, transit or sink"), "{err}");
    let (code, err) = run(&["--int-port", "eth0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("NAME=ROLE"), "{err}");
    let (code, err) = run(&["--mode", "mx"]);
    assert_eq!(code, Some(2), "--mode without --int-port: {err}");
    let (code, err) = run(&["--int-port", "eth0=source", "--mode", "xd"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("md or mx"), "{err}");
    let (code, err) = run(&["--int-port", "eth0=sink", "--netns", "x=1"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("one agent per"), "{err}");
}
