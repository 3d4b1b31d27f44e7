//! The INT source (INT v2.1 §"INT Source Node"): shim, INT-MD or INT-MX header, its own metadata
//! and what else it inserts, in three steps — plan (what fits under the MTU), build (the block
//! through the wire crate's Reprs and views), insert (one function per encapsulation, lengths
//! and checksums kept right); clones and probe packets (§"INT Applied to Synthetic Traffic").

use super::Node;
use super::watch::Resolved;
use crate::config::{Mode, SourceEncap};
use crate::frame::{self, Layout};
use crate::telemetry::Telemetry;
use etherparse::PacketBuilder;
use intscope_wire::destination::Destination;
use intscope_wire::encap::{GPE_NEXT_PROTO_INT, GreRepr};
use intscope_wire::ip::{
    IPV4_MIN_LEN, IPV6_LEN, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, ethertype, protocol,
};
use intscope_wire::locate::{FlowKey, Packet, Start};
use intscope_wire::md::{MD_HEADER_LEN, MdHeaderRepr};
use intscope_wire::metadata::Format;
use intscope_wire::mx::MxHeaderRepr;
use intscope_wire::shim::{
    GENEVE_INT_OPTION_CLASS, GeneveOptionRepr, GpeShimRepr, GreShimRepr, SHIM_LEN, Shim,
    TcpUdpShimRepr,
};
use intscope_wire::tunnel::{GenevePacket, GrePacket, VXLAN_LEN, VxlanPacket};
use intscope_wire::udp::{UDP_HEADER_LEN, UdpPacket, UdpRepr};
use std::net::IpAddr;

/// What a source did to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Insertion {
    /// INT with this node's metadata.
    Full,
    /// INT without metadata: M bit (no room) or a Remaining Hop Count of 0.
    NoMetadata,
    /// No INT: the fixed headers would exceed the MTU.
    TooBig,
}

/// VXLAN-GPE's next protocol for Ethernet, what plain VXLAN carries (draft-ietf-nvo3-vxlan-gpe
/// §3.2).
const GPE_NEXT_PROTO_ETHERNET: u8 = 0x03;

/// The probe marker in front of the shim (INT v2.1 §"INT over TCP/UDP": a 64-bit value).
const PROBE_MARKER_LEN: usize = 8;

/// A GRE header without its optional fields, as the source adds one (RFC 2784).
const GRE_BASE_LEN: usize = 4;

/// The longest Geneve option: a 5-bit Length of 4-byte words.
pub(super) const GENEVE_OPTION_MAX: usize = 31 * 4;

/// INT v2.1 §"INT over Geneve": the block as an option after the existing ones; `false` when the
/// base header's Opt Len cannot grow by it.
pub(super) fn insert_geneve(frame: &mut Vec<u8>, l: &Layout, block: &[u8]) -> bool {
    // After the existing options; the base header's Opt Len grows by the option.
    let geneve_at = l.l4_at + UDP_HEADER_LEN;
    let Some(at) = frame
        .get(geneve_at..)
        .and_then(|b| GenevePacket::new_checked(b).ok())
        .map(|g| geneve_at + g.header_len())
    else {
        return false;
    };
    if !frame::adjust_geneve_opt_len(frame, l, (block.len() / 4) as isize) {
        return false;
    }
    frame::udp_insert(frame, l, at, block);
    true
}

/// What the source inserts into one packet, decided from its watchlist entry, the packet's
/// layout and the MTU before a byte is written.
struct Plan<'w> {
    s: &'w Resolved,
    /// The encapsulation for this packet: a TCP packet turns `udp-port` into `udp-new`.
    encap: SourceEncap,
    /// A GRE packet already: INT goes behind its GRE header (scenario 1, G = 0).
    existing_gre: bool,
    /// [`Insertion::Full`] or [`Insertion::NoMetadata`].
    insertion: Insertion,
    /// INT-MD: the Remaining Hop Count the header carries, the source's hop counted.
    remaining_hop_count: u8,
    /// INT-MD: M bit, no room for the source's hop.
    m: bool,
}

impl<'w> Plan<'w> {
    fn mx(&self) -> bool {
        self.s.mode == Mode::Mx
    }

    /// Bytes after the MD or MX header: INT-MD the source's hop (none without room for it),
    /// INT-MX the source-inserted metadata.
    fn own_len(&self) -> usize {
        match self.insertion {
            _ if self.mx() => self.s.ds_metadata.len(),
            Insertion::Full => usize::from(self.s.hop_ml) * 4,
            _ => 0,
        }
    }

    /// The INT-MX header (INT v2.1 §"INT-MX Header Format") or the INT-MD metadata header
    /// (§"INT-MD Metadata Header Format") into `out`, its 12 bytes.
    fn emit_header(&self, out: &mut [u8]) {
        let s = self.s;
        if self.mx() {
            MxHeaderRepr {
                version: 2,
                instructions: s.instructions,
                ds_id: s.ds_id,
                ds_instruction: s.ds_instruction,
                ds_flags: s.header_ds_flags,
                d: s.discard,
                ..MxHeaderRepr::default()
            }
            .emit(out);
        } else {
            MdHeaderRepr {
                version: 2,
                hop_ml: s.hop_ml,
                remaining_hop_count: self.remaining_hop_count,
                instructions: s.instructions,
                ds_id: s.ds_id,
                ds_instruction: s.ds_instruction,
                ds_flags: s.header_ds_flags,
                d: s.discard,
                m: self.m,
                ..MdHeaderRepr::default()
            }
            .emit(out);
        }
    }

    /// INT-MD 'source-only' metadata: with the source's hop, never without it.
    fn source_only(&self) -> &'w [u8] {
        if self.mx() || self.own_len() == 0 {
            &[]
        } else {
            &self.s.source_only
        }
    }
}

/// The INT block as it goes into the packet: the probe marker if any, shim, MD or MX header,
/// the source's metadata, 'source-only' metadata and Destination header.
struct Block {
    bytes: Vec<u8>,
    /// Where the source's metadata ends in `bytes` (none without it): the Checksum Complement
    /// is its last word (INT v2.1 §"Checksum Update").
    hop_end: Option<usize>,
}

/// A Destination header (INT v2.1 §"INT Header Types": "the MD-type header or MX-type header
/// must precede the Destination-type header") after the block, repeating the shim's NPT and
/// field so that either restores the packet.
fn push_destination(bytes: &mut Vec<u8>, body: &[u8], npt: u8, content: u16) {
    let at = bytes.len();
    bytes.resize(at + SHIM_LEN + body.len(), 0);
    let emitted = Destination::new_for_emit(&mut bytes[at..]).and_then(|mut v| {
        v.set_body(body)?;
        v.set_npt(npt);
        v.set_content(content);
        Ok(())
    });
    if emitted.is_err() {
        // Validation keeps bodies to whole words within the shim's Length.
        bytes.truncate(at);
    }
}

impl Node {
    /// The probe packets due by `now_ns` (at most 1024 per stream per call), INT-marked with the
    /// node's settings and `tel`'s metadata; the first of each stream is due at once.
    pub fn probes(&mut self, now_ns: u64, tel: &dyn Telemetry) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..self.cfg.probes.len() {
            let interval_ns = self.cfg.probes[i].interval_ns;
            let next = self.next_probe.get(i).copied().flatten().unwrap_or(now_ns);
            let mut due = next;
            let mut sent = 0;
            while due <= now_ns && sent < 1024 {
                if let Some(frame) = self.probe(i, tel) {
                    self.stats.probes += 1;
                    out.push(frame);
                }
                due += interval_ns;
                sent += 1;
            }
            if due <= now_ns {
                // Far behind (a gap in capture time): skip ahead rather than burst.
                due = now_ns + interval_ns;
            }
            self.next_probe.resize(self.cfg.probes.len(), None);
            self.next_probe[i] = Some(due);
        }
        out
    }

    /// Probe stream `i`'s next packet, numbered by the probes sent so far.
    fn probe(&self, i: usize, tel: &dyn Telemetry) -> Option<Vec<u8>> {
        let p = &self.cfg.probes[i];
        let seq = self.stats.probes;
        let eth = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]);
        let ip = match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
            (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
            _ => return None,
        };
        let builder = ip.udp(p.src_port, p.dst_port);
        let mut payload = vec![0u8; p.size.saturating_sub(builder.size(0)).max(8)];
        payload[..8].copy_from_slice(&seq.to_be_bytes());
        let mut frame = Vec::with_capacity(p.size + 128);
        builder.write(&mut frame, &payload).ok()?;
        let (layout, flow) = {
            let parsed = Packet::parse(&frame, Start::Ethernet, &self.detect).ok()?;
            (Layout::of(&parsed)?, parsed.flow?)
        };
        match self.source(&mut frame, layout, flow, tel, &self.probe_settings[i]) {
            Insertion::TooBig => None,
            _ => Some(frame),
        }
    }

    /// INT v2.1 §"INT Source Node": "the INT Source node in the packet forwarding path creates
    /// the INT-MD or INT-MX Header", and in INT-MD adds its own metadata after it — planned,
    /// built, then inserted as the encapsulation wants.
    pub(super) fn source(
        &self,
        frame: &mut Vec<u8>,
        l: Layout,
        flow: FlowKey,
        tel: &dyn Telemetry,
        s: &Resolved,
    ) -> Insertion {
        let Some(plan) = self.plan(&l, s) else {
            return Insertion::TooBig;
        };
        let mut block = self.build(frame, &l, &plan, tel);
        if !self.insert(frame, &l, &flow, &plan, &mut block) {
            return Insertion::TooBig;
        }
        plan.insertion
    }

    /// What goes in, or `None` for nothing (INT v2.1 §"MTU Settings"): "If inserting the fixed
    /// headers causes egress link MTU to be exceeded, INT cannot not be initiated for such
    /// packets. If an INT source is programmed to insert its own INT metadata, and there is
    /// enough room in a packet to insert fixed INT headers, but no additional room for its INT
    /// metadata, the source must initiate INT and set the M bit in the INT header."
    fn plan<'w>(&self, l: &Layout, s: &'w Resolved) -> Option<Plan<'w>> {
        let mx = s.mode == Mode::Mx;
        let encap = match (s.encap, l.proto) {
            (SourceEncap::UdpPort, protocol::TCP) => SourceEncap::UdpNew,
            (e, _) => e,
        };
        let existing_gre = encap == SourceEncap::Gre && l.proto == protocol::GRE;
        // What goes in front of the shim: a new UDP header, a probe marker, or an outer IP
        // header and GRE.
        let in_front = match (encap, l.v6) {
            (SourceEncap::UdpNew, _) => UDP_HEADER_LEN,
            (SourceEncap::ProbeMarker, _) => PROBE_MARKER_LEN,
            (SourceEncap::Gre, _) if existing_gre => 0,
            (SourceEncap::Gre, false) => IPV4_MIN_LEN + GRE_BASE_LEN,
            (SourceEncap::Gre, true) => IPV6_LEN + GRE_BASE_LEN,
            _ => 0,
        };
        let source_inserted = if mx { s.ds_metadata.len() } else { 0 };
        let destination = s.destination.as_ref().map_or(0, |d| SHIM_LEN + d.len());
        let fixed = in_front + SHIM_LEN + MD_HEADER_LEN + source_inserted + destination;
        if l.ip_len + fixed > self.cfg.mtu {
            return None;
        }
        let mut plan = Plan {
            s,
            encap,
            existing_gre,
            insertion: Insertion::Full,
            remaining_hop_count: 0,
            m: false,
        };
        if mx {
            return Some(plan);
        }
        let hop_len = usize::from(s.hop_ml) * 4;
        // A Geneve option holds at most 124 bytes (5-bit Length): the header, the source's hop
        // and as many more hops as fit (INT v2.1 §"INT over Geneve").
        let geneve_hops = if encap == SourceEncap::Geneve && hop_len > 0 {
            (GENEVE_OPTION_MAX - MD_HEADER_LEN).saturating_sub(s.source_only.len()) / hop_len
        } else {
            usize::MAX
        };
        let fits =
            l.ip_len + fixed + hop_len + s.source_only.len() <= self.cfg.mtu && geneve_hops > 0;
        let hops = s.max_hops.min(geneve_hops.min(255) as u8);
        if fits && hops > 0 {
            plan.remaining_hop_count = hops - 1;
        } else {
            // A Remaining Hop Count of 0 leaves no hop for the source's metadata either.
            plan.insertion = Insertion::NoMetadata;
            plan.remaining_hop_count = hops;
            plan.m = !fits;
        }
        Some(plan)
    }

    /// The block the plan asks for, through the wire crate's Reprs and views: the shim of the
    /// encapsulation (INT v2.1 §"Header Location"), §"INT-MD Metadata Header Format" or
    /// §"INT-MX Header Format", this node's metadata, and a Destination header (§"INT Header
    /// Types").
    fn build(&self, frame: &[u8], l: &Layout, p: &Plan<'_>, tel: &dyn Telemetry) -> Block {
        let s = p.s;
        let (own_len, source_only) = (p.own_len(), p.source_only());
        let words = ((MD_HEADER_LEN + own_len + source_only.len()) / 4) as u8;
        let (npt, content) = match p.encap {
            SourceEncap::Dscp | SourceEncap::ProbeMarker => {
                (0, u16::from(frame::dscp(frame, l)) << 2)
            }
            SourceEncap::UdpPort => (1, frame::udp_dst_port(frame, l).unwrap_or(0)),
            SourceEncap::UdpNew => (2, u16::from(l.proto)),
            SourceEncap::Gre | SourceEncap::VxlanGpe | SourceEncap::Geneve => (0, 0),
        };
        let mut bytes = Vec::with_capacity(
            PROBE_MARKER_LEN
                + SHIM_LEN
                + MD_HEADER_LEN
                + own_len
                + source_only.len()
                + s.destination.as_ref().map_or(0, |d| SHIM_LEN + d.len()),
        );
        if p.encap == SourceEncap::ProbeMarker {
            let marker = self.cfg.probe_marker().unwrap_or(0);
            bytes.extend_from_slice(&marker.to_be_bytes());
        }
        let at = bytes.len();
        bytes.resize(at + SHIM_LEN + MD_HEADER_LEN, 0);
        self.shim(frame, l, p, words, npt, content)
            .emit(&mut bytes[at..at + SHIM_LEN]);
        p.emit_header(&mut bytes[at + SHIM_LEN..]);
        let hop_at = bytes.len();
        bytes.resize(hop_at + own_len, 0);
        if p.mx() {
            bytes[hop_at..].copy_from_slice(&s.ds_metadata);
        } else if own_len > 0 {
            // The baseline, the domain's export metadata, the Checksum Complement last.
            let mut hop = tel.hop(self.cfg.node_id);
            hop.domain = &s.hop_ds;
            hop.encode(s.instructions, Format::IntV2, &mut bytes[hop_at..]);
        }
        let hop_end = (own_len > 0).then_some(bytes.len());
        bytes.extend_from_slice(source_only);
        if let Some(body) = &s.destination {
            push_destination(&mut bytes, body, npt, content);
        }
        Block { bytes, hop_end }
    }

    /// The shim of the plan's encapsulation, `words` long after it: INT v2.1 §"INT over
    /// TCP/UDP" (`npt`, `content`), §"INT over VXLAN GPE", §"INT over Geneve", §"INT over
    /// IPv4/GRE".
    fn shim(
        &self,
        frame: &[u8],
        l: &Layout,
        p: &Plan<'_>,
        words: u8,
        npt: u8,
        content: u16,
    ) -> Shim {
        let int_type = if p.mx() { 3 } else { 1 };
        let vxlan = match p.encap {
            SourceEncap::VxlanGpe => self.vxlan(frame, l),
            _ => None,
        };
        if let Some((was_vxlan, next)) = vxlan {
            Shim::Gpe(GpeShimRepr {
                int_type,
                reserved: 0,
                length: words,
                g: was_vxlan,
                reserved2: 0,
                next_protocol: next,
            })
        } else if p.encap == SourceEncap::Geneve {
            Shim::Geneve(GeneveOptionRepr {
                option_class: GENEVE_INT_OPTION_CLASS,
                option_type: int_type,
                reserved: 0,
                length: words,
            })
        } else if p.encap == SourceEncap::Gre {
            // G = 1: this source added the GRE header; the sink removes it again.
            Shim::Gre(GreShimRepr {
                int_type,
                g: !p.existing_gre,
                reserved: 0,
                length: words,
                next_protocol: if p.existing_gre {
                    frame::gre_protocol(frame, l).unwrap_or(0)
                } else if l.v6 {
                    ethertype::IPV6
                } else {
                    ethertype::IPV4
                },
            })
        } else {
            Shim::TcpUdp(TcpUdpShimRepr {
                int_type,
                npt,
                reserved: 0,
                length: words,
                content,
            })
        }
    }

    /// The block into the frame as the plan's encapsulation has it, lengths and checksums kept
    /// right; `false` when it cannot go in (a Geneve header's Opt Len is full).
    fn insert(
        &self,
        frame: &mut Vec<u8>,
        l: &Layout,
        flow: &FlowKey,
        p: &Plan<'_>,
        block: &mut Block,
    ) -> bool {
        let bytes = &mut block.bytes;
        match p.encap {
            SourceEncap::Dscp | SourceEncap::UdpPort | SourceEncap::ProbeMarker => {
                self.insert_after_l4(frame, l, p.encap, bytes, block.hop_end, p.s.instructions)
            }
            SourceEncap::Geneve => return insert_geneve(frame, l, bytes),
            SourceEncap::VxlanGpe => self.insert_vxlan_gpe(frame, l, bytes),
            SourceEncap::Gre if p.existing_gre => self.insert_behind_gre(frame, l, bytes),
            SourceEncap::Gre => self.insert_gre(frame, l, bytes),
            SourceEncap::UdpNew => self.insert_udp(frame, l, flow, bytes),
        }
        true
    }

    /// INT v2.1 §"INT over TCP/UDP": the block right after the TCP/UDP header, announced by the
    /// DSCP (NPT 0), the UDP destination port (NPT 1) or the probe marker in front of it; the
    /// L4 checksum updated, or kept with the Checksum Complement at `hop_end`.
    pub(super) fn insert_after_l4(
        &self,
        frame: &mut Vec<u8>,
        l: &Layout,
        encap: SourceEncap,
        block: &mut [u8],
        hop_end: Option<usize>,
        instructions: u16,
    ) {
        let at = l.l4_at + l.l4_len;
        let old_len = frame::l4_len(frame, l);
        let new_len = old_len + block.len() as u16;
        let udp = l.is_udp();
        let old_csum = frame::l4_checksum(frame, l);
        let mut csum = frame::updated_l4_checksum(old_csum, udp, &[], block, old_len, new_len, udp);
        if encap == SourceEncap::UdpPort {
            // NPT 1: the INT port replaces the destination port (saved in the shim).
            let old_port = frame::udp_dst_port(frame, l).unwrap_or(0);
            frame::put_udp_dst_port(frame, l, self.cfg.int_udp_port);
            if csum != 0 {
                csum = intscope_wire::checksum::update(
                    csum,
                    &old_port.to_be_bytes(),
                    &self.cfg.int_udp_port.to_be_bytes(),
                );
                csum = intscope_wire::checksum::udp_wire_checksum(csum);
            }
        }
        if udp {
            frame::set_udp_len(frame, l, new_len);
        }
        if let Some(end) = hop_end
            && self.complements(instructions, udp, old_csum)
        {
            // The checksum stays; the last word of our hop's metadata makes it right.
            let c = intscope_wire::checksum::checksum_complement(old_csum, csum);
            block[end - 4..end].copy_from_slice(&c.to_be_bytes());
        } else {
            frame::set_l4_checksum(frame, l, csum);
        }
        frame::insert(frame, at, block);
        frame::adjust_ip_len(frame, l, block.len() as isize);
        if encap == SourceEncap::Dscp {
            let marked = self.cfg.mark_dscp(frame::dscp(frame, l));
            frame::set_dscp(frame, l, marked);
        }
    }

    /// INT v2.1 §"INT over VXLAN GPE": the block after the VXLAN-GPE header.
    pub(super) fn insert_vxlan_gpe(&self, frame: &mut Vec<u8>, l: &Layout, block: &[u8]) {
        // The VXLAN(-GPE) header now announces INT (P bit, next protocol 0x82); VXLAN
        // becomes VXLAN-GPE on its port. The block follows the header.
        let vx = l.l4_at + UDP_HEADER_LEN;
        let Some(mut header) = frame
            .get(vx..vx + VXLAN_LEN)
            .and_then(|b| <[u8; VXLAN_LEN]>::try_from(b).ok())
        else {
            return;
        };
        let Ok(mut v) = VxlanPacket::new_checked(&mut header[..]) else {
            return;
        };
        v.set_next_protocol_present(true);
        v.set_next_protocol(GPE_NEXT_PROTO_INT);
        frame::set_udp_dst_port(frame, l, self.detect.vxlan_gpe_port);
        frame::udp_overwrite(frame, l, vx, &header);
        frame::udp_insert(frame, l, vx + VXLAN_LEN, block);
    }

    /// INT v2.1 §"INT over IPv4/GRE", scenario 1: a GRE packet gets the block behind its GRE
    /// header (and its optional fields), whose protocol type becomes TBD_INT.
    pub(super) fn insert_behind_gre(&self, frame: &mut Vec<u8>, l: &Layout, block: &[u8]) {
        let Some(gre_len) = frame::gre_header_len(frame, l) else {
            return;
        };
        frame::set_gre_protocol(frame, l, self.cfg.int_gre_proto);
        frame::insert(frame, l.l4_at + gre_len, block);
        frame::payload_resized(frame, l, block.len() as isize);
    }

    /// INT v2.1 §"INT over IPv4/GRE", scenario 2: an outer IP header (the packet's own, without
    /// IPv4 options, carrying GRE) and a GRE header with protocol type TBD_INT in front of the
    /// original IP packet, which is not touched.
    pub(super) fn insert_gre(&self, frame: &mut Vec<u8>, l: &Layout, block: &[u8]) {
        let inner_len = l.ip_len;
        let gre = GreRepr {
            flags_version: 0,
            protocol_type: self.cfg.int_gre_proto,
            checksum: None,
            key: None,
            sequence: None,
        };
        let tail = gre.buffer_len() + block.len();
        let Some(inner) = frame.get(l.ip_at..) else {
            return;
        };
        let mut ins = Vec::with_capacity(IPV6_LEN + tail);
        let emitted = if l.v6 {
            let Ok(inner) = Ipv6Packet::new_checked(inner) else {
                return;
            };
            let outer = Ipv6Repr {
                next_header: protocol::GRE,
                payload_len: (inner_len + tail) as u16,
                ..Ipv6Repr::parse(&inner)
            };
            ins.resize(outer.buffer_len() + gre.buffer_len(), 0);
            Ipv6Packet::new_for_emit(&mut ins[..]).map(|mut v| outer.emit(&mut v))
        } else {
            let Ok(inner) = Ipv4Packet::new_checked(inner) else {
                return;
            };
            // The inner header's options stay with it; the outer one has none.
            let outer = Ipv4Repr {
                protocol: protocol::GRE,
                total_len: (inner_len + IPV4_MIN_LEN + tail) as u16,
                ..Ipv4Repr::parse(&inner)
            };
            ins.resize(outer.buffer_len() + gre.buffer_len(), 0);
            Ipv4Packet::new_for_emit(&mut ins[..]).map(|mut v| outer.emit(&mut v))
        };
        let at = ins.len() - gre.buffer_len();
        let emitted = emitted.and_then(|()| {
            GrePacket::new_for_emit(&mut ins[at..]).and_then(|mut v| gre.emit(&mut v))
        });
        if emitted.is_err() {
            // Sized from the Reprs just above: cannot happen, but nothing half-built goes out.
            return;
        }
        ins.extend_from_slice(block);
        frame::insert(frame, l.ip_at, &ins);
    }

    /// INT v2.1 §"INT over TCP/UDP", NPT 2: a new UDP header in front of the original L4 header.
    pub(super) fn insert_udp(&self, frame: &mut Vec<u8>, l: &Layout, flow: &FlowKey, block: &[u8]) {
        // RFC 6936 / INT v2.1: the new UDP header's checksum is zero; the original L4
        // header keeps its own, still valid (same addresses, same segment). The source port
        // spreads flows over ECMP paths from the ephemeral range.
        let seg = frame::l4_len(frame, l);
        let h = {
            use std::hash::{Hash, Hasher};
            let mut s = std::collections::hash_map::DefaultHasher::new();
            flow.hash(&mut s);
            s.finish()
        };
        let repr = UdpRepr {
            src_port: 0xc000 | (h as u16 & 0x3fff),
            dst_port: self.cfg.int_udp_port,
            length: (UDP_HEADER_LEN + block.len()) as u16 + seg,
            checksum: 0,
        };
        let mut ins = vec![0u8; repr.buffer_len()];
        if let Ok(mut u) = UdpPacket::new_checked(&mut ins[..]) {
            repr.emit(&mut u);
        }
        ins.extend_from_slice(block);
        frame::insert(frame, l.l4_at, &ins);
        frame::adjust_ip_len(frame, l, ins.len() as isize);
        frame::set_ip_proto(frame, l, protocol::UDP);
    }

    /// A VXLAN (RFC 7348) or VXLAN-GPE packet without INT: whether it is plain VXLAN, and the
    /// next protocol of what it carries (VXLAN: Ethernet).
    pub(super) fn vxlan(&self, frame: &[u8], l: &Layout) -> Option<(bool, u8)> {
        let port = frame::udp_dst_port(frame, l)?;
        let v = VxlanPacket::new_checked(frame.get(l.l4_at + UDP_HEADER_LEN..)?).ok()?;
        if port == self.detect.vxlan_port {
            Some((true, GPE_NEXT_PROTO_ETHERNET))
        } else if port == self.detect.vxlan_gpe_port && v.next_protocol_present() {
            Some((false, v.next_protocol()))
        } else {
            None
        }
    }

    /// A Geneve packet (RFC 8926) without INT.
    pub(super) fn geneve(&self, frame: &[u8], l: &Layout) -> bool {
        frame::udp_dst_port(frame, l) == Some(self.detect.geneve_port)
            && frame
                .get(l.l4_at + UDP_HEADER_LEN..)
                .is_some_and(|b| GenevePacket::new_checked(b).is_ok())
    }

    pub(super) fn count(&mut self, insertion: Insertion) {
        match insertion {
            Insertion::Full => self.stats.inserted += 1,
            Insertion::NoMetadata => self.stats.inserted_m += 1,
            Insertion::TooBig => self.stats.too_big += 1,
        }
    }
}
