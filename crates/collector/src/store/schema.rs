//! The stored tables, declared once: each table's columns with their types, nullability, the
//! schema version that added them and the backends that store them, and each backend's table
//! options (SQLite's keys and indexes, ClickHouse's engine, partition, order and shard key).
//! The SQLite and ClickHouse schemas, their migrations and the insert column lists are derived
//! from here; the ClickHouse row types are checked against it by a test.
//!
//! The backends differ where their jobs do: ClickHouse rows carry the collector's `source`
//! (many collectors write one cluster) and a flow's hash (its shard key); SQLite keys its rows
//! by rowid and upserts a flow's summary in place, so it keeps the counts of the flow's last
//! write beside them (`run_*`).

/// A stored value's type, as each backend spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    U8,
    U16,
    U32,
    U64,
    F64,
    Text,
    /// Raw bytes (a datagram): SQLite's `BLOB`, ClickHouse's length-prefixed `String`.
    Bytes,
}

impl Ty {
    fn sqlite(self) -> &'static str {
        match self {
            Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => "INTEGER",
            Ty::F64 => "REAL",
            Ty::Text => "TEXT",
            Ty::Bytes => "BLOB",
        }
    }

    fn clickhouse(self) -> &'static str {
        match self {
            Ty::U8 => "UInt8",
            Ty::U16 => "UInt16",
            Ty::U32 => "UInt32",
            Ty::U64 => "UInt64",
            Ty::F64 => "Float64",
            Ty::Text | Ty::Bytes => "String",
        }
    }
}

/// A storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    ClickHouse,
}

/// Which backends store a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    Both,
    Only(Backend),
}

/// One column of a stored table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub name: &'static str,
    ty: Ty,
    nullable: bool,
    /// The schema version that added it (1: the first release's), added to older stores by
    /// `ALTER TABLE` at open. SQLite adds no `NOT NULL` column without a default, so there a
    /// later column is nullable unless it has [`Column::sqlite_default`].
    since: u32,
    stored: Stored,
    /// SQLite: `NOT NULL DEFAULT` this, and added to a file that lacks it whatever its version
    /// (the flows' `run` columns came without a version of their own).
    sqlite_default: Option<i64>,
}

const fn col(name: &'static str, ty: Ty) -> Column {
    Column {
        name,
        ty,
        nullable: false,
        since: 1,
        stored: Stored::Both,
        sqlite_default: None,
    }
}

impl Column {
    const fn null(mut self) -> Self {
        self.nullable = true;
        self
    }

    const fn since(mut self, version: u32) -> Self {
        self.since = version;
        self
    }

    const fn only(mut self, backend: Backend) -> Self {
        self.stored = Stored::Only(backend);
        self
    }

    const fn sqlite_default(mut self, value: i64) -> Self {
        self.sqlite_default = Some(value);
        self
    }

    fn in_backend(&self, b: Backend) -> bool {
        match self.stored {
            Stored::Both => true,
            Stored::Only(o) => o == b,
        }
    }

    /// `name TYPE [NOT NULL] [DEFAULT v]` as SQLite declares it (without any key).
    fn sqlite(&self) -> String {
        let mut s = format!("{} {}", self.name, self.ty.sqlite());
        if let Some(d) = self.sqlite_default {
            s += &format!(" NOT NULL DEFAULT {d}");
        } else if !self.nullable && self.since == 1 {
            s += " NOT NULL";
        }
        s
    }

    /// `name Type` as ClickHouse declares it.
    fn clickhouse(&self) -> String {
        if self.nullable {
            format!("{} Nullable({})", self.name, self.ty.clickhouse())
        } else {
            format!("{} {}", self.name, self.ty.clickhouse())
        }
    }

    /// The column as `b` declares it.
    pub(crate) fn declared(&self, b: Backend) -> String {
        match b {
            Backend::Sqlite => self.sqlite(),
            Backend::ClickHouse => self.clickhouse(),
        }
    }
}

/// An SQLite index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Index {
    name: &'static str,
    columns: &'static str,
    unique: bool,
}

const fn index(name: &'static str, columns: &'static str) -> Index {
    Index {
        name,
        columns,
        unique: false,
    }
}

const fn unique_index(name: &'static str, columns: &'static str) -> Index {
    Index {
        unique: true,
        ..index(name, columns)
    }
}

/// How SQLite keeps a table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqliteTable {
    /// The primary key's columns (one integer column: the rowid itself).
    primary_key: &'static [&'static str],
    /// Rowids never reused (`AUTOINCREMENT`): a ring's oldest rows are the lowest IDs.
    autoincrement: bool,
    indexes: &'static [Index],
}

/// How ClickHouse keeps a table (a `<name>_local` table per server in a cluster, with a
/// `Distributed` table of the name over them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClickHouseTable {
    /// The engine, unreplicated (`Replicated` is prefixed in a replicated cluster).
    pub engine: &'static str,
    /// The time column partitioning by UTC day.
    pub partition_time: &'static str,
    pub order_by: &'static str,
    /// The `Distributed` table's sharding key.
    pub shard_key: &'static str,
    /// Rows per index mark: tables read a page of keys at a time are indexed finer than
    /// ClickHouse's default 8192, so a key reads fewer rows around it.
    pub granularity: u32,
}

/// A stored table: its columns in declaration order (each backend's table has its own in this
/// order) and how each backend that has it keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Table {
    pub name: &'static str,
    columns: &'static [Column],
    sqlite: Option<SqliteTable>,
    pub clickhouse: Option<ClickHouseTable>,
}

use Backend::{ClickHouse as CH, Sqlite as SQ};
use Ty::*;

/// The flows' 5-tuple, as every table keyed by flow stores it.
const SRC: Column = col("src", Text);
const DST: Column = col("dst", Text);
const PROTO: Column = col("proto", U8);
const SRC_PORT: Column = col("src_port", U16);
const DST_PORT: Column = col("dst_port", U16);
/// The collector that wrote a ClickHouse row (`[store] source`).
const SOURCE: Column = col("source", Text).only(CH);

/// Events, one row each.
pub(crate) const EVENTS: Table = Table {
    name: "events",
    columns: &[
        SOURCE,
        col("id", U64),
        col("time_ns", U64),
        col("kind", Text),
        col("node_id", U32).null(),
        col("port", U32).null(),
        col("queue_id", U8).null(),
        col("flow_id", U64).null(),
        SRC.null(),
        DST.null(),
        PROTO.null(),
        SRC_PORT.null(),
        DST_PORT.null(),
        col("evidence", Text),
        // The collector's receive time of the report that raised the event (its own clock,
        // where `time_ns` may be the switch's).
        col("received_ns", U64).since(2),
        // The incident the event belonged to when stored (`Event::incident_id`).
        col("incident_id", U64).null().since(3),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &["id"],
        autoincrement: false,
        indexes: &[
            index("events_time", "time_ns"),
            index("events_node", "node_id, time_ns"),
        ],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "MergeTree",
        partition_time: "time_ns",
        order_by: "time_ns, source, id",
        shard_key: "id",
        granularity: 8192,
    }),
};

/// Flow summaries: SQLite one row per flow, upserted; ClickHouse a version per flush a flow
/// changed in, per life of the flow in a collector's memory (`run`, `live_id`).
pub(crate) const FLOWS: Table = Table {
    name: "flows",
    columns: &[
        SOURCE,
        col("run", U64).sqlite_default(0),
        col("live_id", U64).sqlite_default(0),
        col("flow_hash", U64).only(CH),
        SRC,
        DST,
        PROTO,
        SRC_PORT,
        DST_PORT,
        col("first_seen_ns", U64),
        col("last_seen_ns", U64),
        col("reports", U64),
        col("drops", U64),
        col("last_drop_reason", U8).null(),
        col("path", Text),
        col("path_changes", U64),
        col("e2e_p50", U64).null(),
        col("e2e_p99", U64).null(),
        // The counts of the life that last wrote the row, as written: the next write of the
        // same life adds only what is new.
        col("run_reports", U64).only(SQ).sqlite_default(0),
        col("run_drops", U64).only(SQ).sqlite_default(0),
        col("run_path_changes", U64).only(SQ).sqlite_default(0),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &["src", "dst", "proto", "src_port", "dst_port"],
        autoincrement: false,
        indexes: &[index("flows_last_seen", "last_seen_ns")],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "ReplacingMergeTree(last_seen_ns)",
        partition_time: "last_seen_ns",
        order_by: "flow_hash, source, run, live_id",
        shard_key: "flow_hash",
        granularity: 1024,
    }),
};

/// Each flow's latency per flush interval.
pub(crate) const FLOW_STATS: Table = Table {
    name: "flow_stats",
    columns: &[
        col("time_ns", U64),
        // SQLite: the flow's rowid in `flows`.
        col("flow", U64).only(SQ),
        col("flow_hash", U64).only(CH),
        SRC.only(CH),
        DST.only(CH),
        PROTO.only(CH),
        SRC_PORT.only(CH),
        DST_PORT.only(CH),
        col("samples", U64),
        col("e2e_avg", U64).null(),
        col("e2e_max", U64).null(),
        // Per hop, JSON arrays.
        col("hop_latency_max", Text),
        col("queue_occupancy_max", Text),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &[],
        autoincrement: false,
        indexes: &[index("flow_stats_flow", "flow, time_ns")],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "MergeTree",
        partition_time: "time_ns",
        order_by: "flow_hash, time_ns",
        shard_key: "flow_hash",
        granularity: 8192,
    }),
};

/// Each queue's occupancy per flush interval.
pub(crate) const QUEUE_STATS: Table = Table {
    name: "queue_stats",
    columns: &[
        col("time_ns", U64),
        SOURCE,
        col("node_id", U32),
        col("port", U32),
        col("queue_id", U8),
        col("samples", U64),
        col("avg_occupancy", F64),
        col("max_occupancy", U64),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &[],
        autoincrement: false,
        indexes: &[
            index("queue_stats_time", "time_ns"),
            index("queue_stats_node", "node_id, time_ns"),
        ],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "MergeTree",
        partition_time: "time_ns",
        order_by: "time_ns, node_id, port, queue_id",
        shard_key: "node_id",
        granularity: 8192,
    }),
};

/// SQLite's per-minute rollup of `queue_stats`, which long ranges read (ClickHouse rolls up
/// with materialized views of its own).
pub(crate) const QUEUE_STATS_1M: Table = Table {
    name: "queue_stats_1m",
    columns: &[
        col("minute_ns", U64),
        col("node_id", U32),
        col("port", U32),
        col("queue_id", U8),
        col("samples", U64),
        col("occupancy_sum", F64),
        col("max_occupancy", U64),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &[],
        autoincrement: false,
        indexes: &[
            unique_index("queue_stats_1m_key", "minute_ns, node_id, port, queue_id"),
            index("queue_stats_1m_time", "minute_ns"),
            index("queue_stats_1m_node", "node_id, minute_ns"),
        ],
    }),
    clickhouse: None,
};

/// Each egress port's hop latency and drops per flush interval.
pub(crate) const PORT_STATS: Table = Table {
    name: "port_stats",
    columns: &[
        col("time_ns", U64),
        SOURCE,
        col("node_id", U32),
        col("port", U32),
        col("samples", U64),
        col("avg_hop_latency", F64),
        col("max_hop_latency", U64),
        col("drops", U64),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &[],
        autoincrement: false,
        indexes: &[index("port_stats_time", "time_ns")],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "MergeTree",
        partition_time: "time_ns",
        order_by: "time_ns, node_id, port",
        shard_key: "node_id",
        granularity: 8192,
    }),
};

/// The bounded ring of raw report datagrams.
pub(crate) const RAW_REPORTS: Table = Table {
    name: "raw_reports",
    columns: &[
        col("id", U64).only(SQ),
        SOURCE,
        col("time_ns", U64),
        // SQLite's name for the sender's address (ClickHouse's `source` is the collector's).
        col("source", Text).only(SQ),
        col("from_addr", Text).only(CH),
        col("datagram", Bytes),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &["id"],
        autoincrement: true,
        indexes: &[],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "MergeTree",
        partition_time: "time_ns",
        order_by: "time_ns",
        shard_key: "rand()",
        granularity: 8192,
    }),
};

/// Incidents, the newest version of each.
pub(crate) const INCIDENTS: Table = Table {
    name: "incidents",
    columns: &[
        SOURCE,
        col("id", U64),
        col("version", U64),
        col("kind", Text),
        col("node_id", U32).null(),
        col("start_ns", U64),
        col("last_update_ns", U64),
        col("end_ns", U64).null(),
        // The incident as the API serves it (JSON).
        col("body", Text),
        // When this version was stored (the collector's clock): retention keeps an incident
        // while it is updated, whatever the switches' clocks say.
        col("received_ns", U64).since(2),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &["id"],
        autoincrement: false,
        indexes: &[
            index("incidents_start", "start_ns"),
            index("incidents_node", "node_id, start_ns"),
        ],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "ReplacingMergeTree(version)",
        partition_time: "start_ns",
        order_by: "source, id",
        shard_key: "id",
        granularity: 1024,
    }),
};

/// The collector's counters, summed over its runs: SQLite keeps the sum and the last run's
/// count; ClickHouse a version per write of each run.
pub(crate) const TOTALS: Table = Table {
    name: "totals",
    columns: &[
        SOURCE,
        col("run", U64),
        col("name", Text),
        col("value", U64),
        col("run_value", U64).only(SQ),
        col("version", U64).only(CH),
    ],
    sqlite: Some(SqliteTable {
        primary_key: &["name"],
        autoincrement: false,
        indexes: &[],
    }),
    clickhouse: Some(ClickHouseTable {
        engine: "ReplacingMergeTree(version)",
        partition_time: "version",
        order_by: "name, source, run",
        shard_key: "rand()",
        granularity: 8192,
    }),
};

/// Every stored table.
pub(crate) const TABLES: [&Table; 9] = [
    &FLOWS,
    &FLOW_STATS,
    &QUEUE_STATS,
    &QUEUE_STATS_1M,
    &PORT_STATS,
    &EVENTS,
    &INCIDENTS,
    &RAW_REPORTS,
    &TOTALS,
];

impl Table {
    /// The columns `b` stores, in order.
    pub(crate) fn columns(&self, b: Backend) -> impl Iterator<Item = &Column> {
        self.columns.iter().filter(move |c| c.in_backend(b))
    }

    /// Whether `b` stores this table.
    pub(crate) fn in_backend(&self, b: Backend) -> bool {
        match b {
            Backend::Sqlite => self.sqlite.is_some(),
            Backend::ClickHouse => self.clickhouse.is_some(),
        }
    }

    /// The column names `b` stores, comma-separated.
    pub(crate) fn names(&self, b: Backend) -> String {
        self.columns(b)
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// ClickHouse's column list: `name Type, ...`.
    pub(crate) fn clickhouse_columns(&self) -> String {
        self.columns(CH)
            .map(Column::clickhouse)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Column `c` as this table's SQLite `CREATE TABLE` declares it: a single-column key inline
    /// (an integer one is the rowid).
    pub(crate) fn sqlite_column(&self, c: &Column) -> String {
        match &self.sqlite {
            Some(t) if t.primary_key == [c.name] => {
                let auto = if t.autoincrement {
                    " AUTOINCREMENT"
                } else {
                    ""
                };
                format!("{} {} PRIMARY KEY{auto}", c.name, c.ty.sqlite())
            }
            _ => c.sqlite(),
        }
    }

    /// SQLite's `CREATE TABLE` and `CREATE INDEX` statements, where missing.
    fn sqlite_create(&self) -> String {
        let Some(t) = &self.sqlite else {
            return String::new();
        };
        let mut cols: Vec<String> = self.columns(SQ).map(|c| self.sqlite_column(c)).collect();
        if t.primary_key.len() > 1 {
            cols.push(format!("PRIMARY KEY({})", t.primary_key.join(", ")));
        }
        let mut sql = format!(
            "CREATE TABLE IF NOT EXISTS {}(\n  {});\n",
            self.name,
            cols.join(", ")
        );
        for i in t.indexes {
            let unique = if i.unique { "UNIQUE " } else { "" };
            sql += &format!(
                "CREATE {unique}INDEX IF NOT EXISTS {} ON {}({});\n",
                i.name, self.name, i.columns
            );
        }
        sql
    }

    /// What SQLite's `INSERT INTO` of a row names: `table(columns) VALUES(:columns)`, every
    /// column but an `AUTOINCREMENT` key, each value bound by its name, so the statement does
    /// not depend on the file's column order.
    pub(crate) fn sqlite_into(&self) -> String {
        let auto = self
            .sqlite
            .filter(|t| t.autoincrement)
            .and_then(|t| t.primary_key.first().copied());
        let names: Vec<&str> = self
            .columns(SQ)
            .map(|c| c.name)
            .filter(|n| Some(*n) != auto)
            .collect();
        let values: Vec<String> = names.iter().map(|n| format!(":{n}")).collect();
        format!(
            "{}({}) VALUES({})",
            self.name,
            names.join(","),
            values.join(",")
        )
    }
}

/// The whole SQLite schema, each statement `IF NOT EXISTS` (a new file gets the newest columns).
pub(crate) fn sqlite_schema() -> String {
    TABLES.iter().map(|t| t.sqlite_create()).collect()
}

/// A column a store older than its version lacks: (version, table, column as declared).
pub(crate) struct Migration {
    pub since: u32,
    pub table: &'static str,
    pub column: &'static str,
    pub declared: String,
    /// SQLite: added whatever the file's version (it has a default).
    pub always: bool,
}

/// The columns added after the first release, per table, that `b` stores.
pub(crate) fn migrations(b: Backend) -> Vec<Migration> {
    TABLES
        .iter()
        .filter(|t| t.in_backend(b))
        .flat_map(|t| {
            t.columns(b)
                .filter(move |c| c.since > 1 || (b == SQ && c.sqlite_default.is_some()))
                .map(move |c| Migration {
                    since: c.since,
                    table: t.name,
                    column: c.name,
                    declared: c.declared(b),
                    always: b == SQ && c.sqlite_default.is_some(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_stored_somewhere_and_names_its_keys() {
        for t in TABLES {
            assert!(t.sqlite.is_some() || t.clickhouse.is_some(), "{}", t.name);
            if let Some(s) = &t.sqlite {
                for k in s.primary_key {
                    assert!(t.columns(SQ).any(|c| c.name == *k), "{}.{k}", t.name);
                }
            }
            for b in [SQ, CH] {
                let mut names: Vec<_> = t.columns(b).map(|c| c.name).collect();
                names.sort_unstable();
                let n = names.len();
                names.dedup();
                assert_eq!(names.len(), n, "{} names a column twice in {b:?}", t.name);
            }
        }
    }

    #[test]
    fn later_columns_are_migrations_and_sqlite_nullable_without_a_default() {
        let m = migrations(SQ);
        let added: Vec<_> = m
            .iter()
            .map(|m| (m.since, m.table, m.declared.as_str()))
            .collect();
        assert!(added.contains(&(2, "events", "received_ns INTEGER")));
        assert!(added.contains(&(3, "events", "incident_id INTEGER")));
        assert!(added.contains(&(1, "flows", "run_reports INTEGER NOT NULL DEFAULT 0")));
        let m = migrations(CH);
        let added: Vec<_> = m
            .iter()
            .map(|m| (m.since, m.table, m.declared.as_str()))
            .collect();
        assert_eq!(
            added,
            [
                (2, "events", "received_ns UInt64"),
                (3, "events", "incident_id Nullable(UInt64)"),
                (2, "incidents", "received_ns UInt64"),
            ]
        );
    }

    #[test]
    fn sqlite_inserts_bind_each_column_by_name() {
        assert_eq!(
            RAW_REPORTS.sqlite_into(),
            "raw_reports(time_ns,source,datagram) VALUES(:time_ns,:source,:datagram)"
        );
        assert_eq!(
            QUEUE_STATS.sqlite_into(),
            "queue_stats(time_ns,node_id,port,queue_id,samples,avg_occupancy,max_occupancy) \
             VALUES(:time_ns,:node_id,:port,:queue_id,:samples,:avg_occupancy,:max_occupancy)"
        );
    }
}
