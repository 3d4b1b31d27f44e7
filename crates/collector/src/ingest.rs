//! Receiving reports: UDP sockets (one per thread, `SO_REUSEPORT` so the kernel spreads sources
//! across them, large receive buffers), a source allowlist, and an account of every datagram:
//! accepted, or discarded with a reason ([`Discard`]). The same entry point serves pcap replays.
//!
//! A port another process already holds is an error unless `reuse_port` is set: with
//! `SO_REUSEPORT` alone a second collector would silently take a share of the reports. Once
//! bound, the port stays this collector's: see [`port_guard`].

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::now_ns;

use intscope_core::counters::{self, Samples};
use intscope_wire::Error;
use intscope_wire::error::{ErrorKind, Field, Layer};
use intscope_wire::locate::DetectConfig;
/// A source network of the allowlist (`allow`, `--allow`).
pub use ipnet::IpNet;
use socket2::{Domain, Protocol, Socket, Type};

pub mod port_guard;
pub mod pressure;
mod recv;
pub use port_guard::PortGuardStats;
pub use recv::{IDLE, MAX_BATCH, SLOT_RANGE};

use crate::store::{FlushTake, Flusher, Store, StoreConfig, StoreError, StoreStats, spawn_writer};
use intscope_core::{
    DetectConfig as Thresholds, FlowKeyMode, Limits, Record, RecordBatch, RecordSink, Snapshot,
    State, decode_into,
};

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
/// [`IngestStats`] (see [`Collector::decode_counted`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    received: u64,
    accepted: u64,
    reports: u64,
    /// Receive calls (0 or 1 per batch), and whether the call filled the batch.
    recv_calls: u64,
    recv_full: u64,
}

/// A record sink that counts the records it was given, and drops switch timestamps too far
/// from receive time (counting the reports that had one).
struct Counted<'a, S> {
    sink: &'a mut S,
    n: usize,
    /// `clock_skew_max_ns` (0: no bound).
    max_skew_ns: u64,
    skewed: u64,
}

impl<S: RecordSink> RecordSink for Counted<'_, S> {
    fn slot(&mut self) -> &mut Record {
        self.sink.slot()
    }
    fn filled(&mut self) {
        self.n += 1;
        // The slot just filled (a sink hands out the same slot until it is filled).
        if intscope_core::drop_far_timestamps(self.sink.slot(), self.max_skew_ns) {
            self.skewed += 1;
        }
        self.sink.filled();
    }
}

/// Collector configuration (the `intscope collect --config` file; docs/collector-config.md).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectorConfig {
    /// UDP addresses to receive reports on.
    pub listen: Vec<SocketAddr>,
    /// HTTP API address.
    pub http: SocketAddr,
    /// Receive threads per listen address.
    pub threads: usize,
    /// Socket receive buffer in bytes: `SO_RCVBUFFORCE` when permitted (root or `CAP_NET_ADMIN`),
    /// else `SO_RCVBUF`, capped by `net.core.rmem_max` (with a warning when that gives less).
    pub recv_buffer: usize,
    /// Datagrams one receive call (`recvmmsg`) may take, 1 to [`MAX_BATCH`].
    pub recv_batch: usize,
    /// Bytes of a receive slot, the largest datagram taken whole (larger ones are discarded as
    /// `oversize`); within [`SLOT_RANGE`].
    pub recv_slot: usize,
    /// How often the receive threads publish the snapshot the API reads the live state from
    /// (flows, nodes, queues, links, statistics, `/metrics`), in ms, while reports arrive and
    /// within [`IDLE`] of the last. A large state is published less often: never sooner than
    /// 20 times what the last snapshot cost, so publishing takes at most about a twentieth of
    /// a receive thread (at a million flows, every few seconds).
    pub snapshot_interval_ms: u64,
    /// Accept reports only from these networks (empty: from anywhere).
    pub allow: Vec<IpNet>,
    /// Share the report ports with other processes (`SO_REUSEPORT` across processes). Off, a
    /// port another process holds is an error at start.
    pub reuse_port: bool,
    /// Bounds on the live state (nodes, sources, ports, queues, links, flows).
    pub limits: Limits,
    /// Which headers of the reported packet form the flow key.
    pub flow_key: FlowKeyMode,
    /// INT UDP destination ports of the reported packets (INT_TBD).
    pub int_udp_ports: Vec<u16>,
    /// DSCP value marking INT in reported packets (`null` to disable).
    pub int_dscp: Option<u8>,
    /// Also read INT that carries no marking (neither `int_dscp` nor an `int_udp_ports` port)
    /// where nothing else says it is there. A report's copy whose F bit says the packet carried
    /// INT is read so whatever this says (the report is the marking; the block must be exact
    /// to its reserved bits and lengths). Off by default: the spec leaves the marking to the
    /// operator, and without one any payload can look like INT.
    pub unmarked_int: bool,
    /// The domain registry file (`shared/spec/domains.example.toml` format): sizes of
    /// domain-specific metadata, so that source-only metadata is not read as hops. `intscope
    /// collect` loads it into [`CollectorConfig::registry`].
    pub domains: Option<std::path::PathBuf>,
    /// The loaded domain registry (from `domains`, or set by an embedding program).
    #[serde(skip)]
    pub registry: Option<Arc<intscope_wire::domain::Registry>>,
    /// A topology file naming the nodes (`crate::names` formats): the console shows the
    /// names beside the IDs. `intscope collect` loads it into [`CollectorConfig::names`].
    pub topology: Option<std::path::PathBuf>,
    /// Node names (from `topology`, or set by an embedding program: the demo, the lab).
    #[serde(skip)]
    pub names: Arc<crate::names::NodeNames>,
    /// The egress Tx utilization value (instruction bit 7) a fully used port reports. INT v2.1
    /// leaves the unit to the device; 1000 (per mille) is what `intscope sim` reports.
    pub tx_util_full_scale: u32,
    /// Detector thresholds.
    pub detect: Thresholds,
    /// Directory of the embedded history store (`null`: keep no history).
    pub data: Option<std::path::PathBuf>,
    /// History store settings.
    pub store: StoreConfig,
    /// Incidents sent to webhook receivers (`[webhook]`).
    pub webhook: crate::webhook_config::WebhookConfig,
    /// Measurement mode (`intscope collect --discard`): receive and count datagrams, decode
    /// nothing — the machine's receive limit with this socket setup, to compare the pipeline to.
    #[serde(skip)]
    pub discard: bool,
}

impl CollectorConfig {
    /// What this configuration exposes that an operator should know at start: report ports
    /// off loopback that take reports from any source (anyone who can reach them can feed the
    /// collector made-up nodes, flows and events).
    pub fn exposure_warnings(&self) -> Vec<String> {
        if !self.allow.is_empty() {
            return Vec::new();
        }
        self.listen
            .iter()
            .filter(|a| !a.ip().is_loopback())
            .map(|a| {
                format!(
                    "reports are accepted from any source on {a} (not loopback, no allowlist): \
                     set `allow` in the config or pass --allow CIDR"
                )
            })
            .collect()
    }
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            listen: vec![SocketAddr::from((
                [0, 0, 0, 0],
                intscope_wire::report::DEFAULT_REPORT_PORT,
            ))],
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            // One: on two cores shared with the senders a second thread was slower (BENCHMARKS.md,
            // end to end).
            threads: 1,
            recv_buffer: 64 << 20,
            // Enough datagrams a call that the system call's cost is spread thin, few enough
            // that the batch's records stay in cache while they are correlated.
            recv_batch: 64,
            // The payload of a jumbo frame: a report datagram from a switch fits.
            recv_slot: 9216,
            snapshot_interval_ms: 100,
            allow: Vec::new(),
            reuse_port: false,
            limits: Limits::default(),
            flow_key: FlowKeyMode::Innermost,
            int_udp_ports: Vec::new(),
            int_dscp: Some(0x17),
            unmarked_int: false,
            domains: None,
            registry: None,
            topology: None,
            names: Arc::default(),
            tx_util_full_scale: 1000,
            detect: Thresholds::default(),
            data: Some("intscope-data".into()),
            store: StoreConfig::default(),
            webhook: crate::webhook_config::WebhookConfig::default(),
            discard: false,
        }
    }
}

/// Everything the ingest threads, the replay and the API share.
#[derive(Debug)]
pub struct Collector {
    /// Configuration.
    pub config: CollectorConfig,
    detect: DetectConfig,
    /// Correlation state (sharded, locks inside).
    pub state: State,
    /// Counters.
    pub stats: IngestStats,
    stop: AtomicBool,
    /// The history store, when configured.
    pub store: Option<Arc<dyn Store>>,
    /// Counters of the store path.
    pub store_stats: Arc<StoreStats>,
    raw: Mutex<Vec<(u64, IpAddr, Vec<u8>)>>,
    /// Raw datagrams offered since the last flush.
    raw_taken: std::sync::atomic::AtomicUsize,
    /// Raw datagrams not kept because the per-flush sample was full.
    pub raw_skipped: AtomicU64,
    /// Receive threads running: while there are any, they publish the readers' snapshots.
    receivers: AtomicUsize,
    /// What readers see: the latest snapshot (held only to clone or swap the pointer).
    published: Mutex<Arc<Published>>,
    /// One publisher at a time.
    publishing: Mutex<()>,
    /// Wall time (ns) from which the next snapshot is due.
    next_publish_ns: AtomicU64,
    /// What the last snapshot cost to take, ns.
    publish_cost_ns: AtomicU64,
}

/// A published snapshot: the live state and the ingest counters at one moment, the counters read
/// first, so that every datagram they count has its records in the state.
#[derive(Debug, Default)]
pub struct Published {
    /// The live state.
    pub state: Snapshot,
    /// The ingest counters.
    pub ingest: IngestCounts,
    /// When it was taken (ns since the epoch; 0: never).
    pub at_ns: u64,
    /// What the previous one cost to take, ns.
    pub previous_cost_ns: u64,
}

/// Publishing may take at most about one part in this of a receive thread's time: the next
/// snapshot is due this many times the last one's cost after it, when that is longer than
/// `snapshot_interval_ms`.
const PUBLISH_BUDGET: u64 = 20;

impl std::fmt::Debug for dyn Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Collector {
    /// A collector with this configuration; opens the history store when `data` is set.
    pub fn open(config: CollectorConfig) -> Result<Arc<Self>, StoreError> {
        let store = crate::store::open(config.data.as_deref(), &config.store)?;
        // One shard of each kind per receive thread: threads correlate side by side.
        let threads = config.threads.max(1) * config.listen.len().max(1);
        let state = State::with_limits(config.detect.clone(), config.limits, threads);
        match &store {
            Some(s) => {
                state.continue_event_ids(s.next_event_id()?);
                state.continue_incident_ids(s.next_incident_id()?);
            }
            // Nothing would read a flow's per-interval latency.
            None => state.keep_intervals(false),
        }
        let detect = DetectConfig {
            int_udp_ports: config.int_udp_ports.clone(),
            dscp: config.int_dscp.map(|v| intscope_wire::locate::DscpMatch {
                value: v,
                mask: 0x3f,
            }),
            unmarked_int: config.unmarked_int,
            domains: config.registry.clone(),
            truncated: true,
            ..DetectConfig::default()
        };
        Ok(Arc::new(Collector {
            state,
            detect,
            config,
            stats: IngestStats::default(),
            stop: AtomicBool::new(false),
            store,
            store_stats: Arc::new(StoreStats::default()),
            raw: Mutex::new(Vec::new()),
            raw_taken: std::sync::atomic::AtomicUsize::new(0),
            raw_skipped: AtomicU64::new(0),
            receivers: AtomicUsize::new(0),
            published: Mutex::new(Arc::default()),
            publishing: Mutex::new(()),
            next_publish_ns: AtomicU64::new(0),
            publish_cost_ns: AtomicU64::new(0),
        }))
    }

    /// Starts the store's flusher and writer threads (no-op without a store). The handle's
    /// `finish` flushes what is left and waits for the writer.
    pub fn start_store(self: &Arc<Self>) -> Option<StoreHandle> {
        let Some(store) = self.store.as_ref().map(Arc::clone) else {
            self.start_change_discarder();
            return None;
        };
        let (tx, writer) = spawn_writer(
            store,
            self.config.store.clone(),
            Arc::clone(&self.store_stats),
        );
        let c = Arc::clone(self);
        let flusher = Flusher::new(tx.clone(), Arc::clone(&self.store_stats));
        let flusher = std::thread::Builder::new()
            .name("store-flusher".into())
            .spawn(move || {
                let mut last_event = c.state.events().next_id();
                let interval = Duration::from_millis(c.config.store.flush_interval_ms.max(10));
                let longest = interval * c.config.store.max_stretch.max(1);
                // Wall-clock time: with back-pressure, ingest waits for this flush.
                let mut last = std::time::Instant::now();
                // When the next flush is due: an interval after the last, or later while
                // ingest is short of CPU (never with back-pressure: ingest waits for it).
                let mut due = last + interval;
                let mut pressure = pressure::Pressure::new(&c.stats);
                // Whether the pressure was judged for this `due` (once per interval: a flush
                // the busy writer defers is retried every tick without judging again).
                let mut judged = false;
                // After a stop the receive threads still read their sockets' backlogs: the final
                // flush waits for them, so that what they read is stored too.
                while !c.stopped() || c.receivers.load(Ordering::SeqCst) > 0 {
                    std::thread::sleep(Duration::from_millis(10));
                    let now = std::time::Instant::now();
                    if now < due {
                        continue;
                    }
                    if !c.config.store.backpressure && !judged && now < last + longest {
                        judged = true;
                        if pressure.under_pressure(&c.stats) {
                            c.store_stats
                                .flushes_stretched
                                .fetch_add(1, Ordering::Relaxed);
                            due = (now + interval).min(last + longest);
                            judged = false;
                            continue;
                        }
                    }
                    // A deferred flush is retried at the next tick, not a whole interval later.
                    if flusher.offer_parts(|| c.take_batch(&mut last_event)) {
                        last = std::time::Instant::now();
                        due = last + interval;
                        judged = false;
                        // Pressure is judged over each interval since a flush.
                        pressure.under_pressure(&c.stats);
                    }
                }
                // Events still waiting for their incidents go now, as they are.
                c.state.settle_events();
                flusher.finish_parts(|| c.take_batch(&mut last_event));
            })
            .ok()?;
        Some(StoreHandle {
            flusher,
            writer,
            tx,
        })
    }

    /// Without a store, forgets at each flush interval what a flush would have taken (changed
    /// flows, interval aggregates, changed incidents), so it does not pile up for a flush that
    /// never comes. The thread ends when the collector stops.
    fn start_change_discarder(self: &Arc<Self>) {
        let c = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("change-discarder".into())
            .spawn(move || {
                let interval = Duration::from_millis(c.config.store.flush_interval_ms.max(10));
                let mut last = std::time::Instant::now();
                while !c.stopped() {
                    std::thread::sleep(Duration::from_millis(10));
                    if last.elapsed() >= interval {
                        intscope_core::discard_changes(&c.state);
                        last = std::time::Instant::now();
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no thread to discard changes without a store: {e}");
        }
    }

    /// Begins a flush: the parts of at most `store.flush_chunk_flows` flow rows each.
    fn take_batch(&self, last_event: &mut u64) -> Option<FlushTake<'_>> {
        let raw = self
            .raw
            .lock()
            .map(|mut r| {
                self.raw_taken.store(0, Ordering::Relaxed);
                std::mem::take(&mut *r)
            })
            .unwrap_or_default();
        Some(FlushTake::new(
            &self.state,
            last_event,
            raw,
            &self.store_stats,
            self.config.store.flush_chunk_flows,
        ))
    }

    /// Accounts and processes one datagram (its UDP payload) from `src` at `time_ns`: the
    /// receive threads' [`Collector::decode`] and [`Collector::correlate`] for one datagram.
    pub fn ingest(&self, payload: &[u8], src: IpAddr, time_ns: u64, batch: &mut RecordBatch) {
        self.decode(payload, src, time_ns, batch);
        self.correlate(batch);
    }

    /// Accounts one datagram and decodes its reports into `batch`, without the state lock (so
    /// receive threads decode in parallel).
    pub fn decode(&self, payload: &[u8], src: IpAddr, time_ns: u64, batch: &mut RecordBatch) {
        let mut tally = Tally::default();
        self.decode_counted(payload, src, time_ns, batch, &mut tally);
        self.count(&tally);
    }

    /// [`Collector::decode`] with the datagram's common outcomes counted in `tally`, for
    /// [`Collector::count`] to add once per receive batch: three shared counters moved per
    /// datagram were a cache line the receive threads took from each other. The records go to
    /// `batch`, or to any other sink (one that sorts them by flow shard, say).
    pub fn decode_counted(
        &self,
        payload: &[u8],
        src: IpAddr,
        time_ns: u64,
        batch: &mut impl RecordSink,
        tally: &mut Tally,
    ) {
        tally.received += 1;
        if !self.config.allow.is_empty() && !self.config.allow.iter().any(|n| n.contains(&src)) {
            self.stats.discard(Discard::NotAllowed);
            return;
        }
        if payload.is_empty() {
            self.stats.discard(Discard::ZeroLength);
            return;
        }
        if self.store.is_some() {
            self.keep_raw(payload, src, time_ns);
        }
        let mut out = Counted {
            sink: batch,
            n: 0,
            max_skew_ns: self.config.detect.clock_skew_max_ns,
            skewed: 0,
        };
        let result = decode_into(
            payload,
            time_ns,
            &self.detect,
            self.config.flow_key,
            &mut out,
        );
        let n = out.n;
        tally.reports += n as u64;
        if out.skewed > 0 {
            // Rare: a shared counter, not the batch tally.
            self.stats
                .clock_skewed
                .fetch_add(out.skewed, Ordering::Relaxed);
        }
        match result {
            Ok(_) => tally.accepted += 1,
            Err(e) => {
                // Reports decoded before the error are kept; the datagram counts as discarded.
                let count = self.stats.discard(Discard::of(&e, n));
                let msg = format!("from {src}: {e}");
                if count < 10 || count.is_power_of_two() {
                    tracing::warn!(discarded = count + 1, "telemetry report {msg}");
                }
                if let Ok(mut last) = self.stats.last_error.lock() {
                    *last = Some(msg);
                }
            }
        }
    }

    /// Adds a receive batch's tally to the shared counters and empties it.
    pub fn count(&self, tally: &Tally) {
        for (counter, n) in [
            (&self.stats.received, tally.received),
            (&self.stats.accepted, tally.accepted),
            (&self.stats.reports, tally.reports),
            (&self.stats.recv_calls, tally.recv_calls),
            (&self.stats.recv_full, tally.recv_full),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Runs the decoded records through correlation and detection (each shard's part under its
    /// lock once: see [`State::process_batch`]) and empties the batch.
    pub fn correlate(&self, batch: &mut RecordBatch) {
        self.state.process_batch(batch.records());
        batch.clear();
    }

    /// Keeps a copy of the datagram for the store's raw ring, up to `raw_per_flush` per flush;
    /// past that only a counter moves (no lock per datagram).
    fn keep_raw(&self, payload: &[u8], src: IpAddr, time_ns: u64) {
        let limit = self.config.store.raw_per_flush;
        if self.raw_taken.fetch_add(1, Ordering::Relaxed) < limit
            && let Ok(mut raw) = self.raw.lock()
            && raw.len() < limit
        {
            raw.push((time_ns, src, payload.to_vec()));
        } else {
            self.raw_skipped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lets detectors act on the passing of time without reports (see [`State::tick`]).
    pub fn tick(&self, time_ns: u64) {
        self.state.tick(time_ns);
    }

    /// Counts a datagram discarded for `reason` before decoding, keeping `what` (from `src`) as
    /// the last error.
    fn note_discard(&self, reason: Discard, src: IpAddr, what: impl FnOnce() -> String) {
        let count = self.stats.discard(reason);
        if count < 10 || count.is_power_of_two() {
            let msg = format!("from {src}: {}", what());
            tracing::warn!(discarded = count + 1, "telemetry report {msg}");
            if let Ok(mut last) = self.stats.last_error.lock() {
                *last = Some(msg);
            }
        }
    }

    /// A receive thread's idle work: detector ticks, and the snapshot catching up. A snapshot
    /// that lacks datagrams already counted is published now, however long the last one took
    /// (the thread has nothing else to do); otherwise when due.
    fn idle(&self, now: u64) {
        self.tick(now);
        let behind = self.current().ingest.received != self.stats.received.load(Ordering::Relaxed);
        if behind && let Ok(_publishing) = self.publishing.try_lock() {
            self.publish_locked(now);
        } else {
            self.publish_due(now);
        }
    }

    /// What readers see (the API, `/metrics`): the latest published snapshot, never a shard
    /// lock. Without receive threads (a replay, a test) nobody else publishes, so a snapshot the
    /// state has moved on from is brought up to date here: no receive thread waits then.
    pub fn snapshot(&self) -> Arc<Published> {
        let current = self.current();
        if self.receivers.load(Ordering::SeqCst) == 0 && self.state.changed_since(&current.state) {
            let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
            return self.publish_locked(now_ns());
        }
        current
    }

    /// Runs `f` on the incident log for a reader. While receive threads run, the shards hand
    /// their observations over at every sweep and tick, so only the log's lock is taken; without
    /// them (a replay, a test) the shards are asked to hand over first.
    pub fn with_incidents<T>(&self, f: impl FnOnce(&mut intscope_core::IncidentLog) -> T) -> T {
        if self.receivers.load(Ordering::SeqCst) == 0 {
            self.state.with_incidents(f)
        } else {
            f(&mut self.state.events().incidents)
        }
    }

    fn current(&self) -> Arc<Published> {
        Arc::clone(&self.published.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Publishes a snapshot if one is due at `now` (wall time, ns) and no other thread is
    /// publishing: every `snapshot_interval_ms`, or 20 times the last one's cost
    /// when that is longer.
    pub fn publish_due(&self, now: u64) {
        if now < self.next_publish_ns.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(_publishing) = self.publishing.try_lock() {
            // Another thread may have published while this one waited for the flag.
            if now >= self.next_publish_ns.load(Ordering::Relaxed) {
                self.publish_locked(now);
            }
        }
    }

    /// Publishes a snapshot now; the caller holds `publishing`.
    fn publish_locked(&self, now: u64) -> Arc<Published> {
        let started = std::time::Instant::now();
        let previous = self.current();
        // Counters first: the datagrams they count were correlated before they were counted.
        let ingest = self.stats.counts();
        let state = self.state.snapshot(Some(&previous.state));
        drop(previous);
        let p = Arc::new(Published {
            state,
            ingest,
            at_ns: now,
            previous_cost_ns: self.publish_cost_ns.load(Ordering::Relaxed),
        });
        let old = std::mem::replace(
            &mut *self.published.lock().unwrap_or_else(|e| e.into_inner()),
            Arc::clone(&p),
        );
        // What the old snapshot does not share with the new one is freed here, or by the last
        // reader holding it.
        drop(old);
        let cost = started.elapsed().as_nanos() as u64;
        let interval = self.config.snapshot_interval_ms.saturating_mul(1_000_000);
        self.publish_cost_ns.store(cost, Ordering::Relaxed);
        let gap = cost.saturating_mul(PUBLISH_BUDGET).max(interval);
        self.next_publish_ns
            .store(now.saturating_add(gap), Ordering::Relaxed);
        p
    }

    /// Asks the receive threads to stop (they notice within their poll interval).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The running store threads.
pub struct StoreHandle {
    flusher: JoinHandle<()>,
    writer: JoinHandle<()>,
    tx: std::sync::mpsc::SyncSender<intscope_core::Batch>,
}

impl StoreHandle {
    /// After [`Collector::stop`]: waits for the final flush and for the writer to commit it.
    pub fn finish(self) {
        let _ = self.flusher.join();
        drop(self.tx);
        let _ = self.writer.join();
    }
}

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
/// kernel refuses every other socket on the port ([`port_guard`]).
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
                .spawn(move || recv::receive_loop(&c, sock));
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

#[cfg(unix)]
fn socket_inode(sock: &UdpSocket) -> Option<u64> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd()))
        .ok()
        .map(|m| m.ino())
}

#[cfg(not(unix))]
fn socket_inode(_: &UdpSocket) -> Option<u64> {
    None
}
