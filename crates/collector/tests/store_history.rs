//! The history store's reads at scale and across outages: long ranges are answered per minute
//! from the rollups (both stores, the resolution said), and a ClickHouse server that never
//! answers a connection fails within the connect timeout, not the query's or insert's deadline.

mod ch;
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use intscope_collector::store::{
    ClickHouseStore, HistoryQuery, Resolution, SqliteStore, Store, StoreError,
};
use intscope_core::RowSink;

/// A loopback port that never completes a connection, as a black-holed host: a listener with
/// a backlog of one, filled and never accepted, so the kernel drops every further SYN.
struct BlackHole {
    _listener: socket2::Socket,
    _filling: Vec<socket2::Socket>,
    addr: SocketAddr,
}

fn black_hole() -> BlackHole {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&any.into()).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let filling: Vec<Socket> = (0..3)
        .map(|_| {
            let c = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            c.set_nonblocking(true).unwrap();
            let _ = c.connect(&addr.into());
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "the black hole at {addr} took a connection"
    );
    BlackHole {
        _listener: listener,
        _filling: filling,
        addr,
    }
}

/// Flushes with queue rows of nodes 1, 2 and 101 (so of both shards of a 2-shard cluster),
/// a drop's events and a flow, at 2, 3 and 4 s.
fn batches() -> Vec<intscope_core::Batch> {
    three_flushes(&mut state())
}

/// A shard whose only server never answers a connection: the write that has rows for it is
/// spooled within the connect timeout (not the insert's 10 s), a read tries the next server
/// after it (not the query's deadline), and with no server left answers "unavailable" (503)
/// as fast. Opening the store does not wait long on it either.
#[test]
fn a_server_that_never_answers_fails_within_the_connect_timeout() {
    let server = ch::ClickHouse::start(2);
    let hole = black_hole();
    // The schema on both servers (a read through server 1 reaches server 0's tables).
    drop(ClickHouseStore::open(server.config("blackhole", "setup")).unwrap());
    let mut cfg = server.config("blackhole", "test");
    // Shard 0 (and the first server a read tries) is the black hole; shard 1 a real server.
    cfg.urls[0] = format!("http://{}", hole.addr);
    cfg.connect_timeout_ms = 300;
    let quick = Duration::from_secs(3);
    let t = Instant::now();
    let store = ClickHouseStore::open(cfg).unwrap();
    assert!(t.elapsed() < quick, "open took {:?}", t.elapsed());

    let t = Instant::now();
    for b in batches() {
        store.write(&b).unwrap();
    }
    let took = t.elapsed();
    let spooled = store.spool_stats().unwrap();
    assert!(spooled.rows > 0, "nothing spooled for shard 0: {spooled:?}");
    assert!(took < 2 * quick, "three writes took {took:?}");

    let q = HistoryQuery {
        timeout: Some(Duration::from_secs(10)),
        ..HistoryQuery::default()
    };
    let t = Instant::now();
    let events = store.events(&q);
    assert!(t.elapsed() < quick, "a read took {:?}", t.elapsed());
    assert!(events.is_ok(), "{events:?}");

    // No server left: unavailable, as fast.
    server.kill(1);
    let t = Instant::now();
    let events = store.events(&q);
    assert!(t.elapsed() < quick, "a failed read took {:?}", t.elapsed());
    assert!(
        matches!(events, Err(StoreError::Unavailable(_))),
        "{events:?}"
    );
}

/// A range longer than `rollup_after` is answered per minute: the queue intervals of a minute
/// summed into one row (samples added, maxima of maxima, the mean weighted by samples), a
/// flow's series likewise; a shorter range and a page without `since` raw; `resolution`
/// overrides. Both stores, the same answers (`tests/store.rs` compares them row by row).
#[test]
fn long_ranges_are_read_per_minute_sqlite() {
    let dir = tempdir("rollup");
    long_ranges_are_read_per_minute(Arc::new(SqliteStore::open(dir.path()).unwrap()));
}

#[test]
fn long_ranges_are_read_per_minute_clickhouse() {
    let server = ch::ClickHouse::start(1);
    long_ranges_are_read_per_minute(Arc::new(
        ClickHouseStore::open(server.config("rollup", "test")).unwrap(),
    ));
}

/// In a cluster the rollups are read through their `Distributed` tables (each shard's partial
/// aggregates merged by the reader).
#[test]
fn long_ranges_are_read_per_minute_clickhouse_cluster() {
    let server = ch::ClickHouse::start(2);
    long_ranges_are_read_per_minute(Arc::new(
        ClickHouseStore::open(server.config("rollup", "test")).unwrap(),
    ));
}

fn long_ranges_are_read_per_minute(store: Arc<dyn Store>) {
    for b in batches() {
        store.write(&b).unwrap();
    }
    let range = |since: u64, until: u64| HistoryQuery {
        since: Some(since),
        until: Some(until),
        rollup_after: Some(Duration::from_secs(60)),
        ..HistoryQuery::default()
    };
    let short = range(S, 30 * S);
    let long = range(S, 3600 * S);
    assert_eq!(short.pick_resolution(), Resolution::Raw);
    assert_eq!(long.pick_resolution(), Resolution::Minute);
    assert_eq!(HistoryQuery::default().pick_resolution(), Resolution::Raw);

    let raw = store.queue_series(&short).unwrap();
    assert_eq!(raw.resolution, Some(Resolution::Raw));
    let minutes = store.queue_series(&long).unwrap();
    assert_eq!(minutes.resolution, Some(Resolution::Minute));
    let json = serde_json::to_value(&minutes).unwrap();
    assert_eq!(json["resolution"], "1m", "{json}");
    // Three queues, each with an interval per flush in the raw answer, one minute per queue.
    let keys = |p: &intscope_collector::store::Page<intscope_collector::store::QueueInterval>| {
        let mut k: Vec<_> = p
            .items
            .iter()
            .map(|q| (q.node_id, q.port, q.queue_id))
            .collect();
        k.sort();
        k.dedup();
        k
    };
    assert_eq!(keys(&raw), keys(&minutes));
    assert!(raw.items.len() > minutes.items.len(), "{raw:?}");
    assert_eq!(minutes.items.len(), keys(&minutes).len(), "{minutes:?}");
    for m in &minutes.items {
        assert_eq!(m.time_ns, 0, "the minute's start");
        let of: Vec<_> = raw
            .items
            .iter()
            .filter(|r| (r.node_id, r.port, r.queue_id) == (m.node_id, m.port, m.queue_id))
            .collect();
        assert_eq!(m.samples, of.iter().map(|r| r.samples).sum::<u64>());
        assert_eq!(
            m.max_occupancy,
            of.iter().map(|r| r.max_occupancy).max().unwrap()
        );
        let mean = of
            .iter()
            .map(|r| r.avg_occupancy * r.samples as f64)
            .sum::<f64>()
            / m.samples as f64;
        assert!((m.avg_occupancy - mean).abs() < 1e-9, "{m:?} vs {mean}");
    }
    // One node's minutes (the rollup's own order) are the same rows.
    let node = store
        .queue_series(&HistoryQuery {
            node: Some(101),
            ..long.clone()
        })
        .unwrap();
    assert_eq!(node.resolution, Some(Resolution::Minute));
    let of_node: Vec<_> = minutes
        .items
        .iter()
        .filter(|q| q.node_id == 101)
        .cloned()
        .collect();
    assert!(!of_node.is_empty());
    assert_eq!(node.items, of_node);
    // Asked for explicitly.
    let forced = store
        .queue_series(&HistoryQuery {
            resolution: Some(Resolution::Raw),
            ..long.clone()
        })
        .unwrap();
    assert_eq!(forced.resolution, Some(Resolution::Raw));
    assert_eq!(forced.items.len(), raw.items.len());

    // The flow's series: its intervals at 2 and 3 s (4 s was a drop) are one minute.
    let flow = store.flows(&HistoryQuery::default()).unwrap().items[0]
        .flow
        .clone();
    let raw = store.flow_series(&flow, &short).unwrap();
    let minutes = store.flow_series(&flow, &long).unwrap();
    assert!(raw.len() > 1, "{raw:?}");
    assert_eq!(minutes.len(), 1, "{minutes:?}");
    let m = &minutes[0];
    assert_eq!(m.time_ns, 0);
    assert_eq!(m.samples, raw.iter().map(|r| r.samples).sum::<u64>());
    assert_eq!(
        m.e2e_latency_max,
        raw.iter().filter_map(|r| r.e2e_latency_max).max()
    );
    assert_eq!(m.hop_latency_max, raw.last().unwrap().hop_latency_max);
}
