//! INT v2.1 §"Examples": Host1 → Switch1 (source) → Switch2 (transit) → Switch3 (sink) → Host2,
//! for INT-MD in every TCP/UDP encapsulation. Switch3 receives the spec's layout, Host2 receives
//! Host1's packet byte for byte, and every IP and L4 checksum verifies at every hop.

use etherparse::PacketBuilder;
use intscope_node::config::{MtuAction, ReportFormat, TelemetryModel};
use intscope_node::export::{ExportConfig, Exporter};
use intscope_node::{
    Node, NodeConfig, Role, SinkMetadata, SourceEncap, StaticTelemetry, WatchEntry,
};
use intscope_wire::int::{Encap, IntHeader};
use intscope_wire::locate::{DetectConfig, DscpMatch, Packet, Start};
use intscope_wire::report::Report;
use intscope_wire::{Warning, Warnings};

const INT_PORT: u16 = 17768;

fn host1_packet(tcp: bool, v6: bool, udp_checksum: bool) -> Vec<u8> {
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
    let payload = b"host1 says hello over INT";
    let mut out = Vec::new();
    if tcp {
        let b = b.tcp(40000, 443, 1000, 8192).ack(5).psh();
        b.write(&mut out, payload).unwrap();
    } else {
        b.udp(40000, 5001).write(&mut out, payload).unwrap();
        if !udp_checksum {
            let at = 14 + if v6 { 40 } else { 20 } + 6;
            out[at] = 0;
            out[at + 1] = 0;
        }
    }
    out
}

fn node(id: u32, role: Role, encap: SourceEncap, occupancy: u32) -> Node {
    Node::new(node_cfg(id, role, encap, occupancy)).unwrap()
}

fn node_cfg(id: u32, role: Role, encap: SourceEncap, occupancy: u32) -> NodeConfig {
    NodeConfig {
        node_id: id,
        role,
        encap,
        instructions: 0x9000, // node id + queue occupancy, as in the spec's examples
        watchlist: vec![WatchEntry::default()],
        int_udp_port: INT_PORT,
        telemetry: TelemetryModel {
            queue_occupancy: occupancy,
            ..TelemetryModel::default()
        },
        ..NodeConfig::default()
    }
}

/// Switch 1 (source), 2 (transit) and 3 (sink), each made by `make`.
fn three(make: impl Fn(u32, Role) -> Node) -> (Node, Node, Node) {
    (
        make(1, Role::Source),
        make(2, Role::Transit),
        make(3, Role::Sink),
    )
}

fn tel(n: &Node) -> StaticTelemetry {
    StaticTelemetry {
        model: n.config().telemetry.clone(),
        time_ns: 1_000_000,
    }
}

fn check(frame: &[u8]) -> Packet<'_> {
    let cfg = DetectConfig {
        int_udp_ports: vec![INT_PORT],
        dscp: Some(DscpMatch {
            value: 0x17,
            mask: 0x3f,
        }),
        verify_checksums: true,
        ..DetectConfig::default()
    };
    let p = Packet::parse(frame, Start::Ethernet, &cfg).unwrap();
    let bad: Warnings = p.warnings;
    assert!(
        !bad.has(Warning::BadL4Checksum) && !bad.has(Warning::BadIpChecksum),
        "checksums must verify"
    );
    p
}

fn chain(encap: SourceEncap, tcp: bool, v6: bool, udp_checksum: bool) {
    let host1 = host1_packet(tcp, v6, udp_checksum);
    check(&host1);
    let (mut s1, mut s2, mut s3) = (
        node(1, Role::Source, encap, 100),
        node(2, Role::Transit, encap, 200),
        node(3, Role::Sink, encap, 300),
    );
    let mut f = host1.clone();
    assert!(s1.process(&mut f, &tel(&s1)).forward);
    assert_eq!(s1.stats.inserted, 1);
    check(&f);
    s2.process(&mut f, &tel(&s2));
    assert_eq!(s2.stats.added, 1);

    // What Switch3 receives: the spec's layout.
    let at_switch3 = f.clone();
    let p = check(&at_switch3);
    let (_, b) = p.int.expect("INT at switch 3");
    let expected_encap = match (encap, tcp) {
        (SourceEncap::Dscp, true) => Encap::Tcp,
        (SourceEncap::Dscp, false) | (SourceEncap::UdpPort, false) => Encap::Udp,
        _ => Encap::UdpNew,
    };
    assert_eq!(b.encap, expected_encap);
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
    let hops: Vec<_> = b
        .stack(None)
        .0
        .map(|v| v.unwrap())
        .map(|v| (v.node_id(), v.queue().map(|q| q.1)))
        .collect();
    assert_eq!(
        hops,
        vec![(Some(2), Some(200)), (Some(1), Some(100))],
        "hop2 on top of hop1"
    );
    assert_eq!(b.len, 4 + 12 + 16, "shim Length=7 words after the shim");
    let flow = p.flow.unwrap();
    assert_eq!(
        (flow.proto, flow.src_port, flow.dst_port),
        (
            if tcp { 6 } else { 17 },
            40000,
            if tcp { 443 } else { 5001 }
        )
    );
    if encap == SourceEncap::Dscp {
        assert_eq!(p.ip.unwrap().dscp, 0x17);
    }

    let out = s3.process(&mut f, &tel(&s3));
    assert!(out.forward);
    assert_eq!(f, host1, "Host2 receives Host1's packet byte for byte");
    check(&f);

    // The report: Switch3's own metadata in the header, the stack in the truncated packet.
    assert_eq!(out.reports.len(), 1);
    let r = Report::parse(&out.reports[0]).unwrap();
    let Report::V2 { group, .. } = r else {
        panic!()
    };
    assert_eq!((group.version, group.node_id, group.sequence), (2, 3, 0));
    let ir = r.individual_reports().next().unwrap().unwrap();
    assert!(ir.warnings.is_empty());
    let m = ir.main.unwrap();
    assert_eq!(m.rep_md_bits, 0x1000, "node id moves to the group header");
    assert_eq!(ir.hop().unwrap().unwrap().queue().map(|q| q.1), Some(300));
    let inner = Packet::parse(
        ir.inner,
        Start::Ethernet,
        &DetectConfig {
            int_udp_ports: vec![INT_PORT],
            ..DetectConfig::default()
        },
    )
    .unwrap();
    assert_eq!(inner.int.unwrap().1.stack(None).0.count(), 2);
    assert_eq!(
        &ir.inner[..at_switch3.len().min(ir.inner.len())],
        &at_switch3[..at_switch3.len().min(ir.inner.len())]
    );
}

#[test]
fn md_over_tcp_dscp() {
    chain(SourceEncap::Dscp, true, false, true);
}

#[test]
fn md_over_udp_dscp() {
    chain(SourceEncap::Dscp, false, false, true);
}

#[test]
fn md_between_udp_header_and_payload() {
    chain(SourceEncap::UdpPort, false, false, true);
}

#[test]
fn new_udp_header_before_tcp_and_udp() {
    chain(SourceEncap::UdpNew, true, false, true);
    chain(SourceEncap::UdpNew, false, false, true);
    chain(SourceEncap::UdpPort, true, false, true);
}

#[test]
fn ipv6() {
    chain(SourceEncap::Dscp, true, true, true);
    chain(SourceEncap::UdpPort, false, true, true);
    chain(SourceEncap::UdpNew, true, true, true);
}

#[test]
fn zero_udp_checksum_stays_zero() {
    chain(SourceEncap::UdpPort, false, false, false);
    chain(SourceEncap::Dscp, false, false, false);
    let host1 = host1_packet(false, false, false);
    let mut s1 = node(1, Role::Source, SourceEncap::UdpPort, 1);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    assert_eq!(
        &f[14 + 20 + 6..14 + 20 + 8],
        &[0, 0],
        "RFC 768: no checksum stays no checksum"
    );
}

#[test]
fn hop_limit_sets_e_and_adds_nothing() {
    let host1 = host1_packet(true, false, true);
    let mut s1 = Node::new(NodeConfig {
        max_hops: 1,
        ..node(1, Role::Source, SourceEncap::Dscp, 1).config().clone()
    })
    .unwrap();
    let mut s2 = node(2, Role::Transit, SourceEncap::Dscp, 2);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let before = f.len();
    s2.process(&mut f, &tel(&s2));
    assert_eq!(f.len(), before, "nothing added at RHC 0");
    assert_eq!(s2.stats.hop_limit, 1);
    let p = check(&f);
    let IntHeader::Md(h) = p.int.unwrap().1.header else {
        panic!()
    };
    assert!(h.e);
    assert_eq!(
        h.remaining_hop_count, 0,
        "not decremented when nothing is added"
    );
}

#[test]
fn mtu_rules_at_source_and_transit() {
    let host1 = host1_packet(true, false, true);
    let ip_len = host1.len() - 14;
    // Room for the fixed headers but not the source's metadata: INT with M set.
    let mut s1 = Node::new(NodeConfig {
        mtu: ip_len + 16 + 4,
        ..node(1, Role::Source, SourceEncap::Dscp, 1).config().clone()
    })
    .unwrap();
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    assert_eq!(s1.stats.inserted_m, 1);
    let p = check(&f);
    let IntHeader::Md(h) = p.int.unwrap().1.header else {
        panic!()
    };
    assert!(h.m && h.remaining_hop_count == 8, "M set, RHC untouched");
    // No room for the fixed headers: no INT at all.
    let mut tight = Node::new(NodeConfig {
        mtu: ip_len + 15,
        ..node(1, Role::Source, SourceEncap::Dscp, 1).config().clone()
    })
    .unwrap();
    let mut g = host1.clone();
    tight.process(&mut g, &tel(&tight));
    assert_eq!((tight.stats.too_big, g == host1), (1, true));
    // Transit without room: M set, nothing added.
    let mut s1 = node(1, Role::Source, SourceEncap::Dscp, 1);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let mut s2 = Node::new(NodeConfig {
        mtu: f.len() - 14 + 4,
        ..node(2, Role::Transit, SourceEncap::Dscp, 2)
            .config()
            .clone()
    })
    .unwrap();
    let before = f.len();
    s2.process(&mut f, &tel(&s2));
    assert_eq!((s2.stats.mtu, f.len()), (1, before));
    let p = check(&f);
    assert!(matches!(p.int.unwrap().1.header, IntHeader::Md(h) if h.m));
}

#[test]
fn d_bit_discards_at_the_sink_after_reporting() {
    let host1 = host1_packet(false, false, true);
    let mut s1 = node(1, Role::Source, SourceEncap::UdpPort, 1);
    let mut s3 = node(3, Role::Sink, SourceEncap::UdpPort, 3);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    // Mark the packet as a clone (D), keeping the UDP checksum valid.
    let p = check(&f);
    let (off, _) = p.int.unwrap();
    let csum_at = 14 + 20 + 6;
    let old = [f[off + 4], f[off + 5]];
    f[off + 4] |= 0x08;
    let c = u16::from_be_bytes([f[csum_at], f[csum_at + 1]]);
    let c = intscope_wire::checksum::update(c, &old, &[f[off + 4], f[off + 5]]);
    f[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    check(&f);
    let out = s3.process(&mut f, &tel(&s3));
    assert!(!out.forward);
    assert_eq!((out.reports.len(), s3.stats.discarded), (1, 1));
}

#[test]
fn sink_metadata_on_the_stack() {
    let host1 = host1_packet(true, false, true);
    let mut s1 = node(1, Role::Source, SourceEncap::Dscp, 1);
    let mut s3 = Node::new(NodeConfig {
        sink_metadata: SinkMetadata::Stack,
        ..node(3, Role::Sink, SourceEncap::Dscp, 3).config().clone()
    })
    .unwrap();
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let out = s3.process(&mut f, &tel(&s3));
    assert_eq!(f, host1);
    let r = Report::parse(&out.reports[0]).unwrap();
    let ir = r.individual_reports().next().unwrap().unwrap();
    assert_eq!((ir.header.md_length, ir.main.unwrap().rep_md_bits), (0, 0));
    let inner = Packet::parse(ir.inner, Start::Ethernet, &DetectConfig::default()).unwrap();
    let nodes: Vec<_> = inner
        .int
        .unwrap()
        .1
        .stack(None)
        .0
        .map(|h| h.unwrap().node_id())
        .collect();
    assert_eq!(
        nodes,
        vec![Some(3), Some(1)],
        "the sink pushed itself on top"
    );
}

#[test]
fn unwatched_and_report_traffic_is_untouched() {
    let host1 = host1_packet(true, false, true);
    let mut s1 = Node::new(NodeConfig {
        watchlist: vec![WatchEntry {
            dst: Some("192.0.2.0/24".parse().unwrap()),
            ..WatchEntry::default()
        }],
        ..node(1, Role::Source, SourceEncap::Dscp, 1).config().clone()
    })
    .unwrap();
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    assert_eq!((f == host1, s1.stats.untouched), (true, 1));
}

fn with_mode(n: &Node, mode: intscope_node::Mode) -> Node {
    Node::new(NodeConfig {
        mode,
        ..n.config().clone()
    })
    .unwrap()
}

/// INT-MX: the source inserts the MX header, every node reports its own metadata as the
/// instructions ask (Node ID in the group header), the sink strips the header.
#[test]
fn mx_every_node_reports() {
    for encap in [SourceEncap::Dscp, SourceEncap::UdpPort, SourceEncap::UdpNew] {
        for tcp in [true, false] {
            let host1 = host1_packet(tcp, false, true);
            let mx = intscope_node::Mode::Mx;
            let (mut s1, mut s2, mut s3) = (
                with_mode(&node(1, Role::Source, encap, 100), mx),
                with_mode(&node(2, Role::Transit, encap, 200), mx),
                with_mode(&node(3, Role::Sink, encap, 300), mx),
            );
            let mut f = host1.clone();
            let mut reports = s1.process(&mut f, &tel(&s1)).reports;
            let p = check(&f);
            let (_, b) = p.int.unwrap();
            assert!(
                matches!(b.header, IntHeader::Mx(h) if h.instructions == 0x9000 && h.version == 2)
            );
            assert_eq!(b.len, 16, "shim + 12-byte MX header (Length=3)");
            let before = f.clone();
            reports.extend(s2.process(&mut f, &tel(&s2)).reports);
            assert_eq!(f, before, "a transit hop does not change an INT-MX packet");
            let out = s3.process(&mut f, &tel(&s3));
            reports.extend(out.reports);
            assert_eq!(
                f, host1,
                "{encap:?} tcp={tcp}: the sink restores the packet"
            );
            check(&f);
            let got: Vec<(u32, Option<u32>)> = reports
                .iter()
                .map(|r| {
                    let r = Report::parse(r).unwrap();
                    let Report::V2 { group, .. } = r else {
                        panic!()
                    };
                    let ir = r.individual_reports().next().unwrap().unwrap();
                    assert_eq!(ir.main.unwrap().rep_md_bits, 0x1000);
                    (
                        group.node_id,
                        ir.hop().unwrap().unwrap().queue().map(|q| q.1),
                    )
                })
                .collect();
            assert_eq!(got, vec![(1, Some(100)), (2, Some(200)), (3, Some(300))]);
        }
    }
}

/// INT-XD: each node sends a postcard for watched flows; the packet is never changed.
#[test]
fn xd_postcards_leave_the_packet_alone() {
    let host1 = host1_packet(false, false, true);
    let xd = intscope_node::Mode::Xd;
    let mut f = host1.clone();
    let mut cards = Vec::new();
    for (id, role) in [(1, Role::Source), (2, Role::Transit), (3, Role::Sink)] {
        let mut n = with_mode(&node(id, role, SourceEncap::UdpPort, id * 10), xd);
        cards.extend(n.process(&mut f, &tel(&n)).reports);
        assert_eq!(n.stats.postcards, 1);
    }
    assert_eq!(f, host1);
    let nodes: Vec<u32> = cards
        .iter()
        .map(|r| match Report::parse(r).unwrap() {
            Report::V2 { group, .. } => group.node_id,
            _ => panic!(),
        })
        .collect();
    assert_eq!(nodes, vec![1, 2, 3]);
    // Unwatched traffic: no postcard.
    let mut quiet = Node::new(NodeConfig {
        mode: xd,
        watchlist: vec![WatchEntry {
            proto: Some(6),
            ..WatchEntry::default()
        }],
        ..node(4, Role::Transit, SourceEncap::UdpPort, 1)
            .config()
            .clone()
    })
    .unwrap();
    let mut g = host1.clone();
    assert!(quiet.process(&mut g, &tel(&quiet)).reports.is_empty());
}

/// SD-Fabric's filters at a sink: one report a second per flow, more on a change.
#[test]
fn filters_limit_reports_per_flow() {
    let host1 = host1_packet(false, false, true);
    let filters = intscope_node::filter::FilterConfig {
        enabled: true,
        ..Default::default()
    };
    let mut s1 = node(1, Role::Source, SourceEncap::UdpPort, 1);
    let mut s3 = Node::new(NodeConfig {
        filters,
        ..node(3, Role::Sink, SourceEncap::UdpPort, 3)
            .config()
            .clone()
    })
    .unwrap();
    let mut reports = 0;
    for i in 0..10u64 {
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        let t = StaticTelemetry {
            model: s3.config().telemetry.clone(),
            time_ns: i * 100_000_000,
        };
        let out = s3.process(&mut f, &t);
        assert_eq!(f, host1, "filtered or not, the packet is restored");
        reports += out.reports.len();
    }
    assert_eq!(reports, 1, "ten packets in a second: one report");
    assert_eq!(s3.stats.filtered, 9, "held-back reports are counted");
    let mut moved = StaticTelemetry {
        model: s3.config().telemetry.clone(),
        time_ns: 1_000_000_000 - 1,
    };
    moved.model.egress_port = 7;
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    assert_eq!(
        s3.process(&mut f, &moved).reports.len(),
        1,
        "a new egress port reports at once"
    );
}

#[test]
fn v05_reports_as_fabric_tna_writes_them() {
    let host1 = host1_packet(false, false, true);
    let mut s1 = node(1, Role::Source, SourceEncap::UdpPort, 1);
    let mut s3 = Node::new(NodeConfig {
        report_format: ReportFormat::V05,
        report_truncate: 64,
        telemetry: TelemetryModel {
            ingress_port: 7,
            egress_port: 9,
            queue_id: 2,
            queue_occupancy: 0x12_3456,
            hop_latency_ns: 500,
            ..TelemetryModel::default()
        },
        ..node(3, Role::Sink, SourceEncap::UdpPort, 3)
            .config()
            .clone()
    })
    .unwrap();
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let received = f.clone();
    let out = s3.process(&mut f, &tel(&s3));
    assert_eq!(f, host1, "the packet is restored as with v2.0 reports");
    let Report::V05 {
        fixed,
        switch: Some(sw),
        inner,
        warnings,
    } = Report::parse(&out.reports[0]).unwrap()
    else {
        panic!("a v0.5 report with a switch-local header");
    };
    assert_eq!(warnings, Warnings::default());
    assert_eq!((fixed.version, fixed.nproto), (0, 2));
    assert_eq!((fixed.d, fixed.q, fixed.f), (false, false, true));
    assert_eq!(fixed.ingress_ts, 1_000_000);
    assert_eq!(
        (sw.switch_id, sw.ingress_port, sw.egress_port, sw.queue_id),
        (3, 7, 9, 2)
    );
    assert_eq!(sw.queue_occupancy, Some(0x12_3456));
    assert_eq!(sw.egress_ts, Some(1_000_500));
    assert_eq!(inner, &received[..64], "the received packet, truncated");

    // A drop: NProto 1, the drop header with SD-Fabric's reason.
    let drop = s3
        .drop_report(&received, 29 /* routing-miss */, &tel(&s3))
        .unwrap();
    let Report::V05 {
        fixed,
        switch: Some(sw),
        ..
    } = Report::parse(&drop).unwrap()
    else {
        panic!("a v0.5 drop report");
    };
    assert_eq!((fixed.nproto, fixed.d, fixed.sequence), (1, true, 1));
    assert_eq!(sw.drop_reason, Some(29));
}

fn individual_reports(datagrams: &[Vec<u8>]) -> usize {
    datagrams
        .iter()
        .map(|d| {
            Report::parse(d)
                .unwrap()
                .individual_reports()
                .inspect(|r| assert!(r.is_ok(), "{r:?}"))
                .count()
        })
        .sum()
}

#[test]
fn the_exporter_coalesces_within_size_and_time_budgets() {
    let host1 = host1_packet(false, false, true);
    let mut s1 = node(1, Role::Source, SourceEncap::UdpPort, 1);
    let mut s3 = node(3, Role::Sink, SourceEncap::UdpPort, 3);
    let mut reports = Vec::new();
    for _ in 0..10 {
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        reports.extend(s3.process(&mut f, &tel(&s3)).reports);
    }
    let one = reports[0].len();
    let budget = 8 + 3 * (one - 8); // three individual reports per datagram
    let mut exporter = Exporter::new(ExportConfig {
        coalesce_bytes: budget,
        coalesce_delay_ns: 1_000,
    });
    let mut out = Vec::new();
    for r in reports.iter().cloned() {
        exporter.push(0, r, &mut out);
    }
    assert_eq!(out.len(), 3, "full datagrams leave at once");
    exporter.poll(999, &mut out);
    assert_eq!(out.len(), 3, "the last one waits for its delay...");
    exporter.poll(1_000, &mut out);
    assert_eq!(out.len(), 4, "...and then leaves");
    assert!(out.iter().all(|d| d.len() <= budget));
    assert_eq!(individual_reports(&out), 10, "no report lost or duplicated");
    let seqs: Vec<u32> = out
        .iter()
        .map(|d| match Report::parse(d).unwrap() {
            Report::V2 { group, .. } => group.sequence,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3], "sequence numbers count datagrams");

    // Coalescing off: one datagram per report, numbered on.
    let mut plain = Exporter::new(ExportConfig::default());
    let mut out = Vec::new();
    for r in reports.iter().cloned() {
        plain.push(0, r, &mut out);
    }
    assert_eq!(out.len(), 10);
    assert_eq!(individual_reports(&out), 10);

    // A report as long as "to the end" (Report Length 0xFF) travels alone.
    let mut long = reports[0].clone();
    long[9] = 0xff;
    let mut exporter = Exporter::new(ExportConfig {
        coalesce_bytes: 4096,
        coalesce_delay_ns: 1_000,
    });
    let mut out = Vec::new();
    exporter.push(0, reports[1].clone(), &mut out);
    exporter.push(0, long.clone(), &mut out);
    exporter.push(0, reports[2].clone(), &mut out);
    exporter.flush(&mut out);
    assert_eq!(out.len(), 3);
    assert_eq!(&out[1][8..], &long[8..]);
}

/// The complement word of each hop (node id, queue, Checksum Complement: 3 words per hop).
fn complements(frame: &[u8]) -> Vec<u32> {
    let p = check(frame);
    let (off, b) = p.int.unwrap();
    let stack = &frame[off + 16..off + b.len];
    stack
        .chunks(12)
        .map(|h| u32::from_be_bytes([h[8], h[9], h[10], h[11]]))
        .collect()
}

#[test]
fn checksum_complement_keeps_the_l4_checksum() {
    for (encap, tcp) in [
        (SourceEncap::UdpPort, false),
        (SourceEncap::Dscp, false),
        (SourceEncap::Dscp, true),
    ] {
        let host1 = host1_packet(tcp, false, true);
        let with_complement = |id, role, on| {
            Node::new(NodeConfig {
                instructions: 0x9001, // node id, queue, Checksum Complement
                use_checksum_complement: on,
                ..node(id, role, encap, id).config().clone()
            })
            .unwrap()
        };
        let csum_at = 14 + 20 + if tcp { 16 } else { 6 };
        let csum = |f: &[u8]| u16::from_be_bytes([f[csum_at], f[csum_at + 1]]);
        let (mut s1, mut s2, mut s3) = three(|id, role| with_complement(id, role, true));
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        s2.process(&mut f, &tel(&s2));
        // check() verified the checksum at each step; the field never changed (a UDP port
        // change at NPT=1 included: the complement absorbs it too).
        assert_eq!(csum(&f), csum(&host1), "{encap:?} tcp={tcp}");
        let words = complements(&f);
        assert_eq!(words.len(), 2);
        assert!(words.iter().all(|w| *w != u32::MAX), "{words:x?}");
        s3.process(&mut f, &tel(&s3));
        assert_eq!(f, host1, "the sink restores the packet and its checksum");

        // A transit that prefers updating the field writes all ones in its complement word.
        let mut s2 = with_complement(2, Role::Transit, false);
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        s2.process(&mut f, &tel(&s2));
        assert_ne!(csum(&f), csum(&host1));
        let words = complements(&f);
        assert_eq!(words[0], u32::MAX, "transit: updated the field instead");
        assert_ne!(words[1], u32::MAX, "source: complement");
        s3.process(&mut f, &tel(&s3));
        assert_eq!(f, host1);
    }
}

#[test]
fn intermediate_report_when_the_mtu_leaves_no_room() {
    let host1 = host1_packet(false, false, true);
    let mut s1 = node(1, Role::Source, SourceEncap::UdpPort, 100);
    let mut s3 = node(3, Role::Transit, SourceEncap::UdpPort, 300);
    let mut s4 = node(4, Role::Sink, SourceEncap::UdpPort, 400);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let received = f.clone();
    // Switch 2's egress MTU is exactly the packet's size: no room for its 8 bytes.
    let mut s2 = Node::new(NodeConfig {
        mtu: f.len() - 14,
        on_mtu_exceeded: MtuAction::IntermediateReport,
        ..node(2, Role::Transit, SourceEncap::UdpPort, 200)
            .config()
            .clone()
    })
    .unwrap();
    let out = s2.process(&mut f, &tel(&s2));
    assert!(out.forward);
    assert_eq!(
        (s2.stats.intermediate, s2.stats.mtu, s2.stats.added),
        (1, 0, 0)
    );
    // The packet goes on with an empty stack (shim Length 3: the MD header only), no M bit, the
    // Remaining Hop Count as the source left it (switch 2 inserted nothing), and checksums that
    // verify; it got smaller.
    let p = check(&f);
    let (_, b) = p.int.unwrap();
    let IntHeader::Md(h) = b.header else { panic!() };
    assert_eq!((b.len, h.m, h.remaining_hop_count), (16, false, 7));
    assert_eq!(f.len(), received.len() - 8);

    // The report: I bit, switch 2's queue in the header, switch 1's hop in the packet as received.
    let r = Report::parse(&out.reports[0]).unwrap();
    let Report::V2 { group, .. } = r else {
        panic!()
    };
    assert_eq!(group.node_id, 2);
    let ir = r.individual_reports().next().unwrap().unwrap();
    assert!(ir.header.i && !ir.header.d);
    assert_eq!(ir.hop().unwrap().unwrap().queue().map(|q| q.1), Some(200));
    assert_eq!(&ir.inner[..received.len()], &received[..]);

    // Downstream hops fill the emptied stack; the sink restores Host1's packet.
    s3.process(&mut f, &tel(&s3));
    let (_, b) = check(&f).int.unwrap();
    let hops: Vec<_> = b.stack(None).0.map(|v| v.unwrap().node_id()).collect();
    assert_eq!(hops, vec![Some(3)]);
    let out = s4.process(&mut f, &tel(&s4));
    assert_eq!(f, host1);
    assert_eq!(out.reports.len(), 1);
}

#[test]
fn gtpu_watchlists_match_the_users_flow() {
    // A mobile user's TCP flow in a GTP-U tunnel between two base-station-side addresses.
    let mut user = Vec::new();
    PacketBuilder::ipv4([172, 16, 0, 7], [8, 8, 4, 4], 63)
        .tcp(51000, 443, 1, 1000)
        .write(&mut user, b"user data")
        .unwrap();
    let mut gtpu = vec![0x30, 0xff, 0, 0, 0, 0, 0x12, 0x34]; // G-PDU, TEID 0x1234
    gtpu[2..4].copy_from_slice(&(user.len() as u16).to_be_bytes());
    gtpu.extend_from_slice(&user);
    let mut host1 = Vec::new();
    PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
        .udp(2152, 2152)
        .write(&mut host1, &gtpu)
        .unwrap();
    let source = |entry: WatchEntry| {
        Node::new(NodeConfig {
            watchlist: vec![entry],
            ..node(1, Role::Source, SourceEncap::UdpPort, 1)
                .config()
                .clone()
        })
        .unwrap()
    };
    let users = "8.8.0.0/16".parse().ok();
    // On the outer headers, the tunnel endpoints do not match the user's destination...
    let mut outer = source(WatchEntry {
        dst: users,
        inner: Some(false),
        ..WatchEntry::default()
    });
    let mut f = host1.clone();
    outer.process(&mut f, &tel(&outer));
    assert_eq!((f == host1, outer.stats.untouched), (true, 1));
    // ...by default a GTP-U packet is matched on the user's headers, as SD-Fabric does.
    let mut default = source(WatchEntry {
        dst: users,
        ..WatchEntry::default()
    });
    let mut g = host1.clone();
    default.process(&mut g, &tel(&default));
    assert_eq!(default.stats.inserted, 1);
    // ...inside the tunnel they do; INT goes on the outer UDP header.
    let mut inner = source(WatchEntry {
        dst: users,
        proto: Some(6),
        inner: Some(true),
        ..WatchEntry::default()
    });
    let mut s3 = node(3, Role::Sink, SourceEncap::UdpPort, 3);
    inner.process(&mut f, &tel(&inner));
    assert_eq!(inner.stats.inserted, 1);
    let p = check(&f);
    assert_eq!(p.int.unwrap().1.encap, Encap::Udp);
    assert_eq!(
        p.flow.unwrap().dst_port,
        2152,
        "the shim keeps the tunnel's port"
    );
    assert_eq!(p.inner_flow.unwrap().dst_port, 443);
    s3.process(&mut f, &tel(&s3));
    assert_eq!(f, host1, "the sink restores the tunnel packet");
}

#[test]
fn watchlist_entries_carry_their_own_int_settings_and_domain_metadata() {
    let host1 = host1_packet(false, false, true);
    // The spec's source-only MAC domain (DS ID 0x5453, bit 0: 8 bytes) for this flow...
    let entry: WatchEntry = toml::from_str(
        r#"
        dst = "10.0.3.0/24"
        max_hops = 4
        ds_id = 0x5453
        ds_instruction = 0x8000
        ds_metadata = "0x0000 0200 0000 0001"
        "#,
    )
    .unwrap();
    let mut s1 = Node::new(NodeConfig {
        watchlist: vec![entry],
        ..node(1, Role::Source, SourceEncap::UdpPort, 100)
            .config()
            .clone()
    })
    .unwrap();
    let mut s2 = node(2, Role::Transit, SourceEncap::UdpPort, 200);
    let mut s3 = node(3, Role::Sink, SourceEncap::UdpPort, 300);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    s2.process(&mut f, &tel(&s2));
    let (_, b) = check(&f).int.unwrap();
    let IntHeader::Md(h) = b.header else { panic!() };
    assert_eq!(
        (h.hop_ml, h.remaining_hop_count, h.ds_id, h.ds_instruction),
        (4, 2, 0x5453, 0x8000),
        "node id + queue + the 8-byte MAC per hop"
    );
    let registry =
        intscope_wire::domain::Registry::from_toml(include_str!("../../../examples/domains.toml"))
            .unwrap();
    let hops: Vec<_> = b.stack(Some(&registry)).0.map(|v| v.unwrap()).collect();
    // Switch 2 does not know the domain: all ones where its MAC would be.
    assert_eq!(hops[0].domain(), &[0xff; 8]);
    assert_eq!(
        hops[1].domain(),
        &[0, 0, 2, 0, 0, 0, 0, 1],
        "the source's MAC"
    );
    s3.process(&mut f, &tel(&s3));
    assert_eq!(f, host1);

    // Another entry asks for INT-MX with its own bitmap: the header says so.
    let mut mx = Node::new(NodeConfig {
        watchlist: vec![WatchEntry {
            mode: Some(intscope_node::Mode::Mx),
            instructions: Some(0xc000),
            ds_id: 0xabcd,
            ds_instruction: 0xc000,
            ds_metadata: intscope_node::config::HexBytes(vec![0, 0, 0, 7, 0, 0, 0, 9]),
            ..WatchEntry::default()
        }],
        ..node(1, Role::Source, SourceEncap::UdpPort, 100)
            .config()
            .clone()
    })
    .unwrap();
    let mut f = host1.clone();
    let out = mx.process(&mut f, &tel(&mx));
    assert_eq!(out.reports.len(), 1, "an INT-MX source reports itself");
    let (off, b) = check(&f).int.unwrap();
    let IntHeader::Mx(h) = b.header else {
        panic!("INT-MX")
    };
    assert_eq!(
        (h.instructions, h.ds_id, h.ds_instruction),
        (0xc000, 0xabcd, 0xc000)
    );
    assert_eq!(
        b.len,
        4 + 12 + 8,
        "the source-inserted sequence number and flow id follow"
    );
    assert_eq!(&f[off + 16..off + 24], &[0, 0, 0, 7, 0, 0, 0, 9]);
    // Its report carries the source-inserted metadata in the packet copy (INT v2.1 §"INT-MX
    // Header Format", way a), so DSMdBits stay clear.
    let r = Report::parse(&out.reports[0]).unwrap();
    let ir = r.individual_reports().next().unwrap().unwrap();
    assert_eq!(ir.main.unwrap().ds_md_bits, 0);
    assert!(ir.inner.windows(8).any(|w| w == [0, 0, 0, 7, 0, 0, 0, 9]));

    // Sizes the headers cannot carry are configuration errors.
    let bad = |ds: usize, instructions: u16| {
        NodeConfig {
            watchlist: vec![WatchEntry {
                instructions: Some(instructions),
                ds_metadata: intscope_node::config::HexBytes(vec![0; ds]),
                ..WatchEntry::default()
            }],
            ..NodeConfig::default()
        }
        .validate()
    };
    assert!(bad(8, 0xf000).is_ok());
    assert!(
        bad(6, 0xf000)
            .unwrap_err()
            .to_string()
            .contains("4-byte words")
    );
    assert!(matches!(
        bad(120, 0xf000).unwrap_err(),
        intscope_node::ConfigError::HopMl { .. }
    ));
}

#[test]
fn probe_marker_encapsulation() {
    for tcp in [false, true] {
        let host1 = host1_packet(tcp, false, true);
        let marked = |id, role| {
            let cfg: NodeConfig = toml::from_str(
                r#"
                encap = "probe-marker"
                probe_marker = "0x1122334455667788"
                "#,
            )
            .unwrap();
            cfg.validate().unwrap();
            Node::new(NodeConfig {
                encap: cfg.encap,
                probe_marker: cfg.probe_marker,
                ..node(id, role, SourceEncap::Dscp, id).config().clone()
            })
            .unwrap()
        };
        let (mut s1, mut s2, mut s3) = three(marked);
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        s2.process(&mut f, &tel(&s2));
        let cfg = DetectConfig {
            dscp: None,
            probe_marker: Some(0x1122_3344_5566_7788),
            verify_checksums: true,
            ..DetectConfig::default()
        };
        let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
        assert!(!p.warnings.has(Warning::BadL4Checksum));
        let l4_end = 14 + 20 + if tcp { 20 } else { 8 };
        let (off, b) = p.int.expect("INT behind the marker");
        assert_eq!(off, l4_end + 8);
        assert_eq!(&f[l4_end..off], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(b.stack(None).0.count(), 2);
        let flow = p.flow.unwrap();
        assert_eq!(
            flow.dst_port,
            if tcp { 443 } else { 5001 },
            "ports untouched"
        );
        assert_eq!(p.ip.unwrap().dscp, 0, "DSCP untouched");
        s3.process(&mut f, &tel(&s3));
        assert_eq!(f, host1, "marker and INT removed");
    }
    let no_marker = NodeConfig {
        encap: SourceEncap::ProbeMarker,
        ..NodeConfig::default()
    };
    assert!(
        no_marker
            .validate()
            .unwrap_err()
            .to_string()
            .contains("probe_marker")
    );
}

#[test]
fn clone_and_mark_and_probes_are_discarded_at_the_sink() {
    let host1 = host1_packet(false, false, true);
    let mut s1 = Node::new(NodeConfig {
        watchlist: vec![WatchEntry {
            clone: true,
            ..WatchEntry::default()
        }],
        ..node(1, Role::Source, SourceEncap::UdpPort, 1)
            .config()
            .clone()
    })
    .unwrap();
    let mut s3 = node(3, Role::Sink, SourceEncap::UdpPort, 3);
    let mut f = host1.clone();
    let out = s1.process(&mut f, &tel(&s1));
    assert_eq!(f, host1, "the original goes on untouched");
    assert_eq!(
        (out.synthetic.len(), s1.stats.clones, s1.stats.inserted),
        (1, 1, 1)
    );
    let mut copy = out.synthetic[0].clone();
    let (_, b) = check(&copy).int.unwrap();
    let IntHeader::Md(h) = b.header else { panic!() };
    assert!(h.d, "the clone is marked for discarding");
    let at_sink = s3.process(&mut copy, &tel(&s3));
    assert_eq!((at_sink.forward, at_sink.reports.len()), (false, 1));

    // Probes: one per interval of (capture) time, INT-marked; D as configured.
    let mut prober = Node::new(NodeConfig {
        probes: toml::from_str::<NodeConfig>(
            r#"
            [[probes]]
            src = "10.0.1.9"
            dst = "10.0.3.9"
            interval_ns = 1000000
            discard = false
            "#,
        )
        .unwrap()
        .probes,
        ..node(1, Role::Source, SourceEncap::UdpPort, 1)
            .config()
            .clone()
    })
    .unwrap();
    prober.config().validate().unwrap();
    let t = tel(&prober);
    assert_eq!(prober.probes(5_000_000, &t).len(), 1, "the first at once");
    assert_eq!(prober.probes(5_500_000, &t).len(), 0);
    assert_eq!(prober.probes(8_000_000, &t).len(), 3, "6, 7 and 8 ms");
    let mut probe = prober.probes(9_000_000, &t).remove(0);
    let p = check(&probe);
    let flow = p.flow.unwrap();
    assert_eq!(
        (flow.dst_ip().to_string(), flow.dst_port),
        ("10.0.3.9".into(), 50_001)
    );
    let IntHeader::Md(h) = p.int.unwrap().1.header else {
        panic!()
    };
    assert!(!h.d);
    let at_sink = s3.process(&mut probe, &tel(&s3));
    assert!(at_sink.forward, "delivered: discard = false");
    assert_eq!(prober.stats.probes, 5);
}

#[test]
fn gre_encapsulation_added_at_the_source_and_removed_at_the_sink() {
    for (tcp, v6) in [(false, false), (true, false), (false, true)] {
        let host1 = host1_packet(tcp, v6, true);
        let gre = |id, role| {
            Node::new(NodeConfig {
                encap: SourceEncap::Gre,
                ..node(id, role, SourceEncap::Gre, id * 100).config().clone()
            })
            .unwrap()
        };
        let (mut s1, mut s2, mut s3) = three(gre);
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        s2.process(&mut f, &tel(&s2));
        assert_eq!(
            (s1.stats.inserted, s2.stats.added),
            (1, 1),
            "tcp={tcp} v6={v6}"
        );
        let cfg = DetectConfig {
            gre_proto: Some(0x88b5),
            verify_checksums: true,
            ..DetectConfig::default()
        };
        let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
        assert!(!p.warnings.has(Warning::BadIpChecksum));
        let ip = p.ip.unwrap();
        assert_eq!(ip.proto, 47, "outer IP carries GRE");
        let (off, b) = p.int.expect("INT behind GRE");
        assert_eq!(b.encap, Encap::Gre);
        assert_eq!(off, 14 + if v6 { 40 } else { 20 } + 4);
        let intscope_wire::int::AnyShim::V2(intscope_wire::shim::Shim::Gre(shim)) = b.shim else {
            panic!("a GRE shim")
        };
        assert!(shim.g, "G: the source inserted GRE");
        assert_eq!(shim.next_protocol, if v6 { 0x86dd } else { 0x0800 });
        let hops: Vec<_> = b.stack(None).0.map(|v| v.unwrap().node_id()).collect();
        assert_eq!(hops, vec![Some(2), Some(1)]);
        let inner = p.inner_flow.expect("the original packet inside");
        assert_eq!(inner.dst_port, if tcp { 443 } else { 5001 });
        let out = s3.process(&mut f, &tel(&s3));
        assert_eq!(out.reports.len(), 1);
        assert_eq!(f, host1, "GRE and INT gone, Host1's packet byte for byte");
    }
}

#[test]
fn gre_packets_keep_their_gre_at_the_sink() {
    // A GRE tunnel packet (IPv4 over GRE) whose INT was added after the GRE header (G = 0).
    let mut inner = Vec::new();
    PacketBuilder::ipv4([192, 168, 1, 1], [192, 168, 2, 2], 64)
        .udp(1000, 2000)
        .write(&mut inner, b"tunnelled")
        .unwrap();
    let outer = |gre_and_more: &[u8]| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
            .write(&mut f, etherparse::IpNumber(47), gre_and_more)
            .unwrap();
        f
    };
    let mut int = vec![0u8; 4 + 12 + 8];
    intscope_wire::shim::GreShimRepr {
        int_type: 1,
        g: false,
        reserved: 0,
        length: 5,
        next_protocol: 0x0800,
    }
    .emit(&mut int[..4]);
    intscope_wire::md::MdHeaderRepr {
        version: 2,
        hop_ml: 2,
        remaining_hop_count: 7,
        instructions: 0x9000,
        ..Default::default()
    }
    .emit(&mut int[4..16]);
    int[16..24].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 100]);
    let with_int = outer(&[&[0u8, 0, 0x88, 0xb5][..], &int, &inner].concat());
    let expected = outer(&[&[0u8, 0, 0x08, 0x00][..], &inner].concat());
    let mut s3 = Node::new(NodeConfig {
        encap: SourceEncap::Gre,
        ..node(3, Role::Sink, SourceEncap::Gre, 300).config().clone()
    })
    .unwrap();
    let mut f = with_int.clone();
    let out = s3.process(&mut f, &tel(&s3));
    assert_eq!((out.reports.len(), s3.stats.sunk), (1, 1));
    assert_eq!(
        f, expected,
        "INT removed, GRE's protocol type restored, IP length and checksum right"
    );

    // A GRE-encapsulating source builds exactly that packet from the tunnel's own (scenario 1).
    let mut s1 = Node::new(NodeConfig {
        encap: SourceEncap::Gre,
        ..node(1, Role::Source, SourceEncap::Gre, 100)
            .config()
            .clone()
    })
    .unwrap();
    let mut f = expected.clone();
    s1.process(&mut f, &tel(&s1));
    assert_eq!(f, with_int, "INT behind the existing GRE header, G = 0");

    // With a GRE checksum (C bit), every hop keeps it valid.
    let gre_csum = |payload: &[u8]| {
        let mut g = vec![0x80, 0, 0x08, 0x00, 0, 0, 0, 0];
        g.extend_from_slice(payload);
        let c = intscope_wire::checksum::internet_checksum(&g);
        g[4..6].copy_from_slice(&c.to_be_bytes());
        g
    };
    let tunnel = outer(&gre_csum(&inner));
    let mut s2 = Node::new(NodeConfig {
        encap: SourceEncap::Gre,
        ..node(2, Role::Transit, SourceEncap::Gre, 200)
            .config()
            .clone()
    })
    .unwrap();
    let mut f = tunnel.clone();
    s1.process(&mut f, &tel(&s1));
    s2.process(&mut f, &tel(&s2));
    let gre = &f[14 + 20..];
    assert_eq!(
        intscope_wire::checksum::internet_checksum(gre),
        0,
        "GRE checksum verifies"
    );
    assert_eq!(s2.stats.added, 1);
    s3.process(&mut f, &tel(&s3));
    assert_eq!(f, tunnel);
}

/// A tenant's UDP frame in VXLAN (port 4789) or VXLAN-GPE (4790, next protocol Ethernet).
fn vxlan_packet(gpe: bool, outer_udp_checksum: bool) -> Vec<u8> {
    let mut tenant = Vec::new();
    PacketBuilder::ethernet2([0xa, 0, 0, 0, 0, 1], [0xa, 0, 0, 0, 0, 2])
        .ipv4([192, 168, 7, 1], [192, 168, 7, 2], 64)
        .udp(7000, 8000)
        .write(&mut tenant, b"tenant payload")
        .unwrap();
    let mut vx = if gpe {
        vec![0x0c, 0, 0, 0x03, 0, 0, 0x2a, 0] // I and P, next protocol Ethernet, VNI 42
    } else {
        vec![0x08, 0, 0, 0, 0, 0, 0x2a, 0]
    };
    vx.extend_from_slice(&tenant);
    let mut f = Vec::new();
    PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
        .udp(49152, if gpe { 4790 } else { 4789 })
        .write(&mut f, &vx)
        .unwrap();
    if !outer_udp_checksum {
        f[14 + 20 + 6] = 0;
        f[14 + 20 + 7] = 0;
    }
    f
}

#[test]
fn vxlan_gpe_carries_int_and_vxlan_comes_back_as_it_was() {
    for (gpe, csum) in [(false, false), (false, true), (true, true)] {
        let host1 = vxlan_packet(gpe, csum);
        let vx = |id, role| {
            Node::new(NodeConfig {
                watchlist: vec![WatchEntry {
                    inner: Some(true),
                    dst: "192.168.7.0/24".parse().ok(),
                    ..WatchEntry::default()
                }],
                ..node(id, role, SourceEncap::VxlanGpe, id * 100)
                    .config()
                    .clone()
            })
            .unwrap()
        };
        let (mut s1, mut s2, mut s3) =
            (vx(1, Role::Source), vx(2, Role::Transit), vx(3, Role::Sink));
        let mut f = host1.clone();
        s1.process(&mut f, &tel(&s1));
        s2.process(&mut f, &tel(&s2));
        assert_eq!((s1.stats.inserted, s2.stats.added), (1, 1), "gpe={gpe}");
        let p = check(&f);
        assert_eq!(p.flow.unwrap().dst_port, 4790, "VXLAN-GPE's port");
        let (off, b) = p.int.expect("INT behind VXLAN-GPE");
        assert_eq!((b.encap, off), (Encap::VxlanGpe, 14 + 20 + 8 + 8));
        assert_eq!(f[14 + 20 + 8 + 3], 0x82, "next protocol: INT");
        let intscope_wire::int::AnyShim::V2(intscope_wire::shim::Shim::Gpe(shim)) = b.shim else {
            panic!("a VXLAN-GPE shim")
        };
        assert_eq!((shim.g, shim.next_protocol), (!gpe, 0x03));
        assert_eq!(b.stack(None).0.count(), 2);
        assert_eq!(p.inner_flow.unwrap().dst_port, 8000, "the tenant's flow");
        s3.process(&mut f, &tel(&s3));
        assert_eq!(
            f, host1,
            "gpe={gpe} csum={csum}: the tunnel packet as it came"
        );
    }
    // A packet that is not VXLAN is left alone by a vxlan-gpe source.
    let plain = host1_packet(false, false, true);
    let mut s1 = node(1, Role::Source, SourceEncap::VxlanGpe, 1);
    let mut f = plain.clone();
    s1.process(&mut f, &tel(&s1));
    assert_eq!((f == plain, s1.stats.untouched), (true, 1));
}

/// A tenant frame in Geneve (RFC 8926) with one 8-byte option of another class already there.
fn geneve_packet() -> Vec<u8> {
    let mut tenant = Vec::new();
    PacketBuilder::ethernet2([0xa, 0, 0, 0, 0, 1], [0xa, 0, 0, 0, 0, 2])
        .ipv4([192, 168, 7, 1], [192, 168, 7, 2], 64)
        .udp(7000, 8000)
        .write(&mut tenant, b"tenant payload")
        .unwrap();
    // Ver 0, Opt Len 2 words, protocol Ethernet (0x6558), VNI 42; option class 0x0102 type 1.
    let mut g = vec![0x02, 0, 0x65, 0x58, 0, 0, 0x2a, 0];
    g.extend_from_slice(&[0x01, 0x02, 0x01, 0x01, 0xde, 0xad, 0xbe, 0xef]);
    g.extend_from_slice(&tenant);
    let mut f = Vec::new();
    PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 1, 1], [10, 0, 3, 1], 64)
        .udp(49152, 6081)
        .write(&mut f, &g)
        .unwrap();
    f
}

#[test]
fn geneve_option_carries_int_within_its_124_bytes() {
    let host1 = geneve_packet();
    let geneve = |id, role, instructions| {
        Node::new(NodeConfig {
            instructions,
            watchlist: vec![WatchEntry {
                inner: Some(true),
                ..WatchEntry::default()
            }],
            ..node(id, role, SourceEncap::Geneve, id * 100)
                .config()
                .clone()
        })
        .unwrap()
    };
    let (mut s1, mut s2, mut s3) = three(|id, role| geneve(id, role, 0x9000));
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    s2.process(&mut f, &tel(&s2));
    let p = check(&f);
    let (off, b) = p.int.expect("INT in a Geneve option");
    assert_eq!(b.encap, Encap::Geneve);
    assert_eq!(off, 14 + 20 + 8 + 8 + 8, "after the option that was there");
    assert_eq!(&f[off..off + 2], &[0x01, 0x03], "option class 0x0103");
    assert_eq!(
        f[14 + 20 + 8] & 0x3f,
        2 + 1 + 3 + 4,
        "Opt Len: old option, INT option header, INT header, two hops"
    );
    assert_eq!(b.stack(None).0.count(), 2);
    assert_eq!(p.inner_flow.unwrap().dst_port, 8000);
    s3.process(&mut f, &tel(&s3));
    assert_eq!(f, host1, "the Geneve packet as it came");

    // Hop ML 6 (24 bytes): the header and four hops fill the option; the fifth hop sets M.
    let mut f = host1.clone();
    let mut s1 = geneve(1, Role::Source, 0xf800);
    s1.process(&mut f, &tel(&s1));
    let IntHeader::Md(h) = check(&f).int.unwrap().1.header else {
        panic!()
    };
    assert_eq!(h.remaining_hop_count, 3, "capped: three more hops fit");
    let mut transits: Vec<Node> = (2..6).map(|i| geneve(i, Role::Transit, 0xf800)).collect();
    for t in &mut transits {
        let tl = tel(t);
        t.process(&mut f, &tl);
    }
    let (_, b) = check(&f).int.unwrap();
    let IntHeader::Md(h) = b.header else { panic!() };
    assert_eq!(
        (b.stack(None).0.count(), h.e),
        (4, true),
        "the hop limit, before the option overflows"
    );
    assert!(b.len - 4 <= 124);
}

#[test]
fn reserved_instruction_bits_get_all_ones() {
    // Bit 9 is reserved (INT v2.1 §"INT-MD Metadata Header Format"): each hop still adds its
    // 4 bytes, as all ones.
    let host1 = host1_packet(false, false, true);
    let with_reserved = |id, role| {
        Node::new(NodeConfig {
            instructions: 0x9040,
            ..node(id, role, SourceEncap::UdpPort, id).config().clone()
        })
        .unwrap()
    };
    let (mut s1, mut s2, mut s3) = three(with_reserved);
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    s2.process(&mut f, &tel(&s2));
    let (off, b) = check(&f).int.unwrap();
    let IntHeader::Md(h) = b.header else { panic!() };
    assert_eq!(h.hop_ml, 3);
    for hop in f[off + 16..off + b.len].chunks(12) {
        assert_eq!(&hop[8..], &[0xff; 4], "the reserved word");
    }
    let hops: Vec<_> = b.stack(None).0.map(|v| v.unwrap().node_id()).collect();
    assert_eq!(hops, vec![Some(2), Some(1)]);
    s3.process(&mut f, &tel(&s3));
    assert_eq!(f, host1);
}

/// INT-MX over the tunnel encapsulations and the probe marker: the same three reports, the
/// packet restored byte for byte.
#[test]
fn mx_in_every_other_encapsulation() {
    let marker = intscope_node::config::HexBytes(0x1122_3344_5566_7788u64.to_be_bytes().to_vec());
    let cases: [(SourceEncap, Vec<u8>); 4] = [
        (SourceEncap::Gre, host1_packet(true, false, true)),
        (SourceEncap::ProbeMarker, host1_packet(false, false, true)),
        (SourceEncap::VxlanGpe, vxlan_packet(false, true)),
        (SourceEncap::Geneve, geneve_packet()),
    ];
    for (encap, host1) in cases {
        let mx = |id, role| {
            Node::new(NodeConfig {
                mode: intscope_node::Mode::Mx,
                probe_marker: Some(marker.clone()),
                ..node_cfg(id, role, encap, id * 100)
            })
            .unwrap()
        };
        let (mut s1, mut s2, mut s3) =
            (mx(1, Role::Source), mx(2, Role::Transit), mx(3, Role::Sink));
        let mut f = host1.clone();
        let mut reports = s1.process(&mut f, &tel(&s1)).reports;
        let cfg = DetectConfig {
            gre_proto: Some(0x88b5),
            probe_marker: Some(0x1122_3344_5566_7788),
            verify_checksums: true,
            ..DetectConfig::default()
        };
        let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
        assert!(
            matches!(p.int.unwrap().1.header, IntHeader::Mx(_)),
            "{encap:?}"
        );
        assert!(!p.warnings.has(Warning::BadL4Checksum), "{encap:?}");
        reports.extend(s2.process(&mut f, &tel(&s2)).reports);
        reports.extend(s3.process(&mut f, &tel(&s3)).reports);
        assert_eq!(f, host1, "{encap:?}: restored");
        let nodes: Vec<u32> = reports
            .iter()
            .map(|r| match Report::parse(r).unwrap() {
                Report::V2 { group, .. } => group.node_id,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(nodes, vec![1, 2, 3], "{encap:?}");
    }
}

#[test]
fn reports_clear_the_bits_a_node_cannot_provide() {
    // Bits 0-9 asked for; the pcap-mode device has no buffer (bit 8), bit 9 is reserved.
    let host1 = host1_packet(false, false, true);
    let mut s1 = Node::new(NodeConfig {
        mode: intscope_node::Mode::Mx,
        instructions: 0xffc0,
        ..node(1, Role::Source, SourceEncap::UdpPort, 1)
            .config()
            .clone()
    })
    .unwrap();
    let mut f = host1.clone();
    let out = s1.process(&mut f, &tel(&s1));
    let r = Report::parse(&out.reports[0]).unwrap();
    let ir = r.individual_reports().next().unwrap().unwrap();
    let bits = ir.main.unwrap().rep_md_bits;
    assert_eq!(
        bits, 0x7f00,
        "node id in the group header; buffer and reserved cleared"
    );
    assert_eq!(
        usize::from(ir.header.md_length) * 4,
        intscope_wire::metadata::Format::ReportV2.baseline_len(bits)
    );
    let hop = ir.hop().unwrap().unwrap();
    assert!(hop.queue().is_some() && hop.hop_latency().is_some());
}

#[test]
fn transit_hops_can_skip_what_they_cannot_provide() {
    use intscope_node::config::Unsupported;
    let host1 = host1_packet(false, false, true);
    let skipping = |cfg: NodeConfig| {
        Node::new(NodeConfig {
            unknown_domain: Unsupported::Skip,
            reserved_bits: Unsupported::Skip,
            ..cfg
        })
        .unwrap()
    };
    // Reserved bit 9 requested: the skipping hop adds nothing, not even an E or M bit.
    let mut s1 = Node::new(NodeConfig {
        instructions: 0x9040,
        ..node(1, Role::Source, SourceEncap::UdpPort, 1)
            .config()
            .clone()
    })
    .unwrap();
    let mut s2 = skipping(
        node(2, Role::Transit, SourceEncap::UdpPort, 2)
            .config()
            .clone(),
    );
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let before = f.clone();
    s2.process(&mut f, &tel(&s2));
    assert_eq!(
        (f == before, s2.stats.skipped, s2.stats.added),
        (true, 1, 0)
    );

    // Domain-specific metadata of an unknown domain (Hop ML beyond the bitmap): skipped too.
    let mut s1 = Node::new(NodeConfig {
        watchlist: vec![WatchEntry {
            ds_id: 0x5453,
            ds_instruction: 0x8000,
            ds_metadata: intscope_node::config::HexBytes(vec![0; 8]),
            ..WatchEntry::default()
        }],
        ..node(1, Role::Source, SourceEncap::UdpPort, 1)
            .config()
            .clone()
    })
    .unwrap();
    let mut f = host1.clone();
    s1.process(&mut f, &tel(&s1));
    let before = f.clone();
    s2.process(&mut f, &tel(&s2));
    assert_eq!((f == before, s2.stats.skipped), (true, 2));
    // The default pads instead.
    let mut s2 = node(2, Role::Transit, SourceEncap::UdpPort, 2);
    s2.process(&mut f, &tel(&s2));
    assert_eq!((s2.stats.added, s2.stats.skipped), (1, 0));
}

#[test]
fn watchlist_entries_can_match_the_ingress_interface() {
    let host1 = host1_packet(false, false, true);
    let on_port = |port| {
        Node::new(NodeConfig {
            watchlist: vec![WatchEntry {
                ingress_port: Some(5),
                ..WatchEntry::default()
            }],
            telemetry: TelemetryModel {
                ingress_port: port,
                ..TelemetryModel::default()
            },
            ..node(1, Role::Source, SourceEncap::UdpPort, 1)
                .config()
                .clone()
        })
        .unwrap()
    };
    let (mut other, mut watched) = (on_port(1), on_port(5));
    let mut f = host1.clone();
    other.process(&mut f, &tel(&other));
    assert_eq!((f == host1, other.stats.untouched), (true, 1));
    watched.process(&mut f, &tel(&watched));
    assert_eq!(watched.stats.inserted, 1);
}

#[test]
fn watchlist_entries_choose_their_report_categories() {
    use intscope_node::config::ReportCategory;
    use intscope_node::filter::{FilterConfig, QueueThreshold};
    let host1 = host1_packet(false, false, true);
    let postcards = |latency, reports| {
        Node::new(NodeConfig {
            mode: intscope_node::Mode::Xd,
            watchlist: vec![WatchEntry {
                reports: Some(reports),
                ..WatchEntry::default()
            }],
            filters: FilterConfig {
                enabled: true,
                queues: vec![QueueThreshold {
                    queue_id: 0,
                    trigger_ns: 1_000,
                    reset_ns: None,
                }],
                ..FilterConfig::default()
            },
            telemetry: TelemetryModel {
                hop_latency_ns: latency,
                ..TelemetryModel::default()
            },
            ..node(2, Role::Transit, SourceEncap::UdpPort, 2)
                .config()
                .clone()
        })
        .unwrap()
    };
    // Queue reports only: nothing while the queue is fine, a Q report when it is congested.
    let mut calm = postcards(100, vec![ReportCategory::Queue]);
    let mut f = host1.clone();
    assert!(calm.process(&mut f, &tel(&calm)).reports.is_empty());
    let mut busy = postcards(5_000, vec![ReportCategory::Queue]);
    let out = busy.process(&mut f, &tel(&busy));
    let r = Report::parse(&out.reports[0]).unwrap();
    assert!(r.individual_reports().next().unwrap().unwrap().header.q);
    // Flow reports but no drop reports for this flow.
    let mut flows_only = postcards(100, vec![ReportCategory::Flow]);
    assert_eq!(
        flows_only.process(&mut f, &tel(&flows_only)).reports.len(),
        1
    );
    assert!(flows_only.drop_report(&f, 29, &tel(&flows_only)).is_none());
    let mut everything = postcards(100, vec![ReportCategory::Flow, ReportCategory::Drop]);
    assert!(everything.drop_report(&f, 29, &tel(&everything)).is_some());
}

/// A TCP packet that went round a loop (INT v2.1 §"INT over TCP/UDP", NPT=2: the original TCP
/// header after the stack): with the simulator's nine-word hops, eight hops put the TCP header
/// past the 256-byte copy. The sink's report still carries it, so the collector keys the flow
/// by its real ports, not by ports it cannot see (issue 29).
#[test]
fn a_report_of_a_long_stack_keeps_the_original_l4_header() {
    let make = |id, role| {
        Node::new(NodeConfig {
            instructions: 0xfd00,
            max_hops: 8,
            ..node_cfg(id, role, SourceEncap::UdpPort, 10 * id)
        })
        .unwrap()
    };
    let mut f = host1_packet(true, false, true);
    let mut s = make(1, Role::Source);
    s.process(&mut f, &tel(&s));
    for id in 2..=8 {
        let mut t = make(id, Role::Transit);
        t.process(&mut f, &tel(&t));
    }
    let mut sink = make(9, Role::Sink);
    let out = sink.process(&mut f, &tel(&sink));
    assert_eq!(out.reports.len(), 1);
    let r = Report::parse(&out.reports[0]).unwrap();
    let ir = r.individual_reports().next().unwrap().unwrap();
    let cfg = DetectConfig {
        int_udp_ports: vec![INT_PORT],
        truncated: true,
        ..DetectConfig::default()
    };
    let mut p = Packet::new(ir.inner);
    p.locate_copy(Start::Ethernet, &cfg, ir.header.f).unwrap();
    let (at, b) = p.int.unwrap();
    assert_eq!(b.stack(None).0.hop_count(), 8);
    assert!(at + b.len > 256, "the stack alone passes the truncation");
    let flow = p.flow.unwrap();
    assert_eq!((flow.proto, flow.src_port, flow.dst_port), (6, 40000, 443));
}
