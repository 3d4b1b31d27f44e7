//! One scenario per fault: the simulated fabric (real node code at every switch) reports to the
//! collector, which must raise the matching event at the right place — and a clean run must not.

use std::sync::Arc;

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::{DetectConfig, Event, EventKind, FlowRef, RecordBatch};
use intscope_node::Mode;
use intscope_sim::{Fabric, Fault, Scheduled, SimConfig, default_mix};

const MS: u64 = 1_000_000;

fn run(mode: Mode, faults: Vec<Scheduled>, until_ms: u64) -> (Fabric, Arc<Collector>) {
    let cfg = SimConfig {
        mode,
        ..SimConfig::default()
    };
    run_with(cfg, faults, until_ms)
}

fn run_with(cfg: SimConfig, faults: Vec<Scheduled>, until_ms: u64) -> (Fabric, Arc<Collector>) {
    let mut fabric = Fabric::new(cfg).unwrap();
    for f in default_mix(fabric.topology(), 48, 7, until_ms * MS) {
        fabric.add_flow(f);
    }
    for f in faults {
        fabric.schedule(f);
    }
    let collector = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        // Runs are tens of milliseconds: join per-hop reports and close episodes of queues the
        // switches' report filters went quiet on within a few.
        detect: DetectConfig {
            join_window_ns: 10 * MS,
            episode_quiet_ns: 5 * MS,
            ..DetectConfig::default()
        },
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut batch = RecordBatch::default();
    let mut t = 0;
    while t < until_ms * MS {
        t += 5 * MS;
        fabric.run(t);
        for r in fabric.take_reports() {
            collector.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
    }
    // Traffic is over: what the switches' filters left open closes, and the incidents
    // still gathering their symptoms are published.
    collector.tick(until_ms * MS + 20 * MS);
    collector.state.finish_incidents();
    let s = &collector.stats;
    assert_eq!(
        s.malformed.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "every simulated report decodes"
    );
    (fabric, collector)
}

fn events(c: &Collector, kind: EventKind) -> Vec<Event> {
    c.state
        .events()
        .events()
        .iter()
        .filter(|e| e.kind == kind)
        .cloned()
        .collect()
}

/// No event of these kinds was raised.
fn assert_no_events(c: &Collector, kinds: &[EventKind]) {
    for &k in kinds {
        assert!(events(c, k).is_empty(), "{k:?}: {:?}", events(c, k).first());
    }
}

fn at(from_ms: u64, fault: Fault) -> Scheduled {
    Scheduled {
        from_ns: from_ms * MS,
        until_ns: u64::MAX,
        fault,
    }
}

#[test]
fn a_clean_fabric_raises_no_fault_events() {
    let (fabric, c) = run(Mode::Md, vec![], 100);
    assert!(fabric.stats.delivered > 5_000, "{:?}", fabric.stats);
    assert_no_events(
        &c,
        &[
            EventKind::PathChange,
            EventKind::Drop,
            EventKind::HopLimit,
            EventKind::MtuExceeded,
            EventKind::NonIntHops,
            EventKind::LostReports,
        ],
    );
    let s = c.state.read();
    assert_eq!(s.flow_count(), 48);
    for f in s.flows() {
        assert_eq!(f.path.len(), 3, "leaf, spine, leaf");
        assert!(f.path[1].node_id > 100);
    }
}

#[test]
fn link_down_rehashes_flows_onto_the_other_spine() {
    let (_, c) = run(
        Mode::Md,
        vec![at(50, Fault::LinkDown { leaf: 1, spine: 1 })],
        100,
    );
    let ev = events(&c, EventKind::PathChange);
    assert!(!ev.is_empty(), "flows from leaf 1 over spine 101 move");
    for e in &ev {
        let flow = FlowRef::from(e.flow.as_ref().unwrap());
        let (from_1, to_1) = (
            flow.src.starts_with("10.0.1."),
            flow.dst.starts_with("10.0.1."),
        );
        assert!(from_1 || to_1, "only flows from or to leaf 1 move: {e:?}");
        let src_leaf: u32 = flow.src.split('.').nth(2).unwrap().parse().unwrap();
        assert_eq!(
            e.node_id,
            Some(src_leaf),
            "the paths diverge after the ingress leaf"
        );
        assert_eq!(e.evidence.to_json()["old_path"][1]["node_id"], 101);
        assert_eq!(e.evidence.to_json()["new_path"][1]["node_id"], 102);
    }
    assert!(ev.iter().any(|e| e.node_id == Some(1)));
}

#[test]
fn routing_miss_drops_with_the_reason() {
    let (fabric, c) = run(
        Mode::Md,
        vec![at(
            20,
            Fault::RoutingMiss {
                leaf: 1,
                dst_leaf: 2,
            },
        )],
        60,
    );
    assert!(fabric.stats.dropped[&intscope_sim::fabric::reason::ROUTING_MISS] > 0);
    let ev = events(&c, EventKind::Drop);
    assert!(!ev.is_empty());
    for e in &ev {
        assert_eq!(e.node_id, Some(1));
        assert_eq!(e.evidence.to_json()["drop_reason_name"], "routing-miss");
        assert!(
            FlowRef::from(e.flow.as_ref().unwrap())
                .dst
                .starts_with("10.0.2."),
            "{e:?}"
        );
    }
}

#[test]
fn incast_is_a_microburst_with_its_culprits() {
    let (_, c) = run(
        Mode::Md,
        vec![at(
            30,
            Fault::Incast {
                leaf: 3,
                host: 1,
                packets: 30,
            },
        )],
        60,
    );
    let bursts: Vec<Event> = events(&c, EventKind::Microburst)
        .into_iter()
        .chain(events(&c, EventKind::CongestionEnd))
        .filter(|e| e.node_id == Some(3) && e.port == Some(1))
        .collect();
    assert!(
        !bursts.is_empty(),
        "the receiving leaf's host port saw the burst"
    );
    // Reports arrive in time order, as the switches send them: the burst's queue fills and
    // drains between senders' packets, so it may show as several episodes (until the
    // detectors merge flapping, issue #16); together they name the senders.
    let evidence: Vec<serde_json::Value> = bursts.iter().map(|b| b.evidence.to_json()).collect();
    let culprits: Vec<&serde_json::Value> = evidence
        .iter()
        .flat_map(|e| e["culprit_flows"].as_array().unwrap())
        .collect();
    let senders: std::collections::BTreeSet<String> = culprits
        .iter()
        .filter(|c| c["flow"]["dst"] == "10.0.3.1" && c["flow"]["dst_port"] == 9000)
        .map(|c| c["flow"]["src"].to_string())
        .collect();
    assert!(!senders.is_empty(), "{senders:?}");
    // The burst is one incident at that queue, and it names the senders (more than each
    // flapping episode's own top culprits).
    let incidents: Vec<_> = c
        .state
        .incidents()
        .into_iter()
        .filter(|i| {
            matches!(
                i.kind,
                intscope_core::IncidentKind::Microburst | intscope_core::IncidentKind::Congestion
            ) && i.place.node == Some(3)
                && i.place.port == Some(1)
        })
        .collect();
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let named: std::collections::BTreeSet<String> = incidents[0]
        .flows
        .iter()
        .filter(|f| f.flow.dst_port == 9000)
        .map(|f| f.flow.src_ip().to_string())
        .collect();
    assert!(named.len() > 3, "{named:?}");
    assert!(
        culprits
            .iter()
            .all(|c| c["flow"]["dst"] == "10.0.3.1" || c["flow"]["dst_port"] != 9000),
        "incast senders are named"
    );
    for e in &evidence {
        assert!(
            e["culprit_flows"]
                .as_array()
                .unwrap()
                .iter()
                .take(3)
                .all(|c| c["flow"]["dst"] == "10.0.3.1"),
            "the incast flows rank first: {e}"
        );
    }
}

#[test]
fn a_spine_without_int_is_found_from_ttl() {
    let (_, c) = run(Mode::Md, vec![at(0, Fault::NonIntSpine { spine: 1 })], 40);
    let ev = events(&c, EventKind::NonIntHops);
    assert!(!ev.is_empty());
    for e in &ev {
        assert_eq!(e.evidence.to_json()["non_int_hops"], 1, "{e:?}");
        // Placed between the last INT hop (the source's leaf, at its uplink) and the next
        // (the destination's leaf, which found it), not at the destination without a port.
        let leaf = |a: String| -> u32 { a.split('.').nth(2).unwrap().parse().unwrap() };
        let flow = FlowRef::from(e.flow.as_ref().unwrap());
        assert_eq!(e.node_id, Some(leaf(flow.src.clone())), "{e:?}");
        assert!(e.port.is_some(), "{e:?}");
        assert_eq!(
            e.evidence.to_json()["next_int_node"],
            leaf(flow.dst.clone()),
            "{e:?}"
        );
    }
    // One incident for the spine, at an uplink it hides behind (the links cannot name a spine
    // that never reported), the other uplinks its symptoms.
    let incidents: Vec<_> = c
        .state
        .incidents()
        .into_iter()
        .filter(|i| i.kind == intscope_core::IncidentKind::NonIntHops)
        .collect();
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let places: std::collections::HashSet<_> = incidents.iter().map(|i| i.place).collect();
    assert_eq!(places.len(), incidents.len(), "one incident per place");
    assert!(incidents.len() <= 4, "{incidents:?}");
    assert!(
        incidents
            .iter()
            .all(|i| i.place.node.is_some_and(|n| n < 100) && i.place.port.is_some())
    );
    let s = c.state.read();
    assert!(
        s.flows().any(|f| f.path.len() == 2),
        "flows over spine 101 show only the two leaves"
    );
    assert!(
        s.links().all(|((a, _, b, _), _)| (a > 100) != (b > 100)),
        "leaves around the hidden spine are not neighbours: {:?}",
        s.links().map(|(k, _)| k).collect::<Vec<_>>()
    );
    assert!(s.links().any(|((a, ..), _)| a == 102), "spine 102's links");
}

#[test]
fn a_small_mtu_sets_the_m_bit() {
    let small = |spine| at(0, Fault::SmallMtu { spine, mtu: 1400 });
    let (_, c) = run(Mode::Md, vec![small(1), small(2)], 40);
    let ev = events(&c, EventKind::MtuExceeded);
    assert!(
        !ev.is_empty(),
        "elephants of 1400 bytes plus INT exceed 1400"
    );
    let elephants: Vec<String> = default_mix(&SimConfig::default().topology, 48, 7, 40 * MS)
        .iter()
        .filter(|f| f.size == 1400)
        .map(|f| format!("{}:{}", f.src, f.sport))
        .collect();
    for e in &ev {
        let flow = FlowRef::from(e.flow.as_ref().unwrap());
        assert!(
            elephants.contains(&format!("{}:{}", flow.src, flow.src_port)),
            "only elephants are too big: {e:?}"
        );
        // Only the source recorded; the link it left by leads to the spine that had no room.
        assert!(matches!(e.node_id, Some(101 | 102)), "{e:?}");
        assert_eq!(
            e.evidence.to_json()["last_recorded_node"],
            e.evidence.to_json()["path"][0]
        );
        assert_eq!(
            e.evidence.to_json()["reported_by"],
            e.evidence.to_json()["path"][1]
        );
    }
}

#[test]
fn intermediate_reports_keep_paths_whole_where_the_mtu_is_small() {
    let small = |spine| at(0, Fault::SmallMtu { spine, mtu: 1400 });
    let cfg = SimConfig {
        on_mtu_exceeded: intscope_node::config::MtuAction::IntermediateReport,
        ..SimConfig::default()
    };
    let (_, c) = run_with(cfg, vec![small(1), small(2)], 40);
    assert_no_events(
        &c,
        &[
            EventKind::MtuExceeded,
            EventKind::NonIntHops,
            EventKind::PathChange,
        ],
    );
    let s = c.state.read();
    assert_eq!(s.flow_count(), 48);
    for f in s.flows() {
        assert_eq!(
            f.path.len(),
            3,
            "leaf, spine, leaf, elephants included: {:?}",
            f.path
        );
        // The sinks' filters hold back most of their reports (one per flow and second), while
        // intermediate reports always go: heads wait, but never more than the bound.
        assert!(f.waiting_heads() <= 16, "{}", f.waiting_heads());
    }
    let links: Vec<_> = s.links().map(|(k, _)| k).collect();
    assert!(links.len() >= 12, "{links:?}");
}

#[test]
fn a_forwarding_loop_hits_the_hop_limit_and_ttl() {
    let (fabric, c) = run(
        Mode::Md,
        vec![at(
            10,
            Fault::Loop {
                spine: 1,
                leaf: 2,
                dst_leaf: 3,
            },
        )],
        40,
    );
    assert!(fabric.stats.dropped[&intscope_sim::fabric::reason::TTL_ZERO] > 0);
    let limit = events(&c, EventKind::HopLimit);
    assert!(!limit.is_empty(), "the INT hop limit runs out first");
    for e in &limit {
        assert!(
            FlowRef::from(e.flow.as_ref().unwrap())
                .dst
                .starts_with("10.0.3."),
            "{e:?}"
        );
        // Spine 101 and leaf 2 bounce the packet between them: the hop that ran out is one of
        // them.
        assert!(matches!(e.node_id, Some(2 | 101)), "{e:?}");
    }
    let drops = events(&c, EventKind::Drop);
    assert!(
        drops
            .iter()
            .any(|e| e.evidence.to_json()["drop_reason_name"] == "ip-ttl-zero")
    );
}

#[test]
fn mx_and_xd_modes_give_the_same_paths() {
    for mode in [Mode::Mx, Mode::Xd] {
        let (_, c) = run(mode, vec![], 40);
        let s = c.state.read();
        assert_eq!(s.flow_count(), 48, "{mode:?}");
        let three = s.flows().filter(|f| f.path.len() == 3).count();
        assert!(
            three >= 46,
            "{mode:?}: per-hop reports joined into leaf-spine-leaf paths ({three})"
        );
    }
}

/// The default mix, the leaf port to the host its first elephant (200 Mb/s) goes to, and that
/// port slowed to 100 Mb/s from `from_ms` to `until_ms`.
fn slow_port_of_the_first_elephant(
    from_ms: u64,
    until_ms: u64,
) -> (Vec<intscope_sim::FlowSpec>, (u32, u32), Scheduled) {
    let mix = default_mix(&SimConfig::default().topology, 48, 7, 60 * MS);
    let (leaf, host) = intscope_sim::topology::locate(mix[0].dst).unwrap();
    let slow = Scheduled {
        from_ns: from_ms * MS,
        until_ns: until_ms * MS,
        fault: Fault::SlowPort {
            leaf,
            host,
            gbps: 0.1,
        },
    };
    (mix, (leaf, host), slow)
}

#[test]
fn a_slow_port_is_a_long_congestion_episode() {
    let (mix, (leaf, host), slow) = slow_port_of_the_first_elephant(10, 40);
    let (_, c) = run(Mode::Md, vec![slow], 60);
    let at_port = |kind| {
        events(&c, kind)
            .into_iter()
            .filter(|e| e.node_id == Some(leaf) && e.port == Some(host))
            .inspect(|e| assert_eq!(e.queue_id, Some(0), "the port's only queue: {e:?}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(at_port(EventKind::CongestionStart).len(), 1);
    assert!(at_port(EventKind::Microburst).is_empty());
    let end = at_port(EventKind::CongestionEnd);
    assert_eq!(end.len(), 1, "longer than a microburst");
    let d = end[0].evidence.to_json()["duration_ns"].as_u64().unwrap();
    // From the queue's filling (6 ms in) to the end of the fault, plus draining what was queued
    // at the slow rate.
    assert!(
        (20 * MS..=50 * MS).contains(&d),
        "about the fault's 30 ms: {d}"
    );
    let evidence = end[0].evidence.to_json();
    let culprits = evidence["culprit_flows"].as_array().unwrap();
    assert_eq!(
        culprits[0]["flow"]["dst"],
        mix[0].dst.to_string(),
        "the elephant filled it"
    );
}

#[test]
fn ports_report_their_tx_utilization() {
    let (_, (leaf, host), slow) = slow_port_of_the_first_elephant(5, 60);
    // Stops while the port is still slow: its last report is from a saturated port.
    let (_, c) = run(Mode::Md, vec![slow], 30);
    let s = c.state.read();
    let util = |node: u32, port: u32| s.node(node).unwrap().ports[&port].tx_util;
    // 0.1 Gb/s sends 8.9 packets of 1400 bytes per 1 ms bin: a saturated port's bins are full
    // but for a packet.
    let slow_util = util(leaf, host).unwrap();
    assert!(
        slow_util >= 880,
        "a saturated port is near 1000 per mille: {slow_util}"
    );
    let others: Vec<u32> = s
        .nodes()
        .flat_map(|(n, ns)| ns.ports.iter().map(move |(p, ps)| ((n, *p), ps.tx_util)))
        .filter(|(at, _)| *at != (leaf, host))
        .map(|(at, u)| u.unwrap_or_else(|| panic!("{at:?} reports no utilization")))
        .collect();
    assert!(others.len() > 10, "{others:?}");
    // 48 flows, five of them 200 Mb/s elephants, on 10 and 40 Gb/s ports.
    assert!(others.iter().all(|u| *u < 100), "{others:?}");
    assert!(others.iter().any(|u| *u > 0), "{others:?}");
}
