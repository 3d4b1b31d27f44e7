//! # intscope-core
//!
//! The collector's brain: everything between a received datagram and the state the API serves,
//! with no I/O and no clock. [`decode_datagram`] and [`decode_into`] turn a report datagram (any
//! of Report v2.0, v1.0, v0.5) into reusable [`Record`]s; [`State`] correlates records in flow
//! shards by flow key (paths, latency, joins of per-hop reports: [`FlowState`]) and in fabric
//! shards by node (ports, queues, links, report sequence numbers), runs the detectors and keeps
//! the [`Event`] log; an [`Incident`] is the typed shape of an episode with a lifecycle that the
//! store keeps and the console shows. Readers take a [`Snapshot`]; the store takes [`Batch`]es of
//! rows. [`counters`] declares every metric; [`loadgen`] builds synthetic report traffic for
//! tests and benchmarks.
//!
//! The modules are private: what other crates use is re-exported here, one name per type, so the
//! inside can be rearranged without touching them.
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
mod deferred;
mod detect;
mod event;
mod evidence;
mod fabric;
mod fast_path;
mod flow;
mod flow_ref;
mod flow_shard;
mod id_table;
mod incident;
mod incidents;
mod keys;
mod limits;
pub mod loadgen;
mod rank;
mod record;
mod rows;
mod search;
mod seq;
mod snapshot;
mod state;
mod thresholds;
mod totals;

// Decoding: a datagram in, records out.
pub use record::{
    FlowKeyMode, MAX_HOPS, Record, RecordBatch, RecordSink, decode_datagram, decode_into,
    drop_far_timestamps,
};

// Correlation and detection: the state, its configuration and how work is spread over shards.
pub use fabric::node_shard;
pub use flow::{FlowState, LastSample, Path, PathHop, key_hash};
pub use flow_ref::FlowRef;
pub use flow_shard::flow_shard;
pub use limits::Limits;
pub use seq::{SeqTotals, SeqTracker};
pub use state::State;
pub use thresholds::{DetectConfig, FastPathConfig, PostcardConfig};

// What detection produces: events, and incidents with their lifecycle.
pub use event::{EVENT_KIND_SHARE, EVENT_LOG, Event, EventKind};
pub use incident::{
    EndReason, Incident, IncidentCounts, IncidentKind, IncidentPlace, IncidentState,
    MAX_INCIDENT_FLOWS, Severity, Unit,
};
pub use incidents::{IncidentLog, ONGOING_PER_KIND, RESOLVED_PER_KIND};

// What readers and the store take.
pub use rank::smallest;
pub use rows::{AggRow, Batch, FlowRow, FlushTake, RowSink, collect_batch, discard_changes};
pub use search::FlowSearch;
pub use snapshot::{FlowShardSnapshot, FlowView, Snapshot};
