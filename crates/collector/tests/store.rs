//! The SQLite store: batches round-trip, retention prunes, event IDs continue.

mod common;

use common::*;
use intscope_collector::store::{
    Batch, FlushTake, Flusher, HistoryQuery, RowSink, SqliteStore, Store, StoreConfig, StoreError,
    StoreStats, collect_batch, spawn_writer,
};

#[test]
fn batches_round_trip_and_prune() {
    let dir = std::env::temp_dir().join(format!("intscope-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(&dir).unwrap();
    assert_eq!(store.next_event_id().unwrap(), 1);

    let mut s = state();
    for (k, t) in [(0u32, 0u64), (1, S), (2, 2 * S)] {
        let mut r = Rep::new(
            7,
            &[H(1, 2, 900, 10), H(101, 2, 900, 5000)],
            H(2, 3, 900, 10),
        );
        r.seq = k;
        r.drop = (k == 2).then_some(29);
        feed(&mut s, &r.datagram(), t);
    }
    let stats = StoreStats::default();
    let mut last_event = 1;
    let raw = vec![(5, "10.0.0.9".parse().unwrap(), vec![1, 2, 3])];
    let b = collect_batch(&s, &mut last_event, raw, &stats);
    assert_eq!(b.flows.len(), 1);
    assert!(!b.events.is_empty());
    assert_eq!(b.queues.len(), 3, "three queues saw samples");
    store.write(&b).unwrap();
    // A second flush with nothing new writes no duplicate events and no flows.
    let b2 = collect_batch(&s, &mut last_event, Vec::new(), &stats);
    assert!(b2.flows.is_empty() && b2.events.is_empty() && b2.queues.is_empty());

    let counts = store.counts().unwrap();
    assert_eq!(counts["flows"], 1);
    assert_eq!(counts["raw_reports"], 1);
    assert_eq!(counts["events"], b.events.len());
    let drops = store
        .events(&HistoryQuery {
            kind: Some("drop".into()),
            ..HistoryQuery::default()
        })
        .unwrap();
    assert_eq!(
        drops["events"][0]["evidence"]["drop_reason_name"],
        "routing-miss"
    );
    assert_eq!(drops["events"][0]["flow"]["dst_port"], 80);
    let flows = store.flows(&HistoryQuery::default()).unwrap();
    assert_eq!(flows["flows"][0]["reports"], 3);
    assert_eq!(flows["flows"][0]["path"][1]["node_id"], 101);
    assert_eq!(
        store.next_event_id().unwrap(),
        b.events.last().unwrap().id + 1
    );
    // The flow's per-interval latency series: its two delivered reports (the third was a drop).
    let key = s.read().flows().next().unwrap().key;
    let series = store
        .flow_series(&(&key).into(), &HistoryQuery::default())
        .unwrap();
    assert_eq!(series.as_array().unwrap().len(), 1, "{series}");
    assert_eq!(series[0]["samples"], 2);
    assert_eq!(series[0]["time_ns"], 2 * S);
    assert_eq!(series[0]["e2e_latency_avg"], 2700);
    assert_eq!(
        series[0]["hop_latency_max"],
        serde_json::json!([900, 900, 900])
    );
    assert_eq!(
        series[0]["queue_occupancy_max"],
        serde_json::json!([10, 5000, 10])
    );
    let congestion = store
        .queue_series(&HistoryQuery {
            node: Some(101),
            ..HistoryQuery::default()
        })
        .unwrap();
    assert_eq!(congestion["queues"][0]["max_occupancy"], 5000);

    store.prune(2 * S + 1, 0).unwrap();
    let counts = store.counts().unwrap();
    assert_eq!(
        (
            counts["events"].as_u64(),
            counts["flows"].as_u64(),
            counts["flow_stats"].as_u64(),
            counts["raw_reports"].as_u64()
        ),
        (Some(0), Some(0), Some(0), Some(0))
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The [`Store`] methods other than `write`, for the test stores below that only watch what the
/// writer commits: nothing to prune, no history to serve, event IDs from 1.
macro_rules! no_history {
    () => {
        fn prune(&self, _: u64, _: u64) -> Result<(), StoreError> {
            Ok(())
        }
        fn next_event_id(&self) -> Result<u64, StoreError> {
            Ok(1)
        }
        fn events(&self, _: &HistoryQuery) -> Result<serde_json::Value, StoreError> {
            Ok(serde_json::Value::Null)
        }
        fn flows(&self, _: &HistoryQuery) -> Result<serde_json::Value, StoreError> {
            Ok(serde_json::Value::Null)
        }
        fn queue_series(&self, _: &HistoryQuery) -> Result<serde_json::Value, StoreError> {
            Ok(serde_json::Value::Null)
        }
        fn flow_series(
            &self,
            _: &intscope_collector::event::FlowRef,
            _: &HistoryQuery,
        ) -> Result<serde_json::Value, StoreError> {
            Ok(serde_json::Value::Null)
        }
        fn incidents(&self, _: &HistoryQuery) -> Result<serde_json::Value, StoreError> {
            Ok(serde_json::Value::Null)
        }
        fn flow(
            &self,
            _: &intscope_collector::event::FlowRef,
            _: &HistoryQuery,
        ) -> Result<Option<serde_json::Value>, StoreError> {
            Ok(None)
        }
        fn counts(&self) -> Result<serde_json::Value, StoreError> {
            Ok(serde_json::Value::Null)
        }
    };
}

/// A store that takes its time to commit.
struct SlowStore {
    written: std::sync::atomic::AtomicU64,
}

impl RowSink for SlowStore {
    type Error = StoreError;

    fn write(&self, _: &Batch) -> Result<(), StoreError> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        self.written
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

impl Store for SlowStore {
    no_history!();
}

#[test]
fn a_slow_writer_defers_flushes_instead_of_dropping_batches() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering::Relaxed;
    let store = Arc::new(SlowStore {
        written: Default::default(),
    });
    let stats = Arc::new(StoreStats::default());
    let (tx, writer) = spawn_writer(store.clone(), StoreConfig::default(), Arc::clone(&stats));
    let flusher = Flusher::new(tx.clone(), Arc::clone(&stats));
    let mut taken = 0;
    assert!(flusher.offer(|| {
        taken += 1;
        Some(Batch::default())
    }));
    // The writer is still committing: the next flush waits, and the state is not even asked.
    for _ in 0..5 {
        assert!(!flusher.offer(|| {
            taken += 1;
            Some(Batch::default())
        }));
    }
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(flusher.offer(|| {
        taken += 1;
        Some(Batch::default())
    }));
    flusher.finish(|| {
        taken += 1;
        Some(Batch::default())
    });
    drop(tx);
    writer.join().unwrap();
    assert_eq!(taken, 3);
    assert_eq!(
        store.written.load(Relaxed),
        3,
        "every batch taken was committed"
    );
    assert_eq!(stats.flushes_deferred.load(Relaxed), 5);
    assert_eq!(stats.backlog_dropped.load(Relaxed), 0);
    assert_eq!(stats.pending.load(Relaxed), 0);
}

/// Two collector lifetimes over one store: the stored counters are the sums of both, never the
/// second's counts alone; within a lifetime, each flush adds only what is new.
#[test]
fn counters_accumulate_across_restarts() {
    let dir = std::env::temp_dir().join(format!("intscope-store-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let report = |k: u32, drop: bool| {
        let mut r = Rep::new(7, &[H(1, 2, 900, 10), H(101, 2, 900, 10)], H(2, 3, 900, 10));
        r.seq = k;
        r.drop = drop.then_some(29);
        r.datagram()
    };
    let mut sent = (0u64, 0u64);
    let (mut earlier_drop_events, mut this_life_drop_events) = (0u64, 0u64);
    for life in 0..2u64 {
        earlier_drop_events += this_life_drop_events;
        let store = SqliteStore::open(&dir).unwrap();
        let mut s = state();
        s.continue_event_ids(store.next_event_id().unwrap());
        let stats = StoreStats::default();
        let mut last_event = 1;
        // Three flushes per life, with new reports before each.
        for flush in 0..3u32 {
            for k in 0..10u32 {
                let n = flush * 10 + k;
                feed(
                    &mut s,
                    &report(n, k == 9),
                    life * 100 * S + u64::from(n) * MS,
                );
                sent.0 += 1;
                sent.1 += u64::from(k == 9);
            }
            store
                .write(&collect_batch(&s, &mut last_event, Vec::new(), &stats))
                .unwrap();
            let flows = store.flows(&HistoryQuery::default()).unwrap();
            assert_eq!(
                flows["flows"][0]["reports"], sent.0,
                "life {life} flush {flush}"
            );
            assert_eq!(flows["flows"][0]["drops"], sent.1);
            let totals = store.totals().unwrap();
            assert_eq!(totals["reports_v2"], sent.0, "{totals}");
            let live_drops = s
                .read()
                .event_counts()
                .get(&intscope_collector::event::EventKind::Drop)
                .copied()
                .unwrap_or(0);
            assert!(live_drops > 0);
            assert_eq!(
                totals["events_drop"].as_u64(),
                Some(earlier_drop_events + live_drops),
                "{totals}"
            );
            this_life_drop_events = live_drops;
        }
        // A flush with nothing new changes no sum.
        store
            .write(&collect_batch(&s, &mut last_event, Vec::new(), &stats))
            .unwrap();
        assert_eq!(store.totals().unwrap()["reports_v2"], sent.0);
    }
    assert_eq!(sent, (60, 6));
    // The flow's first sighting is the first life's.
    let store = SqliteStore::open(&dir).unwrap();
    let flows = store.flows(&HistoryQuery::default()).unwrap();
    assert_eq!(flows["flows"][0]["first_seen_ns"], 0);
    assert_eq!(flows["flows"][0]["reports"], 60);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store file from before the run columns opens, and its counts go on from where they were.
#[test]
fn an_older_store_file_is_upgraded_in_place() {
    let dir = std::env::temp_dir().join(format!("intscope-store-old-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let conn = rusqlite::Connection::open(dir.join("intscope.db")).unwrap();
    conn.execute_batch(
        "CREATE TABLE flows(
          src TEXT NOT NULL, dst TEXT NOT NULL, proto INTEGER NOT NULL, src_port INTEGER NOT NULL, dst_port INTEGER NOT NULL,
          first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL, reports INTEGER NOT NULL, drops INTEGER NOT NULL,
          last_drop_reason INTEGER, path TEXT NOT NULL, path_changes INTEGER NOT NULL, e2e_p50 INTEGER, e2e_p99 INTEGER,
          PRIMARY KEY(src, dst, proto, src_port, dst_port));",
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&dir).unwrap();
    let mut s = state();
    let d = Rep::new(7, &[H(1, 2, 900, 10)], H(2, 3, 900, 10)).datagram();
    feed(&mut s, &d, 0);
    let key = s.read().flows().next().unwrap().key;
    let f = intscope_collector::event::FlowRef::from(&key);
    drop(store);
    let conn = rusqlite::Connection::open(dir.join("intscope.db")).unwrap();
    conn.execute(
        "INSERT INTO flows(src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,path,path_changes)
         VALUES(?1,?2,?3,?4,?5,0,0,1000,3,'[]',0)",
        rusqlite::params![f.src, f.dst, f.proto, f.src_port, f.dst_port],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&dir).unwrap();
    let stats = StoreStats::default();
    store
        .write(&collect_batch(&s, &mut 1, Vec::new(), &stats))
        .unwrap();
    let flows = store.flows(&HistoryQuery::default()).unwrap();
    assert_eq!(flows["flows"][0]["reports"], 1001);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store that takes 300 ms to commit and remembers the last batch it committed (its
/// `time_ns`, which the test uses as a count of the input the batch holds).
struct Recording {
    committed: std::sync::atomic::AtomicU64,
}

impl RowSink for Recording {
    type Error = StoreError;

    fn write(&self, b: &Batch) -> Result<(), StoreError> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        self.committed
            .store(b.time_ns, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

impl Store for Recording {
    no_history!();
}

/// Back-pressure with a writer slower than the flush interval (300 ms commits, 100 ms
/// interval): the receive thread waits whenever the input not yet committed spans an interval,
/// so what a kill would lose (input since the newest committed batch) never exceeds one interval
/// — 100 units of 1 ms here — where without the wait it would reach the commit's 300 ms and more.
#[test]
fn ingest_waits_so_uncommitted_input_never_exceeds_one_interval() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::time::{Duration, Instant};
    let store = Arc::new(Recording {
        committed: AtomicU64::new(0),
    });
    let stats = Arc::new(StoreStats::default());
    let interval = Duration::from_millis(100);
    let cfg = StoreConfig {
        flush_interval_ms: 100,
        ..StoreConfig::default()
    };
    let (tx, writer) = spawn_writer(store.clone(), cfg, Arc::clone(&stats));
    let input = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The flusher, as the collector runs it: every 10 ms, once an interval has passed.
    let flusher = {
        let (stats, input, stop) = (Arc::clone(&stats), Arc::clone(&input), Arc::clone(&stop));
        std::thread::spawn(move || {
            let flusher = Flusher::new(tx, stats);
            let mut last = Instant::now();
            while !stop.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
                if last.elapsed() >= interval
                    && flusher.offer(|| {
                        Some(Batch {
                            time_ns: input.load(SeqCst),
                            ..Batch::default()
                        })
                    })
                {
                    last = Instant::now();
                }
            }
            flusher.finish(|| None);
        })
    };
    // The receive thread: one unit of input a millisecond, through the gate.
    let mut worst = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        stats.wait_for_writer();
        let n = input.fetch_add(1, SeqCst) + 1;
        worst = worst.max(n - store.committed.load(SeqCst));
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, SeqCst);
    flusher.join().unwrap();
    writer.join().unwrap();
    assert!(stats.batches.load(SeqCst) >= 3);
    assert!(stats.ingest_pauses.load(SeqCst) >= 2);
    assert!(
        worst <= 101,
        "uncommitted input reached {worst} ms of units, more than one interval"
    );
    assert!(worst >= 50, "the input ran: {worst}");
}

/// `store.backpressure = false`: ingest never waits, whatever the writer does.
#[test]
fn without_backpressure_ingest_never_waits() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};
    let store = Arc::new(SlowStore {
        written: Default::default(),
    });
    let stats = Arc::new(StoreStats::default());
    let cfg = StoreConfig {
        flush_interval_ms: 10,
        backpressure: false,
        ..StoreConfig::default()
    };
    let (tx, writer) = spawn_writer(store.clone(), cfg, Arc::clone(&stats));
    let flusher = Flusher::new(tx.clone(), Arc::clone(&stats));
    assert!(flusher.offer(|| Some(Batch::default())));
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    stats.wait_for_writer();
    assert!(t.elapsed() < Duration::from_millis(20));
    assert_eq!(
        stats.pending.load(Relaxed),
        1,
        "the commit was still under way"
    );
    drop(flusher);
    drop(tx);
    writer.join().unwrap();
    assert_eq!(stats.ingest_pauses.load(Relaxed), 0);
}

/// A store that records each flush's parts (flow rows per part) and how far the flusher ever
/// got ahead of it (parts handed over beyond those the writer had received).
struct PartsStore {
    stats: std::sync::Arc<StoreStats>,
    flushes: std::sync::Mutex<Vec<Vec<usize>>>,
    received: std::sync::atomic::AtomicU64,
    ahead: std::sync::atomic::AtomicU64,
}

impl RowSink for PartsStore {
    type Error = StoreError;

    fn write(&self, b: &Batch) -> Result<(), StoreError> {
        self.flushes.lock().unwrap().push(vec![b.flows.len()]);
        Ok(())
    }
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Batch>) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        let mut rows = Vec::new();
        for p in parts {
            rows.push(p.flows.len());
            let received = self.received.fetch_add(1, SeqCst) + 1;
            // Time for the flusher to run ahead, if anything lets it.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let handed = self.stats.parts.load(SeqCst);
            self.ahead
                .fetch_max(handed.saturating_sub(received), SeqCst);
        }
        self.flushes.lock().unwrap().push(rows);
        Ok(())
    }
}

impl Store for PartsStore {
    no_history!();
}

/// A state holding `flows` changed flows (one report each, with latency samples).
fn state_with_flows(flows: u16) -> intscope_collector::state::State {
    let mut s = state();
    for f in 0..flows {
        let r = Rep::new(f, &[H(1, 2, 900, 10)], H(2, 3, 900, 10));
        feed(&mut s, &r.datagram(), S);
    }
    s
}

/// The flush's memory is bounded in shape: a flush of 5 000 changed flows with a chunk of
/// 1 000 reaches the writer as five parts of 1 000 rows in one `write_parts` (one transaction),
/// and the flusher never has a part queued beyond the one the writer is writing (it builds the
/// next part only while it waits to hand it over), whatever the number of changed flows.
#[test]
fn a_flush_is_streamed_in_parts_of_at_most_the_chunk_with_no_queue() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    let s = state_with_flows(5000);
    let stats = Arc::new(StoreStats::default());
    let store = Arc::new(PartsStore {
        stats: Arc::clone(&stats),
        flushes: Default::default(),
        received: Default::default(),
        ahead: Default::default(),
    });
    let (tx, writer) = spawn_writer(store.clone(), StoreConfig::default(), Arc::clone(&stats));
    let flusher = Flusher::new(tx, Arc::clone(&stats));
    let mut last_event = 1;
    assert!(flusher.offer_parts(|| {
        let take = FlushTake::new(&s, &mut last_event, Vec::new(), &stats, 1000);
        assert_eq!(take.flows_left(), 5000);
        Some(take)
    }));
    // Nothing changed since: the last flush is one part without flows.
    flusher.finish_parts(|| {
        Some(FlushTake::new(
            &s,
            &mut last_event,
            Vec::new(),
            &stats,
            1000,
        ))
    });
    writer.join().unwrap();
    assert_eq!(*store.flushes.lock().unwrap(), [vec![1000; 5], vec![0]]);
    assert_eq!(
        store.ahead.load(SeqCst),
        0,
        "the flusher handed parts over before the writer took them"
    );
    assert_eq!(stats.parts.load(SeqCst), 6);
    assert_eq!(stats.batches.load(SeqCst), 2);
    assert_eq!(stats.pending.load(SeqCst), 0);
}

/// A flush streamed in parts stores exactly what the same flush taken whole stores: every flow
/// row and every flow_stats row, once.
#[test]
fn a_flush_in_parts_stores_what_a_whole_flush_stores() {
    use std::sync::Arc;
    let dirs: Vec<_> = ["whole", "parts"]
        .iter()
        .map(|k| {
            let d = std::env::temp_dir().join(format!("intscope-store-{k}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            d
        })
        .collect();
    let whole = SqliteStore::open(&dirs[0]).unwrap();
    let stats = Arc::new(StoreStats::default());
    let s = state_with_flows(3000);
    whole
        .write(&collect_batch(&s, &mut 1, Vec::new(), &stats))
        .unwrap();

    let parts = Arc::new(SqliteStore::open(&dirs[1]).unwrap());
    let (tx, writer) = spawn_writer(parts.clone(), StoreConfig::default(), Arc::clone(&stats));
    let flusher = Flusher::new(tx, Arc::clone(&stats));
    let s = state_with_flows(3000);
    flusher.finish_parts(|| Some(FlushTake::new(&s, &mut 1, Vec::new(), &stats, 700)));
    writer.join().unwrap();
    assert_eq!(stats.parts.load(std::sync::atomic::Ordering::SeqCst), 5);

    let counts = whole.counts().unwrap();
    assert_eq!(counts["flows"], 3000);
    assert_eq!(counts["flow_stats"], 3000);
    assert_eq!(parts.counts().unwrap(), counts);
    let sorted = |st: &SqliteStore| {
        let q = HistoryQuery {
            limit: Some(10_000),
            ..HistoryQuery::default()
        };
        let mut rows: Vec<String> = st.flows(&q).unwrap()["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.to_string())
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(sorted(&parts), sorted(&whole));
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A flow row's size is what the memory bound of a flush (`docs/collector-store.md`, Memory)
/// counts on: two parts of `flush_chunk_flows` rows of at most 256 bytes each.
#[test]
fn a_flow_row_stays_small() {
    let row = std::mem::size_of::<intscope_collector::store::FlowRow>();
    assert!(
        row <= 256,
        "FlowRow is {row} bytes: update the memory bound"
    );
}

/// A collector without a store forgets what changed at each interval instead of flushing it:
/// the changed-flow lists and intervals do not pile up, and a later flush holds only what is
/// new since.
#[test]
fn discarding_changes_empties_what_a_flush_would_take() {
    let s = state_with_flows(300);
    assert_eq!(s.read().flows_to_store(), 300);
    assert_eq!(intscope_collector::rows::discard_changes(&s), 300);
    assert_eq!(s.read().flows_to_store(), 0);
    let stats = StoreStats::default();
    let b = collect_batch(&s, &mut 1, Vec::new(), &stats);
    assert!(b.flows.is_empty() && b.queues.is_empty() && b.ports.is_empty());
}
