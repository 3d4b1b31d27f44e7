//! The simulation: packets walk the fabric in virtual time, one hop at a time — every arrival at a
//! switch is an event, and events run in time order, so each egress queue sees its packets in
//! the order they arrive. At every switch: route (ECMP at the ingress leaf), decrement the TTL,
//! queue at the egress port (finite buffer, tail drop, FIFO at line rate: a packet waits for the
//! bytes ahead of it when it arrives), then run the switch's INT role — the real `intscope-node`
//! code — with telemetry taken from the queue model. Leaves are INT sources for traffic from
//! their hosts, sinks for traffic to them, and transit hops otherwise; spines are transit hops.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::Ipv4Addr;

use etherparse::PacketBuilder;
use intscope_node::config::TelemetryModel;
use intscope_node::frame::refresh_ipv4_checksum;
use intscope_node::{
    ConfigError, Mode, Node, NodeConfig, Role, SourceEncap, Telemetry, WatchEntry,
};
use intscope_wire::metadata::HopMetadata;

use crate::topology::{Topology, host_ip, locate, spine_id};

/// SD-Fabric drop reasons the simulator produces.
pub mod reason {
    /// IPv4 TTL zero.
    pub const TTL_ZERO: u8 = 26;
    /// Routing table miss.
    pub const ROUTING_MISS: u8 = 29;
    /// Traffic manager (tail drop).
    pub const TRAFFIC_MANAGER: u8 = 71;
}

/// Queue occupancy is reported in 80-byte cells, as Tofino switches count it.
pub const CELL_BYTES: u32 = 80;

/// Egress Tx utilization (instruction bit 7) is measured in bins of this length ("bin bucketing",
/// one of the mechanisms INT v2.1 §5.7 leaves to the device)...
pub const UTIL_BIN_NS: u64 = 1_000_000;

/// ...and reported in per-mille of the port's line rate: the bytes sent in the last complete bin
/// over what the port could send in it, at most 1000.
pub const UTIL_FULL_SCALE: u32 = 1000;

/// A fault, active between `from_ns` and `until_ns`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// The link between a leaf and a spine is down: ECMP rehashes (path change).
    LinkDown {
        /// Leaf.
        leaf: u32,
        /// Spine (1-based).
        spine: u32,
    },
    /// The ingress leaf has no route to a destination leaf's subnet: drops with reason 29.
    RoutingMiss {
        /// Leaf that drops.
        leaf: u32,
        /// Leaf whose hosts cannot be reached.
        dst_leaf: u32,
    },
    /// Many hosts send a burst to one host at once (incast): a queue spike at its leaf.
    Incast {
        /// Receiving leaf.
        leaf: u32,
        /// Receiving host.
        host: u32,
        /// Packets each sender sends.
        packets: u32,
    },
    /// A leaf's port to a host sends at a fraction of its speed (a link that negotiated down, a
    /// host pausing it): a queue congested for as long as the fault lasts.
    SlowPort {
        /// Leaf.
        leaf: u32,
        /// Host (its port number).
        host: u32,
        /// The port's speed meanwhile, Gb/s.
        gbps: f64,
    },
    /// A spine forwards without INT (it still decrements TTL).
    NonIntSpine {
        /// Spine (1-based).
        spine: u32,
    },
    /// A spine's egress links have a small MTU: no room for INT metadata (M bit).
    SmallMtu {
        /// Spine (1-based).
        spine: u32,
        /// The MTU.
        mtu: usize,
    },
    /// A bad cable between a leaf and a spine: packets crossing it, either way, are lost without
    /// a drop report, while routing still uses the link (no switch noticed). Only the per-hop
    /// reports of INT-XD / INT-MX show it: the flow is seen before the link, never after.
    SilentDrop {
        /// Leaf.
        leaf: u32,
        /// Spine (1-based).
        spine: u32,
        /// The share of the packets lost, above 0 and at most 1 (default 1: every packet). A
        /// flow that still gets some packets across keeps being reported past the link.
        #[serde(default = "every_packet")]
        share: f64,
    },
    /// A routing loop: the spine sends `dst_leaf` traffic to `leaf`, which sends it back.
    Loop {
        /// Spine (1-based).
        spine: u32,
        /// Leaf that bounces it back.
        leaf: u32,
        /// Destination leaf whose traffic loops.
        dst_leaf: u32,
    },
    /// Every report of one switch is lost on its way to the collector (its management link or
    /// the route to the collector is down) while it forwards, and adds INT, as before: its
    /// report sequence numbers still advance, so the gap shows once its reports come back.
    ReportOutage {
        /// The switch's node ID (a leaf's number, or [`crate::topology::spine_id`]).
        node: u32,
    },
}

/// A silent drop's default share: every packet.
fn every_packet() -> f64 {
    1.0
}

/// A fault and when it is active.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct Scheduled {
    /// Start, ns of virtual time.
    pub from_ns: u64,
    /// End.
    pub until_ns: u64,
    /// The fault.
    #[serde(flatten)]
    pub fault: Fault,
}

/// One flow of traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    /// Source host.
    pub src: Ipv4Addr,
    /// Destination host.
    pub dst: Ipv4Addr,
    /// 6 (TCP-like) or 17 (UDP).
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Packets per second.
    pub pps: f64,
    /// Frame size in bytes (payload padded to it).
    pub size: usize,
    /// First packet, ns.
    pub start_ns: u64,
    /// No packet after this, ns.
    pub end_ns: u64,
    /// Packets sent back to back (at the host's line rate) in each burst, the gap after a burst
    /// keeping the mean rate at `pps`; 1: evenly spaced packets.
    pub burst: u32,
}

/// What the fabric runs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Shape.
    pub topology: Topology,
    /// INT mode of every switch.
    pub mode: Mode,
    /// Where sources put INT.
    pub encap: SourceEncap,
    /// Instruction bitmap (default: node id, L1 interfaces, hop latency, queue, ingress and egress
    /// timestamps, egress Tx utilization).
    pub instructions: u16,
    /// INT UDP port.
    pub int_udp_port: u16,
    /// Remaining Hop Count at the source.
    pub max_hops: u8,
    /// SD-Fabric's report filters at every switch.
    pub filters: intscope_node::filter::FilterConfig,
    /// What a transit switch without room for its metadata does (M bit or intermediate report).
    pub on_mtu_exceeded: intscope_node::config::MtuAction,
    /// What the network between the switches and the collector does to reports.
    pub delivery: Delivery,
}

/// Impairments of the report network between the fabric and the collector (`[delivery]` in a
/// simulation file), drawn from `seed` so runs replay exactly. Applied after the switches
/// numbered their reports: a lost report is a gap in its (node, hw_id) sequence, a duplicate
/// repeats a number, a reordered one arrives late with its original number.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Delivery {
    /// Share of reports lost (0..=1).
    pub loss: f64,
    /// Share of reports delivered twice.
    pub duplicate: f64,
    /// Share of reports held back and delivered after `reorder_depth` later ones.
    pub reorder: f64,
    /// How many later reports overtake a reordered one.
    pub reorder_depth: usize,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for Delivery {
    /// A perfect network: nothing lost, duplicated or reordered.
    fn default() -> Self {
        Delivery {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_depth: 8,
            seed: 1,
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            topology: Topology::default(),
            mode: Mode::Md,
            encap: SourceEncap::UdpPort,
            instructions: 0xfd00,
            int_udp_port: 17768,
            max_hops: 8,
            filters: sd_fabric_filters(),
            on_mtu_exceeded: intscope_node::config::MtuAction::MBit,
            delivery: Delivery::default(),
        }
    }
}

/// SD-Fabric's filters as the simulated switches run them: flow reports once a second per
/// 5-tuple unless something changes, queue reports for queue 0 above 10 µs (reset below 5 µs).
pub fn sd_fabric_filters() -> intscope_node::filter::FilterConfig {
    intscope_node::filter::FilterConfig {
        enabled: true,
        queues: vec![intscope_node::filter::QueueThreshold {
            queue_id: 0,
            trigger_ns: 10_000,
            reset_ns: Some(5_000),
        }],
        ..intscope_node::filter::FilterConfig::default()
    }
}

/// Why a fabric cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A switch's configuration cannot run.
    #[error(transparent)]
    Node(#[from] ConfigError),
    /// A share (a probability) outside 0..=1.
    #[error("{what} must be within 0..=1, not {share}")]
    Share {
        /// The setting.
        what: &'static str,
        /// Its value.
        share: f64,
    },
}

/// A report datagram leaving a switch: when, from which switch address, the UDP payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Virtual time, ns.
    pub time_ns: u64,
    /// The reporting switch's address (192.168.0.`<node id>`).
    pub source: Ipv4Addr,
    /// The report datagram.
    pub payload: Vec<u8>,
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimStats {
    /// Packets sent by hosts.
    pub sent: u64,
    /// Packets delivered to hosts.
    pub delivered: u64,
    /// Drops by reason code.
    pub dropped: HashMap<u8, u64>,
    /// Reports produced.
    pub reports: u64,
    /// Sum of delivery latencies, ns (for the mean).
    pub latency_sum_ns: u64,
    /// Packets lost on a silently dropping link ([`Fault::SilentDrop`]), without a report.
    pub silent_drops: u64,
    /// Reports the report network lost ([`Delivery::loss`]).
    pub reports_lost: u64,
    /// Reports lost to a switch's reporting outage ([`Fault::ReportOutage`]).
    pub reports_lost_to_outage: u64,
    /// Reports delivered twice.
    pub reports_duplicated: u64,
    /// Reports delivered late, after later ones.
    pub reports_reordered: u64,
    /// Highest egress queue occupancy any port saw, 80-byte cells.
    pub max_queue_cells: u32,
}

#[derive(Debug, Default)]
struct PortQueue {
    queued: VecDeque<(u64, u32)>,
    bytes: u32,
    free_at: u64,
    /// Start of the current utilization bin, and the bytes sent in it.
    bin_start: u64,
    bin_bytes: u64,
    /// Utilization of the last complete bin, per mille.
    last_bin_util: u32,
}

impl PortQueue {
    /// Counts `bytes` leaving at `depart` on a port of `gbps`; returns the utilization of the last
    /// complete bin before `depart`, per mille (0 when that bin saw nothing).
    fn account_tx(&mut self, depart: u64, bytes: u32, gbps: f64) -> u32 {
        let bin = depart - depart % UTIL_BIN_NS;
        if bin != self.bin_start {
            let capacity_bytes = gbps * UTIL_BIN_NS as f64 / 8.0;
            self.last_bin_util = if bin == self.bin_start + UTIL_BIN_NS {
                ((self.bin_bytes as f64 / capacity_bytes * f64::from(UTIL_FULL_SCALE)).round()
                    as u32)
                    .min(UTIL_FULL_SCALE)
            } else {
                0
            };
            self.bin_start = bin;
            self.bin_bytes = 0;
        }
        self.bin_bytes += u64::from(bytes);
        self.last_bin_util
    }
}

struct SimTelemetry {
    /// The switches' clock at fabric time 0 ([`Fabric::set_clock_origin`]).
    origin: u64,
    ingress: u32,
    egress: u32,
    occupancy_cells: u32,
    latency_ns: u32,
    at_ns: u64,
    /// Departure time; `None` for a packet dropped here.
    egress_at: Option<u64>,
    /// Egress port utilization, per mille; `None` without an egress port.
    tx_util: Option<u32>,
}

impl Telemetry for SimTelemetry {
    fn hop(&self, node_id: u32) -> HopMetadata<'static> {
        HopMetadata {
            present: 0xffff,
            node_id: Some(node_id),
            l1_ingress_if: Some(self.ingress as u16),
            l1_egress_if: Some(self.egress as u16),
            // A dropped packet never left: no hop latency, no egress timestamp (all ones).
            hop_latency: (self.egress_at.is_some()).then_some(self.latency_ns),
            // No egress port (a routing drop): the queue word is unavailable, but the queue ID
            // stays for the drop word (queue ID + drop reason) of RepMdBits bit 15.
            queue_id: Some(0),
            queue_occupancy: (self.egress != 0).then_some(self.occupancy_cells),
            ingress_ts: Some(self.origin + self.at_ns),
            egress_ts: self.egress_at.map(|e| self.origin + e),
            l2_ingress_if: Some(self.ingress),
            l2_egress_if: Some(self.egress),
            egress_tx_util: self.tx_util,
            ..HopMetadata::default()
        }
    }
}

/// A packet admitted to an egress queue.
struct Departure {
    /// When it leaves, ns.
    at: u64,
    /// Bytes queued ahead of it.
    occupancy: u32,
    /// The port's utilization, per mille.
    tx_util: u32,
}

/// A packet on its way: it reaches `place` by `in_port` at `at`. Ordered by (`at`, `seq`): hops
/// run in time order, ties in the order they were scheduled.
struct InFlight {
    at: u64,
    seq: u64,
    frame: Vec<u8>,
    place: Place,
    in_port: u32,
    from_host: bool,
    /// When its host sent it, ns.
    sent_ns: u64,
    /// Switches it crossed so far.
    hops: u8,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for InFlight {}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Most switches a packet crosses: the hosts send TTL 64, which ends a loop long before; this
/// bounds the walk whatever the TTL.
const MAX_HOPS: u8 = 250;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Leaf(u32),
    Spine(u32),
}

struct LeafNodes {
    source: Node,
    transit: Node,
    sink: Node,
}

/// A report made and not yet sent: (time, order of making, switch, datagram).
type Made = (u64, u64, u32, Vec<u8>);

/// The simulated fabric.
pub struct Fabric {
    cfg: SimConfig,
    leaves: Vec<LeafNodes>,
    spines: Vec<Node>,
    queues: HashMap<(u32, u32), PortQueue>,
    faults: Vec<Scheduled>,
    flows: Vec<FlowSpec>,
    next: BinaryHeap<Reverse<(u64, usize, u64)>>,
    /// Packets between switches or queued, by the time they reach the next switch. Bounded by
    /// the fabric: every one sits in an egress buffer or on a link behind one, so at most the
    /// ports' buffers plus a link delay's worth of line rate per port.
    in_flight: BinaryHeap<Reverse<InFlight>>,
    in_flight_seq: u64,
    /// Reports made, by time and order of making, until no report can come before them.
    made: BinaryHeap<Reverse<Made>>,
    made_count: u64,
    sequencer: intscope_node::export::Sequencer,
    /// The report network's draws, and the reports it holds back: (reports still to overtake,
    /// report).
    delivery_rng: Xorshift,
    held: VecDeque<(usize, Report)>,
    /// Counters.
    pub stats: SimStats,
    now: u64,
    /// What the switches' clocks read at fabric time 0.
    clock_origin_ns: u64,
}

fn node(cfg: &SimConfig, id: u32, role: Role) -> Result<Node, ConfigError> {
    Node::new(NodeConfig {
        node_id: id,
        role,
        mode: cfg.mode,
        mtu: cfg.topology.mtu,
        int_udp_port: cfg.int_udp_port,
        encap: cfg.encap,
        instructions: cfg.instructions,
        max_hops: cfg.max_hops,
        watchlist: vec![WatchEntry::default()],
        filters: cfg.filters.clone(),
        on_mtu_exceeded: cfg.on_mtu_exceeded,
        telemetry: TelemetryModel::default(),
        ..NodeConfig::default()
    })
}

fn flow_hash(f: &[u8]) -> u64 {
    // FNV-1a over addresses, protocol and ports of the original packet.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in f
        .get(26..38)
        .unwrap_or(&[])
        .iter()
        .chain(f.get(23..24).unwrap_or(&[]))
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Fabric {
    /// Sets what the switches' clocks (their INT timestamps) read at fabric time 0: 0 by
    /// default (a capture's own timeline); the Unix time a run starts at when its reports go to
    /// a live collector, whose receive times are Unix times, as PTP-synchronized switches' are.
    pub fn set_clock_origin(&mut self, origin_ns: u64) {
        self.clock_origin_ns = origin_ns;
    }

    /// A fabric with every switch running INT in `cfg.mode`; an error when the switches'
    /// configuration cannot run (e.g. an MTU below 68, more metadata than Hop ML holds).
    pub fn new(cfg: SimConfig) -> Result<Self, SimError> {
        let t = &cfg.topology;
        let d = &cfg.delivery;
        for (what, share) in [
            ("delivery.loss", d.loss),
            ("delivery.duplicate", d.duplicate),
            ("delivery.reorder", d.reorder),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(SimError::Share { what, share });
            }
        }
        let leaves = (1..=t.leaves)
            .map(|l| {
                Ok(LeafNodes {
                    source: node(&cfg, l, Role::Source)?,
                    transit: node(&cfg, l, Role::Transit)?,
                    sink: node(&cfg, l, Role::Sink)?,
                })
            })
            .collect::<Result<_, ConfigError>>()?;
        let spines = (1..=t.spines)
            .map(|s| node(&cfg, spine_id(s), Role::Transit))
            .collect::<Result<_, _>>()?;
        let delivery_rng = Xorshift::new(cfg.delivery.seed);
        Ok(Fabric {
            cfg,
            leaves,
            spines,
            queues: HashMap::new(),
            faults: Vec::new(),
            flows: Vec::new(),
            next: BinaryHeap::new(),
            in_flight: BinaryHeap::new(),
            in_flight_seq: 0,
            made: BinaryHeap::new(),
            made_count: 0,
            sequencer: Default::default(),
            delivery_rng,
            held: VecDeque::new(),
            stats: SimStats::default(),
            now: 0,
            clock_origin_ns: 0,
        })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.cfg.topology
    }

    /// Adds a flow.
    pub fn add_flow(&mut self, f: FlowSpec) {
        let i = self.flows.len();
        self.next.push(Reverse((f.start_ns, i, 0)));
        self.flows.push(f);
    }

    /// Schedules a fault. An incast adds its burst flows at `from_ns`.
    pub fn schedule(&mut self, s: Scheduled) {
        if let Fault::Incast {
            leaf,
            host,
            packets,
        } = s.fault
        {
            let t = self.cfg.topology.clone();
            let dst = host_ip(leaf, host);
            let senders: Vec<Ipv4Addr> = t
                .hosts()
                .into_iter()
                .filter(|h| locate(*h).is_some_and(|(l, _)| l != leaf))
                .collect();
            for (k, src) in senders.into_iter().enumerate() {
                // Each sender at its full 10G line rate: the receiving port gets many times that.
                let pps = t.host_gbps * 1e9 / (1400.0 * 8.0);
                let end = s.from_ns + (f64::from(packets) / pps * 1e9) as u64;
                self.add_flow(FlowSpec {
                    src,
                    dst,
                    proto: 17,
                    sport: 30000 + k as u16,
                    dport: 9000,
                    pps,
                    size: 1400,
                    start_ns: s.from_ns + k as u64 * 7,
                    end_ns: end,
                    burst: 1,
                });
            }
        }
        self.faults.push(s);
    }

    fn active(&self, pred: impl Fn(&Fault) -> bool) -> Option<&Fault> {
        self.faults
            .iter()
            .filter(|s| s.from_ns <= self.now && self.now < s.until_ns)
            .map(|s| &s.fault)
            .find(|f| pred(f))
    }

    /// Runs until `until_ns` of virtual time: every packet sent and every hop reached before it,
    /// in time order (a hop before a packet sent at the same time).
    pub fn run(&mut self, until_ns: u64) {
        loop {
            let hop_at = self.in_flight.peek().map(|Reverse(p)| p.at);
            let send_at = self.next.peek().map(|&Reverse((t, ..))| t);
            match (hop_at, send_at) {
                (Some(h), s) if h < until_ns && s.is_none_or(|s| h <= s) => {
                    if let Some(Reverse(p)) = self.in_flight.pop() {
                        self.now = h;
                        self.hop(p);
                    }
                }
                (_, Some(t)) if t < until_ns => self.send_next(),
                _ => break,
            }
        }
        self.now = self.now.max(until_ns);
    }

    /// Sends the next packet of the flow whose turn it is, and schedules the flow's next one.
    fn send_next(&mut self) {
        let Some(Reverse((t, i, n))) = self.next.pop() else {
            return;
        };
        let f = self.flows[i].clone();
        if t > f.end_ns {
            return;
        }
        self.now = t;
        let frame = Self::packet(&f, n);
        self.stats.sent += 1;
        if let Some((leaf, host)) = locate(f.src) {
            self.hop(InFlight {
                at: t,
                seq: 0,
                frame,
                place: Place::Leaf(leaf),
                in_port: host,
                from_host: true,
                sent_ns: t,
                hops: 0,
            });
        }
        // Deterministic jitter of ±25% keeps flows from marching in lockstep.
        let jitter = ((i as u64)
            .wrapping_mul(2_654_435_761)
            .wrapping_add(n.wrapping_mul(40_503))
            % 500) as f64
            / 1000.0
            + 0.75;
        let burst = u64::from(f.burst.max(1));
        let gap = if (n + 1) % burst != 0 {
            // Within a burst: back to back at the host's line rate.
            f.size as f64 * 8.0 / self.cfg.topology.host_gbps
        } else {
            // After it: the rest of the burst's share of time at the mean rate.
            let line = f.size as f64 * 8.0 / self.cfg.topology.host_gbps;
            (1e9 / f.pps * burst as f64 - line * (burst - 1) as f64).max(line) * jitter
        };
        self.next.push(Reverse((t + gap.max(1.0) as u64, i, n + 1)));
    }

    /// Runs the packets still in flight to their end (the run is over: no packet is sent any
    /// more).
    fn finish_in_flight(&mut self) {
        while let Some(Reverse(p)) = self.in_flight.pop() {
            self.now = self.now.max(p.at);
            self.hop(p);
        }
    }

    /// The reports sent to the collector since the last call, in the order they arrive there:
    /// those made before the time [`Fabric::run`] reached (no packet can report earlier any
    /// more), in time order, numbered per (node, hw_id) in that order as switches number them
    /// (Report v2.0 §"Telemetry Report Group Header": "the sequence of reports from a specific
    /// combination of (Node ID, hw_id) to a particular telemetry report destination"), then
    /// passed through the report network ([`Delivery`]).
    pub fn take_reports(&mut self) -> Vec<Report> {
        self.release(self.now)
    }

    /// [`Fabric::take_reports`], and every report still waiting (the run is over): reports of
    /// packets in flight at the end and reports the network holds back.
    pub fn take_all_reports(&mut self) -> Vec<Report> {
        self.finish_in_flight();
        let mut out = self.release(u64::MAX);
        out.extend(self.held.drain(..).map(|(_, r)| r));
        out
    }

    fn release(&mut self, before: u64) -> Vec<Report> {
        let mut out = Vec::new();
        while let Some(Reverse((t, ..))) = self.made.peek() {
            if *t >= before {
                break;
            }
            let Some(Reverse((time_ns, _, id, mut payload))) = self.made.pop() else {
                break;
            };
            self.sequencer.stamp(&mut payload);
            let cut_off = |s: &&Scheduled| {
                s.from_ns <= time_ns
                    && time_ns < s.until_ns
                    && s.fault == Fault::ReportOutage { node: id }
            };
            if self.faults.iter().any(|s| cut_off(&s)) {
                self.stats.reports_lost_to_outage += 1;
                continue;
            }
            self.deliver(
                Report {
                    time_ns,
                    source: Self::report_source(id),
                    payload,
                },
                &mut out,
            );
        }
        out
    }

    /// Passes one report through the report network into `out`.
    fn deliver(&mut self, r: Report, out: &mut Vec<Report>) {
        let d = &self.cfg.delivery;
        let (loss, duplicate, reorder, depth) = (d.loss, d.duplicate, d.reorder, d.reorder_depth);
        let mut draw = || (self.delivery_rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        let (lost, twice, late) = (draw() < loss, draw() < duplicate, draw() < reorder);
        if lost {
            self.stats.reports_lost += 1;
            return;
        }
        let time_ns = r.time_ns;
        if late && depth > 0 {
            self.stats.reports_reordered += 1;
            self.held.push_back((depth, r));
        } else {
            if twice {
                self.stats.reports_duplicated += 1;
                out.push(r.clone());
            }
            out.push(r);
        }
        // Held reports arrive once `depth` later ones overtook them, at the time of the last.
        for h in &mut self.held {
            h.0 = h.0.saturating_sub(1);
        }
        while self.held.front().is_some_and(|h| h.0 == 0) {
            if let Some((_, mut r)) = self.held.pop_front() {
                r.time_ns = r.time_ns.max(time_ns);
                out.push(r);
            }
        }
    }

    fn packet(f: &FlowSpec, n: u64) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]).ipv4(
            f.src.octets(),
            f.dst.octets(),
            64,
        );
        let header = if f.proto == 6 {
            14 + 20 + 20
        } else {
            14 + 20 + 8
        };
        let mut payload = vec![0u8; f.size.saturating_sub(header).max(8)];
        payload[..8].copy_from_slice(&n.to_be_bytes());
        let mut out = Vec::with_capacity(f.size);
        if f.proto == 6 {
            let _ = b
                .tcp(f.sport, f.dport, n as u32, 65535)
                .ack(1)
                .write(&mut out, &payload);
        } else {
            let _ = b.udp(f.sport, f.dport).write(&mut out, &payload);
        }
        out
    }

    fn report_source(id: u32) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, (id >> 8) as u8, id as u8)
    }

    /// A report made at `t` by switch `id`: numbered and sent when no earlier one can come
    /// ([`Fabric::take_reports`]): a packet's walk makes its later hops' reports before other
    /// packets' earlier ones.
    fn emit(&mut self, t: u64, id: u32, payload: Vec<u8>) {
        self.stats.reports += 1;
        self.made_count += 1;
        self.made.push(Reverse((t, self.made_count, id, payload)));
    }

    fn drop(&mut self, t: u64, place: Place, frame: &[u8], reason: u8, tel: &SimTelemetry) {
        *self.stats.dropped.entry(reason).or_default() += 1;
        let (id, node) = match place {
            Place::Leaf(l) => (l, &mut self.leaves[l as usize - 1].transit),
            Place::Spine(s) => {
                if self
                    .active(|f| matches!(f, Fault::NonIntSpine { spine } if *spine == s))
                    .is_some()
                {
                    return;
                }
                (spine_id(s), &mut self.spines[s as usize - 1])
            }
        };
        if let Some(r) = node.drop_report(frame, reason, tel) {
            self.emit(t, id, r);
        }
    }

    /// Routes at `place`: the egress port, or a drop reason.
    fn route(&self, place: Place, frame: &[u8], from_host: bool) -> Result<u32, u8> {
        let t = &self.cfg.topology;
        let dst = Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]);
        let Some((dst_leaf, dst_host)) =
            locate(dst).filter(|(l, h)| *l <= t.leaves && *h <= t.hosts_per_leaf)
        else {
            return Err(reason::ROUTING_MISS);
        };
        match place {
            Place::Leaf(l) => {
                if dst_leaf == l {
                    return Ok(dst_host);
                }
                if from_host && self.active(|f| matches!(f, Fault::RoutingMiss { leaf, dst_leaf: d } if *leaf == l && *d == dst_leaf)).is_some() {
                    return Err(reason::ROUTING_MISS);
                }
                let looping = |f: &Fault| matches!(f, Fault::Loop { leaf, dst_leaf: d, .. } if *leaf == l && *d == dst_leaf);
                if !from_host && let Some(Fault::Loop { spine, .. }) = self.active(looping) {
                    return Ok(t.uplink(*spine));
                }
                // Spines reachable from here that still reach the destination leaf (a failed link
                // withdraws its routes, as BGP would).
                let link_up = |leaf: u32, s: u32| {
                    self.active(|f| matches!(f, Fault::LinkDown { leaf: fl, spine } if *fl == leaf && *spine == s)).is_none()
                };
                let up: Vec<u32> = (1..=t.spines)
                    .filter(|&s| link_up(l, s) && link_up(dst_leaf, s))
                    .collect();
                if up.is_empty() {
                    return Err(reason::ROUTING_MISS);
                }
                Ok(t.uplink(up[(flow_hash(frame) % up.len() as u64) as usize]))
            }
            Place::Spine(s) => {
                if let Some(Fault::Loop { leaf, .. }) = self.active(|f| matches!(f, Fault::Loop { spine, dst_leaf: d, .. } if *spine == s && *d == dst_leaf)) {
                    return Ok(*leaf);
                }
                if self.active(|f| matches!(f, Fault::LinkDown { leaf, spine } if *leaf == dst_leaf && *spine == s)).is_some() {
                    return Err(reason::ROUTING_MISS);
                }
                Ok(dst_leaf)
            }
        }
    }

    fn port_gbps(&self, place: Place, port: u32) -> f64 {
        let slow = |f: &Fault| matches!(f, Fault::SlowPort { leaf, host, .. } if place == Place::Leaf(*leaf) && port == *host);
        if let Some(Fault::SlowPort { gbps, .. }) = self.active(slow) {
            return gbps.max(0.001);
        }
        match place {
            Place::Leaf(_) if port <= self.cfg.topology.hosts_per_leaf => {
                self.cfg.topology.host_gbps
            }
            _ => self.cfg.topology.fabric_gbps,
        }
    }

    /// Enqueues `bytes` at (node, port) at time `t`: the departure time, the occupancy seen and
    /// the port's utilization, or `None` when the buffer is full (tail drop).
    fn enqueue(&mut self, place: Place, port: u32, t: u64, bytes: u32) -> Option<Departure> {
        let gbps = self.port_gbps(place, port);
        let buffer = self.cfg.topology.buffer_bytes;
        let id = match place {
            Place::Leaf(l) => l,
            Place::Spine(s) => spine_id(s),
        };
        let q = self.queues.entry((id, port)).or_default();
        while let Some(&(depart, b)) = q.queued.front() {
            if depart > t {
                break;
            }
            q.queued.pop_front();
            q.bytes -= b;
        }
        let occupancy = q.bytes;
        self.stats.max_queue_cells = self
            .stats
            .max_queue_cells
            .max(occupancy.div_ceil(CELL_BYTES));
        if occupancy + bytes > buffer {
            return None;
        }
        let tx = (f64::from(bytes) * 8.0 / gbps) as u64;
        let depart = q.free_at.max(t) + tx;
        q.free_at = depart;
        q.queued.push_back((depart, bytes));
        q.bytes += bytes;
        let tx_util = q.account_tx(depart, bytes, gbps);
        Some(Departure {
            at: depart,
            occupancy,
            tx_util,
        })
    }

    /// Packet `p` reaches a switch: routed, queued at its egress port and processed by the
    /// switch's INT role there, it goes on to the next switch (an event at its arrival there),
    /// reaches its host, or is dropped.
    fn hop(&mut self, p: InFlight) {
        let InFlight {
            at: t,
            mut frame,
            place,
            in_port,
            from_host,
            sent_ns,
            hops,
            ..
        } = p;
        let topo = &self.cfg.topology;
        let (link_delay_ns, link_jitter_ns, buffer_bytes, hosts_per_leaf, mtu) = (
            topo.link_delay_ns,
            topo.link_jitter_ns,
            topo.buffer_bytes,
            topo.hosts_per_leaf,
            topo.mtu,
        );
        let mut tel = SimTelemetry {
            origin: self.clock_origin_ns,
            ingress: in_port,
            egress: 0,
            occupancy_cells: 0,
            latency_ns: 0,
            at_ns: t,
            egress_at: None,
            tx_util: None,
        };
        let egress = match self.route(place, &frame, from_host) {
            Ok(p) => p,
            Err(r) => return self.drop(t, place, &frame, r, &tel),
        };
        tel.egress = egress;
        if frame[22] <= 1 || hops >= MAX_HOPS {
            return self.drop(t, place, &frame, reason::TTL_ZERO, &tel);
        }
        let Some(Departure {
            at: depart,
            occupancy,
            tx_util,
        }) = self.enqueue(place, egress, t, frame.len() as u32)
        else {
            tel.occupancy_cells = buffer_bytes.div_ceil(CELL_BYTES);
            return self.drop(t, place, &frame, reason::TRAFFIC_MANAGER, &tel);
        };
        tel.occupancy_cells = occupancy.div_ceil(CELL_BYTES);
        tel.latency_ns = u32::try_from(depart - t).unwrap_or(u32::MAX);
        tel.egress_at = Some(depart);
        tel.tx_util = Some(tx_util);
        let to_host = matches!(place, Place::Leaf(_)) && egress <= hosts_per_leaf;
        let (id, outcome) = match place {
            Place::Leaf(l) => {
                let nodes = &mut self.leaves[l as usize - 1];
                let n = if from_host {
                    &mut nodes.source
                } else if to_host {
                    &mut nodes.sink
                } else {
                    &mut nodes.transit
                };
                (l, Some(n.process(&mut frame, &tel)))
            }
            Place::Spine(s) => {
                let non_int = self
                    .active(|f| matches!(f, Fault::NonIntSpine { spine } if *spine == s))
                    .is_some();
                let small = self
                    .active(|f| matches!(f, Fault::SmallMtu { spine, .. } if *spine == s))
                    .map(|f| match f {
                        Fault::SmallMtu { mtu, .. } => *mtu,
                        _ => mtu,
                    });
                let n = &mut self.spines[s as usize - 1];
                n.set_mtu(small.unwrap_or(mtu));
                (spine_id(s), (!non_int).then(|| n.process(&mut frame, &tel)))
            }
        };
        if let Some(out) = outcome {
            for r in out.reports {
                self.emit(depart, id, r);
            }
            if !out.forward {
                return;
            }
        }
        // The TTL is rewritten on egress, after INT processing saw the packet as received.
        let ip = 14;
        frame[ip + 8] -= 1;
        refresh_ipv4_checksum(&mut frame, ip);
        self.in_flight_seq += 1;
        // The jitter is drawn from the packet's hop number, so runs replay exactly.
        let jitter = match link_jitter_ns {
            0 => 0,
            j => (self.in_flight_seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % (j + 1),
        };
        let arrive = depart + link_delay_ns + jitter;
        if to_host {
            self.stats.delivered += 1;
            self.stats.latency_sum_ns += arrive - sent_ns;
            return;
        }
        let topo = &self.cfg.topology;
        let (next, in_port) = match place {
            Place::Leaf(l) => (Place::Spine(topo.spine_of_port(egress).unwrap_or(1)), l),
            Place::Spine(s) => (Place::Leaf(egress), topo.uplink(s)),
        };
        let (leaf, spine) = match next {
            Place::Spine(s) => (in_port, s),
            Place::Leaf(l) => (l, topo.spine_of_port(in_port).unwrap_or(0)),
        };
        // The cable is judged when the packet leaves, as the walk of one packet always did.
        let cut = |f: &Fault| matches!(f, Fault::SilentDrop { leaf: fl, spine: fs, .. } if *fl == leaf && *fs == spine);
        let lost = match self.active(cut) {
            // A draw per hop from the hop's sequence number: the same run loses the same packets.
            Some(Fault::SilentDrop { share, .. }) => {
                let draw = (splitmix(self.in_flight_seq) >> 11) as f64 / (1u64 << 53) as f64;
                *share >= 1.0 || draw < *share
            }
            _ => false,
        };
        if lost {
            self.stats.silent_drops += 1;
            return;
        }
        self.in_flight.push(Reverse(InFlight {
            at: arrive,
            seq: self.in_flight_seq,
            frame,
            place: next,
            in_port,
            from_host: false,
            sent_ns,
            hops: hops.saturating_add(1),
        }));
    }
}

/// A tiny deterministic generator (xorshift64): runs replay exactly from their seed, and the
/// simulator needs no statistical quality a crate would add.
pub(crate) struct Xorshift(u64);

impl Xorshift {
    pub(crate) fn new(seed: u64) -> Self {
        Xorshift(seed | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `lo..=hi`.
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The shape of a traffic mix (`[mix]` in a simulation file).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MixShape {
    /// Every n-th flow is an elephant (0: none).
    pub elephant_every: usize,
    /// An elephant's rate, Mb/s (1400-byte packets).
    pub elephant_mbps: f64,
    /// A mouse's rate, packets/s (200–599-byte packets).
    pub mouse_pps: f64,
    /// The share of flows that are TCP-like (port 443); the rest are UDP.
    pub tcp_share: f64,
    /// Packets each flow sends back to back in a burst, at its host's line rate, before a gap
    /// that keeps its mean rate (1: evenly spaced). Bursty traffic within the links' capacity:
    /// queues fill and drain without congestion.
    pub burst_packets: u32,
}

impl Default for MixShape {
    /// One in ten an elephant of 200 Mb/s, mice at 100 packets/s, half TCP-like: light enough
    /// for the simulator and a collector to run in real time on two cores.
    fn default() -> Self {
        MixShape {
            elephant_every: 10,
            elephant_mbps: 200.0,
            mouse_pps: 100.0,
            tcp_share: 0.5,
            burst_packets: 1,
        }
    }
}

/// The default traffic mix ([`MixShape::default`]): `n` flows between random hosts of different
/// leaves.
pub fn default_mix(t: &Topology, n: usize, seed: u64, end_ns: u64) -> Vec<FlowSpec> {
    mix(t, n, seed, end_ns, &MixShape::default())
}

/// `n` flows between random hosts of different leaves, shaped by `shape`.
pub fn mix(t: &Topology, n: usize, seed: u64, end_ns: u64, shape: &MixShape) -> Vec<FlowSpec> {
    let hosts = t.hosts();
    let mut rng = Xorshift::new(seed);
    let mut rnd = move || rng.next();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let (a, b) = (
            hosts[(rnd() % hosts.len() as u64) as usize],
            hosts[(rnd() % hosts.len() as u64) as usize],
        );
        if locate(a).map(|l| l.0) == locate(b).map(|l| l.0) {
            continue;
        }
        let elephant = shape.elephant_every > 0 && out.len() % shape.elephant_every == 0;
        let proto = if (rnd() % 1000) < (shape.tcp_share * 1000.0) as u64 {
            6
        } else {
            17
        };
        out.push(FlowSpec {
            src: a,
            dst: b,
            proto,
            sport: 10_000 + out.len() as u16,
            dport: if proto == 6 {
                443
            } else {
                5000 + (rnd() % 1000) as u16
            },
            pps: if elephant {
                shape.elephant_mbps * 1e6 / (1400.0 * 8.0)
            } else {
                shape.mouse_pps
            },
            size: if elephant {
                1400
            } else {
                200 + (rnd() % 400) as usize
            },
            start_ns: rnd() % 1_000_000,
            end_ns,
            burst: shape.burst_packets.max(1),
        });
    }
    out
}

/// SplitMix64's output function: a well-spread 64-bit value from a counter.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_is_the_last_complete_bin_per_mille() {
        let mut q = PortQueue::default();
        // 10 Gb/s: 1.25 MB per 1 ms bin. Half of that in bin 0...
        for k in 0..500u64 {
            assert_eq!(
                q.account_tx(k * 1_000, 1250, 10.0),
                0,
                "no complete bin yet"
            );
        }
        // ...is reported throughout bin 1.
        assert_eq!(q.account_tx(UTIL_BIN_NS, 1250, 10.0), 500);
        assert_eq!(q.account_tx(UTIL_BIN_NS + 999_999, 1250, 10.0), 500);
        // Bin 1 carried 2500 bytes: 2 per mille.
        assert_eq!(q.account_tx(2 * UTIL_BIN_NS, 1250, 10.0), 2);
        // An idle bin in between: the last complete bin (3) sent nothing.
        assert_eq!(q.account_tx(4 * UTIL_BIN_NS + 5, 1250, 10.0), 0);
        // More than the port can send (a rate change mid-bin) is capped at full scale.
        q.bin_bytes = 10_000_000;
        assert_eq!(q.account_tx(5 * UTIL_BIN_NS, 1250, 10.0), UTIL_FULL_SCALE);
    }

    fn xd_fabric(delivery: Delivery) -> Fabric {
        // Filters off: every packet reported at every hop.
        let mut f = Fabric::new(SimConfig {
            mode: Mode::Xd,
            delivery,
            filters: intscope_node::filter::FilterConfig::default(),
            ..SimConfig::default()
        })
        .unwrap();
        let shape = MixShape {
            elephant_every: 0,
            mouse_pps: 2_000.0,
            burst_packets: 3,
            ..MixShape::default()
        };
        for flow in mix(&Topology::default(), 16, 3, 200_000_000, &shape) {
            f.add_flow(flow);
        }
        f
    }

    fn run_all(f: &mut Fabric) -> Vec<Report> {
        let mut out = Vec::new();
        for step in 1..=20u64 {
            f.run(step * 10_000_000);
            out.extend(f.take_reports());
        }
        out.extend(f.take_all_reports());
        out
    }

    fn seq(r: &Report) -> (u32, u32) {
        let g = intscope_wire::report::GroupHeaderRepr::parse(&r.payload).unwrap();
        (g.node_id, g.sequence)
    }

    #[test]
    fn switches_number_their_reports_in_the_order_they_send_them() {
        let mut f = xd_fabric(Delivery::default());
        let reports = run_all(&mut f);
        assert_eq!(reports.len() as u64, f.stats.reports);
        assert!(reports.len() > 5_000, "{}", reports.len());
        assert!(
            reports.windows(2).all(|w| w[0].time_ns <= w[1].time_ns),
            "in time order"
        );
        let mut next: HashMap<u32, u32> = HashMap::new();
        for r in &reports {
            let (node, s) = seq(r);
            let n = next.entry(node).or_insert(0);
            assert_eq!(s, *n, "node {node}: one after the other");
            *n += 1;
        }
        assert_eq!(next.len(), 6, "four leaves, two spines");
    }

    #[test]
    fn the_report_network_loses_duplicates_and_reorders_as_configured() {
        let delivery = Delivery {
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.05,
            reorder_depth: 4,
            seed: 9,
        };
        let mut f = xd_fabric(delivery.clone());
        let reports = run_all(&mut f);
        let st = f.stats.clone();
        let made = st.reports as f64;
        for (got, share) in [
            (st.reports_lost, 0.1),
            (st.reports_duplicated, 0.05 * 0.9),
            (st.reports_reordered, 0.05 * 0.9),
        ] {
            let want = made * share;
            assert!(
                (got as f64 - want).abs() < want * 0.2,
                "{got} vs {want}: {st:?}"
            );
        }
        assert_eq!(
            reports.len() as u64,
            st.reports - st.reports_lost + st.reports_duplicated
        );
        let late = reports
            .windows(2)
            .filter(|w| seq(&w[1]).0 == seq(&w[0]).0 && seq(&w[1]).1 < seq(&w[0]).1)
            .count();
        assert!(late > 0, "reordered numbers arrive after later ones");
        let again = xd_fabric(delivery);
        let mut again = again;
        assert_eq!(run_all(&mut again), reports, "seeded: the same run again");
        assert!(matches!(
            Fabric::new(SimConfig {
                delivery: Delivery {
                    loss: 1.5,
                    ..Delivery::default()
                },
                ..SimConfig::default()
            }),
            Err(SimError::Share { .. })
        ));
    }

    #[test]
    fn bursts_keep_the_mean_rate() {
        let shape = MixShape {
            elephant_every: 0,
            mouse_pps: 1_000.0,
            burst_packets: 4,
            ..MixShape::default()
        };
        let mut f = Fabric::new(SimConfig::default()).unwrap();
        let flows = mix(&Topology::default(), 8, 5, 1_000_000_000, &shape);
        assert!(flows.iter().all(|f| f.burst == 4));
        for flow in flows {
            f.add_flow(flow);
        }
        f.run(1_000_000_000);
        // 8 flows at 1000 packets/s for a second, within the jitter.
        assert!((7_000..9_000).contains(&f.stats.sent), "{}", f.stats.sent);
        assert!(f.stats.max_queue_cells < 100, "{}", f.stats.max_queue_cells);
    }

    #[test]
    fn a_silent_drop_loses_its_share_of_the_packets_crossing_the_link() {
        let lost = |share: f64| {
            let mut f = Fabric::new(SimConfig::default()).unwrap();
            let flows = mix(
                &Topology::default(),
                64,
                9,
                500_000_000,
                &MixShape::default(),
            );
            for flow in flows {
                f.add_flow(flow);
            }
            f.schedule(Scheduled {
                from_ns: 0,
                until_ns: u64::MAX,
                fault: Fault::SilentDrop {
                    leaf: 1,
                    spine: 1,
                    share,
                },
            });
            f.run(500_000_000);
            f.stats.silent_drops
        };
        let (all, half) = (lost(1.0), lost(0.5));
        assert!(all > 200, "{all}");
        let ratio = half as f64 / all as f64;
        assert!((0.4..0.6).contains(&ratio), "{half} of {all}");
    }
}
