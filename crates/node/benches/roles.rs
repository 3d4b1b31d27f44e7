//! Per-packet cost of the three roles on INT-MD over UDP (NPT=1), against a plain copy-forward of
//! the same frame in the same run (what any forwarder pays to move the bytes):
//! - source: a 128-byte UDP frame gets shim, header and the first hop;
//! - transit: a frame with 3 hops in the stack (Hop ML 6) gets a fourth;
//! - sink: a 4-hop frame is reported (Report v2.0) and restored.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etherparse::PacketBuilder;
use intscope_node::{
    Node, NodeConfig, Role, SourceEncap, StaticTelemetry, WatchEntry, config::TelemetryModel,
};

/// Node id, L1 interfaces, hop latency, queue, ingress timestamp (2 words): Hop ML 6.
const INSTRUCTIONS: u16 = 0xf800;

fn node(id: u32, role: Role) -> Node {
    Node::new(NodeConfig {
        node_id: id,
        role,
        encap: SourceEncap::UdpPort,
        instructions: INSTRUCTIONS,
        watchlist: vec![WatchEntry::default()],
        ..NodeConfig::default()
    })
    .unwrap()
}

fn tel() -> StaticTelemetry {
    StaticTelemetry {
        model: TelemetryModel::default(),
        time_ns: 1_000_000,
    }
}

fn host_frame() -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
        .udp(40000, 5001)
        .write(&mut f, &[0u8; 128 - 42])
        .unwrap();
    f
}

/// The host frame after a source and `transits` transit hops.
fn with_hops(transits: u32) -> Vec<u8> {
    let mut f = host_frame();
    let t = tel();
    assert_eq!(node(1, Role::Source).process(&mut f, &t).reports.len(), 0);
    for i in 0..transits {
        node(10 + i, Role::Transit).process(&mut f, &t);
    }
    f
}

fn bench(c: &mut Criterion) {
    let t = tel();
    let mut g = c.benchmark_group("node");
    g.throughput(Throughput::Elements(1));
    let mut buf = Vec::with_capacity(2048);
    let cases = [
        ("source", host_frame(), Role::Source),
        ("transit", with_hops(2), Role::Transit),
        ("sink", with_hops(3), Role::Sink),
    ];
    for (name, frame, role) in cases {
        g.bench_function(format!("{name}/copy-forward"), |b| {
            b.iter(|| {
                buf.clear();
                buf.extend_from_slice(black_box(&frame));
                black_box(&buf);
            })
        });
        let mut n = node(7, role);
        // Sanity: the role does its job on this frame.
        buf.clear();
        buf.extend_from_slice(&frame);
        let before = buf.len();
        let out = n.process(&mut buf, &t);
        match role {
            Role::Source => assert!(buf.len() > before),
            Role::Transit => assert_eq!(buf.len(), before + 24, "a 6-word hop"),
            Role::Sink => assert_eq!((&buf, out.reports.len()), (&host_frame(), 1)),
        }
        g.bench_function(format!("{name}/process"), |b| {
            b.iter(|| {
                buf.clear();
                buf.extend_from_slice(black_box(&frame));
                black_box(n.process(&mut buf, &t));
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
