//! Encapsulation and report features beyond the spec's worked examples: probe marker, stacked
//! VXLAN-GPE INT headers, IPv6, GRE optional fields, coalesced reports, Report Length 0xFF, and
//! lengths that lie.

mod common;

use common::*;
use intscope_wire::encap::{GreRepr, VxlanGpeRepr};
use intscope_wire::error::{ErrorKind, Field, Layer};
use intscope_wire::int::{Encap, IntHeader};
use intscope_wire::locate::{DetectConfig, Packet, Start};
use intscope_wire::report::{GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, Report};
use intscope_wire::shim::{GpeShimRepr, GreShimRepr, IntType, Shim};
use intscope_wire::tunnel::{GrePacket, VxlanPacket};

#[test]
fn probe_marker_signals_int() {
    let marker = 0x1122_3344_5566_7788u64;
    let int = md_block(tcp_shim(0, 0), md(6), &[node_q(2, 1), node_q(1, 2)], &[]);
    let frame = eth_ipv4(
        17,
        0,
        &udp(
            1,
            2,
            &[marker.to_be_bytes().to_vec(), int, b"data".to_vec()].concat(),
        ),
    );
    let cfg = DetectConfig {
        dscp: None,
        probe_marker: Some(marker),
        ..DetectConfig::default()
    };
    let p = Packet::parse(&frame, Start::Ethernet, &cfg).unwrap();
    let (offset, b) = p.int.unwrap();
    assert_eq!(
        offset,
        14 + 20 + 8 + 8,
        "the shim follows the 8-byte marker"
    );
    assert_eq!(b.stack(None).0.count(), 2);
    // Without the marker configured, the same frame carries no INT.
    let cfg = DetectConfig {
        dscp: None,
        ..DetectConfig::default()
    };
    assert!(
        Packet::parse(&frame, Start::Ethernet, &cfg)
            .unwrap()
            .int
            .is_none()
    );
}

#[test]
fn dscp_bit_mask_matches_a_flag() {
    let int = md_block(tcp_shim(0, 0), md(6), &[node_q(1, 1)], &[]);
    let frame = eth_ipv4(6, 0x20 | 0x0a, &tcp(1, 2, &int));
    let flag = DetectConfig {
        dscp: Some(intscope_wire::locate::DscpMatch {
            value: 0x20,
            mask: 0x20,
        }),
        ..DetectConfig::default()
    };
    assert!(
        Packet::parse(&frame, Start::Ethernet, &flag)
            .unwrap()
            .int
            .is_some(),
        "DSCP bit 0x20 set, QoS bits free"
    );
    assert!(
        Packet::parse(&frame, Start::Ethernet, &DetectConfig::default())
            .unwrap()
            .int
            .is_none(),
        "0x2a is not value 0x17"
    );
}

#[test]
fn vxlan_gpe_stacked_md_and_destination_headers() {
    let mut gpe = vec![0u8; 8];
    VxlanGpeRepr {
        flags: 0x0c,
        reserved: 0,
        next_protocol: 0x82,
        vni: 1,
        reserved2: 0,
    }
    .emit(&mut VxlanPacket::new_checked(&mut gpe[..]).unwrap())
    .unwrap();
    // First INT header (MD) points at another INT header (0x82); the last points at Ethernet.
    let first = md_block(
        Shim::Gpe(GpeShimRepr {
            int_type: 1,
            reserved: 0,
            length: 0,
            g: true,
            reserved2: 0,
            next_protocol: 0x82,
        }),
        md(6),
        &[node_q(1, 1)],
        &[],
    );
    let mut dest = vec![0u8; 4];
    Shim::Gpe(GpeShimRepr {
        int_type: 2,
        reserved: 0,
        length: 2,
        g: false,
        reserved2: 0,
        next_protocol: 3,
    })
    .emit(&mut dest);
    dest.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 42]);
    let inner = [
        vec![0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 8, 0x08, 0x00],
        ipv4(17, 0, &udp(11, 22, b"x")),
    ]
    .concat();
    let frame = eth_ipv4(17, 0, &udp(5, 4790, &[gpe, first, dest, inner].concat()));
    let p = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()).unwrap();
    let (_, a) = p.int.unwrap();
    let (_, b) = p.int2.unwrap();
    assert!(matches!(a.header, IntHeader::Md(_)));
    assert_eq!(b.int_type(), IntType::Destination);
    assert_eq!(b.body, &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 42]);
    assert_eq!(p.inner_flow.unwrap().dst_port, 22);
}

#[test]
fn int_over_ipv6_udp() {
    let int = md_block(tcp_shim(1, 4791), md(6), &[node_q(2, 5), node_q(1, 6)], &[]);
    let payload = [int, b"v6".to_vec()].concat();
    let mut ip6 = vec![0x60, 0, 0, 0];
    ip6.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    ip6.extend_from_slice(&[17, 64]);
    ip6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    ip6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    let u = udp_no_checksum(7, 17768, &payload);
    let frame = [vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x86, 0xdd], ip6, u].concat();
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        ..DetectConfig::default()
    };
    let p = Packet::parse(&frame, Start::Ethernet, &cfg).unwrap();
    assert_eq!(p.ip.unwrap().version, 6);
    assert_eq!(p.flow.unwrap().src_ip().to_string(), "2001:db8::1");
    assert_eq!(p.flow.unwrap().dst_port, 4791);
    assert_eq!(p.int.unwrap().1.stack(None).0.count(), 2);
}

#[test]
fn gre_with_key_and_sequence() {
    let mut g = vec![0u8; 12];
    let gre = GreRepr {
        flags_version: 0x3000,
        protocol_type: 0x4569,
        checksum: None,
        key: Some(7),
        sequence: Some(9),
    };
    assert_eq!(gre.header_len(), 12);
    gre.emit(&mut GrePacket::new_for_emit(&mut g[..]).unwrap())
        .unwrap();
    let int = md_block(
        Shim::Gre(GreShimRepr {
            int_type: 1,
            g: false,
            reserved: 0,
            length: 0,
            next_protocol: 0x0800,
        }),
        md(6),
        &[node_q(1, 1)],
        &[],
    );
    let frame = eth_ipv4(47, 0, &[g, int, ipv4(6, 0, &tcp(3, 4, b""))].concat());
    let cfg = DetectConfig {
        gre_proto: Some(0x4569),
        ..DetectConfig::default()
    };
    let p = Packet::parse(&frame, Start::Ethernet, &cfg).unwrap();
    assert_eq!(p.int.unwrap().1.encap, Encap::Gre);
    assert_eq!(p.inner_flow.unwrap().dst_port, 4);
}

#[test]
fn shim_length_beyond_the_packet_is_rejected() {
    let mut int = md_block(tcp_shim(0, 0), md(6), &[node_q(1, 1)], &[]);
    int[1] = 200;
    let frame = eth_ipv4(6, 0x17, &tcp(1, 2, &int));
    let e = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()).unwrap_err();
    assert_eq!(e.layer, Layer::IntShim);
    assert_eq!(e.offset, 14 + 20 + 20);
    assert!(
        matches!(e.kind, ErrorKind::BadLength { claimed: 800, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("Length claims 800 bytes"));
}

fn individual(report_length: u8, inner: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; 16];
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 4,
        report_length,
        md_length: 1,
        f: true,
        ..Default::default()
    }
    .emit(&mut r[..4]);
    IntMainRepr {
        rep_md_bits: 0x8000,
        ..Default::default()
    }
    .emit(&mut r[4..12]);
    r[12..16].copy_from_slice(&7u32.to_be_bytes());
    r.extend_from_slice(inner);
    r
}

#[test]
fn coalesced_reports_and_report_length_ff() {
    let inner = ipv4(17, 0, &udp(1, 2, b"abcd"))[..28].to_vec();
    let words = ((12 + inner.len()) / 4) as u8;
    let mut d = vec![0u8; 8];
    GroupHeaderRepr {
        version: 2,
        hw_id: 3,
        sequence: 100,
        node_id: 5,
    }
    .emit(&mut d);
    d.extend(individual(words, &inner));
    d.extend(individual(words, &inner));
    d.extend(individual(0xff, &ipv4(17, 0, &udp(1, 2, &[0u8; 300]))));
    let r = Report::parse(&d).unwrap();
    let all: Vec<_> = r.individual_reports().map(|x| x.unwrap()).collect();
    assert_eq!(all.len(), 3);
    assert!(all.iter().all(|x| x.warnings.is_empty()));
    assert_eq!(all[1].offset, 8 + 4 + usize::from(words) * 4);
    assert_eq!(
        all[2].inner.len(),
        20 + 8 + 300,
        "0xFF: to the end of the datagram"
    );
    assert_eq!(all[0].hop().unwrap().unwrap().node_id(), Some(7));
}

#[test]
fn report_length_beyond_the_datagram_is_an_error() {
    let mut d = vec![0u8; 8];
    GroupHeaderRepr {
        version: 2,
        hw_id: 0,
        sequence: 0,
        node_id: 1,
    }
    .emit(&mut d);
    d.extend(individual(200, &[0u8; 8]));
    let r = Report::parse(&d).unwrap();
    let e = r.individual_reports().next().unwrap().unwrap_err();
    assert_eq!((e.layer, e.offset), (Layer::ReportIndividual, 9));
    assert!(matches!(
        e.kind,
        ErrorKind::BadLength {
            claimed: 804,
            available: 24,
            ..
        }
    ));
}

#[test]
fn unknown_report_version_is_an_error() {
    let e = Report::parse(&[0x70, 0, 0, 0, 0, 0, 0, 0]).unwrap_err();
    assert!(
        e.to_string()
            .contains("Ver expected 2 (v2.0), 1 (v1.0) or 0 (v0.5), found 7"),
        "{e}"
    );
}

#[test]
fn a_report_truncating_the_stack_still_yields_header_and_whole_hops() {
    let hops = [node_q(3, 3), node_q(2, 2), node_q(1, 1)];
    let int = md_block(tcp_shim(1, 80), md(6), &hops, &[]);
    let frame = eth_ipv4(17, 0, &udp_no_checksum(1, 17768, &int));
    // Cut inside the third hop, as a switch truncating its reports would.
    let cut = &frame[..frame.len() - 4];
    let strict = DetectConfig {
        int_udp_ports: vec![17768],
        ..DetectConfig::default()
    };
    assert_eq!(
        Packet::parse(cut, Start::Ethernet, &strict)
            .unwrap_err()
            .layer,
        Layer::IntShim
    );
    // Located in place, the failed packet still tells its outer 5-tuple, ports included.
    let mut p = Packet::new(cut);
    assert!(p.locate(Start::Ethernet, &strict).is_err());
    let outer = p.flow.expect("the outer flow stands");
    assert_eq!(
        (outer.proto, outer.src_port, outer.dst_port),
        (17, 1, 17768)
    );
    let lenient = DetectConfig {
        truncated: true,
        ..strict
    };
    let p = Packet::parse(cut, Start::Ethernet, &lenient).unwrap();
    let (_, b) = p.int.unwrap();
    assert!(b.warnings.has(intscope_wire::Warning::TruncatedInt));
    assert!(matches!(b.header, IntHeader::Md(h) if h.remaining_hop_count == 6));
    let got: Vec<_> = b
        .stack(None)
        .0
        .filter_map(Result::ok)
        .map(|h| h.node_id())
        .collect();
    assert_eq!(got, vec![Some(3), Some(2)], "the two whole hops");
    assert_eq!(p.flow.unwrap().dst_port, 80);
}

/// A GTP-U G-PDU (3GPP TS 29.281) with a PDU Session Container extension header around `inner`.
fn gtpu(inner: &[u8], message_type: u8) -> Vec<u8> {
    // Version 1, PT 1, E set: the optional word and one extension header follow.
    let mut g = vec![0x34, message_type, 0, 0, 0x00, 0x00, 0x12, 0x34];
    g.extend_from_slice(&[0, 0, 0, 0x85]); // sequence, N-PDU, next: PDU Session Container
    g.extend_from_slice(&[1, 0x10, 0x09, 0]); // 4 bytes (QFI 9), next: none
    g.extend_from_slice(inner);
    let len = (g.len() - 8) as u16;
    g[2..4].copy_from_slice(&len.to_be_bytes());
    g
}

#[test]
fn gtpu_tunnels_yield_the_users_flow() {
    let mut inner = Vec::new();
    etherparse::PacketBuilder::ipv4([172, 16, 0, 7], [8, 8, 4, 4], 63)
        .tcp(51000, 443, 1, 1000)
        .write(&mut inner, b"user data")
        .unwrap();
    let frame = eth_ipv4(17, 0, &udp(2152, 2152, &gtpu(&inner, 0xff)));
    let p = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()).unwrap();
    assert_eq!(
        p.flow.unwrap().dst_port,
        2152,
        "the outer flow is the tunnel's"
    );
    let f = p.inner_flow.expect("the user's flow");
    assert_eq!(
        (
            f.src_ip().to_string(),
            f.dst_ip().to_string(),
            f.proto,
            f.src_port,
            f.dst_port
        ),
        ("172.16.0.7".into(), "8.8.4.4".into(), 6, 51000, 443)
    );

    // An echo request (no user packet), GTP-U detection off, a lying extension length.
    let echo = eth_ipv4(17, 0, &udp(2152, 2152, &gtpu(&inner, 1)));
    let p = Packet::parse(&echo, Start::Ethernet, &DetectConfig::default()).unwrap();
    assert!(p.inner_flow.is_none());
    let off = DetectConfig {
        gtpu_port: None,
        ..DetectConfig::default()
    };
    assert!(
        Packet::parse(&frame, Start::Ethernet, &off)
            .unwrap()
            .inner_flow
            .is_none()
    );
    let mut bad = gtpu(&inner, 0xff);
    bad[12] = 200; // extension header length: 800 bytes
    let frame = eth_ipv4(17, 0, &udp(2152, 2152, &bad));
    let e = Packet::parse(&frame, Start::Ethernet, &DetectConfig::default()).unwrap_err();
    assert_eq!((e.layer, e.offset), (Layer::GtpU, 14 + 20 + 8 + 12));
    assert!(matches!(
        e.kind,
        ErrorKind::BadLength {
            field: Field::ExtensionHeaderLength,
            ..
        }
    ));
}
