//! The drop detector: a drop report is an event and one incident per (reporting node, egress
//! port and the node it leads to, reason), the reason by its name where the spec or SD-Fabric
//! names it.

use intscope_wire::locate::FlowKey;
use intscope_wire::report::drop_reason_name;

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::incident::{IncidentKind, IncidentPlace};
use crate::incidents::{FlowWeight, IncidentKey, Observation};
use crate::record::{Hop, Record};

/// Raises drop report `r` (at the egress port and queue of `last`, its last hop): the event
/// and the drop incident of its (reporting node, port, reason). `flow`: its flow and API ID;
/// `peer`: the node the port leads to, when known.
pub(crate) fn raise(
    raiser: &mut Raiser,
    r: &Record,
    flow: Option<(FlowKey, u64)>,
    last: Hop,
    peer: Option<u32>,
) {
    let now = r.time_ns;
    let clock = r.switch_time();
    let ev = move || Evidence::Drop {
        drop_reason: r.drop_reason,
        drop_reason_name: r.drop_reason.and_then(drop_reason_name),
    };
    let cause: std::borrow::Cow<'static, str> = match r.drop_reason {
        Some(code) => match drop_reason_name(code) {
            Some(name) => name.into(),
            None => format!("reason-{code}").into(),
        },
        None => "unknown".into(),
    };
    let key = IncidentKey::new(
        IncidentKind::Drop,
        IncidentPlace {
            node: Some(r.node_id),
            port: last.egress_if(),
            peer_node: peer,
            ..IncidentPlace::default()
        },
        Some(cause),
    );
    let o = Observation {
        flow: flow.map(FlowWeight::one),
        ..Observation::sample(clock, now)
    };
    let place = Place {
        node: Some(r.node_id),
        port: last.egress_if(),
        queue: last.queue_id(),
        flow,
    };
    raiser.raise_at(now, clock, EventKind::Drop, place, 0, Some(&key), ev);
    raiser.observe(key, &o, ev);
}
