//! Helpers shared by the node's tests.
#![allow(dead_code)] // each test binary uses its own subset

use intscope_node::config::TelemetryModel;
use intscope_node::{Mode, NodeConfig, Role, WatchEntry};

/// The UDP port INT over UDP uses in these tests.
pub const INT_PORT: u16 = 17768;

/// A node `id` in `role` and `mode` that watches every packet, with instructions 0x9000 (v2.1
/// bitmap bits 0 and 3: node ID, queue ID and occupancy) and a queue of 10 cells.
pub fn cfg(id: u32, role: Role, mode: Mode) -> NodeConfig {
    NodeConfig {
        node_id: id,
        role,
        mode,
        instructions: 0x9000,
        watchlist: vec![WatchEntry::default()],
        int_udp_port: INT_PORT,
        telemetry: TelemetryModel {
            queue_occupancy: 10,
            ..TelemetryModel::default()
        },
        ..NodeConfig::default()
    }
}
