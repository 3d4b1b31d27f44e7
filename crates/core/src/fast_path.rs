//! Which reports say nothing new to the detectors, and what such a report leaves for its hops.
//!
//! A flow keeps the values its last report through the detectors showed them (its
//! [`Anchor`]); a report within the thresholds of `[detect.fast_path]` of them
//! ([`crate::thresholds::FastPathConfig`], where the rule is spelled out) skips the fabric's
//! per-hop work, whose counters and aggregates it adds instead to a [`Fold`] per hop that the
//! fabric takes at its next sweep. Why: most reports of a healthy fabric repeat what the
//! detectors already know, and the per-hop updates are most of correlation's cost.

use crate::record::Hop;
use crate::thresholds::DetectConfig;

/// Hops an anchor keeps: a longer path always goes through the detectors.
pub const ANCHOR_HOPS: usize = 8;

/// "No value" in a fold, as on the wire.
const NONE: u32 = u32::MAX;

/// "No value" in an anchor.
const ABSENT: u16 = u16::MAX;

/// An anchor's value for anything above what it holds exactly: never near another.
const ABOVE: u16 = u16::MAX - 1;

/// A hop's value as an anchor keeps it: 16 bits (a flow state is read for every report, and
/// the fast path's values are below the detectors' thresholds, a few µs and a few hundred
/// cells), all ones for none, [`ABOVE`] for a larger one.
fn anchored(v: Option<u32>) -> u16 {
    v.map_or(ABSENT, |v| v.min(u32::from(ABOVE)) as u16)
}

/// The values the detectors last saw of one flow's complete path: per hop its queue, hop
/// latency and occupancy ([`anchored`]), the path they came with, when, and how many
/// unchanged reports followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The flow's interned path they came with (its address; 0: none yet).
    path: usize,
    /// Report time of the report the detectors saw.
    at_ns: u64,
    /// Unchanged reports since.
    since: u32,
    /// Where the flow shard's deferred table kept this path's folds last (a hint).
    pub(crate) slot: u32,
    /// Each hop's queue ID, a byte each (0xFF: none), first hop lowest.
    queues: u64,
    latency: [u16; ANCHOR_HOPS],
    occupancy: [u16; ANCHOR_HOPS],
}

impl Default for Anchor {
    fn default() -> Self {
        Anchor {
            path: 0,
            at_ns: 0,
            since: 0,
            slot: u32::MAX,
            queues: u64::MAX,
            latency: [ABSENT; ANCHOR_HOPS],
            occupancy: [ABSENT; ANCHOR_HOPS],
        }
    }
}

/// A report's hops' queue IDs, a byte each, first hop lowest (unused bytes all ones).
pub fn packed_queues(hops: &[Hop]) -> u64 {
    let mut packed = u64::MAX;
    for (i, h) in hops.iter().take(ANCHOR_HOPS).enumerate() {
        let q = h.queue_id().map_or(0xFF, u64::from);
        packed &= !(0xFF << (8 * i));
        packed |= q << (8 * i);
    }
    packed
}

impl Anchor {
    /// Takes the values of `hops` (through `queues`, [`packed_queues`]), which the detectors
    /// are about to see, on `path` at `now`.
    pub fn set(&mut self, path: usize, now: u64, queues: u64, hops: &[Hop]) {
        *self = Anchor {
            path,
            at_ns: now,
            queues,
            slot: self.slot,
            ..Anchor::default()
        };
        for (i, h) in hops.iter().take(ANCHOR_HOPS).enumerate() {
            self.latency[i] = anchored(h.hop_latency());
            self.occupancy[i] = anchored(h.queue_occupancy());
        }
    }

    /// Forgets the values: the next report goes through the detectors.
    pub fn clear(&mut self) {
        self.path = 0;
    }

    /// Whether `hops` (through `queues`, [`packed_queues`]), a complete stack on the flow's
    /// unchanged `path` at `now`, says nothing new to the detectors (the rule of
    /// [`crate::thresholds::FastPathConfig`]); `busy(node, port)`: whether that port's latency
    /// or congestion detector needs every sample. Counts the report as unchanged if so.
    pub fn unchanged(
        &mut self,
        cfg: &DetectConfig,
        (path, queues): (usize, u64),
        now: u64,
        hops: &[Hop],
        busy: impl Fn(u32, u32) -> bool,
    ) -> bool {
        let fast = &cfg.fast_path;
        if !fast.enabled
            || self.path != path
            || queues != self.queues
            || hops.len() > ANCHOR_HOPS
            || self.since.saturating_add(1) >= fast.sample_every
            || now < self.at_ns
            || now - self.at_ns >= fast.sample_ns
        {
            return false;
        }
        let max_latency = u32::try_from(cfg.latency_min_excess_ns).unwrap_or(u32::MAX);
        let max_occupancy = cfg.congestion_start.saturating_sub(1);
        for (i, h) in hops.iter().enumerate() {
            if !near(
                h.hop_latency(),
                self.latency[i],
                fast.latency_change_ns,
                max_latency,
            ) || !near(
                h.queue_occupancy(),
                self.occupancy[i],
                fast.occupancy_change,
                max_occupancy,
            ) {
                return false;
            }
            if let Some(port) = h.egress_if()
                && busy(h.node_id, port)
            {
                return false;
            }
        }
        self.since += 1;
        true
    }
}

/// Whether `v` and the anchor's `was` are both absent, or both present, `v` at most `max`
/// and within `change` of `was` (an anchor [`ABOVE`] 16 bits is near nothing).
#[inline]
fn near(v: Option<u32>, was: u16, change: u32, max: u32) -> bool {
    match v {
        None => was == ABSENT,
        Some(v) => was < ABOVE && v <= max && v.abs_diff(u32::from(was)) <= change,
    }
}

/// Samples of one value (a hop latency, an occupancy) gathered for a fold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Agg {
    /// Samples.
    pub n: u32,
    /// Their sum.
    pub sum: u64,
    /// Their largest.
    pub max: u32,
    /// The newest.
    pub last: u32,
}

impl Agg {
    /// Adds `v`, if present.
    #[inline]
    pub fn add(&mut self, v: Option<u32>) {
        if let Some(v) = v {
            self.n += 1;
            self.sum += u64::from(v);
            self.max = self.max.max(v);
            self.last = v;
        }
    }
}

/// What unchanged reports left for one hop of a path since the last fold: the fabric adds it
/// to the hop's node, egress port, queue and link (`FabricShard::fold`) as if it had seen
/// each report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fold {
    /// The hop's node.
    pub node: u32,
    /// Its egress port, if reported.
    pub port: Option<u32>,
    /// The queue, if reported.
    pub queue: Option<u8>,
    /// The next hop and the port it entered by, when reported: the link.
    pub link: Option<(u32, u32)>,
    /// Reports through the hop.
    pub reports: u32,
    /// Their hop latencies and occupancies.
    pub latency: Agg,
    pub occupancy: Agg,
    /// The newest egress port utilization (all ones: none).
    pub tx_util: u32,
    /// Report time and switch clock of the newest report.
    pub last_ns: u64,
    pub last_clock: u64,
    /// Start of the heatmap bucket (`fabric::QUEUE_BUCKET_NS`) all of them fall in.
    pub bucket_ns: u64,
}

impl Fold {
    /// Nothing yet for the hop at `node` (leaving by `port` through `queue`, over `link`), in
    /// the heatmap bucket starting at `bucket_ns`.
    pub fn at(
        node: u32,
        port: Option<u32>,
        queue: Option<u8>,
        link: Option<(u32, u32)>,
        bucket_ns: u64,
    ) -> Self {
        Fold {
            node,
            port,
            queue,
            link,
            reports: 0,
            latency: Agg::default(),
            occupancy: Agg::default(),
            tx_util: NONE,
            last_ns: 0,
            last_clock: 0,
            bucket_ns,
        }
    }

    /// The newest egress port utilization, if any report had one.
    pub fn tx_util(&self) -> Option<u32> {
        (self.tx_util != NONE).then_some(self.tx_util)
    }

    /// Adds hop `h` of a report at `now`.
    #[inline]
    pub fn add(&mut self, h: &Hop, now: u64) {
        self.reports += 1;
        self.latency.add(h.hop_latency());
        self.occupancy.add(h.queue_occupancy());
        if let Some(u) = h.egress_tx_util() {
            self.tx_util = u;
        }
        self.last_ns = now;
        self.last_clock = h.clock_or(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(node: u32, latency: u32, occupancy: u32) -> Hop {
        Hop::at(node)
            .with_interfaces(Some(1), Some(2))
            .with_hop_latency(Some(latency))
            .with_queue(Some(0), Some(occupancy))
    }

    fn unchanged(a: &mut Anchor, cfg: &DetectConfig, now: u64, hops: &[Hop]) -> bool {
        a.unchanged(cfg, (1, packed_queues(hops)), now, hops, |_, _| false)
    }

    #[test]
    fn a_report_near_the_anchor_is_unchanged_and_a_change_past_a_threshold_is_not() {
        let cfg = DetectConfig::default();
        let mut a = Anchor::default();
        let base = [hop(1, 900, 12), hop(2, 600, 40)];
        assert!(!unchanged(&mut a, &cfg, 0, &base), "no anchor yet");
        a.set(1, 0, packed_queues(&base), &base);
        assert!(unchanged(
            &mut a,
            &cfg,
            10,
            &[hop(1, 1100, 12), hop(2, 600, 100)]
        ));
        // Past the latency change, the occupancy change, a detector's threshold.
        assert!(!unchanged(
            &mut a,
            &cfg,
            20,
            &[hop(1, 1157, 12), hop(2, 600, 40)]
        ));
        assert!(!unchanged(
            &mut a,
            &cfg,
            20,
            &[hop(1, 900, 12), hop(2, 600, 105)]
        ));
        let mut high = Anchor::default();
        let h = [hop(1, 9_900, 12), hop(2, 600, 980)];
        high.set(1, 0, packed_queues(&h), &h);
        assert!(!unchanged(
            &mut high,
            &cfg,
            1,
            &[hop(1, 10_001, 12), hop(2, 600, 980)]
        ));
        assert!(!unchanged(
            &mut high,
            &cfg,
            1,
            &[hop(1, 9_900, 12), hop(2, 600, 1000)]
        ));
        assert!(unchanged(
            &mut high,
            &cfg,
            1,
            &[hop(1, 10_000, 12), hop(2, 600, 999)]
        ));
        // An anchor above 16 bits is near nothing, whatever the thresholds.
        let mut lax = cfg.clone();
        lax.latency_min_excess_ns = 1 << 20;
        lax.fast_path.latency_change_ns = 1 << 20;
        let mut far = Anchor::default();
        let h = [hop(1, 200_000, 12)];
        far.set(1, 0, packed_queues(&h), &h);
        let near_it = [hop(1, 65_000, 12)];
        assert!(
            !far.unchanged(&lax, (1, packed_queues(&near_it)), 1, &near_it, |_, _| {
                false
            })
        );
        // Another path, another queue, a value that went missing.
        let q = packed_queues(&base);
        assert!(!a.unchanged(&cfg, (2, q), 30, &base, |_, _| false));
        let other_queue = [
            hop(1, 900, 12),
            hop(2, 600, 40).with_queue(Some(3), Some(40)),
        ];
        assert!(!unchanged(&mut a, &cfg, 30, &other_queue));
        assert!(!unchanged(&mut a, &cfg, 30, &[hop(1, 900, 12), Hop::at(2)]));
        // A busy port.
        assert!(!a.unchanged(&cfg, (1, q), 30, &base, |node, port| (node, port) == (2, 2)));
        // Off.
        let mut off = cfg.clone();
        off.fast_path.enabled = false;
        assert!(!unchanged(&mut a, &off, 30, &base));
    }

    #[test]
    fn the_detectors_see_one_report_in_sample_every_and_one_per_sample_ns() {
        let cfg = DetectConfig::default();
        let hops = [hop(1, 900, 12)];
        let mut a = Anchor::default();
        a.set(1, 0, packed_queues(&hops), &hops);
        let fast = (1..100)
            .take_while(|&t| unchanged(&mut a, &cfg, t, &hops))
            .count();
        assert_eq!(fast as u32, cfg.fast_path.sample_every - 1);
        a.set(1, 0, packed_queues(&hops), &hops);
        assert!(unchanged(&mut a, &cfg, cfg.fast_path.sample_ns - 1, &hops));
        assert!(!unchanged(&mut a, &cfg, cfg.fast_path.sample_ns, &hops));
    }

    #[test]
    fn a_fold_keeps_counts_sums_maxima_and_the_newest_values() {
        let mut f = Fold::at(1, Some(2), Some(0), None, 0);
        f.add(&hop(1, 900, 12), 10);
        f.add(&hop(1, 700, 30), 20);
        assert_eq!(f.reports, 2);
        assert_eq!(
            f.latency,
            Agg {
                n: 2,
                sum: 1600,
                max: 900,
                last: 700
            }
        );
        assert_eq!((f.occupancy.max, f.occupancy.last), (30, 30));
        assert_eq!((f.tx_util(), f.last_ns, f.last_clock), (None, 20, 20));
    }
}
