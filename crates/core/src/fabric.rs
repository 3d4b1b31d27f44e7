//! One shard of the fabric's state: nodes, their ports and queues, the links between them, and
//! report loss per source, with the detectors that watch them (hop latency, congestion and
//! microbursts with their culprit flows, drops, hop limit, MTU, hops without INT, lost reports).
//!
//! A node belongs to one shard ([`node_shard`]): its reports, its hops in every path, its queues
//! and the links leaving it. Every sample of a queue therefore reaches the same shard, which is
//! what a congestion episode and its culprit ranking need; the flows' half of correlation is
//! sharded by flow instead (`flow_shard`).

use std::collections::{BTreeMap, VecDeque};

use intscope_wire::report::drop_reason_name;

use crate::detect::congestion::{Congestion, Sample, Step};
use crate::detect::latency::{Latency, Sample as LatencySample};
use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::flow::PathGap;
use crate::id_table::{Cutoff, IdTable};
use crate::incident::{IncidentKind, IncidentPlace, Unit};
use crate::incidents::{FlowWeight, IncidentKey, Observation};
use crate::keys::{LinkKey, QueueKey};
use crate::limits::Limits;
use crate::record::{Hop, Record, Version};
use crate::seq::{SeqOutcome, SeqTracker};
use crate::thresholds::DetectConfig;

/// State of one queue.
#[derive(Debug, Clone, Default)]
pub struct QueueState {
    /// Since the last store flush: samples, occupancy sum and max, latency sum.
    pub interval: IntervalAgg,
    /// Last occupancy seen.
    pub occupancy: u32,
    /// Highest occupancy seen.
    pub max_occupancy: u32,
    /// Last hop latency seen through this queue.
    pub hop_latency: Option<u32>,
    /// Reports that went through it.
    pub reports: u64,
    /// Last report time.
    pub last_seen_ns: u64,
    /// The current 250 ms bucket of the heatmap: start, maximum occupancy (inline, so a
    /// sample does not reach into the list's heap buffer).
    bucket: Option<(u64, u32)>,
    /// The buckets before it, oldest first (bounded: with the current one, [`QUEUE_SERIES`]).
    closed_buckets: VecDeque<(u64, u32)>,
    /// Its congestion detector.
    congestion: Congestion,
}

impl QueueState {
    /// Recent (bucket start, maximum occupancy) for the heatmap, 250 ms buckets of report time,
    /// oldest first (at most [`QUEUE_SERIES`]).
    pub fn series(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.closed_buckets.iter().copied().chain(self.bucket)
    }

    /// Occupancy `occ` at report time `now` into the heatmap's series.
    fn add_to_series(&mut self, now: u64, occ: u32) {
        let bucket = now - now % QUEUE_BUCKET_NS;
        match &mut self.bucket {
            Some((t, max)) if *t == bucket => *max = (*max).max(occ),
            current => {
                if let Some(closed) = current.replace((bucket, occ)) {
                    if self.closed_buckets.len() == QUEUE_SERIES - 1 {
                        self.closed_buckets.pop_front();
                    }
                    self.closed_buckets.push_back(closed);
                }
            }
        }
    }
}

/// Occupancy buckets kept per queue (256 × 250 ms: the last 64 s).
pub const QUEUE_SERIES: usize = 256;
/// Width of an occupancy bucket.
pub const QUEUE_BUCKET_NS: u64 = 250_000_000;

/// Aggregates of one interval between store flushes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntervalAgg {
    /// Samples.
    pub samples: u64,
    /// Sum of the values (occupancy for queues, hop latency for ports).
    pub sum: u64,
    /// Largest value.
    pub max: u64,
    /// Drops (ports).
    pub drops: u64,
}

impl IntervalAgg {
    fn add(&mut self, v: u64) {
        self.samples += 1;
        self.sum += v;
        self.max = self.max.max(v);
    }
}

/// State of one port of a node, with the queues and links behind it: a hop finds all three
/// through its node and port (a hashed table per kind made four hash lookups a hop). Every table
/// here is an [`IdTable`], so no report can make a lookup a long scan.
#[derive(Debug, Clone, Default)]
pub struct PortState {
    /// Last report time it was seen (for eviction).
    pub last_seen_ns: u64,
    /// Since the last store flush: hop latency samples and drops.
    pub interval: IntervalAgg,
    /// Last egress Tx utilization.
    pub tx_util: Option<u32>,
    /// Last hop latency.
    pub last_latency: Option<u32>,
    /// Drop reports received for this port (switches filter drop reports, so this is not a
    /// count of packets).
    pub drops: u64,
    /// Its hop latency detector.
    latency: Latency,
    /// Its egress queues, by queue ID.
    queues: IdTable<QueueState>,
    /// Links leaving through it, by the next node, then that node's ingress port (one, unless
    /// the port was recabled).
    links: IdTable<IdTable<LinkState>>,
}

impl PortState {
    /// The hop latency baseline (EWMA) of packets leaving through it.
    pub fn latency_baseline(&self) -> f64 {
        self.latency.baseline()
    }

    /// Its egress queues: (queue ID, state).
    pub fn queues(&self) -> impl Iterator<Item = (u8, &QueueState)> {
        // Keys come from 8-bit queue IDs.
        self.queues.iter().map(|(&q, qs)| (q as u8, qs))
    }

    /// Its egress queues, to change.
    pub fn queues_mut(&mut self) -> impl Iterator<Item = (u8, &mut QueueState)> {
        self.queues.iter_mut().map(|(&q, qs)| (q as u8, qs))
    }

    /// Links leaving through it: (next node, its ingress port, state).
    pub fn links(&self) -> impl Iterator<Item = (u32, u32, &LinkState)> {
        self.links
            .iter()
            .flat_map(|(&to, by_port)| by_port.iter().map(move |(&to_port, l)| (to, to_port, l)))
    }
}

/// State of one node.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// First time seen (as reporter or hop).
    pub first_seen_ns: u64,
    /// Last time seen.
    pub last_seen_ns: u64,
    /// Reports this node sent.
    pub reports_sent: u64,
    /// Times it appeared as a hop.
    pub hops_seen: u64,
    /// Drops it reported, by reason code.
    pub drops: BTreeMap<u8, u64>,
    /// Its ports (egress side).
    pub ports: IdTable<PortState>,
}

/// A link between two nodes, seen from consecutive hops of paths.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LinkState {
    /// Reports whose path crossed it.
    pub reports: u64,
    /// Last time.
    pub last_seen_ns: u64,
}

/// Counters of processed records.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RecordCounters {
    /// Reports of version 2.0.
    pub v2: u64,
    /// Reports of version 1.0.
    pub v1: u64,
    /// Reports of version 0.5.
    pub v05: u64,
    /// Reports without a flow key (their inner packet could not be decoded).
    pub without_flow: u64,
}

impl RecordCounters {
    /// Adds `other`'s counts (the totals of several shards).
    pub fn add(&mut self, other: &RecordCounters) {
        self.v2 += other.v2;
        self.v1 += other.v1;
        self.v05 += other.v05;
        self.without_flow += other.without_flow;
    }
}

/// What the flow stage learned about a record, for the fabric stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowSeen {
    /// The flow's API ID (`None` without a flow key).
    pub id: Option<u64>,
    /// Hops an intermediate report recorded before this report's stack began.
    pub head_hops: u8,
    /// Where an INT-MD stack with an M bit or hops without INT left hops out, when the links
    /// learned tell ([`crate::flow::LinkTable::gap_in`]).
    pub gap: Option<PathGap>,
}

/// The shard of `n` that owns `node`.
#[inline]
pub fn node_shard(node: u32, n: usize) -> usize {
    // Multiplicative hashing (node IDs are often small consecutive numbers), then a multiply
    // instead of `% n`: a division per hop per shard cost a fifth of a two-shard pipeline.
    let mixed = (u64::from(node).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32;
    spread(mixed, n)
}

/// `x` mapped onto `0..n` in proportion (Lemire's multiply-shift range reduction).
#[inline]
pub fn spread(x: u32, n: usize) -> usize {
    ((u64::from(x) * n as u64) >> 32) as usize
}

/// One shard of the fabric's state.
#[derive(Debug, Default)]
pub struct FabricShard {
    cfg: DetectConfig,
    /// Report loss per source.
    pub seq: SeqTracker,
    /// Nodes, with their ports, queues and links (indexed by ID: every hop of every report
    /// looks one up).
    pub nodes: IdTable<NodeState>,
    /// Record counters (of the records whose reporter this shard owns).
    pub counters: RecordCounters,
    /// Latest record time seen.
    pub last_time_ns: u64,
    /// Queues with an open congestion episode.
    open_episodes: Vec<QueueKey>,
    /// Queues whose congestion run may be over (its end event due a merge window after its
    /// last episode closed); each at most once.
    closing_runs: Vec<QueueKey>,
    /// This shard's events.
    pub raiser: Raiser,
    /// This shard's share of the state's bounds.
    limits: Limits,
    /// Ports, queues and links held (nodes: `nodes.len()`).
    held: Held,
    /// An entry was added since the limits were last checked.
    grew: bool,
    /// Entries evicted to stay within the limits.
    pub evicted: Evicted,
}

/// Ports, queues and links a shard holds, kept as they are added and evicted (counting them
/// would walk every node).
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    ports: usize,
    queues: usize,
    links: usize,
}

impl Held {
    /// `port` and what it holds leave.
    fn forget_port(&mut self, port: &PortState) {
        // Saturating: a count that went wrong must not wrap into "always over the limit".
        self.ports = self.ports.saturating_sub(1);
        self.queues = self.queues.saturating_sub(port.queues.len());
        let links = port.links.iter().map(|(_, l)| l.len()).sum::<usize>();
        self.links = self.links.saturating_sub(links);
    }
}

/// Entries evicted, least recently seen first, to keep the state within its [`Limits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Evicted {
    /// Nodes (with their ports, queues and links, not counted again below).
    pub nodes: u64,
    /// (node, hw_id) sequence trackers (their loss stays in `reports_lost` and
    /// `report_groups_lost`).
    pub sources: u64,
    /// Ports.
    pub ports: u64,
    /// Queues.
    pub queues: u64,
    /// Links.
    pub links: u64,
    /// Flows (their last interval is not stored).
    pub flows: u64,
    /// (node, port) ends the flow stage's link tables refused at their bound
    /// ([`crate::flow::MAX_LINK_PORTS`] a shard): links not learned, edge ports not marked and
    /// packets past a silent hop not counted.
    pub link_ports: u64,
}

impl Evicted {
    /// Kinds and counts, for output.
    pub fn by_kind(&self) -> [(&'static str, u64); 7] {
        [
            ("node", self.nodes),
            ("source", self.sources),
            ("port", self.ports),
            ("queue", self.queues),
            ("link", self.links),
            ("flow", self.flows),
            ("link_port", self.link_ports),
        ]
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Evicted) {
        self.nodes += other.nodes;
        self.sources += other.sources;
        self.ports += other.ports;
        self.queues += other.queues;
        self.links += other.links;
        self.flows += other.flows;
        self.link_ports += other.link_ports;
    }
}

/// How many of `held` entries to evict when over `limit`: down to seven eighths of the limit, so
/// an eviction pass (which walks the table) comes once per `limit / 8` new entries.
pub fn excess(held: usize, limit: usize) -> usize {
    held.saturating_sub(limit - limit / 8).max(1)
}

impl FabricShard {
    /// A shard with these detector thresholds. Which nodes it holds is the state's business:
    /// it hands each shard the parts of records that belong there.
    pub fn new(cfg: DetectConfig) -> Self {
        FabricShard::with_limits(cfg, Limits::default())
    }

    /// A shard with these detector thresholds that holds at most `limits`.
    pub fn with_limits(cfg: DetectConfig, limits: Limits) -> Self {
        FabricShard {
            raiser: Raiser::with_config(&cfg),
            seq: SeqTracker::new(limits.sequence_window, limits.sources),
            cfg,
            limits,
            ..FabricShard::default()
        }
    }

    /// Evictions, of this shard's sequence trackers too.
    pub fn evicted(&self) -> Evicted {
        Evicted {
            sources: self.seq.evicted,
            ..self.evicted
        }
    }

    /// Ports, queues and links held.
    pub fn held(&self) -> (usize, usize, usize) {
        (self.held.ports, self.held.queues, self.held.links)
    }

    /// Brings every table back within its limit, evicting the least recently seen (report
    /// time) entries. Called after a part that added entries, so a table exceeds its limit by
    /// at most what one record adds.
    #[cold]
    #[inline(never)]
    fn enforce_limits(&mut self) {
        self.grew = false;
        let l = self.limits;
        if self.nodes.len() > l.nodes {
            let k = excess(self.nodes.len(), l.nodes);
            let mut times: Vec<u64> = self.nodes.iter().map(|(_, n)| n.last_seen_ns).collect();
            let mut cut = Cutoff::oldest(&mut times, k);
            let held = &mut self.held;
            let gone = self.nodes.retain(|_, n| {
                let evict = cut.take(n.last_seen_ns);
                if evict {
                    n.ports.iter().for_each(|(_, p)| held.forget_port(p));
                }
                !evict
            });
            self.evicted.nodes += gone as u64;
        }
        if self.held.ports > l.ports {
            let k = excess(self.held.ports, l.ports);
            let mut times = Vec::with_capacity(self.held.ports);
            for (_, n) in &self.nodes {
                times.extend(n.ports.iter().map(|(_, p)| p.last_seen_ns));
            }
            let mut cut = Cutoff::oldest(&mut times, k);
            let held = &mut self.held;
            for (_, n) in &mut self.nodes {
                let gone = n.ports.retain(|_, p| {
                    let evict = cut.take(p.last_seen_ns);
                    if evict {
                        held.forget_port(p);
                    }
                    !evict
                });
                self.evicted.ports += gone as u64;
            }
        }
        if self.held.queues > l.queues {
            let k = excess(self.held.queues, l.queues);
            let mut times = Vec::with_capacity(self.held.queues);
            for (_, n) in &self.nodes {
                for (_, p) in &n.ports {
                    times.extend(p.queues.iter().map(|(_, q)| q.last_seen_ns));
                }
            }
            let mut cut = Cutoff::oldest(&mut times, k);
            for (_, n) in &mut self.nodes {
                for (_, p) in &mut n.ports {
                    let gone = p.queues.retain(|_, q| !cut.take(q.last_seen_ns));
                    self.held.queues = self.held.queues.saturating_sub(gone);
                    self.evicted.queues += gone as u64;
                }
            }
        }
        if self.held.links > l.links {
            let k = excess(self.held.links, l.links);
            let mut times = Vec::with_capacity(self.held.links);
            for (_, n) in &self.nodes {
                for (_, p) in &n.ports {
                    times.extend(p.links().map(|(_, _, l)| l.last_seen_ns));
                }
            }
            let mut cut = Cutoff::oldest(&mut times, k);
            let mut gone = 0;
            for (_, n) in &mut self.nodes {
                for (_, p) in &mut n.ports {
                    p.links.retain(|_, to| {
                        gone += to.retain(|_, l| !cut.take(l.last_seen_ns));
                        !to.is_empty()
                    });
                }
            }
            self.held.links = self.held.links.saturating_sub(gone);
            self.evicted.links += gone as u64;
        }
    }

    /// Runs record `r` through the fabric's correlation and detection: its reporter's part,
    /// then each hop's. With several shards the state gives each shard only its parts
    /// ([`FabricShard::process_reporter`], [`FabricShard::process_hop`]).
    pub fn process(&mut self, r: &Record, seen: FlowSeen) {
        let parts = Parts::of(r, seen);
        self.reporter_part(r, &parts);
        for (index, hop) in r.hops().iter().enumerate() {
            self.hop_part(r, index, hop, &parts);
        }
    }

    /// The reporter's part of record `r` (in the reporter's shard): report counters, sequence
    /// loss, the reporter's node, drops, hops without INT, and an E or M bit no recorded hop
    /// can be blamed for. `parts`: [`Parts::of`] the record.
    pub fn process_reporter(&mut self, r: &Record, parts: &Parts) {
        self.reporter_part(r, parts);
    }

    /// Hop `index` of record `r` (in the shard of the hop's node): the node, its egress port's
    /// latency and utilization, the queue, the link to the next hop, and an E or M bit set just
    /// after this hop. `parts`: [`Parts::of`] the record, worked out once for all its hops.
    pub fn process_hop(&mut self, r: &Record, index: usize, parts: &Parts) {
        if let Some(hop) = r.hops().get(index) {
            self.hop_part(r, index, hop, parts);
        }
    }

    fn reporter_part(&mut self, r: &Record, parts: &Parts) {
        self.last_time_ns = self.last_time_ns.max(r.time_ns);
        self.observe_reporter(r);
        self.observe_reporter_flags(r, parts);
        if parts.last_recorded.is_none() && (r.hop_limit_exceeded || r.mtu_exceeded) {
            self.observe_limits(r, None, parts.seen);
        }
        if self.grew {
            self.enforce_limits();
        }
    }

    #[inline(always)]
    fn hop_part(&mut self, r: &Record, index: usize, hop: &Hop, parts: &Parts) {
        self.last_time_ns = self.last_time_ns.max(r.time_ns);
        let next = r.hops().get(index + 1).filter(|_| parts.links);
        self.observe_hop(r, hop, next, parts.seen.id);
        if parts.last_recorded == Some(index) {
            if r.hop_limit_exceeded || r.mtu_exceeded {
                self.observe_limits(r, Some(hop), parts.seen);
            }
            self.observe_hidden(r, Some((index, hop)), parts);
        }
        if self.grew {
            self.enforce_limits();
        }
    }

    fn observe_reporter(&mut self, r: &Record) {
        let now = r.time_ns;
        match r.version {
            Version::V2 => self.counters.v2 += 1,
            Version::V1 => self.counters.v1 += 1,
            Version::V05 => self.counters.v05 += 1,
        }
        if r.flow.is_none() {
            self.counters.without_flow += 1;
        }
        if r.first_in_datagram {
            self.observe_sequence(r);
        } else {
            self.seq.add_report(r.node_id, r.hw_id);
        }
        let grew = &mut self.grew;
        let reporter = self.nodes.get_or_insert_with(r.node_id, || {
            *grew = true;
            NodeState {
                first_seen_ns: now,
                ..NodeState::default()
            }
        });
        reporter.reports_sent += 1;
        reporter.last_seen_ns = now;
    }

    /// Closes congestion episodes of queues that went quiet. The state calls it at the same
    /// report times for every shard.
    #[inline(never)]
    pub fn sweep(&mut self, now: u64) {
        self.last_time_ns = self.last_time_ns.max(now);
        let quiet = self.cfg.episode_quiet_ns;
        let mut i = 0;
        while i < self.open_episodes.len() {
            let key = self.open_episodes[i];
            let raiser = &mut self.raiser;
            let Some(qs) = queue_mut(&mut self.nodes, key) else {
                self.open_episodes.swap_remove(i);
                continue;
            };
            let Some(last_seen) = qs.congestion.open_since() else {
                // Closed by a low sample.
                self.open_episodes.swap_remove(i);
                continue;
            };
            if now.saturating_sub(last_seen) <= quiet {
                qs.congestion.update(now, key, raiser);
                i += 1;
                continue;
            }
            self.open_episodes.swap_remove(i);
            if let Some((ep, end)) = qs.congestion.end_quiet()
                && qs.congestion.close(now, key, ep, end, raiser)
            {
                self.closing_runs.push(key);
            }
        }
        self.end_runs(now);
        let reorder = self.cfg.report_reorder_ns;
        for c in self.seq.confirm(now, reorder) {
            self.report_loss(c);
        }
        self.raiser.settle(now);
    }

    /// Raises the end events of congestion runs that no episode continued within the merge
    /// window (receive time `now`; `u64::MAX`: every closed run, the input is over).
    pub fn end_runs(&mut self, now: u64) {
        let mut i = 0;
        while i < self.closing_runs.len() {
            let key = self.closing_runs[i];
            let waiting = queue_mut(&mut self.nodes, key).is_some_and(|qs| {
                qs.congestion
                    .end_run_if_due(&self.cfg, &mut self.raiser, now, key)
            });
            if waiting {
                i += 1;
            } else {
                self.closing_runs.swap_remove(i);
            }
        }
    }

    /// Loss a sequence gap confirmed: a (rate-limited) event and the source's incident.
    fn report_loss(&mut self, c: crate::seq::Confirmed) {
        self.raiser.reports_lost(c.node, c.reports, c.received_ns);
        let place = Place {
            node: Some(c.node),
            ..Place::default()
        };
        let key = IncidentKey::new(
            IncidentKind::ReportLoss,
            IncidentPlace {
                node: Some(c.node),
                hw_id: Some(c.hw_id),
                ..IncidentPlace::default()
            },
            None,
        );
        self.raiser.raise_at(
            c.received_ns,
            c.received_ns,
            EventKind::LostReports,
            place,
            u64::from(c.hw_id),
            Some(&key),
            || Evidence::LostReports {
                hw_id: c.hw_id,
                lost: c.groups,
                reports_lost: c.reports,
                expected_seq: c.expected_seq,
                received_seq: c.received_seq,
            },
        );
        let o = Observation {
            samples: 1,
            reports: 0,
            reports_lost: c.reports,
            value: Some((c.reports, Unit::Reports)),
            // The reports went missing after the source's last one in order.
            start_uncertainty_ns: c.received_ns.saturating_sub(c.since_ns),
            ..Observation::sample(c.received_ns, c.received_ns)
        };
        self.raiser.observe(key, &o, || Evidence::LostReports {
            hw_id: c.hw_id,
            lost: c.groups,
            reports_lost: c.reports,
            expected_seq: c.expected_seq,
            received_seq: c.received_seq,
        });
    }

    /// Accounts the report's sequence number. Gaps count as loss at once; their event and
    /// incident wait for [`SeqTracker::confirm`] (at the sweep), so a reordered report that
    /// fills a gap raises nothing.
    fn observe_sequence(&mut self, r: &Record) {
        let outcome = self
            .seq
            .observe(r.node_id, r.hw_id, r.seq, r.version.seq_bits(), r.time_ns);
        debug_assert!(!matches!(outcome, SeqOutcome::Gap { lost: 0, .. }));
    }

    /// Every queue.
    pub fn queues(&self) -> impl Iterator<Item = (QueueKey, &QueueState)> {
        self.nodes.iter().flat_map(|(&node, n)| {
            n.ports.iter().flat_map(move |(&port, ps)| {
                ps.queues()
                    .map(move |(q, qs)| (QueueKey::new(node, port, q), qs))
            })
        })
    }

    /// Every link (they live in the shard of the node they leave).
    pub fn links(&self) -> impl Iterator<Item = (LinkKey, &LinkState)> {
        self.nodes.iter().flat_map(|(&node, n)| {
            n.ports.iter().flat_map(move |(&port, ps)| {
                ps.links()
                    .map(move |(to, to_port, l)| ((node, port, to, to_port), l))
            })
        })
    }

    /// Hop `hop` of record `r`: its node, its egress port, queue and, when `next` is the
    /// neighbour it forwarded to, the link between them. `id`: the record's flow's API ID. The
    /// flow is assembled only where it is used: most hops raise nothing.
    fn observe_hop(&mut self, r: &Record, hop: &Hop, next: Option<&Hop>, id: Option<u64>) {
        let now = r.time_ns;
        {
            let (grew, held) = (&mut self.grew, &mut self.held);
            let node = self.nodes.get_or_insert_with(hop.node_id, || {
                *grew = true;
                NodeState {
                    first_seen_ns: now,
                    ..NodeState::default()
                }
            });
            node.hops_seen += 1;
            node.last_seen_ns = now;
            let Some(port) = hop.egress_if() else { return };
            let ps = node.ports.get_or_insert_with(port, || {
                *grew = true;
                held.ports += 1;
                PortState::default()
            });
            ps.last_seen_ns = now;
            if let Some(util) = hop.egress_tx_util() {
                ps.tx_util = Some(util);
            }
            if let Some(lat) = hop.hop_latency() {
                ps.last_latency = Some(lat);
                ps.interval.add(u64::from(lat));
                let sample = LatencySample {
                    latency: lat,
                    clock: hop_clock(hop, now),
                    now,
                    node: hop.node_id,
                    port,
                    queue: hop.queue_id(),
                    occupancy: hop.queue_occupancy(),
                    flow: r.flow.zip(id),
                };
                ps.latency.sample(&self.cfg, &mut self.raiser, sample);
            }
            if let Some((to, to_port)) = next.and_then(|b| Some((b.node_id, b.ingress_if()?))) {
                let link = ps.links.get_or_default(to).get_or_insert_with(to_port, || {
                    *grew = true;
                    held.links += 1;
                    LinkState::default()
                });
                link.reports += 1;
                link.last_seen_ns = now;
            }
            if let (Some(q), Some(occ)) = (hop.queue_id(), hop.queue_occupancy()) {
                let key = QueueKey::new(hop.node_id, port, q);
                let qs = ps.queues.get_or_insert_with(u32::from(q), || {
                    *grew = true;
                    held.queues += 1;
                    QueueState::default()
                });
                qs.occupancy = occ;
                qs.max_occupancy = qs.max_occupancy.max(occ);
                qs.interval.add(u64::from(occ));
                qs.hop_latency = hop.hop_latency().or(qs.hop_latency);
                qs.reports += 1;
                qs.last_seen_ns = now;
                qs.add_to_series(now, occ);
                let sample = Sample {
                    key,
                    occupancy: occ,
                    clock: hop_clock(hop, now),
                    now,
                    hop_latency: hop.hop_latency(),
                    q_flag: r.congested,
                    flow: r.flow.zip(id),
                };
                match qs.congestion.sample(&self.cfg, &mut self.raiser, sample) {
                    Step::Held => {}
                    Step::Opened => {
                        if !self.open_episodes.contains(&key) {
                            self.open_episodes.push(key);
                        }
                    }
                    Step::Closed(ep, end) => {
                        if qs.congestion.close(now, key, ep, end, &mut self.raiser) {
                            self.closing_runs.push(key);
                        }
                    }
                }
            }
        }
    }
}

impl FabricShard {
    /// The node at the other end of `node`'s egress `port`, if a link from it has been seen
    /// (links live in the shard of the node they leave): the one seen last, if it was recabled.
    fn next_node(&self, node: u32, port: u32) -> Option<u32> {
        let ps = self.nodes.get(&node)?.ports.get(&port)?;
        ps.links()
            .max_by_key(|(_, _, l)| l.last_seen_ns)
            .map(|(to, _, _)| to)
    }

    /// The reporter's drop detector, and the hidden-hop detector when no hop before the
    /// reporter recorded (else it runs in that hop's shard, [`FabricShard::observe_hidden`]).
    fn observe_reporter_flags(&mut self, r: &Record, parts: &Parts) {
        let dropped = r.dropped || r.drop_reason.is_some();
        if dropped {
            self.observe_drop(r, parts.seen);
        }
        if parts.last_recorded.is_none() {
            self.observe_hidden(r, None, parts);
        }
    }

    /// A drop report: one incident per (reporting node, port, reason).
    fn observe_drop(&mut self, r: &Record, seen: FlowSeen) {
        let now = r.time_ns;
        let clock = r.switch_time();
        let flow = r.flow.zip(seen.id);
        let last = r.hops().last().copied().unwrap_or_default();
        let (grew, held) = (&mut self.grew, &mut self.held);
        let node = self.nodes.get_or_insert_with(r.node_id, || {
            *grew = true;
            NodeState {
                first_seen_ns: now,
                last_seen_ns: now,
                ..NodeState::default()
            }
        });
        *node.drops.entry(r.drop_reason.unwrap_or(0)).or_default() += 1;
        if let Some(p) = last.egress_if() {
            let ps = node.ports.get_or_insert_with(p, || {
                *grew = true;
                held.ports += 1;
                PortState::default()
            });
            ps.last_seen_ns = now;
            ps.drops += 1;
            ps.interval.drops += 1;
        }
        let ev = move || Evidence::Drop {
            drop_reason: r.drop_reason,
            drop_reason_name: r.drop_reason.and_then(drop_reason_name),
        };
        let cause: std::borrow::Cow<'static, str> = match r.drop_reason {
            Some(code) => match drop_reason_name(code) {
                Some(name) => name.into(),
                None => format!("reason-{code}").into(),
            },
            None => "unknown".into(),
        };
        let key = IncidentKey::new(
            IncidentKind::Drop,
            IncidentPlace {
                node: Some(r.node_id),
                port: last.egress_if(),
                ..IncidentPlace::default()
            },
            Some(cause),
        );
        let o = Observation {
            flow: flow.map(FlowWeight::one),
            ..Observation::sample(clock, now)
        };
        let place = Place {
            node: Some(r.node_id),
            port: last.egress_if(),
            queue: last.queue_id(),
            flow,
        };
        self.raiser
            .raise_at(now, clock, EventKind::Drop, place, 0, Some(&key), ev);
        self.raiser.observe(key, &o, ev);
    }

    /// Hops without INT, from the TTL: placed where the flow stage found the stack's gap
    /// (`parts.seen.gap`: a hop whose learned link leads elsewhere than the next hop of the
    /// stack), else between `last`, the last hop that recorded (its egress port), and the next
    /// INT hop (the peer: the next hop of the stack or the reporter), naming the node behind
    /// `last`'s port when the links seen tell it. Without a recorded hop before the reporter,
    /// at the reporter.
    fn observe_hidden(&mut self, r: &Record, last: Option<(usize, &Hop)>, parts: &Parts) {
        let Some(gap) = parts.gap.filter(|g| self.cfg.non_int_hops && g.non_int > 0) else {
            return;
        };
        let now = r.time_ns;
        // The hop before the gap, when the flow stage found it inside the stack.
        let located = parts.seen.gap.and_then(|g| {
            let at = r
                .hops()
                .iter()
                .enumerate()
                .find(|(_, h)| h.node_id == g.node && h.egress_if() == g.port)?;
            Some((at, g.suspect))
        });
        let last = located.map(|(at, _)| at).or(last);
        let next = last.and_then(|(i, _)| r.hops().get(i + 1));
        let peer = next.map_or(r.node_id, |h| h.node_id);
        let (node, port, suspect) = match (located, last) {
            (Some(((_, h), suspect)), _) => (h.node_id, h.egress_if(), Some(suspect)),
            (None, Some((_, h))) => (
                h.node_id,
                h.egress_if(),
                h.egress_if()
                    .and_then(|p| self.next_node(h.node_id, p))
                    .filter(|&n| n != peer),
            ),
            (None, None) => (r.node_id, None, None),
        };
        let clock = last.map_or_else(|| r.switch_time(), |(_, h)| hop_clock(h, now));
        let head_hops = parts.seen.head_hops;
        let ev = move || Evidence::NonIntHops {
            ip_ttl: r.ip_ttl,
            assumed_initial_ttl: gap.initial_ttl,
            ttl_decrement: gap.ttl_decrement,
            int_hops: r.int_hops + head_hops,
            non_int_hops: gap.non_int,
            last_int_node: last.map(|(_, h)| h.node_id),
            next_int_node: peer,
            suspect_node: suspect,
        };
        let flow = r.flow.zip(parts.seen.id);
        // One incident per hidden node when the links name it, else per port it hides
        // behind (the next INT hop differs from flow to flow: it is in the evidence).
        let iplace = match suspect {
            Some(n) => IncidentPlace {
                node: Some(n),
                ..IncidentPlace::default()
            },
            None => IncidentPlace {
                node: Some(node),
                port,
                ..IncidentPlace::default()
            },
        };
        let key = IncidentKey::new(IncidentKind::NonIntHops, iplace, None);
        let o = Observation {
            value: Some((u64::from(gap.non_int), Unit::Hops)),
            flow: flow.map(FlowWeight::one),
            ..Observation::sample(clock, now)
        };
        let place = Place {
            node: Some(node),
            port,
            flow,
            ..Place::default()
        };
        self.raiser
            .raise_at(now, clock, EventKind::NonIntHops, place, 0, Some(&key), ev);
        self.raiser.observe(key, &o, ev);
    }

    /// The hop-limit (E) and MTU (M) detectors. The E bit was set by the first hop that added
    /// nothing: the one after `last`, the last hop that recorded, found through the links seen
    /// so far (they live in `last`'s shard, which is why this runs there). Later hops may add
    /// metadata again after an M bit, so its hop is where the flow stage found the stack's gap
    /// (`seen.gap`), else the one after `last` unless that is the reporter (a sink strips INT:
    /// no egress MTU stops it). The event and the incident go to that hop when known, else to
    /// `last`'s egress port, else to the reporting node: one incident per place.
    #[cold]
    #[inline(never)]
    fn observe_limits(&mut self, r: &Record, last: Option<&Hop>, seen: FlowSeen) {
        let id = seen.id;
        for (flagged, kind, ikind) in [
            (
                r.hop_limit_exceeded,
                EventKind::HopLimit,
                IncidentKind::HopLimit,
            ),
            (r.mtu_exceeded, EventKind::MtuExceeded, IncidentKind::Mtu),
        ] {
            if !flagged {
                continue;
            }
            let after_last = last
                .and_then(|h| self.next_node(h.node_id, h.egress_if()?))
                .filter(|&n| ikind == IncidentKind::HopLimit || n != r.node_id);
            let suspect = match seen.gap {
                Some(g) if ikind == IncidentKind::Mtu => Some(g.suspect),
                _ => after_last,
            };
            let ev = move || Evidence::Limit {
                int_hops: r.int_hops,
                path: r.hops().iter().map(|h| h.node_id).collect(),
                last_recorded_node: last.map(|h| h.node_id),
                last_recorded_egress_port: last.and_then(|h| h.egress_if()),
                suspect_node: suspect,
                reported_by: r.node_id,
            };
            let iplace = match (suspect, last) {
                (Some(n), _) => IncidentPlace {
                    node: Some(n),
                    ..IncidentPlace::default()
                },
                (None, Some(h)) => IncidentPlace {
                    node: Some(h.node_id),
                    port: h.egress_if(),
                    ..IncidentPlace::default()
                },
                (None, None) => IncidentPlace {
                    node: Some(r.node_id),
                    ..IncidentPlace::default()
                },
            };
            let flow = r.flow.zip(id);
            let clock = last.map_or_else(|| r.switch_time(), |h| hop_clock(h, r.time_ns));
            let o = Observation {
                flow: flow.map(FlowWeight::one),
                ..Observation::sample(clock, r.time_ns)
            };
            let key = IncidentKey::new(ikind, iplace, None);
            let place = Place {
                node: Some(suspect.unwrap_or(r.node_id)),
                flow,
                ..Place::default()
            };
            self.raiser
                .raise_at(r.time_ns, clock, kind, place, 0, Some(&key), ev);
            self.raiser.observe(key, &o, ev);
        }
    }
}

/// Queue `key` among `nodes`, if seen.
fn queue_mut(nodes: &mut IdTable<NodeState>, key: QueueKey) -> Option<&mut QueueState> {
    let port = nodes.get_mut(&key.node())?.ports.get_mut(&key.port())?;
    port.queues.get_mut(&u32::from(key.queue()))
}

/// Switch time of a hop: its egress timestamp, else its ingress one, else `now` (the report's
/// time) when its metadata carries none.
fn hop_clock(hop: &Hop, now: u64) -> u64 {
    hop.egress_ts().or(hop.ingress_ts()).unwrap_or(now)
}

/// What every part of a record needs, worked out once per record: what the flow stage learned
/// and what the record's flags and TTL say about its path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Parts {
    seen: FlowSeen,
    /// Hops that forwarded without INT, from the TTL.
    gap: Option<TtlGap>,
    /// Whether consecutive hops are neighbours: only if no hop in between went unrecorded.
    links: bool,
    /// Index of the last hop that recorded (see [`last_recorded_hop`]).
    last_recorded: Option<usize>,
}

impl Parts {
    /// Of record `r`, which the flow stage saw as `seen`.
    pub fn of(r: &Record, seen: FlowSeen) -> Self {
        let gap = non_int_hops(r, seen.head_hops);
        let links = !(r.mtu_exceeded
            || r.hop_limit_exceeded
            || r.path_truncated
            || gap.as_ref().is_some_and(|g| g.non_int > 0));
        let last_recorded = last_recorded_hop(r);
        Parts {
            seen,
            gap,
            links,
            last_recorded,
        }
    }
}

/// How a packet's TTL compares with the INT hops it recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TtlGap {
    /// The sender's initial TTL as assumed.
    initial_ttl: u8,
    /// Hops that decremented the TTL.
    ttl_decrement: u8,
    /// Of those, hops that added no INT metadata.
    pub(crate) non_int: u8,
}

/// Hops that forwarded the packet without INT, from the TTL: `None` when the record cannot tell
/// (no TTL, no INT hops, or an M or E bit or a truncated stack, which hide INT hops that TTL
/// would count as non-INT). `head_hops` recorded the start of the path in an intermediate report.
pub(crate) fn non_int_hops(r: &Record, head_hops: u8) -> Option<TtlGap> {
    if r.int_hops == 0 || r.mtu_exceeded || r.hop_limit_exceeded || r.path_truncated {
        return None;
    }
    let ttl = r.ip_ttl?;
    // The sender's initial TTL is not on the wire: take the usual default at or above it.
    let initial_ttl = [32u8, 64, 128, 255]
        .into_iter()
        .find(|&i| i >= ttl)
        .unwrap_or(255);
    let ttl_decrement = initial_ttl - ttl;
    Some(TtlGap {
        initial_ttl,
        ttl_decrement,
        non_int: ttl_decrement.saturating_sub(r.int_hops.saturating_add(head_hops)),
    })
}

/// Index of the last hop of the packet's INT stack: the hop before the reporter's own metadata when the
/// reporter added it (a sink reporting its own hop), else the newest.
fn last_recorded_hop(r: &Record) -> Option<usize> {
    match r.hops() {
        [.., _, own] if own.node_id == r.node_id => Some(r.hops().len() - 2),
        [.., newest] if newest.node_id != r.node_id => Some(r.hops().len() - 1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_heatmap_keeps_each_buckets_maximum_and_the_newest_buckets() {
        let mut q = QueueState::default();
        q.add_to_series(10, 5);
        q.add_to_series(20, 9);
        q.add_to_series(30, 7);
        q.add_to_series(QUEUE_BUCKET_NS + 1, 3);
        assert_eq!(
            q.series().collect::<Vec<_>>(),
            [(0, 9), (QUEUE_BUCKET_NS, 3)]
        );
        for b in 2..QUEUE_SERIES as u64 + 10 {
            q.add_to_series(b * QUEUE_BUCKET_NS, b as u32);
        }
        let series: Vec<_> = q.series().collect();
        assert_eq!(series.len(), QUEUE_SERIES);
        let newest = QUEUE_SERIES as u64 + 9;
        assert_eq!(
            series.last(),
            Some(&(newest * QUEUE_BUCKET_NS, newest as u32))
        );
        assert_eq!(
            series[0].0,
            (newest + 1 - QUEUE_SERIES as u64) * QUEUE_BUCKET_NS
        );
    }

    proptest! {
        #[test]
        fn queue_keys_keep_their_parts_and_the_tuple_order(a: (u32, u32, u8), b: (u32, u32, u8)) {
            let (ka, kb) = (QueueKey::new(a.0, a.1, a.2), QueueKey::new(b.0, b.1, b.2));
            prop_assert_eq!((ka.node(), ka.port(), ka.queue()), a);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }
    }
}
