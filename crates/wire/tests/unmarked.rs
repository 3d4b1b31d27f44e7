//! Unmarked INT (`DetectConfig::unmarked_int`): application payloads never read as INT, with the
//! option off (the default) or on, and a genuine unmarked block still found when it is on.
//! Issue 29: with the old checks about one TCP payload in a thousand became made-up hops.

mod common;

use common::{eth_ipv4, md, md_block, node_q, tcp, tcp_shim, udp};
use intscope_wire::Warning;
use intscope_wire::int::{Encap, IntBlock, IntHeader};
use intscope_wire::locate::{DetectConfig, Packet, Start};

/// splitmix64: a seeded generator, so a failure is repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let w = self.next().to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
    }
}

/// What the collector uses for reports' copies, with unmarked INT on or off.
fn copy_cfg(unmarked_int: bool) -> DetectConfig {
    DetectConfig {
        unmarked_int,
        truncated: true,
        ..DetectConfig::default()
    }
}

/// Ports whose payload is a marked form by the configuration (tunnels, reports): traffic to the
/// Geneve port is Geneve. Random payloads avoid them.
fn marked_port(cfg: &DetectConfig, port: u16) -> bool {
    cfg.is_report_port(port)
        || cfg.is_int_udp_port(port)
        || [cfg.vxlan_gpe_port, cfg.vxlan_port, cfg.geneve_port].contains(&port)
        || Some(port) == cfg.gtpu_port
}

/// Writes an Ethernet/IPv4/TCP or UDP frame around `payload_len` bytes already in `frame` after
/// the headers, with a DSCP that is not the INT marking. Returns the frame's length.
fn frame_headers(frame: &mut [u8], rng: &mut Rng, cfg: &DetectConfig, payload_len: usize) -> usize {
    let r = rng.next();
    let udp = r & 1 == 0;
    let mut dscp = (r >> 8) as u8 & 0x3f;
    if cfg.dscp.is_some_and(|m| m.matches(dscp)) {
        dscp ^= 1;
    }
    let mut port = |shift: u32| loop {
        let p = (rng.next() >> shift) as u16;
        if !marked_port(cfg, p) {
            break p;
        }
    };
    let (sport, dport) = (port(16), port(32));
    frame[..14].copy_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let l4_len = if udp { 8 } else { 20 };
    let total = 20 + l4_len + payload_len;
    let ip = &mut frame[14..34];
    ip.copy_from_slice(&[
        0x45,
        dscp << 2,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        if udp { 17 } else { 6 },
        0,
        0,
        10,
        0,
        1,
        1,
        10,
        0,
        3,
        3,
    ]);
    let l4 = &mut frame[34..34 + l4_len];
    l4[..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    if udp {
        l4[4..6].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
        l4[6..8].copy_from_slice(&[0, 0]);
    } else {
        rng.fill(&mut l4[4..12]);
        l4[12] = 0x50;
        l4[13] = 0x18;
        l4[14..20].copy_from_slice(&[0x20, 0, 0, 0, 0, 0]);
    }
    14 + total
}

/// The L4 header's length of a frame `frame_headers` wrote.
fn l4_len(frame: &[u8]) -> usize {
    if frame[23] == 17 { 8 } else { 20 }
}

/// A million random TCP/UDP payloads (seeded; lengths 0–1400, the first 96 bytes fresh each
/// time, the rest from one random fill): none is read as INT, by default or with unmarked INT
/// on. The same payloads pass the bare INT parse (what the old checks started from) often
/// enough that the test could fail.
#[test]
fn a_million_random_payloads_carry_no_int() {
    let off = copy_cfg(false);
    let on = copy_cfg(true);
    let mut rng = Rng(0x1a7e_5c09_e29d_2026);
    let mut frame = vec![0u8; 14 + 20 + 20 + 1400];
    rng.fill(&mut frame);
    let (mut found_off, mut found_on, mut bare) = (0u32, 0u32, 0u32);
    for _ in 0..1_000_000 {
        let payload_len = (rng.next() % 1401) as usize;
        let len = frame_headers(&mut frame, &mut rng, &on, payload_len);
        let at = 34 + l4_len(&frame);
        let fresh = payload_len.min(96);
        rng.fill(&mut frame[at..at + fresh]);
        let bytes = &frame[..len];
        let mut p = Packet::new(bytes);
        let _ = p.locate_copy(Start::Ethernet, &off, true);
        found_off += u32::from(p.int.is_some());
        let mut p = Packet::new(bytes);
        let _ = p.locate_copy(Start::Ethernet, &on, true);
        found_on += u32::from(p.int.is_some());
        let encap = if l4_len(bytes) == 8 {
            Encap::Udp
        } else {
            Encap::Tcp
        };
        bare += u32::from(
            IntBlock::parse(&bytes[at..], encap).is_ok_and(|b| match b.header {
                IntHeader::Md(h) => h.instructions != 0,
                _ => false,
            }),
        );
    }
    assert_eq!(
        found_off, 0,
        "INT found in random payloads, unmarked INT off"
    );
    assert_eq!(found_on, 0, "INT found in random payloads, unmarked INT on");
    assert!(
        bare > 100,
        "only {bare} payloads parse as INT-MD: the inputs test nothing"
    );
}

/// Payloads of real protocols (HTTP, TLS, DNS, SSH, iperf's zeros and ones) at every length up
/// to their own, over TCP and UDP: none is INT.
#[test]
fn real_protocol_payloads_carry_no_int() {
    let tls_hello = [
        &[
            0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ][..],
        &[0x5a; 32],
        &[0x20],
        &[0x11; 32],
        &[0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c],
    ]
    .concat();
    let dns = [
        0x12u8, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 7, b'e', b'x',
        b'a', b'm', b'p', b'l', b'e', 3, b'c', b'o', b'm', 0, 0, 1, 0, 1,
    ];
    let payloads: Vec<Vec<u8>> = vec![
        b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n".to_vec(),
        b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n".to_vec(),
        tls_hello,
        dns.to_vec(),
        vec![0; 256],
        vec![0xff; 256],
        (0..=255u8).collect(),
        (0..=255u8).rev().collect(),
        // A shim's first byte and an INT-MD version over zeros, the header's Hop ML too short
        // for its bitmap.
        [
            &[0x10u8, 0x05, 0, 0, 0x20, 0, 0x01, 0x05, 0x90, 0, 0, 0][..],
            &[0; 64],
        ]
        .concat(),
    ];
    for unmarked_int in [false, true] {
        let cfg = copy_cfg(unmarked_int);
        for payload in &payloads {
            for cut in 0..=payload.len() {
                for frame in [
                    eth_ipv4(6, 0, &tcp(40000, 443, &payload[..cut])),
                    eth_ipv4(17, 0, &udp(40000, 53, &payload[..cut])),
                ] {
                    let mut p = Packet::new(&frame);
                    let _ = p.locate_copy(Start::Ethernet, &cfg, true);
                    assert!(p.int.is_none(), "{payload:02x?}[..{cut}] read as INT");
                }
            }
        }
    }
}

/// A genuine INT-MD block without a marking (DSCP 0, no INT port): in a packet, found only with
/// unmarked INT on; in a report's copy, exactly when the report's F bit says the packet carried
/// INT (the report is the marking), whatever the option says.
#[test]
fn genuine_unmarked_md_is_found_only_when_allowed() {
    let int = md_block(
        tcp_shim(0, 0),
        md(5),
        &[node_q(3, 30), node_q(2, 20), node_q(1, 10)],
        &[],
    );
    let frame = eth_ipv4(6, 0, &tcp(40000, 443, &[&int[..], b"payload"].concat()));
    let locate = |cfg: &DetectConfig, tracked: bool| {
        let mut p = Packet::new(&frame);
        p.locate_copy(Start::Ethernet, cfg, tracked).unwrap();
        p
    };
    let mut p = Packet::new(&frame);
    p.locate(Start::Ethernet, &copy_cfg(false)).unwrap();
    assert!(p.int.is_none(), "off by default in packets");
    assert!(
        locate(&copy_cfg(false), true).int.is_some(),
        "a report whose F bit is set marks its copy"
    );
    for unmarked in [false, true] {
        assert!(
            locate(&copy_cfg(unmarked), false).int.is_none(),
            "Report v2.0: F = 0 means no embedded telemetry metadata"
        );
    }
    let p = locate(&copy_cfg(true), true);
    let (_, b) = p.int.expect("a self-consistent unmarked block");
    assert!(p.warnings.has(Warning::UnmarkedInt));
    assert_eq!(b.stack(None).0.hop_count(), 3);
    let mut p = Packet::new(&frame);
    p.locate(Start::Ethernet, &copy_cfg(true)).unwrap();
    assert!(p.int.is_some(), "outside reports the option alone decides");

    // One reserved bit set in the INT-MD header: not sure enough.
    let mut bad = int.clone();
    bad[5] |= 0x01;
    let frame = eth_ipv4(6, 0, &tcp(40000, 443, &bad));
    let mut p = Packet::new(&frame);
    p.locate_copy(Start::Ethernet, &copy_cfg(true), true)
        .unwrap();
    assert!(p.int.is_none());
}
