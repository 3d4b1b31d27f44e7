//! The INT transit hop (INT v2.1 §"INT Transit Hop Node"): its metadata pushed on the INT-MD stack,
//! E and M bits, intermediate reports (§"MTU Settings"), DS Flags of known domains.

use super::report::{DsFields, ReportFlags};
use super::source::GENEVE_OPTION_MAX;
use super::{Node, shim_of};
use crate::config::Unsupported;
use crate::frame::{self, Layout};
use crate::telemetry::Telemetry;
use intscope_wire::domain::Mode as DsMode;
use intscope_wire::int::AnyShim;
use intscope_wire::md::{MD_HEADER_LEN, MdHeaderRepr};
use intscope_wire::metadata::{BIT15, Format, NODE_ID, RESERVED_BITS};
use intscope_wire::mx::MxHeaderRepr;
use intscope_wire::shim::{SHIM_LEN, Shim};

/// Where DS Flags sit in the INT-MX header (INT v2.1 §"INT-MX Header Format": the last 16 bits
/// of its 12 bytes).
pub(super) const MX_DS_FLAGS_AT: usize = 10;

/// The most metadata one hop adds: Hop ML is 5 bits of 4-byte words (INT v2.1 §"INT-MD Metadata
/// Header Format").
pub(super) const MAX_HOP_BYTES: usize = 31 * 4;

impl Node {
    /// INT v2.1 §"INT-MX Header Format": "Intermediate transit nodes may set bits in the DS
    /// Flags field" — a known domain's, with the L4 (or GRE) checksum kept right.
    pub(super) fn set_mx_ds_flags(
        &self,
        frame: &mut [u8],
        l: &Layout,
        off: usize,
        h: &MxHeaderRepr,
    ) {
        let Some(d) = self.domain(h.ds_id) else {
            return;
        };
        let flags = h.ds_flags | d.set_ds_flags;
        if flags != h.ds_flags {
            let at = off + SHIM_LEN + MX_DS_FLAGS_AT;
            frame::payload_overwrite(frame, l, at, &flags.to_be_bytes());
        }
    }

    /// INT v2.1 §"INT-MD Metadata Header Format": prepend metadata, decrement RHC; E bit at
    /// RHC 0 and M bit without room, adding nothing (and not decrementing).
    pub(super) fn transit(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        shim: AnyShim,
        h: MdHeaderRepr,
        tel: &dyn Telemetry,
    ) {
        // The hot path: no allocation and no second parse. Only the shim and MD header change,
        // and this hop's metadata goes in right after them (the top of the stack), so the L4
        // checksum is updated from those bytes alone.
        const HEAD: usize = SHIM_LEN + MD_HEADER_LEN;
        let hop_len = usize::from(h.hop_ml) * 4;
        // INT v2.1 §"INT-MD Metadata Header Format": domain-specific metadata of a known domain
        // is this node's (its values, all ones where it has none, and its DS Flags set); of a
        // domain it does not know (Hop ML beyond the bitmap's), or for reserved instruction bits,
        // all ones — or, configured so, the hop skips INT processing altogether.
        let base = Format::IntV2.baseline_len(h.instructions);
        let ds_len = hop_len.saturating_sub(base);
        let known = match h.ds_id {
            0 => None,
            id => self.domains.iter().position(|d| {
                d.id == id && d.len_of(h.ds_instruction, DsMode::Export) == Some(ds_len)
            }),
        };
        let unknown_domain = ds_len > 0 && known.is_none();
        if (unknown_domain && self.cfg.unknown_domain == Unsupported::Skip)
            || (h.instructions & RESERVED_BITS != 0 && self.cfg.reserved_bits == Unsupported::Skip)
        {
            self.stats.skipped += 1;
            return;
        }
        let mut header = h;
        if let Some(i) = known {
            header.ds_flags |= self.domains[i].set_ds_flags;
        }
        let mut new = [0u8; HEAD + MAX_HOP_BYTES];
        let mut own = 0;
        if h.remaining_hop_count == 0 {
            header.e = true;
            self.stats.hop_limit += 1;
        } else if l.ip_len + hop_len > self.cfg.mtu
            || matches!(shim, AnyShim::V2(Shim::Geneve(g))
                if usize::from(g.length) * 4 + hop_len > GENEVE_OPTION_MAX)
        {
            // No room under the MTU, or in the Geneve option.
            header.m = true;
            self.stats.mtu += 1;
        } else {
            own = hop_len;
            let hop = &mut new[HEAD..HEAD + hop_len];
            if base <= hop_len {
                tel.hop(self.cfg.node_id)
                    .encode(h.instructions, Format::IntV2, hop);
                match known {
                    Some(i) => {
                        // Before the Checksum Complement, which stays last: all ones until
                        // the checksum below computes it, and all ones if this node updates
                        // the L4 checksum instead (§"Checksum Update": "must be assigned the
                        // reserved value 0xFFFFFFFF").
                        let complement = if h.instructions & BIT15 != 0 { 4 } else { 0 };
                        let at = base - complement;
                        let ds = &mut hop[at..at + ds_len];
                        self.domains[i].fill_export(h.ds_instruction, ds);
                        hop[hop_len - complement..].fill(0xff);
                    }
                    // A domain this node does not know: all ones (pad).
                    None => hop[base..].fill(0xff),
                }
            } else {
                hop.fill(0xff);
            }
            header.remaining_hop_count -= 1;
            self.stats.added += 1;
        }
        let mut old = [0u8; HEAD];
        old.copy_from_slice(&frame[off..off + HEAD]);
        new[..HEAD].copy_from_slice(&old);
        header.emit(&mut new[SHIM_LEN..HEAD]);
        if own > 0 {
            let mut s = shim_of(shim);
            s.set_length_words((s.length_words() + own / 4) as u8);
            s.emit(&mut new[..SHIM_LEN]);
        }
        if l.is_tcp_udp() {
            let old_len = frame::l4_len(frame, l);
            let new_len = old_len + own as u16;
            let udp = l.is_udp();
            let old_csum = frame::l4_checksum(frame, l);
            let csum = frame::updated_l4_checksum(
                old_csum,
                udp,
                &old,
                &new[..HEAD + own],
                old_len,
                new_len,
                udp,
            );
            if own > 0 && self.complements(h.instructions, udp, old_csum) {
                let c = intscope_wire::checksum::checksum_complement(old_csum, csum);
                new[HEAD + own - 4..HEAD + own].copy_from_slice(&c.to_be_bytes());
            } else {
                frame::set_l4_checksum(frame, l, csum);
            }
            if udp {
                frame::set_udp_len(frame, l, new_len);
            }
        }
        let new = &new[..HEAD + own];
        if matches!(shim, AnyShim::V2(Shim::Geneve(_))) && own > 0 {
            // The option grew: so do the Geneve header's options (checked above: it fits).
            frame::adjust_geneve_opt_len(frame, l, (own / 4) as isize);
        }
        frame[off..off + HEAD].copy_from_slice(&new[..HEAD]);
        frame::insert(frame, off + HEAD, &new[HEAD..]);
        frame::payload_resized(frame, l, own as isize);
    }

    /// INT v2.1 §"MTU Settings", the second choice of a transit hop without room for its
    /// metadata: report the stack collected so far with this hop's metadata in an Intermediate
    /// Report (I bit), and remove the stack from the packet, which goes on with an empty one.
    /// The report is not subject to the report filters: it carries other hops' metadata.
    pub(super) fn intermediate_report(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        shim: AnyShim,
        h: MdHeaderRepr,
        tel: &dyn Telemetry,
    ) -> Vec<u8> {
        const HEAD: usize = SHIM_LEN + MD_HEADER_LEN;
        let hop = tel.hop(self.cfg.node_id);
        let bits = h.instructions & !NODE_ID & !BIT15 & hop.available_bits();
        let flags = ReportFlags {
            intermediate: true,
            tracked: true,
            flow: true,
            ..ReportFlags::default()
        };
        let ds = self.ds_report(DsFields::of_md(&h));
        let report = self.build_report(frame, &hop, bits, flags, &ds);
        self.stats.intermediate += 1;

        let mut s = shim_of(shim);
        let stack = s.length_words() * 4 - MD_HEADER_LEN;
        let mut head = [0u8; HEAD];
        head.copy_from_slice(&frame[off..off + HEAD]);
        s.set_length_words((MD_HEADER_LEN / 4) as u8);
        s.emit(&mut head[..SHIM_LEN]);
        if l.is_tcp_udp() {
            let old_len = frame::l4_len(frame, l);
            let new_len = old_len - stack as u16;
            let udp = l.is_udp();
            let csum = frame::updated_l4_checksum(
                frame::l4_checksum(frame, l),
                udp,
                &frame[off..off + HEAD + stack],
                &head,
                old_len,
                new_len,
                udp,
            );
            frame::set_l4_checksum(frame, l, csum);
            if udp {
                frame::set_udp_len(frame, l, new_len);
            }
        }
        frame[off..off + HEAD].copy_from_slice(&head);
        frame::remove(frame, off + HEAD, stack);
        frame::payload_resized(frame, l, -(stack as isize));
        report
    }

    /// Whether this node keeps the L4 checksum with the Checksum Complement (INT v2.1
    /// §"Checksum Update"): the source allows it (instruction bit 15), the configuration wants it,
    /// and there is a checksum to keep (a zero UDP checksum means none).
    pub(super) fn complements(&self, instructions: u16, udp: bool, checksum: u16) -> bool {
        instructions & BIT15 != 0 && self.cfg.use_checksum_complement && !(udp && checksum == 0)
    }
}
