//! Property tests: `parse(emit(repr)) == repr` for every header type, hop metadata round trips,
//! and no decoder panics on arbitrary bytes.

use intscope_wire::encap::{GeneveRepr, GreRepr, VxlanGpeRepr};
use intscope_wire::int::{Encap, IntBlock};
use intscope_wire::legacy::{LegacyShimRepr, V1HeaderRepr, V05HeaderRepr, V05TailRepr};
use intscope_wire::locate::{DetectConfig, Packet, Start};
use intscope_wire::md::{MdHeader, MdHeaderRepr};
use intscope_wire::metadata::{Format, HopMetadata};
use intscope_wire::mx::{MxHeader, MxHeaderRepr};
use intscope_wire::report::{
    self, GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, Report, TlvHeaderRepr, V05FixedRepr,
    V05SwitchRepr,
};
use intscope_wire::shim::{
    GeneveOption, GeneveOptionRepr, GpeShim, GpeShimRepr, GreShim, GreShimRepr, TcpUdpShim,
    TcpUdpShimRepr,
};
use intscope_wire::tunnel::{GenevePacket, GrePacket, VxlanPacket};
use proptest::prelude::*;

fn roundtrip<R: PartialEq + core::fmt::Debug>(
    r: R,
    len: usize,
    emit: impl Fn(&R, &mut [u8]),
    parse: impl Fn(&[u8]) -> R,
) {
    let mut b = vec![0xa5u8; len];
    emit(&r, &mut b);
    assert_eq!(parse(&b), r);
}

proptest! {
    #[test]
    fn md_header(v in 0u8..16, d: bool, e: bool, m: bool, res in 0u16..0x1000, hop_ml in 0u8..32, rhc: u8, ins: u16, id: u16, dsi: u16, dsf: u16) {
        let r = MdHeaderRepr { version: v, d, e, m, reserved: res, hop_ml, remaining_hop_count: rhc, instructions: ins, ds_id: id, ds_instruction: dsi, ds_flags: dsf };
        roundtrip(r, 12, |r, b| r.emit(b), |b| MdHeaderRepr::parse(&MdHeader::new_checked(b).unwrap()));
    }

    #[test]
    fn mx_header(v in 0u8..16, d: bool, res in 0u32..0x0800_0000, ins: u16, id: u16, dsi: u16, dsf: u16) {
        let r = MxHeaderRepr { version: v, d, reserved: res, instructions: ins, ds_id: id, ds_instruction: dsi, ds_flags: dsf };
        roundtrip(r, 12, |r, b| r.emit(b), |b| MxHeaderRepr::parse(&MxHeader::new_checked(b).unwrap()));
    }

    #[test]
    fn shims(t in 0u8..16, npt in 0u8..4, res in 0u8..4, len: u8, content: u16, g: bool, r3 in 0u8..8, r7 in 0u8..128, np: u8, class: u16, otype: u8, olen in 0u8..32) {
        roundtrip(TcpUdpShimRepr { int_type: t, npt, reserved: res, length: len, content }, 4, |r, b| r.emit(b), |b| TcpUdpShimRepr::parse(&TcpUdpShim::new_checked(b).unwrap()));
        roundtrip(GreShimRepr { int_type: t, g, reserved: r3, length: len, next_protocol: content }, 4, |r, b| r.emit(b), |b| GreShim::new_checked(b).unwrap().repr());
        roundtrip(GpeShimRepr { int_type: t, reserved: res, length: len, g, reserved2: r7, next_protocol: np }, 4, |r, b| r.emit(b), |b| GpeShim::new_checked(b).unwrap().repr());
        roundtrip(GeneveOptionRepr { option_class: class, option_type: otype, reserved: r3, length: olen }, 4, |r, b| r.emit(b), |b| GeneveOption::new_checked(b).unwrap().repr());
    }

    #[test]
    fn legacy_headers(t: u8, r8: u8, len: u8, last: u8, v in 0u8..16, rep in 0u8..4, c: bool, e: bool, m: bool, ml in 0u8..32, rhc: u8, ins: u16, rsv: u16, v2 in 0u8..4, cnt in 0u8..32, maxh: u8, tot: u8, port: u16) {
        roundtrip(LegacyShimRepr { int_type: t, reserved: r8, length: len, last }, 4, |r, b| r.emit(b), |b| LegacyShimRepr::parse(b).unwrap());
        roundtrip(V1HeaderRepr { version: v, rep, c, e, m, hop_ml: ml, remaining_hop_count: rhc, instructions: ins, reserved: rsv }, 8, |r, b| r.emit(b), |b| V1HeaderRepr::parse(b).unwrap());
        roundtrip(V05HeaderRepr { version: v2, rep, c, e, ins_cnt: cnt, max_hop_count: maxh, total_hop_count: tot, instructions: ins, reserved: rsv }, 8, |r, b| r.emit(b), |b| V05HeaderRepr::parse(b).unwrap());
        roundtrip(V05TailRepr { next_proto: t, dest_port: port, dscp: last }, 4, |r, b| r.emit(b), |b| V05TailRepr::parse(b).unwrap());
    }

    #[test]
    fn report_headers(hw in 0u8..64, seq in 0u32..0x40_0000, node: u32, rt in 0u8..16, it in 0u8..16, rl: u8, ml: u8, d: bool, q: bool, f: bool, i: bool, rs in 0u8..16, a: u16, bb: u16, c: u16, dd: u16, tt in 0u8..16) {
        roundtrip(GroupHeaderRepr { version: 2, hw_id: hw, sequence: seq, node_id: node }, 8, |r, b| r.emit(b), |b| GroupHeaderRepr::parse(b).unwrap());
        roundtrip(IndividualHeaderRepr { rep_type: rt, in_type: it, report_length: rl, md_length: ml, d, q, f, i, reserved: rs }, 4, |r, b| r.emit(b), |b| IndividualHeaderRepr::parse(b).unwrap());
        roundtrip(IntMainRepr { rep_md_bits: a, ds_id: bb, ds_md_bits: c, ds_md_status: dd }, 8, |r, b| r.emit(b), |b| IntMainRepr::parse(b).unwrap());
        roundtrip(TlvHeaderRepr { tlv_type: tt, reserved: rs, length: rl, template: a }, 4, |r, b| r.emit(b), |b| TlvHeaderRepr::parse(b).unwrap());
    }

    #[test]
    fn legacy_report_headers(v in 0u8..16, len in 0u8..16, np in 0u8..8, rmb in 0u8..64, rsv in 0u8..64, d: bool, q: bool, f: bool, hw in 0u8..64, sw: u32, seq: u32, ts: u32, r15 in 0u16..0x8000, port: u16, qid: u8, reason: u8, occ in 0u32..0x100_0000) {
        roundtrip(report::V1HeaderRepr { version: v, len, nproto: np, rep_md_bits: rmb, reserved: rsv, d, q, f, hw_id: hw, switch_id: sw, sequence: seq, ingress_ts: ts }, 16, |r, b| r.emit(b), |b| report::V1HeaderRepr::parse(b).unwrap());
        roundtrip(V05FixedRepr { version: v, nproto: len, d, q, f, reserved: r15, hw_id: hw, sequence: seq, ingress_ts: ts }, 12, |r, b| r.emit(b), |b| V05FixedRepr::parse(b).unwrap());
        roundtrip(V05SwitchRepr { switch_id: sw, ingress_port: port, egress_port: port ^ 1, queue_id: qid, drop_reason: Some(reason), pad: port, ..Default::default() }, 12, |r, b| r.emit(b), |b| V05SwitchRepr::parse(b, 1).unwrap());
        roundtrip(V05SwitchRepr { switch_id: sw, ingress_port: port, egress_port: port, queue_id: qid, queue_occupancy: Some(occ), egress_ts: Some(ts), ..Default::default() }, 16, |r, b| r.emit(b), |b| V05SwitchRepr::parse(b, 2).unwrap());
    }

    #[test]
    fn tunnel_headers(flags: u8, res: u16, np: u8, vni in 0u32..0x100_0000, r8: u8, opt in 0u8..64, proto: u16, key: Option<u32>, seq: Option<u32>) {
        roundtrip(VxlanGpeRepr { flags: flags | 0x04, reserved: res, next_protocol: np, vni, reserved2: r8 }, 8, |r, b| r.emit(&mut VxlanPacket::new_checked(b).unwrap()).unwrap(), |b| VxlanGpeRepr::parse(&VxlanPacket::new_checked(b).unwrap()).unwrap());
        let g = GeneveRepr { version: 0, opt_len: opt, flags, protocol_type: proto, vni, reserved: r8 };
        roundtrip(g, g.buffer_len(), |r, b| r.emit(&mut GenevePacket::new_for_emit(b).unwrap()).unwrap(), |b| GeneveRepr::parse(&GenevePacket::new_checked(b).unwrap()).unwrap());
        let fv = 0x2000 * u16::from(key.is_some()) + 0x1000 * u16::from(seq.is_some());
        let gre = GreRepr { flags_version: fv, protocol_type: proto, checksum: None, key, sequence: seq };
        roundtrip(gre, gre.buffer_len(), |r, b| r.emit(&mut GrePacket::new_for_emit(b).unwrap()).unwrap(), |b| GreRepr::parse(&GrePacket::new_checked(b).unwrap()).unwrap());
    }

    #[test]
    fn hop_metadata(bitmap: u16, words in proptest::collection::vec(0u32..0xffff_fffe, 20), domain in proptest::collection::vec(any::<u8>(), 0..3)) {
        // Build the wire bytes directly (no all-ones words), decode, re-encode: identical.
        let domain: Vec<u8> = domain.iter().flat_map(|b| [*b, 0, 0, 1]).collect();
        let len = Format::IntV2.baseline_len(bitmap) + domain.len();
        let mut wire: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        wire.resize(len.max(wire.len()), 0);
        wire.truncate(len);
        let base = Format::IntV2.baseline_len(bitmap & !0x0001);
        wire[base..base + domain.len()].copy_from_slice(&domain);
        // A wide (8-byte) field whose two words are 0xFFFFFFFE-bounded never reads as all ones.
        let (hop, used) = HopMetadata::decode(bitmap, Format::IntV2, &wire, domain.len()).unwrap();
        prop_assert_eq!(used, len);
        let mut out = vec![0xa5u8; len];
        prop_assert_eq!(hop.encode(bitmap, Format::IntV2, &mut out), len);
        prop_assert_eq!(out, wire);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), ports in proptest::collection::vec(any::<u16>(), 0..3)) {
        let cfg = DetectConfig { int_udp_ports: ports.clone(), report_ports: ports, unmarked_int: true, verify_checksums: true, probe_marker: Some(0), gre_proto: Some(0x0800), ..DetectConfig::default() };
        for start in [Start::Ethernet, Start::Ipv4, Start::Ipv6] {
            if let Ok(p) = Packet::parse(&bytes, start, &cfg)
                && let Some((_, b)) = p.int
            {
                b.stack(None).0.for_each(drop);
            }
        }
        for encap in [Encap::Tcp, Encap::UdpNew, Encap::Gre, Encap::VxlanGpe, Encap::Geneve] {
            if let Ok(b) = IntBlock::parse(&bytes, encap) {
                b.stack(None).0.for_each(drop);
            }
        }
        if let Ok(r) = Report::parse(&bytes) {
            for ir in r.individual_reports().flatten() {
                let _ = ir.hop();
                ir.tlvs().for_each(drop);
            }
        }
    }
}

proptest! {
    /// The zero-copy view reads the same values as the owned decode, for every bitmap and format;
    /// the bytes are often all ones ("unavailable").
    #[test]
    fn hop_view_agrees_with_owned_decode(bitmap: u16, bytes in proptest::collection::vec(prop_oneof![any::<u8>(), Just(0xff)], 80), domain_words in 0usize..3, fmt in 0usize..5) {
        let format = [Format::IntV2, Format::ReportV2, Format::IntV1, Format::IntV05, Format::Int2016][fmt];
        let domain_len = domain_words * 4;
        let view = intscope_wire::HopView::new(bitmap, format, &bytes, domain_len).unwrap();
        let (owned, used) = HopMetadata::decode(bitmap, format, &bytes, domain_len).unwrap();
        prop_assert_eq!(view.bytes().len(), used);
        if format == Format::Int2016 {
            // Its words carry a BOS bit: read only by the 2016 accessors.
            let values = [owned.node_id, owned.ingress_port_id, owned.hop_latency, owned.queue_occupancy, owned.ingress_ts.map(|t| t as u32), owned.egress_port_id, owned.queue_congestion, owned.egress_tx_util];
            for (n, v) in values.into_iter().enumerate() {
                prop_assert_eq!(view.value_2016(n as u32), v);
            }
            prop_assert_eq!(view.port_ids_2016(), (owned.ingress_port_id, owned.egress_port_id));
            prop_assert_eq!(view.queue_occupancy_2016(), owned.queue_occupancy);
            prop_assert_eq!(view.queue_congestion(), owned.queue_congestion.map(|c| (None, c)));
            prop_assert_eq!(view.bos_2016(), owned.bos);
            prop_assert_eq!((view.node_id(), view.hop_latency(), view.queue(), view.ingress_ts(), view.egress_tx_util()), (None, None, None, None, None));
            return Ok(());
        }
        prop_assert_eq!(view.node_id(), owned.node_id);
        prop_assert_eq!(view.hop_latency(), owned.hop_latency);
        prop_assert_eq!(view.l1_interfaces(), owned.l1_ingress_if.zip(owned.l1_egress_if));
        prop_assert_eq!(view.l2_interfaces(), owned.l2_ingress_if.zip(owned.l2_egress_if));
        prop_assert_eq!(view.ingress_ts(), owned.ingress_ts);
        prop_assert_eq!(view.egress_ts(), owned.egress_ts);
        prop_assert_eq!(view.egress_tx_util(), owned.egress_tx_util);
        prop_assert_eq!(view.buffer(), owned.buffer_id.zip(owned.buffer_occupancy));
        prop_assert_eq!(view.domain(), owned.domain);
        if bitmap & 0x1000 != 0 {
            prop_assert_eq!(view.queue(), owned.queue_id.zip(owned.queue_occupancy));
        }
        prop_assert_eq!(view.drop().map(|d| d.1), owned.drop_reason);
        if bitmap & 0x0200 != 0 && format == Format::IntV05 {
            prop_assert_eq!(
                view.queue_congestion(),
                owned.queue_congestion.map(|c| (owned.congestion_queue_id, c))
            );
        }
    }
}

proptest! {
    /// The word-at-a-time sum equals RFC 1071's sum of 16-bit words, for any length and start.
    #[test]
    fn ones_complement_sum_matches_rfc1071(data in proptest::collection::vec(any::<u8>(), 0..300), initial in any::<u32>()) {
        let mut reference = u64::from(initial);
        for pair in data.chunks(2) {
            reference += u64::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
        while reference > 0xffff {
            reference = (reference & 0xffff) + (reference >> 16);
        }
        prop_assert_eq!(
            u64::from(intscope_wire::checksum::ones_complement_sum(initial, &data)),
            reference
        );
    }
}
