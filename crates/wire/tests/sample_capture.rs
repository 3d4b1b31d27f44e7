//! `examples/sample.pcap`, the capture the README's main command decodes, is built here from the
//! spec examples by this crate's own emitters (no third-party bytes). The test fails if the
//! committed file is stale; `INTSCOPE_REGENERATE=1 cargo test -p intscope-wire --test
//! sample_capture` rewrites it.

mod common;

use common::*;
use intscope_wire::encap::{GeneveRepr, GreRepr, VxlanGpeRepr};
use intscope_wire::report::{
    GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, V05FixedRepr, V05SwitchRepr,
};
use intscope_wire::shim::{GeneveOptionRepr, GpeShimRepr, GreShimRepr, Shim, TcpUdpShimRepr};
use intscope_wire::tunnel::{GenevePacket, GrePacket, VxlanPacket};

const INT_PORT: u16 = 17768;

fn shim(t: u8, npt: u8, content: u16) -> Shim {
    Shim::TcpUdp(TcpUdpShimRepr {
        int_type: t,
        npt,
        reserved: 0,
        length: 0,
        content,
    })
}

fn inner_eth() -> Vec<u8> {
    [
        vec![0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 8, 0x08, 0x00],
        ipv4(6, 0, &tcp(7, 8, b"in")),
    ]
    .concat()
}

/// Ethernet + IPv4 + UDP to the report port, carrying `payload`.
fn report_frame(payload: &[u8]) -> Vec<u8> {
    eth_ipv4(17, 0, &udp(4000, 32766, payload))
}

fn sample_frames() -> Vec<Vec<u8>> {
    let hops = [node_q(2, 200), node_q(1, 100)];
    let mut f = Vec::with_capacity(11);
    // INT-MD and INT-MX over TCP (DSCP 0x17).
    f.push(eth_ipv4(
        6,
        0x17,
        &tcp(
            5000,
            80,
            &[
                md_block(shim(1, 0, 0), md(6), &hops, &[]),
                b"GET /".to_vec(),
            ]
            .concat(),
        ),
    ));
    f.push(eth_ipv4(
        6,
        0x17,
        &tcp(
            5000,
            80,
            &[mx_block(shim(3, 0, 0), mx(), &[]), b"GET /".to_vec()].concat(),
        ),
    ));
    // New UDP header before TCP (NPT=2), and INT between UDP header and payload (NPT=1).
    f.push(eth_ipv4(
        17,
        0,
        &udp_no_checksum(
            1234,
            INT_PORT,
            &[
                md_block(shim(1, 2, 6), md(6), &hops, &[]),
                tcp(40000, 443, b"x"),
            ]
            .concat(),
        ),
    ));
    f.push(eth_ipv4(
        17,
        0,
        &udp(
            3333,
            INT_PORT,
            &[
                md_block(shim(1, 1, 5001), md(6), &hops, &[]),
                b"udp payload".to_vec(),
            ]
            .concat(),
        ),
    ));
    // GRE (protocol type 0x4569, G=1).
    let mut gre = vec![0u8; 4];
    GreRepr {
        flags_version: 0,
        protocol_type: 0x4569,
        checksum: None,
        key: None,
        sequence: None,
    }
    .emit(&mut GrePacket::new_for_emit(&mut gre[..]).unwrap())
    .unwrap();
    let gshim = Shim::Gre(GreShimRepr {
        int_type: 1,
        g: true,
        reserved: 0,
        length: 0,
        next_protocol: 0x0800,
    });
    f.push(eth_ipv4(
        47,
        0,
        &[
            gre,
            md_block(gshim, md(6), &hops, &[]),
            ipv4(17, 0, &udp(1, 2, b"inner")),
        ]
        .concat(),
    ));
    // VXLAN-GPE and Geneve.
    let mut gpe = vec![0u8; 8];
    VxlanGpeRepr {
        flags: 0x0c,
        reserved: 0,
        next_protocol: 0x82,
        vni: 42,
        reserved2: 0,
    }
    .emit(&mut VxlanPacket::new_checked(&mut gpe[..]).unwrap())
    .unwrap();
    let vshim = Shim::Gpe(GpeShimRepr {
        int_type: 1,
        reserved: 0,
        length: 0,
        g: false,
        reserved2: 0,
        next_protocol: 3,
    });
    let three = [node_q(3, 300), node_q(2, 200), node_q(1, 100)];
    f.push(eth_ipv4(
        17,
        0,
        &udp(
            999,
            4790,
            &[gpe, md_block(vshim, md(5), &three, &[]), inner_eth()].concat(),
        ),
    ));
    let mut geneve = vec![0u8; 8 + 4 * 63];
    GeneveRepr {
        version: 0,
        opt_len: 10,
        flags: 0,
        protocol_type: 0x6558,
        vni: 7,
        reserved: 0,
    }
    .emit(&mut GenevePacket::new_for_emit(&mut geneve[..]).unwrap())
    .unwrap();
    geneve.truncate(8);
    let oshim = Shim::Geneve(GeneveOptionRepr {
        option_class: 0x0103,
        option_type: 1,
        reserved: 0,
        length: 0,
    });
    f.push(eth_ipv4(
        17,
        0,
        &udp(
            999,
            6081,
            &[geneve, md_block(oshim, md(5), &three, &[]), inner_eth()].concat(),
        ),
    ));
    // Telemetry report v2.0 with an embedded INT-MD stack (Report v2.0 example 3).
    let inner = ipv4(
        17,
        0,
        &udp_no_checksum(
            1234,
            INT_PORT,
            &[
                md_block(shim(1, 2, 6), md(6), &hops, &[]),
                tcp(40000, 443, b""),
            ]
            .concat(),
        ),
    );
    let r = embedded_int_report(&inner);
    f.push(report_frame(&r));
    // Telemetry report v2.0: a drop report (RepMdBits bit 15: queue 0, reason 71 traffic manager).
    let mut d = vec![0u8; 28];
    GroupHeaderRepr {
        version: 2,
        hw_id: 1,
        sequence: 10,
        node_id: 3,
    }
    .emit(&mut d[..8]);
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 3,
        report_length: 18,
        md_length: 2,
        d: true,
        f: true,
        ..Default::default()
    }
    .emit(&mut d[8..12]);
    IntMainRepr {
        rep_md_bits: 0x4001,
        ..Default::default()
    }
    .emit(&mut d[12..20]);
    d[20..28].copy_from_slice(&[0, 1, 0, 2, 0, 71, 0, 0]);
    d.extend_from_slice(&inner_eth()[..56]);
    f.push(report_frame(&d));
    // Telemetry report v0.5 (SD-Fabric) drop report, reason 29 routing miss.
    let mut v = vec![0u8; 24];
    V05FixedRepr {
        version: 0,
        nproto: 1,
        d: true,
        hw_id: 0,
        sequence: 11,
        ingress_ts: 0x1234,
        ..Default::default()
    }
    .emit(&mut v[..12]);
    V05SwitchRepr {
        switch_id: 2,
        ingress_port: 1,
        egress_port: 3,
        queue_id: 0,
        drop_reason: Some(29),
        ..Default::default()
    }
    .emit(&mut v[12..]);
    v.extend_from_slice(&inner_eth());
    f.push(report_frame(&v));
    // A malformed frame: the shim claims more INT than the packet holds.
    let mut bad = md_block(shim(1, 0, 0), md(6), &hops, &[]);
    bad[1] = 40;
    f.push(eth_ipv4(6, 0x17, &tcp(5000, 80, &bad)));
    f
}

fn pcap_bytes(frames: &[Vec<u8>]) -> Vec<u8> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let mut out = Vec::new();
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(&mut out, header).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let t = std::time::Duration::from_millis(1_700_000_000_000 + i as u64);
        w.write_packet(&PcapPacket::new(t, f.len() as u32, f))
            .unwrap();
    }
    w.into_writer();
    out
}

#[test]
fn sample_capture_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
    let bytes = pcap_bytes(&sample_frames());
    if std::env::var_os("INTSCOPE_REGENERATE").is_some() {
        std::fs::write(&path, &bytes).unwrap();
    }
    let committed =
        std::fs::read(&path).expect("examples/sample.pcap (regenerate with INTSCOPE_REGENERATE=1)");
    assert!(
        committed == bytes,
        "examples/sample.pcap is stale: regenerate with INTSCOPE_REGENERATE=1"
    );
}
