#![no_main]
//! Entry point: `locate::Packet::parse` from every start, with every detection option on.
use intscope_wire::locate::{DetectConfig, Packet, Start};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cfg = DetectConfig {
        int_udp_ports: vec![17768, 555],
        probe_marker: Some(0x1122_3344_5566_7788),
        gre_proto: Some(0x4569),
        unmarked_int: true,
        verify_checksums: true,
        ..DetectConfig::default()
    };
    for start in [Start::Ethernet, Start::Ipv4, Start::Ipv6] {
        if let Ok(p) = Packet::parse(data, start, &cfg)
            && let Some((_, b)) = p.int
        {
            b.stack(None).0.for_each(drop);
        }
    }
});
