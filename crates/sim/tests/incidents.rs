//! Incidents from simulated faults in INT-MD, INT-MX and INT-XD (issue #16, item 4): each fault
//! is one incident of its kind at the right place, with the right cause and flows, starting and
//! ending within one report interval of the truth; fault-free runs raise none; storms (a flapping
//! queue, a fifth of the reports lost, reordered and duplicated reports) raise a bounded few.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use intscope_collector::detect::DetectConfig;
use intscope_collector::event::FlowRef;
use intscope_collector::incident::{Incident, IncidentKind};
use intscope_collector::ingest::{Collector, CollectorConfig};
use intscope_collector::record::RecordBatch;
use intscope_node::Mode;
use intscope_sim::topology::{Topology, locate, spine_id};
use intscope_sim::{Delivery, Fabric, Fault, FlowSpec, MixShape, Scheduled, SimConfig, mix};

const MS: u64 = 1_000_000;

/// The switches' report interval: a flow's report repeats at least this often while it sends,
/// so a start or end is known to within one interval.
const INTERVAL_NS: u64 = 20 * MS;

const MODES: [Mode; 3] = [Mode::Md, Mode::Mx, Mode::Xd];

fn topology() -> Topology {
    Topology::default()
}

fn sim_config(mode: Mode, delivery: Delivery) -> SimConfig {
    let mut filters = intscope_sim::fabric::sd_fabric_filters();
    filters.interval_ns = INTERVAL_NS;
    SimConfig {
        topology: topology(),
        mode,
        filters,
        delivery,
        ..SimConfig::default()
    }
}

/// The collector's windows scaled to the report interval above.
fn detect() -> DetectConfig {
    let mut d = DetectConfig {
        join_window_ns: 10 * MS,
        episode_quiet_ns: 5 * MS,
        path_correlation_ns: 100 * MS,
        // The simulated report network holds a reordered report back until `reorder_depth`
        // later reports of any switch overtook it: tens of ms where the filters keep reports
        // sparse, so five report intervals.
        report_reorder_ns: 5 * INTERVAL_NS,
        ..DetectConfig::default()
    };
    // Ten report intervals: a healthy hop reports a sending flow at least every interval, and
    // a lost report or two stretches that.
    d.postcards.silent_drop_ns = 10 * INTERVAL_NS;
    d
}

/// Bursty mice within the links' capacity (4 packets back to back, 100 packets/s), and one
/// elephant in ten when `elephants` (1400-byte packets, for the MTU fault).
fn traffic(end_ns: u64, elephants: bool) -> Vec<FlowSpec> {
    let shape = MixShape {
        elephant_every: if elephants { 10 } else { 0 },
        burst_packets: 4,
        ..MixShape::default()
    };
    mix(&topology(), 48, 7, end_ns, &shape)
}

struct Run {
    fabric: Fabric,
    c: Arc<Collector>,
    incidents: Vec<Incident>,
}

impl Run {
    fn of(&self, kind: IncidentKind) -> Vec<&Incident> {
        self.incidents.iter().filter(|i| i.kind == kind).collect()
    }

    /// Every incident, one JSON line each, for failure messages.
    fn dump(&self) -> String {
        self.incidents
            .iter()
            .map(|i| {
                let mut j = i.to_json();
                j["evidence"] = serde_json::Value::Null;
                j.to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn run(
    mode: Mode,
    delivery: Delivery,
    flows: &[FlowSpec],
    faults: &[Scheduled],
    until_ms: u64,
) -> Run {
    let mut fabric = Fabric::new(sim_config(mode, delivery)).unwrap();
    for f in flows {
        fabric.add_flow(f.clone());
    }
    for f in faults {
        fabric.schedule(f.clone());
    }
    let c = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        detect: detect(),
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut batch = RecordBatch::default();
    let mut t = 0;
    while t < until_ms * MS {
        t += 5 * MS;
        fabric.run(t);
        for r in fabric.take_reports() {
            c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
    }
    for r in fabric.take_all_reports() {
        c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
    }
    c.tick(until_ms * MS + 50 * MS);
    c.state.finish_incidents();
    let malformed = c.stats.malformed.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(malformed, 0, "every simulated report decodes");
    let incidents = c.state.incidents();
    Run {
        fabric,
        c,
        incidents,
    }
}

fn at(from_ms: u64, until_ms: u64, fault: Fault) -> Scheduled {
    Scheduled {
        from_ns: from_ms * MS,
        until_ns: if until_ms == u64::MAX {
            u64::MAX
        } else {
            until_ms * MS
        },
        fault,
    }
}

fn leaf_of(ip: &str) -> u32 {
    ip.parse::<Ipv4Addr>()
        .ok()
        .and_then(locate)
        .map_or(0, |l| l.0)
}

fn flow_refs(i: &Incident) -> Vec<FlowRef> {
    i.flows.iter().map(|f| FlowRef::from(&f.flow)).collect()
}

/// Flows whose path the collector saw change.
fn moved_flows(c: &Collector) -> BTreeSet<(IpAddr, IpAddr, u16, u16)> {
    c.state
        .read()
        .flows()
        .filter(|f| f.path_changes > 0)
        .map(|f| {
            (
                f.key.src_ip(),
                f.key.dst_ip(),
                f.key.src_port,
                f.key.dst_port,
            )
        })
        .collect()
}

/// Fault-free bursty traffic raises nothing in any mode, also when the report network
/// duplicates and reorders (but loses nothing).
#[test]
fn fault_free_runs_raise_no_incident() {
    let until = 300;
    let flows = traffic(until * MS, false);
    let shuffled = Delivery {
        duplicate: 0.02,
        reorder: 0.02,
        seed: 3,
        ..Delivery::default()
    };
    for mode in MODES {
        for delivery in [Delivery::default(), shuffled.clone()] {
            let r = run(mode, delivery.clone(), &flows, &[], until);
            assert!(r.fabric.stats.delivered > 1_000, "{:?}", r.fabric.stats);
            if delivery.reorder > 0.0 {
                assert!(
                    r.fabric.stats.reports_reordered > 0 && r.fabric.stats.reports_duplicated > 0,
                    "{:?}",
                    r.fabric.stats
                );
            }
            assert!(
                r.incidents.is_empty(),
                "{mode:?} {delivery:?}: {} incidents\n{}",
                r.incidents.len(),
                r.dump()
            );
            assert_eq!(r.c.state.read().reports_lost(), 0, "{mode:?}");
        }
    }
}

/// A failed leaf→spine link: one path-change incident naming the link, listing the flows that
/// moved, and nothing else.
#[test]
fn a_failed_link_is_one_path_change_naming_it() {
    let until = 300;
    let flows = traffic(until * MS, false);
    let (leaf, spine) = (1, 1);
    let down = at(100, u64::MAX, Fault::LinkDown { leaf, spine });
    for mode in MODES {
        let r = run(
            mode,
            Delivery::default(),
            &flows,
            std::slice::from_ref(&down),
            until,
        );
        let pc = r.of(IncidentKind::PathChange);
        assert_eq!(pc.len(), 1, "{mode:?}\n{}", r.dump());
        let i = pc[0];
        assert_eq!(i.place.node, Some(leaf), "{mode:?}\n{}", r.dump());
        assert_eq!(i.place.port, Some(topology().uplink(spine)), "{mode:?}");
        assert_eq!(i.place.peer_node, Some(spine_id(spine)), "{mode:?}");
        let moved = moved_flows(&r.c);
        assert!(moved.len() > 3, "{mode:?}: {moved:?}");
        let listed: BTreeSet<_> = i
            .flows
            .iter()
            .map(|f| {
                (
                    f.flow.src_ip(),
                    f.flow.dst_ip(),
                    f.flow.src_port,
                    f.flow.dst_port,
                )
            })
            .collect();
        assert_eq!(
            listed, moved,
            "{mode:?}: the incident lists the flows that moved"
        );
        assert_eq!(i.counts.flows, moved.len() as u64);
        for f in flow_refs(i) {
            assert!(
                leaf_of(&f.src) == leaf || leaf_of(&f.dst) == leaf,
                "{mode:?}: {f:?}"
            );
        }
        assert!(
            i.start_ns >= 100 * MS && i.start_ns <= 100 * MS + INTERVAL_NS,
            "{mode:?}: start {} ns",
            i.start_ns
        );
        assert_eq!(r.incidents.len(), 1, "{mode:?}: nothing else\n{}", r.dump());
    }
}

/// A routing miss: one drop incident per (node, port, reason), reason `routing-miss`, at the
/// ingress leaf, with the flows to the unreachable leaf; no path change.
#[test]
fn a_routing_miss_is_one_drop_incident_with_its_reason() {
    let until = 150;
    let flows = traffic(until * MS, false);
    let miss = at(
        50,
        u64::MAX,
        Fault::RoutingMiss {
            leaf: 1,
            dst_leaf: 2,
        },
    );
    for mode in MODES {
        let r = run(
            mode,
            Delivery::default(),
            &flows,
            std::slice::from_ref(&miss),
            until,
        );
        assert!(r.fabric.stats.dropped[&intscope_sim::fabric::reason::ROUTING_MISS] > 0);
        let drops = r.of(IncidentKind::Drop);
        assert!(!drops.is_empty(), "{mode:?}\n{}", r.dump());
        let places: BTreeSet<_> = drops
            .iter()
            .map(|i| (i.place.node, i.place.port, i.cause.clone()))
            .collect();
        assert_eq!(
            places.len(),
            drops.len(),
            "{mode:?}: one per place\n{}",
            r.dump()
        );
        assert_eq!(drops.len(), 1, "{mode:?}\n{}", r.dump());
        let i = drops[0];
        assert_eq!(i.place.node, Some(1), "{mode:?}");
        assert_eq!(i.cause.as_deref(), Some("routing-miss"), "{mode:?}");
        assert!(!i.flows.is_empty());
        for f in flow_refs(i) {
            assert_eq!((leaf_of(&f.src), leaf_of(&f.dst)), (1, 2), "{mode:?} {f:?}");
        }
        assert!(
            i.start_ns >= 50 * MS && i.start_ns <= 50 * MS + INTERVAL_NS,
            "{mode:?}: start {}",
            i.start_ns
        );
        assert!(
            r.of(IncidentKind::PathChange).is_empty(),
            "{mode:?}\n{}",
            r.dump()
        );
        assert_eq!(r.incidents.len(), 1, "{mode:?}\n{}", r.dump());
    }
}

/// An incast: one congestion or microburst incident at the receiving leaf's host port, naming
/// the senders, within one report interval of the burst.
#[test]
fn an_incast_is_one_queue_incident_with_its_senders() {
    let until = 100;
    let flows = traffic(until * MS, false);
    let incast = at(
        40,
        u64::MAX,
        Fault::Incast {
            leaf: 3,
            host: 1,
            packets: 30,
        },
    );
    for mode in MODES {
        let r = run(
            mode,
            Delivery::default(),
            &flows,
            std::slice::from_ref(&incast),
            until,
        );
        let at_host = |i: &&Incident| (i.place.node, i.place.port) == (Some(3), Some(1));
        let queue: Vec<&Incident> = r
            .incidents
            .iter()
            .filter(|i| matches!(i.kind, IncidentKind::Congestion | IncidentKind::Microburst))
            .collect();
        let host: Vec<&Incident> = queue.iter().copied().filter(at_host).collect();
        assert_eq!(
            host.len(),
            1,
            "{mode:?}: one at the host port\n{}",
            r.dump()
        );
        // The senders on other leaves also meet at the spines' ports down to leaf 3: a queue
        // there is true too, and no other place is named.
        for i in &r.incidents {
            let (node, port) = (i.place.node.unwrap_or(0), i.place.port);
            let on_the_way = node > 100 && port == Some(3);
            match i.kind {
                IncidentKind::Congestion | IncidentKind::Microburst | IncidentKind::Latency => {
                    assert!(at_host(&i) || on_the_way, "{mode:?}: {}", r.dump());
                }
                // The 200 KB buffer overflows: the traffic manager drops at the host port.
                IncidentKind::Drop => {
                    assert!(at_host(&i), "{mode:?}\n{}", r.dump());
                    assert_eq!(i.cause.as_deref(), Some("traffic-manager"), "{mode:?}");
                }
                _ => panic!("{mode:?}: {:?}\n{}", i.kind, r.dump()),
            }
        }
        let queue = host;
        let i = queue[0];
        assert_eq!(
            (i.place.node, i.place.port, i.place.queue),
            (Some(3), Some(1), Some(0)),
            "{mode:?}"
        );
        let senders: BTreeSet<String> = flow_refs(i)
            .into_iter()
            .filter(|f| f.dst == "10.0.3.1" && f.dst_port == 9000)
            .map(|f| f.src)
            .collect();
        assert!(senders.len() > 3, "{mode:?}: {senders:?}\n{}", r.dump());
        assert!(
            flow_refs(i)
                .iter()
                .take(3)
                .all(|f| f.dst == "10.0.3.1" && f.dst_port == 9000),
            "{mode:?}: the incast ranks first\n{}",
            r.dump()
        );
        assert!(
            i.start_ns >= 40 * MS && i.start_ns <= 40 * MS + INTERVAL_NS,
            "{mode:?}: start {}",
            i.start_ns
        );
        let end = i.end_ns.expect("the burst drained");
        assert!(
            end > i.start_ns && end <= 40 * MS + INTERVAL_NS,
            "{mode:?}: end {end}"
        );
    }
}

/// A cable that loses packets silently: in MX and XD a `silent` drop at the hop before the
/// cable in each direction; MD's stacks never reach a sink from there, so MD sees nothing.
#[test]
#[ignore = "defect: silent drops (flow_shard) raise `drop` events but no incident"]
fn a_silent_drop_is_found_before_the_cable_in_mx_and_xd() {
    let until = 500;
    let flows = traffic(until * MS, false);
    let (leaf, spine) = (2, 1);
    let cut = at(100, u64::MAX, Fault::SilentDrop { leaf, spine });
    let topo = topology();
    for mode in MODES {
        let r = run(
            mode,
            Delivery::default(),
            &flows,
            std::slice::from_ref(&cut),
            until,
        );
        assert!(r.fabric.stats.silent_drops > 50, "{:?}", r.fabric.stats);
        let drops = r.of(IncidentKind::Drop);
        if mode == Mode::Md {
            assert!(drops.is_empty(), "MD cannot see it\n{}", r.dump());
            assert!(r.incidents.is_empty(), "MD\n{}", r.dump());
            continue;
        }
        let places: BTreeMap<_, _> = drops
            .iter()
            .map(|i| ((i.place.node, i.place.port), *i))
            .collect();
        assert_eq!(drops.len(), 2, "{mode:?}: one per direction\n{}", r.dump());
        let up = places
            .get(&(Some(leaf), Some(topo.uplink(spine))))
            .unwrap_or_else(|| panic!("{mode:?}: leaf→spine\n{}", r.dump()));
        let down = places
            .get(&(Some(spine_id(spine)), Some(leaf)))
            .unwrap_or_else(|| panic!("{mode:?}: spine→leaf\n{}", r.dump()));
        for (i, peer) in [(up, spine_id(spine)), (down, leaf)] {
            assert_eq!(i.cause.as_deref(), Some("silent"), "{mode:?}");
            assert_eq!(i.place.peer_node, Some(peer), "{mode:?}");
            assert!(!i.flows.is_empty());
            assert!(i.start_ns >= 100 * MS, "{mode:?}: {}", i.start_ns);
        }
        for f in flow_refs(up) {
            assert_eq!(leaf_of(&f.src), leaf, "{mode:?} {f:?}");
        }
        for f in flow_refs(down) {
            assert_eq!(leaf_of(&f.dst), leaf, "{mode:?} {f:?}");
        }
        assert!(
            r.of(IncidentKind::PathChange).is_empty(),
            "{mode:?}\n{}",
            r.dump()
        );
    }
}
