//! Typed decode errors: what was expected, what was found, and where.
//!
//! Errors are data (the etherparse `LenError` idea): a `Layer`, the byte offset of that layer in
//! the buffer given to the decoder, and a small `ErrorKind`. Callers add frame numbers.

use core::fmt;

/// The header or structure an error or warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
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
        /// Field name, as the spec spells it.
        field: &'static str,
        /// What the decoder accepts.
        expected: &'static str,
        /// The value found.
        found: u64,
    },
    /// A length field describes more bytes than the packet holds, or an impossible layout.
    BadLength {
        /// Field name.
        field: &'static str,
        /// Bytes the field describes.
        claimed: usize,
        /// Bytes available (or the layout's limit).
        available: usize,
    },
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
    pub const fn bad_value(
        layer: Layer,
        offset: usize,
        field: &'static str,
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
    pub const fn bad_length(
        layer: Layer,
        offset: usize,
        field: &'static str,
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
        .ok_or(Error::truncated(layer, 0, N, buf.len()))
}
