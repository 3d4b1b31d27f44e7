//! The collector pipeline without sockets: decode → correlate → detect, on the load generator's
//! traffic (v2.0, 8 reports per datagram, 4-node paths, 10 000 flows): one thread on one shard,
//! and two threads on two shards.
//!
//! `cargo bench -p intscope-collector --bench pipeline`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use intscope_collector::detect::DetectConfig as Thresholds;
use intscope_collector::ingest::{Collector, CollectorConfig, Tally};
use intscope_collector::loadgen::{self, Generator, INT_PORT, LoadConfig, LoadVersion};
use intscope_collector::record::{FlowKeyMode, Record, RecordBatch, decode_datagram};
use intscope_collector::state::State;

/// Datagrams per receive call (the receive threads' default `recv_batch`).
const RECEIVE_BATCH: usize = 64;

/// A collector as `intscope collect --threads <threads>` opens it: one shard of each kind per
/// receive thread.
fn open_collector(threads: usize) -> std::sync::Arc<Collector> {
    Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![INT_PORT],
        threads,
        ..CollectorConfig::default()
    })
    .unwrap()
}

/// As a receive thread does: decode one receive batch, then correlate it.
fn ingest_in_batches(
    collector: &Collector,
    datagrams: &[&[u8]],
    batch: &mut RecordBatch,
    t: &mut u64,
) {
    let src = std::net::IpAddr::from([10, 0, 0, 1]);
    for batch_of in datagrams.chunks(RECEIVE_BATCH) {
        let mut tally = Tally::default();
        for d in batch_of {
            *t += 1000;
            collector.decode_counted(black_box(d), src, *t, batch, &mut tally);
        }
        collector.correlate(batch);
        collector.count(&tally);
    }
}

fn bench(c: &mut Criterion) {
    let mut g = Generator::new(LoadConfig::coalesced_v2(10_000));
    let datagrams: Vec<(Vec<u8>, usize)> = (0..4096)
        .map(|_| {
            let mut b = Vec::new();
            let n = g.next_datagram(&mut b);
            (b, n)
        })
        .collect();
    let reports: usize = datagrams.iter().map(|d| d.1).sum();
    let cfg = loadgen::detect_config();
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(reports as u64));
    let mut rec = Record::default();
    group.bench_function("decode_only", |b| {
        b.iter(|| {
            let mut n = 0;
            for (d, _) in &datagrams {
                n += decode_datagram(
                    black_box(d),
                    1,
                    &cfg,
                    FlowKeyMode::Innermost,
                    &mut rec,
                    |r| {
                        black_box(r.hops().len());
                    },
                )
                .unwrap();
            }
            n
        })
    });
    let state = State::new(Thresholds::default());
    let mut t = 0u64;
    group.bench_function("decode_correlate_detect", |b| {
        b.iter(|| {
            for (d, _) in &datagrams {
                t += 1000;
                decode_datagram(
                    black_box(d),
                    t,
                    &cfg,
                    FlowKeyMode::Innermost,
                    &mut rec,
                    |r| state.process(r),
                )
                .unwrap();
            }
        })
    });
    // The same through the receive threads' path: a whole receive batch decoded, then
    // correlated under one lock with flow states prefetched ahead.
    let collector = open_collector(1);
    let mut batch = RecordBatch::default();
    let payloads: Vec<&[u8]> = datagrams.iter().map(|(d, _)| d.as_slice()).collect();
    group.bench_function("collector_batches", |b| {
        b.iter(|| ingest_in_batches(&collector, &payloads, &mut batch, &mut t))
    });
    // Two receive threads on two shards of each kind, each with half of the receive batches:
    // what sharding buys over one thread (the figure is both threads' reports per second).
    let collector = open_collector(2);
    let halves: Vec<Vec<&[u8]>> = (0..2)
        .map(|half| {
            payloads
                .chunks(RECEIVE_BATCH)
                .skip(half)
                .step_by(2)
                .flatten()
                .copied()
                .collect()
        })
        .collect();
    // One thread on the two shards: what the split into shards' work costs by itself.
    group.bench_function("collector_batches_2_shards_1_thread", |b| {
        b.iter(|| ingest_in_batches(&collector, &payloads, &mut batch, &mut t))
    });
    group.bench_function("collector_batches_2_threads", |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            std::thread::scope(|scope| {
                for half in &halves {
                    let (collector, from) = (&collector, t);
                    scope.spawn(move || {
                        let (mut batch, mut t) = (RecordBatch::default(), from);
                        for _ in 0..iters {
                            ingest_in_batches(collector, half, &mut batch, &mut t);
                        }
                    });
                }
            });
            t += iters * payloads.len() as u64 * 1000;
            start.elapsed()
        })
    });
    group.finish();

    // v0.5 postcards, one per datagram, hop by hop per packet (SD-Fabric's reports), through
    // the collector's own entry point as a receive thread calls it (lock, accounting, decode,
    // correlate, detect).
    let mut g = Generator::new(LoadConfig {
        flows: 10_000,
        hops: 4,
        version: LoadVersion::V05,
        ..LoadConfig::default()
    });
    let postcards: Vec<Vec<u8>> = (0..8192)
        .map(|_| {
            let mut b = Vec::new();
            g.next_datagram(&mut b);
            b
        })
        .collect();
    let collector = open_collector(1);
    let mut batch = RecordBatch::default();
    let mut group = c.benchmark_group("pipeline_v05");
    group.throughput(Throughput::Elements(postcards.len() as u64));
    let payloads: Vec<&[u8]> = postcards.iter().map(Vec::as_slice).collect();
    group.bench_function("ingest", |b| {
        b.iter(|| ingest_in_batches(&collector, &payloads, &mut batch, &mut t))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(4)).warm_up_time(std::time::Duration::from_secs(1)).sample_size(20);
    targets = bench
}
criterion_main!(benches);
