//! The incident lifecycle engine: observations from the detectors become [`Incident`]s with a
//! start, updates and an end, one ongoing incident per (kind, place, cause).
//!
//! How observations get here: each fabric shard collects its detectors' observations in an
//! [`IncidentSink`] (one entry per incident key, merged as they come) and hands them to the
//! [`IncidentLog`] at every sweep (every millisecond of report time) and whenever the log is
//! read, so a lasting fault costs one lock per sweep, not one per sample. Path changes come from
//! the flow shards straight to the log ([`IncidentLog::observe_move`]), because one incident
//! gathers the flows of every shard.
//!
//! The lifecycle (every threshold is in `[detect]`, `docs/collector-config.md`):
//! - **start**: the first observation of a key with no ongoing incident creates one, unless
//!   the same key resolved at most `incident_merge_ns` (switch time) before this observation:
//!   then that incident is reopened (flapping is one incident; `counts.episodes` counts the
//!   episodes merged).
//! - **updates**: later observations add their counts, raise the peak and add their flows.
//! - **end**: at the first normal sample (congestion: occupancy ≤ `congestion_end`; latency:
//!   a sample that is not anomalous) with the uncertainty since the last anomalous one; or when
//!   no evidence arrived for `incident_quiet_ns` of receive time (drops, report loss, path
//!   changes, hop limit, MTU, hops without INT; congestion ends when quiet for
//!   `episode_quiet_ns`), at the last evidence; or evicted by the per-kind quota below.
//!
//! Bounds: at most [`ONGOING_PER_KIND`] ongoing incidents of each kind (a new one resolves the
//! least recently updated of its kind, counted in [`IncidentLog::evicted`]) and the newest
//! [`RESOLVED_PER_KIND`] resolved ones of each kind (the oldest go, counted): one kind cannot
//! evict another's. An incident counts up to [`TRACKED_FLOWS`] distinct flows exactly (past
//! that, `counts.flows` stays at the bound) and ranks at most [`RANKED_FLOWS`] by weight.
//! Path changes wait for correlation in a list of at most [`PENDING_MOVES`] (past it the
//! oldest are correlated early).
//!
//! Clocks: start, update, end and peak times are switch time (the hop's timestamps when the
//! metadata carries them, else the report time the caller gave); timers (quiet, eviction order)
//! run on the collector's receive time, which each incident also keeps as `received_ns`.

use std::borrow::Cow;
use std::collections::VecDeque;

use intscope_wire::locate::FlowKey;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::cause::Causes;
use crate::evidence::Evidence;
use crate::flow::{Path, PathHop};
use crate::incident::{
    EndReason, Incident, IncidentCounts, IncidentFlow, IncidentKind, IncidentPlace, IncidentState,
    MAX_INCIDENT_FLOWS, Peak, Severity, Unit,
};
use crate::thresholds::DetectConfig;

/// Most ongoing incidents of one kind.
pub const ONGOING_PER_KIND: usize = 256;
/// Most resolved incidents of one kind kept (the newest).
pub const RESOLVED_PER_KIND: usize = 1024;
/// Distinct flows an ongoing incident counts exactly.
pub const TRACKED_FLOWS: usize = 1024;
/// Flows an incident ranks by weight (the first [`MAX_INCIDENT_FLOWS`] are listed).
pub const RANKED_FLOWS: usize = 64;
/// Path changes waiting for correlation.
pub const PENDING_MOVES: usize = 4096;

/// Searches for a common cause of pending path changes per correlation; the rest are placed
/// one by one.
pub const CORRELATION_ROUNDS: usize = 64;
/// Distinct keys a shard's sink holds between flushes (a fuller sink flushes at once).
pub const SINK_KEYS: usize = 4096;
/// A path change that moved at least this many flows is critical (a link or node out).
const FLOWS_FOR_CRITICAL: u64 = 8;

/// What identifies an incident: one ongoing incident per key. Microbursts share the congestion
/// key (an episode is a microburst or congestion only once it ends).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IncidentKey {
    /// The kind (congestion for microbursts too).
    pub kind: IncidentKind,
    /// Where.
    pub place: IncidentPlace,
    /// Why, within the kind.
    pub cause: Option<Cow<'static, str>>,
}

impl IncidentKey {
    /// The key of `kind` at `place` for `cause`.
    pub fn new(kind: IncidentKind, place: IncidentPlace, cause: Option<Cow<'static, str>>) -> Self {
        IncidentKey {
            kind: family(kind),
            place,
            cause,
        }
    }
}

/// The kind an incident is keyed and kept ongoing under.
fn family(kind: IncidentKind) -> IncidentKind {
    match kind {
        IncidentKind::Microburst => IncidentKind::Congestion,
        k => k,
    }
}

/// The kinds a resolved symptom keyed `key` may be held under: a congestion ends as a
/// microburst or a congestion.
fn resolved_kinds(key: &IncidentKey) -> &[IncidentKind] {
    if key.kind == IncidentKind::Congestion {
        &[IncidentKind::Congestion, IncidentKind::Microburst]
    } else {
        std::slice::from_ref(&key.kind)
    }
}

fn kind_index(kind: IncidentKind) -> usize {
    IncidentKind::ALL
        .iter()
        .position(|&k| k == kind)
        .unwrap_or(0)
}

/// The severity rule: congestion, latency, report loss, MTU and hops without INT are
/// `warning`; a microburst `info`; drops and hop limits `major`, a silent drop `critical`;
/// path changes `major`, `critical` when at least eight flows moved, `info` when the flows
/// went back to their paths before (`link-restored`, `node-restored`: a fault repaired).
pub fn severity(kind: IncidentKind, cause: Option<&str>, flows: u64) -> Severity {
    match kind {
        IncidentKind::Microburst => Severity::Info,
        IncidentKind::Congestion
        | IncidentKind::Latency
        | IncidentKind::ReportLoss
        | IncidentKind::Mtu
        | IncidentKind::NonIntHops => Severity::Warning,
        IncidentKind::Drop if cause == Some("silent") => Severity::Critical,
        IncidentKind::Drop | IncidentKind::HopLimit => Severity::Major,
        IncidentKind::PathChange if cause.is_some_and(|c| c.ends_with("-restored")) => {
            Severity::Info
        }
        IncidentKind::PathChange if flows >= FLOWS_FOR_CRITICAL => Severity::Critical,
        IncidentKind::PathChange => Severity::Major,
    }
}

/// A flow's part in an observation or incident: its weight (occupancy summed over its samples
/// for congestion, reports for the rest) decides its rank and share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowWeight {
    /// The flow.
    pub key: FlowKey,
    /// Its API ID.
    pub id: u64,
    /// Its weight.
    pub weight: u64,
    /// Its samples.
    pub samples: u64,
}

impl FlowWeight {
    /// One sample of flow `key` (API ID `id`), weighing one report.
    pub fn one((key, id): (FlowKey, u64)) -> Self {
        FlowWeight {
            key,
            id,
            weight: 1,
            samples: 1,
        }
    }
}

/// One observation of an incident's evidence.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Switch time of the evidence.
    pub at_ns: u64,
    /// The collector's receive time of it.
    pub received_ns: u64,
    /// Anomalous samples it adds.
    pub samples: u64,
    /// Reports it adds.
    pub reports: u64,
    /// Reports lost it adds.
    pub reports_lost: u64,
    /// Packets dropped it adds, when the switch counts them.
    pub packets_dropped: Option<u64>,
    /// Its value, for the peak.
    pub value: Option<(u64, Unit)>,
    /// When the value was seen, if not at `at_ns` (an episode's highest sample).
    pub value_at_ns: Option<u64>,
    /// The threshold crossed.
    pub threshold: Option<u64>,
    /// The normal value.
    pub baseline: Option<u64>,
    /// The start lies within this much before `at_ns` (for a first observation).
    pub start_uncertainty_ns: u64,
    /// The flow involved.
    pub flow: Option<FlowWeight>,
}

impl Observation {
    /// One sample of one report at switch time `at_ns`, received at `received_ns`.
    pub fn sample(at_ns: u64, received_ns: u64) -> Self {
        Observation {
            at_ns,
            received_ns,
            samples: 1,
            reports: 1,
            reports_lost: 0,
            packets_dropped: None,
            value: None,
            value_at_ns: None,
            threshold: None,
            baseline: None,
            start_uncertainty_ns: 0,
            flow: None,
        }
    }
}

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct End {
    /// Switch time of the end (the first normal sample, or the last evidence).
    pub at_ns: u64,
    /// The end lies within this much before `at_ns`.
    pub uncertainty_ns: u64,
    /// Why it ended.
    pub reason: EndReason,
}

/// An ended episode's totals (congestion: what the episode counted sample by sample).
#[derive(Debug, Clone, Default)]
pub struct EpisodeTotals {
    /// Samples after those already observed.
    pub samples: u64,
    /// Highest value, its unit and when.
    pub peak: Option<(u64, Unit, u64)>,
    /// Switch time from the first to the last anomalous sample.
    pub span_ns: u64,
    /// Its flows by weight.
    pub flows: Vec<FlowWeight>,
}

/// Observations of one key since the last flush.
#[derive(Debug, Clone)]
pub(crate) struct Delta {
    first_ns: u64,
    last_ns: u64,
    first_rx: u64,
    last_rx: u64,
    start_uncertainty_ns: u64,
    observations: u64,
    samples: u64,
    reports: u64,
    reports_lost: u64,
    packets_dropped: Option<u64>,
    peak: Option<Peak>,
    threshold: Option<u64>,
    baseline: Option<u64>,
    flows: Vec<FlowWeight>,
    evidence: Option<Evidence>,
    /// Episodes that ended and restarted within this delta.
    restarts: u64,
    end: Option<End>,
    max_span_ns: u64,
}

impl Delta {
    fn new(o: &Observation, evidence: Option<Evidence>) -> Self {
        let mut d = Delta {
            first_ns: o.at_ns,
            last_ns: o.at_ns,
            first_rx: o.received_ns,
            last_rx: o.received_ns,
            start_uncertainty_ns: o.start_uncertainty_ns,
            observations: 0,
            samples: 0,
            reports: 0,
            reports_lost: 0,
            packets_dropped: None,
            peak: None,
            threshold: o.threshold,
            baseline: o.baseline,
            flows: Vec::new(),
            evidence,
            restarts: 0,
            end: None,
            max_span_ns: 0,
        };
        d.add(o);
        d
    }

    fn add(&mut self, o: &Observation) {
        if self.observations == 0 {
            // A delta opened by an episode's end: its first observation is a restart.
            self.first_rx = o.received_ns;
        }
        self.observations += 1;
        self.first_ns = self.first_ns.min(o.at_ns);
        self.last_ns = self.last_ns.max(o.at_ns);
        self.last_rx = self.last_rx.max(o.received_ns);
        self.samples += o.samples;
        self.reports += o.reports;
        self.reports_lost += o.reports_lost;
        if let Some(p) = o.packets_dropped {
            *self.packets_dropped.get_or_insert(0) += p;
        }
        if let Some((value, unit)) = o.value {
            raise_peak(
                &mut self.peak,
                value,
                unit,
                o.value_at_ns.unwrap_or(o.at_ns),
            );
        }
        self.threshold = self.threshold.or(o.threshold);
        self.baseline = self.baseline.or(o.baseline);
        if let Some(f) = o.flow {
            add_flow(&mut self.flows, f, RANKED_FLOWS);
        }
    }
}

fn raise_peak(peak: &mut Option<Peak>, value: u64, unit: Unit, at_ns: u64) {
    if peak.is_none_or(|p| value > p.value) {
        *peak = Some(Peak { value, unit, at_ns });
    }
}

/// Adds `f` to `flows` (merged by ID); a full list keeps its heaviest.
fn add_flow(flows: &mut Vec<FlowWeight>, f: FlowWeight, bound: usize) {
    if let Some(x) = flows.iter_mut().find(|x| x.id == f.id) {
        x.weight += f.weight;
        x.samples += f.samples;
        return;
    }
    if flows.len() < bound {
        flows.push(f);
        return;
    }
    if let Some(lightest) = flows.iter_mut().min_by_key(|x| x.weight)
        && lightest.weight < f.weight
    {
        *lightest = f;
    }
}

/// Events raised before their symptom reached the lifecycle engine (a shard hands its
/// observations over once per batch), waiting to be linked to it; past this the oldest is
/// left unlinked (counted).
pub const UNLINKED_EVENTS: usize = 4096;

/// A shard's observations on their way to the log, merged per key.
#[derive(Debug, Default)]
pub struct IncidentSink {
    pending: HashMap<IncidentKey, Delta>,
    merge_ns: u64,
}

impl IncidentSink {
    /// A sink that merges an end and a restart within `merge_ns` (switch time).
    pub fn new(merge_ns: u64) -> Self {
        IncidentSink {
            pending: HashMap::default(),
            merge_ns,
        }
    }

    /// Whether nothing waits for the log.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Observation `o` of `key`; `evidence` is built only for the key's first observation
    /// since the last hand-over (the log keeps the evidence of an incident's first). Returns
    /// what must reach the log before anything after it: an ended episode of `key` that `o`
    /// does not continue, or everything pending when the sink is full.
    #[must_use = "a hand-over must reach the log"]
    pub(crate) fn observe(
        &mut self,
        key: IncidentKey,
        o: &Observation,
        evidence: impl FnOnce() -> Evidence,
    ) -> Option<Handover> {
        if let Some(d) = self.pending.get_mut(&key) {
            match d.end {
                Some(end) if o.at_ns.saturating_sub(end.at_ns) > self.merge_ns => {
                    // A new episode after the merge window: the ended one goes first.
                    let ended = self.pending.remove(&key).map(|d| (key.clone(), d));
                    self.pending.insert(key, Delta::new(o, Some(evidence())));
                    return ended.map(|e| vec![e]);
                }
                Some(_) => {
                    d.end = None;
                    d.restarts += 1;
                    d.add(o);
                }
                None => d.add(o),
            }
            return None;
        }
        let full = (self.pending.len() >= SINK_KEYS).then(|| self.take());
        self.pending.insert(key, Delta::new(o, Some(evidence())));
        full
    }

    /// The episode of `key` ended at `end`, with `totals` (its samples after the observed
    /// ones, peak, span and flows). Returns everything pending when the sink was full, which
    /// must reach the log first.
    #[must_use = "a hand-over must reach the log"]
    pub(crate) fn end(
        &mut self,
        key: IncidentKey,
        end: End,
        totals: EpisodeTotals,
    ) -> Option<Handover> {
        let full = (!self.pending.contains_key(&key) && self.pending.len() >= SINK_KEYS)
            .then(|| self.take());
        let d = self.pending.entry(key).or_insert_with(|| Delta {
            first_ns: end.at_ns,
            last_ns: 0,
            first_rx: 0,
            last_rx: 0,
            start_uncertainty_ns: 0,
            observations: 0,
            samples: 0,
            reports: 0,
            reports_lost: 0,
            packets_dropped: None,
            peak: None,
            threshold: None,
            baseline: None,
            flows: Vec::new(),
            evidence: None,
            restarts: 0,
            end: None,
            max_span_ns: 0,
        });
        d.samples += totals.samples;
        d.reports += totals.samples;
        if let Some((value, unit, at)) = totals.peak {
            raise_peak(&mut d.peak, value, unit, at);
        }
        d.max_span_ns = d.max_span_ns.max(totals.span_ns);
        for f in totals.flows {
            add_flow(&mut d.flows, f, RANKED_FLOWS);
        }
        d.end = Some(end);
        full
    }

    /// Everything pending, for the log.
    pub(crate) fn take(&mut self) -> Handover {
        std::mem::take(&mut self.pending).into_iter().collect()
    }
}

/// Observations a sink hands to the log ([`IncidentLog::apply_all`]), in order.
pub(crate) type Handover = Vec<(IncidentKey, Delta)>;

/// The lifecycle thresholds the log applies (from [`DetectConfig`]).
#[derive(Debug, Clone, Copy)]
struct Timing {
    merge_ns: u64,
    quiet_ns: u64,
    congestion_quiet_ns: u64,
    correlate_ns: u64,
    microburst_max_ns: u64,
}

/// An incident with what its updates need.
#[derive(Debug, Clone)]
struct Entry {
    key: IncidentKey,
    inc: Incident,
    /// Distinct flow IDs (ongoing only; emptied on resolution).
    flow_ids: HashSet<u64>,
    ranked: Vec<FlowWeight>,
    /// Receive time of its newest evidence (its quiet timer).
    last_rx: u64,
    /// Longest episode span merged (decides microburst or congestion).
    max_span_ns: u64,
}

impl Entry {
    fn refresh_flows(&mut self) {
        self.ranked
            .sort_by(|a, b| b.weight.cmp(&a.weight).then(a.id.cmp(&b.id)));
        let total: u64 = self.ranked.iter().map(|f| f.weight).sum();
        self.inc.flows = self
            .ranked
            .iter()
            .take(MAX_INCIDENT_FLOWS)
            .map(|f| IncidentFlow {
                flow: f.key,
                flow_id: f.id,
                share: (total > 0)
                    .then(|| (f.weight as f64 / total as f64 * 1000.0).round() / 1000.0),
                samples: f.samples,
            })
            .collect();
        self.inc.counts.flows = self
            .inc
            .counts
            .flows
            .max(self.flow_ids.len() as u64)
            .max(self.ranked.len() as u64);
        self.inc.severity = severity(
            self.inc.kind,
            self.inc.cause.as_deref(),
            self.inc.counts.flows,
        );
    }
}

/// A flow's path change, waiting to be correlated with the others of its time.
#[derive(Debug, Clone)]
struct Move {
    at_ns: u64,
    received_ns: u64,
    flow: FlowWeight,
    /// The flow went back to the path it had before its previous move (a fault repaired):
    /// named after where it returned, not what it left.
    restored: bool,
    /// The links that name it: of the old path missing from the new one (a fault), or of the
    /// new path missing from the old one (a return).
    links: Vec<Link>,
    /// The nodes, likewise.
    nodes: Vec<u32>,
    /// The links and nodes of the other direction: those the flow moved onto (a fault), or
    /// left (a return). A link some flow moved onto in the same window is up: flows that left
    /// it were rehashed (ECMP over a changed set of links), not failed over.
    other: (Vec<Link>, Vec<u32>),
    /// Every node of its old and new paths.
    path_nodes: Vec<u32>,
    /// The flow's first path change in it.
    evidence: Evidence,
    /// The path-change event raised for it, if one was (a rate limit may hold it back).
    event: Option<u64>,
}

/// Flows whose last move is remembered, to tell a return from a move.
pub const REMEMBERED_MOVES: usize = 65_536;

/// A link without its direction: its ends in ID order (a physical link fails both ways).
fn undirected(l: Link) -> Link {
    if l.0 <= l.2 { l } else { (l.2, l.3, l.0, l.1) }
}

/// A link as a path shows it: (node, egress port, next node, its ingress port).
type Link = (u32, Option<u32>, u32, Option<u32>);

fn links(p: &[PathHop]) -> impl Iterator<Item = Link> + '_ {
    p.windows(2)
        .map(|w| (w[0].node_id, w[0].egress_if, w[1].node_id, w[1].ingress_if))
}

/// The links and nodes `old` had that `new` lacks, if the flow really moved: each path must
/// have a hop (node with its ingress and egress ports) the other lacks. A path that only lost
/// hops (a hop that stopped adding INT, an MTU or hop limit, a drop before the sink, a partial
/// per-hop path), only gained them (a hop that records again) or holds the same hops in
/// another order (per-hop reports joined out of order) is no change of forwarding.
pub fn moved(old: &Path, new: &Path) -> Option<(Vec<Link>, Vec<u32>)> {
    let old_links: Vec<Link> = links(old).collect();
    let new_links: Vec<Link> = links(new).collect();
    let gained = new.iter().any(|h| !old.contains(h));
    let lost = old.iter().any(|h| !new.contains(h));
    if old.is_empty() || new.is_empty() || !(gained && lost) {
        return None;
    }
    let left_nodes: Vec<u32> = old
        .iter()
        .map(|h| h.node_id)
        .filter(|n| !new.iter().any(|h| h.node_id == *n))
        .collect();
    // A link whose ends are both still on the new path, one after the other, was only
    // hidden by a hop that stopped recording; what left is the rest.
    let left_links: Vec<Link> = old_links
        .iter()
        .copied()
        .filter(|l| !new_links.contains(l))
        .filter(|l| {
            let a = new.iter().position(|h| h.node_id == l.0);
            let b = new.iter().position(|h| h.node_id == l.2);
            !matches!((a, b), (Some(a), Some(b)) if b > a + 1)
        })
        .collect();
    if left_links.is_empty() && left_nodes.is_empty() {
        return None;
    }
    Some((left_links, left_nodes))
}

/// A link or node that flows left: it stays an ongoing incident until flows come back
/// (no quiet time: a link that is down sends no evidence).
fn is_outage(key: &IncidentKey) -> bool {
    key.kind == IncidentKind::PathChange && matches!(key.cause.as_deref(), Some("link" | "node"))
}

/// The outages a return to `key`'s link or node repairs: the outage at its place, and, of a
/// link, the one named from the link's other end (flows of both directions return to it).
fn repaired(key: &IncidentKey) -> [Option<IncidentKey>; 2] {
    let cause = match key
        .cause
        .as_deref()
        .and_then(|c| c.strip_suffix("-restored"))
    {
        Some("link") => "link",
        Some("node") => "node",
        _ => return [None, None],
    };
    if key.kind != IncidentKind::PathChange {
        return [None, None];
    }
    let at = |place| IncidentKey {
        kind: IncidentKind::PathChange,
        place,
        cause: Some(Cow::Borrowed(cause)),
    };
    let p = key.place;
    let reversed = IncidentPlace {
        node: p.peer_node,
        port: p.peer_port,
        peer_node: p.node,
        peer_port: p.port,
        ..p
    };
    let other_end = (cause == "link" && p.peer_node.is_some()).then(|| at(reversed));
    [Some(at(p)), other_end]
}

/// The incidents: ongoing by key, resolved by kind (each kind its own quota).
#[derive(Debug)]
pub struct IncidentLog {
    timing: Timing,
    /// The incidents the symptoms below make, one per fault: what is published.
    causes: Causes,
    /// Path-change events placed in incidents, waiting for the event log to link them
    /// ([`IncidentLog::take_placed_events`]).
    placed_events: VecDeque<(IncidentKey, u64)>,
    /// Of those, left unlinked because too many waited.
    pub placed_events_dropped: u64,
    /// Events the event log left without their incident (see `Event::incident_id`).
    pub events_unlinked: u64,
    /// The engine's own IDs of symptoms (internal: [`Causes`] publishes its own).
    next_id: u64,
    ongoing: HashMap<IncidentKey, Entry>,
    ongoing_by_kind: [usize; 9],
    resolved: [VecDeque<Entry>; 9],
    /// Symptoms started, by kind.
    pub started: [u64; 9],
    /// Symptoms resolved, by kind (a reopened one counts again when it ends again).
    pub ended: [u64; 9],
    /// Symptoms evicted, by kind: ongoing ones resolved early by the quota, and resolved ones
    /// dropped from the engine's history (their incidents keep them).
    pub evicted: [u64; 9],
    /// Episodes merged into an incident that was ongoing or had just ended (flapping).
    pub merged: u64,
    /// Path changes that were no change of forwarding (a path that only lost or gained hops).
    pub moves_ignored: u64,
    moves: VecDeque<Move>,
    /// Links and nodes flows moved onto and left in the last correlation window: flows whose
    /// moves were reported a window later (switches that filter reports report a flow once an
    /// interval) are weighed with them.
    last_up: (Busy, Busy),
    /// Receive time of the window `last_up` was gathered in.
    last_up_rx: u64,
    /// Each flow's last move (old path, new path, whether it was a return), the oldest
    /// forgotten first.
    last_moves: HashMap<u64, (Path, Path, bool)>,
    last_move_order: VecDeque<u64>,
    /// Receive time, the newest a flush or move brought.
    now_rx: u64,
    next_settle_rx: u64,
}

/// How often (receive time) the log looks for quiet incidents and due correlations.
const SETTLE_NS: u64 = 10_000_000;

impl Default for IncidentLog {
    fn default() -> Self {
        IncidentLog::new(&DetectConfig::default())
    }
}

impl IncidentLog {
    /// A log with `cfg`'s lifecycle thresholds.
    pub fn new(cfg: &DetectConfig) -> Self {
        IncidentLog {
            causes: Causes::new(
                cfg.incident_merge_ns,
                cfg.incident_grouping_ns,
                cfg.path_correlation_ns,
                RESOLVED_PER_KIND,
            ),
            timing: Timing {
                merge_ns: cfg.incident_merge_ns,
                quiet_ns: cfg.incident_quiet_ns,
                congestion_quiet_ns: cfg.incident_quiet_ns.max(cfg.episode_quiet_ns),
                correlate_ns: cfg.path_correlation_ns,
                microburst_max_ns: cfg.microburst_max_ns,
            },
            next_id: 1,
            ongoing: HashMap::default(),
            ongoing_by_kind: [0; 9],
            resolved: Default::default(),
            started: [0; 9],
            ended: [0; 9],
            evicted: [0; 9],
            merged: 0,
            moves_ignored: 0,
            moves: VecDeque::new(),
            last_up: Default::default(),
            last_up_rx: 0,
            last_moves: HashMap::default(),
            last_move_order: VecDeque::new(),
            now_rx: 0,
            next_settle_rx: 0,
            // A silent-drop window (and the reorder time before it) within the history.
            placed_events: VecDeque::new(),
            placed_events_dropped: 0,
            events_unlinked: 0,
        }
    }

    /// The ID the next incident will get.
    pub fn next_id(&self) -> u64 {
        self.causes.next_id()
    }

    /// Continues IDs after those a store already holds.
    pub fn continue_ids(&mut self, next: u64) {
        self.causes.continue_ids(next);
    }

    /// Every incident held, ongoing and resolved, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Incident> {
        self.causes.iter()
    }

    /// The incident with this ID, if held.
    pub fn get(&self, id: u64) -> Option<&Incident> {
        self.causes.get(id)
    }

    /// Ongoing incidents whose root cause is of `kind`.
    pub fn ongoing(&self, kind: IncidentKind) -> usize {
        self.causes.ongoing(kind)
    }

    /// Resolved incidents whose root cause is of `kind` held.
    pub fn resolved(&self, kind: IncidentKind) -> usize {
        self.causes.resolved(kind)
    }

    /// Incidents started, by their root cause's kind when they started.
    pub fn started(&self) -> [u64; 9] {
        self.causes.started
    }

    /// Incidents dropped from the resolved history (the oldest past [`RESOLVED_PER_KIND`] of
    /// a root kind), by kind.
    pub fn dropped(&self) -> [u64; 9] {
        self.causes.dropped
    }

    /// Incidents gathering their symptoms before they are published.
    pub fn pending_incidents(&self) -> usize {
        self.causes.pending()
    }

    /// Path changes waiting for correlation.
    pub fn pending_moves(&self) -> usize {
        self.moves.len()
    }

    /// Incidents started, updated or resolved since the last call, newest ID last (what the
    /// store writes at each flush; an incident evicted before it is lost to the store).
    pub fn take_changed(&mut self) -> Vec<Incident> {
        self.causes.take_changed()
    }

    /// Marks every change as taken without copying it (a collector without a store).
    pub fn forget_changed(&mut self) {
        self.causes.forget_changed();
    }

    /// The engine's ID of the symptom keyed `key` that evidence at switch time `at_ns` is
    /// of: the ongoing one, else a resolved one still held whose span holds it (an episode's
    /// end event is raised as its symptom ends).
    pub(crate) fn symptom_of(&self, key: &IncidentKey, at_ns: u64) -> Option<u64> {
        if let Some(id) = self.ongoing_symptom_of(key) {
            return Some(id);
        }
        resolved_kinds(key)
            .iter()
            .filter_map(|&k| {
                self.resolved[kind_index(k)]
                    .iter()
                    .rev()
                    .find(|e| {
                        &e.key == key
                            && e.inc.start_ns.saturating_sub(e.inc.start_uncertainty_ns) <= at_ns
                            && e.inc.end_ns.is_some_and(|end| at_ns <= end)
                    })
                    .map(|e| e.inc.id)
            })
            .max()
    }

    /// The engine's ID of the ongoing symptom keyed `key` (a lookup, where
    /// [`IncidentLog::symptom_of`] may also read the resolved history).
    pub(crate) fn ongoing_symptom_of(&self, key: &IncidentKey) -> Option<u64> {
        self.ongoing.get(key).map(|e| e.inc.id)
    }

    /// The newest receive time seen.
    pub(crate) fn now_rx(&self) -> u64 {
        self.now_rx
    }

    /// The published incident the engine's symptom `symptom` belongs to
    /// (grouped by cause): `None` while it gathers its symptoms, or once it left the history.
    pub fn incident_of(&self, symptom: u64) -> Option<u64> {
        self.causes.incident_of(symptom)
    }

    /// Applies a shard's merged observations.
    pub(crate) fn apply_all(&mut self, pending: impl IntoIterator<Item = (IncidentKey, Delta)>) {
        for (key, d) in pending {
            self.apply(key, d);
        }
    }

    fn apply(&mut self, key: IncidentKey, d: Delta) {
        self.now_rx = self.now_rx.max(d.last_rx);
        for outage in repaired(&key).into_iter().flatten() {
            // Flows came back: the link or node they left is repaired.
            self.resolve(
                &outage,
                End {
                    at_ns: d.last_ns.max(d.first_ns),
                    uncertainty_ns: 0,
                    reason: EndReason::Normal,
                },
            );
        }
        let fresh = d.observations > 0 || d.end.is_none();
        let mut created = false;
        if !self.ongoing.contains_key(&key) {
            if !fresh {
                // An end whose start this log never saw (evicted or resolved by quota).
                return;
            }
            if !self.reopen(&key, d.first_ns) {
                self.create(key.clone(), &d);
                created = true;
            }
        }
        let Some(e) = self.ongoing.get_mut(&key) else {
            return;
        };
        let inc = &mut e.inc;
        // The observation that created it is no update.
        inc.updates += d.observations - u64::from(created && d.observations > 0);
        if d.first_ns < inc.start_ns {
            inc.start_ns = d.first_ns;
        }
        inc.last_update_ns = inc.last_update_ns.max(d.last_ns).max(
            d.end
                .map_or(0, |x| x.at_ns.saturating_sub(x.uncertainty_ns)),
        );
        inc.counts.samples += d.samples;
        inc.counts.reports += d.reports;
        inc.counts.reports_lost += d.reports_lost;
        if let Some(p) = d.packets_dropped {
            *inc.counts.packets_dropped.get_or_insert(0) += p;
        }
        inc.counts.episodes += d.restarts;
        self.merged += d.restarts;
        if let Some(p) = d.peak {
            raise_peak(&mut inc.peak, p.value, p.unit, p.at_ns);
        }
        inc.threshold = inc.threshold.or(d.threshold);
        inc.baseline = inc.baseline.or(d.baseline);
        e.last_rx = e.last_rx.max(d.last_rx);
        e.max_span_ns = e.max_span_ns.max(d.max_span_ns);
        for f in &d.flows {
            if e.flow_ids.len() < TRACKED_FLOWS {
                e.flow_ids.insert(f.id);
            }
            add_flow(&mut e.ranked, *f, RANKED_FLOWS);
        }
        e.refresh_flows();
        match d.end {
            Some(end) => self.resolve(&key, end),
            None => self.causes.update(&e.inc),
        }
    }

    /// Reopens the resolved incident of `key` if it ended within the merge window before
    /// `at_ns`.
    fn reopen(&mut self, key: &IncidentKey, at_ns: u64) -> bool {
        let merge = self.timing.merge_ns;
        for &kind in resolved_kinds(key) {
            let list = &mut self.resolved[kind_index(kind)];
            let found = list.iter().rposition(|e| {
                e.key == *key
                    && e.inc.end_ns.is_some_and(|end| {
                        at_ns.saturating_add(merge) >= end && at_ns <= end.saturating_add(merge)
                    })
            });
            if let Some(i) = found
                && let Some(mut e) = list.remove(i)
            {
                e.inc.state = IncidentState::Ongoing;
                e.inc.kind = key.kind;
                e.inc.end_ns = None;
                e.inc.end_uncertainty_ns = 0;
                e.inc.end_reason = None;
                // The flows it listed stay its flows: new ones count on top of them.
                e.flow_ids = e.ranked.iter().map(|f| f.id).collect();
                e.inc.counts.episodes += 1;
                self.merged += 1;
                self.make_room(key.kind);
                self.ongoing_by_kind[kind_index(key.kind)] += 1;
                self.ongoing.insert(key.clone(), e);
                return true;
            }
        }
        false
    }

    fn create(&mut self, key: IncidentKey, d: &Delta) {
        self.make_room(key.kind);
        let id = self.next_id;
        self.next_id += 1;
        let k = kind_index(key.kind);
        self.started[k] += 1;
        self.ongoing_by_kind[k] += 1;
        let cause = key.cause.as_ref().map(|c| c.to_string());
        let inc = Incident {
            id,
            kind: key.kind,
            place: key.place,
            severity: severity(key.kind, cause.as_deref(), 0),
            cause,
            state: IncidentState::Ongoing,
            start_ns: d.first_ns,
            start_uncertainty_ns: d.start_uncertainty_ns,
            last_update_ns: d.first_ns,
            end_ns: None,
            end_uncertainty_ns: 0,
            end_reason: None,
            received_ns: Some(d.first_rx),
            updates: 0,
            counts: IncidentCounts {
                episodes: 1,
                ..IncidentCounts::default()
            },
            peak: None,
            threshold: None,
            baseline: None,
            flows: Vec::new(),
            symptoms: Vec::new(),
            evidence: d.evidence.clone(),
        };
        self.ongoing.insert(
            key.clone(),
            Entry {
                key,
                inc,
                flow_ids: HashSet::default(),
                ranked: Vec::new(),
                last_rx: d.first_rx,
                max_span_ns: 0,
            },
        );
    }

    /// Below the ongoing quota of `kind`: resolves the least recently updated one if full.
    fn make_room(&mut self, kind: IncidentKind) {
        let k = kind_index(kind);
        if self.ongoing_by_kind[k] < ONGOING_PER_KIND {
            return;
        }
        let oldest = self
            .ongoing
            .values()
            .filter(|e| e.key.kind == kind)
            .min_by_key(|e| (e.last_rx, e.inc.id))
            .map(|e| (e.key.clone(), e.inc.last_update_ns));
        if let Some((key, last)) = oldest {
            self.evicted[k] += 1;
            self.resolve(
                &key,
                End {
                    at_ns: last,
                    uncertainty_ns: 0,
                    reason: EndReason::Evicted,
                },
            );
        }
    }

    fn resolve(&mut self, key: &IncidentKey, end: End) {
        let Some(mut e) = self.ongoing.remove(key) else {
            return;
        };
        let k = kind_index(key.kind);
        self.ongoing_by_kind[k] = self.ongoing_by_kind[k].saturating_sub(1);
        let inc = &mut e.inc;
        inc.state = IncidentState::Resolved;
        inc.end_ns = Some(end.at_ns.max(inc.start_ns).max(inc.last_update_ns));
        inc.end_uncertainty_ns = end.uncertainty_ns;
        inc.end_reason = Some(end.reason);
        if key.kind == IncidentKind::Congestion && e.max_span_ns <= self.timing.microburst_max_ns {
            inc.kind = IncidentKind::Microburst;
        }
        e.flow_ids = HashSet::default();
        e.refresh_flows();
        self.causes.update(&e.inc);
        let kind = e.inc.kind;
        let k = kind_index(kind);
        self.ended[k] += 1;
        let list = &mut self.resolved[k];
        if list.len() >= RESOLVED_PER_KIND {
            list.pop_front();
            self.evicted[k] += 1;
        }
        list.push_back(e);
    }

    /// Resolves incidents quiet for their time and correlates the path changes due, at receive
    /// time `now_rx`. Cheap unless due (every 10 ms of receive time).
    pub fn settle(&mut self, now_rx: u64) {
        self.now_rx = self.now_rx.max(now_rx);
        if self.now_rx < self.next_settle_rx {
            return;
        }
        self.next_settle_rx = self.now_rx + SETTLE_NS;
        let now = self.now_rx;
        let t = self.timing;
        let quiet: Vec<(IncidentKey, u64)> = self
            .ongoing
            .values()
            .filter(|e| {
                let limit = if e.key.kind == IncidentKind::Congestion {
                    t.congestion_quiet_ns
                } else {
                    t.quiet_ns
                };
                now.saturating_sub(e.last_rx) > limit && !is_outage(&e.key)
            })
            .map(|e| (e.key.clone(), e.inc.last_update_ns))
            .collect();
        for (key, last) in quiet {
            self.resolve(
                &key,
                End {
                    at_ns: last,
                    uncertainty_ns: 0,
                    reason: EndReason::Quiet,
                },
            );
        }
        if self
            .moves
            .front()
            .is_some_and(|m| now.saturating_sub(m.received_ns) >= t.correlate_ns)
        {
            self.correlate();
        }
        self.causes.publish_due(now);
    }

    /// Correlates every path change still waiting, however recent (the end of a replay: no
    /// later change will come to join them).
    pub fn correlate_now(&mut self) {
        if !self.moves.is_empty() {
            self.correlate();
        }
        self.causes.publish_due(u64::MAX);
    }

    /// A flow's path changed from `old` to `new` at `at_ns` (received at `received_ns`): if it
    /// left a link or node of an ongoing path-change incident it joins it, else it waits
    /// `path_correlation_ns` for the other flows of the same fault. A flow that goes back to
    /// the path it had before its previous move is a return (the fault repaired), named after
    /// where it returned. Returns whether it was a move (see `moved`).
    pub fn observe_move(
        &mut self,
        at_ns: u64,
        received_ns: u64,
        flow: (FlowKey, u64),
        (old, new): (&Path, &Path),
        event: Option<u64>,
        evidence: impl FnOnce() -> Evidence,
    ) -> bool {
        self.now_rx = self.now_rx.max(received_ns);
        let Some((left_links, left_nodes)) = moved(old, new) else {
            self.moves_ignored += 1;
            return false;
        };
        // Back where its last move left: a return, unless that move was itself one (then the
        // flow leaves its path again: a link that failed twice is two failures, not a repair).
        let restored = self
            .last_moves
            .get(&flow.1)
            .is_some_and(|(before, _, returned)| !returned && before == new);
        let onto = moved(new, old).unwrap_or_default();
        let ((links, nodes), other) = if restored {
            (onto, (left_links, left_nodes))
        } else {
            ((left_links, left_nodes), onto)
        };
        self.remember_move(flow.1, old, new, restored);
        let mut path_nodes: Vec<u32> = old.iter().chain(new.iter()).map(|h| h.node_id).collect();
        path_nodes.sort_unstable();
        path_nodes.dedup();
        let m = Move {
            at_ns,
            received_ns,
            flow: FlowWeight::one(flow),
            restored,
            links,
            nodes,
            other,
            path_nodes,
            evidence: evidence(),
            event,
        };
        let joined = self
            .ongoing
            .values()
            .filter(|e| e.key.kind == IncidentKind::PathChange)
            .find(|e| covers(&e.key.place, e.key.cause.as_deref(), &m))
            .map(|e| e.key.clone());
        if let Some(key) = joined {
            self.placed(&key, std::slice::from_ref(&m));
            self.apply(key, move_delta(&[m], None));
            return true;
        }
        if self.moves.len() >= PENDING_MOVES {
            self.correlate();
        }
        self.moves.push_back(m);
        true
    }

    fn remember_move(&mut self, flow: u64, old: &Path, new: &Path, returned: bool) {
        if self
            .last_moves
            .insert(flow, (old.clone(), new.clone(), returned))
            .is_none()
        {
            self.last_move_order.push_back(flow);
            if self.last_move_order.len() > REMEMBERED_MOVES
                && let Some(gone) = self.last_move_order.pop_front()
            {
                self.last_moves.remove(&gone);
            }
        }
    }

    /// Groups the waiting path changes into incidents: the link (either direction) or node
    /// that the most of them left is named first (a link before a node that explains as
    /// many: it is more specific), its flows become one incident, and so on until every change
    /// is placed. Returns are grouped apart, by where they returned.
    fn correlate(&mut self) {
        // Links and nodes some flow moved onto (gained) or, in a repair, left, in this window
        // and the one before: a failed link is left and gained by none, a repaired one
        // gained and left by none. The others are up, and flows that left them (or came back
        // to them) were rehashed over a changed set of equal-cost links by the fault that
        // names the window.
        // Faults are weighed against the links faults moved flows onto, repairs against the
        // links repairs moved flows off.
        let mut gained = Busy::default();
        let mut left = Busy::default();
        for m in &self.moves {
            let up = if m.restored { &mut left } else { &mut gained };
            up.add(&m.other.0, &m.other.1);
        }
        let (mut last_gained, mut last_left) = std::mem::replace(&mut self.last_up, (gained, left));
        // Only the window just before counts: older moves say nothing of the links now.
        let recent = self.now_rx.saturating_sub(self.last_up_rx) <= 2 * self.timing.correlate_ns;
        self.last_up_rx = self.now_rx;
        if !recent {
            (last_gained, last_left) = Default::default();
        }
        let (mut gained, mut left) = (last_gained, last_left);
        gained.merge(&self.last_up.0);
        left.merge(&self.last_up.1);
        let (returns, faults): (Vec<Move>, Vec<Move>) =
            self.moves.drain(..).partition(|m| m.restored);
        for (moves, up) in [(faults, &gained), (returns, &left)] {
            // Rehashed flows of a fault whose incident a window before named it.
            let mut moves = self.join_rehashed(moves, up);
            let mut rounds = 0;
            while !moves.is_empty() {
                let Some((place, cause)) = best_cause(&moves, up).or_else(|| {
                    // Only rehashed flows left: placed as they are.
                    best_cause(&moves, &Busy::default())
                }) else {
                    break;
                };
                let ends: Vec<u32> = place.node.into_iter().chain(place.peer_node).collect();
                let (mine, rest): (Vec<Move>, Vec<Move>) = moves.into_iter().partition(|m| {
                    covers(&place, Some(cause), m)
                        || (up.explains(m) && m.path_nodes.iter().any(|n| ends.contains(n)))
                });
                moves = rest;
                if mine.is_empty() {
                    break;
                }
                let shared = mine.len() > 1;
                self.apply_moves(place, cause, &mine);
                rounds += 1;
                // Each round costs a pass over what is left: once the best cause explains a
                // single move (or after CORRELATION_ROUNDS), the rest share no cause worth a
                // search, so each is placed on its own in one pass (spoofed or scattered
                // paths would make the search quadratic in PENDING_MOVES).
                if !shared || rounds >= CORRELATION_ROUNDS {
                    self.apply_each(moves);
                    break;
                }
            }
        }
    }

    /// Moves of rehashed flows (every link and node they left, or came back to, is `up`, see
    /// [`IncidentLog::correlate`]) whose paths touch a link or node an ongoing path-change
    /// incident of the same direction (fault or repair) names join it; returns the others.
    fn join_rehashed(&mut self, moves: Vec<Move>, up: &Busy) -> Vec<Move> {
        let faults: Vec<(IncidentKey, Vec<u32>)> = self
            .ongoing
            .values()
            .filter(|e| e.key.kind == IncidentKind::PathChange)
            .map(|e| {
                let p = &e.key.place;
                (
                    e.key.clone(),
                    p.node.into_iter().chain(p.peer_node).collect(),
                )
            })
            .collect();
        if faults.is_empty() {
            return moves;
        }
        let mut rest = Vec::with_capacity(moves.len());
        for m in moves {
            let home = up.explains(&m).then(|| {
                faults.iter().find(|(k, ends)| {
                    let restored = k.cause.as_deref().is_some_and(|c| c.ends_with("-restored"));
                    restored == m.restored && m.path_nodes.iter().any(|n| ends.contains(n))
                })
            });
            match home.flatten() {
                Some((key, _)) => {
                    self.placed(key, std::slice::from_ref(&m));
                    self.apply(key.clone(), move_delta(&[m], None));
                }
                None => rest.push(m),
            }
        }
        rest
    }

    /// One path-change incident for `moves`, at `place` for `cause`.
    fn apply_moves(&mut self, place: IncidentPlace, cause: &'static str, moves: &[Move]) {
        let key = IncidentKey::new(IncidentKind::PathChange, place, Some(Cow::Borrowed(cause)));
        let d = move_delta(moves, Some(moves[0].evidence.clone()));
        self.placed(&key, moves);
        self.apply(key, d);
    }

    /// Notes the events of `moves`, placed in the incident keyed `key`, for the event log to
    /// link ([`IncidentLog::take_placed_events`]); at most [`UNLINKED_EVENTS`]
    /// wait (past that the oldest are left unlinked, counted).
    fn placed(&mut self, key: &IncidentKey, moves: &[Move]) {
        for id in moves.iter().filter_map(|m| m.event) {
            if self.placed_events.len() >= UNLINKED_EVENTS {
                self.placed_events.pop_front();
                self.placed_events_dropped += 1;
            }
            self.placed_events.push_back((key.clone(), id));
        }
    }

    /// The path-change events placed in incidents since the last call, with their keys.
    pub(crate) fn take_placed_events(&mut self) -> VecDeque<(IncidentKey, u64)> {
        std::mem::take(&mut self.placed_events)
    }

    /// Moves that share no cause, each grouped with those of the same place and cause, in one
    /// pass.
    fn apply_each(&mut self, moves: Vec<Move>) {
        let mut groups: Vec<((IncidentPlace, &'static str), Vec<Move>)> = Vec::new();
        let mut index: HashMap<(IncidentPlace, &'static str), usize> = HashMap::default();
        for m in moves {
            let Some(c) = best_cause(std::slice::from_ref(&m), &Busy::default()) else {
                continue;
            };
            match index.get(&c) {
                Some(&i) => groups[i].1.push(m),
                None => {
                    index.insert(c, groups.len());
                    groups.push((c, vec![m]));
                }
            }
        }
        for ((place, cause), mine) in groups {
            self.apply_moves(place, cause, &mine);
        }
    }
}

/// Links (undirected) and nodes that are up in a correlation window (see
/// [`IncidentLog::correlate`]).
#[derive(Debug, Default)]
struct Busy {
    links: HashSet<Link>,
    nodes: HashSet<u32>,
}

impl Busy {
    fn add(&mut self, links: &[Link], nodes: &[u32]) {
        self.links.extend(links.iter().map(|&l| undirected(l)));
        self.nodes.extend(nodes.iter().copied());
    }

    fn merge(&mut self, other: &Busy) {
        self.links.extend(other.links.iter().copied());
        self.nodes.extend(other.nodes.iter().copied());
    }

    /// Whether a link or node that names `m` is up: a flow rehashed off (or back onto) a
    /// link that still carries others, not one failed (or repaired) itself.
    fn explains(&self, m: &Move) -> bool {
        m.links.iter().any(|&l| self.links.contains(&undirected(l)))
            || m.nodes.iter().any(|n| self.nodes.contains(n))
    }
}

/// The link or node that explains the most of `moves` (all faults, or all returns), with the
/// incident cause naming it; links and nodes `up` are no candidates.
fn best_cause(moves: &[Move], up: &Busy) -> Option<(IncidentPlace, &'static str)> {
    // Candidates: undirected links (with how often each direction was named) and nodes.
    let mut links: HashMap<Link, (u64, HashMap<Link, u64>)> = HashMap::default();
    let mut nodes: HashMap<u32, u64> = HashMap::default();
    for m in moves {
        let mut seen: Vec<Link> = Vec::new();
        for &l in &m.links {
            let u = undirected(l);
            if up.links.contains(&u) {
                continue;
            }
            let c = links.entry(u).or_default();
            if !seen.contains(&u) {
                seen.push(u);
                c.0 += 1;
            }
            *c.1.entry(l).or_default() += 1;
        }
        for &n in m.nodes.iter().filter(|n| !up.nodes.contains(n)) {
            *nodes.entry(n).or_default() += 1;
        }
    }
    let best_link = links
        .iter()
        .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.0.cmp(a.0)))
        .map(|(_, (n, dirs))| {
            let dir = dirs
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(l, _)| *l);
            (*n, dir)
        });
    let best_node = nodes
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(n, c)| (*n, *c));
    let restored = moves.first().is_some_and(|m| m.restored);
    match (best_link, best_node) {
        (Some((n, Some(l))), node) if node.is_none_or(|(_, c)| n >= c) => Some((
            IncidentPlace {
                node: Some(l.0),
                port: l.1,
                peer_node: Some(l.2),
                peer_port: l.3,
                ..IncidentPlace::default()
            },
            if restored { "link-restored" } else { "link" },
        )),
        (_, Some((n, _))) => Some((
            IncidentPlace {
                node: Some(n),
                ..IncidentPlace::default()
            },
            if restored { "node-restored" } else { "node" },
        )),
        _ => None,
    }
}

/// Whether a move left (or, for a return, came back to) the link or node an incident is
/// placed at; a link in either direction.
fn covers(place: &IncidentPlace, cause: Option<&str>, m: &Move) -> bool {
    let restored_cause = cause.is_some_and(|c| c.ends_with("-restored"));
    if restored_cause != m.restored {
        return false;
    }
    match cause {
        Some("node" | "node-restored") => place.node.is_some_and(|n| m.nodes.contains(&n)),
        _ => {
            let Some((a, b)) = place.node.zip(place.peer_node) else {
                return false;
            };
            let here = undirected((a, place.port, b, place.peer_port));
            m.links.iter().any(|&l| undirected(l) == here)
        }
    }
}

fn move_delta(moves: &[Move], evidence: Option<Evidence>) -> Delta {
    let first = &moves[0];
    let mut d = Delta::new(
        &Observation {
            flow: Some(first.flow),
            value: None,
            ..Observation::sample(first.at_ns, first.received_ns)
        },
        evidence,
    );
    for m in &moves[1..] {
        d.add(&Observation {
            flow: Some(m.flow),
            ..Observation::sample(m.at_ns, m.received_ns)
        });
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn hop(node: u32, i: u32, e: u32) -> PathHop {
        PathHop {
            node_id: node,
            ingress_if: Some(i),
            egress_if: Some(e),
        }
    }

    #[test]
    fn only_real_moves_count() {
        let old: Path = Arc::from(vec![hop(1, 1, 3), hop(101, 1, 2), hop(2, 1, 5)]);
        let shorter: Path = Arc::from(vec![hop(1, 1, 3), hop(2, 1, 5)]);
        let other: Path = Arc::from(vec![hop(1, 1, 4), hop(102, 1, 2), hop(2, 1, 5)]);
        assert!(moved(&old, &shorter).is_none(), "a hop stopped recording");
        assert!(moved(&shorter, &old).is_none(), "a hop recorded again");
        let reordered: Path = Arc::from(vec![hop(101, 1, 2), hop(1, 1, 3), hop(2, 1, 5)]);
        assert!(
            moved(&old, &reordered).is_none(),
            "per-hop reports out of order"
        );
        let other_port: Path = Arc::from(vec![hop(1, 1, 4), hop(101, 2, 2), hop(2, 1, 5)]);
        assert!(
            moved(&old, &other_port).is_some(),
            "another link to the same spine"
        );
        let (links, nodes) = moved(&old, &other).unwrap();
        assert_eq!(nodes, vec![101]);
        assert_eq!(
            links,
            vec![(1, Some(3), 101, Some(1)), (101, Some(2), 2, Some(1))]
        );
    }

    fn path(hops: &[(u32, u32, u32)]) -> Path {
        Arc::from(
            hops.iter()
                .map(|&(n, i, e)| hop(n, i, e))
                .collect::<Vec<_>>(),
        )
    }

    fn flow(n: u16) -> (FlowKey, u64) {
        let key = FlowKey {
            src: "::ffff:10.0.0.1".parse().unwrap(),
            dst: "::ffff:10.0.0.2".parse().unwrap(),
            proto: 6,
            src_port: n,
            dst_port: 80,
        };
        (key, u64::from(n))
    }

    fn ev() -> Evidence {
        Evidence::Drop {
            drop_reason: None,
            drop_reason_name: None,
        }
    }

    /// A link's repair seen first from its other end (the return named at spine 101's port
    /// towards leaf 1) still ends the outage named at leaf 1's port towards the spine.
    #[test]
    fn a_return_named_from_the_links_other_end_repairs_it() {
        let place = |node, port, peer_node, peer_port| IncidentPlace {
            node: Some(node),
            port: Some(port),
            peer_node: Some(peer_node),
            peer_port: Some(peer_port),
            ..IncidentPlace::default()
        };
        let back = IncidentKey::new(
            IncidentKind::PathChange,
            place(101, 3, 1, 7),
            Some(Cow::Borrowed("link-restored")),
        );
        let outage = |p| IncidentKey::new(IncidentKind::PathChange, p, Some(Cow::Borrowed("link")));
        assert_eq!(
            repaired(&back),
            [
                Some(outage(place(101, 3, 1, 7))),
                Some(outage(place(1, 7, 101, 3)))
            ]
        );
        let node_back = IncidentKey::new(
            IncidentKind::PathChange,
            IncidentPlace {
                node: Some(101),
                ..IncidentPlace::default()
            },
            Some(Cow::Borrowed("node-restored")),
        );
        assert_eq!(repaired(&node_back)[1], None, "a node has no other end");
    }

    /// Leaf L's port 4 + s faces spine 100 + s, whose port L faces leaf L: the link 1 ↔ 101
    /// fails. Flows from leaf 1 left 1 → 101, flows to leaf 1 left 101 → 1: one link, both
    /// directions, one incident, ongoing until their return (`link-restored`, its symptom) ends
    /// it.
    #[test]
    fn a_link_down_both_ways_is_one_incident_until_its_repair() {
        let mut log = IncidentLog::default();
        let mut t = 0;
        let mut moves = Vec::new();
        for (f, (a, b)) in [(1, 2), (1, 3), (2, 1), (3, 1), (1, 2), (3, 1)]
            .into_iter()
            .enumerate()
        {
            let via = |s: u32| path(&[(a, 1, 4 + s), (100 + s, a, b), (b, 4 + s, 1)]);
            moves.push((flow(f as u16), via(1), via(2)));
        }
        for (f, old, new) in &moves {
            t += 1_000;
            assert!(log.observe_move(t, t, *f, (old, new), None, ev));
        }
        assert_eq!(log.iter().count(), 0, "waiting for the correlation window");
        log.settle(t + 2_000_000_000);
        let all: Vec<&Incident> = log.iter().collect();
        assert_eq!(all.len(), 1, "{all:#?}");
        assert_eq!(all[0].cause.as_deref(), Some("link"));
        let ends = [all[0].place.node, all[0].place.peer_node];
        assert!(
            ends.contains(&Some(1)) && ends.contains(&Some(101)),
            "{:?}",
            all[0].place
        );
        assert_eq!(all[0].counts.flows, 6);
        // The link comes back: every flow returns.
        for (f, old, new) in &moves {
            t += 1_000;
            log.observe_move(
                3_000_000_000 + t,
                3_000_000_000 + t,
                *f,
                (new, old),
                None,
                ev,
            );
        }
        assert_eq!(log.iter().next().unwrap().state, IncidentState::Ongoing);
        log.settle(6_000_000_000);
        let all: Vec<&Incident> = log.iter().collect();
        assert_eq!(all.len(), 1, "{all:#?}");
        assert_eq!(all[0].state, IncidentState::Resolved, "repaired");
        assert_eq!(all[0].end_reason, Some(EndReason::Normal));
        assert!(all[0].end_ns.unwrap() >= 3_000_000_000, "{all:#?}");
        let repair = &all[0].symptoms;
        assert_eq!(repair.len(), 1, "{all:#?}");
        assert_eq!(repair[0].cause.as_deref(), Some("link-restored"));
        assert_eq!(repair[0].place, all[0].place);
        assert_eq!(repair[0].flows, 6);
        // It fails again: the flows leave their path again (their last move was a return, so
        // this one is no return to where it had left from), a second failure, then its repair.
        for (round, leave) in [(10, true), (13, false)] {
            for (f, old, new) in &moves {
                t += 1_000;
                let at = round * 1_000_000_000 + t;
                let (a, b) = if leave { (old, new) } else { (new, old) };
                log.observe_move(at, at, *f, (a, b), None, ev);
            }
            log.settle((round + 2) * 1_000_000_000);
        }
        let all: Vec<&Incident> = log.iter().collect();
        assert_eq!(all.len(), 2, "{all:#?}");
        let again = all.iter().max_by_key(|i| i.start_ns).unwrap();
        assert_eq!(again.cause.as_deref(), Some("link"), "{all:#?}");
        assert!(again.start_ns >= 10_000_000_000, "{all:#?}");
        assert_eq!(again.state, IncidentState::Resolved, "repaired again");
        assert_eq!(again.symptoms.len(), 1, "{all:#?}");
        assert_eq!(again.symptoms[0].cause.as_deref(), Some("link-restored"));
    }

    /// Three spines; link 1 ↔ 101 fails and leaf 1's flows spread over the two left, some of
    /// them off 1 ↔ 102 (rehashed: other flows moved onto it). One incident, at 1 ↔ 101, with
    /// every moved flow; a move a window later joins it; the repair is its `link-restored`
    /// symptom at 1 ↔ 101 though flows came back to 1 ↔ 102 too. A later, unrelated failure of
    /// 1 ↔ 102 is named on its own: the old window's moves no longer make it look up.
    #[test]
    fn flows_rehashed_off_healthy_links_join_the_failed_links_incident() {
        let via = |s: u32, b: u32| path(&[(1, 1, 4 + s), (100 + s, 1, b), (b, 4 + s, 1)]);
        let mut log = IncidentLog::default();
        // (flow, spine before, spine after, destination leaf)
        let moves = [
            (1, 1, 2, 2),
            (2, 1, 3, 3),
            (3, 1, 2, 3),
            (4, 2, 3, 2),
            (5, 2, 3, 3),
        ];
        let mut t = 0;
        for &(f, a, b, d) in &moves {
            t += 1_000;
            assert!(log.observe_move(t, t, flow(f), (&via(a, d), &via(b, d)), None, ev));
        }
        log.settle(1_500_000_000);
        // Reported a window later (a filtering switch).
        let late = 1_600_000_000;
        log.observe_move(late, late, flow(6), (&via(2, 2), &via(3, 2)), None, ev);
        log.settle(3_000_000_000);
        let all: Vec<&Incident> = log.iter().collect();
        assert_eq!(all.len(), 1, "{all:#?}");
        let ends = [all[0].place.node, all[0].place.peer_node];
        assert!(
            ends.contains(&Some(1)) && ends.contains(&Some(101)),
            "{all:#?}"
        );
        assert_eq!(all[0].counts.flows, 6);
        // The repair: every flow back where it was.
        let back = 4_000_000_000;
        for &(f, a, b, d) in &moves {
            log.observe_move(back, back, flow(f), (&via(b, d), &via(a, d)), None, ev);
        }
        log.settle(back + 1_500_000_000);
        let all: Vec<&Incident> = log.iter().collect();
        assert_eq!(all.len(), 1, "{all:#?}");
        let restored: Vec<_> = all[0]
            .symptoms
            .iter()
            .filter(|s| s.cause.as_deref() == Some("link-restored"))
            .collect();
        assert_eq!(restored.len(), 1, "{all:#?}");
        let ends = [restored[0].place.node, restored[0].place.peer_node];
        assert!(ends.contains(&Some(101)), "{restored:#?}");
        // Much later 1 ↔ 102 fails by itself.
        let later = 60_000_000_000;
        log.observe_move(later, later, flow(7), (&via(2, 2), &via(3, 2)), None, ev);
        log.settle(later + 1_500_000_000);
        let named: Vec<_> = log
            .iter()
            .filter(|i| i.cause.as_deref() == Some("link") && i.state == IncidentState::Ongoing)
            .map(|i| [i.place.node, i.place.peer_node])
            .collect();
        assert!(named.iter().any(|e| e.contains(&Some(102))), "{named:?}");
    }

    #[test]
    fn severity_rule() {
        assert_eq!(
            severity(IncidentKind::Drop, Some("silent"), 1),
            Severity::Critical
        );
        assert_eq!(
            severity(IncidentKind::PathChange, None, 8),
            Severity::Critical
        );
        assert_eq!(severity(IncidentKind::PathChange, None, 7), Severity::Major);
        assert_eq!(severity(IncidentKind::Microburst, None, 0), Severity::Info);
    }
}
