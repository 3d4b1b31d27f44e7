//! Every frame a node processes lands in exactly one of its per-frame counters (docs/node-config.md:
//! `inserted`, `inserted_m`, `too_big`, `added`, `hop_limit`, `mtu`, `skipped`, `intermediate`,
//! `report_only`, `sunk`, `untouched`, `fragments`, `malformed`), in every mode and role: INT-MD, INT-MX and
//! INT-XD chains, a sink that pushes its own metadata, a transit hop at its MTU or hop limit, and
//! frames that are not INT or not parseable.

use etherparse::PacketBuilder;
use intscope_node::config::MtuAction;
use intscope_node::{Mode, Node, NodeConfig, NodeStats, Role, SinkMetadata, StaticTelemetry};

mod common;

use common::cfg;

/// The per-frame counters' sum: it must be the frames seen.
fn per_frame(s: &NodeStats) -> u64 {
    s.inserted
        + s.inserted_m
        + s.too_big
        + s.added
        + s.hop_limit
        + s.mtu
        + s.skipped
        + s.intermediate
        + s.report_only
        + s.sunk
        + s.untouched
        + s.fragments
        + s.malformed
}

/// Host traffic: UDP and TCP in turn, 10.0.1.1 to 10.0.3.3, then a frame cut inside its IPv4
/// header, an ARP-like frame that is not IP, and two IPv4 fragments.
fn traffic() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..8u16)
        .map(|i| {
            let b = PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2]).ipv4(
                [10, 0, 1, 1],
                [10, 0, 3, 3],
                64,
            );
            let mut f = Vec::new();
            if i % 2 == 0 {
                b.udp(40000 + i, 5001).write(&mut f, b"over udp").unwrap();
            } else {
                b.tcp(40000 + i, 443, 1, 1024)
                    .ack(1)
                    .write(&mut f, b"over tcp")
                    .unwrap();
            }
            f
        })
        .collect();
    let cut = out[0][..20].to_vec();
    let mut arp = out[0][..14].to_vec();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp.extend_from_slice(&[0; 28]);
    // An IPv4 first fragment (More Fragments) and a later one (offset 12 units): forwarded as
    // they came, in `fragments`.
    let (mut first, mut later) = (out[0].clone(), out[1].clone());
    first[14 + 6] |= 0x20;
    later[14 + 7] = 12;
    out.push(cut);
    out.push(arp);
    out.push(first);
    out.push(later);
    out
}

/// Runs `frames` through `chain` in order (each node's forwarded frames and synthetic copies go to
/// the next), checking each node's accounting; returns each node's counters.
fn run_chain(name: &str, chain: Vec<NodeConfig>, frames: Vec<Vec<u8>>) -> Vec<NodeStats> {
    let mut frames = frames;
    let mut stats = Vec::new();
    for (hop, c) in chain.into_iter().enumerate() {
        let mut node = Node::new(c).unwrap();
        let mut next = Vec::new();
        for mut f in frames {
            let tel = StaticTelemetry {
                model: node.config().telemetry.clone(),
                time_ns: 1_000_000,
            };
            let out = node.process(&mut f, &tel);
            if out.forward {
                next.push(f);
            }
            next.extend(out.synthetic);
        }
        let s = node.stats;
        assert_eq!(
            per_frame(&s),
            s.frames,
            "{name}, hop {hop}: every frame in one per-frame counter: {s:?}"
        );
        frames = next;
        stats.push(s);
    }
    stats
}

#[test]
fn every_frame_lands_in_one_per_frame_counter() {
    // Eight host packets, one cut inside IPv4, one not IP, two IPv4 fragments.
    for mode in [Mode::Md, Mode::Mx, Mode::Xd] {
        let s = run_chain(
            &format!("{mode:?}"),
            vec![
                cfg(1, Role::Source, mode),
                cfg(2, Role::Transit, mode),
                cfg(3, Role::Sink, mode),
            ],
            traffic(),
        );
        let report_only = |s: &NodeStats| s.report_only;
        let want = match mode {
            Mode::Md => [(s[0].inserted, 8), (s[1].added, 8), (s[2].sunk, 8)],
            Mode::Mx => [(s[0].inserted, 8), (report_only(&s[1]), 8), (s[2].sunk, 8)],
            Mode::Xd => [0, 1, 2].map(|i| (report_only(&s[i]), 8)),
        };
        assert_eq!(want.map(|w| w.0), want.map(|w| w.1), "{mode:?}: {s:?}");
        assert_eq!(s[0].malformed, 1, "the cut frame");
        assert_eq!(
            s.iter().map(|s| s.fragments).collect::<Vec<_>>(),
            [2, 2, 2],
            "{mode:?}: {s:?}"
        );
    }
    // A sink that pushes its own metadata on the stack before reporting it.
    let s = run_chain(
        "sink stack",
        vec![
            cfg(1, Role::Source, Mode::Md),
            cfg(2, Role::Transit, Mode::Md),
            NodeConfig {
                sink_metadata: SinkMetadata::Stack,
                ..cfg(3, Role::Sink, Mode::Md)
            },
        ],
        traffic(),
    );
    assert_eq!((s[2].sunk, s[2].added), (8, 0), "{s:?}");
    // A transit hop whose MTU leaves no room: an intermediate report, or the M bit.
    for action in [MtuAction::IntermediateReport, MtuAction::MBit] {
        let s = run_chain(
            &format!("{action:?}"),
            vec![
                cfg(1, Role::Source, Mode::Md),
                NodeConfig {
                    mtu: 80,
                    on_mtu_exceeded: action,
                    ..cfg(2, Role::Transit, Mode::Md)
                },
                cfg(3, Role::Sink, Mode::Md),
            ],
            traffic(),
        );
        let at_mtu = match action {
            MtuAction::IntermediateReport => s[1].intermediate,
            MtuAction::MBit => s[1].mtu,
        };
        assert!(
            at_mtu > 0,
            "{action:?}: the larger (TCP) packets do not fit: {s:?}"
        );
    }
    // The hop limit: a source allowing one hop (its own), two transit hops.
    let s = run_chain(
        "hop limit",
        vec![
            NodeConfig {
                max_hops: 1,
                ..cfg(1, Role::Source, Mode::Md)
            },
            cfg(2, Role::Transit, Mode::Md),
            cfg(3, Role::Transit, Mode::Md),
            cfg(4, Role::Sink, Mode::Md),
        ],
        traffic(),
    );
    assert_eq!((s[1].hop_limit, s[2].hop_limit), (8, 8), "{s:?}");
}

/// A frame the fuzz target `node_process` found: an INT-MX source (DSCP) forwards it, and the
/// sink's new L4 length then wrapped below zero (a panic). The sink leaves it as it came,
/// counted `malformed`.
#[test]
fn a_sink_leaves_a_frame_it_cannot_shorten_malformed() {
    let frame = hex::decode(concat!(
        "00000000cdede100ff7c000808004800002848480000001100000000002ff7000000003bf983cf8cff9f",
        "f513cdede100ff7c00080a6823270000006c00000000000000fbffffff0007fe00690000000000000a9e",
        "00137c3000132d00ee08004848485d000000020606060606eb06060606cdede100ff7c00080800480000",
        "2848bc7979797979797979797979797979797979797979797979797979797979797979797800000000ff",
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "ffffffffffffffffffffffffffffffffff002ff7000000003bf983cf8cff9ff513cdede14848485d0000",
        "00000606060606eb0606060600007c3b13480008084900100000006100510000000c000808854811ff",
    ))
    .unwrap();
    let config = |role| NodeConfig {
        role,
        mode: Mode::Mx,
        encap: intscope_node::SourceEncap::Dscp,
        instructions: 1,
        on_mtu_exceeded: MtuAction::IntermediateReport,
        use_checksum_complement: true,
        destination_headers: true,
        probe_marker: Some(intscope_node::config::HexBytes(
            0x1122_3344_5566_7788u64.to_be_bytes().to_vec(),
        )),
        watchlist: vec![intscope_node::WatchEntry {
            clone: true,
            ..intscope_node::WatchEntry::default()
        }],
        ..NodeConfig::default()
    };
    let s = run_chain(
        "fuzzed",
        vec![config(Role::Source), config(Role::Sink)],
        vec![frame],
    );
    assert!(s[1].malformed >= 1, "{:?}", s[1]);
}
