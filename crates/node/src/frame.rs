//! Editing a frame in place: where its IP and L4 headers are, moving bytes in and out, and
//! keeping the IP length, IPv4 header checksum and UDP length right — through wire's checked
//! views (`ip`, `udp`, `tunnel`), so no field is a bare offset. INT v2.1 §"Checksum Update": L4
//! checksums are updated incrementally so corruption upstream stays detectable.
//!
//! Every function here is called on a frame [`consistent`] accepted, whose headers the views
//! therefore always hold; a view that does not fit leaves the frame as it is.

use intscope_wire::checksum;
use intscope_wire::ip::{Ipv4Packet, Ipv6Packet, protocol};
use intscope_wire::locate::Packet;
use intscope_wire::tunnel::{GENEVE_MAX_OPT_WORDS, GenevePacket, GrePacket};
use intscope_wire::udp::UdpPacket;

/// Where the TCP checksum sits in its header (RFC 9293 §3.1).
const TCP_CHECKSUM_AT: usize = 16;
/// Where the UDP checksum sits in its header (RFC 768).
const UDP_CHECKSUM_AT: usize = 6;

/// Where the layers of a frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the IP header.
    pub ip_at: usize,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Offset of the L4 header.
    pub l4_at: usize,
    /// IP protocol of the L4 header.
    pub proto: u8,
    /// L4 header length.
    pub l4_len: usize,
    /// The IP packet's length as the parse found it declared, before this node's edits.
    pub ip_len: usize,
}

impl Layout {
    /// The layout of a located packet (`None` without IP and TCP/UDP or GRE).
    pub fn of(p: &Packet<'_>) -> Option<Self> {
        let ip = p.ip?;
        let (l4_at, proto, l4_len) = match p.l4 {
            Some(l4) => (l4.offset, l4.proto, l4.header_len),
            // GRE: "L4" is the GRE header; its length is the base 4 bytes (optional fields are
            // read from the frame where they matter, the checksum).
            None if ip.proto == GRE => (ip.offset + ip.header_len, GRE, 4),
            None => return None,
        };
        Some(Layout {
            ip_at: ip.offset,
            v6: ip.version == 6,
            l4_at,
            proto,
            l4_len,
            ip_len: ip.declared_len,
        })
    }

    /// TCP or UDP (INT after the L4 header is possible).
    pub fn is_tcp_udp(&self) -> bool {
        matches!(self.proto, protocol::TCP | protocol::UDP)
    }

    /// UDP.
    pub fn is_udp(&self) -> bool {
        self.proto == protocol::UDP
    }

    /// Offset of the L4 checksum field.
    pub fn l4_checksum_at(&self) -> usize {
        self.l4_at
            + if self.proto == protocol::TCP {
                TCP_CHECKSUM_AT
            } else {
                UDP_CHECKSUM_AT
            }
    }
}

/// The IP packet's length as its header declares it.
pub fn ip_packet_len(frame: &[u8], l: &Layout) -> Option<usize> {
    let ip = frame.get(l.ip_at..)?;
    if l.v6 {
        let p = Ipv6Packet::new_checked(ip).ok()?;
        Some(intscope_wire::ip::IPV6_LEN + usize::from(p.payload_len()))
    } else {
        Some(usize::from(Ipv4Packet::new_checked(ip).ok()?.total_len()))
    }
}

/// Whether the lengths the headers declare agree with each other and the frame: the IP packet,
/// ending at `ip_end` as its header declares, within the frame (Ethernet padding may follow),
/// the L4 header within the IP packet, a UDP length equal to what the IP packet holds. The node
/// edits only such packets, so no length field it updates can wrap.
pub fn consistent(frame: &[u8], l: &Layout, ip_end: usize) -> bool {
    ip_end <= frame.len()
        && l.l4_at + l.l4_len <= ip_end
        && (!l.is_udp() || udp_len(frame, l).map(usize::from) == Some(ip_end - l.l4_at))
}

fn udp_len(frame: &[u8], l: &Layout) -> Option<u16> {
    Some(UdpPacket::new_checked(frame.get(l.l4_at..)?).ok()?.len())
}

/// The UDP destination port of a UDP packet.
pub fn udp_dst_port(frame: &[u8], l: &Layout) -> Option<u16> {
    if !l.is_udp() {
        return None;
    }
    Some(
        UdpPacket::new_checked(frame.get(l.l4_at..)?)
            .ok()?
            .dst_port(),
    )
}

fn udp_view<'a>(frame: &'a mut [u8], l: &Layout) -> Option<UdpPacket<&'a mut [u8]>> {
    UdpPacket::new_checked(frame.get_mut(l.l4_at..)?).ok()
}

/// Sets the UDP length.
pub fn set_udp_len(frame: &mut [u8], l: &Layout, v: u16) {
    if let Some(mut u) = udp_view(frame, l) {
        u.set_len(v);
    }
}

/// Writes the UDP destination port field alone (the caller accounts for it in the checksum).
pub fn put_udp_dst_port(frame: &mut [u8], l: &Layout, port: u16) {
    if let Some(mut u) = udp_view(frame, l) {
        u.set_dst_port(port);
    }
}

/// Sets the UDP destination port, keeping a non-zero UDP checksum right (RFC 1624).
pub fn set_udp_dst_port(frame: &mut [u8], l: &Layout, port: u16) {
    let Some(mut u) = udp_view(frame, l) else {
        return;
    };
    let (old, csum) = (u.dst_port(), u.checksum());
    u.set_dst_port(port);
    if csum != 0 {
        let c = checksum::update(csum, &old.to_be_bytes(), &port.to_be_bytes());
        u.set_checksum(checksum::udp_wire_checksum(c));
    }
}

/// The L4 (TCP or UDP) checksum.
pub fn l4_checksum(frame: &[u8], l: &Layout) -> u16 {
    let at = l.l4_checksum_at();
    frame
        .get(at..at + 2)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// Sets the L4 (TCP or UDP) checksum.
pub fn set_l4_checksum(frame: &mut [u8], l: &Layout, v: u16) {
    let at = l.l4_checksum_at();
    if let Some(b) = frame.get_mut(at..at + 2) {
        b.copy_from_slice(&v.to_be_bytes());
    }
}

/// Inserts `bytes` at `at`, inside a UDP datagram's payload (`l` is its layout), keeping the UDP
/// length, a non-zero UDP checksum (RFC 1624) and the IP length right.
pub fn udp_insert(frame: &mut Vec<u8>, l: &Layout, at: usize, bytes: &[u8]) {
    udp_resize(frame, l, &[], bytes);
    insert(frame, at, bytes);
}

/// Removes `len` bytes at `at` from a UDP datagram's payload, keeping lengths and checksum right.
pub fn udp_remove(frame: &mut Vec<u8>, l: &Layout, at: usize, len: usize) {
    let removed = frame[at..at + len].to_vec();
    udp_resize(frame, l, &removed, &[]);
    frame.drain(at..at + len);
}

/// Overwrites bytes at `at` (an even offset in a UDP datagram, header or payload) with `new` of
/// the same length, keeping a non-zero UDP checksum right.
pub fn udp_overwrite(frame: &mut [u8], l: &Layout, at: usize, new: &[u8]) {
    let csum = l4_checksum(frame, l);
    if csum != 0 {
        let c = checksum::update(csum, &frame[at..at + new.len()], new);
        set_l4_checksum(frame, l, checksum::udp_wire_checksum(c));
    }
    frame[at..at + new.len()].copy_from_slice(new);
}

/// Overwrites bytes at `at` (an even offset from the L4 header) inside the packet's TCP, UDP or
/// GRE part with `new` of the same length, keeping the TCP checksum, a non-zero UDP checksum or a
/// GRE checksum right.
pub fn payload_overwrite(frame: &mut [u8], l: &Layout, at: usize, new: &[u8]) {
    match l.proto {
        protocol::UDP => udp_overwrite(frame, l, at, new),
        protocol::TCP => {
            let c = checksum::update(l4_checksum(frame, l), &frame[at..at + new.len()], new);
            set_l4_checksum(frame, l, c);
            frame[at..at + new.len()].copy_from_slice(new);
        }
        _ => {
            frame[at..at + new.len()].copy_from_slice(new);
            refresh_gre_checksum(frame, l);
        }
    }
}

/// The UDP length, checksum and IP length for `old` bytes of the payload becoming `new`.
fn udp_resize(frame: &mut [u8], l: &Layout, old: &[u8], new: &[u8]) {
    let old_len = l4_len(frame, l);
    let new_len = (usize::from(old_len) + new.len() - old.len()) as u16;
    let c = updated_l4_checksum(
        l4_checksum(frame, l),
        true,
        old,
        new,
        old_len,
        new_len,
        true,
    );
    set_l4_checksum(frame, l, c);
    set_udp_len(frame, l, new_len);
    adjust_ip_len(frame, l, new.len() as isize - old.len() as isize);
}

/// IP protocol number of GRE.
pub const GRE: u8 = protocol::GRE;

/// After `delta` bytes were inserted (or removed) inside the IP payload: the IP length, and for
/// a GRE packet its checksum, which covers the payload. One call for every INT edit behind IP.
pub fn payload_resized(frame: &mut [u8], l: &Layout, delta: isize) {
    adjust_ip_len(frame, l, delta);
    refresh_gre_checksum(frame, l);
}

/// Recomputes the GRE checksum (RFC 2784: over the GRE header and payload, to the end of the IP
/// packet) when the header carries one (C bit); INT bytes inserted or removed behind GRE change
/// what it covers.
fn refresh_gre_checksum(frame: &mut [u8], l: &Layout) {
    if l.proto != GRE {
        return;
    }
    let end = ip_packet_len(frame, l).map_or(frame.len(), |n| (l.ip_at + n).min(frame.len()));
    if let Some(mut g) = frame
        .get_mut(l.l4_at..end)
        .and_then(|b| GrePacket::new_checked(b).ok())
    {
        g.fill_checksum();
    }
}

/// Adds `delta_words` to the Geneve header's Opt Len (RFC 8926 §3.4: 6 bits of 4-byte words, the
/// header 8 bytes into the UDP payload), keeping a non-zero UDP checksum right. `false` when the
/// result does not fit the field.
pub fn adjust_geneve_opt_len(frame: &mut [u8], l: &Layout, delta_words: isize) -> bool {
    let at = l.l4_at + intscope_wire::udp::UDP_HEADER_LEN;
    let Some(old) = frame.get(at..at + 2).map(|b| [b[0], b[1]]) else {
        return false;
    };
    let Some(words) = GenevePacket::new_checked(&frame[at..])
        .ok()
        .map(|g| g.opt_len_words() as isize + delta_words)
        .and_then(|w| u8::try_from(w).ok())
        .filter(|w| *w <= GENEVE_MAX_OPT_WORDS)
    else {
        return false;
    };
    // Opt Len is the first byte's low 6 bits; the Version bits stay.
    let new = [(old[0] & !GENEVE_MAX_OPT_WORDS) | words, old[1]];
    udp_overwrite(frame, l, at, &new);
    true
}

/// Inserts `bytes` at `at`.
pub fn insert(frame: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let tail = frame.len();
    frame.resize(tail + bytes.len(), 0);
    frame.copy_within(at..tail, at + bytes.len());
    frame[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Removes `len` bytes at `at`, returning them.
pub fn remove(frame: &mut Vec<u8>, at: usize, len: usize) -> Vec<u8> {
    frame.drain(at..at + len).collect()
}

/// Adds `delta` to the IP length (IPv4 total length, header checksum updated as RFC 1624 says so
/// an error upstream stays detectable; IPv6 payload length).
pub fn adjust_ip_len(frame: &mut [u8], l: &Layout, delta: isize) {
    let Some(ip) = frame.get_mut(l.ip_at..) else {
        return;
    };
    if l.v6 {
        if let Ok(mut p) = Ipv6Packet::new_checked(ip) {
            let v = p.payload_len();
            p.set_payload_len((v as isize + delta) as u16);
        }
    } else if let Ok(mut p) = Ipv4Packet::new_checked(ip) {
        let old = p.total_len();
        let new = (old as isize + delta) as u16;
        p.set_total_len(new);
        let c = checksum::update(p.checksum(), &old.to_be_bytes(), &new.to_be_bytes());
        p.set_checksum(c);
    }
}

/// Recomputes the IPv4 header checksum (20..60 bytes: full recomputation is exact and cheap).
pub fn refresh_ipv4_checksum(frame: &mut [u8], ip_at: usize) {
    if let Some(mut p) = frame
        .get_mut(ip_at..)
        .and_then(|b| Ipv4Packet::new_checked(b).ok())
    {
        p.fill_checksum();
    }
}

/// Sets the IP DSCP, keeping ECN.
pub fn set_dscp(frame: &mut [u8], l: &Layout, dscp: u8) {
    set_dscp_at(frame, l.ip_at, l.v6, dscp);
}

/// Sets the DSCP of the IP header at `ip_at` (IPv6 when `v6`), keeping ECN and the IPv4 header
/// checksum right.
pub fn set_dscp_at(frame: &mut [u8], ip_at: usize, v6: bool, dscp: u8) {
    let Some(ip) = frame.get_mut(ip_at..) else {
        return;
    };
    if v6 {
        if let Ok(mut p) = Ipv6Packet::new_checked(ip) {
            p.set_dscp(dscp);
        }
    } else if let Ok(mut p) = Ipv4Packet::new_checked(ip) {
        p.set_dscp(dscp);
        p.fill_checksum();
    }
}

/// The IP DSCP.
pub fn dscp(frame: &[u8], l: &Layout) -> u8 {
    let ip = frame.get(l.ip_at..).unwrap_or_default();
    if l.v6 {
        Ipv6Packet::new_checked(ip).map_or(0, |p| p.dscp())
    } else {
        Ipv4Packet::new_checked(ip).map_or(0, |p| p.dscp())
    }
}

/// Sets the IP protocol (IPv4 protocol or IPv6 next header of the fixed header).
pub fn set_ip_proto(frame: &mut [u8], l: &Layout, proto: u8) {
    let Some(ip) = frame.get_mut(l.ip_at..) else {
        return;
    };
    if l.v6 {
        if let Ok(mut p) = Ipv6Packet::new_checked(ip) {
            p.set_next_header(proto);
        }
    } else if let Ok(mut p) = Ipv4Packet::new_checked(ip) {
        p.set_protocol(proto);
        p.fill_checksum();
    }
}

/// Sets the GRE header's Protocol Type (its checksum is refreshed by [`payload_resized`]).
pub fn set_gre_protocol(frame: &mut [u8], l: &Layout, v: u16) {
    if let Some(mut g) = frame
        .get_mut(l.l4_at..)
        .and_then(|b| GrePacket::new_checked(b).ok())
    {
        g.set_protocol(v);
    }
}

/// The GRE header's length with its optional fields.
pub fn gre_header_len(frame: &[u8], l: &Layout) -> Option<usize> {
    Some(
        GrePacket::new_checked(frame.get(l.l4_at..)?)
            .ok()?
            .header_len(),
    )
}

/// The GRE header's Protocol Type.
pub fn gre_protocol(frame: &[u8], l: &Layout) -> Option<u16> {
    Some(
        GrePacket::new_checked(frame.get(l.l4_at..)?)
            .ok()?
            .protocol(),
    )
}

/// Sets the EtherType in front of the IP header (what follows the Ethernet or VLAN header).
pub fn set_ethertype(frame: &mut [u8], l: &Layout, ethertype: u16) {
    if let Some(b) = l
        .ip_at
        .checked_sub(2)
        .and_then(|at| frame.get_mut(at..l.ip_at))
    {
        b.copy_from_slice(&ethertype.to_be_bytes());
    }
}

/// The L4 checksum after the covered region `old` became `new` and the L4 length went from
/// `old_len` to `new_len` (the UDP length field, when `udp_len_field`, and the pseudo header).
/// Zero UDP checksums stay zero; a computed UDP zero is sent as 0xFFFF (RFC 768).
pub fn updated_l4_checksum(
    csum: u16,
    udp: bool,
    old: &[u8],
    new: &[u8],
    old_len: u16,
    new_len: u16,
    udp_len_field: bool,
) -> u16 {
    if udp && csum == 0 {
        return 0;
    }
    let mut c = checksum::replace(csum, old, new);
    let (o, n) = (old_len.to_be_bytes(), new_len.to_be_bytes());
    c = checksum::update(c, &o, &n);
    if udp_len_field {
        c = checksum::update(c, &o, &n);
    }
    if udp {
        checksum::udp_wire_checksum(c)
    } else {
        c
    }
}

/// The L4 segment length (UDP length field, or IP payload length minus earlier headers for TCP).
pub fn l4_len(frame: &[u8], l: &Layout) -> u16 {
    if l.is_udp() {
        return udp_len(frame, l).unwrap_or(0);
    }
    ip_packet_len(frame, l).map_or(0, |n| (l.ip_at + n).saturating_sub(l.l4_at) as u16)
}

/// The sum of the TCP or UDP pseudo-header of a [`consistent`] frame's segment.
fn pseudo_header_sum(frame: &[u8], l: &Layout, seg_len: usize) -> Option<u32> {
    let addr = |at: usize, len: usize| frame.get(l.ip_at + at..l.ip_at + at + len);
    Some(if l.v6 {
        checksum::ipv6_pseudo_header_sum(
            addr(8, 16)?.try_into().ok()?,
            addr(24, 16)?.try_into().ok()?,
            l.proto,
            u32::try_from(seg_len).ok()?,
        )
    } else {
        checksum::ipv4_pseudo_header_sum(
            addr(12, 4)?.try_into().ok()?,
            addr(16, 4)?.try_into().ok()?,
            l.proto,
            u16::try_from(seg_len).ok()?,
        )
    })
}

/// Whether a TCP or UDP frame's checksum verifies over its segment and pseudo-header (RFC 9293
/// §3.1, RFC 768, RFC 8200 §8.1); `None` for other frames, frames [`consistent`] refuses, and
/// IPv4 UDP without a checksum (0).
pub fn l4_checksum_verifies(frame: &[u8], l: &Layout, ip_end: usize) -> Option<bool> {
    if !l.is_tcp_udp() || !consistent(frame, l, ip_end) {
        return None;
    }
    if l.is_udp() && !l.v6 && l4_checksum(frame, l) == 0 {
        return None;
    }
    let pseudo = pseudo_header_sum(frame, l, ip_end - l.l4_at)?;
    Some(checksum::l4_checksum(pseudo, &frame[l.l4_at..ip_end]) == 0)
}

/// Completes the TCP or UDP checksum of a frame whose checksum does not verify; `true` when it
/// wrote one. For frames captured from a sender that left the checksum to its NIC (Linux
/// `CHECKSUM_PARTIAL`, e.g. a veth with tx checksum offload on): as captured, the field holds
/// only the pseudo-header's sum, and forwarded as it is the frame is dropped by its receiver.
pub fn finish_l4_checksum(frame: &mut [u8], l: &Layout, ip_end: usize) -> bool {
    if l4_checksum_verifies(frame, l, ip_end) != Some(false) {
        return false;
    }
    let Some(pseudo) = pseudo_header_sum(frame, l, ip_end - l.l4_at) else {
        return false;
    };
    set_l4_checksum(frame, l, 0);
    let sum = checksum::l4_checksum(pseudo, &frame[l.l4_at..ip_end]);
    let sum = if l.is_udp() {
        checksum::udp_wire_checksum(sum)
    } else {
        sum
    };
    set_l4_checksum(frame, l, sum);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use intscope_wire::locate::{DetectConfig, Start};

    fn layout(frame: &[u8]) -> (Layout, usize) {
        let p = Packet::parse(frame, Start::Ethernet, &DetectConfig::default()).unwrap();
        let ip = p.ip.unwrap();
        (Layout::of(&p).unwrap(), ip.offset + ip.declared_len)
    }

    /// A sender with checksum offload leaves the pseudo-header's sum in the field.
    fn partial(frame: &mut [u8]) {
        let (l, ip_end) = layout(frame);
        let pseudo = if l.v6 {
            checksum::ipv6_pseudo_header_sum(
                frame[l.ip_at + 8..l.ip_at + 24].try_into().unwrap(),
                frame[l.ip_at + 24..l.ip_at + 40].try_into().unwrap(),
                l.proto,
                (ip_end - l.l4_at) as u32,
            )
        } else {
            checksum::ipv4_pseudo_header_sum(
                frame[l.ip_at + 12..l.ip_at + 16].try_into().unwrap(),
                frame[l.ip_at + 16..l.ip_at + 20].try_into().unwrap(),
                l.proto,
                (ip_end - l.l4_at) as u16,
            )
        };
        set_l4_checksum(frame, &l, pseudo as u16);
    }

    #[test]
    fn partial_checksums_are_finished_and_good_ones_left_alone() {
        let b = || PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let mut frames = Vec::new();
        let mut f = Vec::new();
        b().ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 7, 1000)
            .write(&mut f, b"hello, world")
            .unwrap();
        frames.push(f);
        let mut f = Vec::new();
        b().ipv6([1; 16], [2; 16], 64)
            .udp(40000, 53)
            .write(&mut f, b"query")
            .unwrap();
        frames.push(f);
        for good in frames {
            let mut f = good.clone();
            let (l, ip_end) = layout(&f);
            assert!(
                !finish_l4_checksum(&mut f, &l, ip_end),
                "a good checksum stays"
            );
            assert_eq!(l4_checksum_verifies(&f, &l, ip_end), Some(true));
            partial(&mut f);
            assert_eq!(l4_checksum_verifies(&f, &l, ip_end), Some(false));
            assert_ne!(f, good);
            assert!(finish_l4_checksum(&mut f, &l, ip_end));
            assert_eq!(f, good, "finished as the sender's NIC would have");
        }
    }
}
