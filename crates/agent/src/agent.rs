//! From kernel events to reports: each event becomes a frame (its captured headers) and the
//! hop's measured metadata, handed to an [`intscope_node::Node`] that applies the watchlist
//! exactly, the queue report quota and the report format (v0.5 or v2.0), then to an
//! [`Exporter`] that numbers (and, if configured, coalesces) the datagrams for the collector.
//!
//! Every event ends in one counter ([`AgentStats`]); a failed send is counted, never the end
//! of the run. Once a second the agent re-reads the namespace's interfaces and addresses (a
//! pod's new veth is watched as soon as it matches) and renders its counters for `/metrics`.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use intscope_node::export::Exporter;
use intscope_node::{Node, NodeConfig, Telemetry};
use intscope_wire::metadata::{EGRESS_TS, HopMetadata, INGRESS_TS};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::time::{ClockId, clock_gettime};

use crate::AgentError;
use crate::bpf::{COUNTERS, Programs, Settings};
use crate::datapath::{DataPath, DataPathSettings, Encap, INT_COUNTERS, PortRole};
use crate::event::{Event, F_EGRESS_DROP, F_FLOW_DUE, F_INGRESS, F_INGRESS_TS, F_QUEUE, Kind};
use crate::int_report::{IntEvent, IntReporter};
use crate::kernel_drop::KernelReasons;
use crate::metrics::Exposition;

/// Report datagrams per `sendmmsg` call.
const SEND_BATCH: usize = 64;

/// The agent's `minFlowHopLatencyChangeNs` unless configured: 64 µs. A Linux host's
/// residence times jitter by tens of microseconds under load; SD-Fabric's 256 ns (made for a
/// switch pipeline) would send a report for nearly every packet.
pub const HOST_MIN_LATENCY_CHANGE_NS: u32 = 65_536;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The node's settings: node ID, watchlist and `watch_subnets`, report format, instruction
    /// bitmap, queue thresholds (`[filters]`), drop reports, report ports. Without `int_ports`
    /// its mode is INT-XD whatever the file says, and its timestamps are always reported
    /// (postcards are joined by them); with them its mode (md or mx) is the data path's.
    pub node: NodeConfig,
    /// Interfaces to watch, by name; `*` and `?` match any characters / one character
    /// (`veth*`, `cali*`). Empty: every interface of the namespace but `lo`.
    pub interfaces: Vec<String>,
    /// Where reports go.
    pub collector: SocketAddr,
    /// SD-Fabric's smart filters (one flow report per 5-tuple per interval, sooner on a
    /// change; one drop report per 5-tuple per interval), in the kernel; with `int_ports`, the
    /// flow filter on the sink's and INT-MX hops' reports. Off: a report for every watched
    /// packet (every INT packet).
    pub filters: bool,
    /// The namespaces to watch, each its own node. Empty: the agent's own namespace, as node
    /// `node.node_id`. Several namespaces of one machine (a lab) are cheaper watched by one
    /// agent than by one each: every agent's programs run on every packet of the machine.
    pub namespaces: Vec<Namespace>,
    /// INT-MD / INT-MX roles of egress interfaces (`--int-port NAME=ROLE`). Non-empty: the
    /// agent runs the INT data path (`bpf/int.bpf.c`, [`crate::datapath`]) in its own
    /// namespace, in the node's `mode` (md or mx), instead of INT-XD postcards.
    pub int_ports: Vec<(String, PortRole)>,
}

/// A network namespace the agent watches, reporting as its own node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// Its name under `/run/netns` (`ip netns add NAME`); `None`: the agent's own.
    pub name: Option<String>,
    /// The node ID of its reports.
    pub node_id: u32,
}

/// A watched namespace, open.
#[derive(Debug)]
struct Netns {
    /// `None`: the agent's own.
    file: Option<std::fs::File>,
    /// Its inode number (the kernel half's `ns.inum`).
    inum: u32,
    name: String,
}

/// Userspace counters. Every event read ends in exactly one of `postcards`, `drop_reports`,
/// `queue_reports`, `not_reported` and `bad_events`: a postcard is a report the flow filter let
/// through (its Q flag set if its queue is congested too), a queue report one sent for the
/// congested queue alone (SD-Fabric's quota, per congestion, bounds them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AgentStats {
    /// Events read from the ring buffer.
    pub events: u64,
    /// Events that could not be read (a layout mismatch: never expected).
    pub bad_events: u64,
    /// Postcards (flow reports) made.
    pub postcards: u64,
    /// Queue congestion reports made.
    pub queue_reports: u64,
    /// Drop reports made.
    pub drop_reports: u64,
    /// Events the node's exact watchlist or queue quota left without a report.
    pub not_reported: u64,
    /// Reports, of any of the kinds above, carrying the Q flag (their queue over the trigger,
    /// within SD-Fabric's quota of each congestion).
    pub congested: u64,
    /// Datagrams sent to the collector.
    pub sent: u64,
    /// Datagrams the socket refused (counted, the run goes on).
    pub send_errors: u64,
    /// Interfaces watched now.
    pub interfaces: u64,
    /// INT data path: reports made of its events (sink stacks, INT-MX hops).
    pub int_reports: u64,
    /// INT data path: a sink's held reports sent without their egress, their packet not seen
    /// leaving within [`crate::datapath::PENDING_TIMEOUT_NS`] (they are counted in `events`
    /// too).
    pub int_sink_unseen_egress: u64,
}

/// The hop's metadata, measured by the kernel half.
struct Measured(HopMetadata<'static>);

impl Telemetry for Measured {
    fn hop(&self, _node_id: u32) -> HopMetadata<'static> {
        self.0
    }
}

/// CLOCK_MONOTONIC (the kernel half's `bpf_ktime_get_ns`) to Unix time.
#[derive(Debug, Clone, Copy)]
struct Clock {
    offset_ns: i128,
}

fn monotonic_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

impl Clock {
    fn now() -> Self {
        let mono = monotonic_ns();
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        Clock {
            offset_ns: real - i128::from(mono),
        }
    }

    fn unix(&self, mono_ns: u64) -> u64 {
        (i128::from(mono_ns) + self.offset_ns).max(0) as u64
    }
}

/// Events to reports.
#[derive(Debug)]
struct Reporter {
    /// One node per namespace, by the index the kernel half gives it.
    nodes: Vec<Node>,
    exporter: Exporter,
    reasons: KernelReasons,
    clock: Clock,
    stats: AgentStats,
    ready: Vec<Vec<u8>>,
    /// The INT data path's reporters (INT-MD/MX mode).
    int: Option<IntReporter>,
}

fn port(ifindex: u32) -> u16 {
    u16::try_from(ifindex).unwrap_or(u16::MAX)
}

impl std::fmt::Debug for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Reporter {
    /// The hop's metadata as the event measured it. Port 0 is the host's own stack (a packet it
    /// sent, or one delivered to it); what was not measured stays absent, so the report leaves
    /// its bit out rather than send a made-up value.
    fn hop(&self, node_id: u32, e: &Event<'_>) -> HopMetadata<'static> {
        let ingress_ts = e.has(F_INGRESS_TS).then(|| self.clock.unix(e.ingress_ns));
        let mut hop = HopMetadata {
            node_id: Some(node_id),
            l1_ingress_if: Some(if e.has(F_INGRESS) {
                port(e.ingress_if)
            } else {
                0
            }),
            l1_egress_if: Some(port(e.egress_if)),
            ingress_ts,
            queue_id: Some(e.queue_id.min(255) as u8),
            ..HopMetadata::default()
        };
        match e.kind {
            Kind::Transmit => {
                hop.egress_ts = Some(self.clock.unix(e.egress_ns));
                hop.hop_latency = e.has(F_INGRESS_TS).then(|| {
                    u32::try_from(e.egress_ns.saturating_sub(e.ingress_ns)).unwrap_or(u32::MAX - 1)
                });
                if e.has(F_QUEUE) {
                    hop.queue_occupancy = Some(e.backlog.min(0xff_ffff));
                }
            }
            Kind::Local => {}
            Kind::Drop => {
                if !e.has(F_EGRESS_DROP) {
                    hop.l1_egress_if = Some(0);
                }
            }
        }
        hop.present = hop.available_bits();
        hop
    }

    fn handle(&mut self, bytes: &[u8]) {
        let Ok(e) = Event::parse(bytes) else {
            self.stats.bad_events += 1;
            return;
        };
        let Some(node_id) = self
            .nodes
            .get(usize::from(e.node))
            .map(|n| n.config().node_id)
        else {
            self.stats.bad_events += 1;
            return;
        };
        self.stats.events += 1;
        let frame = e.frame();
        let tel = Measured(self.hop(node_id, &e));
        let node = &mut self.nodes[usize::from(e.node)];
        let before = node.stats;
        let report = match e.kind {
            Kind::Drop => {
                let ttl = match e.l3_proto {
                    0x0800 => e.packet.get(8).copied(),
                    0x86dd => e.packet.get(7).copied(),
                    _ => None,
                };
                let code = self.reasons.report_code(e.drop_reason, ttl);
                node.drop_report(&frame, code, &tel)
            }
            Kind::Transmit | Kind::Local => node.observe(&frame, &tel, e.has(F_FLOW_DUE)),
        };
        match report {
            None => self.stats.not_reported += 1,
            Some(r) => {
                if q_flag(&r) {
                    self.stats.congested += 1;
                }
                if e.kind == Kind::Drop {
                    self.stats.drop_reports += 1;
                } else if node.stats.postcards > before.postcards {
                    self.stats.postcards += 1;
                } else {
                    self.stats.queue_reports += 1;
                }
                let now = monotonic_ns();
                self.exporter.push(now, r, &mut self.ready);
            }
        }
    }

    /// An event of the INT data path: the node's sink or INT-MX reports of the frame, with the
    /// hop's metadata as the kernel measured it.
    fn handle_int(&mut self, bytes: &[u8]) {
        let (Ok(e), Some(node_id)) = (
            IntEvent::parse(bytes),
            self.nodes.first().map(|n| n.config().node_id),
        ) else {
            self.stats.bad_events += 1;
            return;
        };
        self.stats.events += 1;
        let ingress_ts = e
            .has(crate::int_report::F_INGRESS_TS)
            .then(|| self.clock.unix(e.ingress_ns));
        // A sink works at tc ingress: its egress, latency and queue are unknown and left out
        // (the report's RepMdBits say which of its own metadata it carries).
        let egress = e.has(crate::int_report::F_EGRESS);
        let mut hop = HopMetadata {
            node_id: Some(node_id),
            l1_ingress_if: Some(port(e.ingress_if)),
            l1_egress_if: Some(port(e.egress_if)),
            l2_ingress_if: Some(e.ingress_if),
            l2_egress_if: Some(e.egress_if),
            ingress_ts,
            egress_ts: egress.then(|| self.clock.unix(e.egress_ns)),
            hop_latency: (egress && e.latency_ns != u32::MAX).then_some(e.latency_ns),
            ..HopMetadata::default()
        };
        if egress && e.has(crate::int_report::F_QUEUE) {
            hop.queue_id = Some(e.queue_id.min(255) as u8);
            hop.queue_occupancy = Some(e.backlog.min(0xff_ffff));
        }
        hop.present = hop.available_bits();
        let Some(int) = self.int.as_mut() else {
            self.stats.bad_events += 1;
            return;
        };
        let reports = int.reports(&e, hop);
        if reports.is_empty() {
            self.stats.not_reported += 1;
        }
        for r in reports {
            self.stats.int_reports += 1;
            if q_flag(&r) {
                self.stats.congested += 1;
            }
            self.exporter.push(monotonic_ns(), r, &mut self.ready);
        }
    }

    /// Sends the datagrams ready, up to [`SEND_BATCH`] per `sendmmsg` call on the socket
    /// connected to the collector. A datagram the kernel refuses (the collector's port closed,
    /// a full socket buffer) is counted and skipped; the rest go on.
    fn send(&mut self, socket: &UdpSocket) {
        use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, sendmmsg};
        use std::io::IoSlice;
        use std::os::fd::AsRawFd;
        let mut at = 0;
        while at < self.ready.len() {
            let batch = &self.ready[at..self.ready.len().min(at + SEND_BATCH)];
            let slices: Vec<[IoSlice<'_>; 1]> = batch.iter().map(|d| [IoSlice::new(d)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> = vec![None; batch.len()];
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(batch.len(), None);
            let cmsgs: [nix::sys::socket::ControlMessage<'_>; 0] = [];
            match sendmmsg(
                socket.as_raw_fd(),
                &mut headers,
                &slices,
                &addrs,
                cmsgs,
                MsgFlags::empty(),
            ) {
                Ok(done) => {
                    let n = done.count().max(1).min(batch.len());
                    self.stats.sent += n as u64;
                    at += n;
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    // The first datagram of the batch was refused.
                    self.stats.send_errors += 1;
                    tracing::debug!("a report was refused: {e}");
                    at += 1;
                }
            }
        }
        self.ready.clear();
    }
}

/// Whether a report datagram (v2.0: its first individual report; v0.5) has the Q flag.
fn q_flag(datagram: &[u8]) -> bool {
    use intscope_wire::report::{GROUP_LEN, IndividualHeaderRepr, V05FixedRepr};
    match datagram.first().map(|b| b >> 4) {
        Some(2) => datagram
            .get(GROUP_LEN..)
            .and_then(|b| IndividualHeaderRepr::parse(b).ok())
            .is_some_and(|h| h.q),
        Some(0) => V05FixedRepr::parse(datagram).is_ok_and(|h| h.q),
        _ => false,
    }
}

/// A running agent: its programs attached, its socket open.
#[derive(Debug)]
pub struct Agent {
    kernel: Kernel,
    reporter: Reporter,
    socket: UdpSocket,
    interfaces: Vec<String>,
    /// The watched namespaces, by the kernel half's index.
    netns: Vec<Netns>,
    /// The agent's own namespace, to come back to after reading another's interfaces.
    home: std::fs::File,
    exposition: Option<Exposition>,
    /// When the INT data path's held sink reports are next looked through.
    next_expiry: Instant,
}

/// The kernel half the agent runs.
#[derive(Debug)]
enum Kernel {
    /// INT-XD postcards and drop reports (`bpf/agent.bpf.c`).
    Postcards(Programs),
    /// The INT-MD / INT-MX data path (`bpf/int.bpf.c`).
    Int(DataPath),
}

impl Kernel {
    fn events(&mut self) -> &mut aya::maps::RingBuf<aya::maps::MapData> {
        match self {
            Kernel::Postcards(p) => p.events(),
            Kernel::Int(d) => d.events(),
        }
    }
}

/// Whether `name` matches `pattern` (`*` any characters, `?` one).
pub fn matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// Runs `f` inside namespace `ns` (this thread only), then comes back to `home`.
fn inside<T>(
    home: &std::fs::File,
    ns: &Netns,
    f: impl FnOnce() -> Result<T, AgentError>,
) -> Result<T, AgentError> {
    use nix::sched::{CloneFlags, setns};
    let Some(file) = &ns.file else {
        return f();
    };
    setns(file, CloneFlags::CLONE_NEWNET)
        .map_err(|e| AgentError::Io(format!("entering namespace {}", ns.name), e.into()))?;
    let result = f();
    setns(home, CloneFlags::CLONE_NEWNET)
        .map_err(|e| AgentError::Io("coming back to the agent's namespace".into(), e.into()))?;
    result
}

/// The namespace's interfaces matching `patterns` (all but `lo` when empty), as indexes.
fn interfaces(patterns: &[String]) -> Result<Vec<u32>, AgentError> {
    let all = nix::net::if_::if_nameindex()
        .map_err(|e| AgentError::Io("listing interfaces".into(), e.into()))?;
    Ok(all
        .iter()
        .filter(|i| {
            let name = i.name().to_string_lossy();
            if patterns.is_empty() {
                name != "lo"
            } else {
                patterns.iter().any(|p| matches(p, &name))
            }
        })
        .map(|i| i.index())
        .collect())
}

/// The namespace's own addresses.
fn local_addrs() -> Result<Vec<IpAddr>, AgentError> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| AgentError::Io("listing addresses".into(), e.into()))?;
    Ok(addrs
        .filter_map(|a| a.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        })
        .collect())
}

impl Agent {
    /// Loads and attaches the programs for `cfg` in this process's network namespace.
    pub fn start(cfg: AgentConfig) -> Result<Agent, AgentError> {
        if !cfg.int_ports.is_empty() {
            return Self::start_int(cfg);
        }
        let mut node_cfg = cfg.node.clone();
        node_cfg.mode = intscope_node::Mode::Xd;
        node_cfg.instructions |= INGRESS_TS | EGRESS_TS;
        for w in &mut node_cfg.watchlist {
            w.mode = Some(intscope_node::Mode::Xd);
            if let Some(i) = w.instructions.as_mut() {
                *i |= INGRESS_TS | EGRESS_TS;
            }
        }
        if !node_cfg.report_ports.contains(&cfg.collector.port()) {
            node_cfg.report_ports.push(cfg.collector.port());
        }
        // The kernel half runs the flow and drop filters; the node keeps the queue quota.
        let filters = node_cfg.filters.clone();
        node_cfg.filters.enabled = false;
        let home = std::fs::File::open("/proc/self/ns/net")
            .map_err(|e| AgentError::Io("/proc/self/ns/net".into(), e))?;
        let namespaces = if cfg.namespaces.is_empty() {
            vec![Namespace {
                name: None,
                node_id: node_cfg.node_id,
            }]
        } else {
            cfg.namespaces.clone()
        };
        let mut netns = Vec::new();
        let mut nodes = Vec::new();
        for ns in &namespaces {
            let (file, name) = match &ns.name {
                None => (None, "(own)".to_string()),
                Some(name) => {
                    let path = format!("/run/netns/{name}");
                    let f = std::fs::File::open(&path)
                        .map_err(|e| AgentError::Io(format!("namespace {name} ({path})"), e))?;
                    (Some(f), name.clone())
                }
            };
            let inum = match &file {
                Some(f) => f.metadata(),
                None => home.metadata(),
            }
            .map_err(|e| AgentError::Io(format!("namespace {name}"), e))?
            .ino() as u32;
            if netns.iter().any(|n: &Netns| n.inum == inum) {
                return Err(AgentError::Config(format!("namespace {name} given twice")));
            }
            let mut c = node_cfg.clone();
            c.node_id = ns.node_id;
            nodes.push(Node::new(c).map_err(|e| AgentError::Config(e.to_string()))?);
            netns.push(Netns { file, inum, name });
        }
        let prefixes = watched_prefixes(&node_cfg);
        let step = filters.min_flow_hop_latency_change_ns.max(1);
        let settings = Settings {
            netns: netns.iter().map(|n| n.inum).collect(),
            interval_ns: filters.interval_ns,
            latency_shift: 31 - step.leading_zeros(),
            filters: cfg.filters,
            watch_all: prefixes.is_none(),
            queue_trigger_ns: filters
                .queues
                .iter()
                .map(|q| q.trigger_ns)
                .min()
                .unwrap_or(0),
            queue_reset_ns: filters
                .queues
                .iter()
                .map(|q| q.reset_ns.unwrap_or(q.trigger_ns / 2))
                .min()
                .unwrap_or(0),
            report_port: cfg.collector.port(),
            drops_all: node_cfg.drop_reports == intscope_node::DropReports::All,
            watch: prefixes.unwrap_or_default(),
        };
        let programs = Programs::load(&settings)?;
        let bind: SocketAddr = if cfg.collector.is_ipv4() {
            "0.0.0.0:0".parse().expect("an address")
        } else {
            "[::]:0".parse().expect("an address")
        };
        let socket =
            UdpSocket::bind(bind).map_err(|e| AgentError::Io("the report socket".into(), e))?;
        socket
            .connect(cfg.collector)
            .map_err(|e| AgentError::Io(format!("the report socket to {}", cfg.collector), e))?;
        let reasons = KernelReasons::load();
        if reasons.is_empty() {
            tracing::warn!(
                "tracefs is not readable: drop reasons are reported as kernel-other (200)"
            );
        }
        let mut agent = Agent {
            kernel: Kernel::Postcards(programs),
            reporter: Reporter {
                exporter: Exporter::new(node_cfg.export),
                nodes,
                reasons,
                clock: Clock::now(),
                stats: AgentStats::default(),
                ready: Vec::new(),
                int: None,
            },
            socket,
            interfaces: cfg.interfaces,
            netns,
            home,
            exposition: None,
            next_expiry: Instant::now(),
        };
        agent.refresh()?;
        Ok(agent)
    }

    /// The INT-MD / INT-MX data path in this namespace: `int_ingress` on the watched interfaces
    /// (all but `lo` when none are named) and on the role interfaces, `int_egress` on the role
    /// interfaces; reports of the sink's stacks and of INT-MX hops through the node's code.
    fn start_int(cfg: AgentConfig) -> Result<Agent, AgentError> {
        if !cfg.namespaces.is_empty() {
            return Err(AgentError::Config(
                "INT roles (--int-port) run in the agent's own namespace: start one agent per \
                 namespace (ip netns exec), without --netns"
                    .into(),
            ));
        }
        let mut node_cfg = cfg.node.clone();
        let mx = match node_cfg.mode {
            intscope_node::Mode::Md => false,
            intscope_node::Mode::Mx => true,
            intscope_node::Mode::Xd => {
                return Err(AgentError::Config(
                    "INT roles need mode = \"md\" or \"mx\" (INT-XD is the agent without \
                     --int-port)"
                        .into(),
                ));
            }
        };
        let encap = match node_cfg.encap {
            intscope_node::SourceEncap::UdpNew => Encap::UdpNew,
            intscope_node::SourceEncap::UdpPort => Encap::UdpPort,
            intscope_node::SourceEncap::Dscp => Encap::Dscp,
            other => {
                return Err(AgentError::Config(format!(
                    "encap {other:?}: the eBPF data path inserts INT over TCP/UDP: udp-new \
                     (NPT 2), udp-port (NPT 1) or dscp (NPT 0)"
                )));
            }
        };
        if node_cfg.unknown_domain == intscope_node::config::Unsupported::Skip
            || node_cfg.reserved_bits == intscope_node::config::Unsupported::Skip
        {
            return Err(AgentError::Config(
                "unknown_domain and reserved_bits: the eBPF transit pads what it cannot fill \
                 with all ones (\"pad\"); \"skip\" is the userspace node's alone"
                    .into(),
            ));
        }
        if node_cfg.watchlist.iter().any(|w| {
            w.mode.is_some_and(|m| m != node_cfg.mode)
                || w.instructions.is_some_and(|i| i != node_cfg.instructions)
                || w.encap.is_some()
                || w.ds_id != 0
                || w.clone
                || !w.destination.0.is_empty()
        }) {
            return Err(AgentError::Config(
                "the eBPF data path uses the node's mode, instructions and encapsulation for \
                 every flow: a watchlist entry may only select flows"
                    .into(),
            ));
        }
        if !node_cfg.report_ports.contains(&cfg.collector.port()) {
            node_cfg.report_ports.push(cfg.collector.port());
        }
        let home = std::fs::File::open("/proc/self/ns/net")
            .map_err(|e| AgentError::Io("/proc/self/ns/net".into(), e))?;
        let inum = home
            .metadata()
            .map_err(|e| AgentError::Io("/proc/self/ns/net".into(), e))?
            .ino() as u32;
        let prefixes = watched_prefixes(&node_cfg);
        // The kernel half runs the flow filter (as in INT-XD); the nodes that make the reports
        // keep the rest of the configuration.
        let filters = node_cfg.filters.clone();
        node_cfg.filters.enabled = false;
        let step = filters.min_flow_hop_latency_change_ns.max(1);
        let settings = DataPathSettings {
            netns: inum,
            node_id: node_cfg.node_id,
            mx,
            instructions: node_cfg.instructions,
            max_hops: node_cfg.max_hops,
            int_port: node_cfg.int_udp_port,
            mtu: node_cfg.mtu as u32,
            report_port: cfg.collector.port(),
            watch_all: prefixes.is_none(),
            watch: prefixes.unwrap_or_default(),
            filters: cfg.filters,
            interval_ns: filters.interval_ns,
            latency_shift: 31 - step.leading_zeros(),
            encap,
            int_dscp: node_cfg.int_dscp,
            int_dscp_mask: node_cfg.int_dscp_mask,
            remark: node_cfg.dscp_marked_without_int == intscope_node::MarkedWithoutInt::Remark,
            remark_dscp: node_cfg.remark_dscp,
            restore_dscp: node_cfg.restore_dscp,
            domains: node_cfg.domains.clone(),
        };
        let mut datapath = DataPath::load(&settings)?;
        let all = nix::net::if_::if_nameindex()
            .map_err(|e| AgentError::Io("listing interfaces".into(), e.into()))?;
        let mut ingress: Vec<String> = all
            .iter()
            .map(|i| i.name().to_string_lossy().into_owned())
            .filter(|name| {
                if cfg.interfaces.is_empty() {
                    name != "lo"
                } else {
                    cfg.interfaces.iter().any(|p| matches(p, name))
                }
            })
            .collect();
        for (name, _) in &cfg.int_ports {
            if !ingress.contains(name) {
                ingress.push(name.clone());
            }
        }
        datapath.attach(&ingress, &cfg.int_ports)?;
        let int = IntReporter::new(&node_cfg).map_err(|e| AgentError::Config(e.to_string()))?;
        let node = Node::new(node_cfg.clone()).map_err(|e| AgentError::Config(e.to_string()))?;
        let bind: SocketAddr = if cfg.collector.is_ipv4() {
            "0.0.0.0:0".parse().expect("an address")
        } else {
            "[::]:0".parse().expect("an address")
        };
        let socket =
            UdpSocket::bind(bind).map_err(|e| AgentError::Io("the report socket".into(), e))?;
        socket
            .connect(cfg.collector)
            .map_err(|e| AgentError::Io(format!("the report socket to {}", cfg.collector), e))?;
        let stats = AgentStats {
            interfaces: ingress.len() as u64,
            ..AgentStats::default()
        };
        Ok(Agent {
            kernel: Kernel::Int(datapath),
            reporter: Reporter {
                exporter: Exporter::new(node_cfg.export),
                nodes: vec![node],
                reasons: KernelReasons::default(),
                clock: Clock::now(),
                stats,
                ready: Vec::new(),
                int: Some(int),
            },
            socket,
            interfaces: cfg.interfaces,
            netns: vec![Netns {
                file: None,
                inum,
                name: "(own)".into(),
            }],
            home,
            exposition: None,
            next_expiry: Instant::now(),
        })
    }

    /// Serves the counters at `addr` (Prometheus text).
    pub fn serve_metrics(&mut self, addr: SocketAddr) -> Result<SocketAddr, AgentError> {
        let exposition: Exposition = Default::default();
        let local = crate::metrics::serve(addr, std::sync::Arc::clone(&exposition))
            .map_err(|e| AgentError::Io(format!("metrics on {addr}"), e))?;
        self.exposition = Some(exposition);
        self.render();
        Ok(local)
    }

    fn refresh(&mut self) -> Result<(), AgentError> {
        let Kernel::Postcards(programs) = &mut self.kernel else {
            // The INT data path's interfaces are attached once, at the start.
            self.reporter.clock = Clock::now();
            return Ok(());
        };
        let mut watched = Vec::new();
        let mut addrs = Vec::new();
        for ns in &self.netns {
            let (ifaces, local) = inside(&self.home, ns, || {
                Ok((interfaces(&self.interfaces)?, local_addrs()?))
            })?;
            watched.push((ns.inum, ifaces));
            addrs.push(local);
        }
        programs.set_interfaces(&watched)?;
        self.reporter.stats.interfaces = watched.iter().map(|(_, i)| i.len() as u64).sum();
        for (i, a) in addrs.iter().enumerate() {
            programs.set_local_addrs(i as u32, a)?;
        }
        self.reporter.clock = Clock::now();
        Ok(())
    }

    fn render(&self) {
        let Some(exposition) = &self.exposition else {
            return;
        };
        let text = crate::metrics::render(&self.counters());
        if let Ok(mut e) = exposition.lock() {
            *e = text;
        }
    }

    /// Every counter, the kernel half's then userspace's: `(name, help, value)`.
    pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        let s = self.reporter.stats;
        let mut out: Vec<_> = match &self.kernel {
            Kernel::Postcards(programs) => {
                let kernel = programs.counters().unwrap_or([0; COUNTERS.len()]);
                COUNTERS
                    .iter()
                    .zip(kernel)
                    .map(|((n, h), v)| (*n, *h, v))
                    .collect()
            }
            Kernel::Int(d) => {
                let kernel = d.counters().unwrap_or([0; INT_COUNTERS.len()]);
                INT_COUNTERS
                    .iter()
                    .zip(kernel)
                    .map(|((n, h), v)| (*n, *h, v))
                    .collect()
            }
        };
        out.extend([
            ("user_events", "events read from the ring buffer", s.events),
            ("bad_events", "events that could not be read", s.bad_events),
            ("postcards", "postcards (flow reports) made", s.postcards),
            (
                "queue_reports",
                "queue congestion reports made",
                s.queue_reports,
            ),
            ("drop_reports", "drop reports made", s.drop_reports),
            (
                "not_reported",
                "events the exact watchlist or the queue quota left unreported",
                s.not_reported,
            ),
            (
                "congested_reports",
                "reports carrying the Q flag (queue over the trigger, within the quota)",
                s.congested,
            ),
            (
                "int_reports",
                "reports made of INT data path events (sink stacks, INT-MX hops)",
                s.int_reports,
            ),
            (
                "int_sink_unseen_egress",
                "sink reports held for their packet's egress, sent without it after 1 s",
                s.int_sink_unseen_egress,
            ),
            ("sent", "report datagrams sent", s.sent),
            (
                "send_errors",
                "report datagrams the socket refused",
                s.send_errors,
            ),
        ]);
        out
    }

    /// Userspace counters.
    pub fn stats(&self) -> AgentStats {
        self.reporter.stats
    }

    /// Reads events and sends reports until `stop` is set or `deadline` passes; then reads what
    /// the ring still holds and sends everything waiting.
    pub fn run(&mut self, stop: &AtomicBool, deadline: Option<Instant>) -> Result<(), AgentError> {
        let mut next_refresh = Instant::now() + Duration::from_secs(1);
        while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
            {
                let ring = self.kernel.events();
                let mut fds = [PollFd::new(ring.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(100u16)) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        return Err(AgentError::Io("polling the ring buffer".into(), e.into()));
                    }
                }
            }
            self.drain(false);
            if Instant::now() >= next_refresh {
                if let Err(e) = self.refresh() {
                    tracing::warn!("refreshing interfaces and addresses: {e}");
                }
                self.render();
                next_refresh = Instant::now() + Duration::from_secs(1);
            }
        }
        // The sink's held reports go too, without the egress their packets have not reached.
        self.drain(true);
        self.reporter.exporter.flush(&mut self.reporter.ready);
        self.reporter.send(&self.socket);
        self.render();
        Ok(())
    }

    /// Reads the ring, sends the reports due; every 100 ms (`all`: now, every one) the sink's
    /// reports held past their time.
    fn drain(&mut self, all: bool) {
        let Agent {
            kernel,
            reporter,
            next_expiry,
            ..
        } = self;
        let int = matches!(kernel, Kernel::Int(_));
        let ring = kernel.events();
        // Bounded per call so sends and refreshes keep their pace under a flood.
        for _ in 0..65_536 {
            let Some(item) = ring.next() else { break };
            if int {
                reporter.handle_int(&item);
            } else {
                reporter.handle(&item);
            }
        }
        if let Kernel::Int(d) = kernel
            && (all || Instant::now() >= *next_expiry)
        {
            *next_expiry = Instant::now() + Duration::from_millis(100);
            let now = if all { u64::MAX } else { monotonic_ns() };
            let taken = d.take_expired(now, |event| reporter.handle_int(event));
            match taken {
                Ok(n) => reporter.stats.int_sink_unseen_egress += n,
                Err(e) => tracing::warn!("the sink's held reports: {e}"),
            }
        }
        reporter.exporter.poll(monotonic_ns(), &mut reporter.ready);
        reporter.send(&self.socket);
    }
}

/// The prefixes the kernel half looks packets up in: every address prefix of the watchlist
/// (source, destination or subnet) and `watch_subnets`. `None`: some entry names no prefix
/// (it matches on ports or protocol only), so every IP packet goes to the exact watchlist.
fn watched_prefixes(cfg: &NodeConfig) -> Option<Vec<ipnet::IpNet>> {
    let mut out = cfg.watch_subnets.clone();
    for w in &cfg.watchlist {
        let nets: Vec<_> = [w.src, w.dst, w.subnet].into_iter().flatten().collect();
        if nets.is_empty() {
            return None;
        }
        out.extend(nets);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_patterns() {
        assert!(matches("veth*", "veth0"));
        assert!(matches("*", "eth1"));
        assert!(matches("eth?", "eth1"));
        assert!(!matches("eth?", "eth10"));
        assert!(!matches("cali*", "veth0"));
        assert!(matches("r1-*-x", "r1-h1-x"));
    }

    #[test]
    fn prefixes_cover_the_watchlist_or_watch_everything() {
        let mut cfg = NodeConfig {
            watch_subnets: vec!["10.0.0.0/8".parse().unwrap()],
            ..NodeConfig::default()
        };
        assert_eq!(watched_prefixes(&cfg).unwrap().len(), 1);
        cfg.watchlist.push(intscope_node::WatchEntry {
            dst_ports: Some((80, 80)),
            ..Default::default()
        });
        assert_eq!(
            watched_prefixes(&cfg),
            None,
            "a port-only entry watches every packet"
        );
    }

    #[test]
    fn clock_maps_monotonic_onto_unix_time() {
        let c = Clock::now();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let mapped = c.unix(monotonic_ns());
        assert!(mapped.abs_diff(now) < 50_000_000, "{mapped} vs {now}");
    }
}
