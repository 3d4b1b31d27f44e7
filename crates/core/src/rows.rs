//! Typed rows: what the live state hands to history, and the sink that takes them.
//!
//! A flush takes what changed since the previous one out of the [`State`] — the changed flows'
//! summaries and latency intervals ([`FlowRow`]), each queue's and port's interval aggregate
//! ([`AggRow`]), new events, incidents, the counters and a sample of raw datagrams — as one
//! [`Batch`], or streamed in parts of a bounded number of flows ([`FlushTake`]). A [`RowSink`]
//! (the collector's SQLite and ClickHouse stores) writes them. Taking a flush resets what it
//! took (each flow's `dirty` mark and latency interval, each queue's and port's interval), so
//! the next one holds only what is new; [`discard_changes`] does the same for a collector that
//! keeps no history, so nothing the flushes would have emptied grows.
//!
//! Like the rest of this crate it does no I/O: the caller decides when to flush (its clock) and
//! where the rows go.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::event::Event;
use crate::flow::{FlowInterval, Path as FlowPath};
use crate::incident::Incident;
use crate::state::State;

/// A flow's summary as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRow {
    /// The flow (its text form is made by the writer, off the state's locks).
    pub key: intscope_wire::locate::FlowKey,
    /// First report.
    pub first_seen_ns: u64,
    /// Last report.
    pub last_seen_ns: u64,
    /// Reports.
    pub reports: u64,
    /// Drops.
    pub drops: u64,
    /// Last drop reason.
    pub last_drop_reason: Option<u8>,
    /// Path (node, ports per hop), serialized by the writer, off the state's locks.
    pub path: FlowPath,
    /// The live flow's API ID: with the store's run, it names this in-memory life of the flow,
    /// whose counters the store adds to the stored sums once.
    pub live_id: u64,
    /// Path changes.
    pub path_changes: u64,
    /// End-to-end latency p50 / p99.
    pub e2e_p50: Option<u64>,
    /// p99.
    pub e2e_p99: Option<u64>,
    /// Latency since the last flush, when the flow had samples: a row of the flow's series.
    pub interval: Option<FlowInterval>,
}

/// One interval's aggregate of a queue or a port.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AggRow {
    /// Node.
    pub node_id: u32,
    /// Port.
    pub port: u32,
    /// Queue (queues only).
    pub queue_id: Option<u8>,
    /// Samples.
    pub samples: u64,
    /// Mean value (occupancy for queues, hop latency for ports).
    pub avg: f64,
    /// Largest value.
    pub max: u64,
    /// Drops (ports).
    pub drops: u64,
}

/// What one flush writes.
#[derive(Debug, Default)]
pub struct Batch {
    /// End of the interval (latest report time).
    pub time_ns: u64,
    /// Flows that changed.
    pub flows: Vec<FlowRow>,
    /// New events.
    pub events: Vec<Event>,
    /// Incidents that started, changed or ended since the last flush, each as it is now: a
    /// store keeps every version an incident goes through, the newest winning on read.
    pub incidents: Vec<Incident>,
    /// Queue aggregates of the interval.
    pub queues: Vec<AggRow>,
    /// Port aggregates of the interval.
    pub ports: Vec<AggRow>,
    /// Raw datagrams (time, source, bytes).
    pub raw: Vec<(u64, IpAddr, Vec<u8>)>,
    /// The collector's counters as of this batch (totals of this run: the store keeps their
    /// sums over runs).
    pub totals: Vec<(String, u64)>,
    /// When the flusher began taking the batch from the live state (set by the caller, who
    /// has the clock).
    pub taken_at: Option<Instant>,
    /// Further parts of the same flush follow: the writer commits a flush's parts in one
    /// transaction (see [`FlushTake`]).
    pub more: bool,
}

/// Where typed rows go: a history store. Implemented by the collector's backends (SQLite,
/// ClickHouse); a test can collect batches in memory.
pub trait RowSink {
    /// What a failed write says.
    type Error;
    /// Commits a batch (one transaction where the backend has them).
    fn write(&self, batch: &Batch) -> Result<(), Self::Error>;
    /// Commits the parts of one flush, in order, dropping each once written, so the writer
    /// holds one part at a time. A backend that can commits them in one transaction (nothing of
    /// the flush is stored when a part fails); this default commits each part on its own.
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Batch>) -> Result<(), Self::Error> {
        for p in parts {
            self.write(&p)?;
        }
        Ok(())
    }
}

/// Takes what changed since the last flush out of the live state, as one batch (tests, benches,
/// small states; a collector streams a flush in parts with [`FlushTake`]). Returns the batch and
/// the events missed (see [`FlushTake::events_missed`]).
pub fn collect_batch(
    state: &State,
    last_event: &mut u64,
    raw: Vec<(u64, IpAddr, Vec<u8>)>,
) -> (Batch, u64) {
    let mut take = FlushTake::new(state, last_event, raw, usize::MAX);
    let missed = take.events_missed();
    let b = take.next().unwrap_or_default();
    debug_assert!(!b.more && take.next().is_none());
    (b, missed)
}

/// What a collector without history does at each flush interval instead of a flush: forgets
/// what changed (the changed-flow lists, each changed flow's latency interval, the queue and
/// port intervals, the incidents' changes) so it does not pile up between flushes that never
/// come. Takes each shard's
/// lock once, for a pass over its changed flows only. Returns how many flows it unmarked.
pub fn discard_changes(state: &State) -> usize {
    state.forget_changed_incidents();
    let mut n = 0;
    state.each_flow_shard(|shard| {
        let keys = std::mem::take(&mut shard.dirty_flows);
        for key in &keys {
            if let Some(f) = shard.flows.get_mut_for_flush(key) {
                f.dirty = false;
                if let Some(interval) = f.interval.as_deref_mut() {
                    *interval = FlowInterval::default();
                }
                n += 1;
            }
        }
    });
    state.each_fabric_shard(|shard| {
        for (_, node) in &mut shard.nodes {
            for (_, ps) in &mut node.ports {
                for (_, qs) in ps.queues_mut() {
                    qs.interval = Default::default();
                }
                ps.interval = Default::default();
            }
        }
    });
    n
}

/// One flush, taken from the live state in parts of at most `chunk` flow rows each, so the
/// flush's memory is bounded by the chunk whatever the number of changed flows (see
/// `docs/collector-store.md`, Memory). [`FlushTake::new`] takes, under each shard's lock, the
/// keys of its changed flows (moving the shard's list, no copy) and everything but the flows:
/// events, queue and port aggregates, counters, raw datagrams, which go in the first part. Each
/// part then copies the rows of the next `chunk` keys, shard by shard, at most
/// `LOCK_SLICE` (1024) under one hold of a shard's lock. A flow
/// that changes after its keys were taken and before its row is copied is written with its
/// newer counts (nothing is lost); one that changes after its row was copied is in the next
/// flush.
#[derive(Debug)]
pub struct FlushTake<'a> {
    state: &'a State,
    /// The changed flows' keys not yet copied, per shard. [`State::each_flow_shard`] visits the
    /// shards in no fixed order (free ones first), so a shard is known by its address, which
    /// stays put while the state lives.
    keys: Vec<(usize, Vec<intscope_wire::locate::FlowKey>)>,
    /// How many keys are left in `keys`.
    left: usize,
    /// The first part's content (taken at once), until it is handed out.
    head: Option<Batch>,
    /// Most flow rows a part holds.
    chunk: usize,
    time_ns: u64,
    done: bool,
    /// Events that left the in-memory log before this flush could take them.
    events_missed: u64,
}

impl<'a> FlushTake<'a> {
    /// Takes the flush's keys and non-flow content (see the type's documentation); `chunk` is
    /// the most flow rows a part holds (at least 1).
    pub fn new(
        state: &'a State,
        last_event: &mut u64,
        raw: Vec<(u64, IpAddr, Vec<u8>)>,
        chunk: usize,
    ) -> Self {
        let mut b = Batch {
            time_ns: state.last_time_ns(),
            raw,
            ..Batch::default()
        };
        let (mut flows_expired, mut suppressed) = (0u64, 0u64);
        let mut events_missed = 0;
        let mut keys = Vec::with_capacity(state.shards());
        state.each_flow_shard(|shard| {
            flows_expired += shard.flows_expired;
            suppressed += shard.raiser.suppressed;
            let taken = std::mem::take(&mut shard.dirty_flows);
            keys.push((shard_id(shard), taken));
        });
        let left = keys.iter().map(|(_, k)| k.len()).sum();
        {
            let log = state.events();
            if let Some(first) = log.events().front()
                && first.id > *last_event
            {
                events_missed = first.id - *last_event;
            }
            // Events go to the store once linked to their incident (or given up on), in ID
            // order, each with its incident's ID.
            let until = log.settled_until(*last_event);
            b.events = log
                .events()
                .iter()
                .filter(|e| e.id >= *last_event && e.id < until)
                .map(|e| log.linked(e))
                .collect();
            *last_event = until.max(*last_event);
            for (kind, n) in log.counts() {
                b.totals.push((format!("events_{}", kind.label()), *n));
            }
        }
        b.incidents = state.take_changed_incidents();
        let mut counters = crate::fabric::RecordCounters::default();
        let mut lost = 0u64;
        state.each_fabric_shard(|shard| {
            counters.add(&shard.counters);
            lost += shard.seq.total_reports_lost();
            suppressed += shard.raiser.suppressed;
            for (&node, n) in &mut shard.nodes {
                for (&port, ps) in &mut n.ports {
                    for (queue, qs) in ps.queues_mut() {
                        let a = std::mem::take(&mut qs.interval);
                        if a.samples > 0 {
                            b.queues.push(AggRow {
                                node_id: node,
                                port,
                                queue_id: Some(queue),
                                samples: a.samples,
                                avg: a.sum as f64 / a.samples as f64,
                                max: a.max,
                                drops: 0,
                            });
                        }
                    }
                    let a = std::mem::take(&mut ps.interval);
                    if a.samples > 0 || a.drops > 0 {
                        let avg = if a.samples > 0 {
                            a.sum as f64 / a.samples as f64
                        } else {
                            0.0
                        };
                        b.ports.push(AggRow {
                            node_id: node,
                            port,
                            queue_id: None,
                            samples: a.samples,
                            avg,
                            max: a.max,
                            drops: a.drops,
                        });
                    }
                }
            }
        });
        b.totals.extend(
            [
                ("reports_v2", counters.v2),
                ("reports_v1", counters.v1),
                ("reports_v05", counters.v05),
                ("reports_without_flow", counters.without_flow),
                ("reports_lost", lost),
                ("flows_expired", flows_expired),
                ("events_suppressed", suppressed),
            ]
            .map(|(k, v)| (k.to_string(), v)),
        );
        FlushTake {
            state,
            events_missed,
            keys,
            left,
            time_ns: b.time_ns,
            head: Some(b),
            chunk: chunk.max(1),
            done: false,
        }
    }

    /// Events that left the in-memory log (a bounded ring) since the previous flush took
    /// its events, so no flush will store them (the caller counts them).
    pub fn events_missed(&self) -> u64 {
        self.events_missed
    }

    /// Changed flows whose rows are not yet taken.
    pub fn flows_left(&self) -> usize {
        self.left
    }
}

impl Iterator for FlushTake<'_> {
    type Item = Batch;

    /// The next part: the first one holds the non-flow content; every part but the last has
    /// `more` set.
    fn next(&mut self) -> Option<Batch> {
        if self.done {
            return None;
        }
        let mut b = self.head.take().unwrap_or_else(|| Batch {
            time_ns: self.time_ns,
            ..Batch::default()
        });
        let cap = self.chunk.min(self.left);
        b.flows.reserve_exact(cap);
        // Passes over the shards, each taking a slice of a shard's keys under its lock, until
        // the part is full or every key is taken.
        let mut taken = 0;
        while taken < cap {
            let before = taken;
            let (keys, left) = (&mut self.keys, &mut self.left);
            self.state.each_flow_shard(|shard| {
                let id = shard_id(shard);
                let Some((_, shard_keys)) = keys.iter_mut().find(|(s, _)| *s == id) else {
                    return;
                };
                let slice_end = (taken + LOCK_SLICE).min(cap);
                while taken < slice_end
                    && let Some(key) = shard_keys.pop()
                {
                    taken += 1;
                    *left -= 1;
                    // Not dirty: the flow went away and its key came back as a new flow,
                    // listed again for the next flush (or this row was already copied).
                    if let Some(f) = shard.flows.get_mut_for_flush(&key)
                        && f.dirty
                    {
                        f.dirty = false;
                        b.flows.push(flow_row(f));
                    }
                }
                if shard_keys.is_empty() {
                    // Its memory goes back as the flush proceeds.
                    *shard_keys = Vec::new();
                }
            });
            if taken == before {
                // No shard had a key left (cannot happen while `left` counts them): stop.
                self.left = 0;
                break;
            }
        }
        b.more = self.left > 0;
        self.done = !b.more;
        Some(b)
    }
}

/// Most keys a flush takes from one flow shard per hold of its lock: the receive threads wait
/// for the lock meanwhile, so a hold is a slice (about 100 µs of row copies), not a part.
const LOCK_SLICE: usize = 1024;

/// A flow shard's identity within its state (see [`FlushTake`]'s `keys`).
fn shard_id(shard: &crate::flow_shard::FlowShard) -> usize {
    std::ptr::from_ref(shard).addr()
}

/// A live flow's stored row; takes the flow's interval (the next starts empty).
fn flow_row(f: &mut crate::flow::FlowState) -> FlowRow {
    FlowRow {
        key: f.key,
        first_seen_ns: f.first_seen_ns,
        last_seen_ns: f.last_seen_ns,
        reports: f.reports,
        drops: f.drops,
        last_drop_reason: f.last_drop_reason,
        path: Arc::clone(&f.path),
        live_id: f.id,
        path_changes: f.path_changes,
        e2e_p50: f.e2e.quantile(0.5),
        e2e_p99: f.e2e.quantile(0.99),
        interval: (f.interval.as_deref_mut().map(std::mem::take)).filter(|v| v.samples > 0),
    }
}
