//! Schema migrations: a store created by the previous release (9d213bf, schema version 1: no
//! version table, no `received_ns` columns; `tests/fixtures/schema-v1-*.sql`) with rows in it,
//! opened by this build: its rows read back, new rows are written with the new columns (v2:
//! `received_ns`; v3: the events' `incident_id`; v4, ClickHouse: the flows' newest versions,
//! filled from the flows stored before), the version is recorded once, and a store of a newer
//! version is refused.
//!
//! Cost: SQLite well under a second; ClickHouse one server start (~1 s) and a few queries.

mod ch;
mod common;

use intscope_collector::store::{
    ClickHouseStore, HistoryQuery, Resolution, SqliteStore, Store, StoreError,
};
use intscope_core::{
    Batch, Incident, IncidentCounts, IncidentKind, IncidentPlace, IncidentState, RowSink, Severity,
};

fn incident(id: u64, updates: u64, end: Option<u64>) -> Incident {
    Incident {
        id,
        kind: IncidentKind::Congestion,
        place: IncidentPlace {
            node: Some(4),
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
        start_ns: 1_000_000_000 * id,
        start_uncertainty_ns: 0,
        last_update_ns: 1_000_000_000 * id + updates,
        end_ns: end,
        end_uncertainty_ns: 0,
        end_reason: end.map(|_| intscope_core::EndReason::Normal),
        received_ns: Some(77),
        updates,
        counts: IncidentCounts::default(),
        peak: None,
        threshold: Some(1000),
        baseline: None,
        flows: Vec::new(),
        symptoms: Vec::new(),
        evidence: None,
    }
}

/// The first column of `sql`'s rows.
fn column<T: rusqlite::types::FromSql>(conn: &rusqlite::Connection, sql: &str) -> Vec<T> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// The incidents the store lists, as (id, updates, state).
fn listed(store: &dyn Store) -> Vec<(u64, u64, IncidentState)> {
    let mut v: Vec<_> = store
        .incidents(&HistoryQuery::default())
        .unwrap()
        .items
        .iter()
        .map(|i| (i.id, i.updates, i.state))
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

#[test]
fn a_previous_release_sqlite_store_is_migrated() {
    let tmp = common::tempdir("migrate");
    let dir = tmp.path();
    {
        let conn = rusqlite::Connection::open(dir.join(SqliteStore::FILE)).unwrap();
        conn.execute_batch(&fixture("schema-v1-sqlite.sql"))
            .unwrap();
        // A row as the previous release wrote it (its columns only).
        let old = incident(1, 2, None);
        conn.execute(
            "INSERT INTO incidents(id,version,kind,node_id,start_ns,last_update_ns,end_ns,body)
             VALUES(1, 4, 'congestion', 4, ?1, ?2, NULL, ?3)",
            rusqlite::params![
                old.start_ns as i64,
                old.last_update_ns as i64,
                old.to_json().to_string()
            ],
        )
        .unwrap();
        // Two intervals of a queue in one minute (v4 reads long ranges from their rollup).
        conn.execute_batch(
            "INSERT INTO queue_stats VALUES(61000000000, 4, 2, 0, 3, 10.0, 12);
             INSERT INTO queue_stats VALUES(62000000000, 4, 2, 0, 1, 30.0, 40);",
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir).unwrap();
    assert_eq!(listed(&store), [(1, 2, IncidentState::Ongoing)]);
    // The rollup was filled from the stored intervals.
    let minutes = store
        .queue_series(&HistoryQuery {
            since: Some(0),
            until: Some(7_200_000_000_000),
            ..HistoryQuery::default()
        })
        .unwrap();
    assert_eq!(minutes.resolution, Some(Resolution::Minute));
    let m: Vec<_> = minutes
        .items
        .iter()
        .map(|q| (q.time_ns, q.samples, q.avg_occupancy, q.max_occupancy))
        .collect();
    assert_eq!(m, [(60_000_000_000, 4, 15.0, 40)]);
    store
        .write(&Batch {
            incidents: vec![incident(1, 3, Some(1_000_000_900)), incident(2, 1, None)],
            ..Batch::default()
        })
        .unwrap();
    assert_eq!(
        listed(&store),
        [
            (1, 3, IncidentState::Resolved),
            (2, 1, IncidentState::Ongoing)
        ]
    );
    drop(store);
    // Reopened: nothing to migrate, the version recorded once, the new column written.
    let store = SqliteStore::open(dir).unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(dir.join(SqliteStore::FILE)).unwrap();
    let versions: Vec<i64> = column(&conn, "SELECT version FROM schema_version");
    assert_eq!(versions, [4]);
    let event_columns: Vec<String> = column(&conn, "SELECT name FROM pragma_table_info('events')");
    assert!(
        event_columns.iter().any(|c| c == "incident_id"),
        "{event_columns:?}"
    );
    let received: Vec<Option<i64>> = column(&conn, "SELECT received_ns FROM incidents ORDER BY id");
    // Stored on the collector's clock (when each version was written), not the incident's.
    assert!(
        received
            .iter()
            .all(|r| r.unwrap() > 1_000_000_000_000_000_000),
        "{received:?}"
    );
    // A file of a newer schema is refused, not misread.
    conn.execute("INSERT INTO schema_version VALUES(99, 0)", [])
        .unwrap();
    drop(conn);
    match SqliteStore::open(dir) {
        Err(StoreError::BadRequest(m)) => assert!(m.contains("newer"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn a_previous_release_clickhouse_store_is_migrated() {
    let server = ch::ClickHouse::start(1);
    let db = "mig";
    server.query(0, &format!("CREATE DATABASE {db}"));
    for stmt in fixture("schema-v1-clickhouse.sql")
        .lines()
        .filter(|l| !l.starts_with("--") && !l.trim().is_empty())
    {
        let r = server.query(0, &stmt.replace("{db}", db));
        assert!(r.is_empty(), "{stmt}: {r}");
    }
    let old = incident(1, 2, None);
    let body = old.to_json().to_string().replace('\'', "\\'");
    let r = server.query(
        0,
        &format!(
            "INSERT INTO {db}.incidents (source, id, version, kind, node_id, start_ns, \
             last_update_ns, end_ns, body) VALUES ('test', 1, 4, 'congestion', 4, {}, {}, NULL, '{body}')",
            old.start_ns, old.last_update_ns
        ),
    );
    assert!(r.is_empty(), "{r}");

    // A flow the previous release stored (two versions): the flow list reads the flows'
    // newest versions (v4), filled from these at migration.
    for reports in [3, 9] {
        let r = server.query(
            0,
            &format!(
                "INSERT INTO {db}.flows (source, run, live_id, flow_hash, src, dst, proto, src_port, \
                 dst_port, first_seen_ns, last_seen_ns, reports, drops, last_drop_reason, path, \
                 path_changes, e2e_p50, e2e_p99) VALUES ('test', 1, 1, 42, '10.0.0.1', '10.0.0.2', \
                 17, 1000, 2000, 5000000000, {}, {reports}, 0, NULL, '[]', 0, NULL, NULL)",
                5_000_000_000u64 + reports
            ),
        );
        assert!(r.is_empty(), "{r}");
    }

    // An event of node 4 the previous release stored: a page of node 4's events finds it (v4
    // searches between the oldest and newest event of the node, copied at migration).
    let r = server.query(
        0,
        &format!(
            "INSERT INTO {db}.events (source, id, time_ns, kind, node_id, port, queue_id, flow_id, \
             src, dst, proto, src_port, dst_port, evidence) VALUES ('test', 1, 6000000000, \
             'drop', 4, 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '{{}}')"
        ),
    );
    assert!(r.is_empty(), "{r}");

    let spool = common::tempdir("migrate-ch");
    let mut cfg = server.config(db, "test");
    cfg.spool_dir = Some(spool.path().to_path_buf());
    let store = ClickHouseStore::open(cfg.clone()).unwrap();
    assert_eq!(listed(&store), [(1, 2, IncidentState::Ongoing)]);
    let of_node = |node| {
        store
            .events(&HistoryQuery {
                node: Some(node),
                ..HistoryQuery::default()
            })
            .unwrap()
            .items
            .iter()
            .map(|e| (e.id, e.time_ns))
            .collect::<Vec<_>>()
    };
    assert_eq!(of_node(4), [(1, 6_000_000_000)]);
    assert_eq!(of_node(5), []);
    let flows = store.flows(&HistoryQuery::default()).unwrap().items;
    assert_eq!(
        flows
            .iter()
            .map(|f| (f.flow.src_port, f.reports, f.last_seen_ns))
            .collect::<Vec<_>>(),
        [(1000, 9, 5_000_000_009)],
        "the stored flow is listed once, as its newest version"
    );
    store
        .write(&Batch {
            incidents: vec![incident(1, 3, Some(1_000_000_900)), incident(2, 1, None)],
            ..Batch::default()
        })
        .unwrap();
    assert_eq!(
        listed(&store),
        [
            (1, 3, IncidentState::Resolved),
            (2, 1, IncidentState::Ongoing)
        ]
    );
    // Nothing went to the spool: every insert was taken as written.
    assert_eq!(store.spool_stats().unwrap().spooled_rows, 0);
    drop(store);
    let store = ClickHouseStore::open(cfg.clone()).unwrap();
    drop(store);
    assert_eq!(
        server.query(0, &format!("SELECT version FROM {db}.schema_version")),
        "4"
    );
    assert_eq!(
        server.query(
            0,
            &format!(
                "SELECT type FROM system.columns WHERE database = '{db}' AND table = 'events' AND name = 'incident_id'"
            )
        ),
        "Nullable(UInt64)"
    );
    for t in ["events", "incidents"] {
        assert_eq!(
            server.query(
                0,
                &format!(
                    "SELECT type FROM system.columns WHERE database = '{db}' AND table = '{t}' AND name = 'received_ns'"
                )
            ),
            "UInt64",
            "{t}"
        );
    }
    let received: u64 = server
        .query(
            0,
            &format!("SELECT received_ns FROM {db}.incidents WHERE id = 2"),
        )
        .parse()
        .unwrap();
    assert!(received > 1_000_000_000_000_000_000, "{received}");
    // A database of a newer schema is refused.
    server.query(
        0,
        &format!("INSERT INTO {db}.schema_version VALUES (99, 0)"),
    );
    match ClickHouseStore::open(cfg.clone()) {
        Err(e) => assert!(e.to_string().contains("newer"), "{e}"),
        Ok(_) => panic!("a newer schema was opened"),
    }
}
