//! `recvloop`: the bare receive-and-discard loop every end-to-end ingest figure is measured
//! against (issue 19). One socket opened exactly as `intscope collect` opens its report sockets
//! ([`open_socket`]: `SO_REUSEPORT`, the same receive buffer with `SO_RCVBUFFORCE` when
//! permitted), one thread on blocking `recvmmsg` (nix's safe wrapper), counting datagrams and
//! bytes and touching nothing else: what the machine can receive, with no decoding, no async
//! runtime and no other threads.
//!
//! Prints `{"listen": ADDR}` once bound, then a JSON summary when the traffic has stopped for
//! `--idle-ms` (after the first datagram) or after `--duration-s`.
//!
//! Usage: `recvloop [--listen ADDR] [--buffer BYTES] [--batch N] [--slot BYTES] [--idle-ms MS]
//! [--duration-s S]`.

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use intscope_collector::hub::CollectorConfig;
use intscope_collector::ingest::kernel_drops;
use intscope_collector::ingest::socket::{open_socket, recv_buffer_size, set_recv_buffer};
use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg};

struct Args {
    listen: SocketAddr,
    buffer: usize,
    batch: usize,
    slot: usize,
    idle: Duration,
    duration: Duration,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        // The collector's default, so that both sides of a ratio hold the same buffer.
        buffer: CollectorConfig::default().recv_buffer,
        batch: 64,
        // A jumbo frame: larger datagrams are counted as truncated.
        slot: 9216,
        idle: Duration::from_millis(1000),
        duration: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--listen" => a.listen = value.parse().map_err(|e| format!("--listen: {e}"))?,
            "--buffer" => a.buffer = num()? as usize,
            "--batch" => a.batch = (num()? as usize).clamp(1, 1024),
            "--slot" => a.slot = (num()? as usize).clamp(64, 65_536),
            "--idle-ms" => a.idle = Duration::from_millis(num()?),
            "--duration-s" => a.duration = Duration::from_secs(num()?),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("recvloop: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("recvloop: {e}");
        std::process::exit(1);
    }
}

/// CPU seconds this process used (user + system), from /proc/self/stat in USER_HZ (100).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) as f64 / 100.0
}

fn run(args: &Args) -> std::io::Result<()> {
    let sock = open_socket(args.listen, args.buffer)?;
    let got = set_recv_buffer(&sock, args.buffer)?;
    let inode = std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd()))?.ino();
    println!("{{\"listen\": \"{}\"}}", sock.local_addr()?);
    let drops_before = kernel_drops(&[inode]).unwrap_or(0);
    let fd = sock.as_raw_fd();
    let mut bufs = vec![vec![0u8; args.slot]; args.batch];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(args.batch, None);
    let (mut datagrams, mut bytes, mut truncated, mut calls) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let (mut first, mut last) = (None::<Instant>, start);
    let cpu_start = cpu_seconds();
    loop {
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
            .iter_mut()
            .map(|b| [IoSliceMut::new(&mut b[..])])
            .collect();
        // Blocks for the first datagram (up to the socket's read timeout), then takes what is
        // queued, as the collector's receive threads do.
        match recvmmsg(
            fd,
            &mut headers,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        ) {
            Ok(msgs) => {
                calls += 1;
                for m in msgs {
                    datagrams += 1;
                    bytes += m.bytes as u64;
                    if m.flags.contains(MsgFlags::MSG_TRUNC) {
                        truncated += 1;
                    }
                }
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
            }
            Err(Errno::EAGAIN | Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let now = Instant::now();
        if (first.is_some() && now - last >= args.idle) || now - start >= args.duration {
            break;
        }
    }
    let cpu = cpu_seconds() - cpu_start;
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    let per_s = if secs > 0.0 {
        (datagrams as f64 / secs).round()
    } else {
        0.0
    };
    let us_per = if datagrams > 0 {
        cpu * 1e6 / datagrams as f64
    } else {
        0.0
    };
    let drops = kernel_drops(&[inode]).map(|d| d.saturating_sub(drops_before));
    println!(
        "{{\"datagrams\": {datagrams}, \"bytes\": {bytes}, \"truncated\": {truncated}, \
         \"recvmmsg_calls\": {calls}, \"seconds\": {secs:.3}, \"datagrams_per_second\": {per_s}, \
         \"cpu_seconds\": {cpu:.2}, \"cpu_us_per_datagram\": {us_per:.3}, \"kernel_dropped\": {}, \
         \"recv_buffer\": {{\"asked\": {}, \"effective\": {}, \"forced\": {}}}, \"batch\": {}, \"slot\": {}}}",
        drops.map_or("null".to_string(), |d| d.to_string()),
        got.asked,
        recv_buffer_size(&sock)?,
        got.forced,
        args.batch,
        args.slot
    );
    Ok(())
}
