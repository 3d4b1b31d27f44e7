//! Device state the node reports. The node never reads a clock or a device itself: the runtime
//! (pcap replay, simulator, live interface) provides a [`Telemetry`], so the same code is
//! deterministic in tests and the simulator.

use intscope_wire::metadata::{BUFFER, HopMetadata};

use crate::config::TelemetryModel;

/// What this node can tell about the packet it is forwarding now.
pub trait Telemetry {
    /// This node's metadata for the packet (unavailable fields `None`).
    fn hop(&self, node_id: u32) -> HopMetadata<'static>;
}

/// Fixed values from the configuration, timestamps from the packet's time (pcap mode).
#[derive(Debug, Clone)]
pub struct StaticTelemetry {
    /// The model.
    pub model: TelemetryModel,
    /// Ingress time of the current packet, ns.
    pub time_ns: u64,
}

impl Telemetry for StaticTelemetry {
    fn hop(&self, node_id: u32) -> HopMetadata<'static> {
        let m = &self.model;
        HopMetadata {
            present: !BUFFER,
            node_id: Some(node_id),
            l1_ingress_if: Some(m.ingress_port),
            l1_egress_if: Some(m.egress_port),
            hop_latency: Some(m.hop_latency_ns),
            queue_id: Some(m.queue_id),
            queue_occupancy: Some(m.queue_occupancy),
            ingress_ts: Some(self.time_ns),
            egress_ts: Some(self.time_ns + u64::from(m.hop_latency_ns)),
            l2_ingress_if: Some(u32::from(m.ingress_port)),
            l2_egress_if: Some(u32::from(m.egress_port)),
            egress_tx_util: Some(m.tx_util),
            ..HopMetadata::default()
        }
    }
}
