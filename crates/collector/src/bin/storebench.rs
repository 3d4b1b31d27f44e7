//! `storebench`: fills a history store the way collectors do and measures the API's history
//! queries as it grows — a tool to rerun, not a test.
//!
//! The load generator's v2.0 traffic (4-node paths) runs through the live state; every
//! `--flows` flows make one flush interval (each flow one `flows` version and one series row of
//! 4 hops), written with the store's own writer path in parts of 65 536 flows. At each
//! checkpoint (a number of intervals written) it times `--queries` runs each of: the flow list
//! (newest 500), one random flow's series (its newest 600 intervals), and the incident list
//! (newest 500 of `--incidents` incidents written at the start). Output: one JSON line per
//! checkpoint (rows, hop rows = series rows × hops, write rate, p50/p99 in ms).
//!
//! `--xd-split node|flow` measures instead how INT-XD postcards (Report v0.5, one per hop)
//! spread over two collectors come out in the shared store: split by reporting switch (each
//! switch configured with one collector) or steered by the flow's hash (every postcard of a
//! flow to one collector). It prints how many stored flows have their whole path.
//!
//! `--intervals 0` writes nothing and times the queries on what the store already holds.
//!
//! ```text
//! cargo build --release -p intscope-collector --bin storebench
//! target/release/storebench --store clickhouse:http://127.0.0.1:8123 --flows 1000000 \
//!     --intervals 25 --checkpoints 1,5,10,25
//! target/release/storebench --store sqlite:/tmp/bench-sqlite --flows 200000 --intervals 25
//! ```

use std::time::{Duration, Instant};

use intscope_collector::store::{
    ClickHouseConfig, ClickHouseStore, FlushTake, HistoryQuery, SqliteStore, Store, StoreStats,
};
use intscope_core::Batch;
use intscope_core::loadgen::{self, Generator, LoadConfig};
use intscope_core::{
    DetectConfig as Thresholds, FlowKeyMode, FlowRef, Incident, IncidentCounts, IncidentKind,
    IncidentPlace, IncidentState, Record, Severity, State, decode_datagram,
};

struct Args {
    store: String,
    cluster: Option<String>,
    flows: u32,
    intervals: u32,
    checkpoints: Vec<u32>,
    queries: usize,
    incidents: u64,
    xd_split: Option<String>,
    database: Option<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: storebench --store sqlite:DIR|clickhouse:URL[,URL...] [--cluster NAME] [--database DB] \
         [--flows N] [--intervals K] [--checkpoints a,b,c] [--queries Q] [--incidents N] \
         [--xd-split node|flow]"
    );
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        store: String::new(),
        cluster: None,
        flows: 100_000,
        intervals: 10,
        checkpoints: Vec::new(),
        queries: 100,
        incidents: 10_000,
        xd_split: None,
        database: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| usage());
        let num = |v: &str| v.parse::<u64>().unwrap_or_else(|_| usage());
        match k.as_str() {
            "--store" => a.store = v,
            "--cluster" => a.cluster = Some(v),
            "--database" => a.database = Some(v),
            "--flows" => a.flows = num(&v) as u32,
            "--intervals" => a.intervals = num(&v) as u32,
            "--checkpoints" => a.checkpoints = v.split(',').map(|c| num(c) as u32).collect(),
            "--queries" => a.queries = num(&v) as usize,
            "--incidents" => a.incidents = num(&v),
            "--xd-split" if v == "node" || v == "flow" => a.xd_split = Some(v),
            _ => usage(),
        }
    }
    if a.store.is_empty() {
        usage();
    }
    if a.checkpoints.is_empty() {
        a.checkpoints = vec![a.intervals];
    }
    a
}

fn open(a: &Args, source: &str) -> Box<dyn Store> {
    match a.store.split_once(':') {
        Some(("sqlite", dir)) => Box::new(SqliteStore::open(dir.as_ref()).expect("sqlite store")),
        Some(("clickhouse", urls)) => {
            let mut c =
                ClickHouseConfig::parse(urls, a.cluster.clone(), source).expect("store spec");
            if let Some(db) = &a.database {
                c.database = db.clone();
            }
            Box::new(ClickHouseStore::open(c).expect("clickhouse store"))
        }
        _ => usage(),
    }
}

/// Two collectors' states fed one stream of v0.5 postcards, split by `how`; both flushed into
/// the store; then the stored flows' paths are counted.
fn xd_split(a: &Args, how: &str) {
    let stores = [open(a, "xd-a"), open(a, "xd-b")];
    let states = [
        State::new(Thresholds::default()),
        State::new(Thresholds::default()),
    ];
    let mut g = Generator::new(LoadConfig {
        flows: a.flows,
        hops: 4,
        version: loadgen::LoadVersion::V05,
        batch: 1,
        ..LoadConfig::default()
    });
    let cfg = loadgen::detect_config();
    let (mut rec, mut buf, mut t) = (Record::default(), Vec::new(), 0u64);
    let postcards = u64::from(a.flows) * 4 * u64::from(a.intervals);
    let mut sent = [0u64; 2];
    for _ in 0..postcards {
        g.next_datagram(&mut buf);
        t += 1_000;
        let _ = decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
            let c = match (how, &r.flow) {
                ("flow", Some(k)) => {
                    intscope_collector::store::clickhouse::flow_hash(&FlowRef::from(k)) % 2
                }
                _ => u64::from(r.node_id) % 2,
            } as usize;
            sent[c] += 1;
            states[c].process(r);
        });
    }
    let stats = StoreStats::default();
    for (state, store) in states.iter().zip(&stores) {
        // Past the join window: every waiting postcard is joined or given up.
        state.tick(t + 10_000_000_000);
        let mut take = FlushTake::new(state, &mut 1, Vec::new(), &stats, 65_536);
        store.write_parts(&mut take).expect("write");
    }
    let q = HistoryQuery {
        limit: Some(10_000),
        timeout: Some(Duration::from_secs(60)),
        ..HistoryQuery::default()
    };
    let (mut flows, mut whole, mut reports) = (0u64, 0u64, 0u64);
    let mut q = q;
    loop {
        let page = stores[0].flows(&q).expect("flows");
        for f in &page.items {
            flows += 1;
            whole += u64::from(f.path.len() == 4);
            reports += f.reports;
        }
        match page.next {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "xd_split": how, "store": a.store, "postcards": postcards, "per_collector": sent,
            "flows_stored": flows, "flows_with_whole_path": whole, "reports_stored": reports,
        })
    );
}

fn incident(id: u64) -> Incident {
    let kinds = IncidentKind::ALL;
    Incident {
        id,
        kind: kinds[(id % kinds.len() as u64) as usize],
        place: IncidentPlace {
            node: Some((id % 64) as u32),
            port: Some((id % 8) as u32),
            ..IncidentPlace::default()
        },
        cause: None,
        state: IncidentState::Resolved,
        severity: Severity::Warning,
        start_ns: id * 1_000_000,
        start_uncertainty_ns: 0,
        last_update_ns: id * 1_000_000 + 500_000,
        end_ns: Some(id * 1_000_000 + 600_000),
        end_uncertainty_ns: 0,
        end_reason: Some(intscope_core::EndReason::Normal),
        received_ns: None,
        updates: 4,
        counts: IncidentCounts {
            samples: 40,
            reports: 40,
            ..IncidentCounts::default()
        },
        peak: None,
        threshold: Some(1000),
        baseline: Some(100),
        flows: Vec::new(),
        symptoms: Vec::new(),
        evidence: None,
    }
}

/// p50 and p99 of `f`'s run time over `n` runs, in milliseconds.
fn time(n: usize, mut f: impl FnMut(usize)) -> (f64, f64) {
    let mut t: Vec<Duration> = (0..n)
        .map(|i| {
            let s = Instant::now();
            f(i);
            s.elapsed()
        })
        .collect();
    t.sort();
    let at = |q: f64| t[((t.len() as f64 * q) as usize).min(t.len() - 1)].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

fn main() {
    let a = args();
    if let Some(how) = &a.xd_split {
        xd_split(&a, how);
        return;
    }
    let store = open(&a, "bench");
    if a.intervals == 0 {
        // Queries only, on what the store holds: the series of flows from the newest page.
        let page = store
            .flows(&HistoryQuery {
                limit: Some(1000),
                timeout: Some(Duration::from_secs(120)),
                ..HistoryQuery::default()
            })
            .expect("flow list");
        let sample: Vec<FlowRef> = page.items.into_iter().map(|f| f.flow).collect();
        assert!(!sample.is_empty(), "the store holds no flows");
        measure(&a, &*store, &sample, 0, 0, Duration::ZERO);
        return;
    }
    for chunk in (1..=a.incidents).collect::<Vec<_>>().chunks(10_000) {
        store
            .write(&Batch {
                incidents: chunk.iter().map(|&i| incident(i)).collect(),
                ..Batch::default()
            })
            .expect("writing incidents");
    }
    let mut g = Generator::new(LoadConfig::coalesced_v2(a.flows));
    let cfg = loadgen::detect_config();
    let state = State::new(Thresholds::default());
    let (mut rec, mut buf, mut t) = (Record::default(), Vec::new(), 0u64);
    let stats = StoreStats::default();
    let mut last_event = 1;
    let mut sample: Vec<FlowRef> = Vec::new();
    let (mut series_rows, mut write_time) = (0u64, Duration::ZERO);
    for interval in 1..=a.intervals {
        while state.read().flows_to_store() < a.flows as usize {
            for _ in 0..1000 {
                g.next_datagram(&mut buf);
                t += 1_000;
                let _ = decode_datagram(&buf, t, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
                    state.process(r)
                });
            }
        }
        let take = FlushTake::new(&state, &mut last_event, Vec::new(), &stats, 65_536);
        let started = Instant::now();
        let mut parts = take.inspect(|b| {
            series_rows += b.flows.iter().filter(|f| f.interval.is_some()).count() as u64;
            if sample.len() < 1000 {
                sample.extend(b.flows.iter().take(1000).map(|f| FlowRef::from(&f.key)));
            }
        });
        store.write_parts(&mut parts).expect("write");
        write_time += started.elapsed();
        if !a.checkpoints.contains(&interval) {
            continue;
        }
        measure(&a, &*store, &sample, interval, series_rows, write_time);
    }
}

/// Times the three queries at this size and prints one JSON line.
fn measure(
    a: &Args,
    store: &dyn Store,
    sample: &[FlowRef],
    interval: u32,
    series_rows: u64,
    write_time: Duration,
) {
    let hops = 4u64;
    let strict = HistoryQuery {
        timeout: Some(Duration::from_secs(60)),
        ..HistoryQuery::default()
    };
    let counts = store.counts().expect("counts");
    let flows = time(a.queries, |_| {
        store.flows(&strict).expect("flow list");
    });
    let series = time(a.queries, |i| {
        let f = &sample[(i * 7919) % sample.len()];
        let s = store.flow_series(f, &strict).expect("series");
        assert!(!s.is_empty(), "no series for {f:?}");
    });
    let incidents = time(a.queries, |_| {
        store.incidents(&strict).expect("incidents");
    });
    println!(
        "{}",
        serde_json::json!({
            "store": a.store, "intervals": interval, "flows": a.flows,
            "series_rows": series_rows, "hop_rows": series_rows * hops,
            "rows": counts,
            "write_series_rows_per_s": (series_rows as f64 / write_time.as_secs_f64()).round(),
            "flow_list_ms": {"p50": flows.0, "p99": flows.1},
            "flow_series_ms": {"p50": series.0, "p99": series.1},
            "incidents_ms": {"p50": incidents.0, "p99": incidents.1},
        })
    );
}
