//! The hub: one [`Collector`] that the receive threads, a capture replay, the store's threads
//! and the API share. It owns the live state (core's [`State`]), the ingest counters, the
//! published snapshot the API reads and the handle of the history store.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::now_ns;
use crate::ingest::{Discard, IngestCounts, IngestStats, Tally, pressure};
use crate::store::{FlushTake, Flusher, Store, StoreConfig, StoreError, StoreStats, spawn_writer};
use intscope_core::{
    DetectConfig as Thresholds, FlowKeyMode, Limits, Record, RecordBatch, RecordSink, Snapshot,
    State, decode_into,
};
use intscope_wire::locate::DetectConfig;
/// A source network of the allowlist (`allow`, `--allow`).
pub use ipnet::IpNet;

/// A record sink that counts the records it was given, and drops switch timestamps too far
/// from receive time (counting the reports that had one).
struct Counted<'a, S> {
    sink: &'a mut S,
    n: usize,
    /// `clock_skew_max_ns` (0: no bound).
    max_skew_ns: u64,
    skewed: u64,
}

impl<S: RecordSink> RecordSink for Counted<'_, S> {
    fn slot(&mut self) -> &mut Record {
        self.sink.slot()
    }
    fn filled(&mut self) {
        self.n += 1;
        // The slot just filled (a sink hands out the same slot until it is filled).
        if intscope_core::drop_far_timestamps(self.sink.slot(), self.max_skew_ns) {
            self.skewed += 1;
        }
        self.sink.filled();
    }
}

/// Collector configuration (the `intscope collect --config` file; docs/collector-config.md).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectorConfig {
    /// UDP addresses to receive reports on.
    pub listen: Vec<SocketAddr>,
    /// HTTP API address.
    pub http: SocketAddr,
    /// Receive threads per listen address.
    pub threads: usize,
    /// Socket receive buffer in bytes: `SO_RCVBUFFORCE` when permitted (root or `CAP_NET_ADMIN`),
    /// else `SO_RCVBUF`, capped by `net.core.rmem_max` (with a warning when that gives less).
    pub recv_buffer: usize,
    /// Datagrams one receive call (`recvmmsg`) may take, 1 to [`MAX_BATCH`](crate::ingest::socket::MAX_BATCH).
    pub recv_batch: usize,
    /// Bytes of a receive slot, the largest datagram taken whole (larger ones are discarded as
    /// `oversize`); within [`SLOT_RANGE`](crate::ingest::socket::SLOT_RANGE).
    pub recv_slot: usize,
    /// How often the receive threads publish the snapshot the API reads the live state from
    /// (flows, nodes, queues, links, statistics, `/metrics`), in ms, while reports arrive and
    /// within [`IDLE`](crate::ingest::socket::IDLE) of the last. A large state is published less often: never sooner than
    /// 20 times what the last snapshot cost, so publishing takes at most about a twentieth of
    /// a receive thread (at a million flows, every few seconds).
    pub snapshot_interval_ms: u64,
    /// Accept reports only from these networks (empty: from anywhere).
    pub allow: Vec<IpNet>,
    /// Share the report ports with other processes (`SO_REUSEPORT` across processes). Off, a
    /// port another process holds is an error at start.
    pub reuse_port: bool,
    /// Bounds on the live state (nodes, sources, ports, queues, links, flows).
    pub limits: Limits,
    /// Which headers of the reported packet form the flow key.
    pub flow_key: FlowKeyMode,
    /// INT UDP destination ports of the reported packets (INT_TBD).
    pub int_udp_ports: Vec<u16>,
    /// DSCP value marking INT in reported packets (`null` to disable).
    pub int_dscp: Option<u8>,
    /// Also read INT that carries no marking (neither `int_dscp` nor an `int_udp_ports` port)
    /// where nothing else says it is there. A report's copy whose F bit says the packet carried
    /// INT is read so whatever this says (the report is the marking; the block must be exact
    /// to its reserved bits and lengths). Off by default: the spec leaves the marking to the
    /// operator, and without one any payload can look like INT.
    pub unmarked_int: bool,
    /// The domain registry file (`shared/spec/domains.example.toml` format): sizes of
    /// domain-specific metadata, so that source-only metadata is not read as hops. `intscope
    /// collect` loads it into [`CollectorConfig::registry`].
    pub domains: Option<std::path::PathBuf>,
    /// The loaded domain registry (from `domains`, or set by an embedding program).
    #[serde(skip)]
    pub registry: Option<Arc<intscope_wire::domain::Registry>>,
    /// A topology file naming the nodes (`crate::names` formats): the console shows the
    /// names beside the IDs. `intscope collect` loads it into [`CollectorConfig::names`].
    pub topology: Option<std::path::PathBuf>,
    /// Node names (from `topology`, or set by an embedding program: the demo, the lab).
    #[serde(skip)]
    pub names: Arc<crate::names::NodeNames>,
    /// The egress Tx utilization value (instruction bit 7) a fully used port reports. INT v2.1
    /// leaves the unit to the device; 1000 (per mille) is what `intscope sim` reports.
    pub tx_util_full_scale: u32,
    /// Detector thresholds.
    pub detect: Thresholds,
    /// Directory of the embedded history store (`null`: keep no history).
    pub data: Option<std::path::PathBuf>,
    /// History store settings.
    pub store: StoreConfig,
    /// Incidents sent to webhook receivers (`[webhook]`).
    pub webhook: crate::webhook_config::WebhookConfig,
    /// Measurement mode (`intscope collect --discard`): receive and count datagrams, decode
    /// nothing — the machine's receive limit with this socket setup, to compare the pipeline to.
    #[serde(skip)]
    pub discard: bool,
}

impl CollectorConfig {
    /// What this configuration exposes that an operator should know at start: report ports
    /// off loopback that take reports from any source (anyone who can reach them can feed the
    /// collector made-up nodes, flows and events).
    pub fn exposure_warnings(&self) -> Vec<String> {
        if !self.allow.is_empty() {
            return Vec::new();
        }
        self.listen
            .iter()
            .filter(|a| !a.ip().is_loopback())
            .map(|a| {
                format!(
                    "reports are accepted from any source on {a} (not loopback, no allowlist): \
                     set `allow` in the config or pass --allow CIDR"
                )
            })
            .collect()
    }
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            listen: vec![SocketAddr::from((
                [0, 0, 0, 0],
                intscope_wire::report::DEFAULT_REPORT_PORT,
            ))],
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            // One: on two cores shared with the senders a second thread was slower (BENCHMARKS.md,
            // end to end).
            threads: 1,
            recv_buffer: 64 << 20,
            // Enough datagrams a call that the system call's cost is spread thin, few enough
            // that the batch's records stay in cache while they are correlated.
            recv_batch: 64,
            // The payload of a jumbo frame: a report datagram from a switch fits.
            recv_slot: 9216,
            snapshot_interval_ms: 100,
            allow: Vec::new(),
            reuse_port: false,
            limits: Limits::default(),
            flow_key: FlowKeyMode::Innermost,
            int_udp_ports: Vec::new(),
            int_dscp: Some(0x17),
            unmarked_int: false,
            domains: None,
            registry: None,
            topology: None,
            names: Arc::default(),
            tx_util_full_scale: 1000,
            detect: Thresholds::default(),
            data: Some("intscope-data".into()),
            store: StoreConfig::default(),
            webhook: crate::webhook_config::WebhookConfig::default(),
            discard: false,
        }
    }
}

/// Everything the ingest threads, the replay and the API share.
#[derive(Debug)]
pub struct Collector {
    /// Configuration.
    pub config: CollectorConfig,
    detect: DetectConfig,
    /// Correlation state (sharded, locks inside).
    pub state: State,
    /// Counters.
    pub stats: IngestStats,
    stop: AtomicBool,
    /// The history store, when configured.
    pub store: Option<Arc<dyn Store>>,
    /// Counters of the store path.
    pub store_stats: Arc<StoreStats>,
    raw: Mutex<Vec<(u64, IpAddr, Vec<u8>)>>,
    /// Raw datagrams offered since the last flush.
    raw_taken: std::sync::atomic::AtomicUsize,
    /// Raw datagrams not kept because the per-flush sample was full.
    pub raw_skipped: AtomicU64,
    /// Receive threads running: while there are any, they publish the readers' snapshots.
    pub(crate) receivers: AtomicUsize,
    /// What readers see: the latest snapshot (held only to clone or swap the pointer).
    published: Mutex<Arc<Published>>,
    /// One publisher at a time.
    publishing: Mutex<()>,
    /// Wall time (ns) from which the next snapshot is due.
    next_publish_ns: AtomicU64,
    /// What the last snapshot cost to take, ns.
    publish_cost_ns: AtomicU64,
}

/// A published snapshot: the live state and the ingest counters at one moment, the counters read
/// first, so that every datagram they count has its records in the state.
#[derive(Debug, Default)]
pub struct Published {
    /// The live state.
    pub state: Snapshot,
    /// The ingest counters.
    pub ingest: IngestCounts,
    /// When it was taken (ns since the epoch; 0: never).
    pub at_ns: u64,
    /// What the previous one cost to take, ns.
    pub previous_cost_ns: u64,
}

/// Publishing may take at most about one part in this of a receive thread's time: the next
/// snapshot is due this many times the last one's cost after it, when that is longer than
/// `snapshot_interval_ms`.
const PUBLISH_BUDGET: u64 = 20;

impl std::fmt::Debug for dyn Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Collector {
    /// A collector with this configuration; opens the history store when `data` is set.
    pub fn open(config: CollectorConfig) -> Result<Arc<Self>, StoreError> {
        let store = crate::store::open(config.data.as_deref(), &config.store)?;
        // One shard of each kind per receive thread: threads correlate side by side.
        let threads = config.threads.max(1) * config.listen.len().max(1);
        let state = State::with_limits(config.detect.clone(), config.limits, threads);
        match &store {
            Some(s) => {
                state.continue_event_ids(s.next_event_id()?);
                state.continue_incident_ids(s.next_incident_id()?);
            }
            // Nothing would read a flow's per-interval latency.
            None => state.keep_intervals(false),
        }
        let detect = DetectConfig {
            int_udp_ports: config.int_udp_ports.clone(),
            dscp: config.int_dscp.map(|v| intscope_wire::locate::DscpMatch {
                value: v,
                mask: 0x3f,
            }),
            unmarked_int: config.unmarked_int,
            domains: config.registry.clone(),
            truncated: true,
            ..DetectConfig::default()
        };
        Ok(Arc::new(Collector {
            state,
            detect,
            config,
            stats: IngestStats::default(),
            stop: AtomicBool::new(false),
            store,
            store_stats: Arc::new(StoreStats::default()),
            raw: Mutex::new(Vec::new()),
            raw_taken: std::sync::atomic::AtomicUsize::new(0),
            raw_skipped: AtomicU64::new(0),
            receivers: AtomicUsize::new(0),
            published: Mutex::new(Arc::default()),
            publishing: Mutex::new(()),
            next_publish_ns: AtomicU64::new(0),
            publish_cost_ns: AtomicU64::new(0),
        }))
    }

    /// Starts the store's flusher and writer threads (no-op without a store). The handle's
    /// `finish` flushes what is left and waits for the writer.
    pub fn start_store(self: &Arc<Self>) -> Option<StoreHandle> {
        let Some(store) = self.store.as_ref().map(Arc::clone) else {
            self.start_change_discarder();
            return None;
        };
        let (tx, writer) = spawn_writer(
            store,
            self.config.store.clone(),
            Arc::clone(&self.store_stats),
        );
        let c = Arc::clone(self);
        let flusher = Flusher::new(tx.clone(), Arc::clone(&self.store_stats));
        let flusher = std::thread::Builder::new()
            .name("store-flusher".into())
            .spawn(move || {
                let mut last_event = c.state.events().next_id();
                let interval = Duration::from_millis(c.config.store.flush_interval_ms.max(10));
                let longest = interval * c.config.store.max_stretch.max(1);
                // Wall-clock time: with back-pressure, ingest waits for this flush.
                let mut last = std::time::Instant::now();
                // When the next flush is due: an interval after the last, or later while
                // ingest is short of CPU (never with back-pressure: ingest waits for it).
                let mut due = last + interval;
                let mut pressure = pressure::Pressure::new(&c.stats);
                // Whether the pressure was judged for this `due` (once per interval: a flush
                // the busy writer defers is retried every tick without judging again).
                let mut judged = false;
                // After a stop the receive threads still read their sockets' backlogs: the final
                // flush waits for them, so that what they read is stored too.
                while !c.stopped() || c.receivers.load(Ordering::SeqCst) > 0 {
                    std::thread::sleep(Duration::from_millis(10));
                    let now = std::time::Instant::now();
                    if now < due {
                        continue;
                    }
                    if !c.config.store.backpressure && !judged && now < last + longest {
                        judged = true;
                        if pressure.under_pressure(&c.stats) {
                            c.store_stats
                                .flushes_stretched
                                .fetch_add(1, Ordering::Relaxed);
                            due = (now + interval).min(last + longest);
                            judged = false;
                            continue;
                        }
                    }
                    // A deferred flush is retried at the next tick, not a whole interval later.
                    if flusher.offer_parts(|| c.take_batch(&mut last_event)) {
                        last = std::time::Instant::now();
                        due = last + interval;
                        judged = false;
                        // Pressure is judged over each interval since a flush.
                        pressure.under_pressure(&c.stats);
                    }
                }
                // Events still waiting for their incidents go now, as they are.
                c.state.settle_events();
                flusher.finish_parts(|| c.take_batch(&mut last_event));
            })
            .ok()?;
        Some(StoreHandle {
            flusher,
            writer,
            tx,
        })
    }

    /// Without a store, forgets at each flush interval what a flush would have taken (changed
    /// flows, interval aggregates, changed incidents), so it does not pile up for a flush that
    /// never comes. The thread ends when the collector stops.
    fn start_change_discarder(self: &Arc<Self>) {
        let c = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("change-discarder".into())
            .spawn(move || {
                let interval = Duration::from_millis(c.config.store.flush_interval_ms.max(10));
                let mut last = std::time::Instant::now();
                while !c.stopped() {
                    std::thread::sleep(Duration::from_millis(10));
                    if last.elapsed() >= interval {
                        intscope_core::discard_changes(&c.state);
                        last = std::time::Instant::now();
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no thread to discard changes without a store: {e}");
        }
    }

    /// Begins a flush: the parts of at most `store.flush_chunk_flows` flow rows each.
    fn take_batch(&self, last_event: &mut u64) -> Option<FlushTake<'_>> {
        let raw = self
            .raw
            .lock()
            .map(|mut r| {
                self.raw_taken.store(0, Ordering::Relaxed);
                std::mem::take(&mut *r)
            })
            .unwrap_or_default();
        Some(FlushTake::new(
            &self.state,
            last_event,
            raw,
            &self.store_stats,
            self.config.store.flush_chunk_flows,
        ))
    }

    /// Accounts and processes one datagram (its UDP payload) from `src` at `time_ns`: the
    /// receive threads' [`Collector::decode`] and [`Collector::correlate`] for one datagram.
    pub fn ingest(&self, payload: &[u8], src: IpAddr, time_ns: u64, batch: &mut RecordBatch) {
        self.decode(payload, src, time_ns, batch);
        self.correlate(batch);
    }

    /// Accounts one datagram and decodes its reports into `batch`, without the state lock (so
    /// receive threads decode in parallel).
    pub fn decode(&self, payload: &[u8], src: IpAddr, time_ns: u64, batch: &mut RecordBatch) {
        let mut tally = Tally::default();
        self.decode_counted(payload, src, time_ns, batch, &mut tally);
        self.count(&tally);
    }

    /// [`Collector::decode`] with the datagram's common outcomes counted in `tally`, for
    /// [`Collector::count`] to add once per receive batch: three shared counters moved per
    /// datagram were a cache line the receive threads took from each other. The records go to
    /// `batch`, or to any other sink (one that sorts them by flow shard, say).
    pub fn decode_counted(
        &self,
        payload: &[u8],
        src: IpAddr,
        time_ns: u64,
        batch: &mut impl RecordSink,
        tally: &mut Tally,
    ) {
        tally.received += 1;
        if !self.config.allow.is_empty() && !self.config.allow.iter().any(|n| n.contains(&src)) {
            self.stats.discard(Discard::NotAllowed);
            return;
        }
        if payload.is_empty() {
            self.stats.discard(Discard::ZeroLength);
            return;
        }
        if self.store.is_some() {
            self.keep_raw(payload, src, time_ns);
        }
        let mut out = Counted {
            sink: batch,
            n: 0,
            max_skew_ns: self.config.detect.clock_skew_max_ns,
            skewed: 0,
        };
        let result = decode_into(
            payload,
            time_ns,
            &self.detect,
            self.config.flow_key,
            &mut out,
        );
        let n = out.n;
        tally.reports += n as u64;
        if out.skewed > 0 {
            // Rare: a shared counter, not the batch tally.
            self.stats
                .clock_skewed
                .fetch_add(out.skewed, Ordering::Relaxed);
        }
        match result {
            Ok(_) => tally.accepted += 1,
            Err(e) => {
                // Reports decoded before the error are kept; the datagram counts as discarded.
                let count = self.stats.discard(Discard::of(&e, n));
                let msg = format!("from {src}: {e}");
                if count < 10 || count.is_power_of_two() {
                    tracing::warn!(discarded = count + 1, "telemetry report {msg}");
                }
                if let Ok(mut last) = self.stats.last_error.lock() {
                    *last = Some(msg);
                }
            }
        }
    }

    /// Adds a receive batch's tally to the shared counters and empties it.
    pub fn count(&self, tally: &Tally) {
        for (counter, n) in [
            (&self.stats.received, tally.received),
            (&self.stats.accepted, tally.accepted),
            (&self.stats.reports, tally.reports),
            (&self.stats.recv_calls, tally.recv_calls),
            (&self.stats.recv_full, tally.recv_full),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Runs the decoded records through correlation and detection (each shard's part under its
    /// lock once: see [`State::process_batch`]) and empties the batch.
    pub fn correlate(&self, batch: &mut RecordBatch) {
        self.state.process_batch(batch.records());
        batch.clear();
    }

    /// Keeps a copy of the datagram for the store's raw ring, up to `raw_per_flush` per flush;
    /// past that only a counter moves (no lock per datagram).
    fn keep_raw(&self, payload: &[u8], src: IpAddr, time_ns: u64) {
        let limit = self.config.store.raw_per_flush;
        if self.raw_taken.fetch_add(1, Ordering::Relaxed) < limit
            && let Ok(mut raw) = self.raw.lock()
            && raw.len() < limit
        {
            raw.push((time_ns, src, payload.to_vec()));
        } else {
            self.raw_skipped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lets detectors act on the passing of time without reports (see [`State::tick`]).
    pub fn tick(&self, time_ns: u64) {
        self.state.tick(time_ns);
    }

    /// Counts a datagram discarded for `reason` before decoding, keeping `what` (from `src`) as
    /// the last error.
    pub(crate) fn note_discard(&self, reason: Discard, src: IpAddr, what: impl FnOnce() -> String) {
        let count = self.stats.discard(reason);
        if count < 10 || count.is_power_of_two() {
            let msg = format!("from {src}: {}", what());
            tracing::warn!(discarded = count + 1, "telemetry report {msg}");
            if let Ok(mut last) = self.stats.last_error.lock() {
                *last = Some(msg);
            }
        }
    }

    /// Counts a datagram larger than a receive slot (`recv_slot`): received, and discarded
    /// `oversize` without decoding, as the kernel cut it (a replay counts it the same way).
    pub(crate) fn note_oversize(&self, src: IpAddr, tally: &mut Tally) {
        tally.received += 1;
        let slot = self.config.recv_slot;
        self.note_discard(Discard::Oversize, src, || {
            format!("datagram larger than recv_slot ({slot} bytes)")
        });
    }

    /// A receive thread's idle work: detector ticks, and the snapshot catching up. A snapshot
    /// that lacks datagrams already counted is published now, however long the last one took
    /// (the thread has nothing else to do); otherwise when due.
    pub(crate) fn idle(&self, now: u64) {
        self.tick(now);
        let behind = self.current().ingest.received != self.stats.received.load(Ordering::Relaxed);
        if behind && let Ok(_publishing) = self.publishing.try_lock() {
            self.publish_locked(now);
        } else {
            self.publish_due(now);
        }
    }

    /// What readers see (the API, `/metrics`): the latest published snapshot, never a shard
    /// lock. Without receive threads (a replay, a test) nobody else publishes, so a snapshot the
    /// state has moved on from is brought up to date here: no receive thread waits then.
    pub fn snapshot(&self) -> Arc<Published> {
        let current = self.current();
        if self.receivers.load(Ordering::SeqCst) == 0 && self.state.changed_since(&current.state) {
            let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
            return self.publish_locked(now_ns());
        }
        current
    }

    /// Runs `f` on the incident log for a reader. While receive threads run, the shards hand
    /// their observations over at every sweep and tick, so only the log's lock is taken; without
    /// them (a replay, a test) the shards are asked to hand over first.
    pub fn with_incidents<T>(&self, f: impl FnOnce(&mut intscope_core::IncidentLog) -> T) -> T {
        if self.receivers.load(Ordering::SeqCst) == 0 {
            self.state.with_incidents(f)
        } else {
            f(&mut self.state.events().incidents)
        }
    }

    fn current(&self) -> Arc<Published> {
        Arc::clone(&self.published.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Publishes a snapshot if one is due at `now` (wall time, ns) and no other thread is
    /// publishing: every `snapshot_interval_ms`, or 20 times the last one's cost
    /// when that is longer.
    pub fn publish_due(&self, now: u64) {
        if now < self.next_publish_ns.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(_publishing) = self.publishing.try_lock() {
            // Another thread may have published while this one waited for the flag.
            if now >= self.next_publish_ns.load(Ordering::Relaxed) {
                self.publish_locked(now);
            }
        }
    }

    /// Publishes a snapshot now; the caller holds `publishing`.
    fn publish_locked(&self, now: u64) -> Arc<Published> {
        let started = std::time::Instant::now();
        let previous = self.current();
        // Counters first: the datagrams they count were correlated before they were counted.
        let ingest = self.stats.counts();
        let state = self.state.snapshot(Some(&previous.state));
        drop(previous);
        let p = Arc::new(Published {
            state,
            ingest,
            at_ns: now,
            previous_cost_ns: self.publish_cost_ns.load(Ordering::Relaxed),
        });
        let old = std::mem::replace(
            &mut *self.published.lock().unwrap_or_else(|e| e.into_inner()),
            Arc::clone(&p),
        );
        // What the old snapshot does not share with the new one is freed here, or by the last
        // reader holding it.
        drop(old);
        let cost = started.elapsed().as_nanos() as u64;
        let interval = self.config.snapshot_interval_ms.saturating_mul(1_000_000);
        self.publish_cost_ns.store(cost, Ordering::Relaxed);
        let gap = cost.saturating_mul(PUBLISH_BUDGET).max(interval);
        self.next_publish_ns
            .store(now.saturating_add(gap), Ordering::Relaxed);
        p
    }

    /// Asks the receive threads to stop (they notice within their poll interval).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The running store threads.
pub struct StoreHandle {
    flusher: JoinHandle<()>,
    writer: JoinHandle<()>,
    tx: std::sync::mpsc::SyncSender<intscope_core::Batch>,
}

impl StoreHandle {
    /// After [`Collector::stop`]: waits for the final flush and for the writer to commit it.
    pub fn finish(self) {
        let _ = self.flusher.join();
        drop(self.tx);
        let _ = self.writer.join();
    }
}
