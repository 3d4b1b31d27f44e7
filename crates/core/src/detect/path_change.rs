//! The path change detector: a flow whose path is no longer the one it took is an event at
//! the hop after which the two paths part, with both paths as evidence. Which paths are whole
//! enough to compare (INT-MD stacks, joined INT-XD/MX postcards) the flow shard decides.

use intscope_wire::locate::FlowKey;

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::flow::Path;

/// Raises the change of flow `flow` (key, API ID) from path `old` to `new`, at receive time
/// `now` and, when the reports tell it, switch time `at_ns`.
pub(crate) fn raise(
    raiser: &mut Raiser,
    now: u64,
    at_ns: Option<u64>,
    flow: (FlowKey, u64),
    old: Path,
    new: Path,
) {
    let diverge = old
        .iter()
        .zip(new.iter())
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let at = new.get(diverge.saturating_sub(1)).copied();
    let ev = move || Evidence::PathChange {
        old_path: old,
        new_path: new,
        diverges_after_hop: diverge,
    };
    let place = Place {
        node: at.map(|h| h.node_id),
        port: at.and_then(|h| h.egress_if),
        queue: None,
        flow: Some(flow),
    };
    match at_ns {
        Some(at_ns) => raiser.raise_path_change_at(now, at_ns, place, ev),
        None => raiser.raise(now, EventKind::PathChange, place, None, ev),
    }
}
