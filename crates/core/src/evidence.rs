//! What each kind of event found, typed. An event keeps its evidence as plain values (a path is
//! the flow's shared copy, a culprit's flow its key) and becomes JSON only when the API, the
//! live stream or the store writes it out. Built as a JSON tree when raised, the evidence cost
//! an eighth of the pipeline on the load generator's traffic (a congestion episode every few
//! hundred reports: ten culprits with their addresses as strings, each key a map insertion).
//!
//! The JSON of each variant is its fields in declaration order, under the names below (the API
//! documents them in `docs/collector-api.openapi.yaml`).

use intscope_wire::locate::FlowKey;
use serde::Serialize;
use serde_json::Value;

use crate::flow::Path;
use crate::flow_ref::FlowRef;

/// The evidence of one event, by kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    /// Path change: the path before and after, and the index of the last hop they share.
    PathChange {
        /// Previous path.
        old_path: Path,
        /// New path.
        new_path: Path,
        /// Hops the two paths share from the start.
        diverges_after_hop: usize,
    },
    /// Hop latency anomaly.
    LatencyAnomaly {
        /// The hop's latency.
        hop_latency: u32,
        /// The port's baseline (rounded).
        baseline: f64,
        /// Latency over baseline (one decimal).
        factor: f64,
        /// The queue's occupancy in the same hop.
        queue_occupancy: Option<u32>,
    },
    /// Drop.
    Drop {
        /// Reason code.
        drop_reason: Option<u8>,
        /// Its name (SD-Fabric's codes).
        drop_reason_name: Option<&'static str>,
    },
    /// Start of a congestion episode.
    CongestionStart {
        /// Occupancy that started it.
        queue_occupancy: u32,
        /// The configured start threshold.
        threshold: u32,
        /// Hop latency in the same hop.
        hop_latency: Option<u32>,
        /// The report's Q bit.
        q_flag: bool,
    },
    /// End of a congestion episode, or a microburst.
    Episode {
        /// Switch time of its first congested sample.
        start_ns: u64,
        /// Duration on the switch's clock: from the first to the last congested sample.
        duration_ns: u64,
        /// The episode ended within this much after its last congested sample: the time to the
        /// first normal one (0 when it ended by going quiet).
        end_uncertainty_ns: u64,
        /// Highest occupancy.
        max_occupancy: u32,
        /// The flows that filled the queue most, largest share first.
        culprit_flows: Vec<Culprit>,
    },
    /// Lost reports: a sequence gap no late report filled within `report_reorder_ns`.
    LostReports {
        /// Hardware subsystem of the source.
        hw_id: u8,
        /// Sequence numbers missing: report groups (datagrams), one report each in v1.0 and
        /// v0.5.
        lost: u64,
        /// Reports lost, estimated: each group at the source's mean reports per group.
        reports_lost: u64,
        /// Sequence number expected.
        expected_seq: u32,
        /// Sequence number received.
        received_seq: u32,
    },
    /// Hop limit (E bit) or MTU (M bit).
    Limit {
        /// INT hops recorded.
        int_hops: u8,
        /// Node IDs of the recorded path.
        path: Vec<u32>,
        /// The last hop that recorded.
        last_recorded_node: Option<u32>,
        /// Its egress port.
        last_recorded_egress_port: Option<u32>,
        /// The hop after it, from the links seen.
        suspect_node: Option<u32>,
        /// The node that sent the report.
        reported_by: u32,
    },
    /// A node that stopped reporting a flow while the hop before it kept reporting it, and
    /// was heard from (any report, any flow) for less than the silent-drop window since: its
    /// reports stopped as a whole, a reporting outage (report-loss `silent`), not a drop.
    SilentNode {
        /// The hop before it that still reports the flow.
        reported_by: u32,
        /// That hop's newest report of the flow (switch time), ns.
        reported_at_ns: u64,
        /// The silent node's last report of the flow, or when the flow took this way, ns.
        silent_since_ns: u64,
        /// How long the silent node was heard from within that window, ns.
        heard_ns: u64,
    },
    /// Hops without INT, from the TTL.
    NonIntHops {
        /// The reported packet's TTL.
        ip_ttl: Option<u8>,
        /// The sender's initial TTL as assumed.
        assumed_initial_ttl: u8,
        /// Hops that decremented the TTL.
        ttl_decrement: u8,
        /// INT hops recorded (with an intermediate report's).
        int_hops: u8,
        /// Hops that added no INT metadata.
        non_int_hops: u8,
        /// The last hop that added INT before the hidden ones (`None`: none before the
        /// reporter).
        last_int_node: Option<u32>,
        /// The next hop that did (the next in the stack, or the reporter).
        next_int_node: u32,
        /// The node behind the last INT hop's egress port, from the links seen, when it is
        /// not the next INT hop (the hop without INT, most likely).
        suspect_node: Option<u32>,
    },
}

/// A flow named by a congestion episode, with its share of the queue's occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Culprit {
    /// The flow.
    #[serde(serialize_with = "flow_ref")]
    pub flow: FlowKey,
    /// Its API ID.
    pub flow_id: u64,
    /// Its share of the episode's occupancy (three decimals).
    pub share: f64,
}

fn flow_ref<S: serde::Serializer>(flow: &FlowKey, s: S) -> Result<S::Ok, S::Error> {
    FlowRef::from(flow).serialize(s)
}

impl Evidence {
    /// As JSON (what the API serves).
    pub fn to_json(&self) -> Value {
        // Only maps with non-string keys fail to serialize; these have none.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
