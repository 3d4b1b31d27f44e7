//! Typed decode errors: what was expected, what was found, and where.
//!
//! Errors are data (the etherparse `LenError` idea): a `Layer`, the byte offset of that layer in
//! the buffer given to the decoder, and a small `ErrorKind`. Callers add frame numbers.

use core::fmt;

/// The header or structure an error or warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// 802.1Q / 802.1ad tag.
    Vlan,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header and extension headers.
    Ipv6,
    /// UDP header.
    Udp,
    /// TCP header.
    Tcp,
    /// GRE header (RFC 2784 / 2890).
    Gre,
    /// VXLAN-GPE header.
    VxlanGpe,
    /// Geneve base header or option.
    Geneve,
    /// GTP-U header (3GPP TS 29.281).
    GtpU,
    /// INT shim header (any encapsulation).
    IntShim,
    /// INT-MD metadata header.
    IntMd,
    /// INT-MX header.
    IntMx,
    /// INT metadata stack.
    IntStack,
    /// INT v1.0 / v0.5 / 2016 headers.
    IntLegacy,
    /// INT probe marker.
    ProbeMarker,
    /// Telemetry Report v2.0 group header.
    ReportGroup,
    /// Telemetry Report v2.0 individual report.
    ReportIndividual,
    /// Telemetry Report TLV.
    ReportTlv,
    /// Telemetry Report v1.0 fixed header.
    ReportV1,
    /// Telemetry Report v0.5 headers.
    ReportV05,
    /// Domain-specific metadata registry.
    Domain,
}

impl Layer {
    /// A short name in kebab case (`int-shim`), as JSON output and tallies name the layer.
    pub const fn id(self) -> &'static str {
        match self {
            Layer::Ethernet => "ethernet",
            Layer::Vlan => "vlan",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Udp => "udp",
            Layer::Tcp => "tcp",
            Layer::Gre => "gre",
            Layer::VxlanGpe => "vxlan-gpe",
            Layer::Geneve => "geneve",
            Layer::GtpU => "gtp-u",
            Layer::IntShim => "int-shim",
            Layer::IntMd => "int-md",
            Layer::IntMx => "int-mx",
            Layer::IntStack => "int-stack",
            Layer::IntLegacy => "int-legacy",
            Layer::ProbeMarker => "probe-marker",
            Layer::ReportGroup => "report-group",
            Layer::ReportIndividual => "report-individual",
            Layer::ReportTlv => "report-tlv",
            Layer::ReportV1 => "report-v1",
            Layer::ReportV05 => "report-v05",
            Layer::Domain => "domain",
        }
    }
}

impl serde::Serialize for Layer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> core::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Layer::Ethernet => "Ethernet header",
            Layer::Vlan => "VLAN tag",
            Layer::Ipv4 => "IPv4 header",
            Layer::Ipv6 => "IPv6 header",
            Layer::Udp => "UDP header",
            Layer::Tcp => "TCP header",
            Layer::Gre => "GRE header",
            Layer::VxlanGpe => "VXLAN-GPE header",
            Layer::Geneve => "Geneve header",
            Layer::GtpU => "GTP-U header",
            Layer::IntShim => "INT shim header",
            Layer::IntMd => "INT-MD header",
            Layer::IntMx => "INT-MX header",
            Layer::IntStack => "INT metadata stack",
            Layer::IntLegacy => "INT v1.0/v0.5/2016 header",
            Layer::ProbeMarker => "INT probe marker",
            Layer::ReportGroup => "telemetry report group header",
            Layer::ReportIndividual => "individual telemetry report",
            Layer::ReportTlv => "telemetry report TLV",
            Layer::ReportV1 => "telemetry report v1.0 header",
            Layer::ReportV05 => "telemetry report v0.5 header",
            Layer::Domain => "domain registry",
        };
        f.write_str(name)
    }
}

/// The field an error names, with the spec's spelling as its [`Display`](fmt::Display).
///
/// Typed so that callers (a collector's discard reasons, a CLI's tallies) match fields, not
/// strings that a later spelling fix would silently break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The version nibble of an INT, GRE, Geneve or report header.
    Ver,
    /// The IP or GTP-U version field.
    Version,
    /// The IPv4 Internet Header Length.
    Ihl,
    /// A header's own length field (shim, UDP, GTP-U).
    Length,
    /// Report v2.0: the main contents' length in words.
    MdLength,
    /// Report v2.0: the individual report's length in words.
    ReportLength,
    /// Report v2.0: a TLV's length in words.
    TlvLength,
    /// Report v2.0: a TLV's type.
    TlvType,
    /// Report v2.0: the individual report's type.
    RepType,
    /// Report v2.0: the type of the inner contents.
    InType,
    /// Report v1.0 / v0.5: the inner packet's protocol.
    NProto,
    /// The INT shim's (or GPE's) next protocol.
    NextProtocol,
    /// The INT shim's type.
    Type,
    /// INT 2016: the number of instructions.
    InstructionCount,
    /// INT v0.5: the hops counted so far.
    TotalHopCount,
    /// INT v1.0 / v0.5 / 2016: the header as a whole, against its instruction bitmap.
    MetadataHeader,
    /// INT v1.0 / v0.5 shim: its length.
    LegacyLen,
    /// INT v1.0 shim: its length in words, the shim included.
    LegacyLenV1,
    /// INT 2016 shim: its length in words, the shim included.
    Length2016,
    /// VXLAN-GPE: the next-protocol bit.
    PBit,
    /// GRE: the checksum-present bit.
    CBit,
    /// GRE: the key-present bit.
    KBit,
    /// GRE: the sequence-number-present bit.
    SBit,
    /// GRE: the routing-present bit (RFC 1701, deprecated by RFC 2784).
    RBit,
    /// VXLAN-GPE / Geneve: the virtual network identifier.
    Vni,
    /// Geneve: the options' length in words.
    OptLen,
    /// Geneve: one option's length in words.
    OptionLength,
    /// GTP-U: an extension header's length in words.
    ExtensionHeaderLength,
    /// An IP header as a whole (its version and header length).
    IpHeader,
    /// A report's copy of the packet, not a packet of its InType.
    InnerPacket,
}

impl Field {
    /// The name as the spec (or, for a whole structure, this crate) spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Field::Ver => "Ver",
            Field::Version => "Version",
            Field::Ihl => "IHL",
            Field::Length => "Length",
            Field::MdLength => "MD Length",
            Field::ReportLength => "Report Length",
            Field::TlvLength => "TLVLength",
            Field::TlvType => "TLVType",
            Field::RepType => "RepType",
            Field::InType => "InType",
            Field::NProto => "NProto",
            Field::NextProtocol => "Next Protocol",
            Field::Type => "Type",
            Field::InstructionCount => "Instruction Count",
            Field::TotalHopCount => "total_hop_count",
            Field::MetadataHeader => "metadata header",
            Field::LegacyLen => "len",
            Field::LegacyLenV1 => "len (v1.0, words incl. shim)",
            Field::Length2016 => "Length (2016, words incl. shim)",
            Field::PBit => "P bit",
            Field::CBit => "C bit",
            Field::KBit => "K bit",
            Field::SBit => "S bit",
            Field::RBit => "R (routing) bit",
            Field::Vni => "VNI",
            Field::OptLen => "Opt Len",
            Field::OptionLength => "option Length",
            Field::ExtensionHeaderLength => "Extension Header Length",
            Field::IpHeader => "header",
            Field::InnerPacket => "inner packet",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Field {
    fn serialize<S: serde::Serializer>(&self, s: S) -> core::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Fewer bytes than the structure needs.
    Truncated {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// A field holds a value this decoder does not accept.
    BadValue {
        /// The field.
        field: Field,
        /// What the decoder accepts.
        expected: &'static str,
        /// The value found.
        found: u64,
    },
    /// A length field describes more bytes than the packet holds, or an impossible layout.
    BadLength {
        /// The length field.
        field: Field,
        /// Bytes the field describes.
        claimed: usize,
        /// Bytes available (or the layout's limit).
        available: usize,
    },
}

impl ErrorKind {
    /// The kind's name in kebab case, as JSON output (its `kind` tag) and tallies name it.
    pub const fn id(self) -> &'static str {
        match self {
            ErrorKind::Truncated { .. } => "truncated",
            ErrorKind::BadValue { .. } => "bad-value",
            ErrorKind::BadLength { .. } => "bad-length",
        }
    }
}

/// A decode error: `kind` at byte `offset` of `layer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, serde::Serialize)]
pub struct Error {
    /// The structure being decoded.
    pub layer: Layer,
    /// Byte offset of that structure from the start of the decoded buffer.
    pub offset: usize,
    /// What went wrong.
    #[serde(flatten)]
    pub kind: ErrorKind,
}

impl Error {
    /// `needed` bytes were required at `offset`, only `available` were there.
    pub const fn truncated(layer: Layer, offset: usize, needed: usize, available: usize) -> Self {
        Error {
            layer,
            offset,
            kind: ErrorKind::Truncated { needed, available },
        }
    }

    /// `field` held `found`, the decoder accepts `expected`.
    #[cold]
    pub const fn bad_value(
        layer: Layer,
        offset: usize,
        field: Field,
        expected: &'static str,
        found: u64,
    ) -> Self {
        Error {
            layer,
            offset,
            kind: ErrorKind::BadValue {
                field,
                expected,
                found,
            },
        }
    }

    /// `field` claimed `claimed` bytes, only `available` fit.
    #[cold]
    pub const fn bad_length(
        layer: Layer,
        offset: usize,
        field: Field,
        claimed: usize,
        available: usize,
    ) -> Self {
        Error {
            layer,
            offset,
            kind: ErrorKind::BadLength {
                field,
                claimed,
                available,
            },
        }
    }

    /// The same error seen from a buffer in which this one starts at `base`.
    pub const fn shifted(self, base: usize) -> Self {
        Error {
            offset: self.offset + base,
            ..self
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Truncated { needed, available } => write!(
                f,
                "{} at byte {}: expected {} bytes, found {}",
                self.layer, self.offset, needed, available
            ),
            ErrorKind::BadValue {
                field,
                expected,
                found,
            } => write!(
                f,
                "{} at byte {}: {} expected {}, found {} (0x{:x})",
                self.layer, self.offset, field, expected, found, found
            ),
            ErrorKind::BadLength {
                field,
                claimed,
                available,
            } => write!(
                f,
                "{} at byte {}: {} claims {} bytes, only {} available",
                self.layer, self.offset, field, claimed, available
            ),
        }
    }
}

/// Result of a decode.
pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buf` holds at least `needed` bytes.
#[inline]
pub(crate) fn check_len(layer: Layer, buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(Error::truncated(layer, 0, needed, buf.len()))
    } else {
        Ok(())
    }
}

/// The first `N` bytes of `buf` as an array: one length check, after which constant-index field
/// reads compile without bounds checks.
#[inline]
pub(crate) fn array<const N: usize>(layer: Layer, buf: &[u8]) -> Result<&[u8; N]> {
    buf.first_chunk::<N>()
        .ok_or_else(|| Error::truncated(layer, 0, N, buf.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON an error serialises to names its layer, kind and field as `id()` and `name()`
    /// do, so that a tally built from the typed error and one read from `dump`'s JSON agree.
    #[test]
    fn json_names_are_the_typed_names() {
        let errors = [
            Error::truncated(Layer::IntShim, 3, 8, 2),
            Error::bad_value(Layer::ReportGroup, 0, Field::Ver, "2", 5),
            Error::bad_length(Layer::GtpU, 8, Field::ExtensionHeaderLength, 12, 4),
        ];
        for e in errors {
            let v = serde_json::to_value(e).unwrap();
            assert_eq!(v["layer"], e.layer.id(), "{v}");
            assert_eq!(v["kind"], e.kind.id(), "{v}");
            assert_eq!(v["offset"], e.offset, "{v}");
            if let ErrorKind::BadValue { field, .. } | ErrorKind::BadLength { field, .. } = e.kind {
                assert_eq!(v["field"], field.name(), "{v}");
                assert!(e.to_string().contains(field.name()), "{e}");
            }
        }
        assert_eq!(Layer::GtpU.id(), "gtp-u");
        assert_eq!(Layer::ReportV05.id(), "report-v05");
        assert_eq!(Field::MdLength.to_string(), "MD Length");
    }
}
