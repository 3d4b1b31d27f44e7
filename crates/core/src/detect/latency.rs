//! The hop latency detector of one egress port: a state machine over its latency samples.
//!
//! The port's baseline is the median of its first `latency_warmup` samples (at most
//! [`WARMUP_HELD`] of them kept), so one stray sample among them (the first packet of a flow held
//! for its neighbour's address, a host's scheduler stall) does not make a baseline under which
//! nothing is ever anomalous; after them it follows the normal samples (an EWMA, 1/16 per
//! sample). A sample above `latency_factor` × the baseline and at least `latency_min_excess_ns`
//! over it is anomalous; an anomaly does not move the baseline, so a lasting fault stays
//! visible instead of becoming the new normal. Anomalous samples are held until the anomaly
//! has lasted `latency_confirm_ns` of switch time (a host's scheduler stall never lasts that
//! long, a real queue does), then they all join the port's latency incident; a normal sample
//! ends the anomaly (and forgets what was held). Every anomalous sample is an event either way.

use intscope_wire::locate::FlowKey;

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::incident::{EndReason, IncidentKind, IncidentPlace, Unit};
use crate::incidents::{End, EpisodeTotals, FlowWeight, IncidentKey, Observation};
use crate::thresholds::DetectConfig;

/// Samples of a latency anomaly a port holds until it is confirmed (`latency_confirm_ns`): a
/// few kilobytes per port while it waits, nothing otherwise.
pub const UNCONFIRMED_SAMPLES: usize = 16;

/// Warm-up samples a port keeps for the median its baseline starts from: a warm-up longer
/// than this goes on from their median as an EWMA.
pub const WARMUP_HELD: usize = 64;

/// The latency state of one port: its baseline and the anomaly it is in, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latency {
    /// Hop latency baseline (EWMA) of packets leaving through the port.
    baseline: f64,
    /// Samples in the baseline.
    samples: u32,
    /// The warm-up's first samples (at most [`WARMUP_HELD`]) until they are complete, then
    /// none (freed): the baseline starts at their median.
    warmup: Vec<u32>,
    /// Switch clock of the last anomalous hop latency while an anomaly lasts (the baseline is
    /// frozen until a normal sample ends it).
    anomaly: Option<u64>,
    /// The samples of an anomaly not yet confirmed (`latency_confirm_ns`): they join the
    /// incident once the anomaly lasts, and are forgotten at the next normal sample.
    unconfirmed: Option<Box<HeldLatency>>,
}

/// One hop latency sample of a port, as the detector needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample<'a> {
    /// The hop latency.
    pub latency: u32,
    /// Switch clock of the sample (report time without timestamps).
    pub clock: u64,
    /// Receive (report) time.
    pub now: u64,
    /// The node and its egress port.
    pub node: u32,
    pub port: u32,
    /// The queue the packet left through and its occupancy, when reported.
    pub queue: Option<u8>,
    pub occupancy: Option<u32>,
    /// The packet's flow and its API ID, when known: borrowed, so a sample that raises
    /// nothing (most of them) copies no flow key.
    pub flow: Option<(&'a FlowKey, u64)>,
}

/// A port's anomalous latency samples held until the anomaly is confirmed: at most
/// [`UNCONFIRMED_SAMPLES`], later ones added to the last one's counts and peak (their flows are
/// not kept).
#[derive(Debug, Clone, Default)]
struct HeldLatency {
    samples: Vec<(Observation, Evidence)>,
    /// Switch time of the newest sample held or folded.
    last_at_ns: u64,
}

impl HeldLatency {
    fn first_at_ns(&self) -> u64 {
        self.samples
            .first()
            .map_or(self.last_at_ns, |(o, _)| o.at_ns)
    }

    fn hold(&mut self, o: Observation, ev: Evidence, at_ns: u64) {
        self.last_at_ns = at_ns;
        if self.samples.len() < UNCONFIRMED_SAMPLES {
            self.samples.push((o, ev));
        } else if let Some((last, _)) = self.samples.last_mut() {
            last.samples += 1;
            last.reports += 1;
            if last
                .value
                .zip(o.value)
                .is_some_and(|((v, _), (w, _))| v < w)
            {
                last.value = o.value;
                last.value_at_ns = Some(at_ns);
            }
        }
    }
}

impl Latency {
    /// The baseline (0 before the first sample; the median of the samples so far while the
    /// warm-up holds them).
    pub(crate) fn baseline(&self) -> f64 {
        if self.warmup.is_empty() {
            self.baseline
        } else {
            median(&mut self.warmup.clone())
        }
    }

    /// Whether the detector needs every sample: its baseline warms up, or an anomaly is held
    /// or raised (until a normal sample ends it).
    pub(crate) fn needs_every_sample(&self, cfg: &DetectConfig) -> bool {
        self.samples < cfg.latency_warmup || self.anomaly.is_some() || self.unconfirmed.is_some()
    }

    /// Takes `n` samples of mean `mean` that the detector did not need to see one by one
    /// (`crate::fast_path`: none of them could be anomalous): the baseline moves as `n` EWMA
    /// steps towards their mean would move it. Not while warming up or in an anomaly, when
    /// every sample comes through [`Latency::sample`] and the baseline does not move.
    pub(crate) fn absorb(&mut self, cfg: &DetectConfig, n: u32, mean: f64) {
        if n == 0 || self.needs_every_sample(cfg) {
            return;
        }
        let kept = (15.0f64 / 16.0).powi(n.min(1 << 16) as i32);
        self.baseline += (1.0 - kept) * (mean - self.baseline);
        self.samples = self.samples.saturating_add(n);
    }

    /// Takes warm-up sample `lat` (`self.samples` before it): held (the first [`WARMUP_HELD`]),
    /// or, past them, moving the baseline from their median as an EWMA. The median is taken
    /// once, when the held samples are complete, not per sample: ports are many and warm up
    /// together.
    fn warm(&mut self, lat: u32, warmup: u32) {
        let cap = (warmup as usize).min(WARMUP_HELD);
        let n = self.samples as usize;
        if n < cap {
            if self.warmup.capacity() == 0 {
                self.warmup.reserve_exact(cap);
            }
            self.warmup.push(lat);
            if n + 1 == cap {
                self.baseline = median(&mut self.warmup);
                self.warmup = Vec::new();
            }
        } else {
            self.baseline += (f64::from(lat) - self.baseline) / 16.0;
        }
    }

    /// Takes sample `s`: moves the baseline or, when anomalous, raises the event and holds or
    /// hands over the sample; a normal sample ends an anomaly.
    pub(crate) fn sample(&mut self, cfg: &DetectConfig, raiser: &mut Raiser, s: Sample<'_>) {
        let (lat, clock, now) = (s.latency, s.clock, s.now);
        let baseline = self.baseline;
        let warming = self.samples < cfg.latency_warmup;
        let anomalous = !warming
            && f64::from(lat) > cfg.latency_factor * baseline
            && f64::from(lat) - baseline > cfg.latency_min_excess_ns as f64;
        if warming {
            self.warm(lat, cfg.latency_warmup);
        } else if !anomalous {
            self.baseline = if self.samples == 0 {
                f64::from(lat)
            } else {
                baseline + (f64::from(lat) - baseline) / 16.0
            };
        }
        self.samples = self.samples.saturating_add(1);
        let key = || {
            IncidentKey::new(
                IncidentKind::Latency,
                IncidentPlace {
                    node: Some(s.node),
                    port: Some(s.port),
                    ..IncidentPlace::default()
                },
                None,
            )
        };
        if !anomalous {
            self.unconfirmed = None;
            if let Some(last) = self.anomaly.take() {
                let end = End {
                    at_ns: clock,
                    uncertainty_ns: clock.saturating_sub(last),
                    reason: EndReason::Normal,
                };
                raiser.end_episode(key(), end, EpisodeTotals::default());
            }
            return;
        }
        let flow = s.flow.map(|(&k, id)| (k, id));
        let ev = move || Evidence::LatencyAnomaly {
            hop_latency: lat,
            baseline: baseline.round(),
            factor: (f64::from(lat) / baseline.max(1.0) * 10.0).round() / 10.0,
            queue_occupancy: s.occupancy,
        };
        let threshold = (cfg.latency_factor * baseline)
            .max(baseline + cfg.latency_min_excess_ns as f64)
            .round() as u64;
        let o = Observation {
            value: Some((u64::from(lat), Unit::Nanoseconds)),
            threshold: Some(threshold),
            baseline: Some(baseline.round() as u64),
            flow: flow.map(FlowWeight::one),
            ..Observation::sample(clock, now)
        };
        // An anomaly whose port went quiet is over (the log resolved it): the next anomalous
        // sample is confirmed again. So are held samples with none after them for as long:
        // filtered reports (SD-Fabric's, one per flow and interval while the latency holds)
        // come that sparsely in a lasting anomaly, while the normal sample after a stall
        // forgets it at once.
        if self
            .anomaly
            .is_some_and(|last| clock.saturating_sub(last) > cfg.incident_quiet_ns)
        {
            self.anomaly = None;
        }
        if self
            .unconfirmed
            .as_ref()
            .is_some_and(|held| clock.saturating_sub(held.last_at_ns) > cfg.incident_quiet_ns)
        {
            self.unconfirmed = None;
        }
        let lasted = match &self.unconfirmed {
            Some(held) => clock.saturating_sub(held.first_at_ns()) >= cfg.latency_confirm_ns,
            None => cfg.latency_confirm_ns == 0,
        };
        if self.anomaly.is_some() || lasted {
            for (o, ev) in self.unconfirmed.take().map_or_else(Vec::new, |h| h.samples) {
                raiser.observe(key(), &o, move || ev);
            }
            raiser.observe(key(), &o, ev);
            self.anomaly = Some(clock);
        } else {
            self.unconfirmed
                .get_or_insert_with(Box::default)
                .hold(o, ev(), clock);
        }
        let place = Place {
            node: Some(s.node),
            port: Some(s.port),
            queue: s.queue,
            flow,
        };
        let symptom = key();
        raiser.raise_at(
            now,
            clock,
            EventKind::LatencyAnomaly,
            place,
            0,
            Some(&symptom),
            ev,
        );
    }
}

/// The median of `samples` (reordered), 0 of none.
fn median(samples: &mut [u32]) -> f64 {
    samples.sort_unstable();
    let mid = samples.len() / 2;
    match samples.len() {
        0 => 0.0,
        n if n % 2 == 1 => f64::from(samples[mid]),
        _ => (f64::from(samples[mid - 1]) + f64::from(samples[mid])) / 2.0,
    }
}
