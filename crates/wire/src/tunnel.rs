//! Tunnel headers INT rides in, as checked views with setters for nodes that edit them in place:
//! GRE (RFC 2784 / RFC 2890), Geneve (RFC 8926) and VXLAN / VXLAN-GPE (RFC 7348,
//! draft-ietf-nvo3-vxlan-gpe). [`crate::encap`] holds their owned Reprs for decoding.
//!
//! Panic contract: after `new_checked` succeeds no accessor or setter panics; a setter whose
//! value does not fit its field returns an error and writes nothing.

use crate::checksum::internet_checksum;
use crate::error::{Error, Layer, Result, check_len};
use crate::field::{be16, put16};

/// GRE flag bits (first byte).
mod gre_flags {
    pub const C: u8 = 0x80;
    pub const K: u8 = 0x20;
    pub const S: u8 = 0x10;
}

/// A checked view of a GRE header and the payload after it (the whole buffer is what the GRE
/// checksum covers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// The GRE base header.
pub const GRE_BASE_LEN: usize = 4;

impl<T: AsRef<[u8]>> GrePacket<T> {
    /// Wraps `buffer` after checking it holds the header with its optional fields.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Gre, buffer.as_ref(), GRE_BASE_LEN)?;
        let p = GrePacket { buffer };
        check_len(Layer::Gre, p.buffer.as_ref(), p.header_len())?;
        Ok(p)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// C: the checksum field is present.
    pub fn checksum_present(&self) -> bool {
        self.b()[0] & gre_flags::C != 0
    }

    /// Header length: 4 bytes and 4 more for each of checksum, key and sequence number present.
    pub fn header_len(&self) -> usize {
        let f = self.b()[0];
        GRE_BASE_LEN
            + 4 * (usize::from(f & gre_flags::C != 0)
                + usize::from(f & gre_flags::K != 0)
                + usize::from(f & gre_flags::S != 0))
    }

    /// Protocol Type (an EtherType).
    pub fn protocol(&self) -> u16 {
        be16(self.b(), 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GrePacket<T> {
    /// Sets Protocol Type.
    pub fn set_protocol(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    /// Recomputes the checksum over header and payload when the header carries one (RFC 2784
    /// §2.5); nothing otherwise.
    pub fn fill_checksum(&mut self) {
        if !self.checksum_present() {
            return;
        }
        put16(self.buffer.as_mut(), 4, 0);
        let c = internet_checksum(self.b());
        put16(self.buffer.as_mut(), 4, c);
    }
}

/// The Geneve base header (RFC 8926 §3.4).
pub const GENEVE_BASE_LEN: usize = 8;
/// The largest Opt Len: 6 bits of 4-byte words.
pub const GENEVE_MAX_OPT_WORDS: u8 = 0x3f;

/// A checked view of a Geneve header with its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenevePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GenevePacket<T> {
    /// Wraps `buffer` after checking it holds the base header and the options Opt Len counts.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Geneve, buffer.as_ref(), GENEVE_BASE_LEN)?;
        let p = GenevePacket { buffer };
        check_len(Layer::Geneve, p.buffer.as_ref(), p.header_len())?;
        Ok(p)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Opt Len: the options' length in 4-byte words.
    pub fn opt_len_words(&self) -> u8 {
        self.b()[0] & GENEVE_MAX_OPT_WORDS
    }

    /// Header length: base header and options (where the next option would go).
    pub fn header_len(&self) -> usize {
        GENEVE_BASE_LEN + usize::from(self.opt_len_words()) * 4
    }

    /// Protocol Type (an EtherType).
    pub fn protocol(&self) -> u16 {
        be16(self.b(), 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GenevePacket<T> {
    /// Sets Opt Len (the Version bits kept); an error beyond 6 bits.
    pub fn set_opt_len_words(&mut self, words: u8) -> Result<()> {
        if words > GENEVE_MAX_OPT_WORDS {
            return Err(Error::bad_value(
                Layer::Geneve,
                0,
                "Opt Len",
                "0..=63",
                u64::from(words),
            ));
        }
        let b = self.buffer.as_mut();
        b[0] = (b[0] & !GENEVE_MAX_OPT_WORDS) | words;
        Ok(())
    }
}

/// The VXLAN and VXLAN-GPE header.
pub const VXLAN_LEN: usize = 8;

mod vxlan_flags {
    /// P: a Next Protocol is present (VXLAN-GPE).
    pub const P: u8 = 0x04;
}

/// A checked view of a VXLAN or VXLAN-GPE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// Wraps `buffer` after checking it holds the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::VxlanGpe, buffer.as_ref(), VXLAN_LEN)?;
        Ok(VxlanPacket { buffer })
    }

    /// P: VXLAN-GPE's Next Protocol is present.
    pub fn next_protocol_present(&self) -> bool {
        self.buffer.as_ref()[0] & vxlan_flags::P != 0
    }

    /// Next Protocol (VXLAN-GPE; reserved in VXLAN).
    pub fn next_protocol(&self) -> u8 {
        self.buffer.as_ref()[3]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanPacket<T> {
    /// Sets or clears P.
    pub fn set_next_protocol_present(&mut self, p: bool) {
        let b = self.buffer.as_mut();
        b[0] = if p {
            b[0] | vxlan_flags::P
        } else {
            b[0] & !vxlan_flags::P
        };
    }

    /// Sets Next Protocol.
    pub fn set_next_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[3] = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gre() {
        // C and K: checksum, reserved, key; IPv4 inside; then 4 payload bytes.
        let mut b = [0xa0, 0, 0x08, 0x00, 0, 0, 0, 0, 0, 0, 0, 7, 1, 2, 3, 4];
        let mut g = GrePacket::new_checked(&mut b[..]).unwrap();
        assert_eq!(
            (g.header_len(), g.protocol(), g.checksum_present()),
            (12, 0x0800, true)
        );
        g.set_protocol(0x88b5);
        g.fill_checksum();
        assert_eq!(internet_checksum(&b), 0);
        assert_eq!(&b[2..4], &[0x88, 0xb5]);
        assert!(
            GrePacket::new_checked(&b[..11]).is_err(),
            "optional fields cut short"
        );
        assert!(GrePacket::new_checked(&b[..3]).is_err());
    }

    #[test]
    fn geneve() {
        let mut b = [0xa5u8; 16];
        b[0] = 0x02; // Ver 0, Opt Len 2 words
        b[2..4].copy_from_slice(&[0x65, 0x58]);
        let mut g = GenevePacket::new_checked(&mut b[..]).unwrap();
        assert_eq!(
            (g.opt_len_words(), g.header_len(), g.protocol()),
            (2, 16, 0x6558)
        );
        g.set_opt_len_words(7).unwrap();
        assert!(g.set_opt_len_words(64).is_err());
        assert_eq!(b[0], 0x07, "the error wrote nothing");
        assert!(
            GenevePacket::new_checked(&b[..]).is_err(),
            "7 words are not there"
        );
    }

    #[test]
    fn vxlan() {
        let mut b = [0x08, 0, 0, 0, 0, 0, 0x2a, 0];
        let mut v = VxlanPacket::new_checked(&mut b[..]).unwrap();
        assert!(!v.next_protocol_present());
        v.set_next_protocol_present(true);
        v.set_next_protocol(0x82);
        assert_eq!((v.next_protocol_present(), v.next_protocol()), (true, 0x82));
        assert_eq!(b, [0x0c, 0, 0, 0x82, 0, 0, 0x2a, 0]);
        assert!(VxlanPacket::new_checked(&b[..7]).is_err());
    }
}
