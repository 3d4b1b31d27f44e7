//! INT-MD, INT-MX and INT-XD on one fabric (issue #16): the per-hop reports of MX and XD,
//! filtered by SD-Fabric's rules as the switches send them, join into the same paths and
//! latencies as MD's stacks; fault-free runs raise no path change, a failed link moves exactly
//! the flows that crossed it, and a link losing packets silently is found at its near end.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::{DetectConfig, Event, EventKind, RecordBatch};
use intscope_node::Mode;
use intscope_sim::topology::{Topology, locate, spine_id};
use intscope_sim::{Delivery, Fabric, Fault, FlowSpec, MixShape, Scheduled, SimConfig, mix};

const MS: u64 = 1_000_000;

/// The fabric of the issue: 8 leaves, 4 spines, 4 hosts each.
fn fabric_8x4() -> Topology {
    Topology {
        leaves: 8,
        spines: 4,
        ..Topology::default()
    }
}

/// SD-Fabric's filters with a 50 ms report interval (1 s on switches), so that runs of a
/// fraction of a second see each hop report a flow many times, and the collector's windows
/// scaled alike.
fn sim_config(mode: Mode, delivery: Delivery) -> SimConfig {
    let mut filters = intscope_sim::fabric::sd_fabric_filters();
    filters.interval_ns = 50 * MS;
    SimConfig {
        topology: fabric_8x4(),
        mode,
        filters,
        delivery,
        ..SimConfig::default()
    }
}

fn detect() -> DetectConfig {
    let mut d = DetectConfig {
        join_window_ns: 10 * MS,
        episode_quiet_ns: 5 * MS,
        ..DetectConfig::default()
    };
    // Ten report intervals of the switches above: a flow sends a burst every 80 ms, so a
    // healthy hop reports it at least every 130 ms, and a lost report or two stretches that.
    d.postcards.silent_drop_ns = 500 * MS;
    d.postcards.report_interval_ns = 50 * MS;
    d
}

/// Bursty mice within the links' capacity: 400 flows, 4 packets back to back every 80 ms.
fn flows(end_ns: u64) -> Vec<FlowSpec> {
    let shape = MixShape {
        elephant_every: 0,
        mouse_pps: 50.0,
        burst_packets: 4,
        ..MixShape::default()
    };
    mix(&fabric_8x4(), 400, 16, end_ns, &shape)
}

fn run(
    cfg: SimConfig,
    flows: &[FlowSpec],
    faults: &[Scheduled],
    until_ms: u64,
) -> (Fabric, Arc<Collector>) {
    let mut fabric = Fabric::new(cfg).unwrap();
    for f in flows {
        fabric.add_flow(f.clone());
    }
    for f in faults {
        fabric.schedule(f.clone());
    }
    let collector = Collector::open(CollectorConfig {
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
            collector.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
    }
    for r in fabric.take_all_reports() {
        collector.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
    }
    collector.tick(until_ms * MS + 50 * MS);
    let malformed = collector
        .stats
        .malformed
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(malformed, 0, "every simulated report decodes");
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

fn leaf_of(ip: IpAddr) -> u32 {
    match ip {
        IpAddr::V4(a) => locate(a).map_or(0, |l| l.0),
        IpAddr::V6(_) => 0,
    }
}

/// What the collector holds of each flow: its path (node, ingress, egress), whether partial,
/// its path changes, the median end-to-end latency and the last sample's hop latencies.
#[derive(Debug, Clone)]
struct Seen {
    path: Vec<(u32, Option<u32>, Option<u32>)>,
    partial: bool,
    changes: u64,
    e2e_p50: Option<u64>,
    hop_latency: Vec<Option<u32>>,
    history: Vec<Vec<u32>>,
}

fn seen(c: &Collector) -> BTreeMap<(IpAddr, IpAddr, u16, u16), Seen> {
    let s = c.state.read();
    s.flows()
        .map(|f| {
            let k = (
                f.key.src_ip(),
                f.key.dst_ip(),
                f.key.src_port,
                f.key.dst_port,
            );
            let seen = Seen {
                path: f
                    .path
                    .iter()
                    .map(|h| (h.node_id, h.ingress_if, h.egress_if))
                    .collect(),
                partial: f.path_partial,
                changes: f.path_changes,
                e2e_p50: f.e2e.quantile(0.5),
                hop_latency: f
                    .recent
                    .last()
                    .map(|r| r.hop_latency()[..f.path.len().min(8)].to_vec())
                    .unwrap_or_default(),
                history: f
                    .path_history()
                    .map(|(_, p)| p.iter().map(|h| h.node_id).collect())
                    .collect(),
            };
            (k, seen)
        })
        .collect()
}

/// Flows whose path is not source leaf, a spine, destination leaf.
fn on_a_wrong_path(flows: &BTreeMap<(IpAddr, IpAddr, u16, u16), Seen>) -> Vec<String> {
    flows
        .iter()
        .filter(|(k, f)| {
            let ids: Vec<u32> = f.path.iter().map(|h| h.0).collect();
            !(ids.len() == 3 && ids[0] == leaf_of(k.0) && ids[1] > 100 && ids[2] == leaf_of(k.1))
        })
        .map(|(k, f)| format!("{k:?} {:?} partial={}", f.path, f.partial))
        .collect()
}

/// MD, MX and XD on the same traffic: the same path per flow (nodes and ports), and latencies
/// that agree. Tolerance: MD and MX packets carry their INT bytes over every link (up to 156
/// bytes more than XD's on a 1200-byte packet), so a hop's transmission takes up to 13 % longer;
/// latencies agree within 20 %, the histogram's median (a bucket's midpoint, ±19 %) within one
/// bucket.
#[test]
fn md_mx_and_xd_see_the_same_paths_and_latencies() {
    let until = 400;
    let traffic: Vec<FlowSpec> = flows(until * MS)
        .into_iter()
        .take(120)
        .map(|f| FlowSpec { size: 1200, ..f })
        .collect();
    let by_mode: Vec<(Mode, BTreeMap<_, _>)> = [Mode::Md, Mode::Mx, Mode::Xd]
        .into_iter()
        .map(|m| {
            let (_, c) = run(sim_config(m, Delivery::default()), &traffic, &[], until);
            (m, seen(&c))
        })
        .collect();
    let md = &by_mode[0].1;
    assert_eq!(md.len(), 120);
    assert!(on_a_wrong_path(md).is_empty(), "{:?}", on_a_wrong_path(md));
    for (mode, got) in &by_mode[1..] {
        assert_eq!(got.len(), md.len(), "{mode:?}: every flow");
        let wrong = on_a_wrong_path(got);
        assert!(
            wrong.is_empty(),
            "{mode:?}: {} e.g. {:?}",
            wrong.len(),
            wrong.first()
        );
        for (k, f) in got {
            let m = &md[k];
            assert_eq!(f.path, m.path, "{mode:?} {k:?}: the same nodes and ports");
            assert!(!f.partial && f.changes == 0, "{mode:?} {k:?}: {f:?}");
            let (e, em) = (f.e2e_p50.unwrap(), m.e2e_p50.unwrap());
            assert!(
                e * 3 >= em * 2 && e <= em * 3 / 2,
                "{mode:?} {k:?}: e2e median {e} vs MD's {em}"
            );
            assert_eq!(f.hop_latency.len(), 3, "{mode:?} {k:?}: a latency per hop");
            for (h, (a, b)) in f.hop_latency.iter().zip(&m.hop_latency).enumerate() {
                let (a, b) = (f64::from(a.unwrap()), f64::from(b.unwrap()));
                assert!(
                    (a - b).abs() <= 0.2 * b.max(a) + 50.0,
                    "{mode:?} {k:?} hop {h}: {a} ns vs MD's {b} ns"
                );
            }
        }
    }
}

/// Software switches and hosts (issue #29, item 3): links of 20 to 40 µs (20 µs and up to
/// 20 µs more per packet), the collector's postcard settings left at their defaults (5 µs
/// assumed before a link's delay is learned). MX and XD learn the links' delays from the
/// packets seen at both ends and join every flow into MD's path — complete, in link order,
/// with a latency per hop — and a cable that starts losing packets silently is found at the
/// hop before it, as on a switch fabric.
#[test]
fn postcards_of_software_nodes_join_with_the_default_settings() {
    let until = 1_000;
    let traffic: Vec<FlowSpec> = flows(until * MS).into_iter().take(120).collect();
    let software = |mode| SimConfig {
        topology: Topology {
            link_delay_ns: 20_000,
            link_jitter_ns: 20_000,
            ..fabric_8x4()
        },
        ..sim_config(mode, Delivery::default())
    };
    assert_eq!(
        detect().postcards,
        intscope_core::PostcardConfig {
            silent_drop_ns: 500 * MS,
            report_interval_ns: 50 * MS,
            ..Default::default()
        }
    );
    let (leaf, spine) = (2, 1);
    let cut = Scheduled {
        from_ns: 400 * MS,
        until_ns: u64::MAX,
        fault: Fault::SilentDrop {
            leaf,
            spine,
            share: 1.0,
        },
    };
    let (_, md) = run(software(Mode::Md), &traffic, &[], 300);
    let md = seen(&md);
    assert_eq!(md.len(), 120);
    for mode in [Mode::Xd, Mode::Mx] {
        let (_, c) = run(software(mode), &traffic, &[], 300);
        let got = seen(&c);
        assert_eq!(got.len(), md.len(), "{mode:?}: every flow");
        let wrong = on_a_wrong_path(&got);
        assert!(
            wrong.is_empty(),
            "{mode:?}: {} e.g. {:?}",
            wrong.len(),
            wrong.first()
        );
        for (k, f) in &got {
            assert_eq!(
                f.path, md[k].path,
                "{mode:?} {k:?}: the same nodes and ports"
            );
            assert!(!f.partial && f.changes == 0, "{mode:?} {k:?}: {f:?}");
            assert!(f.e2e_p50.is_some(), "{mode:?} {k:?}: a latency");
            assert!(
                f.hop_latency.len() == 3 && f.hop_latency.iter().all(Option::is_some),
                "{mode:?} {k:?}: a latency per hop: {f:?}"
            );
        }
        let (fabric, c) = run(software(mode), &traffic, std::slice::from_ref(&cut), until);
        assert!(fabric.stats.silent_drops > 50, "{:?}", fabric.stats);
        let ev = events(&c, EventKind::Drop);
        assert!(!ev.is_empty(), "{mode:?}: the cable is found");
        for e in &ev {
            let at = (e.node_id, e.port);
            assert!(
                at == (Some(leaf), Some(fabric_8x4().uplink(spine)))
                    || at == (Some(spine_id(spine)), Some(leaf)),
                "{mode:?}: a silent drop elsewhere: {e:?}"
            );
        }
    }
}

/// The fabric, fault-free, in XD and MX: no path change, no drop, every flow on its
/// path — also when the report network loses, duplicates and reorders reports.
#[test]
fn fault_free_xd_and_mx_raise_no_path_changes() {
    let until = 1_000;
    let traffic = flows(until * MS);
    let lossy = Delivery {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.01,
        ..Delivery::default()
    };
    for (mode, delivery) in [
        (Mode::Xd, Delivery::default()),
        (Mode::Mx, Delivery::default()),
        (Mode::Xd, lossy.clone()),
        (Mode::Mx, lossy),
    ] {
        let lossy = delivery.loss > 0.0;
        let (fabric, c) = run(sim_config(mode, delivery), &traffic, &[], until);
        assert!(
            fabric.stats.max_queue_cells < detect().congestion_start,
            "bursts within capacity: {}",
            fabric.stats.max_queue_cells
        );
        if lossy {
            assert!(fabric.stats.reports_lost > 100, "{:?}", fabric.stats);
            assert!(fabric.stats.reports_reordered > 50 && fabric.stats.reports_duplicated > 50);
        } else {
            // Every switch numbers its reports per (node, hw_id) in the order it sends them:
            // no gap, so no loss, however a packet's later hops were simulated first.
            assert_eq!(c.state.read().reports_lost(), 0, "{mode:?}");
            assert!(events(&c, EventKind::LostReports).is_empty(), "{mode:?}");
        }
        for kind in [EventKind::PathChange, EventKind::Drop] {
            let ev = events(&c, kind);
            assert!(
                ev.is_empty(),
                "{mode:?} lossy={lossy}: {} {kind:?}, e.g. {:?}",
                ev.len(),
                ev.first()
            );
        }
        let flows = seen(&c);
        assert_eq!(flows.len(), 400, "{mode:?}");
        let wrong = on_a_wrong_path(&flows);
        assert!(
            wrong.is_empty(),
            "{mode:?} lossy={lossy}: {} flows on a wrong path, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(3)]
        );
    }
}

/// A fifth of the reports lost: reports of the hop between two others go missing often, and
/// what remains must still not pair them as linked — no path change, no flow on a wrong path.
#[test]
fn a_fifth_of_reports_lost_moves_no_path() {
    let until = 1_000;
    let traffic = flows(until * MS);
    let delivery = Delivery {
        loss: 0.2,
        seed: 5,
        ..Delivery::default()
    };
    for mode in [Mode::Xd, Mode::Mx] {
        let (fabric, c) = run(sim_config(mode, delivery.clone()), &traffic, &[], until);
        assert!(fabric.stats.reports_lost > 1_000, "{:?}", fabric.stats);
        let ev = events(&c, EventKind::PathChange);
        assert!(
            ev.is_empty(),
            "{mode:?}: {} e.g. {:?}",
            ev.len(),
            ev.first()
        );
        let flows = seen(&c);
        assert!(flows.values().all(|f| f.changes == 0), "{mode:?}");
        let wrong: Vec<_> = on_a_wrong_path(&flows)
            .into_iter()
            .filter(|w| !w.ends_with("partial=true"))
            .collect();
        assert!(
            wrong.is_empty(),
            "{mode:?}: {} e.g. {:?}",
            wrong.len(),
            wrong.first()
        );
    }
}

/// A failed link moves the flows it carried — and, as ECMP rehashes over the spines left, some
/// others between the same leaves: exactly those MD's stacks show moving, each once.
#[test]
fn a_failed_link_moves_the_flows_md_sees_moving_and_no_others() {
    let until = 600;
    let traffic = flows(until * MS);
    let (leaf, spine) = (3, 2);
    let down = Scheduled {
        from_ns: 200 * MS,
        until_ns: u64::MAX,
        fault: Fault::LinkDown { leaf, spine },
    };
    let run_in = |mode| {
        let (_, c) = run(
            sim_config(mode, Delivery::default()),
            &traffic,
            std::slice::from_ref(&down),
            until,
        );
        let changes = events(&c, EventKind::PathChange);
        (seen(&c), changes, c)
    };
    let (md, md_events, _) = run_in(Mode::Md);
    let moved: Vec<_> = md
        .iter()
        .filter(|(_, f)| f.changes > 0)
        .map(|(k, _)| *k)
        .collect();
    assert!(moved.len() > 10, "{} flows moved", moved.len());
    for k in &moved {
        assert!(leaf_of(k.0) == leaf || leaf_of(k.1) == leaf, "{k:?}");
        assert_eq!(md[k].changes, 1, "{k:?}: {:?}", md[k].history);
    }
    assert!(
        md.iter()
            .any(|(k, f)| f.history[0].get(1) == Some(&spine_id(spine)) && moved.contains(k)),
        "the flows over the link are among them"
    );
    for mode in [Mode::Xd, Mode::Mx] {
        let (got, ev, c) = run_in(mode);
        for (k, f) in &got {
            assert_eq!(
                f.history, md[k].history,
                "{mode:?} {k:?}: the same paths in turn"
            );
            assert_eq!(f.changes, md[k].changes, "{mode:?} {k:?}");
        }
        assert_eq!(
            ev.len(),
            md_events.len(),
            "{mode:?}: one event per moved flow"
        );
        let drops = events(&c, EventKind::Drop);
        assert!(
            drops.is_empty(),
            "{mode:?}: a moved flow is no silent drop: {:?}",
            drops.first()
        );
        for e in &ev {
            let old = e.evidence.to_json()["old_path"][1]["node_id"].as_u64();
            let new = e.evidence.to_json()["new_path"][1]["node_id"].as_u64();
            assert!(
                old.is_some() && new.is_some() && old != new,
                "{mode:?}: {e:?}"
            );
        }
        assert!(on_a_wrong_path(&got).is_empty());
    }
}

/// A bad cable loses every packet without a drop report: the flows are seen at the hop before
/// it and never after, a `drop` with reason `silent` at that hop's port towards the cable.
#[test]
fn a_silent_drop_is_found_at_the_hop_before_the_cable() {
    let until = 1_000;
    let traffic = flows(until * MS);
    let (leaf, spine) = (2, 1);
    let cut = Scheduled {
        from_ns: 200 * MS,
        until_ns: u64::MAX,
        fault: Fault::SilentDrop {
            leaf,
            spine,
            share: 1.0,
        },
    };
    let topo = fabric_8x4();
    for mode in [Mode::Xd, Mode::Mx] {
        let (fabric, c) = run(
            sim_config(mode, Delivery::default()),
            &traffic,
            std::slice::from_ref(&cut),
            until,
        );
        assert!(fabric.stats.silent_drops > 100, "{:?}", fabric.stats);
        let ev = events(&c, EventKind::Drop);
        assert!(!ev.is_empty(), "{mode:?}");
        let (mut up, mut down) = (0, 0);
        for e in &ev {
            let evidence = e.evidence.to_json();
            assert_eq!(evidence["drop_reason_name"], "silent", "{e:?}");
            assert!(evidence["drop_reason"].is_null());
            let flow = intscope_core::FlowRef::from(e.flow.as_ref().unwrap());
            let (src, dst): (IpAddr, IpAddr) =
                (flow.src.parse().unwrap(), flow.dst.parse().unwrap());
            match (e.node_id, e.port) {
                // Leaf 2 to spine 1: flows from leaf 2.
                (Some(n), Some(p)) if n == leaf && p == topo.uplink(spine) => {
                    assert_eq!(leaf_of(src), leaf, "{e:?}");
                    up += 1;
                }
                // Spine 1 to leaf 2: flows to leaf 2.
                (Some(n), Some(p)) if n == spine_id(spine) && p == leaf => {
                    assert_eq!(leaf_of(dst), leaf, "{e:?}");
                    down += 1;
                }
                _ => panic!("{mode:?}: a silent drop elsewhere: {e:?}"),
            }
        }
        assert!(
            up > 0 && down > 0,
            "{mode:?}: both directions ({up}, {down})"
        );
        // One per flow: the flows over the cable each way.
        let flows = seen(&c);
        let over = flows
            .iter()
            .filter(|(k, f)| {
                f.path.get(1).map(|h| h.0) == Some(spine_id(spine))
                    && (leaf_of(k.0) == leaf || leaf_of(k.1) == leaf)
            })
            .count();
        assert_eq!(
            up + down,
            over,
            "{mode:?}: one event per flow over the cable"
        );
        assert!(
            events(&c, EventKind::PathChange).is_empty(),
            "{mode:?}: nothing moved"
        );
    }
}

/// The done-criterion: ten simulated minutes (`INTSCOPE_SIM_SECONDS` to change) of the
/// fault-free `examples/sim-xd-clean.toml` in XD and in MX, with the collector's defaults and
/// the switches' (SD-Fabric's 1 s report interval), raise no path change and no drop, and
/// every flow ends on its path. Release mode, a few minutes:
/// `cargo test --release -p intscope-sim --test modes -- --ignored`.
#[test]
#[ignore = "minutes of simulation: run in release mode"]
fn ten_fault_free_minutes_of_xd_and_mx_raise_nothing() {
    let seconds: u64 = std::env::var("INTSCOPE_SIM_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/sim-xd-clean.toml"
    );
    let sc: intscope_sim::Scenario =
        toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for mode in [Mode::Xd, Mode::Mx] {
        let end = seconds * 1_000_000_000;
        let mut fabric = Fabric::new(sc.sim_config(mode)).unwrap();
        for f in mix(fabric.topology(), sc.flows, sc.seed, end, &sc.mix) {
            fabric.add_flow(f);
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
            t += 20 * MS;
            fabric.run(t);
            for r in fabric.take_reports() {
                c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
            }
        }
        c.tick(end + 1_000 * MS);
        c.state.finish_incidents();
        for kind in EventKind::ALL {
            let ev = events(&c, kind);
            assert!(
                ev.is_empty(),
                "{mode:?}: {} {kind:?}, e.g. {:?}",
                ev.len(),
                ev.first()
            );
        }
        let incidents = c.state.incidents();
        assert!(
            incidents.is_empty(),
            "{mode:?}: {} incidents, e.g. {:?}",
            incidents.len(),
            incidents.first()
        );
        let flows = seen(&c);
        assert_eq!(flows.len(), 400);
        let wrong = on_a_wrong_path(&flows);
        assert!(
            wrong.is_empty(),
            "{mode:?}: {} e.g. {:?}",
            wrong.len(),
            wrong.first()
        );
        assert!(
            flows.values().all(|f| !f.partial),
            "{mode:?}: every path complete"
        );
    }
}
