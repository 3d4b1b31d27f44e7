//! History: flow summaries, each flow's latency series, per-interval queue and port aggregates,
//! events, incidents and a bounded ring of raw report datagrams. Two backends sit behind
//! [`Store`]: the embedded SQLite database ([`SqliteStore`], WAL, zero setup, the default) and
//! ClickHouse ([`ClickHouseStore`], one server or a sharded cluster that several collectors
//! write into and any `intscope serve` reads the whole fabric from). Schemas:
//! `docs/collector-store.md`; the cluster: `docs/scale-out.md`.
//!
//! Writes are batched off the ingest path: a flusher takes what changed from the live state
//! once per interval as typed rows ([`intscope_core::Batch`]) and hands them to a writer thread,
//! in parts of a bounded number of flows ([`FlushTake`]) so a flush's memory does not grow with
//! the flows; the writer commits the parts (one transaction in SQLite). Ingest never waits for
//! the store: when the writer falls behind, the next flush is put off until it is done, so that
//! flush covers a longer interval in as many rows as one (history coarser for a while, no
//! report dropped for it); the writer runs at a lower CPU priority than the receive threads
//! ([`priority`]), so a machine short of CPU serves ingest first; and while the receive threads
//! fall behind, flushes are put off up to `max_stretch` intervals
//! (`ingest::pressure`). A kill -9
//! loses what came after the newest committed flush was taken (`store.lag_ms`): one interval
//! while the store keeps up. `backpressure = true` trades the other way
//! ([`StoreStats::wait_for_writer`]): ingest pauses rather than let a flush hold more than one
//! interval. Counters are stored as sums over the
//! collector's lifetimes: each write adds what changed since the last one (a restart adds, never
//! overwrites). Reads (the API) have a deadline and a bounded number run at once. With
//! ClickHouse, a write a shard refuses is spooled to disk and retried ([`spool`]), so the writer
//! acknowledges it and ingest goes on through an outage.

use crate::view::FlowSummary;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use intscope_core::{Batch, FlowRef, RowSink, State};

pub mod clickhouse;
pub mod priority;
pub mod read;
mod schema;
pub mod spool;
mod sqlite;

pub use self::clickhouse::{ClickHouseConfig, ClickHouseStore};
pub use read::{
    DEFAULT_ROLLUP_AFTER, FlowInterval, Listed, Page, QueueInterval, Resolution, RowCounts,
    StoredEvent, StoredIncident, Totals,
};
pub use sqlite::SqliteStore;

/// A store error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite said no.
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// ClickHouse said no, or could not be reached.
    #[error("store: clickhouse: {0}")]
    ClickHouse(String),
    /// The directory could not be created.
    #[error("store: {path}: {source}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Another process writes to this store directory (its lock is held).
    #[error(
        "store: {path} is being written by another intscope ({holder}); give each collector its own --data directory, or stop the other first"
    )]
    Locked {
        /// The directory.
        path: std::path::PathBuf,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// The query ran past its deadline and was interrupted (the API answers 504).
    #[error("store: query timed out")]
    Timeout,
    /// Every reader is busy and the wait queue is full (the API answers 503).
    #[error("store: too many queries at once")]
    Busy,
    /// The store (a server, or a shard of a cluster) cannot be reached now (the API answers
    /// 503 with this message, never the database's own text).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A query parameter is out of range or a cursor is not one this store issued (400).
    #[error("{0}")]
    BadRequest(String),
    /// A stored value could not be read back as what the store writes there (a damaged or
    /// foreign database; 500).
    #[error("store: unreadable row: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// The error as an API client sees it: the database's own error text stays in the log
    /// (it names internals and changes between versions), the rest is said as it is.
    pub fn public_message(&self) -> String {
        match self {
            StoreError::ClickHouse(m) => {
                tracing::error!("store: clickhouse: {m}");
                "the history store failed to answer (ClickHouse's error is in the log)".into()
            }
            StoreError::Sqlite(e) => {
                tracing::error!("store: sqlite: {e}");
                "the history store failed to answer (SQLite's error is in the log)".into()
            }
            e => e.to_string(),
        }
    }
}

/// Most rows one history query returns (`limit` above it is a 400).
pub const MAX_HISTORY_LIMIT: u32 = 10_000;

/// How long a history query may run by default before SQLite interrupts it.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader connections of a [`SqliteStore`] (queries beyond wait for one, within their deadline).
pub const READERS: usize = 2;

/// SQLite page cache of the writer connection, KiB (`PRAGMA cache_size`; SQLite's default is
/// 2 000): part of the store's memory bound (`docs/collector-store.md`, Memory).
pub const WRITER_CACHE_KIB: i64 = 65_536;

/// SQLite page cache of each reader connection, KiB.
pub const READER_CACHE_KIB: i64 = 2_048;

/// Filter of history queries.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct HistoryQuery {
    /// From this time (ns).
    pub since: Option<u64>,
    /// Until this time (ns).
    pub until: Option<u64>,
    /// Event kind.
    pub kind: Option<String>,
    /// Node.
    pub node: Option<u32>,
    /// At most this many rows (default 500, queues 10 000; at most [`MAX_HISTORY_LIMIT`]).
    pub limit: Option<u32>,
    /// Continue after the last row of a previous page (its `next`; opaque).
    pub cursor: Option<String>,
    /// Deadline of the query (default [`DEFAULT_QUERY_TIMEOUT`]); set by the API, not the URL.
    #[serde(skip)]
    pub timeout: Option<Duration>,
    /// A series' resolution (`raw`, `1m`); default: by the range ([`Resolution`]).
    pub resolution: Option<Resolution>,
    /// Series over longer ranges are read per minute (default [`DEFAULT_ROLLUP_AFTER`]); set
    /// by the API, not the URL.
    #[serde(skip)]
    pub rollup_after: Option<Duration>,
}

impl HistoryQuery {
    /// `kind` as an event kind's label; a 400 naming the kinds when it is none (an unknown
    /// kind would otherwise select nothing and look like an empty history).
    pub fn event_kind(&self) -> Result<Option<&'static str>, StoreError> {
        let labels = intscope_core::EventKind::ALL.map(|k| k.label());
        known_kind(self.kind.as_deref(), &labels)
    }

    /// `kind` as an incident kind's label; a 400 naming the kinds when it is none.
    pub fn incident_kind(&self) -> Result<Option<&'static str>, StoreError> {
        let labels = intscope_core::IncidentKind::ALL.map(|k| k.label());
        known_kind(self.kind.as_deref(), &labels)
    }

    /// The page size: `limit`, or `default`; a 400 above [`MAX_HISTORY_LIMIT`] or at 0.
    pub fn page_size(&self, default: u32) -> Result<u32, StoreError> {
        match self.limit.unwrap_or(default) {
            0 => Err(StoreError::BadRequest("limit must be at least 1".into())),
            n if n > MAX_HISTORY_LIMIT => Err(StoreError::BadRequest(format!(
                "limit {n} is above the maximum of {MAX_HISTORY_LIMIT}; page with `cursor`"
            ))),
            n => Ok(n),
        }
    }

    /// The cursor's two numbers, if it is one of `kind` (`e`, `f`, `q`, `i`).
    pub(crate) fn cursor(&self, kind: char) -> Result<Option<(i64, i64)>, StoreError> {
        let Some(c) = self.cursor.as_deref().filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        let bad =
            || StoreError::BadRequest(format!("cursor {c:?} is not one this endpoint issued"));
        let rest = c
            .strip_prefix(kind)
            .and_then(|r| r.strip_prefix('.'))
            .ok_or_else(bad)?;
        let (a, b) = rest.split_once('.').unwrap_or((rest, "0"));
        Ok(Some((
            a.parse().map_err(|_| bad())?,
            b.parse().map_err(|_| bad())?,
        )))
    }
}

/// The tables every store keeps, as `counts` reports them.
pub const COUNTED_TABLES: [&str; 7] = [
    "events",
    "flows",
    "flow_stats",
    "queue_stats",
    "port_stats",
    "raw_reports",
    "incidents",
];

/// A history backend: writes typed rows ([`RowSink`]) and answers the API's history queries.
pub trait Store: RowSink<Error = StoreError> + Send + Sync {
    /// Deletes history older than `before_ns` (report time) and raw datagrams beyond the newest
    /// `keep_raw`; events and incidents go by the collector's own clock instead, once stored
    /// before `received_before_ns` (a switch whose clock is off would otherwise have its
    /// events deleted as soon as they are stored, or kept forever).
    fn prune(
        &self,
        before_ns: u64,
        received_before_ns: u64,
        keep_raw: u64,
    ) -> Result<(), StoreError>;
    /// The next free event ID (to continue numbering after a restart).
    fn next_event_id(&self) -> Result<u64, StoreError>;
    /// The next free incident ID (a restarted collector must not reuse the IDs of stored
    /// incidents: the store keeps an incident's newest version by ID).
    fn next_incident_id(&self) -> Result<u64, StoreError>;
    /// Stored events, newest first (`{"events": [...], "next": cursor}` as JSON).
    fn events(&self, q: &HistoryQuery) -> Result<Page<StoredEvent>, StoreError>;
    /// Stored flow summaries, most recently seen first (`{"flows": [...], "next": cursor}`).
    fn flows(&self, q: &HistoryQuery) -> Result<Page<FlowSummary>, StoreError>;
    /// Stored queue aggregates, oldest first (`{"queues": [...], "next": cursor}`).
    fn queue_series(&self, q: &HistoryQuery) -> Result<Page<QueueInterval>, StoreError>;
    /// One flow's latency series (per-interval aggregates), oldest first; the newest `limit`
    /// rows (default 600) between `since` and `until`.
    fn flow_series(
        &self,
        flow: &FlowRef,
        q: &HistoryQuery,
    ) -> Result<Vec<FlowInterval>, StoreError>;
    /// Stored incidents, most recently started first, each as its newest version
    /// (`{"incidents": [...], "next": cursor}`). Filters: `since`/`until` (the incident's span
    /// overlaps them), `kind`, `node`.
    fn incidents(&self, q: &HistoryQuery) -> Result<Page<StoredIncident>, StoreError>;
    /// One flow's stored summary (as in [`Store::flows`]), if it is stored.
    fn flow(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Option<FlowSummary>, StoreError>;
    /// Row counts per table ([`COUNTED_TABLES`]).
    fn counts(&self) -> Result<RowCounts, StoreError>;
    /// Rows per table as cheaply as the backend can tell, for the writer's periodic snapshot
    /// (`/api/stats`): [`Store::counts`] by default; ClickHouse counts stored rows, versions
    /// not yet merged included, from its parts' metadata instead of counting distinct keys.
    fn rows_stored(&self) -> Result<RowCounts, StoreError> {
        self.counts()
    }
    /// The counters summed over every run that wrote to this store (in a shared store, every
    /// collector's: the fabric's).
    fn totals(&self) -> Result<Totals, StoreError> {
        Ok(Totals::new())
    }
    /// This collector's own counters summed over its runs: [`Store::totals`] for a store of one
    /// collector (SQLite); a shared store keeps the rows of this collector's name only.
    fn own_totals(&self) -> Result<Totals, StoreError> {
        self.totals()
    }
    /// Whether other collectors write this store too (then [`Store::totals`] is the fabric's).
    fn shared(&self) -> bool {
        false
    }
    /// The spool of writes waiting for the store to take them (ClickHouse), if the backend
    /// has one.
    fn spool_stats(&self) -> Option<spool::SpoolStats> {
        None
    }
}

/// A distinct ID per opened store (time of opening, made unique within the process), naming
/// this run's rows.
pub(crate) fn new_run_id() -> i64 {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let now = crate::clock::now_ns() & ((1 << 62) - 1);
    i(now.wrapping_add(SEQ.fetch_add(1, Ordering::Relaxed)))
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Per-hop values as a JSON array, source first, without the unused hops at the end.
pub(crate) fn per_hop_json(values: &[Option<u32>]) -> String {
    let used = values
        .iter()
        .rposition(Option::is_some)
        .map_or(0, |p| p + 1);
    serde_json::to_string(&values[..used]).unwrap_or_default()
}

/// The order of an incident's versions: later updates, then its end, win (every store keeps the
/// newest version it was given of each incident).
pub(crate) fn incident_version(n: &intscope_core::Incident) -> u64 {
    (n.updates << 1) | u64::from(n.state == intscope_core::IncidentState::Resolved)
}

/// Default of [`StoreConfig::flush_chunk_flows`]: a part's rows take a few tens of MiB at most,
/// and the writer commits a part in a fraction of a second.
pub const DEFAULT_FLUSH_CHUNK_FLOWS: usize = 65_536;

/// Default of [`StoreConfig::nice`]: a nice-10 thread gets about a tenth of a core's time
/// against a busy nice-0 one (the kernel's weights 110 and 1024), and all of an idle core.
pub const DEFAULT_STORE_NICE: u8 = 10;

/// Default of [`StoreConfig::max_stretch`]: a flush put off for ingest covers at most 8
/// intervals (8 s at the default interval), what a kill -9 can lose then.
pub const DEFAULT_MAX_STRETCH: u32 = 8;

/// Store settings (the `[store]` table of the collector config).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Milliseconds between flushes: the most input a kill -9 loses while the store keeps up.
    pub flush_interval_ms: u64,
    /// Hours of history kept.
    pub retention_hours: u64,
    /// Raw report datagrams kept (the newest).
    pub raw_reports: u64,
    /// Raw datagrams kept per flush interval at most (the rest are counted, not kept).
    pub raw_per_flush: usize,
    /// Ingest never waits for the store: when the writer falls behind, flushes stretch over
    /// longer intervals and a kill -9 loses what came after the newest committed flush's take
    /// (false, the default: no report is dropped for the store, `store.lag_ms` says what is
    /// at risk). Or ingest waits for the store rather than let a flush hold more than one
    /// interval, so a kill -9 loses at most `flush_interval_ms` at any load (true: under
    /// overload the socket buffers fill and the kernel drops datagrams, counted).
    pub backpressure: bool,
    /// Nice steps the store's writer thread runs below the receive threads
    /// (0–19; 0: the same priority): on a machine short of CPU the kernel serves ingest first
    /// and the store's flushes stretch ([`priority`]). Not with `backpressure`, where ingest
    /// waits for the writer.
    pub nice: u8,
    /// While the receive threads are short of CPU (`ingest::pressure`), a due flush
    /// is put off, for at most this many flush intervals since the last one (1: never): the
    /// store writes less while ingest needs the machine. Not with `backpressure`.
    pub max_stretch: u32,
    /// Most changed flows a flush takes from the live state and hands to the writer at once
    /// (the flush's memory bound; a flush of more is streamed in parts of this many, committed
    /// in one transaction).
    pub flush_chunk_flows: usize,
    /// Keep history in ClickHouse instead of the `data` directory's SQLite file
    /// (`[store.clickhouse]`: `urls`, `cluster`, `database`, `source`; docs/scale-out.md).
    pub clickhouse: Option<ClickHouseConfig>,
}

/// Opens the configured history store: ClickHouse when `[store.clickhouse]` is set, else the
/// SQLite file in `data`, else none.
pub fn open(
    data: Option<&std::path::Path>,
    cfg: &StoreConfig,
) -> Result<Option<Arc<dyn Store>>, StoreError> {
    Ok(match (&cfg.clickhouse, data) {
        (Some(ch), _) => Some(Arc::new(ClickHouseStore::open(ch.clone())?)),
        (None, Some(dir)) => Some(Arc::new(SqliteStore::open(dir)?)),
        (None, None) => None,
    })
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            flush_interval_ms: 1000,
            retention_hours: 24,
            raw_reports: 100_000,
            raw_per_flush: 1000,
            backpressure: false,
            nice: DEFAULT_STORE_NICE,
            max_stretch: DEFAULT_MAX_STRETCH,
            flush_chunk_flows: DEFAULT_FLUSH_CHUNK_FLOWS,
            clickhouse: None,
        }
    }
}

/// What the receive threads' back-pressure looks at (see [`StoreStats::wait_for_writer`]).
#[derive(Debug, Default)]
struct Gate {
    /// When ingest must stop: by then it will have run one flush interval since the take of
    /// the newest committed batch (`None`: no writer, no back-pressure).
    deadline: Option<Instant>,
    /// The flush interval.
    interval: Duration,
    /// The writer thread ended: nothing to wait for.
    writer_gone: bool,
}

/// Counters of the store path, and the hand-off between the receive threads and the writer.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Batches committed.
    pub batches: AtomicU64,
    /// Batches that failed to commit (logged).
    pub failed: AtomicU64,
    /// Batches dropped because the writer fell behind: always 0, as [`Flusher`] defers a flush
    /// and waits for the writer to take each part instead (kept for the API's readers).
    pub backlog_dropped: AtomicU64,
    /// Flushes put off because the writer was still committing the previous batch (ingest
    /// pauses meanwhile, see `ingest_pauses`).
    pub flushes_deferred: AtomicU64,
    /// Flushes put off because the receive threads were short of CPU (`max_stretch`).
    pub flushes_stretched: AtomicU64,
    /// Batches handed to the writer and not yet committed.
    pub pending: AtomicU64,
    /// Parts of flushes handed to the writer (a flush is one part per `flush_chunk_flows`
    /// changed flows, at least one).
    pub parts: AtomicU64,
    /// Events that left the in-memory log before a flush could store them.
    pub events_missed: AtomicU64,
    /// Times a receive thread waited for the store (the next batch was due and not yet
    /// committed); datagrams meanwhile queue in the socket buffer, or the kernel drops and
    /// counts them.
    pub ingest_pauses: AtomicU64,
    /// Milliseconds receive threads spent waiting for the writer, summed over threads.
    pub ingest_paused_ms: AtomicU64,
    /// When the newest committed (or failed) flush was taken ([`now_ms`]; 0: none yet): input
    /// since then is not in the store (`lag_ms`).
    committed_take_ms: AtomicU64,
    /// Rows per table and the stored totals, as the writer last read them (the API's
    /// `/api/stats` shows these rather than query the database while it is being written).
    pub snapshot: Mutex<Option<StoreSnapshot>>,
    gate: Mutex<Gate>,
    /// When ingest must next check the gate ([`now_ms`]; 0: no writer, never): the receive
    /// threads' fast path is one load and a clock read.
    gate_deadline_ms: AtomicU64,
    committed: Condvar,
}

impl StoreStats {
    /// Adds the store counters to `out`, with `raw_not_kept` (raw datagrams the per-flush
    /// sample had no room for, counted by ingest).
    pub fn sample(&self, raw_not_kept: u64, out: &mut intscope_core::counters::Samples) {
        use intscope_core::counters as c;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.add(&c::STORE_BATCHES, &[], g(&self.batches));
        out.add(&c::STORE_FAILED, &[], g(&self.failed));
        out.add(&c::STORE_BACKLOG_DROPPED, &[], g(&self.backlog_dropped));
        out.add(&c::STORE_FLUSHES_DEFERRED, &[], g(&self.flushes_deferred));
        out.add(&c::STORE_FLUSHES_STRETCHED, &[], g(&self.flushes_stretched));
        out.add(&c::STORE_INGEST_PAUSES, &[], g(&self.ingest_pauses));
        out.add(&c::STORE_INGEST_PAUSED, &[], g(&self.ingest_paused_ms));
        out.add(&c::STORE_EVENTS_MISSED, &[], g(&self.events_missed));
        out.add(&c::STORE_LAG, &[], self.lag_ms());
        out.add(&c::STORE_RAW_NOT_KEPT, &[], raw_not_kept);
    }
}

/// What the writer last read of the store's contents (`None` where the read failed).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StoreSnapshot {
    /// Rows per table ([`Store::rows_stored`]).
    pub rows: Option<RowCounts>,
    /// This collector's stored totals ([`Store::own_totals`]).
    pub totals: Option<Totals>,
    /// Every collector's ([`Store::totals`]), for a shared store only.
    pub fabric_totals: Option<Totals>,
}

/// Milliseconds since the first call in this process (1 or more; 0 means "no deadline").
fn now_ms(at: Instant) -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    at.saturating_duration_since(epoch).as_millis() as u64 + 1
}

impl StoreStats {
    /// Milliseconds of input not yet in the store: since the newest committed flush was taken
    /// (since the writer started, before one), what a kill -9 would lose now.
    pub fn lag_ms(&self) -> u64 {
        match self.committed_take_ms.load(Ordering::Relaxed) {
            0 => 0,
            t => now_ms(Instant::now()).saturating_sub(t),
        }
    }

    /// Back-pressure, called by a receive thread before it adds a batch of records to the live
    /// state: once ingest has run one flush interval since the take of the newest committed
    /// batch (the writer still commits the next one, or the flusher is late), waits until a
    /// newer batch is committed. So the input the file does not hold never spans more than one
    /// interval of ingest, and a kill -9 loses at most that, however slow the disk or busy the
    /// CPU; time spent waiting does not count, since nothing was taken in meanwhile.
    pub fn wait_for_writer(&self) {
        let deadline = self.gate_deadline_ms.load(Ordering::Acquire);
        if deadline == 0 || now_ms(Instant::now()) < deadline {
            return;
        }
        let mut g = lock(&self.gate);
        let mut waited: Option<Instant> = None;
        while !g.writer_gone && g.deadline.is_some_and(|d| Instant::now() >= d) {
            waited.get_or_insert_with(Instant::now);
            g = self
                .committed
                .wait_timeout(g, Duration::from_millis(50))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        if let Some(since) = waited {
            self.ingest_pauses.fetch_add(1, Ordering::Relaxed);
            self.ingest_paused_ms
                .fetch_add(since.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }

    fn set_deadline(&self, g: &mut Gate, deadline: Instant) {
        g.deadline = Some(deadline);
        self.gate_deadline_ms
            .store(now_ms(deadline), Ordering::Release);
    }

    fn writer_spawned(&self) {
        self.committed_take_ms
            .store(now_ms(Instant::now()), Ordering::Relaxed);
    }

    fn writer_started(&self, interval: Duration) {
        let mut g = lock(&self.gate);
        g.interval = interval;
        g.writer_gone = false;
        self.set_deadline(&mut g, Instant::now() + interval);
    }

    /// The writer is done with a batch taken at `taken_at` (committed or failed: either way
    /// ingest may go on). Ingest ran since the take until now, or until the gate closed: the
    /// rest of an interval is what it may run before the next batch is committed.
    fn batch_done(&self, taken_at: Option<Instant>) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
        if let Some(t) = taken_at {
            self.committed_take_ms
                .fetch_max(now_ms(t), Ordering::Relaxed);
        }
        let mut g = lock(&self.gate);
        if let (Some(t), Some(d)) = (taken_at, g.deadline) {
            let now = Instant::now();
            let ran = d.min(now).saturating_duration_since(t);
            let next = now + g.interval.saturating_sub(ran);
            self.set_deadline(&mut g, next);
        }
        drop(g);
        self.committed.notify_all();
    }

    fn writer_ended(&self) {
        lock(&self.gate).writer_gone = true;
        self.gate_deadline_ms.store(0, Ordering::Release);
        self.committed.notify_all();
    }
}

/// One flush of the live state in parts of at most `chunk` flow rows each
/// ([`intscope_core::FlushTake`]), counting the events it missed in the store's stats.
#[derive(Debug)]
pub struct FlushTake<'a>(intscope_core::FlushTake<'a>);

impl<'a> FlushTake<'a> {
    /// Takes the flush's keys and non-flow content; `chunk` is the most flow rows a part holds.
    pub fn new(
        state: &'a State,
        last_event: &mut u64,
        raw: Vec<(u64, IpAddr, Vec<u8>)>,
        stats: &StoreStats,
        chunk: usize,
    ) -> Self {
        let take = intscope_core::FlushTake::new(state, last_event, raw, chunk);
        stats
            .events_missed
            .fetch_add(take.events_missed(), Ordering::Relaxed);
        FlushTake(take)
    }

    /// Changed flows whose rows are not yet taken.
    pub fn flows_left(&self) -> usize {
        self.0.flows_left()
    }
}

impl Iterator for FlushTake<'_> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        self.0.next()
    }
}

/// Takes what changed since the last flush out of the live state, as one batch (tests, the
/// store bench; the collector streams a flush in parts with [`FlushTake`]).
pub fn collect_batch(
    state: &State,
    last_event: &mut u64,
    raw: Vec<(u64, IpAddr, Vec<u8>)>,
    stats: &StoreStats,
) -> Batch {
    let (b, missed) = intscope_core::collect_batch(state, last_event, raw);
    stats.events_missed.fetch_add(missed, Ordering::Relaxed);
    b
}

/// How often the writer re-reads the row counts for `/api/stats` (a count is a table scan).
const SNAPSHOT_EVERY: Duration = Duration::from_secs(2);

/// Parts a flush may have queued between the flusher and the writer: none, the flusher hands a
/// part over only when the writer takes it (so at most two parts of flow rows exist at once:
/// the one being written and the one being handed over).
pub const WRITER_QUEUE: usize = 0;

/// The writer thread: commits flushes in order, each flush's parts in one transaction; prunes
/// every 60 flushes; refreshes the [`StoreStats::snapshot`] the API shows.
pub fn spawn_writer(
    store: Arc<dyn Store>,
    cfg: StoreConfig,
    stats: Arc<StoreStats>,
) -> (SyncSender<Batch>, JoinHandle<()>) {
    let (tx, rx): (SyncSender<Batch>, Receiver<Batch>) = sync_channel(WRITER_QUEUE);
    stats.writer_spawned();
    if cfg.backpressure {
        stats.writer_started(Duration::from_millis(cfg.flush_interval_ms.max(10)));
    }
    let handle = std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            /// Tells the receive threads the writer is gone, however the thread ends.
            struct Ended(Arc<StoreStats>);
            impl Drop for Ended {
                fn drop(&mut self) {
                    self.0.writer_ended();
                }
            }
            let _ended = Ended(Arc::clone(&stats));
            if !cfg.backpressure {
                // With back-pressure ingest waits for this thread: it must not yield to ingest.
                priority::lower_this_thread(cfg.nice);
            }
            let mut n = 0u64;
            // What the store holds from earlier runs, shown before the first commit.
            let snapshot = |store: &dyn Store| StoreSnapshot {
                rows: store.rows_stored().ok(),
                totals: store.own_totals().ok(),
                fabric_totals: if store.shared() {
                    store.totals().ok()
                } else {
                    None
                },
            };
            *lock(&stats.snapshot) = Some(snapshot(&*store));
            let mut snapshot_at = Some(Instant::now());
            while let Ok(first) = rx.recv() {
                let (taken_at, time_ns) = (first.taken_at, first.time_ns);
                let mut parts = Parts {
                    first: Some(first),
                    rx: &rx,
                    done: false,
                };
                let written = store.write_parts(&mut parts);
                // A failed flush's remaining parts are not written; the next flush starts clean.
                parts.by_ref().for_each(drop);
                stats.batch_done(taken_at);
                match written {
                    Ok(()) => {
                        stats.batches.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("store write failed: {e}");
                    }
                }
                n += 1;
                if n.is_multiple_of(60) {
                    let keep = cfg.retention_hours * 3_600_000_000_000;
                    let horizon = time_ns.saturating_sub(keep);
                    let received = crate::clock::now_ns().saturating_sub(keep);
                    if let Err(e) = store.prune(horizon, received, cfg.raw_reports) {
                        tracing::error!("store prune failed: {e}");
                    }
                }
                if snapshot_at.is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY) {
                    snapshot_at = Some(Instant::now());
                    *lock(&stats.snapshot) = Some(snapshot(&*store));
                }
            }
        })
        .expect("spawning the store writer");
    (tx, handle)
}

/// The parts of one flush as the writer receives them: up to the one without `more` (or the
/// flusher's end).
struct Parts<'a> {
    first: Option<Batch>,
    rx: &'a Receiver<Batch>,
    done: bool,
}

impl Iterator for Parts<'_> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        if self.done {
            return None;
        }
        let part = self.first.take().or_else(|| self.rx.recv().ok());
        self.done = part.as_ref().is_none_or(|p| !p.more);
        part
    }
}

/// Takes batches from the live state for the writer, one at a time: while the previous batch is
/// still being committed the flush is put off, and the receive threads, in
/// [`StoreStats::wait_for_writer`], stop adding to the live state once it holds a full interval
/// not yet committed, so no batch covers more than one interval of input. A flush's parts are
/// handed over one by one as the writer takes them ([`WRITER_QUEUE`]).
#[derive(Debug)]
pub struct Flusher {
    tx: SyncSender<Batch>,
    stats: Arc<StoreStats>,
}

impl Flusher {
    /// A flusher feeding `tx` (from [`spawn_writer`]), accounting in `stats`.
    pub fn new(tx: SyncSender<Batch>, stats: Arc<StoreStats>) -> Self {
        Flusher { tx, stats }
    }

    /// A flush is due: takes a batch with `take` and hands it over, or defers it while the writer
    /// is busy (returns whether a batch was handed over).
    pub fn offer(&self, take: impl FnOnce() -> Option<Batch>) -> bool {
        self.offer_parts(|| take().map(std::iter::once))
    }

    /// [`Flusher::offer`] for a flush in parts ([`FlushTake`]): each part is handed over when
    /// the writer takes it, so the flusher waits on the writer meanwhile (the receive threads
    /// do not: they wait only at the back-pressure gate).
    pub fn offer_parts<I: Iterator<Item = Batch>>(&self, take: impl FnOnce() -> Option<I>) -> bool {
        if self.stats.pending.load(Ordering::Acquire) > 0 {
            self.stats.flushes_deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.hand_over(take)
    }

    /// The last flush, at shutdown: waits for the writer to take it.
    pub fn finish(self, take: impl FnOnce() -> Option<Batch>) {
        self.finish_parts(|| take().map(std::iter::once));
    }

    /// [`Flusher::finish`] for a flush in parts.
    pub fn finish_parts<I: Iterator<Item = Batch>>(self, take: impl FnOnce() -> Option<I>) {
        self.hand_over(take);
    }

    /// Takes a flush and hands its parts over, each stamped with when the take began (input
    /// from then on may be missing from the flush). A part without `more` ends the flush; if
    /// the parts run out before one, an empty part ends it.
    fn hand_over<I: Iterator<Item = Batch>>(&self, take: impl FnOnce() -> Option<I>) -> bool {
        let taken_at = Some(Instant::now());
        let Some(parts) = take() else {
            return false;
        };
        self.stats.pending.fetch_add(1, Ordering::AcqRel);
        let mut ended = false;
        let mut gone = false;
        for mut part in parts.chain(std::iter::once(Batch::default())) {
            part.taken_at = taken_at;
            ended = !part.more;
            if self.tx.send(part).is_err() {
                gone = true;
                break;
            }
            self.stats.parts.fetch_add(1, Ordering::Relaxed);
            if ended {
                break;
            }
        }
        if gone {
            // The writer is gone: no commit will count this flush.
            self.stats.pending.fetch_sub(1, Ordering::AcqRel);
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
        }
        ended && !gone
    }
}

fn known_kind(
    kind: Option<&str>,
    labels: &[&'static str],
) -> Result<Option<&'static str>, StoreError> {
    let Some(kind) = kind else { return Ok(None) };
    match labels.iter().find(|&&l| l == kind) {
        Some(&l) => Ok(Some(l)),
        None => Err(StoreError::BadRequest(format!(
            "kind {kind:?} is none of {}",
            labels.join(", ")
        ))),
    }
}
