//! One shard of the flows' state: each flow's path (complete stacks at once; INT-XD / INT-MX
//! per-hop reports joined by the fabric's links a window after they arrive, intermediate heads
//! within a window), its latency, path-change and silent-drop detection. A flow belongs to one
//! shard ([`flow_shard`], from its key's hash), so its reports are correlated in order by one
//! thread at a time while other shards' flows proceed in parallel.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use intscope_wire::locate::FlowKey;

use crate::deferred::Deferred;
use crate::detect::silent_drop::{self, RECEIVED_FLUSH_NS};
use crate::detect::{non_int, path_change};
use crate::event::Raiser;
use crate::fabric::{HotPorts, excess, node_shard, spread};
use crate::fast_path::packed_queues;
use crate::flow::{FlowState, FlowTable, Joined, LinkDelays, LinkTable, Path, PathHop, PathTable};
use crate::flow_ref::FlowSeen;
use crate::id_table::Cutoff;
use crate::limits::Limits;
use crate::record::Record;
use crate::seq::LossHistory;
use crate::snapshot::{FlowCopies, FlowCounts, FlowShardSnapshot};
use crate::thresholds::DetectConfig;

/// The shard of `n` that owns the flow whose key hashes to `hash` ([`crate::flow::key_hash`]).
#[inline]
pub fn flow_shard(hash: u64, n: usize) -> usize {
    // The middle bits: the flow table's index uses the low bits for the bucket and the top
    // seven as tags, so neither is skewed within a shard.
    spread((hash >> 32) as u32, n)
}

/// What the flow shards share, read for a batch.
#[derive(Clone, Copy)]
pub struct Shared<'a> {
    /// The next flow ID.
    pub ids: &'a AtomicU64,
    /// Each node's recent report loss (silent drops are weighed by it).
    pub loss: &'a LossHistory,
    /// Each fabric shard's ports whose detectors need every sample (`crate::fast_path`).
    pub busy: &'a [Arc<HotPorts>],
}

/// One shard of the flows' state.
#[derive(Debug, Default)]
pub struct FlowShard {
    cfg: DetectConfig,
    /// Flows by key.
    pub flows: FlowTable,
    /// The distinct paths of the flows.
    pub paths: PathTable,
    /// Flows changed since the last store flush.
    pub dirty_flows: Vec<FlowKey>,
    /// New flows keep their latency per store interval ([`FlowState::keep_intervals`]): on
    /// by default, off for a collector without a store (`State::keep_intervals`).
    pub(crate) keep_intervals: bool,
    /// Flows with per-hop reports waiting to be joined: (deadline, flow). One entry per flow
    /// at most (a flow is queued again only once its entry left), so bounded by the flows.
    pending_joins: VecDeque<(u64, FlowKey)>,
    /// The fabric's links, learned from the paths and per-hop reports of this shard's flows.
    pub links: LinkTable,
    /// Report time of the next look for idle flows.
    next_idle_sweep_ns: u64,
    /// Flows that left memory after `flow_idle_ns` without a report.
    pub flows_expired: u64,
    /// Flows evicted, least recently seen first, to stay within the limit.
    pub flows_evicted: u64,
    /// Reports that said nothing new to the detectors (`crate::fast_path`).
    pub reports_unchanged: u64,
    /// Most flows this shard holds.
    max_flows: usize,
    /// Per-hop reports received per reporting node since they were last handed to the log's
    /// [`crate::seq::LossHistory`] (at most one entry per node reporting this shard's flows).
    received: rustc_hash::FxHashMap<u32, u64>,
    /// Report time of the next hand-over of `received`.
    next_received_ns: u64,
    /// Reports not counted in `received` for want of room (more nodes than
    /// [`crate::seq::MAX_LOSS_NODES`] between two hand-overs); handed over with it.
    received_untracked: u64,
    /// This shard's events.
    pub raiser: Raiser,
    /// This shard's last copies for snapshots: the next one is made from them, the rows of
    /// the slots written since ([`FlowTable::changed`]) made again.
    pub copies: FlowCopies,
    /// What unchanged reports left for the fabric since the last sweep.
    pub(crate) deferred: Deferred,
}

impl FlowShard {
    /// The counts a copy of this shard holds.
    pub fn copy_counts(&self) -> FlowCounts {
        FlowCounts {
            flows_expired: self.flows_expired,
            flows_evicted: self.flows_evicted,
            reports_unchanged: self.reports_unchanged,
            link_ports_refused: self.links.unlearned,
            suppressed: self.raiser.suppressed,
        }
    }

    /// This shard's copy for a snapshot, made from its last one (see [`FlowCopies`]).
    pub fn copy(&mut self) -> Arc<FlowShardSnapshot> {
        let counts = self.copy_counts();
        self.copies.refresh(&mut self.flows, counts)
    }

    /// A shard with these detector thresholds.
    pub fn new(cfg: DetectConfig) -> Self {
        FlowShard::with_limits(cfg, Limits::default())
    }

    /// A shard with these detector thresholds that holds at most `limits.flows` flows.
    pub fn with_limits(cfg: DetectConfig, limits: Limits) -> Self {
        FlowShard {
            raiser: Raiser::new(cfg.event_interval_ns),
            cfg,
            max_flows: limits.flows.max(1),
            keep_intervals: true,
            ..FlowShard::default()
        }
    }

    /// The flow with API ID `id`, if this shard holds it: a pass over the flows, for the locked
    /// view (tests, tools). Readers find flows by ID in a snapshot, whose copy keeps an index;
    /// the live state keeps none (48 bytes a flow).
    pub fn flow_by_id(&self, id: u64) -> Option<&FlowState> {
        self.flows.values().find(|f| f.id == id)
    }

    /// Starts loading the state of the flow whose key hashes to `hash`; returns the slot it
    /// guessed, a hint for [`FlowShard::process`].
    #[inline]
    pub fn prefetch(&self, hash: u64) -> Option<u32> {
        self.flows.prefetch_hashed(hash)
    }

    /// Joins what waited past its window and lets idle flows go. The state calls it at the same
    /// report times for every shard (see `State::process_batch`), so a join closes at the same
    /// moment however many shards there are.
    #[inline(never)]
    pub fn sweep(&mut self, now: u64, loss: &LossHistory) {
        if now >= self.next_idle_sweep_ns {
            self.expire_idle_flows(now);
        }
        while let Some(&(deadline, key)) = self.pending_joins.front() {
            if deadline > now {
                break;
            }
            self.pending_joins.pop_front();
            let Some(flow) = self.flows.get_mut(&key) else {
                continue;
            };
            // A join run early (a node reported the next packet) leaves its entry; the join
            // scheduled since is due later.
            if let Some(due) = flow.requeue_join(now) {
                self.pending_joins.push_back((due, key));
            } else if flow.join_due_ns().is_some() {
                self.join(now, key, loss);
            }
        }
        // Silent drops found by the joins go to their incidents once per sweep.
        self.raiser.hand_over();
        if now >= self.next_received_ns && !self.received.is_empty() {
            self.next_received_ns = now.saturating_add(RECEIVED_FLUSH_NS);
            let untracked = std::mem::take(&mut self.received_untracked);
            self.raiser
                .reports_received(self.received.drain(), untracked, now);
        }
    }

    /// Keeps a flow's per-hop report (its hop, packet fingerprint and the packet's IP TTL) for
    /// its next join, after joining those before it if it is of a later packet (`join_before`).
    fn add_postcard(
        &mut self,
        now: u64,
        key: FlowKey,
        (hop, packet, ttl): (crate::record::Hop, u32, Option<u8>),
        join_before: bool,
        loss: &LossHistory,
    ) {
        if join_before {
            self.join(now, key, loss);
        }
        if let Some(ts) = hop.ingress_ts().or(hop.egress_ts()) {
            self.links
                .saw(hop.node_id, ts, self.cfg.postcards.report_interval_ns);
        }
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        let window = self.cfg.join_window_ns;
        let quiet = self.cfg.postcards.silent_drop_ns;
        if flow.add_card_with_ttl(now, hop, packet, ttl, window, quiet) {
            self.pending_joins.push_back((now + window + 1, key));
        }
    }

    /// Joins a flow's per-hop reports into its path (`[detect.postcards]`), and looks for a silent
    /// drop along it: a node that keeps reporting the flow while the next one does not.
    fn join(&mut self, now: u64, key: FlowKey, loss: &LossHistory) {
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        let mut change = None;
        let mut changed_at = None;
        let delays = LinkDelays {
            assumed_ns: self.cfg.postcards.link_delay_max_ns,
            learn_max_ns: self.cfg.postcards.link_delay_learn_max_ns,
        };
        let joined = flow.join_cards(&mut self.links, delays, self.cfg.join_window_ns);
        // Joined paths are not the fast path's (`crate::fast_path`): the anchor is only ever
        // of a whole stack on the path it came with.
        flow.anchor.clear();
        match &joined {
            Joined::Complete(chain) => {
                let hops: Vec<_> = chain.iter().map(|(h, _)| *h).collect();
                let before = Arc::clone(&flow.path);
                if !flow.path_partial && !self.links.holds(&before) {
                    // Joined over a link learned wrong since: a correction, not a change.
                    flow.path_partial = true;
                }
                change = flow.observe_joined_path(now, &hops, &mut self.paths);
                // When the flow took the new way: the packet's time at the first hop that
                // differs (a node that left by another port, or a new node), which reports at
                // once; a hop before it may have reported the flow a filter interval earlier.
                changed_at = change.as_ref().and_then(|old| {
                    let d = old
                        .iter()
                        .zip(hops.iter())
                        .position(|(a, b)| *a != PathHop::from(b))?;
                    let h = hops.get(d)?;
                    h.ingress_ts().or(h.egress_ts())
                });
                flow.observe_latency(now, &hops);
            }
            Joined::Partial(hops, _) => flow.observe_joined_partial(now, hops, &mut self.paths),
        }
        let judge = silent_drop::Judge {
            cfg: &self.cfg,
            links: &self.links,
            loss,
            now,
        };
        let found = judge.judge(flow, &joined);
        let id = flow.id;
        if let Some(old) = change {
            self.path_changed(now, changed_at, key, id, old);
        }
        if let Some(o) = &found.outage {
            silent_drop::raise_outage(&mut self.raiser, now, (key, id), o);
        }
        if let Some(h) = &found.hidden {
            non_int::raise_hidden(&mut self.raiser, now, (key, id), h);
        }
        if let Some(d) = &found.drop {
            silent_drop::raise_drop(&mut self.raiser, now, (key, id), d);
        }
    }

    /// Correlates record `r` with its flow (keyed `key`, hashed `hash`, perhaps in slot `hint`
    /// from [`FlowShard::prefetch`]) and what the shards share (`shared`). Returns what the
    /// fabric stage needs.
    pub fn process(
        &mut self,
        r: &Record,
        key: FlowKey,
        (hash, hint): (u64, Option<u32>),
        shared: &Shared<'_>,
    ) -> FlowSeen {
        let Shared { ids, loss, busy } = *shared;
        let now = r.time_ns;
        let paths = &mut self.paths;
        let keep_intervals = self.keep_intervals;
        let flow = self.flows.get_or_insert_hashed(hash, key, hint, || {
            let id = ids.fetch_add(1, Ordering::Relaxed);
            let mut flow = FlowState::new(key, id, now, paths.intern(&[]));
            if keep_intervals {
                flow.keep_intervals();
            }
            flow
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
        let mut postcard = None;
        let mut head_hops = 0;
        let mut gap = None;
        let mut unchanged = false;
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
            // Hops missing from the report (cut short, past the hop limit or past an egress
            // MTU: INT v2.1 §"INT-MD Metadata Header Format", E and M bits, "INT metadata was
            // not inserted at one or more hops"; hops without INT, which the TTL counts), a packet that died on the way, or one
            // reported before it left the fabric: a partial path, and a latency that is no
            // flow's. A transit hop reports an INT-MD packet only for a congested queue (Report
            // v2.0 §"Individual Report Header", Q), a drop (D) or an intermediate report (I); a
            // Q report whose last hop leaves by a fabric port is a transit hop's, not the
            // sink's. A flow whose packets loop or stop arriving has no new path, only reports
            // of how far they went.
            let transit_queue_report = r.congested
                && hops.last().is_some_and(|h| {
                    h.egress_if()
                        .is_some_and(|p| self.links.is_fabric_port((h.node_id, p)))
                });
            // Hops the TTL counts that added no INT: inside the stack (a gap the flow's path or
            // the links show) the stack is a partial path; outside it (routers before or after
            // the INT domain) the stack is the whole INT path, but its hops are not known to be
            // neighbours, so it teaches no links.
            let ttl_gap = self.cfg.non_int_hops
                && crate::detect::non_int::non_int_hops(r, head_hops as u8)
                    .is_some_and(|g| g.non_int > 0);
            if ttl_gap || r.mtu_exceeded {
                let known: &[PathHop] = if flow.path_partial { &[] } else { &flow.path };
                gap = self.links.gap_in(hops, r.node_id, known);
            }
            if (ttl_gap && gap.is_some())
                || r.path_truncated
                || r.dropped
                || r.drop_reason.is_some()
                || r.hop_limit_exceeded
                || r.mtu_exceeded
                || transit_queue_report
            {
                change = flow.observe_partial_path(now, hops, paths);
                // The path it may have replaced is no longer what the anchor was seen on.
                flow.anchor.clear();
            } else {
                let before = Arc::as_ptr(&flow.path);
                change = flow.observe_path(now, hops, paths);
                let same = std::ptr::eq(before, Arc::as_ptr(&flow.path));
                // A whole stack that says nothing new leaves its hops' counters for the
                // fabric's next sweep (`crate::fast_path`); it is compared with the flow's last
                // sample before this report replaces it.
                let queues = packed_queues(hops);
                let busy = |node, port| {
                    busy.get(node_shard(node, busy.len()))
                        .is_some_and(|b: &Arc<HotPorts>| b.contains(node, port))
                };
                let whole = head_hops == 0 && !ttl_gap && !r.congested;
                if !whole || !same {
                    flow.anchor.clear();
                }
                if whole {
                    let last = flow.recent.values();
                    if flow
                        .anchor
                        .unchanged(&self.cfg, (queues, last), now, hops, busy)
                        && self
                            .deferred
                            .add(&flow.path, queues, now, hops, &mut flow.anchor.slot)
                    {
                        unchanged = true;
                        self.reports_unchanged += 1;
                    } else {
                        flow.anchor.set(now, queues);
                    }
                }
                flow.observe_latency(now, hops);
                if !ttl_gap && !same {
                    // A new path (rare): its links join per-hop reports.
                    self.links.learn_path(&flow.path);
                }
            }
        } else if let [hop] = r.hops() {
            // An INT-XD postcard or INT-MX report: one node's view, joined with the others' a
            // window later. A dropped packet's report says where it died, not where it goes.
            // Counted for its node's report loss (a silence of the node is weighed by it).
            if let Some(n) = self.received.get_mut(&r.node_id) {
                *n += 1;
            } else if self.received.len() < crate::seq::MAX_LOSS_NODES {
                self.received.insert(r.node_id, 1);
            } else {
                // Bounded like the history it feeds: a node beyond it is weighed as lossless.
                self.received_untracked += 1;
            }
            if !(r.dropped || r.drop_reason.is_some()) {
                postcard = Some((*hop, r.packet_fp, r.ip_ttl, flow.join_before(hop.node_id)));
            }
        } else {
            flow.observe_latency(now, r.hops());
        }
        if let Some(old) = change {
            // An INT-MD report's path: the raiser's clock is this record's.
            self.path_changed(now, None, key, id, old);
        }
        if let Some((hop, packet, ttl, join_before)) = postcard {
            self.add_postcard(now, key, (hop, packet, ttl), join_before, loss);
        }
        if self.flows.len() > self.max_flows {
            self.evict_flows();
        }
        let dropped = r.dropped || r.drop_reason.is_some();
        let drop_peer = dropped
            .then(|| r.hops().last())
            .flatten()
            .and_then(|h| self.links.peer((h.node_id, h.egress_if()?)))
            .map(|(node, _)| node);
        FlowSeen {
            id: Some(id),
            head_hops: head_hops as u8,
            gap,
            drop_peer,
            unchanged,
        }
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
        // Without a store nothing else empties the list: it would keep the keys of flows gone.
        self.dirty_flows.retain(|k| flows.get(k).is_some());
        self.flows_expired += (before - self.flows.len()) as u64;
        self.paths.forget_unused();
    }

    /// Evicts the least recently seen flows (report time) down to seven eighths of the limit:
    /// a pass over the table once per `limit / 8` new flows, nothing per report.
    #[cold]
    #[inline(never)]
    fn evict_flows(&mut self) {
        let k = excess(self.flows.len(), self.max_flows);
        let mut times: Vec<u64> = self.flows.values().map(|f| f.last_seen_ns).collect();
        let mut cut = Cutoff::oldest(&mut times, k);
        let before = self.flows.len();
        self.flows.retain(|f| !cut.take(f.last_seen_ns));
        let flows = &self.flows;
        self.dirty_flows.retain(|k| flows.get(k).is_some());
        self.flows_evicted += (before - self.flows.len()) as u64;
        self.paths.forget_unused();
    }

    /// Raises flow `key`'s change from path `old`, first seen at switch time `at_ns` when the
    /// caller knows it (else the receive time on the switch's clock): `detect::path_change`.
    #[inline(never)]
    fn path_changed(&mut self, now: u64, at_ns: Option<u64>, key: FlowKey, id: u64, old: Path) {
        let Some(flow) = self.flows.get(&key) else {
            return;
        };
        let new = Arc::clone(&flow.path);
        path_change::raise(&mut self.raiser, now, at_ns, (key, id), old, new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    const MS: u64 = 1_000_000;

    /// Leaf 1 (in by edge port 10, out by 11), spine 101, leaf 2 (out by edge port 10): one
    /// flow's postcards, each hop's timestamps a few µs after the one before, the TTL one
    /// lower at each.
    struct Chain {
        shard: FlowShard,
        loss: LossHistory,
        key: FlowKey,
        ids: AtomicU64,
    }

    impl Chain {
        fn new() -> Chain {
            let cfg = DetectConfig::default();
            Chain {
                shard: FlowShard::new(cfg.clone()),
                loss: LossHistory::new(cfg.postcards.silent_drop_ns / 8),
                key: FlowKey {
                    src: std::net::Ipv4Addr::new(10, 0, 1, 1).to_ipv6_mapped(),
                    dst: std::net::Ipv4Addr::new(10, 0, 2, 1).to_ipv6_mapped(),
                    proto: 17,
                    src_port: 40000,
                    dst_port: 5000,
                },
                ids: AtomicU64::new(1),
            }
        }

        /// Packet `n`'s postcards from the hops `at` (indices along the chain).
        fn report(&mut self, n: u64, at: &[usize]) {
            let hops = [(1u32, 10u32, 11u32, 64u8), (101, 1, 2, 63), (2, 11, 10, 62)];
            let t = 1_000 * MS + n * 10 * MS;
            for &i in at {
                let (node, ingress, egress, ttl) = hops[i];
                let ts = t + 3_000 * i as u64;
                let mut r = Record::default();
                r.time_ns = t + 50_000;
                r.node_id = node;
                r.flow = Some(self.key);
                r.packet_fp = n as u32 + 1;
                r.ip_ttl = Some(ttl);
                r.push_hop(
                    crate::record::Hop::at(node)
                        .with_interfaces(Some(ingress), Some(egress))
                        .with_timestamps(Some(ts), Some(ts + 1_000)),
                );
                self.loss.received(node, 1, r.time_ns);
                self.process(&r);
            }
            self.shard.sweep(t + 50_000, &self.loss);
        }

        fn process(&mut self, r: &Record) -> FlowSeen {
            let hash = crate::flow::key_hash(&self.key);
            self.shard.process(
                r,
                self.key,
                (hash, None),
                &Shared {
                    ids: &self.ids,
                    loss: &self.loss,
                    busy: &[],
                },
            )
        }
    }

    /// A node's report filter holds back most packets of a flow, each hop deciding for itself:
    /// a packet the hops on either side reported and this one did not (two TTLs apart) is no
    /// hop without INT while the node reported the flow within the last report interval.
    #[test]
    fn a_packet_the_middle_hops_filter_held_back_is_no_hop_without_int() {
        let mut c = Chain::new();
        for n in 0..40 {
            c.report(n, &[0, 1, 2]);
        }
        // The spine's filter holds back the next packets the leaves report, for 100 ms.
        for n in 40..50 {
            c.report(n, &[0, 2]);
        }
        let mut log = crate::event::EventLog::new(&DetectConfig::default());
        let hidden = |log: &crate::event::EventLog| {
            log.events()
                .iter()
                .filter(|e| e.kind == EventKind::NonIntHops)
                .count()
        };
        c.shard.raiser.drain(&mut log, &mut c.loss);
        assert_eq!(hidden(&log), 0, "{:?}", log.events());
        // Quiet for longer than a report interval while the leaves report the flow: it
        // stopped adding INT.
        for n in 50..160 {
            c.report(n, &[0, 2]);
        }
        c.shard.raiser.drain(&mut log, &mut c.loss);
        assert_eq!(hidden(&log), 1, "{:?}", log.events());
    }

    /// A drop report names the node its port leads to from the links the flow stage learned
    /// (INT-XD's postcards, one hop each, teach the fabric stage none): a drop at leaf 1's
    /// port to the spine names the spine; one at a port no postcard left by names nothing.
    #[test]
    fn a_drop_names_the_node_its_port_leads_to_from_the_postcards() {
        let mut c = Chain::new();
        for n in 0..40 {
            c.report(n, &[0, 1, 2]);
        }
        let mut drop = |egress: u32| {
            let mut r = Record::default();
            r.time_ns = 3_000 * MS;
            r.node_id = 1;
            r.flow = Some(c.key);
            r.dropped = true;
            r.drop_reason = Some(199);
            r.push_hop(crate::record::Hop::at(1).with_interfaces(Some(10), Some(egress)));
            c.process(&r).drop_peer
        };
        assert_eq!(drop(11), Some(101));
        assert_eq!(drop(12), None);
    }
}
