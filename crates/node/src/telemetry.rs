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

/// A live interface's telemetry: the ports and queue ID from the configuration, the times
/// measured — ingress when the kernel received the frame, egress when the node handles it —
/// and what userspace cannot see (queue occupancy, Tx utilization) absent, never a constant.
#[derive(Debug, Clone)]
pub struct MeasuredTelemetry {
    /// Ports and queue ID.
    pub model: TelemetryModel,
    /// When the kernel received the frame, ns since the epoch.
    pub ingress_ns: u64,
    /// When the node processes it for sending, ns since the epoch.
    pub egress_ns: u64,
}

impl Telemetry for MeasuredTelemetry {
    fn hop(&self, node_id: u32) -> HopMetadata<'static> {
        let m = &self.model;
        let mut hop = HopMetadata {
            node_id: Some(node_id),
            l1_ingress_if: Some(m.ingress_port),
            l1_egress_if: Some(m.egress_port),
            hop_latency: Some(
                u32::try_from(self.egress_ns.saturating_sub(self.ingress_ns))
                    .unwrap_or(u32::MAX - 1),
            ),
            ingress_ts: Some(self.ingress_ns),
            egress_ts: Some(self.egress_ns.max(self.ingress_ns)),
            l2_ingress_if: Some(u32::from(m.ingress_port)),
            l2_egress_if: Some(u32::from(m.egress_port)),
            ..HopMetadata::default()
        };
        hop.present = hop.available_bits();
        hop
    }
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
