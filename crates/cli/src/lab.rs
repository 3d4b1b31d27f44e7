//! `intscope lab`: the demo on real packets. A leaf-spine fabric of network namespaces joined by
//! veth pairs with kernel routing (ECMP over the spines by the L4 hash), intscope's eBPF agent in
//! the routers and hosts (INT-XD postcards, or the INT-MD / INT-MX data path), real TCP and UDP
//! flows from a built-in generator, scripted faults the kernel offers (a slow port, an incast, a
//! link down, a routing miss, a small MTU, a silent loss, a loop, a spine without INT), a
//! collector and its console in this process, and at the end the ground truth (what the lab did) scored against the collector's
//! incidents. docs/lab.md.

mod net;
mod score;
mod traffic;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use intscope_core::PostcardConfig;
use intscope_sim::scenario::TimedFault;
use intscope_sim::{Fault, Scenario};

use crate::usage::bail_usage;
use net::{COLLECTOR_IP, Net, Node, Shape};
use score::{FaultTruth, FlowTruth, NodeTruth, Place, Tolerance, Truth};
use traffic::FlowPlan;

/// The lab's INT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LabMode {
    /// INT-XD: postcards from every router and host (one agent for all namespaces).
    Xd,
    /// INT-MD: source at the leaves' uplinks, transit at the spines and the leaves' host
    /// ports, sink at the receiving host; drop reports from every router.
    Md,
    /// INT-MX: as MD, each hop reporting.
    Mx,
    /// No INT at all: the same fabric, traffic and faults, the baseline for goodput.
    None,
}

impl LabMode {
    fn label(self) -> &'static str {
        match self {
            LabMode::Xd => "xd",
            LabMode::Md => "md",
            LabMode::Mx => "mx",
            LabMode::None => "none",
        }
    }
}

/// Arguments of `intscope lab`.
#[derive(Debug, clap::Args)]
pub struct LabArgs {
    /// Lab file: the simulator's format (`[topology]` leaves, spines, hosts_per_leaf; flows,
    /// seed, `[mix]`, `[[fault]]` of kinds slow-port, link-down, routing-miss, small-mtu, loop,
    /// non-int-spine) plus an optional `[lab]` table (`[[lab.flow]]`: explicit flows). Default:
    /// 2 leaves, 2 spines, 2 hosts per leaf, a slow port, a link down and a routing miss
    /// (examples/lab-small.toml; docs/lab.md).
    #[arg(long, value_name = "FILE.toml")]
    pub topology: Option<PathBuf>,
    /// INT of the lab (`none`: the same lab without INT, for comparison).
    #[arg(long, value_enum, default_value_t = LabMode::Xd)]
    pub mode: LabMode,
    /// Seconds of traffic (faults count from its start).
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Keep serving the collector's API and console after the lab ends, until Ctrl-C.
    #[arg(long)]
    pub serve: bool,
    /// HTTP address of the collector's API and console.
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8080",
        value_parser = crate::usage::host_port
    )]
    pub http: SocketAddr,
    /// Where the ground truth goes (JSON: nodes, faults with times and places, flows with their
    /// goodput, the score).
    #[arg(long, value_name = "FILE.json", default_value = "lab-truth.json")]
    pub truth: PathBuf,
    /// Collector settings (`intscope collect --config` format); default: the settings for
    /// software hosts in docs/lab.md.
    #[arg(long, value_name = "COLLECTOR.toml")]
    pub collector_config: Option<PathBuf>,
    /// Score a lab's ground truth (RESULT.json) against a running collector's incidents
    /// (`--api`) instead of running a lab; exits 1 unless every fault was raised in time and no
    /// incident is false.
    #[arg(long, value_name = "RESULT.json")]
    pub score: Option<PathBuf>,
    /// The collector whose incidents `--score` reads.
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8080",
        value_parser = crate::usage::host_port,
        requires = "score"
    )]
    pub api: SocketAddr,
    /// The API's access control, TLS and limits, as for `intscope collect` (off loopback the
    /// API needs a token or --insecure-no-auth); with `--score`, the token is sent.
    #[command(flatten)]
    pub access: crate::collect::ApiArgs,
}

/// The collector's thresholds for software routers and hosts (docs/agent.md, "Collector
/// settings for hosts"): a host's residence times jitter by tens to a hundred microseconds, its
/// queues are counted in bytes. A lab puts a whole fabric's routers on one machine, where a
/// busy scheduler holds a packet 2.7-3.7 ms now and then: latency counts from 5 ms over the
/// port's baseline (the lab's slow port adds up to 100 ms), and only once it lasts 20 ms (a
/// stall's held packets leave together).
const COLLECTOR_TOML: &str = "[detect]\nlatency_min_excess_ns = 5000000\nlatency_confirm_ns = 20000000\n\
    congestion_start = 16384\ncongestion_end = 8192\n";

/// The report port on the management network.
const REPORT_PORT: u16 = 32766;

/// The lab's `[lab]` table.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LabTable {
    /// Explicit flows (instead of the simulator's mix).
    flow: Vec<LabFlow>,
    /// The line rate of the leaves' ports to their hosts, Mb/s (default 1000; 0: the veth's
    /// own speed, no queue).
    host_port_mbps: Option<f64>,
}

/// The leaves' ports to their hosts unless `[lab] host_port_mbps` says otherwise: 1 GbE.
const HOST_PORT_MBPS: f64 = 1000.0;

/// Most datagrams each sender of an incast sends.
const MAX_INCAST_PACKETS: u32 = 100_000;

/// One explicit flow.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LabFlow {
    /// Sender (`10.0.<leaf>.<host>`).
    src: std::net::Ipv4Addr,
    /// Receiver.
    dst: std::net::Ipv4Addr,
    /// `tcp` or `udp`.
    proto: String,
    /// Rate, Mb/s.
    mbps: f64,
    /// Bytes per write or datagram (default 1400).
    #[serde(default)]
    size: Option<usize>,
}

/// The built-in lab: 2 leaves, 2 spines, 2 hosts per leaf, and one fault of each kind.
const DEFAULT_LAB: &str = include_str!("../../../examples/lab-small.toml");

/// Most flows a lab runs (two threads each).
const MAX_FLOWS: usize = 256;

fn parse_lab(text: &str, origin: &str) -> Result<(Scenario, LabTable)> {
    let mut value: toml::Table = toml::from_str(text).with_context(|| origin.to_string())?;
    let lab = match value.remove("lab") {
        Some(v) => v.try_into().with_context(|| format!("{origin}: [lab]"))?,
        None => LabTable::default(),
    };
    // Without `[[fault]]` a lab has no faults (the simulator's default timeline holds kinds the
    // lab does not apply).
    value
        .entry("fault")
        .or_insert_with(|| toml::Value::Array(Vec::new()));
    let scenario: Scenario = toml::Value::Table(value)
        .try_into()
        .with_context(|| origin.to_string())?;
    Ok((scenario, lab))
}

/// The leaf and host of a lab address.
fn locate(ip: std::net::Ipv4Addr, shape: Shape) -> Option<(u32, u32)> {
    intscope_sim::topology::locate(ip)
        .filter(|&(l, h)| l <= shape.leaves && h <= shape.hosts && h != 254)
}

/// The flows to run, checked against the fabric.
fn plans(sc: &Scenario, lab: &LabTable, shape: Shape, net: &Net) -> Result<Vec<FlowPlan>> {
    let mut out = Vec::new();
    let ns = |ip| locate(ip, shape).map(|(l, h)| net.ns_path(Node::Host(l, h)));
    if lab.flow.is_empty() {
        let flows = intscope_sim::mix(&sc.topology, sc.flows, sc.seed, u64::MAX, &sc.mix);
        for f in flows {
            let (src, dst) = (f.src, f.dst);
            let (Some(src_ns), Some(dst_ns)) = (ns(src), ns(dst)) else {
                continue;
            };
            let id = out.len();
            out.push(FlowPlan {
                id,
                src_ns,
                dst_ns,
                src,
                dst,
                proto: f.proto,
                dst_port: 5000 + id as u16,
                rate_bps: f.pps * f.size as f64 * 8.0,
                size: f.size,
                elephant: f.size >= 1400,
            });
        }
    } else {
        for f in &lab.flow {
            let (Some(src_ns), Some(dst_ns)) = (ns(f.src), ns(f.dst)) else {
                bail_usage!(
                    "[[lab.flow]] {} -> {}: both ends must be hosts of the topology \
                     (10.0.<leaf>.<host>)",
                    f.src,
                    f.dst
                );
            };
            if f.src == f.dst {
                bail_usage!(
                    "[[lab.flow]] {} -> {}: a flow between two hosts",
                    f.src,
                    f.dst
                );
            }
            let proto = match f.proto.as_str() {
                "tcp" => 6,
                "udp" => 17,
                other => bail_usage!("[[lab.flow]] proto {other:?}: expected tcp or udp"),
            };
            if !(f.mbps.is_finite() && f.mbps > 0.0 && f.mbps <= 10_000.0) {
                bail_usage!("[[lab.flow]] mbps {}: 0 to 10000", f.mbps);
            }
            let size = f.size.unwrap_or(1400);
            // UDP within one 1500-byte packet (fragments carry no INT); TCP writes of any size
            // up to 64 KiB (the kernel segments them).
            let most = if proto == 17 { 1472 } else { 65536 };
            if !(1..=most).contains(&size) {
                bail_usage!(
                    "[[lab.flow]] size {size}: 1 to {most} bytes for {}",
                    f.proto
                );
            }
            let id = out.len();
            out.push(FlowPlan {
                id,
                src_ns,
                dst_ns,
                src: f.src,
                dst: f.dst,
                proto,
                dst_port: 5000 + id as u16,
                rate_bps: f.mbps * 1e6,
                size,
                elephant: f.mbps >= 10.0,
            });
        }
    }
    if out.len() > MAX_FLOWS {
        bail_usage!("{} flows: a lab runs at most {MAX_FLOWS}", out.len());
    }
    Ok(out)
}

/// Checks a fault against the fabric: the kinds the lab applies, at places that exist.
fn check_fault(f: &Fault, shape: Shape, int_roles: bool) -> Result<()> {
    let leaf = |l: u32| (1..=shape.leaves).contains(&l);
    let spine = |s: u32| (1..=shape.spines).contains(&s);
    let ok = match *f {
        Fault::SlowPort {
            leaf: l,
            host,
            gbps,
        } => leaf(l) && (1..=shape.hosts).contains(&host) && gbps.is_finite() && gbps > 0.0,
        Fault::LinkDown { leaf: l, spine: s } => leaf(l) && spine(s) && shape.spines >= 2,
        Fault::RoutingMiss { leaf: l, dst_leaf } => leaf(l) && leaf(dst_leaf) && l != dst_leaf,
        Fault::SmallMtu { spine: s, mtu } => spine(s) && (576..=1500).contains(&mtu),
        Fault::Loop {
            spine: s,
            leaf: l,
            dst_leaf,
        } => spine(s) && leaf(l) && leaf(dst_leaf) && l != dst_leaf,
        Fault::Incast {
            leaf: l,
            host,
            packets,
        } => {
            leaf(l)
                && (1..=shape.hosts).contains(&host)
                && shape.leaves >= 2
                && (1..=MAX_INCAST_PACKETS).contains(&packets)
        }
        Fault::SilentDrop {
            leaf: l,
            spine: s,
            share,
        } => leaf(l) && spine(s) && share > 0.0 && share <= 1.0,
        Fault::NonIntSpine { spine: s } => {
            if !int_roles {
                bail_usage!(
                    "fault {f:?}: a spine without INT needs --mode md or mx (in XD one agent \
                     watches every namespace)"
                );
            }
            spine(s)
        }
        Fault::ReportOutage { .. } => bail_usage!(
            "fault {f:?}: the lab applies slow-port, incast, link-down, routing-miss, small-mtu, \
             silent-drop, loop and non-int-spine (docs/lab.md); its reports travel a bridge \
             that never fails"
        ),
    };
    if !ok {
        bail_usage!(
            "fault {f:?}: not a place of this fabric ({} leaves, {} spines, {} hosts per leaf; \
             a link down needs two spines, a slow port a positive gbps, a small MTU 576-1500, \
             an incast two leaves and 1-{MAX_INCAST_PACKETS} packets, a silent drop a share \
             above 0 and at most 1)",
            shape.leaves,
            shape.spines,
            shape.hosts
        );
    }
    Ok(())
}

/// Where a fault may be seen: node IDs (and the port where one is meant).
fn places(f: &Fault, net: &Net) -> Result<Vec<Place>> {
    Ok(match *f {
        // The queue of the leaf's port to the host.
        Fault::SlowPort { leaf, host, .. } | Fault::Incast { leaf, host, .. } => vec![Place {
            node: Node::Leaf(leaf).id(),
            port: Some(net.ifindex(Node::Leaf(leaf), &format!("h{host}"))?),
        }],
        // The link's two ends, and the other leaves' ports towards the spine (their flows to
        // this leaf move off it).
        Fault::LinkDown { leaf, spine } => {
            let mut out = vec![
                Place {
                    node: Node::Leaf(leaf).id(),
                    port: None,
                },
                Place {
                    node: Node::Spine(spine).id(),
                    port: None,
                },
            ];
            for l in (1..=net.shape.leaves).filter(|&l| l != leaf) {
                out.push(Place {
                    node: Node::Leaf(l).id(),
                    port: Some(net.ifindex(Node::Leaf(l), &format!("s{spine}"))?),
                });
            }
            out
        }
        Fault::RoutingMiss { leaf, .. } => vec![Place {
            node: Node::Leaf(leaf).id(),
            port: None,
        }],
        // The spine, and the leaves that refuse packets too big for its links (placed at the
        // ports they came in by).
        Fault::SmallMtu { spine, .. } => {
            let mut out = vec![Place {
                node: Node::Spine(spine).id(),
                port: None,
            }];
            out.extend((1..=net.shape.leaves).map(|l| Place {
                node: Node::Leaf(l).id(),
                port: None,
            }));
            out
        }
        // The spine, or the hop before it (a hop without INT is placed at the last hop that
        // recorded, when the links do not name the next).
        Fault::NonIntSpine { spine } => {
            let mut out = vec![Place {
                node: Node::Spine(spine).id(),
                port: None,
            }];
            for l in 1..=net.shape.leaves {
                out.push(Place {
                    node: Node::Leaf(l).id(),
                    port: Some(net.ifindex(Node::Leaf(l), &format!("s{spine}"))?),
                });
            }
            out
        }
        Fault::Loop { spine, leaf, .. } => vec![
            Place {
                node: Node::Spine(spine).id(),
                port: None,
            },
            Place {
                node: Node::Leaf(leaf).id(),
                port: None,
            },
        ],
        // Either end of the cable (as a link down's): the one whose reports outlive the
        // other's, or the node the packets vanish into.
        Fault::SilentDrop { leaf, spine, .. } => vec![
            Place {
                node: Node::Leaf(leaf).id(),
                port: None,
            },
            Place {
                node: Node::Spine(spine).id(),
                port: None,
            },
        ],
        Fault::ReportOutage { .. } => Vec::new(),
    })
}

/// Whether INT in `mode` can show fault `f` at all: a silent loss leaves no trace in INT-MD,
/// whose only report comes from past the loss, nor in any mode while some of a flow's packets
/// still cross (the collector judges a flow's silence, not its loss rate: docs/detection.md),
/// nor before the collector's silent-drop window (`silent_drop_ns`, and a report interval for
/// the last reports to come in) has passed.
fn visible(f: &TimedFault, mode: LabMode, postcards: &PostcardConfig) -> bool {
    match f.fault {
        Fault::SilentDrop { share, .. } => {
            let confirm_s = (postcards.silent_drop_ns + postcards.report_interval_ns) as f64 / 1e9;
            matches!(mode, LabMode::Xd | LabMode::Mx)
                && share >= 1.0
                && f.until_s - f.from_s >= confirm_s
        }
        _ => mode != LabMode::None,
    }
}

/// Whether fault `f` lies on flow `p`'s path, either way (a TCP flow's ACKs come back).
fn affects(f: &Fault, p: &FlowPlan, shape: Shape) -> bool {
    let (Some((sl, sh)), Some((dl, dh))) = (locate(p.src, shape), locate(p.dst, shape)) else {
        return false;
    };
    match *f {
        Fault::SlowPort { leaf, host, .. } => (sl, sh) == (leaf, host) || (dl, dh) == (leaf, host),
        // Its burst shares the port to the host with the host's other arrivals.
        Fault::Incast { leaf, host, .. } => (dl, dh) == (leaf, host),
        Fault::LinkDown { leaf, .. } | Fault::SilentDrop { leaf, .. } => {
            sl != dl && (sl == leaf || dl == leaf)
        }
        Fault::RoutingMiss { leaf, dst_leaf } => {
            (sl, dl) == (leaf, dst_leaf) || (p.proto == 6 && (dl, sl) == (leaf, dst_leaf))
        }
        // Any flow between leaves may cross the spine.
        Fault::SmallMtu { .. } | Fault::NonIntSpine { .. } => sl != dl,
        Fault::Loop { dst_leaf, .. } => {
            (dl == dst_leaf && sl != dl) || (p.proto == 6 && sl == dst_leaf && sl != dl)
        }
        Fault::ReportOutage { .. } => false,
    }
}

/// What the faults in force hold, by their index in the script: an incast's receiver, a silent
/// loss's programs.
#[derive(Default)]
struct Held {
    incasts: std::collections::BTreeMap<usize, traffic::Incast>,
    losses: std::collections::BTreeMap<usize, Vec<LossAt>>,
    /// Packets each silent loss lost, or each loop's routers let expire, once undone: a fault
    /// that took none had nothing to show (no flow was hashed onto its link or spine).
    lost: std::collections::BTreeMap<usize, u64>,
    /// Each loop's routers' expired packets when it began.
    expired_before: std::collections::BTreeMap<usize, u64>,
}

/// A silent loss attached in a namespace. Detached there when dropped: its tc filter is named
/// by an interface index, which means another device in any other namespace.
struct LossAt {
    ns: String,
    iface: String,
    loss: Option<intscope_agent::loss::SilentLoss>,
}

impl LossAt {
    fn attach(ns: String, iface: String, share: f64) -> Result<LossAt> {
        let loss = in_namespace(&ns, || {
            intscope_agent::loss::SilentLoss::attach(&iface, share)
                .with_context(|| format!("a silent loss at {iface} in {ns}"))
        })?;
        Ok(LossAt {
            ns,
            iface,
            loss: Some(loss),
        })
    }

    /// Detaches it; the packets it saw and lost.
    fn detach(mut self) -> (u64, u64) {
        self.take()
    }

    fn take(&mut self) -> (u64, u64) {
        let Some(loss) = self.loss.take() else {
            return (0, 0);
        };
        let ns = self.ns.clone();
        let detached = std::thread::scope(|s| {
            s.spawn(move || {
                match traffic::enter(&ns) {
                    Ok(()) => {
                        let counts = loss.counts().unwrap_or((0, 0));
                        drop(loss);
                        Ok(counts)
                    }
                    // Outside its namespace a detach would name another device by the same
                    // index: the filter is left to go with its namespace.
                    Err(e) => {
                        std::mem::forget(loss);
                        Err(e)
                    }
                }
            })
            .join()
        });
        match detached {
            Ok(Ok(counts)) => counts,
            Ok(Err(e)) => {
                tracing::warn!(
                    "the silent loss at {} in {} left attached: {e:#}",
                    self.iface,
                    self.ns
                );
                (0, 0)
            }
            Err(_) => (0, 0),
        }
    }
}

impl Drop for LossAt {
    fn drop(&mut self) {
        self.take();
    }
}

/// Runs `f` on a thread that entered namespace `ns` (a path under /run/netns).
fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            traffic::enter(ns)?;
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("a thread in namespace {ns} panicked"))?
    })
}

/// Applies (`on`) or undoes fault `i` of the script, `f`; says what it did.
fn apply(
    (i, f): (usize, &Fault),
    net: &mut Net,
    on: bool,
    agents: &mut Agents,
    held: &mut Held,
) -> Result<String> {
    Ok(match *f {
        Fault::SlowPort { leaf, host, gbps } => {
            net.slow_port(leaf, host, on.then_some(gbps * 1000.0))?;
            format!(
                "slow port: leaf{leaf}'s port h{host} (to host{leaf}-{host}) at {} Mb/s \
                 (tc tbf, 100 ms of queue)",
                gbps * 1000.0
            )
        }
        Fault::LinkDown { leaf, spine } => {
            net.link(leaf, spine, !on)?;
            format!(
                "link down: leaf{leaf} s{spine} - spine{spine} lf{leaf} (ip link set down; the \
                 other leaves' routes to leaf{leaf} leave spine{spine})"
            )
        }
        Fault::RoutingMiss { leaf, dst_leaf } => {
            net.route(leaf, dst_leaf, !on)?;
            format!("routing miss: leaf{leaf}'s route to 10.0.{dst_leaf}.0/24 deleted")
        }
        Fault::SmallMtu { spine, mtu } => {
            net.spine_mtu(spine, on.then_some(mtu as u32))?;
            format!("small MTU: spine{spine}'s ports to the leaves at {mtu} bytes")
        }
        Fault::Loop {
            spine,
            leaf,
            dst_leaf,
        } => {
            let routers = [Node::Spine(spine), Node::Leaf(leaf)];
            let expired =
                |net: &Net| -> Result<u64> { routers.iter().map(|&n| net.ttl_expired(n)).sum() };
            let how = format!(
                "loop: spine{spine} sends 10.0.{dst_leaf}.0/24 to leaf{leaf}, which sends it back"
            );
            if on {
                held.expired_before.insert(i, expired(net)?);
                net.looping(spine, leaf, dst_leaf, on)?;
                how
            } else {
                net.looping(spine, leaf, dst_leaf, on)?;
                let before = held.expired_before.remove(&i).unwrap_or(0);
                let n = expired(net)?.saturating_sub(before);
                held.lost.insert(i, n);
                format!("{how}: {n} packets' TTL ran out there")
            }
        }
        Fault::Incast {
            leaf,
            host,
            packets,
        } => {
            let dst = net::host_ip(leaf, host);
            let name = Node::Host(leaf, host).name();
            if on {
                let senders: Vec<String> = net
                    .shape
                    .nodes()
                    .into_iter()
                    .filter(|n| matches!(n, Node::Host(l, _) if *l != leaf))
                    .map(|n| net.ns_path(n))
                    .collect();
                let receiver = net.ns_path(Node::Host(leaf, host));
                let burst = traffic::incast(&senders, &receiver, dst, packets)?;
                let what = format!(
                    "incast: {} hosts of the other leaves sent {packets} datagrams of 1400 bytes \
                     each at once to {name} ({dst}:{}): {} sent, {} refused by their kernels",
                    senders.len(),
                    traffic::INCAST_PORT,
                    burst.sent,
                    burst.errors
                );
                held.incasts.insert(i, burst);
                what
            } else {
                let (sent, errors) = held.incasts.get(&i).map_or((0, 0), |b| (b.sent, b.errors));
                let received = held.incasts.remove(&i).map_or(0, traffic::Incast::finish);
                format!(
                    "incast: {packets} datagrams of 1400 bytes from each host of the other leaves \
                     at once to {name} ({dst}:{}): {sent} sent, {errors} refused by their \
                     kernels, {received} received",
                    traffic::INCAST_PORT
                )
            }
        }
        Fault::SilentDrop { leaf, spine, share } => {
            let ends = [
                (Node::Leaf(leaf), format!("s{spine}")),
                (Node::Spine(spine), format!("lf{leaf}")),
            ];
            let how = format!(
                "silent loss: {}% of the packets arriving at leaf{leaf} s{spine} and at \
                 spine{spine} lf{leaf} stolen by a tc program (no drop the kernel reports)",
                share * 100.0
            );
            if on {
                let mut at = Vec::new();
                for (node, iface) in ends {
                    at.push(LossAt::attach(net.ns_path(node), iface, share)?);
                }
                held.losses.insert(i, at);
                how
            } else {
                let (mut seen, mut lost) = (0, 0);
                for l in held.losses.remove(&i).unwrap_or_default() {
                    let (s, l) = l.detach();
                    seen += s;
                    lost += l;
                }
                held.lost.insert(i, lost);
                format!("{how}: {lost} of {seen} lost")
            }
        }
        Fault::NonIntSpine { spine } => {
            let name = Node::Spine(spine).name();
            if on {
                agents.stop_one(&name);
            } else {
                agents.restart(&name)?;
            }
            format!("spine without INT: spine{spine}'s agent stopped (its programs detached)")
        }
        Fault::ReportOutage { .. } => bail!("fault {f:?}: the lab does not apply it"),
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// `GET path` of an HTTP API (the collector's), as JSON.
fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> Result<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("cannot reach the collector's API at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("{addr}{path}: not an HTTP response"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{addr}{path}: {}",
            head.lines().next().unwrap_or("no status")
        );
    }
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    serde_json::from_str(&body).with_context(|| format!("{addr}{path}: not JSON"))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Every incident of the collector at `addr` (all pages).
fn incidents(addr: SocketAddr, token: Option<&str>) -> Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded: 64 pages of 1000.
    for _ in 0..64 {
        let path = match &cursor {
            Some(c) => format!("/api/incidents?limit=1000&cursor={c}"),
            None => "/api/incidents?limit=1000".to_string(),
        };
        let page = http_get(addr, &path, token)?;
        out.extend(page["incidents"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
            _ => break,
        }
    }
    Ok(out)
}

/// The API token of `--api-token-file`, if given.
fn token(args: &LabArgs) -> Result<Option<String>> {
    args.access
        .api_token_file
        .as_ref()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| t.trim().to_string())
                .with_context(|| format!("cannot read the API token file {}", p.display()))
        })
        .transpose()
}

/// Runs `intscope lab`.
pub fn run(args: &LabArgs) -> Result<()> {
    let token = token(args)?;
    if let Some(path) = &args.score {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let truth: Truth = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a lab's ground truth", path.display()))?;
        let s = score::score(
            &truth,
            &incidents(args.api, token.as_deref())?,
            Tolerance::default(),
        );
        println!("{}", serde_json::to_string(&s)?);
        if !s.ok {
            bail!(
                "the lab's score: {} of {} faults not raised in time, {} false incidents",
                s.faults.iter().filter(|f| !f.in_time && f.visible).count(),
                s.faults.len(),
                s.false_incidents.len()
            );
        }
        return Ok(());
    }
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 3600.0) {
        bail_usage!("--duration must be between 0 and 3600 seconds");
    }
    let (sc, lab) = match &args.topology {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            parse_lab(&text, &p.display().to_string())
                .map_err(|e| crate::usage::usage(format!("{e:#}")))?
        }
        None => parse_lab(DEFAULT_LAB, "the built-in lab")?,
    };
    if sc.switch_clock_offset_s != 0.0 {
        bail_usage!(
            "switch_clock_offset_s: the lab's nodes stamp the kernel's clock, the collector's; \
             it sets the simulated switches' clocks (demo, sim) only"
        );
    }
    let shape = Shape {
        leaves: sc.topology.leaves,
        spines: sc.topology.spines,
        hosts: sc.topology.hosts_per_leaf,
    };
    shape
        .check()
        .map_err(|e| crate::usage::usage(e.to_string()))?;
    // The simulator's timeline: the script repeated every `period_s`, random faults added.
    let script: Vec<TimedFault> = sc
        .schedule(args.duration)
        .into_iter()
        .map(|s| TimedFault {
            from_s: s.from_ns as f64 / 1e9,
            until_s: s.until_ns as f64 / 1e9,
            fault: s.fault,
        })
        .collect();
    for f in &script {
        check_fault(
            &f.fault,
            shape,
            matches!(args.mode, LabMode::Md | LabMode::Mx),
        )?;
        if !(f.from_s >= 0.0 && f.until_s > f.from_s) {
            bail_usage!(
                "fault {:?}: from_s must be at least 0 and until_s after it",
                f.fault
            );
        }
    }
    let collector_toml = match &args.collector_config {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?
        }
        None => COLLECTOR_TOML.to_string(),
    };
    let mut cfg: intscope_collector::hub::CollectorConfig =
        toml::from_str(&collector_toml).context("the collector's settings")?;
    // The console names the nodes as the lab names its namespaces.
    cfg.names = Arc::new(intscope_collector::names::NodeNames::from_pairs(
        sc.topology.node_names(),
    )?);
    if !is_root() {
        bail!("intscope lab needs root: it creates network namespaces and loads BPF programs");
    }
    let api_cfg = crate::collect::api_config(&args.access, args.http)?;
    let exe = std::env::current_exe().context("finding this program")?;
    // Bound before anything is built: a port in use stops the lab with nothing to undo.
    let std_listener = std::net::TcpListener::bind(args.http)
        .with_context(|| format!("cannot bind the HTTP API to {}", args.http))?;
    std_listener.set_nonblocking(true)?;
    let _agent_files = TempDir(agents_dir(std::process::id()));

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).context("signal handler")?;
    }
    let stale = net::remove_stale();
    for ns in &stale {
        // A killed lab's history store and agent files too.
        if let Some(pid) = ns
            .strip_prefix(net::PREFIX)
            .and_then(|r| r.split_once('-'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        {
            let _ = std::fs::remove_dir_all(agents_dir(pid));
            let _ =
                std::fs::remove_dir_all(std::env::temp_dir().join(format!("intscope-lab-{pid}")));
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "intscope lab: removed what a killed lab left: {} namespaces ({})",
            stale.len(),
            stale.join(" ")
        );
    }

    let host_port_mbps = lab.host_port_mbps.unwrap_or(HOST_PORT_MBPS);
    if !(host_port_mbps.is_finite() && (0.0..=100_000.0).contains(&host_port_mbps)) {
        bail_usage!("[lab] host_port_mbps {host_port_mbps}: 0 (no limit) to 100000");
    }
    let mut net = Net::new(shape);
    net.host_port_mbps = (host_port_mbps > 0.0).then_some(host_port_mbps);
    net.build().context("building the fabric")?;
    if stop.load(Ordering::Relaxed) {
        bail!("stopped while building the fabric (removed)");
    }
    let flows = plans(&sc, &lab, shape, &net)?;
    let mut nodes = Vec::new();
    for n in shape.nodes() {
        let devs: Vec<String> = match n {
            Node::Leaf(_) => (1..=shape.hosts)
                .map(|h| format!("h{h}"))
                .chain((1..=shape.spines).map(|s| format!("s{s}")))
                .collect(),
            Node::Spine(_) => (1..=shape.leaves).map(|l| format!("lf{l}")).collect(),
            Node::Host(..) => vec!["eth0".into()],
        };
        let mut ports = std::collections::BTreeMap::new();
        for d in devs {
            ports.insert(d.clone(), net.ifindex(n, &d)?);
        }
        nodes.push(NodeTruth {
            name: n.name(),
            id: n.id(),
            namespace: net.ns(n),
            ports,
        });
    }
    let mut faults = Vec::new();
    for f in &script {
        faults.push(FaultTruth {
            fault: serde_json::to_value(&f.fault)?,
            what: format!(
                "{} at {:.1}-{:.1} s (not applied: the lab ended first)",
                serde_json::to_value(&f.fault)?["kind"]
                    .as_str()
                    .unwrap_or("fault"),
                f.from_s,
                f.until_s
            ),
            from_s: f.from_s,
            until_s: f.until_s,
            start_ns: None,
            end_ns: None,
            places: places(&f.fault, &net)?,
            visible: visible(f, args.mode, &cfg.detect.postcards),
        });
    }

    // The collector: reports received in the management namespace, the API here.
    let data = std::env::temp_dir().join(format!("intscope-lab-{}", std::process::id()));
    let _history = TempDir(data.clone());
    cfg.listen = vec![SocketAddr::from(([0, 0, 0, 0], REPORT_PORT))];
    cfg.http = args.http;
    if cfg.int_udp_ports.is_empty() {
        cfg.int_udp_ports = vec![17768];
    }
    cfg.data = Some(data.clone());
    let collector =
        intscope_collector::hub::Collector::open(cfg).context("opening the history store")?;
    let store = collector.start_store();
    let receivers = {
        let c = Arc::clone(&collector);
        let mg = format!("/run/netns/{}", net.mg());
        std::thread::Builder::new()
            .name("lab-mg".into())
            .spawn(move || -> Result<Vec<std::thread::JoinHandle<()>>> {
                let f = std::fs::File::open(&mg).with_context(|| mg.clone())?;
                nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
                    .context("entering the management namespace")?;
                let (_, handles) = intscope_collector::ingest::recv::spawn_receivers(&c)
                    .context("cannot open the report socket")?;
                Ok(handles)
            })
            .context("starting the collector")?
            .join()
            .map_err(|_| anyhow::anyhow!("the collector's start panicked"))??
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = {
        let _runtime = rt.enter();
        tokio::net::TcpListener::from_std(std_listener).context("the HTTP API's socket")?
    };
    let http = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(intscope_collector::api::serve_with(
        listener,
        intscope_collector::api::Api::new(Arc::clone(&collector), api_cfg),
        async {
            let _ = rx.await;
        },
    ));
    eprintln!(
        "intscope lab: a {}-leaf, {}-spine fabric with {} hosts in namespaces {}*, INT {}; \
         collector API and console on http://{http}/",
        shape.leaves,
        shape.spines,
        shape.leaves * shape.hosts,
        net.prefix,
        args.mode.label()
    );
    eprintln!(
        "intscope lab: node IDs: leaves 1-{}, spines 101-{}, host h of leaf l 1000*l+h",
        shape.leaves,
        100 + shape.spines
    );

    let result = run_lab(args, &script, &exe, &mut net, &flows, &mut faults, &stop);
    let (truth_parts, agents) = match result {
        Ok(x) => x,
        Err(e) => {
            net.remove();
            let _ = tx.send(());
            let _ = rt.block_on(server);
            collector.stop();
            for h in receivers {
                let _ = h.join();
            }
            if let Some(s) = store {
                s.finish();
            }
            return Err(e);
        }
    };
    let (started_ns, ended_ns, flow_truth) = truth_parts;
    let truth = Truth {
        mode: args.mode.label().into(),
        started_ns,
        ended_ns,
        nodes,
        faults,
        flows: flow_truth,
    };
    // Scored once the collector has gathered what the last reports showed (a path change is
    // placed a second after it is seen).
    let all = incidents(http, token.as_deref())?;
    let s = score::score(&truth, &all, Tolerance::default());
    let mut out = serde_json::to_value(&truth)?;
    out["score"] = serde_json::to_value(&s)?;
    out["agents"] = agents;
    out["incidents"] = serde_json::Value::Array(all.clone());
    std::fs::write(&args.truth, serde_json::to_string_pretty(&out)?)
        .with_context(|| format!("cannot write {}", args.truth.display()))?;
    net.remove();
    for f in &s.faults {
        eprintln!(
            "intscope lab: {}: {}",
            f.what,
            match f.delay_s {
                Some(d) => format!(
                    "raised {d:+.3} s after its start{} as {} incident(s) ({}){}",
                    match f.earliest_s {
                        Some(e) if d - e > 0.5 => format!(" (dated back to {e:+.3} s)"),
                        _ => String::new(),
                    },
                    f.incidents.len(),
                    f.kinds.join(", "),
                    if f.in_time { "" } else { " — late" }
                ),
                None if f.visible => "not raised".into(),
                None => format!("not raised (INT {} cannot show it)", truth.mode),
            }
        );
    }
    eprintln!(
        "intscope lab: {} incidents, {} that no fault explains; ground truth and score in {}",
        all.len(),
        s.false_incidents.len(),
        args.truth.display()
    );
    println!(
        "{}",
        serde_json::json!({"mode": truth.mode, "ok": s.ok, "exact": s.exact,
            "faults": s.faults, "false_incidents": s.false_incidents.len(),
            "incidents": all.len(), "truth": args.truth})
    );
    if args.serve {
        eprintln!("intscope lab: the fabric is gone; still serving http://{http}/ until Ctrl-C");
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let _ = tx.send(());
    let _ = rt.block_on(server);
    collector.stop();
    for h in receivers {
        let _ = h.join();
    }
    if let Some(s) = store {
        s.finish();
    }
    Ok(())
}

/// A child process (an agent) in a namespace, its stderr kept (the last lines) for a message.
struct Agent {
    name: String,
    ns: String,
    args: Vec<String>,
    child: Child,
    said: Arc<Mutex<Vec<String>>>,
    attached: std::sync::mpsc::Receiver<()>,
}

/// Starts `intscope agent args` in namespace `ns` and waits for it to attach. Started through
/// `setpriv --pdeathsig TERM` where there is one, so that it ends with the lab even when the lab
/// is killed; else the next lab ends it (its namespace is stale).
fn spawn_agent(exe: &std::path::Path, ns: &str, name: &str, args: &[String]) -> Result<Agent> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]);
    if Command::new("setpriv")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        cmd.args(["setpriv", "--pdeathsig", "TERM", "--"]);
    }
    cmd.arg(exe).arg("agent").args(args);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting an agent")?;
    let stderr = child.stderr.take().context("the agent's stderr")?;
    let said = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let said = Arc::clone(&said);
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("attached")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
                let mut s = said.lock().unwrap_or_else(|e| e.into_inner());
                if s.len() == 20 {
                    s.remove(0);
                }
                s.push(line);
            }
        });
    }
    Ok(Agent {
        name: name.to_string(),
        ns: ns.to_string(),
        args: args.to_vec(),
        child,
        said,
        attached: rx,
    })
}

/// Waits until every agent has attached its programs; stops them all when one does not.
fn wait_attached(agents: Vec<Agent>) -> Result<Vec<Agent>> {
    let until = Instant::now() + Duration::from_secs(30);
    let mut failed = None;
    for a in &agents {
        let left = until.saturating_duration_since(Instant::now());
        if a.attached.recv_timeout(left).is_err() {
            failed = Some(a.name.clone());
            break;
        }
    }
    let Some(name) = failed else {
        return Ok(agents);
    };
    let said: Vec<String> = agents
        .iter()
        .filter(|a| a.name == name)
        .flat_map(|a| a.said.lock().unwrap_or_else(|e| e.into_inner()).clone())
        .collect();
    stop_agents(agents);
    bail!("the agent of {name} did not attach: {}", said.join(" | "))
}

/// Stops agents (SIGTERM) and returns their summaries by name.
fn stop_agents(agents: Vec<Agent>) -> serde_json::Value {
    for a in &agents {
        let _ = net::run("kill", &["-TERM", &a.child.id().to_string()]);
    }
    let mut out = serde_json::Map::new();
    for mut a in agents {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && matches!(a.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = a.child.kill();
        let _ = a.child.wait();
        let mut text = String::new();
        if let Some(mut o) = a.child.stdout.take() {
            let _ = o.read_to_string(&mut text);
        }
        let v = serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null);
        out.insert(a.name, v);
    }
    serde_json::Value::Object(out)
}

/// The agents of `mode` for the fabric in `net`.
fn start_agents(exe: &std::path::Path, mode: LabMode, net: &Net) -> Result<Vec<Agent>> {
    let s = |x: &str| x.to_string();
    let shape = net.shape;
    let dir = agents_dir(std::process::id());
    std::fs::create_dir_all(&dir)?;
    let mut agents = Vec::new();
    let interfaces = ["h*", "s*", "lf*", "eth0"];
    match mode {
        LabMode::None => {}
        LabMode::Xd => {
            // One agent for every namespace: one program run per packet, not one per node.
            let mut args = vec![
                s("--collector"),
                format!("127.0.0.1:{REPORT_PORT}"),
                s("--watch-subnet"),
                s("10.0.0.0/16"),
            ];
            for i in interfaces {
                args.extend([s("--interface"), s(i)]);
            }
            for n in shape.nodes() {
                args.extend([s("--netns"), format!("{}={}", net.ns(n), n.id())]);
            }
            agents.push(spawn_agent(exe, &net.mg(), "xd", &args)?);
        }
        LabMode::Md | LabMode::Mx => {
            let int = dir.join("int.toml");
            std::fs::write(
                &int,
                format!(
                    // NPT 2: INT behind a new UDP header, nothing behind the IP header moved.
                    "mode = \"{}\"\nmtu = {}\ninstructions = 0xf000\nencap = \"udp-new\"\n",
                    mode.label(),
                    net::FABRIC_MTU
                ),
            )?;
            let collector = format!("{COLLECTOR_IP}:{REPORT_PORT}");
            for n in shape.nodes() {
                let mut args = vec![
                    s("--node-id"),
                    n.id().to_string(),
                    s("--collector"),
                    collector.clone(),
                    s("--config"),
                    int.display().to_string(),
                    s("--watch-subnet"),
                    s("10.0.0.0/16"),
                ];
                let mut port = |dev: String, role: &str| {
                    args.extend([s("--int-port"), format!("{dev}={role}")]);
                };
                match n {
                    Node::Leaf(_) => {
                        (1..=shape.spines).for_each(|sp| port(format!("s{sp}"), "source"));
                        (1..=shape.hosts).for_each(|h| port(format!("h{h}"), "transit"));
                    }
                    Node::Spine(_) => {
                        (1..=shape.leaves).for_each(|l| port(format!("lf{l}"), "transit"));
                    }
                    Node::Host(..) => port(s("eth0"), "sink"),
                }
                for i in interfaces {
                    args.extend([s("--interface"), s(i)]);
                }
                agents.push(spawn_agent(exe, &net.ns(n), &n.name(), &args)?);
            }
            // Drop reports, as a switch sends them in every mode: the postcard agent watching
            // nothing (a documentation prefix) but reporting every drop of the routers.
            let drops = dir.join("drops.toml");
            std::fs::write(&drops, "drop_reports = \"all\"\n")?;
            let mut args = vec![
                s("--collector"),
                format!("127.0.0.1:{REPORT_PORT}"),
                s("--config"),
                drops.display().to_string(),
                s("--watch-subnet"),
                s("192.0.2.255/32"),
            ];
            for i in interfaces {
                args.extend([s("--interface"), s(i)]);
            }
            for n in shape.nodes() {
                if !matches!(n, Node::Host(..)) {
                    args.extend([s("--netns"), format!("{}={}", net.ns(n), n.id())]);
                }
            }
            agents.push(spawn_agent(exe, &net.mg(), "drops", &args)?);
        }
    }
    wait_attached(agents)
}

/// A directory removed when this is dropped, on an early return too.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where lab `pid` writes its agents' configuration files.
fn agents_dir(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("intscope-lab-{pid}-agents"))
}

/// The lab's agents, and the summaries of those a fault stopped.
struct Agents {
    exe: PathBuf,
    running: Vec<Agent>,
    /// Name, namespace and arguments of agents a fault stopped, to start them again.
    stopped: Vec<(String, String, Vec<String>)>,
    /// Their summaries.
    summaries: serde_json::Map<String, serde_json::Value>,
}

impl Agents {
    /// Stops agent `name` (a spine without INT): its BPF links go with it.
    fn stop_one(&mut self, name: &str) {
        if let Some(i) = self.running.iter().position(|a| a.name == name) {
            let a = self.running.remove(i);
            self.stopped
                .push((a.name.clone(), a.ns.clone(), a.args.clone()));
            if let serde_json::Value::Object(m) = stop_agents(vec![a]) {
                for (k, v) in m {
                    let n = self.summaries.len();
                    self.summaries
                        .insert(format!("{k} (stopped by a fault, {n})"), v);
                }
            }
        }
    }

    /// Starts agent `name` again with its arguments, once it has attached.
    fn restart(&mut self, name: &str) -> Result<()> {
        let Some(i) = self.stopped.iter().position(|(n, _, _)| n == name) else {
            return Ok(());
        };
        let (name, ns, args) = self.stopped.remove(i);
        let a = spawn_agent(&self.exe, &ns, &name, &args)?;
        self.running.extend(wait_attached(vec![a])?);
        Ok(())
    }

    /// Stops every agent; all the summaries.
    fn stop(self) -> serde_json::Value {
        let mut out = self.summaries;
        if let serde_json::Value::Object(m) = stop_agents(self.running) {
            out.extend(m);
        }
        serde_json::Value::Object(out)
    }
}

type FlowsDone = (u64, u64, Vec<FlowTruth>);

/// Agents, traffic and the fault timeline; the flows' truth and the agents' summaries.
#[allow(clippy::too_many_arguments)]
fn run_lab(
    args: &LabArgs,
    script: &[TimedFault],
    exe: &std::path::Path,
    net: &mut Net,
    flows: &[FlowPlan],
    faults: &mut [FaultTruth],
    stop: &AtomicBool,
) -> Result<(FlowsDone, serde_json::Value)> {
    let mut agents = Agents {
        exe: exe.to_path_buf(),
        running: start_agents(exe, args.mode, net)?,
        stopped: Vec::new(),
        summaries: serde_json::Map::new(),
    };
    // The agents read their interfaces once a second: let the first read pass.
    std::thread::sleep(Duration::from_millis(1200));
    let seconds = args.duration.ceil() as usize + 1;
    let mut traffic = match traffic::start(flows, seconds) {
        Ok(t) => t,
        Err(e) => {
            agents.stop();
            return Err(e);
        }
    };
    let started_ns = intscope_collector::clock::now_ns();
    // The timeline: (time s, fault, on).
    let mut steps: Vec<(f64, usize, bool)> = Vec::new();
    for (i, f) in script.iter().enumerate() {
        if f.from_s < args.duration {
            steps.push((f.from_s, i, true));
            steps.push((f.until_s.min(args.duration), i, false));
        }
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)));
    let end_ms = (args.duration * 1000.0) as u64;
    let bar = ProgressBar::new(end_ms);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} ms of traffic  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut next = 0;
    let mut failure = None;
    let mut active: Vec<usize> = Vec::new();
    let mut held = Held::default();
    loop {
        let t = traffic.start.elapsed().as_secs_f64();
        while next < steps.len() && steps[next].0 <= t {
            let (_, i, on) = steps[next];
            next += 1;
            // A fault takes effect while its commands run (a busy machine's `tc` can take a
            // quarter of a second): it starts when they start, and ends when its undoing ends.
            let before = intscope_collector::clock::now_ns();
            match apply((i, &script[i].fault), net, on, &mut agents, &mut held) {
                Ok(what) => {
                    let now = intscope_collector::clock::now_ns();
                    if on {
                        faults[i].start_ns = Some(before);
                        active.push(i);
                    } else {
                        faults[i].end_ns = Some(now);
                        active.retain(|&a| a != i);
                    }
                    faults[i].what = what.clone();
                    bar.suspend(|| {
                        eprintln!(
                            "intscope lab: {t:6.2} s {} {what}",
                            if on { "start" } else { "end  " }
                        )
                    });
                }
                Err(e) => {
                    failure = Some(e.context(format!("applying fault {i}")));
                    break;
                }
            }
        }
        if failure.is_some() || t >= args.duration || stop.load(Ordering::Relaxed) {
            break;
        }
        bar.set_position((t * 1000.0) as u64);
        bar.set_message(format!(
            "{} flows, {} faults in force",
            flows.len(),
            active.len()
        ));
        std::thread::sleep(Duration::from_millis(20));
    }
    bar.finish_and_clear();
    // Faults still in force are undone before the traffic stops.
    for i in active {
        if let Ok(what) = apply((i, &script[i].fault), net, false, &mut agents, &mut held) {
            faults[i].end_ns = Some(intscope_collector::clock::now_ns());
            faults[i].what = what;
        }
    }
    // A loss on a link, or a loop at a spine, that no flow crossed had nothing to show.
    for (&i, _) in held.lost.iter().filter(|(_, lost)| **lost == 0) {
        faults[i].visible = false;
    }
    let ended_ns = intscope_collector::clock::now_ns();
    let elapsed = traffic.start.elapsed().as_secs_f64();
    traffic.stop();
    if let Some(e) = failure {
        agents.stop();
        return Err(e);
    }
    if stop.load(Ordering::Relaxed) {
        eprintln!("intscope lab: stopped at {elapsed:.1} s");
    }
    // The last reports reach the collector, and a path change is placed a second after it is
    // seen (path_correlation_ns).
    std::thread::sleep(Duration::from_millis(2500));
    let summaries = agents.stop();
    let shape = net.shape;
    let full_seconds = elapsed.floor() as usize;
    let mut out = Vec::new();
    for (p, c) in flows.iter().zip(&traffic.counters) {
        let goodput: Vec<f64> = c
            .received
            .iter()
            .take(full_seconds.max(1))
            .map(|b| b.load(Ordering::Relaxed) as f64 * 8.0)
            .collect();
        let affected_by: Vec<usize> = script
            .iter()
            .enumerate()
            .filter(|(_, f)| affects(&f.fault, p, shape))
            .map(|(i, _)| i)
            .collect();
        // Seconds clear of every fault on the path (and of the second after it).
        let clean: Vec<f64> = goodput
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(i, _)| {
                let (a, b) = (*i as f64, *i as f64 + 1.0);
                affected_by.iter().all(|&f| {
                    let tf = &script[f];
                    b <= tf.from_s || a >= tf.until_s + 1.0
                })
            })
            .map(|(_, g)| *g)
            .collect();
        out.push(FlowTruth {
            flow: serde_json::to_value(p)?,
            sent_bytes: c.sent.load(Ordering::Relaxed),
            received_bytes: c.received.iter().map(|b| b.load(Ordering::Relaxed)).sum(),
            errors: c.errors.load(Ordering::Relaxed),
            connects: c.connects.load(Ordering::Relaxed),
            goodput_bps: goodput,
            affected_by,
            clean_goodput_bps: (!clean.is_empty())
                .then(|| clean.iter().sum::<f64>() / clean.len() as f64),
        });
    }
    Ok(((started_ns, ended_ns, out), summaries))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        leaves: 2,
        spines: 2,
        hosts: 2,
    };

    fn plan(src: [u8; 4], dst: [u8; 4], proto: u8) -> FlowPlan {
        FlowPlan {
            id: 0,
            src_ns: String::new(),
            dst_ns: String::new(),
            src: src.into(),
            dst: dst.into(),
            proto,
            dst_port: 5000,
            rate_bps: 1e6,
            size: 1000,
            elephant: false,
        }
    }

    #[test]
    fn the_built_in_lab_parses_and_a_file_without_faults_has_none() {
        let (sc, lab) = parse_lab(DEFAULT_LAB, "built-in").unwrap();
        assert_eq!((sc.topology.leaves, sc.topology.spines), (2, 2));
        assert_eq!(sc.fault.len(), 3);
        assert_eq!(lab.flow.len(), 5);
        for f in &sc.fault {
            check_fault(&f.fault, SHAPE, false).unwrap();
        }
        let (sc, lab) = parse_lab("[topology]\nleaves = 3\n", "x").unwrap();
        assert!(sc.fault.is_empty() && lab.flow.is_empty());
        assert!(parse_lab("[lab]\nnope = 1\n", "x").is_err());
        let fabric = include_str!("../../../examples/lab-fabric.toml");
        let (sc, _) = parse_lab(fabric, "fabric").unwrap();
        let shape = Shape {
            leaves: 4,
            spines: 2,
            hosts: 4,
        };
        assert_eq!(sc.fault.len(), 8);
        for f in &sc.fault {
            check_fault(&f.fault, shape, true).unwrap();
        }
        let loss = include_str!("../../../examples/lab-loss.toml");
        let (sc, lab) = parse_lab(loss, "loss").unwrap();
        assert_eq!((sc.fault.len(), lab.flow.len()), (2, 8));
        for f in &sc.fault {
            check_fault(&f.fault, SHAPE, false).unwrap();
        }
    }

    #[test]
    fn faults_affect_the_flows_on_their_path_either_way() {
        let slow = Fault::SlowPort {
            leaf: 2,
            host: 2,
            gbps: 0.01,
        };
        assert!(affects(
            &slow,
            &plan([10, 0, 1, 1], [10, 0, 2, 2], 17),
            SHAPE
        ));
        assert!(affects(
            &slow,
            &plan([10, 0, 2, 2], [10, 0, 1, 1], 6),
            SHAPE
        ));
        assert!(!affects(
            &slow,
            &plan([10, 0, 1, 1], [10, 0, 2, 1], 6),
            SHAPE
        ));
        let miss = Fault::RoutingMiss {
            leaf: 2,
            dst_leaf: 1,
        };
        assert!(affects(
            &miss,
            &plan([10, 0, 2, 1], [10, 0, 1, 1], 17),
            SHAPE
        ));
        // A TCP flow the other way loses its ACKs; a UDP one is untouched.
        assert!(affects(
            &miss,
            &plan([10, 0, 1, 1], [10, 0, 2, 1], 6),
            SHAPE
        ));
        assert!(!affects(
            &miss,
            &plan([10, 0, 1, 1], [10, 0, 2, 1], 17),
            SHAPE
        ));
        let down = Fault::LinkDown { leaf: 1, spine: 1 };
        assert!(affects(
            &down,
            &plan([10, 0, 2, 1], [10, 0, 1, 2], 17),
            SHAPE
        ));
        assert!(!affects(
            &down,
            &plan([10, 0, 1, 1], [10, 0, 1, 2], 17),
            SHAPE
        ));
        // An incast shares the port to its host with what arrives there, not with what leaves.
        let incast = Fault::Incast {
            leaf: 2,
            host: 2,
            packets: 100,
        };
        assert!(affects(
            &incast,
            &plan([10, 0, 1, 1], [10, 0, 2, 2], 6),
            SHAPE
        ));
        assert!(!affects(
            &incast,
            &plan([10, 0, 2, 2], [10, 0, 1, 1], 17),
            SHAPE
        ));
        let cut = Fault::SilentDrop {
            leaf: 1,
            spine: 1,
            share: 1.0,
        };
        assert!(affects(
            &cut,
            &plan([10, 0, 2, 1], [10, 0, 1, 2], 17),
            SHAPE
        ));
        assert!(!affects(
            &cut,
            &plan([10, 0, 1, 1], [10, 0, 1, 2], 17),
            SHAPE
        ));
    }

    #[test]
    fn a_silent_loss_is_visible_only_where_int_reports_past_it_in_time() {
        let postcards = PostcardConfig::default();
        let loss = |share: f64, from_s: f64, until_s: f64| TimedFault {
            from_s,
            until_s,
            fault: Fault::SilentDrop {
                leaf: 1,
                spine: 1,
                share,
            },
        };
        assert!(visible(&loss(1.0, 2.0, 9.0), LabMode::Xd, &postcards));
        assert!(visible(&loss(1.0, 2.0, 9.0), LabMode::Mx, &postcards));
        assert!(!visible(&loss(1.0, 2.0, 9.0), LabMode::Md, &postcards));
        assert!(
            !visible(&loss(0.5, 2.0, 9.0), LabMode::Xd, &postcards),
            "a share"
        );
        assert!(
            !visible(&loss(1.0, 2.0, 5.0), LabMode::Xd, &postcards),
            "too short"
        );
        let slow = TimedFault {
            fault: Fault::SlowPort {
                leaf: 1,
                host: 1,
                gbps: 0.1,
            },
            ..loss(1.0, 2.0, 3.0)
        };
        assert!(visible(&slow, LabMode::Md, &postcards));
        assert!(!visible(&slow, LabMode::None, &postcards));
    }

    #[test]
    fn faults_outside_the_fabric_are_refused() {
        let bad = [
            Fault::SlowPort {
                leaf: 3,
                host: 1,
                gbps: 0.1,
            },
            Fault::SlowPort {
                leaf: 1,
                host: 1,
                gbps: 0.0,
            },
            Fault::RoutingMiss {
                leaf: 1,
                dst_leaf: 1,
            },
            Fault::SmallMtu {
                spine: 1,
                mtu: 9000,
            },
            Fault::NonIntSpine { spine: 1 },
            Fault::Incast {
                leaf: 1,
                host: 1,
                packets: 0,
            },
            Fault::SilentDrop {
                leaf: 1,
                spine: 1,
                share: 0.0,
            },
            Fault::SilentDrop {
                leaf: 1,
                spine: 3,
                share: 1.0,
            },
        ];
        for f in &bad {
            assert!(check_fault(f, SHAPE, false).is_err(), "{f:?}");
        }
        let one_spine = Shape { spines: 1, ..SHAPE };
        assert!(check_fault(&Fault::LinkDown { leaf: 1, spine: 1 }, one_spine, false).is_err());
        let one_leaf = Shape { leaves: 1, ..SHAPE };
        let incast = Fault::Incast {
            leaf: 1,
            host: 1,
            packets: 10,
        };
        assert!(check_fault(&incast, one_leaf, false).is_err(), "no senders");
        assert!(check_fault(&incast, SHAPE, false).is_ok());
    }
}
