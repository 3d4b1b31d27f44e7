//! Storm figures for BENCHMARKS.md (issue 16): the default demo scenario through the collector,
//! events and incidents by kind, with and without report loss; ignored by default:
//! `SECS=60 cargo test -p intscope-sim --test measure_incidents -- --ignored --nocapture`.
use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::{DetectConfig, EventKind, RecordBatch};
use intscope_sim::{Fabric, Scenario, SimConfig, mix};
use std::collections::BTreeMap;

fn run(loss_pct: u64, secs: f64) {
    let sc = Scenario::default();
    let mut f = Fabric::new(SimConfig {
        topology: sc.topology.clone(),
        ..SimConfig::default()
    })
    .unwrap();
    let end = (secs * 1e9) as u64;
    for flow in mix(f.topology(), sc.flows, sc.seed, end, &sc.mix) {
        f.add_flow(flow);
    }
    for s in sc.schedule(secs) {
        f.schedule(s);
    }
    let c = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        detect: DetectConfig::default(),
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut batch = RecordBatch::default();
    let (mut t, mut x, mut dropped, mut sent) = (0u64, 0x9e37_79b9_7f4a_7c15u64, 0u64, 0u64);
    let mut starts_per_queue: BTreeMap<(Option<u32>, Option<u32>), u64> = BTreeMap::new();
    let mut last_id = 0;
    while t < end {
        t += 20_000_000;
        f.run(t);
        for r in f.take_reports() {
            sent += 1;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 100 < loss_pct {
                dropped += 1;
                continue;
            }
            c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
        let log = c.state.events();
        for e in log.events().iter().filter(|e| e.id > last_id) {
            if e.kind == EventKind::CongestionStart {
                *starts_per_queue.entry((e.node_id, e.port)).or_default() += 1;
            }
        }
        last_id = log.next_id() - 1;
    }
    c.tick(end + 2_000_000_000);
    let log = c.state.events();
    let raised: BTreeMap<_, _> = log.counts().iter().map(|(k, v)| (k.label(), *v)).collect();
    let held = log.events().len();
    drop(log);
    println!(
        "loss {loss_pct}% ({dropped} of {sent} report datagrams dropped), {secs} s: events raised {raised:?}; held {held}; max congestion-starts at one queue {:?}; reports_lost {}",
        starts_per_queue.values().max(),
        c.state.read().reports_lost()
    );
    incidents(&c);
}
//INCIDENTS
fn incidents(c: &Collector) {
    let all = c.state.incidents();
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for i in &all {
        *by.entry(format!("{}/{:?}", i.kind.label(), i.state))
            .or_default() += 1;
    }
    println!("  incidents {}: {by:?}", all.len());
    for i in all.iter().filter(|i| i.kind.label() != "latency") {
        println!(
            "   #{} {} {:?} cause={:?} {}..{:?} (+{}) samples={} reports={} lost={} flows={} episodes={} peak={:?}",
            i.id,
            i.kind.label(),
            i.place,
            i.cause,
            i.start_ns / 1_000_000,
            i.end_ns.map(|e| e / 1_000_000),
            i.end_uncertainty_ns,
            i.counts.samples,
            i.counts.reports,
            i.counts.reports_lost,
            i.counts.flows,
            i.counts.episodes,
            i.peak.map(|p| p.value)
        );
    }
    let lat = all.iter().filter(|i| i.kind.label() == "latency").count();
    println!("   + {lat} latency incidents");
}
//END

#[test]
#[ignore]
fn storm_figures() {
    let secs: f64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    run(0, secs);
    run(20, secs);
}

fn run_xd(secs: f64) {
    let mut sc = Scenario::default();
    sc.topology.leaves = 8;
    sc.topology.spines = 4;
    let mut f = Fabric::new(SimConfig {
        topology: sc.topology.clone(),
        mode: intscope_node::Mode::Xd,
        ..SimConfig::default()
    })
    .unwrap();
    let end = (secs * 1e9) as u64;
    for flow in mix(f.topology(), 400, 7, end, &sc.mix) {
        f.add_flow(flow);
    }
    let c = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        detect: DetectConfig::default(),
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut batch = RecordBatch::default();
    let mut t = 0u64;
    while t < end {
        t += 20_000_000;
        f.run(t);
        for r in f.take_reports() {
            c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
    }
    c.tick(end + 2_000_000_000);
    let log = c.state.events();
    let raised: BTreeMap<_, _> = log.counts().iter().map(|(k, v)| (k.label(), *v)).collect();
    drop(log);
    println!("XD fault-free, 8 leaves, 4 spines, 400 flows, {secs} s: events raised {raised:?}");
    incidents(&c);
}

#[test]
#[ignore]
fn xd_figures() {
    let secs: f64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    run_xd(secs);
}
