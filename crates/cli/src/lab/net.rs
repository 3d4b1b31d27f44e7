//! The lab's fabric in the kernel: one network namespace per leaf, spine and host, veth pairs
//! between them, addresses, ECMP routes, a management bridge, and the faults applied to them,
//! all through iproute2 (`ip`, `tc`): the commands an engineer would type, so a lab's state can
//! be read with the same tools while it runs.
//!
//! Addressing follows the simulator's (`intscope_sim::topology`): host `h` of leaf `l` is
//! `10.0.<l>.<h>`, leaf `l` is `10.0.<l>.254` towards its hosts; the link between leaf `l` and
//! spine `s` is `10.1.<l>.<4(s-1)>/30` (leaf `.1`, spine `.2`); every node has a management leg
//! `mg` at `10.255.0.<n>/24` on a bridge in the management namespace (`10.255.0.254`), where the
//! collector receives. Node IDs: leaf `l` is `l`, spine `s` is `100 + s` (as in the simulator),
//! host `h` of leaf `l` is `1000 × l + h`.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The MTU of every fabric link: room for INT-MD (INT v2.1 §"MTU Settings") above the hosts'
/// 1500-byte packets, which their routes keep to.
pub const FABRIC_MTU: u32 = 1600;

/// The collector's address on the management bridge.
pub const COLLECTOR_IP: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 254);

/// The fabric's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    /// Leaves.
    pub leaves: u32,
    /// Spines.
    pub spines: u32,
    /// Hosts per leaf.
    pub hosts: u32,
}

impl Shape {
    /// Checks the sizes the addressing plan and the management network hold.
    pub fn check(&self) -> Result<()> {
        if !(1..=16).contains(&self.leaves)
            || !(1..=8).contains(&self.spines)
            || !(1..=16).contains(&self.hosts)
        {
            bail!(
                "a lab has 1-16 leaves, 1-8 spines and 1-16 hosts per leaf (the management \
                 network has 253 addresses); this topology has {} leaves, {} spines, {} hosts \
                 per leaf",
                self.leaves,
                self.spines,
                self.hosts
            );
        }
        Ok(())
    }

    /// Every node, leaves first, then spines, then hosts.
    pub fn nodes(&self) -> Vec<Node> {
        let mut out: Vec<Node> = (1..=self.leaves).map(Node::Leaf).collect();
        out.extend((1..=self.spines).map(Node::Spine));
        for l in 1..=self.leaves {
            out.extend((1..=self.hosts).map(|h| Node::Host(l, h)));
        }
        out
    }
}

/// A node of the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    /// Leaf `l`.
    Leaf(u32),
    /// Spine `s`.
    Spine(u32),
    /// Host `h` of leaf `l`.
    Host(u32, u32),
}

impl Node {
    /// Its name in the lab (the namespace's suffix, the ground truth's).
    pub fn name(self) -> String {
        match self {
            Node::Leaf(l) => format!("leaf{l}"),
            Node::Spine(s) => format!("spine{s}"),
            Node::Host(l, h) => format!("host{l}-{h}"),
        }
    }

    /// Its INT node ID.
    pub fn id(self) -> u32 {
        match self {
            Node::Leaf(l) => l,
            Node::Spine(s) => 100 + s,
            Node::Host(l, h) => 1000 * l + h,
        }
    }
}

/// Address of host `h` of leaf `l`.
pub fn host_ip(l: u32, h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, l as u8, h as u8)
}

/// The leaf's address of its link to spine `s`, and the spine's.
fn uplink_ips(l: u32, s: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = 4 * (s - 1) as u8;
    (
        Ipv4Addr::new(10, 1, l as u8, base + 1),
        Ipv4Addr::new(10, 1, l as u8, base + 2),
    )
}

/// Runs a command; its stderr in the error.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program} (iproute2 installed?)"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A lab's namespaces, named `<prefix><node>`.
#[derive(Debug)]
pub struct Net {
    /// The namespace names' prefix: `il<pid>-`, unique per run and recognisable when a killed
    /// run left it behind.
    pub prefix: String,
    /// The fabric's size.
    pub shape: Shape,
    /// Namespaces created so far (removed by [`Net::remove`]).
    created: Vec<String>,
    /// Links set down by a fault.
    down: BTreeSet<(u32, u32)>,
    /// (leaf, destination leaf) routes deleted by a fault.
    missing: BTreeSet<(u32, u32)>,
    /// (spine, leaf, destination leaf): the spine sends the destination's traffic to the leaf,
    /// which sends it back.
    loops: BTreeSet<(u32, u32, u32)>,
    /// The line rate of the leaves' ports to their hosts, Mb/s (None: the veth's own).
    pub host_port_mbps: Option<f64>,
}

/// The prefix of every lab namespace: `il<pid>-`.
pub const PREFIX: &str = "il";

impl Net {
    /// An empty lab of `shape` for this process.
    pub fn new(shape: Shape) -> Net {
        Net {
            prefix: format!("{PREFIX}{}-", std::process::id()),
            shape,
            created: Vec::new(),
            down: BTreeSet::new(),
            missing: BTreeSet::new(),
            loops: BTreeSet::new(),
            host_port_mbps: None,
        }
    }

    /// The namespace of `node`.
    pub fn ns(&self, node: Node) -> String {
        format!("{}{}", self.prefix, node.name())
    }

    /// The management namespace (the collector's).
    pub fn mg(&self) -> String {
        format!("{}mg", self.prefix)
    }

    /// `/run/netns/<namespace>` of `node`.
    pub fn ns_path(&self, node: Node) -> String {
        format!("/run/netns/{}", self.ns(node))
    }

    fn add_ns(&mut self, name: &str) -> Result<()> {
        run("ip", &["netns", "add", name])?;
        self.created.push(name.to_string());
        // IPv4 only: IPv6's own packets on every new link (neighbour discovery, listener
        // reports) ended in `kernel-unspecified` drop reports at every router, faults that are
        // none.
        for key in [
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ] {
            run("ip", &["netns", "exec", name, "sysctl", "-qw", key])?;
        }
        run("ip", &["-n", name, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// `ip -n <ns> -batch -` with `lines`; `force` goes on past a failing line (a route already
    /// gone).
    fn batch(ns: &str, lines: &[String], force: bool) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut args = vec!["-n", ns];
        if force {
            args.push("-force");
        }
        args.extend(["-batch", "-"]);
        let mut child = Command::new("ip")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run ip (iproute2 installed?)")?;
        let mut stdin = child.stdin.take().context("ip's stdin")?;
        stdin.write_all(lines.join("\n").as_bytes())?;
        drop(stdin);
        let out = child.wait_with_output()?;
        if !out.status.success() && !force {
            bail!(
                "ip -n {ns}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    fn veth(&self, a: Node, dev_a: &str, b: Node, dev_b: &str) -> Result<()> {
        let (na, nb) = (self.ns(a), self.ns(b));
        run(
            "ip",
            &[
                "link", "add", dev_a, "netns", &na, "type", "veth", "peer", "name", dev_b, "netns",
                &nb,
            ],
        )?;
        Ok(())
    }

    /// Builds the fabric: namespaces, links, addresses, routes, sysctls, management network.
    pub fn build(&mut self) -> Result<()> {
        let sh = self.shape;
        let mg = self.mg();
        self.add_ns(&mg)?;
        for n in sh.nodes() {
            let ns = self.ns(n);
            self.add_ns(&ns)?;
        }
        // Management bridge, a leg in every node.
        Self::batch(
            &mg,
            &[
                "link add br0 type bridge".into(),
                format!("addr add {COLLECTOR_IP}/24 dev br0"),
                "link set br0 up".into(),
            ],
            false,
        )?;
        for (i, n) in sh.nodes().into_iter().enumerate() {
            let leg = format!("m{}", i + 1);
            run(
                "ip",
                &[
                    "link",
                    "add",
                    "mg",
                    "netns",
                    &self.ns(n),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &leg,
                    "netns",
                    &mg,
                ],
            )?;
            Self::batch(&mg, &[format!("link set {leg} master br0 up")], false)?;
            Self::batch(
                &self.ns(n),
                &[
                    format!("addr add 10.255.0.{}/24 dev mg", i + 1),
                    "link set mg up".into(),
                ],
                false,
            )?;
        }
        // Hosts.
        for l in 1..=sh.leaves {
            for h in 1..=sh.hosts {
                let host = Node::Host(l, h);
                self.veth(Node::Leaf(l), &format!("h{h}"), host, "eth0")?;
                let gw = Ipv4Addr::new(10, 0, l as u8, 254);
                Self::batch(
                    &self.ns(host),
                    &[
                        format!("link set eth0 mtu {FABRIC_MTU} up"),
                        format!("addr add {}/32 dev eth0", host_ip(l, h)),
                        // The hosts send 1500-byte packets (the routes' MTU); the links carry
                        // INT above that.
                        format!("route add {gw} dev eth0 mtu lock 1500"),
                        format!("route add 10.0.0.0/16 via {gw} dev eth0 mtu lock 1500"),
                    ],
                    false,
                )?;
                Self::batch(
                    &self.ns(Node::Leaf(l)),
                    &[
                        format!("link set h{h} mtu {FABRIC_MTU} up"),
                        format!("addr add {gw}/32 dev h{h}"),
                        format!("route add {}/32 dev h{h}", host_ip(l, h)),
                    ],
                    false,
                )?;
                self.slow_port(l, h, None)?;
            }
        }
        // Leaf-spine links.
        for l in 1..=sh.leaves {
            for s in 1..=sh.spines {
                self.veth(
                    Node::Leaf(l),
                    &format!("s{s}"),
                    Node::Spine(s),
                    &format!("lf{l}"),
                )?;
                let (a, b) = uplink_ips(l, s);
                Self::batch(
                    &self.ns(Node::Leaf(l)),
                    &[
                        format!("link set s{s} mtu {FABRIC_MTU} up"),
                        format!("addr add {a}/30 dev s{s}"),
                    ],
                    false,
                )?;
                Self::batch(
                    &self.ns(Node::Spine(s)),
                    &[
                        format!("link set lf{l} mtu {FABRIC_MTU} up"),
                        format!("addr add {b}/30 dev lf{l}"),
                    ],
                    false,
                )?;
                // Where a silent loss's tc filter goes, made now: adding a qdisc to a device
                // that is up resets its queues, and the kernel reports what they held as drops.
                for (node, dev) in [
                    (Node::Leaf(l), format!("s{s}")),
                    (Node::Spine(s), format!("lf{l}")),
                ] {
                    run(
                        "tc",
                        &["-n", &self.ns(node), "qdisc", "add", "dev", &dev, "clsact"],
                    )?;
                }
            }
        }
        for n in sh.nodes() {
            let ns = self.ns(n);
            let mut sysctls = vec![
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
            ];
            if !matches!(n, Node::Host(..)) {
                // Routers: forwarding, ECMP by the 5-tuple read from the packet's headers
                // (policy 3, fields src/dst address, protocol, src/dst port), and a nexthop
                // over a link without carrier is not used. Policy 1 would take the hash the
                // sending socket gave the packet, which travels across a veth pair: TCP draws
                // a new one after a retransmission timeout, and the kernel's resets and
                // time-wait ACKs carry another, so a flow would change spines where a switch,
                // which hashes headers, keeps it on one.
                sysctls.extend([
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.fib_multipath_hash_policy=3",
                    "net.ipv4.fib_multipath_hash_fields=0x0037",
                    "net.ipv4.conf.all.ignore_routes_with_linkdown=1",
                ]);
            }
            for s in sysctls {
                run("ip", &["netns", "exec", &ns, "sysctl", "-qw", s])?;
            }
        }
        self.sync_routes()
    }

    /// The routes every router should have now, given the faults in force: a leaf reaches
    /// another leaf's hosts over every spine whose links to both are up (ECMP), unless a
    /// routing miss deleted that route; a spine reaches a leaf over their link while it is up.
    /// What a routing protocol would converge to, applied with `ip route replace`.
    fn sync_routes(&self) -> Result<()> {
        let sh = self.shape;
        // Spines first: a leaf's route over a spine is only added once that spine can reach
        // the destination (a repaired link carries no traffic into a spine without a route).
        for s in 1..=sh.spines {
            let lines: Vec<String> = (1..=sh.leaves)
                .map(|l| {
                    let bounce = self
                        .loops
                        .iter()
                        .find(|&&(ls, via, d)| ls == s && d == l && !self.down.contains(&(via, s)));
                    if let Some(&(_, via, _)) = bounce {
                        format!(
                            "route replace 10.0.{l}.0/24 via {} dev lf{via}",
                            uplink_ips(via, s).0
                        )
                    } else if self.down.contains(&(l, s)) {
                        format!("route del 10.0.{l}.0/24")
                    } else {
                        format!(
                            "route replace 10.0.{l}.0/24 via {} dev lf{l}",
                            uplink_ips(l, s).0
                        )
                    }
                })
                .collect();
            Self::batch(&self.ns(Node::Spine(s)), &lines, true)?;
        }
        for l in 1..=sh.leaves {
            let mut lines = Vec::new();
            for d in (1..=sh.leaves).filter(|&d| d != l) {
                let dst = format!("10.0.{d}.0/24");
                let hops: Vec<String> = (1..=sh.spines)
                    .filter(|&s| !self.down.contains(&(l, s)) && !self.down.contains(&(d, s)))
                    .map(|s| format!("nexthop via {} dev s{s}", uplink_ips(l, s).1))
                    .collect();
                let bounce = self
                    .loops
                    .iter()
                    .find(|&&(sp, via, dd)| via == l && dd == d && !self.down.contains(&(l, sp)));
                if let Some(&(sp, _, _)) = bounce {
                    lines.push(format!(
                        "route replace {dst} via {} dev s{sp}",
                        uplink_ips(l, sp).1
                    ));
                } else if self.missing.contains(&(l, d)) || hops.is_empty() {
                    lines.push(format!("route del {dst}"));
                } else {
                    lines.push(format!("route replace {dst} {}", hops.join(" ")));
                }
            }
            Self::batch(&self.ns(Node::Leaf(l)), &lines, true)?;
        }
        Ok(())
    }

    /// The interface index of `dev` in `node`'s namespace.
    pub fn ifindex(&self, node: Node, dev: &str) -> Result<u32> {
        let text = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns(node),
                "cat",
                &format!("/sys/class/net/{dev}/ifindex"),
            ],
        )?;
        text.trim()
            .parse()
            .with_context(|| format!("ifindex of {dev} in {}: {text:?}", node.name()))
    }

    /// A slow port: leaf `l`'s port to host `h` sends at `mbps` (tbf: queueing up to 100 ms,
    /// tail drops past it), or at its line rate again ([`Net::host_port_mbps`]: tbf with 4 ms
    /// of queue, a switch port's buffer, and 256 KB passing at once: a few TCP segment offloads'
    /// worth, whose bursts a switch port would queue as briefly as its line rate is high).
    pub fn slow_port(&self, l: u32, h: u32, mbps: Option<f64>) -> Result<()> {
        let ns = self.ns(Node::Leaf(l));
        let dev = format!("h{h}");
        // (rate, burst, queue): the slow rate, or the line rate.
        let tbf = match (mbps, self.host_port_mbps) {
            (Some(rate), _) => Some((rate, "16kb", "100ms")),
            (None, Some(line)) => Some((line, "256kb", "4ms")),
            // The veth's own: no qdisc (noqueue), which `del` of none already leaves.
            (None, None) => None,
        };
        match tbf {
            Some((mbps, burst, latency)) => {
                let rate = format!("{}kbit", (mbps * 1000.0).round().max(8.0) as u64);
                run(
                    "tc",
                    &[
                        "-n", &ns, "qdisc", "replace", "dev", &dev, "root", "tbf", "rate", &rate,
                        "burst", burst, "latency", latency,
                    ],
                )?;
            }
            None => {
                let _ = run("tc", &["-n", &ns, "qdisc", "del", "dev", &dev, "root"]);
            }
        }
        Ok(())
    }

    /// The link between leaf `l` and spine `s` down (both ends) or up again, and the routes
    /// moved off it or back.
    pub fn link(&mut self, l: u32, s: u32, up: bool) -> Result<()> {
        let state = if up { "up" } else { "down" };
        if up {
            self.down.remove(&(l, s));
        } else {
            self.down.insert((l, s));
        }
        Self::batch(
            &self.ns(Node::Leaf(l)),
            &[format!("link set s{s} {state}")],
            false,
        )?;
        Self::batch(
            &self.ns(Node::Spine(s)),
            &[format!("link set lf{l} {state}")],
            false,
        )?;
        self.sync_routes()
    }

    /// Leaf `l`'s route to leaf `d`'s hosts deleted (a routing miss), or back.
    pub fn route(&mut self, l: u32, d: u32, present: bool) -> Result<()> {
        if present {
            self.missing.remove(&(l, d));
        } else {
            self.missing.insert((l, d));
        }
        self.sync_routes()
    }

    /// Packets whose TTL ran out while `node` forwarded them, so far (the namespace's
    /// `InHdrErrors`, which is where IPv4 forwarding counts them, with header errors).
    pub fn ttl_expired(&self, node: Node) -> Result<u64> {
        let snmp = run(
            "ip",
            &["netns", "exec", &self.ns(node), "cat", "/proc/net/snmp"],
        )?;
        let mut ip = snmp.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap_or(""), ip.next().unwrap_or(""));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "InHdrErrors")
            .and_then(|(_, v)| v.parse().ok())
            .with_context(|| format!("InHdrErrors in {}'s /proc/net/snmp", node.name()))
    }

    /// A forwarding loop: spine `s` sends leaf `d`'s traffic to leaf `l`, whose route to `d`
    /// points back at `s` (packets circle until their TTL runs out), or the routes restored.
    pub fn looping(&mut self, s: u32, l: u32, d: u32, on: bool) -> Result<()> {
        if on {
            self.loops.insert((s, l, d));
        } else {
            self.loops.remove(&(s, l, d));
        }
        self.sync_routes()
    }

    /// The links of spine `s` at `mtu`, or at the fabric's again. Both ends: a veth drops a
    /// frame larger than its own MTU on receipt, without a word; with both ends small the
    /// sending router refuses the packet itself (ICMP "fragmentation needed", the kernel's
    /// `PKT_TOO_BIG`) and an INT source leaves INT out or sets the M bit.
    pub fn spine_mtu(&self, s: u32, mtu: Option<u32>) -> Result<()> {
        let mtu = mtu.unwrap_or(FABRIC_MTU);
        let lines: Vec<String> = (1..=self.shape.leaves)
            .map(|l| format!("link set lf{l} mtu {mtu}"))
            .collect();
        Self::batch(&self.ns(Node::Spine(s)), &lines, false)?;
        for l in 1..=self.shape.leaves {
            Self::batch(
                &self.ns(Node::Leaf(l)),
                &[format!("link set s{s} mtu {mtu}")],
                false,
            )?;
        }
        Ok(())
    }

    /// Removes every namespace of this lab (their interfaces, qdiscs and tc programs with
    /// them), after ending the processes still running in them.
    pub fn remove(&mut self) {
        for ns in self.created.drain(..).rev() {
            remove_namespace(&ns);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Ends the processes in namespace `ns` (SIGTERM, then SIGKILL after 2 s) and deletes it.
fn remove_namespace(ns: &str) {
    let pids = |_: ()| -> Vec<String> {
        run("ip", &["netns", "pids", ns])
            .map(|t| t.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let first = pids(());
    if !first.is_empty() {
        let mut args = vec!["-TERM"];
        args.extend(first.iter().map(String::as_str));
        let _ = run("kill", &args);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < until && !pids(()).is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let left = pids(());
        if !left.is_empty() {
            let mut args = vec!["-KILL"];
            args.extend(left.iter().map(String::as_str));
            let _ = run("kill", &args);
        }
    }
    let _ = run("ip", &["netns", "del", ns]);
}

/// Removes what labs killed with SIGKILL left behind: namespaces named `il<pid>-…` whose
/// process is gone (or is no longer an intscope), with the processes still running in them.
/// Returns the namespaces removed.
pub fn remove_stale() -> Vec<String> {
    let Ok(list) = run("ip", &["netns", "list"]) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('-') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let alive = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim().starts_with("intscope"));
        if !alive {
            remove_namespace(name);
            removed.push(name.to_string());
        }
    }
    removed
}
