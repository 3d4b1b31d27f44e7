//! Which packets a node watches (Report v2.0 §"Telemetry Report Associations", *Tracked Flows*:
//! "a telemetry specific access control list (called a watchlist)"): watchlist entries and
//! SD-Fabric's `watchSubnets`, on the packet's own headers or the flow inside its tunnel.

use super::Node;
use crate::config::{Mode, NodeConfig, ReportCategory, SourceEncap, WatchEntry};
use crate::telemetry::Telemetry;
use intscope_wire::locate::FlowKey;

pub(super) fn port_in(range: Option<(u16, u16)>, p: u16) -> bool {
    range.is_none_or(|(lo, hi)| (lo..=hi).contains(&p))
}

/// How the source treats a watched flow: its watchlist entry's settings, the node's otherwise.
pub(super) struct Watch {
    pub(super) mode: Mode,
    pub(super) instructions: u16,
    pub(super) max_hops: u8,
    pub(super) encap: SourceEncap,
    pub(super) ds_id: u16,
    pub(super) ds_instruction: u16,
    pub(super) ds_flags: u16,
    pub(super) ds_metadata: Vec<u8>,
    /// INT-MD 'source-only' metadata, after the source's hop.
    pub(super) source_only: Vec<u8>,
    /// The body of a Destination header to add.
    pub(super) destination: Vec<u8>,
    /// Send an INT-marked clone instead of adding INT to the packet.
    pub(super) clone: bool,
    /// D bit: the sink discards the packet after reporting.
    pub(super) discard: bool,
    /// The reports wanted about these flows.
    pub(super) wants: Wants,
    /// The flow the entry matched (inside a tunnel, or the packet's own): the key of the report
    /// filters.
    pub(super) key: FlowKey,
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

impl Watch {
    pub(super) fn of(w: &WatchEntry, key: FlowKey, cfg: &NodeConfig) -> Self {
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
pub(super) fn watch_entry<'a>(
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
        // Addresses are converted only for the entries that match on them.
        let hit = w.ingress_port.is_none_or(|p| Some(p) == ingress)
            && w.subnet
                .is_none_or(|n| n.contains(&f.src_ip()) || n.contains(&f.dst_ip()))
            && w.src.is_none_or(|n| n.contains(&f.src_ip()))
            && w.dst.is_none_or(|n| n.contains(&f.dst_ip()))
            && w.proto.is_none_or(|p| p == f.proto)
            && port_in(w.dst_ports, f.dst_port)
            && port_in(w.src_ports, f.src_port);
        hit.then_some((w, *f))
    })
}

/// The node's watchlist: its entries, then one entry per `watch_subnets` prefix.
pub(super) fn watchlist(cfg: &NodeConfig) -> Vec<WatchEntry> {
    let subnets = cfg.watch_subnets.iter().map(|n| WatchEntry {
        subnet: Some(*n),
        ..WatchEntry::default()
    });
    cfg.watchlist.iter().cloned().chain(subnets).collect()
}

impl Node {
    /// The watchlist entry matching an INT-free packet's flow (`inner`: the flow inside its
    /// tunnel), with the node's settings filled in.
    pub(super) fn watched(
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
        let gtpu = flow.proto == intscope_wire::ip::protocol::UDP
            && self
                .detect
                .gtpu_port
                .is_some_and(|p| p == flow.dst_port || p == flow.src_port);
        watch_entry(&self.watch, flow, inner, gtpu, ingress)
            .map(|(w, key)| Watch::of(w, key, &self.cfg))
    }
}
