//! The report port stays the collector's: another process of the same user that binds it with
//! `SO_REUSEPORT` is refused (one receive socket), gets no datagram (several: the group's
//! program steers to the collector's sockets), and is detected either way it got a socket
//! (the gauge and counter of `ingest::port_guard`).
//!
//! The other process is this test binary run again with `INTSCOPE_FOREIGN_BIND` set: it runs
//! [`foreign_process`] only.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_collector::ingest::recv::spawn_receivers;

const BIND: &str = "INTSCOPE_FOREIGN_BIND";

/// Not a test of its own: the foreign process. Binds the address in `INTSCOPE_FOREIGN_BIND`
/// with `SO_REUSEPORT`, says `bound` or `refused`, then counts what it receives until 4 s
/// pass without a datagram and says `received N`.
#[test]
fn foreign_process() {
    let Ok(addr) = std::env::var(BIND) else {
        return;
    };
    let addr: SocketAddr = addr.parse().unwrap();
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        None,
    )
    .unwrap();
    s.set_reuse_port(true).unwrap();
    if let Err(e) = s.bind(&addr.into()) {
        println!("refused {e}");
        return;
    }
    println!("bound");
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let mut n = 0;
    let mut buf = [0u8; 2048];
    while s.recv(&mut buf).is_ok() {
        n += 1;
    }
    println!("received {n}");
}

/// Runs [`foreign_process`] on `addr`; returns it and its first line.
fn foreign(addr: SocketAddr) -> (Child, BufReader<ChildStdout>, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "foreign_process", "--nocapture", "--quiet"])
        .env(BIND, addr.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let line = next_answer(&mut out);
    (child, out, line)
}

/// The next line of the foreign process that is one of its answers (the test harness prints
/// lines of its own).
fn next_answer(out: &mut BufReader<ChildStdout>) -> String {
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the foreign process said nothing"
        );
        let line = line.trim();
        if ["bound", "refused", "received"]
            .iter()
            .any(|w| line.starts_with(w))
        {
            return line.to_string();
        }
    }
}

fn collector(listen: &str, threads: usize) -> Arc<Collector> {
    Collector::open(CollectorConfig {
        listen: vec![listen.parse().unwrap()],
        data: None,
        threads,
        ..CollectorConfig::default()
    })
    .unwrap()
}

fn g(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Waits up to `limit` for `f`; how long it took.
fn within(limit: Duration, f: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn stop(c: &Arc<Collector>, handles: Vec<std::thread::JoinHandle<()>>) {
    c.stop();
    for h in handles {
        h.join().unwrap();
    }
}

/// One receive socket: no `SO_REUSEPORT`, so the kernel refuses the other process.
#[test]
fn one_receive_socket_keeps_others_off_the_port() {
    let c = collector("127.0.0.1:0", 1);
    let (bound, handles) = spawn_receivers(&c).unwrap();
    let (mut child, out, said) = foreign(bound[0]);
    assert!(said.starts_with("refused"), "{said}");
    child.wait().unwrap();
    drop(out);
    assert_eq!(g(&c.stats.port_guard.foreign_seen), 0);
    stop(&c, handles);
}

/// Two receive sockets share the port in a group the other process can join: it gets none of
/// the datagrams, the collector gets them all, and the guard reports the socket within two
/// checks.
#[test]
fn a_foreign_member_of_the_group_gets_nothing_and_is_detected() {
    let c = collector("127.0.0.1:0", 2);
    let (bound, handles) = spawn_receivers(&c).unwrap();
    let (mut child, mut out, said) = foreign(bound[0]);
    assert_eq!(said, "bound");
    let guard = &c.stats.port_guard;
    let seen = within(Duration::from_secs(3), || g(&guard.foreign_now) == 1);
    assert!(seen.is_some(), "the foreign socket was not detected");
    assert_eq!(g(&guard.foreign_seen), 1);
    // Many sources (one socket each), so that the kernel's choice varies.
    let senders: Vec<UdpSocket> = (0..32)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let sent = 3200u64;
    for i in 0..sent {
        senders[i as usize % senders.len()]
            .send_to(&[0x42; 40], bound[0])
            .unwrap();
        if i % 256 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let all = within(Duration::from_secs(5), || g(&c.stats.received) >= sent);
    let answer = next_answer(&mut out);
    child.wait().unwrap();
    assert_eq!(answer, "received 0");
    assert!(
        all.is_some(),
        "the collector received {} of {sent}",
        g(&c.stats.received)
    );
    // Gone: the gauge falls back, the counter stays.
    assert!(within(Duration::from_secs(3), || g(&guard.foreign_now) == 0).is_some());
    assert_eq!(g(&guard.foreign_seen), 1);
    stop(&c, handles);
}

/// A socket on a more specific address of the port (`127.0.0.1:P` beside the collector's
/// `0.0.0.0:P`) is outside the group, so no program can stop it taking datagrams: the guard
/// reports it.
#[test]
fn a_foreign_socket_on_a_narrower_address_is_detected() {
    let c = collector("0.0.0.0:0", 2);
    let (bound, handles) = spawn_receivers(&c).unwrap();
    let narrow = SocketAddr::new([127, 0, 0, 1].into(), bound[0].port());
    let (mut child, mut out, said) = foreign(narrow);
    assert_eq!(said, "bound");
    let took = within(Duration::from_secs(3), || {
        g(&c.stats.port_guard.foreign_now) == 1
    });
    assert!(took.is_some(), "the foreign socket was not detected");
    assert_eq!(g(&c.stats.port_guard.foreign_seen), 1);
    next_answer(&mut out);
    child.wait().unwrap();
    stop(&c, handles);
}

/// With `reuse_port` on both sides, sharing is allowed (no program is attached), and the guard
/// still counts the other socket.
#[test]
fn sharing_on_purpose_is_counted_not_prevented() {
    let first = Collector::open(CollectorConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        data: None,
        threads: 1,
        reuse_port: true,
        ..CollectorConfig::default()
    })
    .unwrap();
    let (bound, handles) = spawn_receivers(&first).unwrap();
    let (mut child, mut out, said) = foreign(bound[0]);
    assert_eq!(said, "bound");
    assert!(
        within(Duration::from_secs(3), || g(&first
            .stats
            .port_guard
            .foreign_now)
            == 1)
        .is_some()
    );
    next_answer(&mut out);
    child.wait().unwrap();
    stop(&first, handles);
}
