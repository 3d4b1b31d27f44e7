//! One INT header block — shim, INT-MD / INT-MX / legacy header, and its metadata — located in
//! any encapsulation, decoded zero-copy.
//!
//! The version is read from the bytes, so one decoder reads every generation:
//! * TCP/UDP shim whose first nibble is 0 and second non-zero → INT v1.0 / v0.5 shim
//!   (the [`crate::legacy`] headers); the metadata header then tells v1.0 (version nibble 1, or Hop ML
//!   consistent with the bitmap) from v0.5 (instruction count consistent with the bitmap).
//! * after a VXLAN-GPE header with Next Protocol 0x05, the 2016 specification's shim and header
//!   (`legacy_block::parse_gpe_2016`, private);
//! * otherwise the v2.x shim of the encapsulation, whose Length excludes the shim
//!   (INT v2.1 §"INT over TCP/UDP": "The length of the shim header (1 word) is NOT counted since
//!   INT version 2.0").

pub use crate::block::{AnyShim, Encap, IntBlock, IntHeader, LengthSemantics};
use crate::domain::{Mode, Registry};
use crate::error::{Error, Field, Layer, Result, array, check_len};
use crate::md::{MD_HEADER_LEN, MdHeaderRepr};
use crate::metadata::{Format, Stack};
use crate::mx::{MX_HEADER_LEN, MxHeaderRepr};
use crate::shim::{
    GeneveOption, GpeShim, GreShim, IntType, SHIM_LEN, Shim, TcpUdpShimRepr, check_shim_length,
};
use crate::warning::{Warning, Warnings};

impl<'a> IntBlock<'a> {
    /// Decodes the block starting at `bytes[0]` (the shim, or the Geneve option header).
    #[inline(always)]
    pub fn parse(bytes: &'a [u8], encap: Encap) -> Result<Self> {
        Self::parse_with(bytes, encap, LengthSemantics::Spec)
    }

    /// As [`IntBlock::parse`], reading a v2 shim's Length with the given semantics.
    #[inline(always)]
    pub fn parse_with(bytes: &'a [u8], encap: Encap, semantics: LengthSemantics) -> Result<Self> {
        let mut block = IntBlock::EMPTY;
        block.parse_in_place(bytes, encap, semantics)?;
        Ok(block)
    }

    /// A block of nothing: the value [`IntBlock::parse_in_place`] overwrites.
    pub const EMPTY: IntBlock<'static> = IntBlock {
        encap: Encap::Udp,
        shim: AnyShim::V2(Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 0,
            npt: 0,
            reserved: 0,
            length: 0,
            content: 0,
        })),
        header: IntHeader::Opaque,
        body: &[],
        len: 0,
        warnings: Warnings::EMPTY,
    };

    /// [`IntBlock::parse_with`] into `self`, field by field, for hot paths that keep the block
    /// in a larger value: a block built apart and then moved in was written in narrow stores and
    /// read back in wide loads, a store-forwarding stall that took a fifth of the collector's
    /// INT parsing (perf). On an error `self` is left partly written.
    #[inline(always)]
    pub fn parse_in_place(
        &mut self,
        bytes: &'a [u8],
        encap: Encap,
        semantics: LengthSemantics,
    ) -> Result<()> {
        check_len(Layer::IntShim, bytes, SHIM_LEN)?;
        let shim = match encap {
            Encap::Tcp | Encap::Udp | Encap::UdpNew => {
                if bytes[0] >> 4 == 0 && bytes[0] != 0 {
                    *self = crate::legacy_block::parse_tcp_udp(bytes, encap)?;
                    return Ok(());
                }
                Shim::TcpUdp(TcpUdpShimRepr::from_bytes(array::<SHIM_LEN>(
                    Layer::IntShim,
                    bytes,
                )?))
            }
            Encap::Gre => Shim::Gre(GreShim::new_checked(bytes)?.repr()),
            Encap::VxlanGpe => Shim::Gpe(GpeShim::new_checked(bytes)?.repr()),
            Encap::Geneve => Shim::Geneve(GeneveOption::new_checked(bytes)?.repr()),
        };
        let mut warnings = Warnings::default();
        let words = match semantics {
            LengthSemantics::Spec | LengthSemantics::Truncated => shim.length_words(),
            LengthSemantics::CountsShim => {
                warnings.add(Warning::ShimLengthCountsShim);
                shim.length_words().checked_sub(1).ok_or_else(|| {
                    Error::bad_value(
                        Layer::IntShim,
                        1,
                        Field::Length,
                        "at least 1 when it counts the shim",
                        0,
                    )
                })?
            }
        };
        let after = &bytes[SHIM_LEN..];
        let data = if semantics == LengthSemantics::Truncated && words * 4 > after.len() {
            warnings.add(Warning::TruncatedInt);
            &after[..after.len() / 4 * 4]
        } else {
            check_shim_length(words, after.len())?;
            &after[..words * 4]
        };
        let (header, body) = match shim.int_type() {
            // INT v1.0 and the 2016 specification (§5.3.1 "INT over Geneve") put their own
            // metadata header in a Geneve option; its version tells them from v2.x, as after
            // TCP/UDP.
            IntType::Md if encap == Encap::Geneve && data.first().is_some_and(|b| b >> 4 != 2) => {
                *self = crate::legacy_block::parse_geneve(shim, data, warnings)?;
                return Ok(());
            }
            IntType::Md => {
                let r = MdHeaderRepr::from_bytes(
                    array::<MD_HEADER_LEN>(Layer::IntMd, data).map_err(|e| e.shifted(SHIM_LEN))?,
                );
                if r.version != 2 {
                    return Err(Error::bad_value(
                        Layer::IntMd,
                        SHIM_LEN,
                        Field::Ver,
                        "2",
                        u64::from(r.version),
                    ));
                }
                (IntHeader::Md(r), &data[MD_HEADER_LEN..])
            }
            IntType::Mx => {
                let r = MxHeaderRepr::from_bytes(
                    array::<MX_HEADER_LEN>(Layer::IntMx, data).map_err(|e| e.shifted(SHIM_LEN))?,
                );
                if r.version != 2 {
                    return Err(Error::bad_value(
                        Layer::IntMx,
                        SHIM_LEN,
                        Field::Ver,
                        "2",
                        u64::from(r.version),
                    ));
                }
                (IntHeader::Mx(r), &data[MX_HEADER_LEN..])
            }
            IntType::Destination | IntType::Unknown(_) => (IntHeader::Opaque, data),
        };
        self.encap = encap;
        self.shim = AnyShim::V2(shim);
        self.header = header;
        self.body = body;
        self.len = SHIM_LEN + data.len();
        self.warnings = warnings;
        Ok(())
    }

    /// Decodes a 2016-format block (after VXLAN-GPE Next Protocol 0x05) starting at its shim.
    pub fn parse_2016(bytes: &'a [u8]) -> Result<Self> {
        crate::legacy_block::parse_gpe_2016(bytes)
    }

    /// INT version of the block: 2 (v2.x), 1 (v1.0) or 0 (v0.5 and the 2016 format, whose
    /// headers carry Ver 0).
    pub fn version(&self) -> u8 {
        match self.header {
            IntHeader::V1(_) => 1,
            IntHeader::V05(..) | IntHeader::V2016(_) => 0,
            // A 2016-format block kept whole (its destination header does not fit its bitmap):
            // only that format puts a legacy shim after VXLAN-GPE.
            IntHeader::Opaque
                if matches!(self.shim, AnyShim::Legacy(_)) && self.encap == Encap::VxlanGpe =>
            {
                0
            }
            _ => 2,
        }
    }

    /// The INT header type.
    pub fn int_type(&self) -> IntType {
        match self.shim {
            AnyShim::V2(s) => s.int_type(),
            AnyShim::Legacy(s) => IntType::from_raw(s.int_type),
        }
    }

    /// The metadata stack (empty for MX / opaque blocks), with the warnings its layout raised.
    /// `registry` supplies domain-specific sizes; without it 'source-only' metadata is inferred
    /// from the stack length.
    #[inline]
    pub fn stack(&self, registry: Option<&Registry>) -> (Stack<'a>, Warnings) {
        let mut w = Warnings::default();
        match self.header {
            IntHeader::Md(h) => {
                let hop_len = usize::from(h.hop_ml) * 4;
                let base = Format::IntV2.baseline_len(h.instructions);
                if base > hop_len {
                    w.add(Warning::HopTooShort);
                    return (
                        Stack::new(self.body, h.instructions, Format::IntV2, 0, 0, 0),
                        w,
                    );
                }
                let domain_len = hop_len - base;
                let inferred = if hop_len == 0 {
                    self.body.len()
                } else {
                    self.body.len() % hop_len
                };
                let mut source_only = inferred;
                if h.ds_id != 0 && h.ds_instruction != 0 {
                    let known = registry.and_then(|r| r.get(h.ds_id)).and_then(|d| {
                        let export = d.len_of(h.ds_instruction, Mode::Export)?;
                        let source = d.len_of(h.ds_instruction, Mode::SourceInserted)?;
                        (export == domain_len && self.body.len() >= source).then_some(source)
                    });
                    match known {
                        Some(s) => source_only = s,
                        None => w.add(Warning::UnknownDomain),
                    }
                } else if inferred != 0 {
                    w.add(Warning::StackLeftover);
                }
                let stack = Stack::new(
                    self.body,
                    h.instructions,
                    Format::IntV2,
                    hop_len,
                    domain_len,
                    source_only,
                );
                if stack.leftover() != 0 {
                    w.add(Warning::StackLeftover);
                }
                (stack, w)
            }
            IntHeader::V1(h) => {
                self.legacy_stack(h.instructions, Format::IntV1, usize::from(h.hop_ml) * 4, w)
            }
            IntHeader::V05(h, _) => self.legacy_stack(
                h.instructions,
                Format::IntV05,
                usize::from(h.ins_cnt) * 4,
                w,
            ),
            IntHeader::V2016(h) => {
                // Built inline like the other arms (a `Stack` returned from a call is kept in
                // memory on every path through this match); only the BOS scan is out of line.
                let (missing, misplaced) = self.bos_check();
                if missing {
                    w.add(Warning::BosMissing);
                }
                if misplaced {
                    w.add(Warning::BosMisplaced);
                }
                self.legacy_stack(
                    h.instructions,
                    Format::Int2016,
                    usize::from(h.ins_cnt) * 4,
                    w,
                )
            }
            IntHeader::Mx(h) => (Stack::new(&[], h.instructions, Format::IntV2, 0, 0, 0), w),
            IntHeader::Opaque => (Stack::new(&[], 0, Format::IntV2, 0, 0, 0), w),
        }
    }

    /// Whether the 2016 stack's last word lacks the BOS bit, and whether another word has it
    /// (2016 §5.3.3: BOS marks "the last metadata instance in the stack").
    #[inline(never)]
    fn bos_check(&self) -> (bool, bool) {
        let words = self.body.chunks_exact(4);
        let last = words.len().saturating_sub(1);
        let mut missing = false;
        let mut misplaced = false;
        for (i, word) in words.enumerate() {
            let bos = word[0] & 0x80 != 0;
            if i == last {
                missing = !bos;
            } else {
                misplaced |= bos;
            }
        }
        (missing, misplaced)
    }

    fn legacy_stack(
        &self,
        bitmap: u16,
        format: Format,
        hop_len: usize,
        mut w: Warnings,
    ) -> (Stack<'a>, Warnings) {
        let base = format.baseline_len(bitmap);
        if base > hop_len {
            w.add(Warning::HopTooShort);
            return (Stack::new(self.body, bitmap, format, 0, 0, 0), w);
        }
        let stack = Stack::new(self.body, bitmap, format, hop_len, hop_len - base, 0);
        if stack.leftover() != 0 {
            w.add(Warning::StackLeftover);
        }
        (stack, w)
    }
}
