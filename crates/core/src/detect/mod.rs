//! The fabric's detectors, one module each. Two are state machines that own their state where
//! the fabric keeps it: `congestion` (a queue's episodes and runs) and `latency` (a port's
//! baseline and anomalies). The others judge one report at a time: `drop`, `limits` (hop limit
//! and MTU), `non_int` (hops without INT, from the TTL), `report_loss` (confirmed sequence
//! gaps) and, for the flow shard, `path_change` and `silent_drop` (where a flow's per-hop
//! reports stop along its path: a silent drop, a reporting outage or hops without INT, judged at
//! each join). Their thresholds are in `thresholds`; what they find goes to the shard's outbox
//! (`event::Raiser`).

pub(crate) mod congestion;
pub(crate) mod drop;
pub(crate) mod latency;
pub(crate) mod limits;
pub(crate) mod non_int;
pub(crate) mod path_change;
pub(crate) mod report_loss;
pub(crate) mod silent_drop;
