//! Per-hop INT metadata: the instruction bitmap, metadata sizes, and decoding/encoding of one
//! hop's metadata (INT v2.1 §"INT-MD Metadata Header Format", Instruction Bitmap; Report v2.0
//! §"Individual Report Main Contents for RepType 1", RepMdBits).
//!
//! Bit 0 is the MSB. Baseline bits request 4 bytes each, except bits 4–6 (8 bytes). Reserved
//! bits 9–14 request 4 bytes (a newer minor version may define them). In an INT-MD stack bit 15
//! is the Checksum Complement and comes *after* the domain-specific metadata; in a report bit 15
//! is Queue ID + Drop Reason and is baseline. A value of all ones means "unavailable": it decodes
//! as `None` for every field of that word.
//!
//! The older generations ([`Format`]) give some bits other meanings and sizes:
//! * INT v1.0 (GEANT int-platforms `p4src/int_v1.0/include/headers.p4`, AmLight
//!   `tests/support/int_specs.py`): every bit is 4 bytes (32-bit timestamps; bit 6 is the level 2
//!   ingress and egress interface IDs, 16 bits each); bit 15 is the Checksum Complement.
//! * INT v0.5 (ONOS `pipelines/fabric/impl/src/main/resources/include/header.p4`): every bit is 4
//!   bytes; bit 6 is `int_q_congestion_t { bit<8> q_id; bit<24> q_congestion; }`, a queue ID and
//!   a congestion status, split as bit 3's `int_q_occupancy_t` is; bits 9–15 are reserved.
//! * The 2016 specification (`int-spec-2016.txt` §5.3.3 "INT Metadata Header Format"): "Each
//!   metadata is encoded as a 4B unsigned value", whose most significant bit is the BOS
//!   (bottom-of-stack) bit — "the value of 1 indicates the last metadata instance in the stack" —
//!   and whose other 31 bits are the value; "a special reserved value 0x7FFF_FFFF indicating
//!   'invalid'". Its bits: 0 switch ID, 1 ingress port ID, 2 hop latency, 3 queue occupancy (no
//!   queue ID), 4 ingress timestamp, 5 egress port ID, 6 queue congestion status, 7 egress port
//!   TX utilization; "the remaining bits are reserved".

use crate::error::{Error, Layer, Result};
use crate::field::{be32, be64, put32, put64};

/// The bit for instruction `n` (0 = MSB).
pub const fn bit(n: u32) -> u16 {
    0x8000 >> n
}

/// Bit 0: Node ID.
pub const NODE_ID: u16 = bit(0);
/// Bit 1: Level 1 ingress + egress interface IDs (16 bits each).
pub const L1_INTERFACES: u16 = bit(1);
/// Bit 2: hop latency.
pub const HOP_LATENCY: u16 = bit(2);
/// Bit 3: queue ID (8 bits) + queue occupancy (24 bits).
pub const QUEUE: u16 = bit(3);
/// Bit 4: ingress timestamp (8 bytes in v2.x).
pub const INGRESS_TS: u16 = bit(4);
/// Bit 5: egress timestamp (8 bytes in v2.x).
pub const EGRESS_TS: u16 = bit(5);
/// Bit 6: level 2 ingress + egress interface IDs (4 bytes each in v2.x).
pub const L2_INTERFACES: u16 = bit(6);
/// Bit 7: egress interface Tx utilization.
pub const EGRESS_TX_UTIL: u16 = bit(7);
/// Bit 8: buffer ID (8 bits) + buffer occupancy (24 bits).
pub const BUFFER: u16 = bit(8);
/// Bits 9–14: reserved in v2.1 (4 bytes each).
pub const RESERVED_BITS: u16 = 0x007e;
/// Bit 15: Checksum Complement (INT-MD) or Queue ID + Drop Reason (report RepMdBits).
pub const BIT15: u16 = bit(15);

/// Which generation's meaning the bits have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// INT v2.x metadata stack: bits 4–6 are 8 bytes, bit 15 is the Checksum Complement (last).
    IntV2,
    /// Telemetry Report v2.0 RepMdBits: as INT v2.x, but bit 15 is Queue ID + Drop Reason.
    ReportV2,
    /// INT v1.0 stack: every bit is 4 bytes (timestamps are 32-bit).
    IntV1,
    /// INT v0.5 stack: every bit is 4 bytes; bit 6 is queue ID + congestion status.
    IntV05,
    /// The 2016 specification's stack: every bit is 4 bytes, a BOS bit and a 31-bit value.
    Int2016,
}

impl Format {
    /// Size in bytes of the metadata for bit `n` (0 = MSB).
    #[inline]
    pub const fn size_of_bit(self, n: u32) -> usize {
        match self {
            Format::IntV2 | Format::ReportV2 if n >= 4 && n <= 6 => 8,
            _ => 4,
        }
    }

    /// Bytes of baseline metadata `bitmap` requests (domain-specific metadata excluded).
    #[inline]
    pub fn baseline_len(self, bitmap: u16) -> usize {
        let wide = match self {
            Format::IntV2 | Format::ReportV2 => {
                (bitmap & (INGRESS_TS | EGRESS_TS | L2_INTERFACES)).count_ones()
            }
            _ => 0,
        };
        (bitmap.count_ones() + wide) as usize * 4
    }
}

/// The metadata one node added (or reported), decoded. `None` means requested but unavailable
/// (all ones on the wire) or not requested; [`HopMetadata::present`] tells which bits were requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HopMetadata<'a> {
    /// The instruction bits this hop's metadata covers.
    pub present: u16,
    /// Node ID (bit 0).
    pub node_id: Option<u32>,
    /// Level 1 ingress interface ID (bit 1).
    pub l1_ingress_if: Option<u16>,
    /// Level 1 egress interface ID (bit 1).
    pub l1_egress_if: Option<u16>,
    /// Hop latency (bit 2), in the device's unit (nanoseconds by the spec's YANG model).
    pub hop_latency: Option<u32>,
    /// Queue ID (bit 3; in reports also from bit 15).
    pub queue_id: Option<u8>,
    /// Queue occupancy (bit 3, 24 bits).
    pub queue_occupancy: Option<u32>,
    /// Ingress timestamp (bit 4).
    pub ingress_ts: Option<u64>,
    /// Egress timestamp (bit 5).
    pub egress_ts: Option<u64>,
    /// Level 2 ingress interface ID (bit 6).
    pub l2_ingress_if: Option<u32>,
    /// Level 2 egress interface ID (bit 6).
    pub l2_egress_if: Option<u32>,
    /// Egress interface Tx utilization (bit 7).
    pub egress_tx_util: Option<u32>,
    /// Buffer ID (bit 8).
    pub buffer_id: Option<u8>,
    /// Buffer occupancy (bit 8, 24 bits).
    pub buffer_occupancy: Option<u32>,
    /// Words of reserved bits, by bit (index 0 = bit 8): bits 9–14 in every format, bit 8 in
    /// the 2016 format, bit 15 in v0.5 and the 2016 format.
    pub reserved: [Option<u32>; 8],
    /// Queue congestion status: INT v0.5 bit 6 (24 bits, beside [`HopMetadata::congestion_queue_id`]),
    /// 2016 bit 6 (31 bits).
    pub queue_congestion: Option<u32>,
    /// INT v0.5 bit 6: the queue ID its congestion status is of.
    pub congestion_queue_id: Option<u8>,
    /// 2016 bit 1: ingress port ID (31 bits).
    pub ingress_port_id: Option<u32>,
    /// 2016 bit 5: egress port ID (31 bits).
    pub egress_port_id: Option<u32>,
    /// 2016: a word of this hop carries the BOS (bottom-of-stack) bit.
    pub bos: bool,
    /// Checksum Complement (INT-MD bit 15). `None` also for the reserved "not used" 0xFFFFFFFF.
    pub checksum_complement: Option<u32>,
    /// Drop reason (report bit 15).
    pub drop_reason: Option<u8>,
    /// This hop's domain-specific metadata, raw (decode with [`crate::domain::Registry`]).
    pub domain: &'a [u8],
}

#[inline]
fn word(b: &[u8], at: usize) -> Option<u32> {
    let w = be32(b, at);
    (w != u32::MAX).then_some(w)
}

/// A 2016-format word: its BOS bit, and its 31-bit value unless that is the "invalid" 0x7FFFFFFF.
#[inline]
fn word2016(b: &[u8], at: usize) -> (bool, Option<u32>) {
    let w = be32(b, at);
    let v = w & 0x7fff_ffff;
    (w >> 31 == 1, (v != 0x7fff_ffff).then_some(v))
}

#[inline]
fn dword(b: &[u8], at: usize) -> Option<u64> {
    let w = be64(b, at);
    (w != u64::MAX).then_some(w)
}

impl<'a> HopMetadata<'a> {
    /// Decodes one hop: baseline metadata in bit order, then `domain_len` bytes of domain-specific
    /// metadata, then (INT v2 only) the Checksum Complement. Returns the hop and the bytes used.
    pub fn decode(
        bitmap: u16,
        format: Format,
        buf: &'a [u8],
        domain_len: usize,
    ) -> Result<(Self, usize)> {
        let total = format.baseline_len(bitmap) + domain_len;
        if buf.len() < total {
            return Err(Error::truncated(Layer::IntStack, 0, total, buf.len()));
        }
        let mut h = HopMetadata {
            present: bitmap,
            ..Default::default()
        };
        let mut at = 0;
        for n in 0..16u32 {
            if bitmap & bit(n) == 0 || (n == 15 && format == Format::IntV2) {
                continue;
            }
            let size = format.size_of_bit(n);
            if format == Format::Int2016 {
                let (bos, v) = word2016(buf, at);
                h.bos |= bos;
                match n {
                    0 => h.node_id = v,
                    1 => h.ingress_port_id = v,
                    2 => h.hop_latency = v,
                    3 => h.queue_occupancy = v,
                    4 => h.ingress_ts = v.map(u64::from),
                    5 => h.egress_port_id = v,
                    6 => h.queue_congestion = v,
                    7 => h.egress_tx_util = v,
                    n => h.reserved[(n - 8) as usize] = v,
                }
                at += size;
                continue;
            }
            match (n, format) {
                (0, _) => h.node_id = word(buf, at),
                (1, _) => {
                    if let Some(w) = word(buf, at) {
                        h.l1_ingress_if = Some((w >> 16) as u16);
                        h.l1_egress_if = Some(w as u16);
                    }
                }
                (2, _) => h.hop_latency = word(buf, at),
                (3, _) => {
                    if let Some(w) = word(buf, at) {
                        h.queue_id = Some((w >> 24) as u8);
                        h.queue_occupancy = Some(w & 0x00ff_ffff);
                    }
                }
                (4, Format::IntV2 | Format::ReportV2) => h.ingress_ts = dword(buf, at),
                (5, Format::IntV2 | Format::ReportV2) => h.egress_ts = dword(buf, at),
                (4, _) => h.ingress_ts = word(buf, at).map(u64::from),
                (5, _) => h.egress_ts = word(buf, at).map(u64::from),
                (6, Format::IntV2 | Format::ReportV2) => {
                    if let Some(w) = dword(buf, at) {
                        h.l2_ingress_if = Some((w >> 32) as u32);
                        h.l2_egress_if = Some(w as u32);
                    }
                }
                (6, Format::IntV1) => {
                    if let Some(w) = word(buf, at) {
                        h.l2_ingress_if = Some(w >> 16);
                        h.l2_egress_if = Some(w & 0xffff);
                    }
                }
                (6, _) => {
                    if let Some(w) = word(buf, at) {
                        h.congestion_queue_id = Some((w >> 24) as u8);
                        h.queue_congestion = Some(w & 0x00ff_ffff);
                    }
                }
                (7, _) => h.egress_tx_util = word(buf, at),
                (8, _) => {
                    if let Some(w) = word(buf, at) {
                        h.buffer_id = Some((w >> 24) as u8);
                        h.buffer_occupancy = Some(w & 0x00ff_ffff);
                    }
                }
                (15, Format::ReportV2) => {
                    if let Some(w) = word(buf, at) {
                        h.queue_id.get_or_insert((w >> 24) as u8);
                        h.drop_reason = Some((w >> 16) as u8);
                    }
                }
                (15, Format::IntV1) => h.checksum_complement = word(buf, at),
                (n, _) => h.reserved[(n - 8) as usize] = word(buf, at),
            }
            at += size;
        }
        h.domain = &buf[at..at + domain_len];
        at += domain_len;
        if format == Format::IntV2 && bitmap & BIT15 != 0 {
            h.checksum_complement = word(buf, at);
            at += 4;
        }
        Ok((h, at))
    }

    /// The baseline instruction bits (0–8) whose values this hop has. INT v2.1 §"INT-MX Header
    /// Format": a node reporting its own metadata clears the RepMdBits it cannot provide, and
    /// those of reserved bits, instead of sending all ones. Bit 15 (queue ID + drop reason in a
    /// report) is the caller's to add.
    pub fn available_bits(&self) -> u16 {
        let has = |b: u16, yes: bool| if yes { b } else { 0 };
        has(NODE_ID, self.node_id.is_some())
            | has(
                L1_INTERFACES,
                self.l1_ingress_if.is_some() && self.l1_egress_if.is_some(),
            )
            | has(HOP_LATENCY, self.hop_latency.is_some())
            | has(
                QUEUE,
                self.queue_id.is_some() && self.queue_occupancy.is_some(),
            )
            | has(INGRESS_TS, self.ingress_ts.is_some())
            | has(EGRESS_TS, self.egress_ts.is_some())
            | has(
                L2_INTERFACES,
                self.l2_ingress_if.is_some() && self.l2_egress_if.is_some(),
            )
            | has(EGRESS_TX_UTIL, self.egress_tx_util.is_some())
            | has(
                BUFFER,
                self.buffer_id.is_some() && self.buffer_occupancy.is_some(),
            )
    }

    /// Encodes this hop for `bitmap` into `out` (which must hold [`Format::baseline_len`] plus
    /// `domain.len()` bytes); `None` values are written as all ones. Returns the bytes written.
    pub fn encode(&self, bitmap: u16, format: Format, out: &mut [u8]) -> usize {
        if format == Format::Int2016 {
            return self.encode_2016(bitmap, out);
        }
        let ones32 = u32::MAX;
        let mut at = 0;
        let pair16 = |a: Option<u16>, b: Option<u16>| match (a, b) {
            (Some(a), Some(b)) => (u32::from(a) << 16) | u32::from(b),
            _ => ones32,
        };
        let id24 = |id: Option<u8>, v: Option<u32>| match (id, v) {
            (Some(id), Some(v)) => (u32::from(id) << 24) | (v & 0x00ff_ffff),
            _ => ones32,
        };
        // Only the requested bits, in order (bit 0 is the MSB); in INT bit 15 is the Checksum
        // Complement, written after the domain-specific metadata below.
        let mut todo = if format == Format::IntV2 {
            bitmap & !BIT15
        } else {
            bitmap
        };
        while todo != 0 {
            let n = todo.leading_zeros();
            todo &= !bit(n);
            let wide = format.size_of_bit(n) == 8;
            match n {
                0 => put32(out, at, self.node_id.unwrap_or(ones32)),
                1 => put32(out, at, pair16(self.l1_ingress_if, self.l1_egress_if)),
                2 => put32(out, at, self.hop_latency.unwrap_or(ones32)),
                3 => put32(out, at, id24(self.queue_id, self.queue_occupancy)),
                4 | 5 => {
                    let ts = if n == 4 {
                        self.ingress_ts
                    } else {
                        self.egress_ts
                    };
                    if wide {
                        put64(out, at, ts.unwrap_or(u64::MAX));
                    } else {
                        put32(out, at, ts.map_or(ones32, |t| t as u32));
                    }
                }
                6 if wide => match (self.l2_ingress_if, self.l2_egress_if) {
                    (Some(i), Some(e)) => put64(out, at, (u64::from(i) << 32) | u64::from(e)),
                    _ => put64(out, at, u64::MAX),
                },
                6 if format == Format::IntV1 => put32(
                    out,
                    at,
                    pair16(
                        self.l2_ingress_if.map(|v| v as u16),
                        self.l2_egress_if.map(|v| v as u16),
                    ),
                ),
                6 => put32(
                    out,
                    at,
                    id24(self.congestion_queue_id, self.queue_congestion),
                ),
                7 => put32(out, at, self.egress_tx_util.unwrap_or(ones32)),
                8 => put32(out, at, id24(self.buffer_id, self.buffer_occupancy)),
                15 if format == Format::IntV1 => {
                    put32(out, at, self.checksum_complement.unwrap_or(ones32))
                }
                15 if format == Format::ReportV2 => {
                    let w = match (self.queue_id, self.drop_reason) {
                        (Some(q), Some(r)) => (u32::from(q) << 24) | (u32::from(r) << 16),
                        _ => ones32,
                    };
                    put32(out, at, w)
                }
                n => put32(out, at, self.reserved[(n - 8) as usize].unwrap_or(ones32)),
            }
            at += if wide { 8 } else { 4 };
        }
        out[at..at + self.domain.len()].copy_from_slice(self.domain);
        at += self.domain.len();
        if format == Format::IntV2 && bitmap & BIT15 != 0 {
            put32(out, at, self.checksum_complement.unwrap_or(ones32));
            at += 4;
        }
        at
    }

    /// [`HopMetadata::encode`] in the 2016 format: 31-bit values, 0x7FFFFFFF for `None`, and the
    /// BOS bit on the hop's last word when [`HopMetadata::bos`] is set (as the 2016
    /// specification's example marks the bottom of the stack).
    fn encode_2016(&self, bitmap: u16, out: &mut [u8]) -> usize {
        let mut at = 0;
        for n in 0..16u32 {
            if bitmap & bit(n) == 0 {
                continue;
            }
            let v = match n {
                0 => self.node_id,
                1 => self.ingress_port_id,
                2 => self.hop_latency,
                3 => self.queue_occupancy,
                4 => self.ingress_ts.map(|t| t as u32),
                5 => self.egress_port_id,
                6 => self.queue_congestion,
                7 => self.egress_tx_util,
                n => self.reserved[(n - 8) as usize],
            };
            put32(out, at, v.map_or(0x7fff_ffff, |v| v & 0x7fff_ffff));
            at += 4;
        }
        if self.bos && at > 0 {
            out[at - 4] |= 0x80;
        }
        at
    }

    /// The requested fields in wire order as `(name, value)`; `None` = unavailable. Names are the
    /// ones `intscope dump --format json` uses.
    pub fn fields(&self, format: Format) -> impl Iterator<Item = (&'static str, Option<u64>)> + '_ {
        let p = self.present;
        let has = move |m: u16| p & m != 0;
        let report = format == Format::ReportV2;
        let v05 = format == Format::IntV05;
        let y2016 = format == Format::Int2016;
        let reserved15 = v05 || y2016;
        let r = |i: usize| {
            (
                has(bit(8 + i as u32)),
                RESERVED_NAMES[i],
                self.reserved[i].map(u64::from),
            )
        };
        let items: [(bool, &'static str, Option<u64>); 28] = [
            (has(NODE_ID), "node_id", self.node_id.map(u64::from)),
            (
                has(L1_INTERFACES) && y2016,
                "ingress_port_id",
                self.ingress_port_id.map(u64::from),
            ),
            (
                has(L1_INTERFACES) && !y2016,
                "l1_ingress_if",
                self.l1_ingress_if.map(u64::from),
            ),
            (
                has(L1_INTERFACES) && !y2016,
                "l1_egress_if",
                self.l1_egress_if.map(u64::from),
            ),
            (
                has(HOP_LATENCY),
                "hop_latency",
                self.hop_latency.map(u64::from),
            ),
            (
                (has(QUEUE) && !y2016) || (report && has(BIT15)),
                "queue_id",
                self.queue_id.map(u64::from),
            ),
            (
                has(QUEUE),
                "queue_occupancy",
                self.queue_occupancy.map(u64::from),
            ),
            (has(INGRESS_TS), "ingress_ts", self.ingress_ts),
            (has(EGRESS_TS) && !y2016, "egress_ts", self.egress_ts),
            (
                has(EGRESS_TS) && y2016,
                "egress_port_id",
                self.egress_port_id.map(u64::from),
            ),
            (
                has(L2_INTERFACES) && !v05 && !y2016,
                "l2_ingress_if",
                self.l2_ingress_if.map(u64::from),
            ),
            (
                has(L2_INTERFACES) && !v05 && !y2016,
                "l2_egress_if",
                self.l2_egress_if.map(u64::from),
            ),
            (
                has(L2_INTERFACES) && v05,
                "congestion_queue_id",
                self.congestion_queue_id.map(u64::from),
            ),
            (
                has(L2_INTERFACES) && v05,
                "congestion_status",
                self.queue_congestion.map(u64::from),
            ),
            (
                has(L2_INTERFACES) && y2016,
                "queue_congestion",
                self.queue_congestion.map(u64::from),
            ),
            (
                has(EGRESS_TX_UTIL),
                "egress_tx_util",
                self.egress_tx_util.map(u64::from),
            ),
            (
                has(BUFFER) && !y2016,
                "buffer_id",
                self.buffer_id.map(u64::from),
            ),
            (
                has(BUFFER) && !y2016,
                "buffer_occupancy",
                self.buffer_occupancy.map(u64::from),
            ),
            (
                has(BUFFER) && y2016,
                RESERVED_NAMES[0],
                self.reserved[0].map(u64::from),
            ),
            r(1),
            r(2),
            r(3),
            r(4),
            r(5),
            r(6),
            (
                has(BIT15) && reserved15,
                RESERVED_NAMES[7],
                self.reserved[7].map(u64::from),
            ),
            (
                report && has(BIT15),
                "drop_reason",
                self.drop_reason.map(u64::from),
            ),
            (
                !report && !reserved15 && has(BIT15),
                "checksum_complement",
                self.checksum_complement.map(u64::from),
            ),
        ];
        items
            .into_iter()
            .filter(|(on, _, _)| *on)
            .map(|(_, n, v)| (n, v))
    }
}

/// Where each of bits 0–8's fields starts in a hop, by the bitmap's bits 0–8
/// ([`NOT_REQUESTED`] for bits it lacks): one table for formats whose bits 4–6 are 8 bytes, one
/// for those where every bit is 4, and one for the 2016 format that locates nothing (its words
/// carry a BOS bit the generic accessors would read as part of the value; [`HopView::value_2016`]
/// reads them). Every hop of a stack shares one bitmap, so the layout is
/// looked up once per stack (or lone view) and a field read is an index into it, not two
/// popcounts.
static LAYOUTS: [[Layout; 512]; 3] = [
    layouts(Format::IntV2),
    layouts(Format::IntV1),
    layouts(Format::Int2016),
];

/// Offsets of bits 0–8's fields in a hop.
type Layout = [u8; 9];

/// A [`Layout`] entry for a bit the bitmap does not set.
const NOT_REQUESTED: u8 = u8::MAX;

const fn layouts(format: Format) -> [Layout; 512] {
    let mut table = [[NOT_REQUESTED; 9]; 512];
    let mut bits = 0;
    while bits < 512 {
        let mut at = 0;
        let mut n = 0;
        while n < 9 {
            if bits & (0x100 >> n) != 0 {
                if !matches!(format, Format::Int2016) {
                    table[bits][n as usize] = at as u8;
                }
                at += format.size_of_bit(n);
            }
            n += 1;
        }
        bits += 1;
    }
    table
}

/// The layout of `bitmap`'s bits 0–8 in `format`.
#[inline]
fn layout(bitmap: u16, format: Format) -> Layout {
    let table = match format {
        Format::IntV2 | Format::ReportV2 => 0,
        Format::IntV1 | Format::IntV05 => 1,
        Format::Int2016 => 2,
    };
    LAYOUTS[table][usize::from(bitmap >> 7)]
}

/// Zero-copy view of one hop's metadata: the hot-path way to read a stack or a report. Fields
/// are located through the bitmap's `Layout`, nothing is copied. In the 2016 format the
/// generic accessors give `None` (its words carry a BOS bit): read it with
/// [`HopView::value_2016`] and the other `_2016` accessors, or [`HopView::to_metadata`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopView<'a> {
    bytes: &'a [u8],
    bitmap: u16,
    format: Format,
    domain_len: usize,
    layout: Layout,
}

impl<'a> HopView<'a> {
    /// A view of the hop at the start of `buf` (`domain_len` bytes of domain-specific metadata);
    /// checks that the hop fits.
    #[inline]
    pub fn new(bitmap: u16, format: Format, buf: &'a [u8], domain_len: usize) -> Result<Self> {
        let total = format.baseline_len(bitmap) + domain_len;
        let bytes = buf
            .get(..total)
            .ok_or_else(|| Error::truncated(Layer::IntStack, 0, total, buf.len()))?;
        Ok(HopView {
            bytes,
            bitmap,
            format,
            domain_len,
            layout: layout(bitmap, format),
        })
    }

    /// This hop's bytes.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The instruction bits this hop covers.
    #[inline]
    pub fn bitmap(&self) -> u16 {
        self.bitmap
    }

    #[inline]
    fn offset(&self, n: u32) -> Option<usize> {
        if let Some(&at) = self.layout.get(n as usize) {
            return (at != NOT_REQUESTED).then_some(usize::from(at));
        }
        if self.bitmap & bit(n) == 0 {
            return None;
        }
        let before = self.bitmap & !(0xffffu16 >> n);
        let mut at = self.format.baseline_len(before);
        if n == 15 && self.format == Format::IntV2 {
            at += self.domain_len;
        }
        Some(at)
    }

    #[inline]
    fn word(&self, n: u32) -> Option<u32> {
        self.word_at(self.offset(n)?)
    }

    #[inline]
    fn word_at(&self, at: usize) -> Option<u32> {
        // `at..at + 4` (offsets are small): one bounds comparison, where `at..` then a chunk
        // of it compile to two.
        let w = u32::from_be_bytes(self.bytes.get(at..at + 4)?.try_into().ok()?);
        (w != u32::MAX).then_some(w)
    }

    /// The offset of bit `n`'s word in the 2016 format (every bit 4 bytes), by the bitmap.
    #[inline]
    fn offset_2016(&self, n: u32) -> Option<usize> {
        (self.format == Format::Int2016 && self.bitmap & bit(n) != 0)
            .then(|| Format::Int2016.baseline_len(self.bitmap & !(0xffffu16 >> n)))
    }

    #[inline]
    fn wide(&self, n: u32) -> Option<u64> {
        // Presence first: timestamps are rarely requested, and that test is the cheapest.
        let at = self.offset(n)?;
        if self.format.size_of_bit(n) == 4 {
            return self.word_at(at).map(u64::from);
        }
        let w = u64::from_be_bytes(self.bytes.get(at..at + 8)?.try_into().ok()?);
        (w != u64::MAX).then_some(w)
    }

    /// Node ID (bit 0).
    #[inline]
    pub fn node_id(&self) -> Option<u32> {
        self.word(0)
    }
    /// Level 1 ingress and egress interface IDs (bit 1).
    #[inline]
    pub fn l1_interfaces(&self) -> Option<(u16, u16)> {
        self.word(1).map(|w| ((w >> 16) as u16, w as u16))
    }
    /// Hop latency (bit 2).
    #[inline]
    pub fn hop_latency(&self) -> Option<u32> {
        self.word(2)
    }
    /// Queue ID and occupancy (bit 3).
    #[inline]
    pub fn queue(&self) -> Option<(u8, u32)> {
        self.word(3).map(|w| ((w >> 24) as u8, w & 0x00ff_ffff))
    }
    /// Ingress timestamp (bit 4).
    #[inline]
    pub fn ingress_ts(&self) -> Option<u64> {
        self.wide(4)
    }
    /// Egress timestamp (bit 5).
    #[inline]
    pub fn egress_ts(&self) -> Option<u64> {
        self.wide(5)
    }
    /// Level 2 ingress and egress interface IDs (bit 6; v0.5 gives that bit another meaning).
    #[inline]
    pub fn l2_interfaces(&self) -> Option<(u32, u32)> {
        match self.format {
            Format::IntV2 | Format::ReportV2 => self.wide(6).map(|w| ((w >> 32) as u32, w as u32)),
            Format::IntV1 => self.word(6).map(|w| (w >> 16, w & 0xffff)),
            Format::IntV05 | Format::Int2016 => None,
        }
    }
    /// INT v0.5 bit 6: the queue ID and its congestion status (24 bits); 2016 bit 6: the
    /// congestion status (31 bits), of no named queue.
    #[inline]
    pub fn queue_congestion(&self) -> Option<(Option<u8>, u32)> {
        match self.format {
            Format::IntV05 => self
                .word(6)
                .map(|w| (Some((w >> 24) as u8), w & 0x00ff_ffff)),
            Format::Int2016 => self.value_2016(6).map(|w| (None, w)),
            _ => None,
        }
    }
    /// 2016 bit 3: the queue occupancy (31 bits; that format names no queue).
    #[inline]
    pub fn queue_occupancy_2016(&self) -> Option<u32> {
        self.value_2016(3)
    }
    /// 2016 bits 1 and 5: the ingress and the egress port ID (31 bits each).
    #[inline]
    pub fn port_ids_2016(&self) -> (Option<u32>, Option<u32>) {
        (self.value_2016(1), self.value_2016(5))
    }
    /// The 2016 format's bit `n` (0 = MSB): its 31-bit value, `None` when not requested or
    /// "invalid" (0x7FFFFFFF), whatever its BOS bit. Every 2016 field is read this way: the
    /// generic accessors read nothing in that format.
    #[inline]
    pub fn value_2016(&self, n: u32) -> Option<u32> {
        let at = self.offset_2016(n)?;
        let w = u32::from_be_bytes(self.bytes.get(at..at + 4)?.try_into().ok()?) & 0x7fff_ffff;
        (w != 0x7fff_ffff).then_some(w)
    }
    /// 2016: whether a word of this hop carries the BOS (bottom-of-stack) bit.
    #[inline]
    pub fn bos_2016(&self) -> bool {
        let words = &self.bytes[..Format::Int2016
            .baseline_len(self.bitmap)
            .min(self.bytes.len())];
        self.format == Format::Int2016 && words.chunks_exact(4).any(|w| w[0] & 0x80 != 0)
    }
    /// Egress interface Tx utilization (bit 7).
    #[inline]
    pub fn egress_tx_util(&self) -> Option<u32> {
        self.word(7)
    }
    /// Buffer ID and occupancy (bit 8).
    #[inline]
    pub fn buffer(&self) -> Option<(u8, u32)> {
        self.word(8).map(|w| ((w >> 24) as u8, w & 0x00ff_ffff))
    }
    /// Report bit 15: queue ID and drop reason.
    #[inline]
    pub fn drop(&self) -> Option<(u8, u8)> {
        if self.format != Format::ReportV2 {
            return None;
        }
        self.word(15).map(|w| ((w >> 24) as u8, (w >> 16) as u8))
    }
    /// Domain-specific metadata bytes.
    #[inline]
    pub fn domain(&self) -> &'a [u8] {
        let at = self.format.baseline_len(if self.format == Format::IntV2 {
            self.bitmap & !BIT15
        } else {
            self.bitmap
        });
        &self.bytes[at..at + self.domain_len]
    }
    /// Every field, decoded into an owned value.
    #[inline]
    pub fn to_metadata(&self) -> HopMetadata<'a> {
        // The view was length-checked at construction, so this decode cannot fail.
        HopMetadata::decode(self.bitmap, self.format, self.bytes, self.domain_len)
            .map_or_else(|_| HopMetadata::default(), |(h, _)| h)
    }
}

/// JSON names of the reserved bits 8–15.
const RESERVED_NAMES: [&str; 8] = [
    "reserved_bit8",
    "reserved_bit9",
    "reserved_bit10",
    "reserved_bit11",
    "reserved_bit12",
    "reserved_bit13",
    "reserved_bit14",
    "reserved_bit15",
];

/// Lazy iterator over an INT-MD metadata stack, top (most recent hop) first.
///
/// Each hop is `hop_len` bytes; the bottom hop (the source's) may carry `source_only_len` more
/// bytes of 'source-only' domain-specific metadata (INT v2.1: excluded from Hop ML, counted in the
/// shim Length).
#[derive(Debug, Clone)]
pub struct Stack<'a> {
    bytes: &'a [u8],
    layout: Layout,
    hop_total: usize,
    last_total: usize,
    bitmap: u16,
    format: Format,
    hop_len: usize,
    domain_len: usize,
    source_only_len: usize,
    at: usize,
    failed: bool,
}

impl<'a> Stack<'a> {
    /// A stack of hops of `hop_len` bytes each (`domain_len` of them domain-specific) in `bytes`,
    /// whose last hop carries `source_only_len` extra bytes.
    pub fn new(
        bytes: &'a [u8],
        bitmap: u16,
        format: Format,
        hop_len: usize,
        domain_len: usize,
        source_only_len: usize,
    ) -> Self {
        let hop_total = format.baseline_len(bitmap) + domain_len;
        Stack {
            bytes,
            layout: layout(bitmap, format),
            hop_total,
            last_total: hop_total + source_only_len,
            bitmap,
            format,
            hop_len,
            domain_len,
            source_only_len,
            at: 0,
            failed: false,
        }
    }

    /// Number of hops the stack holds (a partial trailing hop is not counted).
    pub fn hop_count(&self) -> usize {
        match self.bytes.len().checked_sub(self.source_only_len) {
            Some(n) if self.hop_len > 0 => n / self.hop_len,
            _ => 0,
        }
    }

    /// Bytes that do not form whole hops (non-zero means a malformed stack or unknown layout).
    pub fn leftover(&self) -> usize {
        if self.hop_len == 0 {
            return self.bytes.len();
        }
        match self.bytes.len().checked_sub(self.source_only_len) {
            Some(n) => n % self.hop_len,
            None => self.bytes.len(),
        }
    }
}

impl<'a> Iterator for Stack<'a> {
    type Item = Result<HopView<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.hop_len == 0 || self.at >= self.bytes.len() {
            return None;
        }
        let remaining = &self.bytes[self.at..];
        let is_last = remaining.len() < 2 * self.hop_len + self.source_only_len;
        let domain_len = if is_last {
            self.domain_len + self.source_only_len
        } else {
            self.domain_len
        };
        let total = if is_last {
            self.last_total
        } else {
            self.hop_total
        };
        let hop = match remaining.get(..total) {
            Some(bytes) => Ok(HopView {
                bytes,
                bitmap: self.bitmap,
                format: self.format,
                domain_len,
                layout: self.layout,
            }),
            None => Err(Error::truncated(Layer::IntStack, 0, total, remaining.len())),
        };
        match hop {
            Ok(hop) => {
                // Guard against layouts that do not advance (bitmap/length mismatch).
                let used = hop.bytes.len().max(self.hop_len.min(remaining.len()));
                self.at += used;
                Some(Ok(hop))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e.shifted(self.at)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(Format::IntV2.baseline_len(0xff00), 44);
        assert_eq!(Format::IntV1.baseline_len(0xff00), 32);
        assert_eq!(Format::IntV2.baseline_len(NODE_ID | QUEUE), 8);
    }

    #[test]
    fn all_ones_is_unavailable() {
        let b = [0xff; 8];
        let (h, used) = HopMetadata::decode(NODE_ID | QUEUE, Format::IntV2, &b, 0).unwrap();
        assert_eq!(used, 8);
        assert_eq!(h.node_id, None);
        assert_eq!((h.queue_id, h.queue_occupancy), (None, None));
        // An occupancy of 0xFFFFFF inside a valid word is a number (spec README errata).
        let b = [0, 0, 0, 1, 0x02, 0xff, 0xff, 0xff];
        let (h, _) = HopMetadata::decode(NODE_ID | QUEUE, Format::IntV2, &b, 0).unwrap();
        assert_eq!((h.queue_id, h.queue_occupancy), (Some(2), Some(0xff_ffff)));
    }
}
