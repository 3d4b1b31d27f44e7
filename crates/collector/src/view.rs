//! What the API shows of a flow, live (`/api/flows`, from the collector's state) or stored
//! (`/api/history/flows`, from the store): one shape, so that a client reads both alike.

use serde::Serialize;

use intscope_core::{FlowRef, FlowView, PathHop};

/// A flow's summary: its counters, its path and its latency percentiles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowSummary {
    /// The live flow's dense ID (`/api/flows/{id}`); none in history, whose row sums every life
    /// of the flow (every run, every collector of a cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The flow's addresses and ports.
    pub flow: FlowRef,
    /// First report, ns.
    pub first_seen_ns: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// Reports.
    pub reports: u64,
    /// Drop reports.
    pub drops: u64,
    /// The newest drop reason code, if any drop was reported.
    pub last_drop_reason: Option<u8>,
    /// Node IDs of the current (stored: the newest) path, source first.
    pub path: Vec<u32>,
    /// The same path hop by hop, with each hop's ports.
    pub path_detail: Vec<PathHop>,
    /// Path changes.
    pub path_changes: u64,
    /// Median end-to-end latency, ns.
    pub e2e_latency_p50: Option<u64>,
    /// 99th percentile end-to-end latency, ns.
    pub e2e_latency_p99: Option<u64>,
}

impl FlowSummary {
    /// Sets the path from its hops (`path` the hops' node IDs).
    pub fn with_path(mut self, hops: Vec<PathHop>) -> Self {
        self.path = hops.iter().map(|h| h.node_id).collect();
        self.path_detail = hops;
        self
    }
}

impl From<&FlowView> for FlowSummary {
    fn from(f: &FlowView) -> Self {
        FlowSummary {
            id: Some(f.id),
            flow: FlowRef::from(&f.key),
            first_seen_ns: f.first_seen_ns,
            last_seen_ns: f.last_seen_ns,
            reports: f.reports,
            drops: f.drops,
            last_drop_reason: f.last_drop_reason,
            path: Vec::new(),
            path_detail: Vec::new(),
            path_changes: u64::from(f.path_changes),
            e2e_latency_p50: f.e2e_p50(),
            e2e_latency_p99: f.e2e_p99(),
        }
        .with_path(f.path.to_vec())
    }
}
