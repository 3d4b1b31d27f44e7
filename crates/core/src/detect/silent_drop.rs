//! The silent-drop detector of per-hop reports (INT-XD postcards, INT-MX reports): where a
//! flow's reports stop along its joined path. A hop that keeps reporting the flow while the next
//! one does not is one of three things, told apart here at each join of the flow's reports:
//! - a **silent drop** on the link between them: the packets vanished and no switch reported
//!   losing them (a drop, reason `silent`, at the hop before the link);
//! - a **reporting outage** at the next node: its reports stopped as a whole while it forwards
//!   (`report-loss`, cause `silent`, at that node);
//! - **hops without INT**: the packets reach an INT hop further on, more than one TTL lower (a
//!   node that stopped adding INT, or one that never did).
//!
//! Report loss explains a silence for a while: the next joins look again, with more reports.

use intscope_wire::locate::FlowKey;

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::flow::{FlowState, Joined, LinkTable, PathHop};
use crate::incident::{IncidentKind, IncidentPlace};
use crate::incidents::{FlowWeight, IncidentKey, Observation};
use crate::record::Hop;
use crate::seq::LossHistory;
use crate::thresholds::DetectConfig;

/// How often (report time) a flow shard hands its count of per-hop reports received to the
/// log's [`crate::seq::LossHistory`]: the newest counts lag by this much.
pub(crate) const RECEIVED_FLUSH_NS: u64 = 10_000_000;

/// Fewest packets seen past a silent hop — that left a port and were next reported more than
/// one TTL lower ([`LinkTable::spans`]), or that crossed a node without its report
/// ([`LinkTable::node_spans`]) — before hops without INT are raised there, however lossless
/// the report network: one packet may be all of a flow's reports yet.
pub const MIN_SPANS: u16 = 2;

/// The drop reason name of a silent drop (no switch reported it; see `[detect.postcards]`).
pub const SILENT_DROP: &str = "silent";

/// The cause of a report-loss incident at a node whose reports stopped as a whole while the
/// hop before it kept reporting its flows ([`crate::evidence::Evidence::SilentNode`]).
pub const SILENT_NODE: &str = "silent";

/// Hops without INT between two INT hops of a flow's path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hidden {
    /// The last INT hop before them.
    pub(crate) last: Hop,
    /// The next INT hop after them.
    pub(crate) next: Hop,
    /// The packet's TTL in `last`'s and in `next`'s report.
    pub(crate) ttls: (u8, u8),
    /// Packets seen across them so far.
    spans: u16,
    /// The node the links name behind `last`, which stopped adding INT (known from its reports
    /// before), when that is what the packets crossed.
    pub(crate) suspect: Option<u32>,
}

/// A node whose reports stopped as a whole while the hop before it kept reporting the flow.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outage {
    /// The hop before it, still reporting.
    before: Hop,
    /// The silent node.
    node: u32,
    /// Report times of the silence: since the hop before took these ports, until its latest.
    window: (u64, u64),
    /// How long within the window the node was heard from at all.
    heard_ns: u64,
}

/// Packets that left `at` and never reached the next hop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SilentDrop {
    /// The last hop that saw them.
    at: Hop,
    /// The hop they never reached, when the links or the flow's path name it.
    peer: Option<PathHop>,
    /// Report time after which they began to vanish.
    lost_since: u64,
}

/// What one join of a flow's reports found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// A silent drop to raise (once per hop until the next hop sees the flow again).
    pub(crate) drop: Option<SilentDrop>,
    /// A reporting outage at the next node.
    pub(crate) outage: Option<Outage>,
    /// Hops without INT.
    pub(crate) hidden: Option<Hidden>,
}

/// A silence of the flow after a hop: the hop, the next node, and the report times since the
/// hop took these ports and of its latest report.
type Silence = (Hop, u32, u64, u64);

/// What the detector reads: the shard's settings and links, every shard's report loss.
pub(crate) struct Judge<'a> {
    /// The collector's thresholds.
    pub(crate) cfg: &'a DetectConfig,
    /// The links the shard learned.
    pub(crate) links: &'a LinkTable,
    /// Report loss and hearing per node.
    pub(crate) loss: &'a LossHistory,
    /// Report time of the join.
    pub(crate) now: u64,
}

impl Judge<'_> {
    /// Judges `joined`, the join of `flow`'s per-hop reports, and marks the flow's silence.
    pub(crate) fn judge(&self, flow: &mut FlowState, joined: &Joined) -> Findings {
        let (silent, hidden) = match joined {
            Joined::Complete(chain) => {
                let found = self.on_chain(flow, chain);
                if found.0.is_none() {
                    flow.mark_silent(None);
                }
                found
            }
            Joined::Partial(_, broken) => (self.on_partial(flow, *broken), None),
        };
        let mut hidden = hidden.or_else(|| self.stopped_adding_int(flow, joined));
        let silent = silent.filter(|&(h, next, ..)| match self.reached_past(flow, h, next) {
            Some(h) => {
                hidden = hidden.or(Some(h));
                false
            }
            None => true,
        });
        let mut outage = None;
        let silent = silent.filter(|&silence| match self.outage(flow, silence) {
            Some(o) => {
                outage = Some(o);
                false
            }
            None => true,
        });
        // A silence the report network's loss explains well enough is no drop (yet): the
        // next joins look again, with more reports of the flow from this hop.
        let silent = silent.filter(|&(h, next, since, until)| {
            let m = flow.card_reports_after(h.node_id, since);
            !lost_in_transit(self.cfg, self.loss, next, (since, until), m)
        });
        let drop = silent
            .filter(|(h, ..)| flow.mark_silent(Some(h.node_id)) != Some(h.node_id))
            .map(|(at, _, since, _)| self.silent_drop(flow, at, since));
        let hidden = hidden.filter(|h| {
            self.cfg.non_int_hops
                && (h.suspect.is_some()
                    || !spans_lost_in_transit(
                        self.cfg,
                        self.loss,
                        self.now,
                        [h.last, h.next],
                        h.spans,
                    ))
        });
        Findings {
            drop,
            outage,
            hidden,
        }
    }

    /// On a complete chain: a hop that has reported the flow for `silent_drop_ns` (without a
    /// silence of its own) since its next hop last did — a hop whose reports just resumed after
    /// the flow paused or stopped reaching it waits for the next hop's; not over a link that
    /// spans a hop without INT, which may send the flow elsewhere. And two neighbours whose
    /// copies of the packet are more than one TTL apart: hops without INT between them — or an
    /// INT hop whose report of the packet was lost, which the link between them may have been
    /// learned over before the hop's own reports taught the real one (weighed by the packets
    /// that left that way and were never seen by a neighbour).
    fn on_chain(
        &self,
        flow: &FlowState,
        chain: &[(Hop, u64)],
    ) -> (Option<Silence>, Option<Hidden>) {
        let silent_ns = self.cfg.postcards.silent_drop_ns;
        let links = self.links;
        let silent = chain
            .windows(2)
            .find(|w| {
                let since = flow.card_times(w[0].0.node_id).map_or(w[0].1, |t| t.0);
                w[0].1 >= w[1].1.saturating_add(silent_ns)
                    && since.saturating_add(silent_ns) <= w[0].1
                    && !w[0]
                        .0
                        .egress_if()
                        .is_some_and(|p| links.over_hop((w[0].0.node_id, p)))
            })
            .map(|w| (w[0].0, w[1].0.node_id, w[1].1, w[0].1));
        let hidden = chain.windows(2).find_map(|w| {
            let (a, b) = (
                flow.card_ttl(w[0].0.node_id)?,
                flow.card_ttl(w[1].0.node_id)?,
            );
            let spans = links.spans((w[0].0.node_id, w[0].0.egress_if()?));
            (a > b.saturating_add(1)).then_some(Hidden {
                last: w[0].0,
                next: w[1].0,
                ttls: (a, b),
                spans,
                suspect: None,
            })
        });
        (silent, hidden)
    }

    /// On a partial chain broken after hop `broken` (sending the flow that way for the time
    /// given): never seen at the next hop while this one kept sending there, for as long as it
    /// has sent the flow that way (a path that just moved waits). A "next hop" past a hop
    /// without INT is none: that hop may send the flow elsewhere.
    fn on_partial(&self, flow: &FlowState, broken: Option<(Hop, u64)>) -> Option<Silence> {
        let (h, sending) = broken?;
        if sending < self.cfg.postcards.silent_drop_ns {
            return None;
        }
        let out = (h.node_id, h.egress_if()?);
        if self.links.over_hop(out) {
            return None;
        }
        let next = self.links.peer(out)?.0;
        let (since, seen) = flow.card_times(h.node_id)?;
        // Every report since it took these ports is one the next node missed.
        Some((h, next, since.saturating_sub(1), seen))
    }

    /// A next node the links name that packets crossed without its report, reaching an INT hop
    /// further on more than one TTL lower, too many to be its lost reports, stopped adding INT:
    /// found from the packets at once, as INT-MD finds it from the first stack, not after the
    /// silent-drop window (a hop on the chain whose card went stale, or the node a partial
    /// chain breaks before).
    fn stopped_adding_int(&self, flow: &FlowState, joined: &Joined) -> Option<Hidden> {
        if !self.cfg.non_int_hops {
            return None;
        }
        let links = self.links;
        let interval_ns = self.cfg.postcards.report_interval_ns;
        let stopped = |(h, next): (Hop, u32)| {
            if !links.silent_since_spans(next, interval_ns) {
                return None;
            }
            // Each hop's report filter reports this flow at least once an interval: a node
            // that reported it within the last one still adds INT, and its filter held back
            // the packet (the link table hears a node only through this shard's flows).
            if flow
                .card_times(next)
                .is_some_and(|(_, seen)| seen.saturating_add(interval_ns) > self.now)
            {
                return None;
            }
            self.reached_past(flow, h, next)
        };
        match joined {
            Joined::Complete(chain) => chain
                .windows(2)
                .map(|w| (w[0].0, w[1].0.node_id))
                .find_map(stopped),
            Joined::Partial(_, broken) => broken
                .and_then(|(h, _)| {
                    let out = (h.node_id, h.egress_if()?);
                    Some((h, links.peer(out).filter(|_| !links.over_hop(out))?.0))
                })
                .and_then(stopped),
        }
    }

    /// Packets that crossed node `next` after hop `h` without its report and reached an INT hop
    /// further on, more than one TTL lower, too many to be `next`'s lost reports: hops without
    /// INT at `next` (for a flow gone quiet there, not a drop).
    fn reached_past(&self, flow: &FlowState, h: Hop, next: u32) -> Option<Hidden> {
        let crossed = self.links.node_spans(next);
        if crossed < MIN_SPANS {
            return None;
        }
        let a = flow.card_ttl(h.node_id)?;
        let (b, at_b) = flow.card_past_ttl(a)?;
        (!spans_lost_in_transit(self.cfg, self.loss, self.now, [h, b], crossed)).then_some(Hidden {
            last: h,
            next: b,
            ttls: (a, at_b),
            spans: crossed,
            suspect: Some(next),
        })
    }

    /// A next node not heard from (anything, any flow) for longer than two of its report
    /// filter's intervals since the flow went quiet there went silent as a whole: its reports
    /// stopped, not the flow's packets — a reporting outage at that node, not a drop on the
    /// link. A node that kept reporting its other flows, however few, was heard. A node silent
    /// as a whole still forwards: an INT hop past it on the flow's path, heard from throughout,
    /// that stopped seeing the flow too says the packets did not get through (a node whose
    /// only flows stalled on the loss is heard seldom, not never).
    fn outage(&self, flow: &FlowState, (h, next, since, until): Silence) -> Option<Outage> {
        let quiet_max = self.cfg.postcards.report_interval_ns.saturating_mul(2);
        let window = (since, until);
        let (heard_ns, unheard) = node_heard_ns(self.loss, next, window);
        if unheard <= quiet_max {
            return None;
        }
        // A hop past it missed the flow since its last report of it (since the silence began,
        // if it holds none), for longer than report loss at that hop would explain.
        let i = flow.path.iter().position(|p| p.node_id == next);
        let stopped_past = i.is_some_and(|i| {
            flow.path[i + 1..].iter().any(|p| {
                let seen = flow.card_times(p.node_id).map_or(since, |(_, seen)| seen);
                let m = flow.card_reports_after(h.node_id, seen);
                seen.saturating_add(quiet_max) < until
                    && node_heard_ns(self.loss, p.node_id, window).1 <= quiet_max
                    && !lost_in_transit(self.cfg, self.loss, p.node_id, (seen, until), m)
            })
        });
        (!stopped_past).then_some(Outage {
            before: h,
            node: next,
            window,
            heard_ns,
        })
    }

    /// The silent drop after hop `at`, the flow silent at the next hop since `since`.
    fn silent_drop(&self, flow: &FlowState, at: Hop, since: u64) -> SilentDrop {
        // The hop the packets never reached: the far end of the link they left by, else the
        // next one of the flow's last path (a partial path under report loss may hold hops out
        // of order; the link does not).
        let peer = at
            .egress_if()
            .and_then(|p| self.links.peer((at.node_id, p)))
            .map(|(node, port)| PathHop {
                node_id: node,
                ingress_if: Some(port),
                egress_if: None,
            })
            .or_else(|| {
                let i = flow.path.iter().position(|h| h.node_id == at.node_id)?;
                flow.path.get(i + 1).copied()
            });
        // Confirmed a silent-drop window after it began: after the next node's last report of
        // the flow (or since the flow took these ports), which bounds the start.
        let lost_since = peer
            .and_then(|p| flow.card_times(p.node_id))
            .map_or(since, |(_, seen)| seen.max(since))
            .saturating_add(1);
        SilentDrop {
            at,
            peer,
            lost_since,
        }
    }
}

/// Raises the reporting outage `o` a join of flow `flow` (key, API ID) found, at report time
/// `now`: one report-loss incident at the silent node, its flows those the hop before it kept
/// reporting.
pub(crate) fn raise_outage(raiser: &mut Raiser, now: u64, flow: (FlowKey, u64), o: &Outage) {
    let incident = IncidentKey::new(
        IncidentKind::ReportLoss,
        IncidentPlace {
            node: Some(o.node),
            ..IncidentPlace::default()
        },
        Some(SILENT_NODE.into()),
    );
    let obs = Observation {
        flow: Some(FlowWeight::one(flow)),
        start_uncertainty_ns: o.window.1.saturating_sub(o.window.0),
        ..Observation::sample(raiser.switch_time(now), now)
    };
    let evidence = || Evidence::SilentNode {
        reported_by: o.before.node_id,
        reported_at_ns: o.window.1,
        silent_since_ns: o.window.0,
        heard_ns: o.heard_ns,
    };
    raiser.observe(incident, &obs, evidence);
}

/// Raises the silent drop `d` of flow `flow` at report time `now`: one drop incident per link
/// and cause, its flows those that vanished on it.
pub(crate) fn raise_drop(raiser: &mut Raiser, now: u64, flow: (FlowKey, u64), d: &SilentDrop) {
    let SilentDrop {
        at,
        peer,
        lost_since,
    } = *d;
    let incident = IncidentKey::new(
        IncidentKind::Drop,
        IncidentPlace {
            node: Some(at.node_id),
            port: at.egress_if(),
            peer_node: peer.map(|p| p.node_id),
            peer_port: peer.and_then(|p| p.ingress_if),
            ..IncidentPlace::default()
        },
        Some(SILENT_DROP.into()),
    );
    let obs = Observation {
        flow: Some(FlowWeight::one(flow)),
        start_uncertainty_ns: now.saturating_sub(lost_since),
        ..Observation::sample(raiser.switch_time(now), now)
    };
    let evidence = || Evidence::Drop {
        drop_reason: None,
        drop_reason_name: Some(SILENT_DROP),
    };
    let place = Place {
        node: Some(at.node_id),
        port: at.egress_if(),
        queue: None,
        flow: Some(flow),
    };
    raiser.raise(now, EventKind::Drop, place, Some(&incident), evidence);
    raiser.observe(incident, &obs, evidence);
}

/// Whether `next`'s silence over `window` (report time: its last report of the flow, this
/// hop's latest) is likely enough to be report loss alone, given `m` reports of the flow from
/// the hop before it in that window (`silent_drop_chance`). The loss share is taken over the
/// window moved back by the reorder time and a hand-over of received counts: the newest gaps
/// are not confirmed yet.
fn lost_in_transit(
    cfg: &DetectConfig,
    loss: &LossHistory,
    next: u32,
    (since, until): (u64, u64),
    m: u32,
) -> bool {
    let chance = cfg.postcards.silent_drop_chance;
    if chance >= 1.0 {
        return false;
    }
    let lag = cfg.report_reorder_ns.saturating_add(RECEIVED_FLUSH_NS);
    let to = until.saturating_sub(lag);
    let from = since.saturating_sub(lag).min(to);
    let (lost, received) = loss.between(next, from, to);
    if lost == 0 {
        return false;
    }
    let p = lost as f64 / (lost + received) as f64;
    p.powi(i32::try_from(m).unwrap_or(i32::MAX)) > chance
}

/// Whether `spans` packets seen past a silent hop between `hops` (see [`MIN_SPANS`]) may all
/// be packets whose report from an INT hop there the report network lost
/// (`silent_drop_chance`): with `p` the larger report loss share of the two hops around it
/// over the history up to `now` (moved back by the reorder time and a hand-over of received
/// counts; the hop between, unknown or silent, is taken to lose as much), when `p^spans` is
/// above the chance. Fewer than [`MIN_SPANS`], or the two hops' loss not known yet (early in a
/// run no gap is confirmed), is always loss. A hop the full history has no room for is weighed
/// as lossless, as [`lost_in_transit`] weighs it: spoofed node IDs that fill the history must
/// not hide a real hop without INT.
fn spans_lost_in_transit(
    cfg: &DetectConfig,
    history: &LossHistory,
    now: u64,
    hops: [Hop; 2],
    spans: u16,
) -> bool {
    if spans < MIN_SPANS {
        return true;
    }
    let chance = cfg.postcards.silent_drop_chance;
    if chance >= 1.0 {
        return false;
    }
    let lag = cfg.report_reorder_ns.saturating_add(RECEIVED_FLUSH_NS);
    let Some(to) = now.checked_sub(lag) else {
        return true;
    };
    let p = hops
        .iter()
        .filter_map(|h| {
            let (lost, received) = history.between(h.node_id, 0, to);
            if lost + received > 0 {
                Some(lost as f64 / (lost + received) as f64)
            } else {
                history.refuses(h.node_id).then_some(0.0)
            }
        })
        .reduce(f64::max);
    p.is_none_or(|p| p.powi(i32::from(spans)) > chance)
}

/// How long node `node` was heard from (any per-hop report of any flow, every shard's) within
/// report times `window`, and its longest silence in it; a node the history has no room for
/// counts as heard throughout, as [`lost_in_transit`] weighs it lossless: spoofed node IDs
/// must not hide a real drop.
fn node_heard_ns(history: &LossHistory, node: u32, (since, until): (u64, u64)) -> (u64, u64) {
    if history.refuses(node) {
        return (u64::MAX, 0);
    }
    (
        history.heard_ns(node, since, until),
        history.longest_unheard_ns(node, since, until),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(node_id: u32) -> Hop {
        Hop::at(node_id)
    }

    /// Packets past a silent hop between two nodes the loss history has no room for are weighed
    /// as lossless, not as "loss not known yet" for ever: spoofed node IDs that fill the history
    /// must not hide a real hop without INT.
    #[test]
    fn hops_the_full_loss_history_refuses_are_weighed_as_lossless() {
        let cfg = DetectConfig::default();
        let mut history = LossHistory::new(1_000_000_000);
        let now = 60_000_000_000;
        let spans = MIN_SPANS + 1;
        // Nothing known of either hop yet: wait (loss).
        assert!(spans_lost_in_transit(
            &cfg,
            &history,
            now,
            [hop(1), hop(2)],
            spans
        ));
        // Loss known: a lossless history raises it.
        history.received(1, 1000, 1_000_000_000);
        assert!(!spans_lost_in_transit(
            &cfg,
            &history,
            now,
            [hop(1), hop(3)],
            spans
        ));
        // A full history of other nodes: hops 7 and 8 will never be held.
        for n in 0..crate::seq::MAX_LOSS_NODES as u32 {
            history.received(100 + n, 1, now - 1_000_000_000);
        }
        assert!(history.refuses(7));
        assert!(!spans_lost_in_transit(
            &cfg,
            &history,
            now,
            [hop(7), hop(8)],
            spans
        ));
    }
}
