//! Report datagrams for tests, built with the wire crate's emitters.
#![allow(dead_code)]

use etherparse::PacketBuilder;
use intscope_core::{DetectConfig as Thresholds, FlowKeyMode, Record, State, decode_datagram};
use intscope_wire::locate::DetectConfig;
use intscope_wire::md::MdHeaderRepr;
use intscope_wire::metadata::{Format, HopMetadata, L1_INTERFACES, L2_INTERFACES};
use intscope_wire::report::{GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr};
use intscope_wire::shim::{Shim, TcpUdpShimRepr};

pub const INT_PORT: u16 = 17768;
const BITMAP: u16 = 0xf000;

/// One hop: node, egress port, hop latency, queue occupancy.
#[derive(Clone, Copy)]
pub struct H(pub u32, pub u16, pub u32, pub u32);

/// A v2.0 report from `sink` about flow `flow` whose path (before the sink) is `path`.
#[derive(Clone)]
pub struct Rep {
    pub sink: H,
    pub seq: u32,
    pub flow: u16,
    pub path: Vec<H>,
    pub drop: Option<u8>,
    pub e: bool,
    pub m: bool,
    pub ttl: Option<u8>,
    /// Bytes of the packet the report carries (default: all).
    pub truncate: Option<usize>,
    /// The stack's hops give level 2 interface IDs (32-bit) instead of level 1.
    pub l2_interfaces: bool,
    /// The stack's hops carry ingress and egress timestamps (switch time, ns): this one.
    pub hop_ts: Option<u64>,
}

impl Rep {
    pub fn new(flow: u16, path: &[H], sink: H) -> Self {
        Rep {
            sink,
            seq: 0,
            flow,
            path: path.to_vec(),
            drop: None,
            e: false,
            m: false,
            ttl: None,
            truncate: None,
            l2_interfaces: false,
            hop_ts: None,
        }
    }

    pub fn datagram(&self) -> Vec<u8> {
        let bitmap = if self.l2_interfaces {
            BITMAP & !L1_INTERFACES | L2_INTERFACES
        } else {
            BITMAP
        } | if self.hop_ts.is_some() { 0x0c00 } else { 0 };
        let hop_words = Format::IntV2.baseline_len(bitmap) / 4;
        let header = MdHeaderRepr {
            version: 2,
            e: self.e,
            m: self.m,
            hop_ml: hop_words as u8,
            remaining_hop_count: 4,
            instructions: bitmap,
            ..Default::default()
        };
        let mut body = vec![0u8; hop_words * 4 * self.path.len()];
        let mut at = 0;
        for h in self.path.iter().rev() {
            let hop = HopMetadata {
                present: bitmap,
                node_id: Some(h.0),
                l1_ingress_if: Some(1),
                l1_egress_if: Some(h.1),
                l2_ingress_if: Some(1),
                l2_egress_if: Some(u32::from(h.1)),
                hop_latency: Some(h.2),
                queue_id: Some(0),
                queue_occupancy: Some(h.3),
                ingress_ts: self.hop_ts,
                egress_ts: self.hop_ts,
                ..Default::default()
            };
            at += hop.encode(bitmap, Format::IntV2, &mut body[at..]);
        }
        let shim = Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 1,
            npt: 1,
            reserved: 0,
            length: (3 + body.len() / 4) as u8,
            content: 80,
        });
        let mut int = vec![0u8; 16];
        shim.emit(&mut int[..4]);
        header.emit(&mut int[4..16]);
        int.extend_from_slice(&body);
        let ttl = self.ttl.unwrap_or(64 - self.path.len() as u8);
        let b = PacketBuilder::ethernet2([0; 6], [1; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 1, self.flow as u8], ttl)
            .udp(1000 + self.flow, INT_PORT);
        let mut inner = Vec::new();
        b.write(&mut inner, &int).unwrap();
        if let Some(n) = self.truncate {
            inner.truncate(n);
        }
        let md_words = if self.drop.is_some() { 4 } else { 3 };
        let mut out = vec![0u8; 20 + md_words * 4];
        GroupHeaderRepr {
            version: 2,
            hw_id: 0,
            sequence: self.seq,
            node_id: self.sink.0,
        }
        .emit(&mut out[..8]);
        let len = (8 + md_words * 4 + inner.len()).div_ceil(4);
        IndividualHeaderRepr {
            rep_type: 1,
            in_type: 3,
            report_length: len as u8,
            md_length: md_words as u8,
            d: self.drop.is_some(),
            f: true,
            ..Default::default()
        }
        .emit(&mut out[8..12]);
        IntMainRepr {
            rep_md_bits: if self.drop.is_some() { 0x7001 } else { 0x7000 },
            ..Default::default()
        }
        .emit(&mut out[12..20]);
        out[20..24].copy_from_slice(&[0, 1, (self.sink.1 >> 8) as u8, self.sink.1 as u8]);
        out[24..28].copy_from_slice(&self.sink.2.to_be_bytes());
        out[28..32].copy_from_slice(&self.sink.3.to_be_bytes());
        if let Some(r) = self.drop {
            out[32..36].copy_from_slice(&[0, r, 0, 0]);
        }
        out.extend_from_slice(&inner);
        out.resize(12 + len * 4, 0);
        out
    }
}

pub fn detect_cfg() -> DetectConfig {
    DetectConfig {
        int_udp_ports: vec![INT_PORT],
        // As the collector decodes reports' packets: they may end anywhere.
        truncated: true,
        ..DetectConfig::default()
    }
}

/// Decodes a datagram received at `time_ns`, each report in turn.
pub fn decode_each(datagram: &[u8], time_ns: u64, each: impl FnMut(&Record)) {
    let mut rec = Record::default();
    decode_datagram(
        datagram,
        time_ns,
        &detect_cfg(),
        FlowKeyMode::Innermost,
        &mut rec,
        each,
    )
    .unwrap();
}

/// Feeds a datagram to a state at `time_ns`.
pub fn feed(state: &mut State, datagram: &[u8], time_ns: u64) {
    decode_each(datagram, time_ns, |r| state.process(r));
}

/// A datagram's last report, decoded.
pub fn last_record(datagram: &[u8]) -> Record {
    let mut last = None;
    decode_each(datagram, 1, |r| last = Some(r.clone()));
    last.expect("the datagram holds a report")
}

/// A state that publishes each incident at once: these tests follow one symptom's lifecycle
/// at microsecond times, far inside the default grouping window.
pub fn state() -> State {
    State::new(Thresholds {
        incident_grouping_ns: 0,
        ..Thresholds::default()
    })
}

pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;

/// The load generator's v2.0 traffic of `flows` flows (4 hops, 8 reports a datagram), a drop
/// report every `drop_every` reports (0: none).
pub fn v2_load(flows: u32, drop_every: u64) -> intscope_core::loadgen::LoadConfig {
    intscope_core::loadgen::LoadConfig {
        flows,
        hops: 4,
        version: intscope_core::loadgen::LoadVersion::V2,
        batch: 8,
        drop_every,
        ..intscope_core::loadgen::LoadConfig::default()
    }
}
