//! # intscope-node
//!
//! A software INT node: source, transit and sink over a frame buffer, with telemetry reports.
//! Deterministic: device state comes from a [`telemetry::Telemetry`] the runtime provides (pcap
//! files, the simulator, live interfaces), so chains of nodes give reproducible bytes.

pub mod config;
pub mod domain;
pub mod export;
pub mod filter;
pub mod frame;
mod hex_bytes;
pub mod netcfg;
pub mod node;
pub mod telemetry;

pub use config::{
    ConfigError, DropReports, MarkedWithoutInt, Mode, NodeConfig, Role, SinkMetadata, SourceEncap,
    WatchEntry,
};
pub use node::{Node, NodeStats, Outcome};
pub use telemetry::{MeasuredTelemetry, StaticTelemetry, Telemetry};
