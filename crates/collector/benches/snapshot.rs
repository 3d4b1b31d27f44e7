//! What publishing the flow table costs with many flows, when a given share of them changed since
//! the last snapshot: the flow shards' copies made incrementally (`FlowShard::copy`,
//! what the receive threads publish) against every flow copied anew into a reused buffer (what
//! they published before, `FlowView::of` for each flow), in alternating rounds of the same run.
//!
//! `cargo bench -p intscope-collector --bench snapshot -- [FLOWS] [ROUNDS]` (default 1 000 000
//! flows, 5 rounds). One JSON line per share changed: both ways' times per round (ms, each
//! including freeing what the copy before held), their medians and the median per-round ratio.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use intscope_core::loadgen::{self, Generator, LoadConfig};
use intscope_core::{
    DetectConfig as Thresholds, FlowKeyMode, FlowShardSnapshot, FlowState, FlowView, Record, State,
    decode_datagram,
};
use intscope_wire::locate::FlowKey;

/// Records per correlation call, as a receive batch of 64 datagrams of 8 reports.
const BATCH: usize = 512;

/// A path's node IDs, in order of ID (a record's hops and a flow's path list the same nodes).
fn nodes(ids: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = ids.collect();
    v.sort_unstable();
    v
}

/// The state fed until each of `flows` flows has reported, and a record of each path the
/// flows take (a complete, undropped report), to make more reports of any flow with.
fn fed(flows: u32) -> (State, HashMap<Vec<u32>, Record>, u64) {
    let state = State::new(Thresholds::default());
    let cfg = loadgen::detect_config();
    let mut g = Generator::new(LoadConfig::coalesced_v2(flows));
    let mut templates = HashMap::new();
    let (mut buf, mut rec, mut batch, mut t) = (Vec::new(), Record::default(), Vec::new(), 0u64);
    let mut reports = 0u64;
    while !reports.is_multiple_of(100_000) || state.read().flow_count() < flows as usize {
        reports += g.next_datagram(&mut buf) as u64;
        t += 1_000;
        decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
            if !r.dropped && r.drop_reason.is_none() && !r.path_truncated && r.int_hops > 0 {
                templates
                    .entry(nodes(r.hops().iter().map(|h| h.node_id)))
                    .or_insert_with(|| r.clone());
            }
            batch.push(r.clone());
        })
        .unwrap();
        if batch.len() >= BATCH {
            state.process_batch(&batch);
            batch.clear();
        }
    }
    state.process_batch(&batch);
    (state, templates, t)
}

/// Reports one more time to each flow of `keys`, with its own path (so no path changes).
fn touch(state: &State, keys: &[(FlowKey, usize)], templates: &[Record], t: &mut u64) {
    let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
    for chunk in keys.chunks(BATCH) {
        batch.clear();
        for &(key, path) in chunk {
            *t += 100;
            let mut r = templates[path].clone();
            r.flow = Some(key);
            r.time_ns = *t;
            batch.push(r);
        }
        state.process_batch(&batch);
    }
}

/// What publishing did before: every flow's row made anew into a buffer kept between copies,
/// and the ID index sorted.
fn copy_all(state: &State, rows: &mut Vec<FlowView>, by_id: &mut Vec<(u64, u32)>) {
    state.each_flow_shard(|shard| {
        rows.clear();
        rows.extend(shard.flows.values().map(FlowView::of));
        by_id.clear();
        by_id.extend(rows.iter().enumerate().map(|(i, r)| (r.id, i as u32)));
        by_id.sort_unstable();
    });
}

/// What publishing does now: each flow shard's copy made from its last one, the last one let go.
fn refresh(state: &State, held: &mut Vec<Arc<FlowShardSnapshot>>) {
    let mut next = Vec::new();
    state.each_flow_shard(|shard| next.push(shard.copy()));
    // The copy before is freed as the receive thread lets go of the old snapshot.
    *held = next;
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let flows = common::flows_arg(1_000_000);
    let rounds: usize = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .nth(1)
        .unwrap_or(5);
    let started = Instant::now();
    let (state, templates, mut t) = fed(flows);
    let (paths, templates): (Vec<Vec<u32>>, Vec<Record>) = templates.into_iter().unzip();
    // Every flow with its path's template, in slot order.
    let keys: Vec<(FlowKey, usize)> = state
        .read()
        .flows()
        .map(|f: &FlowState| {
            let path = nodes(f.path.iter().map(|h| h.node_id));
            (f.key, paths.iter().position(|p| *p == path).unwrap_or(0))
        })
        .collect();
    eprintln!(
        "{} flows, {} paths, fed in {:.1} s",
        keys.len(),
        paths.len(),
        started.elapsed().as_secs_f64(),
    );
    let (mut rows, mut by_id, mut held) = (Vec::new(), Vec::new(), Vec::new());
    // The first copies (and the buffers they fill) are made before any is timed.
    copy_all(&state, &mut rows, &mut by_id);
    refresh(&state, &mut held);
    let mut pick = 0x9e37_79b9_7f4a_7c15u64;
    for percent in [1u64, 10, 100] {
        // A different random share of the flows for each copy, scattered over the slots.
        let mut some = |n: u64| -> Vec<(FlowKey, usize)> {
            if n == 100 {
                return keys.clone();
            }
            keys.iter()
                .filter(|_| {
                    pick ^= pick << 13;
                    pick ^= pick >> 7;
                    pick ^= pick << 17;
                    pick % 100 < n
                })
                .copied()
                .collect()
        };
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for incremental in [round % 2 == 0, round % 2 == 1] {
                let changed = some(percent);
                touch(&state, &changed, &templates, &mut t);
                let start = Instant::now();
                if incremental {
                    refresh(&state, &mut held);
                    after.push(ms(start.elapsed()));
                } else {
                    copy_all(&state, &mut rows, &mut by_id);
                    before.push(ms(start.elapsed()));
                    // The changes it copied are not the next incremental copy's.
                    refresh(&state, &mut held);
                }
            }
        }
        let ratios: Vec<f64> = before.iter().zip(&after).map(|(b, a)| b / a).collect();
        println!(
            "{}",
            serde_json::json!({
                "flows": keys.len(),
                "changed_percent": percent,
                "full_copy_ms": before,
                "incremental_ms": after,
                "full_copy_median_ms": median(before.clone()),
                "incremental_median_ms": median(after.clone()),
                "full_over_incremental_median": (median(ratios) * 100.0).round() / 100.0,
            })
        );
    }
}
