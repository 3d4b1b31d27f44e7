//! The hops-without-INT detector, from the TTL: a packet whose TTL fell by more hops than
//! recorded INT passed hops that forward without INT. One event per report and one incident
//! per hidden node when the links seen name it, else per port it hides behind.

use intscope_wire::locate::FlowKey;

use crate::detect::silent_drop::Hidden;
use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::flow_ref::FlowSeen;
use crate::incident::{IncidentKind, IncidentPlace, Unit};
use crate::incidents::{FlowWeight, IncidentKey, Observation};
use crate::record::{Hop, Record};
use crate::thresholds::DetectConfig;

/// How a packet's TTL compares with the INT hops it recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TtlGap {
    /// The sender's initial TTL as assumed.
    initial_ttl: u8,
    /// Hops that decremented the TTL.
    ttl_decrement: u8,
    /// Of those, hops that added no INT metadata.
    pub(crate) non_int: u8,
}

/// Hops that forwarded the packet without INT, from the TTL: `None` when the record cannot tell
/// (no TTL, no INT hops, or an M or E bit or a truncated stack, which hide INT hops that TTL
/// would count as non-INT). `head_hops` recorded the start of the path in an intermediate report.
pub(crate) fn non_int_hops(r: &Record, head_hops: u8) -> Option<TtlGap> {
    if r.int_hops == 0 || r.mtu_exceeded || r.hop_limit_exceeded || r.path_truncated {
        return None;
    }
    let ttl = r.ip_ttl?;
    // The sender's initial TTL is not on the wire: take the usual default at or above it.
    let initial_ttl = [32u8, 64, 128, 255]
        .into_iter()
        .find(|&i| i >= ttl)
        .unwrap_or(255);
    let ttl_decrement = initial_ttl - ttl;
    Some(TtlGap {
        initial_ttl,
        ttl_decrement,
        non_int: ttl_decrement.saturating_sub(r.int_hops.saturating_add(head_hops)),
    })
}

/// Raises the hops without INT of record `r` (`ttl_gap`, from [`non_int_hops`]): placed where
/// the flow stage found the stack's gap (`seen.gap`: a hop whose learned link leads elsewhere
/// than the next hop of the stack), else between `last`, the last hop that recorded (its
/// egress port), and the next INT hop (the peer: the next hop of the stack or the reporter),
/// naming the node behind `last`'s port when the links seen (`next_node`) tell it. Without a
/// recorded hop before the reporter, at the reporter.
pub(crate) fn raise(
    cfg: &DetectConfig,
    raiser: &mut Raiser,
    r: &Record,
    last: Option<(usize, &Hop)>,
    ttl_gap: Option<TtlGap>,
    seen: FlowSeen,
    next_node: impl Fn(u32, u32) -> Option<u32>,
) {
    let Some(gap) = ttl_gap.filter(|g| cfg.non_int_hops && g.non_int > 0) else {
        return;
    };
    let now = r.time_ns;
    // The hop before the gap, when the flow stage found it inside the stack.
    let located = seen.gap.and_then(|g| {
        let at = r
            .hops()
            .iter()
            .enumerate()
            .find(|(_, h)| h.node_id == g.node && h.egress_if() == g.port)?;
        Some((at, g.suspect))
    });
    let last = located.map(|(at, _)| at).or(last);
    let next = last.and_then(|(i, _)| r.hops().get(i + 1));
    let peer = next.map_or(r.node_id, |h| h.node_id);
    let (node, port, suspect) = match (located, last) {
        (Some(((_, h), suspect)), _) => (h.node_id, h.egress_if(), Some(suspect)),
        (None, Some((_, h))) => (
            h.node_id,
            h.egress_if(),
            h.egress_if()
                .and_then(|p| next_node(h.node_id, p))
                .filter(|&n| n != peer),
        ),
        (None, None) => (r.node_id, None, None),
    };
    let clock = last.map_or_else(|| r.switch_time(), |(_, h)| h.clock_or(now));
    let head_hops = seen.head_hops;
    let ev = move || Evidence::NonIntHops {
        ip_ttl: r.ip_ttl,
        assumed_initial_ttl: gap.initial_ttl,
        ttl_decrement: gap.ttl_decrement,
        int_hops: r.int_hops + head_hops,
        non_int_hops: gap.non_int,
        last_int_node: last.map(|(_, h)| h.node_id),
        next_int_node: peer,
        suspect_node: suspect,
    };
    let flow = r.flow.zip(seen.id);
    // One incident per hidden node when the links name it, else per port it hides
    // behind (the next INT hop differs from flow to flow: it is in the evidence).
    let iplace = match suspect {
        Some(n) => IncidentPlace {
            node: Some(n),
            ..IncidentPlace::default()
        },
        None => IncidentPlace {
            node: Some(node),
            port,
            ..IncidentPlace::default()
        },
    };
    let key = IncidentKey::new(IncidentKind::NonIntHops, iplace, None);
    let o = Observation {
        value: Some((u64::from(gap.non_int), Unit::Hops)),
        flow: flow.map(FlowWeight::one),
        ..Observation::sample(clock, now)
    };
    let place = Place {
        node: Some(node),
        port,
        flow,
        ..Place::default()
    };
    raiser.raise_at(now, clock, EventKind::NonIntHops, place, 0, Some(&key), ev);
    raiser.observe(key, &o, ev);
}

/// INT-XD/MX: raises the hops without INT `h` between two INT hops of flow `flow` (key, API
/// ID) whose reports' copies of the packet are more than one TTL apart, at report time `now`:
/// one non-int-hops incident per port they hide behind, as INT-MD's TTL check places them, or
/// per hidden node when the links name it (`suspect`: a hop that stopped adding INT, known
/// from its reports before). The evidence's `assumed_initial_ttl` is `last`'s TTL here.
#[cold]
pub(crate) fn raise_hidden(raiser: &mut Raiser, now: u64, flow: (FlowKey, u64), h: &Hidden) {
    let Hidden {
        last,
        next,
        ttls: (at_last, at_next),
        suspect,
        ..
    } = *h;
    let non_int = at_last - at_next - 1;
    let iplace = match suspect {
        Some(n) => IncidentPlace {
            node: Some(n),
            ..IncidentPlace::default()
        },
        None => IncidentPlace {
            node: Some(last.node_id),
            port: last.egress_if(),
            ..IncidentPlace::default()
        },
    };
    let incident = IncidentKey::new(IncidentKind::NonIntHops, iplace, None);
    let o = Observation {
        value: Some((u64::from(non_int), Unit::Hops)),
        flow: Some(FlowWeight::one(flow)),
        ..Observation::sample(raiser.switch_time(now), now)
    };
    let evidence = move || Evidence::NonIntHops {
        ip_ttl: Some(at_next),
        assumed_initial_ttl: at_last,
        ttl_decrement: at_last - at_next,
        int_hops: 2,
        non_int_hops: non_int,
        last_int_node: Some(last.node_id),
        next_int_node: next.node_id,
        suspect_node: suspect,
    };
    let place = Place {
        node: Some(last.node_id),
        port: last.egress_if(),
        queue: None,
        flow: Some(flow),
    };
    raiser.raise(now, EventKind::NonIntHops, place, Some(&incident), evidence);
    raiser.observe(incident, &o, evidence);
}
