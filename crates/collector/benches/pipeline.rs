//! The collector pipeline without sockets: decode → correlate → detect, on the load generator's
//! traffic (v2.0, 8 reports per datagram, 4-node paths, 10 000 flows): one thread on one shard
//! (also with the fast path off), and two threads on two shards, either each correlating its
//! own batches in every shard or (`_owner`, a prototype of owner-computes) each correlating only
//! its own flow shard's records, handing the others to the other thread through a bounded ring.
//!
//! `cargo bench -p intscope-collector --bench pipeline`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_collector::ingest::Tally;
use intscope_core::loadgen::{self, Generator, INT_PORT, LoadConfig, LoadVersion};
use intscope_core::{
    DetectConfig as Thresholds, FlowKeyMode, Record, RecordBatch, RecordSink, State,
    decode_datagram, flow_shard, key_hash,
};

/// Datagrams per receive call (the receive threads' default `recv_batch`).
const RECEIVE_BATCH: usize = 64;

/// Receive batches' hand-offs a ring holds (owner-computes).
const HANDOFF_RING: usize = 4;

/// A collector as `intscope collect --threads <threads>` opens it: one shard of each kind per
/// receive thread.
fn open_collector(threads: usize) -> std::sync::Arc<Collector> {
    open_collector_with(threads, Thresholds::default())
}

/// [`open_collector`] with the detectors' thresholds `detect`.
fn open_collector_with(threads: usize, detect: Thresholds) -> std::sync::Arc<Collector> {
    Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![INT_PORT],
        threads,
        detect,
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

/// Decoded records sorted by flow shard as they are decoded: each is decoded into the receiving
/// thread's own part and copied into another shard's part when its flow belongs there.
struct Routed {
    parts: Vec<Vec<Record>>,
    lens: Vec<usize>,
    own: usize,
}

impl Routed {
    fn new(shards: usize, own: usize) -> Self {
        Routed {
            parts: (0..shards).map(|_| Vec::new()).collect(),
            lens: vec![0; shards],
            own,
        }
    }
}

impl RecordSink for Routed {
    fn slot(&mut self) -> &mut Record {
        let (part, len) = (&mut self.parts[self.own], self.lens[self.own]);
        if part.len() == len {
            part.push(Record::default());
        }
        &mut part[len]
    }
    fn filled(&mut self) {
        let n = self.parts.len();
        let own = self.own;
        let r = &self.parts[own][self.lens[own]];
        let s = r.flow.as_ref().map_or(own, |k| flow_shard(key_hash(k), n));
        if s == own {
            self.lens[own] += 1;
            return;
        }
        let r = r.clone();
        let (part, len) = (&mut self.parts[s], self.lens[s]);
        if part.len() == len {
            part.push(r);
        } else {
            part[len] = r;
        }
        self.lens[s] += 1;
    }
}

/// A hand-off of records to their flow shard's owner: the records and how many are valid.
type Handoff = (Vec<Record>, usize);

/// Owner-computes, two threads: thread `own` decodes its receive batches, correlates the records
/// of its own flow shard and hands the others to the other thread through a bounded ring, and
/// correlates what the other thread hands it. Returns how often the ring was full (the sender
/// then correlated what it had been handed and tried again).
fn owner_computes(
    collector: &Collector,
    own: usize,
    datagrams: &[&[u8]],
    iters: u64,
    t: &mut u64,
    (tx, rx): (
        std::sync::mpsc::SyncSender<Handoff>,
        std::sync::mpsc::Receiver<Handoff>,
    ),
) -> u64 {
    let src = std::net::IpAddr::from([10, 0, 0, 1]);
    let other = 1 - own;
    let mut routed = Routed::new(2, own);
    let mut spare: Vec<Vec<Record>> = Vec::new();
    let mut full = 0u64;
    let take = |spare: &mut Vec<Vec<Record>>, v: Handoff| {
        collector.state.process_batch(&v.0[..v.1]);
        spare.push(v.0);
    };
    for _ in 0..iters {
        for batch_of in datagrams.chunks(RECEIVE_BATCH) {
            let mut tally = Tally::default();
            for d in batch_of {
                *t += 1000;
                collector.decode_counted(black_box(d), src, *t, &mut routed, &mut tally);
            }
            if routed.lens[other] > 0 {
                let fresh = spare.pop().unwrap_or_default();
                let mut out = (
                    std::mem::replace(&mut routed.parts[other], fresh),
                    std::mem::take(&mut routed.lens[other]),
                );
                loop {
                    match tx.try_send(out) {
                        Ok(()) => break,
                        Err(std::sync::mpsc::TrySendError::Full(back)) => {
                            full += 1;
                            out = back;
                            match rx.try_recv() {
                                Ok(v) => take(&mut spare, v),
                                // The owner is behind (or not running: two cores are shared).
                                Err(_) => std::thread::yield_now(),
                            }
                        }
                        Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                            unreachable!("the other thread waits for this one")
                        }
                    }
                }
            }
            collector
                .state
                .process_batch(&routed.parts[own][..routed.lens[own]]);
            routed.lens[own] = 0;
            while let Ok(v) = rx.try_recv() {
                take(&mut spare, v);
            }
            collector.count(&tally);
        }
    }
    drop(tx);
    // What the other thread still hands over, until it is done.
    while let Ok(v) = rx.recv() {
        take(&mut spare, v);
    }
    full
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
    // The same with every report through the detectors (`[detect.fast_path] enabled = false`).
    let mut full = Thresholds::default();
    full.fast_path.enabled = false;
    let collector = open_collector_with(1, full);
    group.bench_function("collector_batches_fast_path_off", |b| {
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
    // Owner-computes on the same two shards: each thread correlates only its own flow shard's
    // records, handing the others over (the fabric stage still takes either fabric shard).
    let full = std::sync::atomic::AtomicU64::new(0);
    group.bench_function("collector_batches_2_threads_owner", |b| {
        b.iter_custom(|iters| {
            let (tx0, rx0) = std::sync::mpsc::sync_channel::<Handoff>(HANDOFF_RING);
            let (tx1, rx1) = std::sync::mpsc::sync_channel::<Handoff>(HANDOFF_RING);
            let mut ends = [Some((tx1, rx0)), Some((tx0, rx1))];
            let start = std::time::Instant::now();
            std::thread::scope(|scope| {
                for (own, half) in halves.iter().enumerate() {
                    let (collector, from, full) = (&collector, t, &full);
                    let ends = ends[own].take().expect("each thread's ends");
                    scope.spawn(move || {
                        let mut t = from;
                        let f = owner_computes(collector, own, half, iters, &mut t, ends);
                        full.fetch_add(f, std::sync::atomic::Ordering::Relaxed);
                    });
                }
            });
            t += iters * payloads.len() as u64 * 1000;
            start.elapsed()
        })
    });
    eprintln!(
        "owner-computes: hand-off ring full {} times",
        full.load(std::sync::atomic::Ordering::Relaxed)
    );
    group.finish();

    // The same datagrams with every other one lost on the way (a receiver's full socket buffer
    // under overload): each loss is a sequence gap at its node, which the report-loss detection
    // follows — work the loss-free figures above never see.
    // Lost at random (the datagrams take turns among the sinks: a regular pattern could spare
    // some sinks entirely).
    let lost = |i: usize| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63 == 1;
    let kept_datagrams = || datagrams.iter().enumerate().filter(|(i, _)| !lost(*i));
    let kept: Vec<&[u8]> = kept_datagrams().map(|(_, (d, _))| d.as_slice()).collect();
    let kept_reports: usize = kept_datagrams().map(|(_, d)| d.1).sum();
    let collector = open_collector(1);
    let mut group = c.benchmark_group("pipeline_half_lost");
    group.throughput(Throughput::Elements(kept_reports as u64));
    group.bench_function("collector_batches", |b| {
        b.iter(|| ingest_in_batches(&collector, &kept, &mut batch, &mut t))
    });
    group.finish();

    // Postcards, one per datagram, hop by hop per packet: SD-Fabric's v0.5 reports and Report
    // v2.0 INT-XD, through the collector's own entry point as a receive thread calls it (lock,
    // accounting, decode, correlate, detect).
    for (version, name) in [
        (LoadVersion::V05, "pipeline_v05"),
        (LoadVersion::V2Postcards, "pipeline_v2_postcards"),
    ] {
        let mut g = Generator::new(LoadConfig {
            flows: 10_000,
            hops: 4,
            version,
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
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(postcards.len() as u64));
        let payloads: Vec<&[u8]> = postcards.iter().map(Vec::as_slice).collect();
        group.bench_function("ingest", |b| {
            b.iter(|| ingest_in_batches(&collector, &payloads, &mut batch, &mut t))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(4)).warm_up_time(std::time::Duration::from_secs(1)).sample_size(20);
    targets = bench
}
criterion_main!(benches);
