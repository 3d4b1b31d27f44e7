//! Report loss from sequence gaps, with known ground truth: a generated stream with whole report
//! groups (datagrams) left out reads exactly the groups and the reports that were lost.

use intscope_core::loadgen::{Generator, LoadConfig, LoadVersion, detect_config};
use intscope_core::{DetectConfig as Thresholds, FlowKeyMode, Record, State, decode_datagram};

/// Feeds `datagrams` generated datagrams to a fresh state, leaving out `gap` consecutive ones
/// of the source of datagram 50 (from there on). Returns the state and the reports left out.
fn run(cfg: LoadConfig, datagrams: usize, gap: usize) -> (State, u64) {
    let mut g = Generator::new(cfg);
    let s = State::new(Thresholds::default());
    let detect = detect_config();
    let mut out = Vec::new();
    let mut rec = Record::default();
    let (mut victim, mut skipped, mut left_out) = (None, 0, 0u64);
    for i in 0..datagrams {
        let n = g.next_datagram(&mut out);
        let mut records = Vec::new();
        decode_datagram(
            &out,
            (i as u64 + 1) * 1_000_000,
            &detect,
            FlowKeyMode::Innermost,
            &mut rec,
            |r| records.push(r.clone()),
        )
        .unwrap();
        assert_eq!(records.len(), n);
        let node = records[0].node_id;
        if i == 50 {
            victim = Some(node);
        }
        if victim == Some(node) && skipped < gap {
            skipped += 1;
            left_out += n as u64;
            continue;
        }
        for r in &records {
            s.process(r);
        }
    }
    assert_eq!(skipped, gap, "the victim sent enough datagrams");
    (s, left_out)
}

#[test]
fn v2_gap_of_whole_groups_counts_groups_and_their_reports() {
    for (gap, batch) in [(1, 8), (5, 8), (37, 3), (200, 1)] {
        let cfg = LoadConfig {
            batch,
            ..LoadConfig::coalesced_v2(1000)
        };
        let (state, left_out) = run(cfg, 2000, gap);
        let s = state.read();
        assert_eq!(left_out, (gap * batch) as u64);
        assert_eq!(s.report_groups_lost(), gap as u64, "batch {batch}");
        assert_eq!(s.reports_lost(), left_out, "batch {batch}");
        let lost: u64 = s.sources().map(|(_, st)| st.groups_lost).sum();
        assert_eq!(lost, gap as u64);
    }
}

#[test]
fn v05_gap_one_report_a_sequence_number() {
    let cfg = LoadConfig {
        flows: 100,
        hops: 4,
        version: LoadVersion::V05,
        ..LoadConfig::default()
    };
    let (state, left_out) = run(cfg, 2000, 23);
    let s = state.read();
    assert_eq!(left_out, 23);
    assert_eq!((s.report_groups_lost(), s.reports_lost()), (23, 23));
}

#[test]
fn a_stream_without_gaps_loses_nothing() {
    let (state, _) = run(LoadConfig::coalesced_v2(1000), 2000, 0);
    let s = state.read();
    assert_eq!((s.report_groups_lost(), s.reports_lost()), (0, 0));
    let received: u64 = s.sources().map(|(_, st)| st.reports_received).sum();
    let groups: u64 = s.sources().map(|(_, st)| st.groups_received).sum();
    assert_eq!(groups, 2000);
    assert_eq!(received, 2000 * 8);
}
