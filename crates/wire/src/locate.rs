//! Finding INT in a frame: walks Ethernet / VLAN / IPv4 / IPv6 / UDP / TCP (etherparse's checked
//! slices) and the tunnels INT rides in, decodes the INT block zero-copy, and derives the flow
//! key of the *original* packet (destination port from an NPT=1 shim, L4 header after an NPT=2
//! shim, v0.5 tail), plus the innermost flow through VXLAN-GPE / Geneve / GRE / IP-in-UDP.
//!
//! How INT is recognised is configuration ([`DetectConfig`]), because the spec leaves the
//! codepoints open (INT v2.1 §"INT over TCP/UDP": INT_TBD port, DSCP value or bit, probe
//! marker; §"INT over IPv4/GRE": TBD_INT).

use core::net::{IpAddr, Ipv6Addr};

use etherparse::{
    Ethernet2HeaderSlice, Ipv4HeaderSlice, Ipv6ExtensionsSlice, Ipv6HeaderSlice, TcpHeaderSlice,
    UdpHeaderSlice,
};

use crate::checksum;
use crate::domain::Registry;
use crate::encap::{
    ETHERTYPE_TEB, GENEVE_PORT, GPE_NEXT_PROTO_INT, GeneveRepr, GreRepr, VXLAN_GPE_PORT,
    VXLAN_PORT, VxlanGpeRepr,
};
use crate::error::{Error, Field, Layer, Result, check_len};
use crate::int::{AnyShim, Encap, IntBlock, IntHeader, LengthSemantics};
use crate::legacy::GPE_NEXT_PROTO_INT_2016;
use crate::metadata::Format;
use crate::shim::{GENEVE_INT_OPTION_CLASS, Shim};
use crate::tunnel::{GenevePacket, GrePacket, VxlanPacket};
use crate::warning::{Warning, Warnings};

/// A DSCP value and the bits of it that mark INT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DscpMatch {
    /// The marking value (6 bits).
    pub value: u8,
    /// Which DSCP bits are compared (0x3F: the whole value; one bit: a flag).
    pub mask: u8,
}

impl DscpMatch {
    /// Whether `dscp` carries the marking.
    pub fn matches(&self, dscp: u8) -> bool {
        dscp & self.mask == self.value & self.mask
    }
}

/// How INT and telemetry reports are recognised. Defaults: DSCP 0x17 (the spec examples, BMv2
/// and AmLight), no INT UDP port (the spec assigns none), no probe marker, no GRE protocol type,
/// VXLAN-GPE on 4790, Geneve on 6081, reports on UDP 32766 (SD-Fabric), no unmarked INT, no
/// domain registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectConfig {
    /// UDP destination ports meaning "INT follows" (INT_TBD).
    pub int_udp_ports: Vec<u16>,
    /// DSCP marking of INT after TCP/UDP.
    pub dscp: Option<DscpMatch>,
    /// 64-bit probe marker before the shim.
    pub probe_marker: Option<u64>,
    /// GRE protocol type of INT (TBD_INT).
    pub gre_proto: Option<u16>,
    /// VXLAN-GPE UDP port.
    pub vxlan_gpe_port: u16,
    /// VXLAN UDP port (RFC 7348), for the flow inside.
    pub vxlan_port: u16,
    /// Geneve UDP port.
    pub geneve_port: u16,
    /// GTP-U UDP port (3GPP TS 29.281: 2152), for the flow inside mobile tunnels; `None`: off.
    pub gtpu_port: Option<u16>,
    /// UDP destination ports of telemetry reports.
    pub report_ports: Vec<u16>,
    /// Also take INT after TCP/UDP that carries none of the markings above (off by default).
    /// INT v2.1 §"INT over TCP/UDP" leaves the marking to the operator ("the INT source and sink
    /// ... agree on the marking"), so a payload without one is application data: any bytes can
    /// look like a shim, and a guess invents nodes and flows (about one TCP payload in a
    /// thousand passed the old, looser checks). On, only a block whose every reserved field is
    /// zero and whose lengths agree exactly is taken ([`Warning::UnmarkedInt`]). A report's
    /// copy is looked at so exactly when the report's F bit says the packet carried INT,
    /// whatever this says ([`Packet::locate_copy`]).
    pub unmarked_int: bool,
    /// The domain registry: sizes of domain-specific metadata, so that 'source-only' metadata at
    /// the bottom of an INT-MD stack (INT v2.1 §"INT-MD Metadata Stack") is told from hops.
    /// Without it, a known DS ID's source-only length is inferred from the stack length.
    pub domains: Option<std::sync::Arc<Registry>>,
    /// Verify IPv4 and L4 checksums (costs a pass over the packet; off on hot paths).
    pub verify_checksums: bool,
    /// The packet is a report's truncated copy: an INT stack may be cut off (decoded as far as
    /// it goes, with a warning) instead of being an error.
    pub truncated: bool,
    /// VXLAN-GPE Next Protocol 0x05 is the 2016 specification's INT header (§5.3.2). On by
    /// default; off where 0x05 means another payload (later VXLAN-GPE drafts assign it).
    pub gpe_int_2016: bool,
}

impl DetectConfig {
    /// Whether UDP destination port `port` carries telemetry reports.
    #[inline]
    pub fn is_report_port(&self, port: u16) -> bool {
        port_listed(&self.report_ports, port)
    }

    /// Whether UDP destination port `port` means "INT follows".
    #[inline]
    pub fn is_int_udp_port(&self, port: u16) -> bool {
        port_listed(&self.int_udp_ports, port)
    }
}

/// A plain scan: the lists hold one or two ports, for which `slice::contains`'s generic search
/// costs more than it saves.
#[inline]
#[allow(clippy::manual_contains)]
fn port_listed(ports: &[u16], port: u16) -> bool {
    ports.iter().any(|&p| p == port)
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            int_udp_ports: Vec::new(),
            dscp: Some(DscpMatch {
                value: 0x17,
                mask: 0x3f,
            }),
            probe_marker: None,
            gre_proto: None,
            vxlan_gpe_port: VXLAN_GPE_PORT,
            vxlan_port: VXLAN_PORT,
            geneve_port: GENEVE_PORT,
            gtpu_port: Some(GTPU_PORT),
            report_ports: vec![crate::report::DEFAULT_REPORT_PORT],
            unmarked_int: false,
            domains: None,
            verify_checksums: false,
            truncated: false,
            gpe_int_2016: true,
        }
    }
}

/// A 5-tuple. Addresses are 16 bytes, IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`): a fixed-size
/// key that hashes fast and moves without the store-forwarding stalls an `IpAddr` enum causes.
/// [`FlowKey::src_ip`] / [`FlowKey::dst_ip`] give the canonical `IpAddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// IP protocol.
    pub proto: u8,
    /// L4 source port (0 when the protocol has none).
    pub src_port: u16,
    /// L4 destination port.
    pub dst_port: u16,
}

/// Five words, not the derived field-by-field bytes (each address hashed as a slice with its
/// length): every report's key is hashed, and a word-wise hasher (the collector's Fx) takes five
/// steps instead of nine.
impl core::hash::Hash for FlowKey {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(self.src.to_bits());
        state.write_u128(self.dst.to_bits());
        state.write_u64(
            u64::from(self.proto) << 32 | u64::from(self.src_port) << 16 | u64::from(self.dst_port),
        );
    }
}

impl FlowKey {
    /// Source address (IPv4 for mapped addresses).
    pub fn src_ip(&self) -> IpAddr {
        self.src.to_canonical()
    }
    /// Destination address (IPv4 for mapped addresses).
    pub fn dst_ip(&self) -> IpAddr {
        self.dst.to_canonical()
    }
}

/// What a packet starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Ethernet II.
    Ethernet,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
}

/// The IP layer of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    /// Source address (IPv4 as IPv4-mapped IPv6; see [`FlowKey`]).
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// IP version: 4 or 6.
    pub version: u8,
    /// Protocol (IPv6: after extension headers).
    pub proto: u8,
    /// DSCP.
    pub dscp: u8,
    /// TTL / hop limit.
    pub ttl: u8,
    /// Offset of the IP header in the buffer.
    pub offset: usize,
    /// IP header length (IPv6: with extension headers).
    pub header_len: usize,
    /// Length the header declares for the whole IP packet.
    pub declared_len: usize,
}

/// The L4 layer of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L4Info {
    /// IP protocol (6 or 17).
    pub proto: u8,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Offset of the L4 header.
    pub offset: usize,
    /// L4 header length.
    pub header_len: usize,
    /// Checksum field.
    pub checksum: u16,
}

/// A located packet: its layers, INT blocks and flow keys. Nothing is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The bytes the packet was located in.
    pub bytes: &'a [u8],
    /// VLAN IDs, outermost first (up to two; `vlan_count` tells how many tags there were).
    pub vlans: [u16; 2],
    /// Number of VLAN tags.
    pub vlan_count: u8,
    /// Outer IP layer.
    pub ip: Option<IpInfo>,
    /// Outer L4 layer.
    pub l4: Option<L4Info>,
    /// First INT block, and its offset in `bytes`.
    pub int: Option<(usize, IntBlock<'a>)>,
    /// A second INT block stacked behind the first (VXLAN-GPE next protocol 0x82).
    pub int2: Option<(usize, IntBlock<'a>)>,
    /// The original packet's flow (INT fields restored).
    pub flow: Option<FlowKey>,
    /// The innermost flow, through tunnels; `None` when there is no tunnel.
    pub inner_flow: Option<FlowKey>,
    /// Tolerated deviations.
    pub warnings: Warnings,
    /// Whether unmarked INT is looked for in this packet (set by [`Packet::locate`] and
    /// [`Packet::locate_copy`]; inner packets of tunnels inherit it).
    unmarked: bool,
}

const MAX_DEPTH: u8 = 4;

impl<'a> Packet<'a> {
    /// Locates layers and INT in `bytes`, which start with `start`.
    pub fn parse(bytes: &'a [u8], start: Start, cfg: &DetectConfig) -> Result<Self> {
        let mut p = Packet::new(bytes);
        p.locate(start, cfg)?;
        Ok(p)
    }

    /// Locates layers and INT in this packet's bytes, in place: hot paths (the collector) build
    /// the `Packet` in their own frame with [`Packet::new`] and avoid moving a few hundred bytes.
    #[inline]
    pub fn locate(&mut self, start: Start, cfg: &DetectConfig) -> Result<()> {
        self.unmarked = cfg.unmarked_int;
        parse_into(self, self.bytes, start, cfg, 0)
    }

    /// [`Packet::locate`] for a telemetry report's copy of a packet: unmarked INT is looked for
    /// (with the strict rules of [`DetectConfig::unmarked_int`]) exactly when `tracked`, the
    /// report's Tracked Flow Association bit, says the packet carried it, whatever
    /// `unmarked_int` says: the report is the marking. Report v2.0 §"Individual Report Header":
    /// "If the Tracked Flow Association (F) bit is set to 0, then there will not be any embedded
    /// telemetry metadata in the report". Reports v1.0 and v0.5 carry the same F bit in their
    /// fixed header; a marked block is taken whatever F says (the marking is the operator's
    /// explicit word).
    #[inline]
    pub fn locate_copy(&mut self, start: Start, cfg: &DetectConfig, tracked: bool) -> Result<()> {
        self.unmarked = tracked;
        parse_into(self, self.bytes, start, cfg, 0)
    }

    /// An empty packet over `bytes`, to be filled by [`Packet::locate`].
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Packet {
            bytes,
            vlans: [0; 2],
            vlan_count: 0,
            ip: None,
            l4: None,
            int: None,
            int2: None,
            flow: None,
            inner_flow: None,
            warnings: Warnings::default(),
            unmarked: false,
        }
    }

    /// The flow being read: [`parse_into`] sets it once the IP layer is known, then the layers
    /// after it refine it in place.
    #[inline(always)]
    fn flow_mut(&mut self) -> &mut FlowKey {
        self.flow.get_or_insert(FlowKey {
            src: Ipv6Addr::UNSPECIFIED,
            dst: Ipv6Addr::UNSPECIFIED,
            proto: 0,
            src_port: 0,
            dst_port: 0,
        })
    }

    /// The INT-MD/MX block if any, else the first block.
    pub fn int_block(&self) -> Option<&IntBlock<'a>> {
        self.int.as_ref().map(|(_, b)| b)
    }
}

fn ip_addr4(a: [u8; 4]) -> Ipv6Addr {
    // Built in a register (one wide store): byte-wise construction stalls store forwarding.
    Ipv6Addr::from_bits((0xffffu128 << 32) | u128::from(u32::from_be_bytes(a)))
}

fn ip_addr6(a: [u8; 16]) -> Ipv6Addr {
    Ipv6Addr::from(a)
}

/// Fills `p` (built in place: a `Packet` is a few hundred bytes, moving it costs measurably).
fn parse_into<'a>(
    p: &mut Packet<'a>,
    bytes: &'a [u8],
    start: Start,
    cfg: &DetectConfig,
    depth: u8,
) -> Result<()> {
    let mut at = 0;
    let mut ethertype = match start {
        Start::Ethernet => {
            let eth = Ethernet2HeaderSlice::from_slice(bytes)
                .map_err(|e| Error::truncated(Layer::Ethernet, 0, e.required_len, e.len))?;
            at = 14;
            let mut et = eth.ether_type().0;
            while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
                let tag = bytes.get(at..at + 4).ok_or_else(|| {
                    Error::truncated(Layer::Vlan, at, 4, bytes.len().saturating_sub(at))
                })?;
                if usize::from(p.vlan_count) < p.vlans.len() {
                    p.vlans[usize::from(p.vlan_count)] =
                        u16::from_be_bytes([tag[0], tag[1]]) & 0x0fff;
                }
                p.vlan_count = p.vlan_count.saturating_add(1);
                et = u16::from_be_bytes([tag[2], tag[3]]);
                at += 4;
            }
            et
        }
        Start::Ipv4 => 0x0800,
        Start::Ipv6 => 0x86dd,
    };
    // MPLS (SD-Fabric spines forward MPLS): skip the label stack, guess the payload from the nibble.
    if matches!(ethertype, 0x8847 | 0x8848) {
        loop {
            let l = bytes.get(at..at + 4).ok_or_else(|| {
                Error::truncated(Layer::Ethernet, at, 4, bytes.len().saturating_sub(at))
            })?;
            at += 4;
            if l[2] & 1 == 1 {
                break;
            }
        }
        ethertype = match bytes.get(at).map(|b| b >> 4) {
            Some(4) => 0x0800,
            Some(6) => 0x86dd,
            _ => return Ok(()),
        };
    }
    // Built in registers and stored once; what follows reads those, not `p.ip` (whose addresses
    // are stored in halves: a whole-value read back stalled on store forwarding, a third of this
    // function in perf). Nothing takes `ip`'s address, or it would live in memory again.
    // The fragment offset (13 bits) and More Fragments (bit 13) of a fragmented packet; 0 when
    // the packet is whole.
    let mut fragment = 0u16;
    let ip = match ethertype {
        0x0800 => {
            let s = Ipv4HeaderSlice::from_slice(&bytes[at..]).map_err(|e| ipv4_error(at, e))?;
            let header_len = s.slice().len();
            if cfg.verify_checksums && checksum::internet_checksum(s.slice()) != 0 {
                p.warnings.add(Warning::BadIpChecksum);
            }
            fragment = s.fragments_offset().value() | u16::from(s.more_fragments()) << 13;
            IpInfo {
                src: ip_addr4(s.source()),
                dst: ip_addr4(s.destination()),
                version: 4,
                proto: s.protocol().0,
                dscp: s.dcp().value(),
                ttl: s.ttl(),
                offset: at,
                header_len,
                declared_len: usize::from(s.total_len()),
            }
        }
        0x86dd => {
            let s = Ipv6HeaderSlice::from_slice(&bytes[at..]).map_err(|e| ipv6_error(at, e))?;
            let chain = &bytes[at + 40..];
            // The headers' length and the protocol after them. A fragment's offset is read
            // from the first Fragment header in the chain: after it, a later fragment holds
            // the middle of the packet, not headers, so its next-header value is the protocol
            // and its end the end of the headers whatever etherparse made of the bytes after.
            let (mut exts_len, mut proto) =
                match Ipv6ExtensionsSlice::from_slice(s.next_header(), chain) {
                    Ok((exts, next, _)) => {
                        if exts.is_fragmenting_payload() {
                            fragment = ipv6_fragment(s.next_header(), chain).0;
                        }
                        (exts.slice().len(), next.0)
                    }
                    Err(e) => match ipv6_fragment(s.next_header(), chain) {
                        (f, Some(_)) if f & 0x1fff != 0 => {
                            fragment = f;
                            (0, 0)
                        }
                        _ => return Err(ipv6_exts_error(at + 40, e)),
                    },
                };
            if fragment & 0x1fff != 0
                && let (_, Some((end, next))) = ipv6_fragment(s.next_header(), chain)
            {
                (exts_len, proto) = (end, next);
            }
            IpInfo {
                src: ip_addr6(s.source()),
                dst: ip_addr6(s.destination()),
                version: 6,
                proto,
                dscp: s.dscp().value(),
                ttl: s.hop_limit(),
                offset: at,
                header_len: 40 + exts_len,
                declared_len: 40 + usize::from(s.payload_length()),
            }
        }
        _ => return Ok(()),
    };
    p.ip = Some(ip);
    if fragment != 0 && fragmented(p, fragment) {
        return Ok(());
    }
    // The IP payload: what the header declares, cut to what was captured (truncated reports).
    let l4_at = at + ip.header_len;
    let ip_end = (at + ip.declared_len)
        .min(bytes.len())
        .max(l4_at.min(bytes.len()));
    let payload = &bytes[l4_at.min(bytes.len())..ip_end];
    let declared_payload = ip.declared_len.saturating_sub(ip.header_len);
    // The outer 5-tuple stands even when an INT header behind it is cut off (truncated packets in
    // reports); what INT saved refines it. Kept in `p` from here and changed there: a key built
    // apart and copied in read its narrow port stores back in one wide load, a store-forwarding
    // stall that took a sixth of this function (perf).
    p.flow = Some(FlowKey {
        src: ip.src,
        dst: ip.dst,
        proto: ip.proto,
        src_port: 0,
        dst_port: 0,
    });
    let dscp_marked = cfg.dscp.is_some_and(|m| m.matches(ip.dscp));
    let mut proto = ip.proto;
    if proto == 6
        && cfg.truncated
        && TcpHeaderSlice::from_slice(payload).is_err()
        && plausible_l4(payload, 17)
    {
        // A producer that inserted a UDP header but left the IP protocol at TCP (CableLabs
        // IPv6 reports): read what is there. Only in report copies, and only where no TCP header
        // could be read at all.
        p.warnings.add(Warning::L4ProtocolMismatch);
        proto = 17;
        p.flow_mut().proto = 17;
    }
    match proto {
        17 => {
            let u = UdpHeaderSlice::from_slice(payload)
                .map_err(|e| Error::truncated(Layer::Udp, l4_at, e.required_len, e.len))?;
            let l4 = L4Info {
                proto: 17,
                src_port: u.source_port(),
                dst_port: u.destination_port(),
                offset: l4_at,
                header_len: 8,
                checksum: u.checksum(),
            };
            p.l4 = Some(l4);
            let flow = p.flow_mut();
            (flow.src_port, flow.dst_port) = (l4.src_port, l4.dst_port);
            if cfg.verify_checksums
                && u.checksum() != 0
                && payload.len() == declared_payload
                && !l4_checksum_ok(p.ip.as_ref(), payload)
            {
                p.warnings.add(Warning::BadL4Checksum);
            }
            let data = &payload[8..];
            let dport = l4.dst_port;
            // A report's outer header may carry any DSCP (GEANT sends 0x17): reports win.
            if cfg.is_report_port(dport) {
            } else if cfg.is_int_udp_port(dport) || dscp_marked {
                l4_int(data, Encap::Udp, cfg, p, l4_at + 8, depth)?;
            } else if let Some(off) = probe(cfg, data) {
                l4_int(&data[off..], Encap::Udp, cfg, p, l4_at + 8 + off, depth)?;
            } else if dport == cfg.vxlan_gpe_port {
                vxlan_gpe(data, l4_at + 8, cfg, p, depth)?;
            } else if dport == cfg.geneve_port {
                geneve(data, l4_at + 8, cfg, p, depth)?;
            } else if Some(dport) == cfg.gtpu_port {
                gtpu(data, l4_at + 8, cfg, p, depth)?;
            } else if dport == cfg.vxlan_port && data.len() > 8 && depth < MAX_DEPTH {
                // RFC 7348: an 8-byte header, then the tenant's Ethernet frame.
                p.inner_flow = innermost(&data[8..], Start::Ethernet, cfg, depth, p.unmarked);
            } else if p.unmarked {
                unmarked(data, Encap::Udp, l4_at + 8, cfg, p, depth);
            }
        }
        6 => {
            let t = TcpHeaderSlice::from_slice(payload).map_err(|e| tcp_error(l4_at, e))?;
            let hl = t.slice().len();
            let l4 = L4Info {
                proto: 6,
                src_port: t.source_port(),
                dst_port: t.destination_port(),
                offset: l4_at,
                header_len: hl,
                checksum: t.checksum(),
            };
            p.l4 = Some(l4);
            let flow = p.flow_mut();
            (flow.src_port, flow.dst_port) = (l4.src_port, l4.dst_port);
            if cfg.verify_checksums
                && payload.len() == declared_payload
                && !l4_checksum_ok(p.ip.as_ref(), payload)
            {
                p.warnings.add(Warning::BadL4Checksum);
            }
            let data = &payload[hl..];
            if dscp_marked {
                l4_int(data, Encap::Tcp, cfg, p, l4_at + hl, depth)?;
            } else if let Some(off) = probe(cfg, data) {
                l4_int(&data[off..], Encap::Tcp, cfg, p, l4_at + hl + off, depth)?;
            } else if p.unmarked {
                unmarked(data, Encap::Tcp, l4_at + hl, cfg, p, depth);
            }
        }
        47 => gre(payload, l4_at, cfg, p, depth)?,
        4 | 41 if depth < MAX_DEPTH => {
            let start = if ip.proto == 4 {
                Start::Ipv4
            } else {
                Start::Ipv6
            };
            p.inner_flow = innermost(payload, start, cfg, depth, p.unmarked);
        }
        _ => {}
    }
    Ok(())
}

/// A fragment of an IP packet (`fragment`: offset in 8-byte units, More Fragments in bit 13).
/// Only the first fragment holds the L4 header: RFC 791 ("the fragment offset field of the first
/// fragment is zero", the internet header of later fragments is followed by data from the middle
/// of the datagram) and RFC 8200 §4.5 (the Fragmentable Part, upper-layer header included, is
/// split across the fragments; a fragment's Fragment Offset is "the offset, in 8-octet units, of
/// the data following this header, relative to the start of the Fragmentable Part"). A later
/// fragment's bytes are the middle of a datagram, so reading them as a UDP/TCP header would
/// invent ports and INT: it is flagged and yields no L4, no flow and no INT (true returned). A
/// first fragment is read on, flagged: its L4 header is real but its payload is incomplete.
#[cold]
#[inline(never)]
fn fragmented(p: &mut Packet<'_>, fragment: u16) -> bool {
    if fragment & 0x1fff != 0 {
        p.warnings.add(Warning::IpLaterFragment);
        p.flow = None;
        true
    } else {
        p.warnings.add(Warning::IpFirstFragment);
        false
    }
}

/// The offset and More Fragments flag of the first IPv6 Fragment extension header in the
/// extension header `chain` (which starts with header `first`), in the layout of
/// [`fragmented`]'s argument (RFC 8200 §4.5: "Fragment Offset 13-bit unsigned integer. The
/// offset, in 8-octet units"; "M flag 1 = more fragments; 0 = last fragment"), with where the
/// Fragment header ends in `chain` and its Next Header; (0, None) without one before the chain
/// ends or leaves the extension headers.
///
/// Walked here, not with etherparse's `Ipv6ExtensionsSlice` iterator: over a chain read laxly
/// (up to a header it could not read) that iterator panicked on fuzzed bytes.
#[cold]
#[inline(never)]
fn ipv6_fragment(first: etherparse::IpNumber, chain: &[u8]) -> (u16, Option<(usize, u8)>) {
    let (mut next, mut at) = (first.0, 0usize);
    // Each header is at least 8 bytes, so the walk ends within `chain.len() / 8` steps.
    loop {
        let Some(h) = chain.get(at..at + 8) else {
            return (0, None);
        };
        let len = match next {
            // RFC 8200 §4.5: Next Header, Reserved, Fragment Offset (13) Res (2) M (1), ID.
            44 => {
                let word = u16::from_be_bytes([h[2], h[3]]);
                return ((word >> 3) | (word & 1) << 13, Some((at + 8, h[0])));
            }
            // Hop-by-Hop, Routing, Destination Options (RFC 8200 §4.3, 4.4, 4.6): Hdr Ext
            // Len in 8-octet units, not counting the first 8 octets.
            0 | 43 | 60 => (usize::from(h[1]) + 1) * 8,
            // Authentication Header (RFC 4302 §2.2): Payload Len in 4-octet units, minus 2.
            51 => (usize::from(h[1]) + 2) * 4,
            _ => return (0, None),
        };
        next = h[0];
        at += len;
    }
}

/// A header cut short by the end of the bytes: `Truncated`, not a bad value. etherparse's
/// lengths count from the header's start, `layer_start_offset` bytes into the slice it was
/// given at `at`.
fn len_error(layer: Layer, at: usize, e: &etherparse::err::LenError) -> Error {
    Error::truncated(layer, at + e.layer_start_offset, e.required_len, e.len)
}

/// An IPv4 header etherparse refused: cut short, or a bad field. Out of line, as every error
/// mapper here: the hot path keeps only the call.
#[cold]
#[inline(never)]
fn ipv4_error(at: usize, e: etherparse::err::ipv4::HeaderSliceError) -> Error {
    use etherparse::err::ipv4::HeaderSliceError as E;
    match e {
        E::Len(l) => len_error(Layer::Ipv4, at, &l),
        E::Content(c) => ip_error(Layer::Ipv4, at, c),
    }
}

/// An IPv6 header etherparse refused.
#[cold]
#[inline(never)]
fn ipv6_error(at: usize, e: etherparse::err::ipv6::HeaderSliceError) -> Error {
    use etherparse::err::ipv6::HeaderSliceError as E;
    match e {
        E::Len(l) => len_error(Layer::Ipv6, at, &l),
        E::Content(c) => ip_error(Layer::Ipv6, at, c),
    }
}

/// IPv6 extension headers etherparse refused.
#[cold]
#[inline(never)]
fn ipv6_exts_error(at: usize, e: etherparse::err::ipv6_exts::HeaderSliceError) -> Error {
    use etherparse::err::ipv6_exts::HeaderSliceError as E;
    match e {
        E::Len(l) => len_error(Layer::Ipv6, at, &l),
        E::Content(c) => ip_error(Layer::Ipv6, at, c),
    }
}

/// A TCP header etherparse refused.
#[cold]
#[inline(never)]
fn tcp_error(at: usize, e: etherparse::err::tcp::HeaderSliceError) -> Error {
    use etherparse::err::tcp::HeaderSliceError as E;
    match e {
        E::Len(l) => len_error(Layer::Tcp, at, &l),
        E::Content(c) => ip_error(Layer::Tcp, at, c),
    }
}

fn ip_error(layer: Layer, at: usize, e: impl core::fmt::Debug) -> Error {
    // etherparse's errors carry a length or a bad field; keep the first number as `found`.
    let text = format!("{e:?}");
    let found = text
        .split(|c: char| !c.is_ascii_digit())
        .find(|t| !t.is_empty())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    Error::bad_value(
        layer,
        at,
        Field::IpHeader,
        "a valid header (version, header length)",
        found,
    )
}

fn l4_checksum_ok(ip: Option<&IpInfo>, segment: &[u8]) -> bool {
    let Some(ip) = ip else { return false };
    let pseudo = match (ip.src.to_ipv4_mapped(), ip.dst.to_ipv4_mapped()) {
        (Some(s), Some(d)) if ip.version == 4 => {
            checksum::ipv4_pseudo_header_sum(s.octets(), d.octets(), ip.proto, segment.len() as u16)
        }
        _ => checksum::ipv6_pseudo_header_sum(
            ip.src.octets(),
            ip.dst.octets(),
            ip.proto,
            segment.len() as u32,
        ),
    };
    checksum::ones_complement_sum(pseudo, segment) == 0xffff
}

fn probe(cfg: &DetectConfig, data: &[u8]) -> Option<usize> {
    let marker = cfg.probe_marker?;
    let w = data.get(..8)?;
    (u64::from_be_bytes(w.try_into().ok()?) == marker).then_some(8)
}

/// Parses an INT block after TCP/UDP, restores the original flow's fields from it, and records
/// it in `p`.
#[allow(clippy::too_many_arguments)]
fn l4_int<'a>(
    data: &'a [u8],
    encap: Encap,
    cfg: &DetectConfig,
    p: &mut Packet<'a>,
    offset: usize,
    depth: u8,
) -> Result<()> {
    // Decoded where `p` keeps it: moving the 64-byte block in costs measurably.
    let (_, block) = p.int.insert((offset, IntBlock::EMPTY));
    let parsed = match block.parse_in_place(data, encap, LengthSemantics::Spec) {
        Err(e)
            if cfg.truncated
                && e.layer == Layer::IntShim
                && matches!(e.kind, crate::error::ErrorKind::BadLength { .. }) =>
        {
            block.parse_in_place(data, encap, LengthSemantics::Truncated)
        }
        parsed => parsed,
    };
    if let Err(e) = parsed {
        p.int = None;
        return Err(e.shifted(offset));
    }
    if let AnyShim::V2(Shim::TcpUdp(s)) = block.shim
        && s.npt == 2
        && encap == Encap::Udp
    {
        block.encap = Encap::UdpNew;
        // Tolerate producers whose v2 shim Length counts the shim (CableLabs): prefer the
        // reading after which the original L4 header is plausible.
        if !plausible_l4(&data[block.len..], s.ip_proto())
            && let Ok(mut alt) =
                IntBlock::parse_with(data, Encap::UdpNew, LengthSemantics::CountsShim)
            && plausible_l4(&data[alt.len..], s.ip_proto())
        {
            alt.encap = Encap::UdpNew;
            *block = alt;
        }
    }
    adopt(p, data, cfg, depth);
    Ok(())
}

/// Restores the original flow from the INT block just recorded in `p.int` (found at the start
/// of `data`), and follows what comes after the block.
// Inlined with `restore_flow` (whose tunnel paths stay out of line) so the block's fields are
// read where they were just written, not moved through a returned value.
#[inline(always)]
fn adopt<'a>(p: &mut Packet<'a>, data: &'a [u8], cfg: &DetectConfig, depth: u8) {
    let Some((_, block)) = &p.int else {
        return;
    };
    let saved = SavedFlow::of(block);
    let after = &data[block.len..];
    let warnings = block.warnings;
    p.warnings.merge(warnings);
    restore_flow(saved, after, p, cfg, depth);
}

fn plausible_l4(b: &[u8], proto: u8) -> bool {
    match proto {
        6 => {
            b.len() >= 20
                && (5..=15).contains(&(b[12] >> 4))
                && b[0..2] != [0, 0]
                && b[2..4] != [0, 0]
        }
        17 => {
            b.len() >= 8
                && b[2..4] != [0, 0]
                && usize::from(u16::from_be_bytes([b[4], b[5]])) == b.len()
        }
        _ => true,
    }
}

/// What an INT block saved of the original packet's flow.
#[derive(Clone, Copy)]
enum SavedFlow {
    /// NPT=1 shim: the original UDP destination port (INT v2.1 §"INT over TCP/UDP").
    UdpPort(u16),
    /// NPT=0 shim over UDP: the ports are the original ones.
    Unchanged,
    /// NPT=2 shim: the original IP protocol; its L4 header follows the block.
    IpProto(u8),
    /// v0.5 tail: the original destination port.
    TailPort(u16),
    /// Nothing (TCP NPT=0, tunnels, v1.0).
    Nothing,
}

impl SavedFlow {
    fn of(block: &IntBlock<'_>) -> Self {
        match (block.shim, block.header) {
            (AnyShim::V2(Shim::TcpUdp(s)), _) if s.npt == 1 => SavedFlow::UdpPort(s.udp_port()),
            (AnyShim::V2(Shim::TcpUdp(s)), _) if s.npt == 0 => SavedFlow::Unchanged,
            (AnyShim::V2(Shim::TcpUdp(s)), _) if s.npt == 2 => SavedFlow::IpProto(s.ip_proto()),
            (_, IntHeader::V05(_, tail)) => SavedFlow::TailPort(tail.dest_port),
            _ => SavedFlow::Nothing,
        }
    }
}

/// Sets the original flow's fields from what INT saved, and follows what comes after the block.
#[inline(always)]
fn restore_flow<'a>(
    saved: SavedFlow,
    after: &'a [u8],
    p: &mut Packet<'a>,
    cfg: &DetectConfig,
    depth: u8,
) {
    match saved {
        SavedFlow::UdpPort(port) => {
            p.flow_mut().dst_port = port;
            follow_tunnel(after, port, p, cfg, depth);
        }
        SavedFlow::Unchanged if p.flow_mut().proto == 17 => {
            let port = p.flow_mut().dst_port;
            follow_tunnel(after, port, p, cfg, depth)
        }
        SavedFlow::IpProto(proto) => {
            p.flow_mut().proto = proto;
            match proto {
                6 | 17 if after.len() >= 4 => {
                    let flow = p.flow_mut();
                    flow.src_port = u16::from_be_bytes([after[0], after[1]]);
                    flow.dst_port = u16::from_be_bytes([after[2], after[3]]);
                    let port = flow.dst_port;
                    if proto == 17 && after.len() >= 8 {
                        follow_tunnel(&after[8..], port, p, cfg, depth);
                    }
                }
                4 if depth < MAX_DEPTH => {
                    p.inner_flow = innermost(after, Start::Ipv4, cfg, depth, p.unmarked)
                }
                41 if depth < MAX_DEPTH => {
                    p.inner_flow = innermost(after, Start::Ipv6, cfg, depth, p.unmarked)
                }
                _ => {}
            }
        }
        SavedFlow::TailPort(port) => p.flow_mut().dst_port = port,
        SavedFlow::Unchanged | SavedFlow::Nothing => {}
    }
}

/// A GTP-U tunnel's user flow is behind the INT block (SD-Fabric watches those flows).
#[inline]
fn follow_tunnel<'a>(
    payload: &'a [u8],
    dport: u16,
    p: &mut Packet<'a>,
    cfg: &DetectConfig,
    depth: u8,
) {
    if Some(dport) == cfg.gtpu_port && depth < MAX_DEPTH {
        // A malformed tunnel header costs the inner flow only: the INT is what was asked for.
        let _ = gtpu(payload, 0, cfg, p, depth);
    }
}

/// What a tunnel's payload starts with, from its EtherType.
fn ethertype_start(ethertype: u16) -> Option<Start> {
    match ethertype {
        ETHERTYPE_TEB => Some(Start::Ethernet),
        0x0800 => Some(Start::Ipv4),
        0x86dd => Some(Start::Ipv6),
        _ => None,
    }
}

#[inline(never)]
fn innermost(
    bytes: &[u8],
    start: Start,
    cfg: &DetectConfig,
    depth: u8,
    unmarked: bool,
) -> Option<FlowKey> {
    let mut inner = Packet::new(bytes);
    inner.unmarked = unmarked;
    parse_into(&mut inner, bytes, start, cfg, depth + 1).ok()?;
    inner.inner_flow.or(inner.flow)
}

fn vxlan_gpe<'a>(
    data: &'a [u8],
    offset: usize,
    cfg: &DetectConfig,
    p: &mut Packet<'a>,
    depth: u8,
) -> Result<()> {
    let gpe = VxlanPacket::new_checked(data)
        .and_then(|v| VxlanGpeRepr::parse(&v))
        .map_err(|e| e.shifted(offset))?;
    let mut next = gpe.next_protocol;
    let mut at = crate::encap::VXLAN_GPE_LEN;
    let mut blocks = 0;
    // INT v2.1 §"INT over VXLAN GPE" (0x82), or the 2016 specification's §5.3.2 (0x05).
    let int_2016 = |next: u8| cfg.gpe_int_2016 && next == GPE_NEXT_PROTO_INT_2016;
    while next == GPE_NEXT_PROTO_INT || int_2016(next) {
        let block = if next == GPE_NEXT_PROTO_INT {
            IntBlock::parse(&data[at..], Encap::VxlanGpe)
        } else {
            IntBlock::parse_2016(&data[at..])
        }
        .map_err(|e| e.shifted(offset + at))?;
        p.warnings.merge(block.warnings);
        if blocks == 0 {
            p.int = Some((offset + at, block));
        } else if blocks == 1 {
            p.int2 = Some((offset + at, block));
        }
        blocks += 1;
        next = match block.shim {
            AnyShim::V2(Shim::Gpe(s)) => s.next_protocol,
            AnyShim::Legacy(s) => s.last,
            _ => 0,
        };
        at += block.len;
        if blocks > 8 {
            return Err(Error::bad_value(
                Layer::IntShim,
                offset + at,
                Field::NextProtocol,
                "at most 8 stacked INT headers",
                blocks,
            ));
        }
    }
    let start = match next {
        1 => Start::Ipv4,
        2 => Start::Ipv6,
        3 => Start::Ethernet,
        _ => return Ok(()),
    };
    if depth < MAX_DEPTH {
        p.inner_flow = innermost(&data[at..], start, cfg, depth, p.unmarked);
    }
    Ok(())
}

fn geneve<'a>(
    data: &'a [u8],
    offset: usize,
    cfg: &DetectConfig,
    p: &mut Packet<'a>,
    depth: u8,
) -> Result<()> {
    let g = GenevePacket::new_checked(data)
        .and_then(|v| GeneveRepr::parse(&v))
        .map_err(|e| e.shifted(offset))?;
    let mut at = crate::encap::GENEVE_LEN;
    let end = g.total_len();
    while at + 4 <= end {
        let opt = crate::shim::GeneveOption::new_checked(&data[at..end])?.repr();
        let olen = 4 + usize::from(opt.length) * 4;
        if at + olen > end {
            return Err(Error::bad_length(
                Layer::Geneve,
                offset + at + 3,
                Field::OptionLength,
                olen,
                end - at,
            ));
        }
        if opt.option_class == GENEVE_INT_OPTION_CLASS && p.int.is_none() {
            let block = IntBlock::parse(&data[at..at + olen], Encap::Geneve)
                .map_err(|e| e.shifted(offset + at))?;
            p.warnings.merge(block.warnings);
            p.int = Some((offset + at, block));
        }
        at += olen;
    }
    let Some(start) = ethertype_start(g.protocol_type) else {
        return Ok(());
    };
    if depth < MAX_DEPTH {
        p.inner_flow = innermost(&data[end..], start, cfg, depth, p.unmarked);
    }
    Ok(())
}

/// GTP-U's registered UDP port (3GPP TS 29.281 §4.4.2.3).
pub const GTPU_PORT: u16 = 2152;

/// GTP-U (3GPP TS 29.281 §5.1-5.2): a G-PDU carries a user's IP packet in a mobile tunnel; its
/// flow is the one SD-Fabric watches and reports. Header: `Version(3)=1 PT E S PN | Message Type
/// | Length(16) | TEID(32)`, then, when E, S or PN is set, `Sequence(16) N-PDU(8) Next Extension
/// Header Type(8)` and the chain of extension headers (`Length` in 4-byte units, the last byte
/// naming the next). Other message types (echo, error indication) carry no user packet.
#[inline(never)]
fn gtpu<'a>(
    data: &'a [u8],
    offset: usize,
    cfg: &DetectConfig,
    p: &mut Packet<'a>,
    depth: u8,
) -> Result<()> {
    check_len(Layer::GtpU, data, 8).map_err(|e| e.shifted(offset))?;
    let version = data[0] >> 5;
    if version != 1 {
        return Err(Error::bad_value(
            Layer::GtpU,
            offset,
            Field::Version,
            "1 (GTPv1-U)",
            u64::from(version),
        ));
    }
    if data[1] != 0xff {
        return Ok(());
    }
    let declared = 8 + usize::from(u16::from_be_bytes([data[2], data[3]]));
    if declared > data.len() && !cfg.truncated {
        return Err(Error::bad_length(
            Layer::GtpU,
            offset + 2,
            Field::Length,
            declared - 8,
            data.len() - 8,
        ));
    }
    let end = declared.min(data.len());
    let mut at = 8;
    if data[0] & 0x07 != 0 {
        check_len(Layer::GtpU, &data[..end], 12).map_err(|e| e.shifted(offset))?;
        let mut next = data[11];
        at = 12;
        while next != 0 {
            let words = data.get(at).copied().filter(|&n| n > 0).ok_or_else(|| {
                Error::bad_length(
                    Layer::GtpU,
                    offset + at,
                    Field::ExtensionHeaderLength,
                    0,
                    end.saturating_sub(at),
                )
            })?;
            let len = usize::from(words) * 4;
            if at + len > end {
                return Err(Error::bad_length(
                    Layer::GtpU,
                    offset + at,
                    Field::ExtensionHeaderLength,
                    len,
                    end - at,
                ));
            }
            next = data[at + len - 1];
            at += len;
        }
    }
    let inner = &data[at..end];
    let start = match inner.first().map(|b| b >> 4) {
        Some(4) => Start::Ipv4,
        Some(6) => Start::Ipv6,
        _ => return Ok(()),
    };
    if depth < MAX_DEPTH {
        p.inner_flow = innermost(inner, start, cfg, depth, p.unmarked);
    }
    Ok(())
}

fn gre<'a>(
    data: &'a [u8],
    offset: usize,
    cfg: &DetectConfig,
    p: &mut Packet<'a>,
    depth: u8,
) -> Result<()> {
    let g = GrePacket::new_checked(data)
        .and_then(|v| GreRepr::parse(&v))
        .map_err(|e| e.shifted(offset))?;
    let mut at = g.header_len();
    let mut proto = g.protocol_type;
    if Some(proto) == cfg.gre_proto {
        let block = IntBlock::parse(&data[at..], Encap::Gre).map_err(|e| e.shifted(offset + at))?;
        p.warnings.merge(block.warnings);
        p.int = Some((offset + at, block));
        at += block.len;
        proto = match block.shim {
            AnyShim::V2(Shim::Gre(s)) => s.next_protocol,
            _ => 0,
        };
    }
    let Some(start) = ethertype_start(proto) else {
        return Ok(());
    };
    if depth < MAX_DEPTH {
        p.inner_flow = innermost(&data[at..], start, cfg, depth, p.unmarked);
    }
    Ok(())
}

/// Takes INT that carries no marking ([`DetectConfig::unmarked_int`]) only where its bytes leave
/// no room for another reading: a block the spec's own rules describe exactly, every reserved
/// field zero ("Reserved ... set to zero upon transmission", INT v2.1 §"INT over TCP/UDP" and
/// §"INT-MD Metadata Header Format"), lengths that agree to the byte.
#[inline(never)]
fn unmarked<'a>(
    data: &'a [u8],
    encap: Encap,
    offset: usize,
    cfg: &DetectConfig,
    p: &mut Packet<'a>,
    depth: u8,
) {
    let Ok(mut block) = IntBlock::parse(data, encap) else {
        return;
    };
    if !unmarked_exact(&block, &data[block.len..], cfg.domains.as_deref()) {
        return;
    }
    if encap == Encap::Udp
        && let AnyShim::V2(Shim::TcpUdp(s)) = block.shim
        && s.npt == 2
    {
        block.encap = Encap::UdpNew;
    }
    block.warnings.add(Warning::UnmarkedInt);
    p.int = Some((offset, block));
    adopt(p, data, cfg, depth);
}

/// Whether `block` (followed by `after`) is INT by every rule that can be checked without a
/// marking: see [`unmarked`].
fn unmarked_exact(block: &IntBlock<'_>, after: &[u8], domains: Option<&Registry>) -> bool {
    use crate::metadata::RESERVED_BITS;
    let shim_ok = match block.shim {
        // INT v2.1 §"INT over TCP/UDP": NPT 0 keeps a reserved byte, the DSCP and two reserved
        // bits; NPT 1 the original UDP port; NPT 2 a reserved byte and the IP protocol, whose
        // L4 header follows the block; NPT 3 is reserved.
        AnyShim::V2(Shim::TcpUdp(s)) => {
            s.reserved == 0
                && match s.npt {
                    0 => s.content & 0xff03 == 0,
                    1 => s.content != 0,
                    2 => s.content >> 8 == 0 && plausible_l4(after, s.ip_proto()),
                    _ => false,
                }
        }
        // INT v1.0 / v0.5 shim: type 1 (hop-by-hop), a reserved byte.
        AnyShim::Legacy(s) => s.int_type == 1 && s.reserved == 0,
        _ => false,
    };
    if !shim_ok || block.body.is_empty() {
        return false;
    }
    let body = block.body.len();
    match block.header {
        IntHeader::Md(h) => {
            let hop_len = usize::from(h.hop_ml) * 4;
            if h.reserved != 0
                || h.instructions == 0
                || h.instructions & RESERVED_BITS != 0
                || hop_len < Format::IntV2.baseline_len(h.instructions)
            {
                return false;
            }
            if h.ds_id == 0 {
                // The default domain defines no DS bits: each hop is its baseline, nothing else.
                return h.ds_instruction == 0
                    && h.ds_flags == 0
                    && hop_len == Format::IntV2.baseline_len(h.instructions)
                    && body.is_multiple_of(hop_len);
            }
            // A domain's sizes must be known (and fit) for the stack's length to be checked.
            let (stack, w) = block.stack(domains);
            domains.is_some_and(|r| r.get(h.ds_id).is_some())
                && w.is_empty()
                && stack.leftover() == 0
                && stack.hop_count() > 0
        }
        IntHeader::Mx(h) => {
            if h.reserved != 0 || h.instructions == 0 || h.instructions & RESERVED_BITS != 0 {
                return false;
            }
            // INT v2.1 §"INT-MX Header Format": the body is the source-inserted domain metadata.
            domains
                .and_then(|r| r.get(h.ds_id))
                .and_then(|d| d.len_of(h.ds_instruction, crate::domain::Mode::SourceInserted))
                == Some(body)
        }
        IntHeader::V1(h) => {
            let hop_len = usize::from(h.hop_ml) * 4;
            h.version == 1
                && h.rep == 0
                && !h.c
                && h.reserved == 0
                && h.instructions != 0
                // Each instruction is one word, two for the 8-byte timestamps some sinks write.
                && u32::from(h.hop_ml) >= h.instructions.count_ones()
                && u32::from(h.hop_ml) <= 2 * h.instructions.count_ones()
                && body.is_multiple_of(hop_len)
        }
        IntHeader::V05(h, _) => {
            h.rep == 0
                && !h.c
                && h.reserved == 0
                && h.instructions != 0
                && u32::from(h.ins_cnt) == h.instructions.count_ones()
                && h.total_hop_count <= h.max_hop_count
                && !block.warnings.has(Warning::LegacyShimLength)
                && !block.warnings.has(Warning::LegacyHopCount)
        }
        // Only after VXLAN-GPE, never found this way.
        IntHeader::V2016(_) | IntHeader::Opaque => false,
    }
}
