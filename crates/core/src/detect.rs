//! Detector thresholds (the `[detect]` table of the collector config).

/// Thresholds of the detectors. Occupancy is in the device's unit (cells or bytes, as the switch
/// reports it); latency in nanoseconds.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectConfig {
    /// Hop latency is anomalous above `latency_factor` × its baseline...
    pub latency_factor: f64,
    /// ...and at least this much above it.
    pub latency_min_excess_ns: u64,
    /// Samples a (node, port) needs before its baseline is trusted.
    pub latency_warmup: u32,
    /// Queue occupancy that starts a congestion episode.
    pub congestion_start: u32,
    /// Queue occupancy at or below which the episode ends.
    pub congestion_end: u32,
    /// Episodes shorter than this are reported as microbursts.
    pub microburst_max_ns: u64,
    /// At most one event per kind, place and flow in this interval.
    pub event_interval_ns: u64,
    /// Compare IP TTL decrement with INT hop count to find hops without INT.
    pub non_int_hops: bool,
    /// INT-XD / INT-MX: per-hop reports of a flow within this window form one path.
    pub join_window_ns: u64,
    /// A congestion episode with no congested sample for this long is over (switches that
    /// filter reports, like SD-Fabric's, go quiet when a queue drains).
    pub episode_quiet_ns: u64,
    /// An incident that ends and restarts at the same place (kind, place, cause) within this
    /// much switch time is one incident (flapping is merged).
    pub incident_merge_ns: u64,
    /// A new incident gathers the symptoms of its fault for this much receive time before it
    /// is published (congestion, latency and tail drops at one port; a loop's TTL expiries,
    /// hop limits and latencies; an incast's queues on the way): one fault, one incident.
    /// Its times are the evidence's; only its publication waits.
    pub incident_grouping_ns: u64,
    /// An incident without evidence for this long (receive time) is resolved: drops, report
    /// loss, path changes, hop limit, MTU, hops without INT, and latency whose port stopped
    /// reporting (congestion: `episode_quiet_ns`).
    pub incident_quiet_ns: u64,
    /// Path changes are correlated over this much receive time: the link or node most of them
    /// left is named as one incident with their flows.
    pub path_correlation_ns: u64,
    /// A report sequence gap is confirmed as loss (and raised) only when no late report
    /// filled it within this much receive time: reordered reports raise nothing.
    pub report_reorder_ns: u64,
    /// A switch timestamp further than this from the collector's receive time (either way) is
    /// not believed: a flipped high bit dates a report to 2262, where it would sort first in
    /// history and never be pruned. Such a hop's timestamps are dropped, so its report is timed
    /// by its receive time, and counted (`ingest_reports_clock_skewed`). 0: no bound.
    pub clock_skew_max_ns: u64,
    /// A flow without a report for this long leaves the live state (its summary stays in the
    /// store), so memory holds the active flows, not every flow ever seen.
    pub flow_idle_ns: u64,
    /// INT-XD / INT-MX: joining per-hop reports into paths, and silent drops.
    pub postcards: crate::flow_shard::PostcardConfig,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            latency_factor: 4.0,
            latency_min_excess_ns: 10_000,
            latency_warmup: 16,
            congestion_start: 1000,
            congestion_end: 500,
            microburst_max_ns: 2_000_000,
            event_interval_ns: 1_000_000_000,
            non_int_hops: true,
            join_window_ns: 100_000_000,
            episode_quiet_ns: 50_000_000,
            flow_idle_ns: 600_000_000_000,
            postcards: crate::flow_shard::PostcardConfig::default(),
            incident_merge_ns: 1_000_000_000,
            incident_grouping_ns: 100_000_000,
            incident_quiet_ns: 5_000_000_000,
            path_correlation_ns: 1_000_000_000,
            report_reorder_ns: 20_000_000,
            clock_skew_max_ns: 86_400_000_000_000,
        }
    }
}
