//! SD-Fabric's report generation (shared/spec/sd-fabric-int.txt): INT-XD postcards for watched
//! flows, queue congestion reports for every packet in a congested queue — watched or not, so the
//! aggressor is named — within a quota, drop reports for watched flows once a second per 5-tuple,
//! `watchSubnets` (source or destination in a prefix), GTP-U matched on the user's headers, the
//! F bit only for watched packets, and the ONOS netcfg read as it is.

use std::net::IpAddr;

use etherparse::PacketBuilder;
use intscope_node::config::{DropReports, ReportFormat, TelemetryModel};
use intscope_node::filter::{FilterConfig, QueueThreshold};
use intscope_node::{Mode, Node, NodeConfig, Role, StaticTelemetry, WatchEntry};
use intscope_wire::report::{IndividualHeaderRepr, Report};

/// The watched victim's addresses (destination in a watched subnet) and the unwatched aggressor's.
const VICTIM: (&str, &str) = ("10.0.1.1", "10.0.3.3");
const AGGRESSOR: (&str, &str) = ("10.9.9.9", "10.8.8.8");
const VICTIM6: (&str, &str) = ("2001:db8:1::1", "2001:db8:3::3");
const AGGRESSOR6: (&str, &str) = ("2001:db8:9::9", "2001:db8:8::8");

fn subnets() -> Vec<ipnet::IpNet> {
    vec![
        "10.0.3.0/24".parse().unwrap(),
        "2001:db8:3::/48".parse().unwrap(),
    ]
}

/// The packet kinds a fabric carries; XD leaves them all as they are.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Udp4,
    Tcp4,
    Udp6,
    /// A mobile user's flow in GTP-U between two base-station-side addresses; the addresses given
    /// are the user's (inner) ones.
    GtpU,
    Vxlan,
    Geneve,
    Gre,
}

const KINDS: [Kind; 7] = [
    Kind::Udp4,
    Kind::Tcp4,
    Kind::Udp6,
    Kind::GtpU,
    Kind::Vxlan,
    Kind::Geneve,
    Kind::Gre,
];

fn v4(a: &str) -> [u8; 4] {
    match a.parse::<IpAddr>().unwrap() {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => panic!("{a}"),
    }
}

fn v6(a: &str) -> [u8; 16] {
    match a.parse::<IpAddr>().unwrap() {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(_) => panic!("{a}"),
    }
}

fn eth() -> etherparse::PacketBuilderStep<etherparse::Ethernet2Header> {
    PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
}

fn tenant_frame() -> Vec<u8> {
    let mut t = Vec::new();
    PacketBuilder::ethernet2([0xa, 0, 0, 0, 0, 1], [0xa, 0, 0, 0, 0, 2])
        .ipv4([192, 168, 7, 1], [192, 168, 7, 2], 64)
        .udp(7000, 8000)
        .write(&mut t, b"tenant payload")
        .unwrap();
    t
}

fn frame(kind: Kind, (src, dst): (&str, &str)) -> Vec<u8> {
    let mut f = Vec::new();
    let payload = b"some application bytes";
    match kind {
        Kind::Udp4 => eth()
            .ipv4(v4(src), v4(dst), 64)
            .udp(40000, 5001)
            .write(&mut f, payload)
            .unwrap(),
        Kind::Tcp4 => eth()
            .ipv4(v4(src), v4(dst), 64)
            .tcp(40000, 443, 1, 1000)
            .ack(1)
            .write(&mut f, payload)
            .unwrap(),
        Kind::Udp6 => eth()
            .ipv6(v6(src), v6(dst), 64)
            .udp(40000, 5001)
            .write(&mut f, payload)
            .unwrap(),
        Kind::GtpU => {
            let mut user = Vec::new();
            PacketBuilder::ipv4(v4(src), v4(dst), 63)
                .tcp(51000, 443, 1, 1000)
                .write(&mut user, payload)
                .unwrap();
            let mut gtpu = vec![0x30, 0xff, 0, 0, 0, 0, 0x12, 0x34]; // G-PDU, TEID 0x1234
            gtpu[2..4].copy_from_slice(&(user.len() as u16).to_be_bytes());
            gtpu.extend_from_slice(&user);
            eth()
                .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
                .udp(2152, 2152)
                .write(&mut f, &gtpu)
                .unwrap();
        }
        Kind::Vxlan => {
            let mut vx = vec![0x08, 0, 0, 0, 0, 0, 0x2a, 0];
            vx.extend_from_slice(&tenant_frame());
            eth()
                .ipv4(v4(src), v4(dst), 64)
                .udp(49152, 4789)
                .write(&mut f, &vx)
                .unwrap();
        }
        Kind::Geneve => {
            let mut g = vec![0x00, 0, 0x65, 0x58, 0, 0, 0x2a, 0];
            g.extend_from_slice(&tenant_frame());
            eth()
                .ipv4(v4(src), v4(dst), 64)
                .udp(49152, 6081)
                .write(&mut f, &g)
                .unwrap();
        }
        Kind::Gre => {
            let mut gre = vec![0, 0, 0x08, 0x00];
            PacketBuilder::ipv4([192, 168, 1, 1], [192, 168, 2, 2], 64)
                .udp(1000, 2000)
                .write(&mut gre, payload)
                .unwrap();
            eth()
                .ipv4(v4(src), v4(dst), 64)
                .write(&mut f, etherparse::IpNumber(47), &gre)
                .unwrap();
        }
    }
    f
}

fn addresses(kind: Kind) -> ((&'static str, &'static str), (&'static str, &'static str)) {
    if kind == Kind::Udp6 {
        (VICTIM6, AGGRESSOR6)
    } else {
        (VICTIM, AGGRESSOR)
    }
}

/// An SD-Fabric switch: INT-XD, `watchSubnets`, the smart filters, queue 0 reported from 2 µs
/// (quota reset below 500 ns).
fn switch(id: u32, role: Role, latency_ns: u32) -> Node {
    Node::new(NodeConfig {
        node_id: id,
        role,
        mode: Mode::Xd,
        watch_subnets: subnets(),
        filters: FilterConfig {
            enabled: true,
            queues: vec![QueueThreshold {
                queue_id: 0,
                trigger_ns: 2_000,
                reset_ns: Some(500),
            }],
            ..FilterConfig::default()
        },
        telemetry: TelemetryModel {
            hop_latency_ns: latency_ns,
            ..TelemetryModel::default()
        },
        ..NodeConfig::default()
    })
    .unwrap()
}

fn tel(n: &Node, time_ns: u64) -> StaticTelemetry {
    StaticTelemetry {
        model: n.config().telemetry.clone(),
        time_ns,
    }
}

/// The one individual report of a v2.0 datagram: its header and its inner packet.
fn v2(datagram: &[u8]) -> (IndividualHeaderRepr, Vec<u8>) {
    let r = Report::parse(datagram).unwrap();
    let mut it = r.individual_reports();
    let one = it.next().unwrap().unwrap();
    assert!(it.next().is_none(), "one report per datagram");
    (one.header, one.inner.to_vec())
}

/// The (F, Q) bits of a v2.0 report and whether it carries `packet`.
fn fq(datagram: &[u8], packet: &[u8]) -> (bool, bool) {
    let (h, inner) = v2(datagram);
    assert!(!h.d);
    assert_eq!(&inner[..packet.len()], packet, "the reported packet");
    (h.f, h.q)
}

/// Three SD-Fabric switches in a chain, switch 2's queue congested: every switch sends a postcard
/// for the watched victim (F); switch 2 also reports the unwatched aggressor (Q, not F) — the
/// flow causing the congestion is named — and nobody else reports it. Every packet kind arrives
/// at the far end unchanged.
#[test]
fn xd_chain_names_the_unwatched_aggressor_in_every_encapsulation() {
    for kind in KINDS {
        let (victim_at, aggressor_at) = addresses(kind);
        let (victim, aggressor) = (frame(kind, victim_at), frame(kind, aggressor_at));
        let mut nodes = [
            switch(1, Role::Source, 100),
            switch(2, Role::Transit, 5_000),
            switch(3, Role::Sink, 100),
        ];
        let mut reports: Vec<Vec<(bool, bool, bool)>> = vec![Vec::new(); 3];
        for (i, n) in nodes.iter_mut().enumerate() {
            for (is_victim, packet) in [(true, &victim), (false, &aggressor)] {
                let mut f = packet.clone();
                let out = n.process(&mut f, &tel(n, 1_000));
                assert_eq!(&f, packet, "{kind:?}: XD never changes the packet");
                assert!(out.forward && out.synthetic.is_empty());
                for r in &out.reports {
                    let (f, q) = fq(r, packet);
                    reports[i].push((is_victim, f, q));
                }
            }
        }
        assert_eq!(
            reports[0],
            vec![(true, true, false)],
            "{kind:?}: switch 1, the victim's postcard only"
        );
        assert_eq!(
            reports[1],
            vec![(true, true, true), (false, false, true)],
            "{kind:?}: switch 2, the victim's postcard with Q, and the aggressor's queue report"
        );
        assert_eq!(reports[2], reports[0], "{kind:?}: switch 3");
        assert_eq!(
            (nodes[1].stats.postcards, nodes[1].stats.queue_reports),
            (1, 1),
            "{kind:?}"
        );
    }
}

/// SD-Fabric: queue reports "up to the quota or until latency drops below triggerNs"; the quota
/// "is reset to its original non-zero value" when latency goes below `resetNs`.
#[test]
fn queue_reports_spend_a_quota_that_resets_below_reset_ns() {
    let aggressor = frame(Kind::Udp4, AGGRESSOR);
    let mut cfg = switch(2, Role::Transit, 0).config().clone();
    cfg.filters.queue_quota = 3;
    let mut n = Node::new(cfg).unwrap();
    let mut reports_at = |latency: u32| {
        let t = StaticTelemetry {
            model: TelemetryModel {
                hop_latency_ns: latency,
                ..TelemetryModel::default()
            },
            time_ns: 1,
        };
        let mut f = aggressor.clone();
        n.process(&mut f, &t).reports.len()
    };
    let burst: Vec<usize> = (0..5).map(|_| reports_at(5_000)).collect();
    assert_eq!(
        burst,
        vec![1, 1, 1, 0, 0],
        "a quota of 3 per congestion event"
    );
    assert_eq!(reports_at(1_000), 0, "below the trigger: no report");
    assert_eq!(reports_at(5_000), 0, "above resetNs: the quota stays spent");
    assert_eq!(
        reports_at(400),
        0,
        "below resetNs: no report, the quota refills"
    );
    assert_eq!(reports_at(2_000), 1, "at the trigger again");
    // Queue 0 only: a packet in queue 1 is never queue-reported.
    let mut q1 = Node::new(NodeConfig {
        telemetry: TelemetryModel {
            queue_id: 1,
            hop_latency_ns: 50_000,
            ..TelemetryModel::default()
        },
        ..n.config().clone()
    })
    .unwrap();
    let mut f = aggressor.clone();
    assert!(q1.process(&mut f, &tel(&q1, 1)).reports.is_empty());
}

/// Queue thresholds work without the flow filters, and report traffic itself is never
/// queue-reported.
#[test]
fn queue_reports_without_flow_filters_and_never_about_reports() {
    let mut cfg = switch(2, Role::Transit, 5_000).config().clone();
    cfg.filters.enabled = false;
    let mut n = Node::new(cfg).unwrap();
    let mut f = frame(Kind::Tcp4, AGGRESSOR);
    assert_eq!(n.process(&mut f, &tel(&n, 1)).reports.len(), 1);
    let mut report = Vec::new();
    eth()
        .ipv4([192, 0, 2, 1], [10, 0, 3, 100], 64)
        .udp(50000, 32766)
        .write(&mut report, &[0u8; 32])
        .unwrap();
    assert!(n.process(&mut report, &tel(&n, 2)).reports.is_empty());
    assert_eq!(n.stats.queue_reports, 1);
}

/// `watchSubnets`: "All traffic with source or destination IPv4 address included in one of these
/// prefixes will be reported" — one prefix, either address.
#[test]
fn watch_subnets_match_source_or_destination() {
    let postcards = |src: &str, dst: &str| {
        let mut n = switch(1, Role::Transit, 100);
        let mut f = frame(Kind::Udp4, (src, dst));
        n.process(&mut f, &tel(&n, 1)).reports.len()
    };
    assert_eq!(
        postcards("10.0.1.1", "10.0.3.3"),
        1,
        "destination in the prefix"
    );
    assert_eq!(postcards("10.0.3.3", "10.0.1.1"), 1, "source in the prefix");
    assert_eq!(postcards("10.0.1.1", "10.0.4.4"), 0, "neither");
    // An empty list: nothing watched, no flow reports.
    let mut none = Node::new(NodeConfig {
        watch_subnets: Vec::new(),
        ..switch(1, Role::Transit, 100).config().clone()
    })
    .unwrap();
    let mut f = frame(Kind::Udp4, VICTIM);
    assert!(none.process(&mut f, &tel(&none, 1)).reports.is_empty());
}

/// GTP-U: "the watchlist is always applied to the inner headers. Hence to monitor UE traffic,
/// you should provide the UE subnet."
#[test]
fn gtpu_is_watched_on_the_users_headers() {
    let mut n = switch(1, Role::Transit, 100);
    let mut user_watched = frame(Kind::GtpU, VICTIM);
    assert_eq!(n.process(&mut user_watched, &tel(&n, 1)).reports.len(), 1);
    // The tunnel endpoints in a watched subnet do not make the user's flow watched.
    let mut endpoints = Node::new(NodeConfig {
        watch_subnets: vec!["192.0.2.0/24".parse().unwrap()],
        ..n.config().clone()
    })
    .unwrap();
    let mut f = frame(Kind::GtpU, AGGRESSOR);
    assert!(
        endpoints
            .process(&mut f, &tel(&endpoints, 1))
            .reports
            .is_empty()
    );
}

fn drop_flags(datagram: &[u8]) -> (bool, bool) {
    let (h, _) = v2(datagram);
    (h.d, h.f)
}

/// Drop reports: for watched flows only (none with an empty watchlist), or for every drop when
/// configured; one per second per 5-tuple whatever the reason.
#[test]
fn drop_reports_for_watched_flows_once_a_second_per_five_tuple() {
    let victim = frame(Kind::Udp4, VICTIM);
    let aggressor = frame(Kind::Udp4, AGGRESSOR);
    let mut n = switch(2, Role::Transit, 100);
    let t = |ns| tel(&n, ns);
    let (t0, t1, t2) = (t(0), t(1_000), t(1_000_000_001));
    let first = n.drop_report(&victim, 29, &t0).expect("a watched drop");
    assert_eq!(drop_flags(&first), (true, true), "D and F");
    assert!(
        n.drop_report(&victim, 71, &t1).is_none(),
        "another reason, same 5-tuple, same second"
    );
    assert!(n.drop_report(&victim, 71, &t2).is_some(), "a second later");
    assert!(n.drop_report(&aggressor, 29, &t0).is_none(), "not watched");
    assert_eq!((n.stats.filtered, n.stats.unwatched_drops), (1, 1));

    // An empty watchlist: SD-Fabric sends no drop reports at all.
    let mut empty = Node::new(NodeConfig {
        watch_subnets: Vec::new(),
        ..n.config().clone()
    })
    .unwrap();
    assert!(empty.drop_report(&victim, 29, &t0).is_none());

    // Configured for every drop: the unwatched one is reported, without F.
    let mut all = Node::new(NodeConfig {
        drop_reports: DropReports::All,
        ..empty.config().clone()
    })
    .unwrap();
    let r = all.drop_report(&aggressor, 29, &t0).expect("every drop");
    assert_eq!(drop_flags(&r), (true, false));
}

/// A packet carrying INT-MD was watched at its source: its drop is reported even where the
/// dropping node watches nothing, with F set.
#[test]
fn int_packets_count_as_watched_for_drops() {
    let mut source = Node::new(NodeConfig {
        role: Role::Source,
        watchlist: vec![WatchEntry::default()],
        ..NodeConfig::default()
    })
    .unwrap();
    let mut f = frame(Kind::Udp4, AGGRESSOR);
    source.process(&mut f, &tel(&source, 0));
    assert_eq!(source.stats.inserted, 1);
    let mut transit = Node::new(NodeConfig::default()).unwrap();
    let r = transit
        .drop_report(&f, 71, &tel(&transit, 0))
        .expect("an INT packet's drop");
    assert_eq!(drop_flags(&r), (true, true));
}

/// The F bit: set on an INT-MD sink's report (the source watched the flow), clear on a queue
/// report of an unwatched packet (above), and on a transit's queue report of an INT-MD packet
/// set again.
#[test]
fn f_bit_for_int_md_reports() {
    let mut source = Node::new(NodeConfig {
        role: Role::Source,
        watchlist: vec![WatchEntry::default()],
        ..NodeConfig::default()
    })
    .unwrap();
    let mut transit = Node::new(NodeConfig {
        mode: Mode::Md,
        ..switch(2, Role::Transit, 5_000).config().clone()
    })
    .unwrap();
    let mut sink = Node::new(NodeConfig {
        node_id: 3,
        role: Role::Sink,
        ..NodeConfig::default()
    })
    .unwrap();
    let host = frame(Kind::Udp4, AGGRESSOR);
    let mut f = host.clone();
    source.process(&mut f, &tel(&source, 0));
    let q = transit.process(&mut f, &tel(&transit, 0)).reports;
    assert_eq!(q.len(), 1, "a queue report at the congested transit hop");
    let (h, _) = v2(&q[0]);
    assert_eq!((h.f, h.q), (true, true));
    let r = sink.process(&mut f, &tel(&sink, 0)).reports;
    assert_eq!(f, host, "restored");
    let (h, _) = v2(&r[0]);
    assert_eq!((h.f, h.q, h.d), (true, false, false));
}

/// The ONOS netcfg of SD-Fabric's documentation, read unchanged: v0.5 postcards for the watched
/// subnet, v0.5 queue reports (Q, no F) for the aggressor in a congested queue 0.
#[test]
fn a_netcfg_runs_as_sd_fabric_would() {
    let netcfg = r#"{
      "apps": {
        "org.stratumproject.fabric.tna.inbandtelemetry": {
          "report": {
            "collectorIp": "10.32.11.2",
            "collectorPort": 32766,
            "minFlowHopLatencyChangeNs": 256,
            "watchSubnets": ["10.0.3.0/24"],
            "queueReportLatencyThresholds": {
              "0": {"triggerNs": 2000, "resetNs": 500},
              "2": {"triggerNs": 1000, "resetNs": 400}
            }
          }
        }
      }
    }"#;
    let base = NodeConfig {
        node_id: 2,
        telemetry: TelemetryModel {
            hop_latency_ns: 3_000,
            ..TelemetryModel::default()
        },
        ..NodeConfig::default()
    };
    let imported = intscope_node::netcfg::import(netcfg, base).unwrap();
    assert_eq!(imported.config.report_format, ReportFormat::V05);
    let mut n = Node::new(imported.config).unwrap();
    for (packet, flow_report) in [
        (frame(Kind::Udp4, VICTIM), true),
        (frame(Kind::Udp4, AGGRESSOR), false),
    ] {
        let mut f = packet.clone();
        let out = n.process(&mut f, &tel(&n, 5));
        assert_eq!(out.reports.len(), 1);
        let Report::V05 {
            fixed,
            switch: Some(sw),
            inner,
            ..
        } = Report::parse(&out.reports[0]).unwrap()
        else {
            panic!("a v0.5 report with a switch-local header");
        };
        assert_eq!((fixed.nproto, fixed.d, fixed.q), (2, false, true));
        assert_eq!(fixed.f, flow_report, "F is the flow report type in v0.5");
        assert_eq!(sw.switch_id, 2);
        assert_eq!(inner, &packet[..]);
    }
}
