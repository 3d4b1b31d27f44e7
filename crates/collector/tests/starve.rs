//! The API cannot be starved: a thousand hostile connections from 25 loopback addresses — ones
//! that send one byte, ones that trickle a request head (slowloris), ones that ask for a large
//! answer and never read it — and a new client is still answered within a second, with the
//! process's resident memory bounded.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use intscope_collector::api::{self, Api};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::http::{HttpLimits, SMALL_ANSWER};
use tokio::io::AsyncWriteExt;

fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// GET `path` on a new connection from 127.0.0.1: the status and the whole answer.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let status = std::str::from_utf8(&out[..out.len().min(12)])
        .ok()
        .and_then(|h| h.split_whitespace().nth(1)?.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status line"))?;
    Ok((status, out))
}

#[derive(Clone, Copy)]
enum Attack {
    /// One byte, then nothing.
    OneByte,
    /// A request head, one header line a second, never finished.
    Slowloris,
    /// A whole request for a large answer, then never a byte read.
    SlowReader,
}

/// One hostile client from `from`: connects, misbehaves, and when the server closes it
/// connects again (the slow readers once only: each of their requests costs the server a large
/// answer's making, and a few hundred make the point).
async fn attack(from: Ipv4Addr, to: SocketAddr, how: Attack, path: String, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(sock) = tokio::net::TcpSocket::new_v4() else {
            return;
        };
        // A small window, so the kernel cannot take the answer off the server's hands.
        let _ = sock.set_recv_buffer_size(4096);
        if sock.bind(SocketAddr::new(from.into(), 0)).is_err() {
            return;
        }
        let Ok(mut s) = sock.connect(to).await else {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        };
        match how {
            Attack::OneByte => {
                let _ = s.write_all(b"G").await;
                let mut b = [0u8; 1];
                let _ = tokio::io::AsyncReadExt::read(&mut s, &mut b).await;
            }
            Attack::Slowloris => {
                let mut head = &b"GET /api/stats HTTP/1.1\r\n"[..];
                loop {
                    if s.write_all(head).await.is_err() {
                        break;
                    }
                    head = b"X-Slow: 1\r\n";
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                }
            }
            Attack::SlowReader => {
                let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
                let _ = s.write_all(req.as_bytes()).await;
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[test]
fn a_thousand_hostile_connections_do_not_starve_a_new_client() {
    let c = common::open_collector(None);
    common::feed_load(&c, common::v2_load(4000, 50), 6000, 0);
    let limits = HttpLimits {
        max_answer_bytes: 8 << 20,
        max_answer_bytes_per_client: 2 << 20,
        send_timeout: Duration::from_secs(30),
        ..HttpLimits::default()
    };
    let a = Api::new(
        c,
        ApiConfig {
            http: limits.clone(),
            ..ApiConfig::default()
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(api::serve_with(
        listener,
        Arc::clone(&a),
        std::future::pending(),
    ));

    let big = "/api/flows?limit=4000";
    let t = Instant::now();
    let (status, answer) = get(addr, big).unwrap();
    eprintln!("large answer: {} bytes in {:?}", answer.len(), t.elapsed());
    assert_eq!(status, 200);
    assert!(
        answer.len() > 8 * SMALL_ANSWER,
        "the large answer is only {} bytes",
        answer.len()
    );
    let before = rss_mib();

    let stop = Arc::new(AtomicBool::new(false));
    let attackers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // The slow readers first, from 10 addresses, so that their requests are read and their
    // answers made before the flood; then 500 one-byte connections from 5 addresses and 400
    // slowloris ones from 10, more than one client may hold.
    let spawn = |n: u32, third: u8, addresses: u32, how: Attack| {
        for i in 0..n {
            let from = Ipv4Addr::new(127, 0, third, 1 + (i % addresses) as u8);
            attackers.spawn(attack(from, addr, how, big.to_string(), Arc::clone(&stop)));
        }
    };
    spawn(100, 1, 10, Attack::SlowReader);
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.http.answers_refused_memory.load(Ordering::Relaxed) == 0 {
        let h = &a.http;
        let n = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        assert!(
            Instant::now() < deadline,
            "the slow readers got no answer: accepted {}, open {}, answer bytes {}, errors {}",
            n(&h.accepted),
            n(&h.open),
            n(&h.answer_bytes),
            n(&h.errors)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    spawn(500, 2, 5, Attack::OneByte);
    spawn(400, 3, 10, Attack::Slowloris);

    // Let the flood settle, watching the resident set.
    let mut peak = before;
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(8) {
        peak = peak.max(rss_mib());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(a.http.open.load(Ordering::Relaxed) <= 256);

    // A new client, several times over the flood's life.
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        let got = get(addr, "/api/stats");
        let took = t.elapsed();
        let h = &a.http;
        let n = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        eprintln!(
            "{:?} in {took:?}: open {}, accepted {}, refused (limit {}, per client {}), evicted (silent {}, partial {}, unauthenticated {}, stalled {}), first byte timeouts {}, errors {}, answers refused for memory {}, answer bytes {}",
            got.as_ref().map(|g| g.0),
            n(&h.open),
            n(&h.accepted),
            n(&h.refused_over_limit),
            n(&h.refused_client_limit),
            n(&h.evicted_silent),
            n(&h.evicted_partial),
            n(&h.evicted_unauthenticated),
            n(&h.evicted_stalled),
            n(&h.first_byte_timeouts),
            n(&h.errors),
            n(&h.answers_refused_memory),
            n(&h.answer_bytes),
        );
        let (status, _) = got.unwrap();
        assert_eq!(status, 200);
        worst = worst.max(took);
        peak = peak.max(rss_mib());
        std::thread::sleep(Duration::from_millis(500));
    }
    let h = &a.http;
    let n = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    eprintln!(
        "new client worst {worst:?}; RSS {before} → peak {peak} MiB; accepted {}, refused \
         (limit {}, per client {}), evicted (silent {}, partial {}, unauthenticated {}, \
         stalled {}), first byte timeouts {}, answers refused for memory {}, answer bytes {}",
        n(&h.accepted),
        n(&h.refused_over_limit),
        n(&h.refused_client_limit),
        n(&h.evicted_silent),
        n(&h.evicted_partial),
        n(&h.evicted_unauthenticated),
        n(&h.evicted_stalled),
        n(&h.first_byte_timeouts),
        n(&h.answers_refused_memory),
        n(&h.answer_bytes),
    );
    // The policy's horizon is a second (a connection silent that long is the first to give
    // way), so a new client may wait up to that much plus a busy machine's scheduling: starved
    // would be the listen queue's or the per-connection timeouts' many seconds.
    assert!(worst < Duration::from_secs(2), "new client took {worst:?}");
    // 100 slow readers of a 1.1 MB answer would hold 110 MB; the bounds hold 8 MiB of them
    // plus hyper's small queue per connection.
    assert!(
        peak - before < 80,
        "RSS grew {} MiB under the flood",
        peak - before
    );
    assert!(n(&h.refused_client_limit) > 0);
    assert!(n(&h.answers_refused_memory) > 0);
    assert!(n(&h.answer_bytes) <= (8 << 20));
    assert!(n(&h.evicted_silent) + n(&h.evicted_partial) + n(&h.evicted_stalled) > 0);

    stop.store(true, Ordering::Relaxed);
    attackers.shutdown_timeout(Duration::from_secs(2));
    rt.shutdown_timeout(Duration::from_secs(1));
}
