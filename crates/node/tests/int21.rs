//! INT v2.1 options and MUSTs beyond the basic chain: DSCP bit marking and packets arriving
//! marked without INT, domain-specific metadata, the Destination header type — byte by byte.

use etherparse::PacketBuilder;
use intscope_node::config::MarkedWithoutInt;
use intscope_node::{Node, NodeConfig, Role, SourceEncap, StaticTelemetry, WatchEntry};
use intscope_wire::locate::{DetectConfig, DscpMatch, Packet, Start};
use intscope_wire::{Warning, Warnings};

fn udp_frame(dscp: u8, dst: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 1, 1], dst, 64)
        .udp(40000, 5001)
        .write(&mut f, b"payload bytes")
        .unwrap();
    // DSCP with ECN 01 kept, and the header checksum made right again.
    f[15] = (dscp << 2) | 1;
    f[24] = 0;
    f[25] = 0;
    let c = intscope_wire::checksum::internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

fn tel(n: &Node) -> StaticTelemetry {
    StaticTelemetry {
        model: n.config().telemetry.clone(),
        time_ns: 1_000,
    }
}

fn checked(frame: &[u8], value: u8, mask: u8) -> Packet<'_> {
    let cfg = DetectConfig {
        dscp: Some(DscpMatch { value, mask }),
        verify_checksums: true,
        ..DetectConfig::default()
    };
    let p = Packet::parse(frame, Start::Ethernet, &cfg).unwrap();
    let w: Warnings = p.warnings;
    assert!(!w.has(Warning::BadIpChecksum) && !w.has(Warning::BadL4Checksum));
    p
}

/// A bit marks INT: the source sets it and keeps the rest of the DSCP for QoS, the shim saves the
/// original DSCP, transit hops find INT by the bit, the sink restores the packet.
#[test]
fn dscp_bit_marking() {
    let cfg = |id, role| NodeConfig {
        node_id: id,
        role,
        encap: SourceEncap::Dscp,
        int_dscp: 0x20,
        int_dscp_mask: 0x20,
        instructions: 0x8000,
        watchlist: vec![WatchEntry::default()],
        ..NodeConfig::default()
    };
    let host = udp_frame(0x0a, [10, 0, 3, 3]); // AF11
    let mut f = host.clone();
    let mut nodes = [
        Node::new(cfg(1, Role::Source)),
        Node::new(cfg(2, Role::Transit)),
        Node::new(cfg(3, Role::Sink)),
    ];
    nodes[0].process(&mut f, &tel(&nodes[0]));
    assert_eq!(f[15], (0x2a << 2) | 1, "AF11 with the INT bit, ECN kept");
    let p = checked(&f, 0x20, 0x20);
    let (at, _) = p.int.unwrap();
    // TCP/UDP shim: type 1, NPT 0, length, then the original DSCP in the second byte's top bits.
    assert_eq!(f[at] >> 4, 1);
    assert_eq!(f[at + 3], 0x0a << 2, "the shim keeps the original DSCP");
    nodes[1].process(&mut f, &tel(&nodes[1]));
    assert_eq!(nodes[1].stats.added, 1, "found by the bit");
    nodes[2].process(&mut f, &tel(&nodes[2]));
    assert_eq!(f, host, "the sink restores AF11");
}

/// A packet arriving at a DSCP-marking source with the INT DSCP and no INT header is remarked
/// (the MUST of INT v2.1 §"INT over TCP/UDP"), or skipped as configured; counted either way.
#[test]
fn packets_arriving_marked_without_int_are_remarked_or_skipped() {
    let source = |action, value, mask| {
        Node::new(NodeConfig {
            role: Role::Source,
            encap: SourceEncap::Dscp,
            int_dscp: value,
            int_dscp_mask: mask,
            dscp_marked_without_int: action,
            // Watches 10.0.3.0/24 only.
            watchlist: vec![WatchEntry {
                dst: "10.0.3.0/24".parse().ok(),
                ..WatchEntry::default()
            }],
            ..NodeConfig::default()
        })
    };
    // Value marking, an unwatched packet marked 0x17: leaves with DSCP 0, ECN kept.
    let mut n = source(MarkedWithoutInt::Remark, 0x17, 0x3f);
    let mut f = udp_frame(0x17, [10, 0, 9, 9]);
    let expected = udp_frame(0, [10, 0, 9, 9]);
    n.process(&mut f, &tel(&n));
    assert_eq!(f, expected);
    assert_eq!((n.stats.marked_without_int, n.stats.untouched), (1, 1));
    // A watched one: remarked, then INT with the DSCP marking; the shim saves DSCP 0.
    let mut f = udp_frame(0x17, [10, 0, 3, 3]);
    n.process(&mut f, &tel(&n));
    assert_eq!(n.stats.inserted, 1);
    let p = checked(&f, 0x17, 0x3f);
    let (at, _) = p.int.unwrap();
    assert_eq!(f[15] >> 2, 0x17);
    assert_eq!(f[at + 3], 0, "the remarked DSCP is the one saved");
    // A packet carrying INT already is left alone.
    let before = f.clone();
    n.process(&mut f, &tel(&n));
    assert_eq!(f, before);
    assert_eq!(n.stats.marked_without_int, 2);

    // Bit marking: the bit is cleared, AF11 stays.
    let mut n = source(MarkedWithoutInt::Remark, 0x20, 0x20);
    let mut f = udp_frame(0x2a, [10, 0, 9, 9]);
    n.process(&mut f, &tel(&n));
    assert_eq!(f, udp_frame(0x0a, [10, 0, 9, 9]));

    // Skip: forwarded as it came, no INT even when watched.
    let mut n = source(MarkedWithoutInt::Skip, 0x17, 0x3f);
    let host = udp_frame(0x17, [10, 0, 3, 3]);
    let mut f = host.clone();
    n.process(&mut f, &tel(&n));
    assert_eq!(f, host);
    assert_eq!(
        (
            n.stats.marked_without_int,
            n.stats.untouched,
            n.stats.inserted
        ),
        (1, 1, 0)
    );

    // A source marking by UDP port has no DSCP marking to protect.
    let mut n = source(MarkedWithoutInt::Remark, 0x17, 0x3f);
    let cfg = NodeConfig {
        encap: SourceEncap::UdpPort,
        ..n.config().clone()
    };
    n = Node::new(cfg);
    let host = udp_frame(0x17, [10, 0, 9, 9]);
    let mut f = host.clone();
    n.process(&mut f, &tel(&n));
    assert_eq!(n.stats.marked_without_int, 0);
}

#[test]
fn dscp_settings_are_validated() {
    let bad = |value, mask, remark| {
        NodeConfig {
            int_dscp: value,
            int_dscp_mask: mask,
            remark_dscp: remark,
            ..NodeConfig::default()
        }
        .validate()
        .is_err()
    };
    assert!(!bad(0x17, 0x3f, 0));
    assert!(!bad(0x20, 0x20, 0));
    assert!(bad(0x21, 0x20, 0), "value outside the mask");
    assert!(bad(0x20, 0, 0), "no mask");
    assert!(bad(0x17, 0x3f, 0x17), "remarking to the marking");
    assert!(bad(0x20, 0x20, 0x3f), "remarking keeps the bit");
}
