//! Property tests: random IPv4/IPv6 TCP/UDP frames through a source (every TCP/UDP and GRE
//! encapsulation, INT-MD and INT-MX, random instruction bitmaps, with and without the Checksum
//! Complement; the same frames as tenants of VXLAN and Geneve tunnels for the VXLAN-GPE and
//! Geneve encapsulations), up to four transit hops and a sink. After every hop every IP and L4 checksum
//! verifies; the sink hands the host the original frame byte for byte; INT-XD changes nothing.

use etherparse::PacketBuilder;
use intscope_node::config::HexBytes;
use intscope_node::{Mode, Node, NodeConfig, Role, SourceEncap, StaticTelemetry, WatchEntry};
use intscope_wire::locate::{DetectConfig, DscpMatch, Packet, Start};
use intscope_wire::{Warning, Warnings};
use proptest::prelude::*;

const MARKER: u64 = 0x1122_3344_5566_7788;

/// Ports that mean something to a node (INT, reports, tunnels): kept out of the random flows.
const SPECIAL: [u16; 6] = [17768, 32766, 4789, 4790, 6081, 2152];

#[derive(Debug, Clone)]
struct Host {
    v6: bool,
    tcp: bool,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    dscp: u8,
    ecn: u8,
    zero_udp_checksum: bool,
    payload: Vec<u8>,
}

fn host() -> impl Strategy<Value = Host> {
    let port = any::<u16>().prop_filter("special port", |p| !SPECIAL.contains(p));
    (
        any::<bool>(),
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        port.clone(),
        port,
        (0u8..64).prop_filter("the INT DSCP", |d| *d != 0x17),
        0u8..4,
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(
            |(v6, tcp, src, dst, sport, dport, dscp, ecn, zero, payload)| Host {
                v6,
                tcp,
                src,
                dst,
                sport,
                dport,
                dscp,
                ecn,
                zero_udp_checksum: zero && !tcp && !v6,
                payload,
            },
        )
}

fn frame(h: &Host) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip = if h.v6 {
        eth.ipv6(h.src, h.dst, 64)
    } else {
        let s: [u8; 4] = h.src[..4].try_into().unwrap();
        let d: [u8; 4] = h.dst[..4].try_into().unwrap();
        eth.ipv4(s, d, 64)
    };
    let mut f = Vec::new();
    if h.tcp {
        ip.tcp(h.sport, h.dport, 7, 1000)
            .ack(1)
            .write(&mut f, &h.payload)
            .unwrap();
    } else {
        ip.udp(h.sport, h.dport).write(&mut f, &h.payload).unwrap();
    }
    // DSCP and ECN, keeping the IPv4 header checksum right (IPv6 has none; no L4 pseudo-header
    // field changes).
    let tc = (h.dscp << 2) | h.ecn;
    if h.v6 {
        f[14] = (f[14] & 0xf0) | (tc >> 4);
        f[15] = (f[15] & 0x0f) | (tc << 4);
    } else {
        f[15] = tc;
        f[24..26].fill(0);
        let c = intscope_wire::checksum::internet_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
    if h.zero_udp_checksum {
        f[14 + 20 + 6..14 + 20 + 8].fill(0);
    }
    f
}

fn verify(frame: &[u8]) -> Result<(), TestCaseError> {
    let cfg = DetectConfig {
        int_udp_ports: vec![17768],
        dscp: Some(DscpMatch {
            value: 0x17,
            mask: 0x3f,
        }),
        probe_marker: Some(MARKER),
        gre_proto: Some(0x88b5),
        verify_checksums: true,
        ..DetectConfig::default()
    };
    let p = Packet::parse(frame, Start::Ethernet, &cfg)
        .map_err(|e| TestCaseError::fail(format!("does not parse: {e}")))?;
    let w: Warnings = p.warnings;
    prop_assert!(!w.has(Warning::BadIpChecksum), "IP checksum");
    prop_assert!(!w.has(Warning::BadL4Checksum), "L4 checksum");
    Ok(())
}

const ENCAPS: [SourceEncap; 5] = [
    SourceEncap::Dscp,
    SourceEncap::UdpPort,
    SourceEncap::UdpNew,
    SourceEncap::ProbeMarker,
    SourceEncap::Gre,
];

/// Baseline instruction bits 0–8 at random, and maybe the Checksum Complement.
fn instructions() -> impl Strategy<Value = u16> {
    (any::<u16>(), any::<bool>()).prop_map(|(b, c)| (b & 0xff80) | if c { 0x0001 } else { 0 })
}

fn node(id: u32, role: Role, mode: Mode, encap: SourceEncap, bits: u16, complement: bool) -> Node {
    Node::new(NodeConfig {
        node_id: id,
        role,
        mode,
        encap,
        instructions: bits,
        use_checksum_complement: complement,
        probe_marker: Some(HexBytes(MARKER.to_be_bytes().to_vec())),
        watchlist: vec![WatchEntry::default()],
        ..NodeConfig::default()
    })
    .unwrap()
}

fn tel(n: &Node) -> StaticTelemetry {
    StaticTelemetry {
        model: n.config().telemetry.clone(),
        time_ns: 5_000,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_role_keeps_checksums_and_the_sink_restores_the_frame(
        h in host(),
        encap_at in 0usize..ENCAPS.len(),
        mx in any::<bool>(),
        bits in instructions(),
        complement in any::<bool>(),
        transits in 0u32..5,
    ) {
        let encap = ENCAPS[encap_at];
        let mode = if mx { Mode::Mx } else { Mode::Md };
        let original = frame(&h);
        verify(&original)?;
        let mut f = original.clone();
        let mut source = node(1, Role::Source, mode, encap, bits, complement);
        source.process(&mut f, &tel(&source));
        prop_assert_eq!(source.stats.inserted + source.stats.inserted_m, 1);
        verify(&f)?;
        for i in 0..transits {
            let mut t = node(10 + i, Role::Transit, mode, encap, bits, complement);
            t.process(&mut f, &tel(&t));
            prop_assert_eq!(t.stats.malformed, 0);
            verify(&f)?;
        }
        let mut sink = node(9, Role::Sink, mode, encap, bits, complement);
        let out = sink.process(&mut f, &tel(&sink));
        prop_assert_eq!(sink.stats.sunk, 1);
        prop_assert!(!out.reports.is_empty());
        prop_assert_eq!(f, original);
    }

    #[test]
    fn tunnels_carry_int_and_come_back_as_they_were(
        h in host(),
        geneve in any::<bool>(),
        options in 0usize..3,
        outer_checksum in any::<bool>(),
        mx in any::<bool>(),
        bits in instructions(),
        transits in 0u32..4,
    ) {
        // The random host frame as a tenant's, in VXLAN or in Geneve with 0-2 options of
        // another class already there.
        let tenant = frame(&h);
        let mut tunnel = if geneve {
            let mut g = vec![options as u8 * 2, 0, 0x65, 0x58, 0, 0, 0x2a, 0];
            for i in 0..options {
                g.extend_from_slice(&[0x01, 0x02, i as u8, 0x01, 0xde, 0xad, 0xbe, 0xef]);
            }
            g
        } else {
            vec![0x08, 0, 0, 0, 0, 0, 0x2a, 0]
        };
        tunnel.extend_from_slice(&tenant);
        let mut original = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 4])
            .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
            .udp(49152, if geneve { 6081 } else { 4789 })
            .write(&mut original, &tunnel)
            .unwrap();
        if !outer_checksum {
            original[14 + 20 + 6..14 + 20 + 8].fill(0);
        }
        let encap = if geneve { SourceEncap::Geneve } else { SourceEncap::VxlanGpe };
        let mode = if mx { Mode::Mx } else { Mode::Md };
        let mut f = original.clone();
        let mut source = node(1, Role::Source, mode, encap, bits, true);
        source.process(&mut f, &tel(&source));
        prop_assert_eq!(source.stats.inserted + source.stats.inserted_m + source.stats.too_big, 1);
        verify(&f)?;
        for i in 0..transits {
            let mut t = node(10 + i, Role::Transit, mode, encap, bits, true);
            t.process(&mut f, &tel(&t));
            prop_assert_eq!(t.stats.malformed, 0);
            verify(&f)?;
        }
        let mut sink = node(9, Role::Sink, mode, encap, bits, true);
        sink.process(&mut f, &tel(&sink));
        prop_assert_eq!(f, original);
    }

    #[test]
    fn xd_postcards_change_nothing(h in host(), bits in instructions()) {
        let original = frame(&h);
        for role in [Role::Source, Role::Transit, Role::Sink] {
            let mut n = node(1, role, Mode::Xd, SourceEncap::UdpPort, bits, true);
            let mut f = original.clone();
            let out = n.process(&mut f, &tel(&n));
            prop_assert_eq!(&f, &original);
            prop_assert_eq!(out.reports.len(), 1);
        }
    }
}
