//! The detectors' thresholds (the `[detect]` table of the collector config), at the bottom of
//! the crate: the detectors, the event log and the incident log all read them.

/// Thresholds of the detectors. Occupancy is in the device's unit (cells or bytes, as the switch
/// reports it); latency in nanoseconds.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectConfig {
    /// Hop latency is anomalous above `latency_factor` × its baseline...
    pub latency_factor: f64,
    /// ...and at least this much above it.
    pub latency_min_excess_ns: u64,
    /// Samples a (node, port) needs before its baseline is trusted; their median starts it.
    pub latency_warmup: u32,
    /// A latency anomaly is an incident once its consecutive anomalous samples (no normal one
    /// between) span this much switch time; 0: at its first sample. A switch's hardware
    /// timestamps make one sample enough. A host's or a software router's residence includes
    /// the scheduler, which now and then holds every packet in flight for milliseconds: the
    /// held packets leave together and the next is normal again, so a stall never spans this
    /// long, while a real queue keeps every sample high. Held samples that no anomalous sample
    /// follows within `incident_quiet_ns` are forgotten (filtered reports come one per flow and
    /// interval while a latency holds), and an anomaly whose port went quiet that long is
    /// confirmed anew. Every anomalous sample is an event either way.
    pub latency_confirm_ns: u64,
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
    pub postcards: PostcardConfig,
    /// Reports that say nothing new skip the fabric's detectors (`[detect.fast_path]`).
    pub fast_path: FastPathConfig,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            latency_factor: 4.0,
            latency_min_excess_ns: 10_000,
            latency_warmup: 16,
            latency_confirm_ns: 0,
            congestion_start: 1000,
            congestion_end: 500,
            microburst_max_ns: 2_000_000,
            event_interval_ns: 1_000_000_000,
            non_int_hops: true,
            join_window_ns: 100_000_000,
            episode_quiet_ns: 50_000_000,
            flow_idle_ns: 600_000_000_000,
            postcards: PostcardConfig::default(),
            incident_merge_ns: 1_000_000_000,
            incident_grouping_ns: 100_000_000,
            incident_quiet_ns: 5_000_000_000,
            path_correlation_ns: 1_000_000_000,
            report_reorder_ns: 20_000_000,
            clock_skew_max_ns: 86_400_000_000_000,
            fast_path: FastPathConfig::default(),
        }
    }
}

/// The fast path for reports that say nothing new (`[detect.fast_path]`).
///
/// A complete-path report (an INT-MD stack, a v0.5 / v1.0 stack) of a flow whose path did not
/// change, with no drop, Q, E or M flag and no hop without INT, is *unchanged* when each hop's
/// queue is the one the flow last showed the detectors and its hop latency and queue occupancy
/// are within `latency_change_ns` and `occupancy_change` of the flow's previous report's (its
/// last sample), below every detector's threshold (a hop latency at most
/// `latency_min_excess_ns`, which no baseline makes anomalous; an occupancy below
/// `congestion_start`), at ports whose detectors are quiet (no latency anomaly held, no
/// congestion episode open). Such a report updates its flow (counters, path, latency
/// histogram, last sample) and its reporter's counters at once; its hops' counters, latency
/// and occupancy aggregates and heatmap maxima are added per path and handed to the fabric at
/// the next sweep (every millisecond of report time) or read. The detectors see every other
/// report, and one report per flow every `sample_every` reports or `sample_ns` of report time,
/// whichever comes first, which bounds a slow drift and keeps the ports' latency baselines
/// moving with the traffic.
/// SD-Fabric's switches filter their reports by the same rule before sending them
/// (`sd-fabric-int.txt`, `minFlowHopLatencyChangeNs`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FastPathConfig {
    /// Off: every report goes through every detector.
    pub enabled: bool,
    /// A hop latency this far (ns) from the flow's previous report's at that hop is a change
    /// (SD-Fabric's `minFlowHopLatencyChangeNs`, whose default it takes).
    pub latency_change_ns: u32,
    /// A queue occupancy this far from the previous report's is a change (the device's unit).
    pub occupancy_change: u32,
    /// One report of a flow in this many goes through the detectors however unchanged.
    pub sample_every: u32,
    /// ...and one at least this often, ns of report time.
    pub sample_ns: u64,
}

impl Default for FastPathConfig {
    /// On; 256 ns (SD-Fabric's default), 64 cells or bytes, one report in 32 and at least one
    /// per 100 ms per flow to the detectors.
    fn default() -> Self {
        FastPathConfig {
            enabled: true,
            latency_change_ns: 256,
            occupancy_change: 64,
            sample_every: 32,
            sample_ns: 100_000_000,
        }
    }
}

/// Joining INT-XD postcards and INT-MX reports into paths (`[detect.postcards]`).
///
/// Per-hop reports of one flow come from each node separately, and with SD-Fabric's report
/// filters each node reports different packets at different times (a flow once a second, or
/// when its ports or latency change). So a flow keeps each node's latest report, and a window
/// (`join_window_ns`) after reports arrive they are chained into a path by the fabric's links:
/// from the hop that entered by a port with no fabric link, over each link to the node that
/// reported the flow entering by its far end, to the hop that left by a port with no link. Links
/// are learned from INT-MD paths and from reports of one packet at two nodes (Telemetry Report
/// v2.0 §"Individual Report Main Contents": each report carries the hop's metadata, here its
/// ports and ingress / egress timestamps). Only a complete chain is compared with the flow's
/// path; anything else is a partial path, shown while no complete one is known and never a
/// change. Two reports of one packet (the same fingerprint) pair as a link's ends when the next
/// hop's ingress follows this hop's egress within `link_delay_learn_max_ns`, the closest such;
/// the delay of every link is learned from them (`flow::LinkTable::delay`), so
/// software and host nodes, tens of µs apart, join as switches a few hundred ns apart do.
/// Reports without a fingerprint pair within `link_delay_max_ns`, or within twice their link's
/// learned delay. Switch clocks are taken to agree to well within a link's delay (PTP).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostcardConfig {
    /// Time from one hop's egress timestamp to the next hop's ingress timestamp of the same
    /// packet (link delay plus clock offset) within which two reports always pair into a link,
    /// ns, as the link delay assumed before one is learned.
    pub link_delay_max_ns: u64,
    /// The most such time learned as a link's delay, ns: two reports of one packet (the same
    /// fingerprint) further apart than this never pair.
    pub link_delay_learn_max_ns: u64,
    /// A silent drop: a node keeps reporting a flow (through the same ports, with no silence of
    /// its own this long) this long after the next node of its path last did (or, the next
    /// node never having seen it, since the node first sent it that way), ns. Longer than a
    /// switch's report filter interval (SD-Fabric: 1 s), which is how long a healthy next hop
    /// may go without reporting.
    pub silent_drop_ns: u64,
    /// A silent drop also needs the next node's silence to be unlikely as report loss alone:
    /// with a share `p` of the next node's reports lost over the window (its confirmed
    /// sequence gaps against its reports received, `seq::LossHistory`) and `m`
    /// reports of the flow from this node since the next one's last, the drop is raised only
    /// once `p^m` is at most this chance (each of those reports is a packet the next node
    /// would have reported too, all of whose reports the network would have had to lose).
    /// Where the next node lost nothing, `silent_drop_ns` alone decides; 1 turns the check
    /// off, 0 lets any loss explain a silence. Hops without INT found from the TTL are weighed
    /// the same way: a hop that never reports may be one whose reports were all lost
    /// (`spans_lost_in_transit`).
    pub silent_drop_chance: f64,
    /// How often the switches' report filter reports a flow that did not change, ns
    /// (SD-Fabric: once a second). A healthy node's reports of its flows can pause for about
    /// this long, so a node that stopped adding INT is named once it has been silent for
    /// longer than its own usual gaps, at most twice this, after the first packet crossed it
    /// unreported.
    pub report_interval_ns: u64,
}

impl Default for PostcardConfig {
    /// Links up to 5 µs assumed (a few hundred metres of fibre and PTP's offset) and up to
    /// 1 ms learned (software switches and hosts, tens of µs, with room for a busy one), silent
    /// drops after 5 s (five of SD-Fabric's report intervals: a healthy hop whose reports are lost now and
    /// then is not taken for one that stopped seeing the flow), and a one-in-a-million chance
    /// that report loss explains them (at a fifth of the reports lost, nine reports of the
    /// flow in a row from the hop before).
    fn default() -> Self {
        PostcardConfig {
            link_delay_max_ns: 5_000,
            link_delay_learn_max_ns: 1_000_000,
            silent_drop_ns: 5_000_000_000,
            silent_drop_chance: 1e-6,
            report_interval_ns: 1_000_000_000,
        }
    }
}
