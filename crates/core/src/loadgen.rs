//! Synthetic report traffic for load tests and benchmarks (`intscope blast`): flows across a
//! leaf-spine fabric (leaves 1..=4 and spines 101, 102, then 201.. for longer paths), each INT-MD
//! report carrying the flow's truncated packet with its INT-MD stack, each INT-XD postcard one
//! hop's metadata and the packet without INT, plus occasional drops and queue build-ups.
//! Per-flow packet templates are built once; each report patches latency and occupancy, so the
//! generator can feed millions of reports per second.

use etherparse::PacketBuilder;
use intscope_wire::md::MdHeaderRepr;
use intscope_wire::metadata::{Format, HopMetadata};
use intscope_wire::report::{
    GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, V05FixedRepr, V05SwitchRepr,
};
use intscope_wire::shim::{Shim, TcpUdpShimRepr};

/// UDP port of INT in the generated packets (INT_TBD).
pub const INT_PORT: u16 = 17768;
/// Instruction bitmap of the generated stacks: node id, L1 ports, hop latency, queue.
const BITMAP: u16 = 0xf000;
/// Drop reason of generated drops (SD-Fabric traffic manager).
pub const DROP_REASON: u8 = 71;

/// Report format to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadVersion {
    /// Report v2.0, several individual INT-MD reports (the sink's) coalesced per datagram.
    V2,
    /// Report v2.0 INT-XD postcards: one individual report per hop and datagram, each node's own
    /// (its ID in the group header, its metadata in the report, the packet without INT).
    V2Postcards,
    /// Report v0.5 (SD-Fabric), one switch-local report per datagram.
    V05,
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Distinct flows.
    pub flows: u32,
    /// Nodes on each path (source, transit..., sink); at least 2.
    pub hops: u8,
    /// Report version.
    pub version: LoadVersion,
    /// v2.0: individual reports per datagram.
    pub batch: usize,
    /// One report in this many is a drop (0: none).
    pub drop_every: u64,
    /// One report in this many starts a 64-report queue build-up at a spine (0: none).
    pub burst_every: u64,
}

impl LoadConfig {
    /// The benchmarks' traffic: `flows` flows over 4-node paths, Report v2.0 with eight reports
    /// per datagram.
    pub fn coalesced_v2(flows: u32) -> Self {
        LoadConfig {
            flows,
            hops: 4,
            version: LoadVersion::V2,
            batch: 8,
            ..LoadConfig::default()
        }
    }
}

/// How a collector finds the INT stacks inside the generated packets: by their INT UDP port.
pub fn detect_config() -> intscope_wire::locate::DetectConfig {
    intscope_wire::locate::DetectConfig {
        int_udp_ports: vec![INT_PORT],
        ..intscope_wire::locate::DetectConfig::default()
    }
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            flows: 1000,
            hops: 3,
            version: LoadVersion::V2,
            batch: 8,
            drop_every: 1000,
            burst_every: 5000,
        }
    }
}

struct FlowTemplate {
    /// The truncated packet (Ethernet..INT stack..original L4 payload head).
    inner: Vec<u8>,
    /// Nodes of the path, source first.
    path: Vec<u32>,
    /// Offsets of each stack hop's (latency, queue) words in `inner`, stack order (newest first).
    patch: Vec<(usize, usize)>,
}

/// The generator; deterministic for a given config.
pub struct Generator {
    cfg: LoadConfig,
    flows: Vec<FlowTemplate>,
    /// Flow indexes by sink node: a v2.0 datagram carries reports of one sink only.
    by_sink: Vec<Vec<usize>>,
    seq: std::collections::HashMap<u32, u32>,
    reports: u64,
    burst_left: u32,
    /// Postcards: the packet whose postcards are being sent (flow, next hop, drop, occupancy).
    postcards: Option<(usize, usize, bool, u32)>,
    /// Reports generated so far.
    pub generated: u64,
}

fn path_for(i: u32, hops: u8) -> Vec<u32> {
    let src = i % 4 + 1;
    let dst = (i / 4 + src) % 4 + 1;
    let dst = if dst == src { dst % 4 + 1 } else { dst };
    let mut p = vec![src];
    for k in 0..hops.saturating_sub(2) {
        p.push(if k == 0 {
            101 + (i.wrapping_mul(2_654_435_761) >> 31)
        } else {
            200 + u32::from(k)
        });
    }
    p.push(dst);
    p
}

fn build_template(i: u32, hops: u8) -> FlowTemplate {
    let path = path_for(i, hops);
    let stack_hops = &path[..path.len() - 1];
    let header = MdHeaderRepr {
        version: 2,
        hop_ml: 4,
        remaining_hop_count: 8 - stack_hops.len() as u8,
        instructions: BITMAP,
        ..Default::default()
    };
    let mut body = vec![0u8; 16 * stack_hops.len()];
    let mut at = 0;
    for (k, node) in stack_hops.iter().rev().enumerate() {
        let hop = HopMetadata {
            present: BITMAP,
            node_id: Some(*node),
            l1_ingress_if: Some(1),
            l1_egress_if: Some(2 + (k as u16 % 2)),
            hop_latency: Some(1000),
            queue_id: Some(0),
            queue_occupancy: Some(10),
            ..Default::default()
        };
        at += hop.encode(BITMAP, Format::IntV2, &mut body[at..]);
    }
    let shim = Shim::TcpUdp(TcpUdpShimRepr {
        int_type: 1,
        npt: 1,
        reserved: 0,
        length: (3 + body.len() / 4) as u8,
        content: 5000 + (i % 1000) as u16,
    });
    let mut int = vec![0u8; 16];
    shim.emit(&mut int[..4]);
    header.emit(&mut int[4..16]);
    int.extend_from_slice(&body);
    int.extend_from_slice(&[0u8; 8]);
    let src = [10, 0, (i >> 8) as u8, i as u8];
    let dst = [10, 1, (i >> 16) as u8, (i >> 3) as u8];
    // Hosts send with TTL 64; every node before the sink (all INT) decremented it once.
    let ttl = 64 - stack_hops.len() as u8;
    let builder = PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ipv4(src, dst, ttl)
        .udp(10000 + (i % 50000) as u16, INT_PORT);
    let mut inner = Vec::with_capacity(builder.size(int.len()));
    builder.write(&mut inner, &int).expect("writing to a Vec");
    let stack_at = 14 + 20 + 8 + 16;
    let patch = (0..stack_hops.len())
        .map(|k| (stack_at + k * 16 + 8, stack_at + k * 16 + 12))
        .collect();
    FlowTemplate { inner, path, patch }
}

/// Bytes of a postcard's packet: Ethernet, IPv4 and UDP headers.
const POSTCARD_PACKET: usize = 14 + 20 + 8;

/// Report v2.0's group header from `node` into the empty `out` (§"Telemetry Group Header").
fn group_header(out: &mut Vec<u8>, node: u32, sequence: u32) {
    out.resize(8, 0);
    GroupHeaderRepr {
        version: 2,
        hw_id: 0,
        sequence,
        node_id: node,
    }
    .emit(&mut out[..8]);
}

/// An individual report's headers and metadata appended to `out` (§"Individual Report Header",
/// §"Individual Report Main Contents"): RepMdBits 1-3 (L1 ports 1 and 2, `latency`, queue 0 at
/// `occupancy`), bit 15's drop reason when `drop`, F as `tracked`. The caller appends the
/// `packet`-byte inner packet and pads the report to the length returned (words after the
/// first).
fn individual_report(
    out: &mut Vec<u8>,
    packet: usize,
    drop: bool,
    tracked: bool,
    latency: u32,
    occupancy: u32,
) -> usize {
    let md_words = if drop { 4 } else { 3 };
    let report_len = (8 + md_words * 4 + packet).div_ceil(4);
    let start = out.len();
    out.resize(start + 12 + md_words * 4, 0);
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 3,
        report_length: report_len as u8,
        md_length: md_words as u8,
        d: drop,
        f: tracked,
        ..Default::default()
    }
    .emit(&mut out[start..start + 4]);
    IntMainRepr {
        rep_md_bits: if drop { 0x7001 } else { 0x7000 },
        ..Default::default()
    }
    .emit(&mut out[start + 4..start + 12]);
    let md = start + 12;
    out[md..md + 4].copy_from_slice(&[0, 1, 0, 2]);
    out[md + 4..md + 8].copy_from_slice(&latency.to_be_bytes());
    out[md + 8..md + 12].copy_from_slice(&occupancy.to_be_bytes());
    if drop {
        out[md + 12..md + 16].copy_from_slice(&[0, DROP_REASON, 0, 0]);
    }
    report_len
}

impl Generator {
    /// A generator for `cfg`.
    pub fn new(cfg: LoadConfig) -> Self {
        let hops = cfg.hops.clamp(2, 9);
        let flows: Vec<FlowTemplate> = (0..cfg.flows.max(1))
            .map(|i| build_template(i, hops))
            .collect();
        let mut by_sink: Vec<Vec<usize>> = vec![Vec::new(); 5];
        for (i, f) in flows.iter().enumerate() {
            by_sink[*f.path.last().unwrap_or(&0) as usize % 5].push(i);
        }
        by_sink.retain(|v| !v.is_empty());
        Generator {
            cfg,
            flows,
            by_sink,
            seq: std::collections::HashMap::new(),
            reports: 0,
            burst_left: 0,
            postcards: None,
            generated: 0,
        }
    }

    fn next_seq(&mut self, node: u32) -> u32 {
        let s = self.seq.entry(node).or_insert(0);
        let v = *s;
        *s = s.wrapping_add(1);
        v
    }

    /// Writes the next datagram (UDP payload) into `out`; returns its number of reports.
    pub fn next_datagram(&mut self, out: &mut Vec<u8>) -> usize {
        out.clear();
        match self.cfg.version {
            LoadVersion::V2 => self.v2(out),
            LoadVersion::V2Postcards => self.v2_postcard(out),
            LoadVersion::V05 => self.v05(out),
        }
    }

    fn pick(&mut self, sink_group: Option<usize>) -> (usize, bool, u32) {
        self.reports += 1;
        self.generated += 1;
        let n = self.reports;
        let r = (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize;
        let flow = match sink_group {
            Some(g) => self.by_sink[g][r % self.by_sink[g].len()],
            None => r % self.flows.len(),
        };
        let drop = self.cfg.drop_every > 0 && n.is_multiple_of(self.cfg.drop_every);
        if self.cfg.burst_every > 0 && n.is_multiple_of(self.cfg.burst_every) {
            self.burst_left = 64;
        }
        let occupancy = if self.burst_left > 0 {
            self.burst_left -= 1;
            2000 + self.burst_left * 50
        } else {
            10 + (n % 50) as u32
        };
        (flow, drop, occupancy)
    }

    fn v2(&mut self, out: &mut Vec<u8>) -> usize {
        // Reports of one datagram come from one sink node.
        let group = (self.generated as usize / self.cfg.batch.max(1)) % self.by_sink.len();
        let sink = *self.flows[self.by_sink[group][0]].path.last().unwrap_or(&0);
        let seq = self.next_seq(sink);
        group_header(out, sink, seq);
        let mut n = 0;
        while n < self.cfg.batch.max(1) {
            let (flow, drop, occ) = self.pick(Some(group));
            let t = &self.flows[flow];
            let start = out.len();
            let report_len = individual_report(out, t.inner.len(), drop, true, 800 + occ * 3, occ);
            let inner_at = out.len();
            out.extend_from_slice(&t.inner);
            // Spines (stack index 0 is the newest: the last transit hop) carry the burst.
            for (k, &(lat, q)) in t.patch.iter().enumerate() {
                let (l, o) = if k == 0 {
                    (500 + occ * 4, occ)
                } else {
                    (900, 12)
                };
                out[inner_at + lat..inner_at + lat + 4].copy_from_slice(&l.to_be_bytes());
                out[inner_at + q..inner_at + q + 4].copy_from_slice(&o.to_be_bytes());
            }
            out.resize(start + 4 + report_len * 4, 0);
            n += 1;
            // Keep datagrams under a 1500-byte MTU.
            if out.len() + 12 + 16 + t.inner.len() + 4 > 1472 {
                break;
            }
        }
        n
    }

    /// The next postcard: a packet's, one per hop in path order as the switches send them (the
    /// collector joins them into its path); a dropped packet's last one is the drop report,
    /// from a hop along the way. (flow, hop, whether it is the drop report, occupancy.)
    fn next_postcard(&mut self) -> (usize, usize, bool, u32) {
        let (flow, hop, dropped, occ) = match self.postcards.take() {
            Some(p) => p,
            None => {
                let (flow, drop, occ) = self.pick(None);
                (flow, 0, drop, occ)
            }
        };
        if hop > 0 {
            self.generated += 1;
        }
        let path_len = self.flows[flow].path.len();
        let drop_at = if dropped { flow % path_len } else { path_len };
        let drop = hop == drop_at;
        if hop + 1 < path_len && !drop {
            self.postcards = Some((flow, hop + 1, dropped, occ));
        }
        (flow, hop, drop, occ)
    }

    /// The flow's packet as a switch reports it in a postcard: Ethernet/IPv4/UDP without INT,
    /// with the original destination port (the one the INT shim saved), as fabric-tna does.
    fn postcard_packet(&self, flow: usize, out: &mut Vec<u8>) {
        let t = &self.flows[flow];
        let at = out.len();
        out.extend_from_slice(&t.inner[..POSTCARD_PACKET]);
        let orig = [t.inner[14 + 20 + 8 + 2], t.inner[14 + 20 + 8 + 3]];
        out[at + 36..at + 38].copy_from_slice(&orig);
    }

    /// Telemetry Report v2.0 §"Individual Report Header" for INT-XD: one hop's postcard, the
    /// node in the group header, its L1 ports, hop latency and queue in the report's metadata
    /// (RepMdBits 1-3), a drop's reason in bit 15's word.
    fn v2_postcard(&mut self, out: &mut Vec<u8>) -> usize {
        let (flow, hop, drop, occ) = self.next_postcard();
        let node = self.flows[flow].path[hop];
        let seq = self.next_seq(node);
        group_header(out, node, seq);
        // The values the INT-MD reports carry for the same hop: the sink's own, then the
        // newest stack hop's (the burst), then the others'.
        let last = self.flows[flow].path.len() - 1;
        let (latency, occupancy) = match last - hop {
            0 => (800 + occ * 3, occ),
            1 => (500 + occ * 4, occ),
            _ => (900, 12),
        };
        let start = out.len();
        let report_len = individual_report(out, POSTCARD_PACKET, drop, !drop, latency, occupancy);
        self.postcard_packet(flow, out);
        out.resize(start + 4 + report_len * 4, 0);
        1
    }

    fn v05(&mut self, out: &mut Vec<u8>) -> usize {
        let (flow, hop, drop, occ) = self.next_postcard();
        let node = self.flows[flow].path[hop];
        let seq = self.next_seq(node);
        let nproto = if drop { 1 } else { 2 };
        out.resize(12 + if drop { 12 } else { 16 }, 0);
        V05FixedRepr {
            version: 0,
            nproto,
            d: drop,
            f: !drop,
            hw_id: 0,
            sequence: seq,
            ingress_ts: 1000,
            ..Default::default()
        }
        .emit(&mut out[..12]);
        let sw = if drop {
            V05SwitchRepr {
                switch_id: node,
                ingress_port: 1,
                egress_port: 2,
                queue_id: 0,
                drop_reason: Some(DROP_REASON),
                ..Default::default()
            }
        } else {
            V05SwitchRepr {
                switch_id: node,
                ingress_port: 1,
                egress_port: 2,
                queue_id: 0,
                queue_occupancy: Some(occ),
                egress_ts: Some(1000 + 500 + occ * 4),
                ..Default::default()
            }
        };
        sw.emit(&mut out[12..]);
        self.postcard_packet(flow, out);
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FlowKeyMode, Record, decode_datagram};
    use intscope_wire::locate::DetectConfig;

    #[test]
    fn generated_datagrams_decode() {
        let cfg = DetectConfig {
            int_udp_ports: vec![INT_PORT],
            ..DetectConfig::default()
        };
        for version in [LoadVersion::V2, LoadVersion::V2Postcards, LoadVersion::V05] {
            let mut g = Generator::new(LoadConfig {
                flows: 50,
                hops: 4,
                version,
                drop_every: 7,
                ..LoadConfig::default()
            });
            let mut buf = Vec::new();
            let mut rec = Record::default();
            let mut total = 0;
            for _ in 0..200 {
                let n = g.next_datagram(&mut buf);
                assert!(buf.len() <= 1472);
                let mut seen = 0;
                let got = decode_datagram(&buf, 1, &cfg, FlowKeyMode::Innermost, &mut rec, |r| {
                    seen += 1;
                    assert!(r.flow.is_some());
                    match version {
                        LoadVersion::V2 => {
                            assert_eq!(r.hops().len(), 4, "source, two transit, sink");
                            assert_eq!(r.int_hops, 3);
                        }
                        LoadVersion::V2Postcards => {
                            assert_eq!((r.hops().len(), r.int_hops), (1, 0), "one hop, no stack");
                            assert_ne!(r.hops()[0].node_id, 0, "the group header's node");
                        }
                        LoadVersion::V05 => {}
                    }
                })
                .unwrap();
                assert_eq!((got, seen), (n, n));
                total += n;
            }
            assert_eq!(total as u64, g.generated);
        }
    }

    /// Postcards (v0.5 and v2.0) come hop by hop, per packet, as switches send them: the
    /// collector joins them into the flows' full paths and sees no path change.
    #[test]
    fn postcards_join_into_stable_paths() {
        for version in [LoadVersion::V05, LoadVersion::V2Postcards] {
            postcards_join(version);
        }
    }

    fn postcards_join(version: LoadVersion) {
        let cfg = DetectConfig {
            int_udp_ports: vec![INT_PORT],
            ..DetectConfig::default()
        };
        let mut g = Generator::new(LoadConfig {
            flows: 50,
            hops: 4,
            version,
            drop_every: 13,
            ..LoadConfig::default()
        });
        let state = crate::state::State::new(crate::thresholds::DetectConfig::default());
        let (mut buf, mut rec) = (Vec::new(), Record::default());
        for t in 0..20_000u64 {
            g.next_datagram(&mut buf);
            decode_datagram(
                &buf,
                t * 1_000,
                &cfg,
                FlowKeyMode::Innermost,
                &mut rec,
                |r| state.process(r),
            )
            .unwrap();
        }
        let s = state.read();
        assert_eq!(s.flow_count(), 50, "{version:?}");
        assert!(
            s.flows().all(|f| f.path.len() == 4),
            "{version:?}: joined paths"
        );
        let changes: Vec<_> = s
            .events()
            .iter()
            .filter(|e| e.kind == crate::event::EventKind::PathChange)
            .collect();
        assert!(
            changes.is_empty(),
            "{version:?}: no path changes: {:?}",
            changes.first()
        );
    }
}
