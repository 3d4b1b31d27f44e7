//! The demo's fabric (`intscope demo`: the built-in scenario, its flows and its eight scripted
//! faults within a minute) through a collector with the default settings, in every mode: one
//! incident per fault, at the fault's place, starting within a second of it, and nothing else
//! (issue 29). INT-MX and INT-XD add nothing at a transit hop, so the small MTU fault (no room
//! for a spine's metadata) leaves no trace there: seven incidents in those modes.
//! `DEMO_DETAIL=1` prints the incidents' flows and evidence.

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::{Incident, IncidentKind, RecordBatch};
use intscope_node::Mode;
use intscope_sim::{Fabric, Fault, Scenario, Scheduled, mix};

/// The demo's run: `secs` of its scenario, reports into a collector as `intscope demo` hands
/// them over (the fabric's own time), then the input's end.
fn demo(mode: Mode, secs: f64) -> (Vec<Incident>, Vec<Scheduled>) {
    let sc = Scenario::default();
    let mut f = Fabric::new(sc.sim_config(mode)).unwrap();
    let end = (secs * 1e9) as u64;
    for flow in mix(f.topology(), sc.flows, sc.seed, end, &sc.mix) {
        f.add_flow(flow);
    }
    let faults = sc.schedule(secs);
    for s in &faults {
        f.schedule(s.clone());
    }
    let c = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut batch = RecordBatch::default();
    let mut t = 0;
    while t < end {
        t += 20_000_000;
        f.run(t);
        for r in f.take_reports() {
            c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
        c.tick(t);
    }
    for r in f.take_all_reports() {
        c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
    }
    let d = &c.config.detect;
    c.tick(end + d.join_window_ns.max(d.episode_quiet_ns) + 1);
    c.state.finish_incidents();
    (c.state.incidents(), faults)
}

/// The incident a fault of the demo must raise in `mode` (kind, node, port, cause), or `None`
/// where the mode cannot see it.
fn expected(
    mode: Mode,
    f: &Fault,
) -> Option<(IncidentKind, u32, Option<u32>, Option<&'static str>)> {
    use IncidentKind::*;
    let spine = |s: u32| 100 + s;
    Some(match *f {
        Fault::Incast { leaf, host, .. } => (Microburst, leaf, Some(host), None),
        // The spine's side of the link: the flows left its port to the leaf.
        Fault::LinkDown { leaf, spine: s } => (PathChange, spine(s), Some(leaf), Some("link")),
        Fault::RoutingMiss { leaf, .. } => (Drop, leaf, None, Some("routing-miss")),
        Fault::NonIntSpine { spine: s } => (NonIntHops, spine(s), None, None),
        Fault::SmallMtu { spine: s, .. } if mode == Mode::Md => (Mtu, spine(s), None, None),
        Fault::SmallMtu { .. } => return None,
        Fault::Loop { spine: s, .. } if mode == Mode::Md => (HopLimit, spine(s), None, None),
        Fault::Loop { spine: s, .. } => (Drop, spine(s), None, Some("ip-ttl-zero")),
        Fault::SlowPort { leaf, host, .. } => (Congestion, leaf, Some(host), None),
        ref other => panic!("the demo has a fault this test does not know: {other:?}"),
    })
}

fn show(incidents: &[Incident]) -> String {
    let detail = std::env::var("DEMO_DETAIL").is_ok();
    let mut out = String::new();
    for i in incidents {
        out += &format!(
            "  #{} {} {:?} cause={:?} {}..{:?} ms, {} symptoms\n",
            i.id,
            i.kind.label(),
            (i.place.node, i.place.port, i.place.peer_node),
            i.cause,
            i.start_ns / 1_000_000,
            i.end_ns.map(|e| e / 1_000_000),
            i.symptoms.len()
        );
        if detail {
            out += &format!("    flows={:?} evidence={:?}\n", i.flows, i.evidence);
        }
    }
    out
}

/// Each fault the mode can see is exactly one incident of its kind at its place, starting
/// within a second of the fault; no incident is left over.
fn one_incident_per_fault(mode: Mode) {
    let (incidents, faults) = demo(mode, 60.0);
    let shown = show(&incidents);
    let mut left: Vec<&Incident> = incidents.iter().collect();
    for s in &faults {
        let Some((kind, node, port, cause)) = expected(mode, &s.fault) else {
            continue;
        };
        let matching: Vec<usize> = left
            .iter()
            .enumerate()
            .filter(|(_, i)| {
                i.kind == kind
                    && i.place.node == Some(node)
                    && (port.is_none() || i.place.port == port)
                    && i.cause.as_deref() == cause
                    && i.start_ns >= s.from_ns
                    && i.start_ns < s.from_ns + 1_000_000_000
            })
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "{mode:?}: {:?} from {} ms wants one {} at node {node} port {port:?}; the incidents:\n{shown}",
            s.fault,
            s.from_ns / 1_000_000,
            kind.label()
        );
        left.remove(matching[0]);
    }
    assert!(
        left.is_empty(),
        "{mode:?}: incidents no fault explains: {:?}\nall:\n{shown}",
        left.iter().map(|i| i.id).collect::<Vec<_>>()
    );
}

#[test]
fn the_demo_is_one_incident_per_fault_in_md() {
    one_incident_per_fault(Mode::Md);
}

#[test]
fn the_demo_is_one_incident_per_fault_in_mx() {
    one_incident_per_fault(Mode::Mx);
}

#[test]
fn the_demo_is_one_incident_per_fault_in_xd() {
    one_incident_per_fault(Mode::Xd);
}
