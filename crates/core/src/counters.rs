//! Every counter and gauge the collector shows, declared once: name, help, kind, unit, label
//! names, and where each sample sits in `/api/stats`. Both renderings, the JSON of `/api/stats`
//! and the Prometheus/OpenMetrics text of `/metrics`, are made from one [`Samples`] list of these
//! declarations, so a counter cannot be in one and not the other and its two names cannot drift
//! apart.
//!
//! A declaration's [`Json`] says where its samples go in JSON: [`Json::Stats`] places them in
//! `/api/stats` (the collector's own counters, a bounded set of series); [`Json::Inventory`]
//! marks per-entity series of the network (per source, queue, port, node), which `/metrics`
//! renders within its `max_series` budget and whose JSON is the endpoint named (their count grows
//! with the network, so `/api/stats` does not repeat them).
//!
//! Names follow `intscope_<name>[_<unit>][_total]`: the prefix, the unit and the counter suffix
//! are added by the renderer.

use std::collections::BTreeMap;

use serde_json::{Map, Value as JsonValue};

use crate::event::EventKind;
use crate::fabric::RecordCounters;
use crate::incident::IncidentKind;
use crate::incidents::IncidentLog;
use crate::snapshot::Snapshot;

/// Prefix of every metric name in `/metrics`.
pub const PREFIX: &str = "intscope";

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (from 0 at the collector's start); rendered with `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Where a metric's samples are in JSON.
#[derive(Debug, Clone, Copy)]
pub enum Json {
    /// In `/api/stats`: `(label value, path)` pairs. A sample goes to the path of every pair
    /// whose value equals its first label's value, or, when none does, to those of the `"*"`
    /// pairs. A path is dot-separated keys, in which `{label}` stands for that label's value.
    Stats(&'static [(&'static str, &'static str)]),
    /// Per-entity series of the network (bounded in `/metrics` by `max_series`), served as JSON
    /// by this endpoint rather than `/api/stats`.
    Inventory(&'static str),
}

/// One metric: everything both renderings need.
#[derive(Debug)]
pub struct Metric {
    /// Name, without the prefix, the unit and `_total`.
    pub name: &'static str,
    /// One sentence for `# HELP`.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Unit (`nanoseconds`, `milliseconds`, ...), appended to the name; `None`: a count.
    pub unit: Option<&'static str>,
    /// Label names, in the order samples give their values.
    pub labels: &'static [&'static str],
    /// Where the samples are in JSON.
    pub json: Json,
}

impl Metric {
    /// The family name in `/metrics` (prefix and unit, no `_total`).
    pub fn family(&self) -> String {
        match self.unit {
            Some(u) => format!("{PREFIX}_{}_{u}", self.name),
            None => format!("{PREFIX}_{}", self.name),
        }
    }

    /// The name of its sample lines (`_total` for counters).
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.family()),
            Kind::Gauge => self.family(),
        }
    }

    /// The JSON paths (keys) of a sample with these label values; empty for inventory series.
    pub fn json_paths(&self, labels: &[String]) -> Vec<Vec<String>> {
        let Json::Stats(places) = self.json else {
            return Vec::new();
        };
        let first = labels.first().map(String::as_str);
        let exact: Vec<&str> = places
            .iter()
            .filter(|(v, _)| Some(*v) == first)
            .map(|(_, p)| *p)
            .collect();
        let chosen = if exact.is_empty() {
            places
                .iter()
                .filter(|(v, _)| *v == "*")
                .map(|(_, p)| *p)
                .collect()
        } else {
            exact
        };
        chosen
            .into_iter()
            .map(|p| {
                p.split('.')
                    .map(|key| {
                        let mut key = key.to_string();
                        for (name, value) in self.labels.iter().zip(labels) {
                            key = key.replace(&format!("{{{name}}}"), value);
                        }
                        key
                    })
                    .collect()
            })
            .collect()
    }
}

macro_rules! metric {
    ($id:ident, $name:literal, $kind:ident, $unit:expr, [$($label:literal),*], $json:expr, $help:literal) => {
        #[doc = $help]
        pub static $id: Metric = Metric {
            name: $name,
            help: $help,
            kind: Kind::$kind,
            unit: $unit,
            labels: &[$($label),*],
            json: $json,
        };
    };
}

use Json::{Inventory, Stats};

// The collector's counters, in the order `/metrics` renders them.
metric!(
    INCIDENTS,
    "incidents",
    Gauge,
    None,
    ["kind", "state"],
    Stats(&[("*", "incidents.{state}.{kind}")]),
    "Incidents held, by kind and state (ongoing; resolved: the newest 1024 of each kind)"
);
metric!(
    INCIDENTS_STARTED,
    "incidents_started",
    Counter,
    None,
    ["kind"],
    Stats(&[("*", "incidents.started.{kind}")]),
    "Incidents started, by their root cause's kind when they started"
);
metric!(
    INCIDENTS_EVICTED,
    "incidents_evicted",
    Counter,
    None,
    ["kind"],
    Stats(&[("*", "incidents.evicted.{kind}")]),
    "Incidents and their symptoms evicted by the per-kind quotas (ongoing resolved early, resolved dropped)"
);
metric!(
    INCIDENT_EPISODES_MERGED,
    "incident_episodes_merged",
    Counter,
    None,
    [],
    Stats(&[("*", "incidents.episodes_merged")]),
    "Episodes merged into an incident that was ongoing or ended within incident_merge_ns"
);
metric!(
    PATH_CHANGES_IGNORED,
    "path_changes_ignored",
    Counter,
    None,
    [],
    Stats(&[("*", "incidents.path_changes_ignored")]),
    "Path changes that were no change of forwarding (a path that only lost or gained hops)"
);
metric!(
    LOSS_HISTORY_UNTRACKED,
    "loss_history_untracked",
    Counter,
    None,
    [],
    Stats(&[("*", "incidents.loss_history_untracked")]),
    "Reports of nodes beyond the report-loss history's bound (a silence of such a node is weighed as lossless)"
);
metric!(
    EVENTS_UNLINKED,
    "events_unlinked",
    Counter,
    None,
    [],
    Stats(&[("*", "incidents.events_unlinked")]),
    "Events left without their incident: their symptom did not reach the lifecycle engine within 2 s, or more than 4096 waited"
);
metric!(
    EVENTS_EVICTED,
    "events_evicted",
    Counter,
    None,
    ["kind"],
    Stats(&[("*", "events_evicted.{kind}")]),
    "Events that left the full event log, by kind (taken from kinds above their share first)"
);
metric!(
    INGEST_DATAGRAMS_RECEIVED,
    "ingest_datagrams_received",
    Counter,
    None,
    [],
    Stats(&[("*", "ingest.datagrams_received")]),
    "Report datagrams received (each then accepted or discarded; with --discard, neither)"
);
metric!(
    INGEST_DATAGRAMS,
    "ingest_datagrams",
    Counter,
    None,
    ["outcome"],
    Stats(&[
        ("accepted", "ingest.datagrams_accepted"),
        ("kernel_dropped", "ingest.kernel_dropped"),
        ("*", "ingest.discarded.{outcome}"),
    ]),
    "Report datagrams by outcome: accepted or discarded (by reason) once received, or kernel_dropped before (the socket's buffer was full)"
);
metric!(
    INGEST_DATAGRAMS_MALFORMED,
    "ingest_datagrams_malformed",
    Counter,
    None,
    [],
    Stats(&[("*", "ingest.discarded.malformed")]),
    "Datagrams discarded as malformed, any kind (the sum of the malformed outcomes)"
);
metric!(
    INGEST_REPORTS_DECODED,
    "ingest_reports_decoded",
    Counter,
    None,
    [],
    Stats(&[("*", "ingest.reports_decoded")]),
    "Individual reports decoded"
);
metric!(
    INGEST_REPORTS_CLOCK_SKEWED,
    "ingest_reports_clock_skewed",
    Counter,
    None,
    [],
    Stats(&[("*", "ingest.reports_clock_skewed")]),
    "Reports with a switch timestamp beyond clock_skew_max_ns of receive time, timed by receive time"
);
metric!(
    INGEST_SOCKET_ERRORS,
    "ingest_socket_errors",
    Counter,
    None,
    [],
    Stats(&[("*", "ingest.socket_errors")]),
    "Socket receive errors"
);
metric!(
    REPORT_PORT_FOREIGN_SOCKETS,
    "report_port_foreign_sockets",
    Gauge,
    None,
    [],
    Stats(&[("*", "ingest.foreign_sockets")]),
    "Sockets of other processes bound to a report port at the last check (they may take reports)"
);
metric!(
    REPORT_PORT_FOREIGN_SEEN,
    "report_port_foreign_sockets_seen",
    Counter,
    None,
    [],
    Stats(&[("*", "ingest.foreign_sockets_seen")]),
    "Sockets of other processes found bound to a report port since start, each once"
);
metric!(
    HTTP_CONNECTIONS,
    "http_connections",
    Counter,
    None,
    ["event"],
    Stats(&[
        ("error", "api.connection_errors"),
        ("tls_failed", "api.tls_failed"),
        ("accept_error", "api.accept_errors"),
        ("*", "api.connections_{event}"),
    ]),
    "HTTP connections, by what happened"
);
metric!(
    HTTP_CONNECTIONS_OPEN,
    "http_connections_open",
    Gauge,
    None,
    [],
    Stats(&[("*", "api.connections_open")]),
    "HTTP connections open"
);
metric!(
    HTTP_ANSWERS_REFUSED_MEMORY,
    "http_answers_refused_memory",
    Counter,
    None,
    [],
    Stats(&[("*", "api.answers_refused_memory")]),
    "Large API answers replaced by a 503 because the answer memory bounds were reached"
);
metric!(
    HTTP_ANSWER_BYTES,
    "http_answer",
    Gauge,
    Some("bytes"),
    [],
    Stats(&[("*", "api.answer_bytes")]),
    "Bytes of large API answers held in memory while they are sent"
);
metric!(
    API_REQUESTS_FAILED,
    "api_requests_failed",
    Counter,
    None,
    ["reason"],
    Stats(&[
        ("unauthorized", "api.unauthorized"),
        ("bad_request", "api.bad_requests"),
        ("query_timeout", "api.query_timeouts"),
        ("queries_busy", "api.queries_refused"),
        ("streams_busy", "api.streams_refused"),
        ("stream_lagged", "api.streams_dropped_lagged"),
        ("store_unavailable", "api.store_unavailable"),
    ]),
    "API requests refused or cut short, by reason"
);
metric!(
    STORE_BATCHES,
    "store_batches",
    Counter,
    None,
    [],
    Stats(&[("*", "store.batches")]),
    "Store batches committed"
);
metric!(
    STORE_FAILED,
    "store_failed",
    Counter,
    None,
    [],
    Stats(&[("*", "store.failed")]),
    "Store batches that failed to commit and could not be spooled either (logged)"
);
metric!(
    STORE_BACKLOG_DROPPED,
    "store_backlog_dropped",
    Counter,
    None,
    [],
    Stats(&[("*", "store.backlog_dropped")]),
    "Store batches dropped because the writer fell behind (the flush is put off instead: stays 0)"
);
metric!(
    STORE_FLUSHES_DEFERRED,
    "store_flushes_deferred",
    Counter,
    None,
    [],
    Stats(&[("*", "store.flushes_deferred")]),
    "Flushes put off because the writer was still committing the previous batch"
);
metric!(
    STORE_FLUSHES_STRETCHED,
    "store_flushes_stretched",
    Counter,
    None,
    [],
    Stats(&[("*", "store.flushes_stretched")]),
    "Flushes put off because the receive threads were short of CPU (the next covers a longer interval)"
);
metric!(
    STORE_INGEST_PAUSES,
    "store_ingest_pauses",
    Counter,
    None,
    [],
    Stats(&[("*", "store.ingest_pauses")]),
    "Times ingest waited for the store writer (back-pressure)"
);
metric!(
    STORE_INGEST_PAUSED,
    "store_ingest_paused",
    Counter,
    Some("milliseconds"),
    [],
    Stats(&[("*", "store.ingest_paused_ms")]),
    "Time receive threads spent waiting for the store writer, summed over threads"
);
metric!(
    STORE_LAG,
    "store_lag",
    Gauge,
    Some("milliseconds"),
    [],
    Stats(&[("*", "store.lag_ms")]),
    "Input not yet in the store: time since the newest committed flush was taken (what a kill -9 would lose)"
);
metric!(
    STORE_EVENTS_MISSED,
    "store_events_missed",
    Counter,
    None,
    [],
    Stats(&[("*", "store.events_missed")]),
    "Events that left the in-memory log before a flush could store them"
);
metric!(
    STORE_RAW_NOT_KEPT,
    "store_raw_not_kept",
    Counter,
    None,
    [],
    Stats(&[("*", "store.raw_not_kept")]),
    "Raw datagrams not kept because the per-flush sample was full"
);
metric!(
    STORE_SPOOL_ROWS,
    "store_spool_rows",
    Gauge,
    None,
    [],
    Stats(&[("*", "store.spool.rows")]),
    "Rows waiting in the store's on-disk spool for a shard to take them (ClickHouse)"
);
metric!(
    STORE_SPOOL_BYTES,
    "store_spool",
    Gauge,
    Some("bytes"),
    [],
    Stats(&[("*", "store.spool.bytes")]),
    "Bytes the store's spool holds on disk (bounded by spool_max_mib)"
);
metric!(
    STORE_SPOOL_AGE,
    "store_spool_oldest_age",
    Gauge,
    Some("milliseconds"),
    [],
    Stats(&[("*", "store.spool.oldest_age_ms")]),
    "Age of the oldest spooled write (0 when the spool is empty)"
);
metric!(
    STORE_SPOOLED,
    "store_spooled_rows",
    Counter,
    None,
    [],
    Stats(&[("*", "store.spool.spooled_rows")]),
    "Rows a shard did not take at once, spooled to disk to be retried"
);
metric!(
    STORE_SPOOL_REPLAYED,
    "store_spool_replayed_rows",
    Counter,
    None,
    [],
    Stats(&[("*", "store.spool.replayed_rows")]),
    "Spooled rows written to the store once their shard answered again"
);
metric!(
    STORE_SPOOL_DROPPED,
    "store_spool_dropped_rows",
    Counter,
    None,
    ["reason"],
    Stats(&[
        ("full", "store.spool.dropped_full_rows"),
        ("io", "store.spool.dropped_io_rows"),
    ]),
    "Spooled rows lost: evicted to keep the spool within its bound, or unwritable/unreadable"
);
metric!(
    FABRIC_ROWS,
    "fabric_rows",
    Gauge,
    None,
    ["table"],
    Inventory("intscope serve's /api/stats (rows)"),
    "Rows per table of the shared store, every collector's (intscope serve's /metrics)"
);
metric!(
    FABRIC_COUNTER,
    "fabric_counter",
    Counter,
    None,
    ["name"],
    Inventory("intscope serve's /api/stats (totals)"),
    "Every collector's counters summed over their runs, by name (intscope serve's /metrics)"
);
metric!(
    FABRIC_QUERIES_FAILED,
    "fabric_queries_failed",
    Counter,
    None,
    ["reason"],
    Inventory("intscope serve's /metrics"),
    "Fabric API queries refused or failed, by reason: bad_request, busy, timeout, unavailable (a shard down), failed (intscope serve's /metrics)"
);
metric!(
    REPORTS,
    "reports",
    Counter,
    None,
    ["version"],
    Stats(&[
        ("2.0", "reports.v2"),
        ("1.0", "reports.v1"),
        ("0.5", "reports.v05")
    ]),
    "Individual reports decoded, by report version"
);
metric!(
    REPORTS_WITHOUT_FLOW,
    "reports_without_flow",
    Counter,
    None,
    [],
    Stats(&[("*", "reports.without_flow")]),
    "Reports without a flow key (their inner packet could not be decoded)"
);
metric!(
    REPORTS_LOST_ALL,
    "reports_lost_all_sources",
    Counter,
    None,
    [],
    Stats(&[("*", "reports_lost")]),
    "Reports missing from sequence gaps, all sources (as reports_lost, never truncated)"
);
metric!(
    REPORT_GROUPS_LOST_ALL,
    "report_groups_lost_all_sources",
    Counter,
    None,
    [],
    Stats(&[("*", "report_groups_lost")]),
    "Report groups missing from sequence gaps, all sources (as report_groups_lost, never truncated)"
);
metric!(
    REPORT_SEQUENCE_RESETS,
    "report_sequence_resets",
    Counter,
    None,
    [],
    Stats(&[("*", "sequence_resets")]),
    "Sequence resets: far jumps later numbers continued (restarted sources)"
);
metric!(
    REPORT_SEQUENCE_IMPLAUSIBLE,
    "report_sequence_implausible",
    Counter,
    None,
    [],
    Stats(&[("*", "sequence_implausible")]),
    "Sequence numbers later numbers contradicted (corrupt or spoofed), never counted as loss"
);
metric!(
    REPORT_SEQUENCE_WIDTH_CONFLICTS,
    "report_sequence_width_conflicts",
    Counter,
    None,
    [],
    Stats(&[("*", "sequence_width_conflicts")]),
    "Reports whose sequence width (22 bits v2.0, 32 bits v1.0/v0.5) was not their source's"
);
metric!(
    STATE_EVICTED,
    "state_evicted",
    Counter,
    None,
    ["kind"],
    Stats(&[("*", "evicted.{kind}s")]),
    "Least recently seen entries evicted at the state's limits, by kind"
);
metric!(
    STATE_ENTRIES,
    "state_entries",
    Gauge,
    None,
    ["kind"],
    Stats(&[
        ("*", "held.{kind}"),
        ("node", "held.node"),
        ("node", "nodes"),
        ("queue", "held.queue"),
        ("queue", "queues"),
        ("source", "held.source"),
        ("source", "sources_total"),
    ]),
    "Entries in live state, by kind"
);
metric!(
    EVENTS,
    "events",
    Counter,
    None,
    ["kind"],
    Stats(&[("*", "events.{kind}")]),
    "Events detected, by kind"
);
metric!(
    EVENTS_SUPPRESSED,
    "events_suppressed",
    Counter,
    None,
    [],
    Stats(&[("*", "events_suppressed")]),
    "Events suppressed by the per-place rate limit"
);
metric!(
    FLOWS_ACTIVE,
    "flows_active",
    Gauge,
    None,
    [],
    Stats(&[("*", "flows")]),
    "Flows in memory"
);
metric!(
    FLOWS_EXPIRED,
    "flows_expired",
    Counter,
    None,
    [],
    Stats(&[("*", "flows_expired")]),
    "Flows that left memory idle"
);
metric!(
    REPORTS_UNCHANGED,
    "reports_unchanged",
    Counter,
    None,
    [],
    Stats(&[("*", "reports_unchanged")]),
    "Reports that said nothing new to the detectors ([detect.fast_path]): their flows and counters updated, their hops' detectors skipped"
);
metric!(
    SNAPSHOT_AGE,
    "snapshot_age",
    Gauge,
    Some("milliseconds"),
    [],
    Stats(&[("*", "snapshot_age_ms")]),
    "Age of the published snapshot of the live state these figures come from"
);
metric!(
    SNAPSHOT_COST,
    "snapshot_cost",
    Gauge,
    Some("milliseconds"),
    [],
    Stats(&[("*", "snapshot_cost_ms")]),
    "What taking the previous snapshot of the live state cost"
);
// The collector's webhook sink, one series per receiver (its position in `urls`).
metric!(
    WEBHOOK_SENT,
    "webhook_notifications_sent",
    Counter,
    None,
    ["receiver"],
    Inventory("/metrics"),
    "Webhook notifications a receiver answered with 2xx, by receiver (its position in urls)"
);
metric!(
    WEBHOOK_ATTEMPTS_FAILED,
    "webhook_attempts_failed",
    Counter,
    None,
    ["receiver", "reason"],
    Inventory("/metrics"),
    "Webhook POSTs that failed (timeout, connect, status), by receiver and reason"
);
metric!(
    WEBHOOK_DROPPED,
    "webhook_notifications_dropped",
    Counter,
    None,
    ["receiver", "reason"],
    Inventory("/metrics"),
    "Webhook notifications never delivered (queue_full, retries_exhausted, stopped), by receiver"
);
metric!(
    WEBHOOK_QUEUE_DEPTH,
    "webhook_queue_depth",
    Gauge,
    None,
    ["receiver"],
    Inventory("/metrics"),
    "Webhook notifications waiting in a receiver's queue"
);
// Per-entity series of the network, within `max_series` (in this order).
metric!(
    REPORTS_LOST,
    "reports_lost",
    Counter,
    None,
    ["node", "hw_id"],
    Inventory("/api/stats (sources)"),
    "Reports missing from sequence gaps, by source (v2.0: each lost group at the source's mean reports per group)"
);
metric!(
    REPORT_GROUPS_LOST,
    "report_groups_lost",
    Counter,
    None,
    ["node", "hw_id"],
    Inventory("/api/stats (sources)"),
    "Report groups (datagrams, one sequence number each) missing from sequence gaps, by source"
);
metric!(
    QUEUE_OCCUPANCY,
    "queue_occupancy",
    Gauge,
    None,
    ["node", "port", "queue"],
    Inventory("/api/queues"),
    "Last queue occupancy reported (device units)"
);
metric!(
    QUEUE_HOP_LATENCY,
    "queue_hop_latency",
    Gauge,
    Some("nanoseconds"),
    ["node", "port", "queue"],
    Inventory("/api/queues"),
    "Last hop latency through the queue"
);
metric!(
    PORT_TX_UTILIZATION,
    "port_tx_utilization",
    Gauge,
    None,
    ["node", "port"],
    Inventory("/api/nodes"),
    "Egress port Tx utilization reported (device units)"
);
metric!(
    PORT_TX_UTILIZATION_RATIO,
    "port_tx_utilization_ratio",
    Gauge,
    None,
    ["node", "port"],
    Inventory("/api/nodes"),
    "Egress port Tx utilization as a fraction of line rate (tx_util_full_scale = 1)"
);
metric!(
    DROPS,
    "drops",
    Counter,
    None,
    ["node", "reason"],
    Inventory("/api/nodes"),
    "Drop reports received (not packets: switches filter drop reports), by node and reason"
);
metric!(
    METRICS_SERIES_TRUNCATED,
    "metrics_series_truncated",
    Gauge,
    None,
    [],
    Stats(&[("*", "api.metrics_series_truncated")]),
    "Series left out of the last /metrics answer (more than max_series)"
);

/// Every metric, in rendering order.
pub const ALL: &[&Metric] = &[
    &INCIDENTS,
    &INCIDENTS_STARTED,
    &INCIDENTS_EVICTED,
    &INCIDENT_EPISODES_MERGED,
    &PATH_CHANGES_IGNORED,
    &LOSS_HISTORY_UNTRACKED,
    &EVENTS_UNLINKED,
    &EVENTS_EVICTED,
    &INGEST_DATAGRAMS_RECEIVED,
    &INGEST_DATAGRAMS,
    &INGEST_DATAGRAMS_MALFORMED,
    &INGEST_REPORTS_DECODED,
    &INGEST_REPORTS_CLOCK_SKEWED,
    &INGEST_SOCKET_ERRORS,
    &REPORT_PORT_FOREIGN_SOCKETS,
    &REPORT_PORT_FOREIGN_SEEN,
    &HTTP_CONNECTIONS,
    &HTTP_CONNECTIONS_OPEN,
    &HTTP_ANSWERS_REFUSED_MEMORY,
    &HTTP_ANSWER_BYTES,
    &API_REQUESTS_FAILED,
    &STORE_BATCHES,
    &STORE_FAILED,
    &STORE_BACKLOG_DROPPED,
    &STORE_FLUSHES_DEFERRED,
    &STORE_FLUSHES_STRETCHED,
    &STORE_INGEST_PAUSES,
    &STORE_INGEST_PAUSED,
    &STORE_LAG,
    &STORE_EVENTS_MISSED,
    &STORE_RAW_NOT_KEPT,
    &STORE_SPOOL_ROWS,
    &STORE_SPOOL_BYTES,
    &STORE_SPOOL_AGE,
    &STORE_SPOOLED,
    &STORE_SPOOL_REPLAYED,
    &STORE_SPOOL_DROPPED,
    &FABRIC_ROWS,
    &FABRIC_COUNTER,
    &FABRIC_QUERIES_FAILED,
    &REPORTS,
    &REPORTS_WITHOUT_FLOW,
    &REPORTS_LOST_ALL,
    &REPORT_GROUPS_LOST_ALL,
    &REPORT_SEQUENCE_RESETS,
    &REPORT_SEQUENCE_IMPLAUSIBLE,
    &REPORT_SEQUENCE_WIDTH_CONFLICTS,
    &STATE_EVICTED,
    &STATE_ENTRIES,
    &EVENTS,
    &EVENTS_SUPPRESSED,
    &FLOWS_ACTIVE,
    &FLOWS_EXPIRED,
    &REPORTS_UNCHANGED,
    &SNAPSHOT_AGE,
    &SNAPSHOT_COST,
    &WEBHOOK_SENT,
    &WEBHOOK_ATTEMPTS_FAILED,
    &WEBHOOK_DROPPED,
    &WEBHOOK_QUEUE_DEPTH,
    &REPORTS_LOST,
    &REPORT_GROUPS_LOST,
    &QUEUE_OCCUPANCY,
    &QUEUE_HOP_LATENCY,
    &PORT_TX_UTILIZATION,
    &PORT_TX_UTILIZATION_RATIO,
    &DROPS,
    &METRICS_SERIES_TRUNCATED,
];

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count.
    Int(u64),
    /// A fraction or other real number.
    Float(f64),
}

impl From<Value> for JsonValue {
    fn from(v: Value) -> Self {
        match v {
            Value::Int(n) => n.into(),
            Value::Float(x) => x.into(),
        }
    }
}

/// One series' value at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// What it is.
    pub metric: &'static Metric,
    /// Its label values, in the order of the metric's label names.
    pub labels: Vec<String>,
    /// Its value.
    pub value: Value,
}

/// The samples of one answer, added by whoever holds the numbers (the state's snapshot, the
/// ingest, HTTP, API and store counters), rendered as JSON ([`Samples::to_json`]) or, grouped
/// by metric ([`Samples::families`]), as Prometheus text.
#[derive(Debug, Default)]
pub struct Samples {
    samples: Vec<Sample>,
}

impl Samples {
    /// Adds a count (`labels`: the values of the metric's labels, in order).
    pub fn add(&mut self, metric: &'static Metric, labels: &[&str], value: u64) {
        self.push(metric, labels, Value::Int(value));
    }

    /// Adds a real number.
    pub fn add_float(&mut self, metric: &'static Metric, labels: &[&str], value: f64) {
        self.push(metric, labels, Value::Float(value));
    }

    fn push(&mut self, metric: &'static Metric, labels: &[&str], value: Value) {
        debug_assert_eq!(labels.len(), metric.labels.len(), "{}", metric.name);
        self.samples.push(Sample {
            metric,
            labels: labels.iter().map(|l| (*l).to_string()).collect(),
            value,
        });
    }

    /// Every sample, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// The samples grouped by metric, in the order of [`ALL`]; within a metric in the order
    /// added. Metrics without a sample are left out.
    pub fn families(&self) -> Vec<(&'static Metric, Vec<&Sample>)> {
        let mut by: BTreeMap<usize, Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            let i = ALL
                .iter()
                .position(|m| m.name == s.metric.name)
                .unwrap_or(usize::MAX);
            by.entry(i).or_default().push(s);
        }
        by.into_values().map(|v| (v[0].metric, v)).collect()
    }

    /// The [`Json::Stats`] samples as one JSON object (`/api/stats`' counters).
    pub fn to_json(&self) -> JsonValue {
        let mut root = JsonValue::Object(Map::new());
        for s in &self.samples {
            for path in s.metric.json_paths(&s.labels) {
                insert(&mut root, &path, s.value.into());
            }
        }
        root
    }
}

/// Sets `value` at `path` in `root`, making the objects on the way.
fn insert(root: &mut JsonValue, path: &[String], value: JsonValue) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = root;
    for key in parents {
        let JsonValue::Object(map) = at else {
            return;
        };
        at = map
            .entry(key.clone())
            .or_insert_with(|| JsonValue::Object(Map::new()));
    }
    if let JsonValue::Object(map) = at {
        map.insert(last.clone(), value);
    }
}

/// Merges `other` into `base`: objects key by key, anything else replaced.
pub fn merge_json(base: &mut JsonValue, other: JsonValue) {
    match (base, other) {
        (JsonValue::Object(b), JsonValue::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge_json(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

impl RecordCounters {
    /// Adds the reports by version and those without a flow.
    pub fn sample(&self, out: &mut Samples) {
        for (v, n) in [("2.0", self.v2), ("1.0", self.v1), ("0.5", self.v05)] {
            out.add(&REPORTS, &[v], n);
        }
        out.add(&REPORTS_WITHOUT_FLOW, &[], self.without_flow);
    }
}

impl Snapshot {
    /// Adds the state's totals: reports, loss, resets, evictions, entries, events, flows.
    pub fn sample(&self, out: &mut Samples) {
        self.counters().sample(out);
        out.add(&REPORTS_LOST_ALL, &[], self.reports_lost());
        out.add(&REPORT_GROUPS_LOST_ALL, &[], self.report_groups_lost());
        out.add(&REPORT_SEQUENCE_RESETS, &[], self.sequence_resets());
        out.add(
            &REPORT_SEQUENCE_IMPLAUSIBLE,
            &[],
            self.sequence_implausible(),
        );
        out.add(
            &REPORT_SEQUENCE_WIDTH_CONFLICTS,
            &[],
            self.sequence_width_conflicts(),
        );
        for (kind, n) in self.evicted().by_kind() {
            out.add(&STATE_EVICTED, &[kind], n);
        }
        for (kind, n) in self.held() {
            out.add(&STATE_ENTRIES, &[kind], n as u64);
        }
        for k in EventKind::ALL {
            let n = self.event_counts().get(&k).copied().unwrap_or(0);
            out.add(&EVENTS, &[k.label()], n);
        }
        out.add(&EVENTS_SUPPRESSED, &[], self.events_suppressed());
        out.add(&FLOWS_ACTIVE, &[], self.flow_count() as u64);
        out.add(&FLOWS_EXPIRED, &[], self.flows_expired());
        out.add(&REPORTS_UNCHANGED, &[], self.reports_unchanged());
        out.add(&LOSS_HISTORY_UNTRACKED, &[], self.loss_untracked());
    }
}

impl IncidentLog {
    /// Adds the incidents held by kind and state, started and evicted by kind, episodes merged
    /// and path changes ignored.
    pub fn sample(&self, out: &mut Samples) {
        for (i, &k) in IncidentKind::ALL.iter().enumerate() {
            let kind = k.label();
            out.add(&INCIDENTS, &[kind, "ongoing"], self.ongoing(k) as u64);
            out.add(&INCIDENTS, &[kind, "resolved"], self.resolved(k) as u64);
            out.add(&INCIDENTS_STARTED, &[kind], self.started()[i]);
            out.add(
                &INCIDENTS_EVICTED,
                &[kind],
                self.evicted[i] + self.dropped()[i],
            );
        }
        out.add(&INCIDENT_EPISODES_MERGED, &[], self.merged);
        out.add(&PATH_CHANGES_IGNORED, &[], self.moves_ignored);
        out.add(
            &EVENTS_UNLINKED,
            &[],
            self.events_unlinked + self.placed_events_dropped,
        );
    }
}

/// Adds the events that left the full event log, by kind (every kind, 0 included).
pub fn sample_events_evicted(evicted: &BTreeMap<EventKind, u64>, out: &mut Samples) {
    for k in EventKind::ALL {
        out.add(
            &EVENTS_EVICTED,
            &[k.label()],
            evicted.get(&k).copied().unwrap_or(0),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique, valid Prometheus names, and each family's samples sit at distinct JSON
    /// paths that no other family uses.
    #[test]
    fn declarations_are_unique_and_well_formed() {
        let mut names = std::collections::BTreeSet::new();
        for m in ALL {
            assert!(
                m.family()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                m.name
            );
            assert!(names.insert(m.family()), "{} declared twice", m.family());
            assert!(
                !m.name.ends_with("_total"),
                "{}: the renderer adds _total",
                m.name
            );
            assert!(!m.help.is_empty());
            if let Json::Stats(places) = m.json {
                assert!(!places.is_empty(), "{}", m.name);
                for (_, p) in places {
                    for key in p.split('.') {
                        let open = key.matches('{').count();
                        assert_eq!(open, key.matches('}').count(), "{p}");
                        for name in key.split('{').skip(1) {
                            let name = name.split('}').next().unwrap_or("");
                            assert!(m.labels.contains(&name), "{}: {{{name}}}", m.name);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn samples_land_at_their_paths() {
        let mut s = Samples::default();
        s.add(&INGEST_DATAGRAMS, &["accepted"], 7);
        s.add(&INGEST_DATAGRAMS, &["truncated"], 2);
        s.add(&STATE_ENTRIES, &["node"], 3);
        s.add(&STATE_ENTRIES, &["flow"], 9);
        s.add(&REPORTS, &["0.5"], 1);
        let j = s.to_json();
        assert_eq!(j["ingest"]["datagrams_accepted"], 7);
        assert_eq!(j["ingest"]["discarded"]["truncated"], 2);
        assert!(j["ingest"]["discarded"].get("accepted").is_none());
        assert_eq!(j["held"]["node"], 3);
        assert_eq!(j["nodes"], 3);
        assert_eq!(j["held"]["flow"], 9);
        assert_eq!(j["reports"]["v05"], 1);
        let fams = s.families();
        assert_eq!(fams.len(), 3);
        assert_eq!(fams[0].0.name, "ingest_datagrams");
        assert_eq!(fams[0].1.len(), 2);
        assert_eq!(
            QUEUE_HOP_LATENCY.family(),
            "intscope_queue_hop_latency_nanoseconds"
        );
        assert_eq!(DROPS.sample_name(), "intscope_drops_total");
    }
}
