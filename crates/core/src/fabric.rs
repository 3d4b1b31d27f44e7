//! One shard of the fabric's state: nodes, their ports and queues, the links between them, and
//! report loss per source, with the detectors that watch them (hop latency, congestion and
//! microbursts with their culprit flows, drops, hop limit, MTU, hops without INT, lost reports).
//!
//! A node belongs to one shard ([`node_shard`]): its reports, its hops in every path, its queues
//! and the links leaving it. Every sample of a queue therefore reaches the same shard, which is
//! what a congestion episode and its culprit ranking need; the flows' half of correlation is
//! sharded by flow instead (`flow_shard`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap as HashMap;

use intscope_wire::locate::FlowKey;
use intscope_wire::report::drop_reason_name;

use crate::detect::DetectConfig;
use crate::event::{EventKind, Place, Raiser};
use crate::evidence::{Culprit, Evidence};
use crate::flow::PathGap;
use crate::id_table::{Cutoff, IdTable};
use crate::incident::{EndReason, IncidentKind, IncidentPlace, Unit};
use crate::incidents::{End, EpisodeTotals, FlowWeight, IncidentKey, Observation, RANKED_FLOWS};
use crate::limits::Limits;
use crate::rank;
use crate::record::{Hop, Record, Version};
use crate::seq::{SeqOutcome, SeqTracker};

/// Flows a congestion episode remembers for culprit ranking.
const EPISODE_FLOWS: usize = 4096;

/// A queue: node, egress port and queue ID, packed in one integer (what the open-episode list,
/// events and readers name a queue by). Orders like the tuple. (As a hash key, a `(u32, u32, u8)`
/// tuple was read back from a stack copy in wider words than the three stores that made it, a
/// store-forwarding stall; queues are now found through their node and port.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey(u128);

impl QueueKey {
    /// The key of queue `queue` on `node`'s egress `port`.
    pub fn new(node: u32, port: u32, queue: u8) -> Self {
        QueueKey((u128::from(node) << 64) | (u128::from(port) << 32) | u128::from(queue))
    }
    /// Node ID.
    pub fn node(self) -> u32 {
        (self.0 >> 64) as u32
    }
    /// Egress port.
    pub fn port(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// Queue ID.
    pub fn queue(self) -> u8 {
        self.0 as u8
    }
}

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
    episode: Option<Episode>,
    /// Switch clock of the last sample (the start of an episode lies after it).
    last_clock_ns: Option<u64>,
    /// The congestion episodes of its current incident, until their end event is raised.
    run: Option<Box<QueueRun>>,
}

/// The congestion episodes at one queue that make one incident — each starting within
/// `incident_merge_ns` (switch time) of the last one's end — and so one start and one end
/// event: the end waits until no episode followed within the merge window, so the events
/// never call a queue that stays congested for seconds a microburst (issue 29: events are
/// the incidents' timeline).
#[derive(Clone)]
struct QueueRun {
    /// Switch clock of its first episode's first congested sample.
    start_ns: u64,
    /// Switch clock of its last congested sample so far.
    last_high_ns: u64,
    /// Its last episode's end, once that episode closed (`None` while one is open).
    end: Option<End>,
    /// Receive time that episode closed (the end event is due a merge window later).
    closed_rx: u64,
    /// In the shard's list of runs whose end may be due.
    listed: bool,
    max_occupancy: u32,
    total: u64,
    /// Its longest episode's span: a microburst or congestion by the same rule as its
    /// incident's (`incidents::Entry::max_span_ns`).
    max_span_ns: u64,
    /// Per flow over its episodes: API ID, occupancy sum, samples (at most
    /// [`EPISODE_FLOWS`]); ordered, so the state reads the same whatever the shards.
    flows: std::collections::BTreeMap<FlowKey, (u64, u64, u64)>,
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

#[derive(Debug, Clone, Default)]
struct Episode {
    start_ns: u64,
    /// Switch clock of the last congested sample: where the episode ends.
    last_high_ns: u64,
    /// Report time of the last congested sample (for the quiet timeout).
    last_seen_ns: u64,
    max_occupancy: u32,
    /// Switch clock of the highest occupancy.
    max_at_ns: u64,
    total: u64,
    /// Congested samples.
    samples: u64,
    /// Of those, handed to the incident already.
    samples_reported: u64,
    /// Receive time of the last hand-over to the incident.
    reported_ns: u64,
    /// Per flow: its API ID, its occupancy sum and its samples over the episode.
    flows: HashMap<FlowKey, (u64, u64, u64)>,
}

/// How often (receive time) an open congestion episode updates its ongoing incident.
const EPISODE_UPDATE_NS: u64 = 100_000_000;

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

/// Samples of a latency anomaly a port holds until it is confirmed (`latency_confirm_ns`): a
/// few kilobytes per port while it waits, nothing otherwise.
pub const UNCONFIRMED_SAMPLES: usize = 16;

/// A port's anomalous latency samples held until the anomaly is confirmed: at most
/// [`UNCONFIRMED_SAMPLES`], later ones added to the last one's counts and peak (their flows are
/// not kept).
#[derive(Debug, Clone, Default)]
struct HeldLatency {
    samples: Vec<(Observation, Evidence)>,
    /// Switch time of the newest sample held or folded.
    last_at_ns: u64,
}

impl HeldLatency {
    fn first_at_ns(&self) -> u64 {
        self.samples
            .first()
            .map_or(self.last_at_ns, |(o, _)| o.at_ns)
    }

    fn hold(&mut self, o: Observation, ev: Evidence, at_ns: u64) {
        self.last_at_ns = at_ns;
        if self.samples.len() < UNCONFIRMED_SAMPLES {
            self.samples.push((o, ev));
        } else if let Some((last, _)) = self.samples.last_mut() {
            last.samples += 1;
            last.reports += 1;
            if last
                .value
                .zip(o.value)
                .is_some_and(|((v, _), (w, _))| v < w)
            {
                last.value = o.value;
                last.value_at_ns = Some(at_ns);
            }
        }
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
    /// Hop latency baseline (EWMA) of packets leaving through this port.
    pub latency_baseline: f64,
    /// Samples in the baseline.
    pub latency_samples: u32,
    /// Last hop latency.
    pub last_latency: Option<u32>,
    /// Drop reports received for this port (switches filter drop reports, so this is not a
    /// count of packets).
    pub drops: u64,
    /// Switch clock of the last anomalous hop latency while an anomaly lasts (the baseline is
    /// frozen until a normal sample ends it).
    latency_anomaly: Option<u64>,
    /// The samples of an anomaly not yet confirmed (`latency_confirm_ns`): they join the
    /// incident once the anomaly lasts, and are forgotten at the next normal sample.
    latency_unconfirmed: Option<Box<HeldLatency>>,
    /// Its egress queues, by queue ID.
    queues: IdTable<QueueState>,
    /// Links leaving through it, by the next node, then that node's ingress port (one, unless
    /// the port was recabled).
    links: IdTable<IdTable<LinkState>>,
}

impl PortState {
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

/// `(from node, from egress port, to node, to ingress port)`.
pub type LinkKey = (u32, u32, u32, u32);

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
            let last_seen = self
                .queue_mut(key)
                .and_then(|q| q.episode.as_ref())
                .map(|ep| ep.last_seen_ns);
            let Some(last_seen) = last_seen else {
                // Closed by a low sample.
                self.open_episodes.swap_remove(i);
                continue;
            };
            if now.saturating_sub(last_seen) <= quiet {
                self.update_episode(now, key);
                i += 1;
                continue;
            }
            self.open_episodes.swap_remove(i);
            let Some(ep) = self.queue_mut(key).and_then(|q| q.episode.take()) else {
                continue;
            };
            let end = End {
                at_ns: ep.last_high_ns,
                uncertainty_ns: 0,
                reason: EndReason::Quiet,
            };
            self.close_episode(now, key, ep, end);
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
        let merge = self.cfg.incident_merge_ns;
        let mut i = 0;
        while i < self.closing_runs.len() {
            let key = self.closing_runs[i];
            let Some(qs) = self.queue_mut(key) else {
                self.closing_runs.swap_remove(i);
                continue;
            };
            let due = match qs.run.as_deref_mut() {
                // Reopened by an episode: listed again when that one closes.
                Some(run) if run.end.is_none() => {
                    run.listed = false;
                    None
                }
                Some(run) if now.saturating_sub(run.closed_rx) >= merge || now == u64::MAX => {
                    qs.run.take()
                }
                Some(_) => {
                    i += 1;
                    continue;
                }
                None => None,
            };
            self.closing_runs.swap_remove(i);
            if let Some(run) = due {
                raise_run_end(&self.cfg, &mut self.raiser, now, key, *run);
            }
        }
    }

    /// Hands what an open episode counted since the last time to its ongoing incident, every
    /// [`EPISODE_UPDATE_NS`] (so a long episode shows its samples and stays alive).
    fn update_episode(&mut self, now: u64, key: QueueKey) {
        let Some(ep) = self.queue_mut(key).and_then(|q| q.episode.as_mut()) else {
            return;
        };
        if now.saturating_sub(ep.reported_ns) < EPISODE_UPDATE_NS
            || ep.samples == ep.samples_reported
        {
            return;
        }
        let new = ep.samples - ep.samples_reported;
        ep.samples_reported = ep.samples;
        ep.reported_ns = now;
        let o = Observation {
            samples: new,
            reports: new,
            value: Some((u64::from(ep.max_occupancy), Unit::Occupancy)),
            value_at_ns: Some(ep.max_at_ns),
            ..Observation::sample(ep.last_high_ns, ep.last_seen_ns)
        };
        let (start, max) = (ep.start_ns, ep.max_occupancy);
        self.raiser
            .observe(congestion_key(key), &o, move || Evidence::Episode {
                start_ns: start,
                duration_ns: 0,
                end_uncertainty_ns: 0,
                max_occupancy: max,
                culprit_flows: Vec::new(),
            });
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

    /// Queue `key`, if seen.
    fn queue_mut(&mut self, key: QueueKey) -> Option<&mut QueueState> {
        let port = self
            .nodes
            .get_mut(&key.node())?
            .ports
            .get_mut(&key.port())?;
        port.queues.get_mut(&u32::from(key.queue()))
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
                let cfg = &self.cfg;
                let anomalous = ps.latency_samples >= cfg.latency_warmup
                    && f64::from(lat) > cfg.latency_factor * ps.latency_baseline
                    && f64::from(lat) - ps.latency_baseline > cfg.latency_min_excess_ns as f64;
                let baseline = ps.latency_baseline;
                let clock = hop_clock(hop, now);
                // An anomaly does not move the baseline: it stays frozen while the anomaly
                // lasts, so a lasting fault stays visible instead of becoming the new normal.
                if !anomalous {
                    ps.latency_baseline = if ps.latency_samples == 0 {
                        f64::from(lat)
                    } else {
                        baseline + (f64::from(lat) - baseline) / 16.0
                    };
                }
                ps.latency_samples = ps.latency_samples.saturating_add(1);
                let key = || {
                    IncidentKey::new(
                        IncidentKind::Latency,
                        IncidentPlace {
                            node: Some(hop.node_id),
                            port: Some(port),
                            ..IncidentPlace::default()
                        },
                        None,
                    )
                };
                if anomalous {
                    let ev = move || Evidence::LatencyAnomaly {
                        hop_latency: lat,
                        baseline: baseline.round(),
                        factor: (f64::from(lat) / baseline.max(1.0) * 10.0).round() / 10.0,
                        queue_occupancy: hop.queue_occupancy(),
                    };
                    let flow = r.flow.zip(id);
                    let threshold = (cfg.latency_factor * baseline)
                        .max(baseline + cfg.latency_min_excess_ns as f64)
                        .round() as u64;
                    let o = Observation {
                        value: Some((u64::from(lat), Unit::Nanoseconds)),
                        threshold: Some(threshold),
                        baseline: Some(baseline.round() as u64),
                        flow: flow.map(FlowWeight::one),
                        ..Observation::sample(clock, now)
                    };
                    // An anomaly whose port went quiet is over (the log resolved it): the next
                    // anomalous sample is confirmed again. So are held samples with none after
                    // them for as long: filtered reports (SD-Fabric's, one per flow and
                    // interval while the latency holds) come that sparsely in a lasting
                    // anomaly, while the normal sample after a stall forgets it at once.
                    if ps
                        .latency_anomaly
                        .is_some_and(|last| clock.saturating_sub(last) > cfg.incident_quiet_ns)
                    {
                        ps.latency_anomaly = None;
                    }
                    if ps.latency_unconfirmed.as_ref().is_some_and(|held| {
                        clock.saturating_sub(held.last_at_ns) > cfg.incident_quiet_ns
                    }) {
                        ps.latency_unconfirmed = None;
                    }
                    let lasted = match &ps.latency_unconfirmed {
                        Some(held) => {
                            clock.saturating_sub(held.first_at_ns()) >= cfg.latency_confirm_ns
                        }
                        None => cfg.latency_confirm_ns == 0,
                    };
                    if ps.latency_anomaly.is_some() || lasted {
                        for (o, ev) in ps
                            .latency_unconfirmed
                            .take()
                            .map_or_else(Vec::new, |h| h.samples)
                        {
                            self.raiser.observe(key(), &o, move || ev);
                        }
                        self.raiser.observe(key(), &o, ev);
                        ps.latency_anomaly = Some(clock);
                    } else {
                        ps.latency_unconfirmed
                            .get_or_insert_with(Box::default)
                            .hold(o, ev(), clock);
                    }
                    let place = Place {
                        node: Some(hop.node_id),
                        port: Some(port),
                        queue: hop.queue_id(),
                        flow,
                    };
                    let symptom = key();
                    self.raiser.raise_at(
                        now,
                        clock,
                        EventKind::LatencyAnomaly,
                        place,
                        0,
                        Some(&symptom),
                        ev,
                    );
                } else {
                    ps.latency_unconfirmed = None;
                    if let Some(last) = ps.latency_anomaly.take() {
                        let end = End {
                            at_ns: clock,
                            uncertainty_ns: clock.saturating_sub(last),
                            reason: EndReason::Normal,
                        };
                        self.raiser
                            .end_episode(key(), end, EpisodeTotals::default());
                    }
                }
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
                let cfg = &self.cfg;
                let (open_episodes, raiser) = (&mut self.open_episodes, &mut self.raiser);
                if let Some((ep, end)) =
                    observe_queue(cfg, open_episodes, raiser, qs, key, occ, hop, r, id)
                {
                    self.close_episode(now, key, ep, end);
                }
            }
        }
    }
}

impl FabricShard {
    /// Ends a congestion episode: its incident learns the end, the samples, the peak and the
    /// flows that filled the queue (with their shares), and its run (the episodes of one
    /// incident) the same, for the end event due once no episode followed within the merge
    /// window ([`FabricShard::end_runs`]).
    #[inline(never)]
    fn close_episode(&mut self, now: u64, key: QueueKey, ep: Episode, end: End) {
        let span = ep.last_high_ns.saturating_sub(ep.start_ns);
        let ranked = rank::smallest(ep.flows.iter(), RANKED_FLOWS, |&(k, (_, sum, _))| {
            (Reverse(*sum), *k)
        });
        let flows: Vec<FlowWeight> = ranked
            .iter()
            .map(|(k, (id, sum, samples))| FlowWeight {
                key: **k,
                id: *id,
                weight: *sum,
                samples: *samples,
            })
            .collect();
        // The run's end event waits for the merge window (`sweep`): another episode within it
        // is the same incident.
        if let Some(run) = self.queue_mut(key).and_then(|q| q.run.as_deref_mut()) {
            run.last_high_ns = run.last_high_ns.max(ep.last_high_ns);
            run.end = Some(end);
            run.closed_rx = now;
            run.max_occupancy = run.max_occupancy.max(ep.max_occupancy);
            run.total = run.total.saturating_add(ep.total);
            run.max_span_ns = run.max_span_ns.max(span);
            for (k, &(id, sum, samples)) in &ep.flows {
                if run.flows.len() < EPISODE_FLOWS || run.flows.contains_key(k) {
                    let f = run.flows.entry(*k).or_insert((id, 0, 0));
                    f.1 += sum;
                    f.2 += samples;
                }
            }
            if !std::mem::replace(&mut run.listed, true) {
                self.closing_runs.push(key);
            }
        }
        let totals = EpisodeTotals {
            samples: ep.samples - ep.samples_reported,
            peak: Some((u64::from(ep.max_occupancy), Unit::Occupancy, ep.max_at_ns)),
            span_ns: span,
            flows,
        };
        self.raiser.end_episode(congestion_key(key), end, totals);
    }

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

/// A sample of queue `key` (state `qs`) from hop `hop` of record `r`: its series and congestion
/// episode. Returns the episode it ended (and the end time) for the shard to close.
#[allow(clippy::too_many_arguments)]
fn observe_queue(
    cfg: &DetectConfig,
    open_episodes: &mut Vec<QueueKey>,
    raiser: &mut Raiser,
    qs: &mut QueueState,
    key: QueueKey,
    occ: u32,
    hop: &Hop,
    r: &Record,
    id: Option<u64>,
) -> Option<(Episode, End)> {
    {
        let now = r.time_ns;
        // Episodes are timed on the switch's clock when its metadata carries timestamps (one
        // queue, one clock): transport delay and report batching do not stretch a microburst.
        let clock = hop.egress_ts().or(hop.ingress_ts()).unwrap_or(now);
        qs.occupancy = occ;
        qs.max_occupancy = qs.max_occupancy.max(occ);
        qs.interval.add(u64::from(occ));
        qs.hop_latency = hop.hop_latency().or(qs.hop_latency);
        qs.reports += 1;
        qs.last_seen_ns = now;
        qs.add_to_series(now, occ);
        let mut started = None;
        let mut ended = None;
        let last_clock = qs.last_clock_ns.replace(clock);
        if let Some(ep) = qs.episode.as_mut() {
            if occ <= cfg.congestion_end {
                // The end lies between the last congested sample and this one.
                let end = End {
                    at_ns: clock,
                    uncertainty_ns: clock.saturating_sub(ep.last_high_ns),
                    reason: EndReason::Normal,
                };
                ended = qs.episode.take().map(|ep| (ep, end));
            } else {
                ep.last_high_ns = clock;
                ep.last_seen_ns = now;
                if occ > ep.max_occupancy {
                    ep.max_occupancy = occ;
                    ep.max_at_ns = clock;
                }
                ep.total += u64::from(occ);
                ep.samples += 1;
                if let Some((k, id)) = r.flow.zip(id)
                    && (ep.flows.len() < EPISODE_FLOWS || ep.flows.contains_key(&k))
                {
                    let f = ep.flows.entry(k).or_insert((id, 0, 0));
                    f.1 += u64::from(occ);
                    f.2 += 1;
                }
            }
        } else if occ >= cfg.congestion_start || (r.congested && occ > cfg.congestion_end) {
            // The switch's Q flag starts an episode below `congestion_start`, but never at or
            // below `congestion_end`, where it would end at once.
            // Within the merge window of the last episode's end: the same incident, no new
            // start event. Past it, the last run's end is due now, before the new start.
            let merged = match qs.run.as_deref_mut() {
                Some(run)
                    if run.end.is_some_and(|e| {
                        clock.saturating_sub(e.at_ns) <= cfg.incident_merge_ns
                    }) =>
                {
                    run.end = None;
                    true
                }
                Some(_) => {
                    if let Some(run) = qs.run.take() {
                        raise_run_end(cfg, raiser, now, key, *run);
                    }
                    false
                }
                None => false,
            };
            if !merged {
                qs.run = Some(Box::new(QueueRun {
                    start_ns: clock,
                    last_high_ns: clock,
                    end: None,
                    closed_rx: now,
                    listed: false,
                    max_occupancy: occ,
                    total: 0,
                    max_span_ns: 0,
                    flows: std::collections::BTreeMap::new(),
                }));
            }
            let mut ep = Episode {
                start_ns: clock,
                last_high_ns: clock,
                last_seen_ns: now,
                max_occupancy: occ,
                max_at_ns: clock,
                total: u64::from(occ),
                samples: 1,
                samples_reported: 1,
                reported_ns: now,
                flows: HashMap::default(),
            };
            if let Some((k, id)) = r.flow.zip(id) {
                ep.flows.insert(k, (id, u64::from(occ), 1));
            }
            qs.episode = Some(ep);
            started = Some((merged, last_clock.map_or(0, |l| clock.saturating_sub(l))));
        }
        if let Some((merged, uncertainty)) = started {
            if !open_episodes.contains(&key) {
                open_episodes.push(key);
            }
            let threshold = cfg.congestion_start;
            let ev = move || Evidence::CongestionStart {
                queue_occupancy: occ,
                threshold,
                hop_latency: hop.hop_latency(),
                q_flag: r.congested,
            };
            let o = Observation {
                value: Some((u64::from(occ), Unit::Occupancy)),
                threshold: Some(u64::from(threshold)),
                start_uncertainty_ns: uncertainty,
                ..Observation::sample(clock, now)
            };
            raiser.observe(congestion_key(key), &o, ev);
            if !merged {
                raiser.raise_at(
                    now,
                    clock,
                    EventKind::CongestionStart,
                    queue_place(key, r.flow.zip(id)),
                    0,
                    Some(&congestion_key(key)),
                    ev,
                );
            }
        }
        ended
    }
}

/// The end event of a queue's congestion run: a microburst if none of its episodes' congested
/// samples spanned more than `microburst_max_ns` (as its incident is told), else the
/// congestion's end, from its first congested sample to its last, with the flows that filled
/// the queue over its episodes (the top ten, largest share first, ties by flow key).
fn raise_run_end(cfg: &DetectConfig, raiser: &mut Raiser, now: u64, key: QueueKey, run: QueueRun) {
    let Some(end) = run.end else {
        return;
    };
    let span = run.last_high_ns.saturating_sub(run.start_ns);
    let total = run.total.max(1) as f64;
    let culprits: Vec<Culprit> = rank::smallest(run.flows.iter(), 10, |&(k, (_, sum, _))| {
        (Reverse(*sum), *k)
    })
    .into_iter()
    .map(|(k, (id, sum, _))| Culprit {
        flow: *k,
        flow_id: *id,
        share: ((*sum as f64) / total * 1000.0).round() / 1000.0,
    })
    .collect();
    let kind = if run.max_span_ns <= cfg.microburst_max_ns {
        EventKind::Microburst
    } else {
        EventKind::CongestionEnd
    };
    let (start, max) = (run.start_ns, run.max_occupancy);
    let ev = move || Evidence::Episode {
        start_ns: start,
        duration_ns: span,
        end_uncertainty_ns: end.uncertainty_ns,
        max_occupancy: max,
        culprit_flows: culprits,
    };
    let now = if now == u64::MAX { run.closed_rx } else { now };
    let symptom = congestion_key(key);
    raiser.raise_at(
        now,
        end.at_ns,
        kind,
        queue_place(key, None),
        0,
        Some(&symptom),
        ev,
    );
}

/// Without the flows' API IDs, which depend on the shard that saw each flow first: the state
/// reads the same whatever the shards (`collector/tests/shards.rs`).
impl std::fmt::Debug for QueueRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueRun")
            .field("start_ns", &self.start_ns)
            .field("last_high_ns", &self.last_high_ns)
            .field("end", &self.end)
            .field("closed_rx", &self.closed_rx)
            .field("max_occupancy", &self.max_occupancy)
            .field("total", &self.total)
            .field("max_span_ns", &self.max_span_ns)
            .field("flows", &self.flows.len())
            .finish_non_exhaustive()
    }
}

/// The congestion incident key of queue `key`.
fn congestion_key(key: QueueKey) -> IncidentKey {
    IncidentKey::new(
        IncidentKind::Congestion,
        IncidentPlace {
            node: Some(key.node()),
            port: Some(key.port()),
            queue: Some(key.queue()),
            ..IncidentPlace::default()
        },
        None,
    )
}

/// Switch time of a hop: its egress timestamp, else its ingress one, else `now` (the report's
/// time) when its metadata carries none.
fn hop_clock(hop: &Hop, now: u64) -> u64 {
    hop.egress_ts().or(hop.ingress_ts()).unwrap_or(now)
}

fn queue_place(key: QueueKey, flow: Option<(FlowKey, u64)>) -> Place {
    Place {
        node: Some(key.node()),
        port: Some(key.port()),
        queue: Some(key.queue()),
        flow,
    }
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
