//! Runs a simulation file in one INT mode through a collector and prints what the collector
//! made of it, as JSON: events by kind, path changes, and flows whose path is not the fabric's
//! (source leaf, a spine, destination leaf — every flow of a mix crosses the fabric).
//!
//! ```text
//! cargo run --release -p intscope-sim --example measure -- examples/sim-xd-clean.toml xd 600
//! ```
//!
//! Arguments: the simulation file, the mode (`md`, `mx`, `xd`), simulated seconds.

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::RecordBatch;
use intscope_node::Mode;
use intscope_sim::{Fabric, Scenario, mix};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, mode, seconds] = &args[..] else {
        return Err("usage: measure FILE.toml md|mx|xd SECONDS".into());
    };
    let sc: Scenario = toml::from_str(&std::fs::read_to_string(file)?)?;
    let mode = match mode.as_str() {
        "md" => Mode::Md,
        "mx" => Mode::Mx,
        "xd" => Mode::Xd,
        m => return Err(format!("mode {m}: md, mx or xd").into()),
    };
    let seconds: f64 = seconds.parse()?;
    let end = (seconds * 1e9) as u64;
    let mut fabric = Fabric::new(sc.sim_config(mode))?;
    for f in mix(fabric.topology(), sc.flows, sc.seed, end, &sc.mix) {
        fabric.add_flow(f);
    }
    for s in sc.schedule(seconds) {
        fabric.schedule(s);
    }
    let collector = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        ..CollectorConfig::default()
    })?;
    let started = std::time::Instant::now();
    let mut batch = RecordBatch::default();
    let mut t = 0;
    while t < end {
        t = (t + 20_000_000).min(end);
        fabric.run(t);
        for r in fabric.take_reports() {
            collector.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
    }
    for r in fabric.take_all_reports() {
        collector.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
    }
    collector.tick(end + 1_000_000_000);
    // Before the view below, which holds every lock the incidents take.
    let incidents = collector.state.incidents();
    let s = collector.state.read();
    let leaf_of = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(a) => intscope_sim::topology::locate(a).map(|l| l.0),
        std::net::IpAddr::V6(_) => None,
    };
    let mut wrong = Vec::new();
    let mut changed = Vec::new();
    let mut partial = 0;
    let mut flows = 0;
    let mut changes = 0;
    for f in s.flows() {
        flows += 1;
        changes += f.path_changes;
        if f.path_changes > 0 && changed.len() < 3 {
            let history: Vec<String> = f
                .path_history()
                .map(|(t, p)| {
                    format!(
                        "{t}: {:?}",
                        p.iter()
                            .map(|h| (h.node_id, h.ingress_if, h.egress_if))
                            .collect::<Vec<_>>()
                    )
                })
                .collect();
            changed.push(format!(
                "{}->{} {history:?}",
                f.key.src_ip(),
                f.key.dst_ip()
            ));
        }
        partial += usize::from(f.path_partial);
        let ids: Vec<u32> = f.path.iter().map(|h| h.node_id).collect();
        let right = ids.len() == 3
            && Some(ids[0]) == leaf_of(f.key.src_ip())
            && ids[1] > 100
            && Some(ids[2]) == leaf_of(f.key.dst_ip());
        if !right {
            wrong.push(format!("{}->{} {ids:?}", f.key.src_ip(), f.key.dst_ip()));
        }
    }
    let events: std::collections::BTreeMap<String, u64> = s
        .event_counts()
        .iter()
        .map(|(k, v)| (format!("{k:?}"), *v))
        .collect();
    let examples = |kind: &str| -> Vec<serde_json::Value> {
        s.events()
            .iter()
            .filter(|e| format!("{:?}", e.kind) == kind)
            .take(3)
            .map(|e| {
                serde_json::json!({
                    "time_ns": e.time_ns, "node": e.node_id, "port": e.port,
                    "flow": e.flow.map(|f| format!("{}->{}", f.src_ip(), f.dst_ip())),
                    "evidence": e.evidence.to_json(),
                })
            })
            .collect()
    };
    // Incidents by kind and cause ("Drop/silent": silent drops), and where all but report loss are.
    let mut by_kind: std::collections::BTreeMap<String, u64> = Default::default();
    let mut drop_places = Vec::new();
    for i in &incidents {
        let name = match &i.cause {
            Some(c) => format!("{:?}/{c}", i.kind),
            None => format!("{:?}", i.kind),
        };
        *by_kind.entry(name).or_default() += 1;
        if i.kind != intscope_core::IncidentKind::ReportLoss && drop_places.len() < 20 {
            drop_places.push(format!(
                "{:?} {:?}:{:?}->{:?} {:?} {}..{:?} ns, {} flows",
                i.kind,
                i.place.node,
                i.place.port,
                i.place.peer_node,
                i.cause,
                i.start_ns,
                i.end_ns,
                i.counts.flows
            ));
        }
    }
    let st = &fabric.stats;
    let out = serde_json::json!({
        "mode": format!("{mode:?}"),
        "simulated_s": seconds,
        "wall_s": started.elapsed().as_secs_f64(),
        "packets": st.sent,
        "reports": st.reports,
        "silent_drops": st.silent_drops,
        "max_queue_cells": st.max_queue_cells,
        "flows": flows,
        "events": events,
        "incidents": by_kind,
        "incident_places": drop_places,
        "path_changes_counted_on_flows": changes,
        "flows_on_a_wrong_path": wrong.len(),
        "flows_on_a_partial_path": partial,
        "wrong_examples": wrong.iter().take(5).collect::<Vec<_>>(),
        "path_change_examples": examples("PathChange"),
        "changed_flows": changed,
        "drop_examples": examples("Drop"),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
