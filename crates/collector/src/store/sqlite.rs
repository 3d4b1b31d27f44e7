//! The embedded SQLite backend: one file in WAL mode, zero setup, the collector's default.
//! Readers (the API) have their own connections (WAL: they never wait on a commit), a bounded
//! pool of them, and a deadline enforced inside SQLite (a progress handler), so a query really
//! stops.

use crate::view::FlowSummary;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::read::{
    FlowInterval, MINUTE_NS, Page, QueueInterval, Resolution, RowCounts, StoredEvent,
    StoredIncident, Totals, flow_minutes, parse_evidence, parse_hops, parse_incident, parse_kind,
    parse_path,
};
use super::schema::{self, Backend};
use super::{
    DEFAULT_QUERY_TIMEOUT, HistoryQuery, MAX_HISTORY_LIMIT, READER_CACHE_KIB, READERS, RowSink,
    Store, StoreError, WRITER_CACHE_KIB, i, incident_version, lock, new_run_id, per_hop_json,
};
use intscope_core::{Batch, FlowRef};
use rusqlite::{Connection, OptionalExtension, ToSql, named_params, params};

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

/// The schema version this build writes, recorded in the `schema_version` table. Version 1 is
/// the first release's schema (no version table); each later version adds the columns
/// `schema` declares with it, applied at open.
pub const SCHEMA_VERSION: i64 = 4;

/// Version 4 added the queues' per-minute rollup (`queue_stats_1m`), filled from the stored
/// intervals when an older file is opened.
const ROLLUP_VERSION: i64 = 4;

/// Fills `queue_stats_1m` from `queue_stats` (the minute of each interval's time).
const QUEUE_ROLLUP_FILL: &str = "
INSERT INTO queue_stats_1m(minute_ns, node_id, port, queue_id, samples, occupancy_sum, max_occupancy)
  SELECT time_ns - time_ns % 60000000000, node_id, port, queue_id, sum(samples),
         sum(avg_occupancy * samples), max(max_occupancy)
  FROM queue_stats GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4";

/// Brings the schema of `conn`'s file to [`SCHEMA_VERSION`]: creates what is missing, adds the
/// declared columns newer than the file's version (and those with a default it lacks), records the version; one
/// transaction, so a kill halfway leaves the file as it was. A file of a newer version is
/// refused (this build would misread it).
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    let existed: bool = tx.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'events'",
        [],
        |r| r.get(0),
    )?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL, applied_ns INTEGER NOT NULL)",
    )?;
    let recorded: Option<i64> =
        tx.query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0))?;
    let version = recorded.unwrap_or(i64::from(existed));
    if version > SCHEMA_VERSION {
        return Err(StoreError::BadRequest(format!(
            "store: the file has schema version {version}, newer than this intscope's {SCHEMA_VERSION}: upgrade intscope"
        )));
    }
    // Tables and indexes missing (a new file gets the newest columns here).
    tx.execute_batch(&schema::sqlite_schema())?;
    if existed && version < ROLLUP_VERSION {
        tx.execute_batch(QUEUE_ROLLUP_FILL)?;
    }
    for m in schema::migrations(Backend::Sqlite) {
        let has: bool = tx.query_row(
            &format!(
                "SELECT count(*) > 0 FROM pragma_table_info('{}') WHERE name = ?1",
                m.table
            ),
            [m.column],
            |r| r.get(0),
        )?;
        if !has && (m.always || i64::from(m.since) > version) {
            tx.execute_batch(&format!(
                "ALTER TABLE {} ADD COLUMN {}",
                m.table, m.declared
            ))?;
        }
    }
    if version < SCHEMA_VERSION {
        tx.execute(
            "INSERT INTO schema_version(version, applied_ns) VALUES(?1, ?2)",
            params![SCHEMA_VERSION, i(crate::clock::now_ns())],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// The `INSERT` statements of a flush, from the tables' declarations ([`schema`]), with each
/// upsert's conflict rule.
struct Inserts {
    events: String,
    flows: String,
    flow_stats: String,
    queue_stats: String,
    queue_stats_1m: String,
    port_stats: String,
    raw_reports: String,
    incidents: String,
    totals: String,
}

static INSERT: LazyLock<Inserts> = LazyLock::new(|| {
    Inserts {
    // An event replayed (a restart's flush of what was already stored) replaces itself.
    events: format!("INSERT OR REPLACE INTO {}", schema::EVENTS.sqlite_into()),
    // A flow's counters in memory count from the start of its in-memory life (this run, since
    // it was last idle): the stored sums get what is new since this life's last write, and a
    // new life (restart, or the flow came back) adds all of its own.
    flows: format!(
        "INSERT INTO {}
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
        schema::FLOWS.sqlite_into()
    ),
    flow_stats: format!("INSERT INTO {}", schema::FLOW_STATS.sqlite_into()),
    queue_stats: format!("INSERT INTO {}", schema::QUEUE_STATS.sqlite_into()),
    // Each queue interval is added to its minute's rollup too (long ranges read that).
    queue_stats_1m: format!(
        "INSERT INTO {}
         ON CONFLICT(minute_ns,node_id,port,queue_id) DO UPDATE SET
           samples=samples+excluded.samples, occupancy_sum=occupancy_sum+excluded.occupancy_sum,
           max_occupancy=max(max_occupancy, excluded.max_occupancy)",
        schema::QUEUE_STATS_1M.sqlite_into()
    ),
    port_stats: format!("INSERT INTO {}", schema::PORT_STATS.sqlite_into()),
    raw_reports: format!("INSERT INTO {}", schema::RAW_REPORTS.sqlite_into()),
    // Every version of an incident replaces the stored one unless that one is newer (parts of
    // a flush, or a replay, may carry an older version after a newer one).
    incidents: format!(
        "INSERT INTO {}
         ON CONFLICT(id) DO UPDATE SET version=excluded.version, kind=excluded.kind,
           node_id=excluded.node_id, start_ns=excluded.start_ns,
           last_update_ns=excluded.last_update_ns, end_ns=excluded.end_ns, body=excluded.body,
           received_ns=excluded.received_ns
         WHERE excluded.version >= incidents.version",
        schema::INCIDENTS.sqlite_into()
    ),
    // The collector's counters the same way as the flows', one life per run.
    totals: format!(
        "INSERT INTO {}
         ON CONFLICT(name) DO UPDATE SET
           value=value + excluded.run_value - CASE WHEN run=excluded.run THEN run_value ELSE 0 END,
           run=excluded.run, run_value=excluded.run_value",
        schema::TOTALS.sqlite_into()
    ),
}
});

/// Binds `values` to `stmt`'s parameters by position: a lookup by name per value would cost a
/// flush more than encoding its rows. Each value's name must be its parameter's, checked in
/// debug builds, where the tests run: a declaration reordered fails there, never misbinds.
fn bind(stmt: &mut rusqlite::Statement<'_>, values: &[(&str, &dyn ToSql)]) -> rusqlite::Result<()> {
    debug_assert_eq!(
        stmt.parameter_count(),
        values.len(),
        "{:?}",
        stmt.expanded_sql()
    );
    for (i, (name, value)) in values.iter().enumerate() {
        debug_assert_eq!(stmt.parameter_name(i + 1), Some(*name));
        stmt.raw_bind_parameter(i + 1, value)?;
    }
    Ok(())
}

/// Runs insert `stmt` with `values` ([`bind`]).
fn insert(
    stmt: &mut rusqlite::Statement<'_>,
    values: &[(&str, &dyn ToSql)],
) -> rusqlite::Result<()> {
    bind(stmt, values)?;
    stmt.raw_execute().map(drop)
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
    /// The directory's `LOCK` file, locked exclusively while a writer has the store open
    /// (`None`: a reader, [`SqliteStore::open_reader`]).
    _lock: Option<std::fs::File>,
    conn: Mutex<Connection>,
    readers: Readers,
    /// This run's ID: which run's life of a flow last wrote its row (`flows.run`).
    run: i64,
    /// Where the database file is.
    pub path: PathBuf,
}

/// Locks `dir/LOCK` exclusively (an advisory `flock`, released by the kernel when the process
/// ends, a crash included) and writes this process's ID in it for the next one's message.
pub(crate) fn lock_dir(dir: &Path) -> Result<std::fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("LOCK");
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "its process ID unknown".to_string(),
                pid => format!("process {pid}"),
            };
            return Err(StoreError::Locked {
                path: dir.to_path_buf(),
                holder,
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(file)
}

impl SqliteStore {
    /// The database's file name inside the store folder: `intscope serve` checks for it, so a
    /// mistyped folder is an error there instead of a new, empty store.
    pub const FILE: &str = "intscope.db";

    /// Opens (creating if needed) `dir/intscope.db` in WAL mode to write to, alone: the
    /// directory's `LOCK` file is locked exclusively until the store is dropped, so a second
    /// collector (or a replay) on the same directory is refused
    /// ([`StoreError::Locked`]) instead of colliding with this one's event IDs and totals.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, true)
    }

    /// Opens the store of `dir` for a process that only reads it (`intscope serve`), beside
    /// the collector writing it: no lock is taken.
    pub fn open_reader(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, false)
    }

    fn open_with(dir: &Path, writer: bool) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let lock = if writer { Some(lock_dir(dir)?) } else { None };
        let path = dir.join(Self::FILE);
        let mut conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a committed transaction survives a process crash (kill -9); only
        // an OS crash can lose the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // A flush upserts every changed flow: with a large cache the flows table's indexes stay
        // in memory instead of being re-read page by page.
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        migrate(&mut conn)?;
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
            _lock: lock,
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

impl SqliteStore {
    /// Adds one batch's rows to the open transaction `tx`.
    fn write_rows(&self, tx: &rusqlite::Transaction<'_>, b: &Batch) -> Result<(), StoreError> {
        // Rows raised before receive times were kept get the time they were stored.
        let received_ns = crate::clock::now_ns();
        {
            let mut ev = tx.prepare_cached(&INSERT.events)?;
            for e in &b.events {
                let f = e.flow.as_ref().map(FlowRef::from);
                let f = f.as_ref();
                insert(
                    &mut ev,
                    named_params! {
                        ":id": i(e.id),
                        ":time_ns": i(e.time_ns),
                        ":kind": e.kind.label(),
                        ":node_id": e.node_id,
                        ":port": e.port,
                        ":queue_id": e.queue_id,
                        ":flow_id": e.flow_id.map(i),
                        ":src": f.map(|f| &f.src),
                        ":dst": f.map(|f| &f.dst),
                        ":proto": f.map(|f| f.proto),
                        ":src_port": f.map(|f| f.src_port),
                        ":dst_port": f.map(|f| f.dst_port),
                        ":evidence": e.evidence.to_json().to_string(),
                        ":received_ns": i(e.received_ns.unwrap_or(received_ns)),
                        ":incident_id": e.incident_id.map(i),
                    },
                )?;
            }
            let mut fl = tx.prepare_cached(&INSERT.flows)?;
            let mut fs = tx.prepare_cached(&INSERT.flow_stats)?;
            for f in &b.flows {
                let flow = FlowRef::from(&f.key);
                bind(
                    &mut fl,
                    named_params! {
                        ":run": self.run,
                        ":live_id": i(f.live_id),
                        ":src": flow.src,
                        ":dst": flow.dst,
                        ":proto": flow.proto,
                        ":src_port": flow.src_port,
                        ":dst_port": flow.dst_port,
                        ":first_seen_ns": i(f.first_seen_ns),
                        ":last_seen_ns": i(f.last_seen_ns),
                        ":reports": i(f.reports),
                        ":drops": i(f.drops),
                        ":last_drop_reason": f.last_drop_reason,
                        ":path": serde_json::to_string(&*f.path).unwrap_or_default(),
                        ":path_changes": i(f.path_changes),
                        ":e2e_p50": f.e2e_p50.map(i),
                        ":e2e_p99": f.e2e_p99.map(i),
                        ":run_reports": i(f.reports),
                        ":run_drops": i(f.drops),
                        ":run_path_changes": i(f.path_changes),
                    },
                )?;
                let rowid: i64 = match fl.raw_query().next()? {
                    Some(row) => row.get(0)?,
                    None => {
                        return Err(StoreError::from_sqlite(
                            rusqlite::Error::QueryReturnedNoRows,
                        ));
                    }
                };
                if let Some(v) = &f.interval {
                    insert(
                        &mut fs,
                        named_params! {
                            ":time_ns": i(b.time_ns),
                            ":flow": rowid,
                            ":samples": v.samples,
                            ":e2e_avg": v.e2e_avg().map(i),
                            ":e2e_max": v.e2e_max(),
                            ":hop_latency_max": per_hop_json(&v.hop_latency_max()),
                            ":queue_occupancy_max": per_hop_json(&v.queue_occupancy_max()),
                        },
                    )?;
                }
            }
            let mut q = tx.prepare_cached(&INSERT.queue_stats)?;
            let mut m = tx.prepare_cached(&INSERT.queue_stats_1m)?;
            let minute = b.time_ns - b.time_ns % MINUTE_NS;
            for a in &b.queues {
                insert(
                    &mut q,
                    named_params! {
                        ":time_ns": i(b.time_ns),
                        ":node_id": a.node_id,
                        ":port": a.port,
                        ":queue_id": a.queue_id.unwrap_or(0),
                        ":samples": i(a.samples),
                        ":avg_occupancy": a.avg,
                        ":max_occupancy": i(a.max),
                    },
                )?;
                insert(
                    &mut m,
                    named_params! {
                        ":minute_ns": i(minute),
                        ":node_id": a.node_id,
                        ":port": a.port,
                        ":queue_id": a.queue_id.unwrap_or(0),
                        ":samples": i(a.samples),
                        ":occupancy_sum": a.avg * a.samples as f64,
                        ":max_occupancy": i(a.max),
                    },
                )?;
            }
            let mut p = tx.prepare_cached(&INSERT.port_stats)?;
            for a in &b.ports {
                insert(
                    &mut p,
                    named_params! {
                        ":time_ns": i(b.time_ns),
                        ":node_id": a.node_id,
                        ":port": a.port,
                        ":samples": i(a.samples),
                        ":avg_hop_latency": a.avg,
                        ":max_hop_latency": i(a.max),
                        ":drops": i(a.drops),
                    },
                )?;
            }
            let mut r = tx.prepare_cached(&INSERT.raw_reports)?;
            for (t, src, d) in &b.raw {
                insert(
                    &mut r,
                    named_params! {
                        ":time_ns": i(*t),
                        ":source": src.to_string(),
                        ":datagram": d,
                    },
                )?;
            }
            let mut inc = tx.prepare_cached(&INSERT.incidents)?;
            for n in &b.incidents {
                insert(
                    &mut inc,
                    named_params! {
                        ":id": i(n.id),
                        ":version": i(incident_version(n)),
                        ":kind": n.kind.label(),
                        ":node_id": n.place.node,
                        ":start_ns": i(n.start_ns),
                        ":last_update_ns": i(n.last_update_ns),
                        ":end_ns": n.end_ns.map(i),
                        ":body": n.to_json().to_string(),
                        ":received_ns": i(received_ns),
                    },
                )?;
            }
            let mut t = tx.prepare_cached(&INSERT.totals)?;
            for (name, v) in &b.totals {
                insert(
                    &mut t,
                    named_params! {
                        ":run": self.run,
                        ":name": name,
                        ":value": i(*v),
                        ":run_value": i(*v),
                    },
                )?;
            }
        }
        Ok(())
    }
}

impl RowSink for SqliteStore {
    type Error = StoreError;

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
}

impl Store for SqliteStore {
    fn prune(
        &self,
        before_ns: u64,
        received_before_ns: u64,
        keep_raw: u64,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let t = i(before_ns);
        let r = i(received_before_ns);
        // Rows of schema version 1 have no receive time: they go by report time as then.
        conn.execute(
            "DELETE FROM events WHERE received_ns < ?2 OR (received_ns IS NULL AND time_ns < ?1)",
            [t, r],
        )?;
        conn.execute("DELETE FROM flows WHERE last_seen_ns < ?1", [t])?;
        conn.execute("DELETE FROM flow_stats WHERE time_ns < ?1", [t])?;
        conn.execute("DELETE FROM queue_stats WHERE time_ns < ?1", [t])?;
        conn.execute("DELETE FROM queue_stats_1m WHERE minute_ns < ?1", [t])?;
        conn.execute("DELETE FROM port_stats WHERE time_ns < ?1", [t])?;
        conn.execute(
            "DELETE FROM incidents WHERE received_ns < ?2
               OR (received_ns IS NULL AND coalesce(end_ns, last_update_ns) < ?1)",
            [t, r],
        )?;
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

    fn next_incident_id(&self) -> Result<u64, StoreError> {
        let max: Option<i64> = self
            .conn()
            .query_row("SELECT max(id) FROM incidents", [], |r| r.get(0))
            .optional()?
            .flatten();
        Ok(max.map_or(1, |m| m as u64 + 1))
    }

    fn events(&self, q: &HistoryQuery) -> Result<Page<StoredEvent>, StoreError> {
        let limit = q.page_size(500)?;
        let kind = q.event_kind()?;
        let (t, after) = q.cursor('e')?.unwrap_or((i64::MAX, i64::MAX));
        // Newest first by (time, ID): the order of the time index (its entries end with the
        // row's ID), or of the (node, time) index for one node's, walked down from the cursor
        // or `until`, so a page reads `limit` rows (and those its filters skip), never sorting
        // the events in the range, and a node with few events never walks everyone's.
        let sql = if q.node.is_some() {
            "SELECT id,time_ns,kind,node_id,port,queue_id,flow_id,src,dst,proto,src_port,dst_port,evidence,incident_id FROM events INDEXED BY events_node
             WHERE node_id = ?4 AND time_ns >= ?1 AND time_ns <= ?2 AND NOT (time_ns = ?6 AND id >= ?7)
               AND (?3 IS NULL OR kind = ?3)
             ORDER BY time_ns DESC, id DESC LIMIT ?5"
        } else {
            "SELECT id,time_ns,kind,node_id,port,queue_id,flow_id,src,dst,proto,src_port,dst_port,evidence,incident_id FROM events INDEXED BY events_time
             WHERE time_ns >= ?1 AND time_ns <= ?2 AND NOT (time_ns = ?6 AND id >= ?7)
               AND (?3 IS NULL OR kind = ?3) AND ?4 IS NULL
             ORDER BY time_ns DESC, id DESC LIMIT ?5"
        };
        let rows = self.read(q.timeout, |conn| {
            let mut st = conn.prepare_cached(sql)?;
            st.query_map(
                params![
                    i(q.since.unwrap_or(0)),
                    i(q.until.unwrap_or(u64::MAX)).min(t),
                    kind,
                    q.node,
                    limit + 1,
                    t,
                    after
                ],
                |r| {
                    let src: Option<String> = r.get(7)?;
                    let flow = match src {
                        Some(src) => Some(FlowRef {
                            src,
                            dst: r.get(8)?,
                            proto: r.get(9)?,
                            src_port: r.get(10)?,
                            dst_port: r.get(11)?,
                        }),
                        None => None,
                    };
                    Ok(EventRow {
                        id: r.get(0)?,
                        time_ns: r.get(1)?,
                        kind: r.get(2)?,
                        node_id: r.get(3)?,
                        port: r.get(4)?,
                        queue_id: r.get(5)?,
                        flow_id: r.get(6)?,
                        flow,
                        evidence: r.get(12)?,
                        incident_id: r.get(13)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()
        })?;
        let rows = rows
            .into_iter()
            .map(|e| {
                let cursor = format!("e.{}.{}", e.time_ns, e.id);
                Ok((
                    StoredEvent {
                        id: e.id,
                        time_ns: e.time_ns,
                        kind: parse_kind(&e.kind)?,
                        node_id: e.node_id,
                        port: e.port,
                        queue_id: e.queue_id,
                        flow_id: e.flow_id,
                        flow: e.flow,
                        evidence: parse_evidence(&e.evidence)?,
                        incident_id: e.incident_id,
                    },
                    cursor,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn flows(&self, q: &HistoryQuery) -> Result<Page<FlowSummary>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, id) = q.cursor('f')?.unwrap_or((i64::MAX, i64::MAX));
        let rows = self.read(q.timeout, |conn| {
            // Newest first, ties by row: (last_seen_ns, rowid) is the index's order, so a page
            // starts at its cursor without reading the pages before it.
            let mut st = conn.prepare_cached(
                "SELECT src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,last_drop_reason,path,path_changes,e2e_p50,e2e_p99,rowid
                 FROM flows WHERE last_seen_ns <= ?4 AND NOT (last_seen_ns = ?4 AND rowid >= ?5) AND last_seen_ns >= ?1 AND first_seen_ns <= ?2
                 ORDER BY last_seen_ns DESC, rowid DESC LIMIT ?3",
            )?;
            st.query_map(params![i(q.since.unwrap_or(0)), i(q.until.unwrap_or(u64::MAX)), limit + 1, t, id], flow_row)?
            .collect::<Result<Vec<_>, _>>()
        })?;
        let rows = rows
            .into_iter()
            .map(|(f, cursor)| Ok((f.parse()?, cursor)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn flow(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Option<FlowSummary>, StoreError> {
        let row = self.read(q.timeout, |conn| {
            conn.prepare_cached(
                "SELECT src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,last_drop_reason,path,path_changes,e2e_p50,e2e_p99,rowid
                 FROM flows WHERE src = ?1 AND dst = ?2 AND proto = ?3 AND src_port = ?4 AND dst_port = ?5",
            )?
            .query_row(
                params![flow.src, flow.dst, flow.proto, flow.src_port, flow.dst_port],
                |r| flow_row(r).map(|(v, _)| v),
            )
            .optional()
        })?;
        row.map(FlowText::parse).transpose()
    }

    fn incidents(&self, q: &HistoryQuery) -> Result<Page<StoredIncident>, StoreError> {
        let limit = q.page_size(500)?;
        let kind = q.incident_kind()?;
        let (t, id) = q.cursor('i')?.unwrap_or((i64::MAX, i64::MAX));
        let rows = self.read(q.timeout, |conn| {
            // Overlapping [since, until]: started by `until`, not ended before `since`.
            // A node's incidents down its own index (node, start), the rest down the start's.
            let mut st = conn.prepare_cached(if q.node.is_some() {
                "SELECT start_ns, id, body FROM incidents INDEXED BY incidents_node
                 WHERE node_id = ?4 AND start_ns <= ?2 AND NOT (start_ns = ?5 AND id >= ?6)
                   AND coalesce(end_ns, last_update_ns) >= ?1 AND (?3 IS NULL OR kind = ?3)
                 ORDER BY start_ns DESC, id DESC LIMIT ?7"
            } else {
                "SELECT start_ns, id, body FROM incidents INDEXED BY incidents_start
                 WHERE start_ns <= ?2 AND NOT (start_ns = ?5 AND id >= ?6)
                   AND coalesce(end_ns, last_update_ns) >= ?1 AND (?3 IS NULL OR kind = ?3)
                   AND ?4 IS NULL
                 ORDER BY start_ns DESC, id DESC LIMIT ?7"
            })?;
            st.query_map(
                params![
                    i(q.since.unwrap_or(0)),
                    i(q.until.unwrap_or(u64::MAX)).min(t),
                    kind,
                    q.node,
                    t,
                    id,
                    limit + 1
                ],
                |r| {
                    let (start, id, body): (i64, i64, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
                    Ok((body, format!("i.{start}.{id}")))
                },
            )?
            .collect::<Result<Vec<_>, _>>()
        })?;
        let rows = rows
            .into_iter()
            .map(|(body, cursor)| Ok((parse_incident(&body)?, cursor)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn queue_series(&self, q: &HistoryQuery) -> Result<Page<QueueInterval>, StoreError> {
        let limit = q.page_size(MAX_HISTORY_LIMIT)?;
        let (t, id) = q.cursor('q')?.unwrap_or((i64::MIN, i64::MIN));
        let resolution = q.pick_resolution();
        let since = q.since.unwrap_or(0);
        // Each reads down an index whose entries end with the row's ID, the page's order: by
        // time, or by node then time (a node's rows of a long range are a small part of it).
        // The page starts at the later of `since` and the cursor's time, so the index is
        // entered there (a row-value bound would be entered at the cursor's, the oldest row).
        let (sql, since) = match (resolution, q.node.is_some()) {
            (Resolution::Raw, false) => (
                "SELECT time_ns,node_id,port,queue_id,samples,avg_occupancy,max_occupancy,rowid
                 FROM queue_stats INDEXED BY queue_stats_time
                 WHERE time_ns >= ?1 AND time_ns <= ?2 AND NOT (time_ns = ?5 AND rowid <= ?6)
                   AND ?3 IS NULL ORDER BY time_ns, rowid LIMIT ?4",
                since,
            ),
            (Resolution::Raw, true) => (
                "SELECT time_ns,node_id,port,queue_id,samples,avg_occupancy,max_occupancy,rowid
                 FROM queue_stats INDEXED BY queue_stats_node
                 WHERE node_id = ?3 AND time_ns >= ?1 AND time_ns <= ?2
                   AND NOT (time_ns = ?5 AND rowid <= ?6)
                 ORDER BY time_ns, rowid LIMIT ?4",
                since,
            ),
            // The minutes that overlap the range.
            (Resolution::Minute, false) => (
                "SELECT minute_ns,node_id,port,queue_id,samples,
                   CASE WHEN samples > 0 THEN occupancy_sum / samples ELSE 0.0 END,max_occupancy,rowid
                 FROM queue_stats_1m INDEXED BY queue_stats_1m_time
                 WHERE minute_ns >= ?1 AND minute_ns <= ?2 AND NOT (minute_ns = ?5 AND rowid <= ?6)
                   AND ?3 IS NULL ORDER BY minute_ns, rowid LIMIT ?4",
                since - since % MINUTE_NS,
            ),
            (Resolution::Minute, true) => (
                "SELECT minute_ns,node_id,port,queue_id,samples,
                   CASE WHEN samples > 0 THEN occupancy_sum / samples ELSE 0.0 END,max_occupancy,rowid
                 FROM queue_stats_1m INDEXED BY queue_stats_1m_node
                 WHERE node_id = ?3 AND minute_ns >= ?1 AND minute_ns <= ?2
                   AND NOT (minute_ns = ?5 AND rowid <= ?6)
                 ORDER BY minute_ns, rowid LIMIT ?4",
                since - since % MINUTE_NS,
            ),
        };
        let since = since.max(u64::try_from(t).unwrap_or(0));
        let rows = self.read(q.timeout, |conn| {
            let mut st = conn.prepare_cached(sql)?;
            st.query_map(
                params![
                    i(since),
                    i(q.until.unwrap_or(u64::MAX)),
                    q.node,
                    limit + 1,
                    t,
                    id
                ],
                |r| {
                    let time: u64 = r.get(0)?;
                    Ok((
                        QueueInterval {
                            time_ns: time,
                            node_id: r.get(1)?,
                            port: r.get(2)?,
                            queue_id: r.get(3)?,
                            samples: r.get(4)?,
                            avg_occupancy: r.get(5)?,
                            max_occupancy: r.get(6)?,
                        },
                        format!("q.{time}.{}", r.get::<_, i64>(7)?),
                    ))
                },
            )?
            .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(Page::of(rows, limit).at(resolution))
    }

    fn flow_series(
        &self,
        flow: &FlowRef,
        q: &HistoryQuery,
    ) -> Result<Vec<FlowInterval>, StoreError> {
        let limit = q.page_size(600)?;
        let minutes = q.pick_resolution() == Resolution::Minute;
        let since = q.since.unwrap_or(0);
        // Per minute, the flow's raw rows of its newest `limit` minutes are read (down the
        // flow's index, stopping at the minute past them) and folded ([`flow_minutes`]).
        let since = if minutes {
            since - since % MINUTE_NS
        } else {
            since
        };
        let mut rows = self.read(q.timeout, |conn| {
            let mut st = conn.prepare_cached(
                "SELECT s.time_ns,s.samples,s.e2e_avg,s.e2e_max,s.hop_latency_max,s.queue_occupancy_max
                 FROM flows f JOIN flow_stats s ON s.flow = f.rowid
                 WHERE f.src = ?1 AND f.dst = ?2 AND f.proto = ?3 AND f.src_port = ?4 AND f.dst_port = ?5
                   AND s.time_ns >= ?6 AND s.time_ns <= ?7
                 ORDER BY s.time_ns DESC LIMIT ?8",
            )?;
            let rows = st.query_map(
                params![flow.src, flow.dst, flow.proto, flow.src_port, flow.dst_port,
                        i(since), i(q.until.unwrap_or(u64::MAX)), if minutes { -1 } else { i64::from(limit) }],
                |r| {
                    Ok((
                        r.get::<_, u64>(0)?,
                        r.get::<_, u64>(1)?,
                        r.get::<_, Option<u64>>(2)?,
                        r.get::<_, Option<u64>>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                    ))
                },
            )?;
            let mut out = Vec::new();
            let mut seen = 0u32;
            let mut last_minute = None;
            for r in rows {
                let r = r?;
                if minutes {
                    let m = r.0 - r.0 % MINUTE_NS;
                    if last_minute != Some(m) {
                        if seen == limit {
                            break;
                        }
                        seen += 1;
                        last_minute = Some(m);
                    }
                }
                out.push(r);
            }
            Ok(out)
        })?;
        rows.reverse();
        let raw = rows
            .into_iter()
            .map(|(time_ns, samples, avg, max, hops, queues)| {
                Ok(FlowInterval {
                    time_ns,
                    samples,
                    e2e_latency_avg: avg,
                    e2e_latency_max: max,
                    hop_latency_max: parse_hops(&hops)?,
                    queue_occupancy_max: parse_hops(&queues)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(if minutes { flow_minutes(raw) } else { raw })
    }

    fn counts(&self) -> Result<RowCounts, StoreError> {
        self.read(None, |conn| {
            let mut m = RowCounts::new();
            for t in super::COUNTED_TABLES {
                let n: u64 =
                    conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?;
                m.insert(t.into(), n);
            }
            Ok(m)
        })
    }

    fn totals(&self) -> Result<Totals, StoreError> {
        self.read(None, |conn| {
            let mut st = conn.prepare_cached("SELECT name, value FROM totals ORDER BY name")?;
            st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?
                .collect::<Result<Totals, _>>()
        })
    }
}

/// A stored event's columns, its text ones not yet parsed (that happens outside the reader).
struct EventRow {
    id: u64,
    time_ns: u64,
    kind: String,
    node_id: Option<u32>,
    port: Option<u32>,
    queue_id: Option<u8>,
    flow_id: Option<u64>,
    flow: Option<FlowRef>,
    evidence: String,
    incident_id: Option<u64>,
}

/// A `flows` row, its path still the stored JSON text.
struct FlowText {
    flow: FlowSummary,
    path: String,
}

impl FlowText {
    fn parse(self) -> Result<FlowSummary, StoreError> {
        Ok(self.flow.with_path(parse_path(&self.path)?))
    }
}

/// A `flows` row (the columns of [`Store::flows`]'s query), with its cursor.
fn flow_row(r: &rusqlite::Row<'_>) -> Result<(FlowText, String), rusqlite::Error> {
    let last: u64 = r.get(6)?;
    Ok((
        FlowText {
            flow: FlowSummary {
                id: None,
                flow: FlowRef {
                    src: r.get(0)?,
                    dst: r.get(1)?,
                    proto: r.get(2)?,
                    src_port: r.get(3)?,
                    dst_port: r.get(4)?,
                },
                first_seen_ns: r.get(5)?,
                last_seen_ns: last,
                reports: r.get(7)?,
                drops: r.get(8)?,
                last_drop_reason: r.get(9)?,
                path: Vec::new(),
                path_detail: Vec::new(),
                path_changes: r.get(11)?,
                e2e_latency_p50: r.get(12)?,
                e2e_latency_p99: r.get(13)?,
            },
            path: r.get(10)?,
        },
        format!("f.{last}.{}", r.get::<_, i64>(14)?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each table's columns as the file has them: (name, type, not null), by name.
    fn columns(conn: &Connection, table: &str) -> Vec<(String, String, bool)> {
        let mut cols: Vec<(String, String, bool)> = conn
            .prepare(&format!(
                "SELECT name, type, \"notnull\" FROM pragma_table_info('{table}')"
            ))
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        cols.sort();
        cols
    }

    /// A value listed out of its parameter's place is caught (the tests run debug builds), not
    /// bound to another column.
    #[test]
    #[should_panic(expected = ":name")]
    fn a_value_out_of_its_parameters_place_is_caught() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let mut t = conn.prepare(&INSERT.totals).unwrap();
        let _ = insert(
            &mut t,
            named_params! { ":name": "reports", ":run": 1, ":value": 2, ":run_value": 2 },
        );
    }

    /// The file as the declaration says, new or migrated from the first release's schema: a
    /// column declared and not created (or migrated) fails here.
    #[test]
    fn new_and_migrated_files_have_the_declared_columns() {
        let v1 = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/schema-v1-sqlite.sql"
        ))
        .unwrap();
        let mut fresh = Connection::open_in_memory().unwrap();
        migrate(&mut fresh).unwrap();
        let mut old = Connection::open_in_memory().unwrap();
        old.execute_batch(&v1).unwrap();
        migrate(&mut old).unwrap();
        for t in schema::TABLES
            .iter()
            .filter(|t| t.in_backend(Backend::Sqlite))
        {
            let mut declared: Vec<(String, String, bool)> = t
                .columns(Backend::Sqlite)
                .map(|c| {
                    let d = t.sqlite_column(c);
                    let ty = d.split_whitespace().nth(1).unwrap_or_default().to_string();
                    (c.name.to_string(), ty, d.contains("NOT NULL"))
                })
                .collect();
            declared.sort();
            assert_eq!(columns(&fresh, t.name), declared, "a new file's {}", t.name);
            assert_eq!(
                columns(&old, t.name),
                declared,
                "a migrated file's {}",
                t.name
            );
        }
    }
}
