//! The receive threads' loop: blocking `recvmmsg` into a fixed set of slots, the same system
//! calls as the bare loop (`recvloop`), with no async runtime on the path. Each call blocks for
//! the first datagram (up to the socket's read timeout, [`IDLE`]) and takes whatever else is
//! queued, up to `recv_batch` datagrams of at most `recv_slot` bytes each. The batch is decoded
//! without locks, then correlated shard by shard; `--discard` is the same loop minus the decode.
//!
//! Shutdown and idle work need no wake-up: the read timeout returns the call every [`IDLE`]
//! without traffic, and the loop checks the stop flag after every call. On a stop the socket
//! takes no new datagrams (`stop_arrivals`) and the loop reads what its buffer still holds
//! before it ends: closed, the socket would take those datagrams with it, counted nowhere.

use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg};

use super::Tally;
use super::port_guard;
use super::socket::{
    IDLE, MAX_BATCH, SLOT_RANGE, check_port_free, open_socket_with, recv_buffer_size,
};
use crate::clock::now_ns;
use crate::hub::Collector;
use intscope_core::RecordBatch;

/// One received datagram's metadata, copied out of the system call's headers so that the slots
/// can be read once the call's borrows end.
#[derive(Debug, Clone, Copy)]
struct Meta {
    len: usize,
    src: IpAddr,
    truncated: bool,
}

/// The source address of a datagram. A UDP socket always reports one; should it not, the
/// unspecified address stands in (which an allowlist does not contain).
fn source(addr: Option<&SockaddrStorage>) -> IpAddr {
    let Some(a) = addr else {
        return IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    };
    if let Some(v4) = a.as_sockaddr_in() {
        IpAddr::V4(v4.ip())
    } else if let Some(v6) = a.as_sockaddr_in6() {
        // A v4-mapped source on a dual-stack socket is the v4 address it maps.
        let ip = v6.ip();
        ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

/// Receives batches of datagrams on `sock` until the collector stops.
/// The caller counted the thread in `receivers`; it is uncounted when the loop ends.
pub(super) fn receive_loop(c: &Collector, sock: UdpSocket) {
    let _retire = Retire { c, sock: &sock };
    if let Err(e) = receive_batches(c, &sock) {
        c.stats.socket_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!("receive thread ended: {e}");
    }
}

/// A receive thread's end, however its loop ends (a panic unwinds through it too): the socket's
/// kernel drops are kept and the thread is uncounted, so that a stop never waits for a thread
/// that is gone (the store's final flush waits while `receivers` is above zero).
struct Retire<'a> {
    c: &'a Collector,
    sock: &'a UdpSocket,
}

impl Drop for Retire<'_> {
    fn drop(&mut self) {
        self.c.stats.retire_socket(self.sock);
        self.c.receivers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Stops new datagrams reaching `sock`, so that a stop can read what its buffer holds and end:
/// connected to a peer that sends nothing (its own address), a UDP socket takes datagrams from no
/// one else, and the kernel refuses them as it would at a closed port. What is queued stays.
fn stop_arrivals(sock: &UdpSocket) -> std::io::Result<()> {
    let mut own = sock.local_addr()?;
    if own.ip().is_unspecified() {
        own.set_ip(match own.ip() {
            IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    sock.connect(own)
}

fn receive_batches(c: &Collector, sock: &UdpSocket) -> std::io::Result<()> {
    sock.set_read_timeout(Some(IDLE))?;
    let fd = sock.as_raw_fd();
    let batch = c.config.recv_batch.clamp(1, MAX_BATCH);
    let slot = c
        .config
        .recv_slot
        .clamp(*SLOT_RANGE.start(), *SLOT_RANGE.end());
    // One allocation for every slot: the batch's datagrams lie next to each other.
    let mut storage = vec![0u8; batch * slot];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(batch, None);
    let mut meta: Vec<Meta> = Vec::with_capacity(batch);
    let mut records = RecordBatch::default();
    let mut errors_in_a_row = 0u32;
    // After a stop: datagrams read from the backlog, and the most the buffer can hold (a bound
    // in case the socket could not refuse new ones: the smallest datagram takes a few hundred
    // bytes of buffer).
    let mut draining: Option<usize> = None;
    let backlog_bound = recv_buffer_size(sock).unwrap_or(0) / 256 + batch;
    loop {
        if draining.is_none() && c.stopped() {
            if let Err(e) = stop_arrivals(sock) {
                tracing::warn!("report socket: new datagrams not refused at the stop: {e}");
            }
            draining = Some(0);
        }
        if draining.is_some_and(|n| n >= backlog_bound) {
            break;
        }
        let flags = if draining.is_some() {
            MsgFlags::MSG_DONTWAIT
        } else {
            MsgFlags::MSG_WAITFORONE
        };
        meta.clear();
        let got = {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = storage
                .chunks_mut(slot)
                .map(|s| [IoSliceMut::new(s)])
                .collect();
            // Blocks for the first datagram (up to the read timeout), then takes what is queued.
            recvmmsg(fd, &mut headers, iovs.iter_mut(), flags, None).map(|msgs| {
                meta.extend(msgs.map(|m| Meta {
                    len: m.bytes,
                    src: source(m.address.as_ref()),
                    truncated: m.flags.contains(MsgFlags::MSG_TRUNC),
                }));
            })
        };
        match got {
            Ok(()) => errors_in_a_row = 0,
            // The backlog is read.
            Err(Errno::EAGAIN) if draining.is_some() => break,
            Err(Errno::EAGAIN | Errno::EINTR) => {
                // Idle: episodes of queues that went quiet still end, and the API's snapshot
                // catches up with the last batch.
                c.idle(now_ns());
                continue;
            }
            Err(e) => {
                c.stats.socket_errors.fetch_add(1, Ordering::Relaxed);
                errors_in_a_row += 1;
                if errors_in_a_row < 10 || errors_in_a_row.is_power_of_two() {
                    tracing::warn!(errors = errors_in_a_row, "receive error: {e}");
                }
                // A stop reads on through a passing error (the backlog would close away
                // uncounted), but not through a lasting one.
                if draining.is_some() && errors_in_a_row >= 3 {
                    break;
                }
                // A persistent error (a closed socket) must not spin a core.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        if let Some(n) = &mut draining {
            *n += meta.len();
        }
        let now = now_ns();
        let mut tally = Tally {
            recv_calls: 1,
            recv_full: u64::from(meta.len() == batch),
            ..Tally::default()
        };
        for (m, buf) in meta.iter().zip(storage.chunks(slot)) {
            if m.truncated {
                // Larger than the slot: the kernel cut it, so it cannot be decoded whole.
                c.note_oversize(m.src, &mut tally);
            } else if c.config.discard {
                tally.received += 1;
            } else {
                c.decode_counted(&buf[..m.len], m.src, now, &mut records, &mut tally);
            }
        }
        // Back-pressure from the store: a batch holds at most one flush interval.
        c.store_stats.wait_for_writer();
        c.correlate(&mut records);
        c.count(&tally);
        c.publish_due(now);
    }
    Ok(())
}

/// Starts `threads` receive threads per listen address and the thread that guards their ports
/// ([`port_guard`]). Returns the bound addresses (port 0 resolves to the real port) and the
/// thread handles.
pub fn spawn_receivers(
    collector: &Arc<Collector>,
) -> std::io::Result<(Vec<SocketAddr>, Vec<JoinHandle<()>>)> {
    let mut bound = Vec::new();
    let mut handles = Vec::new();
    for &addr in &collector.config.listen {
        if !collector.config.reuse_port {
            check_port_free(addr)?;
        }
        let threads = collector.config.threads.max(1);
        // A port group only when it is needed (see `port_guard`): one socket alone keeps
        // every other socket off the port.
        let group = threads > 1 || collector.config.reuse_port;
        let first = open_socket_with(addr, collector.config.recv_buffer, group).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "UDP {addr} is held by a process that does not share it (a collector \
                         shares its port only with `reuse_port = true`, `--reuse-port`)"
                    ),
                )
            } else {
                e
            }
        })?;
        let local = first.local_addr()?;
        bound.push(local);
        let mut sockets = vec![first];
        for _ in 1..threads {
            sockets.push(open_socket_with(local, collector.config.recv_buffer, true)?);
        }
        if threads > 1
            && !collector.config.reuse_port
            && let Err(e) = port_guard::steer_to_own(&sockets[0], threads)
        {
            // Still serviceable: the scan below reports foreign sockets.
            tracing::warn!(
                "report port {local}: cannot attach the program that keeps its datagrams to \
                 this collector's sockets: {e}"
            );
        }
        for sock in &sockets {
            collector.stats.watch_socket(sock);
        }
        for (i, sock) in sockets.into_iter().enumerate() {
            let c = Arc::clone(collector);
            // Counted before the thread runs, so that a stop right after sees it (the final
            // flush waits for it to read its socket's backlog).
            collector.receivers.fetch_add(1, Ordering::SeqCst);
            let h = std::thread::Builder::new()
                .name(format!("ingest-{local}-{i}"))
                .spawn(move || receive_loop(&c, sock));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    collector.receivers.fetch_sub(1, Ordering::SeqCst);
                    return Err(e);
                }
            }
        }
    }
    handles.push(port_guard::spawn(
        collector,
        bound.clone(),
        collector.config.reuse_port,
    )?);
    Ok((bound, handles))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_of_each_family() {
        let v4: SockaddrStorage = std::net::SocketAddr::from(([192, 0, 2, 1], 9)).into();
        assert_eq!(source(Some(&v4)), IpAddr::from([192, 0, 2, 1]));
        let mapped: SockaddrStorage =
            std::net::SocketAddr::new("::ffff:192.0.2.7".parse().unwrap(), 9).into();
        assert_eq!(source(Some(&mapped)), IpAddr::from([192, 0, 2, 7]));
        let v6: SockaddrStorage =
            std::net::SocketAddr::new("2001:db8::1".parse().unwrap(), 9).into();
        assert_eq!(source(Some(&v6)), "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(source(None), IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }
}
