//! The hop limit (E bit) and MTU (M bit) detectors: one event per flagged report and one
//! incident per place, the hop that set the bit when the links seen tell it.

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::flow_ref::FlowSeen;
use crate::incident::{IncidentKind, IncidentPlace};
use crate::incidents::{FlowWeight, IncidentKey, Observation};
use crate::record::{Hop, Record};

/// The hop-limit (E) and MTU (M) flags of record `r`. The E bit was set by the first hop that
/// added nothing: the one after `last`, the last hop that recorded, found through the links
/// seen so far (`next_node`). Later hops may add metadata again after an M bit, so its hop is
/// where the flow stage found the stack's gap (`seen.gap`), else the one after `last` unless
/// that is the reporter (a sink strips INT: no egress MTU stops it). The event and the
/// incident go to that hop when known, else to `last`'s egress port, else to the reporting
/// node: one incident per place.
pub(crate) fn raise(
    raiser: &mut Raiser,
    r: &Record,
    last: Option<&Hop>,
    seen: FlowSeen,
    next_node: impl Fn(u32, u32) -> Option<u32>,
) {
    let id = seen.id;
    for (flagged, kind, ikind) in [
        (
            r.hop_limit_exceeded,
            EventKind::HopLimit,
            IncidentKind::HopLimit,
        ),
        (r.mtu_exceeded, EventKind::MtuExceeded, IncidentKind::Mtu),
    ] {
        if !flagged {
            continue;
        }
        let after_last = last
            .and_then(|h| next_node(h.node_id, h.egress_if()?))
            .filter(|&n| ikind == IncidentKind::HopLimit || n != r.node_id);
        let suspect = match seen.gap {
            Some(g) if ikind == IncidentKind::Mtu => Some(g.suspect),
            _ => after_last,
        };
        let ev = move || Evidence::Limit {
            int_hops: r.int_hops,
            path: r.hops().iter().map(|h| h.node_id).collect(),
            last_recorded_node: last.map(|h| h.node_id),
            last_recorded_egress_port: last.and_then(|h| h.egress_if()),
            suspect_node: suspect,
            reported_by: r.node_id,
        };
        let iplace = match (suspect, last) {
            (Some(n), _) => IncidentPlace {
                node: Some(n),
                ..IncidentPlace::default()
            },
            (None, Some(h)) => IncidentPlace {
                node: Some(h.node_id),
                port: h.egress_if(),
                ..IncidentPlace::default()
            },
            (None, None) => IncidentPlace {
                node: Some(r.node_id),
                ..IncidentPlace::default()
            },
        };
        let flow = r.flow.zip(id);
        let clock = last.map_or_else(|| r.switch_time(), |h| h.clock_or(r.time_ns));
        let o = Observation {
            flow: flow.map(FlowWeight::one),
            ..Observation::sample(clock, r.time_ns)
        };
        let key = IncidentKey::new(ikind, iplace, None);
        let place = Place {
            node: Some(suspect.unwrap_or(r.node_id)),
            flow,
            ..Place::default()
        };
        raiser.raise_at(r.time_ns, clock, kind, place, 0, Some(&key), ev);
        raiser.observe(key, &o, ev);
    }
}
