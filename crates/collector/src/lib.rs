//! # intscope-collector
//!
//! The monitoring system of the INT spec: receives telemetry reports from any implementation
//! (Report v2.0, v1.0, v0.5 — detected from the bytes), correlates them per flow, path, node, port
//! and queue, detects events, and serves the result over HTTP with Prometheus metrics.
//!
//! Stages: [`ingest`] (UDP sockets, every datagram accounted for) → [`record`] (decode into a
//! reusable record) → [`state`] (correlation and detectors: [`flow_shard`]s by flow, [`fabric`]
//! shards by node, one [`event`] log) → [`api`] (HTTP JSON and `/metrics`). Time comes from the
//! records, so replays are deterministic.
//!
//! This crate holds the I/O adapters (sockets, store, HTTP, UI); decoding, correlation and the
//! detectors live in `intscope-core`, which does no I/O and reads no clock. Its modules are
//! re-exported here under their old paths, so `intscope_collector::state::State` and friends
//! keep working.

pub use intscope_core::{
    detect, event, evidence, fabric, flow, flow_ref, flow_shard, id_table, incident, incidents,
    limits, loadgen, rank, record, rows, search, seq, snapshot, state,
};

pub mod api;
pub mod api_cluster;
pub mod api_config;
pub mod clock;
pub mod http;
pub mod ingest;
pub mod names;
pub mod openmetrics;
pub mod store;
pub mod ui;
pub mod webhook;
pub mod webhook_config;
