//! Published snapshots of the live state: what readers (the API, `/metrics`) see, so that a read
//! never takes a lock the correlating threads write under.
//!
//! A [`Snapshot`] is immutable and shared ([`Arc`]): readers clone the pointer and work on it as
//! long as they like. [`State::snapshot`](crate::state::State::snapshot) builds the next one
//! shard by shard, each under its lock for the time of a copy, reusing the previous snapshot's
//! part of any shard that has not changed since. The flow table is copied as compact
//! [`FlowRow`]s (what the flow list and a flow's page show, quantiles worked out once), not as
//! whole flow states.
//!
//! Memory: a snapshot holds one row per live flow (`size_of::<FlowRow>()` each, the paths
//! shared with the live state) and a copy of the fabric tables, all bounded by
//! [`Limits`](crate::state::Limits). The publisher keeps one snapshot and builds the next beside
//! it, so two at most are alive, plus any a reader still holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use intscope_wire::locate::FlowKey;

use crate::event::EventKind;
use crate::fabric::{
    Evicted, FabricShard, LinkKey, LinkState, NodeState, QueueKey, QueueState, RecordCounters,
    node_shard,
};
use crate::flow::{FlowState, Path, SampleRing};
use crate::flow_shard::FlowShard;
use crate::id_table::IdTable;
use crate::seq::SeqState;
use crate::state::totals;

/// One flow as readers see it: its identity, counters, path and latency quantiles.
#[derive(Debug, Clone)]
pub struct FlowRow {
    /// Dense ID used by the API.
    pub id: u64,
    /// The flow.
    pub key: FlowKey,
    /// First report, ns.
    pub first_seen_ns: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// Reports received.
    pub reports: u64,
    /// Drop reports.
    pub drops: u64,
    /// Path changes seen.
    pub path_changes: u64,
    /// Last drop reason.
    pub last_drop_reason: Option<u8>,
    /// Current path, source first (shared with the live state).
    pub path: Path,
    /// When the current path was first seen.
    pub path_since_ns: u64,
    /// Earlier paths with the time each was first seen, oldest first (empty for most flows:
    /// no allocation then).
    pub earlier_paths: Box<[(u64, Path)]>,
    /// The last latency samples.
    pub recent: SampleRing,
    /// Median end-to-end latency, ns.
    pub e2e_p50: Option<u64>,
    /// 99th percentile end-to-end latency, ns.
    pub e2e_p99: Option<u64>,
}

impl FlowRow {
    /// The row of a live flow.
    pub fn of(f: &FlowState) -> Self {
        FlowRow {
            id: f.id,
            key: f.key,
            first_seen_ns: f.first_seen_ns,
            last_seen_ns: f.last_seen_ns,
            reports: f.reports,
            drops: f.drops,
            path_changes: f.path_changes,
            last_drop_reason: f.last_drop_reason,
            path: Arc::clone(&f.path),
            path_since_ns: f.path_since_ns,
            earlier_paths: f.earlier_paths.iter().cloned().collect(),
            recent: f.recent.clone(),
            e2e_p50: f.e2e.quantile(0.5),
            e2e_p99: f.e2e.quantile(0.99),
        }
    }

    /// Recent paths with the time each was first seen, oldest first, ending with the current one
    /// (as [`FlowState::path_history`]).
    pub fn path_history(&self) -> impl Iterator<Item = (u64, &Path)> {
        crate::flow::path_history(&self.earlier_paths, &self.path, self.path_since_ns)
    }
}

impl totals::FabricPart for FabricShardSnapshot {
    fn nodes_sources(&self) -> (usize, usize) {
        (self.nodes.len(), self.sources.len())
    }

    fn ports_queues_links(&self) -> (usize, usize, usize) {
        self.held
    }

    fn evicted(&self) -> Evicted {
        self.evicted
    }

    fn counters(&self) -> &RecordCounters {
        &self.counters
    }

    fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

impl totals::FlowPart for FlowShardSnapshot {
    fn flow_count(&self) -> usize {
        self.rows.len()
    }

    fn flows_evicted(&self) -> u64 {
        self.flows_evicted
    }

    fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

/// One flow shard, copied.
#[derive(Debug, Default)]
pub struct FlowShardSnapshot {
    rows: Vec<FlowRow>,
    /// (ID, row index) in ID order, for lookups by ID.
    by_id: Vec<(u64, u32)>,
    flows_expired: u64,
    flows_evicted: u64,
    suppressed: u64,
}

impl FlowShardSnapshot {
    /// A copy of `shard`.
    pub fn of(shard: &FlowShard) -> Self {
        let mut s = FlowShardSnapshot::default();
        s.fill(shard);
        s
    }

    /// Makes this a copy of `shard`, in the memory this one holds: a snapshot the readers have
    /// let go of is the next one's buffer, so that a large table is not allocated (and its
    /// pages faulted in) afresh at every publication.
    pub fn fill(&mut self, shard: &FlowShard) {
        self.rows.clear();
        self.rows.extend(shard.flows.values().map(FlowRow::of));
        self.by_id.clear();
        self.by_id
            .extend(self.rows.iter().enumerate().map(|(i, r)| (r.id, i as u32)));
        // The slab is mostly in ID order already (flows take free slots only after evictions
        // and expiries), which the sort finds in one pass.
        self.by_id.sort_unstable();
        self.flows_expired = shard.flows_expired;
        self.flows_evicted = shard.flows_evicted;
        self.suppressed = shard.raiser.suppressed;
    }

    fn flow_by_id(&self, id: u64) -> Option<&FlowRow> {
        let i = self.by_id.binary_search_by_key(&id, |&(id, _)| id).ok()?;
        self.rows.get(self.by_id[i].1 as usize)
    }
}

/// One fabric shard, copied.
#[derive(Debug, Default)]
pub struct FabricShardSnapshot {
    nodes: IdTable<NodeState>,
    queues: Vec<(QueueKey, QueueState)>,
    links: Vec<(LinkKey, LinkState)>,
    sources: Vec<((u32, u8), SeqState)>,
    reports_lost: u64,
    groups_lost: u64,
    restarts: u64,
    counters: RecordCounters,
    evicted: Evicted,
    /// Ports, queues and links held.
    held: (usize, usize, usize),
    suppressed: u64,
    last_time_ns: u64,
}

impl FabricShardSnapshot {
    /// A copy of `shard`.
    pub fn of(shard: &FabricShard) -> Self {
        FabricShardSnapshot {
            nodes: shard.nodes.clone(),
            queues: shard.queues().map(|(k, q)| (k, q.clone())).collect(),
            links: shard.links().map(|(k, l)| (k, *l)).collect(),
            sources: shard.seq.sources().collect(),
            reports_lost: shard.seq.total_reports_lost(),
            groups_lost: shard.seq.total_groups_lost(),
            restarts: shard.seq.total_restarts(),
            counters: shard.counters,
            evicted: shard.evicted(),
            held: shard.held(),
            suppressed: shard.raiser.suppressed,
            last_time_ns: shard.last_time_ns,
        }
    }
}

/// The live state at one moment, for readers: the same questions as
/// [`View`](crate::state::View), answered from copies.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub(crate) flows: Vec<Arc<FlowShardSnapshot>>,
    pub(crate) fabric: Vec<Arc<FabricShardSnapshot>>,
    /// Each shard's change count when it was copied (flows, then fabric).
    pub(crate) generations: Vec<u64>,
    pub(crate) event_counts: BTreeMap<EventKind, u64>,
    /// How many snapshots the state had built before this one.
    pub sequence: u64,
}

impl Snapshot {
    /// The flow shards' copies no one else holds any more, for [`State::snapshot`] to fill
    /// again (see [`FlowShardSnapshot::fill`]).
    ///
    /// [`State::snapshot`]: crate::state::State::snapshot
    pub fn into_spare(self) -> Vec<FlowShardSnapshot> {
        self.flows
            .into_iter()
            .filter_map(|s| Arc::try_unwrap(s).ok())
            .collect()
    }
}

impl Snapshot {
    /// Every flow.
    pub fn flows(&self) -> impl Iterator<Item = &FlowRow> {
        self.flows.iter().flat_map(|s| s.rows.iter())
    }

    /// Flows.
    pub fn flow_count(&self) -> usize {
        self.flows.iter().map(|s| s.rows.len()).sum()
    }

    /// The flow with API ID `id`.
    pub fn flow_by_id(&self, id: u64) -> Option<&FlowRow> {
        self.flows.iter().find_map(|s| s.flow_by_id(id))
    }

    /// Flows that left memory idle.
    pub fn flows_expired(&self) -> u64 {
        self.flows.iter().map(|s| s.flows_expired).sum()
    }

    /// Every node.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, &NodeState)> {
        self.fabric
            .iter()
            .flat_map(|s| s.nodes.iter().map(|(k, v)| (*k, v)))
    }

    /// The node with this ID.
    pub fn node(&self, id: u32) -> Option<&NodeState> {
        self.fabric
            .get(node_shard(id, self.fabric.len()))?
            .nodes
            .get(&id)
    }

    /// Every queue.
    pub fn queues(&self) -> impl Iterator<Item = (QueueKey, &QueueState)> {
        self.fabric
            .iter()
            .flat_map(|s| s.queues.iter().map(|(k, q)| (*k, q)))
    }

    /// Every link.
    pub fn links(&self) -> impl Iterator<Item = (LinkKey, &LinkState)> {
        self.fabric
            .iter()
            .flat_map(|s| s.links.iter().map(|(k, l)| (*k, l)))
    }

    /// Report sequence accounting per (node, hw_id).
    pub fn sources(&self) -> impl Iterator<Item = ((u32, u8), SeqState)> + '_ {
        self.fabric.iter().flat_map(|s| s.sources.iter().cloned())
    }

    /// Reports lost, from sequence gaps (see [`View::reports_lost`](crate::state::View::reports_lost)).
    pub fn reports_lost(&self) -> u64 {
        self.fabric.iter().map(|s| s.reports_lost).sum()
    }

    /// Report groups (datagrams, one sequence number each) lost, from sequence gaps.
    pub fn report_groups_lost(&self) -> u64 {
        self.fabric.iter().map(|s| s.groups_lost).sum()
    }

    /// Sequence resets: restarted counters and jumps too far to be loss.
    pub fn sequence_resets(&self) -> u64 {
        self.fabric.iter().map(|s| s.restarts).sum()
    }

    /// Entries evicted to stay within the limits, by kind.
    pub fn evicted(&self) -> Evicted {
        totals::evicted(
            self.fabric.iter().map(|s| &**s),
            self.flows.iter().map(|s| &**s),
        )
    }

    /// Entries held: (nodes, sources, ports, queues, links, flows).
    pub fn held(&self) -> [(&'static str, usize); 6] {
        totals::held(
            self.fabric.iter().map(|s| &**s),
            self.flows.iter().map(|s| &**s),
        )
    }

    /// Records processed, by version.
    pub fn counters(&self) -> RecordCounters {
        totals::counters(self.fabric.iter().map(|s| &**s))
    }

    /// Events raised, by kind, when the snapshot was taken.
    pub fn event_counts(&self) -> &BTreeMap<EventKind, u64> {
        &self.event_counts
    }

    /// Events suppressed by the per-place rate limit.
    pub fn events_suppressed(&self) -> u64 {
        totals::suppressed(
            self.fabric.iter().map(|s| &**s),
            self.flows.iter().map(|s| &**s),
        )
    }

    /// The latest record time the snapshot holds.
    pub fn last_time_ns(&self) -> u64 {
        self.fabric
            .iter()
            .map(|s| s.last_time_ns)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use intscope_wire::locate::DetectConfig;

    use crate::loadgen::{Generator, INT_PORT, LoadConfig, LoadVersion};
    use crate::record::{FlowKeyMode, Record, decode_datagram};
    use crate::state::State;

    fn fed(shards: usize, datagrams: u64) -> (State, Generator) {
        let cfg = DetectConfig {
            int_udp_ports: vec![INT_PORT],
            ..DetectConfig::default()
        };
        let mut g = Generator::new(LoadConfig {
            flows: 300,
            hops: 4,
            version: LoadVersion::V2,
            batch: 8,
            drop_every: 7,
            ..LoadConfig::default()
        });
        let state = State::with_shards(crate::detect::DetectConfig::default(), shards);
        let (mut buf, mut rec) = (Vec::new(), Record::default());
        for t in 0..datagrams {
            g.next_datagram(&mut buf);
            decode_datagram(
                &buf,
                t * 1_000,
                &cfg,
                FlowKeyMode::Innermost,
                &mut rec,
                |r| state.process(r),
            )
            .unwrap();
        }
        (state, g)
    }

    /// A snapshot answers as the locked view does, row for row.
    #[test]
    fn a_snapshot_answers_as_the_locked_view() {
        for shards in [1, 3] {
            let (state, _) = fed(shards, 2_000);
            let snap = state.snapshot(None);
            let v = state.read();
            assert_eq!(snap.flow_count(), v.flow_count());
            assert!(snap.flow_count() > 0);
            for f in v.flows() {
                let r = snap.flow_by_id(f.id).expect("every flow by its ID");
                assert_eq!(
                    (r.key, r.reports, r.drops, r.last_seen_ns, r.first_seen_ns),
                    (f.key, f.reports, f.drops, f.last_seen_ns, f.first_seen_ns)
                );
                assert_eq!(r.path, f.path);
                assert_eq!(r.e2e_p99, f.e2e.quantile(0.99));
                assert_eq!(
                    r.path_history().collect::<Vec<_>>(),
                    f.path_history().collect::<Vec<_>>()
                );
                assert_eq!(r.recent.iter().count(), f.recent.iter().count());
            }
            assert!(snap.flow_by_id(u64::MAX).is_none());
            let nodes = |it: &mut dyn Iterator<Item = u32>| {
                let mut n: Vec<u32> = it.collect();
                n.sort_unstable();
                n
            };
            assert_eq!(
                nodes(&mut snap.nodes().map(|(id, _)| id)),
                nodes(&mut v.nodes().map(|(id, _)| id))
            );
            for (id, n) in v.nodes() {
                assert_eq!(snap.node(id).unwrap().reports_sent, n.reports_sent);
            }
            assert_eq!(snap.queues().count(), v.queues().count());
            assert_eq!(snap.links().count(), v.links().count());
            assert_eq!(snap.sources().count(), v.sources().count());
            assert_eq!(snap.reports_lost(), v.reports_lost());
            assert_eq!(snap.held(), v.held());
            assert_eq!(snap.evicted(), v.evicted());
            assert_eq!(snap.counters().v2, v.counters().v2);
            assert_eq!(snap.event_counts(), v.event_counts());
            assert_eq!(snap.events_suppressed(), v.events_suppressed());
        }
    }

    /// A shard nothing touched since the last snapshot is shared with it, not copied; one that
    /// changed is copied again.
    #[test]
    fn unchanged_shards_are_shared_and_changed_ones_copied() {
        let (state, _) = fed(2, 500);
        let first = state.snapshot(None);
        assert!(!state.changed_since(&first));
        let second = state.snapshot(Some(&first));
        for (a, b) in first.flows.iter().zip(&second.flows) {
            assert!(Arc::ptr_eq(a, b));
        }
        for (a, b) in first.fabric.iter().zip(&second.fabric) {
            assert!(Arc::ptr_eq(a, b));
        }
        state.tick(10_000_000_000);
        assert!(state.changed_since(&second));
        let third = state.snapshot(Some(&second));
        assert!(!Arc::ptr_eq(&second.flows[0], &third.flows[0]));
        assert_eq!(third.sequence, second.sequence + 1);
    }
}
