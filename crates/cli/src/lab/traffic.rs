//! The lab's traffic: a generator built in, not iperf3. Each flow is a thread that enters its
//! host's namespace (`setns`) and sends real TCP or UDP through the kernel at the flow's rate;
//! each receiver is a thread in the destination's namespace counting what arrives, per second.
//! Built in because a lab's flows must outlive its faults: a deleted route refuses a TCP
//! connection and a downed link resets one, which ends an iperf3 client for good, while these
//! senders count the error and reconnect; the mix is the simulator's (elephants and mice,
//! paced), one thread per flow instead of one process; and what each flow delivered each second
//! is at hand for the ground truth without parsing another program's output.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Seconds of per-second counts kept per flow (a longer run adds to the last one).
pub const MAX_SECONDS: usize = 3600;

/// Connections a TCP receiver holds at once (a reconnecting sender leaves its old one behind
/// until it times out; the oldest goes first).
const MAX_CONNECTIONS: usize = 8;

/// A TCP sender's socket buffer, bytes (the kernel doubles it for its bookkeeping): several
/// times what a 100 Mb/s flow has in flight on the lab's sub-millisecond paths.
const TCP_SNDBUF: usize = 96 * 1024;

/// One flow to run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FlowPlan {
    /// Index in the lab's flow list.
    pub id: usize,
    /// Sender's namespace path (`/run/netns/...`).
    #[serde(skip)]
    pub src_ns: String,
    /// Receiver's namespace path.
    #[serde(skip)]
    pub dst_ns: String,
    /// Sender's address.
    pub src: Ipv4Addr,
    /// Receiver's address.
    pub dst: Ipv4Addr,
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// Receiver's port.
    pub dst_port: u16,
    /// Mean rate, bit/s.
    pub rate_bps: f64,
    /// Bytes per datagram (UDP) or per write (TCP).
    pub size: usize,
    /// An elephant (else a mouse).
    pub elephant: bool,
}

/// What a flow did, counted while it runs.
#[derive(Debug, Default)]
pub struct FlowCounters {
    /// Bytes handed to the kernel.
    pub sent: AtomicU64,
    /// Bytes received, per second since the traffic started.
    pub received: Vec<AtomicU64>,
    /// Failed sends, connects and resets.
    pub errors: AtomicU64,
    /// TCP connections made.
    pub connects: AtomicU64,
}

impl FlowCounters {
    fn new(seconds: usize) -> FlowCounters {
        FlowCounters {
            received: (0..seconds.clamp(1, MAX_SECONDS))
                .map(|_| AtomicU64::new(0))
                .collect(),
            ..FlowCounters::default()
        }
    }

    fn add_received(&self, start: Instant, bytes: usize) {
        let i = (start.elapsed().as_secs() as usize).min(self.received.len() - 1);
        self.received[i].fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// Running traffic: stop it with [`Traffic::stop`].
pub struct Traffic {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Per flow, in plan order.
    pub counters: Vec<Arc<FlowCounters>>,
    /// When the traffic started.
    pub start: Instant,
}

/// Moves this thread into network namespace `ns` (a path under /run/netns).
pub(super) fn enter(ns: &str) -> Result<()> {
    let f = std::fs::File::open(ns).with_context(|| format!("namespace {ns}"))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("entering namespace {ns}"))?;
    Ok(())
}

/// Starts every flow's receiver, then its sender; `seconds` sizes the per-second counts.
pub fn start(plans: &[FlowPlan], seconds: usize) -> Result<Traffic> {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut threads = Vec::new();
    let mut counters = Vec::new();
    // Receivers first, each bound before its sender starts.
    for p in plans {
        let c = Arc::new(FlowCounters::new(seconds));
        counters.push(Arc::clone(&c));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let (plan, stop2) = (p.clone(), Arc::clone(&stop));
        threads.push(
            std::thread::Builder::new()
                .name(format!("lab-rx-{}", p.id))
                .spawn(move || receive(&plan, &c, &stop2, start, &ready_tx))
                .context("starting a receiver")?,
        );
        ready_rx
            .recv()
            .context("a receiver ended before it was bound")??;
    }
    for (p, c) in plans.iter().zip(&counters) {
        let (plan, stop2, c) = (p.clone(), Arc::clone(&stop), Arc::clone(c));
        threads.push(
            std::thread::Builder::new()
                .name(format!("lab-tx-{}", p.id))
                .spawn(move || send(&plan, &c, &stop2))
                .context("starting a sender")?,
        );
    }
    Ok(Traffic {
        stop,
        threads,
        counters,
        start,
    })
}

impl Traffic {
    /// Stops every flow and waits for its threads (each notices within ~0.5 s).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop();
    }
}

fn receive(
    p: &FlowPlan,
    c: &FlowCounters,
    stop: &AtomicBool,
    start: Instant,
    ready: &std::sync::mpsc::Sender<Result<()>>,
) {
    if let Err(e) = enter(&p.dst_ns) {
        let _ = ready.send(Err(e));
        return;
    }
    let addr = SocketAddr::from((p.dst, p.dst_port));
    let mut buf = vec![0u8; 256 * 1024];
    if p.proto == 17 {
        let sock = match UdpSocket::bind(addr).and_then(|s| {
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .map(|()| s)
        }) {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(anyhow::anyhow!("UDP {addr}: {e}")));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = sock.recv(&mut buf) {
                c.add_received(start, n);
            }
        }
        return;
    }
    let listener = match TcpListener::bind(addr).and_then(|l| l.set_nonblocking(true).map(|()| l)) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(anyhow::anyhow!("TCP {addr}: {e}")));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut conns: Vec<TcpStream> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        while let Ok((s, _)) = listener.accept() {
            if s.set_nonblocking(true).is_ok() {
                if conns.len() == MAX_CONNECTIONS {
                    conns.remove(0);
                }
                conns.push(s);
            }
        }
        let mut idle = true;
        conns.retain_mut(|s| {
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => {
                        idle = false;
                        c.add_received(start, n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                }
            }
        });
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn send(p: &FlowPlan, c: &FlowCounters, stop: &AtomicBool) {
    if enter(&p.src_ns).is_err() {
        c.errors.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let addr = SocketAddr::from((p.dst, p.dst_port));
    let bytes_per_s = p.rate_bps / 8.0;
    let payload = vec![0x5au8; p.size.max(1)];
    // At most this much is sent at once to catch up after a stall: a paced flow, not a burst.
    let catch_up = (bytes_per_s * 0.02).max(p.size as f64);
    if p.proto == 17 {
        let Ok(sock) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) else {
            c.errors.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if sock.connect(addr).is_err() {
            c.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let begin = Instant::now();
        let mut sent = 0f64;
        while !stop.load(Ordering::Relaxed) {
            let due = begin.elapsed().as_secs_f64() * bytes_per_s;
            sent = sent.max(due - catch_up);
            while sent + p.size as f64 <= due {
                match sock.send(&payload) {
                    Ok(n) => {
                        c.sent.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    // Unreachable (ICMP after a routing miss), a full socket buffer: counted,
                    // the datagram's time passes.
                    Err(_) => {
                        c.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                sent += p.size as f64;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        let mut s = match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => s,
            Err(_) => {
                c.errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        c.connects.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        // What a stall leaves in the socket leaves in one burst when the path returns: kept
        // below the burst a leaf's port to a host passes at once (net.rs), so that a repair
        // does not queue a port the fault never touched.
        let _ = socket2::SockRef::from(&s).set_send_buffer_size(TCP_SNDBUF);
        if !p.elephant {
            let _ = s.set_nodelay(true);
        }
        let begin = Instant::now();
        let mut sent = 0f64;
        'conn: while !stop.load(Ordering::Relaxed) {
            let due = begin.elapsed().as_secs_f64() * bytes_per_s;
            sent = sent.max(due - catch_up);
            while sent + p.size as f64 <= due {
                match s.write(&payload) {
                    Ok(n) => {
                        c.sent.fetch_add(n as u64, Ordering::Relaxed);
                        sent += n as f64;
                    }
                    // A write that timed out: the path is slow or gone; the pacing goes on.
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        break;
                    }
                    Err(_) => {
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100));
                        break 'conn;
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    break 'conn;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The port an incast's burst goes to (the simulator's).
pub const INCAST_PORT: u16 = 9000;

/// Bytes per datagram of an incast (the simulator's).
const INCAST_SIZE: usize = 1400;

/// Datagrams per segmentation-offload send: 63 000 bytes, within a GSO packet's 64 KB.
const INCAST_GSO_SEGMENTS: usize = 45;

/// An incast's receive buffer: large enough that the burst queues at the leaf's port, not in
/// the receiving socket (whose overflow the host would report as its own drop).
const INCAST_RCVBUF: usize = 16 << 20;

/// An incast under way: its burst sent, its receiver still draining.
pub struct Incast {
    stop: Arc<AtomicBool>,
    receiver: Option<JoinHandle<u64>>,
    /// Datagrams the senders' kernels took.
    pub sent: u64,
    /// Sends that failed (a full socket buffer, an unreachable destination).
    pub errors: u64,
}

/// Starts a receiver at `dst` (in namespace `dst_ns`), then has every namespace of `senders`
/// send `packets` datagrams to it at once, each as fast as its kernel takes them (the
/// simulator's incast: many hosts at line rate into one port). Returns once every burst is sent.
pub fn incast(senders: &[String], dst_ns: &str, dst: Ipv4Addr, packets: u32) -> Result<Incast> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let (ns, stop2) = (dst_ns.to_string(), Arc::clone(&stop));
    let receiver = std::thread::Builder::new()
        .name("lab-incast-rx".into())
        .spawn(move || drain(&ns, dst, &stop2, &ready_tx))
        .context("starting the incast's receiver")?;
    ready_rx
        .recv()
        .context("the incast's receiver ended before it was bound")??;
    let start = Arc::new(Barrier::new(senders.len()));
    let bursts: Vec<JoinHandle<(u64, u64)>> = senders
        .iter()
        .map(|ns| {
            let (ns, start) = (ns.clone(), Arc::clone(&start));
            std::thread::Builder::new()
                .name("lab-incast-tx".into())
                .spawn(move || burst(&ns, dst, packets, &start))
                .context("starting an incast sender")
        })
        .collect::<Result<_>>()?;
    let (mut sent, mut errors) = (0, 0);
    for b in bursts {
        let (s, e) = b.join().unwrap_or((0, u64::from(packets)));
        sent += s;
        errors += e;
    }
    Ok(Incast {
        stop,
        receiver: Some(receiver),
        sent,
        errors,
    })
}

impl Incast {
    /// Stops the receiver; the datagrams it read.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.receiver
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or(0)
    }
}

impl Drop for Incast {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.receiver.take() {
            let _ = r.join();
        }
    }
}

/// One sender's burst: `packets` datagrams back to back, once every sender is ready. Sent with
/// UDP segmentation offload where the kernel has it (45 datagrams per send, cut apart on their
/// way into the receiving socket): a host's NIC puts a burst on the wire at line rate, while a
/// core making one datagram per system call through a fabric of namespaces reaches only about
/// the 1 Gb/s of the port it is meant to overrun.
fn burst(ns: &str, dst: Ipv4Addr, packets: u32, start: &Barrier) -> (u64, u64) {
    let sock = enter(ns)
        .ok()
        .and_then(|()| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok())
        .and_then(|s| Some((quinn_udp::UdpSocketState::new((&s).into()).ok()?, s)));
    start.wait();
    let Some((state, sock)) = sock else {
        return (0, u64::from(packets));
    };
    let per_send = state.max_gso_segments().clamp(1, INCAST_GSO_SEGMENTS);
    let payload = vec![0x1cu8; INCAST_SIZE * per_send];
    let to = SocketAddr::from((dst, INCAST_PORT));
    let (mut sent, mut errors, mut left) = (0, 0, packets as usize);
    while left > 0 {
        let n = left.min(per_send);
        let t = quinn_udp::Transmit {
            destination: to,
            ecn: None,
            contents: &payload[..n * INCAST_SIZE],
            segment_size: (n > 1).then_some(INCAST_SIZE),
            src_ip: None,
        };
        let result = loop {
            match state.try_send((&sock).into(), &t) {
                // A full socket buffer: the burst waits for it, as a NIC's queue would.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_micros(20));
                }
                other => break other,
            }
        };
        match result {
            Ok(()) => sent += n as u64,
            Err(_) => errors += n as u64,
        }
        left -= n;
    }
    (sent, errors)
}

/// The incast's receiver: reads datagrams until stopped; how many.
fn drain(
    ns: &str,
    dst: Ipv4Addr,
    stop: &AtomicBool,
    ready: &std::sync::mpsc::Sender<Result<()>>,
) -> u64 {
    let bound = enter(ns).and_then(|()| {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
        // A smaller buffer than asked for (net.core.rmem_max) still holds most of a burst.
        let _ = sock.set_recv_buffer_size(INCAST_RCVBUF);
        sock.bind(&SocketAddr::from((dst, INCAST_PORT)).into())?;
        let sock = UdpSocket::from(sock);
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(sock)
    });
    let sock = match bound {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.context(format!("the incast's receiver at {dst}"))));
            return 0;
        }
    };
    let _ = ready.send(Ok(()));
    let mut buf = [0u8; 2048];
    let mut received = 0;
    while !stop.load(Ordering::Relaxed) {
        if sock.recv(&mut buf).is_ok() {
            received += 1;
        }
    }
    received
}
