//! Which packets a node watches (Report v2.0 §"Telemetry Report Associations", *Tracked Flows*:
//! "a telemetry specific access control list (called a watchlist)"): watchlist entries and
//! SD-Fabric's `watchSubnets`, on the packet's own headers or the flow inside its tunnel.
//!
//! Each entry is resolved once, when the node is created, into a [`Resolved`]: the node's
//! defaults filled in and everything the source derives from them decided, so a packet only
//! picks an entry ([`Watch`]) and nothing is copied or worked out again per packet.

use super::Node;
use crate::config::{Mode, NodeConfig, ReportCategory, SourceEncap, WatchEntry};
use crate::domain::{self, Domain};
use crate::telemetry::Telemetry;
use intscope_wire::domain::Mode as DsMode;
use intscope_wire::locate::FlowKey;
use intscope_wire::metadata::Format;
use ipnet::IpNet;

fn port_in(range: Option<(u16, u16)>, p: u16) -> bool {
    range.is_none_or(|(lo, hi)| (lo..=hi).contains(&p))
}

/// Which report categories apply ([`ReportCategory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wants {
    pub(super) flow: bool,
    pub(super) drop: bool,
    pub(super) queue: bool,
}

impl Wants {
    pub(super) const ALL: Wants = Wants {
        flow: true,
        drop: true,
        queue: true,
    };

    pub(super) fn of(list: Option<&[ReportCategory]>) -> Wants {
        list.map_or(Wants::ALL, |l| Wants {
            flow: l.contains(&ReportCategory::Flow),
            drop: l.contains(&ReportCategory::Drop),
            queue: l.contains(&ReportCategory::Queue),
        })
    }
}

/// How the source treats a watched flow, decided once from its watchlist entry and the node's
/// settings it falls back on: what goes into the INT header and the source's hop, and which
/// reports the flow gets.
#[derive(Debug)]
pub(super) struct Resolved {
    pub(super) mode: Mode,
    pub(super) instructions: u16,
    pub(super) max_hops: u8,
    /// As configured; a TCP packet turns `udp-port` into `udp-new` ([`SourceEncap::UdpPort`]).
    pub(super) encap: SourceEncap,
    /// Hop ML: 4-byte words of the source's hop, baseline and domain-specific (INT v2.1
    /// §"INT-MD Metadata Header Format").
    pub(super) hop_ml: u8,
    pub(super) ds_id: u16,
    pub(super) ds_instruction: u16,
    /// DS Flags as the entry gives them (a report adds the known domain's itself).
    pub(super) ds_flags: u16,
    /// DS Flags in the header the source writes: the entry's and those its known domain sets.
    pub(super) header_ds_flags: u16,
    /// The entry's `ds_metadata`: INT-MX, the source-inserted metadata after the header.
    pub(super) ds_metadata: Vec<u8>,
    /// INT-MD: the domain-specific export metadata in the source's hop, before the Checksum
    /// Complement — the entry's, else the known domain's values (empty in INT-MX).
    pub(super) hop_ds: Vec<u8>,
    /// INT-MD 'source-only' metadata, after the source's hop (empty in INT-MX).
    pub(super) source_only: Vec<u8>,
    /// The body of a Destination header to add (TCP/UDP encapsulations only).
    pub(super) destination: Option<Vec<u8>>,
    /// Send an INT-marked clone instead of adding INT to the packet.
    pub(super) clone: bool,
    /// D bit: the sink discards the packet after reporting.
    pub(super) discard: bool,
    /// The reports wanted about these flows.
    pub(super) wants: Wants,
}

impl Resolved {
    /// `w` with `cfg`'s settings where it has none, and `domains`' values where it names one.
    pub(super) fn new(w: &WatchEntry, cfg: &NodeConfig, domains: &[Domain]) -> Self {
        let mode = w.mode.unwrap_or(cfg.mode);
        let instructions = w.instructions.unwrap_or(cfg.instructions);
        let encap = w.encap.unwrap_or(cfg.encap);
        let mx = mode == Mode::Mx;
        let known = domain::find(domains, w.ds_id);
        let ds_metadata = w.ds_metadata.0.clone();
        let hop_ds = match known {
            _ if mx => Vec::new(),
            _ if !ds_metadata.is_empty() => ds_metadata.clone(),
            Some(d) => {
                let mut v = vec![0u8; d.len_of(w.ds_instruction, DsMode::Export).unwrap_or(0)];
                if !d.fill_export(w.ds_instruction, &mut v) {
                    v.clear();
                }
                v
            }
            None => Vec::new(),
        };
        // INT-MX counts its source-inserted metadata as the hop would (the header has no Hop
        // ML, but a Geneve option's room is reckoned from it).
        let ds_len = if mx { ds_metadata.len() } else { hop_ds.len() };
        // INT v2.1 §"INT Header Types": a Destination header follows the MD or MX header after
        // TCP/UDP only (the other shims have no type-2 form defined).
        let destination = match encap {
            SourceEncap::Dscp
            | SourceEncap::UdpPort
            | SourceEncap::UdpNew
            | SourceEncap::ProbeMarker
                if !w.destination.0.is_empty() =>
            {
                Some(w.destination.0.clone())
            }
            _ => None,
        };
        Resolved {
            mode,
            instructions,
            max_hops: w.max_hops.unwrap_or(cfg.max_hops),
            encap,
            hop_ml: ((Format::IntV2.baseline_len(instructions) + ds_len) / 4) as u8,
            ds_id: w.ds_id,
            ds_instruction: w.ds_instruction,
            ds_flags: w.ds_flags,
            header_ds_flags: w.ds_flags | known.map_or(0, |d| d.set_ds_flags),
            ds_metadata,
            hop_ds,
            source_only: if mx {
                Vec::new()
            } else {
                w.source_only.0.clone()
            },
            destination,
            clone: w.clone,
            discard: w.clone,
            wants: Wants::of(w.reports.as_deref()),
        }
    }
}

/// The fields a watchlist entry matches on; unset fields match anything.
#[derive(Debug, Clone, Copy)]
struct FlowMatch {
    src: Option<IpNet>,
    dst: Option<IpNet>,
    proto: Option<u8>,
    dst_ports: Option<(u16, u16)>,
    src_ports: Option<(u16, u16)>,
    subnet: Option<IpNet>,
    ingress_port: Option<u16>,
    inner: Option<bool>,
}

impl FlowMatch {
    fn of(w: &WatchEntry) -> Self {
        FlowMatch {
            src: w.src,
            dst: w.dst,
            proto: w.proto,
            dst_ports: w.dst_ports,
            src_ports: w.src_ports,
            subnet: w.subnet,
            ingress_port: w.ingress_port,
            inner: w.inner,
        }
    }

    /// The flow this entry looks at — the packet's own headers (`outer`), or the flow inside a
    /// tunnel (`inner`) as the entry's `inner` says; unset, inside GTP-U only (`gtpu`), as
    /// SD-Fabric applies its watchlist — when it matches.
    fn hit(
        &self,
        outer: &FlowKey,
        inner: Option<&FlowKey>,
        gtpu: bool,
        ingress: Option<u16>,
    ) -> Option<FlowKey> {
        let f = match self.inner {
            Some(true) => inner?,
            None if gtpu => inner.unwrap_or(outer),
            _ => outer,
        };
        // Addresses are converted only for the entries that match on them.
        let hit = self.ingress_port.is_none_or(|p| Some(p) == ingress)
            && self
                .subnet
                .is_none_or(|n| n.contains(&f.src_ip()) || n.contains(&f.dst_ip()))
            && self.src.is_none_or(|n| n.contains(&f.src_ip()))
            && self.dst.is_none_or(|n| n.contains(&f.dst_ip()))
            && self.proto.is_none_or(|p| p == f.proto)
            && port_in(self.dst_ports, f.dst_port)
            && port_in(self.src_ports, f.src_port);
        hit.then_some(*f)
    }
}

/// A watched packet: the entry that matched it and the flow it matched (inside a tunnel, or the
/// packet's own), the key of the report filters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Watch {
    entry: usize,
    pub(super) key: FlowKey,
}

/// The node's watchlist: its entries, then one per `watch_subnets` prefix, each resolved.
#[derive(Debug)]
pub(super) struct Watchlist {
    entries: Vec<(FlowMatch, Resolved)>,
    /// Some entry matches on the ingress interface.
    by_ingress: bool,
}

impl Watchlist {
    pub(super) fn new(cfg: &NodeConfig, domains: &[Domain]) -> Self {
        let subnets: Vec<WatchEntry> = cfg
            .watch_subnets
            .iter()
            .map(|n| WatchEntry {
                subnet: Some(*n),
                ..WatchEntry::default()
            })
            .collect();
        let entries: Vec<_> = cfg
            .watchlist
            .iter()
            .chain(&subnets)
            .map(|w| (FlowMatch::of(w), Resolved::new(w, cfg, domains)))
            .collect();
        let by_ingress = entries.iter().any(|(m, _)| m.ingress_port.is_some());
        Watchlist {
            entries,
            by_ingress,
        }
    }

    /// The settings of a watched packet's entry.
    pub(super) fn get(&self, w: Watch) -> &Resolved {
        &self.entries[w.entry].1
    }

    /// The first entry that matches, with the flow it matched.
    fn find(
        &self,
        outer: &FlowKey,
        inner: Option<&FlowKey>,
        gtpu: bool,
        ingress: Option<u16>,
    ) -> Option<Watch> {
        self.entries.iter().enumerate().find_map(|(entry, (m, _))| {
            m.hit(outer, inner, gtpu, ingress)
                .map(|key| Watch { entry, key })
        })
    }
}

impl Node {
    /// The watchlist entry matching an INT-free packet's flow (`inner`: the flow inside its
    /// tunnel).
    pub(super) fn watched(
        &self,
        tel: &dyn Telemetry,
        flow: &FlowKey,
        inner: Option<&FlowKey>,
    ) -> Option<Watch> {
        // The ingress interface only when an entry asks for one (it costs a device read).
        let ingress = if self.watch.by_ingress {
            tel.hop(self.cfg.node_id).l1_ingress_if
        } else {
            None
        };
        let gtpu = flow.proto == intscope_wire::ip::protocol::UDP
            && self
                .detect
                .gtpu_port
                .is_some_and(|p| p == flow.dst_port || p == flow.src_port);
        self.watch.find(flow, inner, gtpu, ingress)
    }
}
