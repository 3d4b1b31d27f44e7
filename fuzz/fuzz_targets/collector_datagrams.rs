#![no_main]
//! Entry point: the collector's whole datagram path — decode, correlation, detectors, the
//! time sweep and the metrics page — over a sequence of hostile datagrams.
//!
//! Input: one byte choosing one or two shards, then records of
//! `[kind: u8][len: u16 LE][gap: u8][bytes; len]`. `gap` advances the receive clock in
//! milliseconds, so sweeps and timeouts run too. An even `kind` sends `bytes` as the datagram;
//! an odd one sends the load generator's next real datagram with `bytes` read as
//! `(position, xor)` pairs flipped into it, so the fuzzer starts from reports that decode and
//! correlate instead of having to find their layout.
use std::net::{IpAddr, Ipv4Addr};

use intscope_collector::api::{Api, render_metrics};
use intscope_collector::api_config::ApiConfig;
use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::loadgen::{Generator, LoadConfig, LoadVersion};
use intscope_core::RecordBatch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let config = CollectorConfig {
        data: None,
        threads: 1 + usize::from(mode & 1),
        int_udp_ports: vec![17768],
        ..CollectorConfig::default()
    };
    let Ok(collector) = Collector::open(config) else {
        return;
    };
    let mut generator = Generator::new(LoadConfig {
        flows: 4,
        version: if mode & 2 == 0 {
            LoadVersion::V2
        } else {
            LoadVersion::V05
        },
        drop_every: 7,
        burst_every: 11,
        ..LoadConfig::coalesced_v2(4)
    });
    let mut batch = RecordBatch::default();
    let mut real = Vec::new();
    let mut time_ns: u64 = 1_700_000_000_000_000_000;
    let src = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    while rest.len() >= 4 {
        let kind = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]]));
        time_ns += u64::from(rest[3]) * 1_000_000;
        rest = &rest[4..];
        let (bytes, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        let datagram = if kind & 1 == 0 {
            bytes
        } else {
            generator.next_datagram(&mut real);
            for edit in bytes.chunks_exact(2) {
                let at = usize::from(edit[0]) % real.len().max(1);
                if let Some(b) = real.get_mut(at) {
                    *b ^= edit[1];
                }
            }
            &real[..]
        };
        collector.decode(datagram, src, time_ns, &mut batch);
        collector.correlate(&mut batch);
    }
    collector.tick(time_ns + 10_000_000_000);
    let page = render_metrics(&Api::new(collector, ApiConfig::default()));
    assert!(page.ends_with("# EOF\n"), "metrics page is not terminated");
});
