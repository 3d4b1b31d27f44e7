//! Published snapshots of the live state: what readers (the API, `/metrics`) see, so that a read
//! never takes a lock the correlating threads write under.
//!
//! A [`Snapshot`] is immutable and shared ([`Arc`]): readers clone the pointer and work on it as
//! long as they like. `State::snapshot` builds the next one
//! shard by shard, each under its lock for the time of a copy, reusing the previous snapshot's
//! part of any fabric shard that has not changed since. The flow table is copied as compact
//! rows (what the flow list shows and sorts by, quantiles worked out once; a [`FlowView`] when
//! read), not as whole flow states, and incrementally: each flow shard keeps its last two copies
//! ([`FlowCopies`]) and its table marks the flows written since (created, updated, removed), so
//! that the next copy makes again only their rows, in the copy before the last.
//!
//! Memory: a flow shard's copy holds, per slot of its table, 40 bytes of what changes with a
//! flow's reports (the paths shared with the live state; a slot freed by an eviction stays empty
//! until a new flow takes it) and an (ID, slot) pair per flow; the flows' identities (56 bytes a
//! slot) are shared by the two copies in chunks, copied only where flows came or went. A fabric
//! shard's copy is a copy of its tables. All are bounded by [`Limits`](crate::limits::Limits).
//! Each flow shard keeps two copies (the published one and the one before it, to be brought up
//! to date next), plus any that readers hold; an unchanged fabric shard's copy is shared by
//! consecutive snapshots.

use std::collections::BTreeMap;
use std::sync::Arc;

use intscope_wire::locate::FlowKey;

use crate::event::EventKind;
use crate::fabric::{
    Evicted, FabricShard, LinkState, NodeState, QueueState, RecordCounters, node_shard,
};
use crate::flow::{FlowState, FlowTable, Histogram, Path};
use crate::id_table::IdTable;
use crate::keys::{LinkKey, QueueKey};
use crate::seq::SeqState;
use crate::totals;

/// One flow as readers see it: its identity, counters, path and latency quantiles — what the
/// flow list shows and sorts by. Assembled when read from a copy's two parts (see
/// [`FlowShardSnapshot`]); a flow's page reads its samples and earlier paths from the live flow
/// (`State::flow_recent`).
#[derive(Debug, Clone)]
pub struct FlowView {
    /// Dense ID used by the API.
    pub id: u64,
    /// First report, ns.
    pub first_seen_ns: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// Reports received.
    pub reports: u64,
    /// Drop reports.
    pub drops: u64,
    /// Current path, source first (shared with the live state).
    pub path: Path,
    /// The flow.
    pub key: FlowKey,
    /// Path changes seen (saturating).
    pub path_changes: u32,
    /// Last drop reason.
    pub last_drop_reason: Option<u8>,
    /// The buckets of the end-to-end latency's median and 99th percentile, as [`Changing`]
    /// keeps them.
    e2e_buckets: [u8; 2],
}

impl FlowView {
    /// The row of a live flow.
    pub fn of(f: &FlowState) -> Self {
        FlowView::from_parts(&Identity::of(f), &Changing::of(f))
    }

    fn from_parts(i: &Identity, c: &Changing) -> Self {
        FlowView {
            id: i.id,
            key: i.key,
            first_seen_ns: i.first_seen_ns,
            last_seen_ns: c.last_seen_ns,
            reports: c.reports,
            drops: c.drops,
            path_changes: c.path_changes,
            last_drop_reason: c.last_drop_reason,
            path: Arc::clone(&c.path),
            e2e_buckets: c.e2e_buckets,
        }
    }

    /// Median end-to-end latency, ns.
    pub fn e2e_p50(&self) -> Option<u64> {
        latency(self.e2e_buckets[0])
    }

    /// 99th percentile end-to-end latency, ns.
    pub fn e2e_p99(&self) -> Option<u64> {
        latency(self.e2e_buckets[1])
    }
}

/// The latency a quantile's bucket stands for.
fn latency(bucket: u8) -> Option<u64> {
    (bucket != NO_BUCKET).then(|| Histogram::midpoint(bucket))
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
        // `rows` has a place per table slot, free ones included.
        self.len()
    }

    fn flows_evicted(&self) -> u64 {
        self.counts.flows_evicted
    }

    fn link_ports_refused(&self) -> u64 {
        self.counts.link_ports_refused
    }

    fn suppressed(&self) -> u64 {
        self.counts.suppressed
    }
}

/// What a flow's row keeps while the flow holds its slot: copied once, and shared by the
/// shard's two copies (in chunks of [`IDENTITY_CHUNK`] slots) unless flows came or went in the
/// chunk between them. ID 0 (never given) marks a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    id: u64,
    first_seen_ns: u64,
    key: FlowKey,
}

impl Identity {
    const FREE: Identity = Identity {
        id: 0,
        first_seen_ns: 0,
        key: FlowKey {
            src: std::net::Ipv6Addr::UNSPECIFIED,
            dst: std::net::Ipv6Addr::UNSPECIFIED,
            proto: 0,
            src_port: 0,
            dst_port: 0,
        },
    };

    fn of(f: &FlowState) -> Self {
        Identity {
            id: f.id,
            first_seen_ns: f.first_seen_ns,
            key: f.key,
        }
    }
}

/// Slots of one shared chunk of identities.
const IDENTITY_CHUNK: usize = 64;

type Identities = [Identity; IDENTITY_CHUNK];

/// "No quantile" in [`Changing::e2e_buckets`] (a bucket is below 64).
const NO_BUCKET: u8 = u8::MAX;

/// What a flow's row changes with its reports: each copy has its own (40 bytes).
#[derive(Debug, Clone)]
struct Changing {
    last_seen_ns: u64,
    reports: u64,
    drops: u64,
    path: Path,
    path_changes: u32,
    last_drop_reason: Option<u8>,
    /// The buckets of the end-to-end latency's median and 99th percentile.
    e2e_buckets: [u8; 2],
}

impl Changing {
    fn of(f: &FlowState) -> Self {
        let bucket = |q| f.e2e.quantile_bucket(q).unwrap_or(NO_BUCKET);
        Changing {
            last_seen_ns: f.last_seen_ns,
            reports: f.reports,
            drops: f.drops,
            path: Arc::clone(&f.path),
            path_changes: u32::try_from(f.path_changes).unwrap_or(u32::MAX),
            last_drop_reason: f.last_drop_reason,
            e2e_buckets: [bucket(0.5), bucket(0.99)],
        }
    }
}

/// How many changed slots ahead a copy prefetches.
const PREFETCH_AHEAD: usize = 8;

/// One flow shard, copied: a row per flow, laid out by the live table's slots, and an index by
/// ID. Made by `FlowCopies::refresh` from an earlier copy, so that it costs in proportion to
/// the flows written since, not to the flows held.
///
/// A row is kept in two parts, as every flow has one in each of a shard's two copies: what
/// changes with its reports, per copy (40 bytes), and its identity (ID, key, first report: 56
/// bytes), in chunks of slots shared with the copy before — a copy has its own chunk only where
/// a flow came into or left one of its slots since. The index by ID is shared alike while no
/// flow came or went.
#[derive(Debug, Default, Clone)]
pub struct FlowShardSnapshot {
    /// What changes, by slot of the live table (a free slot's is `None`).
    rows: Vec<Option<Changing>>,
    /// Identities, by chunk of slots.
    identities: Vec<Arc<Identities>>,
    /// (ID, slot) in ID order, for lookups by ID.
    by_id: Arc<Vec<(u64, u32)>>,
    counts: FlowCounts,
}

/// A flow shard's counts a copy holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FlowCounts {
    /// Flows expired idle.
    pub flows_expired: u64,
    /// Flows evicted at the limit.
    pub flows_evicted: u64,
    /// Reports that said nothing new to the detectors.
    pub reports_unchanged: u64,
    /// Link-table entries refused at their bound.
    pub link_ports_refused: u64,
    /// Events suppressed by the rate limit.
    pub suppressed: u64,
}

impl FlowShardSnapshot {
    /// A copy of `shard` made from scratch, every flow's row anew (what
    /// `FlowCopies::refresh` gives, at the cost of all the flows).
    pub fn of(table: &FlowTable, counts: FlowCounts) -> Self {
        let mut s = FlowShardSnapshot::default();
        s.update(table, counts, |_| u64::MAX);
        s
    }

    /// Brings this copy up to `shard`: the rows of the slots `changed` marks (word `w` of the
    /// marks, a bit per slot, as [`FlowTable::changed`](crate::flow::FlowTable::changed)) are
    /// made again; the others must not have changed since this copy was made.
    fn update(&mut self, table: &FlowTable, counts: FlowCounts, changed: impl Fn(usize) -> u64) {
        // Slots the copy did not have are new, and marked.
        self.rows.resize_with(table.slot_count(), || None);
        let chunks = table.slot_count().div_ceil(IDENTITY_CHUNK);
        self.identities
            .resize_with(chunks, || Arc::new([Identity::FREE; IDENTITY_CHUNK]));
        // The slots to copy again, in order.
        let mut slots: Vec<u32> = Vec::new();
        for w in 0..self.rows.len().div_ceil(64) {
            let mut bits = changed(w);
            while bits != 0 {
                slots.push((w * 64) as u32 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        // Flows that left their slot and came into one since.
        let (mut gone, mut came) = (Vec::new(), Vec::new());
        for (i, &slot) in slots.iter().enumerate() {
            // Scattered over the slab, each flow and each row is a cache miss: start loading
            // the one `PREFETCH_AHEAD` on, unless it follows its neighbour, which the CPU's own
            // prefetcher finds (a dense run of changes streams).
            if let Some(&[prev, ahead]) = slots.get(i + PREFETCH_AHEAD - 1..i + PREFETCH_AHEAD + 1)
                && ahead > prev + 1
            {
                table.prefetch_slot(ahead as usize);
                if let Some(row) = self.rows.get(ahead as usize) {
                    crate::flow::prefetch_lines(row);
                }
            }
            let Some(row) = self.rows.get_mut(slot as usize) else {
                continue;
            };
            let flow = table.at_slot(slot as usize);
            let (chunk, at) = (
                slot as usize / IDENTITY_CHUNK,
                slot as usize % IDENTITY_CHUNK,
            );
            let was = self.identities[chunk][at];
            let is = flow.map_or(Identity::FREE, Identity::of);
            if was.id != is.id {
                gone.extend((was.id != 0).then_some(was.id));
                came.extend((is.id != 0).then_some((is.id, slot)));
            }
            if was != is {
                // Copied first if the other copy shares the chunk.
                Arc::make_mut(&mut self.identities[chunk])[at] = is;
            }
            *row = flow.map(Changing::of);
        }
        if !gone.is_empty() {
            gone.sort_unstable();
            Arc::make_mut(&mut self.by_id).retain(|(id, _)| gone.binary_search(id).is_err());
        }
        if !came.is_empty() {
            came.sort_unstable();
            // IDs grow within a shard (taken under its lock), so the flows that came sort after
            // those held before; should they not, the index is sorted whole.
            let in_order = self
                .by_id
                .last()
                .zip(came.first())
                .is_none_or(|(a, b)| a.0 < b.0);
            let by_id = Arc::make_mut(&mut self.by_id);
            by_id.extend(came);
            if !in_order {
                by_id.sort_unstable();
            }
        }
        self.counts = counts;
    }

    /// Shares with `latest` (the copy made after this one was) what is the same in both once this
    /// one is up to date: the identity chunks of the slots no flow came into or left since
    /// `latest` was made (`came_or_went`, as
    /// [`FlowTable::came_or_went`](crate::flow::FlowTable::came_or_went): one word a chunk),
    /// and the index by ID if none did. A copy then holds its own identities only where flows
    /// came or went between the two.
    fn share(&mut self, latest: &FlowShardSnapshot, came_or_went: &[u64]) {
        const { assert!(IDENTITY_CHUNK == 64, "one word of marks a chunk") };
        for (c, chunk) in self.identities.iter_mut().enumerate() {
            if let Some(theirs) = latest.identities.get(c)
                && came_or_went.get(c).is_some_and(|&w| w == 0)
                && !Arc::ptr_eq(chunk, theirs)
            {
                *chunk = Arc::clone(theirs);
            }
        }
        if came_or_went.iter().all(|&w| w == 0) && !Arc::ptr_eq(&self.by_id, &latest.by_id) {
            self.by_id = Arc::clone(&latest.by_id);
        }
    }

    /// Every row, in slot order.
    pub fn rows(&self) -> impl Iterator<Item = FlowView> + '_ {
        self.rows
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| Some(self.row(slot, c.as_ref()?)))
    }

    fn row(&self, slot: usize, changing: &Changing) -> FlowView {
        let identity = &self.identities[slot / IDENTITY_CHUNK][slot % IDENTITY_CHUNK];
        FlowView::from_parts(identity, changing)
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The row of the flow with API ID `id`.
    pub fn flow_by_id(&self, id: u64) -> Option<FlowView> {
        let i = self.by_id.binary_search_by_key(&id, |&(id, _)| id).ok()?;
        let slot = self.by_id[i].1 as usize;
        Some(self.row(slot, self.rows.get(slot)?.as_ref()?))
    }
}

/// A flow shard's last two copies, kept by the shard (under its lock) so that the next copy is
/// made from one of them. The latest is in the published snapshot; the one before it was in the
/// snapshot before, which no reader holds any more as a rule by the time the next one is made:
/// then that copy is brought up to date in place, its rows of the slots written since it was
/// made (since the latest copy, and between the two) made again, and nothing else touched or
/// allocated. When a reader still holds it, the latest copy is cloned instead (the cost of a
/// full copy), and the reader frees the old one when it lets go. So two copies are alive, plus
/// any a reader holds.
#[derive(Debug, Default)]
pub struct FlowCopies {
    /// The latest copy.
    latest: Arc<FlowShardSnapshot>,
    /// The copy before it, and the slots written between the two (a bit each, as
    /// [`FlowTable::changed`](crate::flow::FlowTable::changed)).
    before: Option<(Arc<FlowShardSnapshot>, Vec<u64>)>,
}

impl FlowCopies {
    /// The copy of a shard's flow `table` and `counts` as of now: the latest one when nothing
    /// changed since, else a new one (see [`FlowCopies`]); the table's changed marks are then
    /// cleared. Called under the shard's lock.
    pub fn refresh(&mut self, table: &mut FlowTable, counts: FlowCounts) -> Arc<FlowShardSnapshot> {
        let copies = self;
        let latest = &copies.latest;
        let marks = table.changed();
        let same = marks.iter().all(|&w| w == 0) && latest.counts == counts;
        if same {
            return Arc::clone(latest);
        }
        let marked = |w: usize| marks.get(w).copied().unwrap_or(0);
        let from_latest = || {
            let mut copy = FlowShardSnapshot::clone(latest);
            copy.update(table, counts, marked);
            Arc::new(copy)
        };
        let next = match copies.before.take() {
            Some((mut old, between)) => match Arc::get_mut(&mut old) {
                Some(copy) => {
                    copy.update(table, counts, |w| {
                        marked(w) | between.get(w).copied().unwrap_or(0)
                    });
                    copy.share(latest, table.came_or_went());
                    old
                }
                // A reader still holds it.
                None => from_latest(),
            },
            None => from_latest(),
        };
        let latest = std::mem::replace(&mut copies.latest, Arc::clone(&next));
        copies.before = Some((latest, marks.to_vec()));
        table.clear_changed();
        next
    }
}

/// One fabric shard, copied.
#[derive(Debug, Default)]
pub struct FabricShardSnapshot {
    nodes: IdTable<NodeState>,
    queues: Vec<(QueueKey, QueueState)>,
    links: Vec<(LinkKey, LinkState)>,
    sources: Vec<((u32, u8), SeqState)>,
    seq: crate::seq::SeqTotals,
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
            seq: shard.seq.totals(),
            counters: shard.counters,
            evicted: shard.evicted(),
            held: shard.held(),
            suppressed: shard.raiser.suppressed,
            last_time_ns: shard.last_time_ns,
        }
    }
}

/// The live state at one moment, for readers: the same questions as
/// `state::View`, answered from copies.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub(crate) flows: Vec<Arc<FlowShardSnapshot>>,
    pub(crate) fabric: Vec<Arc<FabricShardSnapshot>>,
    /// Each shard's change count when it was copied (flows, then fabric).
    pub(crate) generations: Vec<u64>,
    pub(crate) event_counts: BTreeMap<EventKind, u64>,
    /// Per-hop reports of nodes the report-loss history had no room for.
    pub(crate) loss_untracked: u64,
    /// How many snapshots the state had built before this one.
    pub sequence: u64,
}

impl Snapshot {
    /// Every flow.
    pub fn flows(&self) -> impl Iterator<Item = FlowView> + '_ {
        self.flows.iter().flat_map(|s| s.rows())
    }

    /// Flows.
    pub fn flow_count(&self) -> usize {
        self.flows.iter().map(|s| s.len()).sum()
    }

    /// The flow with API ID `id`.
    pub fn flow_by_id(&self, id: u64) -> Option<FlowView> {
        self.flows.iter().find_map(|s| s.flow_by_id(id))
    }

    /// Flows that left memory idle.
    pub fn flows_expired(&self) -> u64 {
        self.flows.iter().map(|s| s.counts.flows_expired).sum()
    }

    /// Reports that said nothing new to the detectors (`[detect.fast_path]`).
    pub fn reports_unchanged(&self) -> u64 {
        self.flows.iter().map(|s| s.counts.reports_unchanged).sum()
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

    /// Reports lost, from sequence gaps (see `View::reports_lost`).
    pub fn reports_lost(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.reports_lost).sum()
    }

    /// Report groups (datagrams, one sequence number each) lost, from sequence gaps.
    pub fn report_groups_lost(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.groups_lost).sum()
    }

    /// Sequence resets: restarted counters (far jumps later numbers continued).
    pub fn sequence_resets(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.restarts).sum()
    }

    /// Sequence numbers later numbers contradicted (corrupt or spoofed), see `seq`.
    pub fn sequence_implausible(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.implausible).sum()
    }

    /// Reports whose sequence width was not their source's (v2.0 mixed with v1.0 or v0.5).
    pub fn sequence_width_conflicts(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.width_conflicts).sum()
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

    /// Per-hop reports of nodes the report-loss history had no room for (a flood of node IDs).
    pub fn loss_untracked(&self) -> u64 {
        self.loss_untracked
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

    use intscope_wire::locate::FlowKey;

    use super::{FlowShardSnapshot, Snapshot};
    use crate::limits::Limits;
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
        let state = State::with_shards(crate::thresholds::DetectConfig::default(), shards);
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

    /// Every flow has a row in two copies: their size is the snapshot's memory.
    #[test]
    fn a_row_is_small() {
        assert_eq!(
            size_of::<Option<super::Changing>>(),
            40,
            "a million flows in memory"
        );
        assert_eq!(size_of::<super::Identity>(), 56);
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
            let mut recent = Vec::new();
            for f in v.flows() {
                let r = snap.flow_by_id(f.id).expect("every flow by its ID");
                assert_eq!(
                    (r.key, r.reports, r.drops, r.last_seen_ns, r.first_seen_ns),
                    (f.key, f.reports, f.drops, f.last_seen_ns, f.first_seen_ns)
                );
                assert_eq!(r.path, f.path);
                assert_eq!(u64::from(r.path_changes), f.path_changes);
                assert_eq!(r.e2e_p50(), f.e2e.quantile(0.5));
                assert_eq!(r.e2e_p99(), f.e2e.quantile(0.99));
                let paths: Vec<(u64, crate::flow::Path)> =
                    f.path_history().map(|(t, p)| (t, Arc::clone(p))).collect();
                let samples = format!("{:?}", f.recent);
                recent.push((r.key, r.id, paths, samples));
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
            drop(v);
            // What the rows leave out, the live flow gives (and only for its own ID).
            for (key, id, paths, samples) in recent {
                let live = state.flow_recent(&key, id).expect("a live flow's recent");
                assert_eq!(live.paths, paths);
                assert_eq!(format!("{:?}", live.samples), samples);
                assert!(state.flow_recent(&key, id + 1_000_000).is_none());
            }
        }
    }

    /// A shard nothing touched since the last snapshot is shared with it, not copied; one that
    /// changed is copied again. A sweep that changes no flow leaves the flow shards' copies
    /// shared.
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
        assert!(!Arc::ptr_eq(&second.fabric[0], &third.fabric[0]));
        assert!(Arc::ptr_eq(&second.flows[0], &third.flows[0]));
        assert_eq!(third.sequence, second.sequence + 1);
        // Past `flow_idle_ns` every flow leaves: the flow shards are copied again, empty.
        state.tick(700_000_000_000);
        let fourth = state.snapshot(Some(&third));
        assert!(!Arc::ptr_eq(&third.flows[0], &fourth.flows[0]));
        assert_eq!(fourth.flow_count(), 0);
        assert_eq!(fourth.flows_expired(), third.flow_count() as u64);
    }

    /// The copies of `state`'s flow shards made from scratch, in shard order.
    fn from_scratch(state: &State) -> Vec<FlowShardSnapshot> {
        let mut copies = Vec::new();
        state.each_flow_shard(|shard| {
            copies.push(FlowShardSnapshot::of(&shard.flows, shard.copy_counts()))
        });
        copies
    }

    /// Asserts that `snap`'s flow shards hold what copies made from scratch hold, row for row.
    fn assert_as_from_scratch(snap: &Snapshot, fresh: &[FlowShardSnapshot]) {
        assert_eq!(snap.flows.len(), fresh.len());
        for (a, b) in snap.flows.iter().zip(fresh) {
            let rows = |s: &FlowShardSnapshot| -> Vec<String> {
                s.rows().map(|r| format!("{r:?}")).collect()
            };
            assert_eq!(rows(a), rows(b));
            assert_eq!(a.len(), b.len());
            assert_eq!(a.rows().count(), a.len());
            assert_eq!(a.by_id, b.by_id);
            for &(id, _) in b.by_id.iter() {
                assert_eq!(
                    format!("{:?}", a.flow_by_id(id)),
                    format!("{:?}", b.flow_by_id(id))
                );
            }
            assert_eq!(a.counts, b.counts);
        }
    }

    /// Feeds `state` one more datagram from `g` at `t`; returns the keys of its reports.
    fn one_more(state: &State, g: &mut Generator, t: u64) -> Vec<FlowKey> {
        let (mut buf, mut rec) = (Vec::new(), Record::default());
        g.next_datagram(&mut buf);
        let cfg = DetectConfig {
            int_udp_ports: vec![INT_PORT],
            ..DetectConfig::default()
        };
        let mut touched = Vec::new();
        decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
            touched.push(r.flow.unwrap());
            state.process(r)
        })
        .unwrap();
        touched
    }

    /// The copy before the last is brought up to date in place once no reader holds it, and
    /// cloned from the last while one does; either way it holds what a copy from scratch holds,
    /// the flows just written with their new counts.
    #[test]
    fn the_copy_before_is_updated_in_place_unless_a_reader_holds_it() {
        let (state, mut g) = fed(1, 2_000);
        let first = state.snapshot(None);
        one_more(&state, &mut g, 3_000_000_000);
        let second = state.snapshot(Some(&first));
        let first_copy = Arc::as_ptr(&first.flows[0]);
        drop(first);
        let touched = one_more(&state, &mut g, 4_000_000_000);
        let third = state.snapshot(Some(&second));
        assert_eq!(Arc::as_ptr(&third.flows[0]), first_copy, "updated in place");
        assert_as_from_scratch(&third, &from_scratch(&state));
        // No flow came or went since `second`: `third` shares its identities and its index
        // with it, as it did not after its own first copy.
        let (a, b) = (&third.flows[0], &second.flows[0]);
        assert!(!a.identities.is_empty());
        assert!(
            a.identities
                .iter()
                .zip(&b.identities)
                .all(|(x, y)| Arc::ptr_eq(x, y))
        );
        assert!(Arc::ptr_eq(&a.by_id, &b.by_id));
        for key in touched {
            let row = third.flows().find(|r| r.key == key).unwrap();
            assert_eq!(row.last_seen_ns, 4_000_000_000);
            assert!(row.reports > second.flow_by_id(row.id).unwrap().reports);
        }
        // `second` is still held: the next copy is a clone of `third`'s.
        one_more(&state, &mut g, 5_000_000_000);
        let fourth = state.snapshot(Some(&third));
        assert!(!Arc::ptr_eq(&fourth.flows[0], &second.flows[0]));
        assert!(!Arc::ptr_eq(&fourth.flows[0], &third.flows[0]));
        assert_as_from_scratch(&fourth, &from_scratch(&state));
        assert_eq!(second.flow_count(), fourth.flow_count());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// After random updates, new flows, joins, evictions (a small flow limit) and expiries,
        /// each snapshot's flow copies equal copies made from scratch, with readers holding
        /// some of the snapshots before.
        #[test]
        fn an_incremental_copy_equals_one_from_scratch(
            shards in 1usize..4,
            flows in 20u32..400,
            postcards: bool,
            steps in proptest::collection::vec((0u8..5, 1u64..120), 1..16),
        ) {
            let cfg = DetectConfig {
                int_udp_ports: vec![INT_PORT],
                ..DetectConfig::default()
            };
            let limits = Limits { flows: 128, ..Limits::default() };
            let state = State::with_limits(crate::thresholds::DetectConfig::default(), limits, shards);
            let mut g = Generator::new(LoadConfig {
                flows,
                hops: 4,
                // v0.5 postcards change flows as they are joined, in sweeps.
                version: if postcards { LoadVersion::V05 } else { LoadVersion::V2 },
                batch: 8,
                drop_every: 7,
                ..LoadConfig::default()
            });
            let (mut buf, mut rec, mut t) = (Vec::new(), Record::default(), 0u64);
            let mut held: Vec<Arc<Snapshot>> = Vec::new();
            for (op, n) in steps {
                match op {
                    // Reports: updates, new flows, evictions past the limit.
                    0..=2 => {
                        for _ in 0..n {
                            t += 1_000;
                            g.next_datagram(&mut buf);
                            decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
                                state.process(r)
                            })
                            .unwrap();
                        }
                    }
                    // Time passes: flows idle for `flow_idle_ns` leave.
                    3 => {
                        t += n * 10_000_000_000;
                        state.tick(t);
                    }
                    // A reader lets go of the oldest snapshot it holds.
                    _ => {
                        if !held.is_empty() {
                            held.remove(0);
                        }
                    }
                }
                let snap = Arc::new(state.snapshot(held.last().map(|s| &**s)));
                assert_as_from_scratch(&snap, &from_scratch(&state));
                let v = state.read();
                proptest::prop_assert_eq!(snap.flow_count(), v.flow_count());
                proptest::prop_assert_eq!(snap.held(), v.held());
                proptest::prop_assert_eq!(snap.evicted(), v.evicted());
                proptest::prop_assert_eq!(snap.flows_expired(), v.flows_expired());
                proptest::prop_assert_eq!(snap.reports_unchanged(), v.reports_unchanged());
                drop(v);
                held.push(snap);
            }
        }
    }
}
