//! Which reports say nothing new to the detectors, and what such a report leaves for its hops.
//!
//! A flow keeps when its last report went through the detectors (its [`Anchor`]); a report
//! within the thresholds of `[detect.fast_path]` of the flow's last sample
//! ([`crate::thresholds::FastPathConfig`], where the rule is spelled out) skips the fabric's
//! per-hop work, whose counters and aggregates it adds instead to a [`Fold`] per hop that the
//! fabric takes at its next sweep. Why: most reports of a healthy fabric repeat what the
//! detectors already know, and the per-hop updates are most of correlation's cost.

use crate::record::Hop;
use crate::thresholds::DetectConfig;

/// Hops an anchor keeps: a longer path always goes through the detectors.
pub const ANCHOR_HOPS: usize = 8;

/// "No value" in a fold and in a flow's last sample, as on the wire.
const NONE: u32 = u32::MAX;

/// An anchor's `since` before any report set it.
const UNSET: u16 = u16::MAX;

/// What a flow keeps for the fast path: when its last report went through the detectors, how
/// many unchanged reports followed, the queues its hops used, and where the flow shard's
/// deferred table kept its path last. Sixteen bytes: a flow state is read for every report,
/// and a million of them are held. The values a report is compared with are the flow's last
/// sample (`FlowState::recent`), which every report updates: a slow drift is bounded by the
/// periodic report through the detectors, and the deferred samples move the ports' baselines
/// by their mean at each fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// Report time of the report the detectors saw, in 1024 ns units (wrapping every 73
    /// minutes, longer than a flow stays idle in memory by default).
    at: u32,
    /// A hash of the hops' queue IDs ([`packed_queues`]).
    queues: u32,
    /// Where the flow shard's deferred table kept this path last (a hint).
    pub(crate) slot: u32,
    /// Unchanged reports since; [`UNSET`]: none went through the detectors on the current
    /// path yet.
    since: u16,
}

impl Default for Anchor {
    fn default() -> Self {
        Anchor {
            at: 0,
            queues: 0,
            slot: u32::MAX,
            since: UNSET,
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

/// The anchor's hash of packed queue IDs (a collision only compares a report with the last
/// sample of other queues: every value must still be below the detectors' thresholds).
fn queue_hash(packed: u64) -> u32 {
    (packed ^ (packed >> 32)) as u32
}

/// The anchor's clock of report time `now`.
fn ticks(now: u64) -> u32 {
    (now >> 10) as u32
}

/// A flow's last sample's per-hop hop latencies and queue occupancies (all ones: none).
pub type LastValues<'a> = (&'a [u32; ANCHOR_HOPS], &'a [u32; ANCHOR_HOPS]);

impl Anchor {
    /// The detectors are about to see a report through `queues` ([`packed_queues`]) at `now`
    /// on the flow's current path.
    pub fn set(&mut self, now: u64, queues: u64) {
        self.at = ticks(now);
        self.queues = queue_hash(queues);
        self.since = 0;
    }

    /// The flow's path changed (or became partial): the next whole stack goes through the
    /// detectors.
    pub fn clear(&mut self) {
        self.since = UNSET;
    }

    /// Whether `hops` (through `queues`, [`packed_queues`]), a complete stack on the flow's
    /// unchanged path at `now`, says nothing new to the detectors (the rule of
    /// [`crate::thresholds::FastPathConfig`]) against the flow's `last` sample, taken before
    /// this report; `busy(node, port)`: whether that port's latency or congestion detector
    /// needs every sample. Counts the report as unchanged if so.
    pub fn unchanged(
        &mut self,
        cfg: &DetectConfig,
        (queues, last): (u64, Option<LastValues<'_>>),
        now: u64,
        hops: &[Hop],
        busy: impl Fn(u32, u32) -> bool,
    ) -> bool {
        let fast = &cfg.fast_path;
        let Some((latencies, occupancies)) = last else {
            return false;
        };
        let elapsed = u64::from(ticks(now).wrapping_sub(self.at));
        if !fast.enabled
            || self.since == UNSET
            || queue_hash(queues) != self.queues
            || hops.len() > ANCHOR_HOPS
            || u32::from(self.since) + 1 >= fast.sample_every
            || elapsed >= fast.sample_ns >> 10
        {
            return false;
        }
        let max_latency = u32::try_from(cfg.latency_min_excess_ns).unwrap_or(u32::MAX);
        let max_occupancy = cfg.congestion_start.saturating_sub(1);
        for (i, h) in hops.iter().enumerate() {
            if !near(
                h.hop_latency(),
                latencies[i],
                fast.latency_change_ns,
                max_latency,
            ) || !near(
                h.queue_occupancy(),
                occupancies[i],
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

/// Whether `v` and the last sample's `was` are both absent, or both present, `v` at most
/// `max` and within `change` of `was`.
#[inline]
fn near(v: Option<u32>, was: u32, change: u32, max: u32) -> bool {
    match v {
        None => was == NONE,
        Some(v) => was != NONE && v <= max && v.abs_diff(was) <= change,
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

    /// The same hop with nothing yet, in the heatmap bucket starting at `bucket_ns`.
    pub fn emptied(&self, bucket_ns: u64) -> Self {
        Fold::at(self.node, self.port, self.queue, self.link, bucket_ns)
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

    /// A flow's last sample of `hops`.
    fn last(hops: &[Hop]) -> ([u32; ANCHOR_HOPS], [u32; ANCHOR_HOPS]) {
        let mut v = ([NONE; ANCHOR_HOPS], [NONE; ANCHOR_HOPS]);
        for (i, h) in hops.iter().enumerate() {
            v.0[i] = h.hop_latency().unwrap_or(NONE);
            v.1[i] = h.queue_occupancy().unwrap_or(NONE);
        }
        v
    }

    /// Whether `hops` at `now` is unchanged against the last sample `was`.
    fn unchanged(a: &mut Anchor, cfg: &DetectConfig, now: u64, was: &[Hop], hops: &[Hop]) -> bool {
        let l = last(was);
        a.unchanged(
            cfg,
            (packed_queues(hops), Some((&l.0, &l.1))),
            now,
            hops,
            |_, _| false,
        )
    }

    #[test]
    fn a_report_near_the_last_sample_is_unchanged_and_a_change_past_a_threshold_is_not() {
        let cfg = DetectConfig::default();
        let mut a = Anchor::default();
        let base = [hop(1, 900, 12), hop(2, 600, 40)];
        assert!(!unchanged(&mut a, &cfg, 0, &base, &base), "not set yet");
        a.set(0, packed_queues(&base));
        assert!(unchanged(
            &mut a,
            &cfg,
            10,
            &base,
            &[hop(1, 1100, 12), hop(2, 600, 100)]
        ));
        // Past the latency change, the occupancy change, a detector's threshold.
        assert!(!unchanged(
            &mut a,
            &cfg,
            20,
            &base,
            &[hop(1, 1157, 12), hop(2, 600, 40)]
        ));
        assert!(!unchanged(
            &mut a,
            &cfg,
            20,
            &base,
            &[hop(1, 900, 12), hop(2, 600, 105)]
        ));
        let high = [hop(1, 9_900, 12), hop(2, 600, 980)];
        assert!(!unchanged(
            &mut a,
            &cfg,
            20,
            &high,
            &[hop(1, 10_001, 12), hop(2, 600, 980)]
        ));
        assert!(!unchanged(
            &mut a,
            &cfg,
            20,
            &high,
            &[hop(1, 9_900, 12), hop(2, 600, 1000)]
        ));
        assert!(unchanged(
            &mut a,
            &cfg,
            20,
            &high,
            &[hop(1, 10_000, 12), hop(2, 600, 999)]
        ));
        // Other queues, a value that went missing, no sample yet.
        let other_queue = [
            hop(1, 900, 12),
            hop(2, 600, 40).with_queue(Some(3), Some(40)),
        ];
        assert!(!unchanged(&mut a, &cfg, 30, &base, &other_queue));
        assert!(!unchanged(
            &mut a,
            &cfg,
            30,
            &base,
            &[hop(1, 900, 12), Hop::at(2)]
        ));
        assert!(!a.unchanged(&cfg, (packed_queues(&base), None), 30, &base, |_, _| false));
        // A busy port.
        let l = last(&base);
        let q = (packed_queues(&base), Some((&l.0, &l.1)));
        assert!(!a.unchanged(&cfg, q, 30, &base, |node, port| (node, port) == (2, 2)));
        // Cleared (the path changed); off.
        let mut cleared = a;
        cleared.clear();
        assert!(!unchanged(&mut cleared, &cfg, 30, &base, &base));
        let mut off = cfg.clone();
        off.fast_path.enabled = false;
        assert!(!unchanged(&mut a, &off, 30, &base, &base));
    }

    #[test]
    fn the_detectors_see_one_report_in_sample_every_and_one_per_sample_ns() {
        let cfg = DetectConfig::default();
        let hops = [hop(1, 900, 12)];
        let mut a = Anchor::default();
        a.set(0, packed_queues(&hops));
        let fast = (1..100)
            .take_while(|&t| unchanged(&mut a, &cfg, t, &hops, &hops))
            .count();
        assert_eq!(fast as u32, cfg.fast_path.sample_every - 1);
        a.set(0, packed_queues(&hops));
        // The anchor's clock counts 1024 ns.
        assert!(unchanged(
            &mut a,
            &cfg,
            cfg.fast_path.sample_ns - 1024,
            &hops,
            &hops
        ));
        assert!(!unchanged(
            &mut a,
            &cfg,
            cfg.fast_path.sample_ns,
            &hops,
            &hops
        ));
        // A report from before the anchor (reordered) goes through.
        a.set(1 << 20, packed_queues(&hops));
        assert!(!unchanged(&mut a, &cfg, 1 << 19, &hops, &hops));
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
