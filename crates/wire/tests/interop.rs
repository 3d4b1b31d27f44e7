//! Bytes written by other implementations (`../shared/interop/`, see its INDEX.md) decode without
//! error to the values INDEX.md gives; their deviations from the specs come out as warnings.
//!
//! The corpus is read in place (never copied into this repository). Its location: the
//! `INTSCOPE_SHARED` environment variable, else `../shared` beside the checkout. Without it each
//! test says it is skipped (a plain clone has no corpus); `INTSCOPE_REQUIRE_INTEROP=1`, which CI
//! sets, makes that a failure.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{interop_dir, unhex};
use intscope_wire::domain::Registry;
use intscope_wire::int::{AnyShim, Encap, IntBlock, IntHeader};
use intscope_wire::locate::{DetectConfig, DscpMatch, Packet, Start};
use intscope_wire::metadata::HopMetadata;
use intscope_wire::report::{InType, Report, V05FixedRepr};
use intscope_wire::shim::Shim;
use intscope_wire::{Warning, Warnings};

/// `## name` → hex bytes, from a vectors-*.txt file.
fn vectors(dir: &Path, file: &str) -> HashMap<String, Vec<u8>> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let mut out = HashMap::new();
    let mut name = None;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("## ") {
            name = Some(n.split_whitespace().next().unwrap().to_string());
        } else if !line.starts_with('#')
            && !line.trim().is_empty()
            && line.chars().all(|c| c.is_ascii_hexdigit())
        {
            out.insert(name.clone().expect("hex before a name"), unhex(line));
        }
    }
    out
}

fn pcap_frames(dir: &Path, file: &str) -> Vec<Vec<u8>> {
    let path = dir.join(file);
    let mut out = Vec::new();
    if let Ok(mut r) = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()) {
        while let Some(p) = r.next_packet() {
            out.push(p.unwrap().data.into_owned());
        }
        return out;
    }
    let mut r = pcap_file::pcapng::PcapNgReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    while let Some(b) = r.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(p) = b.unwrap() {
            out.push(p.data.into_owned());
        }
    }
    out
}

fn report_cfg(ports: &[u16]) -> DetectConfig {
    DetectConfig {
        report_ports: ports.to_vec(),
        verify_checksums: true,
        ..DetectConfig::default()
    }
}

fn udp_payload<'a>(frame: &'a [u8], cfg: &DetectConfig) -> &'a [u8] {
    let p = Packet::parse(frame, Start::Ethernet, cfg).unwrap();
    &frame[p.l4.unwrap().offset + 8..]
}

fn hops<'a>(b: &IntBlock<'a>, reg: Option<&Registry>) -> Vec<HopMetadata<'a>> {
    let (stack, _) = b.stack(reg);
    stack.map(|h| h.unwrap().to_metadata()).collect()
}

fn warned(w: Warnings, x: Warning) -> bool {
    w.has(x)
}

#[test]
fn onos_fabric_p4_report_v05_capture() {
    let Some(dir) = interop_dir("onos_fabric_p4_report_v05_capture") else {
        return;
    };
    let frames = pcap_frames(
        &dir,
        "serkantul_prometheus_int_exporter__src_test_resources_int_report.pcap",
    );
    // ONOS fabric.p4 marks INT with DSCP 1: the operator's marking, configured.
    let cfg = DetectConfig {
        dscp: Some(DscpMatch {
            value: 1,
            mask: 0x3f,
        }),
        ..report_cfg(&[1234])
    };
    let r = Report::parse(udp_payload(&frames[0], &cfg)).unwrap();
    let Report::V05 {
        fixed,
        switch,
        inner,
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(
        fixed,
        V05FixedRepr {
            version: 0,
            nproto: 0,
            d: false,
            q: false,
            f: true,
            reserved: 0,
            hw_id: 1,
            sequence: 0,
            ingress_ts: 0,
        }
    );
    assert!(switch.is_none());
    let p = Packet::parse(inner, Start::Ethernet, &cfg).unwrap();
    assert_eq!(
        p.ip.unwrap().dscp,
        1,
        "ONOS fabric.p4 marks INT with DSCP 1"
    );
    let (_, b) = p.int.unwrap();
    let IntHeader::V05(h, tail) = b.header else {
        panic!()
    };
    assert_eq!(
        (
            h.ins_cnt,
            h.max_hop_count,
            h.total_hop_count,
            h.instructions
        ),
        (1, 32, 3, 0x8000)
    );
    assert_eq!((tail.next_proto, tail.dest_port, tail.dscp), (6, 1234, 0));
    assert!(matches!(b.shim, AnyShim::Legacy(s) if s.int_type == 1 && s.length == 7));
    assert_eq!(
        hops(&b, None)
            .iter()
            .map(|h| h.node_id.unwrap())
            .collect::<Vec<_>>(),
        vec![2, 3, 1]
    );
    let f = p.flow.unwrap();
    assert_eq!((f.proto, f.src_port, f.dst_port), (6, 63804, 1234));
}

#[test]
fn bmv2_int_mx_captures() {
    let Some(dir) = interop_dir("bmv2_int_mx_captures") else {
        return;
    };
    let cfg = DetectConfig {
        verify_checksums: true,
        ..DetectConfig::default()
    };
    for (file, index) in [
        ("laofan13_P4-INT__int-mx_pcap_s2-eth1_in.pcap", 17),
        ("laofan13_P4-INT__int-mx_pcap_s3-eth3_in.pcap", 8),
    ] {
        let frames = pcap_frames(&dir, file);
        let p = Packet::parse(&frames[index], Start::Ethernet, &cfg).unwrap();
        assert_eq!(p.ip.unwrap().dscp, 0x17);
        let (_, b) = p.int.unwrap();
        assert_eq!(b.encap, Encap::Udp);
        let AnyShim::V2(Shim::TcpUdp(s)) = b.shim else {
            panic!()
        };
        assert_eq!(
            (s.int_type, s.npt, s.length, s.dscp()),
            (3, 0, 3, 0),
            "length excludes the shim (2.x)"
        );
        let IntHeader::Mx(h) = b.header else { panic!() };
        assert_eq!(
            (
                h.version,
                h.d,
                h.instructions,
                h.ds_id,
                h.ds_instruction,
                h.ds_flags
            ),
            (2, false, 0xff00, 0, 0, 0)
        );
        assert!(
            warned(p.warnings, Warning::BadL4Checksum),
            "BMv2 leaves the UDP checksum stale"
        );
    }
    // Every other frame of the captures decodes without error and carries no INT.
    for file in [
        "laofan13_P4-INT__int-mx_pcap_s1-eth1_in.pcap",
        "laofan13_P4-INT__int-mx_pcap_s3-eth2_in.pcap",
        "laofan13_P4-INT__int-mx_ipv4-frames-only.pcap",
    ] {
        for f in pcap_frames(&dir, file) {
            let p = Packet::parse(&f, Start::Ethernet, &cfg).unwrap();
            if p.ip.is_some_and(|ip| ip.dscp == 0x17) {
                assert!(p.int.is_some());
            } else {
                assert!(p.int.is_none());
            }
        }
    }
}

#[test]
fn onos_report_v05_vectors() {
    let Some(dir) = interop_dir("onos_report_v05_vectors") else {
        return;
    };
    let v = vectors(
        &dir,
        "vectors-hardcoded-onos-monitoring-prometheus_int_exporter.txt",
    );
    let Report::V05 {
        fixed,
        switch,
        warnings,
        ..
    } = Report::parse(&v["bytePacketReport"]).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        fixed,
        V05FixedRepr {
            version: 1,
            nproto: 0,
            d: true,
            q: true,
            f: true,
            reserved: 0,
            hw_id: 1,
            sequence: 0xab,
            ingress_ts: 0xcd,
        }
    );
    assert!(switch.is_none());
    assert!(warned(warnings, Warning::V05LayoutVersion1));
    let Report::V05 { switch, .. } = Report::parse(&v["bytePacketDropReport"]).unwrap() else {
        panic!()
    };
    let s = switch.unwrap();
    assert_eq!(
        (
            s.switch_id,
            s.ingress_port,
            s.egress_port,
            s.queue_id,
            s.drop_reason,
            s.pad
        ),
        (1, 1, 1, 1, Some(1), 0)
    );
    let Report::V05 { switch, .. } = Report::parse(&v["bytePacketSwitchLocalReport"]).unwrap()
    else {
        panic!()
    };
    let s = switch.unwrap();
    assert_eq!(
        (
            s.switch_id,
            s.ingress_port,
            s.egress_port,
            s.queue_id,
            s.queue_occupancy,
            s.egress_ts
        ),
        (1, 1, 1, 1, Some(0xab), Some(0xcd))
    );
    // INT v0.5 block: its shim length (8) does not match the 6-word content.
    let b = IntBlock::parse(&v["bytePacketINT"], Encap::Tcp).unwrap();
    let IntHeader::V05(h, tail) = b.header else {
        panic!()
    };
    assert_eq!(
        (
            h.version,
            h.ins_cnt,
            h.max_hop_count,
            h.total_hop_count,
            h.instructions
        ),
        (0, 2, 16, 1, 0x9000)
    );
    assert_eq!((tail.next_proto, tail.dest_port, tail.dscp), (6, 0x16, 0));
    assert!(warned(b.warnings, Warning::LegacyShimLength));
    let hop = hops(&b, None)[0];
    assert_eq!(
        (hop.node_id, hop.queue_id, hop.queue_occupancy),
        (Some(1), Some(0), Some(1))
    );
}

#[test]
fn fabric_tna_report_v05() {
    let Some(dir) = interop_dir("fabric_tna_report_v05") else {
        return;
    };
    let v = vectors(&dir, "vectors-rendered-fabric-tna.txt");
    let cfg = report_cfg(&[32766]);
    let Report::V05 {
        fixed,
        switch,
        inner,
        warnings,
    } = Report::parse(udp_payload(&v["fabric_tna_local_flow_report_v05"], &cfg)).unwrap()
    else {
        panic!()
    };
    assert!(warnings.is_empty());
    assert_eq!(
        fixed,
        V05FixedRepr {
            version: 0,
            nproto: 2,
            d: false,
            q: false,
            f: true,
            reserved: 0,
            hw_id: 0,
            sequence: 7,
            ingress_ts: 0x1122_3344,
        }
    );
    let s = switch.unwrap();
    assert_eq!(
        (
            s.switch_id,
            s.ingress_port,
            s.egress_port,
            s.queue_id,
            s.queue_occupancy,
            s.egress_ts
        ),
        (1, 1, 2, 0, Some(0x123), Some(0x1122_3355))
    );
    assert_eq!(
        Packet::parse(inner, Start::Ethernet, &cfg)
            .unwrap()
            .flow
            .unwrap()
            .proto,
        17
    );
    let Report::V05 { fixed, switch, .. } =
        Report::parse(udp_payload(&v["fabric_tna_drop_report_v05"], &cfg)).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (fixed.nproto, fixed.d, fixed.f, fixed.sequence),
        (1, true, false, 8)
    );
    let s = switch.unwrap();
    assert_eq!(
        (s.switch_id, s.ingress_port, s.egress_port, s.drop_reason),
        (1, 1, 2, Some(80))
    );
    assert_eq!(
        intscope_wire::report::drop_reason_name(80),
        Some("acl-deny")
    );
}

#[test]
fn amlight_report_v10_int_v10() {
    let Some(dir) = interop_dir("amlight_report_v10_int_v10") else {
        return;
    };
    let v = vectors(&dir, "vectors-rendered-amlight.txt");
    let cfg = report_cfg(&[5900]);
    let r = Report::parse(udp_payload(
        &v["amlight_report_v10_int_v10_udp_dscp_vlan"],
        &cfg,
    ))
    .unwrap();
    let Report::V1 {
        header: h,
        inner,
        warnings,
    } = r
    else {
        panic!("{r:?}")
    };
    assert!(warnings.is_empty());
    assert_eq!(
        (
            h.version,
            h.len,
            h.nproto,
            h.rep_md_bits,
            h.d,
            h.q,
            h.f,
            h.hw_id
        ),
        (1, 4, 0, 0, false, false, false, 0)
    );
    assert_eq!(
        (h.switch_id, h.sequence, h.ingress_ts),
        (0xFB65_D675, 1_408_972_298, 980_327_565)
    );
    let p = Packet::parse(inner, Start::Ethernet, &cfg).unwrap();
    assert_eq!((p.vlan_count, p.vlans[0]), (1, 42));
    let (_, b) = p.int.unwrap();
    assert!(matches!(b.shim, AnyShim::Legacy(s) if s.length == 9 && s.dscp() == 2));
    let IntHeader::V1(m) = b.header else { panic!() };
    assert_eq!(
        (m.version, m.hop_ml, m.remaining_hop_count, m.instructions),
        (1, 6, 9, 0xfc00)
    );
    let hop = hops(&b, None)[0];
    assert_eq!(
        (
            hop.node_id,
            hop.l1_ingress_if,
            hop.l1_egress_if,
            hop.hop_latency
        ),
        (Some(0xFB65_D675), Some(23), Some(11), None)
    );
    assert_eq!(
        (
            hop.queue_id,
            hop.queue_occupancy,
            hop.ingress_ts,
            hop.egress_ts
        ),
        (Some(2), Some(111), Some(980_325_604), Some(980_327_060))
    );
}

#[test]
fn geant_reports_v10_and_v05() {
    let Some(dir) = interop_dir("geant_reports_v10_and_v05") else {
        return;
    };
    let v = vectors(&dir, "vectors-rendered-geant-int-collector.txt");
    // The generator marks nothing (inner UDP 5000 -> 5000, DSCP 0) and leaves a v1.0 header at
    // version 0 and a v0.5 shim length at 0: no reading without a marking is sure of those
    // bytes, so the operator names the INT port.
    let cfg = DetectConfig {
        int_udp_ports: vec![5000],
        ..report_cfg(&[8090, 8086])
    };
    let r = Report::parse(udp_payload(
        &v["geant_collector_report_v10_int_v10_3hops"],
        &cfg,
    ))
    .unwrap();
    let Report::V1 {
        header: h,
        inner,
        warnings,
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(
        (h.version, h.len, h.f, h.switch_id, h.sequence, h.ingress_ts),
        (1, 1, true, 1, 5, 1_524_138_290)
    );
    assert!(warned(warnings, Warning::V1ReportLength));
    let p = Packet::parse(inner, Start::Ethernet, &cfg).unwrap();
    let (_, b) = p.int.unwrap();
    assert!(matches!(b.shim, AnyShim::Legacy(s) if s.length == 27));
    let IntHeader::V1(m) = b.header else { panic!() };
    assert_eq!(
        (m.version, m.hop_ml, m.remaining_hop_count, m.instructions),
        (0, 8, 3, 0xff00)
    );
    assert!(
        warned(b.warnings, Warning::V1HeaderVersion0) && !warned(p.warnings, Warning::UnmarkedInt)
    );
    assert_eq!(hops(&b, None).len(), 3);

    let r = Report::parse(udp_payload(
        &v["geant_collector_report_v05_int_v05_tail_2hops"],
        &cfg,
    ))
    .unwrap();
    let Report::V05 {
        fixed,
        inner,
        warnings,
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(
        (
            fixed.version,
            fixed.nproto,
            fixed.f,
            fixed.sequence,
            fixed.ingress_ts
        ),
        (1, 0, true, 0, 1_524_138_290)
    );
    assert!(warned(warnings, Warning::V05LayoutVersion1));
    let p = Packet::parse(inner, Start::Ethernet, &cfg).unwrap();
    let (_, b) = p.int.unwrap();
    let IntHeader::V05(h, tail) = b.header else {
        panic!()
    };
    assert_eq!(
        (
            h.ins_cnt,
            h.max_hop_count,
            h.total_hop_count,
            h.instructions
        ),
        (8, 8, 2, 0xff00)
    );
    assert_eq!(b.body.len(), 16 * 4);
    assert_eq!((tail.next_proto, tail.dest_port, tail.dscp), (0, 0, 14));
    assert!(
        warned(b.warnings, Warning::LegacyShimLength),
        "the generator leaves the shim length at 0"
    );
}

#[test]
fn p4_applications_int_v10() {
    let Some(dir) = interop_dir("p4_applications_int_v10") else {
        return;
    };
    let v = vectors(&dir, "vectors-rendered-p4-applications.txt");
    let p = Packet::parse(
        &v["p4apps_int_v10_udp_dscp17_2hops"],
        Start::Ethernet,
        &DetectConfig::default(),
    )
    .unwrap();
    let (_, b) = p.int.unwrap();
    assert_eq!(
        b.encap,
        Encap::Udp,
        "DSCP marking wins over the VXLAN-GPE port"
    );
    let IntHeader::V1(m) = b.header else { panic!() };
    assert_eq!(
        (m.version, m.hop_ml, m.remaining_hop_count, m.instructions),
        (1, 1, 62, 0x8000)
    );
    assert_eq!(
        hops(&b, None)
            .iter()
            .map(|h| h.node_id.unwrap())
            .collect::<Vec<_>>(),
        vec![2, 1]
    );
}

#[test]
fn scapy_int_21_layers() {
    let Some(dir) = interop_dir("scapy_int_21_layers") else {
        return;
    };
    let v = vectors(&dir, "vectors-rendered-scapy-pr4230.txt");
    let cfg = DetectConfig {
        int_udp_ports: vec![0x4568],
        gre_proto: Some(0x4569),
        verify_checksums: true,
        ..DetectConfig::default()
    };
    let p = Packet::parse(&v["scapy_pr4230_intmd_udp_npt1"], Start::Ethernet, &cfg).unwrap();
    let (_, b) = p.int.unwrap();
    let IntHeader::Md(h) = b.header else { panic!() };
    assert_eq!(
        (h.hop_ml, h.remaining_hop_count, h.instructions),
        (2, 6, 0xc000)
    );
    assert_eq!(p.flow.unwrap().dst_port, 5001);
    assert_eq!(hops(&b, None).len(), 2);

    let p = Packet::parse(&v["scapy_pr4230_intmx_tcp_npt0"], Start::Ethernet, &cfg).unwrap();
    let (_, b) = p.int.unwrap();
    assert!(
        matches!(b.header, IntHeader::Mx(h) if h.instructions == 0xff00) && b.encap == Encap::Tcp
    );

    let p = Packet::parse(&v["scapy_pr4230_intmd_gre"], Start::Ethernet, &cfg).unwrap();
    let (_, b) = p.int.unwrap();
    assert!(
        matches!(b.shim, AnyShim::V2(Shim::Gre(s)) if s.g && s.length == 4 && s.next_protocol == 0x0800)
    );
    assert_eq!(hops(&b, None)[0].node_id, Some(9));
    assert!(p.inner_flow.is_some());

    let p = Packet::parse(&v["scapy_pr4230_intmx_vxlan_gpe"], Start::Ethernet, &cfg).unwrap();
    let (_, b) = p.int.unwrap();
    assert!(
        matches!(b.shim, AnyShim::V2(Shim::Gpe(s)) if !s.g && s.length == 3 && s.next_protocol == 3)
    );
    assert!(matches!(b.header, IntHeader::Mx(h) if h.instructions == 0x8000));
}

#[test]
fn rendered_pcap_matches_vectors() {
    let Some(dir) = interop_dir("rendered_pcap_matches_vectors") else {
        return;
    };
    // The pcap holds the same ten rendered frames as the vector files; each decodes cleanly.
    let frames = pcap_frames(&dir, "rendered__third-party-scapy-classes.pcap");
    assert_eq!(frames.len(), 10);
    let cfg = DetectConfig {
        int_udp_ports: vec![0x4568],
        gre_proto: Some(0x4569),
        report_ports: vec![32766, 5900, 8090, 8086],
        ..DetectConfig::default()
    };
    for (i, f) in frames.iter().enumerate() {
        let p = Packet::parse(f, Start::Ethernet, &cfg)
            .unwrap_or_else(|e| panic!("frame {}: {e}", i + 1));
        let is_report =
            p.l4.is_some_and(|l4| cfg.report_ports.contains(&l4.dst_port));
        if is_report {
            Report::parse(&f[p.l4.unwrap().offset + 8..]).unwrap();
        } else {
            assert!(p.int.is_some(), "frame {} carries INT", i + 1);
        }
    }
}

fn cablelabs_registry() -> Registry {
    Registry::from_toml(include_str!("../../../examples/domains.toml")).unwrap()
}

#[test]
fn cablelabs_report_v20_variant() {
    let Some(dir) = interop_dir("cablelabs_report_v20_variant") else {
        return;
    };
    let v = vectors(&dir, "vectors-hardcoded-cablelabs-siddhi-map-p4-trpt.txt");
    let reg = cablelabs_registry();
    // Report copies (`truncated`): CableLabs' IPv6 copies name TCP before an inserted UDP header.
    let cfg = DetectConfig {
        int_udp_ports: vec![555],
        truncated: true,
        ..DetectConfig::default()
    };

    let r = Report::parse(&v["DROP_RPT"]).unwrap();
    let Report::V2 { group, .. } = r else {
        panic!()
    };
    assert_eq!(
        (group.version, group.hw_id, group.sequence, group.node_id),
        (2, 0, 0, 123)
    );
    let ir = r.individual_reports().next().unwrap().unwrap();
    assert_eq!(
        (
            ir.header.rep_type,
            ir.header.in_type,
            ir.header.report_length,
            ir.header.md_length
        ),
        (0, 2, 9, 7)
    );
    assert_eq!(ir.main.unwrap().ds_id, 21587);
    assert!(warned(ir.warnings, Warning::MainContentsInInnerOnly));

    for (name, hw_id, seq, in_type, rep_len, l4) in [
        ("UDP4_2HOPS", 13, 69696, 4, 10, 17),
        ("TCP4_2HOPS", 0, 64, 4, 10, 6),
        ("UDP6_2HOPS", 0, 64, 5, 15, 17),
        ("TCP6_2HOPS", 0, 64, 5, 15, 6),
    ] {
        let r = Report::parse(&v[name]).unwrap();
        let Report::V2 { group, .. } = r else {
            panic!()
        };
        assert_eq!(
            (group.hw_id, group.sequence, group.node_id),
            (hw_id, seq, 234),
            "{name}: spec 22-bit sequence"
        );
        let irs: Vec<_> = r.individual_reports().map(|x| x.unwrap()).collect();
        assert_eq!(irs.len(), 1, "{name}");
        let ir = irs[0];
        assert_eq!(
            (
                ir.header.rep_type,
                ir.header.in_type,
                ir.header.report_length,
                ir.header.md_length
            ),
            (0, in_type, rep_len, 8),
            "{name}"
        );
        assert_eq!(ir.main.unwrap().ds_id, 21587);
        assert_eq!(
            ir.inner_type,
            InType::Ethernet,
            "{name}: inner starts with Ethernet despite InType"
        );
        if name == "UDP4_2HOPS" {
            let m = ir.main.unwrap();
            assert_eq!(
                (m.rep_md_bits, m.ds_md_bits, m.ds_md_status),
                (0x55aa, 0x55aa, 0xaa55)
            );
            assert!(ir.header.q && ir.header.i && !ir.header.d && !ir.header.f);
        }
        let p = Packet::parse(ir.inner, Start::Ethernet, &cfg)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (_, b) = p.int.unwrap_or_else(|| panic!("{name}: no INT"));
        assert_eq!(b.encap, Encap::UdpNew);
        assert!(warned(b.warnings, Warning::ShimLengthCountsShim), "{name}");
        let IntHeader::Md(h) = b.header else { panic!() };
        assert_eq!(
            (
                h.hop_ml,
                h.remaining_hop_count,
                h.instructions,
                h.ds_id,
                h.ds_instruction,
                h.ds_flags
            ),
            (1, 9, 0x8000, 0x5453, 0x8000, 0x4000)
        );
        let hs = hops(&b, Some(&reg));
        assert_eq!(
            hs.iter().map(|h| h.node_id.unwrap()).collect::<Vec<_>>(),
            vec![234, 123],
            "{name}"
        );
        assert_eq!(
            hs[1].domain,
            &[0, 0, 0, 0, 1, 1, 0, 0],
            "{name}: originating MAC 00:00:00:00:01:01"
        );
        let f = p.flow.unwrap();
        assert_eq!(
            (f.proto, f.src_port, f.dst_port),
            (l4, 6680, 5792),
            "{name}: original flow"
        );
    }
}

/// Without the corpus (a plain clone) a test says it is skipped and passes; with
/// `INTSCOPE_REQUIRE_INTEROP=1` (CI) the same absence fails it. Runs this test binary again on one
/// corpus test with `INTSCOPE_SHARED` pointing at an empty folder.
#[test]
fn missing_corpus_skips_unless_required() {
    let empty = tempfile::Builder::new()
        .prefix("intscope-no-interop-")
        .tempdir()
        .unwrap();
    let run = |require: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "onos_fabric_p4_report_v05_capture",
            "--nocapture",
        ])
        .env("INTSCOPE_SHARED", empty.path())
        .env_remove("INTSCOPE_REQUIRE_INTEROP");
        if let Some(v) = require {
            cmd.env("INTSCOPE_REQUIRE_INTEROP", v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = run(None);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("onos_fabric_p4_report_v05_capture: skipped: interop corpus not found"),
        "{stderr}"
    );
    let (ok, stderr) = run(Some("1"));
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("INTSCOPE_REQUIRE_INTEROP is set"),
        "{stderr}"
    );
}
