//! The SQLite store: batches round-trip, retention prunes, event IDs continue.

mod common;

use common::*;
use intscope_collector::store::{
    Batch, Flusher, HistoryQuery, SqliteStore, Store, StoreConfig, StoreError, StoreStats,
    collect_batch, spawn_writer,
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

/// A store that takes its time to commit.
struct SlowStore {
    written: std::sync::atomic::AtomicU64,
}

impl Store for SlowStore {
    fn write(&self, _: &Batch) -> Result<(), StoreError> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        self.written
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
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
    fn counts(&self) -> Result<serde_json::Value, StoreError> {
        Ok(serde_json::Value::Null)
    }
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
