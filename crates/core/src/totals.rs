//! The state's totals over its shards, summed once for both kinds of reader: the locked view
//! of the live shards and the published snapshot of their copies answer the same questions,
//! each shard kind saying what it holds through [`FabricPart`] and [`FlowPart`].

use crate::fabric::{Evicted, RecordCounters};

/// What one fabric shard, live or copied, adds to the totals.
pub(crate) trait FabricPart {
    /// Nodes and sources held.
    fn nodes_sources(&self) -> (usize, usize);
    /// Ports, queues and links held.
    fn ports_queues_links(&self) -> (usize, usize, usize);
    /// Entries evicted (flows aside).
    fn evicted(&self) -> Evicted;
    /// Records processed, by version.
    fn counters(&self) -> &RecordCounters;
    /// Events suppressed by the rate limit.
    fn suppressed(&self) -> u64;
}

/// What one flow shard, live or copied, adds to the totals.
pub(crate) trait FlowPart {
    /// Flows held.
    fn flow_count(&self) -> usize;
    /// Flows evicted at the limit.
    fn flows_evicted(&self) -> u64;
    /// Link-table entries refused at their bound.
    fn link_ports_refused(&self) -> u64;
    /// Events suppressed by the rate limit.
    fn suppressed(&self) -> u64;
}

pub(crate) fn evicted<'a, B: FabricPart + 'a, F: FlowPart + 'a>(
    fabric: impl Iterator<Item = &'a B>,
    flows: impl Iterator<Item = &'a F>,
) -> Evicted {
    let mut total = Evicted::default();
    for s in fabric {
        total.add(&s.evicted());
    }
    for s in flows {
        total.flows += s.flows_evicted();
        total.link_ports += s.link_ports_refused();
    }
    total
}

pub(crate) fn held<'a, B: FabricPart + 'a, F: FlowPart + 'a>(
    fabric: impl Iterator<Item = &'a B>,
    flows: impl Iterator<Item = &'a F>,
) -> [(&'static str, usize); 6] {
    let (mut nodes, mut sources, mut ports, mut queues, mut links) = (0, 0, 0, 0, 0);
    for s in fabric {
        let (n, src) = s.nodes_sources();
        let (p, q, l) = s.ports_queues_links();
        (nodes, sources) = (nodes + n, sources + src);
        (ports, queues, links) = (ports + p, queues + q, links + l);
    }
    [
        ("node", nodes),
        ("source", sources),
        ("port", ports),
        ("queue", queues),
        ("link", links),
        ("flow", flows.map(FlowPart::flow_count).sum()),
    ]
}

pub(crate) fn counters<'a, B: FabricPart + 'a>(
    fabric: impl Iterator<Item = &'a B>,
) -> RecordCounters {
    fabric.fold(RecordCounters::default(), |mut t, s| {
        t.add(s.counters());
        t
    })
}

pub(crate) fn suppressed<'a, B: FabricPart + 'a, F: FlowPart + 'a>(
    fabric: impl Iterator<Item = &'a B>,
    flows: impl Iterator<Item = &'a F>,
) -> u64 {
    fabric.map(FabricPart::suppressed).sum::<u64>() + flows.map(FlowPart::suppressed).sum::<u64>()
}
