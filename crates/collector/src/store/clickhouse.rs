//! The ClickHouse backend: one server, or a cluster of shards that several collectors write into
//! and any collector or `intscope serve` reads the whole fabric from (`docs/scale-out.md`).
//!
//! Built for Debian's `clickhouse-server` (18.16): MergeTree tables partitioned by day of the
//! row's report time, so retention drops whole partitions (18.16 has no `TTL`); per-minute
//! rollups of the queue, port and flow series in materialized views (`-State` aggregates in
//! AggregatingMergeTree tables); inserts in RowBinary over HTTP, LZ4-compressed, one insert per
//! table per flush part. Incidents and flow summaries are versioned rows
//! (ReplacingMergeTree): every version is written, the newest wins on read (`argMax`), so a
//! replayed or re-sent version never doubles anything.
//!
//! In a cluster each shard holds `<table>_local` tables and a `Distributed` table `<table>` over
//! them. The writer picks the shard itself, as the Distributed table's sharding key would: a
//! flow's summary and series rows by the flow's hash ([`flow_hash`]), so everything about a flow
//! is on one shard and the flow list is aggregated on the shards without a merge
//! (`distributed_group_by_no_merge`), events and queue and port rows by node, incidents by
//! their ID.
//!
//! A shard may have replicas (`Replicated*MergeTree`, ZooKeeper): writes go to any replica of
//! the shard that takes them, reads to any server that answers (its Distributed tables pick a
//! live replica of each shard). Each shard is written on its own; an insert no replica takes
//! goes to that shard's on-disk spool ([`super::spool`]) before the flush is acknowledged, and
//! a thread replays the spool in order once the shard answers. A read that needs a shard none
//! of whose replicas answers is [`StoreError::Unavailable`] (the API's 503). The schema carries
//! a version ([`SCHEMA_VERSION`]); older schemas are migrated at open.
//!
//! The store's API is synchronous (the writer thread, the API's blocking pool); each call runs
//! the client's future on the store's own small runtime.

use crate::view::FlowSummary;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::clickhouse::{Client, Row};

use super::read::{
    FlowInterval, MINUTE_NS, Page, QueueInterval, Resolution, RowCounts, StoredEvent,
    StoredIncident, Totals, corrupt, flow_minutes, parse_evidence, parse_hops, parse_incident,
    parse_kind, parse_path,
};
use super::schema::{self, Backend};
use super::spool::{Spool, SpoolStats};
use super::{
    DEFAULT_QUERY_TIMEOUT, HistoryQuery, MAX_HISTORY_LIMIT, RowSink, Store, StoreError,
    incident_version, lock, new_run_id, per_hop_json,
};
use intscope_core::{Batch, FlowRef};
use serde::{Deserialize, Serialize};

/// Where the store is and how it is laid out (`[store.clickhouse]` of the collector config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseConfig {
    /// HTTP URLs of the servers: one entry per shard, in the cluster's shard order; an entry
    /// names the shard's replicas separated by `|` (`http://a:8123|http://b:8123`). Writes go
    /// to any live replica of each shard, reads to any live server.
    pub urls: Vec<String>,
    /// The cluster name in the servers' `remote_servers` (required with more than one URL; its
    /// shards must be the URLs, in order).
    #[serde(default)]
    pub cluster: Option<String>,
    /// Database (created if missing; default `intscope`).
    #[serde(default = "default_database")]
    pub database: String,
    /// This collector's name in the rows it writes (event and incident IDs are per collector;
    /// default `collector`). Give each collector of a fabric its own.
    #[serde(default = "default_source")]
    pub source: String,
    /// Where writes that failed wait to be retried (one spool per shard under
    /// `<spool_dir>/<database>.<source>.<hash of the URLs>/`). Default: a directory of that
    /// name under the system's temporary directory, which a reboot may empty: set it to a
    /// persistent directory in production.
    #[serde(default)]
    pub spool_dir: Option<std::path::PathBuf>,
    /// The most MiB the spools of this collector hold on disk, shared evenly by the shards
    /// (default 1024): beyond it the oldest spooled writes are evicted and counted
    /// (`store.spool.dropped_full_rows`).
    #[serde(default = "default_spool_mib")]
    pub spool_max_mib: u64,
    /// Milliseconds to wait for a server to accept a connection (default 2000): a host that
    /// does not answer at all (down, black-holed) fails this fast, so a write goes to the
    /// spool and a read to the next replica, or answers 503, without waiting for the query's
    /// or the insert's whole deadline.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
}

/// Default of [`ClickHouseConfig::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2000;

fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

/// A ClickHouse client whose connections give up after `connect_timeout` (the crate's own
/// client waits as long as the system does, minutes for an address that drops the SYN); the
/// rest as the crate's default client (TCP keepalive, idle connections closed after 2 s,
/// before the server's 3 s).
fn http_client(connect_timeout: Duration) -> Client {
    use hyper_util::client::legacy::{Client as HyperClient, connect::HttpConnector};
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.set_nodelay(true);
    let http = HyperClient::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .build(connector);
    Client::with_http_client(http)
}

/// Default of [`ClickHouseConfig::spool_max_mib`].
pub const DEFAULT_SPOOL_MIB: u64 = 1024;

fn default_spool_mib() -> u64 {
    DEFAULT_SPOOL_MIB
}

/// Default database.
pub const DEFAULT_DATABASE: &str = "intscope";

fn default_database() -> String {
    DEFAULT_DATABASE.into()
}

fn default_source() -> String {
    "collector".into()
}

impl ClickHouseConfig {
    /// Parses the part after `clickhouse:` of a `--store` value: `SHARD[,SHARD...]`, each
    /// shard `URL[|URL...]` (its replicas). With more than one server the cluster is `cluster`
    /// or `intscope`.
    pub fn parse(spec: &str, cluster: Option<String>, source: &str) -> Result<Self, StoreError> {
        let urls: Vec<String> = spec
            .split(',')
            .map(|shard| {
                shard
                    .split('|')
                    .map(|u| u.trim().trim_end_matches('/'))
                    .filter(|u| !u.is_empty())
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(StoreError::BadRequest(
                "clickhouse store: no URL (clickhouse:http://HOST:PORT[,http://HOST:PORT...])"
                    .into(),
            ));
        }
        if let Some(bad) = urls
            .iter()
            .flat_map(|s| s.split('|'))
            .find(|u| !u.starts_with("http://") && !u.starts_with("https://"))
        {
            return Err(StoreError::BadRequest(format!(
                "clickhouse store: {bad:?} is not an http:// URL of a server's HTTP interface"
            )));
        }
        let servers = urls.iter().flat_map(|s| s.split('|')).count();
        let cluster = match cluster {
            Some(c) => Some(c),
            None if servers > 1 => Some("intscope".into()),
            None => None,
        };
        Ok(ClickHouseConfig {
            urls,
            cluster,
            database: DEFAULT_DATABASE.into(),
            source: source.into(),
            spool_dir: None,
            spool_max_mib: DEFAULT_SPOOL_MIB,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
        })
    }

    /// Each shard's replica URLs, in shard order.
    pub fn shard_urls(&self) -> Vec<Vec<String>> {
        self.urls
            .iter()
            .map(|s| s.split('|').map(str::to_string).collect())
            .collect()
    }

    /// Whether the tables are replicated (some shard names more than one replica): then they
    /// are `Replicated*MergeTree` and the servers need ZooKeeper and the `{shard}` and
    /// `{replica}` macros (`scripts/clickhouse.sh --replicas 2` sets both up).
    pub fn replicated(&self) -> bool {
        self.urls.iter().any(|s| s.contains('|'))
    }

    /// This collector's spool directory (see [`ClickHouseConfig::spool_dir`]).
    pub fn spool_path(&self) -> std::path::PathBuf {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.urls.join(",").bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let base = self
            .spool_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("intscope-spool"));
        let safe = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        base.join(format!(
            "{}.{}.{:08x}",
            safe(&self.database),
            safe(&self.source),
            h as u32
        ))
    }
}

/// The flow's hash as stored and sharded: FNV-1a over the flow's text form, the same in every
/// collector and reader, 63 bits so it fits a cursor's signed number.
pub fn flow_hash(f: &FlowRef) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!(
        "{} {} {} {} {}",
        f.src, f.dst, f.proto, f.src_port, f.dst_port
    );
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h >> 1
}

/// A day partition of report time in nanoseconds (UTC day, `YYYYMMDD`).
const DAY: &str = "toYYYYMMDD(toDateTime(intDiv({t}, 1000000000), 'UTC'))";

/// The newest version of each flow life (`flows`' rows, one per life once parts merge), which the
/// flow list and a flow's summary read: `flows` is partitioned by day and keeps a version per
/// flush a flow changed in, so a page's flows (scattered over the hash order) would touch most of
/// its granules. Not partitioned, so merges collapse a life's versions of every day; retention
/// deletes lives last seen before the horizon ([`ClickHouseStore::prune`]). A column added to
/// `flows` must be added here too (its view's `SELECT` names them).
const FLOWS_LATEST: &str = "flows_latest";

/// Rows of [`FLOWS_LATEST`] per index mark: a page's 500 flows touch at most 500 granules per
/// part, so finer granules mean fewer rows read around them (the table has a row per flow life,
/// so the index stays small).
const FLOWS_LATEST_GRANULARITY: u32 = 128;

/// Per day, node (0 for none) and kind: the oldest and newest time of the events stored, which
/// an event page filtered by node or kind starts its search from (and ends it at): without it a
/// node with few events has its windows widened over every stored event. A bound, never a
/// count: days whose events retention dropped go with them, so it may claim more than is left,
/// never less.
const EVENTS_DAYS: &str = "events_days";

/// The `SELECT` that fills [`EVENTS_DAYS`] from `{src}`'s events (its view, and the copy made
/// when an older store is migrated).
const EVENTS_DAYS_SELECT: &str = "SELECT toUInt32(toYYYYMMDD(toDateTime(intDiv(time_ns, 1000000000), 'UTC'))) AS day, \
     ifNull(node_id, toUInt32(0)) AS node, kind, minState(time_ns) AS oldest, maxState(time_ns) AS newest \
     FROM {src} GROUP BY day, node, kind";

/// Per-minute rollups: name, source table, key columns, aggregate columns (read them with the
/// `-Merge` combinators, e.g. `sumMerge(samples_total)`; aliases differ from the source
/// columns, which 18.16 requires).
const ROLLUPS: [(&str, &str, &str, &str); 3] = [
    (
        "queue_stats_1m",
        "queue_stats",
        "node_id, port, queue_id",
        "sumState(samples) AS samples_total, maxState(max_occupancy) AS occupancy_max, \
         sumState(avg_occupancy * samples) AS occupancy_sum",
    ),
    (
        "port_stats_1m",
        "port_stats",
        "node_id, port",
        "sumState(samples) AS samples_total, maxState(max_hop_latency) AS hop_latency_max, \
         sumState(avg_hop_latency * samples) AS hop_latency_sum, sumState(drops) AS drops_total",
    ),
    (
        "flow_stats_1m",
        "flow_stats",
        "flow_hash",
        "sumState(samples) AS samples_total, maxState(e2e_max) AS e2e_latency_max",
    ),
];

#[derive(Row, Serialize, Deserialize)]
struct FlowIns {
    source: String,
    run: u64,
    live_id: u64,
    flow_hash: u64,
    src: String,
    dst: String,
    proto: u8,
    src_port: u16,
    dst_port: u16,
    first_seen_ns: u64,
    last_seen_ns: u64,
    reports: u64,
    drops: u64,
    last_drop_reason: Option<u8>,
    path: String,
    path_changes: u64,
    e2e_p50: Option<u64>,
    e2e_p99: Option<u64>,
}

#[derive(Row, Serialize, Deserialize)]
struct FlowStatIns {
    time_ns: u64,
    flow_hash: u64,
    src: String,
    dst: String,
    proto: u8,
    src_port: u16,
    dst_port: u16,
    samples: u64,
    e2e_avg: Option<u64>,
    e2e_max: Option<u64>,
    hop_latency_max: String,
    queue_occupancy_max: String,
}

#[derive(Row, Serialize, Deserialize)]
struct QueueIns {
    time_ns: u64,
    source: String,
    node_id: u32,
    port: u32,
    queue_id: u8,
    samples: u64,
    avg_occupancy: f64,
    max_occupancy: u64,
}

#[derive(Row, Serialize, Deserialize)]
struct PortIns {
    time_ns: u64,
    source: String,
    node_id: u32,
    port: u32,
    samples: u64,
    avg_hop_latency: f64,
    max_hop_latency: u64,
    drops: u64,
}

#[derive(Row, Serialize, Deserialize)]
struct EventIns {
    source: String,
    id: u64,
    time_ns: u64,
    kind: String,
    node_id: Option<u32>,
    port: Option<u32>,
    queue_id: Option<u8>,
    flow_id: Option<u64>,
    src: Option<String>,
    dst: Option<String>,
    proto: Option<u8>,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    evidence: String,
    received_ns: u64,
    /// Absent from rows spooled by schema 2.
    #[serde(default)]
    incident_id: Option<u64>,
}

#[derive(Row, Serialize, Deserialize)]
struct IncidentIns {
    source: String,
    id: u64,
    version: u64,
    kind: String,
    node_id: Option<u32>,
    start_ns: u64,
    last_update_ns: u64,
    end_ns: Option<u64>,
    body: String,
    received_ns: u64,
}

#[derive(Row, Serialize, Deserialize)]
struct RawIns {
    source: String,
    time_ns: u64,
    from_addr: String,
    #[serde(with = "serde_bytes_as_string")]
    datagram: Vec<u8>,
}

/// RowBinary `String` is length-prefixed bytes: raw datagrams go in as they are.
mod serde_bytes_as_string {
    use serde::Deserialize;

    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    /// From a spooled entry (JSON: bytes as an array of numbers).
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Vec::<u8>::deserialize(d)
    }
}

#[derive(Row, Serialize, Deserialize)]
struct TotalIns {
    source: String,
    run: u64,
    name: String,
    value: u64,
    version: u64,
}

/// One table's rows of one shard's share of a flush: what an insert sends, and what the spool
/// keeps (as JSON) when the insert fails.
#[derive(Serialize, Deserialize)]
enum TableRows {
    Flows(Vec<FlowIns>),
    FlowStats(Vec<FlowStatIns>),
    Queues(Vec<QueueIns>),
    Ports(Vec<PortIns>),
    Events(Vec<EventIns>),
    Incidents(Vec<IncidentIns>),
    Raw(Vec<RawIns>),
    Totals(Vec<TotalIns>),
}

impl TableRows {
    fn len(&self) -> usize {
        match self {
            TableRows::Flows(v) => v.len(),
            TableRows::FlowStats(v) => v.len(),
            TableRows::Queues(v) => v.len(),
            TableRows::Ports(v) => v.len(),
            TableRows::Events(v) => v.len(),
            TableRows::Incidents(v) => v.len(),
            TableRows::Raw(v) => v.len(),
            TableRows::Totals(v) => v.len(),
        }
    }

    /// The table's declaration ([`schema`]); the local table is `<name>_local` in a cluster.
    fn declared(&self) -> &'static schema::Table {
        match self {
            TableRows::Flows(_) => &schema::FLOWS,
            TableRows::FlowStats(_) => &schema::FLOW_STATS,
            TableRows::Queues(_) => &schema::QUEUE_STATS,
            TableRows::Ports(_) => &schema::PORT_STATS,
            TableRows::Events(_) => &schema::EVENTS,
            TableRows::Incidents(_) => &schema::INCIDENTS,
            TableRows::Raw(_) => &schema::RAW_REPORTS,
            TableRows::Totals(_) => &schema::TOTALS,
        }
    }

    /// The table's name (the local one is `<name>_local` in a cluster).
    fn table(&self) -> &'static str {
        self.declared().name
    }

    /// Inserts the rows into `table` through `client` (the crate names the columns, so the
    /// rows land by name whatever the table's column order).
    async fn insert(&self, client: &Client, table: &str) -> ::clickhouse::error::Result<()> {
        match self {
            TableRows::Flows(v) => insert_rows(client, table, v).await,
            TableRows::FlowStats(v) => insert_rows(client, table, v).await,
            TableRows::Queues(v) => insert_rows(client, table, v).await,
            TableRows::Ports(v) => insert_rows(client, table, v).await,
            TableRows::Events(v) => insert_rows(client, table, v).await,
            TableRows::Incidents(v) => insert_rows(client, table, v).await,
            TableRows::Raw(v) => insert_rows(client, table, v).await,
            TableRows::Totals(v) => insert_rows(client, table, v).await,
        }
    }
}

async fn insert_rows<T>(client: &Client, table: &str, rows: &[T]) -> ::clickhouse::error::Result<()>
where
    T: ::clickhouse::RowOwned + ::clickhouse::RowWrite,
{
    if rows.is_empty() {
        return Ok(());
    }
    let mut ins = client.insert::<T>(table).await?;
    for r in rows {
        ins.write(r).await?;
    }
    ins.end().await
}

#[derive(Row, Deserialize)]
struct FlowOut {
    flow_hash: u64,
    src: String,
    dst: String,
    proto: u8,
    src_port: u16,
    dst_port: u16,
    first_seen_ns: u64,
    last_seen_ns: u64,
    reports: u64,
    drops: u64,
    last_drop_reason: Option<u8>,
    path: String,
    path_changes: u64,
    e2e_p50: Option<u64>,
    e2e_p99: Option<u64>,
}

impl FlowOut {
    fn stored(self) -> Result<FlowSummary, StoreError> {
        let path = parse_path(&self.path)?;
        Ok(FlowSummary {
            id: None,
            flow: FlowRef {
                src: self.src,
                dst: self.dst,
                proto: self.proto,
                src_port: self.src_port,
                dst_port: self.dst_port,
            },
            first_seen_ns: self.first_seen_ns,
            last_seen_ns: self.last_seen_ns,
            reports: self.reports,
            drops: self.drops,
            last_drop_reason: self.last_drop_reason,
            path: Vec::new(),
            path_detail: Vec::new(),
            path_changes: self.path_changes,
            e2e_latency_p50: self.e2e_p50,
            e2e_latency_p99: self.e2e_p99,
        }
        .with_path(path))
    }
}

#[derive(Row, Deserialize)]
struct SeriesOut {
    time_ns: u64,
    samples: u64,
    e2e_avg: Option<u64>,
    e2e_max: Option<u64>,
    hop_latency_max: String,
    queue_occupancy_max: String,
}

#[derive(Row, Deserialize)]
struct QueueOut {
    time_ns: u64,
    node_id: u32,
    port: u32,
    queue_id: u8,
    samples: u64,
    avg_occupancy: f64,
    max_occupancy: u64,
    tie: u64,
}

impl QueueOut {
    /// The row as the API serves it, with its cursor.
    fn interval(self) -> (QueueInterval, String) {
        let cursor = format!("q.{}.{}", self.time_ns, self.tie);
        (
            QueueInterval {
                time_ns: self.time_ns,
                node_id: self.node_id,
                port: self.port,
                queue_id: self.queue_id,
                samples: self.samples,
                avg_occupancy: self.avg_occupancy,
                max_occupancy: self.max_occupancy,
            },
            cursor,
        )
    }
}

/// Where some events lie in time ([`EVENTS_DAYS`]): `n` (day, node, kind) rows, the oldest and
/// newest time among them.
#[derive(Row, Deserialize)]
struct Span {
    n: u64,
    oldest: u64,
    newest: u64,
}

#[derive(Row, Deserialize)]
struct EventOut {
    id: u64,
    time_ns: u64,
    kind: String,
    node_id: Option<u32>,
    port: Option<u32>,
    queue_id: Option<u8>,
    flow_id: Option<u64>,
    src: Option<String>,
    dst: Option<String>,
    proto: Option<u8>,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    evidence: String,
    incident_id: Option<u64>,
    tie: u64,
}

#[derive(Row, Deserialize)]
struct IncidentOut {
    start_ns: u64,
    tie: u64,
    body: String,
}

#[derive(Row, Deserialize)]
struct NameCount {
    name: String,
    value: u64,
}

#[derive(Row, Deserialize)]
struct One {
    value: u64,
}

/// The schema version this build writes. Version 1 is the first release's schema (tables as
/// created by `CREATE ... IF NOT EXISTS` alone, with no version table); each later version
/// adds the columns `schema` declares with it or, in version 4, the views `flows_latest` and `events_days`;
/// applied by [`ClickHouseStore::open`].
pub const SCHEMA_VERSION: u32 = 4;

/// The version that added [`FLOWS_LATEST`] and [`EVENTS_DAYS`]: a store migrated from before it
/// has the views filled from the flows and events stored so far.
const VIEWS_SINCE: u32 = 4;

/// How long opening the store waits for a first server to take the schema.
const START_WAIT: Duration = Duration::from_secs(20);

/// How long retention waits for its delete from [`FLOWS_LATEST`] to finish.
const MUTATION_WAIT: Duration = Duration::from_secs(30);

/// How long one insert may take before it counts as failed (and is spooled).
const INSERT_TIMEOUT: Duration = Duration::from_secs(10);

/// First and longest wait between retries of a shard's spool.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// One shard: its replicas (writes go to the one that last answered, then the others) and
/// the spool of writes none of them took.
#[derive(Debug)]
struct ShardIo {
    urls: Vec<String>,
    replicas: Vec<Client>,
    good: AtomicUsize,
    spool: Option<Spool>,
    /// The shard was last seen refusing writes (its change is logged once).
    down: AtomicBool,
}

/// What the writer, the readers and the spool's replayer share.
#[derive(Debug)]
struct Io {
    config: ClickHouseConfig,
    shards: Vec<ShardIo>,
    /// Every server (each replica of each shard): reads go through any one's Distributed
    /// tables.
    servers: Vec<(String, Client)>,
    /// Servers (indexes into `servers`) whose schema is not yet set up: they did not answer
    /// when the store opened.
    pending_schema: Mutex<Vec<usize>>,
}

impl Io {
    /// The table rows are written to: the local one in a cluster.
    fn local(&self, t: &str) -> String {
        local_of(&self.config, t)
    }

    /// Sets up the schema on the servers that did not answer at open, if they answer now.
    async fn set_up_pending(&self) {
        let pending: Vec<usize> = lock(&self.pending_schema).clone();
        for k in pending {
            let (url, client) = &self.servers[k];
            let set_up =
                tokio::time::timeout(INSERT_TIMEOUT, apply_schema(&self.config, url, client));
            match set_up
                .await
                .unwrap_or(Err(SchemaError::Unreachable(String::new())))
            {
                Ok(()) => {
                    tracing::info!("clickhouse {url} answers: its schema is set up");
                    lock(&self.pending_schema).retain(|&p| p != k);
                }
                Err(SchemaError::Unreachable(_)) => {}
                Err(SchemaError::Failed(e)) => {
                    tracing::error!("clickhouse {url}: {e}");
                }
            }
        }
    }

    /// Inserts `rows` into shard `i`: the replica that last answered first, then the others.
    async fn insert(&self, i: usize, rows: &TableRows) -> Result<(), String> {
        let s = &self.shards[i];
        let n = s.replicas.len();
        let first = s.good.load(Ordering::Relaxed) % n;
        let table = self.local(rows.table());
        let mut errors = Vec::new();
        for k in 0..n {
            let r = (first + k) % n;
            match tokio::time::timeout(INSERT_TIMEOUT, rows.insert(&s.replicas[r], &table)).await {
                Ok(Ok(())) => {
                    s.good.store(r, Ordering::Relaxed);
                    return Ok(());
                }
                Ok(Err(e)) => errors.push(format!("{}: {e}", s.urls[r])),
                Err(_) => errors.push(format!("{}: no answer in {INSERT_TIMEOUT:?}", s.urls[r])),
            }
        }
        Err(errors.join("; "))
    }

    /// Notes whether shard `i` took a write, logging only the changes.
    fn note(&self, i: usize, error: Option<&str>) {
        let s = &self.shards[i];
        match error {
            Some(e) => {
                if !s.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!("clickhouse shard {i} refuses writes, spooling them: {e}");
                }
            }
            None => {
                if s.down.swap(false, Ordering::Relaxed) {
                    tracing::info!("clickhouse shard {i} takes writes again");
                }
            }
        }
    }

    /// Replays shard `i`'s spool, oldest first, until it is empty, an insert fails, `stop`
    /// is set or `budget` has passed; whether the shard took every entry tried.
    async fn replay(&self, i: usize, stop: &AtomicBool, budget: Duration) -> bool {
        let Some(spool) = &self.shards[i].spool else {
            return true;
        };
        let start = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) && start.elapsed() < budget {
            let Some((seq, data)) = spool.head() else {
                return true;
            };
            let rows: TableRows = match serde_json::from_slice(&data) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("clickhouse spool of shard {i}: entry {seq} unreadable: {e}");
                    spool.discard(seq);
                    continue;
                }
            };
            match self.insert(i, &rows).await {
                Ok(()) => {
                    self.note(i, None);
                    spool.pop(seq);
                }
                Err(e) => {
                    self.note(i, Some(&e));
                    return false;
                }
            }
        }
        true
    }
}

/// The thread that replays the spools while the store is open.
#[derive(Debug)]
struct Replayer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replayer {
    fn spawn(io: Arc<Io>, rt: tokio::runtime::Handle) -> std::io::Result<Replayer> {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("clickhouse-spool".into())
            .spawn(move || {
                let n = io.shards.len();
                let mut wait = vec![RETRY_FIRST; n];
                let mut next = vec![std::time::Instant::now(); n];
                while !halt.load(Ordering::Relaxed) {
                    if !lock(&io.pending_schema).is_empty() {
                        rt.block_on(io.set_up_pending());
                    }
                    for i in 0..n {
                        let empty = io.shards[i].spool.as_ref().is_none_or(Spool::is_empty);
                        if empty || std::time::Instant::now() < next[i] {
                            continue;
                        }
                        if rt.block_on(io.replay(i, &halt, Duration::from_secs(1))) {
                            wait[i] = RETRY_FIRST;
                        } else {
                            // Backoff: a shard that is down is asked less and less often.
                            next[i] = std::time::Instant::now() + wait[i];
                            wait[i] = (wait[i] * 2).min(RETRY_MAX);
                        }
                    }
                    std::thread::park_timeout(Duration::from_millis(100));
                }
            })?;
        Ok(Replayer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Replayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The ClickHouse store (see the module's documentation).
#[derive(Debug)]
pub struct ClickHouseStore {
    io: Arc<Io>,
    /// The server reads go to first (the one that last answered).
    reader_good: AtomicUsize,
    /// Replays the spools (a writing store only); stopped before the runtime.
    replayer: Option<Replayer>,
    /// The spool directory's lock (a writing store only).
    _lock: Option<std::fs::File>,
    /// The runtime the client's futures run on (taken only by `drop`).
    rt: Option<tokio::runtime::Runtime>,
    /// This run's ID (the lives of flows and counters, as in SQLite).
    run: u64,
    /// Batches written by this run: the version of its counter rows.
    writes: std::sync::atomic::AtomicU64,
}

impl Drop for ClickHouseStore {
    /// Without waiting on the runtime: the store may be dropped by an async task (the API's),
    /// where a runtime's blocking shutdown is not allowed. The replayer stops first (it ends
    /// within one insert's timeout).
    fn drop(&mut self) {
        self.replayer.take();
        // An empty spool leaves nothing behind (the default one is in the temp directory);
        // a spool that holds writes stays for the next run to replay.
        let empty = self
            .io
            .shards
            .iter()
            .all(|s| s.spool.as_ref().is_none_or(Spool::is_empty));
        if self._lock.is_some() && empty {
            let _ = std::fs::remove_dir_all(self.io.config.spool_path());
        } else if let Some(s) = self.spool_stats().filter(|s| s.rows > 0) {
            tracing::warn!(
                "{} rows wait in the spool {} for shards that did not answer: the next run with \
                 the same name, servers and spool directory writes them",
                s.rows,
                self.io.config.spool_path().display()
            );
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn ch_err(e: ::clickhouse::error::Error) -> StoreError {
    StoreError::ClickHouse(e.to_string())
}

/// ClickHouse error codes that mean a server or shard could not be reached or cannot work now
/// (network, ZooKeeper, a read-only replica), not that the query is wrong.
const UNAVAILABLE_CODES: [u32; 9] = [32, 209, 210, 225, 242, 279, 319, 999, 202];

/// The ClickHouse error code of a server's answer (`Code: N, ...`), if it is one.
fn read_err_code(e: &::clickhouse::error::Error) -> Option<u32> {
    match e {
        ::clickhouse::error::Error::BadResponse(m) => m
            .split("Code: ")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|c| c.parse::<u32>().ok()),
        _ => None,
    }
}

/// A read's error as the API should see it: unreachable servers and shards as
/// [`StoreError::Unavailable`], ClickHouse's own deadline as a timeout, the rest as
/// [`StoreError::ClickHouse`] (its text is logged, not shown to API clients).
fn read_err(e: ::clickhouse::error::Error) -> StoreError {
    use ::clickhouse::error::Error as E;
    match e {
        E::Network(e) => StoreError::Unavailable(format!("no ClickHouse server answered ({e})")),
        E::TimedOut => StoreError::Timeout,
        E::BadResponse(m) => {
            let code = m
                .split("Code: ")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|c| c.parse::<u32>().ok());
            match code {
                Some(159) => StoreError::Timeout,
                Some(c) if UNAVAILABLE_CODES.contains(&c) => {
                    tracing::debug!("clickhouse read: a shard is unavailable: {m}");
                    StoreError::Unavailable(
                        "a shard of the ClickHouse cluster (every replica of it) is unreachable, \
                         so the answer would miss its rows; retry once it is back"
                            .into(),
                    )
                }
                _ => StoreError::ClickHouse(m),
            }
        }
        e => StoreError::ClickHouse(e.to_string()),
    }
}

/// A query value as a ClickHouse string literal.
fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The engine clause of `engine` for local table `local`: replicated when `replicated`, with
/// the replica path keyed by the server's `{shard}` macro.
fn engine(engine: &str, db: &str, local: &str, replicated: bool) -> String {
    if !replicated {
        return engine.to_string();
    }
    let (name, args) = match engine.split_once('(') {
        Some((n, a)) => (n, format!(", {}", a.trim_end_matches(')'))),
        None => (engine, String::new()),
    };
    format!("Replicated{name}('/clickhouse/tables/{{shard}}/{db}/{local}', '{{replica}}'{args})")
}

/// Why a server's schema could not be set up.
enum SchemaError {
    /// The server did not answer (retried later).
    Unreachable(String),
    /// It answered no (a wrong setup, a newer schema): the store does not open.
    Failed(StoreError),
}

/// The table rows of `t` are written to: the local one in a cluster.
fn local_of(config: &ClickHouseConfig, t: &str) -> String {
    match config.cluster {
        Some(_) => format!("{t}_local"),
        None => t.to_string(),
    }
}

/// The statements that create the schema where missing (after `CREATE DATABASE`).
fn schema_ddl(config: &ClickHouseConfig) -> Vec<String> {
    let db = &config.database;
    let replicated = config.replicated();
    let mut ddl = Vec::new();
    for t in schema::TABLES {
        let Some(ch) = &t.clickhouse else { continue };
        let name = t.name;
        let part = DAY.replace("{t}", ch.partition_time);
        let local = local_of(config, name);
        ddl.push(format!(
            "CREATE TABLE IF NOT EXISTS {db}.{local} ({}) ENGINE = {} \
             PARTITION BY {part} ORDER BY ({}) \
             SETTINGS index_granularity = {}",
            t.clickhouse_columns(),
            engine(ch.engine, db, &local, replicated),
            ch.order_by,
            ch.granularity
        ));
        if let Some(c) = &config.cluster {
            ddl.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.{name} AS {db}.{local} \
                 ENGINE = Distributed({c}, {db}, {local}, {})",
                ch.shard_key
            ));
        }
    }
    for (name, src, keys, aggs) in ROLLUPS {
        let local = local_of(config, name);
        let src = local_of(config, src);
        // A replica's inserts fill its own views only (parts fetched from another replica do
        // not run them): the view's table is replicated too, or replicas would differ.
        let inner = format!(".inner.{local}");
        ddl.push(format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{local} \
             ENGINE = {} PARTITION BY toYYYYMMDD(minute) \
             ORDER BY ({keys}, minute) AS SELECT \
             toStartOfMinute(toDateTime(intDiv(time_ns, 1000000000), 'UTC')) AS minute, \
             {keys}, {aggs} FROM {db}.{src} GROUP BY minute, {keys}",
            engine("AggregatingMergeTree", db, &inner, replicated)
        ));
        // Read across the shards like the raw tables (each shard's partial aggregates are
        // merged by the reader's `-Merge`).
        if let Some(c) = &config.cluster {
            let key = keys.split(',').next().unwrap_or("rand()");
            ddl.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.{name} AS {db}.{local} \
                 ENGINE = Distributed({c}, {db}, {local}, {key})"
            ));
        }
    }
    // The flows' newest versions, filled from every insert into `flows` (on each replica, as
    // the rollups).
    let latest = local_of(config, FLOWS_LATEST);
    let inner = format!(".inner.{latest}");
    ddl.push(format!(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{latest} \
         ENGINE = {} PARTITION BY tuple() ORDER BY (flow_hash, source, run, live_id) \
         SETTINGS index_granularity = {FLOWS_LATEST_GRANULARITY} \
         AS SELECT {} FROM {db}.{}",
        engine("ReplacingMergeTree(last_seen_ns)", db, &inner, replicated),
        schema::FLOWS.names(Backend::ClickHouse),
        local_of(config, "flows"),
    ));
    if let Some(c) = &config.cluster {
        ddl.push(format!(
            "CREATE TABLE IF NOT EXISTS {db}.{FLOWS_LATEST} AS {db}.{latest} \
             ENGINE = Distributed({c}, {db}, {latest}, flow_hash)"
        ));
    }
    let days = local_of(config, EVENTS_DAYS);
    let inner = format!(".inner.{days}");
    ddl.push(format!(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{days} \
         ENGINE = {} PARTITION BY day ORDER BY (node, kind, day) AS {}",
        engine("AggregatingMergeTree", db, &inner, replicated),
        EVENTS_DAYS_SELECT.replace("{src}", &format!("{db}.{}", local_of(config, "events")))
    ));
    if let Some(c) = &config.cluster {
        ddl.push(format!(
            "CREATE TABLE IF NOT EXISTS {db}.{EVENTS_DAYS} AS {db}.{days} \
             ENGINE = Distributed({c}, {db}, {days}, node)"
        ));
    }
    ddl
}

/// Creates the database, tables and rollups where missing on one server and migrates an older
/// schema there (the columns `schema` declares newer than its version).
async fn apply_schema(
    config: &ClickHouseConfig,
    url: &str,
    client: &Client,
) -> Result<(), SchemaError> {
    let db = &config.database;
    let fail = |e: ::clickhouse::error::Error| match e {
        ::clickhouse::error::Error::Network(_) | ::clickhouse::error::Error::TimedOut => {
            SchemaError::Unreachable(e.to_string())
        }
        // The server answers but cannot work yet (ZooKeeper not reached, a read-only replica):
        // as unreachable, tried again.
        e if matches!(read_err_code(&e), Some(c) if UNAVAILABLE_CODES.contains(&c)) => {
            SchemaError::Unreachable(e.to_string())
        }
        e => SchemaError::Failed(StoreError::ClickHouse(format!(
            "setting up the schema on {url}: {e}"
        ))),
    };
    let admin = http_client(Duration::from_millis(config.connect_timeout_ms))
        .with_url(url)
        .with_validation(false);
    admin
        .query(&format!("CREATE DATABASE IF NOT EXISTS {db}"))
        .execute()
        .await
        .map_err(fail)?;
    // The version before these statements: none recorded and tables present is the first
    // release's schema (it had no version table).
    let version = schema_version(config, client).await.map_err(fail)?;
    if version > SCHEMA_VERSION {
        return Err(SchemaError::Failed(StoreError::ClickHouse(format!(
            "{url}: database {db} has schema version {version}, newer than this intscope's \
             {SCHEMA_VERSION}: upgrade intscope"
        ))));
    }
    for q in schema_ddl(config) {
        client.query(&q).execute().await.map_err(fail)?;
    }
    migrate(config, client, version).await.map_err(fail)
}

/// The schema version recorded on one server (creating the version table): 0 for a new
/// database, 1 for the first release's tables (no version recorded).
async fn schema_version(
    config: &ClickHouseConfig,
    c: &Client,
) -> Result<u32, ::clickhouse::error::Error> {
    let db = &config.database;
    // MergeTree, not a Log engine: collectors starting at once insert concurrently (TinyLog
    // fails them), each server keeps its own (not replicated: each is migrated on its own).
    c.query(&format!(
        "CREATE TABLE IF NOT EXISTS {db}.schema_version \
         (version UInt32, applied_ns UInt64) ENGINE = MergeTree ORDER BY version"
    ))
    .execute()
    .await?;
    let v = c
        .query(&format!(
            "SELECT toUInt64(max(version)) AS value FROM {db}.schema_version"
        ))
        .fetch_one::<One>()
        .await?
        .value;
    if v > 0 {
        return Ok(u32::try_from(v).unwrap_or(u32::MAX));
    }
    let tables = c
        .query(&format!(
            "SELECT count() AS value FROM system.tables WHERE database = {} AND name = {}",
            lit(db),
            lit(&local_of(config, "flows"))
        ))
        .fetch_one::<One>()
        .await?
        .value;
    Ok(u32::from(tables > 0))
}

/// Adds the declared columns newer than `from` on one server, fills [`FLOWS_LATEST`] and
/// [`EVENTS_DAYS`] when `from` predates them, and records [`SCHEMA_VERSION`].
/// Each step checks the column first, so a step a replicated ALTER already brought (from
/// another replica) or a run killed halfway is not an error.
async fn migrate(
    config: &ClickHouseConfig,
    c: &Client,
    from: u32,
) -> Result<(), ::clickhouse::error::Error> {
    if from == SCHEMA_VERSION {
        return Ok(());
    }
    let db = &config.database;
    let mut tables = vec![];
    for m in schema::migrations(Backend::ClickHouse) {
        if m.since <= from {
            continue;
        }
        tables.push((local_of(config, m.table), m.column, m.declared.clone()));
        if config.cluster.is_some() {
            tables.push((m.table.to_string(), m.column, m.declared));
        }
    }
    for (table, name, column) in &tables {
        let has = c
            .query(&format!(
                "SELECT count() AS value FROM system.columns \
                 WHERE database = {} AND table = {} AND name = {}",
                lit(db),
                lit(table),
                lit(name)
            ))
            .fetch_one::<One>()
            .await?
            .value;
        if has == 0 {
            let sql = format!("ALTER TABLE {db}.{table} ADD COLUMN {column}");
            if let Err(e) = c.query(&sql).execute().await {
                // Code 44 (18.16's "column already exists"): another replica's replicated
                // ALTER added it meanwhile.
                if !e.to_string().contains("Code: 44,") {
                    return Err(e);
                }
            }
        }
    }
    if (1..VIEWS_SINCE).contains(&from) {
        // The views see inserts from their creation on: the flows and events stored before
        // are copied in. Rows they took meanwhile, or a copy a replica already brought, are
        // there twice, which neither minds: a flow version twice is merged away (and read as
        // one), an event's time twice changes no oldest or newest.
        let latest = local_of(config, FLOWS_LATEST);
        c.query(&format!(
            "INSERT INTO {db}.`.inner.{latest}` SELECT {} FROM {db}.{}",
            schema::FLOWS.names(Backend::ClickHouse),
            local_of(config, "flows")
        ))
        .execute()
        .await?;
        // The copy's parts hold many versions of each life, and large parts wait long for a
        // background merge: merged now, once (the flow list reads every row of the parts).
        c.query(&format!("OPTIMIZE TABLE {db}.`.inner.{latest}` FINAL"))
            .execute()
            .await?;
        let days = local_of(config, EVENTS_DAYS);
        c.query(&format!(
            "INSERT INTO {db}.`.inner.{days}` {}",
            EVENTS_DAYS_SELECT.replace("{src}", &format!("{db}.{}", local_of(config, "events")))
        ))
        .execute()
        .await?;
    }
    c.query(&format!(
        "INSERT INTO {db}.schema_version (version, applied_ns) VALUES ({SCHEMA_VERSION}, {})",
        crate::clock::now_ns()
    ))
    .execute()
    .await
}

impl ClickHouseStore {
    /// Connects, creates the database, tables and rollups where missing and migrates older
    /// schemas (on every server, and the Distributed tables over them in a cluster), takes up
    /// the spool a previous run left and starts replaying it. The spool directory is locked:
    /// a second writer with the same database, name and servers is refused.
    pub fn open(config: ClickHouseConfig) -> Result<Self, StoreError> {
        Self::open_with(config, true)
    }

    /// Opens the store to read it only (`intscope serve`): no spool, no lock.
    pub fn open_reader(config: ClickHouseConfig) -> Result<Self, StoreError> {
        Self::open_with(config, false)
    }

    fn open_with(config: ClickHouseConfig, writer: bool) -> Result<Self, StoreError> {
        let shard_urls = config.shard_urls();
        if shard_urls.iter().flatten().count() > 1 && config.cluster.is_none() {
            return Err(StoreError::BadRequest(
                "clickhouse store: more than one server needs a cluster name".into(),
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("clickhouse-io")
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io {
                path: "tokio runtime".into(),
                source,
            })?;
        let connect = Duration::from_millis(config.connect_timeout_ms.max(1));
        let client = |u: &str| {
            http_client(connect)
                .with_url(u)
                .with_validation(false)
                .with_compression(::clickhouse::Compression::Lz4)
                .with_database(&config.database)
        };
        let (lock, spool_root) = if writer {
            let root = config.spool_path();
            std::fs::create_dir_all(&root).map_err(|source| StoreError::Io {
                path: root.clone(),
                source,
            })?;
            (Some(super::sqlite::lock_dir(&root)?), Some(root))
        } else {
            (None, None)
        };
        let per_shard = (config.spool_max_mib.max(1) << 20) / shard_urls.len().max(1) as u64;
        let mut shards = Vec::new();
        for (i, urls) in shard_urls.iter().enumerate() {
            let spool = match &spool_root {
                Some(root) => {
                    let dir = root.join(format!("shard{i}"));
                    Some(
                        Spool::open(&dir, per_shard)
                            .map_err(|source| StoreError::Io { path: dir, source })?,
                    )
                }
                None => None,
            };
            shards.push(ShardIo {
                replicas: urls.iter().map(|u| client(u)).collect(),
                urls: urls.clone(),
                good: AtomicUsize::new(0),
                spool,
                down: AtomicBool::new(false),
            });
        }
        let servers = shard_urls
            .iter()
            .flatten()
            .map(|u| (u.clone(), client(u)))
            .collect();
        let io = Arc::new(Io {
            config,
            shards,
            servers,
            pending_schema: Mutex::new(Vec::new()),
        });
        let mut s = ClickHouseStore {
            io,
            reader_good: AtomicUsize::new(0),
            replayer: None,
            _lock: lock,
            rt: Some(rt),
            run: new_run_id() as u64,
            writes: std::sync::atomic::AtomicU64::new(1),
        };
        s.create()?;
        if writer {
            let handle = s.rt.as_ref().expect("runtime").handle().clone();
            s.replayer = Some(
                Replayer::spawn(Arc::clone(&s.io), handle).map_err(|source| StoreError::Io {
                    path: "clickhouse spool thread".into(),
                    source,
                })?,
            );
        }
        Ok(s)
    }

    /// The configuration.
    pub fn config(&self) -> &ClickHouseConfig {
        &self.io.config
    }

    /// Replays the spools now, waiting for them (tests and shutdown): whether every shard's
    /// spool is empty after.
    pub fn replay_spools(&self) -> bool {
        let stop = AtomicBool::new(false);
        (0..self.io.shards.len()).all(|i| {
            self.run(self.io.replay(i, &stop, Duration::from_secs(30)))
                && self.io.shards[i].spool.as_ref().is_none_or(Spool::is_empty)
        })
    }

    /// Runs a future on the store's runtime, from any thread: on a thread that is itself in
    /// a runtime (an async caller) it runs from a scoped helper thread, as blocking there is
    /// not allowed.
    fn run<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let rt = self.rt.as_ref().expect("the runtime lives until drop");
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| {
                s.spawn(|| rt.block_on(f))
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
        } else {
            rt.block_on(f)
        }
    }

    /// Runs `sql` with `fetch` on a server that answers, within the query deadline: the one
    /// that last answered first, then every other (each replica of each shard has the
    /// Distributed tables, so any one answers for the whole cluster).
    fn read_any<T, F, Fut>(
        &self,
        sql: &str,
        timeout: Option<Duration>,
        fetch: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(::clickhouse::query::Query) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, ::clickhouse::error::Error>> + Send,
        T: Send,
    {
        let t = timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
        let secs = t.as_secs().max(1).to_string();
        let n = self.io.servers.len();
        let first = self.reader_good.load(Ordering::Relaxed) % n;
        let deadline = tokio::time::Instant::now() + t;
        self.run(async {
            let mut last = None;
            for k in 0..n {
                let i = (first + k) % n;
                let q = self.io.servers[i]
                    .1
                    .query(sql)
                    .with_setting("max_execution_time", secs.clone());
                match tokio::time::timeout_at(deadline, fetch(q)).await {
                    Err(_) => return Err(StoreError::Timeout),
                    Ok(Ok(v)) => {
                        self.reader_good.store(i, Ordering::Relaxed);
                        return Ok(v);
                    }
                    // This server is down: another may answer.
                    Ok(Err(e @ ::clickhouse::error::Error::Network(_))) => {
                        last = Some(read_err(e));
                    }
                    Ok(Err(e)) => {
                        let e = read_err(e);
                        if let StoreError::ClickHouse(m) = &e {
                            tracing::error!(
                                "clickhouse read failed on {}: {m}",
                                self.io.servers[i].0
                            );
                        }
                        return Err(e);
                    }
                }
            }
            Err(last.unwrap_or_else(|| StoreError::Unavailable("no ClickHouse server".into())))
        })
    }

    fn fetch_all<T>(&self, sql: &str, timeout: Option<Duration>) -> Result<Vec<T>, StoreError>
    where
        T: ::clickhouse::RowOwned + ::clickhouse::RowRead + Send,
    {
        self.read_any(sql, timeout, |q| q.fetch_all::<T>())
    }

    fn fetch_one<T>(&self, sql: &str, timeout: Option<Duration>) -> Result<T, StoreError>
    where
        T: ::clickhouse::RowOwned + ::clickhouse::RowRead + Send,
    {
        self.read_any(sql, timeout, |q| q.fetch_one::<T>())
    }

    /// A live replica of shard `i` (for per-shard reads and maintenance): the one that last
    /// answered first.
    fn on_shard<T, F, Fut>(&self, i: usize, f: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, ::clickhouse::error::Error>> + Send,
        T: Send,
    {
        let s = &self.io.shards[i];
        let n = s.replicas.len();
        let first = s.good.load(Ordering::Relaxed) % n;
        self.run(async {
            let mut last = None;
            for k in 0..n {
                let r = (first + k) % n;
                match f(s.replicas[r].clone()).await {
                    Ok(v) => return Ok(v),
                    Err(e) => last = Some(e),
                }
            }
            Err(read_err(last.expect("a shard has a replica")))
        })
    }

    fn cluster(&self) -> Option<&str> {
        self.io.config.cluster.as_deref()
    }

    /// The table rows are written to: the local one in a cluster.
    fn local(&self, t: &str) -> String {
        self.io.local(t)
    }

    /// Sets up the schema on every server ([`apply_schema`]). A server that cannot be reached
    /// is left for the spool's replayer to set up once it answers (so a collector restarted
    /// during an outage starts, and spools for that shard meanwhile); at least one server must
    /// answer.
    fn create(&self) -> Result<(), StoreError> {
        // Until one server is set up (a cluster just started may not have reached ZooKeeper
        // yet), for at most START_WAIT; the others are left to the replayer.
        let start = std::time::Instant::now();
        loop {
            lock(&self.io.pending_schema).clear();
            match self.create_once() {
                Err(StoreError::Unavailable(_)) if start.elapsed() < START_WAIT => {
                    std::thread::sleep(Duration::from_millis(500));
                }
                r => return r,
            }
        }
    }

    fn create_once(&self) -> Result<(), StoreError> {
        let mut reached = 0;
        for (k, (url, client)) in self.io.servers.iter().enumerate() {
            // A server that neither answers nor refuses (a host gone) must not hold the start.
            let set_up = async {
                tokio::time::timeout(INSERT_TIMEOUT, apply_schema(&self.io.config, url, client))
                    .await
                    .unwrap_or_else(|_| {
                        Err(SchemaError::Unreachable(format!(
                            "no answer in {INSERT_TIMEOUT:?}"
                        )))
                    })
            };
            match self.run(set_up) {
                Ok(()) => reached += 1,
                Err(SchemaError::Unreachable(e)) => {
                    tracing::warn!(
                        "clickhouse {url} unreachable at start, its schema is set up once it answers: {e}"
                    );
                    lock(&self.io.pending_schema).push(k);
                }
                Err(SchemaError::Failed(e)) => return Err(e),
            }
        }
        if reached == 0 {
            return Err(StoreError::Unavailable(format!(
                "no ClickHouse server of {} answered",
                self.io.config.urls.join(",")
            )));
        }
        Ok(())
    }

    /// The shard a row with this sharding key goes to (as the Distributed table's key would).
    fn shard(&self, key: u64) -> usize {
        (key % self.io.shards.len() as u64) as usize
    }

    /// The batch's rows, split by shard.
    fn write_batch(&self, b: &Batch) -> Result<(), StoreError> {
        let n = self.io.shards.len();
        let src = &self.io.config.source;
        let received_ns = crate::clock::now_ns();
        let mut flows: Vec<Vec<FlowIns>> = (0..n).map(|_| Vec::new()).collect();
        let mut series: Vec<Vec<FlowStatIns>> = (0..n).map(|_| Vec::new()).collect();
        for f in &b.flows {
            let r = FlowRef::from(&f.key);
            let h = flow_hash(&r);
            let s = self.shard(h);
            if let Some(v) = &f.interval {
                series[s].push(FlowStatIns {
                    time_ns: b.time_ns,
                    flow_hash: h,
                    src: r.src.clone(),
                    dst: r.dst.clone(),
                    proto: r.proto,
                    src_port: r.src_port,
                    dst_port: r.dst_port,
                    samples: u64::from(v.samples),
                    e2e_avg: v.e2e_avg(),
                    e2e_max: v.e2e_max().map(u64::from),
                    hop_latency_max: per_hop_json(&v.hop_latency_max()),
                    queue_occupancy_max: per_hop_json(&v.queue_occupancy_max()),
                });
            }
            flows[s].push(FlowIns {
                source: src.clone(),
                run: self.run,
                live_id: f.live_id,
                flow_hash: h,
                src: r.src,
                dst: r.dst,
                proto: r.proto,
                src_port: r.src_port,
                dst_port: r.dst_port,
                first_seen_ns: f.first_seen_ns,
                last_seen_ns: f.last_seen_ns,
                reports: f.reports,
                drops: f.drops,
                last_drop_reason: f.last_drop_reason,
                path: serde_json::to_string(&*f.path).unwrap_or_default(),
                path_changes: f.path_changes,
                e2e_p50: f.e2e_p50,
                e2e_p99: f.e2e_p99,
            });
        }
        let mut queues: Vec<Vec<QueueIns>> = (0..n).map(|_| Vec::new()).collect();
        for a in &b.queues {
            queues[self.shard(u64::from(a.node_id))].push(QueueIns {
                time_ns: b.time_ns,
                source: src.clone(),
                node_id: a.node_id,
                port: a.port,
                queue_id: a.queue_id.unwrap_or(0),
                samples: a.samples,
                // JSON (the spool) has no NaN: an average of nothing is 0.
                avg_occupancy: if a.avg.is_finite() { a.avg } else { 0.0 },
                max_occupancy: a.max,
            });
        }
        let mut ports: Vec<Vec<PortIns>> = (0..n).map(|_| Vec::new()).collect();
        for a in &b.ports {
            ports[self.shard(u64::from(a.node_id))].push(PortIns {
                time_ns: b.time_ns,
                source: src.clone(),
                node_id: a.node_id,
                port: a.port,
                samples: a.samples,
                avg_hop_latency: if a.avg.is_finite() { a.avg } else { 0.0 },
                max_hop_latency: a.max,
                drops: a.drops,
            });
        }
        let mut events: Vec<Vec<EventIns>> = (0..n).map(|_| Vec::new()).collect();
        for e in &b.events {
            let f = e.flow.as_ref().map(FlowRef::from);
            events[self.shard(e.id)].push(EventIns {
                source: src.clone(),
                id: e.id,
                time_ns: e.time_ns,
                kind: e.kind.label().into(),
                node_id: e.node_id,
                port: e.port,
                queue_id: e.queue_id,
                flow_id: e.flow_id,
                src: f.as_ref().map(|f| f.src.clone()),
                dst: f.as_ref().map(|f| f.dst.clone()),
                proto: f.as_ref().map(|f| f.proto),
                src_port: f.as_ref().map(|f| f.src_port),
                dst_port: f.as_ref().map(|f| f.dst_port),
                evidence: e.evidence.to_json().to_string(),
                received_ns: e.received_ns.unwrap_or(received_ns),
                incident_id: e.incident_id,
            });
        }
        let mut incidents: Vec<Vec<IncidentIns>> = (0..n).map(|_| Vec::new()).collect();
        for i in &b.incidents {
            incidents[self.shard(i.id)].push(IncidentIns {
                source: src.clone(),
                id: i.id,
                version: incident_version(i),
                kind: i.kind.label().into(),
                node_id: i.place.node,
                start_ns: i.start_ns,
                last_update_ns: i.last_update_ns,
                end_ns: i.end_ns,
                body: i.to_json().to_string(),
                // When this version was stored (the collector's clock): retention keeps an
                // incident while it is updated, whatever the switches' clocks say.
                received_ns,
            });
        }
        let raw: Vec<RawIns> = b
            .raw
            .iter()
            .map(|(t, from, d)| RawIns {
                source: src.clone(),
                time_ns: *t,
                from_addr: from.to_string(),
                datagram: d.clone(),
            })
            .collect();
        // Counters: the newest write of a run wins (the version counts this run's writes).
        let version = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let totals: Vec<TotalIns> = b
            .totals
            .iter()
            .map(|(name, v)| TotalIns {
                source: src.clone(),
                run: self.run,
                name: name.clone(),
                value: *v,
                version,
            })
            .collect();
        let home = self.shard(flow_hash(&FlowRef {
            src: src.clone(),
            dst: String::new(),
            proto: 0,
            src_port: 0,
            dst_port: 0,
        }));
        let mut per_shard: Vec<Vec<TableRows>> = (0..n).map(|_| Vec::new()).collect();
        for (i, (((((f, s), q), p), e), inc)) in flows
            .into_iter()
            .zip(series)
            .zip(queues)
            .zip(ports)
            .zip(events)
            .zip(incidents)
            .enumerate()
        {
            per_shard[i].extend([
                TableRows::Flows(f),
                TableRows::FlowStats(s),
                TableRows::Queues(q),
                TableRows::Ports(p),
                TableRows::Events(e),
                TableRows::Incidents(inc),
            ]);
        }
        per_shard[home].extend([TableRows::Raw(raw), TableRows::Totals(totals)]);
        self.write_shards(per_shard)
    }

    /// Writes each shard's rows on its own: every table's insert on every shard at once (a
    /// flush takes as long as its slowest insert, not their sum), a failed insert spooled
    /// without touching the others, and a shard whose spool holds older writes spooled behind
    /// them (in order). Ok once every row is stored or spooled (synced to disk).
    fn write_shards(&self, per_shard: Vec<Vec<TableRows>>) -> Result<(), StoreError> {
        let io = &self.io;
        let mut direct: Vec<(usize, Vec<TableRows>)> = Vec::new();
        let mut spooled: Vec<(usize, TableRows)> = Vec::new();
        for (i, rows) in per_shard.into_iter().enumerate() {
            let rows: Vec<TableRows> = rows.into_iter().filter(|r| r.len() > 0).collect();
            if rows.is_empty() {
                continue;
            }
            if io.shards[i].spool.as_ref().is_some_and(|s| !s.is_empty()) {
                spooled.extend(rows.into_iter().map(|r| (i, r)));
            } else {
                direct.push((i, rows));
            }
        }
        let results = self.run(futures_util::future::join_all(direct.iter().map(
            |(i, rows)| async move {
                futures_util::future::join_all(rows.iter().map(|r| io.insert(*i, r))).await
            },
        )));
        for ((i, rows), results) in direct.into_iter().zip(results) {
            let mut failed = None;
            for (r, res) in rows.into_iter().zip(results) {
                if let Err(e) = res {
                    failed = Some(e);
                    spooled.push((i, r));
                }
            }
            io.note(i, failed.as_deref());
        }
        let mut error = None;
        for (i, rows) in spooled {
            let Some(spool) = &io.shards[i].spool else {
                error = Some(StoreError::Unavailable(format!(
                    "clickhouse shard {i} refused a write and this store has no spool"
                )));
                continue;
            };
            let pushed = serde_json::to_vec(&rows)
                .map_err(std::io::Error::other)
                .and_then(|data| spool.push(rows.len() as u64, &data));
            if let Err(e) = pushed {
                tracing::error!(
                    "clickhouse shard {i}: {} rows of {} lost, the spool refused them: {e}",
                    rows.len(),
                    rows.table()
                );
                error = Some(StoreError::Io {
                    path: spool.dir().to_path_buf(),
                    source: e,
                });
            }
        }
        error.map_or(Ok(()), Err)
    }

    /// Rows per table, each shard's local tables summed.
    fn count_tables(&self) -> Result<RowCounts, StoreError> {
        let db = &self.io.config.database;
        let mut m = RowCounts::new();
        for t in super::COUNTED_TABLES {
            let sql = match t {
                // Versions of one flow life or incident count once.
                "flows" => format!(
                    "SELECT count() AS value FROM (SELECT 1 FROM {db}.flows GROUP BY flow_hash, src, dst, proto, src_port, dst_port)"
                ),
                "incidents" => format!(
                    "SELECT count() AS value FROM (SELECT 1 FROM {db}.incidents GROUP BY source, id)"
                ),
                _ => format!("SELECT count() AS value FROM {db}.{t}"),
            };
            let n = self.fetch_one::<One>(&sql, None)?;
            m.insert(t.into(), n.value);
        }
        Ok(m)
    }
}

impl RowSink for ClickHouseStore {
    type Error = StoreError;

    fn write(&self, b: &Batch) -> Result<(), StoreError> {
        self.write_batch(b)
    }

    // ClickHouse has no transactions: the parts of a flush are written one by one (the
    // default), each a set of inserts; a failed part leaves the earlier parts stored, and the
    // versioned tables (flows, incidents, counters) make writing a row again harmless.
}

/// Events `ORDER BY` tie within one report time: the ID, then a tag of the collector so two
/// collectors' events with one ID and time stay apart (at 10 bits, 1 024 collectors).
const EVENT_TIE: &str = "bitOr(bitShiftLeft(id, 10), cityHash64(source) % 1024)";

impl Store for ClickHouseStore {
    /// The spools' gauges and counters summed over the shards (`None` for a reader).
    fn spool_stats(&self) -> Option<SpoolStats> {
        let mut sum = None::<SpoolStats>;
        for s in &self.io.shards {
            if let Some(sp) = &s.spool {
                sum.get_or_insert_with(SpoolStats::default).add(&sp.stats());
            }
        }
        sum
    }

    fn prune(
        &self,
        before_ns: u64,
        received_before_ns: u64,
        keep_raw: u64,
    ) -> Result<(), StoreError> {
        // Whole days only (18.16 has no TTL and deletes are heavy mutations): a partition goes
        // once its day has ended before `before_ns`.
        let db = self.io.config.database.clone();
        let day = (before_ns / 1_000_000_000 / 86_400) as i64;
        let before_day = civil_yyyymmdd(day);
        let tables: Vec<String> = schema::TABLES
            .iter()
            .filter(|t| t.clickhouse.is_some())
            .map(|t| self.local(t.name))
            // A rollup's rows are in its view's inner table.
            .chain(
                ROLLUPS
                    .iter()
                    .map(|r| format!(".inner.{}", self.local(r.0))),
            )
            .collect();
        // One replica of each shard: a replicated table's partition drops and deletes reach
        // the other replicas through ZooKeeper.
        for s in &self.io.shards {
            let c = &s.replicas[s.good.load(Ordering::Relaxed) % s.replicas.len()];
            let parts = self.run(async {
                let list = tables.iter().map(|t| lit(t)).collect::<Vec<_>>().join(",");
                c.query(&format!(
                    "SELECT DISTINCT concat(table, ' ', partition) AS name, toUInt64(0) AS value \
                     FROM system.parts WHERE database = {} AND active AND table IN ({list})",
                    lit(&db)
                ))
                .fetch_all::<NameCount>()
                .await
            });
            let parts = parts.map_err(ch_err)?;
            for p in parts {
                let Some((table, part)) = p.name.split_once(' ') else {
                    continue;
                };
                let Ok(d) = part.trim_matches('\'').parse::<i64>() else {
                    continue;
                };
                if d >= before_day {
                    continue;
                }
                // Events and incidents go by the collector's clock (`received_ns`): a day of
                // report time goes once none of its rows was stored since the horizon; from a
                // day still written to (a switch whose clock is stuck in the past) the rows
                // stored before it are deleted (a mutation, rare).
                if [self.local("events"), self.local("incidents")].contains(&table.to_string()) {
                    let time = if table.starts_with("events") {
                        "time_ns"
                    } else {
                        "start_ns"
                    };
                    let day_of = DAY.replace("{t}", time);
                    let sql = format!(
                        "SELECT toUInt64(max(received_ns)) AS value FROM {db}.`{table}` \
                         WHERE {day_of} = {d}"
                    );
                    let newest = self.run(c.query(&sql).fetch_one::<One>()).map_err(ch_err)?;
                    if newest.value >= received_before_ns {
                        let sql = format!(
                            "SELECT toUInt64(min(received_ns)) AS value FROM {db}.`{table}` \
                             WHERE {day_of} = {d} AND received_ns > 0"
                        );
                        let oldest = self.run(c.query(&sql).fetch_one::<One>()).map_err(ch_err)?;
                        if oldest.value > 0 && oldest.value < received_before_ns {
                            let sql = format!(
                                "ALTER TABLE {db}.`{table}` DELETE \
                                 WHERE received_ns > 0 AND received_ns < {received_before_ns}"
                            );
                            self.run(c.query(&sql).execute()).map_err(ch_err)?;
                        }
                        continue;
                    }
                }
                let sql = format!("ALTER TABLE {db}.`{table}` DROP PARTITION {part}");
                self.run(c.query(&sql).execute()).map_err(ch_err)?;
            }
            // The events' days go once the events of that day have gone (which may be later
            // than the horizon: see above).
            let days = format!(".inner.{}", self.local(EVENTS_DAYS));
            let parts_of = |table: String| {
                let sql = format!(
                    "SELECT DISTINCT partition AS name, toUInt64(0) AS value FROM system.parts \
                     WHERE database = {} AND active AND table = {}",
                    lit(&db),
                    lit(&table)
                );
                self.run(c.query(&sql).fetch_all::<NameCount>())
                    .map_err(ch_err)
                    .map(|p| {
                        p.into_iter()
                            .map(|p| p.name.trim_matches('\'').to_string())
                            .collect::<Vec<_>>()
                    })
            };
            let events_days = parts_of(self.local("events"))?;
            for part in parts_of(days.clone())? {
                let old = part.parse::<i64>().is_ok_and(|d| d < before_day);
                if old && !events_days.contains(&part) {
                    let sql = format!("ALTER TABLE {db}.`{days}` DROP PARTITION {part}");
                    self.run(c.query(&sql).execute()).map_err(ch_err)?;
                }
            }
            // The flows' newest versions are not partitioned: lives last seen before the first
            // day `flows` keeps are deleted (a mutation, only when there are some).
            let latest = format!("`.inner.{}`", self.local(FLOWS_LATEST));
            let cutoff = u64::try_from(day).unwrap_or(0) * 86_400 * 1_000_000_000;
            let old = self
                .run(
                    c.query(&format!(
                        "SELECT toUInt64(count()) AS value FROM {db}.{latest} \
                         WHERE last_seen_ns < {cutoff}"
                    ))
                    .fetch_one::<One>(),
                )
                .map_err(ch_err)?;
            if old.value > 0 {
                let sql = format!("ALTER TABLE {db}.{latest} DELETE WHERE last_seen_ns < {cutoff}");
                self.run(c.query(&sql).execute()).map_err(ch_err)?;
                // 18.16 runs the mutation in the background: waited for (the table is small),
                // so the flow list agrees with `flows` once retention has run.
                let pending = format!(
                    "SELECT toUInt64(count()) AS value FROM system.mutations \
                     WHERE database = {} AND table = {} AND NOT is_done",
                    lit(&db),
                    lit(&latest.replace('`', ""))
                );
                let deadline = std::time::Instant::now() + MUTATION_WAIT;
                while self
                    .run(c.query(&pending).fetch_one::<One>())
                    .map_err(ch_err)?
                    .value
                    > 0
                {
                    if std::time::Instant::now() > deadline {
                        tracing::warn!(
                            "deleting flows older than retention from {latest} takes over \
                             {MUTATION_WAIT:?}: left to finish in the background"
                        );
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            // The raw ring: keep the newest `keep_raw` (a mutation, only when over).
            let raw = self.local("raw_reports");
            let over = self
                .run(
                    c.query(&format!(
                        "SELECT toUInt64(count()) AS value FROM {db}.{raw}"
                    ))
                    .fetch_one::<One>(),
                )
                .map_err(ch_err)?;
            if over.value > keep_raw {
                let cut = self
                    .run(
                        c.query(&format!(
                            "SELECT time_ns AS value FROM {db}.{raw} ORDER BY time_ns DESC LIMIT 1 OFFSET {keep_raw}"
                        ))
                        .fetch_one::<One>(),
                    )
                    .map_err(ch_err)?;
                self.run(
                    c.query(&format!(
                        "ALTER TABLE {db}.{raw} DELETE WHERE time_ns <= {}",
                        cut.value
                    ))
                    .execute(),
                )
                .map_err(ch_err)?;
            }
        }
        Ok(())
    }

    fn next_event_id(&self) -> Result<u64, StoreError> {
        self.next_id("events")
    }

    fn next_incident_id(&self) -> Result<u64, StoreError> {
        self.next_id("incidents")
    }

    fn events(&self, q: &HistoryQuery) -> Result<Page<StoredEvent>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, tie) = q.cursor('e')?.unwrap_or((i64::MAX, i64::MAX));
        let db = &self.io.config.database;
        let (since, until) = (q.since.unwrap_or(0), q.until.unwrap_or(u64::MAX));
        let mut filter = format!("time_ns <= {until}");
        let kind = q.event_kind()?;
        if let Some(k) = kind {
            filter += &format!(" AND kind = {}", lit(k));
        }
        if let Some(n) = q.node {
            filter += &format!(" AND node_id = {n}");
        }
        // The page is looked for in windows back from now (or `until`, or the cursor), as the
        // table's order (time first) reads only a window's rows; 18.16 cannot read the table
        // in order, so one query over the whole range would read and sort every event in it.
        let anchor = until
            .min(u64::try_from(t).unwrap_or(0))
            .min(crate::clock::now_ns());
        // Filtered by node or kind: the search runs between the oldest and newest such events
        // stored ([`EVENTS_DAYS`]), and there are none, at once.
        let mut span = None;
        if q.node.is_some() || kind.is_some() {
            let mut by = vec![format!("day <= {}", yyyymmdd(anchor))];
            if let Some(n) = q.node {
                by.push(format!("node = {n}"));
            }
            if let Some(k) = kind {
                by.push(format!("kind = {}", lit(k)));
            }
            let sql = format!(
                "SELECT toUInt64(count()) AS n, toUInt64(minMerge(oldest)) AS oldest, \
                 toUInt64(maxMerge(newest)) AS newest FROM {db}.{EVENTS_DAYS} WHERE {}",
                by.join(" AND ")
            );
            let s = self.fetch_one::<Span>(&sql, q.timeout)?;
            if s.n == 0 || s.oldest > anchor || s.newest < since {
                return Ok(Page::of(Vec::new(), limit));
            }
            span = Some(s);
        }
        let anchor = span.as_ref().map_or(anchor, |s| anchor.min(s.newest));
        // The filters are in the PREWHERE (narrow columns): a window's wide columns are read
        // only where an event matches.
        let oldest = || {
            span.as_ref()
                .map_or_else(|| self.oldest_day("events"), |s| s.oldest)
        };
        let rows = newest_in_windows(since, anchor, limit as usize + 1, oldest, |lower| {
            let sql = format!(
                "SELECT id, time_ns, kind, node_id, port, queue_id, flow_id, src, dst, proto, src_port, dst_port, evidence, incident_id, {EVENT_TIE} AS tie
                 FROM {db}.events PREWHERE time_ns >= {lower} AND {filter} WHERE (time_ns < {t} OR (time_ns = {t} AND {EVENT_TIE} < {tie}))
                 ORDER BY time_ns DESC, tie DESC LIMIT {}",
                limit + 1
            );
            self.fetch_all::<EventOut>(&sql, q.timeout)
        })?;
        let rows = rows
            .into_iter()
            .map(|e| {
                // The writer stores all of a flow's columns or none.
                let flow = match (e.src, e.dst, e.proto, e.src_port, e.dst_port) {
                    (Some(src), Some(dst), Some(proto), Some(src_port), Some(dst_port)) => {
                        Some(FlowRef {
                            src,
                            dst,
                            proto,
                            src_port,
                            dst_port,
                        })
                    }
                    (None, ..) => None,
                    _ => return Err(corrupt("stored event flow", "a key column is null")),
                };
                Ok((
                    StoredEvent {
                        id: e.id,
                        time_ns: e.time_ns,
                        kind: parse_kind(&e.kind)?,
                        node_id: e.node_id,
                        port: e.port,
                        queue_id: e.queue_id,
                        flow_id: e.flow_id,
                        flow,
                        evidence: parse_evidence(&e.evidence)?,
                        incident_id: e.incident_id,
                    },
                    format!("e.{}.{}", e.time_ns, e.tie),
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn flows(&self, q: &HistoryQuery) -> Result<Page<FlowSummary>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, h) = q.cursor('f')?.unwrap_or((i64::MAX, i64::MAX));
        // First the page's flows by their hash alone (an aggregation of three numeric columns),
        // then the summaries of those only (granules found by the primary key), both from the
        // flows' newest versions.
        let db = &self.io.config.database;
        let (since, until) = (q.since.unwrap_or(0), q.until.unwrap_or(u64::MAX));
        // The newest flows have rows in the newest seconds: the page is looked for in a window
        // back from the newest sighting (a scan of one column), from 50 ms widened 16-fold
        // until it holds a page or reaches `since`, rather than aggregating every flow stored.
        // With `until` the whole range is aggregated (a flow's first sighting may be in an
        // older life than the window holds).
        let newest = if q.until.is_some() {
            None
        } else {
            let sql = format!(
                "SELECT toUInt64(max(last_seen_ns)) AS value FROM {db}.{FLOWS_LATEST} \
                 WHERE last_seen_ns <= {}",
                t.max(0)
            );
            Some(self.fetch_one::<One>(&sql, q.timeout)?.value)
        };
        let mut window: u64 = 50_000_000;
        let hashes = loop {
            let lower = match newest {
                Some(n) => n.saturating_sub(window).max(since),
                None => since,
            };
            let sql = format!(
                "SELECT flow_hash AS value FROM {db}.{FLOWS_LATEST} WHERE last_seen_ns >= {lower}
                 GROUP BY flow_hash
                 HAVING min(first_seen_ns) <= {until}
                   AND (max(last_seen_ns) < {t} OR (max(last_seen_ns) = {t} AND flow_hash < {h}))
                 ORDER BY max(last_seen_ns) DESC, flow_hash DESC LIMIT {}",
                limit + 1
            );
            let hashes = self.fetch_all::<One>(&sql, q.timeout)?;
            if hashes.len() > limit as usize || lower == since {
                break hashes;
            }
            window = window.saturating_mul(16);
        };
        if hashes.is_empty() {
            return Ok(Page::of(Vec::new(), limit));
        }
        let list = hashes
            .iter()
            .map(|r| r.value.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut rows = self.fetch_all::<FlowOut>(
            &self.flow_sql(
                &format!("flow_hash IN ({list})"),
                &format!(
                    "last_seen_ns >= {since} AND first_seen_ns <= {until} \
                     AND (last_seen_ns < {t} OR (last_seen_ns = {t} AND flow_hash < {h}))"
                ),
                limit + 1,
            ),
            q.timeout,
        )?;
        // Each shard answered its own newest (see `flow_sql`): merged here.
        rows.sort_unstable_by(|a, b| {
            (b.last_seen_ns, b.flow_hash).cmp(&(a.last_seen_ns, a.flow_hash))
        });
        let rows = rows
            .into_iter()
            .map(|f| {
                let cursor = format!("f.{}.{}", f.last_seen_ns, f.flow_hash);
                Ok((f.stored()?, cursor))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn flow(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Option<FlowSummary>, StoreError> {
        let sql = self.flow_sql(
            &format!("flow_hash = {} AND {}", flow_hash(flow), key_filter(flow)),
            "1",
            1,
        );
        let rows = self.fetch_all::<FlowOut>(&sql, q.timeout)?;
        rows.into_iter().next().map(FlowOut::stored).transpose()
    }

    fn queue_series(&self, q: &HistoryQuery) -> Result<Page<QueueInterval>, StoreError> {
        let limit = q.page_size(MAX_HISTORY_LIMIT)?;
        let (t, tie) = q.cursor('q')?.unwrap_or((i64::MIN, i64::MIN));
        let db = &self.io.config.database;
        let node = q
            .node
            .map(|n| format!(" AND node_id = {n}"))
            .unwrap_or_default();
        let resolution = q.pick_resolution();
        if resolution == Resolution::Minute {
            // The minutes that overlap the range, from the rollup (each minute's partial
            // aggregates merged); its time the minute's start, the mean weighted by samples.
            let since_m = q.since.unwrap_or(0) / MINUTE_NS * MINUTE_NS;
            let until = q.until.unwrap_or(u64::MAX);
            if q.node.is_none() {
                // Every queue's minutes: the rollup is ordered by queue, then minute, so a
                // page across queues would read whole days of it; the raw rows are ordered by
                // time, and a page's minutes are read from them in windows forward (whole
                // minutes), grouped as the rollup groups them.
                let last = until - until % MINUTE_NS;
                let anchor = since_m.max(u64::try_from(t).unwrap_or(0));
                let rows = oldest_in_windows(anchor, last, limit as usize + 1, |upper| {
                    let upper = (upper - upper % MINUTE_NS).saturating_add(MINUTE_NS - 1);
                    let sql = format!(
                        "SELECT intDiv(time_ns, {MINUTE_NS}) * {MINUTE_NS} AS minute_ns,
                                node_id, port, queue_id, sum(samples) AS samples_sum,
                                if(samples_sum > 0, sum(avg_occupancy * samples) / samples_sum, 0.) AS occupancy_avg,
                                max(max_occupancy) AS occupancy_max,
                                bitShiftRight(cityHash64(node_id, port, queue_id), 1) AS tie
                         FROM {db}.queue_stats PREWHERE time_ns >= {since_m} AND time_ns <= {upper}
                         GROUP BY minute_ns, node_id, port, queue_id
                         HAVING minute_ns > {t} OR (minute_ns = {t} AND tie > {tie})
                         ORDER BY minute_ns, tie LIMIT {}",
                        limit + 1
                    );
                    self.fetch_all::<QueueOut>(&sql, q.timeout)
                })?;
                return Ok(
                    Page::of(rows.into_iter().map(QueueOut::interval).collect(), limit)
                        .at(resolution),
                );
            }
            let since = since_m / 1_000_000_000;
            let until = (until / 1_000_000_000).min(u64::from(u32::MAX));
            let sql = format!(
                "SELECT toUInt64(minute) * 1000000000 AS time_ns, node_id, port, queue_id,
                        sumMerge(samples_total) AS samples,
                        if(samples > 0, sumMerge(occupancy_sum) / samples, 0.) AS avg_occupancy,
                        maxMerge(occupancy_max) AS max_occupancy,
                        bitShiftRight(cityHash64(node_id, port, queue_id), 1) AS tie
                 FROM {db}.queue_stats_1m
                 WHERE minute >= toDateTime({since}) AND minute <= toDateTime({until}){node}
                 GROUP BY minute, node_id, port, queue_id
                 HAVING time_ns > {t} OR (time_ns = {t} AND tie > {tie})
                 ORDER BY time_ns, tie LIMIT {}",
                limit + 1
            );
            let rows = self.fetch_all::<QueueOut>(&sql, q.timeout)?;
            return Ok(
                Page::of(rows.into_iter().map(QueueOut::interval).collect(), limit).at(resolution),
            );
        }
        let tie_expr = "bitShiftRight(cityHash64(source, node_id, port, queue_id), 1)";
        let (since, until) = (q.since.unwrap_or(0), q.until.unwrap_or(u64::MAX));
        // In windows forward from the oldest time the page can hold (as events backward): from
        // `since` or the cursor, else from the start of the oldest day stored.
        let from = since.max(u64::try_from(t).unwrap_or(0));
        let anchor = if q.since.is_none() && from == 0 {
            // The oldest row, looked for in the oldest day stored only (one day's column, not
            // the table's): windows from the day's start would widen past the whole table
            // before they reach rows that start late in the day.
            let day = self.day_ns("queue_stats", "min")?;
            let sql = format!(
                "SELECT toUInt64(min(time_ns)) AS value FROM {db}.queue_stats \
                 WHERE time_ns >= {day} AND time_ns < {}",
                day.saturating_add(86_400_000_000_000)
            );
            self.fetch_one::<One>(&sql, q.timeout)?.value.max(day)
        } else {
            from
        };
        let rows = oldest_in_windows(anchor, until, limit as usize + 1, |upper| {
            let sql = format!(
                "SELECT time_ns, node_id, port, queue_id, samples, avg_occupancy, max_occupancy, {tie_expr} AS tie
                 FROM {db}.queue_stats PREWHERE time_ns <= {upper} WHERE time_ns >= {since}{node}
                   AND (time_ns > {t} OR (time_ns = {t} AND {tie_expr} > {tie}))
                 ORDER BY time_ns, tie LIMIT {}",
                limit + 1
            );
            self.fetch_all::<QueueOut>(&sql, q.timeout)
        })?;
        Ok(Page::of(rows.into_iter().map(QueueOut::interval).collect(), limit).at(resolution))
    }

    fn flow_series(
        &self,
        flow: &FlowRef,
        q: &HistoryQuery,
    ) -> Result<Vec<FlowInterval>, StoreError> {
        let limit = q.page_size(600)?;
        let db = &self.io.config.database;
        let minutes = q.pick_resolution() == Resolution::Minute;
        let since = q.since.unwrap_or(0);
        let this = format!(
            "flow_hash = {} AND {} AND time_ns >= {} AND time_ns <= {}",
            flow_hash(flow),
            key_filter(flow),
            if minutes {
                since - since % MINUTE_NS
            } else {
                since
            },
            q.until.unwrap_or(u64::MAX),
        );
        // Per minute: the flow's raw rows (contiguous in the table's order) of its newest
        // `limit` minutes, folded as SQLite folds them ([`flow_minutes`]): the rollup keeps
        // no per-hop maxima.
        let sql = if minutes {
            format!(
                "SELECT time_ns, samples, e2e_avg, e2e_max, hop_latency_max, queue_occupancy_max
                 FROM {db}.flow_stats WHERE {this} AND time_ns >= (
                   SELECT min(m) FROM (SELECT intDiv(time_ns, {MINUTE_NS}) * {MINUTE_NS} AS m
                     FROM {db}.flow_stats WHERE {this} GROUP BY m ORDER BY m DESC LIMIT {limit}))
                 ORDER BY time_ns DESC"
            )
        } else {
            format!(
                "SELECT time_ns, samples, e2e_avg, e2e_max, hop_latency_max, queue_occupancy_max
                 FROM {db}.flow_stats WHERE {this} ORDER BY time_ns DESC LIMIT {limit}"
            )
        };
        let rows = self.fetch_all::<SeriesOut>(&sql, q.timeout)?;
        let raw = rows
            .iter()
            .rev()
            .map(|r| {
                Ok(FlowInterval {
                    time_ns: r.time_ns,
                    samples: r.samples,
                    e2e_latency_avg: r.e2e_avg,
                    e2e_latency_max: r.e2e_max,
                    hop_latency_max: parse_hops(&r.hop_latency_max)?,
                    queue_occupancy_max: parse_hops(&r.queue_occupancy_max)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(if minutes { flow_minutes(raw) } else { raw })
    }

    fn incidents(&self, q: &HistoryQuery) -> Result<Page<StoredIncident>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, tie) = q.cursor('i')?.unwrap_or((i64::MAX, i64::MAX));
        let db = &self.io.config.database;
        let mut filter = format!("start_ns <= {}", q.until.unwrap_or(u64::MAX));
        if let Some(k) = q.incident_kind()? {
            filter += &format!(" AND kind = {}", lit(k));
        }
        if let Some(n) = q.node {
            filter += &format!(" AND node_id = {n}");
        }
        // Each incident's newest version; its span must reach `since`. The page's incidents
        // are chosen on the numeric columns first (per shard, from the local table, which
        // holds every version of its incidents), then only their bodies are read.
        let local = self.local("incidents");
        let (since, n) = (q.since.unwrap_or(0), limit + 1);
        // In windows of start time back from now (as events): the table is partitioned by the
        // day of the start, so a window reads only its days. An incident that started long
        // ago may still overlap `since`: the windows reach back to the oldest.
        let anchor = q
            .until
            .unwrap_or(u64::MAX)
            .min(u64::try_from(t).unwrap_or(0))
            .min(crate::clock::now_ns());
        let oldest = || self.oldest_day("incidents");
        let rows = newest_in_windows(0, anchor, n as usize, oldest, |lower| {
            let sql = format!(
                "SELECT s AS start_ns, tie, body FROM (
                   SELECT any(start_ns) AS s, {EVENT_TIE} AS tie, argMax(body, version) AS body
                   FROM {db}.incidents
                   WHERE (source, id) IN (
                     SELECT source, id FROM {db}.{local} WHERE {filter} AND start_ns >= {lower}
                     GROUP BY source, id
                     HAVING argMax(ifNull(end_ns, last_update_ns), version) >= {since}
                       AND (any(start_ns) < {t} OR (any(start_ns) = {t} AND {EVENT_TIE} < {tie}))
                     ORDER BY any(start_ns) DESC, {EVENT_TIE} DESC LIMIT {n})
                   GROUP BY source, id)
                 ORDER BY s DESC, tie DESC LIMIT {n}"
            );
            self.fetch_all::<IncidentOut>(&sql, q.timeout)
        })?;
        let rows = rows
            .into_iter()
            .map(|r| {
                Ok((
                    parse_incident(&r.body)?,
                    format!("i.{}.{}", r.start_ns, r.tie),
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn counts(&self) -> Result<RowCounts, StoreError> {
        self.count_tables()
    }

    fn rows_stored(&self) -> Result<RowCounts, StoreError> {
        let db = lit(&self.io.config.database);
        let mut m = RowCounts::new();
        let sql = format!(
            "SELECT table AS name, sum(rows) AS value FROM system.parts \
             WHERE active AND database = {db} GROUP BY table"
        );
        for i in 0..self.io.shards.len() {
            let rows = self.on_shard(i, |c| {
                let sql = sql.clone();
                async move { c.query(&sql).fetch_all::<NameCount>().await }
            })?;
            for r in rows {
                let name = r.name.strip_suffix("_local").unwrap_or(&r.name).to_string();
                *m.entry(name).or_default() += r.value;
            }
        }
        Ok(m)
    }

    fn own_totals(&self) -> Result<Totals, StoreError> {
        self.totals_where(&format!("source = {}", lit(&self.io.config.source)))
    }

    fn shared(&self) -> bool {
        true
    }

    fn totals(&self) -> Result<Totals, StoreError> {
        self.totals_where("1")
    }
}

impl ClickHouseStore {
    /// The start of the oldest day `table` holds rows of, to stop a search back in time; 0 (no
    /// floor: the search goes on to its own bound) if a shard cannot say, as the servers a
    /// read goes through may reach a shard this store's own address for it does not.
    fn oldest_day(&self, table: &str) -> u64 {
        self.day_ns(table, "min").unwrap_or(0)
    }

    /// The start (ns) of the oldest (`which`: `min`) or newest (`max`) day `table` holds on
    /// any shard (its day partitions), 0 when it holds none.
    fn day_ns(&self, table: &str, which: &str) -> Result<u64, StoreError> {
        let sql = format!(
            "SELECT toUInt64(toDateTime(toDate(concat(substring(p, 1, 4), '-', substring(p, 5, 2), \
             '-', substring(p, 7, 2))), 'UTC')) * 1000000000 AS value \
             FROM (SELECT toString({which}(toUInt32OrZero(replaceAll(partition, '\\'', '')))) AS p \
                   FROM system.parts \
                   WHERE active AND database = {} AND table = {}) WHERE length(p) = 8",
            lit(&self.io.config.database),
            lit(&self.local(table))
        );
        let mut day = None::<u64>;
        for i in 0..self.io.shards.len() {
            let rows = self.on_shard(i, |c| {
                let sql = sql.clone();
                async move { c.query(&sql).fetch_all::<One>().await }
            })?;
            for r in rows {
                day = Some(match (day, which) {
                    (None, _) => r.value,
                    (Some(d), "max") => d.max(r.value),
                    (Some(d), _) => d.min(r.value),
                });
            }
        }
        Ok(day.unwrap_or(0))
    }
}

/// IDs left unused after the live shards' highest when a shard is down at start: more than
/// an outage's worth of events, so a new ID never takes one stored on the shard that is down.
const ID_GAP: u64 = 1 << 24;

impl ClickHouseStore {
    /// The next free ID of this collector's rows in `table` (`events`, `incidents`). With a
    /// shard down (a collector restarted during an outage) the live shards' highest plus
    /// [`ID_GAP`], rather than refuse to start.
    fn next_id(&self, table: &str) -> Result<u64, StoreError> {
        let db = &self.io.config.database;
        let sql = format!(
            "SELECT toUInt64(max(id)) AS value FROM {db}.{table} WHERE source = {}",
            lit(&self.io.config.source)
        );
        match self.fetch_one::<One>(&sql, None) {
            Ok(m) => Ok(m.value + 1),
            Err(StoreError::Unavailable(_)) => {
                let m = self.fetch_one::<One>(
                    &format!("{sql} SETTINGS skip_unavailable_shards = 1"),
                    None,
                )?;
                tracing::warn!(
                    "clickhouse: a shard is down, {table} IDs continue {ID_GAP} past the live shards' highest"
                );
                Ok(m.value + 1 + ID_GAP)
            }
            Err(e) => Err(e),
        }
    }
}

impl ClickHouseStore {
    /// The counters of the rows `filter` keeps, each run's newest version summed.
    fn totals_where(&self, filter: &str) -> Result<Totals, StoreError> {
        let db = &self.io.config.database;
        let sql = format!(
            "SELECT name, sum(v) AS value FROM (
               SELECT name, argMax(value, version) AS v FROM {db}.totals WHERE {filter}
               GROUP BY name, source, run)
             GROUP BY name ORDER BY name"
        );
        let rows = self.fetch_all::<NameCount>(&sql, None)?;
        Ok(rows.into_iter().map(|r| (r.name, r.value)).collect())
    }
}

impl ClickHouseStore {
    /// The flow summaries query: each flow's lives (a collector's run and the flow's ID in it),
    /// each life's newest version (by last sighting, then by reports: a life's counts only
    /// grow, and two versions may share a sighting time; versions not yet merged are read
    /// too), summed per flow, from [`FLOWS_LATEST`]. `pre` picks rows before the grouping (a
    /// `PREWHERE`: on the key columns, so the index finds their granules), `post` flows after
    /// it. In a cluster a flow's rows are all on one shard, so each shard
    /// aggregates and sorts its own and the caller merges (no merge of partial aggregates).
    fn flow_sql(&self, pre: &str, post: &str, limit: u32) -> String {
        let db = &self.io.config.database;
        let no_merge = if self.cluster().is_some() {
            " SETTINGS distributed_group_by_no_merge = 1"
        } else {
            ""
        };
        format!(
            "SELECT flow_hash, src, dst, proto, src_port, dst_port, min(f) AS first_seen_ns, max(l) AS last_seen_ns,
                    sum(r) AS reports, sum(d) AS drops, argMax(ldr, l) AS last_drop_reason, argMax(p, l) AS path,
                    sum(pc) AS path_changes, argMax(p50, l) AS e2e_p50, argMax(p99, l) AS e2e_p99
             FROM (
               SELECT flow_hash, src, dst, proto, src_port, dst_port, min(first_seen_ns) AS f, max(last_seen_ns) AS l,
                      argMax(reports, (last_seen_ns, reports)) AS r, argMax(drops, (last_seen_ns, reports)) AS d,
                      argMax(last_drop_reason, (last_seen_ns, reports)) AS ldr,
                      argMax(path, (last_seen_ns, reports)) AS p,
                      argMax(path_changes, (last_seen_ns, reports)) AS pc,
                      argMax(e2e_p50, (last_seen_ns, reports)) AS p50,
                      argMax(e2e_p99, (last_seen_ns, reports)) AS p99
               FROM {db}.{FLOWS_LATEST} PREWHERE {pre}
               GROUP BY flow_hash, src, dst, proto, src_port, dst_port, source, run, live_id)
             GROUP BY flow_hash, src, dst, proto, src_port, dst_port
             HAVING {post}
             ORDER BY last_seen_ns DESC, flow_hash DESC LIMIT {limit}{no_merge}"
        )
    }
}

/// The page of a list newest first, looked for in windows of time back from `anchor`: `query`
/// answers with the rows from its argument (the window's start) up to the list's own upper
/// bound, at most `want`; the window, from 10 s, widens 16-fold until the answer holds `want`
/// rows (the newest `want`, as every row outside the window is older) or reaches `since` or
/// `oldest()` (the oldest time stored, asked once a window falls short: no row is older, so a
/// filter that matches little stops there, not after widening over years of nothing).
fn newest_in_windows<T>(
    since: u64,
    anchor: u64,
    want: usize,
    oldest: impl FnOnce() -> u64,
    mut query: impl FnMut(u64) -> Result<Vec<T>, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut window: u64 = 10_000_000_000;
    let mut oldest = Some(oldest);
    let mut floor = None;
    loop {
        let lower = anchor.saturating_sub(window).max(since);
        let rows = query(lower)?;
        if rows.len() >= want || lower == since {
            return Ok(rows);
        }
        let floor = match floor {
            Some(f) => f,
            None => *floor.insert(oldest.take().map_or(0, |f| f())),
        };
        if lower <= floor {
            return Ok(rows);
        }
        window = window.saturating_mul(16);
    }
}

/// [`newest_in_windows`] for a list oldest first: windows forward from `anchor` (the oldest
/// time the page can hold), `query` answering the rows from the list's lower bound up to its
/// argument, until the answer holds `want` rows or the window reaches `until`.
fn oldest_in_windows<T>(
    anchor: u64,
    until: u64,
    want: usize,
    mut query: impl FnMut(u64) -> Result<Vec<T>, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut window: u64 = 10_000_000_000;
    loop {
        let upper = anchor.saturating_add(window).min(until);
        let rows = query(upper)?;
        if rows.len() >= want || upper == until {
            return Ok(rows);
        }
        window = window.saturating_mul(16);
    }
}

/// The flow's key columns equal to `f` (the hash narrows the rows, this makes the match exact).
fn key_filter(f: &FlowRef) -> String {
    format!(
        "src = {} AND dst = {} AND proto = {} AND src_port = {} AND dst_port = {}",
        lit(&f.src),
        lit(&f.dst),
        f.proto,
        f.src_port,
        f.dst_port
    )
}

/// The `YYYYMMDD` of a day since 1970-01-01 (proleptic Gregorian; Howard Hinnant's
/// days-to-civil), to compare with the tables' partition IDs.
/// The UTC day of `ns` as `YYYYMMDD` (the partitions' and [`EVENTS_DAYS`]' day).
fn yyyymmdd(ns: u64) -> i64 {
    civil_yyyymmdd(i64::try_from(ns / 1_000_000_000 / 86_400).unwrap_or(i64::MAX / 2))
}

fn civil_yyyymmdd(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    y * 10_000 + m * 100 + d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row type inserts the columns its table declares, in their order: a field added
    /// to one and not the other fails here, not at a server.
    #[test]
    fn row_types_are_their_tables_declared_columns() {
        fn names(t: &schema::Table) -> Vec<&'static str> {
            t.columns(Backend::ClickHouse).map(|c| c.name).collect()
        }
        let rows: [(&[&str], TableRows); 8] = [
            (FlowIns::COLUMN_NAMES, TableRows::Flows(vec![])),
            (FlowStatIns::COLUMN_NAMES, TableRows::FlowStats(vec![])),
            (QueueIns::COLUMN_NAMES, TableRows::Queues(vec![])),
            (PortIns::COLUMN_NAMES, TableRows::Ports(vec![])),
            (EventIns::COLUMN_NAMES, TableRows::Events(vec![])),
            (IncidentIns::COLUMN_NAMES, TableRows::Incidents(vec![])),
            (RawIns::COLUMN_NAMES, TableRows::Raw(vec![])),
            (TotalIns::COLUMN_NAMES, TableRows::Totals(vec![])),
        ];
        for (fields, rows) in &rows {
            assert_eq!(*fields, names(rows.declared()), "{}", rows.table());
        }
        let written: Vec<_> = rows.iter().map(|(_, r)| r.table()).collect();
        for t in schema::TABLES.iter().filter(|t| t.clickhouse.is_some()) {
            assert!(written.contains(&t.name), "no row type writes {}", t.name);
        }
    }

    #[test]
    fn windows_back_stop_at_the_oldest_stored_day() {
        const S: u64 = 1_000_000_000;
        let now = 400 * 86_400 * S;
        // Nothing matches: the windows widen until one reaches the oldest day stored (3 days
        // back), asking for it once, not on over the years to `since` = 0.
        let (mut lowers, mut asked) = (Vec::new(), 0);
        let rows: Vec<u64> = newest_in_windows(
            0,
            now,
            10,
            || {
                asked += 1;
                now - 3 * 86_400 * S
            },
            |lower| {
                lowers.push(lower);
                Ok(vec![])
            },
        )
        .unwrap();
        assert!(rows.is_empty());
        assert_eq!(asked, 1);
        let widths: Vec<u64> = lowers.iter().map(|l| (now - l) / S).collect();
        assert_eq!(widths, [10, 160, 2_560, 40_960, 655_360]);
        // A page found in the first window never asks.
        let rows = newest_in_windows(0, now, 1, || panic!("asked"), |_| Ok(vec![1u8])).unwrap();
        assert_eq!(rows, [1]);
        // Without a floor (0: a shard could not say) the windows go on to `since`.
        let mut n = 0;
        newest_in_windows(
            now - 86_400 * S,
            now,
            10,
            || 0,
            |_| {
                n += 1;
                Ok(Vec::<u8>::new())
            },
        )
        .unwrap();
        assert_eq!(n, 5, "10 s, 160 s, 2 560 s, 40 960 s, then since");
    }

    #[test]
    fn days_map_to_partition_ids() {
        assert_eq!(civil_yyyymmdd(0), 19_700_101);
        assert_eq!(civil_yyyymmdd(19_675), 20_231_114);
        assert_eq!(civil_yyyymmdd(11_016), 20_000_229);
    }

    #[test]
    fn flow_hashes_fit_a_cursor_and_differ() {
        let f = |p| FlowRef {
            src: "10.0.0.1".into(),
            dst: "10.0.0.2".into(),
            proto: 6,
            src_port: p,
            dst_port: 80,
        };
        assert!(flow_hash(&f(1)) <= i64::MAX as u64);
        assert_ne!(flow_hash(&f(1)), flow_hash(&f(2)));
        assert_eq!(flow_hash(&f(1)), flow_hash(&f(1)));
    }

    #[test]
    fn store_specs_parse() {
        let c = ClickHouseConfig::parse("http://a:1,http://b:2/", None, "c1").unwrap();
        assert_eq!(c.urls, ["http://a:1", "http://b:2"]);
        assert_eq!(c.cluster.as_deref(), Some("intscope"));
        assert!(ClickHouseConfig::parse("", None, "c1").is_err());
        assert!(ClickHouseConfig::parse("tcp://a:9000", None, "c1").is_err());
        let one = ClickHouseConfig::parse("http://a:1", None, "c1").unwrap();
        assert_eq!(one.cluster, None);
    }
}
