//! # intscope-sim
//!
//! A simulated leaf-spine fabric whose switches run the real `intscope-node` code, with queues,
//! ECMP, traffic and faults, producing real INT traffic and telemetry reports in virtual time.
//! Deterministic: the same configuration and seed give the same reports.

pub mod fabric;
pub mod scenario;
pub mod topology;

pub use fabric::{
    Delivery, Fabric, Fault, FlowSpec, MixShape, Report, Scheduled, SimConfig, SimError, SimStats,
    default_mix, mix,
};
pub use scenario::Scenario;
pub use topology::Topology;
