//! Decode throughput of a Telemetry Report v2.0 carrying an Ethernet/IPv4/UDP truncated packet
//! with an embedded 5-hop INT-MD stack (Hop ML 6), extracting the flow key and every hop's
//! metadata — against a plain copy of the same bytes, measured in the same run.
//!
//! `cargo bench -p intscope-wire --bench decode`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use intscope_wire::locate::{DetectConfig, Packet, Start};
use intscope_wire::md::MdHeaderRepr;
use intscope_wire::metadata::HopMetadata;
use intscope_wire::report::{GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, Report};
use intscope_wire::shim::{Shim, TcpUdpShimRepr};

#[path = "../tests/common/mod.rs"]
mod common;

const BITMAP: u16 = 0xf180; // node id, L1 ifaces, hop latency, queue, tx util, buffer: 6 words

/// The report datagram (UDP payload) the collector receives.
fn report() -> Vec<u8> {
    let header = MdHeaderRepr {
        version: 2,
        hop_ml: 6,
        remaining_hop_count: 3,
        instructions: BITMAP,
        ..Default::default()
    };
    let hops: Vec<HopMetadata<'static>> = (0..5u32)
        .map(|i| HopMetadata {
            present: BITMAP,
            node_id: Some(5 - i),
            l1_ingress_if: Some(1),
            l1_egress_if: Some(2),
            hop_latency: Some(1000 + i),
            queue_id: Some(0),
            queue_occupancy: Some(100 * i),
            egress_tx_util: Some(50),
            buffer_id: Some(0),
            buffer_occupancy: Some(7),
            ..Default::default()
        })
        .collect();
    let shim = Shim::TcpUdp(TcpUdpShimRepr {
        int_type: 1,
        npt: 1,
        reserved: 0,
        length: 0,
        content: 80,
    });
    let int = common::md_block(shim, header, &hops, &[]);
    let inner = common::eth_ipv4(
        17,
        0,
        &common::udp(1234, 17768, &[int, vec![0; 8]].concat()),
    );
    let words = (8 + 4 + inner.len()).div_ceil(4);
    let mut r = vec![0u8; 20];
    GroupHeaderRepr {
        version: 2,
        hw_id: 0,
        sequence: 1,
        node_id: 9,
    }
    .emit(&mut r[..8]);
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 3,
        report_length: words as u8,
        md_length: 1,
        f: true,
        ..Default::default()
    }
    .emit(&mut r[8..12]);
    IntMainRepr {
        rep_md_bits: 0x1000,
        ..Default::default()
    }
    .emit(&mut r[12..20]);
    r.extend_from_slice(&[0, 0, 0, 5]);
    r.extend_from_slice(&inner);
    r.resize(12 + words * 4, 0);
    r
}

/// Everything a collector needs from one report: flow key, per-hop node/latency/queue.
#[inline(never)]
fn decode(bytes: &[u8], cfg: &DetectConfig) -> u64 {
    let mut acc = 0u64;
    let r = Report::parse(bytes).unwrap();
    for ir in r.individual_reports() {
        let ir = ir.unwrap();
        if let Some(Ok(h)) = ir.hop() {
            acc += u64::from(h.queue().map_or(0, |q| q.1));
        }
        let mut p = Packet::new(ir.inner);
        p.locate(Start::Ethernet, cfg).unwrap();
        let f = p.flow.unwrap();
        acc += u64::from(f.src_port) + u64::from(f.dst_port) + u64::from(f.proto);
        if let Some(b) = p.int_block() {
            for hop in b.stack(None).0 {
                let hop = hop.unwrap();
                acc += u64::from(hop.node_id().unwrap_or(0))
                    + u64::from(hop.hop_latency().unwrap_or(0))
                    + u64::from(hop.queue().map_or(0, |q| q.1));
            }
        }
    }
    acc
}

fn bench(c: &mut Criterion) {
    let bytes = report();
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        ..DetectConfig::default()
    };
    assert!(decode(&bytes, &cfg) > 0);
    let mut g = c.benchmark_group("report_v2_5hop");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode", |b| b.iter(|| decode(black_box(&bytes), &cfg)));
    let r = Report::parse(&bytes).unwrap();
    let ir = r.individual_reports().next().unwrap().unwrap();
    g.bench_function("part_report_only", |b| {
        b.iter(|| {
            let r = Report::parse(black_box(&bytes)).unwrap();
            let ir = r.individual_reports().next().unwrap().unwrap();
            black_box(ir.inner.len())
        })
    });
    g.bench_function("part_packet_only", |b| {
        b.iter(|| {
            let p = Packet::parse(black_box(ir.inner), Start::Ethernet, &cfg).unwrap();
            black_box(p.flow.unwrap().dst_port)
        })
    });
    let p = Packet::parse(ir.inner, Start::Ethernet, &cfg).unwrap();
    let blk = p.int.unwrap().1;
    g.bench_function("part_stack_only", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for hop in black_box(&blk).stack(None).0 {
                let hop = hop.unwrap();
                acc += u64::from(hop.node_id().unwrap_or(0))
                    + u64::from(hop.hop_latency().unwrap_or(0))
                    + u64::from(hop.queue().map_or(0, |q| q.1));
            }
            acc
        })
    });
    let mut buf = vec![0u8; bytes.len()];
    g.bench_function("copy_baseline", |b| {
        b.iter(|| {
            buf.copy_from_slice(black_box(&bytes));
            black_box(&buf);
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(3)).warm_up_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
