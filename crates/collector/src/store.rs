//! History: flow summaries, per-interval queue and port aggregates, events and a bounded ring of
//! raw report datagrams, in an embedded SQLite database (WAL) with zero setup. Schema:
//! `docs/collector-store.md`.
//!
//! Writes are batched off the ingest path: a flusher takes what changed from the live state
//! once per interval and hands it to a writer thread, in parts of a bounded number of flows
//! ([`FlushTake`]) so a flush's memory does not grow with the flows, and the writer commits the
//! parts in one transaction. The live state never waits for the disk. When the writer falls
//! behind, ingest pauses instead ([`StoreStats::wait_for_writer`]): a batch never holds more
//! than one interval of input, so a kill -9 loses at most one interval at any load. Counters are stored as sums over the
//! collector's lifetimes: each write adds what changed since the last one (a restart adds, never
//! overwrites). Readers (the API) have their own connections (WAL: they never wait on a commit),
//! a bounded pool of them, and a deadline enforced inside SQLite (a progress handler), so a query
//! really stops. Backends sit behind [`Store`], so a distributed one (ClickHouse) can replace
//! SQLite without touching the other stages.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use crate::event::{Event, FlowRef};
use crate::flow::{FlowInterval, Path as FlowPath};
use crate::state::State;

/// A store error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite said no.
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The directory could not be created.
    #[error("store: {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The query ran past its deadline and was interrupted (the API answers 504).
    #[error("store: query timed out")]
    Timeout,
    /// Every reader is busy and the wait queue is full (the API answers 503).
    #[error("store: too many queries at once")]
    Busy,
    /// A query parameter is out of range or a cursor is not one this store issued (400).
    #[error("{0}")]
    BadRequest(String),
}

impl StoreError {
    fn from_sqlite(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::OperationInterrupted =>
            {
                StoreError::Timeout
            }
            e => StoreError::Sqlite(e),
        }
    }
}

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
    /// whose counters the store adds to the stored sums once (see [`SqliteStore`]).
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
    /// Queue aggregates of the interval.
    pub queues: Vec<AggRow>,
    /// Port aggregates of the interval.
    pub ports: Vec<AggRow>,
    /// Raw datagrams (time, source, bytes).
    pub raw: Vec<(u64, IpAddr, Vec<u8>)>,
    /// The collector's counters as of this batch (totals of this run: the store keeps their
    /// sums over runs).
    pub totals: Vec<(String, u64)>,
    /// When the flusher began taking the batch from the live state.
    pub taken_at: Option<Instant>,
    /// Further parts of the same flush follow: the writer commits a flush's parts in one
    /// transaction (see [`FlushTake`]).
    pub more: bool,
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
}

impl HistoryQuery {
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

    /// The cursor's two numbers, if it is one of `kind` (`e`, `f`, `q`).
    fn cursor(&self, kind: char) -> Result<Option<(i64, i64)>, StoreError> {
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

/// A page of rows under `name`, with the cursor of the next page (`null` on the last).
fn page(name: &str, mut rows: Vec<(Value, String)>, limit: u32) -> Value {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = more.then(|| rows.last().map(|(_, c)| c.clone())).flatten();
    json!({name: rows.into_iter().map(|(v, _)| v).collect::<Vec<_>>(), "next": next})
}

/// A history backend.
pub trait Store: Send + Sync {
    /// Commits a batch (one transaction).
    fn write(&self, batch: &Batch) -> Result<(), StoreError>;
    /// Commits the parts of one flush, in order, dropping each once written, so the writer
    /// holds one part at a time. A backend that can commits them in one transaction (nothing of
    /// the flush is stored when a part fails); this default commits each part on its own.
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Batch>) -> Result<(), StoreError> {
        for p in parts {
            self.write(&p)?;
        }
        Ok(())
    }
    /// Deletes history older than `before_ns` and raw datagrams beyond the newest `keep_raw`.
    fn prune(&self, before_ns: u64, keep_raw: u64) -> Result<(), StoreError>;
    /// The next free event ID (to continue numbering after a restart).
    fn next_event_id(&self) -> Result<u64, StoreError>;
    /// Stored events, newest first: `{"events": [...], "next": cursor}`.
    fn events(&self, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// Stored flow summaries, most recently seen first: `{"flows": [...], "next": cursor}`.
    fn flows(&self, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// Stored queue aggregates, oldest first: `{"queues": [...], "next": cursor}`.
    fn queue_series(&self, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// One flow's latency series (per-interval aggregates), oldest first; the newest `limit`
    /// rows (default 600) between `since` and `until`.
    fn flow_series(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// Row counts per table.
    fn counts(&self) -> Result<Value, StoreError>;
    /// The collector's counters summed over every run that wrote to this store.
    fn totals(&self) -> Result<Value, StoreError> {
        Ok(json!({}))
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events(
  id INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, kind TEXT NOT NULL,
  node_id INTEGER, port INTEGER, queue_id INTEGER, flow_id INTEGER,
  src TEXT, dst TEXT, proto INTEGER, src_port INTEGER, dst_port INTEGER,
  evidence TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_time ON events(time_ns);
CREATE TABLE IF NOT EXISTS flows(
  src TEXT NOT NULL, dst TEXT NOT NULL, proto INTEGER NOT NULL, src_port INTEGER NOT NULL, dst_port INTEGER NOT NULL,
  first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL, reports INTEGER NOT NULL, drops INTEGER NOT NULL,
  last_drop_reason INTEGER, path TEXT NOT NULL, path_changes INTEGER NOT NULL, e2e_p50 INTEGER, e2e_p99 INTEGER,
  PRIMARY KEY(src, dst, proto, src_port, dst_port));
CREATE INDEX IF NOT EXISTS flows_last_seen ON flows(last_seen_ns);
CREATE TABLE IF NOT EXISTS flow_stats(
  time_ns INTEGER NOT NULL, flow INTEGER NOT NULL, samples INTEGER NOT NULL,
  e2e_avg INTEGER, e2e_max INTEGER, hop_latency_max TEXT NOT NULL, queue_occupancy_max TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS flow_stats_flow ON flow_stats(flow, time_ns);
CREATE TABLE IF NOT EXISTS queue_stats(
  time_ns INTEGER NOT NULL, node_id INTEGER NOT NULL, port INTEGER NOT NULL, queue_id INTEGER NOT NULL,
  samples INTEGER NOT NULL, avg_occupancy REAL NOT NULL, max_occupancy INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS queue_stats_time ON queue_stats(time_ns);
CREATE TABLE IF NOT EXISTS port_stats(
  time_ns INTEGER NOT NULL, node_id INTEGER NOT NULL, port INTEGER NOT NULL,
  samples INTEGER NOT NULL, avg_hop_latency REAL NOT NULL, max_hop_latency INTEGER NOT NULL, drops INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS port_stats_time ON port_stats(time_ns);
CREATE TABLE IF NOT EXISTS raw_reports(
  id INTEGER PRIMARY KEY AUTOINCREMENT, time_ns INTEGER NOT NULL, source TEXT NOT NULL, datagram BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS totals(
  name TEXT PRIMARY KEY, value INTEGER NOT NULL, run INTEGER NOT NULL, run_value INTEGER NOT NULL);
";

/// Columns the `flows` table gained after its first release (added to older files at open):
/// which in-memory life of the flow (`run`, `live_id`) last wrote it, and that life's counts as
/// written, so the next write adds only what is new.
const FLOW_RUN_COLUMNS: [&str; 5] = [
    "run",
    "live_id",
    "run_reports",
    "run_drops",
    "run_path_changes",
];

/// A distinct ID per opened store (time of opening, made unique within the process), naming
/// this run's rows.
fn new_run_id() -> i64 {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let now = crate::ingest::now_ns() & ((1 << 62) - 1);
    i(now.wrapping_add(SEQ.fetch_add(1, Ordering::Relaxed)))
}

/// Reader connections: taken one per query, waited for within the query's deadline.
#[derive(Debug, Default)]
struct Readers {
    free: Mutex<Vec<Connection>>,
    returned: Condvar,
}

/// The embedded SQLite backend: one writer connection, [`READERS`] reader connections.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    readers: Readers,
    /// This run's ID (see [`FLOW_RUN_COLUMNS`]).
    run: i64,
    /// Where the database file is.
    pub path: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SqliteStore {
    /// Opens (creating if needed) `dir/intscope.db` in WAL mode.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join("intscope.db");
        let conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a committed transaction survives a process crash (kill -9); only
        // an OS crash can lose the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // A flush upserts every changed flow: with a large cache the flows table's indexes stay
        // in memory instead of being re-read page by page.
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        conn.execute_batch(SCHEMA)?;
        let have: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('flows')")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for col in FLOW_RUN_COLUMNS {
            if !have.iter().any(|h| h == col) {
                conn.execute_batch(&format!(
                    "ALTER TABLE flows ADD COLUMN {col} INTEGER NOT NULL DEFAULT 0"
                ))?;
            }
        }
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let r = Connection::open(&path)?;
            // Readers never write: a bug cannot turn an API query into a write.
            r.pragma_update(None, "query_only", true)?;
            // Short: a reader waits for a lock only around a WAL checkpoint, and its query's
            // deadline (the progress handler) does not run while it waits.
            r.busy_timeout(Duration::from_millis(500))?;
            // SQLite's default, set so the memory bound does not depend on the build's.
            r.pragma_update(None, "cache_size", -READER_CACHE_KIB)?;
            readers.push(r);
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            readers: Readers {
                free: Mutex::new(readers),
                returned: Condvar::new(),
            },
            run: new_run_id(),
            path,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

    /// Runs `f` on a reader connection, within `timeout` (default [`DEFAULT_QUERY_TIMEOUT`]):
    /// waiting for a free reader counts toward it, and SQLite's progress handler interrupts the
    /// query when it passes, so a runaway query stops rather than holding the connection.
    fn read<T>(
        &self,
        timeout: Option<Duration>,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, StoreError> {
        let deadline = Instant::now() + timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
        let conn = {
            let mut free = lock(&self.readers.free);
            loop {
                if let Some(c) = free.pop() {
                    break c;
                }
                let left = deadline
                    .checked_duration_since(Instant::now())
                    .ok_or(StoreError::Timeout)?;
                free = self
                    .readers
                    .returned
                    .wait_timeout(free, left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
        };
        // Checked every thousand virtual-machine steps: microseconds apart.
        conn.progress_handler(1000, Some(move || Instant::now() >= deadline));
        let result = f(&conn);
        conn.progress_handler(0, None::<fn() -> bool>);
        lock(&self.readers.free).push(conn);
        self.readers.returned.notify_one();
        result.map_err(StoreError::from_sqlite)
    }
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Per-hop values as a JSON array, source first, without the unused hops at the end.
fn per_hop_json(values: &[Option<u32>]) -> String {
    let used = values
        .iter()
        .rposition(Option::is_some)
        .map_or(0, |p| p + 1);
    serde_json::to_string(&values[..used]).unwrap_or_default()
}

impl SqliteStore {
    /// Adds one batch's rows to the open transaction `tx`.
    fn write_rows(&self, tx: &rusqlite::Transaction<'_>, b: &Batch) -> Result<(), StoreError> {
        {
            let mut ev = tx.prepare_cached(
                "INSERT OR REPLACE INTO events(id,time_ns,kind,node_id,port,queue_id,flow_id,src,dst,proto,src_port,dst_port,evidence)
                 VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
            )?;
            for e in &b.events {
                let f = e.flow.as_ref().map(FlowRef::from);
                let f = f.as_ref();
                ev.execute(params![
                    i(e.id),
                    i(e.time_ns),
                    e.kind.label(),
                    e.node_id,
                    e.port,
                    e.queue_id,
                    e.flow_id.map(i),
                    f.map(|f| &f.src),
                    f.map(|f| &f.dst),
                    f.map(|f| f.proto),
                    f.map(|f| f.src_port),
                    f.map(|f| f.dst_port),
                    e.evidence.to_json().to_string()
                ])?;
            }
            // A flow's counters in memory count from the start of its in-memory life (this
            // run, since it was last idle): the stored sums get what is new since this life's
            // last write, and a new life (restart, or the flow came back) adds all of its own.
            let mut fl = tx.prepare_cached(
                "INSERT INTO flows(src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,last_drop_reason,path,path_changes,e2e_p50,e2e_p99,
                                   run,live_id,run_reports,run_drops,run_path_changes)
                 VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?8,?9,?12)
                 ON CONFLICT(src,dst,proto,src_port,dst_port) DO UPDATE SET
                   first_seen_ns=min(first_seen_ns, excluded.first_seen_ns),
                   last_seen_ns=max(last_seen_ns, excluded.last_seen_ns),
                   reports=reports + excluded.reports - CASE WHEN run=excluded.run AND live_id=excluded.live_id THEN run_reports ELSE 0 END,
                   drops=drops + excluded.drops - CASE WHEN run=excluded.run AND live_id=excluded.live_id THEN run_drops ELSE 0 END,
                   path_changes=path_changes + excluded.path_changes - CASE WHEN run=excluded.run AND live_id=excluded.live_id THEN run_path_changes ELSE 0 END,
                   last_drop_reason=coalesce(excluded.last_drop_reason, last_drop_reason), path=excluded.path,
                   e2e_p50=excluded.e2e_p50, e2e_p99=excluded.e2e_p99,
                   run=excluded.run, live_id=excluded.live_id, run_reports=excluded.run_reports,
                   run_drops=excluded.run_drops, run_path_changes=excluded.run_path_changes
                 RETURNING rowid",
            )?;
            let mut fs =
                tx.prepare_cached("INSERT INTO flow_stats VALUES(?1,?2,?3,?4,?5,?6,?7)")?;
            for f in &b.flows {
                let flow = FlowRef::from(&f.key);
                let rowid: i64 = fl.query_row(
                    params![
                        flow.src,
                        flow.dst,
                        flow.proto,
                        flow.src_port,
                        flow.dst_port,
                        i(f.first_seen_ns),
                        i(f.last_seen_ns),
                        i(f.reports),
                        i(f.drops),
                        f.last_drop_reason,
                        serde_json::to_string(&*f.path).unwrap_or_default(),
                        i(f.path_changes),
                        f.e2e_p50.map(i),
                        f.e2e_p99.map(i),
                        self.run,
                        i(f.live_id)
                    ],
                    |r| r.get(0),
                )?;
                if let Some(v) = &f.interval {
                    fs.execute(params![
                        i(b.time_ns),
                        rowid,
                        v.samples,
                        v.e2e_avg().map(i),
                        v.e2e_max(),
                        per_hop_json(&v.hop_latency_max()),
                        per_hop_json(&v.queue_occupancy_max())
                    ])?;
                }
            }
            let mut q =
                tx.prepare_cached("INSERT INTO queue_stats VALUES(?1,?2,?3,?4,?5,?6,?7)")?;
            for a in &b.queues {
                q.execute(params![
                    i(b.time_ns),
                    a.node_id,
                    a.port,
                    a.queue_id.unwrap_or(0),
                    i(a.samples),
                    a.avg,
                    i(a.max)
                ])?;
            }
            let mut p = tx.prepare_cached("INSERT INTO port_stats VALUES(?1,?2,?3,?4,?5,?6,?7)")?;
            for a in &b.ports {
                p.execute(params![
                    i(b.time_ns),
                    a.node_id,
                    a.port,
                    i(a.samples),
                    a.avg,
                    i(a.max),
                    i(a.drops)
                ])?;
            }
            let mut r = tx.prepare_cached(
                "INSERT INTO raw_reports(time_ns,source,datagram) VALUES(?1,?2,?3)",
            )?;
            for (t, src, d) in &b.raw {
                r.execute(params![i(*t), src.to_string(), d])?;
            }
            // The same for the collector's counters, one life per run.
            let mut t = tx.prepare_cached(
                "INSERT INTO totals(name,value,run,run_value) VALUES(?1,?2,?3,?2)
                 ON CONFLICT(name) DO UPDATE SET
                   value=value + excluded.run_value - CASE WHEN run=excluded.run THEN run_value ELSE 0 END,
                   run=excluded.run, run_value=excluded.run_value",
            )?;
            for (name, v) in &b.totals {
                t.execute(params![name, i(*v), self.run])?;
            }
        }
        Ok(())
    }
}

impl Store for SqliteStore {
    fn write(&self, b: &Batch) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        self.write_rows(&tx, b)?;
        tx.commit()?;
        Ok(())
    }

    /// One transaction for all the parts: a kill -9 or a failed part leaves none of the flush.
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Batch>) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for part in parts {
            self.write_rows(&tx, &part)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn prune(&self, before_ns: u64, keep_raw: u64) -> Result<(), StoreError> {
        let conn = self.conn();
        let t = i(before_ns);
        conn.execute("DELETE FROM events WHERE time_ns < ?1", [t])?;
        conn.execute("DELETE FROM flows WHERE last_seen_ns < ?1", [t])?;
        conn.execute("DELETE FROM flow_stats WHERE time_ns < ?1", [t])?;
        conn.execute("DELETE FROM queue_stats WHERE time_ns < ?1", [t])?;
        conn.execute("DELETE FROM port_stats WHERE time_ns < ?1", [t])?;
        conn.execute(
            "DELETE FROM raw_reports WHERE id <= (SELECT max(id) FROM raw_reports) - ?1",
            [i(keep_raw)],
        )?;
        Ok(())
    }

    fn next_event_id(&self) -> Result<u64, StoreError> {
        let max: Option<i64> = self
            .conn()
            .query_row("SELECT max(id) FROM events", [], |r| r.get(0))
            .optional()?
            .flatten();
        Ok(max.map_or(1, |m| m as u64 + 1))
    }

    fn events(&self, q: &HistoryQuery) -> Result<Value, StoreError> {
        let limit = q.page_size(500)?;
        let after = q.cursor('e')?.map_or(i64::MAX, |(id, _)| id);
        let rows = self.read(q.timeout, |conn| {
            let mut st = conn.prepare_cached(
                "SELECT id,time_ns,kind,node_id,port,queue_id,flow_id,src,dst,proto,src_port,dst_port,evidence FROM events
                 WHERE id < ?6 AND time_ns >= ?1 AND time_ns <= ?2 AND (?3 IS NULL OR kind = ?3) AND (?4 IS NULL OR node_id = ?4)
                 ORDER BY id DESC LIMIT ?5",
            )?;
            st.query_map(
                params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), q.kind, q.node, limit + 1, after],
                |r| {
                    let evidence: String = r.get(12)?;
                    let src: Option<String> = r.get(7)?;
                    let id = r.get::<_, i64>(0)?;
                    Ok((json!({
                        "id": id, "time_ns": r.get::<_, i64>(1)?, "kind": r.get::<_, String>(2)?,
                        "node_id": r.get::<_, Option<i64>>(3)?, "port": r.get::<_, Option<i64>>(4)?, "queue_id": r.get::<_, Option<i64>>(5)?,
                        "flow_id": r.get::<_, Option<i64>>(6)?,
                        "flow": src.map(|s| Ok::<_, rusqlite::Error>(json!({"src": s, "dst": r.get::<_, String>(8)?, "proto": r.get::<_, i64>(9)?, "src_port": r.get::<_, i64>(10)?, "dst_port": r.get::<_, i64>(11)?}))).transpose()?,
                        "evidence": serde_json::from_str::<Value>(&evidence).unwrap_or(Value::Null),
                    }), format!("e.{id}")))
                },
            )?
            .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(page("events", rows, limit))
    }

    fn flows(&self, q: &HistoryQuery) -> Result<Value, StoreError> {
        let limit = q.page_size(500)?;
        let (t, id) = q.cursor('f')?.unwrap_or((i64::MAX, i64::MAX));
        let rows = self.read(q.timeout, |conn| {
            // Newest first, ties by row: (last_seen_ns, rowid) is the index's order, so a page
            // starts at its cursor without reading the pages before it.
            let mut st = conn.prepare_cached(
                "SELECT src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,last_drop_reason,path,path_changes,e2e_p50,e2e_p99,rowid
                 FROM flows WHERE (last_seen_ns, rowid) < (?4, ?5) AND last_seen_ns >= ?1 AND first_seen_ns <= ?2
                 ORDER BY last_seen_ns DESC, rowid DESC LIMIT ?3",
            )?;
            st.query_map(params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), limit + 1, t, id], |r| {
                let path: String = r.get(10)?;
                let last: i64 = r.get(6)?;
                Ok((json!({
                    "flow": {"src": r.get::<_, String>(0)?, "dst": r.get::<_, String>(1)?, "proto": r.get::<_, i64>(2)?, "src_port": r.get::<_, i64>(3)?, "dst_port": r.get::<_, i64>(4)?},
                    "first_seen_ns": r.get::<_, i64>(5)?, "last_seen_ns": last, "reports": r.get::<_, i64>(7)?, "drops": r.get::<_, i64>(8)?,
                    "last_drop_reason": r.get::<_, Option<i64>>(9)?, "path": serde_json::from_str::<Value>(&path).unwrap_or(Value::Null),
                    "path_changes": r.get::<_, i64>(11)?, "e2e_latency_p50": r.get::<_, Option<i64>>(12)?, "e2e_latency_p99": r.get::<_, Option<i64>>(13)?,
                }), format!("f.{last}.{}", r.get::<_, i64>(14)?)))
            })?
            .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(page("flows", rows, limit))
    }

    fn queue_series(&self, q: &HistoryQuery) -> Result<Value, StoreError> {
        let limit = q.page_size(MAX_HISTORY_LIMIT)?;
        let (t, id) = q.cursor('q')?.unwrap_or((i64::MIN, i64::MIN));
        let rows = self.read(q.timeout, |conn| {
            let mut st = conn.prepare_cached(
                "SELECT time_ns,node_id,port,queue_id,samples,avg_occupancy,max_occupancy,rowid FROM queue_stats
                 WHERE (time_ns, rowid) > (?5, ?6) AND time_ns >= ?1 AND time_ns <= ?2 AND (?3 IS NULL OR node_id = ?3)
                 ORDER BY time_ns, rowid LIMIT ?4",
            )?;
            st.query_map(params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), q.node, limit + 1, t, id], |r| {
                let time: i64 = r.get(0)?;
                Ok((json!({"time_ns": time, "node_id": r.get::<_, i64>(1)?, "port": r.get::<_, i64>(2)?, "queue_id": r.get::<_, i64>(3)?,
                          "samples": r.get::<_, i64>(4)?, "avg_occupancy": r.get::<_, f64>(5)?, "max_occupancy": r.get::<_, i64>(6)?}),
                    format!("q.{time}.{}", r.get::<_, i64>(7)?)))
            })?
            .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(page("queues", rows, limit))
    }

    fn flow_series(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Value, StoreError> {
        let limit = q.page_size(600)?;
        let mut rows = self.read(q.timeout, |conn| {
            let mut st = conn.prepare_cached(
                "SELECT s.time_ns,s.samples,s.e2e_avg,s.e2e_max,s.hop_latency_max,s.queue_occupancy_max
                 FROM flows f JOIN flow_stats s ON s.flow = f.rowid
                 WHERE f.src = ?1 AND f.dst = ?2 AND f.proto = ?3 AND f.src_port = ?4 AND f.dst_port = ?5
                   AND s.time_ns >= ?6 AND s.time_ns <= ?7
                 ORDER BY s.time_ns DESC LIMIT ?8",
            )?;
            st.query_map(
                params![flow.src, flow.dst, flow.proto, flow.src_port, flow.dst_port,
                        i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), limit],
                |r| {
                    let hops = |s: String| serde_json::from_str::<Value>(&s).unwrap_or(Value::Null);
                    Ok(json!({
                        "time_ns": r.get::<_, i64>(0)?, "samples": r.get::<_, i64>(1)?,
                        "e2e_latency_avg": r.get::<_, Option<i64>>(2)?, "e2e_latency_max": r.get::<_, Option<i64>>(3)?,
                        "hop_latency_max": hops(r.get(4)?), "queue_occupancy_max": hops(r.get(5)?),
                    }))
                },
            )?
            .collect::<Result<Vec<_>, _>>()
        })?;
        rows.reverse();
        Ok(Value::Array(rows))
    }

    fn counts(&self) -> Result<Value, StoreError> {
        self.read(None, |conn| {
            let mut m = serde_json::Map::new();
            for t in [
                "events",
                "flows",
                "flow_stats",
                "queue_stats",
                "port_stats",
                "raw_reports",
            ] {
                let n: i64 =
                    conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?;
                m.insert(t.into(), json!(n));
            }
            Ok(Value::Object(m))
        })
    }

    fn totals(&self) -> Result<Value, StoreError> {
        self.read(None, |conn| {
            let mut st = conn.prepare_cached("SELECT name, value FROM totals ORDER BY name")?;
            let m = st
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, json!(r.get::<_, i64>(1)?)))
                })?
                .collect::<Result<serde_json::Map<_, _>, _>>()?;
            Ok(Value::Object(m))
        })
    }
}

/// Default of [`StoreConfig::flush_chunk_flows`]: a part's rows take a few tens of MiB at most,
/// and the writer commits a part in a fraction of a second.
pub const DEFAULT_FLUSH_CHUNK_FLOWS: usize = 65_536;

/// Store settings (the `[store]` table of the collector config).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Milliseconds between flushes: the most input a kill -9 can lose, at any load.
    pub flush_interval_ms: u64,
    /// Hours of history kept.
    pub retention_hours: u64,
    /// Raw report datagrams kept (the newest).
    pub raw_reports: u64,
    /// Raw datagrams kept per flush interval at most (the rest are counted, not kept).
    pub raw_per_flush: usize,
    /// Ingest waits for the store rather than let a batch hold more than one interval, so a
    /// kill -9 loses at most `flush_interval_ms` (true); or the live state never waits and the
    /// store's intervals stretch when it falls behind (false: more input taken under overload,
    /// more lost by a kill -9).
    pub backpressure: bool,
    /// Most changed flows a flush takes from the live state and hands to the writer at once
    /// (the flush's memory bound; a flush of more is streamed in parts of this many, committed
    /// in one transaction).
    pub flush_chunk_flows: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            flush_interval_ms: 1000,
            retention_hours: 24,
            raw_reports: 100_000,
            raw_per_flush: 1000,
            backpressure: true,
            flush_chunk_flows: DEFAULT_FLUSH_CHUNK_FLOWS,
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
    /// Rows per table and the stored totals, as the writer last read them (the API's
    /// `/api/stats` shows these rather than query the database while it is being written).
    pub snapshot: Mutex<Option<Value>>,
    gate: Mutex<Gate>,
    /// When ingest must next check the gate ([`now_ms`]; 0: no writer, never): the receive
    /// threads' fast path is one load and a clock read.
    gate_deadline_ms: AtomicU64,
    committed: Condvar,
}

/// Milliseconds since the first call in this process (1 or more; 0 means "no deadline").
fn now_ms(at: Instant) -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    at.saturating_duration_since(epoch).as_millis() as u64 + 1
}

impl StoreStats {
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

/// Takes what changed since the last flush out of the live state, as one batch (tests, the
/// store bench; the collector streams a flush in parts with [`FlushTake`]).
pub fn collect_batch(
    state: &State,
    last_event: &mut u64,
    raw: Vec<(u64, IpAddr, Vec<u8>)>,
    stats: &StoreStats,
) -> Batch {
    let mut take = FlushTake::new(state, last_event, raw, stats, usize::MAX);
    let b = take.next().unwrap_or_default();
    debug_assert!(!b.more && take.next().is_none());
    b
}

/// One flush, taken from the live state in parts of at most `chunk` flow rows each, so the
/// flush's memory is bounded by the chunk whatever the number of changed flows (see
/// `docs/collector-store.md`, Memory). [`FlushTake::new`] takes, under each shard's lock, the
/// keys of its changed flows (moving the shard's list, no copy) and everything but the flows:
/// events, queue and port aggregates, counters, raw datagrams, which go in the first part. Each
/// part then copies the rows of the next `chunk` keys, shard by shard under its lock. A flow
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
}

impl<'a> FlushTake<'a> {
    /// Takes the flush's keys and non-flow content (see the type's documentation); `chunk` is
    /// the most flow rows a part holds (at least 1).
    pub fn new(
        state: &'a State,
        last_event: &mut u64,
        raw: Vec<(u64, IpAddr, Vec<u8>)>,
        stats: &StoreStats,
        chunk: usize,
    ) -> Self {
        let mut b = Batch {
            time_ns: state.last_time_ns(),
            raw,
            ..Batch::default()
        };
        let (mut flows_expired, mut suppressed) = (0u64, 0u64);
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
                stats
                    .events_missed
                    .fetch_add(first.id - *last_event, Ordering::Relaxed);
            }
            b.events = log
                .events()
                .iter()
                .filter(|e| e.id >= *last_event)
                .cloned()
                .collect();
            *last_event = log.next_id();
            for (kind, n) in log.counts() {
                b.totals.push((format!("events_{}", kind.label()), *n));
            }
        }
        let mut counters = crate::state::RecordCounters::default();
        let mut lost = 0u64;
        state.each_fabric_shard(|shard| {
            counters.v2 += shard.counters.v2;
            counters.v1 += shard.counters.v1;
            counters.v05 += shard.counters.v05;
            counters.without_flow += shard.counters.without_flow;
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
            keys,
            left,
            time_ns: b.time_ns,
            head: Some(b),
            chunk: chunk.max(1),
            done: false,
        }
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
        if cap > 0 {
            b.flows.reserve_exact(cap);
            let (keys, left) = (&mut self.keys, &mut self.left);
            self.state.each_flow_shard(|shard| {
                let id = shard_id(shard);
                let Some((_, shard_keys)) = keys.iter_mut().find(|(s, _)| *s == id) else {
                    return;
                };
                while b.flows.len() < cap
                    && let Some(key) = shard_keys.pop()
                {
                    *left -= 1;
                    // Not dirty: the flow went away and its key came back as a new flow,
                    // listed again for the next flush (or this row was already copied).
                    if let Some(f) = shard.flows.get_mut(&key)
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
        }
        b.more = self.left > 0;
        self.done = !b.more;
        Some(b)
    }
}

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
        interval: Some(std::mem::take(&mut f.interval)).filter(|v| v.samples > 0),
    }
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
            let mut n = 0u64;
            // What the store holds from earlier runs, shown before the first commit.
            let snapshot = |store: &dyn Store| {
                json!({"rows": store.counts().ok(), "totals": store.totals().ok()})
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
                    let horizon =
                        time_ns.saturating_sub(cfg.retention_hours * 3_600_000_000_000);
                    if let Err(e) = store.prune(horizon, cfg.raw_reports) {
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
