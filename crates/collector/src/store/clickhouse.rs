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
//! their ID. Reads go to the first URL's Distributed tables.
//!
//! The store's API is synchronous (the writer thread, the API's blocking pool); each call runs
//! the client's future on the store's own small runtime.

use std::future::Future;
use std::time::Duration;

use ::clickhouse::{Client, Row};

use super::read::{
    FlowInterval, Page, QueueInterval, RowCounts, StoredEvent, StoredFlow, StoredIncident, Totals,
    corrupt, parse_evidence, parse_hops, parse_incident, parse_kind, parse_path,
};
use super::{
    DEFAULT_QUERY_TIMEOUT, HistoryQuery, MAX_HISTORY_LIMIT, RowSink, Store, StoreError,
    incident_version, new_run_id, per_hop_json,
};
use crate::event::FlowRef;
use intscope_core::rows::Batch;
use serde::{Deserialize, Serialize};

/// Where the store is and how it is laid out (`[store.clickhouse]` of the collector config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseConfig {
    /// HTTP URLs of the servers: one per shard (reads go to the first).
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
    /// Parses the part after `clickhouse:` of a `--store` value: `URL[,URL...]`. With more than
    /// one URL the cluster is `cluster` or `intscope`.
    pub fn parse(spec: &str, cluster: Option<String>, source: &str) -> Result<Self, StoreError> {
        let urls: Vec<String> = spec
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
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
            .find(|u| !u.starts_with("http://") && !u.starts_with("https://"))
        {
            return Err(StoreError::BadRequest(format!(
                "clickhouse store: {bad:?} is not an http:// URL of a server's HTTP interface"
            )));
        }
        let cluster = match cluster {
            Some(c) => Some(c),
            None if urls.len() > 1 => Some("intscope".into()),
            None => None,
        };
        Ok(ClickHouseConfig {
            urls,
            cluster,
            database: DEFAULT_DATABASE.into(),
            source: source.into(),
        })
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

/// The tables: name, columns, engine clause (with `{t}` the partition's time column).
const TABLES: [(&str, &str, &str, &str); 8] = [
    (
        "flows",
        "source String, run UInt64, live_id UInt64, flow_hash UInt64, src String, dst String, \
         proto UInt8, src_port UInt16, dst_port UInt16, first_seen_ns UInt64, last_seen_ns UInt64, \
         reports UInt64, drops UInt64, last_drop_reason Nullable(UInt8), path String, \
         path_changes UInt64, e2e_p50 Nullable(UInt64), e2e_p99 Nullable(UInt64)",
        "ReplacingMergeTree(last_seen_ns)",
        "last_seen_ns|flow_hash, source, run, live_id",
    ),
    (
        "flow_stats",
        "time_ns UInt64, flow_hash UInt64, src String, dst String, proto UInt8, src_port UInt16, \
         dst_port UInt16, samples UInt64, e2e_avg Nullable(UInt64), e2e_max Nullable(UInt64), \
         hop_latency_max String, queue_occupancy_max String",
        "MergeTree",
        "time_ns|flow_hash, time_ns",
    ),
    (
        "queue_stats",
        "time_ns UInt64, source String, node_id UInt32, port UInt32, queue_id UInt8, \
         samples UInt64, avg_occupancy Float64, max_occupancy UInt64",
        "MergeTree",
        "time_ns|time_ns, node_id, port, queue_id",
    ),
    (
        "port_stats",
        "time_ns UInt64, source String, node_id UInt32, port UInt32, samples UInt64, \
         avg_hop_latency Float64, max_hop_latency UInt64, drops UInt64",
        "MergeTree",
        "time_ns|time_ns, node_id, port",
    ),
    (
        "events",
        "source String, id UInt64, time_ns UInt64, kind String, node_id Nullable(UInt32), \
         port Nullable(UInt32), queue_id Nullable(UInt8), flow_id Nullable(UInt64), \
         src Nullable(String), dst Nullable(String), proto Nullable(UInt8), \
         src_port Nullable(UInt16), dst_port Nullable(UInt16), evidence String",
        "MergeTree",
        "time_ns|time_ns, source, id",
    ),
    (
        "incidents",
        "source String, id UInt64, version UInt64, kind String, node_id Nullable(UInt32), \
         start_ns UInt64, last_update_ns UInt64, end_ns Nullable(UInt64), body String",
        "ReplacingMergeTree(version)",
        "start_ns|source, id",
    ),
    (
        "raw_reports",
        "source String, time_ns UInt64, from_addr String, datagram String",
        "MergeTree",
        "time_ns|time_ns",
    ),
    (
        "totals",
        "source String, run UInt64, name String, value UInt64, version UInt64",
        "ReplacingMergeTree(version)",
        "version|name, source, run",
    ),
];

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

#[derive(Row, Serialize)]
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

#[derive(Row, Serialize)]
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

#[derive(Row, Serialize)]
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

#[derive(Row, Serialize)]
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

#[derive(Row, Serialize)]
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
}

#[derive(Row, Serialize)]
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
}

#[derive(Row, Serialize)]
struct RawIns {
    source: String,
    time_ns: u64,
    from_addr: String,
    #[serde(with = "serde_bytes_as_string")]
    datagram: Vec<u8>,
}

/// RowBinary `String` is length-prefixed bytes: raw datagrams go in as they are.
mod serde_bytes_as_string {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }
}

#[derive(Row, Serialize)]
struct TotalIns {
    source: String,
    run: u64,
    name: String,
    value: u64,
    version: u64,
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
    fn stored(self) -> Result<StoredFlow, StoreError> {
        Ok(StoredFlow {
            path: parse_path(&self.path)?,
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
            path_changes: self.path_changes,
            e2e_latency_p50: self.e2e_p50,
            e2e_latency_p99: self.e2e_p99,
        })
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

/// The ClickHouse store (see the module's documentation).
#[derive(Debug)]
pub struct ClickHouseStore {
    config: ClickHouseConfig,
    /// One client per shard, in the cluster's shard order.
    shards: Vec<Client>,
    /// The runtime the client's futures run on (taken only by `drop`).
    rt: Option<tokio::runtime::Runtime>,
    /// This run's ID (the lives of flows and counters, as in SQLite).
    run: u64,
    /// Batches written by this run: the version of its counter rows.
    writes: std::sync::atomic::AtomicU64,
}

impl Drop for ClickHouseStore {
    /// Without waiting: the store may be dropped by an async task (the API's), where a
    /// runtime's blocking shutdown is not allowed.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn ch_err(e: ::clickhouse::error::Error) -> StoreError {
    StoreError::ClickHouse(e.to_string())
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

impl ClickHouseStore {
    /// Connects, creates the database, tables and rollups where missing (on every shard, and
    /// the Distributed tables over them in a cluster).
    pub fn open(config: ClickHouseConfig) -> Result<Self, StoreError> {
        if config.urls.len() > 1 && config.cluster.is_none() {
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
        let shards = config
            .urls
            .iter()
            .map(|u| {
                Client::default()
                    .with_url(u)
                    .with_validation(false)
                    .with_compression(::clickhouse::Compression::Lz4)
                    .with_database(&config.database)
            })
            .collect();
        let s = ClickHouseStore {
            config,
            shards,
            rt: Some(rt),
            run: new_run_id() as u64,
            writes: std::sync::atomic::AtomicU64::new(1),
        };
        s.create()?;
        Ok(s)
    }

    /// The configuration.
    pub fn config(&self) -> &ClickHouseConfig {
        &self.config
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

    /// Runs `f` within the query deadline.
    fn read<F, T>(&self, timeout: Option<Duration>, f: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, ::clickhouse::error::Error>> + Send,
        T: Send,
    {
        let t = timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
        self.run(async move {
            match tokio::time::timeout(t, f).await {
                Ok(r) => r.map_err(ch_err),
                Err(_) => Err(StoreError::Timeout),
            }
        })
    }

    fn cluster(&self) -> Option<&str> {
        self.config.cluster.as_deref()
    }

    /// The table rows are written to: the local one in a cluster.
    fn local(&self, t: &str) -> String {
        match self.cluster() {
            Some(_) => format!("{t}_local"),
            None => t.to_string(),
        }
    }

    /// The client reads go through (the first shard: its Distributed tables see every shard).
    fn reader(&self) -> &Client {
        &self.shards[0]
    }

    /// Query settings of reads: the server stops a query past its deadline too.
    fn read_query(&self, sql: &str, timeout: Option<Duration>) -> ::clickhouse::query::Query {
        let secs = timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT).as_secs().max(1);
        self.reader()
            .query(sql)
            .with_setting("max_execution_time", secs.to_string())
    }

    fn create(&self) -> Result<(), StoreError> {
        let db = &self.config.database;
        for (i, url) in self.config.urls.iter().enumerate() {
            let admin = Client::default().with_url(url).with_validation(false);
            let client = self.shards[i].clone();
            let mut ddl = vec![format!("CREATE DATABASE IF NOT EXISTS {db}")];
            for (name, cols, engine, keys) in TABLES {
                let (time, order) = keys.split_once('|').unwrap_or(("time_ns", keys));
                let part = DAY.replace("{t}", time);
                let local = self.local(name);
                // Flow summaries and incidents are read a page of keys at a time: a finer
                // index reads fewer rows around each key than the default 8192.
                let granularity = match name {
                    "flows" | "incidents" => 1024,
                    _ => 8192,
                };
                ddl.push(format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{local} ({cols}) ENGINE = {engine} \
                     PARTITION BY {part} ORDER BY ({order}) \
                     SETTINGS index_granularity = {granularity}"
                ));
                if let Some(c) = self.cluster() {
                    let key = match name {
                        "flows" | "flow_stats" => "flow_hash",
                        "queue_stats" | "port_stats" => "node_id",
                        "incidents" | "events" => "id",
                        _ => "rand()",
                    };
                    ddl.push(format!(
                        "CREATE TABLE IF NOT EXISTS {db}.{name} AS {db}.{local} \
                         ENGINE = Distributed({c}, {db}, {local}, {key})"
                    ));
                }
            }
            for (name, src, keys, aggs) in ROLLUPS {
                let local = self.local(name);
                let src = self.local(src);
                ddl.push(format!(
                    "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{local} \
                     ENGINE = AggregatingMergeTree PARTITION BY toYYYYMMDD(minute) \
                     ORDER BY ({keys}, minute) AS SELECT \
                     toStartOfMinute(toDateTime(intDiv(time_ns, 1000000000), 'UTC')) AS minute, \
                     {keys}, {aggs} FROM {db}.{src} GROUP BY minute, {keys}"
                ));
            }
            self.run(async {
                admin.query(&ddl[0]).execute().await?;
                for q in &ddl[1..] {
                    client.query(q).execute().await?;
                }
                Ok::<_, ::clickhouse::error::Error>(())
            })
            .map_err(ch_err)?;
        }
        Ok(())
    }

    /// The shard a row with this sharding key goes to (as the Distributed table's key would).
    fn shard(&self, key: u64) -> usize {
        (key % self.shards.len() as u64) as usize
    }

    async fn insert_rows<T>(
        client: &Client,
        table: &str,
        rows: &[T],
    ) -> ::clickhouse::error::Result<()>
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

    /// The batch's rows, split by shard.
    fn write_batch(&self, b: &Batch) -> Result<(), StoreError> {
        let n = self.shards.len();
        let src = &self.config.source;
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
                avg_occupancy: a.avg,
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
                avg_hop_latency: a.avg,
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
        let (t_flows, t_series, t_queues, t_ports, t_events, t_inc, t_raw, t_totals) = (
            self.local("flows"),
            self.local("flow_stats"),
            self.local("queue_stats"),
            self.local("port_stats"),
            self.local("events"),
            self.local("incidents"),
            self.local("raw_reports"),
            self.local("totals"),
        );
        let home = self.shard(flow_hash(&FlowRef {
            src: src.clone(),
            dst: String::new(),
            proto: 0,
            src_port: 0,
            dst_port: 0,
        }));
        // Every table's insert on every shard at once: a flush takes as long as its slowest
        // insert, not their sum (the writer's latency is what ingest's back-pressure waits on).
        type Insert<'a> =
            std::pin::Pin<Box<dyn Future<Output = ::clickhouse::error::Result<()>> + Send + 'a>>;
        let mut inserts: Vec<Insert<'_>> = Vec::new();
        for (i, c) in self.shards.iter().enumerate() {
            inserts.push(Box::pin(Self::insert_rows(c, &t_flows, &flows[i])));
            inserts.push(Box::pin(Self::insert_rows(c, &t_series, &series[i])));
            inserts.push(Box::pin(Self::insert_rows(c, &t_queues, &queues[i])));
            inserts.push(Box::pin(Self::insert_rows(c, &t_ports, &ports[i])));
            inserts.push(Box::pin(Self::insert_rows(c, &t_events, &events[i])));
            inserts.push(Box::pin(Self::insert_rows(c, &t_inc, &incidents[i])));
        }
        let c = &self.shards[home];
        inserts.push(Box::pin(Self::insert_rows(c, &t_raw, &raw)));
        inserts.push(Box::pin(Self::insert_rows(c, &t_totals, &totals)));
        self.run(futures_util::future::try_join_all(inserts))
            .map(drop)
            .map_err(ch_err)
    }

    /// Rows per table, each shard's local tables summed.
    fn count_tables(&self) -> Result<RowCounts, StoreError> {
        let db = &self.config.database;
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
            let q = self.read_query(&sql, None);
            let n = self.read(None, q.fetch_one::<One>())?;
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
    fn prune(&self, before_ns: u64, keep_raw: u64) -> Result<(), StoreError> {
        // Whole days only (18.16 has no TTL and deletes are heavy mutations): a partition goes
        // once its day has ended before `before_ns`.
        let db = self.config.database.clone();
        let day = (before_ns / 1_000_000_000 / 86_400) as i64;
        let before_day = civil_yyyymmdd(day);
        let tables: Vec<String> = TABLES
            .iter()
            .map(|t| t.0)
            .map(|t| self.local(t))
            // A rollup's rows are in its view's inner table.
            .chain(
                ROLLUPS
                    .iter()
                    .map(|r| format!(".inner.{}", self.local(r.0))),
            )
            .collect();
        for c in &self.shards {
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
                if d < before_day {
                    let sql = format!("ALTER TABLE {db}.`{table}` DROP PARTITION {part}");
                    self.run(c.query(&sql).execute()).map_err(ch_err)?;
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
        let db = &self.config.database;
        let q = self.read_query(
            &format!(
                "SELECT toUInt64(max(id)) AS value FROM {db}.events WHERE source = {}",
                lit(&self.config.source)
            ),
            None,
        );
        let m = self.read(None, q.fetch_one::<One>())?;
        Ok(m.value + 1)
    }

    fn next_incident_id(&self) -> Result<u64, StoreError> {
        let db = &self.config.database;
        let q = self.read_query(
            &format!(
                "SELECT toUInt64(max(id)) AS value FROM {db}.incidents WHERE source = {}",
                lit(&self.config.source)
            ),
            None,
        );
        let m = self.read(None, q.fetch_one::<One>())?;
        Ok(m.value + 1)
    }

    fn events(&self, q: &HistoryQuery) -> Result<Page<StoredEvent>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, tie) = q.cursor('e')?.unwrap_or((i64::MAX, i64::MAX));
        let db = &self.config.database;
        let mut filter = format!(
            "time_ns >= {} AND time_ns <= {}",
            q.since.unwrap_or(0),
            q.until.unwrap_or(u64::MAX)
        );
        if let Some(k) = q.event_kind()? {
            filter += &format!(" AND kind = {}", lit(k));
        }
        if let Some(n) = q.node {
            filter += &format!(" AND node_id = {n}");
        }
        let sql = format!(
            "SELECT id, time_ns, kind, node_id, port, queue_id, flow_id, src, dst, proto, src_port, dst_port, evidence, {EVENT_TIE} AS tie
             FROM {db}.events WHERE {filter} AND (time_ns < {t} OR (time_ns = {t} AND {EVENT_TIE} < {tie}))
             ORDER BY time_ns DESC, tie DESC LIMIT {}",
            limit + 1
        );
        let rows = self.read(
            q.timeout,
            self.read_query(&sql, q.timeout).fetch_all::<EventOut>(),
        )?;
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
                    },
                    format!("e.{}.{}", e.time_ns, e.tie),
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Page::of(rows, limit))
    }

    fn flows(&self, q: &HistoryQuery) -> Result<Page<StoredFlow>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, h) = q.cursor('f')?.unwrap_or((i64::MAX, i64::MAX));
        // First the page's flows by their hash alone (one cheap aggregation of three numeric
        // columns), then the full summaries of those only (a primary-key lookup). The
        // subquery reads the local table: on a cluster it runs on each shard, which holds
        // every row of its flows.
        let (db, local) = (&self.config.database, self.local("flows"));
        let (since, until) = (q.since.unwrap_or(0), q.until.unwrap_or(u64::MAX));
        // The newest flows have rows in the newest seconds: the page is looked for in a window
        // back from the newest row (a scan of one column, cheap), from 50 ms widened 16-fold until it
        // holds a page or reaches `since`, rather than aggregating every flow ever stored.
        // With `until` the whole range is aggregated (a flow's first sighting may be in rows
        // before the window).
        let newest = if q.until.is_some() {
            None
        } else {
            let sql = format!(
                "SELECT toUInt64(max(last_seen_ns)) AS value FROM {db}.flows WHERE last_seen_ns <= {}",
                t.max(0)
            );
            Some(
                self.read(
                    q.timeout,
                    self.read_query(&sql, q.timeout).fetch_one::<One>(),
                )?
                .value,
            )
        };
        let mut window: u64 = 50_000_000;
        let mut rows = loop {
            let lower = match newest {
                Some(n) => n.saturating_sub(window).max(since),
                None => since,
            };
            let page_of = format!(
                "flow_hash IN (SELECT flow_hash FROM {db}.{local} WHERE last_seen_ns >= {lower}
                   GROUP BY flow_hash
                   HAVING min(first_seen_ns) <= {until}
                     AND (max(last_seen_ns) < {t} OR (max(last_seen_ns) = {t} AND flow_hash < {h}))
                   ORDER BY max(last_seen_ns) DESC, flow_hash DESC LIMIT {})",
                limit + 1
            );
            let sql = self.flow_sql(
                &page_of,
                &format!(
                    "last_seen_ns >= {since} AND first_seen_ns <= {until} AND (last_seen_ns < {t} OR (last_seen_ns = {t} AND flow_hash < {h}))"
                ),
                limit + 1,
            );
            let rows = self.read(
                q.timeout,
                self.read_query(&sql, q.timeout).fetch_all::<FlowOut>(),
            )?;
            if rows.len() > limit as usize || lower == since {
                break rows;
            }
            window = window.saturating_mul(16);
        };
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

    fn flow(&self, flow: &FlowRef, q: &HistoryQuery) -> Result<Option<StoredFlow>, StoreError> {
        let sql = self.flow_sql(
            &format!("flow_hash = {} AND {}", flow_hash(flow), key_filter(flow)),
            "1",
            1,
        );
        let rows = self.read(
            q.timeout,
            self.read_query(&sql, q.timeout).fetch_all::<FlowOut>(),
        )?;
        rows.into_iter().next().map(FlowOut::stored).transpose()
    }

    fn queue_series(&self, q: &HistoryQuery) -> Result<Page<QueueInterval>, StoreError> {
        let limit = q.page_size(MAX_HISTORY_LIMIT)?;
        let (t, tie) = q.cursor('q')?.unwrap_or((i64::MIN, i64::MIN));
        let db = &self.config.database;
        let tie_expr = "bitShiftRight(cityHash64(source, node_id, port, queue_id), 1)";
        let node = q
            .node
            .map(|n| format!(" AND node_id = {n}"))
            .unwrap_or_default();
        let sql = format!(
            "SELECT time_ns, node_id, port, queue_id, samples, avg_occupancy, max_occupancy, {tie_expr} AS tie
             FROM {db}.queue_stats WHERE time_ns >= {} AND time_ns <= {}{node}
               AND (time_ns > {t} OR (time_ns = {t} AND {tie_expr} > {tie}))
             ORDER BY time_ns, tie LIMIT {}",
            q.since.unwrap_or(0),
            q.until.unwrap_or(u64::MAX),
            limit + 1
        );
        let rows = self.read(
            q.timeout,
            self.read_query(&sql, q.timeout).fetch_all::<QueueOut>(),
        )?;
        let rows = rows
            .into_iter()
            .map(|r| {
                (
                    QueueInterval {
                        time_ns: r.time_ns,
                        node_id: r.node_id,
                        port: r.port,
                        queue_id: r.queue_id,
                        samples: r.samples,
                        avg_occupancy: r.avg_occupancy,
                        max_occupancy: r.max_occupancy,
                    },
                    format!("q.{}.{}", r.time_ns, r.tie),
                )
            })
            .collect();
        Ok(Page::of(rows, limit))
    }

    fn flow_series(
        &self,
        flow: &FlowRef,
        q: &HistoryQuery,
    ) -> Result<Vec<FlowInterval>, StoreError> {
        let limit = q.page_size(600)?;
        let db = &self.config.database;
        let sql = format!(
            "SELECT time_ns, samples, e2e_avg, e2e_max, hop_latency_max, queue_occupancy_max
             FROM {db}.flow_stats WHERE flow_hash = {} AND {} AND time_ns >= {} AND time_ns <= {}
             ORDER BY time_ns DESC LIMIT {limit}",
            flow_hash(flow),
            key_filter(flow),
            q.since.unwrap_or(0),
            q.until.unwrap_or(u64::MAX),
        );
        let rows = self.read(
            q.timeout,
            self.read_query(&sql, q.timeout).fetch_all::<SeriesOut>(),
        )?;
        rows.iter()
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
            .collect()
    }

    fn incidents(&self, q: &HistoryQuery) -> Result<Page<StoredIncident>, StoreError> {
        let limit = q.page_size(500)?;
        let (t, tie) = q.cursor('i')?.unwrap_or((i64::MAX, i64::MAX));
        let db = &self.config.database;
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
        let sql = format!(
            "SELECT s AS start_ns, tie, body FROM (
               SELECT any(start_ns) AS s, {EVENT_TIE} AS tie, argMax(body, version) AS body
               FROM {db}.incidents
               WHERE (source, id) IN (
                 SELECT source, id FROM {db}.{local} WHERE {filter} GROUP BY source, id
                 HAVING argMax(ifNull(end_ns, last_update_ns), version) >= {since}
                   AND (any(start_ns) < {t} OR (any(start_ns) = {t} AND {EVENT_TIE} < {tie}))
                 ORDER BY any(start_ns) DESC, {EVENT_TIE} DESC LIMIT {n})
               GROUP BY source, id)
             ORDER BY s DESC, tie DESC LIMIT {n}"
        );
        let rows = self.read(
            q.timeout,
            self.read_query(&sql, q.timeout).fetch_all::<IncidentOut>(),
        )?;
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
        let db = lit(&self.config.database);
        let mut m = RowCounts::new();
        for c in &self.shards {
            let sql = format!(
                "SELECT table AS name, sum(rows) AS value FROM system.parts \
                 WHERE active AND database = {db} GROUP BY table"
            );
            let rows = self.read(None, c.query(&sql).fetch_all::<NameCount>())?;
            for r in rows {
                let name = r.name.strip_suffix("_local").unwrap_or(&r.name).to_string();
                *m.entry(name).or_default() += r.value;
            }
        }
        Ok(m)
    }

    fn totals(&self) -> Result<Totals, StoreError> {
        let db = &self.config.database;
        let sql = format!(
            "SELECT name, sum(v) AS value FROM (
               SELECT name, argMax(value, version) AS v FROM {db}.totals GROUP BY name, source, run)
             GROUP BY name ORDER BY name"
        );
        let rows = self.read(None, self.read_query(&sql, None).fetch_all::<NameCount>())?;
        Ok(rows.into_iter().map(|r| (r.name, r.value)).collect())
    }
}

impl ClickHouseStore {
    /// The flow summaries query: each flow's lives (a collector's run and the flow's ID in it),
    /// each life's newest version (by last sighting, then by reports: a life's counts only
    /// grow, and two versions may share a sighting time), summed per flow. `pre` filters rows before the grouping,
    /// `post` flows after it. In a cluster a flow's rows are all on one shard, so each shard
    /// aggregates and sorts its own and the caller merges (no merge of partial aggregates).
    fn flow_sql(&self, pre: &str, post: &str, limit: u32) -> String {
        let db = &self.config.database;
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
               FROM {db}.flows WHERE {pre}
               GROUP BY flow_hash, src, dst, proto, src_port, dst_port, source, run, live_id)
             GROUP BY flow_hash, src, dst, proto, src_port, dst_port
             HAVING {post}
             ORDER BY last_seen_ns DESC, flow_hash DESC LIMIT {limit}{no_merge}"
        )
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
