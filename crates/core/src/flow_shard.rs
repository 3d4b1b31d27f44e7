//! One shard of the flows' state: each flow's path (complete stacks at once; INT-XD / INT-MX
//! per-hop reports joined by the fabric's links a window after they arrive, intermediate heads
//! within a window), its latency, path-change and silent-drop detection. A flow belongs to one
//! shard ([`flow_shard`], from its key's hash), so its reports are correlated in order by one
//! thread at a time while other shards' flows proceed in parallel.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use intscope_wire::locate::FlowKey;

use crate::detect::path_change;
use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::fabric::{excess, spread};
use crate::flow::{FlowState, FlowTable, Joined, LinkDelays, LinkTable, Path, PathHop, PathTable};
use crate::flow_ref::FlowSeen;
use crate::id_table::Cutoff;
use crate::incident::{IncidentKind, IncidentPlace};
use crate::incidents::{FlowWeight, IncidentKey, Observation};
use crate::limits::Limits;
use crate::record::Record;
use crate::seq::LossHistory;
use crate::snapshot::{FlowCopies, FlowCounts, FlowShardSnapshot};
use crate::thresholds::DetectConfig;

/// How often (report time) a flow shard hands its count of per-hop reports received to the
/// log's [`crate::seq::LossHistory`].
const RECEIVED_FLUSH_NS: u64 = 10_000_000;

/// Whether `next`'s silence over `window` (report time: its last report of the flow, this
/// hop's latest) is likely enough to be report loss alone, given `m` reports of the flow from
/// the hop before it in that window (`silent_drop_chance`). The loss share
/// is taken over the window moved back by the reorder time and a hand-over of received counts:
/// the newest gaps are not confirmed yet.
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

/// Fewest packets seen past a silent hop — that left a port and were next reported more than
/// one TTL lower ([`LinkTable::spans`]), or that crossed a node without its report
/// ([`LinkTable::node_spans`]) — before hops without INT are raised there, however lossless
/// the report network: one packet may be all of a flow's reports yet.
pub const MIN_SPANS: u16 = 2;

/// Whether `spans` packets seen past a silent hop between `hops` (see [`MIN_SPANS`]) may all
/// be packets whose report from an INT hop there the report network lost
/// (`silent_drop_chance`): with `p` the larger report loss share of the two
/// hops around it over the history up to `now` (moved back by the reorder time and a hand-over
/// of received counts; the hop between, unknown or silent, is taken to lose as much), when
/// `p^spans` is above the chance. Fewer than [`MIN_SPANS`], or the two hops' loss not known yet
/// (early in a run no gap is confirmed), is always loss. A hop the full history has no room for
/// is weighed as lossless, as [`lost_in_transit`] weighs it: spoofed node IDs that fill the
/// history must not hide a real hop without INT.
fn spans_lost_in_transit(
    cfg: &DetectConfig,
    history: &LossHistory,
    now: u64,
    hops: [crate::record::Hop; 2],
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

/// The drop reason name of a silent drop (no switch reported it; see `[detect.postcards]`).
pub const SILENT_DROP: &str = "silent";

/// The cause of a report-loss incident at a node whose reports stopped as a whole while the
/// hop before it kept reporting its flows ([`crate::evidence::Evidence::SilentNode`]).
pub const SILENT_NODE: &str = "silent";

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

/// The shard of `n` that owns the flow whose key hashes to `hash` ([`crate::flow::key_hash`]).
#[inline]
pub fn flow_shard(hash: u64, n: usize) -> usize {
    // The middle bits: the flow table's index uses the low bits for the bucket and the top
    // seven as tags, so neither is skewed within a shard.
    spread((hash >> 32) as u32, n)
}

/// One shard of the flows' state.
#[derive(Debug, Default)]
pub struct FlowShard {
    cfg: DetectConfig,
    /// Flows by key.
    pub flows: FlowTable,
    /// The distinct paths of the flows.
    pub paths: PathTable,
    /// Flows changed since the last store flush.
    pub dirty_flows: Vec<FlowKey>,
    /// New flows keep their latency per store interval ([`FlowState::keep_intervals`]): on
    /// by default, off for a collector without a store (`State::keep_intervals`).
    pub(crate) keep_intervals: bool,
    /// Flows with per-hop reports waiting to be joined: (deadline, flow). One entry per flow
    /// at most (a flow is queued again only once its entry left), so bounded by the flows.
    pending_joins: VecDeque<(u64, FlowKey)>,
    /// The fabric's links, learned from the paths and per-hop reports of this shard's flows.
    pub links: LinkTable,
    /// Report time of the next look for idle flows.
    next_idle_sweep_ns: u64,
    /// Flows that left memory after `flow_idle_ns` without a report.
    pub flows_expired: u64,
    /// Flows evicted, least recently seen first, to stay within the limit.
    pub flows_evicted: u64,
    /// Most flows this shard holds.
    max_flows: usize,
    /// Per-hop reports received per reporting node since they were last handed to the log's
    /// [`crate::seq::LossHistory`] (at most one entry per node reporting this shard's flows).
    received: rustc_hash::FxHashMap<u32, u64>,
    /// Report time of the next hand-over of `received`.
    next_received_ns: u64,
    /// Reports not counted in `received` for want of room (more nodes than
    /// [`crate::seq::MAX_LOSS_NODES`] between two hand-overs); handed over with it.
    received_untracked: u64,
    /// This shard's events.
    pub raiser: Raiser,
    /// This shard's last copies for snapshots: the next one is made from them, the rows of
    /// the slots written since ([`FlowTable::changed`]) made again.
    pub copies: FlowCopies,
}

impl FlowShard {
    /// The counts a copy of this shard holds.
    pub fn copy_counts(&self) -> FlowCounts {
        FlowCounts {
            flows_expired: self.flows_expired,
            flows_evicted: self.flows_evicted,
            link_ports_refused: self.links.unlearned,
            suppressed: self.raiser.suppressed,
        }
    }

    /// This shard's copy for a snapshot, made from its last one (see [`FlowCopies`]).
    pub fn copy(&mut self) -> Arc<FlowShardSnapshot> {
        let counts = self.copy_counts();
        self.copies.refresh(&mut self.flows, counts)
    }

    /// A shard with these detector thresholds.
    pub fn new(cfg: DetectConfig) -> Self {
        FlowShard::with_limits(cfg, Limits::default())
    }

    /// A shard with these detector thresholds that holds at most `limits.flows` flows.
    pub fn with_limits(cfg: DetectConfig, limits: Limits) -> Self {
        FlowShard {
            raiser: Raiser::new(cfg.event_interval_ns),
            cfg,
            max_flows: limits.flows.max(1),
            keep_intervals: true,
            ..FlowShard::default()
        }
    }

    /// The flow with API ID `id`, if this shard holds it: a pass over the flows, for the locked
    /// view (tests, tools). Readers find flows by ID in a snapshot, whose copy keeps an index;
    /// the live state keeps none (48 bytes a flow).
    pub fn flow_by_id(&self, id: u64) -> Option<&FlowState> {
        self.flows.values().find(|f| f.id == id)
    }

    /// Starts loading the state of the flow whose key hashes to `hash`; returns the slot it
    /// guessed, a hint for [`FlowShard::process`].
    #[inline]
    pub fn prefetch(&self, hash: u64) -> Option<u32> {
        self.flows.prefetch_hashed(hash)
    }

    /// Joins what waited past its window and lets idle flows go. The state calls it at the same
    /// report times for every shard (see `State::process_batch`), so a join closes at the same
    /// moment however many shards there are.
    #[inline(never)]
    pub fn sweep(&mut self, now: u64, loss: &LossHistory) {
        if now >= self.next_idle_sweep_ns {
            self.expire_idle_flows(now);
        }
        while let Some(&(deadline, key)) = self.pending_joins.front() {
            if deadline > now {
                break;
            }
            self.pending_joins.pop_front();
            let Some(flow) = self.flows.get_mut(&key) else {
                continue;
            };
            // A join run early (a node reported the next packet) leaves its entry; the join
            // scheduled since is due later.
            if let Some(due) = flow.requeue_join(now) {
                self.pending_joins.push_back((due, key));
            } else if flow.join_due_ns().is_some() {
                self.join(now, key, loss);
            }
        }
        // Silent drops found by the joins go to their incidents once per sweep.
        self.raiser.hand_over();
        if now >= self.next_received_ns && !self.received.is_empty() {
            self.next_received_ns = now.saturating_add(RECEIVED_FLUSH_NS);
            let untracked = std::mem::take(&mut self.received_untracked);
            self.raiser
                .reports_received(self.received.drain(), untracked, now);
        }
    }

    /// Keeps a flow's per-hop report (its hop, packet fingerprint and the packet's IP TTL) for
    /// its next join, after joining those before it if it is of a later packet (`join_before`).
    fn add_postcard(
        &mut self,
        now: u64,
        key: FlowKey,
        (hop, packet, ttl): (crate::record::Hop, u32, Option<u8>),
        join_before: bool,
        loss: &LossHistory,
    ) {
        if join_before {
            self.join(now, key, loss);
        }
        if let Some(ts) = hop.ingress_ts().or(hop.egress_ts()) {
            self.links
                .saw(hop.node_id, ts, self.cfg.postcards.report_interval_ns);
        }
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        let window = self.cfg.join_window_ns;
        let quiet = self.cfg.postcards.silent_drop_ns;
        if flow.add_card_with_ttl(now, hop, packet, ttl, window, quiet) {
            self.pending_joins.push_back((now + window + 1, key));
        }
    }

    /// Joins a flow's per-hop reports into its path (`[detect.postcards]`), and looks for a silent
    /// drop along it: a node that keeps reporting the flow while the next one does not.
    fn join(&mut self, now: u64, key: FlowKey, loss: &LossHistory) {
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        let silent_ns = self.cfg.postcards.silent_drop_ns;
        let silent;
        let mut hidden = None;
        let mut change = None;
        let mut changed_at = None;
        let delays = LinkDelays {
            assumed_ns: self.cfg.postcards.link_delay_max_ns,
            learn_max_ns: self.cfg.postcards.link_delay_learn_max_ns,
        };
        let joined = flow.join_cards(&mut self.links, delays, self.cfg.join_window_ns);
        match &joined {
            Joined::Complete(chain) => {
                let hops: Vec<_> = chain.iter().map(|(h, _)| *h).collect();
                let before = Arc::clone(&flow.path);
                if !flow.path_partial && !self.links.holds(&before) {
                    // Joined over a link learned wrong since: a correction, not a change.
                    flow.path_partial = true;
                }
                change = flow.observe_joined_path(now, &hops, &mut self.paths);
                // When the flow took the new way: the packet's time at the first hop that
                // differs (a node that left by another port, or a new node), which reports at
                // once; a hop before it may have reported the flow a filter interval earlier.
                changed_at = change.as_ref().and_then(|old| {
                    let d = old
                        .iter()
                        .zip(hops.iter())
                        .position(|(a, b)| *a != PathHop::from(b))?;
                    let h = hops.get(d)?;
                    h.ingress_ts().or(h.egress_ts())
                });
                flow.observe_latency(now, &hops);
                // A hop that has reported the flow for `silent_ns` (without a silence of its
                // own) since its next hop last did: a hop whose reports just resumed after the
                // flow paused or stopped reaching it waits for the next hop's. Not over a link
                // that spans a hop without INT, which may send the flow elsewhere.
                let links = &self.links;
                silent = chain
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
                // Two neighbours of the joined path whose copies of the packet are more than
                // one TTL apart have hops without INT between them — or an INT hop whose
                // report of the packet was lost, which the link between them may have been
                // learned over before the hop's own reports taught the real one: weighed below
                // by the packets that left that way and were never seen by a neighbour.
                let links = &self.links;
                hidden = chain.windows(2).find_map(|w| {
                    let (a, b) = (
                        flow.card_ttl(w[0].0.node_id)?,
                        flow.card_ttl(w[1].0.node_id)?,
                    );
                    let spans = links.spans((w[0].0.node_id, w[0].0.egress_if()?));
                    (a > b.saturating_add(1)).then_some((w[0].0, w[1].0, (a, b), spans, None))
                });
                if silent.is_none() {
                    flow.mark_silent(None);
                }
            }
            Joined::Partial(hops, broken) => {
                flow.observe_joined_partial(now, hops, &mut self.paths);
                // Never seen at the next hop while this one kept sending there: for as long
                // as it has sent the flow that way (a path that just moved waits). A "next
                // hop" past a hop without INT is none: that hop may send the flow elsewhere.
                silent = broken
                    .filter(|(_, sending)| *sending >= silent_ns)
                    .and_then(|(h, _)| {
                        let out = (h.node_id, h.egress_if()?);
                        if self.links.over_hop(out) {
                            return None;
                        }
                        let next = self.links.peer(out)?.0;
                        let (since, seen) = flow.card_times(h.node_id)?;
                        // Every report since it took these ports is one the next node missed.
                        Some((h, next, since.saturating_sub(1), seen))
                    });
            }
        }
        // A next node the links name that packets crossed without its report, reaching an INT
        // hop further on more than one TTL lower, too many to be its lost reports, stopped
        // adding INT: found from the packets at once, as INT-MD finds it from the first stack,
        // not after the silent-drop window (a hop on the chain whose card went stale, or the
        // node a partial chain breaks before).
        if self.cfg.non_int_hops && hidden.is_none() {
            let links = &self.links;
            let interval_ns = self.cfg.postcards.report_interval_ns;
            let stopped = |(h, next): (crate::record::Hop, u32)| {
                let crossed = links.node_spans(next);
                if crossed < MIN_SPANS || !links.silent_since_spans(next, interval_ns) {
                    return None;
                }
                // Each hop's report filter reports this flow at least once an interval: a node
                // that reported it within the last one still adds INT, and its filter held back
                // the packet (the link table hears a node only through this shard's flows).
                if flow
                    .card_times(next)
                    .is_some_and(|(_, seen)| seen.saturating_add(interval_ns) > now)
                {
                    return None;
                }
                let a = flow.card_ttl(h.node_id)?;
                let (b, at_b) = flow.card_past_ttl(a)?;
                (!spans_lost_in_transit(&self.cfg, loss, now, [h, b], crossed)).then_some((
                    h,
                    b,
                    (a, at_b),
                    crossed,
                    Some(next),
                ))
            };
            hidden = match &joined {
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
            };
        }
        let silent = silent.filter(|&(h, next, ..)| {
            let crossed = self.links.node_spans(next);
            let past = flow
                .card_ttl(h.node_id)
                .and_then(|a| Some((a, flow.card_past_ttl(a)?)))
                .filter(|_| crossed >= MIN_SPANS);
            match past {
                Some((a, (b, at_b)))
                    if !spans_lost_in_transit(&self.cfg, loss, now, [h, b], crossed) =>
                {
                    hidden = hidden.or(Some((h, b, (a, at_b), crossed, Some(next))));
                    false
                }
                _ => true,
            }
        });
        // A next node not heard from (anything, any flow) for longer than two of its report
        // filter's intervals since the flow went quiet there went silent as a whole: its
        // reports stopped, not the flow's packets — a reporting outage at that node, not a drop
        // on the link. A node that kept reporting its other flows, however few, was heard.
        // A node silent as a whole still forwards: an INT hop past it on the flow's path, heard
        // from throughout, that stopped seeing the flow too says the packets did not get
        // through (a node whose only flows stalled on the loss is heard seldom, not never).
        let mut outage = None;
        let quiet_max = self.cfg.postcards.report_interval_ns.saturating_mul(2);
        let stopped_past = |next: u32, window: (u64, u64)| {
            let Some(i) = flow.path.iter().position(|h| h.node_id == next) else {
                return false;
            };
            flow.path[i + 1..].iter().any(|p| {
                let seen = flow.card_times(p.node_id).map_or(0, |(_, seen)| seen);
                seen.saturating_add(quiet_max) < window.1
                    && node_heard_ns(loss, p.node_id, window).1 <= quiet_max
            })
        };
        let silent = silent.filter(|&(h, next, since, until)| {
            let (heard, unheard) = node_heard_ns(loss, next, (since, until));
            if unheard <= quiet_max || stopped_past(next, (since, until)) {
                return true;
            }
            outage = Some((h, next, (since, until), heard));
            false
        });
        // A silence the report network's loss explains well enough is no drop (yet): the
        // next joins look again, with more reports of the flow from this hop.
        let silent = silent
            .filter(|&(h, next, since, until)| {
                let m = flow.card_reports_after(h.node_id, since);
                !lost_in_transit(&self.cfg, loss, next, (since, until), m)
            })
            .map(|(h, _, since, _)| (h, since));
        let id = flow.id;
        let raise = silent.filter(|(h, _)| flow.mark_silent(Some(h.node_id)) != Some(h.node_id));
        let (raise, since) = (raise.map(|(h, _)| h), raise.map_or(now, |(_, t)| t));
        // The hop the packets never reached: the far end of the link they left by, else the
        // next one of the flow's last path (a partial path under report loss may hold hops
        // out of order; the link does not).
        let peer = raise.and_then(|at| {
            if let Some((node, port)) = at
                .egress_if()
                .and_then(|p| self.links.peer((at.node_id, p)))
            {
                return Some(PathHop {
                    node_id: node,
                    ingress_if: Some(port),
                    egress_if: None,
                });
            }
            let i = flow.path.iter().position(|h| h.node_id == at.node_id)?;
            flow.path.get(i + 1).copied()
        });
        // Confirmed a silent-drop window after it began: after the next node's last report
        // of the flow (or since the flow took these ports), which bounds the start.
        let lost_since = peer
            .and_then(|p| flow.card_times(p.node_id))
            .map_or(since, |(_, seen)| seen.max(since))
            .saturating_add(1);
        if let Some(old) = change {
            self.path_changed(now, changed_at, key, id, old);
        }
        if let Some((before, silent_node, (since, until), heard)) = outage {
            let incident = IncidentKey::new(
                IncidentKind::ReportLoss,
                IncidentPlace {
                    node: Some(silent_node),
                    ..IncidentPlace::default()
                },
                Some(SILENT_NODE.into()),
            );
            let o = Observation {
                flow: Some(FlowWeight::one((key, id))),
                start_uncertainty_ns: until.saturating_sub(since),
                ..Observation::sample(self.raiser.switch_time(now), now)
            };
            let evidence = || Evidence::SilentNode {
                reported_by: before.node_id,
                reported_at_ns: until,
                silent_since_ns: since,
                heard_ns: heard,
            };
            self.raiser.observe(incident, &o, evidence);
        }
        if let Some((last, next, ttls, _, suspect)) = hidden
            .filter(|_| self.cfg.non_int_hops)
            .filter(|&(l, n, _, spans, suspect)| {
                suspect.is_some() || !spans_lost_in_transit(&self.cfg, loss, now, [l, n], spans)
            })
        {
            self.hidden_hops(now, key, id, (last, next, suspect), ttls);
        }
        if let Some(at) = raise {
            // The packets left `at` by this port and never reached the next hop: one drop
            // incident per link and cause, its flows those that vanished on it.
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
            let o = Observation {
                flow: Some(FlowWeight::one((key, id))),
                start_uncertainty_ns: now.saturating_sub(lost_since),
                ..Observation::sample(self.raiser.switch_time(now), now)
            };
            let evidence = || Evidence::Drop {
                drop_reason: None,
                drop_reason_name: Some(SILENT_DROP),
            };
            let place = Place {
                node: Some(at.node_id),
                port: at.egress_if(),
                queue: None,
                flow: Some((key, id)),
            };
            self.raiser
                .raise(now, EventKind::Drop, place, Some(&incident), evidence);
            self.raiser.observe(incident, &o, evidence);
        }
    }

    /// INT-XD/MX: hops without INT between `last` and `next`, INT hops of the flow's path
    /// whose reports' copies of the packet carry TTLs `ttls` (at `last`, at `next`) more than
    /// one apart: one non-int-hops incident per port they hide behind, as INT-MD's TTL check
    /// places them, or per hidden node when the links name it (`suspect`: a hop that stopped
    /// adding INT, known from its reports before). The evidence's `assumed_initial_ttl` is
    /// `last`'s TTL here.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn hidden_hops(
        &mut self,
        now: u64,
        key: FlowKey,
        id: u64,
        (last, next, suspect): (crate::record::Hop, crate::record::Hop, Option<u32>),
        (at_last, at_next): (u8, u8),
    ) {
        let non_int = at_last - at_next - 1;
        let iplace = match suspect {
            Some(n) => IncidentPlace {
                node: Some(n),
                ..IncidentPlace::default()
            },
            None => IncidentPlace {
                node: Some(last.node_id),
                port: last.egress_if(),
                ..IncidentPlace::default()
            },
        };
        let incident = IncidentKey::new(IncidentKind::NonIntHops, iplace, None);
        let o = Observation {
            value: Some((u64::from(non_int), crate::incident::Unit::Hops)),
            flow: Some(FlowWeight::one((key, id))),
            ..Observation::sample(self.raiser.switch_time(now), now)
        };
        let evidence = move || Evidence::NonIntHops {
            ip_ttl: Some(at_next),
            assumed_initial_ttl: at_last,
            ttl_decrement: at_last - at_next,
            int_hops: 2,
            non_int_hops: non_int,
            last_int_node: Some(last.node_id),
            next_int_node: next.node_id,
            suspect_node: suspect,
        };
        let place = Place {
            node: Some(last.node_id),
            port: last.egress_if(),
            queue: None,
            flow: Some((key, id)),
        };
        self.raiser
            .raise(now, EventKind::NonIntHops, place, Some(&incident), evidence);
        self.raiser.observe(incident, &o, evidence);
    }

    /// Correlates record `r` with its flow (keyed `key`, hashed `hash`, perhaps in slot `hint`
    /// from [`FlowShard::prefetch`]); new flows take their ID from `ids`. Returns what the
    /// fabric stage needs.
    pub fn process(
        &mut self,
        r: &Record,
        key: FlowKey,
        hash: u64,
        hint: Option<u32>,
        ids: &AtomicU64,
        loss: &LossHistory,
    ) -> FlowSeen {
        let now = r.time_ns;
        let paths = &mut self.paths;
        let keep_intervals = self.keep_intervals;
        let flow = self.flows.get_or_insert_hashed(hash, key, hint, || {
            let id = ids.fetch_add(1, Ordering::Relaxed);
            let mut flow = FlowState::new(key, id, now, paths.intern(&[]));
            if keep_intervals {
                flow.keep_intervals();
            }
            flow
        });
        flow.reports += 1;
        flow.last_seen_ns = now;
        if !flow.dirty {
            flow.dirty = true;
            self.dirty_flows.push(key);
        }
        let id = flow.id;
        if r.dropped || r.drop_reason.is_some() {
            flow.drops += 1;
            flow.last_drop_reason = r.drop_reason.or(flow.last_drop_reason);
        }
        // Complete paths (INT-MD stacks, v0.5/v1.0 stacks) say which way the flow went at once;
        // per-hop reports (INT-XD postcards, INT-MX) from different nodes are joined first.
        let mut change = None;
        let mut postcard = None;
        let mut head_hops = 0;
        let mut gap = None;
        let head = if r.intermediate || flow.waiting_heads() == 0 {
            None
        } else {
            flow.take_head(now, self.cfg.join_window_ns)
        };
        if r.intermediate {
            // The head of a path; the rest comes with the sink's report.
            flow.push_head(now, r.hops(), self.cfg.join_window_ns);
        } else if r.int_hops > 0 || head.is_some() {
            let joined;
            let hops = match head {
                Some(mut h) => {
                    head_hops = h.len();
                    h.extend_from_slice(r.hops());
                    joined = h;
                    &joined[..]
                }
                None => r.hops(),
            };
            // Hops missing from the report (cut short, past the hop limit or past an egress
            // MTU: INT v2.1 §"INT-MD Metadata Header Format", E and M bits, "INT metadata was
            // not inserted at one or more hops"; hops without INT, which the TTL counts), a packet that died on the way, or one
            // reported before it left the fabric: a partial path, and a latency that is no
            // flow's. A transit hop reports an INT-MD packet only for a congested queue (Report
            // v2.0 §"Individual Report Header", Q), a drop (D) or an intermediate report (I); a
            // Q report whose last hop leaves by a fabric port is a transit hop's, not the
            // sink's. A flow whose packets loop or stop arriving has no new path, only reports
            // of how far they went.
            let transit_queue_report = r.congested
                && hops.last().is_some_and(|h| {
                    h.egress_if()
                        .is_some_and(|p| self.links.is_fabric_port((h.node_id, p)))
                });
            // Hops the TTL counts that added no INT: inside the stack (a gap the flow's path or
            // the links show) the stack is a partial path; outside it (routers before or after
            // the INT domain) the stack is the whole INT path, but its hops are not known to be
            // neighbours, so it teaches no links.
            let ttl_gap = self.cfg.non_int_hops
                && crate::detect::non_int::non_int_hops(r, head_hops as u8)
                    .is_some_and(|g| g.non_int > 0);
            if ttl_gap || r.mtu_exceeded {
                let known: &[PathHop] = if flow.path_partial { &[] } else { &flow.path };
                gap = self.links.gap_in(hops, r.node_id, known);
            }
            if (ttl_gap && gap.is_some())
                || r.path_truncated
                || r.dropped
                || r.drop_reason.is_some()
                || r.hop_limit_exceeded
                || r.mtu_exceeded
                || transit_queue_report
            {
                change = flow.observe_partial_path(now, hops, paths);
            } else {
                let before = Arc::as_ptr(&flow.path);
                change = flow.observe_path(now, hops, paths);
                flow.observe_latency(now, hops);
                if !ttl_gap && !std::ptr::eq(before, Arc::as_ptr(&flow.path)) {
                    // A new path (rare): its links join per-hop reports.
                    self.links.learn_path(&flow.path);
                }
            }
        } else if let [hop] = r.hops() {
            // An INT-XD postcard or INT-MX report: one node's view, joined with the others' a
            // window later. A dropped packet's report says where it died, not where it goes.
            // Counted for its node's report loss (a silence of the node is weighed by it).
            if let Some(n) = self.received.get_mut(&r.node_id) {
                *n += 1;
            } else if self.received.len() < crate::seq::MAX_LOSS_NODES {
                self.received.insert(r.node_id, 1);
            } else {
                // Bounded like the history it feeds: a node beyond it is weighed as lossless.
                self.received_untracked += 1;
            }
            if !(r.dropped || r.drop_reason.is_some()) {
                postcard = Some((*hop, r.packet_fp, r.ip_ttl, flow.join_before(hop.node_id)));
            }
        } else {
            flow.observe_latency(now, r.hops());
        }
        if let Some(old) = change {
            // An INT-MD report's path: the raiser's clock is this record's.
            self.path_changed(now, None, key, id, old);
        }
        if let Some((hop, packet, ttl, join_before)) = postcard {
            self.add_postcard(now, key, (hop, packet, ttl), join_before, loss);
        }
        if self.flows.len() > self.max_flows {
            self.evict_flows();
        }
        FlowSeen {
            id: Some(id),
            head_hops: head_hops as u8,
            gap,
        }
    }

    /// Live state keeps the flows of the last `flow_idle_ns` (the store keeps every flow's
    /// summary): looked for every tenth of that, one pass over the table.
    #[inline(never)]
    fn expire_idle_flows(&mut self, now: u64) {
        let idle = self.cfg.flow_idle_ns;
        self.next_idle_sweep_ns = now.saturating_add((idle / 10).max(1_000_000_000));
        let before = self.flows.len();
        self.flows
            .retain(|f| now.saturating_sub(f.last_seen_ns) < idle);
        let flows = &self.flows;
        // Without a store nothing else empties the list: it would keep the keys of flows gone.
        self.dirty_flows.retain(|k| flows.get(k).is_some());
        self.flows_expired += (before - self.flows.len()) as u64;
        self.paths.forget_unused();
    }

    /// Evicts the least recently seen flows (report time) down to seven eighths of the limit:
    /// a pass over the table once per `limit / 8` new flows, nothing per report.
    #[cold]
    #[inline(never)]
    fn evict_flows(&mut self) {
        let k = excess(self.flows.len(), self.max_flows);
        let mut times: Vec<u64> = self.flows.values().map(|f| f.last_seen_ns).collect();
        let mut cut = Cutoff::oldest(&mut times, k);
        let before = self.flows.len();
        self.flows.retain(|f| !cut.take(f.last_seen_ns));
        let flows = &self.flows;
        self.dirty_flows.retain(|k| flows.get(k).is_some());
        self.flows_evicted += (before - self.flows.len()) as u64;
        self.paths.forget_unused();
    }

    /// Raises flow `key`'s change from path `old`, first seen at switch time `at_ns` when the
    /// caller knows it (else the receive time on the switch's clock): `detect::path_change`.
    #[inline(never)]
    fn path_changed(&mut self, now: u64, at_ns: Option<u64>, key: FlowKey, id: u64, old: Path) {
        let Some(flow) = self.flows.get(&key) else {
            return;
        };
        let new = Arc::clone(&flow.path);
        path_change::raise(&mut self.raiser, now, at_ns, (key, id), old, new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(node_id: u32) -> crate::record::Hop {
        let mut h = crate::record::Hop::default();
        h.node_id = node_id;
        h
    }

    /// A node's report filter holds back most packets of a flow, each hop deciding for itself:
    /// a packet the hops on either side reported and this one did not (two TTLs apart) is no
    /// hop without INT while the node reported the flow within the last report interval.
    #[test]
    fn a_packet_the_middle_hops_filter_held_back_is_no_hop_without_int() {
        const MS: u64 = 1_000_000;
        let cfg = DetectConfig::default();
        let mut shard = FlowShard::new(cfg.clone());
        let mut loss = LossHistory::new(cfg.postcards.silent_drop_ns / 8);
        let key = FlowKey {
            src: std::net::Ipv4Addr::new(10, 0, 1, 1).to_ipv6_mapped(),
            dst: std::net::Ipv4Addr::new(10, 0, 2, 1).to_ipv6_mapped(),
            proto: 17,
            src_port: 40000,
            dst_port: 5000,
        };
        let ids = AtomicU64::new(1);
        // Leaf 1 (in by edge port 10), spine 101, leaf 2 (out by edge port 10); each hop's
        // timestamps a few µs after the one before, the TTL one lower at each.
        let hops = [(1u32, 10u32, 11u32, 64u8), (101, 1, 2, 63), (2, 11, 10, 62)];
        let report = |shard: &mut FlowShard, loss: &mut LossHistory, n: u64, at: &[usize]| {
            let t = 1_000 * MS + n * 10 * MS;
            for &i in at {
                let (node, ingress, egress, ttl) = hops[i];
                let ts = t + 3_000 * i as u64;
                let mut r = Record::default();
                r.time_ns = t + 50_000;
                r.node_id = node;
                r.flow = Some(key);
                r.packet_fp = n as u32 + 1;
                r.ip_ttl = Some(ttl);
                r.push_hop(
                    crate::record::Hop::at(node)
                        .with_interfaces(Some(ingress), Some(egress))
                        .with_timestamps(Some(ts), Some(ts + 1_000)),
                );
                loss.received(node, 1, r.time_ns);
                shard.process(&r, key, crate::flow::key_hash(&key), None, &ids, loss);
            }
            shard.sweep(t + 50_000, loss);
        };
        for n in 0..40 {
            report(&mut shard, &mut loss, n, &[0, 1, 2]);
        }
        // The spine's filter holds back the next packets the leaves report, for 100 ms.
        for n in 40..50 {
            report(&mut shard, &mut loss, n, &[0, 2]);
        }
        let mut log = crate::event::EventLog::new(&cfg);
        shard.raiser.drain(&mut log, &mut loss);
        let hidden: Vec<_> = log
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::NonIntHops)
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
        // Quiet for longer than a report interval while the leaves report the flow: it
        // stopped adding INT.
        for n in 50..160 {
            report(&mut shard, &mut loss, n, &[0, 2]);
        }
        shard.raiser.drain(&mut log, &mut loss);
        let hidden: Vec<_> = log
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::NonIntHops)
            .collect();
        assert_eq!(hidden.len(), 1, "{:?}", log.events());
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
