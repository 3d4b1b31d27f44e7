//! History: flow summaries, per-interval queue and port aggregates, events and a bounded ring of
//! raw report datagrams, in an embedded SQLite database (WAL) with zero setup. Schema:
//! `docs/collector-store.md`.
//!
//! Writes are batched off the ingest path: a flusher takes what changed from the live state
//! once per interval and hands it to a writer thread, which commits it in one transaction. The
//! live state never waits for the disk. Backends sit behind [`Store`], so a distributed one
//! (ClickHouse) can replace SQLite without touching the other stages.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use crate::event::{Event, FlowRef};
use crate::flow::FlowInterval;
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
}

/// A flow's summary as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRow {
    /// The flow.
    pub flow: FlowRef,
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
    /// Path as JSON (node, ports per hop).
    pub path: String,
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
}

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
    /// At most this many rows (default 500).
    pub limit: Option<u32>,
}

/// A history backend.
pub trait Store: Send + Sync {
    /// Commits a batch (one transaction).
    fn write(&self, batch: &Batch) -> Result<(), StoreError>;
    /// Deletes history older than `before_ns` and raw datagrams beyond the newest `keep_raw`.
    fn prune(&self, before_ns: u64, keep_raw: u64) -> Result<(), StoreError>;
    /// The next free event ID (to continue numbering after a restart).
    fn next_event_id(&self) -> Result<u64, StoreError>;
    /// Stored events, newest first.
    fn events(&self, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// Stored flow summaries, most recently seen first.
    fn flows(&self, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// Stored queue aggregates of a node, oldest first.
    fn queue_series(&self, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// One flow's latency series (per-interval aggregates), oldest first; the newest `limit`
    /// rows (default 600) between `since` and `until`.
    fn flow_series(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Value, StoreError>;
    /// Row counts per table.
    fn counts(&self) -> Result<Value, StoreError>;
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
";

/// The embedded SQLite backend.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// Where the database file is.
    pub path: PathBuf,
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
        // 64 MiB of page cache (the default is 2 MiB): a flush upserts every changed flow, and
        // the flows table's indexes then stay in memory instead of being re-read page by page.
        conn.pragma_update(None, "cache_size", -65_536)?;
        conn.execute_batch(SCHEMA)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            path,
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

impl Store for SqliteStore {
    fn write(&self, b: &Batch) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
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
            let mut fl = tx.prepare_cached(
                "INSERT INTO flows(src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,last_drop_reason,path,path_changes,e2e_p50,e2e_p99)
                 VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)
                 ON CONFLICT(src,dst,proto,src_port,dst_port) DO UPDATE SET
                   last_seen_ns=excluded.last_seen_ns, reports=excluded.reports, drops=excluded.drops,
                   last_drop_reason=excluded.last_drop_reason, path=excluded.path, path_changes=excluded.path_changes,
                   e2e_p50=excluded.e2e_p50, e2e_p99=excluded.e2e_p99
                 RETURNING rowid",
            )?;
            let mut fs =
                tx.prepare_cached("INSERT INTO flow_stats VALUES(?1,?2,?3,?4,?5,?6,?7)")?;
            for f in &b.flows {
                let rowid: i64 = fl.query_row(
                    params![
                        f.flow.src,
                        f.flow.dst,
                        f.flow.proto,
                        f.flow.src_port,
                        f.flow.dst_port,
                        i(f.first_seen_ns),
                        i(f.last_seen_ns),
                        i(f.reports),
                        i(f.drops),
                        f.last_drop_reason,
                        f.path,
                        i(f.path_changes),
                        f.e2e_p50.map(i),
                        f.e2e_p99.map(i)
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
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT id,time_ns,kind,node_id,port,queue_id,flow_id,src,dst,proto,src_port,dst_port,evidence FROM events
             WHERE time_ns >= ?1 AND time_ns <= ?2 AND (?3 IS NULL OR kind = ?3) AND (?4 IS NULL OR node_id = ?4)
             ORDER BY id DESC LIMIT ?5",
        )?;
        let rows = st.query_map(
            params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), q.kind, q.node, q.limit.unwrap_or(500)],
            |r| {
                let evidence: String = r.get(12)?;
                let src: Option<String> = r.get(7)?;
                Ok(json!({
                    "id": r.get::<_, i64>(0)?, "time_ns": r.get::<_, i64>(1)?, "kind": r.get::<_, String>(2)?,
                    "node_id": r.get::<_, Option<i64>>(3)?, "port": r.get::<_, Option<i64>>(4)?, "queue_id": r.get::<_, Option<i64>>(5)?,
                    "flow_id": r.get::<_, Option<i64>>(6)?,
                    "flow": src.map(|s| Ok::<_, rusqlite::Error>(json!({"src": s, "dst": r.get::<_, String>(8)?, "proto": r.get::<_, i64>(9)?, "src_port": r.get::<_, i64>(10)?, "dst_port": r.get::<_, i64>(11)?}))).transpose()?,
                    "evidence": serde_json::from_str::<Value>(&evidence).unwrap_or(Value::Null),
                }))
            },
        )?;
        Ok(Value::Array(rows.collect::<Result<_, _>>()?))
    }

    fn flows(&self, q: &HistoryQuery) -> Result<Value, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,last_drop_reason,path,path_changes,e2e_p50,e2e_p99
             FROM flows WHERE last_seen_ns >= ?1 AND first_seen_ns <= ?2 ORDER BY last_seen_ns DESC LIMIT ?3",
        )?;
        let rows = st.query_map(params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), q.limit.unwrap_or(500)], |r| {
            let path: String = r.get(10)?;
            Ok(json!({
                "flow": {"src": r.get::<_, String>(0)?, "dst": r.get::<_, String>(1)?, "proto": r.get::<_, i64>(2)?, "src_port": r.get::<_, i64>(3)?, "dst_port": r.get::<_, i64>(4)?},
                "first_seen_ns": r.get::<_, i64>(5)?, "last_seen_ns": r.get::<_, i64>(6)?, "reports": r.get::<_, i64>(7)?, "drops": r.get::<_, i64>(8)?,
                "last_drop_reason": r.get::<_, Option<i64>>(9)?, "path": serde_json::from_str::<Value>(&path).unwrap_or(Value::Null),
                "path_changes": r.get::<_, i64>(11)?, "e2e_latency_p50": r.get::<_, Option<i64>>(12)?, "e2e_latency_p99": r.get::<_, Option<i64>>(13)?,
            }))
        })?;
        Ok(Value::Array(rows.collect::<Result<_, _>>()?))
    }

    fn queue_series(&self, q: &HistoryQuery) -> Result<Value, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT time_ns,node_id,port,queue_id,samples,avg_occupancy,max_occupancy FROM queue_stats
             WHERE time_ns >= ?1 AND time_ns <= ?2 AND (?3 IS NULL OR node_id = ?3) ORDER BY time_ns LIMIT ?4",
        )?;
        let rows = st.query_map(params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), q.node, q.limit.unwrap_or(10_000)], |r| {
            Ok(json!({"time_ns": r.get::<_, i64>(0)?, "node_id": r.get::<_, i64>(1)?, "port": r.get::<_, i64>(2)?, "queue_id": r.get::<_, i64>(3)?,
                      "samples": r.get::<_, i64>(4)?, "avg_occupancy": r.get::<_, f64>(5)?, "max_occupancy": r.get::<_, i64>(6)?}))
        })?;
        Ok(Value::Array(rows.collect::<Result<_, _>>()?))
    }

    fn flow_series(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Value, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT s.time_ns,s.samples,s.e2e_avg,s.e2e_max,s.hop_latency_max,s.queue_occupancy_max
             FROM flows f JOIN flow_stats s ON s.flow = f.rowid
             WHERE f.src = ?1 AND f.dst = ?2 AND f.proto = ?3 AND f.src_port = ?4 AND f.dst_port = ?5
               AND s.time_ns >= ?6 AND s.time_ns <= ?7
             ORDER BY s.time_ns DESC LIMIT ?8",
        )?;
        let rows = st.query_map(
            params![flow.src, flow.dst, flow.proto, flow.src_port, flow.dst_port,
                    i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), q.limit.unwrap_or(600)],
            |r| {
                let hops = |s: String| serde_json::from_str::<Value>(&s).unwrap_or(Value::Null);
                Ok(json!({
                    "time_ns": r.get::<_, i64>(0)?, "samples": r.get::<_, i64>(1)?,
                    "e2e_latency_avg": r.get::<_, Option<i64>>(2)?, "e2e_latency_max": r.get::<_, Option<i64>>(3)?,
                    "hop_latency_max": hops(r.get(4)?), "queue_occupancy_max": hops(r.get(5)?),
                }))
            },
        )?;
        let mut rows: Vec<Value> = rows.collect::<Result<_, _>>()?;
        rows.reverse();
        Ok(Value::Array(rows))
    }

    fn counts(&self) -> Result<Value, StoreError> {
        let conn = self.conn();
        let mut m = serde_json::Map::new();
        for t in [
            "events",
            "flows",
            "flow_stats",
            "queue_stats",
            "port_stats",
            "raw_reports",
        ] {
            let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?;
            m.insert(t.into(), json!(n));
        }
        Ok(Value::Object(m))
    }
}

/// Store settings (the `[store]` table of the collector config).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Seconds between flushes.
    pub flush_interval_ms: u64,
    /// Hours of history kept.
    pub retention_hours: u64,
    /// Raw report datagrams kept (the newest).
    pub raw_reports: u64,
    /// Raw datagrams kept per flush interval at most (the rest are counted, not kept).
    pub raw_per_flush: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            flush_interval_ms: 1000,
            retention_hours: 24,
            raw_reports: 100_000,
            raw_per_flush: 1000,
        }
    }
}

/// Counters of the store path.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Batches committed.
    pub batches: AtomicU64,
    /// Batches that failed to commit (logged).
    pub failed: AtomicU64,
    /// Batches dropped because the writer fell behind (logged; [`Flusher`] defers instead, so
    /// this stays 0 unless batches are submitted around it).
    pub backlog_dropped: AtomicU64,
    /// Flushes put off because the writer was still committing the previous batch: the live
    /// state keeps accumulating (flow and queue aggregates cover a longer interval), nothing is
    /// lost but events beyond the in-memory log (`events_missed`).
    pub flushes_deferred: AtomicU64,
    /// Batches handed to the writer and not yet committed.
    pub pending: AtomicU64,
    /// Events that left the in-memory log before a flush could store them.
    pub events_missed: AtomicU64,
}

/// Takes what changed since the last flush out of the live state.
pub fn collect_batch(
    state: &State,
    last_event: &mut u64,
    raw: Vec<(u64, IpAddr, Vec<u8>)>,
    stats: &StoreStats,
) -> Batch {
    let mut b = Batch {
        time_ns: state.last_time_ns(),
        raw,
        ..Batch::default()
    };
    state.each_flow_shard(|shard| {
        for key in std::mem::take(&mut shard.dirty_flows) {
            if let Some(f) = shard.flows.get_mut(&key) {
                f.dirty = false;
                b.flows.push(FlowRow {
                    flow: FlowRef::from(&f.key),
                    first_seen_ns: f.first_seen_ns,
                    last_seen_ns: f.last_seen_ns,
                    reports: f.reports,
                    drops: f.drops,
                    last_drop_reason: f.last_drop_reason,
                    path: serde_json::to_string(&f.path).unwrap_or_default(),
                    path_changes: f.path_changes,
                    e2e_p50: f.e2e.quantile(0.5),
                    e2e_p99: f.e2e.quantile(0.99),
                    interval: Some(std::mem::take(&mut f.interval)).filter(|v| v.samples > 0),
                });
            }
        }
    });
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
    }
    state.each_fabric_shard(|shard| {
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
    b
}

/// The writer thread: commits batches in order; prunes every minute.
pub fn spawn_writer(
    store: Arc<dyn Store>,
    cfg: StoreConfig,
    stats: Arc<StoreStats>,
) -> (SyncSender<Batch>, JoinHandle<()>) {
    let (tx, rx): (SyncSender<Batch>, Receiver<Batch>) = sync_channel(8);
    let handle = std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            let mut n = 0u64;
            for batch in rx {
                let written = store.write(&batch);
                stats.pending.fetch_sub(1, Ordering::Relaxed);
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
                    let horizon = batch
                        .time_ns
                        .saturating_sub(cfg.retention_hours * 3_600_000_000_000);
                    if let Err(e) = store.prune(horizon, cfg.raw_reports) {
                        tracing::error!("store prune failed: {e}");
                    }
                }
            }
        })
        .expect("spawning the store writer");
    (tx, handle)
}

/// Hands a batch to the writer without blocking the caller; a full queue is counted and logged.
fn submit(tx: &SyncSender<Batch>, batch: Batch, stats: &StoreStats) {
    stats.pending.fetch_add(1, Ordering::Relaxed);
    match tx.try_send(batch) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            stats.pending.fetch_sub(1, Ordering::Relaxed);
            let n = stats.backlog_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                dropped_batches = n + 1,
                "store writer behind: batch dropped"
            );
        }
        Err(TrySendError::Disconnected(_)) => {
            stats.pending.fetch_sub(1, Ordering::Relaxed);
            stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Takes batches from the live state for the writer, but only while the writer keeps up: when
/// the previous batch is still being committed (more changed flows than the store commits in an
/// interval — about 120 000 a second on the project's machine, `--bench store`), the flush is put
/// off and the live state goes on accumulating, so a slow disk lengthens the store's intervals
/// instead of losing batches.
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
        if self.stats.pending.load(Ordering::Relaxed) > 0 {
            self.stats.flushes_deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let Some(batch) = take() else {
            return false;
        };
        submit(&self.tx, batch, &self.stats);
        true
    }

    /// The last flush, at shutdown: waits for the writer to take it.
    pub fn finish(self, take: impl FnOnce() -> Option<Batch>) {
        if let Some(batch) = take() {
            self.stats.pending.fetch_add(1, Ordering::Relaxed);
            if self.tx.send(batch).is_err() {
                self.stats.pending.fetch_sub(1, Ordering::Relaxed);
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
