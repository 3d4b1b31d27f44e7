//! INT v1.0, v0.5 and 2016 headers, as deployed equipment and older P4 programs still emit them.
//!
//! Layouts, from the projects' public sources (cited per item) and the older specs:
//!
//! * **v1.0 shim** (GEANT int-platforms `p4src/int_v1.0/include/headers.p4`, AmLight
//!   `tests/support/int_specs.py`): `type(8) rsvd(8) len(8) dscp(6) rsvd(2)`; `len` counts the
//!   shim, the 8-byte metadata header and the stack, in words.
//! * **v1.0 metadata header** (same sources): `ver(4) rep(2) c(1) e(1) m(1) rsvd(10) hop_ml(5)
//!   rhc(8) | instruction_bitmap(16) rsvd(16)`; every metadata is 4 bytes.
//! * **v0.5 shim** (ONOS fabric.p4 `pipelines/fabric/impl/src/main/resources/include/header.p4`
//!   `intl4_shim_t`, `org.onosproject.monitoring.packet.P4Int`): `type(8) rsvd(8) len(8)
//!   rsvd(8)`; `len` counts shim, header, stack and tail.
//! * **v0.5 metadata header** (same, `int_header_t`): `ver(2) rep(2) c(1) e(1) rsvd(5)
//!   ins_cnt(5) | max_hop(8) total_hop(8) | instruction_bitmap(16) rsvd(16)`.
//! * **v0.5 tail** (same, `intl4_tail_t`): `next_proto(8) dest_port(16) dscp(8)`, after the stack.
//! * **2016 shim for VXLAN-GPE** (`int-spec-2016.txt` §5.3.2 "Header Location and Format -- INT
//!   over VXLAN", Appendix 2 `vxlan_gpe_int_header_t`): `type(8) rsvd(8) len(8) next_proto(8)`,
//!   after a VXLAN-GPE header whose Next Protocol is 0x05 ("In-band Network Telemetry Header");
//!   `len` is "the total length of the variable INT option data and the shim header in 4-byte
//!   words"; `next_proto` names what follows (0x05: another INT header).
//! * **2016 metadata header** (§5.3.3 "INT Metadata Header Format"): the v0.5 header's layout
//!   (`ver(2)` = 0 … `instruction_bitmap(16) rsvd(16)`); "the length (in bytes) of the INT
//!   metadata stack must always be (Instruction Count * 4 * Total Hop Count)"; its metadata words
//!   carry a BOS bit ([`crate::metadata`]). No tail: the shim keeps the next protocol.
//!
//! Wherever a shim length and a header's hop count both describe the stack, the shim length
//! bounds it (what follows the block is decoded from there), and a disagreeing count is a
//! warning. A v0.5 shim length that cannot be right (shorter than the header and tail, or past
//! the bytes: generators that leave it 0) falls back to the count, with a warning.

use crate::error::{Layer, Result, check_len};
use crate::field::{be16, put16};

/// Size of the v1.0 / v0.5 metadata header.
pub const LEGACY_HEADER_LEN: usize = 8;
/// Size of the v0.5 tail header.
pub const V05_TAIL_LEN: usize = 4;

/// Owned v1.0 / v0.5 / 2016 shim (the generations share the byte layout; `len` and the last
/// byte's meaning differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyShimRepr {
    /// INT type (1 = hop-by-hop / MD, 2 = destination).
    pub int_type: u8,
    /// Second byte, reserved.
    pub reserved: u8,
    /// Length in words (v1.0: shim+header+stack; v0.5: also the tail).
    pub length: u8,
    /// Last byte: v1.0 carries the original DSCP in its upper 6 bits; the 2016 VXLAN-GPE shim
    /// the next protocol.
    pub last: u8,
}

impl LegacyShimRepr {
    /// Reads the shim at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::IntShim, b, 4)?;
        Ok(LegacyShimRepr {
            int_type: b[0],
            reserved: b[1],
            length: b[2],
            last: b[3],
        })
    }
    /// Writes the shim.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.int_type;
        b[1] = self.reserved;
        b[2] = self.length;
        b[3] = self.last;
    }
    /// v1.0: the original DSCP.
    pub fn dscp(&self) -> u8 {
        self.last >> 2
    }
}

/// Owned INT v1.0 metadata header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct V1HeaderRepr {
    /// Version (1; 0 from some generators).
    pub version: u8,
    /// Replication (2 bits).
    pub rep: u8,
    /// Copy.
    pub c: bool,
    /// Max hop count exceeded.
    pub e: bool,
    /// MTU exceeded.
    pub m: bool,
    /// Hop metadata length in words.
    pub hop_ml: u8,
    /// Remaining hop count.
    pub remaining_hop_count: u8,
    /// Instruction bitmap.
    pub instructions: u16,
    /// The reserved 16 bits after the bitmap.
    pub reserved: u16,
}

impl V1HeaderRepr {
    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::IntLegacy, b, LEGACY_HEADER_LEN)?;
        Ok(V1HeaderRepr {
            version: b[0] >> 4,
            rep: (b[0] >> 2) & 3,
            c: b[0] & 2 != 0,
            e: b[0] & 1 != 0,
            m: b[1] & 0x80 != 0,
            hop_ml: b[2] & 0x1f,
            remaining_hop_count: b[3],
            instructions: be16(b, 4),
            reserved: be16(b, 6),
        })
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.version << 4)
            | ((self.rep & 3) << 2)
            | (u8::from(self.c) << 1)
            | u8::from(self.e);
        b[1] = u8::from(self.m) << 7;
        b[2] = self.hop_ml & 0x1f;
        b[3] = self.remaining_hop_count;
        put16(b, 4, self.instructions);
        put16(b, 6, self.reserved);
    }
}

/// Owned INT v0.5 metadata header (also the 2016 specification's: the same layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct V05HeaderRepr {
    /// Version (2 bits, 0).
    pub version: u8,
    /// Replication (2 bits).
    pub rep: u8,
    /// Copy.
    pub c: bool,
    /// Max hop count exceeded.
    pub e: bool,
    /// Instruction count (metadata words per hop).
    pub ins_cnt: u8,
    /// Maximum hop count.
    pub max_hop_count: u8,
    /// Hops that added metadata.
    pub total_hop_count: u8,
    /// Instruction bitmap.
    pub instructions: u16,
    /// The reserved 16 bits after the bitmap.
    pub reserved: u16,
}

impl V05HeaderRepr {
    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::IntLegacy, b, LEGACY_HEADER_LEN)?;
        Ok(V05HeaderRepr {
            version: b[0] >> 6,
            rep: (b[0] >> 4) & 3,
            c: b[0] & 0x08 != 0,
            e: b[0] & 0x04 != 0,
            ins_cnt: b[1] & 0x1f,
            max_hop_count: b[2],
            total_hop_count: b[3],
            instructions: be16(b, 4),
            reserved: be16(b, 6),
        })
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.version << 6)
            | ((self.rep & 3) << 4)
            | (u8::from(self.c) << 3)
            | (u8::from(self.e) << 2);
        b[1] = self.ins_cnt & 0x1f;
        b[2] = self.max_hop_count;
        b[3] = self.total_hop_count;
        put16(b, 4, self.instructions);
        put16(b, 6, self.reserved);
    }
}

/// Owned INT v0.5 tail header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct V05TailRepr {
    /// Original IP protocol.
    pub next_proto: u8,
    /// Original L4 destination port.
    pub dest_port: u16,
    /// Original DSCP (whole byte as written).
    pub dscp: u8,
}

impl V05TailRepr {
    /// Reads the tail at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        check_len(Layer::IntLegacy, b, V05_TAIL_LEN)?;
        Ok(V05TailRepr {
            next_proto: b[0],
            dest_port: be16(b, 1),
            dscp: b[3],
        })
    }
    /// Writes the tail.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.next_proto;
        put16(b, 1, self.dest_port);
        b[3] = self.dscp;
    }
}

/// VXLAN-GPE Next Protocol of an INT header in the 2016 specification (§5.3.2: "0x05:
/// In-band Network Telemetry Header"). Later VXLAN-GPE drafts give 0x05 to other payloads, so
/// the locator's `gpe_int_2016` setting can turn it off.
pub const GPE_NEXT_PROTO_INT_2016: u8 = 0x05;
