//! The INT roles over one frame: source (INT v2.1 §"INT Source Node"), transit (§"INT Transit
//! Hop Node") and sink (§"INT Sink Node"), for INT-MD over TCP/UDP, with the MTU and hop-count
//! rules of §"INT-MD Metadata Header Format" and §"MTU Settings", and Telemetry Report v2.0
//! output at the sink.

use std::net::IpAddr;

use etherparse::PacketBuilder;
use intscope_wire::destination::{Destination, DestinationRepr};
use intscope_wire::domain::Mode as DsMode;
use intscope_wire::encap::GPE_NEXT_PROTO_INT;
use intscope_wire::int::{AnyShim, IntHeader};
use intscope_wire::locate::{DetectConfig, DscpMatch, FlowKey, Packet, Start};
use intscope_wire::md::{MD_HEADER_LEN, MdHeaderRepr};
use intscope_wire::metadata::{BIT15, Format, HopMetadata, NODE_ID, RESERVED_BITS};
use intscope_wire::mx::{MX_HEADER_LEN, MxHeaderRepr};
use intscope_wire::report::{
    GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr, V05_DROP_LEN, V05_FIXED_LEN, V05_LOCAL_LEN,
    V05FixedRepr, V05SwitchRepr,
};
use intscope_wire::shim::{
    GENEVE_INT_OPTION_CLASS, GeneveOptionRepr, GpeShimRepr, GreShimRepr, SHIM_LEN, Shim,
    TcpUdpShim, TcpUdpShimRepr,
};

use crate::config::{
    ConfigError, DropReports, MarkedWithoutInt, Mode, MtuAction, NodeConfig, ProbeConfig,
    ReportCategory, ReportFormat, Role, SinkMetadata, SourceEncap, Unsupported, WatchEntry,
};
use crate::domain::DsReport;
use crate::filter::ReportFilter;
use crate::frame::{self, Layout};
use crate::telemetry::Telemetry;

/// What happened to a frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Forward the (possibly modified) frame; `false`: discard (D bit at the sink).
    pub forward: bool,
    /// Telemetry report datagrams (UDP payloads) to send to the collector.
    pub reports: Vec<Vec<u8>>,
    /// Synthetic frames to send after this one (INT-marked clones, D bit set).
    pub synthetic: Vec<Vec<u8>>,
    /// Sink: the body of the Destination header (INT type 2) it consumed, if the packet had one.
    pub destination: Option<Vec<u8>>,
}

/// What a source did to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Insertion {
    /// INT with this node's metadata.
    Full,
    /// INT without metadata: M bit (no room) or a Remaining Hop Count of 0.
    NoMetadata,
    /// No INT: the fixed headers would exceed the MTU.
    TooBig,
}

/// Counters of a node; every frame lands in exactly one of the first group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Frames seen.
    pub frames: u64,
    /// Frames passed unchanged (not watched, not INT, not IP/TCP/UDP).
    pub untouched: u64,
    /// Source: INT inserted with this node's metadata.
    pub inserted: u64,
    /// Source: INT inserted without metadata, M bit set (no room for the metadata).
    pub inserted_m: u64,
    /// Source: no INT, the fixed headers would exceed the MTU.
    pub too_big: u64,
    /// Transit: metadata added.
    pub added: u64,
    /// Transit: Remaining Hop Count was 0, E bit set.
    pub hop_limit: u64,
    /// Transit: no room, M bit set.
    pub mtu: u64,
    /// Sink: INT removed and reported.
    pub sunk: u64,
    /// Sink: packets discarded for the D bit.
    pub discarded: u64,
    /// Frames whose INT this node could not process (decode error), forwarded unchanged.
    pub malformed: u64,
    /// Reports produced.
    pub reports: u64,
    /// INT-XD: postcards sent for watched flows.
    pub postcards: u64,
    /// INT-MX: reports of this node's metadata as instructed.
    pub mx_reports: u64,
    /// Reports the SD-Fabric filters held back (`[filters]`).
    pub filtered: u64,
    /// Intermediate reports sent (stacks removed for lack of room).
    pub intermediate: u64,
    /// Transit: INT processing skipped (unknown domain or reserved bits, as configured).
    pub skipped: u64,
    /// Source: INT-marked clones sent (the watched frames went on unchanged).
    pub clones: u64,
    /// Source: probe packets generated.
    pub probes: u64,
    /// Queue reports sent apart from any other report (unwatched packets, INT-MD transit).
    pub queue_reports: u64,
    /// Drops not reported because the packet was on no watchlist (`drop_reports = "watched"`).
    pub unwatched_drops: u64,
    /// Sink: Destination headers consumed.
    pub destinations: u64,
    /// Source: packets that arrived with the INT DSCP marking and no INT header (remarked, or
    /// skipped, as `dscp_marked_without_int` says).
    pub marked_without_int: u64,
}

/// A software INT node.
#[derive(Debug)]
pub struct Node {
    cfg: NodeConfig,
    detect: DetectConfig,
    filter: ReportFilter,
    /// The watchlist entries, then one per `watch_subnets` prefix.
    watch: Vec<WatchEntry>,
    /// The domains this node knows.
    domains: Vec<crate::domain::Domain>,
    seq: u32,
    /// Some watchlist entry matches on the ingress interface.
    watch_by_ingress: bool,
    /// A source marking INT with the DSCP (so it keeps unmarked what enters without INT).
    marks_dscp: bool,
    /// When each probe stream's next probe is due (ns; `None` before the first).
    next_probe: Vec<Option<u64>>,
    /// Counters.
    pub stats: NodeStats,
}

fn port_in(range: Option<(u16, u16)>, p: u16) -> bool {
    range.is_none_or(|(lo, hi)| (lo..=hi).contains(&p))
}

/// How the source treats a watched flow: its watchlist entry's settings, the node's otherwise.
struct Watch {
    mode: Mode,
    instructions: u16,
    max_hops: u8,
    encap: SourceEncap,
    ds_id: u16,
    ds_instruction: u16,
    ds_flags: u16,
    ds_metadata: Vec<u8>,
    /// INT-MD 'source-only' metadata, after the source's hop.
    source_only: Vec<u8>,
    /// The body of a Destination header to add.
    destination: Vec<u8>,
    /// Send an INT-marked clone instead of adding INT to the packet.
    clone: bool,
    /// D bit: the sink discards the packet after reporting.
    discard: bool,
    /// The reports wanted about these flows.
    wants: Wants,
    /// The flow the entry matched (inside a tunnel, or the packet's own): the key of the report
    /// filters.
    key: FlowKey,
}

/// Which report categories apply ([`ReportCategory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wants {
    flow: bool,
    drop: bool,
    queue: bool,
}

impl Wants {
    const ALL: Wants = Wants {
        flow: true,
        drop: true,
        queue: true,
    };

    fn of(list: Option<&[ReportCategory]>) -> Wants {
        list.map_or(Wants::ALL, |l| Wants {
            flow: l.contains(&ReportCategory::Flow),
            drop: l.contains(&ReportCategory::Drop),
            queue: l.contains(&ReportCategory::Queue),
        })
    }
}

impl Watch {
    fn of(w: &WatchEntry, key: FlowKey, cfg: &NodeConfig) -> Self {
        Watch {
            mode: w.mode.unwrap_or(cfg.mode),
            instructions: w.instructions.unwrap_or(cfg.instructions),
            max_hops: w.max_hops.unwrap_or(cfg.max_hops),
            encap: w.encap.unwrap_or(cfg.encap),
            ds_id: w.ds_id,
            ds_instruction: w.ds_instruction,
            ds_flags: w.ds_flags,
            ds_metadata: w.ds_metadata.0.clone(),
            source_only: w.source_only.0.clone(),
            destination: w.destination.0.clone(),
            clone: w.clone,
            discard: w.clone,
            wants: Wants::of(w.reports.as_deref()),
            key,
        }
    }
}

/// The first watchlist entry that matches, with the flow it matched: the packet's own headers
/// (`outer`), or the flow inside a tunnel (`inner`) as the entry's `inner` says — unset, inside
/// GTP-U only (`gtpu`), as SD-Fabric applies its watchlist.
fn watch_entry<'a>(
    list: &'a [WatchEntry],
    outer: &FlowKey,
    inner: Option<&FlowKey>,
    gtpu: bool,
    ingress: Option<u16>,
) -> Option<(&'a WatchEntry, FlowKey)> {
    list.iter().find_map(|w| {
        let f = match w.inner {
            Some(true) => inner?,
            None if gtpu => inner.unwrap_or(outer),
            _ => outer,
        };
        let (src, dst) = (f.src_ip(), f.dst_ip());
        let hit = w.ingress_port.is_none_or(|p| Some(p) == ingress)
            && w.subnet
                .is_none_or(|n| n.contains(&src) || n.contains(&dst))
            && w.src.is_none_or(|n| n.contains(&src))
            && w.dst.is_none_or(|n| n.contains(&dst))
            && w.proto.is_none_or(|p| p == f.proto)
            && port_in(w.dst_ports, f.dst_port)
            && port_in(w.src_ports, f.src_port);
        hit.then_some((w, *f))
    })
}

/// The node's watchlist: its entries, then one entry per `watch_subnets` prefix.
fn watchlist(cfg: &NodeConfig) -> Vec<WatchEntry> {
    let subnets = cfg.watch_subnets.iter().map(|n| WatchEntry {
        subnet: Some(*n),
        ..WatchEntry::default()
    });
    cfg.watchlist.iter().cloned().chain(subnets).collect()
}

impl Node {
    /// A node with this configuration, once [`NodeConfig::validate`] accepts it.
    pub fn new(cfg: NodeConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let detect = DetectConfig {
            int_udp_ports: vec![cfg.int_udp_port],
            dscp: Some(DscpMatch {
                value: cfg.int_dscp,
                mask: cfg.int_dscp_mask,
            }),
            report_ports: cfg.report_ports.clone(),
            probe_marker: cfg.probe_marker(),
            gre_proto: Some(cfg.int_gre_proto),
            ..DetectConfig::default()
        };
        let watch = watchlist(&cfg);
        let cfg_watch_by_ingress = watch.iter().any(|w| w.ingress_port.is_some());
        let marks_dscp = cfg.marks_dscp();
        Ok(Node {
            filter: ReportFilter::new(cfg.filters.clone()),
            watch,
            domains: cfg.domains.iter().map(crate::domain::Domain::of).collect(),
            cfg,
            detect,
            seq: 0,
            watch_by_ingress: cfg_watch_by_ingress,
            marks_dscp,
            next_probe: Vec::new(),
            stats: NodeStats::default(),
        })
    }

    /// A domain this node knows (the default domain 0 is no domain).
    fn domain(&self, id: u16) -> Option<&crate::domain::Domain> {
        if id == 0 {
            return None;
        }
        self.domains.iter().find(|d| d.id == id)
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// Changes the egress MTU (a link reconfigured under a running node).
    pub fn set_mtu(&mut self, mtu: usize) {
        self.cfg.mtu = mtu;
    }

    /// The probe packets due by `now_ns` (at most 1024 per stream per call), INT-marked with the
    /// node's settings and `tel`'s metadata; the first of each stream is due at once.
    pub fn probes(&mut self, now_ns: u64, tel: &dyn Telemetry) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..self.cfg.probes.len() {
            let p = self.cfg.probes[i].clone();
            let next = self.next_probe.get(i).copied().flatten().unwrap_or(now_ns);
            let mut due = next;
            let mut sent = 0;
            while due <= now_ns && sent < 1024 {
                if let Some(frame) = self.probe(&p, tel) {
                    out.push(frame);
                }
                due += p.interval_ns;
                sent += 1;
            }
            if due <= now_ns {
                // Far behind (a gap in capture time): skip ahead rather than burst.
                due = now_ns + p.interval_ns;
            }
            self.next_probe.resize(self.cfg.probes.len(), None);
            self.next_probe[i] = Some(due);
        }
        out
    }

    fn probe(&mut self, p: &ProbeConfig, tel: &dyn Telemetry) -> Option<Vec<u8>> {
        let seq = self.stats.probes;
        let eth = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]);
        let ip = match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
            (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
            _ => return None,
        };
        let builder = ip.udp(p.src_port, p.dst_port);
        let mut payload = vec![0u8; p.size.saturating_sub(builder.size(0)).max(8)];
        payload[..8].copy_from_slice(&seq.to_be_bytes());
        let mut frame = Vec::with_capacity(p.size + 128);
        builder.write(&mut frame, &payload).ok()?;
        let (layout, flow) = {
            let parsed = Packet::parse(&frame, Start::Ethernet, &self.detect).ok()?;
            (Layout::of(&parsed)?, parsed.flow?)
        };
        let mut w = Watch::of(&WatchEntry::default(), flow, &self.cfg);
        w.discard = p.discard;
        match self.source(&mut frame, layout, flow, tel, w) {
            Insertion::TooBig => None,
            _ => {
                self.stats.probes += 1;
                Some(frame)
            }
        }
    }

    /// A DSCP-marking source's check of a packet entering the domain: INT-marked DSCP without
    /// an INT header (INT v2.1 §"INT over TCP/UDP": "Any time a node forwards a packet into the
    /// INT domain and there is no INT header present, it must ensure that the DSCP/Traffic class
    /// value is not the same as any of the values used to indicate INT"). `true`: skip the
    /// packet (configured so); remarked packets go on to be processed.
    fn entering_marked(&mut self, frame: &mut [u8]) -> bool {
        if self.cfg.role != Role::Source || !self.marks_dscp {
            return false;
        }
        let plain = DetectConfig {
            dscp: None,
            ..self.detect.clone()
        };
        let Some(ip) = Packet::parse(frame, Start::Ethernet, &plain)
            .ok()
            .and_then(|p| p.ip)
            .filter(|ip| self.detect.dscp.is_some_and(|m| m.matches(ip.dscp)))
        else {
            return false;
        };
        if Packet::parse(frame, Start::Ethernet, &self.detect).is_ok_and(|p| p.int.is_some()) {
            return false;
        }
        self.stats.marked_without_int += 1;
        match self.cfg.dscp_marked_without_int {
            MarkedWithoutInt::Remark => {
                frame::set_dscp_at(frame, ip.offset, ip.version == 6, self.cfg.remark(ip.dscp));
                false
            }
            MarkedWithoutInt::Skip => true,
        }
    }

    /// Processes one Ethernet frame in place.
    pub fn process(&mut self, frame: &mut Vec<u8>, tel: &dyn Telemetry) -> Outcome {
        self.stats.frames += 1;
        let mut out = Outcome {
            forward: true,
            reports: Vec::new(),
            synthetic: Vec::new(),
            destination: None,
        };
        if self.entering_marked(frame) {
            self.stats.untouched += 1;
            return out;
        }
        let (flow, inner_flow, located) = match Packet::parse(frame, Start::Ethernet, &self.detect)
        {
            Ok(p) => (
                p.flow,
                p.inner_flow,
                p.int
                    .map(|(off, b)| (off, b.shim, b.header, Layout::of(&p)))
                    .map(Some)
                    .ok_or_else(|| Layout::of(&p).zip(p.flow)),
            ),
            Err(_) => {
                self.stats.malformed += 1;
                return out;
            }
        };
        let layout = match &located {
            Ok(Some((_, _, _, l))) => *l,
            Err(Some((l, _))) => Some(*l),
            _ => None,
        };
        if layout.is_some_and(|l| !frame::consistent(frame, &l)) {
            // Lengths that disagree: nothing this node writes would be right.
            self.stats.malformed += 1;
            return out;
        }
        // Report traffic is never watched nor queue-reported (a report about a report would
        // follow it through every congested queue).
        let report_traffic =
            matches!(&located, Err(Some((layout, _))) if self.is_report(layout, frame));
        // The watchlist entry of an INT-free packet, with the node's defaults filled in.
        let watch = match &located {
            Err(Some((_, flow))) if !report_traffic => self.watched(tel, flow, inner_flow.as_ref()),
            _ => None,
        };
        // SD-Fabric: "all subsequent packets in the same queue will be reported, independently
        // of the watchlist, up to the quota" — unless the packet's own entry opts out.
        let congested = self.filter.has_queues()
            && !report_traffic
            && watch.as_ref().is_none_or(|w| w.wants.queue)
            && self.congested(tel);
        match (self.cfg.role, located, watch) {
            (_, Err(Some(_)), Some(w)) if w.mode == Mode::Xd => {
                // INT-XD: a postcard with this node's metadata; the packet is untouched.
                let n = out.reports.len();
                out.reports.extend(self.report(
                    frame,
                    w.instructions,
                    tel,
                    true,
                    Some(w.key),
                    w.wants.flow,
                    congested,
                    DsFields::of_watch(&w, None),
                ));
                self.stats.postcards += (out.reports.len() - n) as u64;
            }
            // INT after TCP/UDP needs TCP/UDP; GRE carries any IP packet.
            (Role::Source, Err(Some((layout, flow))), Some(w))
                if (layout.is_tcp_udp() || w.encap == SourceEncap::Gre)
                    && (w.encap != SourceEncap::VxlanGpe
                        || self.vxlan(frame, &layout).is_some())
                    && (w.encap != SourceEncap::Geneve || self.geneve(frame, &layout)) =>
            {
                let instructions = w.instructions;
                let mx = w.mode == Mode::Mx;
                let (key, wants) = (w.key, w.wants);
                let (ds_id, ds_instruction, ds_flags) = (w.ds_id, w.ds_instruction, w.ds_flags);
                let inserted = w.ds_metadata.clone();
                let insertion = if w.clone {
                    // INT v2.1 §"INT Applied to Synthetic Traffic": the packet goes on as it is;
                    // a copy carries INT, marked D for the sink to discard after reporting.
                    let mut copy = frame.clone();
                    let insertion = self.source(&mut copy, layout, flow, tel, w);
                    if insertion != Insertion::TooBig {
                        out.synthetic.push(copy);
                        self.stats.clones += 1;
                    }
                    insertion
                } else {
                    self.source(frame, layout, flow, tel, w)
                };
                self.count(insertion);
                if mx {
                    // INT-MX: the source reports its own metadata too.
                    let reported = out.synthetic.last().map_or(frame.as_slice(), Vec::as_slice);
                    let n = out.reports.len();
                    out.reports.extend(self.report(
                        reported,
                        instructions,
                        tel,
                        true,
                        Some(key),
                        wants.flow,
                        congested,
                        DsFields {
                            id: ds_id,
                            instruction: ds_instruction,
                            flags: ds_flags,
                            mx_body: Some(&inserted),
                        },
                    ));
                    self.stats.mx_reports += (out.reports.len() - n) as u64;
                } else {
                    // INT-MD: the packet's metadata goes to the sink; a queue report goes now.
                    let reported = out.synthetic.last().map_or(frame.as_slice(), Vec::as_slice);
                    let r = self.queue_report(reported, tel, congested, true);
                    out.reports.extend(r);
                }
            }
            (Role::Transit, Ok(Some((off, shim, IntHeader::Md(h), Some(l)))), _)
                if self.cfg.on_mtu_exceeded == MtuAction::IntermediateReport
                    && h.remaining_hop_count > 0
                    && Self::ip_packet_len(frame, &l) + usize::from(h.hop_ml) * 4
                        > self.cfg.mtu =>
            {
                out.reports
                    .push(self.intermediate_report(frame, &l, off, shim, h, tel));
                // The intermediate report is about the stack, not this queue.
                out.reports
                    .extend(self.queue_report(frame, tel, congested, true));
            }
            (Role::Transit, Ok(Some((off, shim, IntHeader::Md(h), Some(l)))), _) => {
                if congested {
                    out.reports
                        .extend(self.queue_report(frame, tel, congested, true));
                }
                self.transit(frame, &l, off, shim, h, tel)
            }
            (Role::Transit, Ok(Some((off, shim, IntHeader::Mx(h), l))), _) => {
                let n = out.reports.len();
                let body = mx_body(frame, off, shim);
                out.reports.extend(self.report(
                    frame,
                    h.instructions,
                    tel,
                    true,
                    flow,
                    true,
                    congested,
                    DsFields::of_mx(&h, Some(body)),
                ));
                self.stats.mx_reports += (out.reports.len() - n) as u64;
                if let Some(l) = l {
                    self.set_mx_ds_flags(frame, &l, off, &h);
                }
            }
            (Role::Sink, Ok(Some((off, shim, IntHeader::Md(h), Some(l)))), _) => {
                if self.cfg.sink_metadata == SinkMetadata::Stack {
                    // Option 1: push our metadata like a transit hop, then report the stack.
                    self.transit(frame, &l, off, shim, h, tel);
                }
                let own = self.cfg.sink_metadata == SinkMetadata::Report;
                let ds = if own {
                    DsFields::of_md(&h)
                } else {
                    DsFields::default()
                };
                out.reports.extend(self.report(
                    frame,
                    h.instructions,
                    tel,
                    own,
                    flow,
                    true,
                    congested,
                    ds,
                ));
                out.destination = self.consume_destination(frame, off, shim);
                self.strip(frame);
                if h.d {
                    self.stats.discarded += 1;
                    out.forward = false;
                }
            }
            (Role::Sink, Ok(Some((off, shim, IntHeader::Mx(h), _))), _) => {
                let n = out.reports.len();
                let body = mx_body(frame, off, shim);
                out.reports.extend(self.report(
                    frame,
                    h.instructions,
                    tel,
                    true,
                    flow,
                    true,
                    congested,
                    DsFields::of_mx(&h, Some(body)),
                ));
                self.stats.mx_reports += (out.reports.len() - n) as u64;
                out.destination = self.consume_destination(frame, off, shim);
                self.strip(frame);
                if h.d {
                    self.stats.discarded += 1;
                    out.forward = false;
                }
            }
            (_, located, watch) => {
                self.stats.untouched += 1;
                // Watched by the source's watchlist (INT in the packet) or this node's.
                let tracked = matches!(located, Ok(Some(_))) || watch.is_some();
                out.reports
                    .extend(self.queue_report(frame, tel, congested, tracked));
            }
        }
        self.stats.reports += out.reports.len() as u64;
        out
    }

    /// The watchlist entry matching an INT-free packet's flow (`inner`: the flow inside its
    /// tunnel), with the node's settings filled in.
    fn watched(
        &self,
        tel: &dyn Telemetry,
        flow: &FlowKey,
        inner: Option<&FlowKey>,
    ) -> Option<Watch> {
        // The ingress interface only when an entry asks for one (it costs a device read).
        let ingress = if self.watch_by_ingress {
            tel.hop(self.cfg.node_id).l1_ingress_if
        } else {
            None
        };
        let gtpu = flow.proto == 17
            && self
                .detect
                .gtpu_port
                .is_some_and(|p| p == flow.dst_port || p == flow.src_port);
        watch_entry(&self.watch, flow, inner, gtpu, ingress)
            .map(|(w, key)| Watch::of(w, key, &self.cfg))
    }

    /// Whether the packet's queue is congested and its quota allows a queue report (the quota
    /// is spent).
    fn congested(&mut self, tel: &dyn Telemetry) -> bool {
        let hop = tel.hop(self.cfg.node_id);
        self.filter.queue(
            u32::from(hop.l1_egress_if.unwrap_or(0)),
            hop.queue_id.unwrap_or(0),
            hop.hop_latency.unwrap_or(0),
        )
    }

    /// SD-Fabric's queue congestion report (Q) about a packet that gets no other report from
    /// this node, watched (`tracked`: F) or not, with this node's metadata as the node's
    /// instruction bitmap asks.
    fn queue_report(
        &mut self,
        frame: &[u8],
        tel: &dyn Telemetry,
        congested: bool,
        tracked: bool,
    ) -> Option<Vec<u8>> {
        if !congested {
            return None;
        }
        let hop = tel.hop(self.cfg.node_id);
        let bits = self.cfg.instructions & !NODE_ID & !BIT15 & hop.available_bits();
        let flags = ReportFlags {
            congested: true,
            tracked,
            ..ReportFlags::default()
        };
        self.stats.queue_reports += 1;
        Some(self.build_report(frame, &hop, bits, flags, &DsReport::default()))
    }

    /// The domain-specific part of this node's report: for a known domain its export metadata
    /// and the source-inserted metadata to report, with the DS Flags it sets; otherwise DSMdBits
    /// 0 (Report v2.0 §"Individual Report Main Contents": a node not knowing the domain may "Set
    /// the Telemetry Report DSMdBits field to zero").
    fn ds_report(&self, f: DsFields<'_>) -> DsReport {
        match self.domain(f.id) {
            Some(d) => d.report(
                f.instruction,
                f.flags | d.set_ds_flags,
                f.mx_body,
                self.cfg.role == Role::Sink,
            ),
            None => DsReport {
                id: f.id,
                bits: 0,
                status: f.flags,
                md: Vec::new(),
            },
        }
    }

    /// INT v2.1 §"INT-MX Header Format": "Intermediate transit nodes may set bits in the DS
    /// Flags field" — a known domain's, with the L4 (or GRE) checksum kept right.
    fn set_mx_ds_flags(&self, frame: &mut [u8], l: &Layout, off: usize, h: &MxHeaderRepr) {
        let Some(d) = self.domain(h.ds_id) else {
            return;
        };
        let flags = h.ds_flags | d.set_ds_flags;
        if flags != h.ds_flags {
            let at = off + SHIM_LEN + MX_DS_FLAGS_AT;
            frame::payload_overwrite(frame, l, at, &flags.to_be_bytes());
        }
    }

    /// The body of the Destination header after the TCP/UDP INT block at `off`, which the sink
    /// consumes (INT v2.1 §"INT Header Types").
    fn consume_destination(&mut self, frame: &[u8], off: usize, shim: AnyShim) -> Option<Vec<u8>> {
        let AnyShim::V2(Shim::TcpUdp(_)) = shim else {
            return None;
        };
        // The shim as it is now (a sink pushing its metadata on the stack made it longer).
        let d = self.destination_after(frame, off)?;
        self.stats.destinations += 1;
        Some(d.body().to_vec())
    }

    /// The Destination header after the TCP/UDP INT block at `off`, when this sink expects them
    /// (`destination_headers`: the spec signals none, so a payload starting like one must not be
    /// taken for one) and it repeats the block's shim (NPT and field), as sources write it.
    fn destination_after<'f>(&self, frame: &'f [u8], off: usize) -> Option<Destination<&'f [u8]>> {
        if !self.cfg.destination_headers {
            return None;
        }
        // The shim as it is now (a sink pushing its metadata on the stack made it longer).
        let shim = TcpUdpShimRepr::parse(&TcpUdpShim::new_checked(frame.get(off..)?).ok()?);
        let end = off + SHIM_LEN + usize::from(shim.length) * 4;
        Destination::new_checked(frame.get(end..)?)
            .ok()
            .filter(|d| d.npt() == shim.npt && d.content() == shim.content)
    }

    fn is_report(&self, l: &Layout, frame: &[u8]) -> bool {
        l.proto == 17
            && self
                .cfg
                .report_ports
                .contains(&frame::get16(frame, l.l4_at + 2))
    }

    fn ip_packet_len(frame: &[u8], l: &Layout) -> usize {
        if l.v6 {
            40 + usize::from(frame::get16(frame, l.ip_at + 4))
        } else {
            usize::from(frame::get16(frame, l.ip_at + 2))
        }
    }

    /// INT v2.1 §"INT Source Node" and §"MTU Settings": no INT when the fixed headers do not fit;
    /// M bit when this node's own metadata does not.
    fn source(
        &mut self,
        frame: &mut Vec<u8>,
        l: Layout,
        flow: FlowKey,
        tel: &dyn Telemetry,
        w: Watch,
    ) -> Insertion {
        let instructions = w.instructions;
        let mx = w.mode == Mode::Mx;
        let domain = self.domain(w.ds_id);
        // INT-MD: this hop's baseline metadata, its domain-specific export metadata (the entry's,
        // else the known domain's values), and the Checksum Complement last; then the
        // 'source-only' metadata outside Hop ML. INT-MX: the domain's source-inserted metadata
        // after the header.
        let ds_hop = match domain {
            _ if mx || !w.ds_metadata.is_empty() => w.ds_metadata.clone(),
            Some(d) => {
                let mut v = vec![0u8; d.len_of(w.ds_instruction, DsMode::Export).unwrap_or(0)];
                if !d.fill_export(w.ds_instruction, &mut v) {
                    v.clear();
                }
                v
            }
            None => Vec::new(),
        };
        let source_only: &[u8] = if mx { &[] } else { &w.source_only };
        let ds_flags = w.ds_flags | domain.map_or(0, |d| d.set_ds_flags);
        let hop_ml = ((Format::IntV2.baseline_len(instructions) + ds_hop.len()) / 4) as u8;
        let encap = match (w.encap, l.proto) {
            (SourceEncap::UdpPort, 6) => SourceEncap::UdpNew,
            (e, _) => e,
        };
        // What goes in front of the shim: a new UDP header, a probe marker, or an outer IP
        // header and GRE.
        // A GRE packet already: INT goes behind its GRE header (scenario 1, G = 0).
        let existing_gre = encap == SourceEncap::Gre && l.proto == frame::GRE;
        let new_udp = match (encap, l.v6) {
            (SourceEncap::UdpNew | SourceEncap::ProbeMarker, _) => 8,
            (SourceEncap::Gre, _) if existing_gre => 0,
            (SourceEncap::Gre, false) => 20 + 4,
            (SourceEncap::Gre, true) => 40 + 4,
            _ => 0,
        };
        let source_inserted = if mx { w.ds_metadata.len() } else { 0 };
        // INT v2.1 §"INT Header Types": a Destination header follows the MD or MX header (after
        // TCP/UDP only: the other shims have no type-2 form defined).
        let destination = match encap {
            SourceEncap::Dscp
            | SourceEncap::UdpPort
            | SourceEncap::UdpNew
            | SourceEncap::ProbeMarker
                if !w.destination.is_empty() =>
            {
                Some(&w.destination[..])
            }
            _ => None,
        };
        let dest_len = destination.map_or(0, |d| SHIM_LEN + d.len());
        let fixed = new_udp + SHIM_LEN + MD_HEADER_LEN + source_inserted + dest_len;
        let ip_len = Self::ip_packet_len(frame, &l);
        if ip_len + fixed > self.cfg.mtu {
            return Insertion::TooBig;
        }
        let mut own = Vec::new();
        if mx {
            own.extend_from_slice(&w.ds_metadata);
        } else {
            own.resize(usize::from(hop_ml) * 4, 0);
            let mut hop = tel.hop(self.cfg.node_id);
            hop.domain = &ds_hop;
            hop.encode(instructions, Format::IntV2, &mut own);
        }
        // A Geneve option holds at most 124 bytes (5-bit Length): the header, the source's hop
        // and as many more hops as fit (INT v2.1 §"INT over Geneve").
        let geneve_hops = if encap == SourceEncap::Geneve && hop_ml > 0 {
            (GENEVE_OPTION_MAX - MD_HEADER_LEN).saturating_sub(source_only.len())
                / (usize::from(hop_ml) * 4)
        } else {
            usize::MAX
        };
        let fits = ip_len + fixed - source_inserted + own.len() + source_only.len() <= self.cfg.mtu
            && geneve_hops > 0;
        let mut header = MdHeaderRepr {
            version: 2,
            hop_ml,
            remaining_hop_count: w.max_hops.min(geneve_hops.min(255) as u8),
            instructions,
            ds_id: w.ds_id,
            ds_instruction: w.ds_instruction,
            ds_flags,
            d: w.discard,
            ..Default::default()
        };
        let insertion = if mx || (fits && header.remaining_hop_count > 0) {
            header.remaining_hop_count = header.remaining_hop_count.saturating_sub(1);
            Insertion::Full
        } else {
            if !fits {
                header.m = true;
            }
            own.clear();
            Insertion::NoMetadata
        };
        // The source-only metadata goes with the source's hop (none without it).
        let source_only = if own.is_empty() || mx {
            &[][..]
        } else {
            source_only
        };
        let words = ((MD_HEADER_LEN + own.len() + source_only.len()) / 4) as u8;
        let int_type = if mx { 3 } else { 1 };
        let (npt, content) = match encap {
            SourceEncap::Dscp | SourceEncap::ProbeMarker => {
                (0, u16::from(frame::dscp(frame, &l)) << 2)
            }
            SourceEncap::UdpPort => (1, frame::get16(frame, l.l4_at + 2)),
            SourceEncap::UdpNew => (2, u16::from(l.proto)),
            SourceEncap::Gre | SourceEncap::VxlanGpe | SourceEncap::Geneve => (0, 0),
        };
        let vxlan = self.vxlan(frame, &l);
        let shim = if let (SourceEncap::VxlanGpe, Some((was_vxlan, next))) = (encap, vxlan) {
            Shim::Gpe(GpeShimRepr {
                int_type,
                reserved: 0,
                length: words,
                g: was_vxlan,
                reserved2: 0,
                next_protocol: next,
            })
        } else if encap == SourceEncap::Geneve {
            Shim::Geneve(GeneveOptionRepr {
                option_class: GENEVE_INT_OPTION_CLASS,
                option_type: int_type,
                reserved: 0,
                length: words,
            })
        } else if encap == SourceEncap::Gre {
            // G = 1: this source added the GRE header; the sink removes it again.
            Shim::Gre(GreShimRepr {
                int_type,
                g: !existing_gre,
                reserved: 0,
                length: words,
                next_protocol: if existing_gre {
                    frame::get16(frame, l.l4_at + 2)
                } else if l.v6 {
                    0x86dd
                } else {
                    0x0800
                },
            })
        } else {
            Shim::TcpUdp(TcpUdpShimRepr {
                int_type,
                npt,
                reserved: 0,
                length: words,
                content,
            })
        };
        let mut block = vec![0u8; SHIM_LEN + MD_HEADER_LEN];
        shim.emit(&mut block[..4]);
        if mx {
            MxHeaderRepr {
                version: 2,
                instructions,
                ds_id: w.ds_id,
                ds_instruction: w.ds_instruction,
                ds_flags,
                d: w.discard,
                ..MxHeaderRepr::default()
            }
            .emit(&mut block[4..16]);
        } else {
            header.emit(&mut block[4..16]);
        }
        block.extend_from_slice(&own);
        block.extend_from_slice(source_only);
        if let Some(body) = destination {
            let d = DestinationRepr {
                npt,
                content,
                body: body.to_vec(),
            };
            let at = block.len();
            block.resize(at + d.buffer_len(), 0);
            if d.emit(&mut block[at..]).is_err() {
                // Validation keeps bodies to whole words within the shim's Length.
                block.truncate(at);
            }
        }
        if encap == SourceEncap::ProbeMarker {
            let marker = self.cfg.probe_marker().unwrap_or(0).to_be_bytes();
            block.splice(0..0, marker);
        }
        match encap {
            SourceEncap::Dscp | SourceEncap::UdpPort | SourceEncap::ProbeMarker => {
                let hop_end = block.len() - source_only.len() - dest_len;
                let hop_end = (!own.is_empty()).then_some(hop_end);
                self.insert_after_l4(frame, &l, encap, &mut block, hop_end, instructions);
            }
            SourceEncap::Geneve => {
                if !insert_geneve(frame, &l, &block) {
                    return Insertion::TooBig;
                }
            }
            SourceEncap::VxlanGpe => self.insert_vxlan_gpe(frame, &l, &block),
            SourceEncap::Gre if existing_gre => self.insert_behind_gre(frame, &l, &block),
            SourceEncap::Gre => self.insert_gre(frame, &l, &block),
            SourceEncap::UdpNew => self.insert_udp(frame, &l, &flow, &block),
        }
        insertion
    }

    /// INT v2.1 §"INT over TCP/UDP": the block right after the TCP/UDP header, announced by the
    /// DSCP (NPT 0), the UDP destination port (NPT 1) or the probe marker in front of it; the
    /// L4 checksum updated, or kept with the Checksum Complement at `hop_end`.
    fn insert_after_l4(
        &self,
        frame: &mut Vec<u8>,
        l: &Layout,
        encap: SourceEncap,
        block: &mut [u8],
        hop_end: Option<usize>,
        instructions: u16,
    ) {
        let at = l.l4_at + l.l4_len;
        let old_len = frame::l4_len(frame, l);
        let new_len = old_len + block.len() as u16;
        let csum_at = l.l4_checksum_at();
        let udp = l.proto == 17;
        let old_csum = frame::get16(frame, csum_at);
        let mut csum =
            frame::updated_l4_checksum(old_csum, udp, &[], block, old_len, new_len, udp);
        if encap == SourceEncap::UdpPort {
            let old_port = frame::get16(frame, l.l4_at + 2);
            frame::set16(frame, l.l4_at + 2, self.cfg.int_udp_port);
            if csum != 0 {
                csum = intscope_wire::checksum::update(
                    csum,
                    &old_port.to_be_bytes(),
                    &self.cfg.int_udp_port.to_be_bytes(),
                );
                csum = intscope_wire::checksum::udp_wire_checksum(csum);
            }
        }
        if udp {
            frame::set16(frame, l.l4_at + 4, new_len);
        }
        if let Some(end) = hop_end
            && self.complements(instructions, udp, old_csum)
        {
            // The checksum stays; the last word of our hop's metadata makes it right.
            let c = intscope_wire::checksum::checksum_complement(old_csum, csum);
            block[end - 4..end].copy_from_slice(&c.to_be_bytes());
        } else {
            frame::set16(frame, csum_at, csum);
        }
        frame::insert(frame, at, block);
        frame::adjust_ip_len(frame, l, block.len() as isize);
        if encap == SourceEncap::Dscp {
            let marked = self.cfg.mark_dscp(frame::dscp(frame, l));
            frame::set_dscp(frame, l, marked);
        }
    }

    /// INT v2.1 §"INT over VXLAN GPE": the block after the VXLAN-GPE header.
    fn insert_vxlan_gpe(&self, frame: &mut Vec<u8>, l: &Layout, block: &[u8]) {
        // The VXLAN(-GPE) header now announces INT (P bit, next protocol 0x82); VXLAN
        // becomes VXLAN-GPE on its port. The block follows the 8-byte header.
        let vx = l.l4_at + 8;
        let mut header: [u8; 8] = frame[vx..vx + 8].try_into().unwrap_or_default();
        header[0] |= 0x04;
        header[3] = GPE_NEXT_PROTO_INT;
        let port = self.detect.vxlan_gpe_port.to_be_bytes();
        frame::udp_overwrite(frame, l, l.l4_at + 2, &port);
        frame::udp_overwrite(frame, l, vx, &header);
        frame::udp_insert(frame, l, vx + 8, block);
    }

    /// INT v2.1 §"INT over IPv4/GRE", scenario 1: a GRE packet gets the block behind its GRE
    /// header.
    fn insert_behind_gre(&self, frame: &mut Vec<u8>, l: &Layout, block: &[u8]) {
        // INT v2.1 §"INT over IPv4/GRE", scenario 1: behind the GRE header (and its
        // optional fields), whose protocol type becomes TBD_INT.
        let flags = frame[l.l4_at];
        let gre_len = 4 + 4
            * (usize::from(flags & 0x80 != 0)
                + usize::from(flags & 0x20 != 0)
                + usize::from(flags & 0x10 != 0));
        frame::set16(frame, l.l4_at + 2, self.cfg.int_gre_proto);
        frame::insert(frame, l.l4_at + gre_len, block);
        frame::payload_resized(frame, l, block.len() as isize);
    }

    /// INT v2.1 §"INT over IPv4/GRE", scenario 2: a new outer IP header and GRE in front.
    fn insert_gre(&self, frame: &mut Vec<u8>, l: &Layout, block: &[u8]) {
        // INT v2.1 §"INT over IPv4/GRE", scenario 2: an outer IP header (the packet's
        // own, carrying GRE) and a GRE header with protocol type TBD_INT in front of
        // the original IP packet, which is not touched.
        let inner_len = Self::ip_packet_len(frame, l);
        let outer_len = if l.v6 { 40 } else { 20 };
        let mut ins = frame[l.ip_at..l.ip_at + outer_len].to_vec();
        let added = outer_len + 4 + block.len();
        if l.v6 {
            ins[6] = frame::GRE;
            let payload = (inner_len + 4 + block.len()) as u16;
            ins[4..6].copy_from_slice(&payload.to_be_bytes());
        } else {
            ins[0] = 0x45; // options stay with the inner header
            ins[9] = frame::GRE;
            ins[2..4].copy_from_slice(&((inner_len + added) as u16).to_be_bytes());
        }
        ins.extend_from_slice(&[0, 0]);
        ins.extend_from_slice(&self.cfg.int_gre_proto.to_be_bytes());
        ins.extend_from_slice(block);
        frame::insert(frame, l.ip_at, &ins);
        if !l.v6 {
            frame::refresh_ipv4_checksum(frame, l.ip_at);
        }
    }

    /// INT v2.1 §"INT over TCP/UDP", NPT 2: a new UDP header in front of the original L4 header.
    fn insert_udp(&self, frame: &mut Vec<u8>, l: &Layout, flow: &FlowKey, block: &[u8]) {
        // RFC 6936 / INT v2.1: the new UDP header's checksum is zero; the original L4
        // header keeps its own, still valid (same addresses, same segment).
        let seg = frame::l4_len(frame, l);
        let mut udp = [0u8; 8];
        let h = {
            use std::hash::{Hash, Hasher};
            let mut s = std::collections::hash_map::DefaultHasher::new();
            flow.hash(&mut s);
            s.finish()
        };
        udp[0..2].copy_from_slice(&(0xc000 | (h as u16 & 0x3fff)).to_be_bytes());
        udp[2..4].copy_from_slice(&self.cfg.int_udp_port.to_be_bytes());
        udp[4..6].copy_from_slice(&(8 + block.len() as u16 + seg).to_be_bytes());
        let mut ins = udp.to_vec();
        ins.extend_from_slice(block);
        frame::insert(frame, l.l4_at, &ins);
        frame::adjust_ip_len(frame, l, ins.len() as isize);
        frame::set_ip_proto(frame, l, 17);
    }

    /// A VXLAN (RFC 7348) or VXLAN-GPE packet without INT: whether it is plain VXLAN, and the
    /// next protocol of what it carries (VXLAN: Ethernet).
    fn vxlan(&self, frame: &[u8], l: &Layout) -> Option<(bool, u8)> {
        if l.proto != 17 || frame.len() < l.l4_at + 16 {
            return None;
        }
        let port = frame::get16(frame, l.l4_at + 2);
        let header = &frame[l.l4_at + 8..l.l4_at + 16];
        if port == self.detect.vxlan_port {
            Some((true, 0x03))
        } else if port == self.detect.vxlan_gpe_port && header[0] & 0x04 != 0 {
            Some((false, header[3]))
        } else {
            None
        }
    }

    /// A Geneve packet (RFC 8926) without INT.
    fn geneve(&self, frame: &[u8], l: &Layout) -> bool {
        l.proto == 17
            && frame.len() >= l.l4_at + 16
            && frame::get16(frame, l.l4_at + 2) == self.detect.geneve_port
    }

    fn count(&mut self, insertion: Insertion) {
        match insertion {
            Insertion::Full => self.stats.inserted += 1,
            Insertion::NoMetadata => self.stats.inserted_m += 1,
            Insertion::TooBig => self.stats.too_big += 1,
        }
    }

    /// INT v2.1 §"INT-MD Metadata Header Format": prepend metadata, decrement RHC; E bit at
    /// RHC 0 and M bit without room, adding nothing (and not decrementing).
    fn transit(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        shim: AnyShim,
        h: MdHeaderRepr,
        tel: &dyn Telemetry,
    ) {
        // The hot path: no allocation and no second parse. Only the shim and MD header change,
        // and this hop's metadata goes in right after them (the top of the stack), so the L4
        // checksum is updated from those bytes alone.
        const HEAD: usize = SHIM_LEN + MD_HEADER_LEN;
        let hop_len = usize::from(h.hop_ml) * 4;
        // INT v2.1 §"INT-MD Metadata Header Format": domain-specific metadata of a known domain
        // is this node's (its values, all ones where it has none, and its DS Flags set); of a
        // domain it does not know (Hop ML beyond the bitmap's), or for reserved instruction bits,
        // all ones — or, configured so, the hop skips INT processing altogether.
        let base = Format::IntV2.baseline_len(h.instructions);
        let ds_len = hop_len.saturating_sub(base);
        let known = match h.ds_id {
            0 => None,
            id => self.domains.iter().position(|d| {
                d.id == id && d.len_of(h.ds_instruction, DsMode::Export) == Some(ds_len)
            }),
        };
        let unknown_domain = ds_len > 0 && known.is_none();
        if (unknown_domain && self.cfg.unknown_domain == Unsupported::Skip)
            || (h.instructions & RESERVED_BITS != 0 && self.cfg.reserved_bits == Unsupported::Skip)
        {
            self.stats.skipped += 1;
            return;
        }
        let mut header = h;
        if let Some(i) = known {
            header.ds_flags |= self.domains[i].set_ds_flags;
        }
        let mut new = [0u8; HEAD + MAX_HOP_BYTES];
        let mut own = 0;
        if h.remaining_hop_count == 0 {
            header.e = true;
            self.stats.hop_limit += 1;
        } else if Self::ip_packet_len(frame, l) + hop_len > self.cfg.mtu
            || matches!(shim, AnyShim::V2(Shim::Geneve(g))
                if usize::from(g.length) * 4 + hop_len > GENEVE_OPTION_MAX)
        {
            // No room under the MTU, or in the Geneve option.
            header.m = true;
            self.stats.mtu += 1;
        } else {
            own = hop_len;
            let hop = &mut new[HEAD..HEAD + hop_len];
            if base <= hop_len {
                tel.hop(self.cfg.node_id)
                    .encode(h.instructions, Format::IntV2, hop);
                match known {
                    Some(i) => {
                        // Before the Checksum Complement, which stays last.
                        let at = base - if h.instructions & BIT15 != 0 { 4 } else { 0 };
                        let ds = &mut hop[at..at + ds_len];
                        self.domains[i].fill_export(h.ds_instruction, ds);
                    }
                    // A domain this node does not know: all ones (pad).
                    None => hop[base..].fill(0xff),
                }
            } else {
                hop.fill(0xff);
            }
            header.remaining_hop_count -= 1;
            self.stats.added += 1;
        }
        let mut old = [0u8; HEAD];
        old.copy_from_slice(&frame[off..off + HEAD]);
        new[..HEAD].copy_from_slice(&old);
        header.emit(&mut new[SHIM_LEN..HEAD]);
        if own > 0 {
            let mut s = shim_of(shim);
            s.set_length_words((s.length_words() + own / 4) as u8);
            s.emit(&mut new[..SHIM_LEN]);
        }
        if l.is_tcp_udp() {
            let old_len = frame::l4_len(frame, l);
            let new_len = old_len + own as u16;
            let udp = l.proto == 17;
            let csum_at = l.l4_checksum_at();
            let old_csum = frame::get16(frame, csum_at);
            let csum = frame::updated_l4_checksum(
                old_csum,
                udp,
                &old,
                &new[..HEAD + own],
                old_len,
                new_len,
                udp,
            );
            if own > 0 && self.complements(h.instructions, udp, old_csum) {
                let c = intscope_wire::checksum::checksum_complement(old_csum, csum);
                new[HEAD + own - 4..HEAD + own].copy_from_slice(&c.to_be_bytes());
            } else {
                frame::set16(frame, csum_at, csum);
            }
            if udp {
                frame::set16(frame, l.l4_at + 4, new_len);
            }
        }
        let new = &new[..HEAD + own];
        if matches!(shim, AnyShim::V2(Shim::Geneve(_))) && own > 0 {
            // The option grew: so do the Geneve header's options (checked above: it fits).
            frame::adjust_geneve_opt_len(frame, l, (own / 4) as isize);
        }
        frame[off..off + HEAD].copy_from_slice(&new[..HEAD]);
        frame::insert(frame, off + HEAD, &new[HEAD..]);
        frame::payload_resized(frame, l, own as isize);
    }

    /// INT v2.1 §"MTU Settings", the second choice of a transit hop without room for its
    /// metadata: report the stack collected so far with this hop's metadata in an Intermediate
    /// Report (I bit), and remove the stack from the packet, which goes on with an empty one.
    /// The report is not subject to the report filters: it carries other hops' metadata.
    fn intermediate_report(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        shim: AnyShim,
        h: MdHeaderRepr,
        tel: &dyn Telemetry,
    ) -> Vec<u8> {
        const HEAD: usize = SHIM_LEN + MD_HEADER_LEN;
        let hop = tel.hop(self.cfg.node_id);
        let bits = h.instructions & !NODE_ID & !BIT15 & hop.available_bits();
        let flags = ReportFlags {
            intermediate: true,
            tracked: true,
            flow: true,
            ..ReportFlags::default()
        };
        let ds = self.ds_report(DsFields::of_md(&h));
        let report = self.build_report(frame, &hop, bits, flags, &ds);
        self.stats.intermediate += 1;

        let mut s = shim_of(shim);
        let stack = s.length_words() * 4 - MD_HEADER_LEN;
        let mut head = [0u8; HEAD];
        head.copy_from_slice(&frame[off..off + HEAD]);
        s.set_length_words((MD_HEADER_LEN / 4) as u8);
        s.emit(&mut head[..SHIM_LEN]);
        if l.is_tcp_udp() {
            let old_len = frame::l4_len(frame, l);
            let new_len = old_len - stack as u16;
            let udp = l.proto == 17;
            let csum_at = l.l4_checksum_at();
            let csum = frame::updated_l4_checksum(
                frame::get16(frame, csum_at),
                udp,
                &frame[off..off + HEAD + stack],
                &head,
                old_len,
                new_len,
                udp,
            );
            frame::set16(frame, csum_at, csum);
            if udp {
                frame::set16(frame, l.l4_at + 4, new_len);
            }
        }
        frame[off..off + HEAD].copy_from_slice(&head);
        frame::remove(frame, off + HEAD, stack);
        frame::payload_resized(frame, l, -(stack as isize));
        report
    }

    /// Whether this node keeps the L4 checksum with the Checksum Complement (INT v2.1
    /// §"Checksum Update"): the source allows it (instruction bit 15), the configuration wants it,
    /// and there is a checksum to keep (a zero UDP checksum means none).
    fn complements(&self, instructions: u16, udp: bool, checksum: u16) -> bool {
        instructions & BIT15 != 0 && self.cfg.use_checksum_complement && !(udp && checksum == 0)
    }

    /// INT v2.1 §"INT Sink Node": remove INT and restore the original packet (DSCP, UDP
    /// destination port, or IP protocol with the new UDP header removed).
    fn strip(&mut self, frame: &mut Vec<u8>) -> Option<()> {
        let p = Packet::parse(frame, Start::Ethernet, &self.detect).ok()?;
        let l = Layout::of(&p)?;
        let (off, block) = p.int?;
        // A Destination header after a TCP/UDP block goes with it.
        let len = block.len
            + match block.shim {
                AnyShim::V2(Shim::TcpUdp(_)) => self
                    .destination_after(frame, off)
                    .map_or(0, |d| d.total_len()),
                _ => 0,
            };
        if let AnyShim::V2(Shim::Gre(g)) = block.shim {
            self.strip_gre(frame, &l, off, len, g);
            self.stats.sunk += 1;
            return Some(());
        }
        if let AnyShim::V2(Shim::Gpe(g)) = block.shim {
            self.strip_gpe(frame, &l, off, len, g)?;
            self.stats.sunk += 1;
            return Some(());
        }
        if let AnyShim::V2(Shim::Geneve(_)) = block.shim {
            // Remove the INT option; the Geneve header's options shrink by it.
            frame::adjust_geneve_opt_len(frame, &l, -((len / 4) as isize));
            frame::udp_remove(frame, &l, off, len);
            self.stats.sunk += 1;
            return Some(());
        }
        let AnyShim::V2(Shim::TcpUdp(s)) = block.shim else {
            return None;
        };
        match s.npt {
            2 => {
                // Remove the new UDP header with the INT block; the original L4 header follows.
                let removed = off + len - l.l4_at;
                frame::remove(frame, l.l4_at, removed);
                frame::adjust_ip_len(frame, &l, -(removed as isize));
                frame::set_ip_proto(frame, &l, s.ip_proto());
            }
            npt => {
                // A probe marker in front of the shim goes with it.
                let marker = self.cfg.probe_marker().map(u64::to_be_bytes);
                let (off, len) = match marker {
                    Some(m) if off >= l.l4_at + l.l4_len + 8 && frame[off - 8..off] == m => {
                        (off - 8, len + 8)
                    }
                    _ => (off, len),
                };
                let block = frame[off..off + len].to_vec();
                let old_len = frame::l4_len(frame, &l);
                let new_len = old_len - len as u16;
                let udp = l.proto == 17;
                let csum_at = l.l4_checksum_at();
                let mut csum = frame::updated_l4_checksum(
                    frame::get16(frame, csum_at),
                    udp,
                    &block,
                    &[],
                    old_len,
                    new_len,
                    udp,
                );
                if npt == 1 {
                    let int_port = frame::get16(frame, l.l4_at + 2);
                    frame::set16(frame, l.l4_at + 2, s.udp_port());
                    if csum != 0 {
                        csum = intscope_wire::checksum::udp_wire_checksum(
                            intscope_wire::checksum::update(
                                csum,
                                &int_port.to_be_bytes(),
                                &s.udp_port().to_be_bytes(),
                            ),
                        );
                    }
                }
                if udp {
                    frame::set16(frame, l.l4_at + 4, new_len);
                }
                frame::set16(frame, csum_at, csum);
                frame::remove(frame, off, len);
                frame::adjust_ip_len(frame, &l, -(len as isize));
                if npt == 0 && self.cfg.restore_dscp {
                    frame::set_dscp(frame, &l, s.dscp());
                }
            }
        }
        self.stats.sunk += 1;
        Some(())
    }

    /// INT v2.1 §"INT over IPv4/GRE": G = 1, the source added the GRE encapsulation — remove it
    /// with INT, leaving the original IP packet; G = 0, remove INT and give GRE back its protocol
    /// type (the shim's Next Protocol).
    fn strip_gre(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        len: usize,
        g: GreShimRepr,
    ) {
        if g.g {
            frame::remove(frame, l.ip_at, off + len - l.ip_at);
            // The EtherType in front of the IP header names what is there now.
            frame::set16(frame, l.ip_at - 2, g.next_protocol);
        } else {
            frame::remove(frame, off, len);
            frame::set16(frame, l.l4_at + 2, g.next_protocol);
            frame::payload_resized(frame, l, -(len as isize));
        }
    }

    /// INT v2.1 §"INT over VXLAN GPE": remove INT behind the VXLAN-GPE header and give the
    /// header back the next protocol the shim saved; G = 1, the packet was VXLAN: clear the P bit
    /// and the next protocol, and return to VXLAN's port.
    fn strip_gpe(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        len: usize,
        g: GpeShimRepr,
    ) -> Option<()> {
        let vx = l.l4_at + 8;
        if off != vx + 8 {
            return None;
        }
        let mut header: [u8; 8] = frame[vx..vx + 8].try_into().ok()?;
        header[3] = g.next_protocol;
        if g.g {
            header[0] &= !0x04;
            header[3] = 0;
            let port = self.detect.vxlan_port.to_be_bytes();
            frame::udp_overwrite(frame, l, l.l4_at + 2, &port);
        }
        frame::udp_overwrite(frame, l, vx, &header);
        frame::udp_remove(frame, l, off, len);
        Some(())
    }

    /// A drop report about a packet this node dropped, with the reason (SD-Fabric's codes):
    /// Report v2.0 with D set and RepMdBits bit 15 (queue ID + drop reason), or a v0.5 drop
    /// header. Only for watched packets unless `drop_reports = "all"` (a packet carrying INT was
    /// watched by its source), at most one per second per 5-tuple with the filters on.
    pub fn drop_report(
        &mut self,
        frame: &[u8],
        reason: u8,
        tel: &dyn Telemetry,
    ) -> Option<Vec<u8>> {
        let mut hop = tel.hop(self.cfg.node_id);
        // (watched, wants drop reports, the 5-tuple the filter counts).
        let (tracked, wanted, key) = match Packet::parse(frame, Start::Ethernet, &self.detect) {
            Ok(p) if p.int.is_some() => (true, true, p.flow),
            Ok(p) => match p.flow {
                Some(flow) => {
                    let report_traffic = Layout::of(&p).is_some_and(|l| self.is_report(&l, frame));
                    match self.watched(tel, &flow, p.inner_flow.as_ref()) {
                        _ if report_traffic => (false, false, None),
                        Some(w) => (true, w.wants.drop, Some(w.key)),
                        None => (false, true, Some(flow)),
                    }
                }
                None => (false, true, None),
            },
            Err(_) => (false, true, None),
        };
        if !wanted || (!tracked && self.cfg.drop_reports == DropReports::Watched) {
            self.stats.unwatched_drops += 1;
            return None;
        }
        if let Some(k) = key
            && !self.filter.drop(k, hop.ingress_ts.unwrap_or(0))
        {
            self.stats.filtered += 1;
            return None;
        }
        let bits = (self.cfg.instructions & !NODE_ID & hop.available_bits()) | BIT15;
        hop.drop_reason = Some(reason);
        hop.present |= BIT15;
        self.stats.reports += 1;
        let flags = ReportFlags {
            dropped: true,
            tracked,
            ..ReportFlags::default()
        };
        Some(self.build_report(frame, &hop, bits, flags, &DsReport::default()))
    }

    /// A report datagram about `frame` (as received, truncated) of a watched packet, with this
    /// node's metadata in the report header unless it went on the stack (`own` false): sent when
    /// a flow report is wanted (`want_flow`) and due for `flow` by the filters, or when the
    /// packet's queue is `congested` (Q).
    #[allow(clippy::too_many_arguments)]
    fn report(
        &mut self,
        frame: &[u8],
        instructions: u16,
        tel: &dyn Telemetry,
        own: bool,
        flow: Option<FlowKey>,
        want_flow: bool,
        congested: bool,
        ds: DsFields<'_>,
    ) -> Option<Vec<u8>> {
        let hop = tel.hop(self.cfg.node_id);
        // SD-Fabric's smart filters (off unless configured): once per interval per 5-tuple,
        // sooner on a change.
        let due = want_flow
            && flow.is_none_or(|f| {
                self.filter.flow(
                    f,
                    hop.ingress_ts.unwrap_or(0),
                    u32::from(hop.l1_ingress_if.unwrap_or(0)),
                    u32::from(hop.l1_egress_if.unwrap_or(0)),
                    hop.queue_id.unwrap_or(0),
                    hop.hop_latency.unwrap_or(0),
                )
            });
        if !due && !congested {
            self.stats.filtered += 1;
            return None;
        }
        // INT v2.1 §"INT-MX Header Format": RepMdBits from the Instruction Bitmap; Node ID moves
        // to the group header, bit 15 is no Checksum Complement here, and what this node cannot
        // provide (or is reserved) is cleared rather than sent as all ones.
        let bits = if own {
            instructions & !NODE_ID & !BIT15 & hop.available_bits()
        } else {
            0
        };
        let flags = ReportFlags {
            congested,
            tracked: true,
            flow: due,
            ..ReportFlags::default()
        };
        let ds = self.ds_report(ds);
        Some(self.build_report(frame, &hop, bits, flags, &ds))
    }

    fn build_report(
        &mut self,
        frame: &[u8],
        hop: &HopMetadata,
        bits: u16,
        flags: ReportFlags,
        ds: &DsReport,
    ) -> Vec<u8> {
        let inner = &frame[..frame.len().min(self.cfg.report_truncate)];
        let sequence = self.seq;
        self.seq = self.seq.wrapping_add(1);
        match self.cfg.report_format {
            ReportFormat::V2 => {
                let mut md = vec![0u8; Format::ReportV2.baseline_len(bits)];
                hop.encode(bits, Format::ReportV2, &mut md);
                md.extend_from_slice(&ds.md);
                self.report_v2(inner, sequence, bits, &md, flags, ds)
            }
            ReportFormat::V05 => self.report_v05(inner, sequence, hop, flags),
        }
    }

    /// Telemetry Report v2.0 (§"Telemetry Report Group Header", §"Individual Report Header"):
    /// one individual report, RepType INT, InType Ethernet; the inner packet padded to words.
    fn report_v2(
        &self,
        inner: &[u8],
        sequence: u32,
        bits: u16,
        md: &[u8],
        flags: ReportFlags,
        ds: &DsReport,
    ) -> Vec<u8> {
        let padded = inner.len().div_ceil(4) * 4;
        let words = (8 + md.len() + padded) / 4;
        let mut out = vec![0u8; 8 + 4 + 8];
        GroupHeaderRepr {
            version: 2,
            hw_id: 0,
            sequence: sequence & 0x3f_ffff,
            node_id: self.cfg.node_id,
        }
        .emit(&mut out[..8]);
        IndividualHeaderRepr {
            rep_type: 1,
            in_type: 3,
            report_length: if words > 254 { 0xff } else { words as u8 },
            md_length: (md.len() / 4) as u8,
            d: flags.dropped,
            q: flags.congested,
            // Report v2.0 §"Individual Report Header": F, "the packet matched a watchlist
            // somewhere (in case of INT-MD, INT-MX or IOAM) or locally (in case of INT-XD)".
            f: flags.tracked,
            i: flags.intermediate,
            reserved: 0,
        }
        .emit(&mut out[8..12]);
        // §"Individual Report Main Contents": the DS metadata follows the baseline's and counts
        // in MD Length; DSMdstatus carries the packet's DS Flags as this node leaves them.
        IntMainRepr {
            rep_md_bits: bits,
            ds_id: ds.id,
            ds_md_bits: ds.bits,
            ds_md_status: ds.status,
        }
        .emit(&mut out[12..20]);
        out.extend_from_slice(md);
        out.extend_from_slice(inner);
        out.resize(out.len() + padded - inner.len(), 0);
        out
    }

    /// Telemetry Report v0.5 as fabric-tna writes it (`p4src/shared/header.p4`: `report_fixed_header_t`,
    /// `local_report_header_t`, `drop_report_header_t`): NProto 2 with the switch-local header
    /// for flow and queue reports, NProto 1 with the drop header for drops; 32-bit timestamps
    /// (the low bits of the nanosecond clock) and 16-bit ports, as the Tofino fields are. v0.5 has
    /// no intermediate reports: one is sent as a flow report.
    fn report_v05(
        &self,
        inner: &[u8],
        sequence: u32,
        hop: &HopMetadata,
        flags: ReportFlags,
    ) -> Vec<u8> {
        let ReportFlags {
            dropped, congested, ..
        } = flags;
        let switch = V05SwitchRepr {
            switch_id: self.cfg.node_id,
            ingress_port: hop.l1_ingress_if.unwrap_or(0),
            egress_port: hop.l1_egress_if.unwrap_or(0),
            queue_id: hop.queue_id.unwrap_or(0),
            drop_reason: if dropped { hop.drop_reason } else { None },
            queue_occupancy: Some(hop.queue_occupancy.unwrap_or(0).min(0xff_ffff)),
            egress_ts: Some(hop.egress_ts.unwrap_or(0) as u32),
            pad: 0,
        };
        let switch_len = if dropped { V05_DROP_LEN } else { V05_LOCAL_LEN };
        let mut out = vec![0u8; V05_FIXED_LEN + switch_len];
        V05FixedRepr {
            version: 0,
            nproto: if dropped { 1 } else { 2 },
            d: dropped,
            q: congested,
            // fabric-tna's report type bits: F is a flow report.
            f: flags.flow,
            reserved: 0,
            hw_id: 0,
            sequence,
            ingress_ts: hop.ingress_ts.unwrap_or(0) as u32,
        }
        .emit(&mut out[..V05_FIXED_LEN]);
        switch.emit(&mut out[V05_FIXED_LEN..]);
        out.extend_from_slice(inner);
        out
    }
}

/// What a report says about its packet (Report v2.0 §"Individual Report Header": D, Q, I).
#[derive(Debug, Clone, Copy, Default)]
struct ReportFlags {
    /// D: the packet was dropped here.
    dropped: bool,
    /// Q: a queue report (the queue is congested).
    congested: bool,
    /// I: a transit hop's intermediate report of the stack so far.
    intermediate: bool,
    /// F (v2.0): the packet matched a watchlist, here or at its source.
    tracked: bool,
    /// A flow report (postcard) was due: v0.5's F, which is a report type there.
    flow: bool,
}

/// The domain fields of the INT header (or watchlist entry) a report is about, and the INT-MX
/// header's source-inserted metadata.
#[derive(Debug, Clone, Copy, Default)]
struct DsFields<'a> {
    id: u16,
    instruction: u16,
    flags: u16,
    mx_body: Option<&'a [u8]>,
}

impl<'a> DsFields<'a> {
    fn of_watch(w: &Watch, mx_body: Option<&'a [u8]>) -> Self {
        DsFields {
            id: w.ds_id,
            instruction: w.ds_instruction,
            flags: w.ds_flags,
            mx_body,
        }
    }

    fn of_md(h: &MdHeaderRepr) -> Self {
        DsFields {
            id: h.ds_id,
            instruction: h.ds_instruction,
            flags: h.ds_flags,
            mx_body: None,
        }
    }

    fn of_mx(h: &MxHeaderRepr, mx_body: Option<&'a [u8]>) -> Self {
        DsFields {
            id: h.ds_id,
            instruction: h.ds_instruction,
            flags: h.ds_flags,
            mx_body,
        }
    }
}

/// The source-inserted metadata of an INT-MX block at `off` (after its shim and header).
fn mx_body(frame: &[u8], off: usize, shim: AnyShim) -> &[u8] {
    let end = off + SHIM_LEN + shim_of(shim).length_words() * 4;
    frame
        .get(off + SHIM_LEN + MX_HEADER_LEN..end)
        .unwrap_or_default()
}

/// Where DS Flags sit in the INT-MX header (INT v2.1 §"INT-MX Header Format": the last 16 bits
/// of its 12 bytes).
const MX_DS_FLAGS_AT: usize = 10;

/// The longest Geneve option: a 5-bit Length of 4-byte words.
const GENEVE_OPTION_MAX: usize = 31 * 4;

/// The most metadata one hop adds: Hop ML is 5 bits of 4-byte words (INT v2.1 §"INT-MD Metadata
/// Header Format").
const MAX_HOP_BYTES: usize = 31 * 4;

fn shim_of(s: AnyShim) -> Shim {
    match s {
        AnyShim::V2(s) => s,
        AnyShim::Legacy(_) => Shim::TcpUdp(TcpUdpShimRepr {
            int_type: 1,
            npt: 0,
            reserved: 0,
            length: 0,
            content: 0,
        }),
    }
}

/// INT v2.1 §"INT over Geneve": the block as an option after the existing ones; `false` when the
/// base header's Opt Len cannot grow by it.
fn insert_geneve(frame: &mut Vec<u8>, l: &Layout, block: &[u8]) -> bool {
        // After the existing options; the base header's Opt Len grows by the option.
        let at = l.l4_at + 16 + usize::from(frame[l.l4_at + 8] & 0x3f) * 4;
        if !frame::adjust_geneve_opt_len(frame, l, (block.len() / 4) as isize) {
            return false;
        }
        frame::udp_insert(frame, l, at, block);
        true
}
