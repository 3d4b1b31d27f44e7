//! One telemetry report of any version, decoded into what correlation needs: who reported it,
//! its sequence number, the original flow, and the path — hop by hop, **source first** — with
//! each hop's ports, latency and queue. Built on the zero-copy `intscope-wire` decoders; the
//! record is reused between reports so decoding does not allocate.

use intscope_wire::int::{AnyShim, IntHeader};
use intscope_wire::locate::{DetectConfig, FlowKey, Packet, Start};
use intscope_wire::metadata::{Format, HopView, Stack};
use intscope_wire::report::{
    GROUP_LEN, INDIVIDUAL_LEN, InType, IndividualHeaderRepr, IndividualReport, IntMainRepr, Report,
    TLV_LEN, TlvHeaderRepr,
};
use intscope_wire::shim::Shim;
use intscope_wire::warning::Warning;
use intscope_wire::{Error, Field, IntBlock, Layer};

/// Most hops a record keeps; longer paths are cut (and flagged), the newest hops kept.
pub const MAX_HOPS: usize = 16;

/// Report format generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Version {
    /// Telemetry Report v2.0.
    #[serde(rename = "2.0")]
    V2,
    /// Telemetry Report v1.0.
    #[serde(rename = "1.0")]
    V1,
    /// Telemetry Report v0.5.
    #[serde(rename = "0.5")]
    V05,
}

impl Version {
    /// Label value for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Version::V2 => "2.0",
            Version::V1 => "1.0",
            Version::V05 => "0.5",
        }
    }
    /// Width of the sequence number in bits.
    pub fn seq_bits(self) -> u32 {
        match self {
            Version::V2 => 22,
            _ => 32,
        }
    }
}

/// What one node reported about the packet.
///
/// A value the node did not provide is kept as all ones, the wire's own "unavailable" (INT v2.1
/// §"INT-MD Metadata Header Format": "it must add a special all-ones reserved value indicating
/// 'invalid'"; `intscope_wire::metadata` already decodes it as `None`), and the accessors give it
/// back as `None`. That makes a hop 48 bytes instead of 80 with `Option`s: a record's hops are written
/// once in decode and read twice after it, by the flow and the fabric stages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// Node ID (0 when the node did not provide it).
    pub node_id: u32,
    ingress_if: u32,
    egress_if: u32,
    hop_latency: u32,
    queue_occupancy: u32,
    egress_tx_util: u32,
    queue_id: Option<u8>,
    ingress_ts: u64,
    egress_ts: u64,
}

const ABSENT: u32 = u32::MAX;
const ABSENT_WIDE: u64 = u64::MAX;

fn present(v: u32) -> Option<u32> {
    (v != ABSENT).then_some(v)
}

fn present_wide(v: u64) -> Option<u64> {
    (v != ABSENT_WIDE).then_some(v)
}

impl Default for Hop {
    fn default() -> Self {
        Hop::at(0)
    }
}

impl Hop {
    /// Switch time of the hop: its egress timestamp, else its ingress one, else `now` (the
    /// report's time) when its metadata carries none.
    pub(crate) fn clock_or(&self, now: u64) -> u64 {
        self.egress_ts().or(self.ingress_ts()).unwrap_or(now)
    }

    /// A hop at `node_id` that reported nothing else yet.
    pub const fn at(node_id: u32) -> Self {
        Hop {
            node_id,
            ingress_if: ABSENT,
            egress_if: ABSENT,
            hop_latency: ABSENT,
            queue_occupancy: ABSENT,
            egress_tx_util: ABSENT,
            queue_id: None,
            ingress_ts: ABSENT_WIDE,
            egress_ts: ABSENT_WIDE,
        }
    }

    /// Ingress interface (level 1, else level 2).
    #[inline]
    pub fn ingress_if(&self) -> Option<u32> {
        present(self.ingress_if)
    }
    /// Egress interface (level 1, else level 2).
    #[inline]
    pub fn egress_if(&self) -> Option<u32> {
        present(self.egress_if)
    }
    /// Hop latency in the device's unit (nanoseconds for every known implementation).
    #[inline]
    pub fn hop_latency(&self) -> Option<u32> {
        present(self.hop_latency)
    }
    /// Queue ID.
    #[inline]
    pub fn queue_id(&self) -> Option<u8> {
        self.queue_id
    }
    /// Queue occupancy (device units, typically cells or bytes).
    #[inline]
    pub fn queue_occupancy(&self) -> Option<u32> {
        present(self.queue_occupancy)
    }
    /// Ingress timestamp.
    #[inline]
    pub fn ingress_ts(&self) -> Option<u64> {
        present_wide(self.ingress_ts)
    }
    /// Egress timestamp.
    #[inline]
    pub fn egress_ts(&self) -> Option<u64> {
        present_wide(self.egress_ts)
    }
    /// Egress port Tx utilization.
    #[inline]
    pub fn egress_tx_util(&self) -> Option<u32> {
        present(self.egress_tx_util)
    }

    /// With these interfaces.
    pub fn with_interfaces(mut self, ingress: Option<u32>, egress: Option<u32>) -> Self {
        self.ingress_if = ingress.unwrap_or(ABSENT);
        self.egress_if = egress.unwrap_or(ABSENT);
        self
    }
    /// With this hop latency.
    pub fn with_hop_latency(mut self, latency: Option<u32>) -> Self {
        self.hop_latency = latency.unwrap_or(ABSENT);
        self
    }
    /// With this queue and occupancy.
    pub fn with_queue(mut self, id: Option<u8>, occupancy: Option<u32>) -> Self {
        self.queue_id = id;
        self.queue_occupancy = occupancy.unwrap_or(ABSENT);
        self
    }
    /// Drops its timestamps if one is further than `max_ns` from receive time `now` (see
    /// `thresholds::DetectConfig::clock_skew_max_ns`); whether it did.
    pub fn drop_far_timestamps(&mut self, now: u64, max_ns: u64) -> bool {
        let far = [self.ingress_ts(), self.egress_ts()]
            .into_iter()
            .flatten()
            .any(|t| t.abs_diff(now) > max_ns);
        if far {
            (self.ingress_ts, self.egress_ts) = (ABSENT_WIDE, ABSENT_WIDE);
        }
        far
    }

    /// With these timestamps.
    pub fn with_timestamps(mut self, ingress: Option<u64>, egress: Option<u64>) -> Self {
        self.ingress_ts = ingress.unwrap_or(ABSENT_WIDE);
        self.egress_ts = egress.unwrap_or(ABSENT_WIDE);
        self
    }

    fn from_view(v: &HopView<'_>, node_id: Option<u32>) -> Self {
        let mut hop = Hop::default();
        hop.set_from_view(v, node_id);
        hop
    }

    /// Fills every field from `v`, one store each: building a `Hop` and copying it into the
    /// record read it back in wider words than it was written, a store-forwarding stall that took
    /// 45 % of `fill_inner` (perf).
    fn set_from_view(&mut self, v: &HopView<'_>, node_id: Option<u32>) {
        let l1 = v.l1_interfaces();
        let queue = v.queue();
        self.node_id = node_id.or_else(|| v.node_id()).unwrap_or(0);
        // Level 1 interfaces, else level 2 (read only then: few devices send them).
        (self.ingress_if, self.egress_if) = match l1 {
            Some((ingress, egress)) => (u32::from(ingress), u32::from(egress)),
            None => v.l2_interfaces().unwrap_or((ABSENT, ABSENT)),
        };
        self.hop_latency = v.hop_latency().unwrap_or(ABSENT);
        self.queue_id = queue.map(|q| q.0).or_else(|| v.drop().map(|d| d.0));
        self.queue_occupancy = queue.map_or(ABSENT, |q| q.1);
        self.ingress_ts = v.ingress_ts().unwrap_or(ABSENT_WIDE);
        self.egress_ts = v.egress_ts().unwrap_or(ABSENT_WIDE);
        self.egress_tx_util = v.egress_tx_util().unwrap_or(ABSENT);
    }

    /// Fills every field from a hop of the 2016 format (`int-spec-2016.txt` §5.3.3: 31-bit
    /// values under a BOS bit; bit 1 the ingress and bit 5 the egress port ID, bit 3 an occupancy
    /// of no named queue), which the generic view accessors do not read.
    fn set_from_2016(&mut self, v: &HopView<'_>) {
        let (ingress, egress) = v.port_ids_2016();
        *self = Hop {
            node_id: v.value_2016(0).unwrap_or(0),
            ingress_if: ingress.unwrap_or(ABSENT),
            egress_if: egress.unwrap_or(ABSENT),
            hop_latency: v.value_2016(2).unwrap_or(ABSENT),
            queue_occupancy: v.value_2016(3).unwrap_or(ABSENT),
            egress_tx_util: v.value_2016(7).unwrap_or(ABSENT),
            queue_id: None,
            ingress_ts: v.value_2016(4).map_or(ABSENT_WIDE, u64::from),
            egress_ts: ABSENT_WIDE,
        };
    }

    /// Fills what this hop lacks from `from`.
    fn merge(&mut self, from: &Hop) {
        fn or<T: PartialEq>(into: &mut T, from: T, absent: T) {
            if *into == absent {
                *into = from;
            }
        }
        or(&mut self.ingress_if, from.ingress_if, ABSENT);
        or(&mut self.egress_if, from.egress_if, ABSENT);
        or(&mut self.hop_latency, from.hop_latency, ABSENT);
        or(&mut self.queue_id, from.queue_id, None);
        or(&mut self.queue_occupancy, from.queue_occupancy, ABSENT);
        or(&mut self.ingress_ts, from.ingress_ts, ABSENT_WIDE);
        or(&mut self.egress_ts, from.egress_ts, ABSENT_WIDE);
        or(&mut self.egress_tx_util, from.egress_tx_util, ABSENT);
    }
}

impl std::fmt::Debug for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hop")
            .field("node_id", &self.node_id)
            .field("ingress_if", &self.ingress_if())
            .field("egress_if", &self.egress_if())
            .field("hop_latency", &self.hop_latency())
            .field("queue_id", &self.queue_id)
            .field("queue_occupancy", &self.queue_occupancy())
            .field("ingress_ts", &self.ingress_ts())
            .field("egress_ts", &self.egress_ts())
            .field("egress_tx_util", &self.egress_tx_util())
            .finish()
    }
}

/// One decoded report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When it was received (or captured), ns since the epoch.
    pub time_ns: u64,
    /// Format generation.
    pub version: Version,
    /// Reporting node.
    pub node_id: u32,
    /// Reporting hardware subsystem.
    pub hw_id: u8,
    /// Report sequence number (per node, hw_id and destination).
    pub seq: u32,
    /// D: a packet was dropped.
    pub dropped: bool,
    /// Q: congested queue association.
    pub congested: bool,
    /// F: tracked flow.
    pub tracked: bool,
    /// I: intermediate report.
    pub intermediate: bool,
    /// Drop reason (v2.0 RepMdBits bit 15, v0.5 drop header).
    pub drop_reason: Option<u8>,
    /// The original packet's flow.
    pub flow: Option<FlowKey>,
    /// The report's copy of the packet ends before the original L4 ports (Telemetry Report
    /// v2.0 §"Individual Report Main Contents": the packet is "truncated ... to a configured
    /// length"): `flow` has ports 0, 0 — the flow's addresses and protocol, ports unknown —
    /// rather than ports taken from the INT encapsulation's UDP header or from bytes past the end.
    pub flow_partial: bool,
    /// A fingerprint of the reported packet that every hop sees alike (0: none): the IPv4
    /// identification and the first `FINGERPRINT_BYTES` bytes from the L4 header on (ports,
    /// checksum, TCP sequence numbers, the start of the payload), hashed. Per-hop reports of one
    /// packet (INT-XD, INT-MX: no hop changes those bytes) carry the same one, so it tells two
    /// packets of a flow apart when their timestamps would pair them. Not computed for reports
    /// with an INT-MD stack, which every hop changes (and which need no joining).
    pub packet_fp: u32,
    /// IP TTL / hop limit of the reported packet as the reporting node saw it.
    pub ip_ttl: Option<u8>,
    /// E bit of the embedded INT-MD header: the hop limit was reached.
    pub hop_limit_exceeded: bool,
    /// M bit: some node could not add its metadata (MTU).
    pub mtu_exceeded: bool,
    /// Hops that added INT metadata before the reporting node (embedded stack length).
    pub int_hops: u8,
    /// Hops are missing: the path was longer than [`MAX_HOPS`], or the report's copy of the
    /// packet ended inside the INT stack.
    pub path_truncated: bool,
    /// The first report of its datagram (sequence numbers count datagrams, not reports).
    pub first_in_datagram: bool,
    hops: [Hop; MAX_HOPS],
    hop_count: u8,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            time_ns: 0,
            version: Version::V2,
            node_id: 0,
            hw_id: 0,
            seq: 0,
            dropped: false,
            congested: false,
            tracked: false,
            intermediate: false,
            drop_reason: None,
            flow: None,
            flow_partial: false,
            packet_fp: 0,
            ip_ttl: None,
            hop_limit_exceeded: false,
            mtu_exceeded: false,
            int_hops: 0,
            path_truncated: false,
            first_in_datagram: true,
            hops: [Hop::default(); MAX_HOPS],
            hop_count: 0,
        }
    }
}

impl Record {
    /// The path, source first.
    pub fn hops(&self) -> &[Hop] {
        &self.hops[..usize::from(self.hop_count)]
    }

    /// Switch time of the report: the newest timestamp its hops carry (the reporter's own
    /// hop's first), else the report's (receive) time.
    pub fn switch_time(&self) -> u64 {
        self.hops()
            .iter()
            .rev()
            .find_map(|h| h.egress_ts().or(h.ingress_ts()))
            .unwrap_or(self.time_ns)
    }

    fn push(&mut self, hop: Hop) {
        *self.next_hop() = hop;
    }

    /// Appends `hop` to the path (unit tests build records without a datagram).
    #[cfg(test)]
    pub(crate) fn push_hop(&mut self, hop: Hop) {
        self.push(hop);
    }

    /// The slot of a new last hop (its old contents are to be overwritten).
    fn next_hop(&mut self) -> &mut Hop {
        if usize::from(self.hop_count) == MAX_HOPS {
            // Keep the newest hops: drop the oldest.
            self.hops.copy_within(1.., 0);
            self.hop_count -= 1;
            self.path_truncated = true;
        }
        self.hop_count += 1;
        &mut self.hops[usize::from(self.hop_count) - 1]
    }

    /// Ready for the next report. Field by field: the hop array (1.3 KB) is not rewritten, only
    /// its count, which is what a whole-value reset would cost every report.
    fn reset(&mut self, time_ns: u64, version: Version) {
        let Record {
            time_ns: t,
            version: v,
            node_id,
            hw_id,
            seq,
            dropped,
            congested,
            tracked,
            intermediate,
            drop_reason,
            flow,
            flow_partial,
            packet_fp,
            ip_ttl,
            hop_limit_exceeded,
            mtu_exceeded,
            int_hops,
            path_truncated,
            first_in_datagram,
            hops: _,
            hop_count,
        } = self;
        (*t, *v, *node_id, *hw_id, *seq) = (time_ns, version, 0, 0, 0);
        (*dropped, *congested, *tracked, *intermediate) = (false, false, false, false);
        (*drop_reason, *flow, *ip_ttl, *flow_partial) = (None, None, None, false);
        *packet_fp = 0;
        (*hop_limit_exceeded, *mtu_exceeded, *path_truncated) = (false, false, false);
        (*int_hops, *hop_count) = (0, 0);
        *first_in_datagram = true;
    }
}

/// The time whose low 32 bits of nanoseconds are `low` nearest to `around_ns`: v0.5 carries
/// only those (SD-Fabric's `ig_tstamp`, `eg_tstamp`: 32 bits, wrapping every 4.29 s), so they
/// are placed on the receive timeline, across a wrap when the receive time is past one.
pub fn nearest_time(low: u32, around_ns: u64) -> u64 {
    const WRAP: u64 = 1 << 32;
    let base = (around_ns & !(WRAP - 1)) | u64::from(low);
    [base.checked_sub(WRAP), Some(base), base.checked_add(WRAP)]
        .into_iter()
        .flatten()
        .min_by_key(|t| t.abs_diff(around_ns))
        .unwrap_or(base)
}

/// Drops the timestamps of `r`'s hops further than `max_ns` from its receive time (0: no
/// bound), so that its switch time is its receive time; whether any was.
pub fn drop_far_timestamps(r: &mut Record, max_ns: u64) -> bool {
    if max_ns == 0 {
        return false;
    }
    let now = r.time_ns;
    let count = usize::from(r.hop_count);
    let mut far = false;
    for hop in &mut r.hops[..count] {
        far |= hop.drop_far_timestamps(now, max_ns);
    }
    far
}

/// Which flow a report is filed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowKeyMode {
    /// The outermost headers of the reported packet (INT fields restored).
    Outer,
    /// The innermost headers through VXLAN-GPE / Geneve / GRE / IP-in-IP tunnels.
    #[default]
    Innermost,
}

/// Where decoded reports go: a slot to fill for each report, then word that it is filled.
pub trait RecordSink {
    /// The record the next report is decoded into (reset by the decoder).
    fn slot(&mut self) -> &mut Record;
    /// The slot holds a complete report.
    fn filled(&mut self);
}

/// Records decoded ahead of correlation: a receive thread decodes a whole batch of datagrams
/// without the state lock, then takes the lock once to correlate them. Slots are reused from
/// batch to batch, so decoding does not allocate.
#[derive(Debug, Default)]
pub struct RecordBatch {
    records: Vec<Record>,
    len: usize,
}

impl RecordBatch {
    /// The decoded records, in order.
    pub fn records(&self) -> &[Record] {
        &self.records[..self.len]
    }
    /// Empties the batch (keeping its slots).
    pub fn clear(&mut self) {
        self.len = 0;
    }
    /// Records held.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl RecordSink for RecordBatch {
    fn slot(&mut self) -> &mut Record {
        if self.records.len() == self.len {
            self.records.push(Record::default());
        }
        &mut self.records[self.len]
    }
    fn filled(&mut self) {
        self.len += 1;
    }
}

/// One reused record, handed to a closure as each report is decoded.
struct EachRecord<'r, F> {
    record: &'r mut Record,
    each: F,
}

impl<F: FnMut(&Record)> RecordSink for EachRecord<'_, F> {
    fn slot(&mut self) -> &mut Record {
        self.record
    }
    fn filled(&mut self) {
        (self.each)(self.record);
    }
}

/// What the wire crate tolerates but a collector cannot use, checked per report so that bytes
/// that merely happen to parse are not taken for reports (Report v2.0 §"Individual Report
/// Header"):
/// - RepType "3 – 15: Reserved", and 2 (IOAM), whose main contents "will be defined in a future
///   version": where the inner contents begin is unknown;
/// - InType "6-15: Reserved";
/// - for RepType 1, MD Length "must be derived based on the adjusted RepMdBits (and DSMdBits)"
///   (§"Individual Report Main Contents for RepType 1"): at least what the bits describe, and
///   exactly that without domain-specific bits;
/// - InType 0 is "None": no inner contents; InType 3, 4 and 5 announce a packet, so there is one;
/// - InType 1: TLVs that fit (§"Individual Report Inner Contents for InType 1"), of a defined
///   TLVType ("4-15: Reserved").
///
/// The packet itself is checked as it is decoded ([`fill_inner`]). Scalars, not the report, are
/// passed: a reference would make the caller keep the report in memory rather than registers.
#[inline(always)]
fn validate_v2(
    h: IndividualHeaderRepr,
    main: Option<IntMainRepr>,
    md: usize,
    inner_type: InType,
    inner: &[u8],
    at: usize,
) -> Result<(), Error> {
    if h.rep_type > 1 || h.in_type > 5 {
        return Err(reserved_type(h, at));
    }
    if h.rep_type == 1
        && let Some(main) = main
    {
        let base = Format::ReportV2.baseline_len(main.rep_md_bits);
        let domain = 4 * main.ds_md_bits.count_ones() as usize;
        if md < base + domain || (domain == 0 && md != base) {
            return Err(Error::bad_value(
                Layer::ReportIndividual,
                at + 2,
                Field::MdLength,
                "the words RepMdBits and DSMdBits describe",
                (md / 4) as u64,
            ));
        }
    }
    match inner_type {
        InType::None if !inner.is_empty() => Err(Error::bad_value(
            Layer::ReportIndividual,
            at + 1,
            Field::ReportLength,
            "no inner contents after the main contents (InType 0, None)",
            inner.len() as u64,
        )),
        InType::Ethernet | InType::Ipv4 | InType::Ipv6 if inner.is_empty() => {
            Err(no_packet(inner_type, at))
        }
        InType::Tlv => validate_tlvs(inner, at),
        _ => Ok(()),
    }
}

#[cold]
#[inline(never)]
fn reserved_type(h: IndividualHeaderRepr, at: usize) -> Error {
    if h.rep_type > 1 {
        Error::bad_value(
            Layer::ReportIndividual,
            at,
            Field::RepType,
            "0 (Inner Only) or 1 (INT); 2 (IOAM) has no defined contents, 3-15 are reserved",
            u64::from(h.rep_type),
        )
    } else {
        Error::bad_value(
            Layer::ReportIndividual,
            at,
            Field::InType,
            "0-5 (6-15 are reserved)",
            u64::from(h.in_type),
        )
    }
}

#[cold]
#[inline(never)]
fn validate_tlvs(inner: &[u8], at: usize) -> Result<(), Error> {
    let mut rest = inner;
    while !rest.is_empty() {
        let h = TlvHeaderRepr::parse(rest).map_err(|e| e.shifted(at))?;
        let end = TLV_LEN + usize::from(h.length) * 4;
        if end > rest.len() {
            return Err(Error::bad_length(
                Layer::ReportTlv,
                at,
                Field::TlvLength,
                end,
                rest.len(),
            ));
        }
        if let InType::Reserved(_) = h.in_type() {
            return Err(Error::bad_value(
                Layer::ReportTlv,
                at,
                Field::TlvType,
                "0-3 (4-15 are reserved)",
                u64::from(h.tlv_type),
            ));
        }
        rest = &rest[end..];
    }
    Ok(())
}

/// The error for a report whose copy of the packet (of type `t`) holds no IP header where its
/// type says one is (after Ethernet, VLAN tags and MPLS labels for an Ethernet frame): a report
/// of such a packet gives no flow, and random bytes that parse as a report end here.
#[cold]
#[inline(never)]
fn no_packet(t: InType, at: usize) -> Error {
    let layer = match t {
        InType::Ipv4 => Layer::Ipv4,
        InType::Ipv6 => Layer::Ipv6,
        _ => Layer::Ethernet,
    };
    Error::bad_value(
        layer,
        at,
        Field::InnerPacket,
        "a packet with a valid IPv4 or IPv6 header",
        u64::from(t.raw()),
    )
}

/// Decodes every individual report of a datagram (the UDP payload), calling `sink` with each.
/// Returns the number of reports; an error means the datagram (or the rest of it) is malformed.
pub fn decode_datagram(
    payload: &[u8],
    time_ns: u64,
    cfg: &DetectConfig,
    mode: FlowKeyMode,
    record: &mut Record,
    sink: impl FnMut(&Record),
) -> Result<usize, Error> {
    decode_into(
        payload,
        time_ns,
        cfg,
        mode,
        &mut EachRecord { record, each: sink },
    )
}

/// Decodes every individual report of a datagram into `out`'s slots. Returns the number of
/// reports; on an error the reports before it stay in `out`.
pub fn decode_into(
    payload: &[u8],
    time_ns: u64,
    cfg: &DetectConfig,
    mode: FlowKeyMode,
    out: &mut impl RecordSink,
) -> Result<usize, Error> {
    let report = Report::parse(payload)?;
    match report {
        Report::V2 { group, .. } => {
            let mut n = 0;
            for ir in report.individual_reports() {
                let ir = ir?;
                let at = ir.offset;
                validate_v2(
                    ir.header,
                    ir.main,
                    ir.metadata.len(),
                    ir.inner_type,
                    ir.inner,
                    at,
                )?;
                let record = out.slot();
                record.reset(time_ns, Version::V2);
                record.node_id = group.node_id;
                record.hw_id = group.hw_id;
                record.seq = group.sequence;
                record.first_in_datagram = n == 0;
                if !fill_v2(record, &ir, cfg, mode) {
                    return Err(no_packet(ir.inner_type, at));
                }
                out.filled();
                n += 1;
            }
            if n == 0 {
                // "Each telemetry report packet contains one or more individual reports".
                return Err(Error::truncated(
                    Layer::ReportIndividual,
                    GROUP_LEN,
                    INDIVIDUAL_LEN,
                    0,
                ));
            }
            Ok(n)
        }
        Report::V1 { header, inner, .. } => {
            let in_type = match header.nproto {
                0 => InType::Ethernet,
                1 => InType::Ipv4,
                2 => InType::Ipv6,
                n => {
                    return Err(Error::bad_value(
                        Layer::ReportV1,
                        0,
                        Field::NProto,
                        "0 (Ethernet), 1 (IPv4) or 2 (IPv6)",
                        u64::from(n),
                    ));
                }
            };
            let record = out.slot();
            record.reset(time_ns, Version::V1);
            record.node_id = header.switch_id;
            record.hw_id = header.hw_id;
            record.seq = header.sequence;
            record.dropped = header.d;
            record.congested = header.q;
            record.tracked = header.f;
            let start = match header.nproto {
                1 => Start::Ipv4,
                2 => Start::Ipv6,
                _ => Start::Ethernet,
            };
            if !fill_inner(record, inner, start, cfg, mode) && !inner.is_empty() {
                return Err(no_packet(in_type, intscope_wire::report::V1_LEN));
            }
            // v1.0 sinks report their own metadata in the stack; the node is the last hop.
            if record
                .hops()
                .last()
                .is_none_or(|h| h.node_id != header.switch_id)
            {
                record.push(Hop::at(header.switch_id));
            }
            out.filled();
            Ok(1)
        }
        Report::V05 {
            fixed,
            switch,
            inner,
            ..
        } => {
            let record = out.slot();
            record.reset(time_ns, Version::V05);
            record.hw_id = fixed.hw_id;
            record.seq = fixed.sequence;
            record.dropped = fixed.d;
            record.congested = fixed.q;
            record.tracked = fixed.f;
            if !fill_inner(record, inner, Start::Ethernet, cfg, mode) && !inner.is_empty() {
                return Err(no_packet(InType::Ethernet, payload.len() - inner.len()));
            }
            if let Some(s) = switch {
                record.node_id = s.switch_id;
                record.drop_reason = s.drop_reason;
                // v0.5 always carries both 32-bit timestamps; a node that did not measure one
                // (a host's own packet, a packet delivered to the host) writes 0, which is
                // read as absent: joined to any other hop's time, it would invent a link.
                let ingress = (fixed.ingress_ts != 0).then_some(fixed.ingress_ts);
                let egress = s.egress_ts.filter(|e| *e != 0);
                record.push(
                    Hop::at(s.switch_id)
                        .with_interfaces(
                            Some(u32::from(s.ingress_port)),
                            Some(u32::from(s.egress_port)),
                        )
                        .with_queue(Some(s.queue_id), s.queue_occupancy)
                        .with_timestamps(
                            ingress.map(|t| nearest_time(t, time_ns)),
                            egress.map(|t| nearest_time(t, time_ns)),
                        )
                        .with_hop_latency(ingress.zip(egress).map(|(i, e)| e.wrapping_sub(i))),
                );
            } else if let Some(last) = record.hops().last() {
                // A v0.5 flow report without a local header: the sink is the stack's top.
                record.node_id = last.node_id;
            }
            out.filled();
            Ok(1)
        }
    }
}

/// Fills `record` from report `ir`; returns whether the packet it carries, if its type says
/// there is one, has an IP layer ([`fill_inner`]).
fn fill_v2(
    record: &mut Record,
    ir: &IndividualReport<'_>,
    cfg: &DetectConfig,
    mode: FlowKeyMode,
) -> bool {
    let h = ir.header;
    record.dropped = h.d;
    record.congested = h.q;
    record.tracked = h.f;
    record.intermediate = h.i;
    let start = match ir.inner_type {
        InType::Ipv4 => Some(Start::Ipv4),
        InType::Ipv6 => Some(Start::Ipv6),
        InType::Ethernet => Some(Start::Ethernet),
        _ => None,
    };
    let mut packet = true;
    if let Some(start) = start {
        packet = fill_inner(record, ir.inner, start, cfg, mode);
    } else if ir.inner_type == InType::Tlv {
        for tlv in ir.tlvs().flatten() {
            let start = match tlv.header.in_type() {
                InType::Ipv4 => Start::Ipv4,
                InType::Ipv6 => Start::Ipv6,
                InType::Ethernet => Start::Ethernet,
                _ => continue,
            };
            packet = fill_inner(record, tlv.data, start, cfg, mode);
            break;
        }
    }
    if let Some(Ok(view)) = ir.hop() {
        record.drop_reason = view.drop().map(|d| d.1);
        let node_id = Some(record.node_id);
        // A sink that put its own metadata in the stack (INT v2.1 sink option 1) is already the
        // last hop: merge instead of adding it twice. Otherwise the hop is written in its slot
        // (see `set_from_view`: built apart and copied in, it stalled a quarter of this function).
        match record.hops().last() {
            Some(last) if Some(last.node_id) == node_id => {
                let own = Hop::from_view(&view, node_id);
                let last = usize::from(record.hop_count) - 1;
                record.hops[last].merge(&own);
            }
            _ => record.next_hop().set_from_view(&view, node_id),
        }
    } else if record
        .hops()
        .last()
        .is_none_or(|h| h.node_id != record.node_id)
    {
        record.push(Hop::at(record.node_id));
    }
    packet
}

/// Flow key, TTL and the embedded INT stack of the truncated packet. Returns whether it has an
/// IP layer (a whole, valid IPv4 or IPv6 header, after Ethernet, VLAN tags and MPLS labels when
/// it starts with Ethernet): a copy of a packet without one is no report of a flow.
fn fill_inner(
    record: &mut Record,
    bytes: &[u8],
    start: Start,
    cfg: &DetectConfig,
    mode: FlowKeyMode,
) -> bool {
    let mut p = Packet::new(bytes);
    if p.locate_copy(start, cfg, record.tracked).is_err() {
        // A truncated packet too short for its L4 header still tells the IP layer; ports read
        // so far are the packet's only if no INT encapsulation came after them.
        record.flow = p.flow;
        if p.l4.is_none()
            || p.int.is_some()
            || p.l4.is_some_and(|l4| cfg.is_int_udp_port(l4.dst_port))
        {
            mark_ports_unknown(record);
        }
        return p.ip.is_some();
    }
    match &p.int {
        Some((at, block)) => {
            push_stack(record, block, cfg);
            if matches!(block.header, IntHeader::Mx(_)) {
                // What follows the INT-MX block: the original L4 header (NPT=2) or payload.
                record.packet_fp = fingerprint(bytes, &p, at + block.len);
            }
        }
        None => record.packet_fp = p.l4.map_or(0, |l4| fingerprint(bytes, &p, l4.offset)),
    }
    record.ip_ttl = p.ip.map(|ip| ip.ttl);
    // After the stack walk, and straight from the chosen field: read right after `locate` wrote
    // it (through an `or` temporary), the flow's wide loads stalled on store forwarding.
    let flow = match mode {
        FlowKeyMode::Innermost if p.inner_flow.is_some() => &p.inner_flow,
        _ => &p.flow,
    };
    record.flow = *flow;
    if mode == FlowKeyMode::Outer || p.inner_flow.is_none() {
        // INT v2.1 §"INT over TCP/UDP", NPT=2: the original L4 header follows the INT block;
        // a copy cut before its ports leaves the INT UDP header's in the key.
        if let Some((at, block)) = &p.int
            && let AnyShim::V2(Shim::TcpUdp(shim)) = block.shim
            && shim.npt == 2
            && matches!(shim.ip_proto(), 6 | 17)
            && bytes.len().saturating_sub(at + block.len) < 4
        {
            mark_ports_unknown(record);
        }
    }
    p.ip.is_some()
}

/// Bytes from the L4 header on that [`Record::packet_fp`] covers: a UDP header and 16 bytes of
/// what follows, a TCP header's ports, sequence and acknowledgement numbers — within any report
/// truncation that keeps the L4 header.
pub const FINGERPRINT_BYTES: usize = 24;

/// [`Record::packet_fp`] of a located packet, over the IPv4 identification and the bytes from
/// `from` on (FNV-1a; 0 is kept for "none").
#[inline(never)]
fn fingerprint(bytes: &[u8], p: &Packet<'_>, from: usize) -> u32 {
    let mut h = 0x811c_9dc5u32;
    let mut mix = |b: &[u8]| {
        for &x in b {
            h = (h ^ u32::from(x)).wrapping_mul(0x0100_0193);
        }
    };
    if let Some(ip) = p.ip.filter(|ip| ip.version == 4) {
        mix(bytes.get(ip.offset + 4..ip.offset + 6).unwrap_or(&[]));
    }
    let end = from.saturating_add(FINGERPRINT_BYTES).min(bytes.len());
    mix(bytes.get(from..end).unwrap_or(&[]));
    h.max(1)
}

/// The record's flow without its ports, marked partial ([`Record::flow_partial`]).
#[cold]
fn mark_ports_unknown(record: &mut Record) {
    if let Some(f) = &mut record.flow {
        (f.src_port, f.dst_port) = (0, 0);
        record.flow_partial = true;
    }
}

fn push_stack(record: &mut Record, block: &IntBlock<'_>, cfg: &DetectConfig) {
    if let IntHeader::Md(h) = block.header {
        record.hop_limit_exceeded = h.e;
        record.mtu_exceeded = h.m;
    }
    if let IntHeader::V1(h) = block.header {
        record.hop_limit_exceeded = h.e;
        record.mtu_exceeded = h.m;
    }
    // The registry tells a domain's source-only metadata from hops (INT v2.1 §"INT-MD Metadata
    // Stack"); without it the spec's own example reads the host's MAC as two more nodes.
    let (stack, _) = block.stack(cfg.domains.as_deref());
    // The stack is newest first, the record's path source first: hops are written from the end
    // of the slots the stack's length calls for (no list of views in between to reverse).
    let start = usize::from(record.hop_count);
    let slots = stack.hop_count().min(MAX_HOPS - start);
    let mut n = 0;
    let mut cut = false;
    for hop in stack.flatten() {
        if n == slots {
            cut = true;
            break;
        }
        record.hops[start + slots - 1 - n].set_from_view(&hop, None);
        n += 1;
    }
    if n < slots {
        // Fewer whole hops than the length said (a malformed stack): close the gap.
        record
            .hops
            .copy_within(start + slots - n..start + slots, start);
    }
    record.hop_count = (start + n) as u8;
    record.int_hops = n as u8;
    // The report's copy of the packet can end inside the stack (truncation): the oldest hops are
    // missing, so the path is a suffix.
    record.path_truncated |= cut || block.warnings.has(Warning::TruncatedInt);
    if matches!(block.header, IntHeader::V2016(_)) {
        reread_2016(record, block);
    }
}

/// The 2016 format's words carry a BOS bit the generic view does not read (its hops came out
/// empty above): the hops again, by their own reader. Out of the hot loop, which stays as it was.
#[cold]
#[inline(never)]
fn reread_2016(record: &mut Record, block: &IntBlock<'_>) {
    let IntHeader::V2016(h) = block.header else {
        return;
    };
    // The stack as `IntBlock::stack` lays it out, built here: a second call site of that
    // function made the inliner keep it out of line on the hot path.
    let hop_len = usize::from(h.ins_cnt) * 4;
    let stack = Stack::new(block.body, h.instructions, Format::Int2016, hop_len, 0, 0);
    let end = usize::from(record.hop_count);
    for (i, hop) in stack
        .flatten()
        .take(usize::from(record.int_hops))
        .enumerate()
    {
        record.hops[end - 1 - i].set_from_2016(&hop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Report v0.5 whose inner frame is the 2016 specification's INT over VXLAN-GPE example
    /// (`int-spec-2016.txt` §5.4): the collector reads its hops as `dump` does — BOS bits off
    /// the values, occupancy without a queue ID, the 2016 port IDs.
    #[test]
    fn a_2016_stack_in_a_report_is_read_as_the_format_defines() {
        let inner_udp = "0457 08ae 000c 0000 64617461"; // 1111 -> 2222, "data"
        let inner = format!(
            "000000000002 000000000001 0800 \
             45000020 00000000 40110000 0a000101 0a000303 {inner_udp}"
        );
        // Hop-by-hop block: bits 0, 1, 3, 5 (0xD400): switch, ingress port, occupancy, egress
        // port; three hops, newest first, BOS on the last word.
        let int = "01000f03 00041003 d4000000 \
                   00000003 00000007 0000001e 00000008 \
                   00000002 00000005 00000014 00000006 \
                   00000001 00000003 00000003 80000004";
        let gpe = format!("0c000005 00000100 {int} {inner}");
        let gpe = hex::decode(gpe.replace(' ', "")).unwrap();
        let udp_len = 8 + gpe.len();
        let frame = format!(
            "000000000002 000000000001 0800 \
             4500{:04x} 00000000 40110000 0a000101 0a000303 \
             15b312b6 {udp_len:04x} 0000 {}",
            20 + udp_len,
            hex::encode(&gpe)
        );
        let report = format!("00200001 00000000 00000000 {frame}");
        let report = hex::decode(report.replace(' ', "")).unwrap();
        let mut record = Record::default();
        let mut got = Vec::new();
        let n = decode_datagram(
            &report,
            1,
            &DetectConfig::default(),
            FlowKeyMode::Innermost,
            &mut record,
            |r| {
                got = r
                    .hops()
                    .iter()
                    .map(|h| {
                        (
                            h.node_id,
                            h.ingress_if(),
                            h.egress_if(),
                            h.queue_id(),
                            h.queue_occupancy(),
                        )
                    })
                    .collect();
            },
        )
        .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            got,
            [
                (1, Some(3), Some(4), None, Some(3)),
                (2, Some(5), Some(6), None, Some(20)),
                (3, Some(7), Some(8), None, Some(30)),
            ],
            "path source first; 0x80000004 is BOS + egress port 4"
        );
        let flow = record.flow.unwrap();
        assert_eq!((flow.src_port, flow.dst_port), (1111, 2222));
    }

    /// A TCP flow carried in INT over a new UDP header (INT v2.1 §"INT over TCP/UDP", NPT=2),
    /// reported with the copy cut after `keep` bytes of its TCP header: the INT UDP header's
    /// ports are not the flow's.
    fn npt2_report(keep: usize) -> Vec<u8> {
        let tcp = "0d05 01bb 00000001 00000000 5010ffff 00000000";
        let tcp = hex::decode(tcp.replace(' ', "")).unwrap();
        // Shim: type 1 (MD), NPT 2, 4 words, IP protocol 6; MD header (Hop ML 1, node ID
        // only), one hop (node 5).
        let int = "18040006 20000107 80000000 00000000 00000005";
        let int = hex::decode(int.replace(' ', "")).unwrap();
        let udp_len = 8 + int.len() + tcp.len();
        let ip = format!(
            "4500{:04x} 00000000 40110000 0a000101 0a000303 0457 4568 {udp_len:04x} 0000",
            20 + udp_len
        );
        let mut frame =
            hex::decode(format!("000000000002 000000000001 0800 {ip}").replace(' ', "")).unwrap();
        frame.extend_from_slice(&int);
        frame.extend_from_slice(&tcp[..keep]);
        // Padded to whole words (Report Length counts words): padding after a cut looks like
        // packet bytes, so the cuts tested leave fewer than four bytes in all.
        let words = (8 + frame.len()).div_ceil(4);
        frame.resize((words - 2) * 4, 0);
        // Group header: version 2, sequence 1, node 5.
        let mut out = hex::decode("2000000100000005").unwrap();
        // Individual report: RepType 1, InType 3 (Ethernet), length in words, no metadata.
        out.extend_from_slice(&[0x13, words as u8, 0, 0x10]);
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&frame);
        out
    }

    #[test]
    fn ports_past_the_truncation_are_unknown_not_invented() {
        let cfg = DetectConfig {
            int_udp_ports: vec![0x4568],
            truncated: true,
            ..DetectConfig::default()
        };
        let decode = |keep| {
            let mut record = Record::default();
            let mut got = None;
            decode_datagram(
                &npt2_report(keep),
                1,
                &cfg,
                FlowKeyMode::Innermost,
                &mut record,
                |r| {
                    got = Some((r.flow.unwrap(), r.flow_partial));
                },
            )
            .unwrap();
            got.unwrap()
        };
        let (whole, partial) = decode(20);
        assert_eq!(
            (whole.proto, whole.src_port, whole.dst_port, partial),
            (6, 3333, 443, false)
        );
        for keep in [0, 1, 2] {
            let (cut, partial) = decode(keep);
            assert_eq!(
                (cut.proto, cut.src_port, cut.dst_port, partial),
                (6, 0, 0, true),
                "cut after {keep} bytes of TCP: not the INT UDP ports"
            );
            assert_eq!((cut.src, cut.dst), (whole.src, whole.dst));
        }
        let (four, partial) = decode(4);
        assert_eq!((four.src_port, four.dst_port, partial), (3333, 443, false));
    }

    /// v0.5's 32-bit timestamps (low 32 bits of nanoseconds, wrapping every 4.29 s) are the
    /// 64-bit time nearest the receive time, across a wrap either way. (Before: the raw 32-bit
    /// value, a time in January 1970.)
    #[test]
    fn v05_timestamps_are_placed_on_the_receive_timeline() {
        const WRAP: u64 = 1 << 32;
        let now = 1_700_000_000_000_000_000u64;
        for sent in [
            now - 1_000,
            now - 2_000_000_000,
            now + 1_500_000_000,
            // Just before and just after a wrap of the low 32 bits, received across it.
            (now | (WRAP - 1)) - 10,
            (now | (WRAP - 1)) + 10,
        ] {
            for recv in [sent + 1_000_000, sent + 2_100_000_000, sent - 1_000_000] {
                assert_eq!(nearest_time(sent as u32, recv), sent, "{sent} {recv}");
            }
        }
        assert_eq!(nearest_time(5, 0), 5, "no time before the epoch");
        assert_eq!(nearest_time(u32::MAX, 3), u64::from(u32::MAX));
        // Through the decoder: a generated v0.5 report.
        let mut g = crate::loadgen::Generator::new(crate::loadgen::LoadConfig {
            version: crate::loadgen::LoadVersion::V05,
            ..crate::loadgen::LoadConfig::default()
        });
        let mut out = Vec::new();
        g.next_datagram(&mut out);
        let mut rec = Record::default();
        let mut hops = Vec::new();
        for recv in [now, now + 3 * WRAP + 17] {
            decode_datagram(
                &out,
                recv,
                &DetectConfig::default(),
                FlowKeyMode::Innermost,
                &mut rec,
                |r| hops.extend(r.hops().iter().filter_map(Hop::ingress_ts)),
            )
            .unwrap();
        }
        assert_eq!(hops.len(), 2, "{hops:?}");
        for (ts, recv) in hops.iter().zip([now, now + 3 * WRAP + 17]) {
            assert!(ts.abs_diff(recv) <= WRAP / 2, "{ts} {recv}");
        }
    }

    /// A hop timestamp beyond the bound from the receive time is dropped (the report is then
    /// timed by its receive time); within it, or without a bound, kept.
    #[test]
    fn far_switch_timestamps_are_dropped() {
        let now = 1_700_000_000_000_000_000u64;
        let mut r = Record {
            time_ns: now,
            ..Record::default()
        };
        r.push(Hop::at(1).with_timestamps(Some(now - 10), Some(now + 5)));
        r.push(Hop::at(2).with_timestamps(None, Some(now | (1 << 62))));
        assert!(!drop_far_timestamps(&mut r.clone(), 0), "0: no bound");
        assert!(drop_far_timestamps(&mut r, 1_000));
        assert_eq!(r.hops()[0].egress_ts(), Some(now + 5));
        assert_eq!(
            (r.hops()[1].ingress_ts(), r.hops()[1].egress_ts()),
            (None, None)
        );
        assert_eq!(r.switch_time(), now + 5);
        assert!(!drop_far_timestamps(&mut r, 1_000), "nothing left to drop");
    }
}
