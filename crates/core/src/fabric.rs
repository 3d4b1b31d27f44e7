//! One shard of the fabric's state: nodes, their ports and queues, the links between them, and
//! report loss per source. The shard keeps the state and feeds the detectors (`detect`: hop
//! latency, congestion and microbursts with their culprit flows, drops, hop limit, MTU, hops
//! without INT, lost reports), which write what they find into its outbox.
//!
//! A node belongs to one shard ([`node_shard`]): its reports, its hops in every path, its queues
//! and the links leaving it. Every sample of a queue therefore reaches the same shard, which is
//! what a congestion episode and its culprit ranking need; the flows' half of correlation is
//! sharded by flow instead (`flow_shard`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::detect::congestion::{Congestion, Sample, Step};
use crate::detect::latency::{Latency, Sample as LatencySample};
use crate::detect::non_int::{TtlGap, non_int_hops};
use crate::detect::{drop, limits, non_int, report_loss};
use crate::event::Raiser;
use crate::fast_path::Fold;
use crate::flow_ref::FlowSeen;
use crate::id_table::{Cutoff, IdTable};
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

    /// Occupancy `occ` at report time `now` into the heatmap's series: a bucket before the
    /// current one (a fold of deferred reports) joins its place in the list, if it is kept.
    fn add_to_series(&mut self, now: u64, occ: u32) {
        let bucket = now - now % QUEUE_BUCKET_NS;
        match &mut self.bucket {
            Some((t, max)) if *t == bucket => *max = (*max).max(occ),
            Some((t, _)) if *t > bucket => {
                let closed = &mut self.closed_buckets;
                match closed.iter().rposition(|&(b, _)| b <= bucket) {
                    Some(i) if closed[i].0 == bucket => closed[i].1 = closed[i].1.max(occ),
                    Some(i) => closed.insert(i + 1, (bucket, occ)),
                    None => closed.push_front((bucket, occ)),
                }
                if closed.len() > QUEUE_SERIES - 1 {
                    closed.pop_front();
                }
            }
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
    /// Adds `n` samples of sum `sum` and largest `max`.
    fn add_many(&mut self, n: u32, sum: u64, max: u32) {
        self.samples += u64::from(n);
        self.sum += sum;
        self.max = self.max.max(u64::from(max));
    }

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
    /// Listed in its shard's ports whose latency detector needs every sample.
    hot_listed: bool,
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
    /// Ports whose detectors need every sample, for the flow stage's fast path.
    hot: Arc<HotPorts>,
    /// Ports whose latency detector needs every sample, warming up or in an anomaly (until
    /// the next [`FabricShard::publish_hot`] finds it done), each once.
    latency_hot: Vec<(u32, u32)>,
    /// A port's detector may have stopped needing every sample since the last publication.
    hot_ended: bool,
}

/// Words of a [`HotPorts`] set.
const HOT_WORDS: usize = 64;

/// The ports of one fabric shard whose latency or congestion detector needs every sample (a
/// latency baseline warming up, a latency anomaly held or raised, a congestion episode open),
/// as a bit set of (node, port)
/// hashes that the flow stage reads without the shard's lock: a report crossing such a port
/// goes through the detectors (`crate::fast_path`). A port is marked the moment its episode
/// starts and unmarked at the end of the shard's batch in which it ended; a hash shared with
/// another port only sends more reports through the detectors.
#[derive(Debug)]
pub struct HotPorts {
    words: [AtomicU64; HOT_WORDS],
}

impl Default for HotPorts {
    fn default() -> Self {
        HotPorts {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The word and bit of `(node, port)` in a [`HotPorts`].
#[inline]
fn hot_bit(node: u32, port: u32) -> (usize, u64) {
    let h = (u64::from(node) << 32 | u64::from(port)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
    ((h >> 6) as usize % HOT_WORDS, 1 << (h & 63))
}

impl HotPorts {
    /// Whether `(node, port)` (or a port sharing its hash) is marked.
    #[inline]
    pub fn contains(&self, node: u32, port: u32) -> bool {
        let (w, bit) = hot_bit(node, port);
        self.words[w].load(Ordering::Relaxed) & bit != 0
    }

    fn insert(&self, node: u32, port: u32) {
        let (w, bit) = hot_bit(node, port);
        self.words[w].fetch_or(bit, Ordering::Relaxed);
    }
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

    /// The set of this shard's ports whose detectors need every sample, to share with the
    /// flow stage.
    pub fn hot_ports(&self) -> Arc<HotPorts> {
        Arc::clone(&self.hot)
    }

    /// Unmarks the ports whose episodes ended: the set is rebuilt from the open congestion
    /// episodes and the ports whose latency detector still warms up or holds an anomaly. The state calls
    /// it after each batch.
    pub fn publish_hot(&mut self) {
        if !std::mem::take(&mut self.hot_ended) {
            return;
        }
        let mut words = [0u64; HOT_WORDS];
        let (nodes, cfg) = (&mut self.nodes, &self.cfg);
        self.latency_hot.retain(|&(node, port)| {
            let Some(p) = nodes.get_mut(&node).and_then(|n| n.ports.get_mut(&port)) else {
                return false;
            };
            p.hot_listed = p.latency.needs_every_sample(cfg);
            p.hot_listed
        });
        let nodes = &self.nodes;
        let open = self
            .open_episodes
            .iter()
            .filter(|&&k| queue_open(nodes, k))
            .map(|k| (k.node(), k.port()));
        for (node, port) in self.latency_hot.iter().copied().chain(open) {
            let (w, bit) = hot_bit(node, port);
            words[w] |= bit;
        }
        for (word, w) in self.hot.words.iter().zip(words) {
            word.store(w, Ordering::Relaxed);
        }
    }

    /// Adds what deferred reports left for one hop (`crate::fast_path`): its node, port,
    /// link and queue count them as if each had come through [`FabricShard::process_hop`],
    /// but for the detectors, which those reports had nothing new for. A report seen since,
    /// or at the same instant, keeps its last values.
    pub fn fold(&mut self, f: &Fold) {
        let now = f.last_ns;
        self.last_time_ns = self.last_time_ns.max(now);
        let (grew, held) = (&mut self.grew, &mut self.held);
        let node = node_entry(&mut self.nodes, grew, f.node, now);
        node.hops_seen += u64::from(f.reports);
        node.last_seen_ns = node.last_seen_ns.max(now);
        if let Some(port) = f.port {
            let ps = port_entry(node, (grew, held), port);
            let newest = now > ps.last_seen_ns;
            ps.last_seen_ns = ps.last_seen_ns.max(now);
            if let Some(util) = f.tx_util().filter(|_| newest) {
                ps.tx_util = Some(util);
            }
            let lat = f.latency;
            if lat.n > 0 {
                if newest {
                    ps.last_latency = Some(lat.last);
                }
                ps.interval.add_many(lat.n, lat.sum, lat.max);
                let mean = lat.sum as f64 / f64::from(lat.n);
                ps.latency.absorb(&self.cfg, lat.n, mean);
            }
            if let Some(to) = f.link {
                let link = link_entry(ps, (grew, held), to);
                link.reports += u64::from(f.reports);
                link.last_seen_ns = link.last_seen_ns.max(now);
            }
            let occ = f.occupancy;
            if let (Some(q), true) = (f.queue, occ.n > 0) {
                let qs = queue_entry(ps, (grew, held), q);
                let newest = now > qs.last_seen_ns;
                if newest {
                    qs.occupancy = occ.last;
                    if lat.n > 0 {
                        qs.hop_latency = Some(lat.last);
                    }
                }
                qs.max_occupancy = qs.max_occupancy.max(occ.max);
                qs.interval.add_many(occ.n, occ.sum, occ.max);
                qs.reports += u64::from(occ.n);
                qs.last_seen_ns = qs.last_seen_ns.max(now);
                qs.add_to_series(f.bucket_ns, occ.max);
                qs.congestion.saw(f.last_clock);
            }
        }
        if self.grew {
            self.enforce_limits();
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
        // Evicted ports leave the set of those in an episode.
        self.hot_ended = true;
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
        if seen.unchanged {
            return self.unchanged_reporter_part(r);
        }
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
        if parts.seen.unchanged {
            self.unchanged_reporter_part(r);
        } else {
            self.reporter_part(r, parts);
        }
    }

    /// Hop `index` of record `r` (in the shard of the hop's node): the node, its egress port's
    /// latency and utilization, the queue, the link to the next hop, and an E or M bit set just
    /// after this hop. `parts`: [`Parts::of`] the record, worked out once for all its hops.
    pub fn process_hop(&mut self, r: &Record, index: usize, parts: &Parts) {
        if parts.seen.unchanged {
            // Deferred: its fold comes at the sweep.
            return;
        }
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

    /// The reporter's part of a record whose hops were deferred (`crate::fast_path`): no flag
    /// and no hop without INT, so only its counters.
    fn unchanged_reporter_part(&mut self, r: &Record) {
        self.last_time_ns = self.last_time_ns.max(r.time_ns);
        self.observe_reporter(r);
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
            self.hot_ended = true;
            if let Some((ep, end)) = qs.congestion.end_quiet()
                && qs.congestion.close(now, key, ep, end, raiser)
            {
                self.closing_runs.push(key);
            }
        }
        self.end_runs(now);
        let reorder = self.cfg.report_reorder_ns;
        for c in self.seq.confirm(now, reorder) {
            report_loss::raise(&mut self.raiser, c);
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
            let node = node_entry(&mut self.nodes, grew, hop.node_id, now);
            node.hops_seen += 1;
            node.last_seen_ns = now;
            let Some(port) = hop.egress_if() else { return };
            let ps = port_entry(node, (grew, held), port);
            ps.last_seen_ns = now;
            if let Some(util) = hop.egress_tx_util() {
                ps.tx_util = Some(util);
            }
            if let Some(lat) = hop.hop_latency() {
                ps.last_latency = Some(lat);
                ps.interval.add(u64::from(lat));
                let sample = LatencySample {
                    latency: lat,
                    clock: hop.clock_or(now),
                    now,
                    node: hop.node_id,
                    port,
                    queue: hop.queue_id(),
                    occupancy: hop.queue_occupancy(),
                    flow: r.flow.as_ref().zip(id),
                };
                ps.latency.sample(&self.cfg, &mut self.raiser, sample);
                let needs = ps.latency.needs_every_sample(&self.cfg);
                if needs != ps.hot_listed {
                    if needs {
                        ps.hot_listed = true;
                        self.latency_hot.push((hop.node_id, port));
                        self.hot.insert(hop.node_id, port);
                    } else {
                        self.hot_ended = true;
                    }
                }
            }
            if let Some(to) = next.and_then(|b| Some((b.node_id, b.ingress_if()?))) {
                let link = link_entry(ps, (grew, held), to);
                link.reports += 1;
                link.last_seen_ns = now;
            }
            if let (Some(q), Some(occ)) = (hop.queue_id(), hop.queue_occupancy()) {
                let key = QueueKey::new(hop.node_id, port, q);
                let qs = queue_entry(ps, (grew, held), q);
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
                    clock: hop.clock_or(now),
                    now,
                    hop_latency: hop.hop_latency(),
                    q_flag: r.congested,
                    flow: r.flow.as_ref().zip(id),
                };
                match qs.congestion.sample(&self.cfg, &mut self.raiser, sample) {
                    Step::Held => {}
                    Step::Opened => {
                        self.hot.insert(hop.node_id, port);
                        if !self.open_episodes.contains(&key) {
                            self.open_episodes.push(key);
                        }
                    }
                    Step::Closed(ep, end) => {
                        self.hot_ended = true;
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

    /// A drop report: counted at its node and port, then judged (`detect::drop`).
    fn observe_drop(&mut self, r: &Record, seen: FlowSeen) {
        let now = r.time_ns;
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
            let ps = port_entry(node, (grew, held), p);
            ps.last_seen_ns = now;
            ps.drops += 1;
            ps.interval.drops += 1;
        }
        // The node the port leads to, for a drop on its way out: a link's two ends are one
        // cable to the grouping (a small MTU at the other end).
        let peer = last
            .egress_if()
            .and_then(|p| next_node(&self.nodes, r.node_id, p))
            .or(seen.drop_peer);
        drop::raise(&mut self.raiser, r, flow, last, peer);
    }

    /// Hops without INT (`detect::non_int`), judged in the shard of `last`, whose links tell
    /// which node hides behind its port.
    fn observe_hidden(&mut self, r: &Record, last: Option<(usize, &Hop)>, parts: &Parts) {
        let nodes = &self.nodes;
        non_int::raise(
            &self.cfg,
            &mut self.raiser,
            r,
            last,
            parts.gap,
            parts.seen,
            |node, port| next_node(nodes, node, port),
        );
    }

    /// The hop-limit (E) and MTU (M) detectors (`detect::limits`), judged in the shard of
    /// `last`, whose links tell the hop after it.
    #[cold]
    #[inline(never)]
    fn observe_limits(&mut self, r: &Record, last: Option<&Hop>, seen: FlowSeen) {
        let nodes = &self.nodes;
        limits::raise(&mut self.raiser, r, last, seen, |node, port| {
            next_node(nodes, node, port)
        });
    }
}

/// The node at the other end of `node`'s egress `port` among `nodes`, if a link from it has
/// been seen (links live in the shard of the node they leave): the one seen last, if it was
/// recabled.
fn next_node(nodes: &IdTable<NodeState>, node: u32, port: u32) -> Option<u32> {
    let ps = nodes.get(&node)?.ports.get(&port)?;
    ps.links()
        .max_by_key(|(_, _, l)| l.last_seen_ns)
        .map(|(to, _, _)| to)
}

/// Queue `key` among `nodes`, if seen.
fn queue_mut(nodes: &mut IdTable<NodeState>, key: QueueKey) -> Option<&mut QueueState> {
    let port = nodes.get_mut(&key.node())?.ports.get_mut(&key.port())?;
    port.queues.get_mut(&u32::from(key.queue()))
}

/// Whether queue `key` among `nodes` has a congestion episode open (a queue stays listed as
/// open until the sweep after a low sample closed it).
fn queue_open(nodes: &IdTable<NodeState>, key: QueueKey) -> bool {
    nodes
        .get(&key.node())
        .and_then(|n| n.ports.get(&key.port()))
        .and_then(|p| p.queues.get(&u32::from(key.queue())))
        .is_some_and(|q| q.congestion.open_since().is_some())
}

/// Node `id` among `nodes`, first seen at `now` if new (`grew` then set).
#[inline]
fn node_entry<'a>(
    nodes: &'a mut IdTable<NodeState>,
    grew: &mut bool,
    id: u32,
    now: u64,
) -> &'a mut NodeState {
    nodes.get_or_insert_with(id, || {
        *grew = true;
        NodeState {
            first_seen_ns: now,
            ..NodeState::default()
        }
    })
}

/// Egress `port` of `node`, counted in `held` if new.
#[inline]
fn port_entry<'a>(
    node: &'a mut NodeState,
    (grew, held): (&mut bool, &mut Held),
    port: u32,
) -> &'a mut PortState {
    node.ports.get_or_insert_with(port, || {
        *grew = true;
        held.ports += 1;
        PortState::default()
    })
}

/// The link from `ps` to node `to`'s ingress `to_port`, counted in `held` if new.
#[inline]
fn link_entry<'a>(
    ps: &'a mut PortState,
    (grew, held): (&mut bool, &mut Held),
    (to, to_port): (u32, u32),
) -> &'a mut LinkState {
    ps.links.get_or_default(to).get_or_insert_with(to_port, || {
        *grew = true;
        held.links += 1;
        LinkState::default()
    })
}

/// Queue `q` of `ps`, counted in `held` if new.
#[inline]
fn queue_entry<'a>(
    ps: &'a mut PortState,
    (grew, held): (&mut bool, &mut Held),
    q: u8,
) -> &'a mut QueueState {
    ps.queues.get_or_insert_with(u32::from(q), || {
        *grew = true;
        held.queues += 1;
        QueueState::default()
    })
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
