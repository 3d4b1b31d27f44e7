//! IP fragments and headers cut short: RFC 791 (only the first fragment of a datagram holds the
//! L4 header; "fragment offset ... measured in units of 8 octets") and RFC 8200 §4.5 (the IPv6
//! Fragment extension header: Fragment Offset 13 bits, M flag).

mod common;

use common::*;
use intscope_wire::error::{ErrorKind, Layer};
use intscope_wire::{DetectConfig, Packet, Start, Warning};

/// INT over UDP (DSCP 0x17) to port 4791, the INT block saying the original port.
fn int_udp() -> Vec<u8> {
    let int = md_block(tcp_shim(1, 4791), md(6), &[node_q(2, 5), node_q(1, 6)], &[]);
    udp_no_checksum(7, 4791, &[int, b"data".to_vec()].concat())
}

/// An IPv4 frame whose flags and fragment offset field (bytes 6 and 7 of the header) are
/// `flags_offset` (MF = 0x2000, offset in 8-byte units).
fn v4_fragment(flags_offset: u16) -> Vec<u8> {
    let mut f = eth_ipv4(17, 0x17, &int_udp());
    f[14 + 6..14 + 8].copy_from_slice(&flags_offset.to_be_bytes());
    f
}

/// An IPv6 frame with a Fragment extension header (next header UDP) whose offset/M word is
/// `offset_m` (offset in 8-byte units << 3, M in bit 0).
fn v6_fragment(offset_m: u16) -> Vec<u8> {
    v6_fragment_of(offset_m, 17, &int_udp())
}

/// [`v6_fragment`] with the Fragment header's Next Header `next` and `data` after it.
fn v6_fragment_of(offset_m: u16, next: u8, data: &[u8]) -> Vec<u8> {
    let payload = [
        vec![next, 0],
        offset_m.to_be_bytes().to_vec(),
        vec![0, 0, 0x12, 0x34],
        data.to_vec(),
    ]
    .concat();
    let mut ip6 = vec![0x60 | (0x17 >> 2), (0x17 & 3) << 6, 0, 0];
    ip6.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip6.extend_from_slice(&[44, 64]);
    ip6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    ip6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    [
        vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x86, 0xdd],
        ip6,
        payload,
    ]
    .concat()
}

fn assert_whole(p: &Packet<'_>) {
    assert!(p.l4.is_some(), "{p:?}");
    assert!(p.int.is_some(), "{p:?}");
    assert_eq!(p.flow.unwrap().dst_port, 4791);
}

/// A later fragment (offset > 0) holds the middle of a datagram: the bytes where a UDP header
/// would be are not one, so no L4, no flow (no ports) and no INT come out of it, and it is
/// flagged. Before, the wire crate read the fragment's first bytes as a UDP header and INT.
#[test]
fn a_later_fragment_yields_no_l4_flow_or_int() {
    let cfg = DetectConfig::default();
    // The unfragmented packet, and one with DF set (0x4000): whole.
    for field in [0, 0x4000] {
        let f = v4_fragment(field);
        let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
        assert_whole(&p);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }
    // Offset 185 (1480 bytes), with and without MF.
    for field in [185, 0x2000 | 185] {
        let f = v4_fragment(field);
        let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
        assert!(p.ip.is_some());
        assert_eq!(
            (p.l4, p.int.is_some(), p.flow),
            (None, false, None),
            "{p:?}"
        );
        assert!(p.warnings.has(Warning::IpLaterFragment));
        assert!(!p.warnings.has(Warning::IpFirstFragment));
    }
}

/// The first fragment (offset 0, MF set) does hold the L4 header: located, and flagged.
#[test]
fn a_first_fragment_is_located_and_flagged() {
    let f = v4_fragment(0x2000);
    let p = Packet::parse(&f, Start::Ethernet, &DetectConfig::default()).unwrap();
    assert_whole(&p);
    assert!(p.warnings.has(Warning::IpFirstFragment));
    assert!(!p.warnings.has(Warning::IpLaterFragment));
}

/// IPv6 (RFC 8200 §4.5): the same rule through the Fragment extension header.
#[test]
fn ipv6_fragments_follow_the_same_rule() {
    let cfg = DetectConfig::default();
    // An atomic fragment (offset 0, M clear) is a whole packet.
    let atomic = v6_fragment(0);
    let p = Packet::parse(&atomic, Start::Ethernet, &cfg).unwrap();
    assert_whole(&p);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // First fragment: offset 0, M set.
    let first = v6_fragment(1);
    let p = Packet::parse(&first, Start::Ethernet, &cfg).unwrap();
    assert_whole(&p);
    assert!(p.warnings.has(Warning::IpFirstFragment));
    // Later fragments: offset 1448 bytes (181 units), M set or clear.
    for word in [181 << 3, 181 << 3 | 1] {
        let f = v6_fragment(word);
        let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
        assert_eq!(p.ip.unwrap().version, 6);
        assert_eq!(
            (p.l4, p.int.is_some(), p.flow),
            (None, false, None),
            "{p:?}"
        );
        assert!(p.warnings.has(Warning::IpLaterFragment));
    }
}

/// A frame that ends inside the IPv4 (or IPv6, or TCP) header is truncated, with the bytes the
/// header needs and the bytes there are; before, it was a bad value of field "header".
#[test]
fn a_frame_cut_inside_an_ip_header_is_truncated() {
    let cfg = DetectConfig::default();
    let f = v4_fragment(0);
    for cut in [14, 15, 33] {
        let e = Packet::parse(&f[..cut], Start::Ethernet, &cfg).unwrap_err();
        assert_eq!(e.layer, Layer::Ipv4, "{e}");
        assert_eq!(e.offset, 14);
        assert_eq!(
            e.kind,
            ErrorKind::Truncated {
                needed: 20,
                available: cut - 14
            }
        );
    }
    // Options: IHL 6 needs 24 bytes.
    let mut opt = f[..36].to_vec();
    opt[14] = 0x46;
    let e = Packet::parse(&opt, Start::Ethernet, &cfg).unwrap_err();
    assert_eq!(
        (e.layer, e.kind),
        (
            Layer::Ipv4,
            ErrorKind::Truncated {
                needed: 24,
                available: 22
            }
        )
    );
    // A bad header is still a bad value: IHL 3.
    let mut bad = f.clone();
    bad[14] = 0x43;
    let e = Packet::parse(&bad, Start::Ethernet, &cfg).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::BadValue { .. }), "{e}");
    // IPv6 cut inside its fixed header and inside the Fragment header.
    let f6 = v6_fragment(0);
    let e = Packet::parse(&f6[..14 + 30], Start::Ethernet, &cfg).unwrap_err();
    assert_eq!(
        (e.layer, e.offset, e.kind),
        (
            Layer::Ipv6,
            14,
            ErrorKind::Truncated {
                needed: 40,
                available: 30
            }
        )
    );
    let e = Packet::parse(&f6[..14 + 44], Start::Ethernet, &cfg).unwrap_err();
    assert_eq!(
        (e.layer, e.offset, e.kind),
        (
            Layer::Ipv6,
            54,
            ErrorKind::Truncated {
                needed: 8,
                available: 4
            }
        )
    );
    // TCP cut inside its header.
    let tcp_frame = eth_ipv4(6, 0, &tcp(1, 2, b"x"));
    let e = Packet::parse(&tcp_frame[..14 + 20 + 10], Start::Ethernet, &cfg).unwrap_err();
    assert_eq!(
        (e.layer, e.offset, e.kind),
        (
            Layer::Tcp,
            34,
            ErrorKind::Truncated {
                needed: 20,
                available: 10
            }
        )
    );
}

/// A later IPv6 fragment whose Fragment header names an extension header (Destination Options
/// in the Fragmentable Part, RFC 8200 §4.5): the bytes after the Fragment header are the middle
/// of that part, not a header, so they are not read as one (here they would claim 2 KiB and be
/// an error); the packet is a later fragment, its protocol the Fragment header's Next Header.
#[test]
fn a_later_ipv6_fragment_after_which_no_header_is_read() {
    let f = v6_fragment_of(181 << 3, 60, &[17, 0xff, 1, 2, 3, 4, 5, 6, 7, 8]);
    let p = Packet::parse(&f, Start::Ethernet, &DetectConfig::default()).unwrap();
    let ip = p.ip.unwrap();
    assert_eq!((ip.proto, ip.header_len), (60, 48));
    assert_eq!((p.l4, p.flow), (None, None));
    assert!(p.warnings.has(Warning::IpLaterFragment));
    // The same bytes as a first fragment are headers: the Destination Options header is read,
    // and cut short it is an error.
    let f = v6_fragment_of(1, 60, &[17, 0xff, 1, 2, 3, 4, 5, 6, 7, 8]);
    let e = Packet::parse(&f, Start::Ethernet, &DetectConfig::default()).unwrap_err();
    assert_eq!(e.layer, Layer::Ipv6);
    assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
}

/// Fuzzed bytes (the `packet` target) that made etherparse's extension header iterator panic
/// when the fragment search used it: every start decodes or errs, without a panic.
#[test]
fn fuzzed_ipv6_extension_chain_does_not_panic() {
    let data = unhex(
        "6868686868682b00006800d84545000000000000280000000000000000000000783c3c00116868682b00006800d84500",
    );
    let cfg = DetectConfig {
        unmarked_int: true,
        verify_checksums: true,
        ..DetectConfig::default()
    };
    for start in [Start::Ethernet, Start::Ipv4, Start::Ipv6] {
        let _ = Packet::parse(&data, start, &cfg);
    }
}

#[cfg(feature = "dissect")]
/// The first fragment, as a host would send it with an MTU of 98 bytes, of the v2.0 report
/// datagram in `examples/sample.pcap` (frame 8): the IPv4 header says More Fragments and 64
/// bytes of payload, the UDP header still says the whole datagram's length.
fn first_fragment_of_sample_report() -> (Vec<u8>, Vec<u8>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sample.pcap");
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let whole = (0..8)
        .map(|_| r.next_packet().unwrap().unwrap().data.into_owned())
        .last()
        .unwrap();
    let mut f = whole[..14 + 20 + 64].to_vec();
    f[14 + 2..14 + 4].copy_from_slice(&(20u16 + 64).to_be_bytes());
    f[14 + 6..14 + 8].copy_from_slice(&0x2000u16.to_be_bytes());
    f[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let sum = f[14..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    f[14 + 10..14 + 12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
    (whole, f)
}

/// A first fragment of a report datagram has a UDP length larger than its IP payload, as every
/// first fragment does: dump decodes its report as far as the fragment goes (the group header,
/// the individual report cut short) with the fragment warning. Before, it was the error
/// `udp bad-length` (RFC 768), as if the datagram were impossible.
#[cfg(feature = "dissect")]
#[test]
fn a_first_fragment_of_a_report_datagram_is_decoded_as_far_as_it_goes() {
    let cfg = DetectConfig::default();
    let (whole, frag) = first_fragment_of_sample_report();
    let w = intscope_wire::dissect::frame(8, &whole, &cfg, None);
    assert_eq!(w["report"]["version"], "2.0", "{w}");
    assert!(
        w.get("error").is_none() && w.get("warnings").is_none(),
        "{w}"
    );
    let v = intscope_wire::dissect::frame(8, &frag, &cfg, None);
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["warnings"][0]["code"], "ip-first-fragment", "{v}");
    let report = &v["report"];
    for key in ["version", "hw_id", "seq", "node_id"] {
        assert_eq!(report[key], w["report"][key], "{key}: {v}");
    }
    // The individual report runs past the fragment: truncated, where the rest of the datagram
    // would be, not a false Report Length.
    assert_eq!(report["reports"], serde_json::json!([]), "{v}");
    let e = &report["error"];
    assert_eq!(
        (&e["layer"], &e["kind"], &e["needed"], &e["available"]),
        (
            &serde_json::json!("report-individual"),
            &serde_json::json!("truncated"),
            &serde_json::json!(96),
            &serde_json::json!(48)
        ),
        "{v}"
    );
}
