//! The report sockets: `SO_REUSEPORT` so that several receive threads share a port (and only
//! then: without it, the kernel refuses every other socket on the port, see
//! `port_guard`), large receive buffers, and the check that a port is free.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// How long a receive call waits for a first datagram before the loop looks at the stop flag and
/// does its idle work (detector ticks, publishing the API's snapshot): short enough for a prompt
/// stop, long enough to cost nothing.
pub const IDLE: Duration = Duration::from_millis(100);

/// Most datagrams one receive call may take (`recv_batch`): the kernel's `UIO_MAXIOV`.
pub const MAX_BATCH: usize = 1024;

/// Smallest and largest receive slot (`recv_slot`): the largest UDP payload fits in the largest.
pub const SLOT_RANGE: std::ops::RangeInclusive<usize> = 64..=65_535;

/// Fails with a clear error if another socket already holds `addr`'s port: a probe binds it
/// without `SO_REUSEPORT`, which the kernel refuses if anything holds it, while the collector's
/// own sockets (which share the port between its threads) set it.
pub fn check_port_free(addr: SocketAddr) -> std::io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    match probe.bind(&addr.into()) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(std::io::Error::new(
            e.kind(),
            format!(
                "UDP {addr} is already in use by another process (another collector?); \
                 pass --reuse-port (`reuse_port = true`) to share it, each process then \
                 receiving part of the reports"
            ),
        )),
        Err(e) => Err(e),
        Ok(()) => Ok(()),
    }
}

/// Opens a report socket on `addr` (`SO_REUSEPORT`, receive buffer `buffer` bytes: see
/// [`set_recv_buffer`]).
pub fn open_socket(addr: SocketAddr, buffer: usize) -> std::io::Result<UdpSocket> {
    open_socket_with(addr, buffer, true)
}

/// Opens a report socket on `addr` with `SO_REUSEPORT` only when `reuse_port`: without it, the
/// kernel refuses every other socket on the port (`port_guard`).
pub fn open_socket_with(
    addr: SocketAddr,
    buffer: usize,
    reuse_port: bool,
) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    let got = set_recv_buffer(&s, buffer)?;
    match got.shortfall() {
        Some(warning) => tracing::warn!("report socket {addr}: {warning}"),
        None => tracing::info!(
            requested = got.asked,
            effective = got.effective,
            forced = got.forced,
            "report socket {addr}"
        ),
    }
    s.bind(&addr.into())?;
    s.set_read_timeout(Some(IDLE))?;
    Ok(s.into())
}

/// The receive buffer a socket asked for and got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvBuffer {
    /// Bytes asked for.
    pub asked: usize,
    /// Bytes the kernel reports (`SO_RCVBUF` read back): twice what it granted, the doubling
    /// being room for its bookkeeping overhead (socket(7)).
    pub effective: usize,
    /// Whether `SO_RCVBUFFORCE` was permitted (root or `CAP_NET_ADMIN`): then
    /// `net.core.rmem_max` does not cap it.
    pub forced: bool,
}

impl RecvBuffer {
    /// Bytes granted: half of what the kernel reports.
    pub fn granted(&self) -> usize {
        self.effective / 2
    }

    /// A warning when the kernel granted less than was asked (it caps `SO_RCVBUF` at
    /// `net.core.rmem_max`), naming the setting to raise.
    pub fn shortfall(&self) -> Option<String> {
        (self.granted() < self.asked).then(|| {
            format!(
                "receive buffer {} bytes asked, {} granted: SO_RCVBUFFORCE is not permitted \
                 (needs root or CAP_NET_ADMIN) and SO_RCVBUF is capped by net.core.rmem_max; \
                 raise it (sysctl -w net.core.rmem_max={}) or reports will be dropped in bursts",
                self.asked,
                self.granted(),
                self.asked
            )
        })
    }
}

/// Sets the receive buffer of `s` to `buffer` bytes: `SO_RCVBUFFORCE` when permitted (root or
/// `CAP_NET_ADMIN`: `net.core.rmem_max` does not cap it), else `SO_RCVBUF`, which the kernel
/// caps at `net.core.rmem_max`. Returns what was asked and what the socket reports.
pub fn set_recv_buffer(s: &impl std::os::fd::AsFd, buffer: usize) -> std::io::Result<RecvBuffer> {
    let s = socket2::SockRef::from(s);
    // The kernel takes an int and doubles it: larger values would wrap.
    let asked = buffer.min(i32::MAX as usize / 2);
    let forced = force_recv_buffer(&s, asked);
    if !forced {
        s.set_recv_buffer_size(asked)?;
    }
    Ok(RecvBuffer {
        asked,
        effective: s.recv_buffer_size()?,
        forced,
    })
}

/// The receive buffer size the kernel reports for `s` (`SO_RCVBUF` read back).
pub fn recv_buffer_size(s: &impl std::os::fd::AsFd) -> std::io::Result<usize> {
    socket2::SockRef::from(s).recv_buffer_size()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn force_recv_buffer(s: &socket2::SockRef<'_>, buffer: usize) -> bool {
    // EPERM without CAP_NET_ADMIN: the caller falls back to SO_RCVBUF.
    nix::sys::socket::setsockopt(&**s, nix::sys::socket::sockopt::RcvBufForce, &buffer).is_ok()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn force_recv_buffer(_: &socket2::SockRef<'_>, _: usize) -> bool {
    false
}

#[cfg(unix)]
pub(crate) fn socket_inode(sock: &UdpSocket) -> Option<u64> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd()))
        .ok()
        .map(|m| m.ino())
}

#[cfg(not(unix))]
pub(crate) fn socket_inode(_: &UdpSocket) -> Option<u64> {
    None
}
