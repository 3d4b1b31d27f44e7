//! INT v2.1 §"Examples" and Report v2.0 §"Examples of Telemetry Reports": each example's packet
//! built in the test, decoded to the field values the spec text gives, and re-emitted byte-exact.

mod common;

use common::*;
use intscope_wire::domain::Registry;
use intscope_wire::encap::{GeneveRepr, GreRepr, VxlanGpeRepr};
use intscope_wire::int::{AnyShim, Encap, IntHeader};
use intscope_wire::locate::{DetectConfig, Packet, Start};
use intscope_wire::md::MdHeaderRepr;
use intscope_wire::metadata::{Format, HopMetadata};
use intscope_wire::mx::MxHeaderRepr;
use intscope_wire::report::{
    GroupHeaderRepr, InType, IndividualHeaderRepr, IntMainRepr, Report, TlvHeaderRepr,
};
use intscope_wire::shim::{GeneveOptionRepr, GpeShimRepr, GreShimRepr, Shim, TcpUdpShimRepr};
use intscope_wire::tunnel::{GenevePacket, GrePacket, VxlanPacket};

const INT_PORT: u16 = 17768;

fn cfg() -> DetectConfig {
    DetectConfig {
        int_udp_ports: vec![INT_PORT],
        gre_proto: Some(0x4569),
        verify_checksums: true,
        ..DetectConfig::default()
    }
}

/// Checks the located block against the expected bytes and re-emits it byte-exact.
fn check_reemit(bytes: &[u8], p: &Packet<'_>, registry: Option<&Registry>) {
    let (offset, block) = p.int.expect("INT block");
    let original = &bytes[offset..offset + block.len];
    let mut out = vec![0xa5u8; block.len];
    match (block.shim, block.header) {
        (AnyShim::V2(s), IntHeader::Md(h)) => {
            s.emit(&mut out[..4]);
            h.emit(&mut out[4..16]);
            let (stack, w) = block.stack(registry);
            assert!(
                w.is_empty(),
                "stack warnings {:?}",
                w.iter().collect::<Vec<_>>()
            );
            let mut at = 16;
            for hop in stack {
                let hop = hop.unwrap().to_metadata();
                at += hop.encode(h.instructions, Format::IntV2, &mut out[at..]);
            }
            assert_eq!(at, block.len);
        }
        (AnyShim::V2(s), IntHeader::Mx(h)) => {
            s.emit(&mut out[..4]);
            h.emit(&mut out[4..16]);
            out[16..].copy_from_slice(block.body);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(out, original, "re-emitted INT block differs");
}

fn hops(p: &Packet<'_>) -> Vec<(Option<u32>, Option<u32>)> {
    let (_, block) = p.int.unwrap();
    block
        .stack(None)
        .0
        .map(|h| h.unwrap())
        .map(|h| (h.node_id(), h.queue().map(|q| q.1)))
        .collect()
}

#[test]
fn md_over_tcp() {
    // Switch1 (node 1, occupancy 100) then Switch2 (node 2, occupancy 200); Switch3 receives it.
    let int = md_block(
        tcp_shim(0, 0x17 << 2),
        md(6),
        &[node_q(2, 200), node_q(1, 100)],
        &[],
    );
    assert_eq!(
        &int[..4],
        &[0x10, 7, 0, 0x17 << 2],
        "shim: Type=1 NPT=0 Length=7 DSCP"
    );
    assert_eq!(&int[4..8], &[0x20, 0x00, 0x02, 0x06]);
    let mut payload = int.clone();
    payload.extend_from_slice(b"payload");
    let frame = eth_ipv4(6, 0x17, &tcp(5000, 80, &payload));
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    let (_, b) = p.int.unwrap();
    assert_eq!(b.encap, Encap::Tcp);
    let IntHeader::Md(h) = b.header else { panic!() };
    assert_eq!(
        (
            h.version,
            h.d,
            h.e,
            h.m,
            h.hop_ml,
            h.remaining_hop_count,
            h.instructions
        ),
        (2, false, false, false, 2, 6, 0x9000)
    );
    assert_eq!(hops(&p), vec![(Some(2), Some(200)), (Some(1), Some(100))]);
    assert!(
        p.warnings.is_empty(),
        "{:?}",
        p.warnings.iter().collect::<Vec<_>>()
    );
    check_reemit(&frame, &p, None);
}

#[test]
fn mx_over_tcp() {
    let int = mx_block(
        Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 3,
            npt: 0,
            reserved: 0,
            length: 0,
            content: 0x17 << 2,
        }),
        mx(),
        &[],
    );
    assert_eq!(&int[..8], &[0x30, 3, 0, 0x5c, 0x20, 0, 0, 0]);
    let frame = eth_ipv4(
        6,
        0x17,
        &tcp(5000, 80, &[int.clone(), b"data".to_vec()].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    let (_, b) = p.int.unwrap();
    assert!(
        matches!(b.header, IntHeader::Mx(h) if h.instructions == 0x9000 && h.version == 2 && !h.d)
    );
    check_reemit(&frame, &p, None);
}

#[test]
fn new_udp_md_before_tcp() {
    let int = md_block(tcp_shim(2, 6), md(6), &[node_q(2, 7), node_q(1, 3)], &[]);
    assert_eq!(
        &int[..4],
        &[0x18, 7, 0, 6],
        "Type=1 NPT=2 Length=7 IP proto=6"
    );
    let inner_tcp = tcp(40000, 443, b"hello");
    let frame = eth_ipv4(
        17,
        0,
        &udp_no_checksum(1234, INT_PORT, &[int, inner_tcp].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    let (_, b) = p.int.unwrap();
    assert_eq!(b.encap, Encap::UdpNew);
    let f = p.flow.unwrap();
    assert_eq!(
        (f.proto, f.src_port, f.dst_port),
        (6, 40000, 443),
        "original flow restored"
    );
    assert_eq!(hops(&p), vec![(Some(2), Some(7)), (Some(1), Some(3))]);
    check_reemit(&frame, &p, None);
}

#[test]
fn new_udp_mx_before_tcp() {
    let int = mx_block(
        Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 3,
            npt: 2,
            reserved: 0,
            length: 0,
            content: 6,
        }),
        mx(),
        &[],
    );
    assert_eq!(&int[..4], &[0x38, 3, 0, 6]);
    let frame = eth_ipv4(
        17,
        0,
        &udp_no_checksum(1234, INT_PORT, &[int, tcp(40000, 443, b"x")].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.int.unwrap().1.encap, Encap::UdpNew);
    assert_eq!(p.flow.unwrap().dst_port, 443);
    check_reemit(&frame, &p, None);
}

#[test]
fn md_between_udp_header_and_payload() {
    let xyz = 5001;
    let int = md_block(tcp_shim(1, xyz), md(6), &[node_q(2, 9), node_q(1, 8)], &[]);
    assert_eq!(
        &int[..4],
        &[0x14, 7, 0x13, 0x89],
        "Type=1 NPT=1 Length=7 port XYZ"
    );
    let frame = eth_ipv4(
        17,
        0,
        &udp(3333, INT_PORT, &[int, b"udp payload".to_vec()].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.int.unwrap().1.encap, Encap::Udp);
    assert_eq!(
        p.flow.unwrap().dst_port,
        xyz,
        "original UDP port restored from the shim"
    );
    assert!(p.warnings.is_empty());
    check_reemit(&frame, &p, None);
}

#[test]
fn mx_between_udp_header_and_payload() {
    let int = mx_block(
        Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 3,
            npt: 1,
            reserved: 0,
            length: 0,
            content: 5001,
        }),
        mx(),
        &[],
    );
    assert_eq!(&int[..4], &[0x34, 3, 0x13, 0x89]);
    let frame = eth_ipv4(17, 0, &udp(3333, INT_PORT, &[int, b"p".to_vec()].concat()));
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.flow.unwrap().dst_port, 5001);
    check_reemit(&frame, &p, None);
}

#[test]
fn new_ip_udp_mx_before_ipsec() {
    let int = mx_block(
        Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 3,
            npt: 2,
            reserved: 0,
            length: 0,
            content: 4,
        }),
        mx(),
        &[],
    );
    assert_eq!(
        &int[..4],
        &[0x38, 3, 0, 4],
        "IP proto = 4: an inner IPv4 header follows"
    );
    let ah = [
        51u8, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x22,
        0x33, 0x44, 0x55, 0x66,
    ];
    let inner = ipv4(51, 0, &ah);
    let frame = eth_ipv4(17, 0, &udp_no_checksum(1, INT_PORT, &[int, inner].concat()));
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.flow.unwrap().proto, 4);
    assert_eq!(
        p.inner_flow.unwrap().proto,
        51,
        "the inner IPv4 (AH) is found"
    );
    check_reemit(&frame, &p, None);
}

fn gre_frame(int: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut g = vec![0u8; 4];
    GreRepr {
        flags_version: 0,
        protocol_type: 0x4569,
        checksum: None,
        key: None,
        sequence: None,
    }
    .emit(&mut GrePacket::new_for_emit(&mut g[..]).unwrap())
    .unwrap();
    eth_ipv4(47, 0, &[g, int.to_vec(), inner.to_vec()].concat())
}

#[test]
fn md_and_mx_over_gre() {
    let inner_ip = ipv4(17, 0, &udp(1, 2, b"inner"));
    let inner_eth = [
        vec![0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 8, 0x08, 0x00],
        inner_ip.clone(),
    ]
    .concat();
    for (proto, inner) in [(0x0800u16, &inner_ip), (0x6558, &inner_eth)] {
        let shim = Shim::Gre(GreShimRepr {
            int_type: 1,
            g: true,
            reserved: 0,
            length: 0,
            next_protocol: proto,
        });
        let int = md_block(shim, md(6), &[node_q(2, 5), node_q(1, 4)], &[]);
        assert_eq!(
            &int[..4],
            &[0x18, 7, (proto >> 8) as u8, proto as u8],
            "Type=1 G=1 Length=7 Protocol"
        );
        let frame = gre_frame(&int, inner);
        let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
        assert_eq!(p.int.unwrap().1.encap, Encap::Gre);
        assert_eq!(p.inner_flow.unwrap().dst_port, 2);
        check_reemit(&frame, &p, None);

        let shim = Shim::Gre(GreShimRepr {
            int_type: 3,
            g: true,
            reserved: 0,
            length: 0,
            next_protocol: proto,
        });
        let int = mx_block(shim, mx(), &[]);
        assert_eq!(&int[..4], &[0x38, 3, (proto >> 8) as u8, proto as u8]);
        let frame = gre_frame(&int, inner);
        let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
        assert_eq!(p.inner_flow.unwrap().src_port, 1);
        check_reemit(&frame, &p, None);
    }
}

fn inner_ethernet() -> Vec<u8> {
    [
        vec![0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 8, 0x08, 0x00],
        ipv4(6, 0, &tcp(7, 8, b"in")),
    ]
    .concat()
}

#[test]
fn md_and_mx_over_vxlan_gpe() {
    let gpe = |b: &mut [u8]| {
        VxlanGpeRepr {
            flags: 0x0c,
            reserved: 0,
            next_protocol: 0x82,
            vni: 42,
            reserved2: 0,
        }
        .emit(&mut VxlanPacket::new_checked(b).unwrap())
        .unwrap()
    };
    let mut hdr = vec![0u8; 8];
    gpe(&mut hdr);
    assert_eq!(hdr[0] & 0x0c, 0x0c, "I and P set");
    let shim = Shim::Gpe(GpeShimRepr {
        int_type: 1,
        reserved: 0,
        length: 0,
        g: false,
        reserved2: 0,
        next_protocol: 3,
    });
    let int = md_block(
        shim,
        md(5),
        &[node_q(3, 30), node_q(2, 20), node_q(1, 10)],
        &[],
    );
    assert_eq!(
        &int[..4],
        &[0x10, 9, 0, 3],
        "Type=1 Length=9 G=0 NextProto=3"
    );
    let frame = eth_ipv4(
        17,
        0,
        &udp(999, 4790, &[hdr.clone(), int, inner_ethernet()].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.int.unwrap().1.encap, Encap::VxlanGpe);
    assert_eq!(
        hops(&p),
        vec![
            (Some(3), Some(30)),
            (Some(2), Some(20)),
            (Some(1), Some(10))
        ]
    );
    assert_eq!(p.inner_flow.unwrap().dst_port, 8);
    check_reemit(&frame, &p, None);

    let shim = Shim::Gpe(GpeShimRepr {
        int_type: 3,
        reserved: 0,
        length: 0,
        g: false,
        reserved2: 0,
        next_protocol: 3,
    });
    let int = mx_block(shim, mx(), &[]);
    assert_eq!(&int[..4], &[0x30, 3, 0, 3]);
    let frame = eth_ipv4(
        17,
        0,
        &udp(999, 4790, &[hdr, int, inner_ethernet()].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.inner_flow.unwrap().src_port, 7);
    check_reemit(&frame, &p, None);
}

#[test]
fn md_and_mx_over_geneve() {
    let opt = |t: u8| {
        Shim::Geneve(GeneveOptionRepr {
            option_class: 0x0103,
            option_type: t,
            reserved: 0,
            length: 0,
        })
    };
    let int = md_block(
        opt(1),
        md(5),
        &[node_q(3, 30), node_q(2, 20), node_q(1, 10)],
        &[],
    );
    assert_eq!(
        &int[..4],
        &[0x01, 0x03, 1, 9],
        "Option Class=0x0103 Type=1 Len=9"
    );
    let mut g = vec![0u8; 8 + 4 * 63];
    GeneveRepr {
        version: 0,
        opt_len: 10,
        flags: 0,
        protocol_type: 0x6558,
        vni: 7,
        reserved: 0,
    }
    .emit(&mut GenevePacket::new_for_emit(&mut g[..]).unwrap())
    .unwrap();
    g.truncate(8);
    let frame = eth_ipv4(17, 0, &udp(999, 6081, &[g, int, inner_ethernet()].concat()));
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert_eq!(p.int.unwrap().1.encap, Encap::Geneve);
    assert_eq!(hops(&p).len(), 3);
    assert_eq!(p.inner_flow.unwrap().dst_port, 8);
    check_reemit(&frame, &p, None);

    // The spec text shows OptLen=9 for the MX example too; with one 4-word option the base header's
    // Opt Len must be 4 (RFC 8926: it counts option headers and data).
    let int = mx_block(opt(3), mx(), &[]);
    assert_eq!(&int[..4], &[0x01, 0x03, 3, 3]);
    let mut g = vec![0u8; 8 + 4 * 63];
    GeneveRepr {
        version: 0,
        opt_len: 4,
        flags: 0,
        protocol_type: 0x6558,
        vni: 7,
        reserved: 0,
    }
    .emit(&mut GenevePacket::new_for_emit(&mut g[..]).unwrap())
    .unwrap();
    g.truncate(8);
    let frame = eth_ipv4(17, 0, &udp(999, 6081, &[g, int, inner_ethernet()].concat()));
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    assert!(matches!(p.int.unwrap().1.header, IntHeader::Mx(_)));
    check_reemit(&frame, &p, None);
}

fn registry() -> Registry {
    Registry::from_toml(include_str!("../../../examples/domains.toml")).unwrap()
}

#[test]
fn mx_with_domain_source_inserted_metadata() {
    let header = MxHeaderRepr {
        version: 2,
        instructions: 0x9000,
        ds_id: 0xabcd,
        ds_instruction: 0xc000,
        ..Default::default()
    };
    let si = [15u32.to_be_bytes(), 0x1234_5678u32.to_be_bytes()].concat();
    let int = mx_block(
        Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 3,
            npt: 2,
            reserved: 0,
            length: 0,
            content: 6,
        }),
        header,
        &si,
    );
    assert_eq!(&int[..4], &[0x38, 5, 0, 6], "Length=5");
    assert_eq!(
        &int[8..16],
        &[0x90, 0, 0xab, 0xcd, 0xc0, 0, 0, 0],
        "bitmap, DS ID 0xabcd, DS Instruction bits 0 and 1"
    );
    let frame = eth_ipv4(
        17,
        0,
        &udp_no_checksum(1, INT_PORT, &[int, tcp(1, 2, b"")].concat()),
    );
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    let (_, b) = p.int.unwrap();
    let reg = registry();
    let d = reg.get(0xabcd).unwrap();
    let named = d.split(0xc000, intscope_wire::domain::Mode::SourceInserted, b.body);
    assert_eq!(
        named,
        vec![
            ("sequence_number", &15u32.to_be_bytes()[..]),
            ("flow_id", &0x1234_5678u32.to_be_bytes()[..])
        ]
    );
    check_reemit(&frame, &p, Some(&reg));
}

#[test]
fn md_with_domain_source_only_metadata() {
    // Hop ML=1 (node id); DS ID 0x5453, DS bit 0 = host MAC (8 bytes, source-only), DS flag bit 1.
    let header = MdHeaderRepr {
        version: 2,
        hop_ml: 1,
        remaining_hop_count: 5,
        instructions: 0x8000,
        ds_id: 0x5453,
        ds_instruction: 0x8000,
        ds_flags: 0x4000,
        ..Default::default()
    };
    let node = |n| HopMetadata {
        present: 0x8000,
        node_id: Some(n),
        ..Default::default()
    };
    let mac = [0xa6, 0x1a, 0xf6, 0xb1, 0x64, 0x7d, 0, 0];
    let int = md_block(
        tcp_shim(1, 5001),
        header,
        &[node(3), node(2), node(1)],
        &mac,
    );
    assert_eq!(
        &int[4..16],
        &[0x20, 0, 0x01, 0x05, 0x80, 0, 0x54, 0x53, 0x80, 0, 0x40, 0]
    );
    let frame = eth_ipv4(17, 0, &udp(1, INT_PORT, &int));
    let p = Packet::parse(&frame, Start::Ethernet, &cfg()).unwrap();
    let (_, b) = p.int.unwrap();
    let reg = registry();
    let (stack, w) = b.stack(Some(&reg));
    assert!(w.is_empty());
    let hops: Vec<_> = stack.map(|h| h.unwrap().to_metadata()).collect();
    assert_eq!(
        hops.iter().map(|h| h.node_id.unwrap()).collect::<Vec<_>>(),
        vec![3, 2, 1],
        "hop2, hop1, gateway"
    );
    assert_eq!(
        hops[2].domain, &mac,
        "the gateway carries host1's MAC 0xA61AF6B1647D0000"
    );
    assert!(hops[0].domain.is_empty());
    // Without the registry the 8 bytes cannot be told from two more hops: flagged, not hidden.
    let (_, w) = b.stack(None);
    assert!(w.has(intscope_wire::Warning::UnknownDomain));
    check_reemit(&frame, &p, Some(&reg));
}

/// Report v2.0 example 1: baseline metadata (L1 interfaces + queue) and a truncated IPv4 packet.
#[test]
fn report_baseline_truncated_ipv4() {
    let truncated = ipv4(6, 0, &tcp(1000, 2000, b""))[..40].to_vec();
    let mut b = vec![0u8; 8 + 4 + 8 + 8];
    GroupHeaderRepr {
        version: 2,
        hw_id: 5,
        sequence: 0x2abcde,
        node_id: 3,
    }
    .emit(&mut b[..8]);
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 4,
        report_length: 14,
        md_length: 2,
        f: true,
        ..Default::default()
    }
    .emit(&mut b[8..12]);
    IntMainRepr {
        rep_md_bits: 0x5000,
        ..Default::default()
    }
    .emit(&mut b[12..20]);
    b[20..28].copy_from_slice(&[0, 1, 0, 2, 0x03, 0, 0x10, 0]);
    b.extend_from_slice(&truncated);
    assert_eq!(
        &b[8..12],
        &[0x14, 14, 2, 0x20],
        "RepType 1, InType 4, RepLength 14, MD Length 2, F"
    );
    let r = Report::parse(&b).unwrap();
    let Report::V2 { group, .. } = r else {
        panic!()
    };
    assert_eq!(
        (group.version, group.hw_id, group.sequence, group.node_id),
        (2, 5, 0x2abcde, 3)
    );
    let reports: Vec<_> = r.individual_reports().map(|x| x.unwrap()).collect();
    assert_eq!(reports.len(), 1);
    let ir = reports[0];
    assert_eq!(ir.inner_type, InType::Ipv4);
    assert_eq!(ir.inner.len(), 40, "5 words IP + 5 words TCP");
    let hop = ir.hop().unwrap().unwrap().to_metadata();
    assert_eq!(
        (
            hop.l1_ingress_if,
            hop.l1_egress_if,
            hop.queue_id,
            hop.queue_occupancy
        ),
        (Some(1), Some(2), Some(3), Some(0x1000))
    );
    assert!(ir.warnings.is_empty());
    let inner = Packet::parse(ir.inner, Start::Ipv4, &DetectConfig::default()).unwrap();
    assert_eq!(inner.flow.unwrap().dst_port, 2000);
    // Re-emit.
    let mut out = vec![0xa5u8; 20];
    group.emit(&mut out[..8]);
    ir.header.emit(&mut out[8..12]);
    ir.main.unwrap().emit(&mut out[12..20]);
    let mut md = vec![0xa5u8; 8];
    hop.encode(0x5000, Format::ReportV2, &mut md);
    assert_eq!([out, md, ir.inner.to_vec()].concat(), b);
}

/// Report v2.0 example 2: baseline + one 4-byte DS metadata + TLVs (DS extension data, IPv4).
/// MD Length is 3 (the spec's text says 2; see shared/spec/README.md errata).
#[test]
fn report_with_domain_metadata_and_tlvs() {
    let truncated = ipv4(6, 0, &tcp(1000, 2000, b""))[..40].to_vec();
    let mut b = vec![0u8; 8];
    GroupHeaderRepr {
        version: 2,
        hw_id: 0,
        sequence: 1,
        node_id: 3,
    }
    .emit(&mut b);
    let report_len = 2 + 3 + 2 + 1 + 10;
    let mut ir = vec![0u8; 12];
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 1,
        report_length: report_len,
        md_length: 3,
        f: true,
        ..Default::default()
    }
    .emit(&mut ir[..4]);
    IntMainRepr {
        rep_md_bits: 0x5000,
        ds_id: 0xabcd,
        ds_md_bits: 0x8000,
        ds_md_status: 0,
    }
    .emit(&mut ir[4..12]);
    ir.extend_from_slice(&[0, 1, 0, 2, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef]);
    let mut t0 = vec![0u8; 4];
    TlvHeaderRepr {
        tlv_type: 0,
        reserved: 0,
        length: 1,
        template: 0x0001,
    }
    .emit(&mut t0);
    t0.extend_from_slice(&[1, 2, 3, 4]);
    let mut t1 = vec![0u8; 4];
    TlvHeaderRepr {
        tlv_type: 2,
        reserved: 0,
        length: 10,
        template: 0,
    }
    .emit(&mut t1);
    t1.extend_from_slice(&truncated);
    b.extend([ir, t0, t1].concat());
    let r = Report::parse(&b).unwrap();
    let irs: Vec<_> = r.individual_reports().map(|x| x.unwrap()).collect();
    assert_eq!(irs.len(), 1);
    let hop = irs[0].hop().unwrap().unwrap().to_metadata();
    assert_eq!(
        hop.domain,
        &[0xde, 0xad, 0xbe, 0xef],
        "the domain-specific metadata"
    );
    let tlvs: Vec<_> = irs[0].tlvs().map(|t| t.unwrap()).collect();
    assert_eq!(tlvs.len(), 2);
    assert_eq!(
        (
            tlvs[0].header.in_type(),
            tlvs[0].header.template,
            tlvs[0].data
        ),
        (InType::DsExtension, 1, &[1u8, 2, 3, 4][..])
    );
    assert_eq!(tlvs[1].header.in_type(), InType::Ipv4);
    assert_eq!(tlvs[1].data, &truncated[..]);
}

/// Report v2.0 example 3: the sink's report of INT v2.1 §"new UDP header and INT-MD before TCP",
/// with its own queue occupancy in the report header (MD Length 1) and the stack embedded.
#[test]
fn report_with_embedded_int_md() {
    let int = md_block(
        tcp_shim(2, 6),
        md(6),
        &[node_q(2, 200), node_q(1, 100)],
        &[],
    );
    let orig_tcp = tcp(40000, 443, b"");
    let inner = ipv4(
        17,
        0,
        &udp_no_checksum(1234, INT_PORT, &[int, orig_tcp].concat()),
    );
    assert_eq!(
        inner.len(),
        23 * 4 - 12,
        "5 IP + 2 UDP + 1 shim + 3 INT + 4 stack + 5 TCP words"
    );
    let b = embedded_int_report(&inner);
    // RepType 1, InType 4 (IPv4), Report Length 23, MD Length 1, F; RepMdBits = queue (bit 3).
    assert_eq!(&b[8..14], &[0x14, 23, 1, 0x20, 0x10, 0x00]);
    let r = Report::parse(&b).unwrap();
    let ir = r.individual_reports().next().unwrap().unwrap();
    assert_eq!(ir.header.report_length, 23);
    assert_eq!(
        ir.hop().unwrap().unwrap().to_metadata().queue_occupancy,
        Some(300)
    );
    let p = Packet::parse(ir.inner, Start::Ipv4, &cfg()).unwrap();
    assert_eq!(hops(&p), vec![(Some(2), Some(200)), (Some(1), Some(100))]);
    let f = p.flow.unwrap();
    assert_eq!((f.proto, f.src_port, f.dst_port), (6, 40000, 443));
}
