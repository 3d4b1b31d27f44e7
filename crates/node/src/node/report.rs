//! Report export: Telemetry Report v2.0 (or v0.5, as fabric-tna writes it) for INT-XD postcards,
//! INT-MX reports, sink reports, intermediate, queue and drop reports, with the report filters
//! and the domain-specific fields.

use super::watch::{Resolved, Watch};
use super::{Node, shim_of};
use crate::config::{DropReports, ReportFormat, Role, SinkMetadata};
use crate::domain::DsReport;
use crate::frame::Layout;
use crate::telemetry::Telemetry;
use intscope_wire::int::AnyShim;
use intscope_wire::locate::{FlowKey, Packet, Start};
use intscope_wire::md::MdHeaderRepr;
use intscope_wire::metadata::{BIT15, Format, HopMetadata, NODE_ID};
use intscope_wire::mx::{MX_HEADER_LEN, MxHeaderRepr};
use intscope_wire::report::{
    GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, V05_DROP_LEN, V05_FIXED_LEN, V05_LOCAL_LEN,
    V05FixedRepr, V05SwitchRepr,
};
use intscope_wire::shim::{SHIM_LEN, Shim};

/// What a report says about its packet (Report v2.0 §"Individual Report Header": D, Q, I).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ReportFlags {
    /// D: the packet was dropped here.
    pub(super) dropped: bool,
    /// Q: a queue report (the queue is congested).
    pub(super) congested: bool,
    /// I: a transit hop's intermediate report of the stack so far.
    pub(super) intermediate: bool,
    /// F (v2.0): the packet matched a watchlist, here or at its source.
    pub(super) tracked: bool,
    /// A flow report (postcard) was due: v0.5's F, which is a report type there.
    pub(super) flow: bool,
}

/// The domain fields of the INT header (or watchlist entry) a report is about, and the INT-MX
/// header's source-inserted metadata.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DsFields<'a> {
    pub(super) id: u16,
    pub(super) instruction: u16,
    pub(super) flags: u16,
    pub(super) mx_body: Option<&'a [u8]>,
}

impl<'a> DsFields<'a> {
    pub(super) fn of_watch(s: &Resolved, mx_body: Option<&'a [u8]>) -> Self {
        DsFields {
            id: s.ds_id,
            instruction: s.ds_instruction,
            flags: s.ds_flags,
            mx_body,
        }
    }

    pub(super) fn of_md(h: &MdHeaderRepr) -> Self {
        DsFields {
            id: h.ds_id,
            instruction: h.ds_instruction,
            flags: h.ds_flags,
            mx_body: None,
        }
    }

    pub(super) fn of_mx(h: &MxHeaderRepr, mx_body: Option<&'a [u8]>) -> Self {
        DsFields {
            id: h.ds_id,
            instruction: h.ds_instruction,
            flags: h.ds_flags,
            mx_body,
        }
    }
}

/// What a node's report about a packet it forwards follows, which decides the instructions, the
/// flow the filters count and the domain fields (drop, queue and intermediate reports have
/// their own functions).
#[derive(Debug, Clone, Copy)]
pub(super) enum About<'a> {
    /// INT-XD: a postcard of a packet this node's watchlist matched (INT v2.1 §"INT Application
    /// Modes": "all nodes generate postcards" for watched flows), as its entry says.
    Postcard(Watch),
    /// INT-MX at the source: its own metadata as its watchlist entry instructs, with the
    /// source-inserted metadata it put after the header.
    MxSource(Watch),
    /// INT-MX at a transit hop or the sink: as the INT-MX header in the packet instructs, with
    /// the source-inserted metadata behind it (`inserted`).
    MxHeader {
        header: &'a MxHeaderRepr,
        inserted: &'a [u8],
        flow: Option<FlowKey>,
    },
    /// INT-MD at the sink: the stack the packet brought, with this node's metadata in the report
    /// header as `sink_metadata = "report"` asks (INT v2.1 §"INT-MD Metadata Header Format",
    /// option 2; option 1 pushed it on the stack already).
    MdSink {
        header: &'a MdHeaderRepr,
        flow: Option<FlowKey>,
    },
}

/// A report a node may send about a packet it forwards: what it is about, and whether its
/// queue is congested (Q; sent then even when the flow filter holds the report back).
#[derive(Debug, Clone, Copy)]
pub(super) struct ReportRequest<'a> {
    pub(super) about: About<'a>,
    pub(super) congested: bool,
}

/// The source-inserted metadata of an INT-MX block at `off` (after its shim and header).
pub(super) fn mx_body(frame: &[u8], off: usize, shim: AnyShim) -> &[u8] {
    let end = off + SHIM_LEN + shim_of(shim).length_words() * 4;
    frame
        .get(off + SHIM_LEN + MX_HEADER_LEN..end)
        .unwrap_or_default()
}

impl Node {
    /// Whether the packet's queue is congested and its quota allows a queue report (the quota
    /// is spent).
    pub(super) fn congested(&mut self, tel: &dyn Telemetry) -> bool {
        let hop = tel.hop(self.cfg.node_id);
        self.filter.queue(
            u32::from(hop.l1_egress_if.unwrap_or(0)),
            hop.queue_id.unwrap_or(0),
            hop.hop_latency.unwrap_or(0),
        )
    }

    /// SD-Fabric's queue congestion report (Q) about a packet that gets no other report from
    /// this node, watched (`tracked`: F) or not, with this node's metadata as the node's
    /// instruction bitmap asks.
    pub(super) fn queue_report(
        &mut self,
        frame: &[u8],
        tel: &dyn Telemetry,
        congested: bool,
        tracked: bool,
    ) -> Option<Vec<u8>> {
        if !congested {
            return None;
        }
        let hop = tel.hop(self.cfg.node_id);
        let bits = self.cfg.instructions & !NODE_ID & !BIT15 & hop.available_bits();
        let flags = ReportFlags {
            congested: true,
            tracked,
            ..ReportFlags::default()
        };
        self.stats.queue_reports += 1;
        Some(self.build_report(frame, &hop, bits, flags, &DsReport::default()))
    }

    /// The domain-specific part of this node's report: for a known domain its export metadata
    /// and the source-inserted metadata to report, with the DS Flags it sets; otherwise DSMdBits
    /// 0 (Report v2.0 §"Individual Report Main Contents": a node not knowing the domain may "Set
    /// the Telemetry Report DSMdBits field to zero").
    pub(super) fn ds_report(&self, f: DsFields<'_>) -> DsReport {
        match self.domain(f.id) {
            Some(d) => d.report(
                f.instruction,
                f.flags | d.set_ds_flags,
                f.mx_body,
                self.cfg.role == Role::Sink,
            ),
            None => DsReport {
                id: f.id,
                bits: 0,
                status: f.flags,
                md: Vec::new(),
            },
        }
    }

    /// A drop report about a packet this node dropped, with the reason (SD-Fabric's codes):
    /// Report v2.0 with D set and RepMdBits bit 15 (queue ID + drop reason), or a v0.5 drop
    /// header. Only for watched packets unless `drop_reports = "all"` (a packet carrying INT was
    /// watched by its source), at most one per second per 5-tuple with the filters on.
    pub fn drop_report(
        &mut self,
        frame: &[u8],
        reason: u8,
        tel: &dyn Telemetry,
    ) -> Option<Vec<u8>> {
        let mut hop = tel.hop(self.cfg.node_id);
        // (watched, wants drop reports, the 5-tuple the filter counts).
        let (tracked, wanted, key) = match Packet::parse(frame, Start::Ethernet, &self.detect) {
            Ok(p) if p.int.is_some() => (true, true, p.flow),
            Ok(p) => match p.flow {
                Some(flow) => {
                    let report_traffic = Layout::of(&p).is_some_and(|l| self.is_report(&l, frame));
                    match self.watched(tel, &flow, p.inner_flow.as_ref()) {
                        _ if report_traffic => (false, false, None),
                        Some(w) => (true, self.watch.get(w).wants.drop, Some(w.key)),
                        None => (false, true, Some(flow)),
                    }
                }
                None => (false, true, None),
            },
            Err(_) => (false, true, None),
        };
        if !wanted || (!tracked && self.cfg.drop_reports == DropReports::Watched) {
            self.stats.unwatched_drops += 1;
            return None;
        }
        if let Some(k) = key
            && !self.filter.drop(k, hop.ingress_ts.unwrap_or(0))
        {
            self.stats.filtered += 1;
            return None;
        }
        let bits = (self.cfg.instructions & !NODE_ID & hop.available_bits()) | BIT15;
        hop.drop_reason = Some(reason);
        hop.present |= BIT15;
        self.stats.reports += 1;
        let flags = ReportFlags {
            dropped: true,
            tracked,
            ..ReportFlags::default()
        };
        Some(self.build_report(frame, &hop, bits, flags, &DsReport::default()))
    }

    /// A report datagram about `frame` (as received, truncated) of a watched packet, with this
    /// node's metadata in the report header unless it went on the stack: sent when a flow report
    /// is wanted and due for the flow by the filters, or when the packet's queue is congested
    /// (Q).
    pub(super) fn report(
        &mut self,
        frame: &[u8],
        tel: &dyn Telemetry,
        r: ReportRequest<'_>,
    ) -> Option<Vec<u8>> {
        let (instructions, flow, want_flow, own) = match r.about {
            About::Postcard(w) | About::MxSource(w) => {
                let s = self.watch.get(w);
                (s.instructions, Some(w.key), s.wants.flow, true)
            }
            About::MxHeader { header, flow, .. } => (header.instructions, flow, true, true),
            About::MdSink { header, flow } => (
                header.instructions,
                flow,
                true,
                self.cfg.sink_metadata == SinkMetadata::Report,
            ),
        };
        let hop = tel.hop(self.cfg.node_id);
        // SD-Fabric's smart filters (off unless configured): once per interval per 5-tuple,
        // sooner on a change.
        let due = want_flow
            && flow.is_none_or(|f| {
                self.filter.flow(
                    f,
                    hop.ingress_ts.unwrap_or(0),
                    u32::from(hop.l1_ingress_if.unwrap_or(0)),
                    u32::from(hop.l1_egress_if.unwrap_or(0)),
                    hop.queue_id.unwrap_or(0),
                    hop.hop_latency.unwrap_or(0),
                )
            });
        if !due && !r.congested {
            self.stats.filtered += 1;
            return None;
        }
        // INT v2.1 §"INT-MX Header Format": RepMdBits from the Instruction Bitmap; Node ID moves
        // to the group header, bit 15 is no Checksum Complement here, and what this node cannot
        // provide (or is reserved) is cleared rather than sent as all ones.
        let bits = if own {
            instructions & !NODE_ID & !BIT15 & hop.available_bits()
        } else {
            0
        };
        let flags = ReportFlags {
            congested: r.congested,
            tracked: true,
            flow: due,
            ..ReportFlags::default()
        };
        let ds = self.ds_report(self.ds_fields(r.about, own));
        Some(self.build_report(frame, &hop, bits, flags, &ds))
    }

    /// The domain fields of what a report is about; none for a sink that reports only the
    /// stack (`own` false).
    fn ds_fields<'s>(&'s self, about: About<'s>, own: bool) -> DsFields<'s> {
        match about {
            About::Postcard(w) => DsFields::of_watch(self.watch.get(w), None),
            About::MxSource(w) => {
                let s = self.watch.get(w);
                DsFields::of_watch(s, Some(&s.ds_metadata))
            }
            About::MxHeader {
                header, inserted, ..
            } => DsFields::of_mx(header, Some(inserted)),
            About::MdSink { header, .. } if own => DsFields::of_md(header),
            About::MdSink { .. } => DsFields::default(),
        }
    }

    pub(super) fn build_report(
        &mut self,
        frame: &[u8],
        hop: &HopMetadata,
        bits: u16,
        flags: ReportFlags,
        ds: &DsReport,
    ) -> Vec<u8> {
        let inner = &frame[..self.copy_len(frame)];
        let sequence = self.seq;
        self.seq = self.seq.wrapping_add(1);
        match self.cfg.report_format {
            ReportFormat::V2 => {
                let mut md = vec![0u8; Format::ReportV2.baseline_len(bits)];
                hop.encode(bits, Format::ReportV2, &mut md);
                md.extend_from_slice(&ds.md);
                self.report_v2(inner, sequence, bits, &md, flags, ds)
            }
            ReportFormat::V05 => self.report_v05(inner, sequence, hop, flags),
        }
    }

    /// Bytes of `frame` a report carries: `report_truncate`, or more where the INT block would
    /// push the headers that name the flow past it. Report v2.0 §"Individual Report Main
    /// Contents": the truncated packet is "L2/L3/ESP/L4 of the packet for flow details"; a stack
    /// that grows (a long path, a loop) must not cut the original L4 header after an NPT=2 block
    /// (INT v2.1 §"INT over TCP/UDP") or a tunnel's inner headers out of the copy, or the
    /// collector cannot tell the flow.
    fn copy_len(&self, frame: &[u8]) -> usize {
        let cut = self.cfg.report_truncate;
        if frame.len() <= cut {
            return frame.len();
        }
        let Some((at, block)) = Packet::parse(frame, Start::Ethernet, &self.detect)
            .ok()
            .and_then(|p| p.int)
        else {
            return cut;
        };
        let after = at + block.len;
        let flow_headers = match block.shim {
            AnyShim::V2(Shim::TcpUdp(s)) if s.npt == 2 => match s.ip_proto() {
                // TCP's Data Offset, in words.
                6 => frame
                    .get(after + 12)
                    .map_or(20, |b| usize::from(b >> 4) * 4),
                17 => 8,
                _ => 0,
            },
            // Ports before the block (NPT 0 and 1, v1.0, v0.5): the copy already holds them.
            AnyShim::V2(Shim::TcpUdp(_)) | AnyShim::Legacy(_) => 0,
            // Behind a tunnel's INT: an inner Ethernet, IPv6 and TCP header without options.
            AnyShim::V2(_) => 14 + 40 + 20,
        };
        if flow_headers == 0 {
            return cut;
        }
        frame.len().min(cut.max(after + flow_headers))
    }

    /// Telemetry Report v2.0 (§"Telemetry Report Group Header", §"Individual Report Header"):
    /// one individual report, RepType INT, InType Ethernet; the inner packet padded to words.
    pub(super) fn report_v2(
        &self,
        inner: &[u8],
        sequence: u32,
        bits: u16,
        md: &[u8],
        flags: ReportFlags,
        ds: &DsReport,
    ) -> Vec<u8> {
        let padded = inner.len().div_ceil(4) * 4;
        let words = (8 + md.len() + padded) / 4;
        let mut out = vec![0u8; 8 + 4 + 8];
        GroupHeaderRepr {
            version: 2,
            hw_id: 0,
            sequence: sequence & 0x3f_ffff,
            node_id: self.cfg.node_id,
        }
        .emit(&mut out[..8]);
        IndividualHeaderRepr {
            rep_type: 1,
            in_type: 3,
            report_length: if words > 254 { 0xff } else { words as u8 },
            md_length: (md.len() / 4) as u8,
            d: flags.dropped,
            q: flags.congested,
            // Report v2.0 §"Individual Report Header": F, "the packet matched a watchlist
            // somewhere (in case of INT-MD, INT-MX or IOAM) or locally (in case of INT-XD)".
            f: flags.tracked,
            i: flags.intermediate,
            reserved: 0,
        }
        .emit(&mut out[8..12]);
        // §"Individual Report Main Contents": the DS metadata follows the baseline's and counts
        // in MD Length; DSMdstatus carries the packet's DS Flags as this node leaves them.
        IntMainRepr {
            rep_md_bits: bits,
            ds_id: ds.id,
            ds_md_bits: ds.bits,
            ds_md_status: ds.status,
        }
        .emit(&mut out[12..20]);
        out.extend_from_slice(md);
        out.extend_from_slice(inner);
        out.resize(out.len() + padded - inner.len(), 0);
        out
    }

    /// Telemetry Report v0.5 as fabric-tna writes it (`p4src/shared/header.p4`: `report_fixed_header_t`,
    /// `local_report_header_t`, `drop_report_header_t`): NProto 2 with the switch-local header
    /// for flow and queue reports, NProto 1 with the drop header for drops; 32-bit timestamps
    /// (the low bits of the nanosecond clock) and 16-bit ports, as the Tofino fields are. v0.5 has
    /// no intermediate reports: one is sent as a flow report.
    pub(super) fn report_v05(
        &self,
        inner: &[u8],
        sequence: u32,
        hop: &HopMetadata,
        flags: ReportFlags,
    ) -> Vec<u8> {
        let ReportFlags {
            dropped, congested, ..
        } = flags;
        let switch = V05SwitchRepr {
            switch_id: self.cfg.node_id,
            ingress_port: hop.l1_ingress_if.unwrap_or(0),
            egress_port: hop.l1_egress_if.unwrap_or(0),
            queue_id: hop.queue_id.unwrap_or(0),
            drop_reason: if dropped { hop.drop_reason } else { None },
            queue_occupancy: Some(hop.queue_occupancy.unwrap_or(0).min(0xff_ffff)),
            egress_ts: Some(hop.egress_ts.unwrap_or(0) as u32),
            pad: 0,
        };
        let switch_len = if dropped { V05_DROP_LEN } else { V05_LOCAL_LEN };
        let mut out = vec![0u8; V05_FIXED_LEN + switch_len];
        V05FixedRepr {
            version: 0,
            nproto: if dropped { 1 } else { 2 },
            d: dropped,
            q: congested,
            // fabric-tna's report type bits: F is a flow report.
            f: flags.flow,
            reserved: 0,
            hw_id: 0,
            sequence,
            ingress_ts: hop.ingress_ts.unwrap_or(0) as u32,
        }
        .emit(&mut out[..V05_FIXED_LEN]);
        switch.emit(&mut out[V05_FIXED_LEN..]);
        out.extend_from_slice(inner);
        out
    }
}
