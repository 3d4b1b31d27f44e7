//! Receiving reports and accounting for every datagram: accepted, or discarded with a reason
//! ([`Discard`]), counted in [`IngestStats`]. The receive threads ([`recv`]) read the report
//! sockets ([`socket`]) and keep their port to this collector ([`port_guard`]); a capture replay
//! (`replay`) hands the hub's `Collector` the UDP payloads a capture holds, so live and
//! replayed traffic are counted by the same rules. The hub takes this module's counters; this
//! module does not name the hub.

use std::net::UdpSocket;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use intscope_core::counters::{self, Samples};
use intscope_wire::Error;
use intscope_wire::error::{ErrorKind, Field, Layer};

pub mod port_guard;
pub mod pressure;
pub mod recv;
pub mod replay;

pub mod socket;

use socket::socket_inode;

/// Why a datagram was discarded. Every received datagram is accepted or discarded for exactly
/// one of these; the malformed ones ([`Discard::is_malformed`]) also add to
/// [`IngestStats::malformed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// The source address is not in the allowlist.
    NotAllowed,
    /// An empty UDP payload.
    ZeroLength,
    /// A report version this collector does not know (the first header's Ver).
    UnknownVersion,
    /// Malformed: the datagram ends inside a header (or before its first report).
    Truncated,
    /// Malformed: a length field claims more bytes than there are, or disagrees with the
    /// metadata bits it counts.
    BadLength,
    /// Malformed: a type the spec reserves or leaves undefined (RepType, InType, NProto).
    UnknownType,
    /// Malformed: the report's copy of the packet has no valid IP header where its type says.
    BadInner,
    /// Malformed: another field holds a value the format does not allow.
    BadValue,
    /// Larger than a receive slot (`recv_slot`): the kernel cut it short, so it is not decoded.
    Oversize,
}

impl Discard {
    /// Every reason, in output order.
    pub const ALL: [Discard; 9] = [
        Discard::NotAllowed,
        Discard::ZeroLength,
        Discard::UnknownVersion,
        Discard::Truncated,
        Discard::BadLength,
        Discard::UnknownType,
        Discard::BadInner,
        Discard::BadValue,
        Discard::Oversize,
    ];

    /// The label in `/api/stats` and `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Discard::NotAllowed => "not_allowed",
            Discard::ZeroLength => "zero_length",
            Discard::UnknownVersion => "unknown_version",
            Discard::Truncated => "truncated",
            Discard::BadLength => "bad_length",
            Discard::UnknownType => "unknown_type",
            Discard::BadInner => "bad_inner",
            Discard::BadValue => "bad_value",
            Discard::Oversize => "oversize",
        }
    }

    /// Whether it is a kind of malformed datagram.
    pub fn is_malformed(self) -> bool {
        !matches!(
            self,
            Discard::NotAllowed | Discard::ZeroLength | Discard::UnknownVersion | Discard::Oversize
        )
    }

    /// Why a datagram whose decode ended in `e` after `decoded` reports is discarded.
    pub fn of(e: &Error, decoded: usize) -> Discard {
        match e.kind {
            ErrorKind::BadValue {
                field: Field::Ver, ..
            } if decoded == 0 && e.layer == Layer::ReportGroup => Discard::UnknownVersion,
            ErrorKind::BadValue {
                field: Field::RepType | Field::InType | Field::NProto | Field::TlvType,
                ..
            } => Discard::UnknownType,
            ErrorKind::BadValue {
                field: Field::ReportLength | Field::MdLength,
                ..
            } => Discard::BadLength,
            ErrorKind::BadValue {
                field: Field::InnerPacket,
                ..
            } => Discard::BadInner,
            ErrorKind::BadValue { .. } => Discard::BadValue,
            ErrorKind::BadLength { .. } => Discard::BadLength,
            ErrorKind::Truncated { .. } => Discard::Truncated,
        }
    }
}

/// Datagram and report counters (lock-free; read by the API and `/metrics`).
#[derive(Debug, Default)]
pub struct IngestStats {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Datagrams decoded (fully or partly).
    pub accepted: AtomicU64,
    /// Individual reports decoded.
    pub reports: AtomicU64,
    /// Reports with a switch timestamp beyond `clock_skew_max_ns` of receive time.
    pub clock_skewed: AtomicU64,
    /// Discarded as malformed, any kind (the sum of the malformed reasons).
    pub malformed: AtomicU64,
    /// Discarded: unknown version.
    pub unknown_version: AtomicU64,
    /// Discarded: source not allowed.
    pub not_allowed: AtomicU64,
    /// Discarded: empty payload.
    pub zero_length: AtomicU64,
    /// Discarded, malformed: truncated.
    pub truncated: AtomicU64,
    /// Discarded, malformed: a length field that does not fit.
    pub bad_length: AtomicU64,
    /// Discarded, malformed: a reserved or undefined type.
    pub unknown_type: AtomicU64,
    /// Discarded, malformed: the inner packet is not a packet of its type.
    pub bad_inner: AtomicU64,
    /// Discarded, malformed: another bad field.
    pub bad_value: AtomicU64,
    /// Discarded: larger than a receive slot.
    pub oversize: AtomicU64,
    /// Socket receive errors.
    pub socket_errors: AtomicU64,
    /// `recvmmsg` calls that returned datagrams.
    pub recv_calls: AtomicU64,
    /// Of those, calls that filled the whole batch: more was queued than a batch holds (the
    /// receive threads' sign of falling behind, [`pressure`]).
    pub recv_full: AtomicU64,
    /// The last decode error, for the API ("malformed at offset X").
    pub last_error: Mutex<Option<String>>,
    /// Inodes of the open report sockets, to read their kernel drop counters.
    pub socket_inodes: Mutex<Vec<u64>>,
    /// Kernel drops of report sockets already closed, read as each closed: the kernel forgets
    /// a socket's counter with it, and the count must survive a stop.
    pub closed_socket_drops: AtomicU64,
    /// Sockets of other processes found on the report ports ([`port_guard`]).
    pub port_guard: PortGuardStats,
}

/// Datagrams the kernel dropped on these sockets (receive buffer full), from the `drops` column
/// of /proc/net/udp and /proc/net/udp6. `None` where /proc is not available.
pub fn kernel_drops(inodes: &[u64]) -> Option<u64> {
    let mut total = 0u64;
    let mut readable = false;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        readable = true;
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if let (Some(inode), Some(drops)) = (
                cols.get(9).and_then(|v| v.parse::<u64>().ok()),
                cols.get(12).and_then(|v| v.parse::<u64>().ok()),
            ) && inodes.contains(&inode)
            {
                total += drops;
            }
        }
    }
    readable.then_some(total)
}

impl IngestStats {
    /// The counter of datagrams discarded for `reason`.
    pub fn discarded(&self, reason: Discard) -> &AtomicU64 {
        match reason {
            Discard::NotAllowed => &self.not_allowed,
            Discard::ZeroLength => &self.zero_length,
            Discard::UnknownVersion => &self.unknown_version,
            Discard::Truncated => &self.truncated,
            Discard::BadLength => &self.bad_length,
            Discard::UnknownType => &self.unknown_type,
            Discard::BadInner => &self.bad_inner,
            Discard::BadValue => &self.bad_value,
            Discard::Oversize => &self.oversize,
        }
    }

    /// Counts a datagram discarded for `reason`; returns how many were before it.
    pub fn discard(&self, reason: Discard) -> u64 {
        if reason.is_malformed() {
            self.malformed.fetch_add(1, Ordering::Relaxed);
        }
        self.discarded(reason).fetch_add(1, Ordering::Relaxed)
    }

    /// The counters now, as plain numbers.
    pub fn counts(&self) -> IngestCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IngestCounts {
            received: g(&self.received),
            accepted: g(&self.accepted),
            reports: g(&self.reports),
            clock_skewed: g(&self.clock_skewed),
            malformed: g(&self.malformed),
            discarded: Discard::ALL.map(|d| g(self.discarded(d))),
            socket_errors: g(&self.socket_errors),
        }
    }

    /// The counters now as JSON (the `ingest` part of `/api/stats`).
    pub fn snapshot(&self) -> serde_json::Value {
        self.counts().json(self)
    }

    /// Datagrams the kernel dropped on the report sockets, open and closed (`None` where /proc
    /// is not readable).
    pub fn kernel_dropped(&self) -> Option<u64> {
        // Under the lock, so that a socket closing meanwhile is counted once.
        let open = self.socket_inodes.lock().ok()?;
        kernel_drops(&open).map(|n| n + self.closed_socket_drops.load(Ordering::Relaxed))
    }

    /// Starts reading `sock`'s kernel drop counter into [`Self::kernel_dropped`].
    pub fn watch_socket(&self, sock: &UdpSocket) {
        if let (Some(ino), Ok(mut open)) = (socket_inode(sock), self.socket_inodes.lock()) {
            open.push(ino);
        }
    }

    /// Keeps `sock`'s kernel drops in [`Self::kernel_dropped`] once it closes; call it just
    /// before the socket is dropped.
    pub fn retire_socket(&self, sock: &UdpSocket) {
        let (Some(ino), Ok(mut open)) = (socket_inode(sock), self.socket_inodes.lock()) else {
            return;
        };
        if let Some(n) = kernel_drops(&[ino]) {
            self.closed_socket_drops.fetch_add(n, Ordering::Relaxed);
        }
        open.retain(|&i| i != ino);
    }
}

/// [`IngestStats`]' counters at one moment (published with the state's snapshot, so that the
/// datagrams they count are all in it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestCounts {
    /// Datagrams received.
    pub received: u64,
    /// Datagrams decoded (fully or partly).
    pub accepted: u64,
    /// Individual reports decoded.
    pub reports: u64,
    /// Reports with a switch timestamp beyond `clock_skew_max_ns` of receive time.
    pub clock_skewed: u64,
    /// Discarded as malformed, any kind.
    pub malformed: u64,
    /// Discarded, by reason, in the order of [`Discard::ALL`].
    pub discarded: [u64; Discard::ALL.len()],
    /// Socket receive errors.
    pub socket_errors: u64,
}

impl IngestCounts {
    /// Adds these counts, with the kernel's drop count when known, to `out`.
    pub fn sample(&self, kernel_dropped: Option<u64>, out: &mut Samples) {
        out.add(&counters::INGEST_DATAGRAMS_RECEIVED, &[], self.received);
        for (reason, n) in Discard::ALL.iter().zip(self.discarded) {
            out.add(&counters::INGEST_DATAGRAMS, &[reason.label()], n);
        }
        out.add(&counters::INGEST_DATAGRAMS, &["accepted"], self.accepted);
        if let Some(k) = kernel_dropped {
            out.add(&counters::INGEST_DATAGRAMS, &["kernel_dropped"], k);
        }
        out.add(&counters::INGEST_DATAGRAMS_MALFORMED, &[], self.malformed);
        out.add(&counters::INGEST_REPORTS_DECODED, &[], self.reports);
        out.add(
            &counters::INGEST_REPORTS_CLOCK_SKEWED,
            &[],
            self.clock_skewed,
        );
        out.add(&counters::INGEST_SOCKET_ERRORS, &[], self.socket_errors);
    }

    /// As JSON (the `ingest` part of `/api/stats`), with the kernel's drop count (`null` where
    /// /proc is not readable) and the last error read now from `stats`.
    pub fn json(&self, stats: &IngestStats) -> serde_json::Value {
        let kernel = stats.kernel_dropped();
        let mut out = Samples::default();
        self.sample(kernel, &mut out);
        let mut v = out.to_json()["ingest"].take();
        counters::merge_json(
            &mut v,
            serde_json::json!({
                "kernel_dropped": kernel,
                "last_error": stats.last_error.lock().map(|e| e.clone()).unwrap_or(None),
            }),
        );
        v
    }
}

/// A receive batch's datagrams received and accepted and reports decoded, not yet added to
/// [`IngestStats`] (see `Collector::decode_counted`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub(crate) received: u64,
    pub(crate) accepted: u64,
    pub(crate) reports: u64,
    /// Receive calls (0 or 1 per batch), and whether the call filled the batch.
    pub(crate) recv_calls: u64,
    pub(crate) recv_full: u64,
}

/// What the port guard found (`/metrics` and `/api/stats`).
#[derive(Debug, Default)]
pub struct PortGuardStats {
    /// Foreign sockets on a report port at the last check.
    pub foreign_now: AtomicU64,
    /// Foreign sockets seen since start (each socket once).
    pub foreign_seen: AtomicU64,
}

impl PortGuardStats {
    /// Adds the gauge and the counter to `out`.
    pub fn sample(&self, out: &mut Samples) {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.add(
            &counters::REPORT_PORT_FOREIGN_SOCKETS,
            &[],
            g(&self.foreign_now),
        );
        out.add(
            &counters::REPORT_PORT_FOREIGN_SEEN,
            &[],
            g(&self.foreign_seen),
        );
    }
}
