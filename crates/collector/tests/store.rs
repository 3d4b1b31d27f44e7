//! The stores (SQLite and a real ClickHouse server): batches round-trip, retention prunes,
//! event IDs continue, counters add up over restarts, incidents keep their newest version.

mod ch;
mod common;

use std::sync::Arc;

use intscope_core::{
    AggRow, Incident, IncidentCounts, IncidentKind, IncidentPlace, IncidentState, Severity, State,
};

use common::*;
use intscope_collector::store::{
    ClickHouseStore, FlushTake, Flusher, HistoryQuery, SqliteStore, Store, StoreConfig, StoreError,
    StoreStats, collect_batch, spawn_writer,
};
use intscope_core::{Batch, RowSink};

/// A store to run the same test on: a SQLite directory, or a database on a ClickHouse server.
enum Backend {
    Sqlite(tempfile::TempDir),
    ClickHouse(Arc<ch::ClickHouse>, String),
}

impl Backend {
    fn sqlite(name: &str) -> Backend {
        Backend::Sqlite(tempdir(&format!("store-{name}")))
    }

    fn clickhouse(server: &Arc<ch::ClickHouse>, name: &str) -> Backend {
        Backend::ClickHouse(Arc::clone(server), name.replace('-', "_"))
    }

    /// Opens the store (again: the same directory or database).
    fn open(&self) -> Arc<dyn Store> {
        match self {
            Backend::Sqlite(dir) => Arc::new(SqliteStore::open(dir.path()).unwrap()),
            Backend::ClickHouse(server, db) => {
                Arc::new(ClickHouseStore::open(server.config(db, "test")).unwrap())
            }
        }
    }

    /// A retention horizon that removes everything before `t`: ClickHouse drops whole days.
    fn horizon(&self, t: u64) -> u64 {
        match self {
            Backend::Sqlite(_) => t,
            Backend::ClickHouse(..) => t.div_ceil(86_400 * S) * 86_400 * S,
        }
    }
}

/// An event goes to the store once its incident is published (`incident_grouping_ns` of
/// receive time after its first evidence, for drops also the merge and correlation windows), with the incident's ID; until then the flush holds
/// it back, and the events after it. One whose incident never comes is taken after the link
/// wait; at a stop every event is taken as it is.
#[test]
fn the_store_takes_an_event_once_it_names_its_incident() {
    let s = State::new(intscope_core::DetectConfig::default());
    let stats = StoreStats::default();
    let mut last_event = 1;
    let drop_at = |s: &State, seq: u32, t: u64| {
        let mut r = Rep::new(7, &[H(1, 2, 900, 10)], H(2, 3, 900, 10));
        r.seq = seq;
        r.drop = Some(29);
        decode_each(&r.datagram(), t, |rec| s.process(rec));
    };
    drop_at(&s, 0, S);
    s.tick(S);
    let b = collect_batch(&s, &mut last_event, Vec::new(), &stats);
    assert!(b.events.is_empty(), "its incident still gathers symptoms");
    assert_eq!(s.events().events().len(), 1);
    // Not while it gathers: a drop waits for the correlation to name a link it may be the
    // failure of (grouping 100 ms + incident merge 1 s + path correlation 1 s).
    s.tick(S + 2_000 * MS);
    let b = collect_batch(&s, &mut last_event, Vec::new(), &stats);
    assert!(
        b.events.is_empty(),
        "a drop's incident still gathers symptoms"
    );
    // Past that window the incident is published.
    s.tick(S + 2_200 * MS);
    let b = collect_batch(&s, &mut last_event, Vec::new(), &stats);
    assert_eq!(b.events.len(), 1);
    let incident = s.incidents().into_iter().next().expect("published");
    assert_eq!(b.events[0].incident_id, Some(incident.id));
    // A stop takes what still waits.
    drop_at(&s, 1, 5 * S);
    let b = collect_batch(&s, &mut last_event, Vec::new(), &stats);
    assert!(b.events.is_empty() || b.events.iter().all(|e| e.incident_id.is_some()));
    s.settle_events();
    let b2 = collect_batch(&s, &mut last_event, Vec::new(), &stats);
    assert_eq!(
        1 + b.events.len() + b2.events.len(),
        s.events().events().len(),
        "every event stored once"
    );
}

#[test]
fn batches_round_trip_and_prune_sqlite() {
    batches_round_trip_and_prune(&Backend::sqlite("rt"));
}

#[test]
fn batches_round_trip_and_prune_clickhouse() {
    let server = Arc::new(ch::ClickHouse::start(1));
    batches_round_trip_and_prune(&Backend::clickhouse(&server, "rt"));
}

fn batches_round_trip_and_prune(backend: &Backend) {
    let store = backend.open();
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
    assert_eq!(counts["events"], b.events.len() as u64);
    let drops = json(
        store
            .events(&HistoryQuery {
                kind: Some("drop".into()),
                ..HistoryQuery::default()
            })
            .unwrap(),
    );
    assert_eq!(
        drops["events"][0]["evidence"]["drop_reason_name"],
        "routing-miss"
    );
    assert_eq!(drops["events"][0]["flow"]["dst_port"], 80);
    // Read back, each event is the live one without its receive time (the store keeps it
    // for retention only), field for field, its incident included; each incident is the one
    // written.
    let mut stored = json(store.events(&HistoryQuery::default()).unwrap())["events"].clone();
    let mut live: Vec<serde_json::Value> = b.events.iter().rev().map(json).collect();
    for e in &mut live {
        e.as_object_mut().unwrap().remove("received_ns");
    }
    assert_eq!(stored.take(), serde_json::Value::Array(live));
    assert!(!b.incidents.is_empty(), "the drop raised an incident");
    let drop_incident = b
        .incidents
        .iter()
        .find(|i| i.cause.as_deref() == Some("routing-miss"))
        .expect("the routing miss is an incident");
    assert_eq!(
        drops["events"][0]["incident_id"], drop_incident.id,
        "a stored event names its incident"
    );
    let incidents = json(store.incidents(&HistoryQuery::default()).unwrap());
    for n in &b.incidents {
        let read = incidents["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == n.id)
            .unwrap_or_else(|| panic!("incident {} not read back: {incidents}", n.id));
        assert_eq!(*read, n.to_json());
    }
    let flows = json(store.flows(&HistoryQuery::default()).unwrap());
    assert_eq!(flows["flows"][0]["reports"], 3);
    // The live list's shape: node IDs, and the hops with their ports.
    assert_eq!(flows["flows"][0]["path"][1], 101);
    assert_eq!(flows["flows"][0]["path_detail"][1]["node_id"], 101);
    assert!(
        flows["flows"][0].get("id").is_none(),
        "a stored flow has no live ID"
    );
    assert_eq!(
        store.next_event_id().unwrap(),
        b.events.last().unwrap().id + 1
    );
    // The flow's per-interval latency series: its two delivered reports (the third was a drop).
    let key = s.read().flows().next().unwrap().key;
    let series = json(
        store
            .flow_series(&(&key).into(), &HistoryQuery::default())
            .unwrap(),
    );
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
    let congestion = json(
        store
            .queue_series(&HistoryQuery {
                node: Some(101),
                ..HistoryQuery::default()
            })
            .unwrap(),
    );
    assert_eq!(congestion["queues"][0]["max_occupancy"], 5000);

    let h = backend.horizon(2 * S + 1);
    store.prune(h, h, 0).unwrap();
    let counts = store.counts().unwrap();
    assert_eq!(
        (
            counts["events"],
            counts["flows"],
            counts["flow_stats"],
            counts["raw_reports"]
        ),
        (0, 0, 0, 0)
    );
    assert!(
        store
            .flows(&HistoryQuery::default())
            .unwrap()
            .items
            .is_empty(),
        "the flow list is pruned with the flows"
    );
}

/// An empty page (of the test stores below).
fn empty<T>() -> intscope_collector::store::Page<T> {
    intscope_collector::store::Page {
        items: Vec::new(),
        next: None,
        resolution: None,
    }
}

/// A read's answer as the API serves it (the assertions below read the JSON).
fn json<T: serde::Serialize>(v: T) -> serde_json::Value {
    serde_json::to_value(v).unwrap()
}

/// The [`Store`] methods other than `write`, for the test stores below that only watch what the
/// writer commits: nothing to prune, no history to serve, event IDs from 1.
macro_rules! no_history {
    () => {
        fn prune(&self, _: u64, _: u64, _: u64) -> Result<(), StoreError> {
            Ok(())
        }
        fn next_event_id(&self) -> Result<u64, StoreError> {
            Ok(1)
        }
        fn next_incident_id(&self) -> Result<u64, StoreError> {
            Ok(1)
        }
        fn events(
            &self,
            _: &HistoryQuery,
        ) -> Result<
            intscope_collector::store::Page<intscope_collector::store::StoredEvent>,
            StoreError,
        > {
            Ok(empty())
        }
        fn flows(
            &self,
            _: &HistoryQuery,
        ) -> Result<
            intscope_collector::store::Page<intscope_collector::view::FlowSummary>,
            StoreError,
        > {
            Ok(empty())
        }
        fn queue_series(
            &self,
            _: &HistoryQuery,
        ) -> Result<
            intscope_collector::store::Page<intscope_collector::store::QueueInterval>,
            StoreError,
        > {
            Ok(empty())
        }
        fn flow_series(
            &self,
            _: &intscope_core::FlowRef,
            _: &HistoryQuery,
        ) -> Result<Vec<intscope_collector::store::FlowInterval>, StoreError> {
            Ok(Vec::new())
        }
        fn incidents(
            &self,
            _: &HistoryQuery,
        ) -> Result<
            intscope_collector::store::Page<intscope_collector::store::StoredIncident>,
            StoreError,
        > {
            Ok(empty())
        }
        fn flow(
            &self,
            _: &intscope_core::FlowRef,
            _: &HistoryQuery,
        ) -> Result<Option<intscope_collector::view::FlowSummary>, StoreError> {
            Ok(None)
        }
        fn counts(&self) -> Result<intscope_collector::store::RowCounts, StoreError> {
            Ok(Default::default())
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
fn counters_accumulate_across_restarts_sqlite() {
    counters_accumulate_across_restarts(&Backend::sqlite("runs"));
}

#[test]
fn counters_accumulate_across_restarts_clickhouse() {
    let server = Arc::new(ch::ClickHouse::start(1));
    counters_accumulate_across_restarts(&Backend::clickhouse(&server, "runs"));
}

fn counters_accumulate_across_restarts(backend: &Backend) {
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
        let store = backend.open();
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
            let flows = json(store.flows(&HistoryQuery::default()).unwrap());
            assert_eq!(
                flows["flows"][0]["reports"], sent.0,
                "life {life} flush {flush}"
            );
            assert_eq!(flows["flows"][0]["drops"], sent.1);
            let totals = store.totals().unwrap();
            assert_eq!(totals["reports_v2"], sent.0, "{totals:?}");
            let live_drops = s
                .read()
                .event_counts()
                .get(&intscope_core::EventKind::Drop)
                .copied()
                .unwrap_or(0);
            assert!(live_drops > 0);
            assert_eq!(
                totals["events_drop"],
                earlier_drop_events + live_drops,
                "{totals:?}"
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
    let store = backend.open();
    let flows = json(store.flows(&HistoryQuery::default()).unwrap());
    assert_eq!(flows["flows"][0]["first_seen_ns"], 0);
    assert_eq!(flows["flows"][0]["reports"], 60);
}

/// A store file from before the run columns opens, and its counts go on from where they were.
#[test]
fn an_older_store_file_is_upgraded_in_place() {
    let tmp = tempdir("store-old");
    let dir = tmp.path();
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
    let store = SqliteStore::open(dir).unwrap();
    let mut s = state();
    let d = Rep::new(7, &[H(1, 2, 900, 10)], H(2, 3, 900, 10)).datagram();
    feed(&mut s, &d, 0);
    let key = s.read().flows().next().unwrap().key;
    let f = intscope_core::FlowRef::from(&key);
    drop(store);
    let conn = rusqlite::Connection::open(dir.join("intscope.db")).unwrap();
    conn.execute(
        "INSERT INTO flows(src,dst,proto,src_port,dst_port,first_seen_ns,last_seen_ns,reports,drops,path,path_changes)
         VALUES(?1,?2,?3,?4,?5,0,0,1000,3,'[]',0)",
        rusqlite::params![f.src, f.dst, f.proto, f.src_port, f.dst_port],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(dir).unwrap();
    let stats = StoreStats::default();
    store
        .write(&collect_batch(&s, &mut 1, Vec::new(), &stats))
        .unwrap();
    let flows = json(store.flows(&HistoryQuery::default()).unwrap());
    assert_eq!(flows["flows"][0]["reports"], 1001);
    drop(store);
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
        backpressure: true,
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

/// By default (`store.backpressure = false`) ingest never waits, whatever the writer does, and
/// `lag_ms` says what a kill -9 would lose meanwhile: input since the newest committed take.
#[test]
fn by_default_ingest_never_waits_and_the_lag_says_what_is_at_risk() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};
    let store = Arc::new(SlowStore {
        written: Default::default(),
    });
    let stats = Arc::new(StoreStats::default());
    let cfg = StoreConfig {
        flush_interval_ms: 10,
        ..StoreConfig::default()
    };
    assert!(!cfg.backpressure, "the default");
    let (tx, writer) = spawn_writer(store.clone(), cfg, Arc::clone(&stats));
    let flusher = Flusher::new(tx.clone(), Arc::clone(&stats));
    let taken = Instant::now();
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
    // Nothing committed yet: everything since the writer started is at risk.
    assert!(stats.lag_ms() >= 50, "lag {} ms", stats.lag_ms());
    // The flush is deferred, not queued behind the slow commit.
    assert!(!flusher.offer(|| Some(Batch::default())));
    assert_eq!(stats.flushes_deferred.load(Relaxed), 1);
    while stats.pending.load(Relaxed) > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Committed: what is at risk is what came after its take.
    let since_take = taken.elapsed().as_millis() as u64;
    assert!(
        stats.lag_ms() <= since_take + 1 && stats.lag_ms() + 20 >= since_take,
        "lag {} ms, {since_take} ms since the take",
        stats.lag_ms()
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
fn state_with_flows(flows: u16) -> intscope_core::State {
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
fn a_flush_in_parts_stores_what_a_whole_flush_stores_sqlite() {
    a_flush_in_parts_stores_what_a_whole_flush_stores(
        &Backend::sqlite("whole"),
        &Backend::sqlite("parts"),
    );
}

#[test]
fn a_flush_in_parts_stores_what_a_whole_flush_stores_clickhouse() {
    let server = Arc::new(ch::ClickHouse::start(1));
    a_flush_in_parts_stores_what_a_whole_flush_stores(
        &Backend::clickhouse(&server, "whole"),
        &Backend::clickhouse(&server, "parts"),
    );
}

fn a_flush_in_parts_stores_what_a_whole_flush_stores(a: &Backend, b: &Backend) {
    let whole = a.open();
    let stats = Arc::new(StoreStats::default());
    let s = state_with_flows(3000);
    whole
        .write(&collect_batch(&s, &mut 1, Vec::new(), &stats))
        .unwrap();

    let parts = b.open();
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
    let sorted = |st: &dyn Store| {
        let q = HistoryQuery {
            limit: Some(10_000),
            ..HistoryQuery::default()
        };
        let mut rows: Vec<String> = json(st.flows(&q).unwrap())["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.to_string())
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(sorted(&*parts), sorted(&*whole));
}

/// A flow row's size is what the memory bound of a flush (`docs/collector-store.md`, Memory)
/// counts on: two parts of `flush_chunk_flows` rows of at most 256 bytes each.
#[test]
fn a_flow_row_stays_small() {
    let row = std::mem::size_of::<intscope_core::FlowRow>();
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
    assert_eq!(intscope_core::discard_changes(&s), 300);
    assert_eq!(s.read().flows_to_store(), 0);
    let stats = StoreStats::default();
    let b = collect_batch(&s, &mut 1, Vec::new(), &stats);
    assert!(b.flows.is_empty() && b.queues.is_empty() && b.ports.is_empty());
}

/// An incident as the detectors would hand it over: `updates` and `state` make its version.
fn incident(
    id: u64,
    kind: IncidentKind,
    node: u32,
    start: u64,
    updates: u64,
    end: Option<u64>,
) -> Incident {
    Incident {
        id,
        kind,
        place: IncidentPlace {
            node: Some(node),
            port: Some(3),
            ..IncidentPlace::default()
        },
        cause: None,
        state: if end.is_some() {
            IncidentState::Resolved
        } else {
            IncidentState::Ongoing
        },
        severity: Severity::Warning,
        start_ns: start,
        start_uncertainty_ns: 0,
        last_update_ns: start + updates * MS,
        end_ns: end,
        end_uncertainty_ns: 0,
        end_reason: end.map(|_| intscope_core::EndReason::Normal),
        received_ns: None,
        updates,
        counts: IncidentCounts {
            samples: updates,
            ..IncidentCounts::default()
        },
        peak: None,
        threshold: Some(1000),
        baseline: None,
        flows: Vec::new(),
        symptoms: Vec::new(),
        evidence: None,
    }
}

#[test]
fn incidents_keep_their_newest_version_sqlite() {
    incidents_keep_their_newest_version(&Backend::sqlite("inc"));
}

#[test]
fn incidents_keep_their_newest_version_clickhouse() {
    let server = Arc::new(ch::ClickHouse::start(1));
    incidents_keep_their_newest_version(&Backend::clickhouse(&server, "inc"));
}

/// Every version of an incident is written (start, updates, end, across flushes and out of
/// order); a read shows each incident once, as its newest version, newest start first, filtered
/// by time overlap, kind and node, and paged with a cursor.
fn incidents_keep_their_newest_version(backend: &Backend) {
    let store = backend.open();
    let batch = |incidents: Vec<Incident>| Batch {
        incidents,
        ..Batch::default()
    };
    // 10 incidents, starting 1 s apart, alternating kind and node.
    let kind = |i: u64| {
        if i.is_multiple_of(2) {
            IncidentKind::Congestion
        } else {
            IncidentKind::Drop
        }
    };
    let first: Vec<Incident> = (1..=10)
        .map(|i| incident(i, kind(i), 100 + (i % 2) as u32, i * S, 1, None))
        .collect();
    store.write(&batch(first)).unwrap();
    // Updates; then incident 4 ends; then a stale version of 4 arrives late.
    store
        .write(&batch(vec![
            incident(3, kind(3), 101, 3 * S, 5, None),
            incident(4, kind(4), 100, 4 * S, 7, None),
        ]))
        .unwrap();
    store
        .write(&batch(vec![incident(
            4,
            kind(4),
            100,
            4 * S,
            7,
            Some(4 * S + 9 * MS),
        )]))
        .unwrap();
    store
        .write(&batch(vec![incident(4, kind(4), 100, 4 * S, 2, None)]))
        .unwrap();

    let all = json(store.incidents(&HistoryQuery::default()).unwrap());
    let list = all["incidents"].as_array().unwrap();
    assert_eq!(list.len(), 10, "{all}");
    assert_eq!(all["next"], serde_json::Value::Null);
    let ids: Vec<u64> = list.iter().map(|i| i["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        (1..=10).rev().collect::<Vec<_>>(),
        "newest start first"
    );
    let four = list.iter().find(|i| i["id"] == 4).unwrap();
    assert_eq!(four["state"], "resolved");
    assert_eq!(four["updates"], 7);
    assert_eq!(four["end_ns"], 4 * S + 9 * MS);
    assert_eq!(list.iter().find(|i| i["id"] == 3).unwrap()["updates"], 5);
    assert_eq!(store.counts().unwrap()["incidents"], 10);

    let q = |f: &dyn Fn(&mut HistoryQuery)| {
        let mut q = HistoryQuery::default();
        f(&mut q);
        json(store.incidents(&q).unwrap())["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(q(&|q| q.kind = Some("drop".into())), [9, 7, 5, 3, 1]);
    assert_eq!(q(&|q| q.node = Some(100)), [10, 8, 6, 4, 2]);
    // Overlap: incident 4 lasted to 4 s + 9 ms; the others' last update is 1 ms after start.
    assert_eq!(
        q(&|q| {
            q.since = Some(4 * S + 5 * MS);
            q.until = Some(6 * S);
        }),
        [6, 5, 4]
    );
    // Pages of 3 cover all 10 once.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = json(
            store
                .incidents(&HistoryQuery {
                    limit: Some(3),
                    cursor: cursor.clone(),
                    ..HistoryQuery::default()
                })
                .unwrap(),
        );
        seen.extend(
            page["incidents"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_u64().unwrap()),
        );
        match page["next"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, (1..=10).rev().collect::<Vec<_>>());
    assert!(matches!(
        store.incidents(&HistoryQuery {
            cursor: Some("f.1.2".into()),
            ..HistoryQuery::default()
        }),
        Err(StoreError::BadRequest(_))
    ));
    // An unknown kind is a bad request that names the kinds, not an empty history; an event
    // kind is no incident kind, nor the other way round.
    let of_kind = |kind: &str| HistoryQuery {
        kind: Some(kind.into()),
        ..HistoryQuery::default()
    };
    match store.incidents(&of_kind("congestion-start")) {
        Err(StoreError::BadRequest(m)) => assert!(m.contains("congestion, "), "{m}"),
        other => panic!("{:?}", other.map(json)),
    }
    match store.events(&of_kind("congestion")) {
        Err(StoreError::BadRequest(m)) => assert!(m.contains("congestion-start"), "{m}"),
        other => panic!("{:?}", other.map(json)),
    }
    assert_eq!(
        json(store.incidents(&of_kind("drop")).unwrap())["incidents"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert!(store.events(&of_kind("congestion-start")).is_ok());
}

/// The ClickHouse schema's per-minute rollups fill as rows are written, and a day's partition
/// goes at retention.
#[test]
fn clickhouse_rollups_fill_and_retention_drops_days() {
    let server = ch::ClickHouse::start(1);
    let store = ClickHouseStore::open(server.config("rollup", "test")).unwrap();
    let day = 86_400 * S;
    let q = |node| AggRow {
        node_id: node,
        port: 1,
        queue_id: Some(0),
        samples: 10,
        avg: 5.0,
        max: 9 + u64::from(node),
        drops: 0,
    };
    // Three intervals in one minute of day 0, one in day 1.
    for (t, node) in [(S, 1), (2 * S, 1), (3 * S, 2), (day + S, 1)] {
        store
            .write(&Batch {
                time_ns: t,
                queues: vec![q(node)],
                ..Batch::default()
            })
            .unwrap();
    }
    let rollup = |sql: &str| {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                &format!("http://127.0.0.1:{}/", server.port),
                "--data-binary",
                sql,
            ])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        rollup(
            "SELECT node_id, sumMerge(samples_total), maxMerge(occupancy_max) FROM rollup.queue_stats_1m \
             GROUP BY minute, node_id ORDER BY minute, node_id"
        ),
        "1\t20\t10\n2\t10\t11\n1\t10\t10\n"
    );
    // The writer's cheap snapshot: rows from the parts' metadata.
    assert_eq!(store.rows_stored().unwrap()["queue_stats"], 4);
    store.prune(day, day, 100).unwrap();
    assert_eq!(store.counts().unwrap()["queue_stats"], 1);
    assert_eq!(
        rollup("SELECT count() FROM rollup.queue_stats_1m"),
        "1\n",
        "the rollup's day went too"
    );
}

#[test]
fn flow_pages_cover_every_flow_once_sqlite() {
    flow_pages_cover_every_flow_once(&Backend::sqlite("pages"));
}

#[test]
fn flow_pages_cover_every_flow_once_clickhouse() {
    let server = Arc::new(ch::ClickHouse::start(1));
    flow_pages_cover_every_flow_once(&Backend::clickhouse(&server, "pages"));
}

/// Flows last seen minutes to hours apart (so ClickHouse widens its search window several
/// times), each written in two versions: pages of 7 list each flow once, newest first, as its
/// newest version; `since` and `until` select by last and first sighting.
fn flow_pages_cover_every_flow_once(backend: &Backend) {
    let store = backend.open();
    let key = |i: u16| intscope_wire::locate::FlowKey {
        src: std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
        dst: std::net::Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped(),
        proto: 6,
        src_port: i,
        dst_port: 80,
    };
    let row = |i: u16, reports: u64| intscope_core::FlowRow {
        key: key(i),
        first_seen_ns: u64::from(i) * 60 * S,
        last_seen_ns: u64::from(i) * 60 * S + u64::from(i) * u64::from(i) * S,
        reports,
        drops: 0,
        last_drop_reason: None,
        path: std::sync::Arc::from(Vec::new()),
        live_id: u64::from(i),
        path_changes: 0,
        e2e_p50: None,
        e2e_p99: None,
        interval: None,
    };
    for reports in [1, 5] {
        store
            .write(&Batch {
                flows: (1..=50).map(|i| row(i, reports)).collect(),
                ..Batch::default()
            })
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = json(
            store
                .flows(&HistoryQuery {
                    limit: Some(7),
                    cursor: cursor.clone(),
                    ..HistoryQuery::default()
                })
                .unwrap(),
        );
        for f in page["flows"].as_array().unwrap() {
            assert_eq!(f["reports"], 5, "{f}");
            seen.push(f["flow"]["src_port"].as_u64().unwrap());
        }
        match page["next"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, (1..=50).rev().collect::<Vec<u64>>());
    let ports = |q: HistoryQuery| -> Vec<u64> {
        json(store.flows(&q).unwrap())["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["flow"]["src_port"].as_u64().unwrap())
            .collect()
    };
    // Last seen at or after flow 40's last sighting.
    assert_eq!(
        ports(HistoryQuery {
            since: Some(40 * 60 * S + 1600 * S),
            ..HistoryQuery::default()
        }),
        (40..=50).rev().collect::<Vec<u64>>()
    );
    // First seen by flow 3's first sighting.
    assert_eq!(
        ports(HistoryQuery {
            until: Some(3 * 60 * S),
            ..HistoryQuery::default()
        }),
        [3, 2, 1]
    );
}

/// Every page of a list query, following each store's own (opaque) cursors: the rows only.
fn all_rows<T: serde::Serialize>(
    mut page: impl FnMut(Option<String>) -> intscope_collector::store::Page<T>,
) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    let mut cursor = None;
    for _ in 0..1000 {
        let p = page(cursor.take());
        rows.extend(p.items.iter().map(json));
        match p.next {
            Some(c) => cursor = Some(c),
            None => return rows,
        }
    }
    panic!("more than 1000 pages");
}

/// SQLite and ClickHouse, given the same flushes, answer every history query alike: the same
/// rows in the same order, page by page (each with its own cursors), whatever the filter.
#[test]
fn sqlite_and_clickhouse_answer_the_same_queries_alike() {
    let server = Arc::new(ch::ClickHouse::start(1));
    let backends = [
        Backend::sqlite("alike"),
        Backend::clickhouse(&server, "alike"),
    ];
    let stores: Vec<Arc<dyn Store>> = backends.iter().map(Backend::open).collect();
    // Flushes of a state with drops (events, an incident), congestion and 40 flows.
    for b in three_flushes(&mut state_with_flows(40)) {
        for st in &stores {
            st.write(&b).unwrap();
        }
    }
    let q = |limit: u32, cursor: Option<String>| HistoryQuery {
        limit: Some(limit),
        cursor,
        ..HistoryQuery::default()
    };
    let mut answers = Vec::new();
    for st in &stores {
        let st = &**st;
        let mut a = serde_json::Map::new();
        a.insert(
            "events".into(),
            all_rows(|c| st.events(&q(2, c)).unwrap()).into(),
        );
        a.insert(
            "events_drop".into(),
            all_rows(|c| {
                st.events(&HistoryQuery {
                    kind: Some("drop".into()),
                    ..q(1, c)
                })
                .unwrap()
            })
            .into(),
        );
        // One node's events, a page of one at a time (SQLite walks its (node, time) index).
        let node = st
            .events(&q(100, None))
            .unwrap()
            .items
            .iter()
            .find_map(|e| e.node_id);
        let of_node = all_rows(|c| st.events(&HistoryQuery { node, ..q(1, c) }).unwrap());
        assert!(
            of_node
                .iter()
                .all(|e| e["node_id"].as_u64() == node.map(u64::from)),
            "events of node {node:?} only"
        );
        a.insert("events_node".into(), of_node.into());
        a.insert(
            "flows".into(),
            all_rows(|c| st.flows(&q(7, c)).unwrap()).into(),
        );
        a.insert(
            "flows_until".into(),
            all_rows(|c| {
                st.flows(&HistoryQuery {
                    until: Some(2 * S),
                    ..q(9, c)
                })
                .unwrap()
            })
            .into(),
        );
        a.insert(
            "queues".into(),
            all_rows(|c| st.queue_series(&q(5, c)).unwrap()).into(),
        );
        a.insert(
            "queues_node".into(),
            all_rows(|c| {
                st.queue_series(&HistoryQuery {
                    node: Some(101),
                    ..q(1, c)
                })
                .unwrap()
            })
            .into(),
        );
        a.insert(
            "incidents".into(),
            all_rows(|c| st.incidents(&q(1, c)).unwrap()).into(),
        );
        // A long range: per minute, from the rollups (the flushes' minute is one row a queue).
        let long = |limit: u32, cursor: Option<String>| HistoryQuery {
            since: Some(S),
            until: Some(2 * 3600 * S),
            ..q(limit, cursor)
        };
        let page = st.queue_series(&long(2, None)).unwrap();
        assert_eq!(
            page.resolution,
            Some(intscope_collector::store::Resolution::Minute)
        );
        a.insert(
            "queues_1m".into(),
            all_rows(|c| st.queue_series(&long(2, c)).unwrap()).into(),
        );
        a.insert(
            "queues_1m_node".into(),
            all_rows(|c| {
                st.queue_series(&HistoryQuery {
                    node: Some(101),
                    ..long(1, c)
                })
                .unwrap()
            })
            .into(),
        );
        // The newest flow (the one with drops), as SQLite lists it.
        let flow = stores[0].flows(&HistoryQuery::default()).unwrap().items[0]
            .flow
            .clone();
        a.insert(
            "flow".into(),
            json(st.flow(&flow, &HistoryQuery::default()).unwrap()),
        );
        a.insert(
            "series".into(),
            json(st.flow_series(&flow, &HistoryQuery::default()).unwrap()),
        );
        a.insert(
            "series_1m".into(),
            json(st.flow_series(&flow, &long(600, None)).unwrap()),
        );
        a.insert("counts".into(), json(st.counts().unwrap()));
        a.insert("totals".into(), json(st.totals().unwrap()));
        answers.push(serde_json::Value::Object(a));
    }
    // Flows seen last at the same time are in no defined order (SQLite breaks the tie by its
    // row, ClickHouse by the flow's hash): both lists must be newest first, and the same once
    // the ties are put in one order.
    for a in &mut answers {
        for k in ["flows", "flows_until"] {
            let list = a[k].as_array_mut().unwrap();
            let seen: Vec<u64> = list
                .iter()
                .map(|f| f["last_seen_ns"].as_u64().unwrap())
                .collect();
            assert!(
                seen.windows(2).all(|w| w[0] >= w[1]),
                "{k} not newest first"
            );
            list.sort_by_key(|f| {
                (
                    std::cmp::Reverse(f["last_seen_ns"].as_u64()),
                    f["flow"].to_string(),
                )
            });
        }
        // Queue intervals of one time likewise (SQLite: by row; ClickHouse: by a hash).
        for k in ["queues", "queues_node", "queues_1m", "queues_1m_node"] {
            let list = a[k].as_array_mut().unwrap();
            let t: Vec<u64> = list
                .iter()
                .map(|q| q["time_ns"].as_u64().unwrap())
                .collect();
            assert!(t.windows(2).all(|w| w[0] <= w[1]), "{k} not oldest first");
            list.sort_by_key(|q| {
                let n = |f: &str| q[f].as_u64().unwrap();
                (n("time_ns"), n("node_id"), n("port"), n("queue_id"))
            });
        }
    }
    for (k, v) in answers[0].as_object().unwrap() {
        if *v != answers[1][k] {
            let (a, b) = (v.to_string(), answers[1][k].to_string());
            let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
            let show = |t: &str| t[at.saturating_sub(80)..(at + 120).min(t.len())].to_string();
            panic!(
                "{k}: SQLite and ClickHouse differ at byte {at}:\n  sqlite:     {}\n  clickhouse: {}",
                show(&a),
                show(&b)
            );
        }
    }
    // Not vacuous: each query found rows.
    for k in [
        "events",
        "events_drop",
        "events_node",
        "flows",
        "flows_until",
        "queues",
        "queues_node",
        "incidents",
    ] {
        assert!(!answers[0][k].as_array().unwrap().is_empty(), "{k}");
    }
}

/// Incidents are kept by the collector's clock: one whose report times are in 1970 (a switch
/// clock never set) stays while it was stored within the retention, and goes after.
fn incidents_are_kept_by_receive_time(backend: &Backend) {
    let store = backend.open();
    store
        .write(&Batch {
            incidents: vec![incident(1, IncidentKind::Congestion, 4, S, 1, None)],
            ..Batch::default()
        })
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let hour = 3_600 * S;
    // Report time says 55 years old; stored a moment ago: kept.
    store.prune(backend.horizon(now), now - hour, 100).unwrap();
    assert_eq!(
        store
            .incidents(&HistoryQuery::default())
            .unwrap()
            .items
            .len(),
        1
    );
    // Stored before the horizon: gone.
    store.prune(backend.horizon(now), now + hour, 100).unwrap();
    assert!(
        store
            .incidents(&HistoryQuery::default())
            .unwrap()
            .items
            .is_empty()
    );
}

#[test]
fn incidents_are_kept_by_receive_time_sqlite() {
    incidents_are_kept_by_receive_time(&Backend::sqlite("recv"));
}

#[test]
fn incidents_are_kept_by_receive_time_clickhouse() {
    let server = Arc::new(ch::ClickHouse::start(1));
    incidents_are_kept_by_receive_time(&Backend::clickhouse(&server, "recv"));
}

/// The nice value in a thread's `stat` (field 19, counted after the parenthesised name, which
/// may hold spaces).
#[cfg(target_os = "linux")]
fn stat_nice(stat: &str) -> i64 {
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(16).unwrap().parse().unwrap()
}

/// The nice value of this process's thread named `name`.
#[cfg(target_os = "linux")]
fn nice_of(name: &str) -> Option<i64> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|t| {
        let t = t.ok()?.path();
        let comm = std::fs::read_to_string(t.join("comm")).ok()?;
        (comm.trim_end() == name)
            .then(|| stat_nice(&std::fs::read_to_string(t.join("stat")).unwrap()))
    })
}

/// The writer yields the CPU to ingest (`store.nice` steps below the process), except with
/// back-pressure, where ingest waits for it.
#[cfg(target_os = "linux")]
#[test]
fn the_writer_runs_below_ingest_unless_ingest_waits_for_it() {
    let own = stat_nice(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
    for (backpressure, expected) in [(false, (own + 10).min(19)), (true, own)] {
        let stats = Arc::new(StoreStats::default());
        let cfg = StoreConfig {
            backpressure,
            ..StoreConfig::default()
        };
        let store = Arc::new(SlowStore {
            written: Default::default(),
        });
        let (tx, writer) = spawn_writer(store, cfg, Arc::clone(&stats));
        // The writer sets its priority before it takes its first batch: once that batch is
        // committed the value is final.
        assert!(Flusher::new(tx.clone(), Arc::clone(&stats)).offer(|| Some(Batch::default())));
        while stats.pending.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let seen = nice_of("store-writer");
        assert_eq!(seen, Some(expected), "backpressure {backpressure}");
        drop(tx);
        writer.join().unwrap();
    }
}

/// While the receive threads are short of CPU (here: every receive call filled its batch), a
/// due flush is put off up to `max_stretch` intervals; once they are not, flushes come every
/// interval again. Nothing is lost either way: the last flush at the stop takes the rest.
#[test]
fn flushes_stretch_while_ingest_is_short_of_cpu() {
    use intscope_collector::hub::{Collector, CollectorConfig};
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};
    let tmp = tempdir("store-stretch");
    let mut config = CollectorConfig {
        data: Some(tmp.path().to_path_buf()),
        int_udp_ports: vec![INT_PORT],
        ..CollectorConfig::default()
    };
    config.store.flush_interval_ms = 50;
    config.store.max_stretch = 4;
    let c = Collector::open(config).unwrap();
    let handle = c.start_store().unwrap();
    let stats = &c.store_stats;
    // Batches committed over `span`, with full receive batches all along or none.
    let committed_over = |span: Duration, full: bool| {
        let before = stats.batches.load(Relaxed);
        let end = Instant::now() + span;
        while Instant::now() < end {
            c.stats.recv_calls.fetch_add(4, Relaxed);
            c.stats
                .recv_full
                .fetch_add(if full { 4 } else { 0 }, Relaxed);
            std::thread::sleep(Duration::from_millis(2));
        }
        stats.batches.load(Relaxed) - before
    };
    committed_over(Duration::from_millis(300), false);
    let relaxed = committed_over(Duration::from_millis(1200), false);
    let pressed = committed_over(Duration::from_millis(1200), true);
    let stretched = stats.flushes_stretched.load(Relaxed);
    // 1.2 s is 24 intervals; stretched to 4 intervals (200 ms) it is 6 flushes.
    assert!(relaxed >= 10, "{relaxed} flushes in 24 intervals");
    assert!(
        (2..=8).contains(&pressed),
        "{pressed} flushes in 24 intervals under pressure, {stretched} put off"
    );
    assert!(stretched >= 8, "{stretched} flushes put off");
    assert!(committed_over(Duration::from_millis(1200), false) >= 10);
    c.stop();
    handle.finish();
}
