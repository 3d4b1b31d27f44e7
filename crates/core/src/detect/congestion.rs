//! The congestion detector of one queue: a state machine over its occupancy samples.
//!
//! A sample at or above `congestion_start` (or the switch's Q flag, above `congestion_end`)
//! opens an **episode**; a sample at or below `congestion_end` closes it, and so does silence
//! (`episode_quiet_ns`, the shard's sweep: switches that filter reports go quiet when a queue
//! drains). Episodes that start within `incident_merge_ns` of the last one's end form one
//! **run**, one incident with one start and one end event: the end event waits a merge window
//! after the last episode closed, and is a microburst when no episode spanned more than
//! `microburst_max_ns`, else the congestion's end, with the flows that filled the queue.
//!
//! The detector owns its state (in the queue's `QueueState`) and writes what it finds into the
//! shard's outbox ([`Raiser`]); the shard keeps only the lists of queues whose episode is open
//! or whose run may be due, so a sweep need not visit every queue.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use intscope_wire::locate::FlowKey;

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::{Culprit, Evidence};
use crate::incident::{EndReason, IncidentKind, IncidentPlace, Unit};
use crate::incidents::{End, EpisodeTotals, FlowWeight, IncidentKey, Observation, RANKED_FLOWS};
use crate::keys::QueueKey;
use crate::rank;
use crate::thresholds::DetectConfig;

/// Flows a congestion episode remembers for culprit ranking.
const EPISODE_FLOWS: usize = 4096;

/// How often (receive time) an open congestion episode updates its ongoing incident.
const EPISODE_UPDATE_NS: u64 = 100_000_000;

/// The congestion state of one queue: its open episode and its run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Congestion {
    episode: Option<Episode>,
    /// Switch clock of the last sample (the start of an episode lies after it).
    last_clock_ns: Option<u64>,
    /// The congestion episodes of its current incident, until their end event is raised.
    run: Option<Box<QueueRun>>,
}

/// One occupancy sample of a queue, as the detector needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample<'a> {
    /// The queue.
    pub key: QueueKey,
    /// Its occupancy.
    pub occupancy: u32,
    /// Switch clock of the sample (the hop's timestamp; report time without one): one queue,
    /// one clock, so transport delay and report batching do not stretch a microburst.
    pub clock: u64,
    /// Receive (report) time.
    pub now: u64,
    /// The hop's latency, for the start event's evidence.
    pub hop_latency: Option<u32>,
    /// The report's Q (congested) flag.
    pub q_flag: bool,
    /// The packet's flow and its API ID, when known: borrowed, so a sample that raises
    /// nothing (most of them) copies no flow key.
    pub flow: Option<(&'a FlowKey, u64)>,
}

/// What a sample did to the queue's episode.
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing opened or closed.
    Held,
    /// An episode opened: the shard lists the queue for its sweep.
    Opened,
    /// The open episode closed: the shard closes it ([`Congestion::close`]).
    Closed(Episode, End),
}

/// The congestion episodes at one queue that make one incident — each starting within
/// `incident_merge_ns` (switch time) of the last one's end — and so one start and one end
/// event: the end waits until no episode followed within the merge window, so the events
/// never call a queue that stays congested for seconds a microburst (events are the
/// incidents' timeline).
#[derive(Clone)]
struct QueueRun {
    /// Switch clock of its first episode's first congested sample.
    start_ns: u64,
    /// Switch clock of its last congested sample so far.
    last_high_ns: u64,
    /// Its last episode's end, once that episode closed (`None` while one is open).
    end: Option<End>,
    /// Receive time that episode closed (the end event is due a merge window later).
    closed_rx: u64,
    /// In the shard's list of runs whose end may be due.
    listed: bool,
    max_occupancy: u32,
    total: u64,
    /// Its longest episode's span: a microburst or congestion by the same rule as its
    /// incident's (`incidents::Entry::max_span_ns`).
    max_span_ns: u64,
    /// Per flow over its episodes: API ID, occupancy sum, samples (at most
    /// [`EPISODE_FLOWS`]); ordered, so the state reads the same whatever the shards.
    flows: BTreeMap<FlowKey, (u64, u64, u64)>,
}

/// Without the flows' API IDs, which depend on the shard that saw each flow first: the state
/// reads the same whatever the shards (`core/tests/shards.rs`).
impl std::fmt::Debug for QueueRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueRun")
            .field("start_ns", &self.start_ns)
            .field("last_high_ns", &self.last_high_ns)
            .field("end", &self.end)
            .field("closed_rx", &self.closed_rx)
            .field("max_occupancy", &self.max_occupancy)
            .field("total", &self.total)
            .field("max_span_ns", &self.max_span_ns)
            .field("flows", &self.flows.len())
            .finish_non_exhaustive()
    }
}

/// One congestion episode: from its first congested sample to its last.
#[derive(Debug, Clone, Default)]
pub(crate) struct Episode {
    start_ns: u64,
    /// Switch clock of the last congested sample: where the episode ends.
    last_high_ns: u64,
    /// Report time of the last congested sample (for the quiet timeout).
    last_seen_ns: u64,
    max_occupancy: u32,
    /// Switch clock of the highest occupancy.
    max_at_ns: u64,
    total: u64,
    /// Congested samples.
    samples: u64,
    /// Of those, handed to the incident already.
    samples_reported: u64,
    /// Receive time of the last hand-over to the incident.
    reported_ns: u64,
    /// Per flow: its API ID, its occupancy sum and its samples over the episode.
    flows: HashMap<FlowKey, (u64, u64, u64)>,
}

impl Congestion {
    /// Takes sample `s`: opens, extends or closes the episode, raising the start (once per run)
    /// into `raiser`.
    pub(crate) fn sample(
        &mut self,
        cfg: &DetectConfig,
        raiser: &mut Raiser,
        s: Sample<'_>,
    ) -> Step {
        let (occ, clock, now, key) = (s.occupancy, s.clock, s.now, s.key);
        let last_clock = self.last_clock_ns.replace(clock);
        if let Some(ep) = self.episode.as_mut() {
            if occ <= cfg.congestion_end {
                // The end lies between the last congested sample and this one.
                let end = End {
                    at_ns: clock,
                    uncertainty_ns: clock.saturating_sub(ep.last_high_ns),
                    reason: EndReason::Normal,
                };
                return match self.episode.take() {
                    Some(ep) => Step::Closed(ep, end),
                    None => Step::Held,
                };
            }
            ep.last_high_ns = clock;
            ep.last_seen_ns = now;
            if occ > ep.max_occupancy {
                ep.max_occupancy = occ;
                ep.max_at_ns = clock;
            }
            ep.total += u64::from(occ);
            ep.samples += 1;
            if let Some((&k, id)) = s.flow
                && (ep.flows.len() < EPISODE_FLOWS || ep.flows.contains_key(&k))
            {
                let f = ep.flows.entry(k).or_insert((id, 0, 0));
                f.1 += u64::from(occ);
                f.2 += 1;
            }
            return Step::Held;
        }
        // The switch's Q flag starts an episode below `congestion_start`, but never at or
        // below `congestion_end`, where it would end at once.
        if occ < cfg.congestion_start && !(s.q_flag && occ > cfg.congestion_end) {
            return Step::Held;
        }
        // Within the merge window of the last episode's end: the same incident, no new start
        // event. Past it, the last run's end is due now, before the new start.
        let merged = match self.run.as_deref_mut() {
            Some(run)
                if run
                    .end
                    .is_some_and(|e| clock.saturating_sub(e.at_ns) <= cfg.incident_merge_ns) =>
            {
                run.end = None;
                true
            }
            Some(_) => {
                if let Some(run) = self.run.take() {
                    raise_run_end(cfg, raiser, now, key, *run);
                }
                false
            }
            None => false,
        };
        if !merged {
            self.run = Some(Box::new(QueueRun {
                start_ns: clock,
                last_high_ns: clock,
                end: None,
                closed_rx: now,
                listed: false,
                max_occupancy: occ,
                total: 0,
                max_span_ns: 0,
                flows: BTreeMap::new(),
            }));
        }
        let mut ep = Episode {
            start_ns: clock,
            last_high_ns: clock,
            last_seen_ns: now,
            max_occupancy: occ,
            max_at_ns: clock,
            total: u64::from(occ),
            samples: 1,
            samples_reported: 1,
            reported_ns: now,
            flows: HashMap::default(),
        };
        if let Some((&k, id)) = s.flow {
            ep.flows.insert(k, (id, u64::from(occ), 1));
        }
        self.episode = Some(ep);
        let uncertainty = last_clock.map_or(0, |l| clock.saturating_sub(l));
        let threshold = cfg.congestion_start;
        let ev = move || Evidence::CongestionStart {
            queue_occupancy: occ,
            threshold,
            hop_latency: s.hop_latency,
            q_flag: s.q_flag,
        };
        let o = Observation {
            value: Some((u64::from(occ), Unit::Occupancy)),
            threshold: Some(u64::from(threshold)),
            start_uncertainty_ns: uncertainty,
            ..Observation::sample(clock, now)
        };
        raiser.observe(congestion_key(key), &o, ev);
        if !merged {
            raiser.raise_at(
                now,
                clock,
                EventKind::CongestionStart,
                queue_place(key, s.flow.map(|(&k, id)| (k, id))),
                0,
                Some(&congestion_key(key)),
                ev,
            );
        }
        Step::Opened
    }

    /// A sample at switch time `clock` that the detector did not need (`crate::fast_path`):
    /// the next episode's start is known to lie after it.
    pub(crate) fn saw(&mut self, clock: u64) {
        self.last_clock_ns = Some(self.last_clock_ns.map_or(clock, |c| c.max(clock)));
    }

    /// Report time of the open episode's last congested sample, if one is open.
    pub(crate) fn open_since(&self) -> Option<u64> {
        self.episode.as_ref().map(|ep| ep.last_seen_ns)
    }

    /// The open episode, ended by silence at its last congested sample.
    pub(crate) fn end_quiet(&mut self) -> Option<(Episode, End)> {
        let ep = self.episode.take()?;
        let end = End {
            at_ns: ep.last_high_ns,
            uncertainty_ns: 0,
            reason: EndReason::Quiet,
        };
        Some((ep, end))
    }

    /// Hands what the open episode counted since the last time to its ongoing incident, every
    /// [`EPISODE_UPDATE_NS`] (so a long episode shows its samples and stays alive).
    pub(crate) fn update(&mut self, now: u64, key: QueueKey, raiser: &mut Raiser) {
        let Some(ep) = self.episode.as_mut() else {
            return;
        };
        if now.saturating_sub(ep.reported_ns) < EPISODE_UPDATE_NS
            || ep.samples == ep.samples_reported
        {
            return;
        }
        let new = ep.samples - ep.samples_reported;
        ep.samples_reported = ep.samples;
        ep.reported_ns = now;
        let o = Observation {
            samples: new,
            reports: new,
            value: Some((u64::from(ep.max_occupancy), Unit::Occupancy)),
            value_at_ns: Some(ep.max_at_ns),
            ..Observation::sample(ep.last_high_ns, ep.last_seen_ns)
        };
        let (start, max) = (ep.start_ns, ep.max_occupancy);
        raiser.observe(congestion_key(key), &o, move || Evidence::Episode {
            start_ns: start,
            duration_ns: 0,
            end_uncertainty_ns: 0,
            max_occupancy: max,
            culprit_flows: Vec::new(),
        });
    }

    /// Ends episode `ep` at `end` (receive time `now`): its incident learns the end, the
    /// samples, the peak and the flows that filled the queue (with their shares), and its run
    /// the same, for the end event due once no episode followed within the merge window.
    /// Returns true when the run is newly due for [`Congestion::end_run_if_due`].
    #[inline(never)]
    pub(crate) fn close(
        &mut self,
        now: u64,
        key: QueueKey,
        ep: Episode,
        end: End,
        raiser: &mut Raiser,
    ) -> bool {
        let span = ep.last_high_ns.saturating_sub(ep.start_ns);
        let ranked = rank::smallest(ep.flows.iter(), RANKED_FLOWS, |&(k, (_, sum, _))| {
            (Reverse(*sum), *k)
        });
        let flows: Vec<FlowWeight> = ranked
            .iter()
            .map(|(k, (id, sum, samples))| FlowWeight {
                key: **k,
                id: *id,
                weight: *sum,
                samples: *samples,
            })
            .collect();
        let mut listed = false;
        if let Some(run) = self.run.as_deref_mut() {
            run.last_high_ns = run.last_high_ns.max(ep.last_high_ns);
            run.end = Some(end);
            run.closed_rx = now;
            run.max_occupancy = run.max_occupancy.max(ep.max_occupancy);
            run.total = run.total.saturating_add(ep.total);
            run.max_span_ns = run.max_span_ns.max(span);
            for (k, &(id, sum, samples)) in &ep.flows {
                if run.flows.len() < EPISODE_FLOWS || run.flows.contains_key(k) {
                    let f = run.flows.entry(*k).or_insert((id, 0, 0));
                    f.1 += sum;
                    f.2 += samples;
                }
            }
            listed = !std::mem::replace(&mut run.listed, true);
        }
        let totals = EpisodeTotals {
            samples: ep.samples - ep.samples_reported,
            peak: Some((u64::from(ep.max_occupancy), Unit::Occupancy, ep.max_at_ns)),
            span_ns: span,
            flows,
        };
        raiser.end_episode(congestion_key(key), end, totals);
        listed
    }

    /// Raises the run's end event when no episode continued it within the merge window
    /// (receive time `now`; `u64::MAX`: the input is over). Returns whether the run is still
    /// waiting (the shard keeps it listed).
    pub(crate) fn end_run_if_due(
        &mut self,
        cfg: &DetectConfig,
        raiser: &mut Raiser,
        now: u64,
        key: QueueKey,
    ) -> bool {
        let due = match self.run.as_deref_mut() {
            // Reopened by an episode: listed again when that one closes.
            Some(run) if run.end.is_none() => {
                run.listed = false;
                None
            }
            Some(run)
                if now.saturating_sub(run.closed_rx) >= cfg.incident_merge_ns
                    || now == u64::MAX =>
            {
                self.run.take()
            }
            Some(_) => return true,
            None => None,
        };
        if let Some(run) = due {
            raise_run_end(cfg, raiser, now, key, *run);
        }
        false
    }
}

/// The end event of a queue's congestion run: a microburst if none of its episodes' congested
/// samples spanned more than `microburst_max_ns` (as its incident is told), else the
/// congestion's end, from its first congested sample to its last, with the flows that filled
/// the queue over its episodes (the top ten, largest share first, ties by flow key).
fn raise_run_end(cfg: &DetectConfig, raiser: &mut Raiser, now: u64, key: QueueKey, run: QueueRun) {
    let Some(end) = run.end else {
        return;
    };
    let span = run.last_high_ns.saturating_sub(run.start_ns);
    let total = run.total.max(1) as f64;
    let culprits: Vec<Culprit> = rank::smallest(run.flows.iter(), 10, |&(k, (_, sum, _))| {
        (Reverse(*sum), *k)
    })
    .into_iter()
    .map(|(k, (id, sum, _))| Culprit {
        flow: *k,
        flow_id: *id,
        share: ((*sum as f64) / total * 1000.0).round() / 1000.0,
    })
    .collect();
    let kind = if run.max_span_ns <= cfg.microburst_max_ns {
        EventKind::Microburst
    } else {
        EventKind::CongestionEnd
    };
    let (start, max) = (run.start_ns, run.max_occupancy);
    let ev = move || Evidence::Episode {
        start_ns: start,
        duration_ns: span,
        end_uncertainty_ns: end.uncertainty_ns,
        max_occupancy: max,
        culprit_flows: culprits,
    };
    let now = if now == u64::MAX { run.closed_rx } else { now };
    let symptom = congestion_key(key);
    raiser.raise_at(
        now,
        end.at_ns,
        kind,
        queue_place(key, None),
        0,
        Some(&symptom),
        ev,
    );
}

/// The congestion incident key of queue `key`.
fn congestion_key(key: QueueKey) -> IncidentKey {
    IncidentKey::new(
        IncidentKind::Congestion,
        IncidentPlace {
            node: Some(key.node()),
            port: Some(key.port()),
            queue: Some(key.queue()),
            ..IncidentPlace::default()
        },
        None,
    )
}

fn queue_place(key: QueueKey, flow: Option<(FlowKey, u64)>) -> Place {
    Place {
        node: Some(key.node()),
        port: Some(key.port()),
        queue: Some(key.queue()),
        flow,
    }
}
