//! API latency with many flows in memory: the collector fed the load generator's v2.0 traffic
//! (until each of `FLOWS` flows has reported), its HTTP API served on loopback, and each request below
//! sent `REQUESTS` times over a fresh connection; p50 and p99 wall time per request.
//!
//! `cargo bench -p intscope-collector --bench api -- [FLOWS]` (default 1 000 000)

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::RecordBatch;
use intscope_core::loadgen::{Generator, INT_PORT, LoadConfig};

const REQUESTS: usize = 50;

fn get(addr: SocketAddr, path: &str) -> (Duration, usize) {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    assert!(
        body.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&body[..40.min(body.len())])
    );
    (start.elapsed(), body.len())
}

fn main() {
    let flows = common::flows_arg(1_000_000);
    let c = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![INT_PORT],
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut g = Generator::new(LoadConfig::coalesced_v2(flows));
    let (mut buf, mut rec, mut reports, mut t) = (Vec::new(), RecordBatch::default(), 0u64, 0u64);
    // Until every flow has reported (the generator picks flows at random).
    while reports % 100_000 != 0 || c.state.read().flow_count() < flows as usize {
        reports += g.next_datagram(&mut buf) as u64;
        t += 1_000;
        c.ingest(&buf, [10, 0, 0, 1].into(), t, &mut rec);
    }
    let in_state = c.state.read().flow_count();
    // The snapshot the requests read, published now as a running collector's receive threads
    // would have done (without them, the first request would publish it and time that instead).
    let published = std::time::Instant::now();
    c.snapshot();
    let publish_ms = published.elapsed().as_secs_f64() * 1e3;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let served = std::sync::Arc::clone(&c);
    rt.spawn(async move {
        let _ = intscope_collector::api::serve(listener, served, std::future::pending()).await;
    });
    let mut out = serde_json::Map::new();
    // One flow's detail: flow 12345, or one in the middle of a smaller run.
    let one_flow = format!("/api/flows/{}", 12_345.min(flows / 2).max(1));
    for path in [
        "/api/flows?limit=100",
        "/api/flows?sort=p99&limit=100",
        "/api/flows?sort=reports&limit=100&offset=1000",
        // A search, as the UI's filter box sends it: every flow's addresses and ports are
        // matched against the text.
        "/api/flows?q=10.1.2&limit=100",
        // One that spans fields (a space): every flow's whole line is written out.
        "/api/flows?q=0%2010.1&limit=100",
        one_flow.as_str(),
    ] {
        let mut times: Vec<Duration> = (0..REQUESTS).map(|_| get(addr, path).0).collect();
        times.sort();
        let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
        out.insert(
            path.to_string(),
            serde_json::json!({"p50_ms": ms(times[REQUESTS / 2]), "p99_ms": ms(times[REQUESTS * 99 / 100])}),
        );
    }
    println!(
        "{}",
        serde_json::json!({"flows": in_state, "snapshot_publish_ms": (publish_ms * 10.0).round() / 10.0, "requests_each": REQUESTS, "latency": out})
    );
}
