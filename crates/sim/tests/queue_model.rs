//! The simulator's queue model (issue #29, item 8): every hop latency a switch reports is the
//! time to send what was queued ahead of the packet when it arrived, plus the packet itself —
//! at most its queue occupancy over the port's line rate, and an occupancy within the buffer —
//! under forwarding loops (a packet crosses the same queues dozens of times) and incasts (a
//! burst beyond the port's rate, tail-dropped once the buffer is full), in every mode.

use intscope_core::{FlowKeyMode, Record, decode_datagram};
use intscope_node::Mode;
use intscope_sim::fabric::{CELL_BYTES, reason};
use intscope_sim::topology::Topology;
use intscope_sim::{Fabric, Fault, MixShape, Report, Scheduled, SimConfig, mix};
use intscope_wire::locate::DetectConfig;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

/// The largest frame a switch queues: a 1400-byte packet with eight hops of INT-MD metadata
/// (44 bytes each at the default instructions) and its headers, rounded up.
const MAX_FRAME_BYTES: u64 = 2_000;

/// A loop and an incast in `mode` on a fabric of `buffer_bytes` per port, every packet
/// reported (no filters): the reports and the fabric's counters.
fn run(
    mode: Mode,
    buffer_bytes: u32,
    looping: Fault,
    incast: Fault,
    seed: u64,
) -> (Fabric, Vec<Report>) {
    let topology = Topology {
        buffer_bytes,
        ..Topology::default()
    };
    let mut fabric = Fabric::new(SimConfig {
        topology: topology.clone(),
        mode,
        filters: intscope_node::filter::FilterConfig::default(),
        ..SimConfig::default()
    })
    .expect("a valid fabric");
    let shape = MixShape {
        elephant_every: 4,
        mouse_pps: 1_000.0,
        burst_packets: 4,
        ..MixShape::default()
    };
    for f in mix(&topology, 24, seed, 40 * MS, &shape) {
        fabric.add_flow(f);
    }
    fabric.schedule(Scheduled {
        from_ns: 5 * MS,
        until_ns: 25 * MS,
        fault: looping,
    });
    fabric.schedule(Scheduled {
        from_ns: 15 * MS,
        until_ns: 16 * MS,
        fault: incast,
    });
    let mut reports = Vec::new();
    for step in 1..=8 {
        fabric.run(step * 5 * MS);
        reports.extend(fabric.take_reports());
    }
    reports.extend(fabric.take_all_reports());
    (fabric, reports)
}

/// The line rate of a switch's egress port, Gb/s: leaves' host ports run at the host speed,
/// every other port at the fabric's.
fn gbps(topology: &Topology, node: u32, port: u32) -> f64 {
    if node < 100 && port <= topology.hosts_per_leaf {
        topology.host_gbps
    } else {
        topology.fabric_gbps
    }
}

/// Every hop of every report that breaks the model: a latency longer than sending the
/// occupancy ahead of it and one largest frame takes, or an occupancy beyond the buffer.
fn violations(topology: &Topology, reports: &[Report]) -> (usize, Vec<String>) {
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        ..DetectConfig::default()
    };
    let mut record = Record::default();
    let (mut hops, mut bad) = (0, Vec::new());
    let buffer_cells = topology.buffer_bytes.div_ceil(CELL_BYTES);
    for r in reports {
        let decoded = decode_datagram(
            &r.payload,
            r.time_ns,
            &cfg,
            FlowKeyMode::Innermost,
            &mut record,
            |rec| {
                for h in rec.hops() {
                    let (Some(latency), Some(cells), Some(port)) =
                        (h.hop_latency(), h.queue_occupancy(), h.egress_if())
                    else {
                        continue;
                    };
                    hops += 1;
                    let rate = gbps(topology, h.node_id, port);
                    let ahead_ns = f64::from(cells * CELL_BYTES) * 8.0 / rate;
                    let own_ns = MAX_FRAME_BYTES as f64 * 8.0 / rate;
                    if f64::from(latency) > ahead_ns + own_ns + 1.0 || cells > buffer_cells {
                        bad.push(format!(
                            "node {} port {port}: {latency} ns with {cells} cells at {rate} Gb/s",
                            h.node_id
                        ));
                    }
                }
            },
        );
        assert!(decoded.is_ok(), "every simulated report decodes");
    }
    (hops, bad)
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Md), Just(Mode::Mx), Just(Mode::Xd)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Loops and incasts anywhere, buffers from 30 KB to the default 200 KB.
    #[test]
    fn hop_latency_is_at_most_the_queue_ahead_over_the_line_rate(
        mode in mode(),
        spine in 1..=2u32,
        (leaf, dst_leaf) in (1..=4u32, 1..=3u32).prop_map(|(l, d)| (l, if d >= l { d + 1 } else { d })),
        (incast_leaf, host, packets) in (1..=4u32, 1..=4u32, 20..120u32),
        buffer_bytes in 30_000..=200_000u32,
        seed in 1..1_000u64,
    ) {
        let looping = Fault::Loop { spine, leaf, dst_leaf };
        let incast = Fault::Incast { leaf: incast_leaf, host, packets };
        let (fabric, reports) = run(mode, buffer_bytes, looping, incast, seed);
        let (hops, bad) = violations(fabric.topology(), &reports);
        prop_assert!(hops > 1_000, "{mode:?}: {hops} hops reported");
        prop_assert!(bad.is_empty(), "{mode:?}: {} of {hops} hops, e.g.\n{}", bad.len(),
            bad.iter().take(5).cloned().collect::<Vec<_>>().join("\n"));
        prop_assert!(fabric.stats.max_queue_cells <= buffer_bytes.div_ceil(CELL_BYTES));
    }
}

/// The demo's loop (spine 2 sends leaf 1's traffic back to leaf 3) with an incast of 60
/// packets from each of the twelve other hosts: the loop's packets die of TTL, the incast fills
/// the receiving port's 200 KB buffer and is tail-dropped, and no hop reports a latency its
/// queue cannot explain.
#[test]
fn a_loop_and_an_incast_queue_no_more_than_their_buffers() {
    for mode in [Mode::Md, Mode::Mx, Mode::Xd] {
        let looping = Fault::Loop {
            spine: 2,
            leaf: 3,
            dst_leaf: 1,
        };
        let incast = Fault::Incast {
            leaf: 1,
            host: 2,
            packets: 60,
        };
        let (fabric, reports) = run(mode, 200_000, looping, incast, 7);
        let st = &fabric.stats;
        assert!(
            st.dropped.get(&reason::TTL_ZERO).copied().unwrap_or(0) > 10,
            "{mode:?}: the loop ran: {st:?}"
        );
        assert!(
            st.dropped
                .get(&reason::TRAFFIC_MANAGER)
                .copied()
                .unwrap_or(0)
                > 10,
            "{mode:?}: the incast overflowed: {st:?}"
        );
        let (hops, bad) = violations(fabric.topology(), &reports);
        assert!(hops > 1_000, "{mode:?}: {hops}");
        assert!(
            bad.is_empty(),
            "{mode:?}: {} of {hops}: {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
    }
}
