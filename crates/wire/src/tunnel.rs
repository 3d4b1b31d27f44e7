//! Tunnel headers INT rides in, as checked views with setters for nodes that edit them in place:
//! GRE (RFC 2784 / RFC 2890), Geneve (RFC 8926) and VXLAN / VXLAN-GPE (RFC 7348,
//! draft-ietf-nvo3-vxlan-gpe). The `encap` module holds their owned Reprs, which parse from and
//! emit into these views.
//!
//! Panic contract: after `new_checked` (or `new_for_emit`) succeeds no accessor or setter panics;
//! a setter whose value does not fit its field, or would make the header longer than the buffer,
//! returns an error and writes nothing.

use crate::checksum::internet_checksum;
use crate::error::{Error, Field, Layer, Result, check_len};
use crate::field::{be16, be24, be32, put16, put32};

/// GRE flag bits (first byte).
mod gre_flags {
    pub const C: u8 = 0x80;
    /// R (RFC 1701 routing): like C, it makes the checksum and offset word present.
    pub const R: u8 = 0x40;
    pub const K: u8 = 0x20;
    pub const S: u8 = 0x10;
}

/// GRE header length for the first flags byte `f`: 4 bytes and 4 more for each of checksum
/// (C or R), key and sequence number present.
fn gre_header_len(f: u8) -> usize {
    GRE_BASE_LEN
        + 4 * (usize::from(f & (gre_flags::C | gre_flags::R) != 0)
            + usize::from(f & gre_flags::K != 0)
            + usize::from(f & gre_flags::S != 0))
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

    /// Header length: 4 bytes and 4 more for each of checksum (C or R), key and sequence
    /// number present.
    pub fn header_len(&self) -> usize {
        gre_header_len(self.b()[0])
    }

    /// The first 16 bits: flags, Recur and Version.
    pub fn flags_version(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Protocol Type (an EtherType).
    pub fn protocol(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Where the key would be: after the checksum word when C or R is set.
    fn key_at(&self) -> usize {
        GRE_BASE_LEN + 4 * usize::from(self.b()[0] & (gre_flags::C | gre_flags::R) != 0)
    }

    fn seq_at(&self) -> usize {
        self.key_at() + 4 * usize::from(self.b()[0] & gre_flags::K != 0)
    }

    /// Checksum, when C is set.
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present()
            .then(|| be16(self.b(), GRE_BASE_LEN))
    }

    /// Key (RFC 2890), when K is set.
    pub fn key(&self) -> Option<u32> {
        (self.b()[0] & gre_flags::K != 0).then(|| be32(self.b(), self.key_at()))
    }

    /// Sequence Number (RFC 2890), when S is set.
    pub fn sequence(&self) -> Option<u32> {
        (self.b()[0] & gre_flags::S != 0).then(|| be32(self.b(), self.seq_at()))
    }
}

impl GrePacket<&mut [u8]> {
    /// Wraps `buffer` to emit an `encap::GreRepr` into: checks it holds the base header
    /// and clears the flags, so the view's length invariant holds before the Repr sets them.
    pub fn new_for_emit(buffer: &mut [u8]) -> Result<GrePacket<&mut [u8]>> {
        check_len(Layer::Gre, buffer, GRE_BASE_LEN)?;
        put16(buffer, 0, 0);
        Ok(GrePacket { buffer })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GrePacket<T> {
    /// Sets the first 16 bits; an error, writing nothing, when the optional fields they announce
    /// do not fit the buffer.
    pub fn set_flags_version(&mut self, v: u16) -> Result<()> {
        check_len(Layer::Gre, self.b(), gre_header_len((v >> 8) as u8))?;
        put16(self.buffer.as_mut(), 0, v);
        Ok(())
    }

    /// Sets Protocol Type.
    pub fn set_protocol(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    /// Sets the checksum word: Checksum and a zero Reserved1 (RFC 2784 §2.5); an error when C
    /// is not set.
    pub fn set_checksum(&mut self, v: u16) -> Result<()> {
        if !self.checksum_present() {
            return Err(Error::bad_value(Layer::Gre, 0, Field::CBit, "1", 0));
        }
        put32(self.buffer.as_mut(), GRE_BASE_LEN, u32::from(v) << 16);
        Ok(())
    }

    /// Sets Key; an error when K is not set.
    pub fn set_key(&mut self, v: u32) -> Result<()> {
        if self.b()[0] & gre_flags::K == 0 {
            return Err(Error::bad_value(Layer::Gre, 0, Field::KBit, "1", 0));
        }
        let at = self.key_at();
        put32(self.buffer.as_mut(), at, v);
        Ok(())
    }

    /// Sets Sequence Number; an error when S is not set.
    pub fn set_sequence(&mut self, v: u32) -> Result<()> {
        if self.b()[0] & gre_flags::S == 0 {
            return Err(Error::bad_value(Layer::Gre, 0, Field::SBit, "1", 0));
        }
        let at = self.seq_at();
        put32(self.buffer.as_mut(), at, v);
        Ok(())
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

    /// Ver (2 bits).
    pub fn version(&self) -> u8 {
        self.b()[0] >> 6
    }

    /// The second byte: O (0x80), C (0x40) and reserved bits.
    pub fn flags(&self) -> u8 {
        self.b()[1]
    }

    /// Virtual Network Identifier (24 bits).
    pub fn vni(&self) -> u32 {
        be24(self.b(), 4)
    }

    /// The last reserved byte.
    pub fn last_reserved(&self) -> u8 {
        self.b()[7]
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

impl GenevePacket<&mut [u8]> {
    /// Wraps `buffer` to emit a `encap::GeneveRepr` into: checks it holds the base
    /// header and sets Opt Len to 0, so the view's length invariant holds before the Repr sets it.
    pub fn new_for_emit(buffer: &mut [u8]) -> Result<GenevePacket<&mut [u8]>> {
        check_len(Layer::Geneve, buffer, GENEVE_BASE_LEN)?;
        buffer[0] &= !GENEVE_MAX_OPT_WORDS;
        Ok(GenevePacket { buffer })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GenevePacket<T> {
    /// Sets Opt Len (the Version bits kept); an error, writing nothing, beyond 6 bits or when the
    /// buffer does not hold that many option words.
    pub fn set_opt_len_words(&mut self, words: u8) -> Result<()> {
        if words > GENEVE_MAX_OPT_WORDS {
            return Err(Error::bad_value(
                Layer::Geneve,
                0,
                Field::OptLen,
                "0..=63",
                u64::from(words),
            ));
        }
        check_len(
            Layer::Geneve,
            self.b(),
            GENEVE_BASE_LEN + usize::from(words) * 4,
        )?;
        let b = self.buffer.as_mut();
        b[0] = (b[0] & !GENEVE_MAX_OPT_WORDS) | words;
        Ok(())
    }

    /// Sets Ver; an error beyond 2 bits.
    pub fn set_version(&mut self, v: u8) -> Result<()> {
        if v > 3 {
            return Err(Error::bad_value(
                Layer::Geneve,
                0,
                Field::Ver,
                "0..=3",
                u64::from(v),
            ));
        }
        let b = self.buffer.as_mut();
        b[0] = (b[0] & GENEVE_MAX_OPT_WORDS) | (v << 6);
        Ok(())
    }

    /// Sets the second byte (O, C, reserved).
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    /// Sets Protocol Type.
    pub fn set_protocol(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    /// Sets VNI; an error beyond 24 bits.
    pub fn set_vni(&mut self, v: u32) -> Result<()> {
        put_vni(Layer::Geneve, self.buffer.as_mut(), v)
    }

    /// Sets the last reserved byte.
    pub fn set_last_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[7] = v;
    }
}

/// Writes a 24-bit VNI at bytes 4..7 (Geneve and VXLAN alike); an error beyond 24 bits.
fn put_vni(layer: Layer, b: &mut [u8], v: u32) -> Result<()> {
    if v > 0x00ff_ffff {
        return Err(Error::bad_value(
            layer,
            4,
            Field::Vni,
            "0..=0xffffff",
            u64::from(v),
        ));
    }
    b[4..7].copy_from_slice(&v.to_be_bytes()[1..]);
    Ok(())
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

    /// The first byte: flags (I = 0x08, P = 0x04) and, in VXLAN-GPE, Ver.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The 16 reserved bits after the flags.
    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), 1)
    }

    /// VXLAN Network Identifier (24 bits).
    pub fn vni(&self) -> u32 {
        be24(self.buffer.as_ref(), 4)
    }

    /// The last reserved byte.
    pub fn last_reserved(&self) -> u8 {
        self.buffer.as_ref()[7]
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

    /// Sets the first byte (flags and version).
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    /// Sets the 16 reserved bits after the flags.
    pub fn set_reserved(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 1, v);
    }

    /// Sets VNI; an error beyond 24 bits.
    pub fn set_vni(&mut self, v: u32) -> Result<()> {
        put_vni(Layer::VxlanGpe, self.buffer.as_mut(), v)
    }

    /// Sets the last reserved byte.
    pub fn set_last_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[7] = v;
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
        let mut g = GrePacket::new_checked(&mut b[..12]).unwrap();
        assert_eq!(
            (g.checksum().is_some(), g.key(), g.sequence()),
            (true, Some(7), None)
        );
        assert!(g.set_sequence(1).is_err(), "S is clear");
        assert!(
            g.set_flags_version(0xb000).is_err(),
            "C, K and S need 16 bytes"
        );
        g.set_flags_version(0x3000).unwrap();
        g.set_key(0x0102_0304).unwrap();
        g.set_sequence(9).unwrap();
        assert!(g.set_checksum(1).is_err(), "C is clear");
        assert_eq!(&b[..12], &[0x30, 0, 0x88, 0xb5, 1, 2, 3, 4, 0, 0, 0, 9]);
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
        g.set_opt_len_words(1).unwrap();
        assert!(g.set_opt_len_words(64).is_err());
        assert!(g.set_opt_len_words(3).is_err(), "3 words are not there");
        g.set_version(1).unwrap();
        assert!(g.set_version(4).is_err());
        g.set_vni(0x00ab_cdef).unwrap();
        assert!(g.set_vni(1 << 24).is_err());
        assert_eq!(
            (g.version(), g.opt_len_words(), g.vni()),
            (1, 1, 0xab_cdef),
            "the errors wrote nothing"
        );
        assert_eq!(b[0], 0x41);
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
