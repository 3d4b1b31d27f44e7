//! # intscope-collector
//!
//! The monitoring system of the INT spec: receives telemetry reports from any implementation
//! (Report v2.0, v1.0, v0.5 — detected from the bytes), correlates them per flow, path, node, port
//! and queue, detects events, and serves the result over HTTP with Prometheus metrics.
//!
//! Stages: [`ingest`] (UDP sockets, every datagram accounted for) → `intscope_core::decode_into`
//! (decode into a reusable record) → `intscope_core::State` (correlation and detectors) →
//! [`api`] (HTTP JSON and `/metrics`), with [`store`] keeping the history. Time comes from the
//! records, so replays are deterministic.
//!
//! This crate holds the I/O adapters (sockets, store, HTTP, UI); decoding, correlation and the
//! detectors live in `intscope-core`, which does no I/O and reads no clock, and is named by its
//! own paths (`intscope_core::State`): one name per type.

pub mod api;
pub mod api_cluster;
pub mod api_config;
pub mod clock;
pub mod http;
pub mod hub;
pub mod ingest;
pub mod names;
pub mod openmetrics;
pub mod store;
pub mod ui;
pub mod view;
pub mod webhook;
pub mod webhook_config;
