//! A node over one frame: [`Node::process`] parses it once, applies the report filters and the
//! watchlist, and hands it to its role, one module each:
//! - `watch`: the watchlist and `watch_subnets` (Report v2.0 §"Telemetry Report Associations"),
//!   each entry resolved once with the node's defaults;
//! - `source`: INT v2.1 §"INT Source Node" as plan, build, insert (one function per
//!   encapsulation); clones and probes;
//! - `transit`: §"INT Transit Hop Node", §"MTU Settings" (M bit or intermediate report);
//! - `sink`: §"INT Sink Node", the original packet restored, the Destination header consumed;
//! - `postcard`: INT-XD postcards and INT-MX reports;
//! - `report`: Telemetry Report v2.0 / v0.5 export — flow, queue, drop, intermediate reports.
//!
//! Report filters are [`crate::filter`], known INT domains [`crate::domain`], the byte editing
//! with its length and checksum upkeep [`crate::frame`].

use intscope_wire::Warning;
use intscope_wire::int::{AnyShim, IntHeader};
use intscope_wire::locate::{DetectConfig, DscpMatch, FlowKey, Packet, Start};
use intscope_wire::shim::{Shim, TcpUdpShimRepr};

use crate::config::{
    ConfigError, MarkedWithoutInt, Mode, MtuAction, NodeConfig, Role, SinkMetadata, SourceEncap,
    WatchEntry,
};
use crate::domain::Domain;
use crate::filter::ReportFilter;
use crate::frame::{self, Layout};
use crate::telemetry::Telemetry;

mod postcard;
mod report;
mod sink;
mod source;
mod transit;
mod watch;

use report::mx_body;
use report::{About, ReportRequest};
use source::Insertion;
use watch::{Resolved, Watch, Watchlist};

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

/// Counters of a node. Every frame lands in exactly one of `untouched`, `inserted`, `inserted_m`,
/// `too_big`, `added`, `hop_limit`, `mtu`, `skipped`, `intermediate`, `report_only`, `sunk`,
/// `fragments` and `malformed` (`discarded` frames are among the `sunk`); the others count reports and synthetic
/// packets.
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
    /// IP fragments (IPv4 or IPv6, first or later), forwarded unchanged: no INT is inserted,
    /// added to or removed from a fragment, since moving its bytes would break reassembly.
    pub fragments: u64,
    /// Frames this node reports on without adding metadata, forwarded unchanged but for DS
    /// Flags: INT-XD watched packets (postcards) and INT-MX packets at a transit hop.
    pub report_only: u64,
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
    /// The same without the DSCP marking: where a DSCP value is not this node's INT marking.
    unmarked_dscp: DetectConfig,
    filter: ReportFilter,
    /// The watchlist entries, then one per `watch_subnets` prefix, resolved.
    watch: Watchlist,
    /// Each probe stream's settings: the node's, resolved as for a watchlist entry.
    probe_settings: Vec<Resolved>,
    /// The domains this node knows.
    domains: Vec<Domain>,
    seq: u32,
    /// A source marking INT with the DSCP (so it keeps unmarked what enters without INT).
    marks_dscp: bool,
    /// When each probe stream's next probe is due (ns; `None` before the first).
    next_probe: Vec<Option<u64>>,
    /// Counters.
    pub stats: NodeStats,
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
            // A node writes into the INT it finds: a guess would overwrite a payload.
            unmarked_int: false,
            ..DetectConfig::default()
        };
        let domains: Vec<Domain> = cfg.domains.iter().map(Domain::of).collect();
        // Resolved once: a packet only picks its entry.
        let watch = Watchlist::new(&cfg, &domains);
        let probe_settings = cfg
            .probes
            .iter()
            .map(|p| Resolved {
                discard: p.discard,
                ..Resolved::new(&WatchEntry::default(), &cfg, &domains)
            })
            .collect();
        let marks_dscp = cfg.marks_dscp();
        let unmarked_dscp = DetectConfig {
            dscp: None,
            ..detect.clone()
        };
        Ok(Node {
            filter: ReportFilter::new(cfg.filters.clone()),
            watch,
            probe_settings,
            domains,
            cfg,
            detect,
            unmarked_dscp,
            seq: 0,
            marks_dscp,
            next_probe: Vec::new(),
            stats: NodeStats::default(),
        })
    }

    /// A domain this node knows (the default domain 0 is no domain).
    fn domain(&self, id: u16) -> Option<&Domain> {
        crate::domain::find(&self.domains, id)
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// Changes the egress MTU (a link reconfigured under a running node).
    pub fn set_mtu(&mut self, mtu: usize) {
        self.cfg.mtu = mtu;
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
        let Some(ip) = Packet::parse(frame, Start::Ethernet, &self.unmarked_dscp)
            .ok()
            .filter(|p| {
                // A fragment is forwarded as it came, remarked or not (see `process`).
                !p.warnings.has(Warning::IpFirstFragment)
                    && !p.warnings.has(Warning::IpLaterFragment)
            })
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

    /// Whether `p`'s DSCP is INT's marking value at a source whose encapsulations never mark
    /// by DSCP. INT v2.1 §"INT over TCP/UDP" makes the marking a domain's choice ("A value or a
    /// bit can be used to indicate the existence of INT after TCP/UDP"; "Within an INT domain,
    /// DSCP values used for INT must exclusively be used for INT"): a domain that announces INT
    /// by UDP port reserves no DSCP value, and its hosts may send any.
    fn dscp_not_ours(&self, p: &Packet<'_>) -> bool {
        self.cfg.role == Role::Source
            && !self.marks_dscp
            && p.ip
                .as_ref()
                .zip(self.detect.dscp)
                .is_some_and(|(ip, m)| m.matches(ip.dscp))
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
        let mut p = Packet::new(frame);
        let mut parsed = p.locate(Start::Ethernet, &self.detect);
        if parsed.is_err() && self.dscp_not_ours(&p) {
            // A source that does not mark by DSCP: the value is the traffic's own QoS, and
            // the packet, without INT behind its L4 header, is an ordinary one to watch.
            p = Packet::new(frame);
            parsed = p.locate(Start::Ethernet, &self.unmarked_dscp);
        }
        // INT v2.1 §"MTU Settings": "an INT node must not fragment packets in order to append
        // INT information to the packet", as "fragmenting packets at INT transit hops, with or
        // without copying preceding INT metadata into fragments imposes extra complexity of
        // correlating fragments in the INT monitoring engine". The spec says nothing of
        // fragments a node receives; INT inserted into (or removed from) a first fragment
        // would move its payload against the later fragments' offsets (RFC 791 Fragment
        // Offset; RFC 8200 §4.5) and break reassembly at the receiver, so every fragment goes
        // on as it came.
        if p.warnings.has(Warning::IpFirstFragment) || p.warnings.has(Warning::IpLaterFragment) {
            self.stats.fragments += 1;
            return out;
        }
        let (flow, inner_flow, located, ip_end) = match parsed.map(|()| p) {
            Ok(p) => (
                p.flow,
                p.inner_flow,
                p.int
                    .map(|(off, b)| (off, b.shim, b.header, Layout::of(&p)))
                    .map(Some)
                    .ok_or_else(|| Layout::of(&p).zip(p.flow)),
                p.ip.map_or(0, |ip| ip.offset + ip.declared_len),
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
        if layout.is_some_and(|l| !frame::consistent(frame, &l, ip_end)) {
            // Lengths that disagree: nothing this node writes would be right.
            self.stats.malformed += 1;
            return out;
        }
        // Report traffic is never watched nor queue-reported (a report about a report would
        // follow it through every congested queue).
        let report_traffic =
            matches!(&located, Err(Some((layout, _))) if self.is_report(layout, frame));
        let located = match located {
            Ok(Some(int)) => {
                // INT in the packet: its source's watchlist decided; this node's is not read.
                let congested = self.filter.has_queues() && self.congested(tel);
                self.int_packet(frame, tel, &mut out, int, flow, congested);
                self.stats.reports += out.reports.len() as u64;
                return out;
            }
            other => other,
        };
        // The watchlist entry of an INT-free packet.
        let watch = match &located {
            Err(Some((_, flow))) if !report_traffic => self.watched(tel, flow, inner_flow.as_ref()),
            _ => None,
        };
        // SD-Fabric: "all subsequent packets in the same queue will be reported, independently
        // of the watchlist, up to the quota" — unless the packet's own entry opts out.
        let congested = self.filter.has_queues()
            && !report_traffic
            && watch.is_none_or(|w| self.watch.get(w).wants.queue)
            && self.congested(tel);
        match (self.cfg.role, located, watch) {
            (_, Err(Some(_)), Some(w)) if self.watch.get(w).mode == Mode::Xd => {
                self.stats.report_only += 1;
                out.reports.extend(self.postcard(frame, w, tel, congested));
            }
            (Role::Source, Err(Some((layout, flow))), Some(w))
                if self.can_source(frame, &layout, self.watch.get(w).encap) =>
            {
                out.synthetic
                    .extend(self.source_watched(frame, tel, layout, flow, w));
                // The packet that went on with INT: the clone if one was sent.
                let reported = out.synthetic.last().map_or(frame.as_slice(), Vec::as_slice);
                let r = if self.watch.get(w).mode == Mode::Mx {
                    // INT-MX: the source reports its own metadata too.
                    let about = About::MxSource(w);
                    self.mx_report(reported, tel, ReportRequest { about, congested })
                } else {
                    // INT-MD: the packet's metadata goes to the sink; a queue report goes now.
                    self.queue_report(reported, tel, congested, true)
                };
                out.reports.extend(r);
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

    /// Whether the source can put INT into this packet with `encap`: after TCP/UDP it needs
    /// TCP/UDP (GRE carries any IP packet), and the tunnel encapsulations their tunnel.
    fn can_source(&self, frame: &[u8], layout: &Layout, encap: SourceEncap) -> bool {
        (layout.is_tcp_udp() || encap == SourceEncap::Gre)
            && (encap != SourceEncap::VxlanGpe || self.vxlan(frame, layout).is_some())
            && (encap != SourceEncap::Geneve || self.geneve(frame, layout))
    }

    /// The source on a watched packet (INT v2.1 §"INT Source Node"), counted: INT into the
    /// packet, or into a clone it returns while the packet goes on as it came (§"INT Applied to
    /// Synthetic Traffic": "INT Source nodes may generate INT-marked synthetic traffic either
    /// by cloning original data packets or by generating special probe packets"; the clone's
    /// D bit has the sink discard it after reporting).
    fn source_watched(
        &mut self,
        frame: &mut Vec<u8>,
        tel: &dyn Telemetry,
        layout: Layout,
        flow: FlowKey,
        w: Watch,
    ) -> Option<Vec<u8>> {
        let s = self.watch.get(w);
        let (insertion, clone) = if s.clone {
            let mut copy = frame.clone();
            let insertion = self.source(&mut copy, layout, flow, tel, s);
            (insertion, (insertion != Insertion::TooBig).then_some(copy))
        } else {
            (self.source(frame, layout, flow, tel, s), None)
        };
        self.stats.clones += u64::from(clone.is_some());
        self.count(insertion);
        clone
    }

    /// A packet carrying INT, handed to this node's role (INT v2.1 §"INT Transit Hop Node",
    /// §"INT Sink Node"); anything else goes on untouched, with a queue report if due.
    fn int_packet(
        &mut self,
        frame: &mut Vec<u8>,
        tel: &dyn Telemetry,
        out: &mut Outcome,
        int: (usize, AnyShim, IntHeader, Option<Layout>),
        flow: Option<FlowKey>,
        congested: bool,
    ) {
        match (self.cfg.role, int) {
            (Role::Transit, (off, shim, IntHeader::Md(h), Some(l)))
                if self.cfg.on_mtu_exceeded == MtuAction::IntermediateReport
                    && h.remaining_hop_count > 0
                    && l.ip_len + usize::from(h.hop_ml) * 4 > self.cfg.mtu =>
            {
                out.reports
                    .push(self.intermediate_report(frame, &l, off, shim, h, tel));
                // The intermediate report is about the stack, not this queue.
                out.reports
                    .extend(self.queue_report(frame, tel, congested, true));
            }
            (Role::Transit, (off, shim, IntHeader::Md(h), Some(l))) => {
                if congested {
                    out.reports
                        .extend(self.queue_report(frame, tel, congested, true));
                }
                self.transit(frame, &l, off, shim, h, tel)
            }
            (Role::Transit, (off, shim, IntHeader::Mx(h), l)) => {
                self.stats.report_only += 1;
                let about = About::MxHeader {
                    header: &h,
                    inserted: mx_body(frame, off, shim),
                    flow,
                };
                out.reports
                    .extend(self.mx_report(frame, tel, ReportRequest { about, congested }));
                if let Some(l) = l {
                    self.set_mx_ds_flags(frame, &l, off, &h);
                }
            }
            (Role::Sink, (off, shim, IntHeader::Md(h), Some(l))) => {
                if self.cfg.sink_metadata == SinkMetadata::Stack {
                    // Option 1: push our metadata like a transit hop, then report the stack.
                    // The push is part of sinking the packet: the frame counts once, as sunk.
                    let before = self.stats;
                    self.transit(frame, &l, off, shim, h, tel);
                    self.stats.added = before.added;
                    self.stats.hop_limit = before.hop_limit;
                    self.stats.mtu = before.mtu;
                    self.stats.skipped = before.skipped;
                }
                let about = About::MdSink { header: &h, flow };
                out.reports
                    .extend(self.report(frame, tel, ReportRequest { about, congested }));
                out.destination = self.consume_destination(frame, off, shim);
                self.strip_counted(frame);
                if h.d {
                    self.stats.discarded += 1;
                    out.forward = false;
                }
            }
            (Role::Sink, (off, shim, IntHeader::Mx(h), _)) => {
                let about = About::MxHeader {
                    header: &h,
                    inserted: mx_body(frame, off, shim),
                    flow,
                };
                out.reports
                    .extend(self.mx_report(frame, tel, ReportRequest { about, congested }));
                out.destination = self.consume_destination(frame, off, shim);
                self.strip_counted(frame);
                if h.d {
                    self.stats.discarded += 1;
                    out.forward = false;
                }
            }
            _ => {
                self.stats.untouched += 1;
                out.reports
                    .extend(self.queue_report(frame, tel, congested, true));
            }
        }
    }

    /// The sink's [`Node::strip`] (which counts the frame `sunk`); INT it could not remove
    /// counts the frame `malformed` (forwarded as it is, reported).
    fn strip_counted(&mut self, frame: &mut Vec<u8>) {
        if self.strip(frame).is_none() {
            self.stats.malformed += 1;
        }
    }

    fn is_report(&self, l: &Layout, frame: &[u8]) -> bool {
        frame::udp_dst_port(frame, l).is_some_and(|p| self.cfg.report_ports.contains(&p))
    }
}

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
