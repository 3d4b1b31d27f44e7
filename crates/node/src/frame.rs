//! Editing a frame in place: where its IP and L4 headers are, moving bytes in and out, and
//! keeping the IP length, IPv4 header checksum and UDP length right. INT v2.1 §"Checksum
//! Update": L4 checksums are updated incrementally so corruption upstream stays detectable.

use intscope_wire::checksum;
use intscope_wire::locate::Packet;

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
        })
    }

    /// TCP or UDP (INT after the L4 header is possible).
    pub fn is_tcp_udp(&self) -> bool {
        matches!(self.proto, 6 | 17)
    }

    /// Offset of the L4 checksum field.
    pub fn l4_checksum_at(&self) -> usize {
        self.l4_at + if self.proto == 6 { 16 } else { 6 }
    }
}

/// Whether the lengths the headers declare agree with each other and the frame: the IP packet
/// within the frame (Ethernet padding may follow), the L4 header within the IP packet, a UDP
/// length equal to what the IP packet holds. The node edits only such packets, so no length
/// field it updates can wrap.
pub fn consistent(frame: &[u8], l: &Layout) -> bool {
    let Some(ip_len) = (if l.v6 {
        frame
            .get(l.ip_at + 4..l.ip_at + 6)
            .map(|b| 40 + usize::from(u16::from_be_bytes([b[0], b[1]])))
    } else {
        frame
            .get(l.ip_at + 2..l.ip_at + 4)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }) else {
        return false;
    };
    let ip_end = l.ip_at + ip_len;
    ip_end <= frame.len()
        && l.l4_at + l.l4_len <= ip_end
        && (l.proto != 17 || usize::from(be16(frame, l.l4_at + 4)) == ip_end - l.l4_at)
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
    let csum_at = l.l4_checksum_at();
    let csum = be16(frame, csum_at);
    if csum != 0 {
        let c = checksum::update(csum, &frame[at..at + new.len()], new);
        put16(frame, csum_at, checksum::udp_wire_checksum(c));
    }
    frame[at..at + new.len()].copy_from_slice(new);
}

/// Overwrites bytes at `at` (an even offset from the L4 header) inside the packet's TCP, UDP or
/// GRE part with `new` of the same length, keeping the TCP checksum, a non-zero UDP checksum or a
/// GRE checksum right.
pub fn payload_overwrite(frame: &mut [u8], l: &Layout, at: usize, new: &[u8]) {
    match l.proto {
        17 => udp_overwrite(frame, l, at, new),
        6 => {
            let csum_at = l.l4_checksum_at();
            let c = checksum::update(be16(frame, csum_at), &frame[at..at + new.len()], new);
            put16(frame, csum_at, c);
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
    let csum_at = l.l4_checksum_at();
    let c = updated_l4_checksum(be16(frame, csum_at), true, old, new, old_len, new_len, true);
    put16(frame, csum_at, c);
    put16(frame, l.l4_at + 4, new_len);
    adjust_ip_len(frame, l, new.len() as isize - old.len() as isize);
}

/// IP protocol number of GRE.
pub const GRE: u8 = 47;

/// After `delta` bytes were inserted (or removed) inside the IP payload: the IP length, and for
/// a GRE packet its checksum, which covers the payload. One call for every INT edit behind IP.
pub fn payload_resized(frame: &mut [u8], l: &Layout, delta: isize) {
    adjust_ip_len(frame, l, delta);
    refresh_gre_checksum(frame, l);
}

/// Recomputes the GRE checksum (RFC 2784: over the GRE header and payload) when the header
/// carries one (C bit); INT bytes inserted or removed behind GRE change what it covers.
fn refresh_gre_checksum(frame: &mut [u8], l: &Layout) {
    if l.proto != GRE || frame.get(l.l4_at).is_none_or(|f| f & 0x80 == 0) {
        return;
    }
    put16(frame, l.l4_at + 4, 0);
    let c = checksum::internet_checksum(&frame[l.l4_at..]);
    put16(frame, l.l4_at + 4, c);
}

/// Adds `delta_words` to the Geneve header's Opt Len (RFC 8926 §3.4: 6 bits of 4-byte words, the
/// header 8 bytes into the UDP payload), keeping a non-zero UDP checksum right. `false` when the
/// result does not fit the field.
pub fn adjust_geneve_opt_len(frame: &mut [u8], l: &Layout, delta_words: isize) -> bool {
    let at = l.l4_at + 8;
    let len = (frame[at] & 0x3f) as isize + delta_words;
    if !(0..=0x3f).contains(&len) {
        return false;
    }
    let new = [(frame[at] & 0xc0) | len as u8, frame[at + 1]];
    udp_overwrite(frame, l, at, &new);
    true
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

fn put16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
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
    if l.v6 {
        let v = be16(frame, l.ip_at + 4);
        put16(frame, l.ip_at + 4, (v as isize + delta) as u16);
    } else {
        let old = be16(frame, l.ip_at + 2);
        let new = (old as isize + delta) as u16;
        put16(frame, l.ip_at + 2, new);
        let c = checksum::update(
            be16(frame, l.ip_at + 10),
            &old.to_be_bytes(),
            &new.to_be_bytes(),
        );
        put16(frame, l.ip_at + 10, c);
    }
}

/// Recomputes the IPv4 header checksum (20..60 bytes: full recomputation is exact and cheap).
pub fn refresh_ipv4_checksum(frame: &mut [u8], ip_at: usize) {
    let ihl = usize::from(frame[ip_at] & 0x0f) * 4;
    put16(frame, ip_at + 10, 0);
    let c = checksum::internet_checksum(&frame[ip_at..ip_at + ihl]);
    put16(frame, ip_at + 10, c);
}

/// Sets the IP DSCP, keeping ECN.
pub fn set_dscp(frame: &mut [u8], l: &Layout, dscp: u8) {
    set_dscp_at(frame, l.ip_at, l.v6, dscp);
}

/// Sets the DSCP of the IP header at `ip_at` (IPv6 when `v6`), keeping ECN and the IPv4 header
/// checksum right.
pub fn set_dscp_at(frame: &mut [u8], ip_at: usize, v6: bool, dscp: u8) {
    if v6 {
        let tc = ((frame[ip_at] & 0x0f) << 4) | (frame[ip_at + 1] >> 4);
        let tc = (dscp << 2) | (tc & 3);
        frame[ip_at] = (frame[ip_at] & 0xf0) | (tc >> 4);
        frame[ip_at + 1] = (frame[ip_at + 1] & 0x0f) | (tc << 4);
    } else {
        frame[ip_at + 1] = (dscp << 2) | (frame[ip_at + 1] & 3);
        refresh_ipv4_checksum(frame, ip_at);
    }
}

/// The IP DSCP.
pub fn dscp(frame: &[u8], l: &Layout) -> u8 {
    if l.v6 {
        (((frame[l.ip_at] & 0x0f) << 4) | (frame[l.ip_at + 1] >> 4)) >> 2
    } else {
        frame[l.ip_at + 1] >> 2
    }
}

/// Sets the IP protocol (IPv4 protocol or IPv6 next header of the fixed header).
pub fn set_ip_proto(frame: &mut [u8], l: &Layout, proto: u8) {
    if l.v6 {
        frame[l.ip_at + 6] = proto;
    } else {
        frame[l.ip_at + 9] = proto;
        refresh_ipv4_checksum(frame, l.ip_at);
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
    if l.proto == 17 {
        be16(frame, l.l4_at + 4)
    } else if l.v6 {
        (usize::from(be16(frame, l.ip_at + 4)) + l.ip_at + 40 - l.l4_at) as u16
    } else {
        (usize::from(be16(frame, l.ip_at + 2)) + l.ip_at - l.l4_at) as u16
    }
}

/// Reads a 16-bit field.
pub fn get16(frame: &[u8], at: usize) -> u16 {
    be16(frame, at)
}

/// Writes a 16-bit field.
pub fn set16(frame: &mut [u8], at: usize, v: u16) {
    put16(frame, at, v);
}
