//! `intscope agent` on a real Linux data path: h1 — r1 — r2 — h2 in network namespaces with
//! kernel routing and default veth offloads, an agent in each (node IDs 1–4), `intscope collect`
//! in a management namespace bridged to all four, real TCP and UDP (iperf3) and pings. Checked:
//! the paths the collector joins from the postcards; the hop latencies against the kernel's own
//! packet-socket timestamps of the same packets at r1; a `tbf` rate limit at r2's egress, a
//! deleted route at r1 and a BPF program dropping a flow at r2's ingress, each raised at the
//! right place with the right reason; every agent's counters adding up; and no BPF program left
//! attached after SIGTERM or SIGKILL.
//!
//! Needs root, iproute2, iperf3, tcpdump, curl, bpftool, clang (for the test's drop program)
//! and an intscope built with its BPF programs. Without them the tests say what is missing and
//! return, unless `INTSCOPE_AGENT_REQUIRE_BPF` is set (CI sets it), when they fail.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{bin, exit_within, tempdir};

/// The tests of this file load programs that the no-program-left checks count: one at a time.
static ONE_LAB: Mutex<()> = Mutex::new(());

/// The collector's settings for software hosts: a Linux host's residence times on two shared
/// cores jitter by up to ~150 µs under a 10 Gbit/s TCP stream, and the agent reports queue
/// occupancy in bytes.
const COLLECTOR_TOML: &str = "[detect]\nlatency_min_excess_ns = 2000000\nlatency_confirm_ns = 20000000\n\
    congestion_start = 16384\ncongestion_end = 8192\n";

/// What is missing to run these tests here, if anything.
fn missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("root (network namespaces, BPF)".into());
    }
    common::missing_tool(&[
        "ip", "tc", "iperf3", "tcpdump", "curl", "bpftool", "clang", "ping",
    ])
}

/// Whether to skip (said on stderr); in CI a missing piece fails instead.
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

/// Namespaces named `<prefix><node>`; removed (with every process started through them) on drop.
struct Lab {
    prefix: String,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl Lab {
    fn ns(&self, node: &str) -> String {
        format!("{}{node}", self.prefix)
    }

    /// `ip netns exec <node> program args...`.
    fn exec(&self, node: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(node)]).args(args);
        c
    }

    /// Runs `line` (words split at spaces) in `node`; fails the test unless it succeeds.
    fn sh(&self, node: &str, line: &str) -> String {
        self.run(node, &line.split_whitespace().collect::<Vec<_>>())
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

    fn spawn(&mut self, node: &str, args: &[&str]) -> usize {
        let child = self
            .exec(node, args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    /// `intscope collect` in the management namespace: reports on 10.9.0.100:32766, the API on
    /// its loopback, no store; `config` (TOML) if given.
    fn collector(&mut self, config: Option<&str>) {
        let mut args = vec![env!("CARGO_BIN_EXE_intscope"), "collect", "--no-store"];
        args.extend(["--listen", "10.9.0.100:32766", "--http", "127.0.0.1:8080"]);
        let path = self.dir.path().join("collector.toml");
        let path = path.to_str().unwrap().to_string();
        if let Some(toml) = config {
            std::fs::write(&path, toml).unwrap();
            args.extend(["--config", &path]);
        }
        self.spawn("mg", &args);
    }

    /// The interface index of `dev` in `node`.
    fn ifindex(&self, node: &str, dev: &str) -> u64 {
        self.run(node, &["cat", &format!("/sys/class/net/{dev}/ifindex")])
            .trim()
            .parse()
            .unwrap()
    }

    /// `GET path` of the collector's API (served on the management namespace's loopback).
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

    /// h1 — r1 — r2 — h2 (10.1.1.0/24, 10.1.2.0/30, 10.1.3.0/24), kernel routing, and a
    /// management bridge in `mg` (10.9.0.100) with a leg (`mg`, 10.9.0.N) in every node.
    fn up(tag: &str) -> Lab {
        let prefix = format!("ia{tag}{}", std::process::id() % 10_000);
        let lab = Lab {
            dir: tempdir(&prefix),
            prefix,
            children: Vec::new(),
        };
        for n in ["h1", "r1", "r2", "h2", "mg"] {
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
        link("r2", "h2", "h2", "eth0");
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
        for (i, n) in ["h1", "r1", "r2", "h2"].iter().enumerate() {
            let leg = format!("m{n}");
            link(n, "mg", "mg", &leg);
            sh(&["ip", "-n", &mg, "link", "set", &leg, "master", "br0", "up"]);
            let ns = lab.ns(n);
            sh(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.9.0.{}/24", i + 1),
                "dev",
                "mg",
            ]);
            sh(&["ip", "-n", &ns, "link", "set", "mg", "up"]);
        }
        let addr = |n: &str, a: &str, dev: &str| {
            sh(&["ip", "-n", &lab.ns(n), "addr", "add", a, "dev", dev]);
            sh(&["ip", "-n", &lab.ns(n), "link", "set", dev, "up"]);
        };
        addr("h1", "10.1.1.1/24", "eth0");
        addr("r1", "10.1.1.254/24", "h1");
        addr("r1", "10.1.2.1/30", "r2");
        addr("r2", "10.1.2.2/30", "r1");
        addr("r2", "10.1.3.254/24", "h2");
        addr("h2", "10.1.3.1/24", "eth0");
        let route = |n: &str, to: &str, via: &str| {
            sh(&["ip", "-n", &lab.ns(n), "route", "add", to, "via", via]);
        };
        route("h1", "default", "10.1.1.254");
        route("r1", "10.1.3.0/24", "10.1.2.2");
        route("r2", "10.1.1.0/24", "10.1.2.1");
        route("h2", "default", "10.1.3.254");
        for r in ["r1", "r2"] {
            lab.run(r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        }
        lab
    }

    /// Starts `intscope agent` in `node` (as node `node_id`; 0: none given) and waits for its
    /// "attached" line; `None` when this intscope was built without its BPF programs.
    fn agent(&mut self, node: &str, node_id: u32, extra: &[&str]) -> Option<usize> {
        let id = node_id.to_string();
        let mut args = vec![env!("CARGO_BIN_EXE_intscope"), "agent"];
        if node_id != 0 {
            args.extend(["--node-id", &id]);
        }
        args.extend([
            "--collector",
            "10.9.0.100:32766",
            "--watch-subnet",
            "10.1.0.0/16",
        ]);
        for dev in ["eth0", "h1", "h2", "r1", "r2"] {
            args.extend(["--interface", dev]);
        }
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
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in stderr.lines() {});
        self.children.push(child);
        Some(self.children.len() - 1)
    }

    /// SIGTERM to child `i`; its exit status and stdout.
    fn stop(&mut self, i: usize) -> (std::process::ExitStatus, String) {
        let child = &mut self.children[i];
        sh(&["kill", "-TERM", &child.id().to_string()]);
        let status = exit_within(child, Duration::from_secs(20)).expect("stopped within 20 s");
        let mut out = String::new();
        if let Some(mut o) = child.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        (status, out)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in ["h1", "r1", "r2", "h2", "mg"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// A system setting changed for a test, restored when dropped.
struct Sysctl {
    path: &'static str,
    before: String,
}

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Sysctl {
        let before = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, value).unwrap();
        Sysctl { path, before }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.before.trim());
    }
}

/// The BPF programs the lab's children `agents` hold (the `prog_id` of their file
/// descriptors, programs and links alike). By process, not by name: other agents on this
/// machine (another test, another session) load programs of the same names.
fn programs_held(lab: &Lab, agents: &[usize]) -> std::collections::BTreeSet<u32> {
    let mut ids = std::collections::BTreeSet::new();
    for &a in agents {
        let pid = lab.children[a].id();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
            let text = std::fs::read_to_string(fd.unwrap().path()).unwrap_or_default();
            ids.extend(
                text.lines()
                    .filter_map(|l| l.strip_prefix("prog_id:"))
                    .filter_map(|v| v.trim().parse::<u32>().ok()),
            );
        }
    }
    ids
}

/// How many of the programs `ids` are still loaded.
fn still_loaded(ids: &std::collections::BTreeSet<u32>) -> usize {
    ids.iter()
        .filter(|id| {
            Command::new("bpftool")
                .args(["prog", "show", "id", &id.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .count()
}

/// Packet timestamps (ns) of a pcap, with the bytes.
fn pcap(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        out.push((p.timestamp.as_nanos() as u64, p.data.into_owned()));
    }
    out
}

/// The incidents of `kind` at `node` (and `port` when given).
fn incidents<'a>(
    all: &'a serde_json::Value,
    kinds: &[&str],
    node: u64,
    port: Option<u64>,
) -> Vec<&'a serde_json::Value> {
    all["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| kinds.iter().any(|k| i["kind"] == *k))
        .filter(|i| i["place"]["node"] == node)
        .filter(|i| port.is_none_or(|p| i["place"]["port"] == p))
        .collect()
}

/// The peak hop latencies at `node`'s `port`: of latency incidents there, and of latency
/// symptoms there of any incident (a queue that fills is one congestion incident with its
/// latency as a symptom).
fn latency_peaks(all: &serde_json::Value, node: u64, port: u64) -> Vec<u64> {
    let at = |x: &serde_json::Value| x["place"]["node"] == node && x["place"]["port"] == port;
    let mut peaks = Vec::new();
    for i in all["incidents"].as_array().unwrap() {
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

/// Each report datagram's (version, node ID) as `intscope dump` reads `pcap`, and as tshark
/// with the repository's dissector does: they must agree frame by frame. Returns dump's.
fn reports_read_alike(pcap: &Path) -> Vec<(String, u64)> {
    let dump = common::succeed(bin().args(["dump", "--format", "json"]).arg(pcap));
    let from_dump: Vec<(String, u64)> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|f| f["report"].is_object())
        .map(|f| {
            let r = &f["report"];
            let node = r["node_id"]
                .as_u64()
                .or_else(|| r["local"]["node_id"].as_u64())
                .or_else(|| r["drop"]["node_id"].as_u64())
                .unwrap_or_else(|| panic!("no node ID in {f}"));
            (r["version"].as_str().unwrap().to_string(), node)
        })
        .collect();
    let tshark = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args([
            "-X",
            &format!("lua_script:{}", common::repo("wireshark/intscope.lua")),
        ])
        .args([
            "-Y",
            "intrep",
            "-T",
            "fields",
            "-e",
            "intrep.version",
            "-e",
            "intrep.node_id",
        ])
        .args(["-e", "intrep.sw.node_id"])
        .output();
    let Ok(tshark) = tshark else {
        assert!(std::env::var_os("CI").is_none(), "tshark is required in CI");
        eprintln!("tshark not installed: the dissector's reading is not checked");
        return from_dump;
    };
    assert!(
        tshark.status.success(),
        "{}",
        String::from_utf8_lossy(&tshark.stderr)
    );
    let from_tshark: Vec<(String, u64)> = String::from_utf8_lossy(&tshark.stdout)
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let version = f.next().unwrap().to_string();
            // v2.0's group header, or v0.5's switch-local header.
            let node = f
                .find(|v| !v.is_empty())
                .and_then(|v| v.split(',').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no node ID from tshark: {l}"));
            (version, node)
        })
        .collect();
    assert_eq!(
        from_tshark, from_dump,
        "tshark's dissector and dump read the agent's reports alike"
    );
    from_dump
}

/// Waits until `f` holds (polled every 250 ms) or `within` passes; returns whether it held.
fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A tc program dropping UDP to port 9999 (the user's "BPF drop program on a link").
fn drop_program(dir: &Path) -> PathBuf {
    let src = dir.join("drop.bpf.c");
    std::fs::write(
        &src,
        r#"#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("tc")
int drop_udp_9999(struct __sk_buff *skb)
{
	__u8 ip[20], l4[4];
	if (skb->protocol != __builtin_bswap16(0x0800) || bpf_skb_load_bytes(skb, 14, ip, 20))
		return 0;
	if (ip[9] != 17 || bpf_skb_load_bytes(skb, 14 + (ip[0] & 0xf) * 4, l4, 4))
		return 0;
	return l4[2] == (9999 >> 8) && l4[3] == (9999 & 0xff) ? 2 /* TC_ACT_SHOT */ : 0;
}
char LICENSE[] SEC("license") = "GPL";
"#,
    )
    .unwrap();
    let obj = dir.join("drop.bpf.o");
    let arch_include = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    sh(&[
        "clang",
        "-O2",
        "-g",
        "-target",
        "bpf",
        "-I",
        &arch_include,
        "-c",
        src.to_str().unwrap(),
        "-o",
        obj.to_str().unwrap(),
    ]);
    obj
}

#[test]
fn host_int_on_a_routed_chain_paths_latencies_and_faults() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let mut lab = Lab::up("c");
    // The packet socket's receive timestamp taken where the agent's is (in the receive path,
    // not when the sending veth queues the packet to the backlog), so a loaded machine's
    // backlog wait does not separate them.
    let _stamp = Sysctl::set("/proc/sys/net/core/netdev_tstamp_prequeue", "0");
    lab.collector(Some(COLLECTOR_TOML));
    // Queue reports once a hop holds a packet 1 ms, the quota refilled under 0.5 ms.
    let agent_cfg = lab.dir.path().join("agent.toml");
    std::fs::write(
        &agent_cfg,
        "[filters]\nqueues = [{ queue_id = 0, trigger_ns = 1000000, reset_ns = 500000 }]\nqueue_quota = 50\n",
    )
    .unwrap();
    let agent_cfg = agent_cfg.to_str().unwrap().to_string();
    let mut agents = Vec::new();
    for (i, n) in ["h1", "r1", "r2", "h2"].into_iter().enumerate() {
        let extra: Vec<&str> = if n == "r1" {
            vec!["--config", &agent_cfg, "--metrics", "10.9.0.2:9464"]
        } else {
            vec!["--config", &agent_cfg]
        };
        match lab.agent(n, i as u32 + 1, &extra) {
            Some(a) => agents.push(a),
            None => {
                skip("this intscope was built without its BPF programs (clang, bpftool)");
                return;
            }
        }
    }
    let programs = programs_held(&lab, &agents);
    assert_eq!(programs.len(), 12, "three programs per agent: {programs:?}");
    assert!(eventually(Duration::from_secs(10), || {
        lab.exec("mg", &["curl", "-sf", "http://127.0.0.1:8080/api/stats"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }));
    let dir = lab.dir.path().to_path_buf();
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();

    // Phase 1: TCP and UDP for 10 s, pings every 200 ms; r1's interfaces and the reports
    // captured for the ground truth.
    for port in ["5201", "5202"] {
        lab.spawn("h2", &["iperf3", "-s", "-p", port]);
    }
    let captures = [
        lab.spawn(
            "mg",
            &[
                "tcpdump",
                "-i",
                "br0",
                "-U",
                "--time-stamp-precision=nano",
                "-w",
                &p("reports.pcap"),
                "udp",
                "port",
                "32766",
            ],
        ),
        lab.spawn(
            "r1",
            &[
                "tcpdump",
                "-i",
                "h1",
                "-U",
                "--time-stamp-precision=nano",
                "-w",
                &p("r1-in.pcap"),
                "icmp",
            ],
        ),
        lab.spawn(
            "r1",
            &[
                "tcpdump",
                "-i",
                "r2",
                "-U",
                "--time-stamp-precision=nano",
                "-w",
                &p("r1-out.pcap"),
                "icmp",
            ],
        ),
    ];
    std::thread::sleep(Duration::from_secs(1));
    let tcp = lab
        .exec(
            "h1",
            &["iperf3", "-c", "10.1.3.1", "-p", "5201", "-t", "10", "-J"],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let udp = lab
        .exec(
            "h1",
            &[
                "iperf3", "-c", "10.1.3.1", "-p", "5202", "-u", "-b", "20M", "-t", "10", "-J",
            ],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    lab.run("h1", &["ping", "-q", "-i", "0.2", "-c", "45", "10.1.3.1"]);
    let tcp: serde_json::Value =
        serde_json::from_slice(&tcp.wait_with_output().unwrap().stdout).unwrap();
    let udp_out = udp.wait_with_output().unwrap();
    assert!(udp_out.status.success());
    let gbits = tcp["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap()
        / 1e9;
    eprintln!("TCP h1 -> h2 through four agents: {gbits:.2} Gbit/s");
    std::thread::sleep(Duration::from_millis(500));
    for c in captures {
        lab.stop(c);
    }

    // The paths, joined from each node's postcards. A node's last postcards may reach the
    // collector some hundreds of ms after the traffic (its agent wakes for a batch or every
    // 100 ms, the collector joins a window after a flow's first card): until then the path of a
    // flow can be the partial one of the cards there are, so the paths are awaited.
    let path_of = |flows: &serde_json::Value, proto: u64, port: (&str, u64)| {
        flows["flows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["flow"]["proto"] == proto && f["flow"][port.0] == port.1)
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    };
    let expected = [
        (
            6,
            ("dst_port", 5201),
            serde_json::json!([1, 2, 3, 4]),
            "TCP h1 -> h2",
        ),
        (
            17,
            ("dst_port", 5202),
            serde_json::json!([1, 2, 3, 4]),
            "UDP h1 -> h2",
        ),
        (
            6,
            ("src_port", 5201),
            serde_json::json!([4, 3, 2, 1]),
            "TCP h2 -> h1",
        ),
    ];
    let mut flows = serde_json::Value::Null;
    eventually(Duration::from_secs(10), || {
        flows = lab.api("/api/flows?limit=100");
        expected
            .iter()
            .all(|(proto, port, path, _)| path_of(&flows, *proto, *port)["path"] == *path)
    });
    for (proto, port, path, what) in &expected {
        let f = path_of(&flows, *proto, *port);
        assert_eq!(f["path"], *path, "{what}: {f}");
    }

    // Hop latencies at r1 against the packet socket's timestamps of the same echo requests:
    // received on r1's `h1`, sent on its `r2` (the tap points next to the agent's hooks).
    let from_h1 = |d: &[u8]| d.len() > 34 && d[23] == 1 && d[26..30] == [10, 1, 1, 1];
    let rx: Vec<u64> = pcap(&dir.join("r1-in.pcap"))
        .into_iter()
        .filter(|(_, d)| from_h1(d))
        .map(|(t, _)| t)
        .collect();
    let tx: Vec<u64> = pcap(&dir.join("r1-out.pcap"))
        .into_iter()
        .filter(|(_, d)| from_h1(d))
        .map(|(t, _)| t)
        .collect();
    assert!(
        rx.len() >= 40 && tx.len() >= 40,
        "{} {}",
        rx.len(),
        tx.len()
    );
    let read = reports_read_alike(&dir.join("reports.pcap"));
    assert!(read.iter().all(|(v, _)| v == "2.0"));
    for node in 1..=4 {
        assert!(
            read.iter().any(|(_, n)| *n == node),
            "reports from node {node}: {read:?}"
        );
    }
    let dump = common::succeed(bin().args(["dump", "--format", "json", &p("reports.pcap")]));
    let mut matched = 0;
    let mut apart = Vec::new();
    for line in String::from_utf8_lossy(&dump.stdout).lines() {
        let frame: serde_json::Value = serde_json::from_str(line).unwrap();
        let report = &frame["report"];
        if report["node_id"] != 2 {
            continue;
        }
        for r in report["reports"].as_array().unwrap() {
            let inner = &r["inner"]["ip"];
            if inner["proto"] != 1 || inner["src"] != "10.1.1.1" {
                continue;
            }
            let m = &r["metadata"];
            let (i, e, lat) = (
                m["ingress_ts"].as_u64().unwrap(),
                m["egress_ts"].as_u64().unwrap(),
                m["hop_latency"].as_u64().unwrap(),
            );
            let closest = |ts: &[u64], t: u64| *ts.iter().min_by_key(|x| x.abs_diff(t)).unwrap();
            let (a, b) = (closest(&rx, i), closest(&tx, e));
            assert!(
                i.abs_diff(a) < 50_000,
                "ingress {i} vs the packet socket's {a}"
            );
            assert!(
                e.abs_diff(b) < 50_000,
                "egress {e} vs the packet socket's {b}"
            );
            // Each within 100 µs (a softirq preempted between a tap and a tracepoint on a
            // loaded machine moves one side by tens of µs); their median within 10 µs below.
            assert!(
                lat.abs_diff(b - a) <= 100_000,
                "r1's hop latency {lat} ns, the kernel's residence by packet socket {} ns",
                b - a
            );
            apart.push(lat.abs_diff(b - a));
            matched += 1;
        }
    }
    apart.sort_unstable();
    assert!(
        apart.get(apart.len() / 2).is_some_and(|&d| d <= 10_000),
        "r1's hop latencies against the packet socket's residences, ns apart: {apart:?}"
    );
    // One report a second per 5-tuple (the smart filters) over the 9 s of pings.
    assert!(
        (5..=15).contains(&matched),
        "{matched} echo request postcards from r1"
    );

    // Phase 2: a rate limit at r2's egress towards h2: queueing delay and tail drops there.
    let r2_to_h2 = lab.ifindex("r2", "h2");
    lab.sh(
        "r2",
        "tc qdisc add dev h2 root tbf rate 1mbit burst 8kb latency 300ms",
    );
    lab.run(
        "h1",
        &[
            "iperf3", "-c", "10.1.3.1", "-p", "5202", "-u", "-b", "4M", "-t", "4",
        ],
    );
    lab.sh("r2", "tc qdisc del dev h2 root");
    let mut all = serde_json::Value::Null;
    assert!(
        eventually(Duration::from_secs(15), || {
            all = lab.api("/api/incidents?limit=1000");
            // A latency incident, or the latency of the congestion incident at the port.
            !latency_peaks(&all, 3, r2_to_h2).is_empty()
        }),
        "no latency at r2's port {r2_to_h2}: {all}\nnodes (their ports' baselines): {}",
        lab.api("/api/nodes")
    );
    let slow = latency_peaks(&all, 3, r2_to_h2);
    assert!(
        slow.iter().any(|&p| p > 20_000_000),
        "a 1 Mbit/s limit under 4 Mbit/s queues for up to 300 ms: {slow:?}\n{all}"
    );

    // Phase 3: r1 loses its route to h2.
    lab.sh("r1", "ip route del 10.1.3.0/24");
    let _ = lab
        .exec("h1", &["ping", "-q", "-i", "0.2", "-c", "8", "10.1.3.1"])
        .output();
    lab.sh("r1", "ip route add 10.1.3.0/24 via 10.1.2.2");
    assert!(
        eventually(Duration::from_secs(10), || {
            all = lab.api("/api/incidents?limit=1000");
            incidents(&all, &["drop"], 2, None)
                .iter()
                .any(|i| i["evidence"]["drop_reason_name"] == "routing-miss")
        }),
        "no routing-miss drop at r1: {all}"
    );

    // Phase 4: a BPF program on r2's link from r1 drops one flow.
    let obj = drop_program(&dir);
    lab.sh("r2", "tc qdisc add dev r1 clsact");
    let attach = format!(
        "tc filter add dev r1 ingress bpf da obj {} sec tc",
        obj.display()
    );
    lab.sh("r2", &attach);
    lab.run(
        "h1",
        &[
            "bash",
            "-c",
            "for i in $(seq 20); do echo x > /dev/udp/10.1.3.1/9999; sleep 0.05; done",
        ],
    );
    lab.sh("r2", "tc qdisc del dev r1 clsact");
    assert!(
        eventually(Duration::from_secs(10), || {
            all = lab.api("/api/incidents?limit=1000");
            incidents(&all, &["drop"], 3, None)
                .iter()
                .any(|i| i["evidence"]["drop_reason_name"] == "acl-deny")
        }),
        "no acl-deny drop at r2: {all}"
    );
    let drops = lab.api("/api/events?kind=drop&limit=1000");
    let at_r2: Vec<_> = drops
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node_id"] == 3 && e["evidence"]["drop_reason"] == 80)
        .collect();
    assert!(!at_r2.is_empty());
    assert!(
        at_r2.iter().all(|e| e["flow"]["dst_port"] == 9999),
        "only the dropped flow: {at_r2:?}"
    );

    // The metrics endpoint of r1's agent.
    let metrics = lab.run(
        "mg",
        &[
            "curl",
            "-sf",
            "--max-time",
            "5",
            "http://10.9.0.2:9464/metrics",
        ],
    );
    assert!(metrics.contains("intscope_agent_events_total"), "{metrics}");

    // Every agent stops on SIGTERM with its counters adding up, and leaves nothing attached;
    // r2 (the third) sent queue reports for the rate-limited queue, within the quota of each
    // congestion (the quota refills once its latency falls under 0.5 ms).
    for (i, a) in agents.into_iter().enumerate() {
        let (status, out) = lab.stop(a);
        assert!(status.success(), "{status}: {out}");
        let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let c = &s["agent"];
        let n = |k: &str| c[k].as_u64().unwrap();
        assert_eq!(n("ring_full") + n("drop_ring_full"), 0, "{s}");
        // Every packet sent or delivered here ends in one outcome; every drop too.
        assert_eq!(
            n("transmitted") + n("delivered"),
            n("not_ip") + n("unwatched") + n("report_traffic") + n("filtered") + n("events"),
            "{s}"
        );
        assert_eq!(
            n("drops"),
            n("drop_not_ip") + n("drop_unwatched") + n("drop_filtered") + n("drop_events"),
            "{s}"
        );
        assert_eq!(
            n("events") + n("drop_events"),
            n("user_events"),
            "every event read: {s}"
        );
        assert_eq!(
            n("user_events"),
            n("postcards")
                + n("queue_reports")
                + n("drop_reports")
                + n("not_reported")
                + n("bad_events"),
            "every event ends in one counter: {s}"
        );
        assert_eq!(
            n("sent") + n("send_errors"),
            n("postcards") + n("queue_reports") + n("drop_reports"),
            "{s}"
        );
        assert_eq!(n("bad_events"), 0);
        if i == 2 {
            // Postcards of the congested queue and queue reports alike carry Q: at most the
            // quota (50) per congestion, and a loaded machine drains and refills the tbf queue
            // a few times (156 seen at load 4); every packet of it would be thousands.
            assert!((1..=500).contains(&n("congested_reports")), "{s}");
        }
    }
    // The kernel frees a detached program after an RCU grace period.
    assert!(
        eventually(Duration::from_secs(5), || still_loaded(&programs) == 0),
        "programs left attached after SIGTERM: {} of {programs:?}",
        still_loaded(&programs)
    );
}

/// One agent in the management namespace watching all four (`--netns NAME=ID`), reporting in
/// Telemetry Report v0.5 (SD-Fabric's): the same paths as v2.0 from an agent per namespace,
/// with one program per tracepoint; dump and the dissector read its reports alike.
#[test]
fn one_agent_watches_every_namespace_of_a_lab() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let mut lab = Lab::up("m");
    lab.collector(None);
    let netns: Vec<String> = ["h1", "r1", "r2", "h2"]
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}={}", lab.ns(n), i + 1))
        .collect();
    let mut extra = Vec::new();
    for n in &netns {
        extra.extend(["--netns", n.as_str()]);
    }
    extra.extend(["--report-format", "v0.5"]);
    let reports = lab.dir.path().join("reports.pcap");
    let capture = lab.spawn(
        "mg",
        // The agent and the collector share this namespace: the reports cross its loopback.
        &[
            "tcpdump",
            "-i",
            "lo",
            "-U",
            "-w",
            reports.to_str().unwrap(),
            "udp",
            "port",
            "32766",
        ],
    );
    let Some(a) = lab.agent("mg", 0, &extra) else {
        skip("this intscope was built without its BPF programs (clang, bpftool)");
        return;
    };
    assert_eq!(
        programs_held(&lab, &[a]).len(),
        3,
        "one program per tracepoint for four namespaces"
    );
    lab.spawn("h2", &["iperf3", "-s", "-p", "5202"]);
    std::thread::sleep(Duration::from_millis(500));
    lab.run(
        "h1",
        &[
            "iperf3", "-c", "10.1.3.1", "-p", "5202", "-u", "-b", "5M", "-t", "3",
        ],
    );
    lab.run("h1", &["ping", "-q", "-i", "0.2", "-c", "10", "10.1.3.1"]);
    let mut flows = serde_json::Value::Null;
    let complete = |flows: &serde_json::Value, proto: u64| {
        flows["flows"].as_array().is_some_and(|all| {
            all.iter().any(|f| {
                f["flow"]["proto"] == proto
                    && f["flow"]["src"] == "10.1.1.1"
                    && f["path"] == serde_json::json!([1, 2, 3, 4])
            })
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || {
            flows = lab.api("/api/flows?limit=100");
            complete(&flows, 17) && complete(&flows, 1)
        }),
        "UDP and ICMP h1 -> h2 over [1, 2, 3, 4]: {flows}"
    );
    let (status, out) = lab.stop(a);
    assert!(status.success(), "{out}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        s["stats"]["interfaces"], 6,
        "eth0, h1, r2, r1, h2, eth0: {s}"
    );
    std::thread::sleep(Duration::from_millis(300));
    lab.stop(capture);
    let read = reports_read_alike(&reports);
    assert!(
        !read.is_empty() && read.iter().all(|(v, _)| v == "0.5"),
        "{read:?}"
    );
    assert!(s["agent"]["drop_reports"].as_u64().unwrap() == 0, "{s}");
}

/// With nothing listening at the collector's address the reports are refused (ICMP port
/// unreachable on the connected socket): counted, and the agent goes on to its summary.
#[test]
fn refused_reports_are_counted_and_the_agent_goes_on() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let mut lab = Lab::up("s");
    let Some(a) = lab.agent("r1", 2, &["--every-packet"]) else {
        skip("this intscope was built without its BPF programs (clang, bpftool)");
        return;
    };
    lab.run("h1", &["ping", "-q", "-i", "0.1", "-c", "10", "10.1.3.1"]);
    std::thread::sleep(Duration::from_millis(300));
    let (status, out) = lab.stop(a);
    assert!(status.success(), "{out}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let n = |k: &str| s["agent"][k].as_u64().unwrap();
    assert!(
        n("postcards") >= 20,
        "echo requests and replies, each reported: {s}"
    );
    assert!(n("send_errors") >= 1, "{s}");
    assert_eq!(n("sent") + n("send_errors"), n("postcards"), "{s}");
}

#[test]
fn a_killed_agent_leaves_no_program_attached() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let mut lab = Lab::up("k");
    let Some(a) = lab.agent("r1", 2, &[]) else {
        skip("this intscope was built without its BPF programs (clang, bpftool)");
        return;
    };
    let programs = programs_held(&lab, &[a]);
    assert_eq!(programs.len(), 3, "{programs:?}");
    sh(&["kill", "-KILL", &lab.children[a].id().to_string()]);
    let _ = lab.children[a].wait();
    assert!(
        eventually(Duration::from_secs(5), || still_loaded(&programs) == 0),
        "the kernel detaches an ended process's BPF links"
    );
}

#[test]
fn an_agent_without_a_collector_or_with_a_bad_format_says_why() {
    // Mistakes in the command line exit 2, as everywhere (crates/cli/src/usage.rs).
    let run = |args: &[&str]| {
        let out = bin().arg("agent").args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--interface", "lo"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--collector"), "{err}");
    let (code, err) = run(&["--collector", "localhost:32766", "--report-format", "v9"]);
    assert_eq!(code, Some(2), "a host name is an address: {err}");
    assert!(err.contains("expected v0.5 or v2.0"), "{err}");
    let (code, err) = run(&["--collector", "127.0.0.1:32766", "--netns", "x"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("NAME=NODE_ID"), "{err}");
}
