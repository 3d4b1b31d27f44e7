//! `/api/stats` and `/api/names`: the collector's counters, per source, and the node names.

use std::sync::atomic::Ordering;

use axum::extract::State as AxState;
use axum::response::Json;
use intscope_core::counters::{self, Samples};
use serde::Serialize;
use serde_json::Value;

use crate::hub::Published;
use crate::store::{RowCounts, Totals};

use super::context::{Api, MAX_STATS_SOURCES, Shared};

/// The collector's counters at one moment, declared in [`counters`]: the state's totals and the
/// ingest counts from the published snapshot (read together, so every datagram counted is in the
/// state), the incident and event logs (their own lock, never a shard lock: incidents as of the
/// shards' last hand-over), and the HTTP, API and store counters read now. `/api/stats` and
/// `/metrics` both render these.
pub fn sample_counters(api: &Api, published: &Published, out: &mut Samples) {
    let c = &api.collector;
    {
        // The incident log as the shards last handed over (each tick): reading it takes the
        // log's lock only, never a shard's.
        let log = c.state.events();
        log.incidents.sample(out);
        counters::sample_events_evicted(log.evicted(), out);
    }
    published.ingest.sample(c.stats.kernel_dropped(), out);
    c.stats.port_guard.sample(out);
    api.http.sample(out);
    api.stats.sample(out);
    if let Some(store) = &c.store {
        c.store_stats
            .sample(c.raw_skipped.load(Ordering::Relaxed), out);
        // A store without a spool (SQLite) has nothing waiting: its zeros are true.
        store.spool_stats().unwrap_or_default().sample(out);
    }
    published.state.sample(out);
    let age = crate::clock::now_ns().saturating_sub(published.at_ns) / 1_000_000;
    out.add(&counters::SNAPSHOT_AGE, &[], age);
    out.add(
        &counters::SNAPSHOT_COST,
        &[],
        published.previous_cost_ns / 1_000_000,
    );
}

/// One report source's sequence accounting in `/api/stats`.
#[derive(Debug, Serialize)]
pub struct SourceStats {
    /// Node ID.
    pub node_id: u32,
    /// Hardware ID.
    pub hw_id: u8,
    /// Report groups (datagrams) received.
    pub report_groups_received: u64,
    /// Reports received.
    pub reports_received: u64,
    /// Report groups missing from sequence gaps.
    pub report_groups_lost: u64,
    /// Reports missing from sequence gaps.
    pub reports_lost: u64,
    /// Late report groups that filled a gap.
    pub report_groups_reordered: u64,
    /// Sequence restarts.
    pub restarts: u64,
    /// Sequence numbers later numbers contradicted (corrupt or spoofed).
    pub implausible: u64,
    /// Reports of the other sequence width than the source's.
    pub width_conflicts: u64,
}

/// What `/api/stats` holds besides the counters of [`sample_counters`]: the last decode error,
/// the kernel's drop count (`null` where unknown), the limits, the sources, and the store's row
/// counts and totals as its writer last read them.
#[derive(Debug, Serialize)]
pub struct StatsBase<'a> {
    /// Ingest details that are not counters.
    pub ingest: IngestDetail,
    /// The state's limits.
    pub limits: &'a intscope_core::Limits,
    /// Sources in (node, hw_id) order, at most [`MAX_STATS_SOURCES`].
    pub sources: Vec<SourceStats>,
    /// The store (`null` without one).
    pub store: Option<StoreDetail>,
}

/// The ingest details of `/api/stats` that are not counters.
#[derive(Debug, Serialize)]
pub struct IngestDetail {
    /// Datagrams the kernel dropped (`null` where /proc is not readable; a counter otherwise).
    pub kernel_dropped: Option<u64>,
    /// The last decode error.
    pub last_error: Option<String>,
}

/// The store's contents as its writer last read them (`null` before its first read or where
/// the read failed).
#[derive(Debug, Serialize)]
pub struct StoreDetail {
    /// Rows per table.
    pub rows: Option<RowCounts>,
    /// This collector's stored totals by name (its own runs only).
    pub totals: Option<Totals>,
    /// Every collector's, in a store several share (ClickHouse); `null` otherwise.
    pub fabric_totals: Option<Totals>,
}

/// The nodes' names from the topology (`crate::names`): `{"nodes": {"<id>": "<name>"}}`,
/// empty where none was given. Bounded by the names' own bounds (at most 65 536 of 64 bytes).
pub(super) async fn names(AxState(api): Shared) -> Json<Value> {
    Json(serde_json::json!({ "nodes": &*api.collector.config.names }))
}

pub(super) async fn stats(AxState(api): Shared) -> Json<Value> {
    let c = &api.collector;
    let published = c.snapshot();
    let mut samples = Samples::default();
    sample_counters(&api, &published, &mut samples);
    samples.add(
        &counters::METRICS_SERIES_TRUNCATED,
        &[],
        api.stats.metrics_series_truncated.load(Ordering::Relaxed),
    );
    // What the writer last read: the API never waits on the database it is writing.
    let store = c.store.as_ref().map(|_| {
        let snap = c
            .store_stats
            .snapshot
            .lock()
            .map(|s| s.clone())
            .unwrap_or(None)
            .unwrap_or_default();
        StoreDetail {
            rows: snap.rows,
            totals: snap.totals,
            fabric_totals: snap.fabric_totals,
        }
    });
    let s = &published.state;
    let mut sources: Vec<_> = s.sources().collect();
    sources.sort_unstable_by_key(|(k, _)| *k);
    let sources = sources
        .into_iter()
        .take(MAX_STATS_SOURCES)
        .map(|((node, hw), st)| SourceStats {
            node_id: node,
            hw_id: hw,
            report_groups_received: st.groups_received,
            reports_received: st.reports_received,
            report_groups_lost: st.groups_lost,
            reports_lost: st.reports_lost,
            report_groups_reordered: st.reordered,
            restarts: st.restarts,
            implausible: st.implausible,
            width_conflicts: st.width_conflicts,
        })
        .collect();
    let base = StatsBase {
        ingest: IngestDetail {
            kernel_dropped: c.stats.kernel_dropped(),
            last_error: c.stats.last_error.lock().map(|e| e.clone()).unwrap_or(None),
        },
        limits: &c.config.limits,
        sources,
        store,
    };
    let mut v = serde_json::to_value(base).unwrap_or(Value::Null);
    counters::merge_json(&mut v, samples.to_json());
    Json(v)
}
