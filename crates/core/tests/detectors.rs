//! Each detector with a scenario that must fire it and one that must not.

mod common;

use common::*;
use intscope_core::{Event, EventKind, State};

fn events(s: &State, kind: EventKind) -> Vec<Event> {
    s.events()
        .events()
        .iter()
        .filter(|e| e.kind == kind)
        .cloned()
        .collect()
}

const LEAF1: H = H(1, 3, 800, 10);
const SPINE_A: H = H(101, 2, 900, 10);
const SPINE_B: H = H(102, 2, 900, 10);
const LEAF2: H = H(2, 5, 700, 10);

/// A steady flow: 20 reports, one per 10 ms, same path.
fn steady(s: &mut State, flow: u16, path: &[H], from: u64) -> u64 {
    let mut t = from;
    for i in 0..20 {
        let mut r = Rep::new(flow, path, LEAF2);
        r.seq = i;
        feed(s, &r.datagram(), t);
        t += 10 * MS;
    }
    t
}

#[test]
fn path_change_fires_on_a_new_spine_only() {
    let mut s = state();
    let t = steady(&mut s, 7, &[LEAF1, SPINE_A], 0);
    assert!(
        events(&s, EventKind::PathChange).is_empty(),
        "a steady path raises nothing"
    );
    let mut r = Rep::new(7, &[LEAF1, SPINE_B], LEAF2);
    r.seq = 20;
    feed(&mut s, &r.datagram(), t);
    let ev = events(&s, EventKind::PathChange);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].node_id, Some(1), "the paths diverge after leaf 1");
    assert_eq!(ev[0].port, Some(3));
    assert_eq!(
        ev[0].flow.as_ref().unwrap().dst_port,
        80,
        "the original port restored from the shim"
    );
    assert_eq!(ev[0].evidence.to_json()["new_path"][1]["node_id"], 102);
    let v = s.read();
    let f = v.flow_by_id(ev[0].flow_id.unwrap()).unwrap();
    assert_eq!(
        (
            f.path_changes,
            f.path.iter().map(|h| h.node_id).collect::<Vec<_>>()
        ),
        (1, vec![1, 102, 2])
    );
}

#[test]
fn latency_anomaly_against_the_hop_baseline() {
    let mut s = state();
    let t = steady(&mut s, 1, &[LEAF1, SPINE_A], 0);
    assert!(events(&s, EventKind::LatencyAnomaly).is_empty());
    // Twice the baseline is not an anomaly (factor 4); 50x is, at spine 101 port 2.
    for (lat, fires) in [(1800, false), (45_000, true)] {
        let mut r = Rep::new(1, &[LEAF1, H(101, 2, lat, 10)], LEAF2);
        r.seq = 20;
        let before = events(&s, EventKind::LatencyAnomaly).len();
        feed(&mut s, &r.datagram(), t + 2 * S);
        let after = events(&s, EventKind::LatencyAnomaly);
        assert_eq!(after.len() > before, fires, "latency {lat}");
        if fires {
            let e = after.last().unwrap();
            assert_eq!(
                (e.node_id, e.port, e.queue_id),
                (Some(101), Some(2), Some(0))
            );
            assert_eq!(e.evidence.to_json()["hop_latency"], 45_000);
        }
    }
}

/// A stray first sample (a packet held for its neighbour's address, a stalled host) does not
/// become the baseline: the warm-up's median is, so a later 50x is still an anomaly.
#[test]
fn a_stray_warm_up_sample_does_not_raise_the_baseline() {
    let mut s = state();
    let mut t = 0;
    for (i, lat) in [400_000_000].into_iter().chain([900; 19]).enumerate() {
        let mut r = Rep::new(1, &[LEAF1, H(101, 2, lat, 10)], LEAF2);
        r.seq = i as u32;
        feed(&mut s, &r.datagram(), t);
        t += 10 * MS;
    }
    assert!(events(&s, EventKind::LatencyAnomaly).is_empty());
    let mut r = Rep::new(1, &[LEAF1, H(101, 2, 45_000, 10)], LEAF2);
    r.seq = 20;
    feed(&mut s, &r.datagram(), t);
    let ev = events(&s, EventKind::LatencyAnomaly);
    assert_eq!(ev.len(), 1, "45 µs over a 900 ns baseline");
    assert_eq!(ev[0].evidence.to_json()["baseline"], 900.0);
}

#[test]
fn drop_with_reason_by_name() {
    let mut s = state();
    steady(&mut s, 2, &[LEAF1, SPINE_A], 0);
    assert!(events(&s, EventKind::Drop).is_empty());
    let mut r = Rep::new(2, &[LEAF1, SPINE_A], LEAF2);
    r.drop = Some(29);
    r.seq = 20;
    feed(&mut s, &r.datagram(), 5 * S);
    let ev = events(&s, EventKind::Drop);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].node_id, ev[0].port), (Some(2), Some(5)));
    assert_eq!(ev[0].evidence.to_json()["drop_reason_name"], "routing-miss");
    assert_eq!(s.read().node(2).unwrap().drops[&29], 1);
    // Dropped at the spine: the path stops short there, and that is no path change.
    let mut r = Rep::new(2, &[LEAF1], SPINE_A);
    r.drop = Some(71);
    r.seq = 21;
    feed(&mut s, &r.datagram(), 6 * S);
    assert_eq!(events(&s, EventKind::Drop).len(), 2);
    assert!(events(&s, EventKind::PathChange).is_empty());
    assert_eq!(s.read().flows().next().unwrap().path.len(), 3);
}

#[test]
fn congestion_episode_names_culprit_flows() {
    let mut s = state();
    let mut t = 0;
    // Below the threshold (1000): nothing.
    for i in 0..10 {
        feed(
            &mut s,
            &Rep::new(i, &[LEAF1, H(101, 2, 900, 400)], LEAF2).datagram(),
            t,
        );
        t += MS;
    }
    assert!(events(&s, EventKind::CongestionStart).is_empty());
    // Flow 9 fills the queue three times as often as flow 8, for 10 ms, then it drains.
    for k in 0..40 {
        let flow = if k % 4 == 0 { 8 } else { 9 };
        feed(
            &mut s,
            &Rep::new(flow, &[LEAF1, H(101, 2, 20_000, 3000)], LEAF2).datagram(),
            t,
        );
        t += MS / 4;
    }
    feed(
        &mut s,
        &Rep::new(8, &[LEAF1, H(101, 2, 900, 100)], LEAF2).datagram(),
        t + 5 * MS,
    );
    assert!(
        events(&s, EventKind::CongestionEnd).is_empty(),
        "the end waits for the merge window: another episode would be the same incident"
    );
    s.tick(t + 5 * MS + 1_100 * MS);
    let start = events(&s, EventKind::CongestionStart);
    assert_eq!(start.len(), 1);
    assert_eq!(
        (start[0].node_id, start[0].port, start[0].queue_id),
        (Some(101), Some(2), Some(0))
    );
    let end = events(&s, EventKind::CongestionEnd);
    assert_eq!(
        end.len(),
        1,
        "15 ms is longer than the 2 ms microburst window"
    );
    let evidence = end[0].evidence.to_json();
    let culprits = evidence["culprit_flows"].as_array().unwrap();
    assert_eq!(
        culprits[0]["flow"]["dst"], "10.0.1.9",
        "the flow that filled the queue most, first"
    );
    assert!((culprits[0]["share"].as_f64().unwrap() - 0.75).abs() < 0.01);
    assert_eq!(culprits[1]["flow"]["dst"], "10.0.1.8");
}

#[test]
fn microburst_is_a_short_episode() {
    let mut s = state();
    feed(
        &mut s,
        &Rep::new(3, &[LEAF1, H(102, 4, 900, 4000)], LEAF2).datagram(),
        0,
    );
    feed(
        &mut s,
        &Rep::new(3, &[LEAF1, H(102, 4, 900, 100)], LEAF2).datagram(),
        MS / 2,
    );
    assert!(events(&s, EventKind::Microburst).is_empty());
    s.tick(1_100 * MS);
    let mb = events(&s, EventKind::Microburst);
    assert_eq!(
        mb.len(),
        1,
        "raised once no episode followed within the merge window"
    );
    // One congested sample: the burst spans nothing seen, and ended before the low sample.
    assert_eq!(mb[0].evidence.to_json()["duration_ns"], 0);
    assert_eq!(mb[0].evidence.to_json()["end_uncertainty_ns"], MS / 2);
    assert_eq!(mb[0].evidence.to_json()["max_occupancy"], 4000);
    assert!(events(&s, EventKind::CongestionEnd).is_empty());
}

#[test]
fn lost_reports_from_sequence_gaps() {
    let mut s = state();
    for seq in [0, 1, 2, 3] {
        let mut r = Rep::new(1, &[LEAF1], LEAF2);
        r.seq = seq;
        feed(&mut s, &r.datagram(), u64::from(seq) * MS);
    }
    assert!(events(&s, EventKind::LostReports).is_empty());
    let mut r = Rep::new(1, &[LEAF1], LEAF2);
    r.seq = 10;
    feed(&mut s, &r.datagram(), 10 * MS);
    assert_eq!(
        s.read().reports_lost(),
        0,
        "a jump counts only once a later number agrees (a corrupt one never does)"
    );
    r.seq = 11;
    feed(&mut s, &r.datagram(), 10 * MS);
    assert_eq!(s.read().reports_lost(), 6, "counted once continued");
    assert!(
        events(&s, EventKind::LostReports).is_empty(),
        "raised only once no late report filled the gap within report_reorder_ns"
    );
    s.tick(10 * MS + 20 * MS);
    let ev = events(&s, EventKind::LostReports);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].node_id, Some(2));
    assert_eq!(ev[0].evidence.to_json()["lost"], 6);
    assert_eq!(s.read().reports_lost(), 6);
}

#[test]
fn hop_limit_and_mtu_bits() {
    let mut s = state();
    steady(&mut s, 4, &[LEAF1, SPINE_A], 0);
    assert!(
        events(&s, EventKind::HopLimit).is_empty() && events(&s, EventKind::MtuExceeded).is_empty()
    );
    let mut r = Rep::new(4, &[LEAF1, SPINE_A], LEAF2);
    r.e = true;
    feed(&mut s, &r.datagram(), 2 * S);
    let mut r = Rep::new(4, &[LEAF1, SPINE_A], LEAF2);
    r.m = true;
    feed(&mut s, &r.datagram(), 3 * S);
    assert_eq!(events(&s, EventKind::HopLimit).len(), 1);
    assert_eq!(events(&s, EventKind::MtuExceeded).len(), 1);
}

#[test]
fn non_int_hops_from_ttl() {
    let mut s = state();
    // Two INT hops before the sink, TTL 62: every hop was an INT hop.
    feed(&mut s, &Rep::new(5, &[LEAF1, SPINE_A], LEAF2).datagram(), 0);
    assert!(events(&s, EventKind::NonIntHops).is_empty());
    // TTL 59: three more decrements than INT hops.
    let mut r = Rep::new(6, &[LEAF1, SPINE_A], LEAF2);
    r.ttl = Some(59);
    feed(&mut s, &r.datagram(), MS);
    let ev = events(&s, EventKind::NonIntHops);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].evidence.to_json()["non_int_hops"], 3);
    // INT hops that could not add metadata (M: no room under the MTU, E: hop limit) explain the
    // extra decrements themselves.
    for (m, e) in [(true, false), (false, true)] {
        let mut r = Rep::new(7, &[LEAF1], LEAF2);
        r.ttl = Some(61);
        r.m = m;
        r.e = e;
        feed(&mut s, &r.datagram(), 2 * MS);
    }
    assert_eq!(events(&s, EventKind::NonIntHops).len(), 1);
}

/// INT-MD with the sink at a host: the far leaf is a transit hop, and still adds its metadata
/// after a spine that had no room (M bit) or runs no INT. The hop left out is the one the
/// links learned say follows the leaf before the gap (INT v2.1 §"INT-MD Metadata Header
/// Format", M bit: derived "based on knowledge of the network topology"), not the host.
#[test]
fn the_m_bit_and_a_hop_without_int_are_placed_at_the_hop_the_stack_skipped() {
    const FAR_LEAF: H = H(2, 7, 700, 10);
    const HOST: H = H(2001, 1, 500, 0);
    let mut s = state();
    let mut t = 0;
    for i in 0..20 {
        let mut r = Rep::new(9, &[LEAF1, SPINE_A, FAR_LEAF], HOST);
        r.seq = i;
        feed(&mut s, &r.datagram(), t);
        t += 10 * MS;
    }
    let mut r = Rep::new(9, &[LEAF1, FAR_LEAF], HOST);
    r.m = true;
    r.seq = 20;
    feed(&mut s, &r.datagram(), t);
    let mut r = Rep::new(9, &[LEAF1, FAR_LEAF], HOST);
    r.ttl = Some(61);
    r.seq = 21;
    feed(&mut s, &r.datagram(), t + MS);
    // A flow never seen whole: the links flow 9 taught place it.
    let mut r = Rep::new(10, &[LEAF1, FAR_LEAF], HOST);
    r.m = true;
    r.seq = 22;
    feed(&mut s, &r.datagram(), t + 2 * MS);
    let mtu = events(&s, EventKind::MtuExceeded);
    assert_eq!(mtu.len(), 2);
    for e in &mtu {
        assert_eq!(e.node_id, Some(101), "{:?}", e.evidence.to_json());
        assert_eq!(e.evidence.to_json()["suspect_node"], 101);
    }
    let paths: Vec<_> = s
        .read()
        .flows()
        .map(|f| (f.reports, f.path.len()))
        .collect();
    assert!(
        paths.contains(&(22, 4)) && paths.contains(&(1, 3)),
        "flow 9 keeps its whole path, flow 10 shows what it has: {paths:?}"
    );
    let hidden = events(&s, EventKind::NonIntHops);
    assert_eq!(hidden.len(), 1);
    assert_eq!(
        (hidden[0].node_id, hidden[0].port),
        (Some(1), Some(3)),
        "after leaf 1's port to the spine"
    );
    let ev = hidden[0].evidence.to_json();
    assert_eq!(
        (
            &ev["last_int_node"],
            &ev["next_int_node"],
            &ev["suspect_node"]
        ),
        (&1.into(), &2.into(), &101.into()),
        "{ev}"
    );
    let mut places: Vec<_> = s
        .incidents()
        .into_iter()
        .map(|i| (i.kind.label(), i.place.node, i.place.port))
        .collect();
    places.sort();
    assert_eq!(
        places,
        [("mtu", Some(101), None), ("non-int-hops", Some(101), None)],
        "{places:?}"
    );
}

/// Routers before the INT domain (a WAN, a host's own routing) lower the TTL of every packet
/// of a flow: no gap inside the stack, so it stays the flow's path, with its latency, and a
/// new spine is still a path change.
#[test]
fn a_ttl_deficit_outside_the_stack_keeps_the_flows_path() {
    let mut s = state();
    let mut t = 0;
    for i in 0..20 {
        let mut r = Rep::new(11, &[LEAF1, SPINE_A], LEAF2);
        r.ttl = Some(60);
        r.seq = i;
        feed(&mut s, &r.datagram(), t);
        t += 10 * MS;
    }
    assert_eq!(events(&s, EventKind::NonIntHops).len(), 1, "said once");
    assert!(events(&s, EventKind::PathChange).is_empty());
    let mut r = Rep::new(11, &[LEAF1, SPINE_B], LEAF2);
    r.ttl = Some(60);
    r.seq = 20;
    feed(&mut s, &r.datagram(), t);
    let ev = events(&s, EventKind::PathChange);
    assert_eq!(ev.len(), 1, "a new spine");
    let v = s.read();
    let f = v.flows().next().unwrap();
    assert_eq!(
        f.path.iter().map(|h| h.node_id).collect::<Vec<_>>(),
        [1, 102, 2]
    );
    assert!(f.e2e.quantile(0.5).is_some(), "its latency kept");
}

#[test]
fn a_report_cut_inside_the_stack_is_a_partial_path() {
    let mut s = state();
    steady(&mut s, 2, &[LEAF1, SPINE_A], 0);
    // Ethernet 14 + IPv4 20 + UDP 8 + shim and header 16 + one 16-byte hop: the spine's hop
    // (newest, first in the stack) survives, the leaf's is cut.
    let mut r = Rep::new(2, &[LEAF1, SPINE_A], LEAF2);
    r.truncate = Some(14 + 20 + 8 + 16 + 16);
    r.ttl = Some(60);
    r.seq = 20;
    feed(&mut s, &r.datagram(), 5 * S);
    {
        let v = s.read();
        let f = v.flows().next().unwrap();
        assert_eq!(f.reports, 21, "the report counts");
        assert_eq!(f.path.len(), 3, "the known path stands");
    }
    assert!(events(&s, EventKind::PathChange).is_empty());
    assert!(
        events(&s, EventKind::NonIntHops).is_empty(),
        "the cut hop is not a non-INT hop"
    );
}

/// A stack with the M bit lacks the hops that had no room (INT v2.1 §"INT-MD Metadata Header
/// Format": "INT metadata was not inserted at one or more hops"): its hops are no path. A packet
/// that looped until the stack filled and left the loop as it ended showed its spine's looping
/// port beside the sink's hop, and raised a path change of its own in the demo.
#[test]
fn a_stack_with_the_mtu_bit_is_a_partial_path() {
    let mut s = state();
    steady(&mut s, 8, &[LEAF1, SPINE_A], 0);
    let mut r = Rep::new(8, &[LEAF1, H(101, 7, 900, 10)], LEAF2);
    r.m = true;
    r.seq = 20;
    feed(&mut s, &r.datagram(), 5 * S);
    assert!(events(&s, EventKind::PathChange).is_empty());
    let v = s.read();
    let f = v.flows().next().unwrap();
    assert_eq!(f.path[1].egress_if, Some(2), "the known path stands");
}

#[test]
fn events_are_rate_limited_per_place_and_flow() {
    let mut s = state();
    for k in 0..10u64 {
        let mut r = Rep::new(1, &[LEAF1], LEAF2);
        r.drop = Some(80);
        r.seq = k as u32;
        feed(&mut s, &r.datagram(), k * 10 * MS);
    }
    assert_eq!(
        events(&s, EventKind::Drop).len(),
        1,
        "one drop event per second per place and flow"
    );
    assert_eq!(s.read().events_suppressed(), 9);
    assert_eq!(
        s.read().flows().next().unwrap().drops,
        10,
        "every drop is still counted"
    );
}

// INT-XD/MX joins of per-hop reports are tested where the reports carry what real switches
// send (timestamps, distinct ports, filters): crates/sim/tests/modes.rs and core's `flow` tests.

#[test]
fn filtered_switches_going_quiet_still_end_episodes() {
    // SD-Fabric's queue filter reports only above its trigger: no low sample ends the episode.
    let mut s = state();
    for k in 0..4 {
        feed(
            &mut s,
            &Rep::new(3, &[LEAF1, H(102, 4, 20_000, 4000)], LEAF2).datagram(),
            k * MS / 4,
        );
    }
    s.tick(30 * MS);
    assert!(
        events(&s, EventKind::Microburst).is_empty(),
        "not yet quiet for 50 ms"
    );
    s.tick(100 * MS);
    s.tick(1_200 * MS);
    let mb = events(&s, EventKind::Microburst);
    assert_eq!(mb.len(), 1, "quiet queue closes its episode");
    assert_eq!(
        mb[0].evidence.to_json()["duration_ns"],
        3 * MS / 4,
        "ends at the last congested sample"
    );
}

/// Live state holds the active flows: one idle for `flow_idle_ns` leaves (counted), the rest stay.
#[test]
fn idle_flows_leave_the_live_state() {
    let mut s = State::new(intscope_core::DetectConfig {
        flow_idle_ns: 5_000 * MS,
        ..intscope_core::DetectConfig::default()
    });
    let t = steady(&mut s, 1, &[LEAF1, SPINE_A], 0);
    let gone = s.read().flows().next().unwrap().id;
    // Flow 2 keeps reporting for 10 s more; flow 1 said nothing since 200 ms.
    let mut t2 = t;
    while t2 < 10_000 * MS {
        t2 = steady(&mut s, 2, &[LEAF1, SPINE_A], t2);
    }
    assert_eq!(s.read().flow_count(), 1);
    assert_eq!(s.read().flows_expired(), 1);
    assert!(s.read().flow_by_id(gone).is_none());
}

#[test]
fn a_stack_longer_than_a_record_keeps_its_newest_hops_source_first() {
    use intscope_core::MAX_HOPS;
    let decode = |r: &Rep| last_record(&r.datagram());
    // Five hops: all kept, source first, then the sink's own.
    let path: Vec<H> = (1..=5).map(|n| H(n, 2, 100 * n, n)).collect();
    let r = decode(&Rep::new(3, &path, H(99, 5, 800, 10)));
    let nodes: Vec<u32> = r.hops().iter().map(|h| h.node_id).collect();
    assert_eq!(nodes, [1, 2, 3, 4, 5, 99]);
    assert_eq!(r.hops()[2].hop_latency(), Some(300));
    assert_eq!((r.int_hops, r.path_truncated), (5, false));
    // Twenty: the record keeps the newest, the oldest are cut.
    let path: Vec<H> = (1..=20).map(|n| H(n, 2, 100 * n, n)).collect();
    let r = decode(&Rep::new(3, &path, H(99, 5, 800, 10)));
    let nodes: Vec<u32> = r.hops().iter().map(|h| h.node_id).collect();
    let newest: Vec<u32> = (20 - MAX_HOPS as u32 + 2..=20).chain([99]).collect();
    assert_eq!(nodes, newest);
    assert_eq!(
        (usize::from(r.int_hops), r.path_truncated),
        (MAX_HOPS, true)
    );
}

/// A sink that put its own metadata in the stack (INT v2.1 sink option 1) and reports it again
/// in RepMdBits is one hop of the path: the report's metadata fills only what the stack's hop
/// lacks. A sink not in the stack is a hop after it.
#[test]
fn a_sink_in_its_own_stack_is_one_hop_completed_by_its_report() {
    let hops = |rep: &Rep| -> Vec<_> {
        last_record(&rep.datagram())
            .hops()
            .iter()
            .map(|h| {
                (
                    h.node_id,
                    h.egress_if(),
                    h.hop_latency(),
                    h.queue_occupancy(),
                )
            })
            .collect()
    };
    let sink = H(9, 3, 700, 40);
    // All ones: the sink's stack entry says its hop latency is unavailable.
    let path = [H(1, 2, 100, 10), H(9, 7, u32::MAX, 30)];
    assert_eq!(
        hops(&Rep::new(1, &path, sink)),
        [
            (1, Some(2), Some(100), Some(10)),
            (9, Some(7), Some(700), Some(30))
        ]
    );
    assert_eq!(
        hops(&Rep::new(1, &path[..1], sink)),
        [
            (1, Some(2), Some(100), Some(10)),
            (9, Some(3), Some(700), Some(40))
        ]
    );
}

#[test]
fn hops_that_give_only_level_2_interfaces_are_placed_on_those_ports() {
    let path = [H(1, 300, 100, 1), H(2, 7, 200, 2)];
    let mut rep = Rep::new(3, &path, H(99, 5, 800, 10));
    rep.l2_interfaces = true;
    let ports: Vec<_> = last_record(&rep.datagram())
        .hops()
        .iter()
        .map(|h| (h.node_id, h.ingress_if(), h.egress_if()))
        .collect();
    // The stack's hops from level 2; the sink's own metadata (RepMdBits) has level 1.
    assert_eq!(
        ports,
        [
            (1, Some(1), Some(300)),
            (2, Some(1), Some(7)),
            (99, Some(1), Some(5))
        ]
    );
}
