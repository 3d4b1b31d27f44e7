//! Legacy INT blocks — INT v1.0 and v0.5 after TCP/UDP, v1.0 and the 2016 format in a Geneve
//! option, the 2016 format after VXLAN-GPE — decoded into [`IntBlock`]s from the headers of
//! [`crate::legacy`]. The block parser (module `int`) sends a block here when its bytes say
//! it is one of these generations.

use crate::block::{AnyShim, Encap, IntBlock, IntHeader};
use crate::error::{Error, Field, Layer, Result};
use crate::legacy::{
    LEGACY_HEADER_LEN, LegacyShimRepr, V1HeaderRepr, V05_TAIL_LEN, V05HeaderRepr, V05TailRepr,
};
use crate::shim::{IntType, SHIM_LEN};
use crate::warning::{Warning, Warnings};

/// The version nibble of a v1.0 metadata header (INT v1.0 §"INT Metadata Header Format": 1; 0
/// from the GEANT test generator, with a warning). A v0.5 header has a 2-bit version (0) there
/// and its Rep bits.
const V1_VERSION: u8 = 1;

/// Decodes a v1.0 or v0.5 block after TCP/UDP, starting at its shim. The metadata header tells
/// the generation: version nibble 1 (or 0 with Hop ML consistent with the bitmap) is v1.0, a
/// 2-bit version 0 with an instruction count consistent with the bitmap is v0.5. Any other
/// version is an error at the header (offset 4 of the block).
pub(crate) fn parse_tcp_udp(bytes: &[u8], encap: Encap) -> Result<IntBlock<'_>> {
    let shim = LegacyShimRepr::parse(bytes)?;
    let hdr = bytes
        .get(SHIM_LEN..SHIM_LEN + LEGACY_HEADER_LEN)
        .ok_or_else(|| {
            Error::truncated(
                Layer::IntLegacy,
                SHIM_LEN,
                LEGACY_HEADER_LEN,
                bytes.len().saturating_sub(SHIM_LEN),
            )
        })?;
    let bitmap = u16::from_be_bytes([hdr[4], hdr[5]]);
    let count = bitmap.count_ones() as u8;
    let nibble = hdr[0] >> 4;
    let v05_consistent = hdr[0] >> 6 == 0 && hdr[1] & 0x1f == count && count > 0;
    let v1_consistent = hdr[2] & 0x1f == count;
    let start = SHIM_LEN + LEGACY_HEADER_LEN;
    let mut warnings = Warnings::default();
    if nibble == V1_VERSION || (nibble == 0 && !v05_consistent && v1_consistent) {
        let h = V1HeaderRepr::parse(hdr)?;
        if h.version == 0 {
            warnings.add(Warning::V1HeaderVersion0);
        }
        let total = usize::from(shim.length) * 4;
        if total < start {
            return Err(Error::bad_value(
                Layer::IntShim,
                2,
                Field::LegacyLenV1,
                "at least 3",
                u64::from(shim.length),
            ));
        }
        if total > bytes.len() {
            return Err(Error::bad_length(
                Layer::IntShim,
                2,
                Field::LegacyLen,
                total,
                bytes.len(),
            ));
        }
        return Ok(IntBlock {
            encap,
            shim: AnyShim::Legacy(shim),
            header: IntHeader::V1(h),
            body: &bytes[start..total],
            len: total,
            warnings,
        });
    }
    if !v05_consistent {
        if hdr[0] >> 6 != 0 {
            // Neither v1.0's version nibble (0 or 1) nor v0.5's 2-bit version (0).
            return Err(Error::bad_value(
                Layer::IntLegacy,
                SHIM_LEN,
                Field::Ver,
                "1 (INT v1.0, 4 bits) or 0 (INT v0.5, 2 bits)",
                u64::from(nibble),
            ));
        }
        return Err(Error::bad_value(
            Layer::IntLegacy,
            SHIM_LEN,
            Field::MetadataHeader,
            "a v1.0 or v0.5 header consistent with its instruction bitmap",
            u64::from(u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]])),
        ));
    }
    let h = V05HeaderRepr::parse(hdr)?;
    let counted = usize::from(h.total_hop_count) * usize::from(h.ins_cnt) * 4;
    let by_shim = usize::from(shim.length) * 4;
    let stack_len = if (start + V05_TAIL_LEN..=bytes.len()).contains(&by_shim) {
        let stack_len = by_shim - start - V05_TAIL_LEN;
        if stack_len != counted {
            warnings.add(Warning::LegacyHopCount);
        }
        stack_len
    } else {
        warnings.add(Warning::LegacyShimLength);
        if start + counted + V05_TAIL_LEN > bytes.len() {
            return Err(Error::bad_length(
                Layer::IntLegacy,
                SHIM_LEN + 3,
                Field::TotalHopCount,
                start + counted + V05_TAIL_LEN,
                bytes.len(),
            ));
        }
        counted
    };
    let tail = V05TailRepr::parse(&bytes[start + stack_len..])?;
    Ok(IntBlock {
        encap,
        shim: AnyShim::Legacy(shim),
        header: IntHeader::V05(h, tail),
        body: &bytes[start..start + stack_len],
        len: start + stack_len + V05_TAIL_LEN,
        warnings,
    })
}

/// Decodes legacy INT in a Geneve option (`data`: the option's data after its 4-byte header,
/// as long as its Length says). The 2016 specification (§5.3.1 "INT over Geneve": "The variable
/// length option data following the Geneve Option Header carries the actual INT metadata header
/// and metadata") and INT v1.0 have no shim there: the header follows the option header and the
/// stack fills the option. The header is told as after TCP/UDP ([`parse_tcp_udp`]): version
/// nibble 1, or a version-0 header whose Hop ML (v1.0) or Instruction Count (2016 / v0.5 layout,
/// BOS bits in the stack) matches the bitmap.
pub(crate) fn parse_geneve(
    shim: crate::shim::Shim,
    data: &[u8],
    mut warnings: Warnings,
) -> Result<IntBlock<'_>> {
    let hdr = data.get(..LEGACY_HEADER_LEN).ok_or_else(|| {
        Error::truncated(Layer::IntLegacy, SHIM_LEN, LEGACY_HEADER_LEN, data.len())
    })?;
    let count = u16::from_be_bytes([hdr[4], hdr[5]]).count_ones() as u8;
    let nibble = hdr[0] >> 4;
    let v05_consistent = hdr[0] >> 6 == 0 && hdr[1] & 0x1f == count && count > 0;
    let v1_consistent = hdr[2] & 0x1f == count;
    let body = &data[LEGACY_HEADER_LEN..];
    let header = if nibble == V1_VERSION || (nibble == 0 && !v05_consistent && v1_consistent) {
        let h = V1HeaderRepr::parse(hdr)?;
        if h.version == 0 {
            warnings.add(Warning::V1HeaderVersion0);
        }
        IntHeader::V1(h)
    } else if v05_consistent {
        let h = V05HeaderRepr::parse(hdr)?;
        if usize::from(h.total_hop_count) * usize::from(h.ins_cnt) * 4 != body.len() {
            warnings.add(Warning::LegacyHopCount);
        }
        IntHeader::V2016(h)
    } else {
        return Err(Error::bad_value(
            Layer::IntLegacy,
            SHIM_LEN,
            Field::MetadataHeader,
            "a v2.x, v1.0 or 2016 header consistent with its instruction bitmap",
            u64::from(u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]])),
        ));
    };
    Ok(IntBlock {
        encap: Encap::Geneve,
        shim: AnyShim::V2(shim),
        header,
        body,
        len: SHIM_LEN + data.len(),
        warnings,
    })
}

/// Decodes a 2016-format block after a VXLAN-GPE header (Next Protocol 0x05), starting at its
/// shim. The shim length bounds the block; a Total Hop Count that disagrees with it is a
/// warning. A hop-by-hop header (type 1) must be a version-0 header whose Instruction Count
/// matches its bitmap; a destination header (type 2) is decoded the same way when it is one (as
/// in the specification's example), and kept as opaque data otherwise.
pub(crate) fn parse_gpe_2016(bytes: &[u8]) -> Result<IntBlock<'_>> {
    let shim = LegacyShimRepr::parse(bytes)?;
    let total = usize::from(shim.length) * 4;
    if total < SHIM_LEN {
        return Err(Error::bad_value(
            Layer::IntShim,
            2,
            Field::Length2016,
            "at least 1",
            u64::from(shim.length),
        ));
    }
    if total > bytes.len() {
        return Err(Error::bad_length(
            Layer::IntShim,
            2,
            Field::Length,
            total,
            bytes.len(),
        ));
    }
    let data = &bytes[SHIM_LEN..total];
    let mut warnings = Warnings::default();
    let header = data
        .get(..LEGACY_HEADER_LEN)
        .map(V05HeaderRepr::parse)
        .transpose()?;
    let consistent = |h: &V05HeaderRepr| {
        h.version == 0 && h.ins_cnt > 0 && u32::from(h.ins_cnt) == h.instructions.count_ones()
    };
    let (header, body) = match (IntType::from_raw(shim.int_type), header) {
        (IntType::Md, None) => {
            return Err(Error::truncated(
                Layer::IntLegacy,
                SHIM_LEN,
                LEGACY_HEADER_LEN,
                data.len(),
            ));
        }
        (IntType::Md, Some(h)) if h.version != 0 => {
            return Err(Error::bad_value(
                Layer::IntLegacy,
                SHIM_LEN,
                Field::Ver,
                "0 (2016 specification)",
                u64::from(h.version),
            ));
        }
        (IntType::Md, Some(h)) if !consistent(&h) => {
            return Err(Error::bad_value(
                Layer::IntLegacy,
                SHIM_LEN + 1,
                Field::InstructionCount,
                "the number of bits set in the instruction bitmap",
                u64::from(h.ins_cnt),
            ));
        }
        (IntType::Md | IntType::Destination, Some(h)) if consistent(&h) => {
            let body = &data[LEGACY_HEADER_LEN..];
            let counted = usize::from(h.total_hop_count) * usize::from(h.ins_cnt) * 4;
            if counted != body.len() {
                warnings.add(Warning::LegacyHopCount);
            }
            (IntHeader::V2016(h), body)
        }
        _ => (IntHeader::Opaque, data),
    };
    Ok(IntBlock {
        encap: Encap::VxlanGpe,
        shim: AnyShim::Legacy(shim),
        header,
        body,
        len: total,
        warnings,
    })
}
