//! Runs a simulation file in one INT mode for a range of report-network seeds (`[delivery]
//! seed`) and prints, one line per seed, the incidents other than report loss the collector
//! raised: on a fault-free file each is a false one.
//!
//! ```text
//! nice cargo run --release -p intscope-sim --example sweep -- examples/sim-xd-loss.toml mx 5 1 60
//! ```
//!
//! Arguments: the simulation file, the mode (`md`, `mx`, `xd`), simulated seconds, the first
//! and last seed; the odd seeds between them are run (the simulator's draws take `seed | 1`,
//! so an even seed repeats the odd one above it). A sixth argument `mix` varies the traffic
//! mix's seed instead.

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::{IncidentKind, RecordBatch};
use intscope_node::Mode;
use intscope_sim::{Fabric, Scenario, mix};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, mode, seconds, first, last, vary_mix) = match &args[..] {
        [f, m, s, a, b] => (f, m, s, a, b, false),
        [f, m, s, a, b, v] if v == "mix" => (f, m, s, a, b, true),
        _ => return Err("usage: sweep FILE.toml md|mx|xd SECONDS FIRST LAST [mix]".into()),
    };
    let base: Scenario = toml::from_str(&std::fs::read_to_string(file)?)?;
    let mode = match mode.as_str() {
        "md" => Mode::Md,
        "mx" => Mode::Mx,
        "xd" => Mode::Xd,
        m => return Err(format!("mode {m}: md, mx or xd").into()),
    };
    let seconds: f64 = seconds.parse()?;
    let end = (seconds * 1e9) as u64;
    let (first, last): (u64, u64) = (first.parse()?, last.parse()?);
    let mut bad = 0;
    let mut runs = 0;
    for seed in (first..=last).filter(|s| s % 2 == 1) {
        runs += 1;
        let mut sc = base.clone();
        if vary_mix {
            sc.seed = seed;
        } else {
            sc.delivery.seed = seed;
        }
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
        let others: Vec<String> = collector
            .state
            .incidents()
            .iter()
            .filter(|i| i.kind != IncidentKind::ReportLoss)
            .map(|i| {
                format!(
                    "{:?} {:?}:{:?}->{:?} {:?} at {} ms, {} flows",
                    i.kind,
                    i.place.node,
                    i.place.port,
                    i.place.peer_node,
                    i.cause,
                    i.start_ns / 1_000_000,
                    i.counts.flows
                )
            })
            .collect();
        bad += usize::from(!others.is_empty());
        println!("seed {seed}: {} {others:?}", others.len());
    }
    println!("{bad} of {runs} seeds raised an incident other than report loss");
    Ok(())
}
