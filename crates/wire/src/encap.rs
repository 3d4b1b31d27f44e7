//! Tunnel headers that carry INT: VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe), Geneve (RFC 8926) and
//! GRE (RFC 2784 / RFC 2890). etherparse has none of them; they are small and fixed-layout.
//!
//! Each owned Repr parses from and emits into its checked view in [`crate::tunnel`]:
//! `Repr::parse(&view)`, `Repr::buffer_len()`, `Repr::emit(&self, &mut view)`. Panic contract:
//! `emit` never panics; a view too short for [`GreRepr::buffer_len`] or
//! [`GeneveRepr::buffer_len`] bytes, or a field value too wide for its bits, is an error (the
//! fixed-size VXLAN-GPE header is guaranteed by the view's `new_checked`).

use crate::error::{Error, Field, Layer, Result};
use crate::tunnel::{GenevePacket, GrePacket, VxlanPacket};

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
pub const VXLAN_GPE_LEN: usize = crate::tunnel::VXLAN_LEN;

impl VxlanGpeRepr {
    /// Reads a checked view; the P bit must be set (next protocol present).
    pub fn parse<T: AsRef<[u8]>>(v: &VxlanPacket<T>) -> Result<Self> {
        if !v.next_protocol_present() {
            return Err(Error::bad_value(
                Layer::VxlanGpe,
                0,
                Field::PBit,
                "1 (next protocol present)",
                0,
            ));
        }
        Ok(VxlanGpeRepr {
            flags: v.flags(),
            reserved: v.reserved(),
            next_protocol: v.next_protocol(),
            vni: v.vni(),
            reserved2: v.last_reserved(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        VXLAN_GPE_LEN
    }

    /// Writes the header into a view; an error, writing nothing, for a VNI beyond 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut VxlanPacket<T>) -> Result<()> {
        v.set_vni(self.vni)?;
        v.set_flags(self.flags);
        v.set_reserved(self.reserved);
        v.set_next_protocol(self.next_protocol);
        v.set_last_reserved(self.reserved2);
        Ok(())
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
pub const GENEVE_LEN: usize = crate::tunnel::GENEVE_BASE_LEN;

impl GeneveRepr {
    /// Reads a checked view (which holds the options Opt Len counts); Ver must be 0.
    pub fn parse<T: AsRef<[u8]>>(v: &GenevePacket<T>) -> Result<Self> {
        if v.version() != 0 {
            return Err(Error::bad_value(
                Layer::Geneve,
                0,
                Field::Ver,
                "0",
                u64::from(v.version()),
            ));
        }
        Ok(GeneveRepr {
            version: v.version(),
            opt_len: v.opt_len_words(),
            flags: v.flags(),
            protocol_type: v.protocol(),
            vni: v.vni(),
            reserved: v.last_reserved(),
        })
    }

    /// Header plus options, in bytes.
    pub fn total_len(&self) -> usize {
        GENEVE_LEN + usize::from(self.opt_len) * 4
    }

    /// Bytes the view must hold for [`Self::emit`]: the base header and the options Opt Len
    /// counts (emit writes the base header; the options are the caller's).
    pub fn buffer_len(&self) -> usize {
        self.total_len()
    }

    /// Writes the base header into a view; an error, writing nothing, when the view does not
    /// hold [`Self::buffer_len`] bytes or a field is wider than its bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut GenevePacket<T>) -> Result<()> {
        if self.version > 3 {
            let found = u64::from(self.version);
            return Err(Error::bad_value(
                Layer::Geneve,
                0,
                Field::Ver,
                "0..=3",
                found,
            ));
        }
        if self.vni > 0x00ff_ffff {
            let found = u64::from(self.vni);
            return Err(Error::bad_value(
                Layer::Geneve,
                4,
                Field::Vni,
                "0..=0xffffff",
                found,
            ));
        }
        // Opt Len first: it is the check against the buffer; Ver and VNI fit, checked above.
        v.set_opt_len_words(self.opt_len)?;
        v.set_version(self.version)?;
        v.set_vni(self.vni)?;
        v.set_flags(self.flags);
        v.set_protocol(self.protocol_type);
        v.set_last_reserved(self.reserved);
        Ok(())
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

    /// Reads a checked view (which holds the optional fields); R and Ver must be 0.
    pub fn parse<T: AsRef<[u8]>>(v: &GrePacket<T>) -> Result<Self> {
        let fv = v.flags_version();
        if fv & Self::R != 0 {
            return Err(Error::bad_value(Layer::Gre, 0, Field::RBit, "0", 1));
        }
        let version = fv & 7;
        if version != 0 {
            return Err(Error::bad_value(
                Layer::Gre,
                0,
                Field::Ver,
                "0",
                u64::from(version),
            ));
        }
        Ok(GreRepr {
            flags_version: fv,
            protocol_type: v.protocol(),
            checksum: v.checksum(),
            key: v.key(),
            sequence: v.sequence(),
        })
    }

    /// Header length including optional fields.
    pub fn header_len(&self) -> usize {
        let f = self.flags_version;
        4 + 4 * usize::from(f & (Self::C | Self::R) != 0)
            + 4 * usize::from(f & Self::K != 0)
            + 4 * usize::from(f & Self::S != 0)
    }

    /// Bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes the header into a view (optional fields as flagged, absent values as zero; the
    /// checksum as given, Reserved1 zero); an error, writing nothing, when the view does not hold
    /// [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut GrePacket<T>) -> Result<()> {
        v.set_flags_version(self.flags_version)?;
        v.set_protocol(self.protocol_type);
        // Each setter only fails when its flag is clear, which the flags just written decide.
        if self.flags_version & Self::C != 0 {
            v.set_checksum(self.checksum.unwrap_or(0))?;
        }
        if self.flags_version & Self::K != 0 {
            v.set_key(self.key.unwrap_or(0))?;
        }
        if self.flags_version & Self::S != 0 {
            v.set_sequence(self.sequence.unwrap_or(0))?;
        }
        Ok(())
    }
}
