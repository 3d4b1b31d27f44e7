//! The collector's live state and the detectors that run on each record: per-flow paths and
//! latency, per node / port / queue state, links, report loss, and the event log.
//!
//! One `State` is one shard; it takes `now` from the records (report time), so the same input
//! gives the same state and events (replays and tests are deterministic).

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use intscope_wire::locate::FlowKey;
use intscope_wire::report::drop_reason_name;
use serde_json::{Value, json};

use crate::detect::DetectConfig;
use crate::event::{Event, EventKind, FlowRef};
use crate::flow::{FlowState, FlowTable, Path, PathTable};
use crate::rank;
use crate::record::{Hop, Record, Version};
use crate::seq::{SeqOutcome, SeqTracker};

/// Events kept in memory (the newest).
pub const EVENT_LOG: usize = 10_000;
/// Flows a congestion episode remembers for culprit ranking.
const EPISODE_FLOWS: usize = 4096;

/// A queue: node, egress port and queue ID, packed in one integer. Hashing a `(u32, u32, u8)`
/// tuple read it back from a stack copy in wider words than the three stores that made it, a
/// store-forwarding stall that took 14 % of correlation (perf, 2 M reports/s); an integer is
/// hashed from registers. Orders like the tuple.
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
    /// Recent (bucket start, maximum occupancy) for the heatmap, 250 ms buckets (bounded).
    pub series: VecDeque<(u64, u32)>,
    episode: Option<Episode>,
}

#[derive(Debug, Clone, Default)]
struct Episode {
    start_ns: u64,
    /// Switch clock of the last congested sample: where the episode ends.
    last_high_ns: u64,
    /// Report time of the last congested sample (for the quiet timeout).
    last_seen_ns: u64,
    max_occupancy: u32,
    total: u64,
    flows: HashMap<FlowKey, u64>,
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

/// State of one port of a node.
#[derive(Debug, Clone, Default)]
pub struct PortState {
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
    /// Drops reported at this port.
    pub drops: u64,
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
    pub ports: HashMap<u32, PortState>,
}

/// A hashed table's entries in key order (for output: the tables are hashed for the hot path).
pub fn in_key_order<K: Copy + Ord, V>(table: &HashMap<K, V>) -> Vec<(K, &V)> {
    let mut entries: Vec<(K, &V)> = table.iter().map(|(k, v)| (*k, v)).collect();
    entries.sort_unstable_by_key(|(k, _)| *k);
    entries
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

/// One shard of collector state.
#[derive(Debug, Default)]
pub struct State {
    cfg: DetectConfig,
    /// Report loss per source.
    pub seq: SeqTracker,
    /// Flows by key.
    pub flows: FlowTable,
    /// The distinct paths of the flows.
    pub paths: PathTable,
    /// (ID, key) in ID order: IDs only grow, so new flows append and lookups bisect (half the
    /// memory of a hash map at a million flows).
    flow_ids: Vec<(u64, FlowKey)>,
    next_flow_id: u64,
    /// Queues.
    pub queues: HashMap<QueueKey, QueueState>,
    /// Nodes (hashed: every hop of every report looks one up).
    pub nodes: HashMap<u32, NodeState>,
    /// Links.
    pub links: HashMap<LinkKey, LinkState>,
    /// Newest events, oldest first.
    pub events: VecDeque<Event>,
    /// Events raised, by kind (including those rate-limited out of the log? no: raised only).
    pub event_counts: BTreeMap<EventKind, u64>,
    /// Events suppressed by the per-place rate limit.
    pub events_suppressed: u64,
    next_event_id: u64,
    last_event: HashMap<(EventKind, u64), u64>,
    /// Record counters.
    pub counters: RecordCounters,
    /// Latest record time seen.
    pub last_time_ns: u64,
    /// Flows changed since the last store flush.
    pub dirty_flows: Vec<FlowKey>,
    /// Queues with an open congestion episode.
    open_episodes: Vec<QueueKey>,
    /// Flows with per-hop reports waiting to be joined: (deadline, flow).
    pending_joins: VecDeque<(u64, FlowKey)>,
    /// Report time of the next sweep for quiet episodes and expired joins.
    next_sweep_ns: u64,
    /// Report time of the next look for idle flows.
    next_idle_sweep_ns: u64,
    /// Flows that left memory after `flow_idle_ns` without a report.
    pub flows_expired: u64,
}

/// How often (report time) quiet episodes and expired joins are looked for.
const SWEEP_NS: u64 = 1_000_000;

fn place_hash(parts: &[u64]) -> u64 {
    // FNV-1a over the parts: cheap, stable, good enough for a rate-limit key.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in p.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn flow_hash(k: &FlowKey) -> u64 {
    place_hash(&[
        u128::from(k.src).wrapping_mul(31) as u64 ^ (u128::from(k.src) >> 64) as u64,
        u128::from(k.dst) as u64 ^ (u128::from(k.dst) >> 64) as u64,
        (u64::from(k.proto) << 32) | (u64::from(k.src_port) << 16) | u64::from(k.dst_port),
    ])
}

impl State {
    /// A shard with these detector thresholds.
    pub fn new(cfg: DetectConfig) -> Self {
        State {
            cfg,
            next_flow_id: 1,
            next_event_id: 1,
            ..State::default()
        }
    }

    /// Continue event IDs after those a store already holds.
    pub fn continue_event_ids(&mut self, next: u64) {
        self.next_event_id = self.next_event_id.max(next);
    }

    /// The ID the next event will get.
    pub fn next_event_id(&self) -> u64 {
        self.next_event_id
    }

    /// The flow with API ID `id`.
    pub fn flow_by_id(&self, id: u64) -> Option<&FlowState> {
        let i = self
            .flow_ids
            .binary_search_by_key(&id, |(id, _)| *id)
            .ok()?;
        self.flows.get(&self.flow_ids[i].1)
    }

    /// Runs one record through correlation and detection.
    pub fn process(&mut self, r: &Record) {
        let now = r.time_ns;
        self.last_time_ns = self.last_time_ns.max(now);
        match r.version {
            Version::V2 => self.counters.v2 += 1,
            Version::V1 => self.counters.v1 += 1,
            Version::V05 => self.counters.v05 += 1,
        }
        if r.first_in_datagram {
            self.observe_sequence(r);
        }
        let reporter = self.nodes.entry(r.node_id).or_insert_with(|| NodeState {
            first_seen_ns: now,
            ..NodeState::default()
        });
        reporter.reports_sent += 1;
        reporter.last_seen_ns = now;

        let seen = r.flow.map(|k| self.observe_flow(r, k));
        if r.flow.is_none() {
            self.counters.without_flow += 1;
        }
        let flow_id = seen.map(|s| s.0);
        // Hops an intermediate report recorded before this report's stack began.
        let head_hops = seen.map_or(0, |s| s.1);
        self.observe_hops(r, flow_id);
        // Hops that forwarded without INT, from the TTL (links and the non-INT detector use it).
        let gap = non_int_hops(r, head_hops);
        self.observe_links(r, gap.as_ref());
        self.observe_flags(r, flow_id, head_hops, gap.as_ref());
        if now >= self.next_sweep_ns {
            self.next_sweep_ns = now + SWEEP_NS;
            self.sweep(now);
        }
    }

    /// Starts loading the state `process(r)` will touch first (see [`FlowTable::prefetch`]).
    #[inline]
    pub fn prefetch(&self, r: &Record) {
        if let Some(key) = &r.flow {
            self.flows.prefetch(key);
        }
    }

    /// Closes what reports will not close: congestion episodes of queues that went quiet (a switch
    /// that filters reports, like SD-Fabric's, stops reporting a drained queue) and per-hop joins
    /// whose window passed without the flow's next packet. `process` does this as reports
    /// arrive; call it when they stop (idle receivers, end of a replay).
    pub fn tick(&mut self, now: u64) {
        self.next_sweep_ns = now + SWEEP_NS;
        self.last_time_ns = self.last_time_ns.max(now);
        self.sweep(now);
    }

    #[inline(never)]
    fn sweep(&mut self, now: u64) {
        if now >= self.next_idle_sweep_ns {
            self.expire_idle_flows(now);
        }
        let quiet = self.cfg.episode_quiet_ns;
        let mut i = 0;
        while i < self.open_episodes.len() {
            let key = self.open_episodes[i];
            let last_seen = self
                .queues
                .get(&key)
                .and_then(|q| q.episode.as_ref())
                .map(|ep| ep.last_seen_ns);
            let Some(last_seen) = last_seen else {
                // Closed by a low sample.
                self.open_episodes.swap_remove(i);
                continue;
            };
            if now.saturating_sub(last_seen) <= quiet {
                i += 1;
                continue;
            }
            self.open_episodes.swap_remove(i);
            let Some(ep) = self.queues.get_mut(&key).and_then(|q| q.episode.take()) else {
                continue;
            };
            let end = ep.last_high_ns;
            self.close_episode(now, key, ep, end);
        }
        let window = self.cfg.join_window_ns;
        while let Some(&(deadline, key)) = self.pending_joins.front() {
            if deadline > now {
                break;
            }
            self.pending_joins.pop_front();
            let Some(flow) = self.flows.get_mut(&key) else {
                continue;
            };
            if !flow.join_due(now, window) {
                continue;
            }
            let path = flow.take_joined();
            let change = flow.observe_partial_path(now, &path, &mut self.paths);
            flow.observe_latency(now, &path);
            let id = flow.id;
            if let Some(old) = change {
                self.path_changed(now, key, id, old);
            }
        }
    }

    fn observe_sequence(&mut self, r: &Record) {
        if let SeqOutcome::Gap { lost, expected } =
            self.seq
                .observe(r.node_id, r.hw_id, r.seq, r.version.seq_bits())
        {
            let ev = move || json!({"hw_id": r.hw_id, "lost": lost, "expected_seq": expected, "received_seq": r.seq});
            self.raise(
                r.time_ns,
                EventKind::LostReports,
                Some(r.node_id),
                None,
                None,
                None,
                ev,
            );
        }
    }

    /// The flow's ID, and how many hops an intermediate report's head added to this report's path.
    fn observe_flow(&mut self, r: &Record, key: FlowKey) -> (u64, u8) {
        let now = r.time_ns;
        let next_id = &mut self.next_flow_id;
        let ids = &mut self.flow_ids;
        let paths = &mut self.paths;
        let flow = self.flows.get_or_insert_with(key, || {
            let id = *next_id;
            *next_id += 1;
            ids.push((id, key));
            FlowState::new(key, id, now, paths.intern(&[]))
        });
        flow.reports += 1;
        flow.last_seen_ns = now;
        if !flow.dirty {
            flow.dirty = true;
            self.dirty_flows.push(key);
        }
        let id = flow.id;
        if r.dropped || r.drop_reason.is_some() {
            flow.drops += 1;
            flow.last_drop_reason = r.drop_reason.or(flow.last_drop_reason);
        }
        // Complete paths (INT-MD stacks, v0.5/v1.0 stacks) say which way the flow went at once;
        // per-hop reports (INT-XD postcards, INT-MX) from different nodes are joined first.
        let mut change = None;
        let mut head_hops = 0;
        let head = if r.intermediate || flow.waiting_heads() == 0 {
            None
        } else {
            flow.take_head(now, self.cfg.join_window_ns)
        };
        if r.intermediate {
            // The head of a path; the rest comes with the sink's report.
            flow.push_head(now, r.hops(), self.cfg.join_window_ns);
        } else if r.int_hops > 0 || head.is_some() {
            let joined;
            let hops = match head {
                Some(mut h) => {
                    head_hops = h.len();
                    h.extend_from_slice(r.hops());
                    joined = h;
                    &joined[..]
                }
                None => r.hops(),
            };
            // Hops missing from the report (cut short), or a packet that died on the way: a
            // partial path, and a latency that is no flow's.
            if r.path_truncated || r.dropped || r.drop_reason.is_some() {
                change = flow.observe_partial_path(now, hops, paths);
            } else {
                change = flow.observe_path(now, hops, paths);
                flow.observe_latency(now, hops);
            }
        } else if let [hop] = r.hops() {
            let joined = flow.join_hop(now, *hop, self.cfg.join_window_ns);
            if flow.pending_hops() == 1 {
                // A new packet's hops: join them when the window passes, even if the flow's next
                // packet never comes.
                self.pending_joins
                    .push_back((now + self.cfg.join_window_ns + 1, key));
            }
            if let Some(path) = joined {
                change = flow.observe_partial_path(now, &path, paths);
                flow.observe_latency(now, &path);
            }
        } else {
            flow.observe_latency(now, r.hops());
        }
        if let Some(old) = change {
            self.path_changed(now, key, id, old);
        }
        (id, head_hops as u8)
    }

    /// Live state keeps the flows of the last `flow_idle_ns` (the store keeps every flow's
    /// summary): looked for every tenth of that, one pass over the table.
    #[inline(never)]
    fn expire_idle_flows(&mut self, now: u64) {
        let idle = self.cfg.flow_idle_ns;
        self.next_idle_sweep_ns = now.saturating_add((idle / 10).max(1_000_000_000));
        let before = self.flows.len();
        self.flows
            .retain(|f| now.saturating_sub(f.last_seen_ns) < idle);
        let flows = &self.flows;
        self.flow_ids.retain(|(_, k)| flows.get(k).is_some());
        self.flows_expired += (before - self.flows.len()) as u64;
        self.paths.forget_unused();
    }

    #[inline(never)]
    fn path_changed(&mut self, now: u64, key: FlowKey, id: u64, old: Path) {
        let Some(flow) = self.flows.get(&key) else {
            return;
        };
        let new = Arc::clone(&flow.path);
        let diverge = old
            .iter()
            .zip(new.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(old.len().min(new.len()));
        let at = new.get(diverge.saturating_sub(1)).copied();
        let ev = move || json!({"old_path": old, "new_path": new, "diverges_after_hop": diverge});
        self.raise(
            now,
            EventKind::PathChange,
            at.map(|h| h.node_id),
            at.and_then(|h| h.egress_if),
            None,
            Some((key, id)),
            ev,
        );
    }

    fn observe_hops(&mut self, r: &Record, flow_id: Option<u64>) {
        let now = r.time_ns;
        let flow = r.flow.zip(flow_id);
        for hop in r.hops() {
            let node = self.nodes.entry(hop.node_id).or_insert_with(|| NodeState {
                first_seen_ns: now,
                ..NodeState::default()
            });
            node.hops_seen += 1;
            node.last_seen_ns = now;
            let Some(port) = hop.egress_if else { continue };
            let ps = node.ports.entry(port).or_default();
            if hop.egress_tx_util.is_some() {
                ps.tx_util = hop.egress_tx_util;
            }
            if let Some(lat) = hop.hop_latency {
                ps.last_latency = Some(lat);
                ps.interval.add(u64::from(lat));
                let anomalous = ps.latency_samples >= self.cfg.latency_warmup
                    && f64::from(lat) > self.cfg.latency_factor * ps.latency_baseline
                    && f64::from(lat) - ps.latency_baseline > self.cfg.latency_min_excess_ns as f64;
                let baseline = ps.latency_baseline;
                // Anomalies move the baseline slowly, so one spike does not hide the next.
                let alpha = if anomalous { 1.0 / 256.0 } else { 1.0 / 16.0 };
                ps.latency_baseline = if ps.latency_samples == 0 {
                    f64::from(lat)
                } else {
                    baseline + alpha * (f64::from(lat) - baseline)
                };
                ps.latency_samples = ps.latency_samples.saturating_add(1);
                if anomalous {
                    let ev = move || json!({"hop_latency": lat, "baseline": baseline.round(), "factor": (f64::from(lat) / baseline.max(1.0) * 10.0).round() / 10.0, "queue_occupancy": hop.queue_occupancy});
                    self.raise(
                        now,
                        EventKind::LatencyAnomaly,
                        Some(hop.node_id),
                        Some(port),
                        hop.queue_id,
                        flow,
                        ev,
                    );
                }
            }
            if let (Some(q), Some(occ)) = (hop.queue_id, hop.queue_occupancy) {
                self.observe_queue(now, QueueKey::new(hop.node_id, port, q), occ, hop, r, flow);
            }
        }
    }

    fn observe_queue(
        &mut self,
        now: u64,
        key: QueueKey,
        occ: u32,
        hop: &Hop,
        r: &Record,
        flow: Option<(FlowKey, u64)>,
    ) {
        // Episodes are timed on the switch's clock when its metadata carries timestamps (one
        // queue, one clock): transport delay and report batching do not stretch a microburst.
        let clock = hop.egress_ts.or(hop.ingress_ts).unwrap_or(now);
        let cfg = &self.cfg;
        let qs = self.queues.entry(key).or_default();
        qs.occupancy = occ;
        qs.max_occupancy = qs.max_occupancy.max(occ);
        qs.interval.add(u64::from(occ));
        qs.hop_latency = hop.hop_latency.or(qs.hop_latency);
        qs.reports += 1;
        qs.last_seen_ns = now;
        // The heatmap's series: the maximum occupancy per 250 ms bucket (report time).
        let bucket = now - now % QUEUE_BUCKET_NS;
        match qs.series.back_mut() {
            Some((t, max)) if *t == bucket => *max = (*max).max(occ),
            _ => {
                if qs.series.len() == QUEUE_SERIES {
                    qs.series.pop_front();
                }
                qs.series.push_back((bucket, occ));
            }
        }
        let mut started = false;
        let mut ended = None;
        if let Some(ep) = qs.episode.as_mut() {
            if occ <= cfg.congestion_end {
                ended = qs.episode.take().map(|ep| (ep, clock));
            } else {
                ep.last_high_ns = clock;
                ep.last_seen_ns = now;
                ep.max_occupancy = ep.max_occupancy.max(occ);
                ep.total += u64::from(occ);
                if let Some((k, _)) = flow
                    && (ep.flows.len() < EPISODE_FLOWS || ep.flows.contains_key(&k))
                {
                    *ep.flows.entry(k).or_default() += u64::from(occ);
                }
            }
        } else if occ >= cfg.congestion_start || (r.congested && occ > cfg.congestion_end) {
            let mut ep = Episode {
                start_ns: clock,
                last_high_ns: clock,
                last_seen_ns: now,
                max_occupancy: occ,
                total: u64::from(occ),
                flows: HashMap::default(),
            };
            if let Some((k, _)) = flow {
                ep.flows.insert(k, u64::from(occ));
            }
            qs.episode = Some(ep);
            started = true;
        }
        if started {
            if !self.open_episodes.contains(&key) {
                self.open_episodes.push(key);
            }
            let threshold = cfg.congestion_start;
            let ev = move || json!({"queue_occupancy": occ, "threshold": threshold, "hop_latency": hop.hop_latency, "q_flag": r.congested});
            self.raise(
                now,
                EventKind::CongestionStart,
                Some(key.node()),
                Some(key.port()),
                Some(key.queue()),
                flow,
                ev,
            );
        }
        if let Some((ep, end)) = ended {
            self.close_episode(now, key, ep, end);
        }
    }

    /// Raises the end of a congestion episode: a microburst if it was short, with the flows that
    /// filled the queue most.
    #[inline(never)]
    fn close_episode(&mut self, now: u64, key: QueueKey, ep: Episode, end: u64) {
        let duration = end.saturating_sub(ep.start_ns);
        // Only the top ten are named: largest share first, ties by flow key.
        let culprits = rank::smallest(ep.flows.iter(), 10, |&(k, sum)| (Reverse(*sum), *k));
        let total = ep.total.max(1) as f64;
        let ranked: Vec<_> = culprits
            .into_iter()
            .map(|(k, occ_sum)| {
                let id = self.flows.get(k).map(|f| f.id);
                json!({"flow": FlowRef::from(k), "flow_id": id, "share": ((*occ_sum as f64) / total * 1000.0).round() / 1000.0})
            })
            .collect();
        let kind = if duration <= self.cfg.microburst_max_ns {
            EventKind::Microburst
        } else {
            EventKind::CongestionEnd
        };
        let ev = move || {
            let mut ev = json!({"start_ns": ep.start_ns, "duration_ns": duration, "max_occupancy": ep.max_occupancy});
            // Moved in: `json!` would serialize a deep copy of the list.
            ev["culprit_flows"] = Value::Array(ranked);
            ev
        };
        self.raise(
            now,
            kind,
            Some(key.node()),
            Some(key.port()),
            Some(key.queue()),
            None,
            ev,
        );
    }

    /// The node at the other end of `node`'s egress `port`, if a link from it has been seen.
    fn next_node(&self, node: u32, port: u32) -> Option<u32> {
        self.links
            .keys()
            .find(|(a, ap, ..)| *a == node && *ap == port)
            .map(|(_, _, b, _)| *b)
    }

    fn observe_links(&mut self, r: &Record, gap: Option<&TtlGap>) {
        // Consecutive hops are neighbours only if no hop in between went unrecorded.
        if r.mtu_exceeded
            || r.hop_limit_exceeded
            || r.path_truncated
            || gap.is_some_and(|g| g.non_int > 0)
        {
            return;
        }
        for pair in r.hops().windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if let (Some(out), Some(inp)) = (a.egress_if, b.ingress_if) {
                let l = self
                    .links
                    .entry((a.node_id, out, b.node_id, inp))
                    .or_default();
                l.reports += 1;
                l.last_seen_ns = r.time_ns;
            }
        }
    }

    fn observe_flags(
        &mut self,
        r: &Record,
        flow_id: Option<u64>,
        head_hops: u8,
        gap: Option<&TtlGap>,
    ) {
        let now = r.time_ns;
        let flow = r.flow.zip(flow_id);
        let last = r.hops().last().copied().unwrap_or_default();
        if r.dropped || r.drop_reason.is_some() {
            let node = self.nodes.entry(r.node_id).or_default();
            *node.drops.entry(r.drop_reason.unwrap_or(0)).or_default() += 1;
            if let Some(p) = last.egress_if {
                let ps = node.ports.entry(p).or_default();
                ps.drops += 1;
                ps.interval.drops += 1;
            }
            let ev = move || json!({"drop_reason": r.drop_reason, "drop_reason_name": r.drop_reason.and_then(drop_reason_name)});
            self.raise(
                now,
                EventKind::Drop,
                Some(r.node_id),
                last.egress_if,
                last.queue_id,
                flow,
                ev,
            );
        }
        for (flagged, kind) in [
            (r.hop_limit_exceeded, EventKind::HopLimit),
            (r.mtu_exceeded, EventKind::MtuExceeded),
        ] {
            if !flagged {
                continue;
            }
            // The E or M bit was set by the first hop that added nothing: the one after the last
            // hop that recorded, found through the links seen so far. The event goes there when
            // known, else to the reporting node.
            let last = last_recorded_hop(r);
            let suspect = last.and_then(|h| self.next_node(h.node_id, h.egress_if?));
            let ev = move || {
                json!({
                    "int_hops": r.int_hops,
                    "path": r.hops().iter().map(|h| h.node_id).collect::<Vec<_>>(),
                    "last_recorded_node": last.map(|h| h.node_id),
                    "last_recorded_egress_port": last.and_then(|h| h.egress_if),
                    "suspect_node": suspect,
                    "reported_by": r.node_id,
                })
            };
            self.raise(
                now,
                kind,
                Some(suspect.unwrap_or(r.node_id)),
                None,
                None,
                flow,
                ev,
            );
        }
        if self.cfg.non_int_hops
            && let Some(gap) = gap.filter(|g| g.non_int > 0)
        {
            let ev = move || json!({"ip_ttl": r.ip_ttl, "assumed_initial_ttl": gap.initial_ttl, "ttl_decrement": gap.ttl_decrement, "int_hops": r.int_hops + head_hops, "non_int_hops": gap.non_int});
            self.raise(
                now,
                EventKind::NonIntHops,
                Some(r.node_id),
                None,
                None,
                flow,
                ev,
            );
        }
    }

    // Out of line: events are rare next to reports, and inlining each call site's evidence
    // builder into `process` slowed every report (measured, pipeline bench).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn raise(
        &mut self,
        now: u64,
        kind: EventKind,
        node: Option<u32>,
        port: Option<u32>,
        queue: Option<u8>,
        flow: Option<(FlowKey, u64)>,
        evidence: impl FnOnce() -> serde_json::Value,
    ) {
        // Episode ends and report loss are always logged; the rest at most once per interval
        // per kind, place and flow.
        let limited = !matches!(
            kind,
            EventKind::CongestionEnd
                | EventKind::Microburst
                | EventKind::LostReports
                | EventKind::CongestionStart
        );
        if limited {
            let key = (
                kind,
                place_hash(&[
                    u64::from(node.unwrap_or(0)),
                    u64::from(port.unwrap_or(0)),
                    u64::from(queue.unwrap_or(0)),
                    flow.map_or(0, |f| flow_hash(&f.0)),
                ]),
            );
            if let Some(&last) = self.last_event.get(&key)
                && now.saturating_sub(last) < self.cfg.event_interval_ns
            {
                self.events_suppressed += 1;
                return;
            }
            if self.last_event.len() > 1_000_000 {
                let horizon = now.saturating_sub(self.cfg.event_interval_ns);
                self.last_event.retain(|_, t| *t >= horizon);
            }
            self.last_event.insert(key, now);
        }
        *self.event_counts.entry(kind).or_default() += 1;
        let id = self.next_event_id;
        self.next_event_id += 1;
        if self.events.len() == EVENT_LOG {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            id,
            time_ns: now,
            kind,
            node_id: node,
            port,
            queue_id: queue,
            flow: flow.map(|f| f.0),
            flow_id: flow.map(|f| f.1),
            // Built only for events that are logged: most repeats are rate-limited away.
            evidence: evidence(),
        });
    }
}

/// How a packet's TTL compares with the INT hops it recorded.
struct TtlGap {
    /// The sender's initial TTL as assumed.
    initial_ttl: u8,
    /// Hops that decremented the TTL.
    ttl_decrement: u8,
    /// Of those, hops that added no INT metadata.
    non_int: u8,
}

/// Hops that forwarded the packet without INT, from the TTL: `None` when the record cannot tell
/// (no TTL, no INT hops, or an M or E bit or a truncated stack, which hide INT hops that TTL
/// would count as non-INT). `head_hops` recorded the start of the path in an intermediate report.
fn non_int_hops(r: &Record, head_hops: u8) -> Option<TtlGap> {
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

/// The last hop of the packet's INT stack: the hop before the reporter's own metadata when the
/// reporter added it (a sink reporting its own hop), else the newest.
fn last_recorded_hop(r: &Record) -> Option<&Hop> {
    match r.hops() {
        [.., before, own] if own.node_id == r.node_id => Some(before),
        [.., newest] if newest.node_id != r.node_id => Some(newest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn queue_keys_keep_their_parts_and_the_tuple_order(a: (u32, u32, u8), b: (u32, u32, u8)) {
            let (ka, kb) = (QueueKey::new(a.0, a.1, a.2), QueueKey::new(b.0, b.1, b.2));
            prop_assert_eq!((ka.node(), ka.port(), ka.queue()), a);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }
    }
}
