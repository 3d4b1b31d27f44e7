//! Tunnel headers that carry INT: VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe), Geneve (RFC 8926) and
//! GRE (RFC 2784 / RFC 2890). etherparse has none of them; they are small and fixed-layout.

use crate::error::{Error, Layer, Result, check_len};
use crate::field::{be16, be24, put16};

/// VXLAN-GPE next protocol for INT (INT v2.1 §"INT over VXLAN GPE"; not yet IANA-reserved).
pub const GPE_NEXT_PROTO_INT: u8 = 0x82;
/// IANA UDP port of VXLAN-GPE.
pub const VXLAN_GPE_PORT: u16 = 4790;
/// VXLAN's UDP port (RFC 7348 §5).
pub const VXLAN_PORT: u16 = 4789;
/// IANA UDP port of Geneve.
pub const GENEVE_PORT: u16 = 6081;
/// EtherType of Transparent Ethernet Bridging (Ethernet inside GRE / Geneve).
pub const ETHERTYPE_TEB: u16 = 0x6558;

/// Owned VXLAN-GPE header (8 bytes): `R R Ver(2) I P B O | Reserved(16) | Next Protocol(8) |
/// VNI(24) | Reserved(8)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanGpeRepr {
    /// First byte: flags (I = 0x08, P = 0x04) and version.
    pub flags: u8,
    /// Reserved 16 bits.
    pub reserved: u16,
    /// Next protocol (1 IPv4, 2 IPv6, 3 Ethernet, 4 NSH, 0x82 INT).
    pub next_protocol: u8,
    /// VXLAN Network Identifier.
    pub vni: u32,
    /// Last reserved byte.
    pub reserved2: u8,
}

/// Size of the VXLAN-GPE header.
pub const VXLAN_GPE_LEN: usize = 8;

impl VxlanGpeRepr {
    /// Reads the header at the start of `b`; the P bit must be set (next protocol present).
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::VxlanGpe, b, VXLAN_GPE_LEN)?;
        if b[0] & 0x04 == 0 {
            return Err(Error::bad_value(
                Layer::VxlanGpe,
                0,
                "P bit",
                "1 (next protocol present)",
                0,
            ));
        }
        Ok(VxlanGpeRepr {
            flags: b[0],
            reserved: be16(b, 1),
            next_protocol: b[3],
            vni: be24(b, 4),
            reserved2: b[7],
        })
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.flags;
        put16(b, 1, self.reserved);
        b[3] = self.next_protocol;
        b[4..7].copy_from_slice(&self.vni.to_be_bytes()[1..]);
        b[7] = self.reserved2;
    }
}

/// Owned Geneve base header (8 bytes): `Ver(2) OptLen(6) | O C Rsvd(6) | Protocol Type(16) |
/// VNI(24) | Reserved(8)`. Opt Len counts option headers and data in words (RFC 8926).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveRepr {
    /// Version (2 bits).
    pub version: u8,
    /// Length of all options in words.
    pub opt_len: u8,
    /// Second byte: O (0x80), C (0x40), reserved.
    pub flags: u8,
    /// EtherType of the payload.
    pub protocol_type: u16,
    /// Virtual Network Identifier.
    pub vni: u32,
    /// Last reserved byte.
    pub reserved: u8,
}

/// Size of the Geneve base header.
pub const GENEVE_LEN: usize = 8;

impl GeneveRepr {
    /// Reads the base header at the start of `b` and checks that its options fit.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::Geneve, b, GENEVE_LEN)?;
        let r = GeneveRepr {
            version: b[0] >> 6,
            opt_len: b[0] & 0x3f,
            flags: b[1],
            protocol_type: be16(b, 2),
            vni: be24(b, 4),
            reserved: b[7],
        };
        if r.version != 0 {
            return Err(Error::bad_value(
                Layer::Geneve,
                0,
                "Ver",
                "0",
                u64::from(r.version),
            ));
        }
        let total = GENEVE_LEN + usize::from(r.opt_len) * 4;
        if total > b.len() {
            return Err(Error::bad_length(
                Layer::Geneve,
                0,
                "Opt Len",
                total,
                b.len(),
            ));
        }
        Ok(r)
    }
    /// Header plus options, in bytes.
    pub fn total_len(&self) -> usize {
        GENEVE_LEN + usize::from(self.opt_len) * 4
    }
    /// Writes the base header.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.version << 6) | (self.opt_len & 0x3f);
        b[1] = self.flags;
        put16(b, 2, self.protocol_type);
        b[4..7].copy_from_slice(&self.vni.to_be_bytes()[1..]);
        b[7] = self.reserved;
    }
}

/// Owned GRE header (RFC 2784 with the RFC 2890 key and sequence number; RFC 1701 routing is
/// rejected): `C R K S s Recur(3) Flags(5) Ver(3) | Protocol Type(16)` then optional checksum +
/// offset (C or R), key (K), sequence number (S).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GreRepr {
    /// First 16 bits: flags and version.
    pub flags_version: u16,
    /// Protocol type (EtherType of the payload; `TBD_INT` for INT).
    pub protocol_type: u16,
    /// Checksum (when C is set).
    pub checksum: Option<u16>,
    /// Key (when K is set).
    pub key: Option<u32>,
    /// Sequence number (when S is set).
    pub sequence: Option<u32>,
}

impl GreRepr {
    const C: u16 = 0x8000;
    const R: u16 = 0x4000;
    const K: u16 = 0x2000;
    const S: u16 = 0x1000;

    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::Gre, b, 4)?;
        let fv = be16(b, 0);
        if fv & Self::R != 0 {
            return Err(Error::bad_value(Layer::Gre, 0, "R (routing) bit", "0", 1));
        }
        let version = fv & 7;
        if version != 0 {
            return Err(Error::bad_value(
                Layer::Gre,
                0,
                "Ver",
                "0",
                u64::from(version),
            ));
        }
        let mut r = GreRepr {
            flags_version: fv,
            protocol_type: be16(b, 2),
            checksum: None,
            key: None,
            sequence: None,
        };
        let need = r.header_len();
        check_len(Layer::Gre, b, need)?;
        let mut at = 4;
        if fv & Self::C != 0 {
            r.checksum = Some(be16(b, at));
            at += 4;
        }
        if fv & Self::K != 0 {
            r.key = Some(crate::field::be32(b, at));
            at += 4;
        }
        if fv & Self::S != 0 {
            r.sequence = Some(crate::field::be32(b, at));
        }
        Ok(r)
    }

    /// Header length including optional fields.
    pub fn header_len(&self) -> usize {
        let f = self.flags_version;
        4 + 4 * usize::from(f & (Self::C | Self::R) != 0)
            + 4 * usize::from(f & Self::K != 0)
            + 4 * usize::from(f & Self::S != 0)
    }

    /// Writes the header (optional fields as flagged; checksum as given, offset zero).
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, 0, self.flags_version);
        put16(b, 2, self.protocol_type);
        let mut at = 4;
        if self.flags_version & Self::C != 0 {
            put16(b, at, self.checksum.unwrap_or(0));
            put16(b, at + 2, 0);
            at += 4;
        }
        if self.flags_version & Self::K != 0 {
            crate::field::put32(b, at, self.key.unwrap_or(0));
            at += 4;
        }
        if self.flags_version & Self::S != 0 {
            crate::field::put32(b, at, self.sequence.unwrap_or(0));
        }
    }
}
