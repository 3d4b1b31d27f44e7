//! Deviations from the specs that the decoder tolerates (real equipment has them), kept as a
//! bit set so the zero-copy path does not allocate.

/// One tolerated deviation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Warning {
    /// An INT v2 header whose shim Length counts the shim word (INT v1.0 semantics), as the
    /// CableLabs Transparent Security P4 program writes it.
    ShimLengthCountsShim,
    /// An INT v0.5 shim Length that cannot be right (shorter than the header and tail, or past
    /// the packet: generators that leave it 0); the header's Total Hop Count was used.
    LegacyShimLength,
    /// The metadata stack holds bytes that do not form whole hops.
    StackLeftover,
    /// Hop ML is smaller than the baseline metadata the bitmap requests.
    HopTooShort,
    /// The stack's domain-specific layout is unknown (no registry entry for the DS ID).
    UnknownDomain,
    /// INT found without the configured marking (DSCP, port, probe), with unmarked INT on.
    UnmarkedInt,
    /// The L4 checksum of the packet does not verify (e.g. not updated after INT insertion).
    BadL4Checksum,
    /// The IPv4 header checksum does not verify.
    BadIpChecksum,
    /// An Inner-Only report (RepType 0) with a non-zero MD Length carried INT main contents.
    MainContentsInInnerOnly,
    /// The inner packet did not start with the header InType names; another type was found.
    InnerTypeMismatch,
    /// Bytes after an individual report did not form a report; they were kept as its inner data.
    ReportLengthExtended,
    /// A v0.5-layout report header carried version 1 (test generators of ONOS and GEANT).
    V05LayoutVersion1,
    /// A v1.0 report header whose Len field is not 4 (its fixed length is 16 bytes).
    V1ReportLength,
    /// An INT v1.0 metadata header carrying version 0 (GEANT test generator).
    V1HeaderVersion0,
    /// A reserved field was non-zero.
    ReservedSet,
    /// The IP protocol says TCP but a UDP header follows (inner packet of a report).
    L4ProtocolMismatch,
    /// A report's truncated packet ends inside the INT stack: the hops present were decoded.
    TruncatedInt,
    /// A v0.5 or 2016 header's Total Hop Count disagrees with the shim length; the shim length
    /// bounded the stack.
    LegacyHopCount,
    /// The 2016 stack's last metadata word lacks the BOS (bottom-of-stack) bit.
    BosMissing,
    /// A 2016 metadata word other than the stack's last carries the BOS bit.
    BosMisplaced,
    /// The first fragment of a fragmented IP packet (offset 0, More Fragments set): its L4
    /// header was read, but the rest of the packet is in later fragments.
    IpFirstFragment,
    /// A later fragment of an IP packet (offset > 0): it holds no L4 header (RFC 791, RFC 8200
    /// §4.5), so no ports, flow or INT were read from it.
    IpLaterFragment,
}

impl Warning {
    const ALL: [Warning; 22] = [
        Warning::ShimLengthCountsShim,
        Warning::LegacyShimLength,
        Warning::StackLeftover,
        Warning::HopTooShort,
        Warning::UnknownDomain,
        Warning::UnmarkedInt,
        Warning::BadL4Checksum,
        Warning::BadIpChecksum,
        Warning::MainContentsInInnerOnly,
        Warning::InnerTypeMismatch,
        Warning::ReportLengthExtended,
        Warning::V05LayoutVersion1,
        Warning::V1ReportLength,
        Warning::V1HeaderVersion0,
        Warning::ReservedSet,
        Warning::L4ProtocolMismatch,
        Warning::TruncatedInt,
        Warning::LegacyHopCount,
        Warning::BosMissing,
        Warning::BosMisplaced,
        Warning::IpFirstFragment,
        Warning::IpLaterFragment,
    ];

    /// A one-line explanation.
    pub fn message(self) -> &'static str {
        match self {
            Warning::ShimLengthCountsShim => {
                "INT shim Length counts the shim word (INT v1.0 semantics) although the header is v2; decoded with v1.0 semantics"
            }
            Warning::LegacyShimLength => {
                "INT v0.5 shim Length cannot be right (shorter than header and tail, or past the packet); the header's Total Hop Count used"
            }
            Warning::StackLeftover => "INT metadata stack length is not a whole number of hops",
            Warning::HopTooShort => {
                "Hop ML is shorter than the metadata the instruction bitmap requests"
            }
            Warning::UnknownDomain => {
                "Domain Specific ID not in the registry: domain metadata shown raw"
            }
            Warning::UnmarkedInt => {
                "INT found without the configured INT marking (unmarked INT on)"
            }
            Warning::BadL4Checksum => "L4 checksum does not verify",
            Warning::BadIpChecksum => "IPv4 header checksum does not verify",
            Warning::MainContentsInInnerOnly => {
                "Inner-Only report (RepType 0) carries INT main contents (MD Length > 0)"
            }
            Warning::InnerTypeMismatch => {
                "inner packet does not start with the header InType names"
            }
            Warning::ReportLengthExtended => {
                "bytes after the report's Report Length do not form a report; kept as its inner contents"
            }
            Warning::V05LayoutVersion1 => "v0.5-layout telemetry report header carries version 1",
            Warning::V1ReportLength => "v1.0 telemetry report Len field is not 4",
            Warning::V1HeaderVersion0 => "INT v1.0 metadata header carries version 0",
            Warning::ReservedSet => "a reserved field is non-zero",
            Warning::L4ProtocolMismatch => {
                "IP protocol says TCP but a UDP header follows; read as UDP"
            }
            Warning::TruncatedInt => {
                "the report's truncated packet ends inside the INT stack; the hops present were decoded"
            }
            Warning::LegacyHopCount => {
                "INT Total Hop Count disagrees with the shim length; the shim length bounded the stack"
            }
            Warning::BosMissing => {
                "2016 format: the bottom-of-stack bit is not set on the last metadata word"
            }
            Warning::BosMisplaced => {
                "2016 format: the bottom-of-stack bit is set on a metadata word before the last"
            }
            Warning::IpFirstFragment => {
                "first fragment of a fragmented IP packet: the L4 header is read, the rest of the packet is in later fragments"
            }
            Warning::IpLaterFragment => {
                "later fragment of an IP packet (offset > 0): it holds no L4 header, so no ports, flow or INT are read"
            }
        }
    }

    /// A stable kebab-case code for JSON.
    pub fn code(self) -> &'static str {
        match self {
            Warning::ShimLengthCountsShim => "shim-length-counts-shim",
            Warning::LegacyShimLength => "legacy-shim-length",
            Warning::StackLeftover => "stack-leftover",
            Warning::HopTooShort => "hop-too-short",
            Warning::UnknownDomain => "unknown-domain",
            Warning::UnmarkedInt => "unmarked-int",
            Warning::BadL4Checksum => "bad-l4-checksum",
            Warning::BadIpChecksum => "bad-ip-checksum",
            Warning::MainContentsInInnerOnly => "main-contents-in-inner-only",
            Warning::InnerTypeMismatch => "inner-type-mismatch",
            Warning::ReportLengthExtended => "report-length-extended",
            Warning::V05LayoutVersion1 => "v05-layout-version-1",
            Warning::V1ReportLength => "v1-report-length",
            Warning::V1HeaderVersion0 => "v1-header-version-0",
            Warning::ReservedSet => "reserved-set",
            Warning::L4ProtocolMismatch => "l4-protocol-mismatch",
            Warning::TruncatedInt => "truncated-int",
            Warning::LegacyHopCount => "legacy-hop-count",
            Warning::BosMissing => "bos-missing",
            Warning::BosMisplaced => "bos-misplaced",
            Warning::IpFirstFragment => "ip-first-fragment",
            Warning::IpLaterFragment => "ip-later-fragment",
        }
    }
}

/// A set of warnings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Warnings(u32);

impl Warnings {
    /// No warning.
    pub const EMPTY: Warnings = Warnings(0);

    /// Adds `w`.
    pub fn add(&mut self, w: Warning) {
        self.0 |= 1 << (w as u8);
    }
    /// Whether `w` is in the set.
    pub fn has(self, w: Warning) -> bool {
        self.0 & (1 << (w as u8)) != 0
    }
    /// Adds all of `other`.
    pub fn merge(&mut self, other: Warnings) {
        self.0 |= other.0;
    }
    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The warnings in the set.
    pub fn iter(self) -> impl Iterator<Item = Warning> {
        Warning::ALL.into_iter().filter(move |w| self.has(*w))
    }
}
