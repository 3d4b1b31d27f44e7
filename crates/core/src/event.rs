//! Events the detectors raise: what happened, when, where (node / port / queue), to which flow,
//! and the evidence.

use std::collections::{BTreeMap, VecDeque};

use intscope_wire::locate::FlowKey;
use rustc_hash::FxHashMap as HashMap;

use crate::evidence::Evidence;
use crate::flow_ref::FlowRef;
use crate::incidents::{
    End, EpisodeTotals, Handover, IncidentKey, IncidentLog, IncidentSink, Observation,
    UNLINKED_EVENTS,
};
use crate::seq::LossHistory;
use crate::thresholds::DetectConfig;

/// Kinds of event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A flow's path (nodes and ports) changed.
    PathChange,
    /// A hop's latency far above its baseline.
    LatencyAnomaly,
    /// A packet was dropped (with the reason when reported).
    Drop,
    /// A queue's occupancy crossed the congestion threshold.
    CongestionStart,
    /// A congestion episode ended (with its culprit flows).
    CongestionEnd,
    /// A short occupancy spike (a congestion episode shorter than the microburst window).
    Microburst,
    /// Telemetry reports were lost (sequence gap per node and hw_id).
    LostReports,
    /// The INT hop limit was reached (E bit): a long path or a forwarding loop.
    HopLimit,
    /// A node could not add its metadata because of the MTU (M bit).
    MtuExceeded,
    /// The IP TTL decreased more than INT hops were added: hops without INT on the path.
    NonIntHops,
}

impl EventKind {
    /// Every kind, for metrics.
    pub const ALL: [EventKind; 10] = [
        EventKind::PathChange,
        EventKind::LatencyAnomaly,
        EventKind::Drop,
        EventKind::CongestionStart,
        EventKind::CongestionEnd,
        EventKind::Microburst,
        EventKind::LostReports,
        EventKind::HopLimit,
        EventKind::MtuExceeded,
        EventKind::NonIntHops,
    ];

    /// Label value (kebab-case).
    pub fn label(self) -> &'static str {
        match self {
            EventKind::PathChange => "path-change",
            EventKind::LatencyAnomaly => "latency-anomaly",
            EventKind::Drop => "drop",
            EventKind::CongestionStart => "congestion-start",
            EventKind::CongestionEnd => "congestion-end",
            EventKind::Microburst => "microburst",
            EventKind::LostReports => "lost-reports",
            EventKind::HopLimit => "hop-limit",
            EventKind::MtuExceeded => "mtu-exceeded",
            EventKind::NonIntHops => "non-int-hops",
        }
    }
}

fn flow_as_ref<S: serde::Serializer>(flow: &Option<FlowKey>, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&flow.as_ref().map(FlowRef::from), s)
}

/// One event.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Event {
    /// Increasing ID.
    pub id: u64,
    /// When (report time), ns since the epoch.
    pub time_ns: u64,
    /// What.
    pub kind: EventKind,
    /// Where: node.
    pub node_id: Option<u32>,
    /// Where: port (egress unless the evidence says otherwise).
    pub port: Option<u32>,
    /// Where: queue.
    pub queue_id: Option<u8>,
    /// Which flow (served as a [`FlowRef`]; formatted on output, not when the event is raised).
    #[serde(serialize_with = "flow_as_ref")]
    pub flow: Option<FlowKey>,
    /// The flow's API ID.
    pub flow_id: Option<u64>,
    /// Evidence (kind-specific).
    pub evidence: Evidence,
    /// The collector's receive time of the report that raised it (`time_ns` is switch time
    /// when the report's metadata carries timestamps, else this same receive time).
    pub received_ns: Option<u64>,
    /// The published incident it belongs to: filled in when the event is read out of the log
    /// (`EventLog::incident_of`); `None` while that incident still gathers its symptoms
    /// (`incident_grouping_ns`), for events no incident follows (path changes a correlation
    /// placed nowhere), and once the incident left the history.
    pub incident_id: Option<u64>,
    /// The lifecycle engine's symptom it is evidence of ([`crate::incidents`]).
    #[serde(skip)]
    symptom: Option<u64>,
}

/// Events kept in memory (the newest, within each kind's share).
pub const EVENT_LOG: usize = 10_000;

/// How long (receive time) an unlinked event waits for its symptom before it is left
/// unlinked: its shard hands its observations over each batch, and the correlation places a
/// path change within `path_correlation_ns`.
const LINK_WAIT_NS: u64 = 2_000_000_000;

/// A kind's share of the event log: when the log is full, its oldest eighth goes, taken from
/// the kinds that hold more than this first, so a flood of one kind cannot push out the others.
pub const EVENT_KIND_SHARE: usize = EVENT_LOG / EventKind::ALL.len();

/// Where an event happened and to which flow (its key and API ID).
#[derive(Debug, Clone, Copy, Default)]
pub struct Place {
    /// Node.
    pub node: Option<u32>,
    /// Port.
    pub port: Option<u32>,
    /// Queue.
    pub queue: Option<u8>,
    /// Flow.
    pub flow: Option<(FlowKey, u64)>,
}

/// The newest events of every shard, in ID order: IDs are given out under this log's lock, so a
/// reader's "after ID n" cursor never skips an event raised concurrently by another shard.
#[derive(Debug)]
pub struct EventLog {
    events: VecDeque<Event>,
    counts: BTreeMap<EventKind, u64>,
    evicted: BTreeMap<EventKind, u64>,
    next_id: u64,
    /// The incidents the detectors' observations make (the same lock: a shard hands over its
    /// events and incident observations in one go).
    pub incidents: IncidentLog,
    /// The rate limit of places that more than one shard can raise events at (see
    /// [`Raiser::raise`]).
    shared_limit: RateLimit,
    /// Events whose symptom the engine did not hold yet when they were raised: (its key,
    /// the event's ID, its receive time), oldest first, at most [`UNLINKED_EVENTS`].
    unlinked: VecDeque<(IncidentKey, u64, u64)>,
    /// How long (receive time) an event may wait for its incident before the store takes it
    /// without one ([`EventLog::settled_until`]).
    settle_ns: u64,
    /// Every event below this ID is taken as it is (the input is over: [`EventLog::settle_all`]).
    settled_below: u64,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::new(&DetectConfig::default())
    }
}

impl EventLog {
    /// A log whose incidents follow `cfg`'s lifecycle thresholds.
    pub fn new(cfg: &DetectConfig) -> Self {
        EventLog {
            events: VecDeque::new(),
            counts: BTreeMap::new(),
            evicted: BTreeMap::new(),
            next_id: 1,
            incidents: IncidentLog::new(cfg),
            shared_limit: RateLimit::default(),
            unlinked: VecDeque::new(),
            settle_ns: LINK_WAIT_NS
                .saturating_add(cfg.path_correlation_ns)
                .saturating_add(cfg.incident_grouping_ns),
            settled_below: 0,
        }
    }

    /// The published incident event `e` belongs to (see [`Event::incident_id`]).
    pub fn incident_of(&self, e: &Event) -> Option<u64> {
        e.symptom.and_then(|s| self.incidents.incident_of(s))
    }

    /// `e` with [`Event::incident_id`] filled in, as the API and the store serve it.
    pub fn linked(&self, e: &Event) -> Event {
        Event {
            incident_id: self.incident_of(e),
            ..e.clone()
        }
    }

    /// Applies a shard's incident observations, then links the events that were waiting for
    /// their symptoms.
    pub(crate) fn apply_incidents(&mut self, pending: Handover) {
        self.incidents.apply_all(pending);
        self.link_waiting();
    }

    /// Links each waiting event whose symptom the engine now holds; one that waited
    /// [`LINK_WAIT_NS`] (or left the log) is left unlinked.
    pub(crate) fn link_waiting(&mut self) {
        self.link(false);
    }

    /// Links every waiting event that can be, and leaves the rest unlinked: the input is over.
    pub(crate) fn link_remaining(&mut self) {
        self.link(true);
    }

    fn link(&mut self, last: bool) {
        let now = self.incidents.now_rx();
        for (key, id) in self.incidents.take_placed_events() {
            self.wait_for_symptom(key, id, now);
        }
        for _ in 0..self.unlinked.len() {
            let Some((key, id, since)) = self.unlinked.pop_front() else {
                break;
            };
            let at = self.events.binary_search_by_key(&id, |e| e.id).ok();
            let Some(at) = at else {
                continue;
            };
            // Each hand-over looks for an ongoing symptom (a lookup); the resolved history (a
            // scan) only once, as the wait ends.
            let waited = last || now.saturating_sub(since) >= LINK_WAIT_NS;
            let found = if waited {
                self.incidents.symptom_of(&key, self.events[at].time_ns)
            } else {
                self.incidents.ongoing_symptom_of(&key)
            };
            match found {
                Some(s) => self.events[at].symptom = Some(s),
                None if !waited => self.unlinked.push_back((key, id, since)),
                None => self.incidents.events_unlinked += 1,
            }
        }
    }

    /// Queues event `id` to be linked once the engine holds its symptom `key`.
    fn wait_for_symptom(&mut self, key: IncidentKey, id: u64, now_rx: u64) {
        if self.unlinked.len() >= UNLINKED_EVENTS {
            self.unlinked.pop_front();
            self.incidents.events_unlinked += 1;
        }
        self.unlinked.push_back((key, id, now_rx));
    }

    /// Events that left the log full, by kind (see [`EVENT_KIND_SHARE`]).
    pub fn evicted(&self) -> &BTreeMap<EventKind, u64> {
        &self.evicted
    }

    /// The newest events, oldest first.
    pub fn events(&self) -> &VecDeque<Event> {
        &self.events
    }

    /// Events raised, by kind (rate-limited repeats are not raised).
    pub fn counts(&self) -> &BTreeMap<EventKind, u64> {
        &self.counts
    }

    /// The first event from ID `from` on that the store should not take yet: one not linked
    /// to a published incident (its symptom not handed over, its incident still gathering
    /// symptoms for `incident_grouping_ns`, a path change not yet placed by the correlation)
    /// and raised less than the link wait, the path correlation and the grouping ago (receive
    /// time). Events are stored in ID order, so the ones after it wait too: a stored event
    /// carries its [`Event::incident_id`], written once. [`EventLog::next_id`] when none waits.
    pub fn settled_until(&self, from: u64) -> u64 {
        let now = self.incidents.now_rx();
        let start = self.events.partition_point(|e| e.id < from);
        self.events
            .range(start..)
            .find(|e| {
                e.id >= self.settled_below
                    && self.incident_of(e).is_none()
                    && now.saturating_sub(e.received_ns.unwrap_or(0)) < self.settle_ns
            })
            .map_or(self.next_id, |e| e.id)
    }

    /// The input is over (a stop, the end of a replay): links what can be linked, and lets the
    /// store take every event raised so far as it is ([`EventLog::settled_until`]).
    pub fn settle_all(&mut self) {
        self.link_remaining();
        self.settled_below = self.next_id;
    }

    /// The ID the next event will get.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Continues IDs after those a store already holds.
    pub fn continue_ids(&mut self, next: u64) {
        self.next_id = self.next_id.max(next);
    }

    fn push(&mut self, e: Raised) {
        let Raised {
            at_ns: time_ns,
            now: received_ns,
            kind,
            place,
            evidence,
            symptom: symptom_key,
        } = e;
        *self.counts.entry(kind).or_default() += 1;
        let id = self.next_id;
        self.next_id += 1;
        if self.events.len() >= EVENT_LOG {
            self.make_room();
        }
        let symptom = symptom_key.and_then(|key| {
            let found = self.incidents.symptom_of(&key, time_ns);
            if found.is_none() {
                self.wait_for_symptom(key, id, received_ns);
            }
            found
        });
        self.events.push_back(Event {
            id,
            time_ns,
            kind,
            node_id: place.node,
            port: place.port,
            queue_id: place.queue,
            flow: place.flow.map(|f| f.0),
            flow_id: place.flow.map(|f| f.1),
            evidence,
            received_ns: Some(received_ns),
            incident_id: None,
            symptom,
        });
    }

    /// Drops an eighth of the full log, oldest first, from the kinds above their share
    /// (the largest first); only when no kind is above it, the oldest of all. One pass per
    /// eighth of the log's size, nothing per event.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        let index = |k: EventKind| EventKind::ALL.iter().position(|&x| x == k).unwrap_or(0);
        let mut held = [0usize; EventKind::ALL.len()];
        for e in &self.events {
            held[index(e.kind)] += 1;
        }
        let mut take = [0usize; EventKind::ALL.len()];
        let mut left = EVENT_LOG / 8;
        while left > 0 {
            let (k, n) = held
                .iter()
                .zip(&take)
                .map(|(h, t)| h - t)
                .enumerate()
                .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
                .unwrap_or((0, 0));
            if n <= EVENT_KIND_SHARE {
                break;
            }
            take[k] += 1;
            left -= 1;
        }
        let evicted = &mut self.evicted;
        self.events.retain(|e| {
            let k = index(e.kind);
            let go = if take[k] > 0 {
                take[k] -= 1;
                true
            } else if left > 0 {
                left -= 1;
                true
            } else {
                false
            };
            if go {
                *evicted.entry(e.kind).or_default() += 1;
            }
            !go
        });
    }
}

/// One shard's outbox to the shared log: its detectors raise events and incident
/// observations here, never locking anything, and the shard's owner drains it into the log once
/// per batch ([`Raiser::drain`]), taking the log's lock once. Each shard rate-limits its own
/// places (most places belong to one shard), so only events that are kept wait here.
#[derive(Debug, Default)]
pub struct Raiser {
    interval_ns: u64,
    limit: RateLimit,
    /// Events suppressed by the per-place rate limit.
    pub suppressed: u64,
    /// This shard's incident observations on their way to the log.
    pub incidents: IncidentSink,
    /// Switch time minus receive time of the record being processed ([`Raiser::set_clock`]):
    /// what [`Raiser::raise`] adds to its receive time to give events and incidents switch
    /// time (for a path change, the record's own).
    clock_offset: i64,
    /// What the log gets at the next drain, in the order it was raised. Bounded by the batch:
    /// a batch raises at most a few entries per record, and every batch ends with a drain.
    outbox: Vec<Outgoing>,
    /// The pending incident observations go to the log at the next drain (a sweep asked).
    hand_over_due: bool,
    /// The log's incidents settle at this receive time at the next drain (a fabric sweep).
    settle_at: Option<u64>,
    /// Report-loss history updates: (node, reports lost, switch time) from confirmed gaps.
    lost: Vec<(u32, u64, u64)>,
    /// Report-loss history updates: (node, per-hop reports received, receive time).
    received: Vec<(u32, u64, u64)>,
    /// Per-hop reports of nodes the loss history could not track.
    untracked: u64,
}

/// An entry of a shard's outbox.
#[derive(Debug)]
enum Outgoing {
    /// An event the shard's own rate limit admitted.
    Event(Raised),
    /// A hop-limit or MTU event, admitted by the log's shared rate limit (key) at the drain.
    Shared((EventKind, u64), Raised),
    /// A path change: goes to the correlation, and is logged if forwarding changed and the
    /// shard's rate limit (key) admits it.
    PathChange((EventKind, u64), Raised),
    /// Incident observations the log must have before what follows.
    Incidents(Handover),
}

/// An event as raised, before the log gives it an ID.
#[derive(Debug)]
struct Raised {
    at_ns: u64,
    now: u64,
    kind: EventKind,
    place: Place,
    evidence: Evidence,
    symptom: Option<IncidentKey>,
}

/// When each (kind, place) last raised an event.
#[derive(Debug, Default)]
struct RateLimit {
    last: HashMap<(EventKind, u64), u64>,
}

impl RateLimit {
    /// Whether an event keyed `key` at `now` would be due, without counting it.
    fn due(&self, key: (EventKind, u64), now: u64, interval_ns: u64) -> bool {
        self.last
            .get(&key)
            .is_none_or(|&last| now.saturating_sub(last) >= interval_ns)
    }

    /// Whether an event keyed `key` at `now` is due (none within `interval_ns`); if so, it
    /// counts as raised.
    fn admit(&mut self, key: (EventKind, u64), now: u64, interval_ns: u64) -> bool {
        if let Some(&last) = self.last.get(&key)
            && now.saturating_sub(last) < interval_ns
        {
            return false;
        }
        if self.last.len() > 1_000_000 {
            let horizon = now.saturating_sub(interval_ns);
            self.last.retain(|_, t| *t >= horizon);
        }
        self.last.insert(key, now);
        true
    }
}

impl Raiser {
    /// Raises at most one event per kind, place and flow every `interval_ns` (report time).
    pub fn new(interval_ns: u64) -> Self {
        Raiser::with_config(&DetectConfig {
            event_interval_ns: interval_ns,
            ..DetectConfig::default()
        })
    }

    /// A raiser with `cfg`'s event interval and incident merge window.
    pub fn with_config(cfg: &DetectConfig) -> Self {
        Raiser {
            interval_ns: cfg.event_interval_ns,
            incidents: IncidentSink::new(cfg.incident_merge_ns),
            ..Raiser::default()
        }
    }

    /// Logs an event of `kind` at `place`, unless one like it was logged within the interval.
    /// Episode starts and ends are always logged (the fabric raises them once per incident:
    /// a restart within the merge window raises none). `evidence` is built only for
    /// events that are logged: most repeats are rate-limited away. Hop-limit and MTU events
    /// name the hop after the last one that recorded, which any shard may find, so their limit
    /// is the log's, shared (they are rare; the others are raised only by their place's shard).
    /// A path change also goes to the incidents (one per link or node the flows left), and is
    /// not logged at all when forwarding did not change (a path that only lost or gained hops:
    /// see [`crate::incidents::moved`]). `now` is report (receive) time; the event's time is
    /// switch time, by the offset of the record being processed ([`Raiser::set_clock`]).
    /// Everything goes to the outbox ([`Raiser::drain`]).
    // Out of line: events are rare next to reports, and inlining each call site's evidence
    // builder into the per-report path slowed every report (measured, pipeline bench).
    #[inline(never)]
    pub fn raise(
        &mut self,
        now: u64,
        kind: EventKind,
        place: Place,
        symptom: Option<&IncidentKey>,
        evidence: impl FnOnce() -> Evidence,
    ) {
        if kind == EventKind::PathChange {
            let at_ns = self.switch_time(now);
            return self.path_change(now, at_ns, place, evidence());
        }
        let at = self.switch_time(now);
        self.raise_at(now, at, kind, place, 0, symptom, evidence);
    }

    /// A path change first seen at switch time `at_ns` (a joined path's packet: the join itself
    /// happens up to a join window later, and its reports may have been delayed).
    pub fn raise_path_change_at(
        &mut self,
        now: u64,
        at_ns: u64,
        place: Place,
        evidence: impl FnOnce() -> Evidence,
    ) {
        self.path_change(now, at_ns, place, evidence());
    }

    /// The record about to be processed: its switch time ([`Record::switch_time`](crate::record::Record::switch_time))
    /// against its receive time sets the clock [`Raiser::raise`] gives its events.
    #[inline]
    pub fn set_clock(&mut self, r: &crate::record::Record) {
        self.clock_offset = r.switch_time().wrapping_sub(r.time_ns) as i64;
    }

    /// Observation `o` of incident `key`: merged with this shard's others of the key until the
    /// next hand-over, unless the log must have something now (an ended episode that `o` does
    /// not continue, or a full sink). `evidence` is built only for the key's first observation
    /// since the last hand-over (the log keeps the evidence of an incident's first).
    pub fn observe(
        &mut self,
        key: IncidentKey,
        o: &Observation,
        evidence: impl FnOnce() -> Evidence,
    ) {
        if let Some(now) = self.incidents.observe(key, o, evidence) {
            self.outbox.push(Outgoing::Incidents(now));
        }
    }

    /// The episode of incident `key` ended at `end`, with `totals` (its samples after the
    /// observed ones, peak, span and flows).
    pub fn end_episode(&mut self, key: IncidentKey, end: End, totals: EpisodeTotals) {
        if let Some(now) = self.incidents.end(key, end, totals) {
            self.outbox.push(Outgoing::Incidents(now));
        }
    }

    /// This shard's pending incident observations go to the log at the next drain.
    pub fn hand_over(&mut self) {
        self.hand_over_due = true;
    }

    /// A fabric sweep at receive time `now`: at the next drain the pending observations go
    /// to the log, its incidents settle at `now`, and the path changes the settling placed
    /// are linked to their incidents.
    pub fn settle(&mut self, now: u64) {
        self.hand_over_due = true;
        self.settle_at = Some(self.settle_at.map_or(now, |t| t.max(now)));
    }

    /// `reports` of `node`'s reports lost, from a gap confirmed at switch time `at_ns`: for
    /// the report-loss history at the next drain.
    pub fn reports_lost(&mut self, node: u32, reports: u64, at_ns: u64) {
        if reports > 0 {
            self.lost.push((node, reports, at_ns));
        }
    }

    /// Per-hop reports received, by node, at receive time `now` (and those of nodes the
    /// history cannot track): for the report-loss history at the next drain.
    pub fn reports_received(
        &mut self,
        received: impl IntoIterator<Item = (u32, u64)>,
        untracked: u64,
        now: u64,
    ) {
        self.received
            .extend(received.into_iter().map(|(node, n)| (node, n, now)));
        self.untracked += untracked;
    }

    /// Whether the outbox holds nothing for the log.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.outbox.is_empty()
            && !self.hand_over_due
            && self.settle_at.is_none()
            && self.lost.is_empty()
            && self.received.is_empty()
            && self.untracked == 0
    }

    /// Hands the outbox to `log` and the report-loss history `loss`, in the order raised: the
    /// events get their IDs, the incident observations are applied, and what waited for them
    /// is linked.
    pub fn drain(&mut self, log: &mut EventLog, loss: &mut LossHistory) {
        for out in std::mem::take(&mut self.outbox) {
            match out {
                Outgoing::Event(e) => log.push(e),
                Outgoing::Shared(key, e) => {
                    if log.shared_limit.admit(key, e.now, self.interval_ns) {
                        log.push(e);
                    } else {
                        self.suppressed += 1;
                    }
                }
                Outgoing::PathChange(key, e) => self.log_path_change(log, key, e),
                Outgoing::Incidents(h) => log.apply_incidents(h),
            }
        }
        for (node, reports, at) in self.lost.drain(..) {
            loss.lost(node, reports, at);
        }
        for (node, n, now) in self.received.drain(..) {
            loss.received(node, n, now);
        }
        loss.untracked += std::mem::take(&mut self.untracked);
        if std::mem::take(&mut self.hand_over_due) && !self.incidents.is_empty() {
            log.apply_incidents(self.incidents.take());
        }
        if let Some(now) = self.settle_at.take() {
            log.incidents.settle(now);
            // Path changes the settle's correlation placed.
            log.link_waiting();
        }
    }

    /// Receive time `now` on the switches' clock, by the last record's offset.
    pub fn switch_time(&self, now: u64) -> u64 {
        now.wrapping_add(self.clock_offset as u64)
    }

    /// [`Raiser::raise`] at switch time `at_ns` (the event's time; `now` is the receive time
    /// the rate limit runs on), rate-limited per place, flow and `extra` (e.g. an hw_id);
    /// `symptom` is the key of the incident observation it goes with (its incident's).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub fn raise_at(
        &mut self,
        now: u64,
        at_ns: u64,
        kind: EventKind,
        place: Place,
        extra: u64,
        symptom: Option<&IncidentKey>,
        evidence: impl FnOnce() -> Evidence,
    ) {
        let limited = !matches!(
            kind,
            EventKind::CongestionEnd | EventKind::Microburst | EventKind::CongestionStart
        );
        let key = || rate_key(kind, &place, extra);
        let raised = |evidence: Evidence| Raised {
            at_ns,
            now,
            kind,
            place,
            evidence,
            symptom: symptom.cloned(),
        };
        if matches!(kind, EventKind::HopLimit | EventKind::MtuExceeded) {
            let key = key();
            self.outbox.push(Outgoing::Shared(key, raised(evidence())));
            return;
        }
        if limited && !self.limit.admit(key(), now, self.interval_ns) {
            self.suppressed += 1;
            return;
        }
        self.outbox.push(Outgoing::Event(raised(evidence())));
    }

    #[cold]
    fn path_change(&mut self, now: u64, at_ns: u64, place: Place, ev: Evidence) {
        let key = rate_key(EventKind::PathChange, &place, 0);
        self.outbox.push(Outgoing::PathChange(
            key,
            Raised {
                at_ns,
                now,
                kind: EventKind::PathChange,
                place,
                evidence: ev,
                symptom: None,
            },
        ));
    }

    /// A path change at the drain: to the correlation (one incident per link or node the
    /// flows left), and to the log if forwarding changed and the rate limit admits it.
    #[cold]
    fn log_path_change(&mut self, log: &mut EventLog, key: (EventKind, u64), e: Raised) {
        // The ID the event will have if it is logged: the move carries it to the incident
        // the correlation places it in (nothing else is logged under this lock meanwhile).
        let logged = self.limit.due(key, e.now, self.interval_ns);
        let event = logged.then_some(log.next_id);
        if let (
            Evidence::PathChange {
                old_path, new_path, ..
            },
            Some(flow),
        ) = (&e.evidence, e.place.flow)
        {
            let copy = e.evidence.clone();
            if !log.incidents.observe_move(
                e.at_ns,
                e.now,
                flow,
                (old_path, new_path),
                event,
                move || copy,
            ) {
                return;
            }
        }
        if self.limit.admit(key, e.now, self.interval_ns) {
            log.push(e);
            log.link_waiting();
        } else {
            self.suppressed += 1;
        }
    }
}

/// The rate limit's key of an event of `kind` at `place`, for its flow and `extra`.
fn rate_key(kind: EventKind, place: &Place, extra: u64) -> (EventKind, u64) {
    let parts = [
        u64::from(place.node.unwrap_or(0)),
        u64::from(place.port.unwrap_or(0)),
        u64::from(place.queue.unwrap_or(0)),
        place.flow.map_or(0, |f| flow_hash(&f.0)),
        extra,
    ];
    (kind, place_hash(&parts))
}

fn place_hash(parts: &[u64]) -> u64 {
    // FNV-1a over the parts: cheap, stable, good enough for a rate-limit key.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in p.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn flow_hash(k: &FlowKey) -> u64 {
    place_hash(&[
        u128::from(k.src).wrapping_mul(31) as u64 ^ (u128::from(k.src) >> 64) as u64,
        u128::from(k.dst) as u64 ^ (u128::from(k.dst) >> 64) as u64,
        (u64::from(k.proto) << 32) | (u64::from(k.src_port) << 16) | u64::from(k.dst_port),
    ])
}
