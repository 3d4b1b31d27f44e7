//! Sharded correlation: the state's content does not depend on how many shards hold it, and
//! threads correlating side by side lose nothing.

mod common;

use common::{H, MS, Rep};
use intscope_core::loadgen::{self, Generator, LoadConfig, LoadVersion};
use intscope_core::{
    DetectConfig as Thresholds, EventKind, FlowKeyMode, RecordBatch, State, decode_into, node_shard,
};
use serde_json::Value;

/// Receive-sized batches of `datagrams` datagrams of `cfg`'s traffic, 10 µs apart.
fn traffic(cfg: LoadConfig, datagrams: usize) -> Vec<Vec<(u64, Vec<u8>)>> {
    let mut g = Generator::new(cfg);
    let all: Vec<(u64, Vec<u8>)> = (0..datagrams)
        .map(|i| {
            let mut buf = Vec::new();
            g.next_datagram(&mut buf);
            (i as u64 * 10_000, buf)
        })
        .collect();
    all.chunks(32).map(<[_]>::to_vec).collect()
}

fn decode(batch: &[(u64, Vec<u8>)], out: &mut RecordBatch) {
    let cfg = loadgen::detect_config();
    for (t, d) in batch {
        decode_into(d, *t, &cfg, FlowKeyMode::Innermost, out).unwrap();
    }
}

/// Feeds `datagrams` (time, bytes) to `one`, record by record, and to each of `sharded`, a
/// datagram's records as a batch.
fn replay(datagrams: &[(u64, Vec<u8>)], one: &State, sharded: &[State]) {
    let mut records = RecordBatch::default();
    for (t, d) in datagrams {
        decode_into(
            d,
            *t,
            &common::detect_cfg(),
            FlowKeyMode::Innermost,
            &mut records,
        )
        .unwrap();
        for r in records.records() {
            one.process(r);
        }
        for s in sharded {
            s.process_batch(records.records());
        }
        records.clear();
    }
}

/// What the state holds to compare: everything, or all but the latency baselines (which
/// the fast path moves by the samples it lets through, which depend on the batches) and a
/// port's or queue's last values (which of the reports of one instant, 8 in a datagram, comes
/// last is a matter of order).
#[derive(Clone, Copy, PartialEq)]
enum Compare {
    Everything,
    ButBaselines,
}

/// Everything the state holds, as sorted lines, without flow and event IDs (which depend on
/// the order shards are visited in).
fn content(s: &State, compare: Compare) -> Vec<String> {
    let v = s.read();
    let mut lines = Vec::new();
    for f in v.flows() {
        lines.push(format!(
            "flow {:?} reports={} drops={} path={:?} changes={} history={} p50={:?} p99={:?} seen={}..{} recent={}",
            f.key,
            f.reports,
            f.drops,
            &*f.path,
            f.path_changes,
            f.path_history().count(),
            f.e2e.quantile(0.5),
            f.e2e.quantile(0.99),
            f.first_seen_ns,
            f.last_seen_ns,
            serde_json::to_string(&f.recent).unwrap(),
        ));
    }
    for (id, n) in v.nodes() {
        lines.push(format!(
            "node {id} sent={} hops={} seen={}..{} drops={:?}",
            n.reports_sent, n.hops_seen, n.first_seen_ns, n.last_seen_ns, n.drops
        ));
        for (p, ps) in &n.ports {
            if compare == Compare::Everything {
                lines.push(format!("port {id}/{p} {ps:?}"));
            } else {
                lines.push(format!(
                    "port {id}/{p} seen={} {:?} drops={} links={:?}",
                    ps.last_seen_ns,
                    ps.interval,
                    ps.drops,
                    ps.links().collect::<Vec<_>>()
                ));
            }
        }
    }
    for (k, q) in v.queues() {
        let last = match compare {
            Compare::Everything => format!("occ={} lat={:?}", q.occupancy, q.hop_latency),
            Compare::ButBaselines => String::new(),
        };
        lines.push(format!(
            "queue {k:?} {last} max={} reports={} seen={} series={:?}",
            q.max_occupancy,
            q.reports,
            q.last_seen_ns,
            q.series().collect::<Vec<_>>()
        ));
    }
    for (k, l) in v.links() {
        lines.push(format!("link {k:?} {l:?}"));
    }
    for (k, st) in v.sources() {
        lines.push(format!("source {k:?} {st:?}"));
    }
    for e in v.events() {
        let mut evidence = e.evidence.to_json();
        if compare == Compare::ButBaselines
            && let Some(o) = evidence.as_object_mut()
        {
            o.remove("baseline");
            o.remove("factor");
        }
        if let Some(culprits) = evidence
            .get_mut("culprit_flows")
            .and_then(Value::as_array_mut)
        {
            for c in culprits {
                c["flow_id"] = Value::Null;
            }
        }
        lines.push(format!(
            "event {} {:?} {:?} {:?} {:?} {:?} {evidence}",
            e.time_ns, e.kind, e.node_id, e.port, e.queue_id, e.flow
        ));
    }
    lines.push(format!(
        "counters {:?} lost={} suppressed={} events={:?} flows={} expired={}",
        v.counters(),
        v.reports_lost(),
        v.events_suppressed(),
        v.event_counts(),
        v.flow_count(),
        v.flows_expired()
    ));
    lines.sort();
    lines
}

/// The state of `datagrams` of `cfg`'s traffic is the same processed record by record, in
/// batches and in four shards: all of it with the fast path off, all but the latency
/// baselines with it on.
fn assert_same_with_shards(cfg: LoadConfig, datagrams: usize) {
    let mut off = Thresholds::default();
    off.fast_path.enabled = false;
    assert_same_with_shards_as(cfg.clone(), datagrams, off, Compare::Everything);
    assert_same_with_shards_as(cfg, datagrams, Thresholds::default(), Compare::ButBaselines);
}

fn assert_same_with_shards_as(
    cfg: LoadConfig,
    datagrams: usize,
    thresholds: Thresholds,
    compare: Compare,
) {
    let batches = traffic(cfg, datagrams);
    let one_by_one = State::new(thresholds.clone());
    let batched = State::new(thresholds.clone());
    let sharded = State::with_shards(thresholds, 4);
    let mut records = RecordBatch::default();
    for b in &batches {
        decode(b, &mut records);
        for r in records.records() {
            one_by_one.process(r);
        }
        batched.process_batch(records.records());
        sharded.process_batch(records.records());
        records.clear();
    }
    let end = batches.last().and_then(|b| b.last()).map_or(0, |d| d.0) + 1_000_000_000;
    for s in [&one_by_one, &batched, &sharded] {
        s.tick(end);
    }
    let reference = content(&one_by_one, compare);
    let events = reference.iter().filter(|l| l.starts_with("event")).count();
    assert!(events > 20, "the traffic raises events: {events}");
    for (name, s) in [("batched", &batched), ("four shards", &sharded)] {
        let got = content(s, compare);
        let first_difference = reference
            .iter()
            .zip(&got)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("\n  one shard: {a}\n  {name}: {b}"));
        assert!(
            got == reference,
            "{name}: {} lines, one shard {}{}",
            got.len(),
            reference.len(),
            first_difference.unwrap_or_default()
        );
    }
}

#[test]
fn coalesced_v2_state_does_not_depend_on_the_shards() {
    // Drops and queue build-ups at the spines: drop, congestion and microburst events with
    // culprit flows from every shard.
    assert_same_with_shards(
        LoadConfig {
            flows: 500,
            hops: 4,
            drop_every: 300,
            burst_every: 2000,
            ..LoadConfig::default()
        },
        8_000,
    );
}

#[test]
fn per_hop_v05_joins_do_not_depend_on_the_shards() {
    // Postcards joined into paths per flow, closed by the window's sweep.
    assert_same_with_shards(
        LoadConfig {
            flows: 300,
            hops: 3,
            version: LoadVersion::V05,
            drop_every: 200,
            burst_every: 1500,
            ..LoadConfig::default()
        },
        20_000,
    );
}

#[test]
fn threads_correlating_side_by_side_count_every_report() {
    let batches = traffic(LoadConfig::coalesced_v2(2_000), 16_000);
    let state = State::with_shards(Thresholds::default(), 2);
    let decoded = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for part in 0..4 {
            let (state, batches, decoded) = (&state, &batches, &decoded);
            scope.spawn(move || {
                let mut records = RecordBatch::default();
                for b in batches.iter().skip(part).step_by(4) {
                    decode(b, &mut records);
                    decoded.fetch_add(records.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    state.process_batch(records.records());
                    records.clear();
                }
            });
        }
    });
    let total = decoded.into_inner();
    assert_eq!(total, 16_000 * 8);
    let v = state.read();
    assert_eq!(v.counters().v2, total);
    assert_eq!(v.flow_count(), 2_000);
    assert_eq!(v.flows().map(|f| f.reports).sum::<u64>(), total);
    assert_eq!(v.nodes().map(|(_, n)| n.reports_sent).sum::<u64>(), total);
    // Four-node paths: every report's stack has four hops.
    assert_eq!(v.nodes().map(|(_, n)| n.hops_seen).sum::<u64>(), total * 4);
    let mut ids: Vec<u64> = v.flows().map(|f| f.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2_000, "flow IDs are unique across shards");
    assert!(ids.iter().all(|&id| v.flow_by_id(id).is_some()));
}

#[test]
fn a_quiet_queue_closes_at_the_same_moment_with_any_shards() {
    // Spine 101's queue congests for 5 ms, then only spine 102 carries traffic: the episode ends
    // by the quiet timeout, at a sweep that other nodes' reports drive, and its end event is
    // raised a merge window (1 s) later, when no episode followed.
    let mut datagrams = Vec::new();
    let mut t = 0;
    for k in 0..20u16 {
        let path = [H(1, 3, 800, 10), H(101, 2, 20_000, 3000)];
        datagrams.push((t, Rep::new(k % 5, &path, H(2, 5, 800, 10)).datagram()));
        t += MS / 4;
    }
    for k in 0..5_000u16 {
        let path = [H(3, 3, 800, 10), H(102, 2, 900, 10)];
        datagrams.push((t, Rep::new(20 + k % 10, &path, H(4, 5, 800, 10)).datagram()));
        t += MS / 4;
    }
    let one = State::new(Thresholds::default());
    let four = [State::with_shards(Thresholds::default(), 4)];
    replay(&datagrams, &one, &four);
    let four = &four[0];
    let ends = |s: &State| -> Vec<(u64, Option<u64>)> {
        s.events()
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::CongestionEnd)
            .map(|e| (e.time_ns, e.received_ns))
            .collect()
    };
    let end = ends(&one);
    assert_eq!(end.len(), 1, "closed by the quiet timeout");
    // Switch time: the last congested sample; closed at the sweep after 50 ms of quiet, raised
    // at the sweep a merge window after that.
    assert_eq!(end[0].0, 19 * MS / 4);
    let raised = end[0].1.unwrap();
    assert!(raised > 1_054 * MS && raised < 1_080 * MS, "{end:?}");
    assert_eq!(ends(four), end);
    assert_eq!(
        content(four, Compare::ButBaselines),
        content(&one, Compare::ButBaselines)
    );
}

#[test]
fn the_hop_after_the_last_recorded_one_is_found_in_any_shard() {
    // Leaf 1 → spine 101 → leaf 2 is learnt; then a report whose stack stops at leaf 1 with
    // the E bit: spine 101 (from leaf 1's links, in leaf 1's shard) is the suspect.
    let datagrams = hop_limit_after_learning(&[1], &[1]);
    let (one, states) = spine_101_suspected_with_one_to_four_shards(&datagrams);
    for s in &states {
        assert_eq!(
            content(s, Compare::ButBaselines),
            content(&one, Compare::ButBaselines),
            "{} shards",
            s.shards()
        );
    }
}

#[test]
fn a_suspect_found_from_two_shards_is_rate_limited_once() {
    // Leaves 1 and 5 both forward to spine 101. The same flow then hits the hop limit twice,
    // 1 ms apart, its stack stopping at leaf 1 and then at leaf 5: both name spine 101 for the
    // same flow, one event. Leaves 1 and 5 sit in different fabric shards for some shard count,
    // where each shard's own rate limit would have logged it twice.
    assert!(
        (2..=4).any(|n| node_shard(1, n) != node_shard(5, n)),
        "the test needs leaves in different shards"
    );
    let datagrams = hop_limit_after_learning(&[1, 5], &[1, 5]);
    spine_101_suspected_with_one_to_four_shards(&datagrams);
}

/// One flow's reports to leaf 2: twenty over leaf → spine 101 (port 3 to 101, the leaves of
/// `learnt` in turn, 10 ms apart), then from 300 ms, 1 ms apart, one per leaf of `flagged` whose
/// stack stops at that leaf with the E bit.
fn hop_limit_after_learning(learnt: &[u32], flagged: &[u32]) -> Vec<(u64, Vec<u8>)> {
    let mut datagrams = Vec::new();
    for k in 0..20u32 {
        let leaf = learnt[k as usize % learnt.len()];
        let path = [H(leaf, 3, 800, 10), H(101, 2, 900, 10)];
        let mut r = Rep::new(4, &path, H(2, 5, 800, 10));
        r.seq = k;
        datagrams.push((u64::from(k) * 10 * MS, r.datagram()));
    }
    for (k, &leaf) in (0u32..).zip(flagged) {
        let mut r = Rep::new(4, &[H(leaf, 3, 800, 10)], H(2, 5, 800, 10));
        r.e = true;
        r.seq = 20 + k;
        datagrams.push((300 * MS + u64::from(k) * MS, r.datagram()));
    }
    datagrams
}

/// `datagrams` replayed into one shard record by record, and into one to four shards a
/// datagram at a time.
fn replay_into_one_to_four_shards(datagrams: &[(u64, Vec<u8>)]) -> (State, Vec<State>) {
    let one = State::new(Thresholds::default());
    let states: Vec<State> = (1..=4)
        .map(|n| State::with_shards(Thresholds::default(), n))
        .collect();
    replay(datagrams, &one, &states);
    (one, states)
}

/// Replays `datagrams` into one shard and into one to four, and checks that each names spine
/// 101, once, as the hop-limit suspect.
fn spine_101_suspected_with_one_to_four_shards(
    datagrams: &[(u64, Vec<u8>)],
) -> (State, Vec<State>) {
    let (one, states) = replay_into_one_to_four_shards(datagrams);
    assert_eq!(hop_limit_suspects(&one), vec![Value::from(101)]);
    for s in &states {
        assert_eq!(
            hop_limit_suspects(s),
            hop_limit_suspects(&one),
            "{} shards",
            s.shards()
        );
    }
    (one, states)
}

/// The suspect node of each hop-limit event, in log order.
fn hop_limit_suspects(s: &State) -> Vec<Value> {
    s.events()
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::HopLimit)
        .map(|e| e.evidence.to_json()["suspect_node"].clone())
        .collect()
}
