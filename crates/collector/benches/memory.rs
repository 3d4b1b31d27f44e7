//! Resident memory of the collector's state with many active flows: the load generator's v2.0
//! traffic (8 reports per datagram, 4-node paths) through decode → correlate → detect until every
//! flow has reported `SAMPLES` times, then the process's resident set (`/proc/self/status`)
//! against the same measure before the state existed.
//!
//! `cargo bench -p intscope-collector --bench memory -- [FLOWS]` (default 1 000 000)

mod common;

use intscope_core::loadgen::{self, Generator, LoadConfig};
use intscope_core::{DetectConfig as Thresholds, FlowKeyMode, Record, State, decode_datagram};

/// Reports per flow: enough to fill each flow's bounded recent history.
const SAMPLES: u64 = 40;

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let flows = common::flows_arg(1_000_000);
    let mut g = Generator::new(LoadConfig::coalesced_v2(flows));
    let cfg = loadgen::detect_config();
    let before = rss_bytes();
    let state = State::new(Thresholds::default());
    let mut rec = Record::default();
    let mut buf = Vec::new();
    let (mut reports, mut t) = (0u64, 0u64);
    let target = u64::from(flows) * SAMPLES;
    while reports < target {
        let n = g.next_datagram(&mut buf);
        t += 100;
        let _ = decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
            state.process(r)
        });
        reports += n as u64;
    }
    let after = rss_bytes();
    let per_flow = (after - before) as f64 / f64::from(flows);
    println!(
        "{{\"flows\": {}, \"flows_in_state\": {}, \"reports\": {reports}, \"rss_before_mib\": {:.0}, \"rss_after_mib\": {:.0}, \"state_mib\": {:.0}, \"bytes_per_flow\": {per_flow:.0}}}",
        flows,
        state.read().flow_count(),
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after - before) as f64 / 1048576.0,
    );
}
