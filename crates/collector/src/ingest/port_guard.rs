//! Keeping the report port to this collector's own sockets.
//!
//! `SO_REUSEPORT` lets any socket of the same user join a port's group, and the kernel then
//! hands it a share of the datagrams: a second collector, a replay or a stray tool would
//! silently take reports. Three layers, each covering what the one before cannot:
//!
//! 1. **Refuse**: with one receive socket per address (the default) and `reuse_port` off, the
//!    socket does not set `SO_REUSEPORT` at all, so the kernel refuses any other bind of the
//!    port (`EADDRINUSE`), `SO_REUSEPORT` or not.
//! 2. **Steer**: with several receive threads the sockets must share the port through a
//!    reuseport group, which a same-user process can still join. A classic BPF program on the
//!    group ([`steer_program`]) picks the socket for each datagram by a hash of its source
//!    address and port *modulo the number of our sockets*. The kernel numbers a group's sockets
//!    in the order they joined and ours joined first, so a socket that joins later is never
//!    picked: it binds, but receives nothing. (A same-user process could replace the program
//!    through its own member socket; that is an attack, not a careless operator, and the scan
//!    below still sees the socket.)
//! 3. **Detect**: neither stops a socket bound to a more specific address of the same port
//!    (`127.0.0.1:P` beside our `0.0.0.0:P`, allowed when both set `SO_REUSEPORT` or
//!    `SO_REUSEADDR`), which the kernel prefers for the datagrams it matches. A thread reads
//!    `/proc/net/udp` and `/proc/net/udp6` every [`CHECK_INTERVAL`] and counts the sockets on
//!    our port whose address overlaps ours and whose inode is not one of ours: the gauge
//!    `intscope_report_port_foreign_sockets`, the counter
//!    `intscope_report_port_foreign_sockets_seen_total`, and a warning in the log naming the
//!    inode, address and user.
//!
//! With `reuse_port = true` sharing is asked for: no program is attached (it would starve the
//! other processes) and foreign sockets are counted but logged at info level only.
//!
//! `/proc` is used rather than `sock_diag`: it is the same data, already read for the kernel
//! drop counters, and needs no netlink code.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::hub::Collector;

/// How often the report ports' sockets are checked for foreign ones.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// One UDP socket as `/proc/net/udp{,6}` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSocket {
    /// Local address and port.
    pub local: SocketAddr,
    /// Owner's user ID.
    pub uid: u32,
    /// Socket inode.
    pub inode: u64,
}

/// Parses one line of `/proc/net/udp` or `/proc/net/udp6` (`None` for the header or a line
/// that is not a socket).
pub fn parse_proc_line(line: &str) -> Option<ProcSocket> {
    let cols: Vec<&str> = line.split_whitespace().collect();
    let (addr, port) = cols.get(1)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // The kernel prints the address as 32-bit words in host byte order.
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(addr, 16).ok()?.to_ne_bytes(),
        )),
        32 => {
            let mut b = [0u8; 16];
            for (i, chunk) in b.chunks_mut(4).enumerate() {
                let w = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(ProcSocket {
        local: SocketAddr::new(ip, port),
        uid: cols.get(7)?.parse().ok()?,
        inode: cols.get(9)?.parse().ok()?,
    })
}

/// Whether datagrams to `ours` may be delivered to a socket bound to `other` instead (the same
/// port, and one address is a wildcard or both are the same).
pub fn overlaps(ours: SocketAddr, other: SocketAddr) -> bool {
    if ours.port() != other.port() {
        return false;
    }
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let (a, b) = (canon(ours.ip()), canon(other.ip()));
    a.is_unspecified() || b.is_unspecified() || a == b
}

/// The sockets of `/proc/net/udp` and `/proc/net/udp6` (`None` where neither is readable).
pub fn proc_sockets() -> Option<Vec<ProcSocket>> {
    let mut out = Vec::new();
    let mut readable = false;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        readable = true;
        out.extend(text.lines().skip(1).filter_map(parse_proc_line));
    }
    readable.then_some(out)
}

/// The sockets in `all` that overlap one of `ports` and are not in `ours`.
pub fn foreign(all: &[ProcSocket], ports: &[SocketAddr], ours: &[u64]) -> Vec<ProcSocket> {
    all.iter()
        .filter(|s| !ours.contains(&s.inode) && ports.iter().any(|&p| overlaps(p, s.local)))
        .copied()
        .collect()
}

/// The classic BPF program that steers a reuseport group's datagrams to its first `n` sockets:
/// a hash of the source address and port (IPv4 with a 20-byte header, or IPv6 without
/// extension headers; other packets hash their bytes at those places, still the same for one
/// source) modulo `n`. A load past the packet's end makes the program return 0, our first
/// socket.
pub fn steer_program(n: u32) -> Vec<nix::libc::sock_filter> {
    // Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
    const LD_W_ABS: u16 = 0x20;
    const LD_H_ABS: u16 = 0x28;
    const LD_B_ABS: u16 = 0x30;
    const RSH_K: u16 = 0x74;
    const MUL_K: u16 = 0x24;
    const MOD_K: u16 = 0x94;
    const XOR_X: u16 = 0xac;
    const JEQ_K: u16 = 0x15;
    const JA: u16 = 0x05;
    const TAX: u16 = 0x07;
    const RET_A: u16 = 0x16;
    // Loads at this offset and above address the network header, wherever the data starts
    // (the kernel has pulled the UDP header when the program runs).
    const NET: u32 = (-0x10_0000i32) as u32;
    let op = |code, jt, jf, k| nix::libc::sock_filter { code, jt, jf, k };
    vec![
        op(LD_B_ABS, 0, 0, NET),      // 0: A = first byte of the IP header
        op(RSH_K, 0, 0, 4),           // 1: A = IP version
        op(JEQ_K, 4, 0, 6),           // 2: IPv6 → 7
        op(LD_W_ABS, 0, 0, NET + 12), // 3: IPv4 source address
        op(TAX, 0, 0, 0),             // 4
        op(LD_H_ABS, 0, 0, NET + 20), // 5: UDP source port
        op(JA, 0, 0, 3),              // 6: → 10
        op(LD_W_ABS, 0, 0, NET + 20), // 7: last word of the IPv6 source address
        op(TAX, 0, 0, 0),             // 8
        op(LD_H_ABS, 0, 0, NET + 40), // 9: UDP source port
        op(XOR_X, 0, 0, 0),           // 10
        op(MUL_K, 0, 0, 0x9e37_79b1), // 11: spread the bits (Fibonacci hashing)
        op(RSH_K, 0, 0, 16),          // 12
        op(MOD_K, 0, 0, n.max(1)),    // 13
        op(RET_A, 0, 0, 0),           // 14: the socket's index in the group
    ]
}

/// Attaches [`steer_program`] for `n` sockets to the reuseport group of `sock`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn steer_to_own(sock: &UdpSocket, n: usize) -> std::io::Result<()> {
    let mut prog = steer_program(u32::try_from(n).unwrap_or(u32::MAX));
    let fprog = nix::libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::AttachReusePortCbpf, &fprog)
        .map_err(std::io::Error::from)
}

/// Reuseport programs are Linux's: elsewhere the scan alone guards the port.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn steer_to_own(_: &UdpSocket, _: usize) -> std::io::Result<()> {
    Ok(())
}

/// Checks the report ports `ports` for foreign sockets every [`CHECK_INTERVAL`] until the
/// collector stops. `sharing`: `reuse_port` is on, so foreign sockets are expected.
pub fn spawn(
    collector: &Arc<Collector>,
    ports: Vec<SocketAddr>,
    sharing: bool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let c = Arc::clone(collector);
    std::thread::Builder::new()
        .name("port-guard".into())
        .spawn(move || {
            let mut known = HashSet::new();
            let step = Duration::from_millis(50);
            let mut waited = CHECK_INTERVAL;
            while !c.stopped() {
                if waited >= CHECK_INTERVAL {
                    waited = Duration::ZERO;
                    check(&c, &ports, sharing, &mut known);
                }
                std::thread::sleep(step);
                waited += step;
            }
        })
}

fn check(c: &Collector, ports: &[SocketAddr], sharing: bool, known: &mut HashSet<u64>) {
    let Some(all) = proc_sockets() else {
        return;
    };
    let ours = c
        .stats
        .socket_inodes
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    let found = foreign(&all, ports, &ours);
    let guard = &c.stats.port_guard;
    guard
        .foreign_now
        .store(found.len() as u64, Ordering::Relaxed);
    for s in found {
        if !known.insert(s.inode) {
            continue;
        }
        guard.foreign_seen.fetch_add(1, Ordering::Relaxed);
        if sharing {
            tracing::info!(
                inode = s.inode,
                uid = s.uid,
                "another socket shares report port {} (reuse_port is on)",
                s.local
            );
        } else {
            tracing::warn!(
                inode = s.inode,
                uid = s.uid,
                "a socket that is not this collector's is bound to report port {}: it may take \
                 reports meant for this collector (find it with `ss -uapn 'sport = :{}'`)",
                s.local,
                s.local.port()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_lines_parse() {
        let v4 = "  123: 0100007F:1F90 00000000:0000 07 00000000:00000000 00:00000000 00000000  \
                  1000        0 4242 2 0000000000000000 0";
        let s = parse_proc_line(v4).unwrap();
        assert_eq!(s.local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!((s.uid, s.inode), (1000, 4242));
        let v6 = "  5: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 \
                  07 00000000:00000000 00:00000000 00000000     0        0 77 2 0000000000000000 0";
        let s = parse_proc_line(v6).unwrap();
        assert_eq!(s.local, "[::1]:53".parse().unwrap());
        assert_eq!(s.inode, 77);
        assert_eq!(parse_proc_line("  sl  local_address rem_address"), None);
    }

    #[test]
    fn overlap_needs_the_port_and_a_shared_address() {
        let any: SocketAddr = "0.0.0.0:9".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let other: SocketAddr = "127.0.0.2:9".parse().unwrap();
        assert!(overlaps(any, lo) && overlaps(lo, any) && overlaps(lo, lo));
        assert!(!overlaps(lo, other));
        assert!(!overlaps(lo, "127.0.0.1:10".parse().unwrap()));
        assert!(overlaps(lo, "[::]:9".parse().unwrap()));
        assert!(overlaps(lo, "[::ffff:127.0.0.1]:9".parse().unwrap()));
    }

    #[test]
    fn the_program_ends_in_a_return_of_a_and_jumps_stay_inside() {
        let p = steer_program(3);
        assert_eq!(p.last().unwrap().code, 0x16);
        for (i, ins) in p.iter().enumerate() {
            let next = i + 1;
            match ins.code {
                0x05 => assert!(next + (ins.k as usize) < p.len()),
                c if c & 0x07 == 0x05 => {
                    assert!(next + usize::from(ins.jt.max(ins.jf)) < p.len());
                }
                _ => assert!(i + 1 == p.len() || ins.code != 0x16),
            }
        }
        assert_eq!(p[13].k, 3);
    }
}
