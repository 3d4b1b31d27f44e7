//! The UDP header (RFC 768) as a checked view with setters and an owned Repr that emits into a
//! view, for nodes that rewrite ports and lengths or insert a new UDP header (INT v2.1 §"INT over
//! TCP/UDP", NPT 2).
//!
//! Panic contract: after [`UdpPacket::new_checked`] succeeds no accessor or setter panics;
//! [`UdpRepr::emit`] writes into a checked view, which holds [`UdpRepr::buffer_len`] bytes.

use crate::error::{Layer, Result, check_len};
use crate::field::{be16, put16};

/// Size of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A checked view of a UDP header (and whatever follows it in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buffer` after checking it holds a UDP header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Udp, buffer.as_ref(), UDP_HEADER_LEN)?;
        Ok(UdpPacket { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Source Port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), field::SRC_PORT)
    }

    /// Destination Port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), field::DST_PORT)
    }

    /// Length (header and data).
    pub fn len(&self) -> u16 {
        be16(self.b(), field::LENGTH)
    }

    /// Whether Length says there is not even a header.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) < UDP_HEADER_LEN
    }

    /// Checksum (0: none, over IPv4).
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets Source Port.
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Sets Destination Port.
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Sets Length.
    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets Checksum.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
}

/// A UDP header's fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source Port.
    pub src_port: u16,
    /// Destination Port.
    pub dst_port: u16,
    /// Length.
    pub length: u16,
    /// Checksum.
    pub checksum: u16,
}

impl UdpRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &UdpPacket<T>) -> Self {
        UdpRepr {
            src_port: v.src_port(),
            dst_port: v.dst_port(),
            length: v.len(),
            checksum: v.checksum(),
        }
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        UDP_HEADER_LEN
    }

    /// Writes the header into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut UdpPacket<T>) {
        v.set_src_port(self.src_port);
        v.set_dst_port(self.dst_port);
        v.set_len(self.length);
        v.set_checksum(self.checksum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 8] = [0xc0, 0x01, 0x45, 0x68, 0x00, 0x30, 0x00, 0x00];

    fn repr() -> UdpRepr {
        UdpRepr {
            src_port: 0xc001,
            dst_port: 17768,
            length: 48,
            checksum: 0,
        }
    }

    #[test]
    fn test_deconstruct() {
        let v = UdpPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(UdpRepr::parse(&v), repr());
        assert!(!v.is_empty());
    }

    #[test]
    fn test_emit() {
        let mut b = [0xa5u8; 8];
        repr().emit(&mut UdpPacket::new_checked(&mut b[..]).unwrap());
        assert_eq!(b, BYTES);
        assert!(UdpPacket::new_checked(&b[..7]).is_err());
    }
}
