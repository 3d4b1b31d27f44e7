//! Incidents: each detector's episodes with a start, updates and an end, one per place and
//! cause, with storms (flapping, report loss, floods of one kind) kept to a bounded number.

mod common;

use common::*;
use intscope_core::{
    DetectConfig, EVENT_KIND_SHARE, EVENT_LOG, EndReason, Event, EventKind, Incident, IncidentKind,
    IncidentPlace, IncidentState, ONGOING_PER_KIND, RESOLVED_PER_KIND, Record, Severity, State,
    Unit,
};

const LEAF1: H = H(1, 3, 800, 10);
const SPINE_A: H = H(101, 2, 900, 10);
const LEAF2: H = H(2, 5, 700, 10);

/// The events of `kind`, once the input is over: a queue's end event waits for the merge
/// window, which these tests do not let pass.
fn events(s: &State, kind: EventKind) -> Vec<Event> {
    s.finish_incidents();
    s.events()
        .events()
        .iter()
        .filter(|e| e.kind == kind)
        .cloned()
        .collect()
}

fn incidents(s: &State, kinds: &[IncidentKind]) -> Vec<Incident> {
    s.incidents()
        .into_iter()
        .filter(|i| kinds.contains(&i.kind))
        .collect()
}

/// A report of flow `flow` whose spine 101 (port 2) shows `occ`, at `t`, with the Q flag `q`.
fn queue_sample(flow: u16, occ: u32, t: u64, q: bool) -> Record {
    let mut r = last_record(&Rep::new(flow, &[LEAF1, H(101, 2, 900, occ)], LEAF2).datagram());
    r.time_ns = t;
    r.congested = q;
    r
}

const US: u64 = 1_000;
const QUEUE: IncidentPlace = IncidentPlace {
    node: Some(101),
    port: Some(2),
    queue: Some(0),
    peer_node: None,
    peer_port: None,
    hw_id: None,
};

#[test]
fn a_flapping_queue_is_one_incident_with_every_episode_counted() {
    let s = state();
    let mut t = 0;
    let mut peak = 0;
    // 200 episodes: two congested samples 10 µs apart, then a low one, every 100 µs.
    for k in 0..200u32 {
        let occ = 3000 + k;
        peak = peak.max(occ);
        s.process(&queue_sample(1 + (k % 3) as u16, occ, t, false));
        s.process(&queue_sample(1, occ - 1, t + 10 * US, false));
        s.process(&queue_sample(1, 100, t + 50 * US, false));
        t += 100 * US;
    }
    let congestion = [IncidentKind::Congestion, IncidentKind::Microburst];
    let all = incidents(&s, &congestion);
    assert_eq!(all.len(), 1, "{all:#?}");
    let i = &all[0];
    assert_eq!(i.place, QUEUE);
    assert_eq!(i.counts.episodes, 200);
    assert_eq!(i.counts.samples, 400, "every congested sample");
    assert_eq!(
        i.peak.map(|p| (p.value, p.unit)),
        Some((u64::from(peak), Unit::Occupancy))
    );
    assert_eq!(i.threshold, Some(1000));
    assert_eq!(i.start_ns, 0);
    assert_eq!(i.flows.len(), 3, "the flows that filled the queue");
    let share: f64 = i.flows.iter().filter_map(|f| f.share).sum();
    assert!((share - 1.0).abs() < 0.01, "{share}");
    // One start and one end event, not 200 of each.
    assert_eq!(events(&s, EventKind::CongestionStart).len(), 1);
    assert_eq!(
        events(&s, EventKind::Microburst).len() + events(&s, EventKind::CongestionEnd).len(),
        1
    );
    // Each episode was short: a run of microbursts.
    assert_eq!(i.kind, IncidentKind::Microburst);
    assert_eq!(i.state, IncidentState::Resolved);
    assert_eq!(i.end_reason, Some(EndReason::Normal));
    // A new burst after the merge window (1 s) is a new incident.
    s.process(&queue_sample(1, 4000, t + 2 * S, false));
    assert_eq!(incidents(&s, &congestion).len(), 2);
    assert_eq!(events(&s, EventKind::CongestionStart).len(), 2);
}

#[test]
fn the_thresholds_hysteresis_holds_with_and_without_the_q_flag() {
    // 501 and 499 in turn: within the 1000/500 band nothing starts without the switch's Q.
    let s = state();
    for k in 0..400u64 {
        let occ = if k % 2 == 0 { 501 } else { 499 };
        s.process(&queue_sample(1, occ, k * 10 * US, false));
    }
    s.tick(10 * S);
    assert!(incidents(&s, &[IncidentKind::Congestion, IncidentKind::Microburst]).is_empty());
    assert!(events(&s, EventKind::CongestionStart).is_empty());

    // With Q set the switch may start one above 500 (documented), and the flapping that
    // follows is one incident, one start event.
    let s = state();
    for k in 0..400u64 {
        let occ = if k % 2 == 0 { 501 } else { 499 };
        s.process(&queue_sample(1, occ, k * 10 * US, true));
    }
    s.tick(10 * S);
    let all = incidents(&s, &[IncidentKind::Congestion, IncidentKind::Microburst]);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].counts.episodes, 200);
    assert_eq!(events(&s, EventKind::CongestionStart).len(), 1);
    // Q at or below 500 starts nothing.
    let s = state();
    for k in 0..10u64 {
        s.process(&queue_sample(1, 500, k * 10 * US, true));
    }
    assert!(incidents(&s, &[IncidentKind::Congestion, IncidentKind::Microburst]).is_empty());

    // Without Q: 1000 starts, 501 continues, 500 ends, at 500's time.
    let s = state();
    let readings = [(999, 0), (1000, 1), (700, 2), (501, 3), (500, 4), (999, 5)];
    for (occ, k) in readings {
        s.process(&queue_sample(1, occ, k * 10 * S, false));
    }
    let all = incidents(&s, &[IncidentKind::Congestion, IncidentKind::Microburst]);
    assert_eq!(all.len(), 1);
    let i = &all[0];
    assert_eq!(i.kind, IncidentKind::Congestion, "30 s of congestion");
    assert_eq!((i.start_ns, i.start_uncertainty_ns), (10 * S, 10 * S));
    assert_eq!((i.end_ns, i.end_uncertainty_ns), (Some(40 * S), 10 * S));
    assert_eq!(i.counts.samples, 3);
}

#[test]
fn a_short_burst_before_sparse_samples_reads_as_the_burst_with_its_uncertainty() {
    let s = state();
    s.process(&queue_sample(1, 100, 0, false));
    // A 0.12 ms incast burst, then the next sample 24 ms later.
    for k in 0..4u64 {
        s.process(&queue_sample(
            2 + k as u16,
            4000,
            10 * MS + k * 40 * US,
            false,
        ));
    }
    s.process(&queue_sample(1, 100, 34 * MS, false));
    let mb = events(&s, EventKind::Microburst);
    assert_eq!(mb.len(), 1, "raised at the low sample");
    let ev = mb[0].evidence.to_json();
    assert_eq!(ev["duration_ns"], 120 * US);
    assert_eq!(ev["end_uncertainty_ns"], 24 * MS - 120 * US);
    assert!(events(&s, EventKind::CongestionEnd).is_empty());
    let all = incidents(&s, &[IncidentKind::Microburst]);
    assert_eq!(all.len(), 1);
    let i = &all[0];
    assert_eq!(i.state, IncidentState::Resolved, "resolved at once");
    assert_eq!(i.start_ns, 10 * MS);
    assert_eq!(i.start_uncertainty_ns, 10 * MS);
    assert_eq!(i.end_ns, Some(34 * MS));
    assert_eq!(
        i.end_ns.unwrap() - i.end_uncertainty_ns - i.start_ns,
        120 * US,
        "the burst as its samples show it"
    );
    assert_eq!(i.severity, Severity::Info);
    assert_eq!(i.counts.flows, 4);
}

/// A report from sink 2 (hw_id 0) with sequence number `seq`.
fn seq_report(seq: u32) -> Vec<u8> {
    let mut r = Rep::new(1, &[LEAF1, SPINE_A], LEAF2);
    r.seq = seq;
    r.datagram()
}

#[test]
fn report_loss_is_one_incident_per_burst_with_the_reports_lost() {
    let mut s = state();
    let mut x = 0x9e37_79b9u32;
    let mut lost = 0u64;
    let n = 20_000u32;
    let mut t = 0;
    for seq in 0..n {
        t = u64::from(seq) * 500 * US;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // 20 % lost, never the first or the last two (the last gap counts once a later
        // number continues the one after it).
        if seq > 0 && seq < n - 2 && x.is_multiple_of(5) {
            lost += 1;
            continue;
        }
        feed(&mut s, &seq_report(seq), t);
    }
    s.tick(t + S);
    assert!(lost > 3_500 && lost < 4_500, "{lost}");
    assert_eq!(s.read().reports_lost(), lost);
    let all = incidents(&s, &[IncidentKind::ReportLoss]);
    assert_eq!(all.len(), 1, "one burst of 10 s, one incident");
    let i = &all[0];
    assert_eq!(
        i.counts.reports_lost, lost,
        "in reports, one a group in v2.0 here"
    );
    assert_eq!(
        i.place,
        IncidentPlace {
            node: Some(2),
            hw_id: Some(0),
            ..IncidentPlace::default()
        }
    );
    assert!(i.updates > 1_000);
    let ev = events(&s, EventKind::LostReports);
    assert!(
        !ev.is_empty() && ev.len() <= 11,
        "one event a second per source: {}",
        ev.len()
    );
    // Quiet for incident_quiet_ns: resolved at its last evidence.
    s.tick(t + 10 * S);
    let i = &incidents(&s, &[IncidentKind::ReportLoss])[0];
    assert_eq!(i.state, IncidentState::Resolved);
    assert_eq!(i.end_reason, Some(EndReason::Quiet));
}

#[test]
fn reordered_and_duplicated_reports_leave_no_loss() {
    let mut s = state();
    let mut t = 0;
    let mut send = |seq: u32, s: &mut State| {
        t += 100 * US;
        feed(s, &seq_report(seq), t);
    };
    send(0, &mut s);
    // Pairs swapped: 2, 1, 4, 3, ... and every tenth sent twice.
    let mut dups = 0;
    for k in 1..500u32 {
        let (a, b) = (2 * k, 2 * k - 1);
        send(a, &mut s);
        send(b, &mut s);
        if k % 10 == 0 {
            send(b, &mut s);
            dups += 1;
        }
    }
    s.tick(t + S);
    let v = s.read();
    assert_eq!(v.reports_lost(), 0);
    let st = v.sources().next().unwrap().1;
    assert_eq!((st.reordered, st.duplicates), (499, dups));
    drop(v);
    assert!(events(&s, EventKind::LostReports).is_empty());
    assert!(incidents(&s, &[IncidentKind::ReportLoss]).is_empty());
}

#[test]
fn the_latency_baseline_is_frozen_while_a_fault_lasts() {
    let mut s = state();
    let mut t = 0;
    for _ in 0..40 {
        feed(&mut s, &Rep::new(1, &[LEAF1, SPINE_A], LEAF2).datagram(), t);
        t += MS;
    }
    let base = |s: &State| {
        s.read()
            .node(101)
            .unwrap()
            .ports
            .get(&2)
            .unwrap()
            .latency_baseline()
    };
    let before = base(&s);
    assert!((before - 900.0).abs() < 1.0, "{before}");
    // A lasting fault: 2000 samples at 45 µs, one every 10 µs (20 ms).
    let start = t;
    for k in 0..2000u64 {
        let lat = 45_000 + (k % 7) as u32;
        feed(
            &mut s,
            &Rep::new(2 + (k % 4) as u16, &[LEAF1, H(101, 2, lat, 10)], LEAF2).datagram(),
            t,
        );
        t += 10 * US;
    }
    assert_eq!(base(&s), before, "the baseline did not absorb the fault");
    let all = incidents(&s, &[IncidentKind::Latency]);
    assert_eq!(all.len(), 1);
    let i = &all[0];
    assert_eq!(i.state, IncidentState::Ongoing);
    assert_eq!(
        i.place,
        IncidentPlace {
            node: Some(101),
            port: Some(2),
            ..IncidentPlace::default()
        }
    );
    assert_eq!(i.counts.samples, 2000, "every anomalous sample");
    assert_eq!(i.baseline, Some(900));
    assert_eq!(i.peak.map(|p| p.value), Some(45_006));
    assert_eq!(i.start_ns, start);
    assert_eq!(i.counts.flows, 4);
    // A normal sample ends it, at its time.
    feed(
        &mut s,
        &Rep::new(1, &[LEAF1, SPINE_A], LEAF2).datagram(),
        t + MS,
    );
    let i = &incidents(&s, &[IncidentKind::Latency])[0];
    assert_eq!(i.state, IncidentState::Resolved);
    assert_eq!(i.end_ns, Some(t + MS));
    assert_eq!(i.end_uncertainty_ns, MS + 10 * US);
    assert_eq!(i.end_reason, Some(EndReason::Normal));
}

/// A host's residence: a scheduler stall holds every packet in flight for 6 ms, and they leave
/// together; a real queue keeps every sample high for as long as it lasts.
#[test]
fn a_latency_anomaly_is_an_incident_once_it_lasts() {
    let mut s = State::new(DetectConfig {
        incident_grouping_ns: 0,
        latency_confirm_ns: 20 * MS,
        ..DetectConfig::default()
    });
    let mut t = 0;
    let sample = |s: &mut State, t: u64, lat: u32| {
        feed(
            s,
            &Rep::new(1, &[LEAF1, H(101, 2, lat, 10)], LEAF2).datagram(),
            t,
        );
    };
    for _ in 0..40 {
        sample(&mut s, t, 900);
        t += MS;
    }
    let latency = |s: &State| incidents(s, &[IncidentKind::Latency]);
    // Stalls: five held packets leave within 400 µs, then the next is normal; one every 2 s.
    for _ in 0..3 {
        for k in 0..5 {
            sample(&mut s, t + k * 100 * US, 6_000_000);
        }
        sample(&mut s, t + MS, 900);
        t += 2 * S;
    }
    assert_eq!(
        events(&s, EventKind::LatencyAnomaly).len(),
        3,
        "each stall seen"
    );
    assert!(latency(&s).is_empty(), "{:#?}", latency(&s));
    // Two lone anomalous samples 10 s apart, nothing between: not one anomaly.
    sample(&mut s, t, 6_000_000);
    t += 10 * S;
    sample(&mut s, t, 6_000_000);
    assert!(latency(&s).is_empty(), "{:#?}", latency(&s));
    sample(&mut s, t + MS, 900);
    t += S;
    // Filtered reports of a lasting anomaly: one every 400 ms, all high. Confirmed.
    let sparse = t;
    for _ in 0..3 {
        sample(&mut s, t, 7_000_000);
        t += 400 * MS;
    }
    let all = latency(&s);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!((all[0].start_ns, all[0].counts.samples), (sparse, 3));
    sample(&mut s, t, 900);
    s.tick(t + 10 * S);
    t += 20 * S;
    // A queue: every sample high for 50 ms, one every 100 µs; its peak while unconfirmed.
    let start = t;
    for k in 0..500u32 {
        sample(&mut s, t, 6_000_000 + if k == 100 { 9_000_000 } else { k });
        t += 100 * US;
    }
    let queue = |s: &State| {
        let all = latency(s);
        assert_eq!(all.len(), 2, "{all:#?}");
        all.into_iter()
            .find(|i| i.start_ns == start)
            .expect("from its first sample")
    };
    let i = queue(&s);
    assert_eq!(i.counts.samples, 500, "every anomalous sample");
    assert_eq!(
        i.peak.map(|p| (p.value, p.at_ns)),
        Some((15_000_000, start + 100 * 100 * US))
    );
    assert_eq!(i.state, IncidentState::Ongoing);
    // The port goes quiet while the anomaly lasts (its flows left): the incident resolves, and
    // one stall a minute later is no anomaly of its own.
    s.tick(t + 10 * S);
    t += 60 * S;
    sample(&mut s, t, 6_000_000);
    s.tick(t + S);
    let i = queue(&s);
    assert_eq!(i.state, IncidentState::Resolved);
    assert_eq!(i.counts.samples, 500);
}

#[test]
fn a_link_failure_that_moves_many_flows_is_one_incident_naming_the_link() {
    let mut s = state();
    // 16 flows from leaves 1, 3, 4 and 5 over spine 101 (port 2) to leaf 2; 4 more over 102.
    let flows: Vec<(u16, u32)> = (0..16u16)
        .map(|f| (f, [1, 3, 4, 5][f as usize % 4]))
        .collect();
    let mut t = 0;
    for round in 0..5 {
        for &(f, leaf) in &flows {
            let mut r = Rep::new(f, &[H(leaf, 3, 800, 10), SPINE_A], LEAF2);
            r.seq = round * 100 + u32::from(f);
            feed(&mut s, &r.datagram(), t);
            t += 100 * US;
        }
        for f in 100..104u16 {
            let r = Rep::new(f, &[H(1, 4, 800, 10), H(102, 2, 900, 10)], LEAF2);
            feed(&mut s, &r.datagram(), t);
        }
    }
    assert!(incidents(&s, &[IncidentKind::PathChange]).is_empty());
    // Link 101:2 → 2 fails: every flow moves to spine 102 (the leaves' port 4).
    for &(f, leaf) in &flows {
        let r = Rep::new(f, &[H(leaf, 4, 800, 10), H(102, 2, 900, 10)], LEAF2);
        feed(&mut s, &r.datagram(), t);
        t += 100 * US;
    }
    assert_eq!(events(&s, EventKind::PathChange).len(), 16, "one per flow");
    s.tick(t + 2 * S);
    let all = incidents(&s, &[IncidentKind::PathChange]);
    assert_eq!(all.len(), 1, "{all:#?}");
    let i = &all[0];
    assert_eq!(
        i.place,
        IncidentPlace {
            node: Some(101),
            port: Some(2),
            peer_node: Some(2),
            peer_port: Some(1),
            ..IncidentPlace::default()
        },
        "the link every moved flow left"
    );
    assert_eq!(i.cause.as_deref(), Some("link"));
    assert_eq!(i.counts.flows, 16);
    assert_eq!(i.flows.len(), 16);
    assert_eq!(i.severity, Severity::Critical);
    // A spine that stops adding INT shortens paths: that is no move.
    let mut r = Rep::new(200, &[LEAF1, SPINE_A], LEAF2);
    feed(&mut s, &r.datagram(), t + 3 * S);
    r.path = vec![LEAF1];
    r.ttl = Some(61);
    feed(&mut s, &r.datagram(), t + 3 * S + MS);
    s.tick(t + 5 * S);
    assert_eq!(incidents(&s, &[IncidentKind::PathChange]).len(), 1);
    assert_eq!(events(&s, EventKind::PathChange).len(), 16);
}

#[test]
fn a_node_that_moves_flows_off_all_its_links_is_named() {
    let mut s = state();
    let mut t = 0;
    // Flows 1→2 and 3→4, both over spine 101; it fails and both move to 102.
    let paths = [(1u16, 1u32, 2u32), (2, 3, 4), (3, 1, 4), (4, 3, 2)];
    for &(f, from, to) in &paths {
        let r = Rep::new(
            f,
            &[H(from, 3, 800, 10), H(101, to as u16, 900, 10)],
            H(to, 5, 700, 10),
        );
        feed(&mut s, &r.datagram(), t);
        t += MS;
    }
    for &(f, from, to) in &paths {
        let r = Rep::new(
            f,
            &[H(from, 4, 800, 10), H(102, to as u16, 900, 10)],
            H(to, 5, 700, 10),
        );
        feed(&mut s, &r.datagram(), t);
        t += MS;
    }
    s.tick(t + 2 * S);
    let all = incidents(&s, &[IncidentKind::PathChange]);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].place.node, Some(101));
    assert_eq!(all[0].place.port, None);
    assert_eq!(all[0].cause.as_deref(), Some("node"));
    assert_eq!(all[0].counts.flows, 4);
}

#[test]
fn drops_are_one_incident_per_place_and_reason_counting_reports() {
    let mut s = state();
    for k in 0..50u64 {
        let mut r = Rep::new((k % 5) as u16, &[LEAF1], LEAF2);
        r.drop = Some(if k < 40 { 80 } else { 29 });
        r.seq = k as u32;
        feed(&mut s, &r.datagram(), k * 10 * MS);
    }
    let all = incidents(&s, &[IncidentKind::Drop]);
    assert_eq!(all.len(), 2, "{all:#?}");
    let by = |cause: &str| {
        all.iter()
            .find(|i| i.cause.as_deref() == Some(cause))
            .unwrap()
    };
    let rm = by("routing-miss");
    assert_eq!(rm.counts.reports, 10);
    assert_eq!(
        rm.counts.packets_dropped, None,
        "the reports say no packet count"
    );
    assert_eq!((rm.place.node, rm.place.port), (Some(2), Some(5)));
    assert_eq!(rm.severity, Severity::Major);
    assert_eq!(all.iter().map(|i| i.counts.reports).sum::<u64>(), 50);
}

#[test]
fn one_kind_flooding_does_not_push_the_others_out() {
    let s = state();
    // A congestion episode first.
    s.process(&queue_sample(1, 4000, 0, false));
    s.process(&queue_sample(1, 100, MS, false));
    // Its end event once no episode followed within the merge window (1 s).
    s.tick(1_100 * MS);
    // Then drops from 30,000 flows at 400 nodes: 30,000 events, 400 places.
    for k in 0..30_000u32 {
        let node = 1000 + k % 400;
        let mut r = Rep::new(k as u16, &[LEAF1], H(node, 5, 700, 10));
        r.drop = Some(80);
        r.seq = k / 400;
        let mut rec = last_record(&r.datagram());
        rec.time_ns = 1_200 * MS + u64::from(k) * US;
        // Each drop its own flow: no path is seen twice.
        rec.flow.as_mut().unwrap().src_port = k as u16;
        s.process(&rec);
    }
    let log = s.events();
    assert!(log.events().len() <= EVENT_LOG);
    let drops = log
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::Drop)
        .count();
    assert!(drops <= EVENT_LOG && drops > EVENT_KIND_SHARE, "{drops}");
    assert_eq!(
        log.events()
            .iter()
            .filter(|e| e.kind == EventKind::CongestionStart || e.kind == EventKind::Microburst)
            .count(),
        2,
        "the congestion events stay"
    );
    assert!(log.evicted()[&EventKind::Drop] >= 30_000 - EVENT_LOG as u64);
    drop(log);
    let (ongoing, resolved, evicted) = s.with_incidents(|l| {
        (
            l.ongoing(IncidentKind::Drop),
            l.resolved(IncidentKind::Drop),
            l.evicted[IncidentKind::ALL
                .iter()
                .position(|&k| k == IncidentKind::Drop)
                .unwrap()],
        )
    });
    // 400 places in turn through 256 slots: the least recently updated go, counted.
    assert_eq!(ongoing, ONGOING_PER_KIND);
    assert!(resolved <= RESOLVED_PER_KIND);
    assert!(evicted >= 400 - ONGOING_PER_KIND as u64, "{evicted}");
    assert_eq!(incidents(&s, &[IncidentKind::Microburst]).len(), 1, "kept");
}

#[test]
fn changed_incidents_are_handed_over_once_per_change() {
    let s = state();
    s.process(&queue_sample(1, 4000, 0, false));
    let first = s.take_changed_incidents();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].state, IncidentState::Ongoing);
    assert!(
        s.take_changed_incidents().is_empty(),
        "nothing changed since"
    );
    s.process(&queue_sample(1, 100, MS, false));
    let second = s.take_changed_incidents();
    assert_eq!(second.len(), 1);
    assert_eq!(
        (second[0].id, second[0].state),
        (first[0].id, IncidentState::Resolved)
    );
    assert_eq!(second[0].kind, IncidentKind::Microburst);
}

/// The collector's clock runs an hour ahead of the switches': every time in an incident and
/// an event is the switches', the collector's apart in `received_ns`.
#[test]
fn incidents_and_events_keep_switch_time_and_receive_time_apart() {
    const HOUR: u64 = 3_600 * S;
    let mut s = state();
    let send = |occ: u32, switch: u64, s: &mut State| {
        let mut r = Rep::new(1, &[LEAF1, H(101, 2, 900, occ)], LEAF2);
        r.hop_ts = Some(switch);
        feed(s, &r.datagram(), switch + HOUR);
    };
    send(100, 10 * S, &mut s);
    send(4000, 11 * S, &mut s);
    send(100, 11 * S + MS, &mut s);
    let i = &incidents(&s, &[IncidentKind::Microburst])[0];
    assert_eq!((i.start_ns, i.end_ns), (11 * S, Some(11 * S + MS)));
    assert_eq!(i.received_ns, Some(11 * S + HOUR));
    // A path change: the flow moves to spine 102.
    let mut r = Rep::new(1, &[LEAF1, H(102, 2, 900, 10)], LEAF2);
    r.hop_ts = Some(11 * S + 2 * MS);
    feed(&mut s, &r.datagram(), 11 * S + 2 * MS + HOUR);
    s.tick(13 * S + HOUR);
    let i = &incidents(&s, &[IncidentKind::PathChange])[0];
    assert_eq!(i.start_ns, 11 * S + 2 * MS);
    assert_eq!(i.received_ns, Some(11 * S + 2 * MS + HOUR));
    for kind in [
        EventKind::CongestionStart,
        EventKind::Microburst,
        EventKind::PathChange,
    ] {
        let e = &events(&s, kind)[0];
        assert!(e.time_ns < 12 * S, "{e:?}");
        assert!(e.received_ns.unwrap() > HOUR, "{e:?}");
    }
}

/// A congestion lasting longer than `incident_quiet_ns` stays one ongoing incident that shows
/// its samples and peak while it lasts, and ends at the low sample.
#[test]
fn a_long_congestion_is_updated_while_it_lasts() {
    let s = state();
    let mut t = 0;
    for k in 0..8_000u32 {
        s.process(&queue_sample(1 + (k % 2) as u16, 2000 + k % 500, t, false));
        t += MS;
    }
    let i = &incidents(&s, &[IncidentKind::Congestion])[0];
    assert_eq!(i.state, IncidentState::Ongoing);
    assert!(i.counts.samples > 7_800, "{}", i.counts.samples);
    assert_eq!(i.peak.map(|p| p.value), Some(2499));
    assert!(i.last_update_ns > 7 * S);
    s.process(&queue_sample(1, 100, t, false));
    let all = incidents(&s, &[IncidentKind::Congestion]);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state, IncidentState::Resolved);
    assert_eq!(all[0].counts.samples, 8_000);
    assert_eq!(all[0].counts.episodes, 1);
    assert_eq!(all[0].end_ns, Some(t));
    assert_eq!(all[0].flows.len(), 2);
}
