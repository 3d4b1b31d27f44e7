//! The older INT formats, byte by byte: INT v0.5's bit 6 (ONOS fabric.p4 `int_q_congestion_t`),
//! the 2016 specification's INT over VXLAN-GPE (Next Protocol 0x05, BOS bits, 0x7FFFFFFF), an
//! unknown legacy version, and a v0.5 stack bounded by its shim length.
//!
//! The frames are written out as bytes (not with the crate's emitters) from the layouts the
//! sources give, so a misreading in the decoder cannot cancel out in the test.

mod common;

use common::{eth_ipv4, udp};
use intscope_wire::error::{ErrorKind, Field, Layer};
use intscope_wire::int::{Encap, IntBlock, IntHeader};
use intscope_wire::locate::{DetectConfig, Packet, Start};
use intscope_wire::metadata::{Format, HopMetadata};
use intscope_wire::shim::IntType;
use intscope_wire::warning::Warning;

fn unhex(s: &str) -> Vec<u8> {
    common::unhex(&s.replace(' ', ""))
}

fn hops<'a>(b: &IntBlock<'a>) -> Vec<HopMetadata<'a>> {
    let (stack, w) = b.stack(None);
    assert!(w.is_empty(), "{:?}", w.iter().collect::<Vec<_>>());
    stack.map(|h| h.unwrap().to_metadata()).collect()
}

/// INT v0.5 over UDP (DSCP 0x17): shim `01 00 len 00`, header ver 0 ins_cnt 2, max hop 8, total
/// hop 1, bitmap bits 3 and 6 (0x1200), one hop, tail (UDP, port 5001, DSCP 0), then `payload`.
fn v05_frame(shim_len: u8, total_hops: u8, stack: &str, payload: &[u8]) -> Vec<u8> {
    let mut int = unhex(&format!(
        "0100{shim_len:02x}00 0002 08{total_hops:02x} 1200 0000 {stack} 11 1389 00"
    ));
    int.extend_from_slice(payload);
    eth_ipv4(17, 0x17, &udp(4000, 7777, &int))
}

fn parse(frame: &[u8]) -> Packet<'_> {
    Packet::parse(frame, Start::Ethernet, &DetectConfig::default()).unwrap()
}

#[test]
fn v05_bit6_is_a_queue_id_and_a_24_bit_congestion_status() {
    // Bit 3: queue 5, occupancy 100. Bit 6: queue 2, congestion status 12 (0x0200000C).
    let frame = v05_frame(6, 1, "05000064 0200000c", b"");
    let p = parse(&frame);
    let (_, b) = p.int.unwrap();
    assert!(matches!(b.header, IntHeader::V05(..)));
    let h = hops(&b);
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].queue_id, h[0].queue_occupancy), (Some(5), Some(100)));
    assert_eq!(
        (h[0].congestion_queue_id, h[0].queue_congestion),
        (Some(2), Some(12))
    );
    let names: Vec<_> = h[0].fields(Format::IntV05).map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "queue_id",
            "queue_occupancy",
            "congestion_queue_id",
            "congestion_status"
        ]
    );
    // The zero-copy view, as the collector reads it.
    let view = b.stack(None).0.next().unwrap().unwrap();
    assert_eq!(view.queue_congestion(), Some((Some(2), 12)));
    assert_eq!(
        view.l2_interfaces(),
        None,
        "bit 6 is no level 2 interface pair"
    );
    // An all-ones word: both unavailable; 0xFFFFFF inside a valid word is a number.
    let frame = v05_frame(6, 1, "05000064 ffffffff", b"");
    let p = parse(&frame);
    let h = hops(&p.int.unwrap().1);
    assert_eq!(
        (h[0].congestion_queue_id, h[0].queue_congestion),
        (None, None)
    );
    let frame = v05_frame(6, 1, "05000064 07ffffff", b"");
    let p = parse(&frame);
    let h = hops(&p.int.unwrap().1);
    assert_eq!(
        (h[0].congestion_queue_id, h[0].queue_congestion),
        (Some(7), Some(0xff_ffff))
    );
}

#[test]
fn v05_round_trips_bit6_through_the_encoder() {
    let hop = HopMetadata {
        present: 0x1200,
        queue_id: Some(5),
        queue_occupancy: Some(100),
        congestion_queue_id: Some(2),
        queue_congestion: Some(12),
        ..Default::default()
    };
    let mut out = [0u8; 8];
    assert_eq!(hop.encode(0x1200, Format::IntV05, &mut out), 8);
    assert_eq!(out, [0x05, 0, 0, 0x64, 0x02, 0, 0, 0x0c]);
    let (back, _) = HopMetadata::decode(0x1200, Format::IntV05, &out, 0).unwrap();
    assert_eq!(back, hop);
}

#[test]
fn a_v05_stack_is_bounded_by_the_shim_length() {
    // Shim length 6 words (shim, header, one 2-word hop, tail); the header claims 3 hops, and
    // 12 payload bytes follow the tail.
    let frame = v05_frame(6, 3, "05000064 0200000c", b"payload-byte");
    let p = parse(&frame);
    let (_, b) = p.int.unwrap();
    assert!(b.warnings.has(Warning::LegacyHopCount));
    assert!(!b.warnings.has(Warning::LegacyShimLength));
    let IntHeader::V05(h, tail) = b.header else {
        panic!("{:?}", b.header)
    };
    assert_eq!(h.total_hop_count, 3);
    assert_eq!(b.len, 24, "shim + header + one hop + tail");
    assert_eq!((tail.next_proto, tail.dest_port), (0x11, 5001));
    assert_eq!(p.flow.unwrap().dst_port, 5001, "the tail at the shim's end");
    assert_eq!(hops(&b).len(), 1, "no payload bytes read as hops");
    // A shim length past the packet (or 0, as some generators leave it): the count is used.
    let frame = v05_frame(40, 1, "05000064 0200000c", b"");
    let (_, b) = parse(&frame).int.unwrap();
    assert!(b.warnings.has(Warning::LegacyShimLength));
    assert_eq!(hops(&b).len(), 1);
    // Consistent: no warning.
    let frame = v05_frame(6, 1, "05000064 0200000c", b"xyz");
    let (_, b) = parse(&frame).int.unwrap();
    assert!(b.warnings.is_empty());
}

#[test]
fn an_unknown_legacy_version_is_an_error_at_the_header() {
    // INT v1.0-shaped block (shim len 4: shim, header, one 1-word hop) with version nibble 7.
    for (nibble, ok) in [(1u8, true), (0, true), (7, false), (4, false), (0xf, false)] {
        let int = unhex(&format!(
            "0100045c {:02x}000101 8000 0000 00000009",
            nibble << 4
        ));
        let frame = eth_ipv4(17, 0x17, &udp(4000, 7777, &int));
        let r = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default());
        if ok {
            let (_, b) = r.unwrap().int.unwrap();
            assert!(matches!(b.header, IntHeader::V1(h) if h.version == nibble));
            assert_eq!(hops(&b)[0].node_id, Some(9));
            continue;
        }
        let e = r.unwrap_err();
        assert_eq!(e.layer, Layer::IntLegacy, "nibble {nibble}");
        assert_eq!(
            e.offset,
            14 + 20 + 8 + 4,
            "the metadata header, after the shim"
        );
        assert!(
            matches!(e.kind, ErrorKind::BadValue { field: Field::Ver, found, .. } if found == u64::from(nibble)),
            "{e:?}"
        );
    }
}

/// The 2016 specification's VXLAN-GPE example (§5.4 "Example with VXLAN GPE encapsulation"):
/// a hop-by-hop header (switch ID and queue occupancy from three hops) and a destination header
/// (three queue occupancies), then an Ethernet frame. BOS on the last word of each stack.
fn spec_2016_example(hbh_stack: &str) -> Vec<u8> {
    let inner = eth_ipv4(17, 0, &udp(1111, 2222, b"data"));
    let mut gpe = unhex(&format!(
        "0c000005 00000100 \
         01000905 00021003 90000000 {hbh_stack} \
         02000603 00011003 10000000 0000000b 0000000c 8000000d"
    ));
    gpe.extend_from_slice(&inner);
    eth_ipv4(17, 0, &udp(5555, 4790, &gpe))
}

const HBH: &str = "00000003 0000001e 00000002 00000014 00000001 80000003";

#[test]
fn the_2016_vxlan_gpe_example_decodes() {
    let frame = spec_2016_example(HBH);
    let p = parse(&frame);
    assert!(
        p.warnings.is_empty(),
        "{:?}",
        p.warnings.iter().collect::<Vec<_>>()
    );
    let (offset, b) = p.int.unwrap();
    assert_eq!(offset, 14 + 20 + 8 + 8);
    assert_eq!(
        (b.encap, b.int_type(), b.version()),
        (Encap::VxlanGpe, IntType::Md, 0)
    );
    let IntHeader::V2016(h) = b.header else {
        panic!("{:?}", b.header)
    };
    assert_eq!(
        (
            h.ins_cnt,
            h.max_hop_count,
            h.total_hop_count,
            h.instructions
        ),
        (2, 16, 3, 0x9000)
    );
    let h = hops(&b);
    let got: Vec<_> = h
        .iter()
        .map(|h| (h.node_id, h.queue_id, h.queue_occupancy, h.bos))
        .collect();
    assert_eq!(
        got,
        [
            (Some(3), None, Some(30), false),
            (Some(2), None, Some(20), false),
            (Some(1), None, Some(3), true),
        ],
        "0x80000003 is BOS + occupancy 3, not queue 128"
    );
    let (_, d) = p.int2.unwrap();
    assert_eq!(d.int_type(), IntType::Destination);
    let occ: Vec<_> = hops(&d).iter().map(|h| h.queue_occupancy).collect();
    assert_eq!(occ, [Some(11), Some(12), Some(13)]);
    let inner = p.inner_flow.unwrap();
    assert_eq!((inner.src_port, inner.dst_port), (1111, 2222));
    // The collector's zero-copy view of the bottom hop.
    let v = b.stack(None).0.nth(2).unwrap().unwrap();
    assert_eq!(v.value_2016(0), Some(1), "the switch ID under no BOS");
    assert_eq!(v.node_id(), None, "the generic accessors read no 2016 word");
    assert_eq!(v.queue(), None, "no queue ID in the 2016 format");
    assert_eq!(v.queue_occupancy_2016(), Some(3), "BOS + 3");
    assert!(v.bos_2016());
}

#[test]
fn the_2016_fields_ports_and_invalid_values() {
    // Bits 0, 1, 5, 6, 7 (0xC700): switch 9, ingress port 4,
    // egress port "invalid" (0x7FFFFFFF), congestion 50, tx util 0x7FFFFFFE; one hop, BOS on
    // its last word, which is all ones: BOS + invalid.
    let stack = "00000009 00000004 7fffffff 00000032 ffffffff";
    let inner = eth_ipv4(17, 0, &udp(1, 2, b""));
    let mut gpe = unhex(&format!(
        "0c000005 00000100 01000803 00051001 c7000000 {stack}"
    ));
    gpe.extend_from_slice(&inner);
    let frame = eth_ipv4(17, 0, &udp(5555, 4790, &gpe));
    let p = parse(&frame);
    let (_, b) = p.int.unwrap();
    let h = hops(&b)[0];
    assert_eq!(h.node_id, Some(9));
    assert_eq!(h.ingress_port_id, Some(4));
    assert_eq!(h.egress_port_id, None, "0x7FFFFFFF is invalid");
    assert_eq!(h.queue_congestion, Some(50));
    assert_eq!(h.egress_tx_util, None, "BOS + 0x7FFFFFFF is invalid too");
    assert!(h.bos);
    assert_eq!((h.l1_ingress_if, h.egress_ts), (None, None));
    let names: Vec<_> = h.fields(Format::Int2016).map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "node_id",
            "ingress_port_id",
            "egress_port_id",
            "queue_congestion",
            "egress_tx_util"
        ]
    );
    let v = b.stack(None).0.next().unwrap().unwrap();
    assert_eq!(v.port_ids_2016(), (Some(4), None));
    assert_eq!(v.l1_interfaces(), None);
    assert_eq!(v.egress_ts(), None, "bit 5 is the egress port ID in 2016");
    assert_eq!(v.queue_congestion(), Some((None, 50)));
    // The encoder writes what the decoder read.
    let mut out = [0u8; 20];
    assert_eq!(h.encode(0xc700, Format::Int2016, &mut out), 20);
    assert_eq!(out[..], unhex(stack)[..]);
}

#[test]
fn the_2016_format_warns_of_misplaced_bos_and_disagreeing_counts() {
    // BOS on a middle word instead of the last.
    let frame = spec_2016_example("00000003 8000001e 00000002 00000014 00000001 00000003");
    let (_, b) = parse(&frame).int.unwrap();
    let (_, w) = b.stack(None);
    assert!(w.has(Warning::BosMisplaced) && w.has(Warning::BosMissing));
    // BOS on the last word and also on a middle one: misplaced only.
    let frame = spec_2016_example("00000003 8000001e 00000002 00000014 00000001 80000003");
    let (_, b) = parse(&frame).int.unwrap();
    let (_, w) = b.stack(None);
    assert!(w.has(Warning::BosMisplaced) && !w.has(Warning::BosMissing));
    // Total Hop Count 5 where the shim length holds 3 hops: the shim bounds the stack.
    let mut frame = spec_2016_example(HBH);
    let at = 14 + 20 + 8 + 8 + 4 + 3;
    assert_eq!(frame[at], 3);
    frame[at] = 5;
    let p = parse(&frame);
    let (_, b) = p.int.unwrap();
    assert!(b.warnings.has(Warning::LegacyHopCount));
    assert_eq!(b.stack(None).0.count(), 3);
    assert!(
        p.int2.is_some(),
        "the next block is found at the shim's end"
    );
}

#[test]
fn gpe_next_protocol_5_can_be_turned_off() {
    let frame = spec_2016_example(HBH);
    let cfg = DetectConfig {
        gpe_int_2016: false,
        ..DetectConfig::default()
    };
    let p = Packet::parse(&frame, Start::Ethernet, &cfg).unwrap();
    assert!(p.int.is_none() && p.inner_flow.is_none());
}

#[test]
fn a_malformed_2016_header_is_an_error_at_its_offset() {
    // Instruction Count 3 with two bits set.
    let mut frame = spec_2016_example(HBH);
    let hdr = 14 + 20 + 8 + 8 + 4;
    frame[hdr + 1] = 3;
    let e = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()).unwrap_err();
    assert_eq!((e.layer, e.offset), (Layer::IntLegacy, hdr + 1));
    // A shim length past the frame.
    let mut frame = spec_2016_example(HBH);
    frame[hdr - 2] = 200;
    let e = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()).unwrap_err();
    assert_eq!((e.layer, e.offset), (Layer::IntShim, hdr - 2));
}

#[cfg(feature = "dissect")]
mod json {
    use super::*;
    use intscope_wire::dissect;
    use serde_json::json;

    fn dump(frame: &[u8]) -> serde_json::Value {
        dissect::frame(1, frame, &DetectConfig::default(), None)
    }

    #[test]
    fn v05_bit6_fields() {
        let v = dump(&v05_frame(6, 1, "05000064 0200000c", b""));
        assert_eq!(
            v["int"]["hops"][0],
            json!({"queue_id": 5, "queue_occupancy": 100, "congestion_queue_id": 2, "congestion_status": 12})
        );
    }

    #[test]
    fn the_2016_example() {
        let v = dump(&spec_2016_example(HBH));
        let int = &v["int"];
        assert_eq!(int["spec"], "2016");
        assert_eq!(int["version"], 0);
        assert_eq!(
            int["shim"],
            json!({"type": 1, "length": 9, "next_protocol": 5, "reserved": 0})
        );
        assert_eq!(
            int["hops"][2],
            json!({"node_id": 1, "queue_occupancy": 3, "bos": true})
        );
        assert!(int["hops"][0].get("bos").is_none(), "bos only where set");
        assert_eq!(v["int_stacked"]["type"], "destination");
        assert_eq!(v["int_stacked"]["spec"], "2016");
        assert_eq!(v["int_stacked"]["hops"][2]["queue_occupancy"], 13);
        assert!(
            v.get("warnings").is_none() && v.get("error").is_none(),
            "{v}"
        );
    }

    /// A destination block whose header is not a 2016 header stays opaque data, still a 2016
    /// block.
    #[test]
    fn an_opaque_2016_destination_block() {
        let mut frame = spec_2016_example(HBH);
        let dest_hdr = 14 + 20 + 8 + 8 + 36 + 4;
        assert_eq!(frame[dest_hdr + 1], 1, "Instruction Count");
        frame[dest_hdr + 1] = 9;
        let v = dump(&frame);
        let d = &v["int_stacked"];
        assert_eq!(
            (d["type"].as_str(), d["spec"].as_str()),
            (Some("destination"), Some("2016"))
        );
        assert_eq!(d["shim"]["next_protocol"], 3);
        assert_eq!(d["data"], "0x00091003100000000000000b0000000c8000000d");
        assert!(v["inner_flow"].is_object());
    }

    #[test]
    fn an_unknown_version_keeps_the_layers_before_it() {
        let int = unhex("0100045c 70000101 8000 0000 00000009");
        let v = dump(&eth_ipv4(17, 0x17, &udp(4000, 7777, &int)));
        assert_eq!(v["l4"]["dst_port"], 7777);
        assert_eq!(v["flow"]["dst_port"], 7777);
        assert_eq!(v["error"]["layer"], "int-legacy");
        assert_eq!(v["error"]["offset"], 46);
        assert_eq!(v["error"]["field"], "Ver");
        assert_eq!(v["error"]["found"], 7);
        assert!(v.get("int").is_none());
    }
}

proptest::proptest! {
    /// Any bytes written over the 2016 example (shim, header, stack, inner frame) decode or fail
    /// cleanly, and every stack iteration ends: no panic, no loop.
    #[test]
    fn mutated_2016_frames_never_panic(edits in proptest::collection::vec((50usize..140, proptest::prelude::any::<u8>()), 1..6)) {
        let mut frame = spec_2016_example(HBH);
        for (at, b) in edits {
            if at < frame.len() {
                frame[at] = b;
            }
        }
        if let Ok(p) = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()) {
            for (_, b) in p.int.iter().chain(p.int2.iter()) {
                let (stack, _) = b.stack(None);
                proptest::prop_assert!(stack.take(1000).count() < 1000);
            }
        }
        #[cfg(feature = "dissect")]
        {
            let _ = intscope_wire::dissect::frame(1, &frame, &DetectConfig::default(), None);
        }
    }
}

/// A Geneve frame (UDP 6081, Ethernet inside) whose one option, class 0x0103 type 1, holds
/// `option` (the header and stack after the option header; Length = its words).
fn geneve_frame(option: &str) -> Vec<u8> {
    let data = unhex(option);
    let words = data.len() / 4;
    let mut g = unhex(&format!("{:02x}00 6558 00000700", 1 + words));
    g.extend_from_slice(&[0x01, 0x03, 0x01, words as u8]);
    g.extend_from_slice(&data);
    g.extend_from_slice(&eth_ipv4(17, 0, &udp(1111, 2222, b"data")));
    eth_ipv4(17, 0, &udp(5555, 6081, &g))
}

/// The 2016 specification's Geneve example (§5.3.1 "INT over Geneve", "Example with Geneve
/// encapsulation": InsCnt 2, MaxHopCnt 16, TotalHopCnt 3, switch ID and queue occupancy, BOS on
/// the last word), in the v2.1 option class: read as the VXLAN-GPE path reads it.
#[test]
fn the_2016_geneve_example_decodes() {
    let frame = geneve_frame(&format!("00021003 90000000 {HBH}"));
    let p = parse(&frame);
    let (offset, b) = p.int.unwrap();
    assert_eq!(offset, 14 + 20 + 8 + 8);
    assert_eq!((b.encap, b.version(), b.len), (Encap::Geneve, 0, 4 + 32));
    let IntHeader::V2016(h) = b.header else {
        panic!("{:?}", b.header)
    };
    assert_eq!(
        (h.ins_cnt, h.total_hop_count, h.instructions),
        (2, 3, 0x9000)
    );
    let got: Vec<_> = hops(&b)
        .iter()
        .map(|h| (h.node_id, h.queue_occupancy, h.bos))
        .collect();
    assert_eq!(
        got,
        [
            (Some(3), Some(30), false),
            (Some(2), Some(20), false),
            (Some(1), Some(3), true)
        ]
    );
    let inner = p.inner_flow.unwrap();
    assert_eq!((inner.src_port, inner.dst_port), (1111, 2222));
}

/// An INT v1.0 header in a Geneve option (Ver 1, Hop ML 2, RHC 5, node id + queue): decoded as
/// v1.0 after TCP/UDP is, not refused for its version.
#[test]
fn a_v10_header_in_a_geneve_option_decodes() {
    let frame =
        geneve_frame("10000205 90000000 00000003 0000001e 00000002 00000014 00000001 0000000a");
    let p = parse(&frame);
    let (_, b) = p.int.unwrap();
    assert_eq!((b.encap, b.version()), (Encap::Geneve, 1));
    let IntHeader::V1(h) = b.header else {
        panic!("{:?}", b.header)
    };
    assert_eq!((h.hop_ml, h.remaining_hop_count), (2, 5));
    let nodes: Vec<_> = hops(&b).iter().map(|h| h.node_id).collect();
    assert_eq!(nodes, [Some(3), Some(2), Some(1)]);
    // A header of no generation (version nibble 3) is an error at the header, not a guess.
    let e = Packet::parse(
        &geneve_frame("30000205 90000000 00000003 0000001e"),
        Start::Ethernet,
        &DetectConfig::default(),
    )
    .unwrap_err();
    assert_eq!(e.layer, Layer::IntLegacy);
}
