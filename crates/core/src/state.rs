//! The collector's live state, sharded: flows by the hash of their key ([`FlowShard`]), the
//! fabric by node ([`FabricShard`]), and one event log they share.
//!
//! A batch of records is split into each shard's work, then goes through two stages. The flow
//! stage correlates each record with its flow (path, latency, joins of per-hop reports) and
//! learns the flow's ID; the fabric stage then updates nodes, ports, queues and links and runs
//! their detectors, each hop in its node's shard. Each stage visits its shards one lock at a
//! time, taking whichever shard is free first, so receive threads work on different shards in
//! parallel. Why two keys: a queue's congestion episode and culprit ranking need every sample of
//! the queue, and those come from the reports of many flows.
//!
//! Time comes from the records (report time), so the same input in the same batches gives the
//! same state and events (replays and tests are deterministic).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, TryLockError};

use crate::event::{Event, EventKind, EventLog, Raiser};
use crate::fabric::{
    Evicted, FabricShard, HotPorts, LinkState, NodeState, Parts, QueueState, RecordCounters,
    node_shard,
};
use crate::fast_path::Fold;
use crate::flow::{FlowState, LastSample, Path, key_hash};
use crate::flow_ref::FlowSeen;
use crate::flow_shard::{FlowShard, Shared, flow_shard};
use crate::incident::Incident;
use crate::incidents::IncidentLog;
use crate::keys::{LinkKey, QueueKey};
use crate::limits::Limits;
use crate::record::Record;
use crate::seq::{LOSS_BUCKETS, LossHistory, SeqState};
use crate::snapshot::{FabricShardSnapshot, FlowShardSnapshot, Snapshot};
use crate::thresholds::DetectConfig;
use crate::totals;

/// A batch's work space, kept per thread between batches instead of allocated for each.
#[derive(Default)]
struct Scratch {
    /// Each record's flow key hash.
    hashes: Vec<u64>,
    /// Each record's flow's slot as the prefetch guessed it.
    hints: Vec<Option<u32>>,
    /// What the flow stage learned about each record.
    seen: Vec<FlowSeen>,
    /// What each record's fabric parts need, worked out once for all of them.
    parts: Vec<Parts>,
    /// Per flow shard: its work in batch order, record indexes, with [`SWEEP`] marking "sweep
    /// at this record's time".
    flow_work: Vec<Vec<u32>>,
    /// Per fabric shard: its work in batch order, [`FabricPart`]s packed with [`fabric_item`],
    /// or sweeps.
    fabric_work: Vec<Vec<u32>>,
    /// What the flow shards' sweeps handed over of their deferred reports, by the record
    /// index of the sweep (`crate::fast_path`).
    folds: Vec<(u32, Fold)>,
    /// One flow shard's folds as it hands them over.
    taken: Vec<Fold>,
}

/// A work entry's mark: sweep at the record's time (after the record itself, if it is the
/// shard's).
const SWEEP: u32 = 1 << 31;

/// Which part of a record a fabric shard is given (with several shards: one shard of each kind
/// takes whole records, `State::process_unsharded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FabricPart {
    /// The reporter's part.
    Reporter,
    /// Hop `n`'s part.
    Hop(usize),
}

const PART_BITS: u32 = 5;
const PART_MASK: u32 = (1 << PART_BITS) - 1;
// Hop parts are numbered 1..=MAX_HOPS.
const _: () = assert!(crate::record::MAX_HOPS <= PART_MASK as usize);
/// Records one split handles: their indexes fit below the part bits and the sweep mark.
const SPLIT_RECORDS: usize = 1 << (31 - PART_BITS);

/// A fabric work entry: record `index`'s `part`.
fn fabric_item(index: u32, part: FabricPart) -> u32 {
    let part = match part {
        FabricPart::Reporter => 0,
        FabricPart::Hop(h) => h as u32 + 1,
    };
    (index << PART_BITS) | part
}

/// The record index and part of a fabric work entry (without [`SWEEP`]).
fn fabric_part(item: u32) -> (usize, FabricPart) {
    let index = (item >> PART_BITS) as usize;
    let part = match item & PART_MASK {
        0 => FabricPart::Reporter,
        h => FabricPart::Hop(h as usize - 1),
    };
    (index, part)
}

/// How often (report time) the shards sweep for quiet episodes, expired joins and idle flows.
const SWEEP_NS: u64 = 1_000_000;

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Most shards of each kind (a batch tracks the shards it still has to visit in one word).
pub const MAX_SHARDS: usize = 64;

/// A live flow's latency samples and recent paths ([`State::flow_recent`]): published rows
/// leave them out to stay small.
#[derive(Debug, Clone)]
pub struct FlowRecent {
    /// The last latency sample.
    pub samples: LastSample,
    /// Recent paths with the time each was first seen, oldest first, ending with the current one.
    pub paths: Vec<(u64, Path)>,
}

/// The live state: shards of flows, shards of the fabric, the event log.
#[derive(Debug)]
pub struct State {
    flows: Box<[Mutex<FlowShard>]>,
    fabric: Box<[Mutex<FabricShard>]>,
    /// Each fabric shard's ports whose detectors need every sample, read by the flow stage
    /// without its lock.
    hot: Box<[Arc<HotPorts>]>,
    log: Mutex<EventLog>,
    /// Each node's recent per-hop reports received (from the flow shards) and lost (from the
    /// fabric shards' confirmed sequence gaps): the loss share that tells a silent drop from
    /// lost postcards (`[detect.postcards]`). Read by the flow shards for a batch, written by
    /// the drains of the shards' outboxes (after the log's lock, never while read).
    loss: RwLock<LossHistory>,
    next_flow_id: AtomicU64,
    /// Report time of the next sweep, the same for every shard.
    next_sweep_ns: AtomicU64,
    /// Per shard (flows, then fabric): how many times it was handed out to change, so that a
    /// snapshot copies only the shards that may have changed since the last one.
    generations: Box<[AtomicU64]>,
    /// Snapshots built.
    snapshots: AtomicU64,
}

impl State {
    /// One shard of each kind, with these detector thresholds.
    pub fn new(cfg: DetectConfig) -> Self {
        State::with_shards(cfg, 1)
    }

    /// `shards` shards of each kind (one per receive thread is the usual choice).
    pub fn with_shards(cfg: DetectConfig, shards: usize) -> Self {
        State::with_limits(cfg, Limits::default(), shards)
    }

    /// `shards` shards of each kind, holding at most `limits` between them.
    pub fn with_limits(cfg: DetectConfig, limits: Limits, shards: usize) -> Self {
        let n = shards.clamp(1, MAX_SHARDS);
        let share = limits.per_shard(n);
        let fabric: Box<[FabricShard]> = (0..n)
            .map(|_| FabricShard::with_limits(cfg.clone(), share))
            .collect();
        State {
            flows: (0..n)
                .map(|_| Mutex::new(FlowShard::with_limits(cfg.clone(), share)))
                .collect(),
            hot: fabric.iter().map(FabricShard::hot_ports).collect(),
            fabric: fabric.into_iter().map(Mutex::new).collect(),
            log: Mutex::new(EventLog::new(&cfg)),
            loss: RwLock::new(LossHistory::new(
                cfg.postcards.silent_drop_ns / (LOSS_BUCKETS as u64 / 4),
            )),
            next_flow_id: AtomicU64::new(1),
            next_sweep_ns: AtomicU64::new(0),
            generations: (0..2 * n).map(|_| AtomicU64::new(0)).collect(),
            snapshots: AtomicU64::new(0),
        }
    }

    /// Marks flow shard `s` (or fabric shard `s` when `fabric`) as changed.
    fn touch(&self, fabric: bool, s: usize) {
        let i = if fabric { self.flows.len() + s } else { s };
        self.generations[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether any shard may have changed since `snap` was taken.
    pub fn changed_since(&self, snap: &Snapshot) -> bool {
        snap.generations.len() != self.generations.len()
            || self
                .generations
                .iter()
                .zip(&snap.generations)
                .any(|(g, &seen)| g.load(Ordering::Relaxed) != seen)
    }

    /// A snapshot of everything, for readers that must not hold the shard locks (see
    /// `snapshot`). Each shard is copied under its lock, one at a time, taking the free
    /// ones first; a fabric shard unchanged since `prev` was taken is shared with it, not copied,
    /// and a flow shard's copy is its last one with the rows of the flows written since made
    /// again (`FlowShard::copy`). The event counts are read last, so they include
    /// the events of every copied record.
    pub fn snapshot(&self, prev: Option<&Snapshot>) -> Snapshot {
        self.fold_deferred();
        let n = self.flows.len();
        let prev = prev.filter(|p| p.flows.len() == n && p.fabric.len() == n);
        let mut generations = vec![0u64; 2 * n];
        let mut flows: Vec<Option<Arc<FlowShardSnapshot>>> = vec![None; n];
        let mut fabric: Vec<Option<Arc<FabricShardSnapshot>>> = vec![None; n];
        each_shard(&self.flows, |s, shard| {
            generations[s] = self.generations[s].load(Ordering::Relaxed);
            flows[s] = Some(shard.copy());
        });
        each_shard(&self.fabric, |s, shard| {
            // Read under the lock: no change can slip between the count and the copy.
            let g = self.generations[n + s].load(Ordering::Relaxed);
            generations[n + s] = g;
            fabric[s] = Some(match prev {
                Some(p) if p.generations[n + s] == g => Arc::clone(&p.fabric[s]),
                _ => Arc::new(FabricShardSnapshot::of(shard)),
            });
        });
        Snapshot {
            flows: flows.into_iter().flatten().collect(),
            fabric: fabric.into_iter().flatten().collect(),
            generations,
            event_counts: lock(&self.log).counts().clone(),
            loss_untracked: read(&self.loss).untracked,
            sequence: self.snapshots.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Whether new flows keep their latency per store interval (on by default): a collector
    /// without a store turns it off, as nothing would read them.
    pub fn keep_intervals(&self, on: bool) {
        for shard in &self.flows {
            lock(shard).keep_intervals = on;
        }
    }

    /// What a flow's page shows beyond its published row, read from the live flow with this
    /// `key` and API `id` under its shard's lock (one flow, copied): `None` once it has left.
    pub fn flow_recent(&self, key: &intscope_wire::locate::FlowKey, id: u64) -> Option<FlowRecent> {
        let shard = lock(&self.flows[flow_shard(key_hash(key), self.flows.len())]);
        let f = shard.flows.get(key).filter(|f| f.id == id)?;
        Some(FlowRecent {
            samples: f.recent.clone(),
            paths: f
                .path_history()
                .map(|(since, p)| (since, Arc::clone(p)))
                .collect(),
        })
    }

    /// Shards of each kind.
    pub fn shards(&self) -> usize {
        self.flows.len()
    }

    /// Runs one record through correlation and detection.
    pub fn process(&self, r: &Record) {
        self.process_batch(std::slice::from_ref(r));
    }

    /// Runs a batch of records through correlation and detection, each shard's part under its
    /// lock once. With several shards the batch is first split into each shard's work: a record
    /// goes to its flow's shard, its reporter's part to the reporter's fabric shard and each
    /// hop's part to the hop's node's, so a shard does only its own work, however many shards
    /// there are. Sweep points (every millisecond of report time) go to every shard at the same
    /// record. The result does not depend on the number of shards (a test holds it to that).
    pub fn process_batch(&self, records: &[Record]) {
        if records.is_empty() {
            return;
        }
        SCRATCH.with_borrow_mut(|scratch| {
            for part in records.chunks(SPLIT_RECORDS) {
                self.process_batch_with(part, scratch);
            }
        });
    }

    fn process_batch_with(&self, records: &[Record], scratch: &mut Scratch) {
        if let ([flows], [fabric]) = (&self.flows[..], &self.fabric[..]) {
            return self.process_unsharded(records, flows, fabric, scratch);
        }
        let n = self.flows.len();
        let Scratch {
            hashes,
            hints,
            seen,
            parts,
            flow_work,
            fabric_work,
            folds,
            taken,
        } = scratch;
        folds.clear();
        hashes.clear();
        hints.clear();
        hints.resize(records.len(), None);
        seen.clear();
        seen.resize(records.len(), FlowSeen::default());
        flow_work.resize_with(n, Vec::new);
        fabric_work.resize_with(n, Vec::new);
        for work in flow_work.iter_mut().chain(fabric_work.iter_mut()) {
            work.clear();
        }
        let mut next_sweep = self.next_sweep_ns.load(Ordering::Relaxed);
        for (i, r) in records.iter().enumerate() {
            let i = i as u32;
            // Each key is hashed once: for its shard, the prefetch and the lookup.
            let hash = r.flow.as_ref().map_or(0, key_hash);
            hashes.push(hash);
            if r.flow.is_some() {
                flow_work[flow_shard(hash, n)].push(i);
            }
            fabric_work[node_shard(r.node_id, n)].push(fabric_item(i, FabricPart::Reporter));
            for (h, hop) in r.hops().iter().enumerate() {
                fabric_work[node_shard(hop.node_id, n)].push(fabric_item(i, FabricPart::Hop(h)));
            }
            if r.time_ns >= next_sweep {
                next_sweep = r.time_ns + SWEEP_NS;
                for work in flow_work.iter_mut() {
                    work.push(i | SWEEP);
                }
                for work in fabric_work.iter_mut() {
                    work.push(fabric_item(i, FabricPart::Reporter) | SWEEP);
                }
            }
        }
        self.next_sweep_ns.fetch_max(next_sweep, Ordering::Relaxed);
        each_shard(&self.flows, |s, shard| {
            self.touch(false, s);
            let work = &flow_work[s];
            // Flow states are correlation's cache misses: start loading the shard's first, in a
            // tight loop whose lookups the CPU overlaps, then process.
            for &w in work.iter().filter(|&&w| w & SWEEP == 0) {
                hints[w as usize] = shard.prefetch(hashes[w as usize]);
            }
            let loss = read(&self.loss);
            for &w in work {
                let i = (w & !SWEEP) as usize;
                let r = &records[i];
                if w & SWEEP != 0 {
                    shard.sweep(r.time_ns, &loss);
                    shard.deferred.take(taken);
                    folds.extend(taken.drain(..).map(|f| (i as u32, f)));
                } else if let Some(key) = r.flow {
                    shard.raiser.set_clock(r);
                    let shared = Shared {
                        ids: &self.next_flow_id,
                        loss: &loss,
                        busy: &self.hot,
                    };
                    seen[i] = shard.process(r, key, (hashes[i], hints[i]), &shared);
                }
            }
            drop(loss);
            self.drain(&mut shard.raiser);
        });
        parts.clear();
        parts.extend(
            records
                .iter()
                .zip(seen.iter())
                .map(|(r, &s)| Parts::of(r, s)),
        );
        each_shard(&self.fabric, |s, shard| {
            self.touch(true, s);
            for &w in &fabric_work[s] {
                let (i, part) = fabric_part(w & !SWEEP);
                let (r, parts) = (&records[i], &parts[i]);
                if w & SWEEP != 0 {
                    let at = i as u32;
                    for (_, f) in folds
                        .iter()
                        .filter(|(j, f)| *j == at && node_shard(f.node, n) == s)
                    {
                        shard.fold(f);
                    }
                    shard.sweep(r.time_ns);
                    continue;
                }
                match part {
                    FabricPart::Reporter => shard.process_reporter(r, parts),
                    FabricPart::Hop(h) => shard.process_hop(r, h, parts),
                }
            }
            shard.publish_hot();
            self.drain(&mut shard.raiser);
        });
    }

    /// [`State::process_batch`] with one shard of each kind: both locks are held for the batch
    /// and each record goes from the flow stage straight on to the fabric stage while it is in
    /// cache (two passes streamed every record through the cache twice).
    fn process_unsharded(
        &self,
        records: &[Record],
        flows: &Mutex<FlowShard>,
        fabric: &Mutex<FabricShard>,
        scratch: &mut Scratch,
    ) {
        let Scratch {
            hashes,
            hints,
            taken,
            ..
        } = scratch;
        hashes.clear();
        hashes.extend(records.iter().map(|r| r.flow.as_ref().map_or(0, key_hash)));
        let (mut flows, mut fabric) = (lock(flows), lock(fabric));
        self.touch(false, 0);
        self.touch(true, 0);
        // Flow states are correlation's cache misses: start loading them all first, in a tight
        // loop whose lookups the CPU overlaps.
        hints.clear();
        hints.extend(
            records
                .iter()
                .zip(hashes.iter())
                .map(|(r, &hash)| r.flow.and_then(|_| flows.prefetch(hash))),
        );
        let mut next_sweep = self.next_sweep_ns.load(Ordering::Relaxed);
        let loss = read(&self.loss);
        let shared = Shared {
            ids: &self.next_flow_id,
            loss: &loss,
            busy: &self.hot,
        };
        for (i, r) in records.iter().enumerate() {
            let seen = match r.flow {
                Some(key) => {
                    flows.raiser.set_clock(r);
                    flows.process(r, key, (hashes[i], hints[i]), &shared)
                }
                None => FlowSeen::default(),
            };
            fabric.process(r, seen);
            if r.time_ns >= next_sweep {
                next_sweep = r.time_ns + SWEEP_NS;
                flows.sweep(r.time_ns, &loss);
                flows.deferred.take(taken);
                for f in taken.drain(..) {
                    fabric.fold(&f);
                }
                fabric.sweep(r.time_ns);
            }
        }
        fabric.publish_hot();
        drop(loss);
        self.drain(&mut flows.raiser);
        self.drain(&mut fabric.raiser);
        self.next_sweep_ns.fetch_max(next_sweep, Ordering::Relaxed);
    }

    /// Closes what reports will not close: congestion episodes of queues that went quiet (a switch
    /// that filters reports, like SD-Fabric's, stops reporting a drained queue), per-hop joins
    /// whose window passed without the flow's next packet, idle flows. Processing does this as
    /// reports arrive; call it when they stop (idle receivers, end of a replay).
    pub fn tick(&self, now: u64) {
        self.fold_deferred();
        self.next_sweep_ns
            .fetch_max(now + SWEEP_NS, Ordering::Relaxed);
        each_shard(&self.flows, |i, s| {
            self.touch(false, i);
            s.sweep(now, &read(&self.loss));
            self.drain(&mut s.raiser);
        });
        each_shard(&self.fabric, |i, s| {
            self.touch(true, i);
            s.sweep(now);
            s.publish_hot();
            self.drain(&mut s.raiser);
        });
    }

    /// Hands what the flow shards deferred (`crate::fast_path`) to the fabric shards now,
    /// rather than at their next sweep: before the state is read or stored.
    fn fold_deferred(&self) {
        let mut folds = Vec::new();
        each_shard(&self.flows, |_, s| {
            if !s.deferred.is_empty() {
                s.deferred.take(&mut folds);
            }
        });
        if folds.is_empty() {
            return;
        }
        let n = self.fabric.len();
        each_shard(&self.fabric, |i, s| {
            self.touch(true, i);
            for f in folds.iter().filter(|f| node_shard(f.node, n) == i) {
                s.fold(f);
            }
        });
    }

    /// Continue event IDs after those a store already holds.
    pub fn continue_event_ids(&self, next: u64) {
        lock(&self.log).continue_ids(next);
    }

    /// The event log (only it is locked: the shards go on).
    pub fn events(&self) -> MutexGuard<'_, EventLog> {
        lock(&self.log)
    }

    /// Runs `f` on the incident log, after every shard handed over what it observed.
    pub fn with_incidents<T>(&self, f: impl FnOnce(&mut IncidentLog) -> T) -> T {
        self.flush_incidents();
        f(&mut lock(&self.log).incidents)
    }

    /// Every incident held, newest (highest ID) first.
    pub fn incidents(&self) -> Vec<Incident> {
        self.with_incidents(|l| {
            let mut all: Vec<Incident> = l.iter().cloned().collect();
            all.sort_by_key(|i| std::cmp::Reverse(i.id));
            all
        })
    }

    /// Incidents started, updated or resolved since the last call (the store's flush).
    pub fn take_changed_incidents(&self) -> Vec<Incident> {
        self.with_incidents(IncidentLog::take_changed)
    }

    /// Forgets the incident changes a flush would take (a collector without a store).
    pub fn forget_changed_incidents(&self) {
        self.with_incidents(IncidentLog::forget_changed);
    }

    /// The input is over (the end of a replay): raises the end events of congestion runs
    /// still waiting for their merge window, and correlates the path changes still waiting
    /// for `path_correlation_ns`. Call after the last [`State::tick`].
    pub fn finish_incidents(&self) {
        self.fold_deferred();
        each_shard(&self.fabric, |_, s| {
            s.end_runs(u64::MAX);
            self.drain(&mut s.raiser);
        });
        self.with_incidents(IncidentLog::correlate_now);
        lock(&self.log).link_remaining();
    }

    /// The input is over, or the collector stops: the store's last flush takes every event
    /// raised so far, linked to its incident where it can be (`EventLog::settle_all`).
    pub fn settle_events(&self) {
        self.flush_incidents();
        lock(&self.log).settle_all();
    }

    /// Continue incident IDs after those a store already holds.
    pub fn continue_incident_ids(&self, next: u64) {
        lock(&self.log).incidents.continue_ids(next);
    }

    fn flush_incidents(&self) {
        each_shard(&self.fabric, |_, s| {
            s.raiser.hand_over();
            self.drain(&mut s.raiser);
        });
    }

    /// Hands a shard's outbox to the log and the loss history: the one place the shards' work
    /// reaches the shared state, once per batch (the log's lock, then the history's).
    fn drain(&self, raiser: &mut Raiser) {
        if !raiser.is_idle() {
            let mut log = lock(&self.log);
            raiser.drain(&mut log, &mut write(&self.loss));
        }
    }

    /// The latest record time seen.
    pub fn last_time_ns(&self) -> u64 {
        self.fabric
            .iter()
            .map(|s| lock(s).last_time_ns)
            .max()
            .unwrap_or(0)
    }

    /// Visits each flow shard under its lock, one at a time (the store's flush).
    pub fn each_flow_shard(&self, mut f: impl FnMut(&mut FlowShard)) {
        each_shard(&self.flows, |i, s| {
            self.touch(false, i);
            f(s);
        });
    }

    /// Visits each fabric shard under its lock, one at a time (the store's flush).
    pub fn each_fabric_shard(&self, mut f: impl FnMut(&mut FabricShard)) {
        self.fold_deferred();
        each_shard(&self.fabric, |i, s| {
            self.touch(true, i);
            f(s);
        });
    }

    /// A consistent view of everything, for readers (the API): every shard and the event log are
    /// locked until the view is dropped, so keep it short, and call no other method of the state
    /// while holding it (the locks are not reentrant).
    pub fn read(&self) -> View<'_> {
        self.fold_deferred();
        View {
            flows: self.flows.iter().map(lock).collect(),
            fabric: self.fabric.iter().map(lock).collect(),
            log: lock(&self.log),
        }
    }
}

/// Locks `m`, also after a panic elsewhere poisoned it: the state behind it is counters and
/// tables a half-done update leaves consistent enough to serve, better than none at all.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `m`, also after a panic elsewhere poisoned it (as [`lock`]).
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `m`, also after a panic elsewhere poisoned it (as [`lock`]).
fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` on every shard under its lock, taking the free ones first and waiting only when all
/// that are left are busy: two threads passing through the same shards then work side by side.
fn each_shard<T>(shards: &[Mutex<T>], mut f: impl FnMut(usize, &mut T)) {
    if let [only] = shards {
        f(0, &mut lock(only));
        return;
    }
    let mut left: u64 = if shards.len() >= 64 {
        u64::MAX
    } else {
        (1u64 << shards.len()) - 1
    };
    while left != 0 {
        let mut visited = false;
        let mut bits = left;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let guard = match shards[i].try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut g) = guard {
                f(i, &mut g);
                left &= !(1 << i);
                visited = true;
            }
        }
        if !visited {
            let i = left.trailing_zeros() as usize;
            f(i, &mut lock(&shards[i]));
            left &= !(1 << i);
        }
    }
}

/// Every shard, locked: what the API reads.
pub struct View<'a> {
    flows: Vec<MutexGuard<'a, FlowShard>>,
    fabric: Vec<MutexGuard<'a, FabricShard>>,
    log: MutexGuard<'a, EventLog>,
}

impl View<'_> {
    /// Every live flow.
    pub fn flows(&self) -> impl Iterator<Item = &FlowState> {
        self.flows.iter().flat_map(|s| s.flows.values())
    }

    /// Live flows.
    pub fn flow_count(&self) -> usize {
        self.flows.iter().map(|s| s.flows.len()).sum()
    }

    /// The flow with API ID `id`.
    pub fn flow_by_id(&self, id: u64) -> Option<&FlowState> {
        self.flows.iter().find_map(|s| s.flow_by_id(id))
    }

    /// Flows changed since the last store flush.
    pub fn flows_to_store(&self) -> usize {
        self.flows.iter().map(|s| s.dirty_flows.len()).sum()
    }

    /// Flows that left memory idle.
    pub fn flows_expired(&self) -> u64 {
        self.flows.iter().map(|s| s.flows_expired).sum()
    }

    /// Reports that said nothing new to the detectors (`[detect.fast_path]`).
    pub fn reports_unchanged(&self) -> u64 {
        self.flows.iter().map(|s| s.reports_unchanged).sum()
    }

    /// Every node.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, &NodeState)> {
        self.fabric
            .iter()
            .flat_map(|s| s.nodes.iter().map(|(k, v)| (*k, v)))
    }

    /// The node with this ID.
    pub fn node(&self, id: u32) -> Option<&NodeState> {
        self.fabric[node_shard(id, self.fabric.len())]
            .nodes
            .get(&id)
    }

    /// Every queue.
    pub fn queues(&self) -> impl Iterator<Item = (QueueKey, &QueueState)> {
        self.fabric.iter().flat_map(|s| s.queues())
    }

    /// Every link.
    pub fn links(&self) -> impl Iterator<Item = (LinkKey, &LinkState)> {
        self.fabric.iter().flat_map(|s| s.links())
    }

    /// Report sequence accounting per (node, hw_id).
    pub fn sources(&self) -> impl Iterator<Item = ((u32, u8), SeqState)> {
        self.fabric.iter().flat_map(|s| s.seq.sources())
    }

    /// Reports lost, from sequence gaps: exact for v1.0 and v0.5 (one report a sequence
    /// number), for v2.0 each lost group at its source's mean reports per group
    /// ([`crate::seq`]).
    pub fn reports_lost(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.total_reports_lost()).sum()
    }

    /// Report groups (datagrams, one sequence number each) lost, from sequence gaps.
    pub fn report_groups_lost(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.total_groups_lost()).sum()
    }

    /// Sequence resets: restarted counters and jumps too far to be loss.
    pub fn sequence_resets(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.total_restarts()).sum()
    }

    /// Sequence numbers later numbers contradicted (corrupt or spoofed), see [`crate::seq`].
    pub fn sequence_implausible(&self) -> u64 {
        self.fabric.iter().map(|s| s.seq.totals().implausible).sum()
    }

    /// Reports whose sequence width was not their source's (v2.0 mixed with v1.0 or v0.5).
    pub fn sequence_width_conflicts(&self) -> u64 {
        self.fabric
            .iter()
            .map(|s| s.seq.totals().width_conflicts)
            .sum()
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

    /// The newest events, oldest first.
    pub fn events(&self) -> &VecDeque<Event> {
        self.log.events()
    }

    /// Events raised, by kind.
    pub fn event_counts(&self) -> &BTreeMap<EventKind, u64> {
        self.log.counts()
    }

    /// Events suppressed by the per-place rate limit.
    pub fn events_suppressed(&self) -> u64 {
        totals::suppressed(
            self.fabric.iter().map(|s| &**s),
            self.flows.iter().map(|s| &**s),
        )
    }
}

impl totals::FabricPart for FabricShard {
    fn nodes_sources(&self) -> (usize, usize) {
        (self.nodes.len(), self.seq.len())
    }

    fn ports_queues_links(&self) -> (usize, usize, usize) {
        self.held()
    }

    fn evicted(&self) -> Evicted {
        FabricShard::evicted(self)
    }

    fn counters(&self) -> &RecordCounters {
        &self.counters
    }

    fn suppressed(&self) -> u64 {
        self.raiser.suppressed
    }
}

impl totals::FlowPart for FlowShard {
    fn flow_count(&self) -> usize {
        self.flows.len()
    }

    fn flows_evicted(&self) -> u64 {
        self.flows_evicted
    }

    fn link_ports_refused(&self) -> u64 {
        self.links.unlearned
    }

    fn suppressed(&self) -> u64 {
        self.raiser.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the link tables refused when full is an eviction kind, live and in the copies the
    /// API reads (the copy is remade when only this count moved).
    #[test]
    fn link_table_refusals_are_counted_live_and_in_copies() {
        let mut shard = FlowShard::default();
        shard.links.unlearned = 3;
        let copy = shard.copy();
        let none: [&FabricShard; 0] = [];
        let live = totals::evicted(none.into_iter(), std::iter::once(&shard));
        let copied = totals::evicted(none.into_iter(), std::iter::once(&*copy));
        assert_eq!((live.link_ports, copied.link_ports), (3, 3));
        shard.links.unlearned = 4;
        let copy = shard.copy();
        let copied = totals::evicted(none.into_iter(), std::iter::once(&*copy));
        assert_eq!(copied.link_ports, 4);
        assert!(live.by_kind().contains(&("link_port", 3)));
    }

    #[test]
    fn every_shard_is_visited_once_even_when_some_are_busy() {
        let shards: Vec<Mutex<u32>> = (0..5).map(|_| Mutex::new(0)).collect();
        let busy = shards[1].lock().unwrap();
        let visited = AtomicU64::new(0);
        let waiter = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut order = Vec::new();
                each_shard(&shards, |i, v| {
                    *v += 1;
                    order.push(i);
                    visited.fetch_add(1, Ordering::SeqCst);
                });
                order
            });
            // Release the busy shard once the free ones are done (or after a deadline, so a
            // visit that waits on the busy shard first fails the order check instead of hanging).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while visited.load(Ordering::SeqCst) < 4 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            drop(busy);
            h.join().unwrap()
        });
        // The busy shard is taken last, after the free ones.
        assert_eq!(waiter, vec![0, 2, 3, 4, 1]);
        assert!(shards.iter().all(|m| *m.lock().unwrap() == 1));
    }

    proptest::proptest! {
        #[test]
        fn fabric_work_entries_keep_record_and_part(
            index in 0..SPLIT_RECORDS as u32,
            part in 0..=crate::record::MAX_HOPS,
            sweep: bool,
        ) {
            let part = match part {
                0 => FabricPart::Reporter,
                p => FabricPart::Hop(p - 1),
            };
            let item = fabric_item(index, part) | if sweep { SWEEP } else { 0 };
            proptest::prop_assert_eq!(item & SWEEP != 0, sweep);
            proptest::prop_assert_eq!(fabric_part(item & !SWEEP), (index as usize, part));
        }
    }

    #[test]
    fn node_and_flow_shards_spread_consecutive_ids() {
        let mut per = [0usize; 4];
        for node in 0..4000u32 {
            per[node_shard(node, 4)] += 1;
        }
        assert!(per.iter().all(|&c| (800..1200).contains(&c)), "{per:?}");
    }
}
