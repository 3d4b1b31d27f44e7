//! The parts of a decoded INT block, of any generation: where it sits, its shim and header.
//! The block parser (module `int`) decodes blocks into these, the legacy generations through
//! module `legacy_block`.

use crate::legacy::{LegacyShimRepr, V1HeaderRepr, V05HeaderRepr, V05TailRepr};
use crate::md::MdHeaderRepr;
use crate::mx::MxHeaderRepr;
use crate::shim::Shim;
use crate::warning::Warnings;

/// Where the INT block sits (INT v2.1 §"Header Location").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encap {
    /// After the TCP header (DSCP or probe marking).
    Tcp,
    /// After the UDP header of the original packet (DSCP / probe marking, or INT UDP port, NPT=1).
    Udp,
    /// In a new UDP header inserted before the original L4 header (NPT=2).
    UdpNew,
    /// In VXLAN-GPE, after a header with next protocol 0x82.
    VxlanGpe,
    /// As a Geneve option of class 0x0103.
    Geneve,
    /// After a GRE header with protocol type `TBD_INT`.
    Gre,
}

impl Encap {
    /// Name used in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Encap::Tcp => "tcp",
            Encap::Udp => "udp",
            Encap::UdpNew => "udp-new",
            Encap::VxlanGpe => "vxlan-gpe",
            Encap::Geneve => "geneve",
            Encap::Gre => "gre",
        }
    }
}

/// The shim of a block, of either generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyShim {
    /// INT v2.x shim.
    V2(Shim),
    /// INT v1.0 / v0.5 shim.
    Legacy(LegacyShimRepr),
}

/// The INT header of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntHeader {
    /// INT-MD (v2.x).
    Md(MdHeaderRepr),
    /// INT-MX (v2.x).
    Mx(MxHeaderRepr),
    /// INT v1.0 hop-by-hop header.
    V1(V1HeaderRepr),
    /// INT v0.5 hop-by-hop header and its tail.
    V05(V05HeaderRepr, V05TailRepr),
    /// The 2016 specification's metadata header (the v0.5 layout; BOS bits in the stack).
    V2016(V05HeaderRepr),
    /// Destination or unknown type: not decoded (the spec defines no format yet).
    Opaque,
}

/// A decoded INT block. `body` is the metadata stack (MD, v1.0, v0.5), the source-inserted
/// metadata (MX) or the undecoded option data (destination / unknown types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntBlock<'a> {
    /// Where it was found.
    pub encap: Encap,
    /// Its shim.
    pub shim: AnyShim,
    /// Its header.
    pub header: IntHeader,
    /// Stack, source-inserted metadata or opaque data.
    pub body: &'a [u8],
    /// Bytes from the first shim byte to the end of the block (v0.5: tail included).
    pub len: usize,
    /// Tolerated deviations.
    pub warnings: Warnings,
}

/// How to read a v2 shim's Length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthSemantics {
    /// INT v2.x: Length excludes the shim (the spec).
    Spec,
    /// INT v1.0 style: Length includes the shim (tolerated for v2 headers, with a warning).
    CountsShim,
    /// The spec's, in a report's truncated packet: the bytes may end inside the stack; the
    /// header and the whole hops present are decoded (with a warning).
    Truncated,
}
