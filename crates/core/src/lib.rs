//! # intscope-core
//!
//! The collector's brain: everything between a received datagram and the state the API serves,
//! with no I/O and no clock. [`record`] decodes a report datagram (any of Report v2.0, v1.0, v0.5)
//! into a reusable record; [`state`] correlates records in [`flow_shard`]s by flow key (paths,
//! latency, joins of per-hop reports; [`flow`]) and in [`fabric`] shards by node (ports, queues,
//! links, report sequence numbers with [`seq`]), runs the [`detect`]ors and keeps the [`event`]
//! log with its typed [`evidence`]; [`incident`] is the typed shape of an episode with a
//! lifecycle that the store keeps and the console shows. [`loadgen`] builds synthetic report
//! traffic for tests and benchmarks.
//!
//! The rule: this crate opens no socket or file, starts no thread, never reads a clock, and
//! depends on no I/O crate (tokio, axum, rusqlite, socket2, quinn-udp, nix, prometheus-client,
//! hyper; `tests/no_io_deps.rs` checks its manifest). Time comes from the records (report time),
//! and the caller hands over datagrams and the time it received them. Why: a collector must be
//! testable and embeddable. The same input in the same batches gives the same state and events,
//! so replays, unit tests and fuzzing are deterministic, and any runtime (the socket collector in
//! `intscope-collector`, a pcap replay, another program) can drive it.

mod cause;
pub mod counters;
pub mod detect;
pub mod event;
pub mod evidence;
pub mod fabric;
pub mod flow;
pub mod flow_ref;
pub mod flow_shard;
pub mod id_table;
pub mod incident;
pub mod incidents;
pub mod limits;
pub mod loadgen;
pub mod rank;
pub mod record;
pub mod rows;
pub mod search;
pub mod seq;
pub mod snapshot;
pub mod state;
mod totals;
