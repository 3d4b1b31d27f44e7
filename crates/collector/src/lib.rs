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

pub mod api;
pub mod detect;
pub mod event;
pub mod evidence;
pub mod fabric;
pub mod flow;
pub mod flow_shard;
pub mod http;
pub mod id_table;
pub mod ingest;
pub mod loadgen;
pub mod rank;
pub mod record;
pub mod search;
pub mod seq;
pub mod state;
pub mod store;
pub mod ui;
