//! The Reprs that emit into checked views (UDP, IPv4, IPv6, GRE, Geneve, VXLAN-GPE, Destination):
//! `parse → emit` is the identity on valid bytes, and a buffer shorter than `buffer_len()` is an
//! error at `new_checked` / `new_for_emit` or at `emit` — never a panic, never a partial write.

use intscope_wire::destination::{Destination, DestinationRepr};
use intscope_wire::encap::{GeneveRepr, GreRepr, VxlanGpeRepr};
use intscope_wire::ip::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
use intscope_wire::tunnel::{GenevePacket, GrePacket, VxlanPacket};
use intscope_wire::udp::{UdpPacket, UdpRepr};
use proptest::prelude::*;

/// A buffer of `n` bytes that shows any byte `emit` left unset.
fn blank(n: usize) -> Vec<u8> {
    vec![0xa5; n]
}

proptest! {
    #[test]
    fn udp_parse_emit(b in proptest::collection::vec(any::<u8>(), 8)) {
        let r = UdpRepr::parse(&UdpPacket::new_checked(&b[..]).unwrap());
        let mut out = blank(r.buffer_len());
        r.emit(&mut UdpPacket::new_checked(&mut out[..]).unwrap());
        prop_assert_eq!(out, b);
    }

    #[test]
    fn ipv4_parse_emit(mut b in proptest::collection::vec(any::<u8>(), 20)) {
        // Valid bytes for the Repr: version 4, no options, a right checksum.
        b[0] = 0x45;
        b[10..12].fill(0);
        let c = intscope_wire::checksum::internet_checksum(&b);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        let r = Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap());
        let mut out = blank(r.buffer_len());
        r.emit(&mut Ipv4Packet::new_for_emit(&mut out[..]).unwrap());
        prop_assert_eq!(out, b);
    }

    #[test]
    fn ipv6_parse_emit(mut b in proptest::collection::vec(any::<u8>(), 40)) {
        b[0] = 0x60 | (b[0] & 0x0f);
        let r = Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap());
        let mut out = blank(r.buffer_len());
        r.emit(&mut Ipv6Packet::new_for_emit(&mut out[..]).unwrap());
        prop_assert_eq!(out, b);
    }

    #[test]
    fn vxlan_gpe_parse_emit(mut b in proptest::collection::vec(any::<u8>(), 8)) {
        b[0] |= 0x04;
        let r = VxlanGpeRepr::parse(&VxlanPacket::new_checked(&b[..]).unwrap()).unwrap();
        let mut out = blank(r.buffer_len());
        r.emit(&mut VxlanPacket::new_checked(&mut out[..]).unwrap()).unwrap();
        prop_assert_eq!(out, b);
    }

    #[test]
    fn geneve_parse_emit(mut b in proptest::collection::vec(any::<u8>(), 8..260)) {
        // Version 0 and an Opt Len the bytes hold; emit writes the base header, options are kept.
        let words = ((b.len() - 8) / 4).min(63) as u8;
        b[0] = words.min(b[0] & 0x3f);
        let r = GeneveRepr::parse(&GenevePacket::new_checked(&b[..]).unwrap()).unwrap();
        let mut out = b.clone();
        out[..8].fill(0xa5);
        r.emit(&mut GenevePacket::new_for_emit(&mut out[..]).unwrap()).unwrap();
        prop_assert_eq!(out, b);
    }

    #[test]
    fn gre_parse_emit(c: bool, k: bool, s: bool, low in 0u16..0x1000, rest in proptest::collection::vec(any::<u8>(), 14)) {
        // R and Ver 0 (parse rejects others); Reserved1 zero, as RFC 2784 §2.5 says to send it.
        let fv = (0x8000 * u16::from(c) + 0x2000 * u16::from(k) + 0x1000 * u16::from(s)) | (low & 0x0ff8);
        let mut b = fv.to_be_bytes().to_vec();
        b.extend_from_slice(&rest);
        if c {
            b[6..8].fill(0);
        }
        let len = GrePacket::new_checked(&b[..]).unwrap().header_len();
        b.truncate(len);
        let r = GreRepr::parse(&GrePacket::new_checked(&b[..]).unwrap()).unwrap();
        let mut out = blank(r.buffer_len());
        r.emit(&mut GrePacket::new_for_emit(&mut out[..]).unwrap()).unwrap();
        prop_assert_eq!(out, b);
    }

    #[test]
    fn destination_parse_emit(npt in 0u8..4, content: u16, words in proptest::collection::vec(any::<[u8; 4]>(), 0..20)) {
        let mut b = vec![0x20 | (npt << 2), words.len() as u8];
        b.extend_from_slice(&content.to_be_bytes());
        b.extend(words.iter().flatten());
        let r = DestinationRepr::parse(&Destination::new_checked(&b[..]).unwrap());
        let mut out = blank(r.buffer_len());
        r.emit(&mut Destination::new_for_emit(&mut out[..]).unwrap()).unwrap();
        prop_assert_eq!(out, b);
    }

    /// Every buffer shorter than `buffer_len()`: the view refuses it or `emit` returns an error;
    /// no panic.
    #[test]
    fn short_buffers_are_errors(c: bool, k: bool, s: bool, opt in 1u8..64, body in 1usize..20) {
        let gre = GreRepr {
            flags_version: 0x8000 * u16::from(c) + 0x2000 * u16::from(k) + 0x1000 * u16::from(s),
            protocol_type: 0x0800,
            checksum: c.then_some(1),
            key: k.then_some(2),
            sequence: s.then_some(3),
        };
        for n in 0..gre.buffer_len() {
            let mut b = blank(n);
            let r = GrePacket::new_for_emit(&mut b[..]).and_then(|mut v| gre.emit(&mut v));
            prop_assert!(r.is_err(), "GRE into {} bytes", n);
        }
        let geneve = GeneveRepr { version: 0, opt_len: opt, flags: 0, protocol_type: 0x6558, vni: 1, reserved: 0 };
        for n in 0..geneve.buffer_len() {
            let mut b = blank(n);
            let r = GenevePacket::new_for_emit(&mut b[..]).and_then(|mut v| geneve.emit(&mut v));
            prop_assert!(r.is_err(), "Geneve into {} bytes", n);
            if n >= 8 {
                prop_assert_eq!(&b[1..8], &blank(7)[..], "the error wrote nothing");
            }
        }
        let dest = DestinationRepr { npt: 1, content: 5, body: vec![7; body * 4] };
        for n in 0..dest.buffer_len() {
            let mut b = blank(n);
            let r = Destination::new_for_emit(&mut b[..]).and_then(|mut v| dest.emit(&mut v));
            prop_assert!(r.is_err(), "Destination into {} bytes", n);
        }
        // The fixed-size headers: the view alone refuses a short buffer.
        for n in 0..40 {
            let mut b = blank(n);
            prop_assert_eq!(Ipv6Packet::new_for_emit(&mut b[..]).is_ok(), n >= 40);
            prop_assert_eq!(Ipv4Packet::new_for_emit(&mut b[..]).is_ok(), n >= 20);
            prop_assert_eq!(UdpPacket::new_checked(&mut b[..]).is_ok(), n >= 8);
            prop_assert_eq!(VxlanPacket::new_checked(&mut b[..]).is_ok(), n >= 8);
        }
    }
}

#[test]
fn values_wider_than_their_fields_are_errors() {
    let mut b = blank(8);
    let wide = VxlanGpeRepr {
        flags: 0x0c,
        reserved: 0,
        next_protocol: 0x82,
        vni: 1 << 24,
        reserved2: 0,
    };
    assert!(
        wide.emit(&mut VxlanPacket::new_checked(&mut b[..]).unwrap())
            .is_err()
    );
    assert_eq!(b, blank(8), "nothing written");
    let wide = GeneveRepr {
        version: 4,
        opt_len: 0,
        flags: 0,
        protocol_type: 0,
        vni: 0,
        reserved: 0,
    };
    assert!(
        wide.emit(&mut GenevePacket::new_for_emit(&mut b[..]).unwrap())
            .is_err()
    );
    let wide = GeneveRepr {
        version: 0,
        opt_len: 64,
        ..wide
    };
    let mut big = blank(8 + 64 * 4);
    assert!(
        wide.emit(&mut GenevePacket::new_for_emit(&mut big[..]).unwrap())
            .is_err()
    );
}
