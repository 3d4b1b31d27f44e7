//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers as checked views with setters, for nodes that edit
//! packets in place: the length, DSCP and protocol fields and the IPv4 header checksum.
//! (Parsing whole packets is [`crate::locate`]'s, over etherparse.)
//!
//! Panic contract: after `new_checked` succeeds no accessor or setter panics.

use crate::checksum::internet_checksum;
use crate::error::{Error, Layer, Result, check_len};
use crate::field::{be16, put16};

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
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const V6_PAYLOAD_LEN: usize = 4;
    pub const V6_NEXT_HEADER: usize = 6;
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
            return Err(Error::bad_value(Layer::Ipv4, 0, "Version", "4", v));
        }
        let ihl = usize::from(b[field::VER_IHL] & 0x0f) * 4;
        if ihl < IPV4_MIN_LEN {
            return Err(Error::bad_value(
                Layer::Ipv4,
                0,
                "IHL",
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

    /// Total Length.
    pub fn total_len(&self) -> u16 {
        be16(self.b(), field::TOTAL_LEN)
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

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the DSCP, keeping ECN (the checksum is left to [`Self::fill_checksum`]).
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = self.m();
        b[field::TOS] = (dscp << 2) | (b[field::TOS] & 0x03);
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
                "Version",
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

    /// Payload Length.
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), field::V6_PAYLOAD_LEN)
    }

    /// Next Header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[field::V6_NEXT_HEADER]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the DSCP, keeping ECN.
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = self.buffer.as_mut();
        let tc = ((b[0] & 0x0f) << 4) | (b[1] >> 4);
        let tc = (dscp << 2) | (tc & 0x03);
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
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
