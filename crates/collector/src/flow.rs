//! Per-flow state: the current path, its history, per-hop and end-to-end latency.

use std::collections::VecDeque;

use intscope_wire::locate::FlowKey;

use crate::record::Hop;

/// One hop of a path: which node, in and out of which ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PathHop {
    /// Node ID.
    pub node_id: u32,
    /// Ingress interface.
    pub ingress_if: Option<u32>,
    /// Egress interface.
    pub egress_if: Option<u32>,
}

impl From<&Hop> for PathHop {
    fn from(h: &Hop) -> Self {
        PathHop {
            node_id: h.node_id,
            ingress_if: h.ingress_if,
            egress_if: h.egress_if,
        }
    }
}

/// Latency distribution in half-octave buckets from 64 ns (±19% per value; 256 bytes a flow, so a
/// million flows fit in memory).
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: [u32; 64],
    total: u64,
    /// The highest bucket with a value: high quantiles are found from there, in a step or two.
    top: u8,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; 64],
            total: 0,
            top: 0,
        }
    }
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        if v < 64 {
            return 0;
        }
        let log2 = 63 - v.leading_zeros() as usize;
        let half = usize::from((v >> (log2 - 1)) & 1 == 1);
        ((log2 - 6) * 2 + half + 1).min(63)
    }

    fn lower_bound(b: usize) -> u64 {
        if b == 0 {
            return 0;
        }
        let log2 = (b - 1) / 2 + 6;
        let base = 1u64 << log2;
        if (b - 1) % 2 == 1 {
            base + base / 2
        } else {
            base
        }
    }

    /// Adds a value.
    pub fn record(&mut self, v: u64) {
        let b = Self::bucket(v);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.total += 1;
        self.top = self.top.max(b as u8);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (0..=1), as the midpoint of its bucket.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let midpoint = |b: usize| {
            let lo = Self::lower_bound(b);
            let hi = Self::lower_bound(b + 1).max(lo + 1);
            Some((lo + hi) / 2)
        };
        if q >= 0.5 {
            // The smallest bucket with `rank` values at or below it is the lowest one with at
            // most `total - rank` values above it: walk down from the top while the next one
            // down still qualifies. (Buckets saturate at 2^32 values, ~50 days of a flow at
            // 1000 reports/s; the walk then errs by that bucket's excess.)
            let mut b = usize::from(self.top);
            let mut above = 0u64;
            while b > 0 && above + u64::from(self.counts[b]) <= self.total - rank {
                above += u64::from(self.counts[b]);
                b -= 1;
            }
            return midpoint(b);
        }
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return midpoint(b);
            }
        }
        None
    }
}

/// A flow's state.
#[derive(Debug, Clone)]
pub struct FlowState {
    /// The flow.
    pub key: FlowKey,
    /// Dense ID used by the API.
    pub id: u64,
    /// First report, ns.
    pub first_seen_ns: u64,
    /// Last report, ns.
    pub last_seen_ns: u64,
    /// Reports received.
    pub reports: u64,
    /// Drop reports.
    pub drops: u64,
    /// Last drop reason.
    pub last_drop_reason: Option<u8>,
    /// Current path, source first.
    pub path: Vec<PathHop>,
    /// Path changes seen.
    pub path_changes: u64,
    /// Recent paths with the time each was first seen (bounded).
    pub path_history: VecDeque<(u64, Vec<PathHop>)>,
    /// End-to-end latency (sum of hop latencies), ns.
    pub e2e: Histogram,
    /// Recent (time, e2e latency, per-hop latencies and occupancies) samples (bounded).
    pub series: VecDeque<Sample>,
    /// Changed since the last store flush.
    pub dirty: bool,
    /// `path` came from a report that may lack hops (a drop, a filtered join).
    pub path_partial: bool,
    /// INT-XD / INT-MX per-hop reports waiting to be joined into a path: (order key, time, hop).
    pub pending: Vec<(u64, u64, Hop)>,
    /// Heads of paths from intermediate reports (I bit), waiting for the report of the rest:
    /// (time, hops).
    pub heads: VecDeque<(u64, Vec<Hop>)>,
}

/// Whether every hop of `part` lies on `path`, in order.
fn on_path(mut part: impl Iterator<Item = PathHop>, path: &[PathHop]) -> bool {
    let mut rest = path.iter();
    part.all(|h| rest.any(|k| *k == h))
}

/// Path heads a flow keeps waiting (packets in flight between an intermediate report and the
/// sink's, or whose sink report a filter held back).
pub const MAX_HEADS: usize = 16;

/// Hops a latency sample keeps (the first ones of the path).
pub const SAMPLE_HOPS: usize = 8;

/// One latency sample of a flow: fixed size (no allocation per report) and compact — a missing
/// value is all ones, as on the wire, rather than an `Option`, so a sample takes 80 bytes, not
/// 152; every flow keeps [`SERIES_LEN`] of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Report time, ns.
    pub time_ns: u64,
    /// End-to-end latency, ns, saturating just below 2^32 (4.29 s).
    e2e: u32,
    hop_latency: [u32; SAMPLE_HOPS],
    queue_occupancy: [u32; SAMPLE_HOPS],
}

/// "No value" in a [`Sample`].
const NONE: u32 = u32::MAX;

fn value(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl Sample {
    /// End-to-end latency (sum of the hop latencies reported).
    pub fn e2e_latency(&self) -> Option<u64> {
        value(self.e2e).map(u64::from)
    }
    /// Hop latencies along the path, source first (`None` past the path's end or unreported).
    pub fn hop_latency(&self) -> [Option<u32>; SAMPLE_HOPS] {
        self.hop_latency.map(value)
    }
    /// Queue occupancies along the path, source first.
    pub fn queue_occupancy(&self) -> [Option<u32>; SAMPLE_HOPS] {
        self.queue_occupancy.map(value)
    }
}

impl serde::Serialize for Sample {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Sample", 4)?;
        st.serialize_field("time_ns", &self.time_ns)?;
        st.serialize_field("e2e_latency", &self.e2e_latency())?;
        st.serialize_field("hop_latency", &self.hop_latency())?;
        st.serialize_field("queue_occupancy", &self.queue_occupancy())?;
        st.end()
    }
}

/// Recent paths kept per flow.
pub const PATH_HISTORY: usize = 8;
/// Recent latency samples kept per flow.
pub const SERIES_LEN: usize = 32;

impl FlowState {
    /// A new flow first seen at `now`.
    pub fn new(key: FlowKey, id: u64, now: u64) -> Self {
        FlowState {
            key,
            id,
            first_seen_ns: now,
            last_seen_ns: now,
            reports: 0,
            drops: 0,
            last_drop_reason: None,
            path: Vec::new(),
            path_changes: 0,
            path_history: VecDeque::new(),
            e2e: Histogram::default(),
            series: VecDeque::new(),
            dirty: false,
            path_partial: false,
            pending: Vec::new(),
            heads: VecDeque::new(),
        }
    }

    /// Records a full path observation; returns the previous path if it changed. A path known
    /// only partly (see [`FlowState::observe_partial_path`]) that this one completes — its hops
    /// all on it, in order — is no change.
    pub fn observe_path(&mut self, now: u64, path: &[Hop]) -> Option<Vec<PathHop>> {
        let was_partial = std::mem::replace(&mut self.path_partial, false);
        let same = self.path.len() == path.len()
            && self
                .path
                .iter()
                .zip(path)
                .all(|(a, b)| *a == PathHop::from(b));
        if same {
            return None;
        }
        let new: Vec<PathHop> = path.iter().map(PathHop::from).collect();
        let completed = was_partial && on_path(self.path.iter().copied(), &new);
        let old = std::mem::replace(&mut self.path, new.clone());
        if self.path_history.len() == PATH_HISTORY {
            self.path_history.pop_front();
        }
        self.path_history.push_back((now, new));
        if old.is_empty() || completed {
            return None;
        }
        self.path_changes += 1;
        Some(old)
    }

    /// Records a path that may lack hops: one joined from per-hop reports of switches that filter
    /// them (SD-Fabric's flow filter reports a flow again only when its ports or latency change),
    /// or a drop report's, which ends where the packet died. Hops that all lie, in order, on the
    /// known path confirm it rather than change it; otherwise it becomes the path, marked partial
    /// until a full one completes it.
    pub fn observe_partial_path(&mut self, now: u64, path: &[Hop]) -> Option<Vec<PathHop>> {
        if path.len() < self.path.len() && on_path(path.iter().map(PathHop::from), &self.path) {
            return None;
        }
        let change = self.observe_path(now, path);
        self.path_partial = true;
        change
    }

    /// Keeps an intermediate report's hops (INT v2.1 §"MTU Settings": a transit hop without room
    /// reported the stack so far and removed it) until the report of the rest of the path. A
    /// head that starts where the flow's path starts is a new packet's; one that starts further
    /// on continues the newest head (the same packet cut again). Heads older than `window_ns`
    /// are dropped.
    pub fn push_head(&mut self, now: u64, hops: &[Hop], window_ns: u64) {
        self.expire_heads(now, window_ns);
        let starts_path = match (self.path.first(), hops.first()) {
            (Some(first), Some(h)) => *first == PathHop::from(h),
            _ => true,
        };
        match self.heads.back_mut() {
            Some((_, head)) if !starts_path => head.extend_from_slice(hops),
            _ => {
                if self.heads.len() == MAX_HEADS {
                    self.heads.pop_front();
                }
                self.heads.push_back((now, hops.to_vec()));
            }
        }
    }

    /// The oldest waiting head, for a report that completes its path.
    pub fn take_head(&mut self, now: u64, window_ns: u64) -> Option<Vec<Hop>> {
        self.expire_heads(now, window_ns);
        self.heads.pop_front().map(|(_, h)| h)
    }

    fn expire_heads(&mut self, now: u64, window_ns: u64) {
        while self
            .heads
            .front()
            .is_some_and(|(t, _)| now.saturating_sub(*t) > window_ns)
        {
            self.heads.pop_front();
        }
    }

    /// Adds a per-hop report (INT-XD postcard, INT-MX report) to the path being joined. Returns the
    /// joined path when the previous packet's hops are complete: the window since the first
    /// pending hop has passed, or this node already reported for it.
    pub fn join_hop(&mut self, now: u64, hop: Hop, window_ns: u64) -> Option<Vec<Hop>> {
        let done = self
            .pending
            .first()
            .is_some_and(|(_, t, _)| now.saturating_sub(*t) > window_ns)
            || self
                .pending
                .iter()
                .any(|(_, _, h)| h.node_id == hop.node_id);
        let joined = if done { Some(self.take_joined()) } else { None };
        // Hops of one packet are ordered by their ingress timestamps when they carry them, else by
        // arrival at the collector.
        self.pending.push((hop.ingress_ts.unwrap_or(now), now, hop));
        joined
    }

    /// The pending hops as a path, in hop order.
    pub fn take_joined(&mut self) -> Vec<Hop> {
        // Sorted in place and emptied, not replaced: the next packet's hops reuse the space.
        self.pending.sort_by_key(|(k, t, _)| (*k, *t));
        let path = self.pending.iter().map(|(_, _, h)| *h).collect();
        self.pending.clear();
        path
    }

    /// Records latencies of a report's path.
    pub fn observe_latency(&mut self, now: u64, path: &[Hop]) {
        let mut sample = Sample {
            time_ns: now,
            e2e: NONE,
            hop_latency: [NONE; SAMPLE_HOPS],
            queue_occupancy: [NONE; SAMPLE_HOPS],
        };
        let mut e2e: Option<u64> = None;
        for (i, h) in path.iter().enumerate() {
            if let Some(l) = h.hop_latency {
                *e2e.get_or_insert(0) += u64::from(l);
            }
            if i < SAMPLE_HOPS {
                sample.hop_latency[i] = h.hop_latency.unwrap_or(NONE);
                sample.queue_occupancy[i] = h.queue_occupancy.unwrap_or(NONE);
            }
        }
        if let Some(v) = e2e {
            self.e2e.record(v);
            sample.e2e = v.min(u64::from(NONE - 1)) as u32;
        }
        if self.series.len() == SERIES_LEN {
            self.series.pop_front();
        }
        self.series.push_back(sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p50 / 500_000.0 - 1.0).abs() < 0.25, "{p50}");
        assert!((p99 / 990_000.0 - 1.0).abs() < 0.25, "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn samples_serialize_with_nulls_for_what_was_not_reported() {
        let key = FlowKey {
            src: std::net::Ipv6Addr::LOCALHOST,
            dst: std::net::Ipv6Addr::LOCALHOST,
            proto: 17,
            src_port: 1,
            dst_port: 2,
        };
        let mut f = FlowState::new(key, 1, 0);
        let hop = |lat, occ| Hop {
            hop_latency: lat,
            queue_occupancy: occ,
            ..Hop::default()
        };
        f.observe_latency(
            5,
            &[
                hop(Some(100), Some(7)),
                hop(None, Some(9)),
                hop(Some(200), None),
            ],
        );
        let v = serde_json::to_value(f.series.back().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "time_ns": 5,
                "e2e_latency": 300,
                "hop_latency": [100, null, 200, null, null, null, null, null],
                "queue_occupancy": [7, 9, null, null, null, null, null, null],
            })
        );
        assert_eq!(std::mem::size_of::<Sample>(), 80);
        f.observe_latency(6, &[hop(None, None)]);
        assert_eq!(f.series.back().unwrap().e2e_latency(), None);
    }

    proptest::proptest! {
        /// High quantiles found from the top bucket down equal the walk from below.
        #[test]
        fn quantiles_from_the_top_match_the_walk_from_below(
            values in proptest::collection::vec(0u64..1 << 36, 1..300),
            q in 0.5f64..=1.0,
        ) {
            let mut h = Histogram::default();
            for v in &values {
                h.record(*v);
            }
            let rank = ((h.total as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            let from_below = h.counts.iter().position(|&c| {
                seen += u64::from(c);
                seen >= rank
            });
            let expected = from_below.map(|b| {
                let lo = Histogram::lower_bound(b);
                (lo + Histogram::lower_bound(b + 1).max(lo + 1)) / 2
            });
            proptest::prop_assert_eq!(h.quantile(q), expected);
        }
    }
}
