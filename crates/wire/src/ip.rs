//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers as checked views with setters, for nodes that edit
//! packets in place: the length, DSCP and protocol fields and the IPv4 header checksum; and owned
//! Reprs of the headers a node builds (an outer header for GRE), which parse from and emit into
//! the views. (Parsing whole packets is [`crate::locate`]'s, over etherparse.)
//!
//! Panic contract: after `new_checked` (or `new_for_emit`) succeeds no accessor or setter
//! panics; `Repr::emit` writes into a view, which holds `Repr::buffer_len()` bytes.

use crate::checksum::internet_checksum;
use crate::error::{Error, Field, Layer, Result, check_len};
use crate::field::{be16, be32, put16, put32};
use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol numbers (IANA "Assigned Internet Protocol Numbers").
pub mod protocol {
    /// IPv4 encapsulation (IP-in-IP).
    pub const IPV4: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation.
    pub const IPV6: u8 = 41;
    /// GRE (RFC 2784).
    pub const GRE: u8 = 47;
}

/// EtherTypes (IEEE 802 numbers) of the network layers INT travels in.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
}

/// The IPv4 header without options.
pub const IPV4_MIN_LEN: usize = 20;
/// The IPv6 fixed header.
pub const IPV6_LEN: usize = 40;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
    pub const V6_PAYLOAD_LEN: usize = 4;
    pub const V6_NEXT_HEADER: usize = 6;
    pub const V6_HOP_LIMIT: usize = 7;
    pub const V6_SRC: usize = 8;
    pub const V6_DST: usize = 24;
}

/// A checked view of an IPv4 header (its options included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` after checking it holds a version-4 header of a valid IHL.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len(Layer::Ipv4, b, IPV4_MIN_LEN)?;
        if b[field::VER_IHL] >> 4 != 4 {
            let v = u64::from(b[field::VER_IHL] >> 4);
            return Err(Error::bad_value(Layer::Ipv4, 0, Field::Version, "4", v));
        }
        let ihl = usize::from(b[field::VER_IHL] & 0x0f) * 4;
        if ihl < IPV4_MIN_LEN {
            return Err(Error::bad_value(
                Layer::Ipv4,
                0,
                Field::Ihl,
                "5..=15",
                ihl as u64 / 4,
            ));
        }
        check_len(Layer::Ipv4, b, ihl)?;
        Ok(Ipv4Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[field::VER_IHL] & 0x0f) * 4
    }

    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.b()[field::TOS] >> 2
    }

    /// ECN (2 bits).
    pub fn ecn(&self) -> u8 {
        self.b()[field::TOS] & 0x03
    }

    /// Total Length.
    pub fn total_len(&self) -> u16 {
        be16(self.b(), field::TOTAL_LEN)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT)
    }

    /// Flags (3 bits) and Fragment Offset (13 bits).
    pub fn flags_frag(&self) -> u16 {
        be16(self.b(), field::FLAGS_FRAG)
    }

    /// Time to Live.
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }

    /// Source Address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.b(), field::SRC))
    }

    /// Destination Address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.b(), field::DST))
    }

    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }

    /// Header Checksum.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }

    /// Whether the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        internet_checksum(&self.b()[..self.header_len()]) == 0
    }
}

impl Ipv4Packet<&mut [u8]> {
    /// Wraps `buffer` to emit an [`Ipv4Repr`] into: checks it holds a 20-byte header and writes
    /// Version 4 and IHL 5, so the view's invariant holds before the Repr fills it.
    pub fn new_for_emit(buffer: &mut [u8]) -> Result<Ipv4Packet<&mut [u8]>> {
        check_len(Layer::Ipv4, buffer, IPV4_MIN_LEN)?;
        buffer[field::VER_IHL] = 0x45;
        Ok(Ipv4Packet { buffer })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets ECN (the low 2 bits of `v`), keeping the DSCP.
    pub fn set_ecn(&mut self, v: u8) {
        let b = self.m();
        b[field::TOS] = (b[field::TOS] & 0xfc) | (v & 0x03);
    }

    /// Sets Identification.
    pub fn set_ident(&mut self, v: u16) {
        put16(self.m(), field::IDENT, v);
    }

    /// Sets Flags and Fragment Offset.
    pub fn set_flags_frag(&mut self, v: u16) {
        put16(self.m(), field::FLAGS_FRAG, v);
    }

    /// Sets Time to Live.
    pub fn set_ttl(&mut self, v: u8) {
        self.m()[field::TTL] = v;
    }

    /// Sets Source Address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        put32(self.m(), field::SRC, a.to_bits());
    }

    /// Sets Destination Address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        put32(self.m(), field::DST, a.to_bits());
    }

    /// Sets the DSCP (the low 6 bits of `dscp`), keeping ECN (the checksum is left to
    /// [`Self::fill_checksum`]).
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = self.m();
        b[field::TOS] = ((dscp & 0x3f) << 2) | (b[field::TOS] & 0x03);
    }

    /// Sets Total Length.
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.m(), field::TOTAL_LEN, v);
    }

    /// Sets Protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.m()[field::PROTOCOL] = v;
    }

    /// Sets the header length to 20 bytes (IHL 5), for a header whose options were dropped.
    pub fn set_no_options(&mut self) {
        let b = self.m();
        b[field::VER_IHL] = (b[field::VER_IHL] & 0xf0) | 5;
    }

    /// Sets Header Checksum.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.m(), field::CHECKSUM, v);
    }

    /// Recomputes Header Checksum over the header (20–60 bytes: exact and cheap).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let len = self.header_len();
        let c = internet_checksum(&self.b()[..len]);
        self.set_checksum(c);
    }
}

/// A checked view of the IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` after checking it holds a version-6 fixed header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len(Layer::Ipv6, b, IPV6_LEN)?;
        if b[0] >> 4 != 6 {
            return Err(Error::bad_value(
                Layer::Ipv6,
                0,
                Field::Version,
                "6",
                u64::from(b[0] >> 4),
            ));
        }
        Ok(Ipv6Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// DSCP (the Traffic Class's upper 6 bits).
    pub fn dscp(&self) -> u8 {
        let b = self.b();
        (((b[0] & 0x0f) << 4) | (b[1] >> 4)) >> 2
    }

    /// Traffic Class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        ((b[0] & 0x0f) << 4) | (b[1] >> 4)
    }

    /// Flow Label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & 0x000f_ffff
    }

    /// Hop Limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::V6_HOP_LIMIT]
    }

    /// Source Address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[field::V6_SRC..field::V6_SRC + 16]);
        Ipv6Addr::from(a)
    }

    /// Destination Address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[field::V6_DST..field::V6_DST + 16]);
        Ipv6Addr::from(a)
    }

    /// Payload Length.
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), field::V6_PAYLOAD_LEN)
    }

    /// Next Header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[field::V6_NEXT_HEADER]
    }
}

impl Ipv6Packet<&mut [u8]> {
    /// Wraps `buffer` to emit an [`Ipv6Repr`] into: checks it holds the 40-byte fixed header
    /// and writes Version 6, so the view's invariant holds before the Repr fills it.
    pub fn new_for_emit(buffer: &mut [u8]) -> Result<Ipv6Packet<&mut [u8]>> {
        check_len(Layer::Ipv6, buffer, IPV6_LEN)?;
        buffer[0] = (buffer[0] & 0x0f) | 0x60;
        Ok(Ipv6Packet { buffer })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the DSCP (the low 6 bits of `dscp`), keeping ECN.
    pub fn set_dscp(&mut self, dscp: u8) {
        let tc = ((dscp & 0x3f) << 2) | (self.traffic_class() & 0x03);
        self.set_traffic_class(tc);
    }

    /// Sets Traffic Class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.buffer.as_mut();
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
    }

    /// Sets Flow Label (the low 20 bits of `v`).
    pub fn set_flow_label(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[1] = (b[1] & 0xf0) | ((v >> 16) as u8 & 0x0f);
        put16(b, 2, v as u16);
    }

    /// Sets Hop Limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::V6_HOP_LIMIT] = v;
    }

    /// Sets Source Address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::V6_SRC..field::V6_SRC + 16].copy_from_slice(&a.octets());
    }

    /// Sets Destination Address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::V6_DST..field::V6_DST + 16].copy_from_slice(&a.octets());
    }

    /// Sets Payload Length.
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::V6_PAYLOAD_LEN, v);
    }

    /// Sets Next Header of the fixed header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::V6_NEXT_HEADER] = v;
    }
}

/// An IPv4 header without options (RFC 791 §3.1); the checksum is computed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Total Length.
    pub total_len: u16,
    /// Identification.
    pub ident: u16,
    /// Flags (3 bits) and Fragment Offset (13 bits).
    pub flags_frag: u16,
    /// Time to Live.
    pub ttl: u8,
    /// Protocol.
    pub protocol: u8,
    /// Source Address.
    pub src_addr: Ipv4Addr,
    /// Destination Address.
    pub dst_addr: Ipv4Addr,
}

impl Ipv4Repr {
    /// Reads a checked view; its options, if any, are not part of the Repr.
    pub fn parse<T: AsRef<[u8]>>(v: &Ipv4Packet<T>) -> Self {
        Ipv4Repr {
            dscp: v.dscp(),
            ecn: v.ecn(),
            total_len: v.total_len(),
            ident: v.ident(),
            flags_frag: v.flags_frag(),
            ttl: v.ttl(),
            protocol: v.protocol(),
            src_addr: v.src_addr(),
            dst_addr: v.dst_addr(),
        }
    }

    /// Bytes [`Self::emit`] writes: a header without options.
    pub const fn buffer_len(&self) -> usize {
        IPV4_MIN_LEN
    }

    /// Writes the header (IHL 5, DSCP and ECN to their bits) with its checksum into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Ipv4Packet<T>) {
        v.set_no_options();
        v.set_dscp(self.dscp);
        v.set_ecn(self.ecn);
        v.set_total_len(self.total_len);
        v.set_ident(self.ident);
        v.set_flags_frag(self.flags_frag);
        v.set_ttl(self.ttl);
        v.set_protocol(self.protocol);
        v.set_src_addr(self.src_addr);
        v.set_dst_addr(self.dst_addr);
        v.fill_checksum();
    }
}

/// The IPv6 fixed header (RFC 8200 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Traffic Class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow Label (20 bits).
    pub flow_label: u32,
    /// Payload Length.
    pub payload_len: u16,
    /// Next Header.
    pub next_header: u8,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Source Address.
    pub src_addr: Ipv6Addr,
    /// Destination Address.
    pub dst_addr: Ipv6Addr,
}

impl Ipv6Repr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Ipv6Packet<T>) -> Self {
        Ipv6Repr {
            traffic_class: v.traffic_class(),
            flow_label: v.flow_label(),
            payload_len: v.payload_len(),
            next_header: v.next_header(),
            hop_limit: v.hop_limit(),
            src_addr: v.src_addr(),
            dst_addr: v.dst_addr(),
        }
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IPV6_LEN
    }

    /// Writes the fixed header into a view (the Flow Label to its 20 bits).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Ipv6Packet<T>) {
        v.set_traffic_class(self.traffic_class);
        v.set_flow_label(self.flow_label);
        v.set_payload_len(self.payload_len);
        v.set_next_header(self.next_header);
        v.set_hop_limit(self.hop_limit);
        v.set_src_addr(self.src_addr);
        v.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's example header style: 10.0.1.1 → 10.0.3.3, UDP, DSCP 0x17 ECN 1, length 60.
    fn v4() -> [u8; 20] {
        let mut h = [
            0x45, 0x5d, 0x00, 0x3c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 0, 1, 1, 10, 0,
            3, 3,
        ];
        let c = internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    #[test]
    fn ipv4_deconstruct_and_set() {
        let mut b = v4();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(
            (p.header_len(), p.dscp(), p.total_len(), p.protocol()),
            (20, 0x17, 60, 17)
        );
        assert!(p.verify_checksum());
        p.set_dscp(0);
        p.set_total_len(80);
        p.set_protocol(protocol::GRE);
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(&b[..4], &[0x45, 0x01, 0x00, 80], "ECN kept");
        assert_eq!(b[9], 47);
    }

    #[test]
    fn ipv4_bad_headers_are_errors() {
        let b = v4();
        assert!(Ipv4Packet::new_checked(&b[..19]).is_err());
        let mut v6 = b;
        v6[0] = 0x65;
        assert!(Ipv4Packet::new_checked(&v6[..]).is_err());
        let mut ihl = b;
        ihl[0] = 0x46;
        assert!(
            Ipv4Packet::new_checked(&ihl[..]).is_err(),
            "options beyond the buffer"
        );
        ihl[0] = 0x44;
        assert!(Ipv4Packet::new_checked(&ihl[..]).is_err(), "IHL below 5");
    }

    #[test]
    fn ipv6_deconstruct_and_set() {
        let mut b = [0xa5u8; 40];
        b[0] = 0x65; // version 6, traffic class 0x5a
        b[1] = 0xa0;
        b[4..6].copy_from_slice(&[0, 8]);
        b[6] = 17;
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!((p.dscp(), p.payload_len(), p.next_header()), (0x16, 8, 17));
        p.set_dscp(0x17);
        p.set_payload_len(100);
        p.set_next_header(protocol::GRE);
        assert_eq!(
            &b[..8],
            &[0x65, 0xe0, 0xa5, 0xa5, 0, 100, 47, 0xa5],
            "ECN and flow label kept"
        );
        assert!(Ipv6Packet::new_checked(&b[..39]).is_err());
    }
}
