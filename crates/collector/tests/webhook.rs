//! The webhook sink (issue 35, item 6): a demo fault's incident reaches a receiver as
//! Alertmanager's webhook JSON when it starts and when it ends; a receiver that fails is
//! retried; a dead receiver fills only its own bounded queue, whose drops are counted in
//! `/metrics`, while a live receiver beside it gets everything at once.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::*;
use intscope_collector::api::{Api, render_metrics};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_collector::webhook::Webhook;
use intscope_collector::webhook_config::WebhookConfig;
use intscope_core::RecordBatch;
use serde_json::Value;

/// A local receiver: every POSTed body kept, the first `fail_first` answered 500.
struct Receiver {
    addr: SocketAddr,
    bodies: Arc<Mutex<Vec<Value>>>,
    hits: Arc<AtomicUsize>,
}

impl Receiver {
    fn start(rt: &tokio::runtime::Runtime, fail_first: usize) -> Receiver {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let hits = Arc::new(AtomicUsize::new(0));
        let (b, h) = (Arc::clone(&bodies), Arc::clone(&hits));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (b, h) = (Arc::clone(&b), Arc::clone(&h));
                async move {
                    if h.fetch_add(1, Ordering::SeqCst) < fail_first {
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    let v: Value = serde_json::from_slice(&body).expect("JSON");
                    b.lock().unwrap().push(v);
                    StatusCode::OK
                }
            }),
        );
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move { axum::serve(listener, app).await });
        Receiver { addr, bodies, hits }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    /// Waits up to `secs` for `n` bodies.
    fn wait_for(&self, n: usize, secs: u64) -> Vec<Value> {
        let until = Instant::now() + Duration::from_secs(secs);
        while self.bodies().len() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.bodies()
    }
}

/// A receiver that accepts connections and never answers (each held open): its address.
fn dead_receiver(rt: &tokio::runtime::Runtime) -> SocketAddr {
    let dead = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = dead.local_addr().unwrap();
    rt.spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = dead.accept().await {
            held.push(s);
        }
    });
    addr
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn quick(urls: Vec<String>) -> WebhookConfig {
    WebhookConfig {
        urls,
        console_url: Some("http://console.example:8080/".into()),
        poll_interval_ms: 20,
        backoff_ms: 10,
        ..WebhookConfig::default()
    }
}

/// The single alert of a payload, checked against Alertmanager's webhook shape.
fn alert(p: &Value) -> &Value {
    assert_eq!(p["version"], "4", "{p}");
    assert_eq!(p["receiver"], "intscope");
    let alerts = p["alerts"].as_array().expect("alerts");
    assert_eq!(alerts.len(), 1, "{p}");
    let a = &alerts[0];
    assert_eq!(a["status"], p["status"]);
    for k in ["startsAt", "endsAt", "generatorURL", "fingerprint"] {
        assert!(a[k].is_string(), "{k} in {a}");
    }
    assert!(a["annotations"]["summary"].is_string());
    assert!(a["annotations"]["description"].is_string());
    a
}

/// The demo's routing-miss fault (leaf 2 has no route to leaf 4), alone, early: its drop
/// incident is sent firing while it lasts and resolved once it went quiet, with its labels.
#[test]
fn a_demo_fault_is_sent_when_it_starts_and_when_it_ends() {
    use intscope_sim::{Fabric, Fault, Scenario, mix};
    let rt = runtime();
    let _rt = rt.enter();
    let rx = Receiver::start(&rt, 0);
    let sc = Scenario::default();
    let fault = sc
        .schedule(60.0)
        .into_iter()
        .find(|s| matches!(s.fault, Fault::RoutingMiss { .. }))
        .expect("the demo has a routing miss");
    let Fault::RoutingMiss { leaf, .. } = fault.fault else {
        unreachable!()
    };
    let mut f = Fabric::new(sc.sim_config(intscope_node::Mode::Md)).unwrap();
    // Long enough to outlast a drop incident's gathering (about 2.1 s: it waits for the path
    // correlation to name a failed link it may belong to).
    let (from, until, end) = (1_000 * MS, 4_000 * MS, 4_500 * MS);
    for flow in mix(f.topology(), sc.flows, sc.seed, end, &sc.mix) {
        f.add_flow(flow);
    }
    f.schedule(intscope_sim::Scheduled {
        from_ns: from,
        until_ns: until,
        fault: fault.fault.clone(),
    });
    let mut cfg = CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        ..CollectorConfig::default()
    };
    // Longer than the switches' drop report interval (1 s), shorter than the default's 5 s.
    cfg.detect.incident_quiet_ns = 1_500 * MS;
    let c = Collector::open(cfg).unwrap();
    let hook = Webhook::start(Arc::clone(&c), &quick(vec![rx.url()]), "unused").unwrap();
    let mut batch = RecordBatch::default();
    let mut t = 0;
    let mut firing_seen_at = None;
    while t < end {
        t += 20 * MS;
        f.run(t);
        for r in f.take_reports() {
            c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
        c.tick(t);
        // Paced so that the watcher reads the log while the fault lasts, as live.
        if t > from && t < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if firing_seen_at.is_none() && !rx.bodies().is_empty() {
            firing_seen_at = Some(t);
        }
    }
    for r in f.take_all_reports() {
        c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
    }
    c.tick(end + 3 * S);
    let drops = |b: &[Value]| -> Vec<Value> {
        b.iter()
            .filter(|p| p["alerts"][0]["labels"]["alertname"] == "drop")
            .cloned()
            .collect()
    };
    let until_t = Instant::now() + Duration::from_secs(10);
    while drops(&rx.bodies()).len() < 2 && Instant::now() < until_t {
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = drops(&rx.bodies());
    assert_eq!(got.len(), 2, "a firing and a resolved drop: {got:#?}");
    let (fire, res) = (alert(&got[0]), alert(&got[1]));
    assert_eq!(got[0]["status"], "firing");
    assert_eq!(got[1]["status"], "resolved");
    assert!(
        firing_seen_at.is_some_and(|at| at < until + 500 * MS),
        "the firing came while the fault lasted, not at the end: {firing_seen_at:?}"
    );
    let id = c
        .state
        .incidents()
        .into_iter()
        .find(|i| i.kind.label() == "drop")
        .expect("the drop incident")
        .id;
    for a in [fire, res] {
        let l = &a["labels"];
        assert_eq!(l["alertname"], "drop");
        assert_eq!(l["node"], leaf.to_string());
        assert_eq!(l["cause"], "routing-miss");
        assert_eq!(l["severity"], "major");
        assert_eq!(l["incident"], id.to_string());
        assert_eq!(
            a["generatorURL"],
            format!("http://console.example:8080/#/incident/{id}")
        );
    }
    assert_eq!(fire["fingerprint"], res["fingerprint"]);
    assert_eq!(fire["startsAt"], res["startsAt"]);
    assert_eq!(fire["endsAt"], "0001-01-01T00:00:00Z");
    // The sim's clock starts at the epoch: 1 s in, ended within a second or so of the fault.
    let starts = fire["startsAt"].as_str().unwrap();
    assert!(starts.starts_with("1970-01-01T00:00:01."), "{starts}");
    let ends = res["endsAt"].as_str().unwrap();
    assert!(
        ends.starts_with("1970-01-01T00:00:0") && *ends > *starts,
        "{ends}"
    );
    assert!(
        res["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains("routing-miss"),
        "{res}"
    );
    assert_eq!(
        hook.stats.receivers[0]
            .dropped_queue_full
            .load(Ordering::Relaxed),
        0
    );
}

const SPINE: u32 = 101;

/// Congestion at the spine's `port` (occupancy `occ`) in a report received at `t`.
fn queue(c: &Collector, port: u16, occ: u32, t: u64, batch: &mut RecordBatch) {
    let d = Rep::new(
        port,
        &[H(1, 3, 800, 10), H(SPINE, port, 900, occ)],
        H(2, 5, 700, 10),
    )
    .datagram();
    c.ingest(&d, "10.0.0.1".parse().unwrap(), t, batch);
}

fn collector() -> Arc<Collector> {
    Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![INT_PORT],
        ..CollectorConfig::default()
    })
    .unwrap()
}

/// Congestion incidents at the spine's `ports`, ongoing and published: congested samples
/// every 10 ms from `t0` for 200 ms (past the grouping time, never quiet for an episode).
fn congest(c: &Collector, ports: std::ops::RangeInclusive<u16>, t0: u64) {
    let mut batch = RecordBatch::default();
    for k in 0..20 {
        let t = t0 + k * 10 * MS;
        for p in ports.clone() {
            queue(c, p, 3000, t, &mut batch);
        }
        c.tick(t);
    }
}

/// A receiver that answers 500 before it answers 200 gets the notification again, after the
/// backoff; the failure is counted by reason and nothing is dropped.
#[test]
fn a_failing_receiver_is_retried_until_it_takes_the_notification() {
    let rt = runtime();
    let _rt = rt.enter();
    let rx = Receiver::start(&rt, 2);
    let c = collector();
    let hook = Webhook::start(
        Arc::clone(&c),
        &WebhookConfig {
            retries: 3,
            ..quick(vec![rx.url()])
        },
        "http://127.0.0.1/",
    )
    .unwrap();
    congest(&c, 1..=1, 10 * S);
    let got = rx.wait_for(1, 10);
    assert_eq!(got.len(), 1, "delivered once: {got:#?}");
    assert_eq!(got[0]["status"], "firing");
    assert_eq!(alert(&got[0])["labels"]["alertname"], "congestion");
    assert_eq!(rx.hits.load(Ordering::SeqCst), 3, "two 500s, then the 200");
    let r = &hook.stats.receivers[0];
    assert_eq!(r.sent.load(Ordering::Relaxed), 1);
    assert_eq!(r.bad_status.load(Ordering::Relaxed), 2);
    assert_eq!(r.dropped_retries.load(Ordering::Relaxed), 0);
    // Retries are bounded: one more failure than retries allow is given up and counted.
    let rx2 = Receiver::start(&rt, usize::MAX);
    let c2 = collector();
    let hook2 = Webhook::start(
        Arc::clone(&c2),
        &WebhookConfig {
            retries: 2,
            ..quick(vec![rx2.url()])
        },
        "http://127.0.0.1/",
    )
    .unwrap();
    congest(&c2, 1..=1, 10 * S);
    let r2 = &hook2.stats.receivers[0];
    let until = Instant::now() + Duration::from_secs(10);
    while r2.dropped_retries.load(Ordering::Relaxed) == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(r2.dropped_retries.load(Ordering::Relaxed), 1);
    assert_eq!(
        rx2.hits.load(Ordering::SeqCst),
        3,
        "the first try and two retries"
    );
    assert_eq!(r2.bad_status.load(Ordering::Relaxed), 3);
}

/// A receiver that accepts connections and never answers: its first notification waits for
/// its timeout, the next fill its queue of 8 and the surplus is dropped and counted, in
/// `/metrics` too; the live receiver beside it has every notification at once, and ingest
/// never waited.
#[test]
fn a_dead_receiver_fills_its_bounded_queue_and_its_drops_are_counted() {
    let rt = runtime();
    let _rt = rt.enter();
    let live = Receiver::start(&rt, 0);
    let dead_addr = dead_receiver(&rt);
    let c = collector();
    let hook = Webhook::start(
        Arc::clone(&c),
        &WebhookConfig {
            queue: 8,
            // The dead receiver's first notification stays in flight for the whole test.
            timeout_ms: 60_000,
            ..quick(vec![format!("http://{dead_addr}/hook"), live.url()])
        },
        "http://127.0.0.1/",
    )
    .unwrap();
    let mut ingest_took = Duration::ZERO;
    let started = Instant::now();
    // Five faults of four queues each, one after the other, the earlier ones lasting.
    for k in 0..5u16 {
        let t = Instant::now();
        congest(&c, 1..=4 * k + 4, 10 * S + u64::from(k) * 200 * MS);
        ingest_took += t.elapsed();
        live.wait_for(usize::from(4 * k + 4), 5);
    }
    let live_took = started.elapsed();
    let got = live.bodies();
    assert_eq!(got.len(), 20, "the live receiver has every incident");
    assert!(got.iter().all(|p| p["status"] == "firing"));
    assert!(
        live_took < Duration::from_secs(3),
        "the dead receiver held the live one up: {live_took:?}"
    );
    assert!(ingest_took < Duration::from_secs(2), "{ingest_took:?}");
    let d = &hook.stats.receivers[0];
    let dropped = d.dropped_queue_full.load(Ordering::Relaxed);
    let depth = d.depth.load(Ordering::Relaxed);
    // One in flight, eight queued, the other eleven dropped.
    assert_eq!((dropped, depth), (11, 8));
    assert_eq!(d.sent.load(Ordering::Relaxed), 0);
    assert_eq!(hook.stats.receivers[1].sent.load(Ordering::Relaxed), 20);
    assert_eq!(
        hook.stats.receivers[1]
            .dropped_queue_full
            .load(Ordering::Relaxed),
        0
    );
    let api = Api::new(Arc::clone(&c), ApiConfig::default());
    api.webhook.set(Arc::clone(&hook.stats)).unwrap();
    let text = render_metrics(&api);
    for line in [
        "intscope_webhook_notifications_dropped_total{receiver=\"0\",reason=\"queue_full\"} 11"
            .to_string(),
        format!("intscope_webhook_queue_depth{{receiver=\"0\"}} {depth}"),
        "intscope_webhook_notifications_sent_total{receiver=\"1\"} 20".to_string(),
        "# TYPE intscope_webhook_attempts_failed counter".to_string(),
    ] {
        assert!(text.contains(&line), "{line} missing:\n{text}");
    }
    // Each family once: the collector's own metrics are grouped by name.
    assert_eq!(
        text.matches("# TYPE intscope_webhook_queue_depth gauge")
            .count(),
        1
    );
}

/// A stop reads the log a last time (with a poll interval of a minute, only that read sees
/// these incidents) and waits for the receivers within `timeout_ms`: the live one, whose first
/// answer is a 500, gets both incidents; the dead one's are counted as dropped at stop.
#[test]
fn a_stop_sends_what_is_due_and_counts_what_it_cannot() {
    let rt = runtime();
    let _rt = rt.enter();
    let live = Receiver::start(&rt, 1);
    let dead_addr = dead_receiver(&rt);
    let c = collector();
    let hook = Webhook::start(
        Arc::clone(&c),
        &WebhookConfig {
            poll_interval_ms: 60_000,
            timeout_ms: 1_000,
            ..quick(vec![live.url(), format!("http://{dead_addr}/hook")])
        },
        "http://127.0.0.1/",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    congest(&c, 1..=2, 10 * S);
    std::thread::sleep(Duration::from_millis(300));
    assert!(live.bodies().is_empty(), "the next poll is a minute away");
    let stats = Arc::clone(&hook.stats);
    let took = Instant::now();
    let stopped = rt.block_on(hook.stop());
    assert!(
        took.elapsed() < Duration::from_secs(3),
        "{:?}",
        took.elapsed()
    );
    let got = live.bodies();
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(got.iter().all(|p| p["status"] == "firing"));
    assert_eq!(live.hits.load(Ordering::SeqCst), 3, "a 500, then both");
    assert_eq!(stopped.sent, 2);
    assert_eq!(stopped.dropped_at_stop, 2, "one in flight, one queued");
    let d = &stats.receivers[1];
    assert_eq!(d.dropped_at_stop.load(Ordering::Relaxed), 2);
    assert_eq!(d.depth.load(Ordering::Relaxed), 0);
    assert_eq!(
        stats.receivers[0].dropped_at_stop.load(Ordering::Relaxed),
        0
    );
}
