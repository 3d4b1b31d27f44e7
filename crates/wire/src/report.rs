//! Telemetry Reports: v2.0 (the spec), and the v1.0 and v0.5 formats deployed equipment emits.
//! The version is detected from the bytes ([`Report::parse`]).
//!
//! **v2.0** (Report v2.0 §"Telemetry Report Group Header", §"Individual Report Header",
//! §"Individual Report Main Contents for RepType 1", §"Individual Report Inner Contents for
//! InType 1"):
//! ```text
//! group:      Ver(4) hw_id(6) Sequence(22) | Node ID(32)
//! individual: RepType(4) InType(4) | Report Length(8) | MD Length(8) | D Q F I Rsvd(4)
//! INT main:   RepMdBits(16) DS ID(16) | DSMdBits(16) DSMdstatus(16) | MD Length words of metadata
//! TLV:        TLVType(4) Rsvd(4) | TLVLength(8) | TLV Data Template(16) | data
//! ```
//! Report Length counts the words after the first header word; 0xFF means "to the end".
//!
//! **v1.0** (GEANT int-platforms `int_report.p4`, AmLight and GEANT collectors'
//! `TelemetryReport_v10`): `ver(4) len(4) nprot(3) rep_md_bits(6) rsvd(6) d q f hw_id(6) |
//! switch_id(32) | seq_num(32) | ingress_tstamp(32)`, then the inner Ethernet frame.
//!
//! **v0.5** (stratum/fabric-tna `p4src/shared/header.p4`, `define.p4`): fixed header
//! `ver(4) nproto(4) | d q f rsvd(15) hw_id(6) | seq_no(32) | ig_tstamp(32)`; nproto 0 →
//! Ethernet follows, 1 → 12-byte drop header `switch_id(32) ig_port(16) eg_port(16) queue_id(8)
//! drop_reason(8) pad(16)`, 2 → 16-byte local header `switch_id(32) ig_port(16) eg_port(16)
//! queue_id(8) queue_occupancy(24) eg_tstamp(32)`, then Ethernet.

use crate::error::{Error, Field, Layer, Result, array, check_len};
use crate::field::{be16, be24, be32, put16, put32};
use crate::metadata::{Format, HopView};
use crate::warning::{Warning, Warnings};

/// Size of the v2.0 group header.
pub const GROUP_LEN: usize = 8;
/// Size of the v2.0 individual report header.
pub const INDIVIDUAL_LEN: usize = 4;
/// Size of the fixed part of the INT main contents.
pub const INT_MAIN_LEN: usize = 8;
/// Size of a TLV header.
pub const TLV_LEN: usize = 4;
/// Size of the v1.0 fixed header.
pub const V1_LEN: usize = 16;
/// Size of the v0.5 fixed header.
pub const V05_FIXED_LEN: usize = 12;
/// Size of the v0.5 drop report header.
pub const V05_DROP_LEN: usize = 12;
/// Size of the v0.5 switch-local report header.
pub const V05_LOCAL_LEN: usize = 16;
/// Default telemetry report UDP port (SD-Fabric / ONOS `collectorPort`).
pub const DEFAULT_REPORT_PORT: u16 = 32766;

/// Owned v2.0 group header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupHeaderRepr {
    /// Ver (4 bits): 2.
    pub version: u8,
    /// hw_id (6 bits).
    pub hw_id: u8,
    /// Sequence number (22 bits) per (node, hw_id, destination).
    pub sequence: u32,
    /// Node ID.
    pub node_id: u32,
}

impl GroupHeaderRepr {
    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = array::<GROUP_LEN>(Layer::ReportGroup, b)?;
        let w = be32(b, 0);
        Ok(GroupHeaderRepr {
            version: (w >> 28) as u8,
            hw_id: ((w >> 22) & 0x3f) as u8,
            sequence: w & 0x003f_ffff,
            node_id: be32(b, 4),
        })
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) {
        let w = (u32::from(self.version & 0xf) << 28)
            | (u32::from(self.hw_id & 0x3f) << 22)
            | (self.sequence & 0x003f_ffff);
        put32(b, 0, w);
        put32(b, 4, self.node_id);
    }
}

/// RepType of an individual report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepType {
    /// 0: Inner Only.
    InnerOnly,
    /// 1: INT.
    Int,
    /// 2: IOAM (main contents not yet defined by the spec).
    Ioam,
    /// 3–15: reserved.
    Reserved(u8),
}

impl RepType {
    /// Decodes the 4-bit value.
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => RepType::InnerOnly,
            1 => RepType::Int,
            2 => RepType::Ioam,
            o => RepType::Reserved(o),
        }
    }
    /// Name used in JSON.
    pub fn name(self) -> String {
        match self {
            RepType::InnerOnly => "inner-only".into(),
            RepType::Int => "int".into(),
            RepType::Ioam => "ioam".into(),
            RepType::Reserved(v) => format!("reserved-{v}"),
        }
    }
}

/// InType of an individual report: what the inner contents start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InType {
    /// 0: none.
    None,
    /// 1: TLVs.
    Tlv,
    /// 2: domain-specific extension data.
    DsExtension,
    /// 3: Ethernet.
    Ethernet,
    /// 4: IPv4.
    Ipv4,
    /// 5: IPv6.
    Ipv6,
    /// 6–15: reserved.
    Reserved(u8),
}

impl InType {
    /// Decodes the 4-bit value.
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => InType::None,
            1 => InType::Tlv,
            2 => InType::DsExtension,
            3 => InType::Ethernet,
            4 => InType::Ipv4,
            5 => InType::Ipv6,
            o => InType::Reserved(o),
        }
    }
    /// The wire value.
    pub fn raw(self) -> u8 {
        match self {
            InType::None => 0,
            InType::Tlv => 1,
            InType::DsExtension => 2,
            InType::Ethernet => 3,
            InType::Ipv4 => 4,
            InType::Ipv6 => 5,
            InType::Reserved(v) => v,
        }
    }
    /// Name used in JSON.
    pub fn name(self) -> String {
        match self {
            InType::None => "none".into(),
            InType::Tlv => "tlv".into(),
            InType::DsExtension => "ds-extension".into(),
            InType::Ethernet => "ethernet".into(),
            InType::Ipv4 => "ipv4".into(),
            InType::Ipv6 => "ipv6".into(),
            InType::Reserved(v) => format!("reserved-{v}"),
        }
    }
    fn is_packet(self) -> bool {
        matches!(self, InType::Ethernet | InType::Ipv4 | InType::Ipv6)
    }
}

/// Owned individual report header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndividualHeaderRepr {
    /// RepType (4 bits).
    pub rep_type: u8,
    /// InType (4 bits).
    pub in_type: u8,
    /// Report Length in words after the first word (0xFF: to the end).
    pub report_length: u8,
    /// MD Length in words.
    pub md_length: u8,
    /// D: dropped.
    pub d: bool,
    /// Q: congested queue association.
    pub q: bool,
    /// F: tracked flow association.
    pub f: bool,
    /// I: intermediate report.
    pub i: bool,
    /// Rsvd (4 bits).
    pub reserved: u8,
}

impl IndividualHeaderRepr {
    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = array::<INDIVIDUAL_LEN>(Layer::ReportIndividual, b)?;
        Ok(IndividualHeaderRepr {
            rep_type: b[0] >> 4,
            in_type: b[0] & 0xf,
            report_length: b[1],
            md_length: b[2],
            d: b[3] & 0x80 != 0,
            q: b[3] & 0x40 != 0,
            f: b[3] & 0x20 != 0,
            i: b[3] & 0x10 != 0,
            reserved: b[3] & 0xf,
        })
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.rep_type << 4) | (self.in_type & 0xf);
        b[1] = self.report_length;
        b[2] = self.md_length;
        b[3] = (u8::from(self.d) << 7)
            | (u8::from(self.q) << 6)
            | (u8::from(self.f) << 5)
            | (u8::from(self.i) << 4)
            | (self.reserved & 0xf);
    }
    /// Whether this header could start a report, whatever its length: known types, and for
    /// an INT report (RepType 1) metadata within the report (MD Length plus the two words of
    /// the main contents' fixed part at most Report Length).
    fn starts_report(&self) -> bool {
        self.rep_type <= 2
            && self.in_type <= 5
            && (self.rep_type != 1
                || self.report_length == 0xff
                || usize::from(self.md_length) + 2 <= usize::from(self.report_length))
    }
    /// Whether this header could start a report in `remaining` bytes (used to tell coalesced
    /// reports from trailing bytes of a report whose length field is wrong).
    fn plausible_in(&self, remaining: usize) -> bool {
        self.rep_type <= 2
            && self.in_type <= 5
            && (self.report_length == 0xff
                || INDIVIDUAL_LEN + usize::from(self.report_length) * 4 <= remaining)
    }
}

/// Owned fixed part of the INT main contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntMainRepr {
    /// RepMdBits.
    pub rep_md_bits: u16,
    /// Domain Specific ID.
    pub ds_id: u16,
    /// DSMdBits.
    pub ds_md_bits: u16,
    /// DSMdstatus.
    pub ds_md_status: u16,
}

impl IntMainRepr {
    /// Reads the fixed main contents at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = array::<INT_MAIN_LEN>(Layer::ReportIndividual, b)?;
        Ok(IntMainRepr {
            rep_md_bits: be16(b, 0),
            ds_id: be16(b, 2),
            ds_md_bits: be16(b, 4),
            ds_md_status: be16(b, 6),
        })
    }
    /// Writes them.
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, 0, self.rep_md_bits);
        put16(b, 2, self.ds_id);
        put16(b, 4, self.ds_md_bits);
        put16(b, 6, self.ds_md_status);
    }
}

/// Owned TLV header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlvHeaderRepr {
    /// TLVType (0 DS extension, 1 Ethernet, 2 IPv4, 3 IPv6).
    pub tlv_type: u8,
    /// Rsvd (4 bits).
    pub reserved: u8,
    /// TLVLength: words of data after this header.
    pub length: u8,
    /// TLV Data Template.
    pub template: u16,
}

impl TlvHeaderRepr {
    /// Reads a TLV header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::ReportTlv, b, TLV_LEN)?;
        Ok(TlvHeaderRepr {
            tlv_type: b[0] >> 4,
            reserved: b[0] & 0xf,
            length: b[1],
            template: be16(b, 2),
        })
    }
    /// Writes it.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.tlv_type << 4) | (self.reserved & 0xf);
        b[1] = self.length;
        put16(b, 2, self.template);
    }
    /// The inner type this TLV's data starts with.
    pub fn in_type(&self) -> InType {
        match self.tlv_type {
            0 => InType::DsExtension,
            1 => InType::Ethernet,
            2 => InType::Ipv4,
            3 => InType::Ipv6,
            o => InType::Reserved(o + 4),
        }
    }
}

/// One TLV: header and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// Header.
    pub header: TlvHeaderRepr,
    /// Data.
    pub data: &'a [u8],
}

/// Lazy iterator over TLVs; stops at the first malformed one with its error.
#[derive(Debug, Clone)]
pub struct Tlvs<'a> {
    bytes: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = Result<Tlv<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.at..];
        let r = TlvHeaderRepr::parse(rest).and_then(|h| {
            let end = TLV_LEN + usize::from(h.length) * 4;
            if end > rest.len() {
                return Err(Error::bad_length(
                    Layer::ReportTlv,
                    1,
                    Field::TlvLength,
                    end,
                    rest.len(),
                ));
            }
            Ok((h, end))
        });
        match r {
            Ok((header, end)) => {
                self.at += end;
                Some(Ok(Tlv {
                    header,
                    data: &rest[TLV_LEN..end],
                }))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e.shifted(self.at)))
            }
        }
    }
}

/// One decoded individual report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndividualReport<'a> {
    /// Byte offset of the report within the datagram's payload.
    pub offset: usize,
    /// Header.
    pub header: IndividualHeaderRepr,
    /// INT main contents (RepType 1, or tolerated in RepType 0).
    pub main: Option<IntMainRepr>,
    /// Variable optional baseline + domain-specific metadata.
    pub metadata: &'a [u8],
    /// Inner contents.
    pub inner: &'a [u8],
    /// What `inner` starts with (may differ from the header's InType, see `warnings`).
    pub inner_type: InType,
    /// Tolerated deviations.
    pub warnings: Warnings,
}

impl<'a> IndividualReport<'a> {
    /// The report's own metadata (RepMdBits), with domain-specific bytes left raw in `domain`.
    #[inline]
    pub fn hop(&self) -> Option<Result<HopView<'a>>> {
        let main = self.main?;
        let base = Format::ReportV2.baseline_len(main.rep_md_bits);
        let domain_len = self.metadata.len().saturating_sub(base);
        Some(HopView::new(
            main.rep_md_bits,
            Format::ReportV2,
            self.metadata,
            domain_len,
        ))
    }

    /// The TLVs of an InType-1 report.
    pub fn tlvs(&self) -> Tlvs<'a> {
        let bytes = if self.inner_type == InType::Tlv {
            self.inner
        } else {
            &[]
        };
        Tlvs {
            bytes,
            at: 0,
            failed: false,
        }
    }
}

/// Whether `b` plausibly starts with a packet of type `t` (used to resynchronise on reports
/// whose length fields do not follow the spec).
pub fn plausible_packet(b: &[u8], t: InType) -> bool {
    match t {
        InType::Ipv4 => b.len() >= 20 && b[0] >> 4 == 4 && b[0] & 0xf >= 5,
        InType::Ipv6 => b.len() >= 40 && b[0] >> 4 == 6,
        InType::Ethernet => {
            if b.len() < 14 {
                return false;
            }
            let mut at = 12;
            let mut et = be16(b, at);
            while matches!(et, 0x8100 | 0x88a8 | 0x9100) && b.len() >= at + 6 {
                at += 4;
                et = be16(b, at);
            }
            let next = &b[at + 2..];
            match et {
                0x0800 => plausible_packet(next, InType::Ipv4),
                0x86dd => plausible_packet(next, InType::Ipv6),
                0x0806 | 0x8847 | 0x8848 => true,
                _ => false,
            }
        }
        _ => false,
    }
}

/// Lazy iterator over the individual reports of a v2.0 datagram.
#[derive(Debug, Clone)]
pub struct IndividualReports<'a> {
    bytes: &'a [u8],
    base: usize,
    at: usize,
    failed: bool,
}

impl<'a> IndividualReports<'a> {
    #[inline(always)]
    fn decode_one(&self, rest: &'a [u8]) -> Result<(IndividualReport<'a>, usize)> {
        let header = IndividualHeaderRepr::parse(rest)?;
        let mut warnings = Warnings::default();
        let declared_end = if header.report_length == 0xff {
            rest.len()
        } else {
            INDIVIDUAL_LEN + usize::from(header.report_length) * 4
        };
        if declared_end > rest.len() && self.at > 0 {
            // A report after a whole one that the datagram ends inside: the datagram was cut
            // (an MTU, a snap length), which is what `truncated` says, not a wrong length.
            return Err(Error::truncated(
                Layer::ReportIndividual,
                0,
                declared_end,
                rest.len(),
            ));
        }
        if declared_end > rest.len() {
            return Err(Error::bad_length(
                Layer::ReportIndividual,
                1,
                Field::ReportLength,
                declared_end,
                rest.len(),
            ));
        }
        let (mut report, inner_at) = Self::layout(header, rest, declared_end, &mut warnings)?;
        let mut end = declared_end;
        if end < rest.len() {
            // Bytes remain: either coalesced reports, or a producer whose Report Length is too
            // short. Tolerate the latter when the rest is no report, or when the inner packet's
            // own length field ends exactly at the end of the datagram. Rest that starts like a
            // report but does not fit (or is shorter than a header) is a report the datagram
            // was cut inside: left to the next report's decode, which counts it truncated,
            // rather than absorbed into this one's packet and counted nowhere.
            let tail = &rest[end..];
            let next_ok =
                IndividualHeaderRepr::parse(tail).is_ok_and(|h| h.plausible_in(rest.len() - end));
            let cut = IndividualHeaderRepr::parse(tail).map_or(true, |h| h.starts_report());
            let inner_fills = declared_packet_len(&rest[inner_at..], report.inner_type)
                .is_some_and(|l| inner_at + l == rest.len());
            if (!next_ok && !cut) || inner_fills {
                warnings.add(Warning::ReportLengthExtended);
                end = rest.len();
                report.inner = &rest[inner_at..];
            }
        }
        report.warnings = warnings;
        report.offset = self.base + self.at;
        Ok((report, end))
    }

    /// Main contents and inner contents of a report occupying `body_with_header`; returns the
    /// report and where its inner contents start (from the report's first byte).
    #[inline(always)]
    fn layout(
        header: IndividualHeaderRepr,
        rest: &'a [u8],
        end: usize,
        warnings: &mut Warnings,
    ) -> Result<(IndividualReport<'a>, usize)> {
        // Resynchronising looks at everything that follows (the length may be the wrong part).
        let lookahead = &rest[INDIVIDUAL_LEN..];
        let body = &rest[INDIVIDUAL_LEN..end];
        let declared = InType::from_raw(header.in_type);
        let md_len = usize::from(header.md_length) * 4;
        let (main, metadata, inner_at) = match RepType::from_raw(header.rep_type) {
            RepType::Int => {
                let main = IntMainRepr::parse(body).map_err(|e| e.shifted(INDIVIDUAL_LEN))?;
                let md_end = INT_MAIN_LEN + md_len;
                if md_end > body.len() {
                    return Err(Error::bad_length(
                        Layer::ReportIndividual,
                        2,
                        Field::MdLength,
                        md_end,
                        body.len(),
                    ));
                }
                (Some(main), &body[INT_MAIN_LEN..md_end], md_end)
            }
            RepType::InnerOnly
                if md_len != 0
                    && body.len() >= INT_MAIN_LEN
                    && !plausible_packet(lookahead, declared) =>
            {
                // Tolerated: some producers (CableLabs Transparent Security) fill INT main
                // contents into Inner-Only reports. Find where the inner packet really starts.
                warnings.add(Warning::MainContentsInInnerOnly);
                let main = IntMainRepr::parse(body)?;
                let limit = (INT_MAIN_LEN + md_len).min(body.len());
                let inner_at = if declared.is_packet() {
                    (INT_MAIN_LEN..=limit)
                        .step_by(4)
                        .find(|&k| {
                            plausible_packet(&lookahead[k..], declared)
                                || plausible_packet(&lookahead[k..], InType::Ethernet)
                        })
                        .unwrap_or(limit)
                } else {
                    (INT_MAIN_LEN + Format::ReportV2.baseline_len(main.rep_md_bits)).min(limit)
                };
                (Some(main), &body[INT_MAIN_LEN..inner_at], inner_at)
            }
            _ => (None, &body[..0], 0),
        };
        let inner = &body[inner_at..];
        let mut inner_type = declared;
        let ahead = &lookahead[inner_at..];
        // Only an IP InType can hide an Ethernet frame (CableLabs); a wrong Ethernet InType
        // shows up as an inner-packet error.
        if matches!(declared, InType::Ipv4 | InType::Ipv6)
            && !plausible_packet(ahead, declared)
            && plausible_packet(ahead, InType::Ethernet)
        {
            warnings.add(Warning::InnerTypeMismatch);
            inner_type = InType::Ethernet;
        }
        let report = IndividualReport {
            offset: 0,
            header,
            main,
            metadata,
            inner,
            inner_type,
            warnings: Warnings::default(),
        };
        Ok((report, INDIVIDUAL_LEN + inner_at))
    }
}

/// The length a packet's own headers declare (Ethernet + VLANs + IP length), if readable.
fn declared_packet_len(b: &[u8], t: InType) -> Option<usize> {
    match t {
        InType::Ipv4 if b.len() >= 4 && b[0] >> 4 == 4 => Some(usize::from(be16(b, 2))),
        InType::Ipv6 if b.len() >= 6 && b[0] >> 4 == 6 => Some(40 + usize::from(be16(b, 4))),
        InType::Ethernet if b.len() >= 14 => {
            let mut at = 12;
            while matches!(be16(b, at), 0x8100 | 0x88a8 | 0x9100) && b.len() >= at + 6 {
                at += 4;
            }
            let t = match be16(b, at) {
                0x0800 => InType::Ipv4,
                0x86dd => InType::Ipv6,
                _ => return None,
            };
            declared_packet_len(&b[at + 2..], t).map(|l| l + at + 2)
        }
        _ => None,
    }
}

impl<'a> Iterator for IndividualReports<'a> {
    type Item = Result<IndividualReport<'a>>;
    // Inlined with `decode_one` and `layout`: the caller then reads the report's fields where
    // they are computed instead of from a moved 80-byte `Result`.
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.at..];
        match self.decode_one(rest) {
            Ok((r, used)) => {
                self.at += used;
                Some(Ok(r))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e.shifted(self.base + self.at)))
            }
        }
    }
}

/// Owned v1.0 fixed report header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct V1HeaderRepr {
    /// Version (1).
    pub version: u8,
    /// Header length in words (4).
    pub len: u8,
    /// Next protocol: 0 Ethernet, 1 IPv4, 2 IPv6.
    pub nproto: u8,
    /// Report metadata bits (6).
    pub rep_md_bits: u8,
    /// Reserved (6).
    pub reserved: u8,
    /// Dropped.
    pub d: bool,
    /// Congested queue.
    pub q: bool,
    /// Tracked flow.
    pub f: bool,
    /// Hardware ID (6).
    pub hw_id: u8,
    /// Switch ID.
    pub switch_id: u32,
    /// Sequence number.
    pub sequence: u32,
    /// Ingress timestamp.
    pub ingress_ts: u32,
}

impl V1HeaderRepr {
    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::ReportV1, b, V1_LEN)?;
        let w = be32(b, 0);
        Ok(V1HeaderRepr {
            version: (w >> 28) as u8,
            len: ((w >> 24) & 0xf) as u8,
            nproto: ((w >> 21) & 7) as u8,
            rep_md_bits: ((w >> 15) & 0x3f) as u8,
            reserved: ((w >> 9) & 0x3f) as u8,
            d: w & 0x100 != 0,
            q: w & 0x80 != 0,
            f: w & 0x40 != 0,
            hw_id: (w & 0x3f) as u8,
            switch_id: be32(b, 4),
            sequence: be32(b, 8),
            ingress_ts: be32(b, 12),
        })
    }
    /// Writes it.
    pub fn emit(&self, b: &mut [u8]) {
        let w = (u32::from(self.version) << 28)
            | (u32::from(self.len & 0xf) << 24)
            | (u32::from(self.nproto & 7) << 21)
            | (u32::from(self.rep_md_bits & 0x3f) << 15)
            | (u32::from(self.reserved & 0x3f) << 9)
            | (u32::from(self.d) << 8)
            | (u32::from(self.q) << 7)
            | (u32::from(self.f) << 6)
            | u32::from(self.hw_id & 0x3f);
        put32(b, 0, w);
        put32(b, 4, self.switch_id);
        put32(b, 8, self.sequence);
        put32(b, 12, self.ingress_ts);
    }
}

/// Owned v0.5 fixed report header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct V05FixedRepr {
    /// Version (0 as fabric-tna writes it; 1 from some generators).
    pub version: u8,
    /// Next protocol: 0 Ethernet, 1 drop header, 2 switch-local header.
    pub nproto: u8,
    /// Dropped.
    pub d: bool,
    /// Congested queue.
    pub q: bool,
    /// Tracked flow.
    pub f: bool,
    /// Reserved (15 bits).
    pub reserved: u16,
    /// Hardware ID (6).
    pub hw_id: u8,
    /// Sequence number.
    pub sequence: u32,
    /// Ingress timestamp.
    pub ingress_ts: u32,
}

impl V05FixedRepr {
    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::ReportV05, b, V05_FIXED_LEN)?;
        let w = be32(b, 0);
        Ok(V05FixedRepr {
            version: (w >> 28) as u8,
            nproto: ((w >> 24) & 0xf) as u8,
            d: w & 0x0080_0000 != 0,
            q: w & 0x0040_0000 != 0,
            f: w & 0x0020_0000 != 0,
            reserved: ((w >> 6) & 0x7fff) as u16,
            hw_id: (w & 0x3f) as u8,
            sequence: be32(b, 4),
            ingress_ts: be32(b, 8),
        })
    }
    /// Writes it.
    pub fn emit(&self, b: &mut [u8]) {
        let w = (u32::from(self.version) << 28)
            | (u32::from(self.nproto & 0xf) << 24)
            | (u32::from(self.d) << 23)
            | (u32::from(self.q) << 22)
            | (u32::from(self.f) << 21)
            | (u32::from(self.reserved & 0x7fff) << 6)
            | u32::from(self.hw_id & 0x3f);
        put32(b, 0, w);
        put32(b, 4, self.sequence);
        put32(b, 8, self.ingress_ts);
    }
    fn extra_len(nproto: u8) -> Option<usize> {
        match nproto {
            0 => Some(0),
            1 => Some(V05_DROP_LEN),
            2 => Some(V05_LOCAL_LEN),
            _ => None,
        }
    }
}

/// Owned v0.5 drop or switch-local report header (they share the first 9 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct V05SwitchRepr {
    /// Switch ID.
    pub switch_id: u32,
    /// Ingress port.
    pub ingress_port: u16,
    /// Egress port.
    pub egress_port: u16,
    /// Queue ID.
    pub queue_id: u8,
    /// Drop header: drop reason (SD-Fabric codes, see [`drop_reason_name`]).
    pub drop_reason: Option<u8>,
    /// Local header: queue occupancy (24 bits).
    pub queue_occupancy: Option<u32>,
    /// Local header: egress timestamp.
    pub egress_ts: Option<u32>,
    /// Drop header: padding (16 bits).
    pub pad: u16,
}

impl V05SwitchRepr {
    /// Reads a drop (`nproto` 1) or local (`nproto` 2) header at the start of `b`.
    pub fn parse(b: &[u8], nproto: u8) -> Result<Self> {
        let len = if nproto == 1 {
            V05_DROP_LEN
        } else {
            V05_LOCAL_LEN
        };
        check_len(Layer::ReportV05, b, len)?;
        let mut r = V05SwitchRepr {
            switch_id: be32(b, 0),
            ingress_port: be16(b, 4),
            egress_port: be16(b, 6),
            queue_id: b[8],
            ..Default::default()
        };
        if nproto == 1 {
            r.drop_reason = Some(b[9]);
            r.pad = be16(b, 10);
        } else {
            r.queue_occupancy = Some(be24(b, 9));
            r.egress_ts = Some(be32(b, 12));
        }
        Ok(r)
    }
    /// Writes it (drop layout when `drop_reason` is set, else local).
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.switch_id);
        put16(b, 4, self.ingress_port);
        put16(b, 6, self.egress_port);
        b[8] = self.queue_id;
        if let Some(r) = self.drop_reason {
            b[9] = r;
            put16(b, 10, self.pad);
        } else {
            b[9..12].copy_from_slice(&self.queue_occupancy.unwrap_or(0).to_be_bytes()[1..]);
            put32(b, 12, self.egress_ts.unwrap_or(0));
        }
    }
}

/// A telemetry report datagram (the UDP payload), of any supported version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report<'a> {
    /// v2.0: group header and coalesced individual reports.
    V2 {
        /// Group header.
        group: GroupHeaderRepr,
        /// Individual reports (iterate with [`Report::individual_reports`]).
        body: &'a [u8],
    },
    /// v1.0: fixed header and the inner packet.
    V1 {
        /// Fixed header.
        header: V1HeaderRepr,
        /// Inner packet (Ethernet for nproto 0).
        inner: &'a [u8],
        /// Tolerated deviations.
        warnings: Warnings,
    },
    /// v0.5: fixed header, optional drop/local header, inner Ethernet frame.
    V05 {
        /// Fixed header.
        fixed: V05FixedRepr,
        /// Drop or switch-local header.
        switch: Option<V05SwitchRepr>,
        /// Inner Ethernet frame (may be empty).
        inner: &'a [u8],
        /// Tolerated deviations.
        warnings: Warnings,
    },
}

impl<'a> Report<'a> {
    /// Decodes a report datagram, detecting its version from the bytes.
    ///
    /// Version nibble 2 → v2.0; 0 → v0.5 (fabric-tna); 1 → v1.0 or a v0.5 layout carrying
    /// version 1 (ONOS and GEANT test generators): the layout whose inner packet starts where
    /// its header says (or that ends exactly at the end) wins.
    // Inlined for the same reason as `IndividualReports::next`: the large `Result` is not moved.
    #[inline(always)]
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        check_len(Layer::ReportGroup, b, 4)?;
        match b[0] >> 4 {
            2 => {
                let group = GroupHeaderRepr::parse(b)?;
                Ok(Report::V2 {
                    group,
                    body: &b[GROUP_LEN..],
                })
            }
            0 => Self::parse_v05(b, Warnings::default()),
            1 => {
                let v05_fits = V05FixedRepr::extra_len(b[0] & 0xf).is_some_and(|x| {
                    let at = V05_FIXED_LEN + x;
                    b.len() == at || (b.len() > at && plausible_packet(&b[at..], InType::Ethernet))
                });
                let v1_fits = b.len() == V1_LEN
                    || (b.len() > V1_LEN && plausible_packet(&b[V1_LEN..], InType::Ethernet));
                let len_is_4 = b[0] & 0xf == 4;
                if v05_fits && !(v1_fits && len_is_4) {
                    let mut w = Warnings::default();
                    w.add(Warning::V05LayoutVersion1);
                    Self::parse_v05(b, w)
                } else if v1_fits || len_is_4 {
                    Self::parse_v1(b)
                } else if V05FixedRepr::extra_len(b[0] & 0xf).is_some() {
                    let mut w = Warnings::default();
                    w.add(Warning::V05LayoutVersion1);
                    Self::parse_v05(b, w)
                } else {
                    Self::parse_v1(b)
                }
            }
            v => Err(Error::bad_value(
                Layer::ReportGroup,
                0,
                Field::Ver,
                "2 (v2.0), 1 (v1.0) or 0 (v0.5)",
                u64::from(v),
            )),
        }
    }

    fn parse_v1(b: &'a [u8]) -> Result<Self> {
        let header = V1HeaderRepr::parse(b)?;
        let mut warnings = Warnings::default();
        if header.len != 4 {
            warnings.add(Warning::V1ReportLength);
        }
        Ok(Report::V1 {
            header,
            inner: &b[V1_LEN..],
            warnings,
        })
    }

    fn parse_v05(b: &'a [u8], warnings: Warnings) -> Result<Self> {
        let fixed = V05FixedRepr::parse(b)?;
        let extra = V05FixedRepr::extra_len(fixed.nproto).ok_or_else(|| {
            Error::bad_value(
                Layer::ReportV05,
                0,
                Field::NProto,
                "0 (Ethernet), 1 (drop) or 2 (switch-local)",
                u64::from(fixed.nproto),
            )
        })?;
        let switch = match fixed.nproto {
            0 => None,
            n => Some(
                V05SwitchRepr::parse(&b[V05_FIXED_LEN..], n)
                    .map_err(|e| e.shifted(V05_FIXED_LEN))?,
            ),
        };
        Ok(Report::V05 {
            fixed,
            switch,
            inner: &b[V05_FIXED_LEN + extra..],
            warnings,
        })
    }

    /// Version as a string: "2.0", "1.0" or "0.5".
    pub fn version_name(&self) -> &'static str {
        match self {
            Report::V2 { .. } => "2.0",
            Report::V1 { .. } => "1.0",
            Report::V05 { .. } => "0.5",
        }
    }

    /// The individual reports of a v2.0 datagram (empty for other versions).
    pub fn individual_reports(&self) -> IndividualReports<'a> {
        let bytes: &'a [u8] = match self {
            Report::V2 { body, .. } => body,
            _ => &[],
        };
        IndividualReports {
            bytes,
            base: GROUP_LEN,
            at: 0,
            failed: false,
        }
    }
}

/// A drop reason's name: SD-Fabric / fabric-tna's table (stratum/fabric-tna
/// `p4src/shared/define.p4`, `IntDropReason_t`), else p4lang/switch's ([`crate::drop_reason`]).
pub fn drop_reason_name(code: u8) -> Option<&'static str> {
    crate::drop_reason::name(code)
}
