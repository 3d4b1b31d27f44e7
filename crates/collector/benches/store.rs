//! How fast the embedded store commits what a flush takes from the live state: the load
//! generator's v2.0 traffic (4-node paths) until each of `FLOWS` flows has reported, then one
//! flush's batch (every flow changed: a `flows` upsert and a `flow_stats` row each, plus queue and
//! port aggregates) written to a fresh SQLite store, three times (the second and third upsert).
//!
//! `cargo bench -p intscope-collector --bench store -- [FLOWS]` (default 100 000)

mod common;

use std::time::Instant;

use intscope_collector::store::{SqliteStore, StoreStats, collect_batch};
use intscope_core::RowSink;
use intscope_core::loadgen::{self, Generator, LoadConfig};
use intscope_core::{DetectConfig as Thresholds, FlowKeyMode, Record, State, decode_datagram};

fn main() {
    let flows = common::flows_arg(100_000);
    let mut g = Generator::new(LoadConfig::coalesced_v2(flows));
    let cfg = loadgen::detect_config();
    let dir = std::env::temp_dir().join(format!("intscope-store-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(&dir).expect("store");
    let state = State::new(Thresholds::default());
    let (mut rec, mut buf, mut t) = (Record::default(), Vec::new(), 0u64);
    let stats = StoreStats::default();
    let mut last_event = 1;
    let mut rows_per_s = Vec::new();
    for round in 0..3 {
        // Every flow reports again, so every flow is in the flush.
        while state.read().flows_to_store() < flows as usize {
            for _ in 0..1000 {
                g.next_datagram(&mut buf);
                t += 1_000;
                let _ = decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
                    state.process(r)
                });
            }
        }
        let batch = collect_batch(&state, &mut last_event, Vec::new(), &stats);
        let rows = batch.flows.len();
        let with_series = batch.flows.iter().filter(|f| f.interval.is_some()).count();
        let started = Instant::now();
        store.write(&batch).expect("write");
        let took = started.elapsed();
        let rate = rows as f64 / took.as_secs_f64();
        rows_per_s.push(rate);
        println!(
            "{{\"round\": {round}, \"flows\": {rows}, \"flow_stats_rows\": {with_series}, \"events\": {}, \"seconds\": {:.3}, \"flows_per_second\": {rate:.0}}}",
            batch.events.len(),
            took.as_secs_f64()
        );
    }
    rows_per_s.sort_by(f64::total_cmp);
    println!("{{\"median_flows_per_second\": {:.0}}}", rows_per_s[1]);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
