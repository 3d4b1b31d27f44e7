//! Collector fixtures for tests, on top of core's report builders (shared with core's tests,
//! which hold the builders because they use nothing of the collector).
#![allow(dead_code)]

#[path = "../../../core/tests/common/mod.rs"]
mod reports;

pub use reports::*;

use intscope_core::State;

/// A collector on `127.0.0.1:0` for the INT port, its history in `data` when given.
pub fn open_collector(
    data: Option<&std::path::Path>,
) -> std::sync::Arc<intscope_collector::hub::Collector> {
    intscope_collector::hub::Collector::open(intscope_collector::hub::CollectorConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        int_udp_ports: vec![INT_PORT],
        data: data.map(std::path::Path::to_path_buf),
        ..intscope_collector::hub::CollectorConfig::default()
    })
    .unwrap()
}

/// Feeds the collector `c` `datagrams` datagrams of `load`, 10 µs of switch time apart from 1 ms, and writes
/// the state's changes to its store after every `flush_every` datagrams (0: never).
pub fn feed_load(
    c: &intscope_collector::hub::Collector,
    load: intscope_core::loadgen::LoadConfig,
    datagrams: u64,
    flush_every: u64,
) {
    use intscope_collector::store::{StoreStats, collect_batch};
    let mut g = intscope_core::loadgen::Generator::new(load);
    let (mut buf, mut rec) = (Vec::new(), intscope_core::RecordBatch::default());
    let (stats, mut last_event) = (StoreStats::default(), 1);
    for i in 0..datagrams {
        g.next_datagram(&mut buf);
        c.ingest(
            &buf,
            "10.0.0.1".parse().unwrap(),
            1_000_000 + i * 10_000,
            &mut rec,
        );
        if let Some(store) = &c.store
            && flush_every > 0
            && (i + 1) % flush_every == 0
        {
            let b = collect_batch(&c.state, &mut last_event, Vec::new(), &stats);
            store.write(&b).unwrap();
        }
    }
    // The load is over: its incidents are published (a live collector publishes them once
    // their grouping window has passed), and stored with the rest.
    c.state.finish_incidents();
    if let Some(store) = &c.store
        && flush_every > 0
    {
        let b = collect_batch(&c.state, &mut last_event, Vec::new(), &stats);
        store.write(&b).unwrap();
    }
}

/// A folder of this test's own in the system's temporary directory, named `intscope-<what>-…`
/// (unique per call, so tests running side by side never share one). Removed when the returned
/// `TempDir` is dropped — when the test ends, passed or failed (a panic unwinds through it) — so
/// keep it bound to a variable (not `_`) while anything, a child process included, uses the
/// folder.
pub fn tempdir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("intscope-{what}-"))
        .tempdir()
        .unwrap()
}

/// Three flushes of `s` after reports of one flow at 2, 3 and 4 s (the last with a drop, so
/// an event and an incident), as the store tests write them.
#[allow(dead_code)] // Not every test binary that includes this module writes flushes.
pub fn three_flushes(s: &mut State) -> Vec<intscope_core::Batch> {
    let stats = intscope_collector::store::StoreStats::default();
    let mut last_event = 1;
    let mut out = Vec::new();
    for (k, t) in [(0u32, 2 * S), (1, 3 * S), (2, 4 * S)] {
        let mut r = Rep::new(
            7,
            &[H(1, 2, 900, 10), H(101, 2, 900, 5000)],
            H(2, 3, 900, 10),
        );
        r.seq = k;
        r.drop = (k == 2).then_some(29);
        feed(s, &r.datagram(), t);
        out.push(intscope_collector::store::collect_batch(
            s,
            &mut last_event,
            Vec::new(),
            &stats,
        ));
    }
    out
}
