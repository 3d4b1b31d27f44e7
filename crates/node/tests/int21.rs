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
        int_udp_ports: vec![17768],
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
        Node::new(cfg(1, Role::Source)).unwrap(),
        Node::new(cfg(2, Role::Transit)).unwrap(),
        Node::new(cfg(3, Role::Sink)).unwrap(),
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
        .unwrap()
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
    n = Node::new(cfg).unwrap();
    let host = udp_frame(0x17, [10, 0, 9, 9]);
    let mut f = host.clone();
    n.process(&mut f, &tel(&n));
    assert_eq!(n.stats.marked_without_int, 0);
}

/// Under a UDP encapsulation the DSCP is the traffic's own: a watched packet whose DSCP happens
/// to be the INT value gets INT like any other, DSCP untouched, and the sink gives it back whole.
#[test]
fn udp_encapsulations_ignore_the_int_dscp_value() {
    for encap in [SourceEncap::UdpNew, SourceEncap::UdpPort] {
        let mut source = Node::new(NodeConfig {
            role: Role::Source,
            encap,
            watchlist: vec![WatchEntry::default()],
            ..NodeConfig::default()
        })
        .unwrap();
        let host = udp_frame(0x17, [10, 0, 3, 3]);
        let mut f = host.clone();
        source.process(&mut f, &tel(&source));
        assert_eq!(
            (source.stats.inserted, source.stats.malformed),
            (1, 0),
            "{encap:?}"
        );
        assert_eq!(f[15] >> 2, 0x17, "{encap:?}: the DSCP is left as it came");
        let no_dscp = DetectConfig {
            int_udp_ports: vec![17768],
            verify_checksums: true,
            ..DetectConfig::default()
        };
        let p = Packet::parse(&f, Start::Ethernet, &no_dscp).unwrap();
        assert!(
            p.int.is_some(),
            "{encap:?}: INT found by the UDP port alone"
        );
        let mut sink = Node::new(NodeConfig {
            role: Role::Sink,
            ..NodeConfig::default()
        })
        .unwrap();
        let out = sink.process(&mut f, &tel(&sink));
        assert_eq!((f.as_slice(), out.reports.len()), (host.as_slice(), 1));
    }
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
    // Node::new refuses what validate refuses.
    let err = Node::new(NodeConfig {
        int_dscp: 0x21,
        int_dscp_mask: 0x20,
        ..NodeConfig::default()
    })
    .unwrap_err();
    assert_eq!(
        err,
        intscope_node::ConfigError::DscpMarking {
            value: 0x21,
            mask: 0x20
        }
    );
    assert_eq!(
        Node::new(NodeConfig {
            mtu: 40,
            ..NodeConfig::default()
        })
        .unwrap_err(),
        intscope_node::ConfigError::Mtu(40)
    );
}

fn config(toml_text: &str) -> NodeConfig {
    let cfg: NodeConfig = toml::from_str(toml_text).unwrap();
    cfg.validate().unwrap();
    cfg
}

/// Where INT starts in an IPv4/UDP frame with INT after the UDP header.
const INT_AT: usize = 14 + 20 + 8;

/// INT v2.1 §"Example with INT-MD including domain specific source-only metadata": the gateway
/// (source) puts Host1's MAC after its own hop, outside Hop ML; hop1 and hop2 push their node
/// IDs above it. The header and stack leaving hop2 are the spec's, byte for byte.
#[test]
fn source_only_metadata_as_in_the_spec_example() {
    let common = r#"
        instructions = 0x8000
        max_hops = 8
        [[domains]]
        id = 0x5453
        name = "transparent-security"
        [[domains.metadata]]
        bit = 0
        name = "host_mac"
        size = 8
        mode = "source-inserted"
        reporting = "all"
        mutability = "source-only"
    "#;
    let gateway = config(&format!(
        r#"node_id = 1
        role = "source"
        {common}
        [[watchlist]]
        ds_id = 0x5453
        ds_instruction = 0x8000
        ds_flags = 0x4000
        source_only = "a6:1a:f6:b1:64:7d:00:00"
        "#
    ));
    let hop = |id| config(&format!("node_id = {id}\nrole = \"transit\"\n{common}"));
    let host1 = udp_frame(0, [10, 0, 3, 3]);
    let mut f = host1.clone();
    for cfg in [gateway, hop(2), hop(3)] {
        let mut n = Node::new(cfg).unwrap();
        n.process(&mut f, &tel(&n));
    }
    #[rustfmt::skip]
    let expected: [u8; 32] = [
        0x20, 0x00, 0x01, 0x05, // Ver 2, Hop ML 1, Remaining Hop Count 5
        0x80, 0x00, 0x54, 0x53, // node ID; Domain Specific ID 'TS'
        0x80, 0x00, 0x40, 0x00, // DS Instruction bit 0; DS Flags bit 1
        0, 0, 0, 3, // node id of hop2
        0, 0, 0, 2, // node id of hop1
        0, 0, 0, 1, // node id of the gateway
        0xa6, 0x1a, 0xf6, 0xb1, // Host1's MAC, source-only
        0x64, 0x7d, 0x00, 0x00,
    ];
    assert_eq!(&f[INT_AT + 4..INT_AT + 36], &expected);
    assert_eq!(
        f[INT_AT + 1],
        8,
        "the shim counts the header, the stack and the MAC"
    );
    checked(&f, 0x17, 0x3f);
    // The sink restores Host1's packet and reports the stack with the MAC in it.
    let mut sink = Node::new(NodeConfig {
        node_id: 4,
        role: Role::Sink,
        ..NodeConfig::default()
    })
    .unwrap();
    let out = sink.process(&mut f, &tel(&sink));
    assert_eq!(f, host1);
    let r = intscope_wire::report::Report::parse(&out.reports[0]).unwrap();
    let one = r.individual_reports().next().unwrap().unwrap();
    assert!(
        one.inner
            .windows(6)
            .any(|w| w == [0xa6, 0x1a, 0xf6, 0xb1, 0x64, 0x7d])
    );
}

const EXPORT_DOMAIN: &str = r#"
    [[domains.metadata]]
    bit = 2
    name = "queue_delay"
    size = 4
    mode = "export"
"#;

/// A transit hop that knows the domain writes its own export metadata (before the Checksum
/// Complement, which stays last) and sets its DS Flags; one that does not pads with all ones.
#[test]
fn known_domains_get_their_metadata_at_transit() {
    let node = |id: u32, role: &str, value: Option<&str>, flags: u16, known: bool| {
        let domain = if known {
            format!(
                "[[domains]]\nid = 0xABCD\nset_ds_flags = {flags}\n{}{EXPORT_DOMAIN}",
                value.map_or(String::new(), |v| format!(
                    "values = {{ queue_delay = \"{v}\" }}\n"
                ))
            )
        } else {
            String::new()
        };
        Node::new(config(&format!(
            "node_id = {id}\nrole = \"{role}\"\ninstructions = 0x8001\n\
             [[watchlist]]\nds_id = 0xABCD\nds_instruction = 0x2000\n{domain}"
        )))
        .unwrap()
    };
    let mut f = udp_frame(0, [10, 0, 3, 3]);
    let host1 = f.clone();
    let mut nodes = [
        node(1, "source", Some("0x00000001"), 0, true),
        node(2, "transit", Some("0x00000010"), 0x0001, true),
        node(3, "transit", None, 0, false),
    ];
    for n in &mut nodes {
        n.process(&mut f, &tel(n));
        checked(&f, 0x17, 0x3f);
    }
    let md = &f[INT_AT + 4..];
    assert_eq!(
        md[2] & 0x1f,
        3,
        "Hop ML: node ID, the domain's word, the complement"
    );
    assert_eq!(
        &md[10..12],
        &[0x00, 0x01],
        "DS Flags set by the hop that knows the domain"
    );
    let stack = &md[12..12 + 36];
    let word = |hop: usize, i: usize| &stack[hop * 12 + i * 4..hop * 12 + i * 4 + 4];
    assert_eq!(
        (word(0, 0), word(0, 1)),
        (&[0, 0, 0, 3][..], &[0xff; 4][..])
    );
    assert_eq!(
        (word(1, 0), word(1, 1)),
        (&[0, 0, 0, 2][..], &[0, 0, 0, 0x10][..])
    );
    assert_eq!(
        (word(2, 0), word(2, 1)),
        (&[0, 0, 0, 1][..], &[0, 0, 0, 1][..])
    );
    let mut sink = Node::new(NodeConfig {
        role: Role::Sink,
        ..NodeConfig::default()
    })
    .unwrap();
    sink.process(&mut f, &tel(&sink));
    assert_eq!(f, host1);
}

/// A transit hop that knows the domain and updates the L4 checksum instead of using the
/// Checksum Complement leaves the complement all ones (INT v2.1 §"Checksum Update"), after its
/// domain's metadata; one that uses it writes the value that keeps the checksum.
#[test]
fn known_domain_metadata_keeps_the_complement_last() {
    let domain = format!(
        "[[domains]]\nid = 0xABCD\nvalues = {{ queue_delay = \"0x00000010\" }}\n{EXPORT_DOMAIN}"
    );
    let node = |id: u32, role: &str, complement: bool| {
        Node::new(config(&format!(
            "node_id = {id}\nrole = \"{role}\"\ninstructions = 0x8001\n\
             use_checksum_complement = {complement}\n\
             [[watchlist]]\nds_id = 0xABCD\nds_instruction = 0x2000\n{domain}"
        )))
        .unwrap()
    };
    for complement in [false, true] {
        let mut f = udp_frame(0, [10, 0, 3, 3]);
        let udp_checksum = |f: &[u8]| [f[INT_AT - 2], f[INT_AT - 1]];
        let mut checksums = Vec::new();
        for mut n in [node(1, "source", false), node(2, "transit", complement)] {
            n.process(&mut f, &tel(&n));
            checked(&f, 0x17, 0x3f);
            checksums.push(udp_checksum(&f));
        }
        let transit_hop = &f[INT_AT + 16..INT_AT + 28];
        assert_eq!(&transit_hop[..8], &[0, 0, 0, 2, 0, 0, 0, 0x10]);
        if complement {
            assert_ne!(&transit_hop[8..], &[0xff; 4], "the complement is computed");
            assert_eq!(checksums[0], checksums[1], "and the checksum field kept");
        } else {
            assert_eq!(
                &transit_hop[8..],
                &[0xff; 4],
                "no complement: the reserved value"
            );
            assert_ne!(
                checksums[0], checksums[1],
                "the checksum field is updated instead"
            );
        }
    }
}

/// INT-MX reports carry the domain's fields: DS ID, DSMdBits of what is included (export
/// metadata with a value; source-inserted metadata reported by all nodes, or by the sink), the
/// metadata itself after the baseline's (in MD Length), and the DS Flags in DSMdstatus; a
/// transit hop sets its DS Flags in the packet. A node not knowing the domain reports DSMdBits 0.
#[test]
fn mx_reports_carry_domain_specific_metadata() {
    let domain = |value: &str, flags: u16| {
        format!(
            r#"[[domains]]
            id = 0xABCD
            set_ds_flags = {flags}
            values = {{ queue_delay = "{value}" }}
            [[domains.metadata]]
            bit = 0
            name = "seq"
            size = 4
            mode = "source-inserted"
            reporting = "all"
            [[domains.metadata]]
            bit = 1
            name = "flow_id"
            size = 4
            mode = "source-inserted"
            reporting = "sink"
            {EXPORT_DOMAIN}"#
        )
    };
    let node = |id: u32, role: &str, domains: &str| {
        Node::new(config(&format!(
            "node_id = {id}\nrole = \"{role}\"\nmode = \"mx\"\ninstructions = 0x8000\n\
             [[watchlist]]\nds_id = 0xABCD\nds_instruction = 0xE000\n\
             ds_metadata = \"0000000f12345678\"\n{domains}"
        )))
        .unwrap()
    };
    let mut nodes = [
        node(1, "source", &domain("0x00000001", 0)),
        node(2, "transit", &domain("0x00000010", 0x0100)),
        node(3, "transit", ""),
        node(4, "sink", &domain("0x00000020", 0)),
    ];
    let host1 = udp_frame(0, [10, 0, 3, 3]);
    let mut f = host1.clone();
    let mut seen = Vec::new();
    for n in &mut nodes {
        let out = n.process(&mut f, &tel(n));
        checked(&f, 0x17, 0x3f);
        let r = intscope_wire::report::Report::parse(&out.reports[0]).unwrap();
        let one = r.individual_reports().next().unwrap().unwrap();
        let main = one.main.unwrap();
        assert_eq!(one.header.md_length as usize * 4, one.metadata.len());
        seen.push((
            main.ds_id,
            main.ds_md_bits,
            main.ds_md_status,
            one.metadata.to_vec(),
        ));
    }
    assert_eq!(f, host1, "the sink removed INT-MX");
    // Baseline: no metadata (node ID moves to the group header).
    assert_eq!(
        seen,
        vec![
            (0xABCD, 0xA000, 0, vec![0, 0, 0, 0xf, 0, 0, 0, 1]),
            (0xABCD, 0xA000, 0x0100, vec![0, 0, 0, 0xf, 0, 0, 0, 0x10]),
            (0xABCD, 0, 0x0100, vec![]),
            (
                0xABCD,
                0xE000,
                0x0100,
                vec![0, 0, 0, 0xf, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0x20]
            ),
        ]
    );
}

#[test]
fn domain_settings_are_validated() {
    let bad = |extra: &str| {
        let cfg: NodeConfig = toml::from_str(extra).unwrap();
        cfg.validate().unwrap_err().to_string()
    };
    assert!(bad("[[domains]]\nid = 0").contains("default domain"));
    let d = format!("[[domains]]\nid = 0xABCD\n{EXPORT_DOMAIN}");
    assert!(bad(&format!("{d}\n[[domains]]\nid = 0xABCD")).contains("twice"));
    assert!(
        bad(&format!(
            "[[watchlist]]\nds_id = 0xABCD\nds_instruction = 0x4000\n{d}"
        ))
        .contains("does not define")
    );
    assert!(
        bad(&format!(
            "[[watchlist]]\nds_id = 0xABCD\nds_instruction = 0x2000\nds_metadata = \"0000000000000000\"\n{d}"
        ))
        .contains("ds_metadata (export) is 8 bytes")
    );
    assert!(
        bad("[[domains]]\nid = 1\nvalues = { x = \"00000000\" }")
            .contains("no metadata of that name")
    );
}

/// The Destination header (INT type 2): produced by the source after the MD (or MX) header,
/// ignored by transit hops, consumed by the sink, which restores the packet.
#[test]
fn destination_headers_from_source_to_sink() {
    for (encap, mode, bits) in [
        ("udp-port", "md", 0x8000),
        ("udp-new", "md", 0x8000),
        ("dscp", "md", 0x8000),
        ("udp-port", "mx", 0x8000),
        // The Checksum Complement stays the last word of the source's hop.
        ("udp-port", "md", 0x8001),
    ] {
        let node = |id: u32, role: &str| {
            Node::new(config(&format!(
                "node_id = {id}\nrole = \"{role}\"\nmode = \"{mode}\"\nencap = \"{encap}\"\n\
                 instructions = {bits}\ndestination_headers = true\n\
                 [[watchlist]]\ndestination = \"00000007 40000000\"\n"
            )))
            .unwrap()
        };
        let host1 = udp_frame(0, [10, 0, 3, 3]);
        let mut f = host1.clone();
        let mut source = node(1, "source");
        source.process(&mut f, &tel(&source));
        let p = checked(&f, 0x17, 0x3f);
        let (at, block) = p.int.expect(encap);
        let dest = at + block.len;
        let shim = if encap == "udp-port" {
            [0x24, 0x02, 0x13, 0x89] // NPT 1, the original port 5001
        } else if encap == "udp-new" {
            [0x28, 0x02, 0x00, 0x11] // NPT 2, UDP
        } else {
            [0x20, 0x02, 0x00, 0x00] // NPT 0, DSCP 0
        };
        assert_eq!(
            &f[dest..dest + 12],
            &[&shim[..], &[0, 0, 0, 7, 0x40, 0, 0, 0]].concat()[..],
            "{encap}/{mode}: the destination header right after the INT block"
        );
        let mut transit = node(2, "transit");
        transit.process(&mut f, &tel(&transit));
        let p = checked(&f, 0x17, 0x3f);
        let (at, block) = p.int.unwrap();
        assert_eq!(
            &f[at + block.len..at + block.len + 4],
            &shim,
            "{encap}/{mode}: transit hops leave it alone"
        );
        let mut sink = node(3, "sink");
        let out = sink.process(&mut f, &tel(&sink));
        assert_eq!(f, host1, "{encap}/{mode}: the sink removes both headers");
        assert_eq!(out.destination, Some(vec![0, 0, 0, 7, 0x40, 0, 0, 0]));
        assert_eq!(sink.stats.destinations, 1);
    }
    // Without one, a payload that starts like one stays: a sink expecting them checks that it
    // repeats the INT shim; a sink not expecting them never looks.
    for expect in [true, false] {
        let mut plain = Node::new(NodeConfig {
            role: Role::Source,
            watchlist: vec![WatchEntry::default()],
            ..NodeConfig::default()
        })
        .unwrap();
        let mut host = Vec::new();
        PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 1, 1], [10, 0, 3, 3], 64)
            .udp(40000, 5001)
            .write(&mut host, &[0x20, 0, 0, 0, 1, 2, 3, 4])
            .unwrap();
        let mut f = host.clone();
        plain.process(&mut f, &tel(&plain));
        let mut sink = Node::new(NodeConfig {
            role: Role::Sink,
            destination_headers: expect,
            ..NodeConfig::default()
        })
        .unwrap();
        assert_eq!(sink.process(&mut f, &tel(&sink)).destination, None);
        assert_eq!(f, host, "the payload is the host's");
    }
}
