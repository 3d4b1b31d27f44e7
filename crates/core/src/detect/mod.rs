//! The detectors that are state machines of their own, one module each, each owning its state
//! where the fabric keeps it: `congestion` (a queue's episodes and runs) and `latency` (a port's
//! baseline and anomalies). Their thresholds are in `thresholds`; what they find goes to the
//! shard's outbox (`event::Raiser`).

pub(crate) mod congestion;
pub(crate) mod latency;
