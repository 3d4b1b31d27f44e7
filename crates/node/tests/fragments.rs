//! IP fragments go through every role untouched. INT v2.1 §"MTU Settings": "this specification
//! requires that an INT node must not fragment packets in order to append INT information to
//! the packet"; it says nothing of fragments a node receives, but INT inserted into (or added
//! to, or removed from) a first fragment moves its payload against the later fragments'
//! offsets (RFC 791 Fragment Offset, RFC 8200 §4.5) and the receiver cannot reassemble it.

use etherparse::PacketBuilder;
use intscope_node::{Mode, Node, Role, StaticTelemetry};

mod common;

use common::cfg;

/// An Ethernet frame of a UDP datagram of 200 bytes of data, 10.0.1.1 (or 2001:db8::1) to
/// port 5001.
fn whole(v6: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2]);
    let b = if v6 {
        b.ipv6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
    } else {
        b.ipv4([10, 0, 1, 1], [10, 0, 3, 3], 64)
    };
    let mut out = Vec::new();
    b.udp(40000, 5001).write(&mut out, &[0x5a; 200]).unwrap();
    out
}

/// An IPv4 header's checksum recomputed (RFC 791).
fn ipv4_checksum(h: &mut [u8]) {
    h[10..12].copy_from_slice(&[0, 0]);
    let sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// `frame` (Ethernet, IPv4 with a 20-byte header or IPv6 without extension headers) split as a
/// host would: the first fragment holds 96 bytes of the IP payload, the second the rest.
fn fragments(frame: &[u8]) -> [Vec<u8>; 2] {
    let v6 = frame[12..14] == [0x86, 0xdd];
    let hl = if v6 { 40 } else { 20 };
    let (eth_ip, payload) = frame.split_at(14 + hl);
    let parts = [(&payload[..96], 0u16, true), (&payload[96..], 12, false)];
    parts.map(|(data, offset, more)| {
        let mut f = eth_ip.to_vec();
        if v6 {
            let next = f[14 + 6];
            f[14 + 6] = 44;
            let offset_m = (offset << 3) | u16::from(more);
            f.extend_from_slice(&[next, 0]);
            f.extend_from_slice(&offset_m.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x12, 0x34]);
            f.extend_from_slice(data);
            let len = (8 + data.len()) as u16;
            f[14 + 4..14 + 6].copy_from_slice(&len.to_be_bytes());
        } else {
            f.extend_from_slice(data);
            f[14 + 2..14 + 4].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
            let field = offset | if more { 0x2000 } else { 0 };
            f[14 + 6..14 + 8].copy_from_slice(&field.to_be_bytes());
            ipv4_checksum(&mut f[14..34]);
        }
        f
    })
}

fn tel(node: &Node) -> StaticTelemetry {
    StaticTelemetry {
        model: node.config().telemetry.clone(),
        time_ns: 1_000_000,
    }
}

/// A source watching every flow, in each mode, forwards the four fragments (IPv4 and IPv6,
/// first and later) byte for byte with no report, and counts them in `fragments`; the whole
/// datagrams still get INT. Before, the first fragments got INT, and the receiver could not
/// reassemble them with the later ones.
#[test]
fn a_source_forwards_fragments_untouched() {
    for mode in [Mode::Md, Mode::Mx, Mode::Xd] {
        let mut node = Node::new(cfg(1, Role::Source, mode)).unwrap();
        for v6 in [false, true] {
            for frag in fragments(&whole(v6)) {
                let mut f = frag.clone();
                let out = node.process(&mut f, &tel(&node));
                assert!(out.forward, "{mode:?}");
                assert_eq!(f, frag, "{mode:?} v6 {v6}: the fragment as it came");
                assert!(out.reports.is_empty() && out.synthetic.is_empty());
            }
            let mut f = whole(v6);
            node.process(&mut f, &tel(&node));
        }
        let s = node.stats;
        assert_eq!((s.frames, s.fragments), (6, 4), "{mode:?}: {s:?}");
        let processed = match mode {
            Mode::Xd => s.report_only,
            _ => s.inserted,
        };
        assert_eq!(processed, 2, "{mode:?}: the whole datagrams: {s:?}");
    }
}

/// A datagram that got INT at its source and was fragmented after it (by a router between two
/// INT hops): transit adds nothing to its first fragment, the sink removes nothing from it and
/// reports nothing, and both count it in `fragments`. Before, transit inserted its metadata into
/// the first fragment and the sink cut the INT out of it.
#[test]
fn transit_and_sink_forward_fragments_of_an_int_packet_untouched() {
    for v6 in [false, true] {
        let mut source = Node::new(cfg(1, Role::Source, Mode::Md)).unwrap();
        let mut with_int = whole(v6);
        source.process(&mut with_int, &tel(&source));
        assert_eq!(source.stats.inserted, 1);
        for role in [Role::Transit, Role::Sink] {
            let mut node = Node::new(cfg(2, role, Mode::Md)).unwrap();
            for frag in fragments(&with_int) {
                let mut f = frag.clone();
                let out = node.process(&mut f, &tel(&node));
                assert!(out.forward, "{role:?} v6 {v6}");
                assert_eq!(f, frag, "{role:?} v6 {v6}: the fragment as it came");
                assert!(out.reports.is_empty(), "{role:?} v6 {v6}");
            }
            let s = node.stats;
            assert_eq!((s.frames, s.fragments), (2, 2), "{role:?} v6 {v6}: {s:?}");
        }
    }
}
