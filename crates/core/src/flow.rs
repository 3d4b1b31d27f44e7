//! Per-flow state: the current path, its history, per-hop and end-to-end latency.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;

use rustc_hash::FxHashSet as HashSet;

use intscope_wire::locate::FlowKey;

use crate::fast_path::{ANCHOR_HOPS, Anchor, LastValues};
use crate::record::Hop;

/// One hop of a path: which node, in and out of which ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PathHop {
    /// Node ID.
    pub node_id: u32,
    /// Ingress interface.
    pub ingress_if: Option<u32>,
    /// Egress interface.
    pub egress_if: Option<u32>,
}

impl From<&Hop> for PathHop {
    fn from(h: &Hop) -> Self {
        PathHop {
            node_id: h.node_id,
            ingress_if: h.ingress_if(),
            egress_if: h.egress_if(),
        }
    }
}

/// Latency distribution in half-octave buckets from 64 ns (±19% per value). 8-bit counts keep it
/// at 68 bytes a flow, so a million flows fit in memory: when a bucket would overflow, every count
/// is halved — quantiles are relative, and the older half of a long flow's history weighs less.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: [u8; 64],
    /// Sum of `counts` (at most 64 × 255).
    total: u16,
    /// The highest bucket with a value: high quantiles are found from there, in a step or two.
    top: u8,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; 64],
            total: 0,
            top: 0,
        }
    }
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        if v < 64 {
            return 0;
        }
        let log2 = 63 - v.leading_zeros() as usize;
        let half = usize::from((v >> (log2 - 1)) & 1 == 1);
        ((log2 - 6) * 2 + half + 1).min(63)
    }

    fn lower_bound(b: usize) -> u64 {
        if b == 0 {
            return 0;
        }
        let log2 = (b - 1) / 2 + 6;
        let base = 1u64 << log2;
        if (b - 1) % 2 == 1 {
            base + base / 2
        } else {
            base
        }
    }

    /// Adds a value.
    pub fn record(&mut self, v: u64) {
        let b = Self::bucket(v);
        if self.counts[b] == u8::MAX {
            // Halve, rounding up so no bucket with a value empties.
            self.total = 0;
            for c in &mut self.counts {
                *c = c.div_ceil(2);
                self.total += u16::from(*c);
            }
        }
        self.counts[b] += 1;
        self.total += 1;
        self.top = self.top.max(b as u8);
    }

    /// The `q` quantile (0..=1), as the midpoint of its bucket.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        self.quantile_bucket(q).map(Histogram::midpoint)
    }

    /// The value a bucket stands for: its midpoint (what [`Histogram::quantile`] answers).
    pub fn midpoint(bucket: u8) -> u64 {
        let b = usize::from(bucket).min(63);
        let lo = Self::lower_bound(b);
        let hi = Self::lower_bound(b + 1).max(lo + 1);
        (lo + hi) / 2
    }

    /// The bucket of the `q` quantile (0..=1): one byte where a published row keeps a quantile,
    /// [`Histogram::midpoint`] its value.
    pub fn quantile_bucket(&self, q: f64) -> Option<u8> {
        if self.total == 0 {
            return None;
        }
        let total = u64::from(self.total);
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let found = |b: usize| Some(b as u8);
        if q >= 0.5 {
            // The smallest bucket with `rank` values at or below it is the lowest one with at
            // most `total - rank` values above it: walk down from the top while the next one
            // down still qualifies.
            let mut b = usize::from(self.top);
            let mut above = 0u64;
            while b > 0 && above + u64::from(self.counts[b]) <= total - rank {
                above += u64::from(self.counts[b]);
                b -= 1;
            }
            return found(b);
        }
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return found(b);
            }
        }
        None
    }
}

/// A path, source first. Interned in a `PathTable`: the flows that take one path share it.
/// A thin pointer (8 bytes, where `Arc<[PathHop]>` takes 16): every flow and both published
/// copies of its row hold one, and the hops sit behind the shared header anyway.
pub type Path = Arc<Vec<PathHop>>;

/// The distinct paths of the live flows, each stored once (a million flows over a fabric take a
/// few thousand paths).
#[derive(Debug, Default)]
pub struct PathTable {
    paths: HashSet<Path>,
    scratch: Vec<PathHop>,
}

impl PathTable {
    /// The shared copy of the path of these hops.
    pub fn intern(&mut self, hops: &[Hop]) -> Path {
        self.scratch.clear();
        self.scratch.extend(hops.iter().map(PathHop::from));
        if let Some(p) = self.paths.get(&self.scratch) {
            return Arc::clone(p);
        }
        let p: Path = Arc::new(self.scratch.clone());
        self.paths.insert(Arc::clone(&p));
        p
    }

    /// Forgets the paths no flow holds any more.
    pub fn forget_unused(&mut self) {
        self.paths.retain(|p| Arc::strong_count(p) > 1);
    }

    /// Distinct paths held.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether no path is held.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

/// The live flows: their states in one contiguous slab, found by key through an index of slot
/// numbers. The flow list scans every flow for its sort key; over a slab that streams memory,
/// where a pointer per flow (boxed states) made the scan chase pointers through the heap. The
/// index holds 8-byte entries (the key is compared in the slab), so it stays in cache where a map
/// holding the 38-byte keys missed it on every lookup. An entry is a slot number and 32 bits of
/// its key's hash (an `IndexEntry`): a lookup reads the slab only for the entry whose hash bits
/// match, a prefetch and a rehash never read it (reading the slab to find which slot to prefetch
/// was itself the cache miss the prefetch is for: 13 % of correlation).
///
/// The table also marks each slot written since the published snapshot's copy was taken (a flow
/// created, handed out to change, or removed), one bit a slot, so that the next copy refreshes
/// only those rows ([`FlowTable::changed`], the snapshot).
#[derive(Debug, Default)]
pub struct FlowTable {
    index: hashbrown::HashTable<IndexEntry>,
    slots: Vec<Option<FlowState>>,
    free: Vec<u32>,
    /// Slots written since [`FlowTable::clear_changed`], a bit each (word `s / 64`, bit
    /// `s % 64`); as many words as the slab needs.
    changed: Vec<u64>,
    /// Of those, the slots a flow came into or left, as `changed`: a snapshot copy shares the
    /// flows' identities of the other slots with the copy before.
    came_or_went: Vec<u64>,
}

/// An index entry: 32 bits of the key's hash (high half) and the slot number (low half).
#[derive(Debug, Clone, Copy)]
struct IndexEntry(u64);

impl IndexEntry {
    fn new(tag: u32, slot: u32) -> Self {
        IndexEntry((u64::from(tag) << 32) | u64::from(slot))
    }
    fn tag(self) -> u32 {
        (self.0 >> 32) as u32
    }
    fn slot(self) -> u32 {
        self.0 as u32
    }
}

/// The 32 bits of a key's hash an index entry keeps (both halves folded in: the high half alone
/// also picks the key's shard).
fn hash_tag(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// Where the index files an entry with this tag: a function of the tag alone, so the index
/// grows without reading the slab. The multiply spreads the tag over the bits hashbrown uses
/// (the low ones for the bucket, the top seven for its control byte).
fn index_hash(tag: u32) -> u64 {
    u64::from(tag).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The hash a `FlowTable` files `key` under (its `*_hashed` methods take it precomputed, so a
/// batch hashes each key once for sharding, prefetching and lookup).
pub fn key_hash(key: &FlowKey) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// Whether `slot` holds the flow with `key`.
fn holds(slots: &[Option<FlowState>], slot: u32, key: &FlowKey) -> bool {
    slots
        .get(slot as usize)
        .is_some_and(|f| f.as_ref().is_some_and(|f| f.key == *key))
}

impl FlowTable {
    /// Flows held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no flow is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn slot(&self, key: &FlowKey) -> Option<u32> {
        self.slot_hashed(key_hash(key), key)
    }

    fn slot_hashed(&self, hash: u64, key: &FlowKey) -> Option<u32> {
        let tag = hash_tag(hash);
        // The slab is read only for entries whose tags match.
        self.index
            .find(index_hash(tag), |&e| {
                e.tag() == tag && holds(&self.slots, e.slot(), key)
            })
            .map(|e| e.slot())
    }

    /// The flow with this key.
    pub fn get(&self, key: &FlowKey) -> Option<&FlowState> {
        let slot = self.slot(key)?;
        self.slots[slot as usize].as_ref()
    }

    /// The flow with this key, to change (its slot is marked changed).
    pub fn get_mut(&mut self, key: &FlowKey) -> Option<&mut FlowState> {
        let slot = self.slot(key)?;
        self.mark(slot);
        self.slots[slot as usize].as_mut()
    }

    /// The flow with this key, for the store's flush, without marking its slot changed: the
    /// caller may change only what no snapshot row shows (`dirty`, `interval`), or the next
    /// snapshot would keep a stale row.
    pub(crate) fn get_mut_for_flush(&mut self, key: &FlowKey) -> Option<&mut FlowState> {
        let slot = self.slot(key)?;
        self.slots[slot as usize].as_mut()
    }

    /// Marks `slot` written: the next snapshot copies its row again.
    #[inline]
    fn mark(&mut self, slot: u32) {
        let slot = slot as usize;
        // `changed` grows with the slab, so the word is there.
        if let Some(w) = self.changed.get_mut(slot / 64) {
            *w |= 1 << (slot % 64);
        }
    }

    /// Slots the slab has (held flows and free slots): a snapshot's rows are laid out by slot.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The flow in `slot`, if any.
    pub fn at_slot(&self, slot: usize) -> Option<&FlowState> {
        self.slots.get(slot)?.as_ref()
    }

    /// Asks the CPU to start loading the flow in `slot` (a snapshot visiting the changed slots
    /// prefetches the next ones: scattered over the slab, each is a cache miss).
    #[inline]
    pub fn prefetch_slot(&self, slot: usize) {
        if let Some(f) = self.slots.get(slot) {
            prefetch_lines(f);
        }
    }

    /// The slots written (a flow created, handed out to change or removed) since the last
    /// [`FlowTable::clear_changed`]: bit `s % 64` of word `s / 64` for slot `s`, one word per
    /// 64 slots of the slab.
    pub fn changed(&self) -> &[u64] {
        &self.changed
    }

    /// The slots a flow came into or left since the last [`FlowTable::clear_changed`], as
    /// [`FlowTable::changed`].
    pub fn came_or_went(&self) -> &[u64] {
        &self.came_or_went
    }

    /// Forgets which slots were written (a snapshot has copied them).
    pub fn clear_changed(&mut self) {
        self.changed.fill(0);
        self.came_or_went.fill(0);
    }

    /// The flow with this key, made by `new` if it is not held.
    pub fn get_or_insert_with(
        &mut self,
        key: FlowKey,
        new: impl FnOnce() -> FlowState,
    ) -> &mut FlowState {
        self.get_or_insert_hashed(key_hash(&key), key, None, new)
    }

    /// [`FlowTable::get_or_insert_with`] for a key whose [`key_hash`] is `hash`.
    /// `hint`: the slot [`FlowTable::prefetch_hashed`] guessed, tried before the index.
    pub fn get_or_insert_hashed(
        &mut self,
        hash: u64,
        key: FlowKey,
        hint: Option<u32>,
        new: impl FnOnce() -> FlowState,
    ) -> &mut FlowState {
        let found = hint
            .filter(|&s| holds(&self.slots, s, &key))
            .or_else(|| self.slot_hashed(hash, &key));
        let slot = match found {
            Some(slot) => slot,
            None => {
                let tag = hash_tag(hash);
                let flow = Some(new());
                let slot = match self.free.pop() {
                    Some(slot) => {
                        self.slots[slot as usize] = flow;
                        slot
                    }
                    None => {
                        self.slots.push(flow);
                        self.changed.resize(self.slots.len().div_ceil(64), 0);
                        self.came_or_went.resize(self.changed.len(), 0);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.came_or_went[slot as usize / 64] |= 1 << (slot % 64);
                self.index
                    .insert_unique(index_hash(tag), IndexEntry::new(tag, slot), |&e| {
                        index_hash(e.tag())
                    });
                slot
            }
        };
        self.mark(slot);
        self.slots[slot as usize]
            .as_mut()
            .expect("an indexed slot holds its flow")
    }

    /// Asks the CPU to start loading the state of the flow with this key, so that a later
    /// [`FlowTable::get_or_insert_hashed`] finds it in cache: with many flows the state is a cache
    /// miss, and a batch knows its next flows ahead of time.
    #[inline]
    /// Returns the slot it guessed, for the lookup to try first (a key is held in one slot at
    /// most, so the lookup only has to check that the slot holds it).
    pub fn prefetch_hashed(&self, hash: u64) -> Option<u32> {
        let tag = hash_tag(hash);
        // The first entry with the key's tag: almost always the key's (a wrong guess only
        // loads another flow).
        let e = self.index.find(index_hash(tag), |&e| e.tag() == tag)?;
        prefetch_lines(self.slots.get(e.slot() as usize)?);
        Some(e.slot())
    }

    /// Every flow (in slot order).
    pub fn values(&self) -> impl Iterator<Item = &FlowState> {
        self.slots.iter().flatten()
    }

    /// Keeps the flows `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&FlowState) -> bool) {
        for (slot, entry) in self.slots.iter_mut().enumerate() {
            if let Some(flow) = entry
                && !keep(flow)
            {
                let tag = hash_tag(key_hash(&flow.key));
                if let Ok(indexed) = self
                    .index
                    .find_entry(index_hash(tag), |&e| e.slot() as usize == slot)
                {
                    indexed.remove();
                }
                *entry = None;
                self.free.push(slot as u32);
                self.changed[slot / 64] |= 1 << (slot % 64);
                self.came_or_went[slot / 64] |= 1 << (slot % 64);
            }
        }
    }
}

/// Prefetches every cache line of `value` (a hint: nothing is read, nothing can fault).
// The one `unsafe` in the collector: `_mm_prefetch` is a `target_feature` function, callable only
// from `unsafe` even though SSE is part of every x86-64 target.
#[allow(unsafe_code)]
#[inline]
pub(crate) fn prefetch_lines<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = (value as *const T).cast::<i8>();
        // Every line the value spans, its last one included when it is not aligned to a line.
        let into_line = start.addr() & 63;
        let line = start.wrapping_sub(into_line);
        for offset in (0..into_line + size_of::<T>().max(1)).step_by(64) {
            // SAFETY: SSE is baseline on x86-64, and a prefetch neither reads nor faults; the
            // addresses lie inside the lines `value` spans anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// What most flows never have, behind one pointer: the per-hop reports and intermediate-report
/// heads a flow waits to join, and its earlier paths.
#[derive(Debug, Clone, Default)]
struct Extras {
    /// Earlier paths with the time each was first seen, oldest first (bounded).
    earlier_paths: VecDeque<(u64, Path)>,
    /// INT-XD / INT-MX: the latest per-hop report of each node on the flow's way (at most
    /// [`MAX_CARDS`]), joined into a path by the fabric's links ([`FlowState::join_cards`]).
    cards: Vec<Card>,
    /// A join of the cards is due, at `due_ns`.
    queued: bool,
    due_ns: u64,
    /// The shard's queue of joins holds an entry for this flow (one at most).
    in_queue: bool,
    /// The node a silent drop was raised at, until the next hop sees the flow again.
    silent_at: Option<u32>,
    /// Heads of paths from intermediate reports (I bit), waiting for the report of the rest:
    /// (time, hops).
    heads: VecDeque<(u64, Vec<Hop>)>,
}

/// One node's latest per-hop report of a flow (INT-XD postcard, INT-MX report).
#[derive(Debug, Clone, Copy)]
struct Card {
    hop: Hop,
    /// The packet's [`crate::record::Record::packet_fp`] (0: unknown).
    packet: u32,
    /// Report time of this report.
    seen_ns: u64,
    /// Report time of the node's first report of the flow through these ports.
    since_ns: u64,
    /// Reported since the last join.
    fresh: bool,
    /// The IP TTL of the packet in its report (INT-XD/MX: every hop's report holds a copy of
    /// the packet as the hop saw it, so two hops' TTLs tell the hops between them).
    ttl: Option<u8>,
    /// The node's reports of the flow through these ports since `since_ns`.
    reports: u32,
}

/// Per-hop reports a flow keeps, one per node: longer paths than this are not joined whole (the
/// card seen longest ago makes room).
pub const MAX_CARDS: usize = 16;

/// A directed fabric link learned from the reports: (node, egress port) to (node, ingress port).
pub type Link = ((u32, u32), (u32, u32));

/// The fabric's links as the reports showed them, one peer per (node, port). Learned from
/// INT-MD paths (consecutive hops) and from per-hop reports of one packet (the next hop's
/// ingress timestamp follows this hop's egress timestamp within the link delay); a link is
/// duplex, so either direction teaches both. A port with a peer is a fabric port; a hop that
/// entered by another port is a path's first, one that left by another its last. A lost report
/// of the hop between two others pairs them as if linked; such a pairing spans that hop and
/// both links, so it has a longer gap (next ingress after this egress) than the link itself: a
/// port keeps the peer with the shortest gap seen (within a slack for serialization), and among
/// pairings of about the same gap the one seen most.
#[derive(Debug, Default)]
pub struct LinkTable {
    peers: rustc_hash::FxHashMap<(u32, u32), Peer>,
    /// Ports seen where a packet entered or left the fabric (the first hop of its reports, or
    /// the last), with how often: a port without a peer is an edge port after
    /// [`EDGE_SIGHTINGS`] (a lost report of a neighbour makes a stray one).
    edges: rustc_hash::FxHashMap<(u32, u32), u8>,
    /// Per (node, egress port): packets that left by it and were next reported more than one
    /// TTL lower, since the last one next reported one TTL lower ([`LinkTable::spans`]).
    spans: rustc_hash::FxHashMap<(u32, u32), Spans>,
    /// Per node: packets that crossed it by the links known without its report
    /// ([`LinkTable::node_spans`]).
    node_spans: rustc_hash::FxHashMap<u32, Spans>,
    /// Per node: the latest switch time any of its per-hop reports showed, and how long it
    /// usually goes without one ([`LinkTable::silent_since_spans`]).
    node_seen: rustc_hash::FxHashMap<u32, Heard>,
    /// Entries refused because a table was full ([`MAX_LINK_PORTS`]): links not learned, edge
    /// ports not marked, packets past a silent hop not counted.
    pub unlearned: u64,
}

/// Counts one packet (egress timestamp `egress_ts`) in `map` at `key`, once however often its
/// reports pair; false when the map is full ([`MAX_LINK_PORTS`]) and `key` not in it.
fn count_span<K: std::hash::Hash + Eq>(
    map: &mut rustc_hash::FxHashMap<K, Spans>,
    key: K,
    egress_ts: u64,
) -> bool {
    let full = map.len() >= MAX_LINK_PORTS;
    match map.get_mut(&key) {
        Some(s) if s.last_egress_ts == egress_ts => true,
        Some(s) => {
            s.packets = s.packets.saturating_add(1);
            s.last_egress_ts = egress_ts;
            true
        }
        None if full => false,
        None => {
            map.insert(
                key,
                Spans {
                    packets: 1,
                    first_egress_ts: egress_ts,
                    last_egress_ts: egress_ts,
                },
            );
            true
        }
    }
}

/// Packets seen spanning more than one hop from a port ([`LinkTable::spans`]).
#[derive(Debug, Clone, Copy)]
struct Spans {
    packets: u16,
    /// The egress timestamp of the first packet counted.
    first_egress_ts: u64,
    /// The egress timestamp of the last packet counted: a duplicated or reordered report of
    /// it pairs the same packet again, and is not counted twice.
    last_egress_ts: u64,
}

/// When a node's per-hop reports were last seen, and the longest gap between two of them in
/// the current and the previous report interval of switch time
/// ([`crate::thresholds::PostcardConfig::report_interval_ns`]): the silence a healthy node whose
/// filter reports each flow about once an interval can keep.
#[derive(Debug, Clone, Copy)]
struct Heard {
    last_ts: u64,
    window: u64,
    gap_now_ns: u64,
    gap_before_ns: u64,
}

impl Heard {
    fn new(ts: u64, interval_ns: u64) -> Self {
        Heard {
            last_ts: ts,
            window: ts / interval_ns.max(1),
            gap_now_ns: 0,
            gap_before_ns: 0,
        }
    }

    fn saw(&mut self, ts: u64, interval_ns: u64) {
        if ts <= self.last_ts {
            return;
        }
        let window = ts / interval_ns.max(1);
        if window != self.window {
            // A window passed without a report leaves nothing from before it to remember.
            self.gap_before_ns = if window == self.window + 1 {
                self.gap_now_ns
            } else {
                0
            };
            self.gap_now_ns = 0;
            self.window = window;
        }
        self.gap_now_ns = self.gap_now_ns.max(ts - self.last_ts);
        self.last_ts = ts;
    }

    /// How long the node may go without a report before its silence says something: twice
    /// its longest recent gap, at most two report intervals — so a node that stopped adding
    /// INT is named at the latest that long after the first packet that crossed it
    /// unreported, however sparse its reports were.
    fn usual_silence_ns(&self, interval_ns: u64) -> u64 {
        self.gap_now_ns
            .max(self.gap_before_ns)
            .saturating_mul(2)
            .min(interval_ns.saturating_mul(2))
    }
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    at: (u32, u32),
    votes: u8,
    /// The latest packet that paired the two showed them more than one TTL apart: a hop
    /// without INT (or one whose report was lost) lies between, so this is no neighbour.
    over_hop: bool,
    /// Shortest gap seen between this port's egress and the peer's ingress timestamps, ns.
    gap_ns: u64,
    /// The link's delay as learned ([`LinkTable::delay`]), ns.
    delay_ns: u64,
}

/// How fast a learned link delay follows gaps above it: a sixteenth of the difference per
/// packet, so a few late packets (a busy software node, a clock step) barely move it, while a
/// gap below it is taken at once.
const DELAY_RISE_SHIFT: u32 = 4;

/// Slack on top of twice a link's learned delay for reports without a packet fingerprint
/// ([`LinkTable::pairs_within`]): serialization and timestamping jitter of a switch-grade link.
const DELAY_SLACK_NS: u64 = 1_000;

/// What pairs two per-hop reports of one packet as the two ends of a link
/// ([`crate::thresholds::PostcardConfig`]): the next hop's ingress timestamp at most this long
/// after this hop's egress timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkDelays {
    /// Always paired within this, ns (`link_delay_max_ns`: a switch fabric with PTP).
    pub assumed_ns: u64,
    /// Paired within this when both reports carry the same packet fingerprint, and within
    /// twice the link's learned delay when they do not, at most this (`link_delay_learn_max_ns`).
    pub learn_max_ns: u64,
}

/// Most (node, port) ends a shard's [`LinkTable`] holds (32 K links); also the most edge ports,
/// ports with packets past a silent hop counted, and nodes with packets crossed counted, each.
pub const MAX_LINK_PORTS: usize = 65_536;

/// Sightings that make a port with no learned link an edge port.
pub const EDGE_SIGHTINGS: u8 = 2;

/// Where hops that added no INT metadata sit in an INT-MD stack: after hop `node`'s egress
/// `port`, before `suspect`, the node the links learned say is behind that port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathGap {
    /// The last hop that recorded before the gap.
    pub node: u32,
    /// Its egress port.
    pub port: Option<u32>,
    /// The first hop of the gap: the node behind `port`.
    pub suspect: u32,
}

impl LinkTable {
    /// Where in INT-MD stack `hops` (source first, as reported by node `reporter`) hops added
    /// no metadata: after the first hop `a` whose egress port led to a node `s` that the stack
    /// skips — on `known`, the flow's last complete path, `s` followed `a` and the stack's next
    /// hop followed `s`; else by the links learned, `a`'s port and the next hop's ingress port
    /// both lead to `s` (after the last hop, `a`'s port leads to `s`, not the reporter). A
    /// reroute changes ports, or leads the next hop in from `a`: no gap. INT v2.1 §"INT-MD
    /// Metadata Header Format", M bit: "if this does not occur at consecutive hops, it may be
    /// possible for the monitoring system to derive which node(s) set the M bit based on
    /// knowledge of the network topology"; the same holds for a hop without INT, which the TTL
    /// counts. `None` when neither tells (the reporter itself is never the gap: it sends the
    /// report).
    pub fn gap_in(&self, hops: &[Hop], reporter: u32, known: &[PathHop]) -> Option<PathGap> {
        let last = hops.last()?;
        let tail = (last.node_id != reporter).then_some((last, None));
        let pairs = hops.windows(2).map(|w| (&w[0], Some(&w[1]))).chain(tail);
        let found = |hop: &Hop, suspect: u32| PathGap {
            node: hop.node_id,
            port: hop.egress_if(),
            suspect,
        };
        let on_known = |hop: &Hop, next: Option<&Hop>| {
            let port = hop.egress_if()?;
            let at = known
                .iter()
                .position(|k| k.node_id == hop.node_id && k.egress_if == Some(port))?;
            let suspect = known.get(at + 1)?.node_id;
            let after = known.get(at + 2).map(|k| k.node_id);
            let skipped = match next {
                Some(b) => after == Some(b.node_id),
                None => after.is_none_or(|n| n == reporter),
            };
            (skipped && suspect != reporter).then(|| found(hop, suspect))
        };
        let by_links = |hop: &Hop, next: Option<&Hop>| {
            let (suspect, _) = self.peer((hop.node_id, hop.egress_if()?))?;
            let skipped = match next {
                Some(b) => {
                    suspect != b.node_id
                        && self.peer((b.node_id, b.ingress_if()?)).map(|(n, _)| n) == Some(suspect)
                }
                None => true,
            };
            (skipped && suspect != reporter).then(|| found(hop, suspect))
        };
        pairs
            .clone()
            .find_map(|(hop, next)| on_known(hop, next))
            .or_else(|| pairs.clone().find_map(|(hop, next)| by_links(hop, next)))
    }

    /// The (node, ingress port) that (node, egress port) `from` leads to.
    pub fn peer(&self, from: (u32, u32)) -> Option<(u32, u32)> {
        self.peers.get(&from).map(|p| p.at)
    }

    /// The delay learned for the link from (node, egress port) `from` to its peer, ns: a low
    /// percentile of the gaps its packets showed from this egress timestamp to the peer's
    /// ingress timestamp (link delay plus clock offset) — a gap below it is taken at once, one
    /// above moves it a sixteenth of the way, so it tracks the fastest packets and forgets an
    /// early low outlier over a few dozen packets. 0 for a link learned from INT-MD stacks.
    pub fn delay(&self, from: (u32, u32)) -> Option<u64> {
        self.peers.get(&from).map(|p| p.delay_ns)
    }

    /// The longest gap from `link`'s egress to its peer's ingress that pairs two reports
    /// without a packet fingerprint: twice the delay learned for it and a jitter's slack, at
    /// most `delays.learn_max_ns`, at least `delays.assumed_ns` (a link not learned yet).
    pub fn pairs_within(&self, (from, to): Link, delays: LinkDelays) -> u64 {
        let learned = self.peers.get(&from).filter(|p| p.at == to).map_or(0, |p| {
            p.delay_ns
                .saturating_mul(2)
                .saturating_add(DELAY_SLACK_NS)
                .min(delays.learn_max_ns)
        });
        learned.max(delays.assumed_ns)
    }

    /// How many sightings back the peer of (node, egress port) `from` (0: none; at most 16).
    pub fn votes(&self, from: (u32, u32)) -> u8 {
        self.peers.get(&from).map_or(0, |p| p.votes)
    }

    /// How many packets left by (node, egress port) `from` and were next reported by an INT hop
    /// more than one TTL lower (each with a report of the hop before and one of a hop after it),
    /// since the last one that was next reported one TTL lower (by its neighbour). Each is a
    /// packet whose report from the hop in between, if that hop runs INT, the report network
    /// lost; a hop without INT never reports, so its count only grows.
    pub fn spans(&self, from: (u32, u32)) -> u16 {
        self.spans.get(&from).map_or(0, |s| s.packets)
    }

    /// How many packets crossed node `node` by the links known (left by a port whose learned
    /// neighbour it is) and were next reported more than one TTL lower, since `node` last
    /// reported a packet another node reported too: a node that stopped adding INT, when too
    /// many for its reports to have been lost.
    pub fn node_spans(&self, node: u32) -> u16 {
        self.node_spans.get(&node).map_or(0, |s| s.packets)
    }

    /// Notes a per-hop report of `node` whose hop timestamp is `ts` (switch time), as it
    /// arrives: a node that reported anything since packets began crossing it unreported is
    /// alive ([`LinkTable::silent_since_spans`]).
    pub fn saw(&mut self, node: u32, ts: u64, interval_ns: u64) {
        let full = self.node_seen.len() >= MAX_LINK_PORTS;
        match self.node_seen.get_mut(&node) {
            Some(h) => h.saw(ts, interval_ns),
            None if full => self.unlearned += 1,
            None => {
                self.node_seen.insert(node, Heard::new(ts, interval_ns));
            }
        }
    }

    /// Whether `node` sent no per-hop report at all (of any flow this table sees) since the
    /// first of the packets that crossed it without its report ([`LinkTable::node_spans`]), and
    /// for longer than it usually goes without one (twice its longest recent gap) by the last of
    /// them: a node that stopped adding INT is silent for every flow at once, while a healthy
    /// one whose filter held back its reports of some packets keeps reporting others — as
    /// often as its flows change or their interval comes round, which for a quiet spine
    /// between two busy leaves can be tens of ms.
    pub fn silent_since_spans(&self, node: u32, interval_ns: u64) -> bool {
        self.node_spans.get(&node).is_some_and(|s| {
            s.packets > 0
                && self.node_seen.get(&node).is_none_or(|h| {
                    h.last_ts < s.first_egress_ts
                        && s.last_egress_ts.saturating_sub(h.last_ts)
                            > h.usual_silence_ns(interval_ns)
                })
        })
    }

    /// Counts the packet that left by `from` (its egress timestamp `egress_ts`) and was next
    /// reported `ttl_drop` TTL lower, by node `to` ([`LinkTable::spans`],
    /// [`LinkTable::node_spans`]): one lower is a neighbour's report, which starts the port's
    /// count afresh; both nodes reported it, which starts theirs afresh.
    pub fn spanned(&mut self, from: (u32, u32), to: u32, egress_ts: u64, ttl_drop: u8) {
        self.node_spans.remove(&from.0);
        self.node_spans.remove(&to);
        match ttl_drop {
            0 => {}
            1 => {
                self.spans.remove(&from);
            }
            _ => {
                self.unlearned += u64::from(!count_span(&mut self.spans, from, egress_ts));
                // The neighbour the links name behind the port did not report it.
                if let Some(p) = self.peers.get(&from).filter(|p| !p.over_hop) {
                    let node = p.at.0;
                    self.unlearned += u64::from(!count_span(&mut self.node_spans, node, egress_ts));
                }
            }
        }
    }

    /// Whether the peer of (node, egress port) `from` is known to lie more than one hop away
    /// (the copies of the packet that last paired them were more than one TTL apart): a silence
    /// of the peer says nothing of the packets, which a hop between may send elsewhere.
    pub fn over_hop(&self, from: (u32, u32)) -> bool {
        self.peers.get(&from).is_some_and(|p| p.over_hop)
    }

    /// Whether `port` of a node is a fabric port (has a learned peer).
    pub fn is_fabric_port(&self, at: (u32, u32)) -> bool {
        self.peers.contains_key(&at)
    }

    /// Whether packets enter or leave the fabric by this port of a node: seen so, and no link
    /// learned on it.
    pub fn is_edge(&self, at: (u32, u32)) -> bool {
        !self.peers.contains_key(&at) && self.edges.get(&at).is_some_and(|&n| n >= EDGE_SIGHTINGS)
    }

    /// Counts one sighting of a packet entering or leaving the fabric by this port.
    pub fn edge(&mut self, at: (u32, u32)) {
        if self.edges.len() >= MAX_LINK_PORTS && !self.edges.contains_key(&at) {
            self.unlearned += 1;
            return;
        }
        let n = self.edges.entry(at).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// Ends held.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no link is known.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Counts one sighting of link `a` → `b` (and so `b` → `a`) whose packet took `gap_ns` from
    /// `a`'s egress timestamp to `b`'s ingress timestamp.
    pub fn learn(&mut self, link: Link, gap_ns: u64) {
        self.learn_packet(link, gap_ns, None);
    }

    /// [`LinkTable::learn`] from one packet's two copies, which were `ttl_drop` TTL apart if
    /// both carried one: more than one marks the link as spanning a hop
    /// ([`LinkTable::over_hop`]).
    pub fn learn_packet(&mut self, (a, b): Link, gap_ns: u64, ttl_drop: Option<u8>) {
        if a == b {
            return;
        }
        let over_hop = ttl_drop.map(|d| d > 1);
        self.vote(a, b, gap_ns, over_hop);
        self.vote(b, a, gap_ns, over_hop);
    }

    fn vote(&mut self, from: (u32, u32), to: (u32, u32), gap_ns: u64, over_hop: Option<bool>) {
        let full = self.peers.len() >= MAX_LINK_PORTS;
        let new = Peer {
            at: to,
            votes: 1,
            over_hop: over_hop.unwrap_or(false),
            gap_ns,
            delay_ns: gap_ns,
        };
        match self.peers.get_mut(&from) {
            Some(p) if p.at == to => {
                p.votes = p.votes.saturating_add(1).min(16);
                p.gap_ns = p.gap_ns.min(gap_ns);
                p.delay_ns = if gap_ns <= p.delay_ns {
                    gap_ns
                } else {
                    p.delay_ns + ((gap_ns - p.delay_ns) >> DELAY_RISE_SHIFT)
                };
                p.over_hop = over_hop.unwrap_or(p.over_hop);
            }
            // The copies' TTLs say this pairing spans a hop (its report lost or late): it says
            // nothing against a direct link known, whatever its gap (a software node's links
            // jitter by more than a hop's residence, so a gap alone can look shorter).
            Some(p) if over_hop == Some(true) && !p.over_hop => {}
            // And a pairing known to span a hop yields to a direct one at once, whatever the
            // gaps: on a loaded host a direct link's gap can read longer than the one over a
            // hop did, and the votes would keep the wrong peer (and the flows' paths through it
            // missing that hop) for many reports.
            Some(p) if over_hop == Some(false) && p.over_hop => *p = new,
            Some(p) => {
                // Serialization of the packet varies a link's gap; another hop and link add
                // more than that.
                let slack = p.gap_ns.min(gap_ns) / 2 + 100;
                if gap_ns.saturating_add(slack) < p.gap_ns {
                    *p = new;
                } else if gap_ns > p.gap_ns.saturating_add(slack) {
                    // A pairing over a hop whose report was lost.
                } else if p.votes > 1 {
                    p.votes -= 1;
                } else {
                    *p = new;
                }
            }
            None if full => self.unlearned += 1,
            None => {
                self.peers.insert(from, new);
            }
        }
    }

    /// Whether `path` is a chain of the links known now, from an edge port to an edge port: a
    /// path joined before a link was learned right (a lost or filtered report paired two hops
    /// over a third) is not, and its correction is no change of the flow's path.
    pub fn holds(&self, path: &[PathHop]) -> bool {
        let (Some(first), Some(last)) = (path.first(), path.last()) else {
            return false;
        };
        let edge = |n: u32, p: Option<u32>| p.is_some_and(|p| self.is_edge((n, p)));
        edge(first.node_id, first.ingress_if)
            && edge(last.node_id, last.egress_if)
            && path.windows(2).all(|w| {
                let (Some(out), Some(into)) = (w[0].egress_if, w[1].ingress_if) else {
                    return false;
                };
                self.peer((w[0].node_id, out)) == Some((w[1].node_id, into))
            })
    }

    /// Learns the links between consecutive hops of a complete path, and its ends.
    pub fn learn_path(&mut self, path: &[PathHop]) {
        if let (Some(first), Some(last)) = (path.first(), path.last()) {
            for _ in 0..EDGE_SIGHTINGS {
                if let Some(p) = first.ingress_if {
                    self.edge((first.node_id, p));
                }
                if let Some(p) = last.egress_if {
                    self.edge((last.node_id, p));
                }
            }
        }
        // A stack is one packet's: its links are certain (no gap can beat them).
        for w in path.windows(2) {
            if let (Some(out), Some(into)) = (w[0].egress_if, w[1].ingress_if) {
                self.learn(((w[0].node_id, out), (w[1].node_id, into)), 0);
            }
        }
    }
}

/// Pairs the reports that arrived since the last join with the flow's other reports of the same
/// packet — the next hop's ingress timestamp the closest after this hop's egress timestamp
/// (INT v2.1 §"INT-XD": every node on the way reports the packet's metadata itself), within
/// `delays.learn_max_ns` when both carry the packet's fingerprint (the same packet: any link
/// delay is learned from it, a software node's tens of µs as a switch's hundreds of ns), else
/// within what the link's learned delay allows ([`LinkTable::pairs_within`]) — and teaches
/// `links` what the pairs show: a link between consecutive hops, with its delay; a packet's
/// first hop (a successor, no predecessor) entered by an edge port, its last (a predecessor, no
/// successor) left by one; and, from the two copies' TTLs, whether the pair spans more than one
/// hop ([`LinkTable::spans`]). Run a window after the reports came, so that a packet's reports
/// are all in whatever order they arrived.
fn learn_from_packets(cards: &[Card], links: &mut LinkTable, delays: LinkDelays) {
    // A flow holds at most MAX_CARDS cards; the successors below fit an array of that size.
    let cards = cards.get(..MAX_CARDS).unwrap_or(cards);
    let same_packet = |a: &Card, b: &Card| a.packet == 0 || b.packet == 0 || a.packet == b.packet;
    let within = |a: &Card, b: &Card| {
        if a.packet != 0 && a.packet == b.packet {
            return delays.learn_max_ns.max(delays.assumed_ns);
        }
        match (a.hop.egress_if(), b.hop.ingress_if()) {
            (Some(out), Some(into)) => {
                links.pairs_within(((a.hop.node_id, out), (b.hop.node_id, into)), delays)
            }
            _ => delays.assumed_ns,
        }
    };
    // The closest `b` whose ingress follows `a`'s egress within a link's delay, and the gap.
    let next = |a: &Card| {
        let egress = a.hop.egress_ts()?;
        cards
            .iter()
            .enumerate()
            .filter(|(_, b)| b.hop.node_id != a.hop.node_id && same_packet(a, b))
            .filter_map(|(i, b)| Some((b.hop.ingress_ts()?.checked_sub(egress)?, i)))
            .filter(|&(gap, i)| gap <= within(a, &cards[i]))
            .min_by_key(|&(gap, _)| gap)
    };
    // Each card's successor, found before any is learned: the links learned from this join's
    // pairs do not move the bounds its other pairs are judged by.
    let mut succ = [None; MAX_CARDS];
    for (s, a) in succ.iter_mut().zip(cards) {
        *s = next(a);
    }
    for (ai, a) in cards.iter().enumerate().filter(|(_, c)| c.fresh) {
        let pred = (0..cards.len()).find_map(|bi| {
            let (gap, n) = succ[bi].filter(|_| cards[bi].hop.node_id != a.hop.node_id)?;
            (n == ai).then_some((gap, bi))
        });
        // A pair of fresh reports is counted once, as the first one's successor.
        let pred_link = pred
            .filter(|&(_, b)| !cards[b].fresh)
            .map(|(g, b)| (g, b, ai));
        for (gap, x, y) in [succ[ai].map(|(g, b)| (g, ai, b)), pred_link]
            .into_iter()
            .flatten()
        {
            let (x, y) = (&cards[x], &cards[y]);
            if let (Some(out), Some(into)) = (x.hop.egress_if(), y.hop.ingress_if()) {
                // Both copies of the packet carry its TTL: how many hops lie between them.
                let drop = x.ttl.zip(y.ttl).and_then(|(a, b)| a.checked_sub(b));
                let link = ((x.hop.node_id, out), (y.hop.node_id, into));
                links.learn_packet(link, gap, drop);
                if let (Some(ts), Some(drop)) = (x.hop.egress_ts(), drop) {
                    links.spanned(link.0, y.hop.node_id, ts, drop);
                }
            }
        }
        match (pred, succ[ai]) {
            (None, Some(_)) => {
                if let Some(ingress) = a.hop.ingress_if() {
                    links.edge((a.hop.node_id, ingress));
                }
            }
            (Some(_), None) => {
                if let Some(egress) = a.hop.egress_if() {
                    links.edge((a.hop.node_id, egress));
                }
            }
            _ => {}
        }
    }
}

/// What the per-hop reports of a flow say about its path ([`FlowState::join_cards`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Joined {
    /// A chain of at least two hops from a first hop (entered by a port that is no fabric link)
    /// to a last (left by one that is none), each the link's peer of the one before, and no
    /// other recent report: the flow's path, with when each hop last reported it.
    Complete(Vec<(Hop, u64)>),
    /// The reports do not make a whole path (yet): the hops as far as they go, in the order the
    /// nodes first reported the flow, and the hop after which a known link leads to a node that
    /// never reported it (with how long that hop has reported the flow leaving by that port).
    Partial(Vec<Hop>, Option<(Hop, u64)>),
}

/// A flow's state, kept small (272 bytes, asserted in a test): its long history goes to the
/// store as per-interval aggregates (`FlowInterval`, kept only for a store), memory keeps its
/// last sample, and what most flows never have (earlier paths, per-hop reports to join) sits
/// behind one pointer.
///
/// `repr(C)` keeps the declared order: the path (whose pointer also marks an occupied slab slot)
/// and every flow-list sort key share the first cache line, so scanning a million flows reads
/// one line per flow (the histogram follows for the p99 sort).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct FlowState {
    /// Current path, source first.
    pub path: Path,
    /// Dense ID used by the API.
    pub id: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// First report, ns.
    pub first_seen_ns: u64,
    /// Reports received.
    pub reports: u64,
    /// Drop reports.
    pub drops: u64,
    /// Path changes seen.
    pub path_changes: u64,
    /// End-to-end latency (sum of hop latencies), ns.
    pub e2e: Histogram,
    /// The flow.
    pub key: FlowKey,
    /// Last drop reason.
    pub last_drop_reason: Option<u8>,
    /// Changed since the last store flush.
    pub dirty: bool,
    /// `path` came from a report that may lack hops (a drop, a filtered join).
    pub path_partial: bool,
    /// When the current path was first seen.
    pub path_since_ns: u64,
    /// The last latency sample.
    pub recent: LastSample,
    /// Latency since the last store flush: only kept for a store
    /// ([`FlowState::keep_intervals`]).
    pub interval: Option<Box<FlowInterval>>,
    extras: Option<Box<Extras>>,
    /// When the detectors last saw a report of the flow's path: reports near its last sample
    /// skip them (`crate::fast_path`).
    pub(crate) anchor: Anchor,
}

/// Whether every hop of `part` lies on `path`, in order.
fn on_path(mut part: impl Iterator<Item = PathHop>, path: &[PathHop]) -> bool {
    let mut rest = path.iter();
    part.all(|h| rest.any(|k| *k == h))
}

/// Path heads a flow keeps waiting (packets in flight between an intermediate report and the
/// sink's, or whose sink report a filter held back).
pub const MAX_HEADS: usize = 16;

/// Hops a latency sample keeps (the first ones of the path): as many as the fast path compares.
pub const SAMPLE_HOPS: usize = ANCHOR_HOPS;

/// One latency sample of a flow: fixed size (no allocation per report) and compact — a missing
/// value is all ones, as on the wire, rather than an `Option`, so a sample takes 80 bytes, not
/// 152.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Report time, ns.
    pub time_ns: u64,
    /// End-to-end latency, ns, saturating just below 2^32 (4.29 s).
    e2e: u32,
    hop_latency: [u32; SAMPLE_HOPS],
    queue_occupancy: [u32; SAMPLE_HOPS],
}

/// "No value" in a [`Sample`].
const NONE: u32 = u32::MAX;

fn value(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl Sample {
    const EMPTY: Sample = Sample {
        time_ns: 0,
        e2e: NONE,
        hop_latency: [NONE; SAMPLE_HOPS],
        queue_occupancy: [NONE; SAMPLE_HOPS],
    };

    /// End-to-end latency (sum of the hop latencies reported).
    pub fn e2e_latency(&self) -> Option<u64> {
        value(self.e2e).map(u64::from)
    }
    /// Hop latencies along the path, source first (`None` past the path's end or unreported).
    pub fn hop_latency(&self) -> [Option<u32>; SAMPLE_HOPS] {
        self.hop_latency.map(value)
    }
    /// Queue occupancies along the path, source first.
    pub fn queue_occupancy(&self) -> [Option<u32>; SAMPLE_HOPS] {
        self.queue_occupancy.map(value)
    }
}

impl serde::Serialize for Sample {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Sample", 4)?;
        st.serialize_field("time_ns", &self.time_ns)?;
        st.serialize_field("e2e_latency", &self.e2e_latency())?;
        st.serialize_field("hop_latency", &self.hop_latency())?;
        st.serialize_field("queue_occupancy", &self.queue_occupancy())?;
        st.end()
    }
}

/// Report time of a [`LastSample`] that holds none yet (no report comes at the end of time).
const NO_SAMPLE: u64 = u64::MAX;

/// A flow's last latency sample, inline (the store keeps the history, per interval); as JSON,
/// a list of at most one sample.
#[derive(Debug, Clone)]
pub struct LastSample(Sample);

impl Default for LastSample {
    fn default() -> Self {
        LastSample(Sample {
            time_ns: NO_SAMPLE,
            ..Sample::EMPTY
        })
    }
}

impl LastSample {
    fn push(&mut self, s: Sample) {
        self.0 = s;
    }

    /// The samples held, oldest first (none or one).
    pub fn iter(&self) -> impl Iterator<Item = &Sample> {
        self.last().into_iter()
    }

    /// The newest sample.
    pub fn last(&self) -> Option<&Sample> {
        (self.0.time_ns != NO_SAMPLE).then_some(&self.0)
    }

    /// The newest sample's hop latencies and queue occupancies, all ones for none (what the
    /// fast path compares a report with).
    pub(crate) fn values(&self) -> Option<LastValues<'_>> {
        self.last().map(|s| (&s.hop_latency, &s.queue_occupancy))
    }
}

impl serde::Serialize for LastSample {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// A flow's latency over one store interval: what the store's per-flow, per-hop series holds.
/// Maxima are kept plus one, so that 0 is "no value" and a sample's all-ones "none" wraps to it:
/// folding a sample in is a plain maximum per hop, no branches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowInterval {
    /// Samples in the interval.
    pub samples: u32,
    e2e_samples: u32,
    e2e_sum: u64,
    e2e_max_plus_one: u32,
    hop_latency_max_plus_one: [u32; SAMPLE_HOPS],
    queue_occupancy_max_plus_one: [u32; SAMPLE_HOPS],
}

fn unshift(v: u32) -> Option<u32> {
    v.checked_sub(1)
}

impl FlowInterval {
    fn add(&mut self, s: &Sample) {
        self.samples += 1;
        if s.e2e != NONE {
            self.e2e_samples += 1;
            self.e2e_sum += u64::from(s.e2e);
        }
        self.e2e_max_plus_one = self.e2e_max_plus_one.max(s.e2e.wrapping_add(1));
        for i in 0..SAMPLE_HOPS {
            self.hop_latency_max_plus_one[i] =
                self.hop_latency_max_plus_one[i].max(s.hop_latency[i].wrapping_add(1));
            self.queue_occupancy_max_plus_one[i] =
                self.queue_occupancy_max_plus_one[i].max(s.queue_occupancy[i].wrapping_add(1));
        }
    }

    /// Mean end-to-end latency.
    pub fn e2e_avg(&self) -> Option<u64> {
        (self.e2e_samples > 0).then(|| self.e2e_sum / u64::from(self.e2e_samples))
    }
    /// Largest end-to-end latency.
    pub fn e2e_max(&self) -> Option<u32> {
        unshift(self.e2e_max_plus_one)
    }
    /// Largest latency per hop, source first.
    pub fn hop_latency_max(&self) -> [Option<u32>; SAMPLE_HOPS] {
        self.hop_latency_max_plus_one.map(unshift)
    }
    /// Largest queue occupancy per hop, source first.
    pub fn queue_occupancy_max(&self) -> [Option<u32>; SAMPLE_HOPS] {
        self.queue_occupancy_max_plus_one.map(unshift)
    }
}

/// Recent paths kept per flow (the current one and those before it).
pub const PATH_HISTORY: usize = 8;

impl FlowState {
    /// A new flow first seen at `now`, on no path yet (`empty`: the table's empty path).
    pub fn new(key: FlowKey, id: u64, now: u64, empty: Path) -> Self {
        FlowState {
            key,
            id,
            first_seen_ns: now,
            last_seen_ns: now,
            reports: 0,
            drops: 0,
            last_drop_reason: None,
            path: empty,
            path_since_ns: now,
            path_changes: 0,
            e2e: Histogram::default(),
            recent: LastSample::default(),
            interval: None,
            dirty: false,
            path_partial: false,
            extras: None,
            anchor: Anchor::default(),
        }
    }

    /// Recent paths with the time each was first seen, oldest first, ending with the current one.
    pub fn path_history(&self) -> impl Iterator<Item = (u64, &Path)> {
        let earlier = self.extras.iter().flat_map(|e| &e.earlier_paths);
        let current = (!self.path.is_empty()).then_some((self.path_since_ns, &self.path));
        earlier.map(|(t, p)| (*t, p)).chain(current)
    }

    /// Keeps this flow's latency per store interval from now on ([`FlowState::interval`]).
    pub fn keep_intervals(&mut self) {
        self.interval.get_or_insert_with(Box::default);
    }

    /// Records a full path observation; returns the previous path if it changed. A path known
    /// only partly (see [`FlowState::observe_partial_path`]) that this one completes — its hops
    /// all on it, in order — is no change.
    pub fn observe_path(&mut self, now: u64, path: &[Hop], paths: &mut PathTable) -> Option<Path> {
        let was_partial = std::mem::replace(&mut self.path_partial, false);
        let old = self.replace_path(now, path, paths)?;
        let completed = was_partial && on_path(old.iter().copied(), &self.path);
        if old.is_empty() || completed {
            return None;
        }
        self.path_changes += 1;
        Some(old)
    }

    /// Records a path that may lack hops: one joined from per-hop reports of switches that filter
    /// them (SD-Fabric's flow filter reports a flow again only when its ports or latency change),
    /// or a drop report's, which ends where the packet died. Hops that all lie, in order, on the
    /// known path confirm it rather than change it. A partial path never changes a complete
    /// one either (a packet that died, looped into the hop limit or was cut short says where it
    /// went, not where the flow goes): it is shown only while no complete path is known, marked
    /// partial until a full one completes it. Returns the path it replaced as a change only
    /// when that was itself partial and this one does not continue it, which never happens:
    /// partial paths are never changes (the next complete path is).
    pub fn observe_partial_path(
        &mut self,
        now: u64,
        path: &[Hop],
        paths: &mut PathTable,
    ) -> Option<Path> {
        if !self.path.is_empty() && !self.path_partial {
            return None;
        }
        if path.len() < self.path.len() && on_path(path.iter().map(PathHop::from), &self.path) {
            return None;
        }
        // Not a change, whatever it replaces: only complete paths are compared.
        let _ = self.observe_path(now, path, paths);
        self.path_partial = true;
        None
    }

    fn extras(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Intermediate-report heads waiting for the rest of their path.
    pub fn waiting_heads(&self) -> usize {
        self.extras.as_ref().map_or(0, |j| j.heads.len())
    }

    /// Keeps an intermediate report's hops (INT v2.1 §"MTU Settings": a transit hop without room
    /// reported the stack so far and removed it) until the report of the rest of the path. A
    /// head that starts where the flow's path starts is a new packet's; one that starts further
    /// on continues the newest head (the same packet cut again). Heads older than `window_ns`
    /// are dropped.
    pub fn push_head(&mut self, now: u64, hops: &[Hop], window_ns: u64) {
        let starts_path = match (self.path.first(), hops.first()) {
            (Some(first), Some(h)) => *first == PathHop::from(h),
            _ => true,
        };
        let joins = self.extras();
        joins.expire_heads(now, window_ns);
        match joins.heads.back_mut() {
            Some((_, head)) if !starts_path => head.extend_from_slice(hops),
            _ => {
                if joins.heads.len() == MAX_HEADS {
                    joins.heads.pop_front();
                }
                joins.heads.push_back((now, hops.to_vec()));
            }
        }
    }

    /// The oldest waiting head, for a report that completes its path.
    pub fn take_head(&mut self, now: u64, window_ns: u64) -> Option<Vec<Hop>> {
        let joins = self.extras.as_mut()?;
        joins.expire_heads(now, window_ns);
        joins.heads.pop_front().map(|(_, h)| h)
    }

    /// Whether a join of the per-hop reports is scheduled and `node` already reported since the
    /// last one: its new report is of a later packet, so the reports before it are joined first
    /// (unfiltered postcards come for every packet; this joins them packet by packet).
    pub fn join_before(&self, node: u32) -> bool {
        self.extras
            .as_ref()
            .is_some_and(|j| j.queued && j.cards.iter().any(|c| c.hop.node_id == node && c.fresh))
    }

    /// When the scheduled join of the per-hop reports is due, if one is.
    pub fn join_due_ns(&self) -> Option<u64> {
        self.extras.as_ref().filter(|j| j.queued).map(|j| j.due_ns)
    }

    /// The deadline of the flow is taken from the shard's queue; returns when its join is due
    /// if not yet at `now` (the flow is then queued again with it).
    pub fn requeue_join(&mut self, now: u64) -> Option<u64> {
        let j = self.extras.as_mut()?;
        j.in_queue = j.queued && j.due_ns > now;
        j.in_queue.then_some(j.due_ns)
    }

    /// Per-hop reports held for joining (one per node).
    pub fn pending_hops(&self) -> usize {
        self.extras.as_ref().map_or(0, |j| j.cards.len())
    }

    /// Keeps a per-hop report (INT-XD postcard, INT-MX report) of `hop` seen at `now`, of the
    /// packet with fingerprint `packet` ([`crate::record::Record::packet_fp`]): the node's
    /// latest. Returns whether the shard is to queue the flow for its join, due a window
    /// (`window_ns`) after the first report since the last join.
    pub fn add_card(&mut self, now: u64, hop: Hop, packet: u32, window_ns: u64) -> bool {
        self.add_card_with_ttl(now, hop, packet, None, window_ns, u64::MAX)
    }

    /// The IP TTL in `node`'s latest report of the flow, if it carried one.
    pub fn card_ttl(&self, node: u32) -> Option<u8> {
        self.extras
            .as_ref()?
            .cards
            .iter()
            .find(|c| c.hop.node_id == node)?
            .ttl
    }

    /// The latest report of the flow whose copy of the packet is more than one TTL below `ttl`,
    /// the nearest such (the highest TTL), with that TTL: the next INT hop past hops without
    /// INT, from a hop whose copy carried `ttl`.
    pub fn card_past_ttl(&self, ttl: u8) -> Option<(Hop, u8)> {
        self.extras
            .as_ref()?
            .cards
            .iter()
            .filter_map(|c| Some((c.hop, c.ttl?)))
            .filter(|&(_, t)| t.saturating_add(1) < ttl)
            .max_by_key(|&(_, t)| t)
    }

    /// When `node`'s latest report of the flow came, and since when it reported it through
    /// the same ports: (since, seen), report time.
    pub fn card_times(&self, node: u32) -> Option<(u64, u64)> {
        let c = self
            .extras
            .as_ref()?
            .cards
            .iter()
            .find(|c| c.hop.node_id == node)?;
        Some((c.since_ns, c.seen_ns))
    }

    /// About how many of `node`'s reports of the flow (through its latest ports) came after
    /// `after_ns`: those since it took these ports, spread evenly over the time since (a
    /// switch's report filter reports a flow about once an interval), rounded down.
    pub fn card_reports_after(&self, node: u32, after_ns: u64) -> u32 {
        let Some(c) = self
            .extras
            .as_ref()
            .and_then(|j| j.cards.iter().find(|c| c.hop.node_id == node))
        else {
            return 0;
        };
        if c.since_ns > after_ns {
            return c.reports;
        }
        let span = c.seen_ns.saturating_sub(c.since_ns);
        if span == 0 {
            return 0;
        }
        // The first of them came at `since_ns`: `reports - 1` intervals over the span.
        let within = u128::from(c.reports.saturating_sub(1))
            * u128::from(c.seen_ns.saturating_sub(after_ns))
            / u128::from(span);
        u32::try_from(within).unwrap_or(u32::MAX)
    }

    /// [`FlowState::add_card`] with the IP TTL the report's copy of the packet carries; a node
    /// that had not reported the flow for `quiet_ns` starts its card afresh (since now), as
    /// when its ports change: what it reports now is no continuation of what it reported
    /// before its silence (the flow paused, or stopped reaching it).
    pub fn add_card_with_ttl(
        &mut self,
        now: u64,
        hop: Hop,
        packet: u32,
        ttl: Option<u8>,
        window_ns: u64,
        quiet_ns: u64,
    ) -> bool {
        let joins = self.extras();
        match joins
            .cards
            .iter_mut()
            .find(|c| c.hop.node_id == hop.node_id)
        {
            Some(c) => {
                let same_ports = PathHop::from(&c.hop) == PathHop::from(&hop)
                    && now.saturating_sub(c.seen_ns) < quiet_ns;
                *c = Card {
                    hop,
                    packet,
                    seen_ns: now,
                    since_ns: if same_ports { c.since_ns } else { now },
                    fresh: true,
                    ttl,
                    reports: if same_ports {
                        c.reports.saturating_add(1)
                    } else {
                        1
                    },
                };
            }
            None => {
                if joins.cards.len() == MAX_CARDS
                    && let Some(oldest) =
                        (0..joins.cards.len()).min_by_key(|&i| joins.cards[i].seen_ns)
                {
                    joins.cards.swap_remove(oldest);
                }
                joins.cards.push(Card {
                    hop,
                    packet,
                    seen_ns: now,
                    since_ns: now,
                    fresh: true,
                    ttl,
                    reports: 1,
                });
            }
        }
        if !std::mem::replace(&mut joins.queued, true) {
            joins.due_ns = now.saturating_add(window_ns).saturating_add(1);
        }
        !std::mem::replace(&mut joins.in_queue, true)
    }

    /// The cards as a path, by the fabric's links (`Joined`); clears the scheduled join.
    /// Reports of nodes off a complete chain that are older than its newest report by more than
    /// `window_ns` are of a path the flow left, and are forgotten; newer ones make the join
    /// `Joined::Partial` (the new path is not whole yet).
    pub fn join_cards(
        &mut self,
        links: &mut LinkTable,
        delays: LinkDelays,
        window_ns: u64,
    ) -> Joined {
        let Some(joins) = self.extras.as_mut() else {
            return Joined::Partial(Vec::new(), None);
        };
        joins.queued = false;
        learn_from_packets(&joins.cards, links, delays);
        for c in &mut joins.cards {
            c.fresh = false;
        }
        let links = &*links;
        let cards = &joins.cards;
        let mut broken = None;
        let mut chain: Vec<usize> = Vec::with_capacity(cards.len());
        for start in 0..cards.len() {
            let first = &cards[start].hop;
            let Some(ingress) = first.ingress_if() else {
                continue;
            };
            if !links.is_edge((first.node_id, ingress)) {
                continue;
            }
            chain.clear();
            chain.push(start);
            let complete = loop {
                let cur = &cards[chain[chain.len() - 1]];
                let Some(egress) = cur.hop.egress_if() else {
                    break false;
                };
                let Some((node, port)) = links.peer((cur.hop.node_id, egress)) else {
                    // The path ends where the packets leave the fabric; a port not known
                    // either way may be a link not learned yet.
                    break links.is_edge((cur.hop.node_id, egress));
                };
                let next = cards
                    .iter()
                    .position(|c| c.hop.node_id == node && c.hop.ingress_if() == Some(port));
                match next {
                    Some(n) if !chain.contains(&n) && chain.len() < MAX_CARDS => chain.push(n),
                    Some(_) => break false,
                    None => {
                        if cards.iter().all(|c| c.hop.node_id != node) {
                            broken = Some((cur.hop, cur.seen_ns - cur.since_ns));
                        }
                        break false;
                    }
                }
            };
            // One hop alone is no evidence: before any of its ports' links are learned every
            // hop looks like a whole path (a flow within one switch stays partial).
            if !complete || chain.len() < 2 {
                continue;
            }
            let newest = chain.iter().map(|&i| cards[i].seen_ns).max().unwrap_or(0);
            let fresh_elsewhere = (0..cards.len()).any(|i| {
                !chain.contains(&i) && cards[i].seen_ns.saturating_add(window_ns) > newest
            });
            if fresh_elsewhere {
                continue;
            }
            let path = chain
                .iter()
                .map(|&i| (cards[i].hop, cards[i].seen_ns))
                .collect();
            let mut keep = vec![false; cards.len()];
            for &i in &chain {
                keep[i] = true;
            }
            let mut k = keep.iter();
            joins.cards.retain(|_| k.next().copied().unwrap_or(true));
            return Joined::Complete(path);
        }
        // In path order as far as the reports tell: by the packet's TTL where every report
        // holds one (each router lowers it, whatever the reports' timing; the receiving host,
        // which sends it nowhere, sees the last router's TTL and comes after it), then by when
        // each node first reported the flow through these ports.
        let by_ttl = cards.iter().all(|c| c.ttl.is_some());
        let mut order: Vec<&Card> = cards.iter().collect();
        order.sort_by_key(|c| {
            (
                std::cmp::Reverse(c.ttl.filter(|_| by_ttl)),
                by_ttl && matches!(c.hop.egress_if(), None | Some(0)),
                c.since_ns,
                c.hop.ingress_ts().unwrap_or(0),
                c.seen_ns,
            )
        });
        Joined::Partial(order.iter().map(|c| c.hop).collect(), broken)
    }

    /// Whether a silent drop was raised for this flow at a node whose next hop has not seen the
    /// flow since; `at` marks (or with `None` clears) it. Returns whether it was marked before.
    pub fn mark_silent(&mut self, at: Option<u32>) -> Option<u32> {
        match (self.extras.as_mut(), at) {
            (Some(j), _) => std::mem::replace(&mut j.silent_at, at),
            (None, None) => None,
            (None, Some(_)) => std::mem::replace(&mut self.extras().silent_at, at),
        }
    }

    /// Records a path joined from per-hop reports: a complete one replaces a partial (or no)
    /// path without counting as a change; between complete paths it is compared as
    /// [`FlowState::observe_path`] does. Returns the previous path if it changed.
    pub fn observe_joined_path(
        &mut self,
        now: u64,
        path: &[Hop],
        paths: &mut PathTable,
    ) -> Option<Path> {
        if self.path_partial || self.path.is_empty() {
            self.path_partial = false;
            self.replace_path(now, path, paths);
            return None;
        }
        self.observe_path(now, path, paths)
    }

    /// Shows a partial path joined from per-hop reports while no complete one is known: never a
    /// change.
    pub fn observe_joined_partial(&mut self, now: u64, path: &[Hop], paths: &mut PathTable) {
        if (self.path_partial || self.path.is_empty()) && !path.is_empty() {
            self.replace_path(now, path, paths);
            self.path_partial = true;
        }
    }

    /// Makes `path` the current one (the old one goes to the history); returns the old one if
    /// they differ.
    fn replace_path(&mut self, now: u64, path: &[Hop], paths: &mut PathTable) -> Option<Path> {
        let same = self.path.len() == path.len()
            && self
                .path
                .iter()
                .zip(path)
                .all(|(a, b)| *a == PathHop::from(b));
        if same {
            return None;
        }
        let new = paths.intern(path);
        let old = std::mem::replace(&mut self.path, new);
        let old_since = std::mem::replace(&mut self.path_since_ns, now);
        if !old.is_empty() {
            let earlier = &mut self.extras().earlier_paths;
            if earlier.len() == PATH_HISTORY - 1 {
                earlier.pop_front();
            }
            earlier.push_back((old_since, Arc::clone(&old)));
        }
        Some(old)
    }

    /// Records latencies of a report's path.
    pub fn observe_latency(&mut self, now: u64, path: &[Hop]) {
        let mut sample = Sample {
            time_ns: now,
            ..Sample::EMPTY
        };
        let mut e2e: Option<u64> = None;
        for (i, h) in path.iter().enumerate() {
            if let Some(l) = h.hop_latency() {
                *e2e.get_or_insert(0) += u64::from(l);
            }
            if i < SAMPLE_HOPS {
                sample.hop_latency[i] = h.hop_latency().unwrap_or(NONE);
                sample.queue_occupancy[i] = h.queue_occupancy().unwrap_or(NONE);
            }
        }
        if let Some(v) = e2e {
            self.e2e.record(v);
            sample.e2e = v.min(u64::from(NONE - 1)) as u32;
        }
        if let Some(interval) = self.interval.as_deref_mut() {
            interval.add(&sample);
        }
        self.recent.push(sample);
    }
}

impl Extras {
    fn expire_heads(&mut self, now: u64, window_ns: u64) {
        while self
            .heads
            .front()
            .is_some_and(|(t, _)| now.saturating_sub(*t) > window_ns)
        {
            self.heads.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full link table keeps what it holds and counts what it refuses: new links, new edge
    /// ports.
    #[test]
    fn a_full_link_table_counts_what_it_refuses() {
        let mut links = LinkTable::default();
        for n in 0..(MAX_LINK_PORTS / 2) as u32 {
            links.learn(((n, 1), (n, 2)), 100);
        }
        assert_eq!((links.len(), links.unlearned), (MAX_LINK_PORTS, 0));
        links.learn(((1 << 20, 1), (1 << 20, 2)), 100);
        assert_eq!(links.unlearned, 2, "both directions refused");
        assert_eq!(links.peer((1 << 20, 1)), None);
        assert_eq!(links.peer((7, 1)), Some((7, 2)), "what it held stays");
        for n in 0..MAX_LINK_PORTS as u32 {
            links.edge((n, 9));
        }
        links.edge((1 << 20, 9));
        assert_eq!(links.unlearned, 3);
    }

    fn test_key() -> FlowKey {
        FlowKey {
            src: std::net::Ipv6Addr::LOCALHOST,
            dst: std::net::Ipv6Addr::LOCALHOST,
            proto: 17,
            src_port: 1,
            dst_port: 2,
        }
    }

    #[test]
    fn histogram_quantiles_within_a_bucket() {
        let mut h = Histogram::default();
        // 1..=1000 µs, ten times over in a scrambled order (a steady distribution: halving a
        // full bucket keeps its shape).
        for i in 0..10_000u64 {
            h.record((i * 7919 % 1000 + 1) * 1000);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p50 / 500_000.0 - 1.0).abs() < 0.25, "{p50}");
        assert!((p99 / 990_000.0 - 1.0).abs() < 0.25, "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn samples_serialize_with_nulls_for_what_was_not_reported() {
        let key = FlowKey {
            src: std::net::Ipv6Addr::LOCALHOST,
            dst: std::net::Ipv6Addr::LOCALHOST,
            proto: 17,
            src_port: 1,
            dst_port: 2,
        };
        let mut f = FlowState::new(key, 1, 0, PathTable::default().intern(&[]));
        let hop = |lat, occ| Hop::default().with_hop_latency(lat).with_queue(None, occ);
        f.observe_latency(
            5,
            &[
                hop(Some(100), Some(7)),
                hop(None, Some(9)),
                hop(Some(200), None),
            ],
        );
        let v = serde_json::to_value(f.recent.last().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "time_ns": 5,
                "e2e_latency": 300,
                "hop_latency": [100, null, 200, null, null, null, null, null],
                "queue_occupancy": [7, 9, null, null, null, null, null, null],
            })
        );
        assert_eq!(std::mem::size_of::<Sample>(), 80);
        assert_eq!(
            std::mem::size_of::<FlowState>(),
            288,
            "a million flows in memory"
        );
        f.observe_latency(6, &[hop(None, None)]);
        assert_eq!(f.recent.last().unwrap().e2e_latency(), None);
    }

    #[test]
    fn a_full_bucket_halves_the_histogram_and_keeps_its_quantiles() {
        let mut h = Histogram::default();
        for _ in 0..1_000 {
            h.record(1_000);
        }
        for _ in 0..10 {
            h.record(1_000_000);
        }
        // 255 values of 1 µs, then halved (again and again): the rest are counted on the halved
        // scale.
        assert!(h.total <= 255 + 10, "{}", h.total);
        let p50 = h.quantile(0.5).unwrap();
        assert_eq!(p50, 896, "the midpoint of 1 µs's bucket, 768..1024");
        assert!(h.quantile(0.999).unwrap() > 500_000);
    }

    #[test]
    fn a_flow_keeps_its_last_sample_and_the_interval_all_of_them() {
        let mut f = FlowState::new(test_key(), 1, 0, PathTable::default().intern(&[]));
        assert!(f.recent.last().is_none());
        f.observe_latency(0, &[Hop::default().with_hop_latency(Some(7))]);
        assert!(f.interval.is_none(), "kept only when asked (for a store)");
        f.keep_intervals();
        let hop = |lat, occ| {
            Hop::default()
                .with_hop_latency(Some(lat))
                .with_queue(None, occ)
        };
        for t in 1..=10u32 {
            f.observe_latency(u64::from(t), &[hop(t * 100, Some(t)), hop(50, None)]);
        }
        let times: Vec<u64> = f.recent.iter().map(|s| s.time_ns).collect();
        assert_eq!(times, [10]);
        let i = f.interval.expect("kept");
        assert_eq!(i.samples, 10);
        assert_eq!(i.e2e_avg(), Some(600));
        assert_eq!(i.e2e_max(), Some(1050));
        assert_eq!(&i.hop_latency_max()[..3], &[Some(1000), Some(50), None]);
        assert_eq!(&i.queue_occupancy_max()[..3], &[Some(10), None, None]);
    }

    #[test]
    fn flows_on_one_path_share_it_and_history_ends_with_the_current_path() {
        let mut table = PathTable::default();
        let empty = table.intern(&[]);
        let hops =
            |ids: &[u32]| -> Vec<Hop> { ids.iter().map(|&node_id| Hop::at(node_id)).collect() };
        let mut a = FlowState::new(test_key(), 1, 0, Arc::clone(&empty));
        let mut b = FlowState::new(test_key(), 2, 0, Arc::clone(&empty));
        assert!(a.observe_path(1, &hops(&[1, 2, 3]), &mut table).is_none());
        assert!(b.observe_path(2, &hops(&[1, 2, 3]), &mut table).is_none());
        assert!(Arc::ptr_eq(&a.path, &b.path));
        let old = a.observe_path(5, &hops(&[1, 4, 3]), &mut table).unwrap();
        assert_eq!(old.len(), 3);
        let history: Vec<(u64, Vec<u32>)> = a
            .path_history()
            .map(|(t, p)| (t, p.iter().map(|h| h.node_id).collect()))
            .collect();
        assert_eq!(history, [(1, vec![1, 2, 3]), (5, vec![1, 4, 3])]);
        drop(old);
        drop(b);
        table.forget_unused();
        // Still held: a's current and earlier path (and `empty` here).
        assert_eq!(table.len(), 3);
        drop(a);
        drop(empty);
        table.forget_unused();
        assert!(table.is_empty());
    }

    /// The test key with source port `port`.
    fn key(port: u16) -> FlowKey {
        FlowKey {
            src_port: port,
            ..test_key()
        }
    }

    /// A new flow keyed [`key`]`(port)`, with ID `port`.
    fn flow_on(port: u16, paths: &mut PathTable) -> FlowState {
        FlowState::new(key(port), u64::from(port), 0, paths.intern(&[]))
    }

    #[test]
    fn the_flow_table_reuses_the_slots_of_flows_it_let_go() {
        let mut paths = PathTable::default();
        let mut table = FlowTable::default();
        for port in 0..4u16 {
            let f = table.get_or_insert_with(key(port), || flow_on(port, &mut paths));
            f.reports = u64::from(port) * 10;
        }
        // An existing flow is found, not made again.
        table.get_or_insert_with(key(2), || unreachable!()).reports += 1;
        assert_eq!(table.get(&key(2)).map(|f| f.reports), Some(21));
        table.retain(|f| f.key.src_port % 2 == 1);
        assert_eq!(table.len(), 2);
        assert!(table.get(&key(0)).is_none() && table.get_mut(&key(2)).is_none());
        let slots = table.slots.len();
        table.get_or_insert_with(key(9), || flow_on(9, &mut paths));
        assert_eq!(table.slots.len(), slots, "a freed slot is reused");
        let mut ports: Vec<u16> = table.values().map(|f| f.key.src_port).collect();
        ports.sort_unstable();
        assert_eq!(ports, [1, 3, 9]);
        assert_eq!(table.get(&key(9)).map(|f| f.id), Some(9));
    }

    #[test]
    fn flows_whose_hashes_collide_are_told_apart_by_key() {
        let mut paths = PathTable::default();
        let mut table = FlowTable::default();
        // Every key filed under the same hash (same index tag), with growth on the way.
        for port in 0..100u16 {
            let f = table.get_or_insert_hashed(7, key(port), None, || flow_on(port, &mut paths));
            assert_eq!(f.key, key(port), "a new key gets its own flow");
        }
        assert_eq!(table.len(), 100);
        for port in 0..100u16 {
            let found = table.get_or_insert_hashed(7, key(port), None, || unreachable!());
            assert_eq!(found.id, u64::from(port));
            // A hint at another flow's slot is checked, not trusted.
            let other = table.slot_hashed(7, &key(port ^ 1));
            let found = table.get_or_insert_hashed(7, key(port), other, || unreachable!());
            assert_eq!(found.id, u64::from(port));
        }
        assert_eq!(table.slot_hashed(7, &key(100)), None);
        assert_eq!(
            table.slot_hashed(8, &key(5)),
            None,
            "another hash, another bucket"
        );
    }

    /// A postcard of `node`, in by `ingress`, out by `egress`, at the hop's ingress time `at`
    /// (1 µs through the switch).
    fn card(node: u32, ingress: u32, egress: u32, at: u64) -> Hop {
        Hop::at(node)
            .with_interfaces(Some(ingress), Some(egress))
            .with_hop_latency(Some(1000))
            .with_timestamps(Some(at), Some(at + 1000))
    }

    /// Adds a card at report time `now` (no fingerprint: timestamps alone pair reports).
    fn add(f: &mut FlowState, now: u64, hop: Hop) {
        f.add_card(now, hop, 0, 10 * MS);
    }

    fn join(f: &mut FlowState, links: &mut LinkTable) -> Joined {
        f.join_cards(links, DELAYS, 10 * MS)
    }

    /// The defaults of `[detect.postcards]`.
    const DELAYS: LinkDelays = LinkDelays {
        assumed_ns: 5_000,
        learn_max_ns: 1_000_000,
    };

    fn nodes(j: &Joined) -> Vec<u32> {
        match j {
            Joined::Complete(c) => c.iter().map(|(h, _)| h.node_id).collect(),
            Joined::Partial(p, _) => p.iter().map(|h| h.node_id).collect(),
        }
    }

    const MS: u64 = 1_000_000;

    /// One packet over leaf 1 (host port 1 to uplink 5), spine 101 (port 1 to 2), leaf 2
    /// (uplink 5 to host port 3), entering at `t`, reported at `now`, in any order.
    fn packet(f: &mut FlowState, now: u64, t: u64) {
        add(f, now, card(2, 5, 3, t + 3_000));
        add(f, now + 1, card(1, 1, 5, t));
        add(f, now + 2, card(101, 1, 2, t + 1_500));
    }

    #[test]
    fn a_partial_path_is_in_the_order_of_its_packets_ttl() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        // Four nodes whose links are not learned, the nearest to the source reporting last
        // (a card reset by a change of ports): the TTLs still say the order. The last router
        // (3) and the receiving host (2, egress 0) saw the same TTL; the host reported first.
        for (now, node, egress, ttl) in [
            (10, 2, 0, 62),
            (20, 4, 2, 63),
            (30, 3, 2, 62),
            (40, 1, 2, 64),
        ] {
            let hop = card(node, 1, egress, now * MS);
            f.add_card_with_ttl(now * MS, hop, 0, Some(ttl), 10 * MS, u64::MAX);
        }
        let j = join(&mut f, &mut links);
        assert!(matches!(j, Joined::Partial(..)), "{j:?}");
        assert_eq!(nodes(&j), [1, 4, 3, 2]);
        // A report without its TTL: the order of first reports.
        f.add_card(50 * MS, card(5, 1, 2, 50 * MS), 0, 10 * MS);
        assert_eq!(nodes(&join(&mut f, &mut links)), [2, 4, 3, 1, 5]);
    }

    #[test]
    fn a_nodes_reports_after_a_time_are_counted_from_its_card() {
        let mut paths = PathTable::default();
        let mut f = flow_on(1, &mut paths);
        assert_eq!(f.card_reports_after(1, 0), 0, "no card");
        // Eleven reports, one every 10 ms from 100 ms, through the same ports.
        for i in 0..11 {
            add(&mut f, (100 + 10 * i) * MS, card(1, 1, 5, 0));
        }
        assert_eq!(f.card_times(1), Some((100 * MS, 200 * MS)));
        assert_eq!(
            f.card_reports_after(1, 50 * MS),
            11,
            "all, since before the first"
        );
        assert_eq!(f.card_reports_after(1, 150 * MS), 5, "those after 150 ms");
        assert_eq!(f.card_reports_after(1, 200 * MS), 0);
        // Other ports: counted afresh.
        add(&mut f, 210 * MS, card(1, 1, 6, 0));
        assert_eq!(f.card_reports_after(1, 0), 1);
        assert_eq!(f.card_times(1), Some((210 * MS, 210 * MS)));
    }

    #[test]
    fn postcards_of_one_packet_teach_the_links_that_join_later_ones() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        packet(&mut f, 10, 0);
        let j = join(&mut f, &mut links);
        assert_eq!(links.peer((1, 5)), Some((101, 1)));
        assert_eq!(links.peer((101, 2)), Some((2, 5)));
        assert_eq!(links.peer((2, 5)), Some((101, 2)), "links are duplex");
        assert!(!links.is_fabric_port((1, 1)) && !links.is_fabric_port((2, 3)));
        assert!(matches!(j, Joined::Partial(..)), "edges seen once: {j:?}");
        packet(&mut f, 100 * MS, 100 * MS);
        let j = join(&mut f, &mut links);
        assert!(links.is_edge((1, 1)) && links.is_edge((2, 3)) && !links.is_edge((1, 5)));
        assert!(matches!(j, Joined::Complete(_)), "{j:?}");
        assert_eq!(nodes(&j), [1, 101, 2]);
        // A second later only leaf 2 reports (a filter: its latency stepped): the other hops'
        // latest reports still make the path, in link order, not report order.
        add(&mut f, 1_000 * MS, card(2, 5, 3, 1_000 * MS));
        let j = join(&mut f, &mut links);
        assert_eq!(nodes(&j), [1, 101, 2]);
        let Joined::Complete(chain) = j else { panic!() };
        assert_eq!(chain[2].1, 1_000 * MS, "with when each hop last reported");
    }

    /// Software switches or hosts: links of 20–40 µs (30 µs with ±10 µs of jitter), each
    /// postcard carrying its packet's fingerprint, arriving in any order. With the default
    /// settings the first packet teaches the links and their delays, and every later packet's
    /// postcards join into the path in link order, with each hop's latency; with the delay
    /// only assumed (5 µs), nothing ever joined.
    #[test]
    fn postcards_tens_of_us_apart_join_with_the_default_settings() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        let jitter = |k: u64, salt: u64| 20_000 + (k * salt % 21) * 1_000;
        let packet = |f: &mut FlowState, k: u64| {
            let (t, now, fp) = (k * 10 * MS, k * 10 * MS + 100_000, k as u32 + 1);
            let (g1, g2) = (jitter(k, 7), jitter(k, 13));
            f.add_card(now, card(2, 5, 3, t + 2_000 + g1 + g2), fp, 10 * MS);
            f.add_card(now + 1, card(101, 1, 2, t + 1_000 + g1), fp, 10 * MS);
            f.add_card(now + 2, card(1, 1, 5, t), fp, 10 * MS);
        };
        for k in 0..30 {
            packet(&mut f, k);
            let j = join(&mut f, &mut links);
            if k == 0 {
                assert!(matches!(j, Joined::Partial(..)), "edges seen once: {j:?}");
                continue;
            }
            let Joined::Complete(chain) = &j else {
                panic!("packet {k}: {j:?}")
            };
            assert_eq!(nodes(&j), [1, 101, 2], "packet {k}");
            assert!(chain.iter().all(|(h, _)| h.hop_latency() == Some(1_000)));
        }
        for (link, peer) in [((1, 5), (101, 1)), ((101, 2), (2, 5))] {
            assert_eq!(links.peer(link), Some(peer));
            let d = links.delay(link).unwrap_or(0);
            assert!((20_000..=25_000).contains(&d), "{link:?}: {d} ns");
        }
        // A report without a fingerprint pairs within twice the learned delay, not beyond.
        let within = links.pairs_within(((1, 5), (101, 1)), DELAYS);
        assert!((41_000..=51_000).contains(&within), "{within}");
        assert_eq!(
            links.pairs_within(((1, 5), (9, 9)), DELAYS),
            5_000,
            "unknown"
        );

        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        for k in 0..5 {
            packet(&mut f, k);
            let j = f.join_cards(
                &mut links,
                LinkDelays {
                    learn_max_ns: 5_000,
                    ..DELAYS
                },
                10 * MS,
            );
            assert!(matches!(j, Joined::Partial(..)), "{j:?}");
        }
        assert!(links.is_empty());
    }

    /// A learned delay follows the fastest packets: a gap below it is taken at once, a late
    /// one (an outlier) moves it by a sixteenth, and it recovers from an early low one.
    #[test]
    fn a_link_delay_is_a_low_percentile_of_its_gaps() {
        let mut links = LinkTable::default();
        let link = ((1, 5), (101, 1));
        links.learn(link, 30_000);
        links.learn(link, 1_000_000);
        let d = links.delay((1, 5)).unwrap_or(0);
        assert!((30_000..100_000).contains(&d), "one late packet: {d}");
        links.learn(link, 25_000);
        assert_eq!(links.delay((1, 5)), Some(25_000));
        assert_eq!(links.delay((101, 1)), Some(25_000), "both directions");
        links.learn(link, 2_000);
        for _ in 0..64 {
            links.learn(link, 30_000);
        }
        let d = links.delay((1, 5)).unwrap_or(0);
        assert!(
            (29_000..=30_000).contains(&d),
            "the low outlier forgotten: {d}"
        );
    }

    #[test]
    fn reports_of_other_packets_never_pair() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        // A burst: the sink's report of one packet, 400 ns later the source's of another, its
        // ingress timestamp right after the first one's egress.
        f.add_card(0, card(2, 5, 3, 3_000), 7, 10 * MS);
        f.add_card(1, card(1, 1, 5, 4_400), 8, 10 * MS);
        join(&mut f, &mut links);
        assert!(links.is_empty(), "different fingerprints");
        // The same packet's report from spine 101 pairs with its source's.
        f.add_card(2, card(101, 1, 2, 5_900), 8, 10 * MS);
        join(&mut f, &mut links);
        assert_eq!(links.peer((1, 5)), Some((101, 1)));
        assert_eq!(
            links.peer((101, 2)),
            None,
            "the sink's report is another packet's"
        );
    }

    #[test]
    fn the_real_neighbour_outvotes_a_pairing_over_a_lost_report() {
        let mut links = LinkTable::default();
        // Spine 101's report lost: leaf 1's and leaf 2's paired as if linked. Its gap spans
        // the spine (1 µs) and two links (500 ns each).
        links.learn(((1, 5), (2, 5)), 2_000);
        assert_eq!(links.peer((1, 5)), Some((2, 5)));
        links.learn(((1, 5), (101, 1)), 500);
        assert_eq!(
            links.peer((1, 5)),
            Some((101, 1)),
            "a shorter gap is the neighbour"
        );
        for _ in 0..20 {
            links.learn(((1, 5), (2, 5)), 2_000);
        }
        assert_eq!(
            links.peer((1, 5)),
            Some((101, 1)),
            "pairings over a hop never flip it"
        );
        // Pairings of about the same gap: the one seen most.
        links.learn(((7, 1), (8, 1)), 500);
        links.learn(((7, 1), (8, 1)), 500);
        links.learn(((7, 1), (9, 1)), 600);
        assert_eq!(links.peer((7, 1)), Some((8, 1)));
        links.learn(((7, 1), (9, 1)), 600);
        links.learn(((7, 1), (9, 1)), 600);
        assert_eq!(links.peer((7, 1)), Some((9, 1)));
    }

    #[test]
    fn packets_past_a_silent_hop_are_counted_until_a_neighbour_reports_one() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        // Leaf 1 (TTL 64), spine 101 (63), leaf 2 (62); `spine` says whether 101's report came.
        let packet = |f: &mut FlowState, now: u64, t: u64, spine: bool| {
            let fp = (t / 1_000) as u32 + 1;
            let mut add = |at: u64, hop: Hop, ttl: u8| {
                f.add_card_with_ttl(at, hop, fp, Some(ttl), 10 * MS, u64::MAX);
            };
            add(now, card(1, 1, 5, t), 64);
            if spine {
                add(now + 1, card(101, 1, 2, t + 1_500), 63);
            }
            add(now + 2, card(2, 5, 3, t + 3_000), 62);
        };
        packet(&mut f, 0, 0, false);
        join(&mut f, &mut links);
        assert_eq!(links.spans((1, 5)), 1, "one packet past a silent hop");
        assert_eq!(links.spans((2, 5)), 0, "counted where the packet left");
        assert_eq!(links.peer((1, 5)), Some((2, 5)));
        assert!(
            links.over_hop((1, 5)) && links.over_hop((2, 5)),
            "no neighbours"
        );
        // Leaf 2's report of the same packet again (duplicated, or late): the same packet.
        f.add_card_with_ttl(3, card(2, 5, 3, 3_000), 1, Some(62), 10 * MS, u64::MAX);
        join(&mut f, &mut links);
        assert_eq!(links.spans((1, 5)), 1, "a packet counts once");
        packet(&mut f, 20 * MS, 20 * MS, false);
        join(&mut f, &mut links);
        assert_eq!(links.spans((1, 5)), 2);
        // The spine reports one: it runs INT, the packets before were its lost reports.
        packet(&mut f, 40 * MS, 40 * MS, true);
        join(&mut f, &mut links);
        assert_eq!(links.spans((1, 5)), 0, "a neighbour's report starts afresh");
        assert_eq!(links.peer((1, 5)), Some((101, 1)));
        assert!(!links.over_hop((1, 5)) && !links.over_hop((101, 2)));
        assert_eq!(links.node_spans(101), 0, "no neighbour was known before");
        // The spine stops adding INT: the packets cross it by the links known, unreported.
        packet(&mut f, 60 * MS, 60 * MS, false);
        join(&mut f, &mut links);
        packet(&mut f, 80 * MS, 80 * MS, false);
        join(&mut f, &mut links);
        assert_eq!((links.spans((1, 5)), links.node_spans(101)), (2, 2));
        assert_eq!(
            links.peer((1, 5)),
            Some((101, 1)),
            "a pairing over it never flips it"
        );
        assert_eq!(
            links.node_spans(1) + links.node_spans(2),
            0,
            "those reported"
        );
        packet(&mut f, 100 * MS, 100 * MS, true);
        join(&mut f, &mut links);
        assert_eq!(links.node_spans(101), 0, "it reports again");
    }

    /// Software nodes: a direct link's gap jitters by more than a hop's residence, so a pairing
    /// over a hop whose report was late can show the shorter gap. Its copies' TTLs, two apart,
    /// say it spans a hop: it never displaces the direct link (a flow's path read [1, 2, 4]).
    #[test]
    fn a_pairing_over_a_hop_never_displaces_a_direct_link_whatever_its_gap() {
        let mut links = LinkTable::default();
        links.learn_packet(((2, 5), (3, 1)), 60_000, Some(1));
        links.learn_packet(((2, 5), (4, 1)), 20_000, Some(2));
        assert_eq!(links.peer((2, 5)), Some((3, 1)));
        assert!(!links.over_hop((2, 5)));
        for _ in 0..20 {
            links.learn_packet(((2, 5), (4, 1)), 55_000, Some(2));
        }
        assert_eq!(links.peer((2, 5)), Some((3, 1)), "however many");
        // Without TTLs a gap so much shorter is a recabling, as before.
        links.learn(((2, 5), (4, 1)), 20_000);
        assert_eq!(links.peer((2, 5)), Some((4, 1)));
    }

    /// The other way round: the first packet a port's link was learned from crossed a hop whose
    /// report was filtered (a flow's path read [1, 3, 4] for good in the host agent's chain). A
    /// direct pairing replaces it at once, though on a loaded host its gap reads longer.
    #[test]
    fn a_direct_pairing_displaces_a_link_over_a_hop_whatever_its_gap() {
        let mut links = LinkTable::default();
        links.learn_packet(((1, 2), (3, 2)), 20_000, Some(2));
        assert_eq!(links.peer((1, 2)), Some((3, 2)));
        assert!(links.over_hop((1, 2)));
        links.learn_packet(((1, 2), (2, 1)), 60_000, Some(1));
        assert_eq!(links.peer((1, 2)), Some((2, 1)));
        assert!(!links.over_hop((1, 2)));
        assert_eq!(links.peer((2, 1)), Some((1, 2)), "both ways");
    }

    #[test]
    fn a_node_is_silent_only_past_its_usual_gap() {
        let interval = 1_000 * MS;
        let mut links = LinkTable::default();
        links.learn(((1, 5), (101, 1)), 600);
        // Spine 101 reports every 30 ms (a quiet spine's filtered reports of its flows).
        for k in 0..40 {
            links.saw(101, k * 30 * MS, interval);
        }
        let heard = 39 * 30 * MS;
        // Packets cross it unreported from 5 ms after its last report (a busy leaf reports
        // each packet of a congested flow; the spine's filter holds its reports back).
        for (k, t) in [5, 20, 40].into_iter().enumerate() {
            links.spanned((1, 5), 2, heard + t * MS, 2);
            assert_eq!(links.node_spans(101), k as u16 + 1);
        }
        assert!(
            !links.silent_since_spans(101, interval),
            "40 ms: within twice its usual 30 ms gap"
        );
        links.spanned((1, 5), 2, heard + 61 * MS, 2);
        assert!(links.silent_since_spans(101, interval), "61 ms: past it");
        // A node that reported once a second is named at two intervals, not at two seconds'
        // worth of its own gaps more.
        let mut sparse = LinkTable::default();
        sparse.learn(((1, 5), (102, 1)), 600);
        for k in 0..3 {
            sparse.saw(102, k * 1_500 * MS, interval);
        }
        sparse.spanned((1, 5), 2, 3_001 * MS + 1, 2);
        sparse.spanned((1, 5), 2, 3_000 * MS + interval * 2, 2);
        assert!(!sparse.silent_since_spans(102, interval));
        sparse.spanned((1, 5), 2, 3_000 * MS + interval * 2 + 1, 2);
        assert!(sparse.silent_since_spans(102, interval));
    }

    #[test]
    fn a_path_joined_over_a_link_learned_wrong_no_longer_holds() {
        let mut links = LinkTable::default();
        for _ in 0..EDGE_SIGHTINGS {
            links.edge((1, 1));
            links.edge((2, 3));
        }
        let hop = |node, i, e| PathHop {
            node_id: node,
            ingress_if: Some(i),
            egress_if: Some(e),
        };
        let short = [hop(1, 1, 5), hop(2, 5, 3)];
        let whole = [hop(1, 1, 5), hop(101, 1, 2), hop(2, 5, 3)];
        links.learn(((1, 5), (2, 5)), 2_000);
        assert!(links.holds(&short) && !links.holds(&whole));
        links.learn(((1, 5), (101, 1)), 500);
        links.learn(((101, 2), (2, 5)), 500);
        assert!(links.holds(&whole) && !links.holds(&short));
        assert!(!links.holds(&whole[..2]), "spine 101's port 2 is no edge");
    }

    #[test]
    fn a_moved_flow_joins_once_its_new_hops_reported_and_forgets_the_old() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        packet(&mut f, 0, 0);
        join(&mut f, &mut links);
        packet(&mut f, 10 * MS, 10 * MS);
        assert_eq!(nodes(&join(&mut f, &mut links)), [1, 101, 2]);
        // Leaf 1 now sends over spine 102 (uplink 6): until spine 102 and leaf 2 reported the
        // packet, the path is not whole.
        let t = 500 * MS;
        add(&mut f, t, card(1, 1, 6, t));
        let j = join(&mut f, &mut links);
        assert!(matches!(j, Joined::Partial(..)), "{j:?}");
        add(&mut f, t + 1, card(102, 1, 2, t + 1_500));
        add(&mut f, t + 2, card(2, 6, 3, t + 3_000));
        let j = join(&mut f, &mut links);
        assert!(matches!(j, Joined::Complete(_)), "{j:?}");
        assert_eq!(nodes(&j), [1, 102, 2]);
        assert_eq!(
            f.pending_hops(),
            3,
            "spine 101's report was of the old path"
        );
    }

    #[test]
    fn hops_without_known_links_are_never_a_complete_path() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        // No timestamps: nothing pairs the reports, every hop looks like a path's first and
        // last.
        for (k, node) in [1u32, 101, 2].into_iter().enumerate() {
            add(
                &mut f,
                k as u64,
                Hop::at(node).with_interfaces(Some(1), Some(2)),
            );
        }
        let j = join(&mut f, &mut links);
        assert!(matches!(j, Joined::Partial(..)), "{j:?}");
        assert_eq!(
            nodes(&j),
            [1, 101, 2],
            "in the order the nodes first reported"
        );
        // Much later one node alone reports: still no path of one hop.
        add(
            &mut f,
            1_000 * MS,
            Hop::at(101).with_interfaces(Some(1), Some(2)),
        );
        assert!(matches!(join(&mut f, &mut links), Joined::Partial(..)));
        assert_eq!(f.pending_hops(), 3);
    }

    #[test]
    fn a_fresh_report_off_the_chain_waits_and_a_missing_hop_is_named() {
        let (mut f, mut links) = (flow_on(1, &mut PathTable::default()), LinkTable::default());
        packet(&mut f, 0, 0);
        join(&mut f, &mut links);
        packet(&mut f, 10 * MS, 10 * MS);
        join(&mut f, &mut links);
        // Another flow taught leaf 1's uplink 6 to spine 102; this flow's next packet goes
        // there, and spine 102 never reports it.
        links.learn(((1, 6), (102, 1)), 500);
        add(&mut f, 100 * MS, card(1, 1, 6, 100 * MS));
        let j = join(&mut f, &mut links);
        let Joined::Partial(_, Some((at, sending))) = j else {
            panic!("{j:?}")
        };
        assert_eq!((at.node_id, at.egress_if(), sending), (1, Some(6), 0));
        add(&mut f, 900 * MS, card(1, 1, 6, 900 * MS));
        let Joined::Partial(_, Some((_, sending))) = join(&mut f, &mut links) else {
            panic!()
        };
        assert_eq!(sending, 800 * MS, "since it first left by port 6");
    }

    proptest::proptest! {
        /// High quantiles found from the top bucket down equal the walk from below.
        #[test]
        fn quantiles_from_the_top_match_the_walk_from_below(
            values in proptest::collection::vec(0u64..1 << 36, 1..300),
            q in 0.5f64..=1.0,
        ) {
            let mut h = Histogram::default();
            for v in &values {
                h.record(*v);
            }
            let rank = ((f64::from(h.total)) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            let from_below = h.counts.iter().position(|&c| {
                seen += u64::from(c);
                seen >= rank
            });
            let expected = from_below.map(|b| {
                let lo = Histogram::lower_bound(b);
                (lo + Histogram::lower_bound(b + 1).max(lo + 1)) / 2
            });
            proptest::prop_assert_eq!(h.quantile(q), expected);
        }
    }
}
