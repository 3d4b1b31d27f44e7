//! Bounds on the live state: every table the reports can grow has one.

/// Bounds on the live state, whatever the reports claim (the `[limits]` table of the collector
/// configuration, docs/collector-config.md). A table that reaches its bound evicts its least
/// recently seen eighth (report time; counted as evictions), so memory and the number of
/// metric series stay bounded under a flood of made-up node IDs, ports or flows. Each shard
/// holds its share (the bound divided by the shards, rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Nodes (as reporters or hops).
    pub nodes: usize,
    /// (node, hw_id) report sequence trackers.
    pub sources: usize,
    /// Egress ports, over all nodes.
    pub ports: usize,
    /// Queues, over all ports (each keeps a heatmap of up to 4 KiB).
    pub queues: usize,
    /// Links between nodes.
    pub links: usize,
    /// Flows in live state.
    pub flows: usize,
    /// A sequence number this far ahead of the expected one, or less, means lost reports (more
    /// than 1024 once the next report confirms it); further ahead, or more than 1024 back, it is
    /// counted as a reset of the sequence.
    pub sequence_window: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nodes: 16_384,
            sources: 65_536,
            ports: 262_144,
            queues: 65_536,
            links: 262_144,
            flows: 2_000_000,
            sequence_window: crate::seq::DEFAULT_SEQ_WINDOW,
        }
    }
}

impl Limits {
    /// One shard's share of `n` shards (at least 8 of each).
    pub fn per_shard(&self, n: usize) -> Limits {
        let share = |v: usize| v.div_ceil(n.max(1)).max(8);
        Limits {
            nodes: share(self.nodes),
            sources: share(self.sources),
            ports: share(self.ports),
            queues: share(self.queues),
            links: share(self.links),
            flows: share(self.flows),
            sequence_window: self.sequence_window,
        }
    }
}
