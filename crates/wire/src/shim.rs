//! INT shim headers, one per encapsulation (INT v2.1 §"Header Location").
//!
//! Every shim is one 4-byte word whose *Length* counts the INT words that follow it, **not** the
//! shim itself (changed in INT v2.0; v1.0 counted the shim — see [`crate::legacy`]).
//!
//! | encapsulation | layout |
//! |---|---|
//! | TCP/UDP (§"INT over TCP/UDP") | `Type(4) NPT(2) R(2) \| Length(8) \| UDP port, IP proto or DSCP (16)` |
//! | IPv4/GRE (§"INT over IPv4/GRE") | `Type(4) G(1) Rsvd(3) \| Length(8) \| Next Protocol (EtherType, 16)` |
//! | VXLAN-GPE (§"INT over VXLAN GPE") | `Type(4) Rsvd(4) \| Length(8) \| G(1) Reserved(7) \| Next Protocol(8)` |
//! | Geneve (§"INT over Geneve") | `Option Class(16) \| Type(8) \| R(3) Length(5)` |

use crate::error::{Error, Field, Layer, Result, check_len};
use crate::field::{be16, put16};

/// Size of every INT shim header.
pub const SHIM_LEN: usize = 4;

/// Geneve option class tentatively assigned to INT (INT v2.1 §"INT over Geneve").
pub const GENEVE_INT_OPTION_CLASS: u16 = 0x0103;

/// INT header type carried in a shim (INT v2.1 §"INT Header Types").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntType {
    /// Type 1: INT-MD (eMbed Data).
    Md,
    /// Type 2: destination header (format not yet defined by the spec).
    Destination,
    /// Type 3: INT-MX (eMbed instructions).
    Mx,
    /// Any other value.
    Unknown(u8),
}

impl IntType {
    /// Decodes the 4-bit (or Geneve 8-bit) type value.
    pub const fn from_raw(v: u8) -> Self {
        match v {
            1 => IntType::Md,
            2 => IntType::Destination,
            3 => IntType::Mx,
            o => IntType::Unknown(o),
        }
    }

    /// The wire value.
    pub const fn raw(self) -> u8 {
        match self {
            IntType::Md => 1,
            IntType::Destination => 2,
            IntType::Mx => 3,
            IntType::Unknown(v) => v,
        }
    }

    /// Short name used in JSON (`md`, `mx`, `destination`).
    pub fn name(self) -> String {
        match self {
            IntType::Md => "md".into(),
            IntType::Destination => "destination".into(),
            IntType::Mx => "mx".into(),
            IntType::Unknown(v) => format!("unknown-{v}"),
        }
    }
}

/// Next Protocol Type of the TCP/UDP shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Npt {
    /// 0: INT signalled by DSCP or probe marker; the field may carry the original DSCP.
    Dscp,
    /// 1: INT after an existing UDP header; the field carries the original destination port.
    UdpPort,
    /// 2: INT in a new UDP header; the last byte carries the original IP protocol.
    IpProto,
    /// 3: reserved.
    Reserved,
}

impl Npt {
    /// Decodes the 2-bit value.
    pub const fn from_raw(v: u8) -> Self {
        match v & 3 {
            0 => Npt::Dscp,
            1 => Npt::UdpPort,
            2 => Npt::IpProto,
            _ => Npt::Reserved,
        }
    }
}

/// Checked view of the TCP/UDP shim (INT v2.1 §"INT over TCP/UDP").
#[derive(Debug, Clone, Copy)]
pub struct TcpUdpShim<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpUdpShim<T> {
    /// Wraps `buffer` after checking it holds a shim.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::IntShim, buffer.as_ref(), SHIM_LEN)?;
        Ok(TcpUdpShim { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// INT header type (4 bits).
    pub fn int_type(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// Next Protocol Type (2 bits).
    pub fn npt(&self) -> u8 {
        (self.b()[0] >> 2) & 3
    }
    /// The two reserved bits after NPT.
    pub fn reserved(&self) -> u8 {
        self.b()[0] & 3
    }
    /// Length of the INT header and stack in 4-byte words, shim excluded.
    pub fn length(&self) -> u8 {
        self.b()[1]
    }
    /// The 16-bit field whose meaning depends on NPT.
    pub fn content(&self) -> u16 {
        be16(self.b(), 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpUdpShim<T> {
    /// Sets the Length field.
    pub fn set_length(&mut self, words: u8) {
        self.buffer.as_mut()[1] = words;
    }
}

/// Owned TCP/UDP shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpUdpShimRepr {
    /// INT header type (4 bits).
    pub int_type: u8,
    /// Next Protocol Type (2 bits).
    pub npt: u8,
    /// Reserved bits after NPT (2 bits), carried unchanged.
    pub reserved: u8,
    /// INT header + stack length in words, shim excluded.
    pub length: u8,
    /// NPT=0: reserved byte, DSCP<<2 and 2 reserved bits; NPT=1: UDP port; NPT=2: reserved + IP proto.
    pub content: u16,
}

impl TcpUdpShimRepr {
    /// Reads the fields of a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &TcpUdpShim<T>) -> Self {
        Self::from_bytes(&[v.b()[0], v.b()[1], v.b()[2], v.b()[3]])
    }

    /// Reads the shim from its 4 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; SHIM_LEN]) -> Self {
        TcpUdpShimRepr {
            int_type: b[0] >> 4,
            npt: (b[0] >> 2) & 3,
            reserved: b[0] & 3,
            length: b[1],
            content: u16::from_be_bytes([b[2], b[3]]),
        }
    }
    /// Writes the shim into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = (self.int_type << 4) | ((self.npt & 3) << 2) | (self.reserved & 3);
        buf[1] = self.length;
        put16(buf, 2, self.content);
    }
    /// Original DSCP (NPT=0): the first 6 bits of the second content byte.
    pub fn dscp(&self) -> u8 {
        ((self.content & 0xff) >> 2) as u8
    }
    /// Original UDP destination port (NPT=1).
    pub fn udp_port(&self) -> u16 {
        self.content
    }
    /// Original IP protocol (NPT=2): the second content byte.
    pub fn ip_proto(&self) -> u8 {
        (self.content & 0xff) as u8
    }
}

/// Checked view of the GRE shim (INT v2.1 §"INT over IPv4/GRE").
#[derive(Debug, Clone, Copy)]
pub struct GreShim<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GreShim<T> {
    /// Wraps `buffer` after checking it holds a shim.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::IntShim, buffer.as_ref(), SHIM_LEN)?;
        Ok(GreShim { buffer })
    }
    /// Owned fields.
    pub fn repr(&self) -> GreShimRepr {
        let b = self.buffer.as_ref();
        GreShimRepr {
            int_type: b[0] >> 4,
            g: b[0] & 0x08 != 0,
            reserved: b[0] & 0x07,
            length: b[1],
            next_protocol: be16(b, 2),
        }
    }
}

/// Owned GRE shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GreShimRepr {
    /// INT header type (4 bits).
    pub int_type: u8,
    /// G: 1 when the INT source inserted the GRE header itself.
    pub g: bool,
    /// Reserved (3 bits).
    pub reserved: u8,
    /// INT header + stack length in words, shim excluded.
    pub length: u8,
    /// EtherType of what follows the INT stack.
    pub next_protocol: u16,
}

impl GreShimRepr {
    /// Writes the shim into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = (self.int_type << 4) | (u8::from(self.g) << 3) | (self.reserved & 7);
        buf[1] = self.length;
        put16(buf, 2, self.next_protocol);
    }
}

/// Checked view of the VXLAN-GPE shim (INT v2.1 §"INT over VXLAN GPE").
#[derive(Debug, Clone, Copy)]
pub struct GpeShim<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GpeShim<T> {
    /// Wraps `buffer` after checking it holds a shim.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::IntShim, buffer.as_ref(), SHIM_LEN)?;
        Ok(GpeShim { buffer })
    }
    /// Owned fields.
    pub fn repr(&self) -> GpeShimRepr {
        let b = self.buffer.as_ref();
        GpeShimRepr {
            int_type: b[0] >> 4,
            reserved: b[0] & 0x0f,
            length: b[1],
            g: b[2] & 0x80 != 0,
            reserved2: b[2] & 0x7f,
            next_protocol: b[3],
        }
    }
}

/// Owned VXLAN-GPE shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpeShimRepr {
    /// INT header type (4 bits).
    pub int_type: u8,
    /// Rsvd (4 bits), zero per spec.
    pub reserved: u8,
    /// INT option data length in words, shim excluded.
    pub length: u8,
    /// G: 1 when the original packet used plain VXLAN (not GPE).
    pub g: bool,
    /// Reserved (7 bits).
    pub reserved2: u8,
    /// VXLAN-GPE next protocol of what follows (0x82 for another INT header).
    pub next_protocol: u8,
}

impl GpeShimRepr {
    /// Writes the shim into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = (self.int_type << 4) | (self.reserved & 0x0f);
        buf[1] = self.length;
        buf[2] = (u8::from(self.g) << 7) | (self.reserved2 & 0x7f);
        buf[3] = self.next_protocol;
    }
}

/// Checked view of a Geneve option header (INT v2.1 §"INT over Geneve", RFC 8926 §3.5).
#[derive(Debug, Clone, Copy)]
pub struct GeneveOption<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GeneveOption<T> {
    /// Wraps `buffer` after checking it holds an option header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Geneve, buffer.as_ref(), SHIM_LEN)?;
        Ok(GeneveOption { buffer })
    }
    /// Owned fields.
    pub fn repr(&self) -> GeneveOptionRepr {
        let b = self.buffer.as_ref();
        GeneveOptionRepr {
            option_class: be16(b, 0),
            option_type: b[2],
            reserved: b[3] >> 5,
            length: b[3] & 0x1f,
        }
    }
}

/// Owned Geneve option header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveOptionRepr {
    /// Option class (0x0103 for INT).
    pub option_class: u16,
    /// Option type: the INT header type for INT options.
    pub option_type: u8,
    /// R bits (3).
    pub reserved: u8,
    /// Option data length in words (5 bits: at most 124 bytes), header excluded.
    pub length: u8,
}

impl GeneveOptionRepr {
    /// Writes the option header into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, 0, self.option_class);
        buf[2] = self.option_type;
        buf[3] = (self.reserved << 5) | (self.length & 0x1f);
    }
}

/// The shim of one INT header, in whichever encapsulation carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shim {
    /// TCP/UDP shim.
    TcpUdp(TcpUdpShimRepr),
    /// GRE shim.
    Gre(GreShimRepr),
    /// VXLAN-GPE shim.
    Gpe(GpeShimRepr),
    /// Geneve option header.
    Geneve(GeneveOptionRepr),
}

impl Shim {
    /// The INT header type.
    pub fn int_type(&self) -> IntType {
        IntType::from_raw(match self {
            Shim::TcpUdp(s) => s.int_type,
            Shim::Gre(s) => s.int_type,
            Shim::Gpe(s) => s.int_type,
            Shim::Geneve(s) => s.option_type,
        })
    }
    /// Words of INT header and metadata after the shim.
    pub fn length_words(&self) -> usize {
        usize::from(match self {
            Shim::TcpUdp(s) => s.length,
            Shim::Gre(s) => s.length,
            Shim::Gpe(s) => s.length,
            Shim::Geneve(s) => s.length,
        })
    }
    /// Writes the shim into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            Shim::TcpUdp(s) => s.emit(buf),
            Shim::Gre(s) => s.emit(buf),
            Shim::Gpe(s) => s.emit(buf),
            Shim::Geneve(s) => s.emit(buf),
        }
    }
    /// Sets the length field (words after the shim).
    pub fn set_length_words(&mut self, words: u8) {
        match self {
            Shim::TcpUdp(s) => s.length = words,
            Shim::Gre(s) => s.length = words,
            Shim::Gpe(s) => s.length = words,
            Shim::Geneve(s) => s.length = words & 0x1f,
        }
    }
}

/// Rejects a shim whose Length field describes more bytes than follow it.
pub(crate) fn check_shim_length(words: usize, after_shim: usize) -> Result<()> {
    let claimed = words * 4;
    if claimed > after_shim {
        return Err(Error::bad_length(
            Layer::IntShim,
            0,
            Field::Length,
            claimed,
            after_shim,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_udp_shim_spec_example_md_tcp() {
        // INT v2.1 §"Example with INT-MD over TCP": Type=1, NPT=0, Length=7, DSCP field.
        let bytes = [0x10, 0x07, 0x00, 0x17 << 2];
        let r = TcpUdpShimRepr::parse(&TcpUdpShim::new_checked(&bytes[..]).unwrap());
        assert_eq!((r.int_type, r.npt, r.length, r.dscp()), (1, 0, 7, 0x17));
        let mut out = [0xa5u8; 4];
        r.emit(&mut out);
        assert_eq!(out, bytes);
    }

    #[test]
    fn short_buffer_is_an_error() {
        let e = TcpUdpShim::new_checked(&[0u8; 3][..]).unwrap_err();
        assert_eq!(e.layer, Layer::IntShim);
        assert!(e.to_string().contains("expected 4 bytes, found 3"));
    }
}
