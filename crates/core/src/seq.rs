//! Lost-report accounting per (node, hw_id): Report v2.0 §"Telemetry Report Group Header" —
//! the sequence number "can be used to detect loss of telemetry reports". A real deployment lost
//! half its reports unnoticed; this makes every gap visible.
//!
//! What a sequence number counts: there is "at most one instance of the Telemetry Report Group
//! Header in a packet", and it carries the one Sequence Number of the packet's "one or more
//! individual reports" (Report v2.0 §"Individual Report Header"). So in v2.0 a gap counts lost
//! *report groups* (datagrams), each of which held an unknown number of reports. In v1.0 and
//! v0.5 every datagram is one report with its own sequence number (the fixed report header is
//! followed by exactly one copy of a packet), so a group is one report. Hence two counters:
//! `groups_lost`, exact (as exact as the sequence numbers), and `reports_lost`, which for v2.0
//! is an estimate: each lost group is taken to have held the source's mean number of reports
//! per received group (exact when the source's groups are all the same size, and exact for
//! v1.0 and v0.5, whose mean is 1).
//!
//! A sequence number is only as trustworthy as its sender: a spoofed datagram or a rebooted
//! switch jumps anywhere in the number space. A forward jump is counted as loss only within a
//! window ([`DEFAULT_SEQ_WINDOW`], configurable); beyond it, or far back, the stream is taken to
//! have been reset (counted as such, not as loss). A jump of more than [`CONFIRM_ABOVE`] numbers
//! within the window is counted only once the next report continues from it: a stream of random
//! numbers then almost never confirms one, and the loss stays near the small gaps' share.
//! The trackers are bounded too: past the limit the least recently seen eighth is evicted
//! (counted), and the loss they had counted stays in the total.
//!
//! Reordered and duplicated reports: each source remembers its last [`OPEN_GAPS`] gaps of at
//! most [`CONFIRM_ABOVE`] numbers with the numbers that have since arrived. A late number that
//! falls in one fills it (counted as reordered; the loss it was counted as is taken back); a
//! late number that is not missing (it arrived already, or its gap is no longer remembered) is
//! a duplicate, counted as such, and changes no loss. A gap is *confirmed* once
//! `report_reorder_ns` of receive time passed without filling it
//! ([`SeqTracker::confirm`]): only confirmed loss raises an event or a report-loss incident,
//! so a reordered report raises nothing. Loss totals count at once (and go down on a fill).

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

/// Forward jumps up to this many numbers count as lost reports; beyond it, as a reset.
pub const DEFAULT_SEQ_WINDOW: u32 = 65_536;

/// Numbers this far back (or less) are late arrivals, counted as reordered; further back, a reset.
const LATE_WINDOW: u64 = 1024;

/// Gaps up to this many numbers count as loss at once; larger ones (within the window) when the
/// next report continues from them.
pub const CONFIRM_ABOVE: u64 = 1024;

/// Gaps a source remembers for reorder and duplicate detection (the oldest is confirmed
/// early when a newer one needs room).
pub const OPEN_GAPS: usize = 4;

/// A gap waiting for its reorder time: the numbers missing and which arrived late since.
#[derive(Debug, Clone, Default)]
struct OpenGap {
    from: u32,
    len: u32,
    /// Bit `i`: number `from + i` arrived late.
    filled: Vec<u64>,
    /// Receive time it was found.
    seen_ns: u64,
    /// Switch (report) time it was found, for the incident.
    at_ns: u64,
    /// The sequence number that revealed it.
    received_seq: u32,
}

impl OpenGap {
    fn offset(&self, seq: u32, mask: u32) -> Option<usize> {
        let off = seq.wrapping_sub(self.from) & mask;
        (off < self.len).then_some(off as usize)
    }
    fn missing(&self) -> u64 {
        u64::from(self.len)
            - self
                .filled
                .iter()
                .map(|w| u64::from(w.count_ones()))
                .sum::<u64>()
    }
}

/// Loss confirmed: a gap no late report filled within the reorder time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirmed {
    /// The source.
    pub node: u32,
    /// Its hardware subsystem.
    pub hw_id: u8,
    /// Report groups (datagrams) lost.
    pub groups: u64,
    /// Reports lost, estimated (see the module doc).
    pub reports: u64,
    /// The first missing number.
    pub expected_seq: u32,
    /// The number that revealed the gap.
    pub received_seq: u32,
    /// Receive time the gap was found.
    pub received_ns: u64,
}

/// What one sequence number tells about the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqOutcome {
    /// The first report from this source.
    First,
    /// The expected next number.
    InOrder,
    /// `lost` numbers were skipped.
    Gap {
        /// Report groups (datagrams) missing between the previous and this one.
        lost: u64,
        /// The number expected.
        expected: u32,
    },
    /// An old number arrived late and filled its gap (counted as reordered, not lost).
    Late,
    /// An old number that was not missing: a duplicate (counted, no loss change).
    Duplicate,
    /// A jump forward, within the window but too far to count before the next report confirms
    /// it (then reported as a [`SeqOutcome::Gap`]).
    Jump,
    /// An implausible jump (beyond the window forward, or far back): the source restarted its
    /// counter, or the report is not its own. Counted as a reset, not as loss.
    Restart,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
/// Counters for one (node, hw_id).
pub struct SeqState {
    /// The next expected number.
    pub next: u32,
    /// Report groups (datagrams, one sequence number each) received.
    pub groups_received: u64,
    /// Individual reports received in those groups.
    pub reports_received: u64,
    /// Report groups never received (sum of the gaps).
    pub groups_lost: u64,
    /// Reports never received: each lost group at the mean reports per received group when it
    /// was found missing (see the module doc: exact for v1.0 and v0.5, an estimate for v2.0).
    pub reports_lost: u64,
    /// Report groups that arrived after a later one and filled their gap.
    pub reordered: u64,
    /// Report groups whose number had arrived already (or whose gap was no longer
    /// remembered, see [`OPEN_GAPS`]).
    pub duplicates: u64,
    /// Sequence resets: counter restarts and jumps too far to be loss.
    pub restarts: u64,
    /// A large gap waiting for the next report to confirm it (0: none).
    #[serde(skip)]
    unconfirmed: u32,
    /// The number expected before that gap.
    #[serde(skip)]
    unconfirmed_from: u32,
    /// Report time it was last seen (for eviction).
    #[serde(skip)]
    seen: u64,
    /// Gaps waiting for their reorder time.
    #[serde(skip)]
    gaps: Vec<OpenGap>,
}

/// Sequence trackers by (node, hw_id).
#[derive(Debug)]
pub struct SeqTracker {
    sources: HashMap<(u32, u8), SeqState>,
    /// Largest forward jump counted as loss.
    window: u64,
    /// Most sources tracked.
    limit: usize,
    /// Groups lost, counted by sources since evicted (the total never goes down).
    groups_lost_evicted: u64,
    /// Reports lost, counted by sources since evicted.
    reports_lost_evicted: u64,
    /// Resets counted by sources since evicted.
    restarts_evicted: u64,
    /// Sources evicted to stay within the limit.
    pub evicted: u64,
    /// The source of the group being read and its reports after the first, added to its
    /// counters when another group arrives: one lookup a group, none a report.
    pending: Option<((u32, u8), u64)>,
    /// Sources with open gaps, by the receive time they were found (in order).
    open: VecDeque<(u64, (u32, u8))>,
    /// Loss confirmed early (a gap pushed out by newer ones, a large jump), for the next
    /// [`SeqTracker::confirm`].
    confirmed: Vec<Confirmed>,
}

/// What is left of gap `g` of source `key` (state `s`), confirmed.
fn confirmed(key: (u32, u8), s: &SeqState, g: &OpenGap) -> Confirmed {
    let groups = g.missing();
    Confirmed {
        node: key.0,
        hw_id: key.1,
        groups,
        reports: s.reports_in(groups),
        expected_seq: g.from,
        received_seq: g.received_seq,
        received_ns: g.at_ns,
    }
}

impl SeqState {
    /// Reports that `groups` groups held, at this source's mean reports per received group
    /// (rounded to the nearest report).
    fn reports_in(&self, groups: u64) -> u64 {
        let n = u128::from(self.groups_received.max(1));
        let r = u128::from(self.reports_received.max(self.groups_received));
        u64::try_from((u128::from(groups) * r + n / 2) / n).unwrap_or(u64::MAX)
    }
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker::new(DEFAULT_SEQ_WINDOW, usize::MAX)
    }
}

impl SeqTracker {
    /// Trackers that count forward jumps up to `window` as loss and hold at most `limit` sources.
    pub fn new(window: u32, limit: usize) -> Self {
        SeqTracker {
            sources: HashMap::default(),
            window: u64::from(window.max(1)),
            limit: limit.max(1),
            groups_lost_evicted: 0,
            reports_lost_evicted: 0,
            restarts_evicted: 0,
            evicted: 0,
            pending: None,
            open: VecDeque::new(),
            confirmed: Vec::new(),
        }
    }

    /// Accounts the group with sequence number `seq` (of `bits` width) from `(node, hw_id)` at
    /// report time `now`, and the first of its reports (the others: [`SeqTracker::add_report`]).
    pub fn observe(&mut self, node: u32, hw_id: u8, seq: u32, bits: u32, now: u64) -> SeqOutcome {
        let space: u64 = 1u64 << bits;
        let mask = (space - 1) as u32;
        let seq = seq & mask;
        let extra = match self.pending {
            Some((k, n)) if k == (node, hw_id) => {
                self.pending = None;
                n
            }
            Some(_) => {
                self.flush_pending();
                0
            }
            None => 0,
        };
        let Some(s) = self.sources.get_mut(&(node, hw_id)) else {
            self.sources.insert(
                (node, hw_id),
                SeqState {
                    next: seq.wrapping_add(1) & mask,
                    groups_received: 1,
                    reports_received: 1,
                    seen: now,
                    ..SeqState::default()
                },
            );
            if self.sources.len() > self.limit {
                self.evict();
            }
            return SeqOutcome::First;
        };
        s.seen = now;
        s.reports_received += extra;
        // `space` is a power of two: the mask is the modulo without a division per datagram.
        let ahead = (u64::from(seq) + space - u64::from(s.next)) & (space - 1);
        if ahead == 0 && s.unconfirmed == 0 {
            s.groups_received += 1;
            s.reports_received += 1;
            s.next = seq.wrapping_add(1) & mask;
            SeqOutcome::InOrder
        } else if ahead <= CONFIRM_ABOVE {
            // This report continues the stream: a large gap before it is confirmed.
            let lost = ahead + u64::from(s.unconfirmed);
            let expected = if s.unconfirmed > 0 {
                s.unconfirmed_from
            } else {
                s.next
            };
            let jumped = s.unconfirmed > 0;
            s.unconfirmed = 0;
            // Estimated before this group counts, from the groups received before the gap.
            let reports = s.reports_in(lost);
            s.reports_lost += reports;
            s.groups_lost += lost;
            s.groups_received += 1;
            s.reports_received += 1;
            s.next = seq.wrapping_add(1) & mask;
            let key = (node, hw_id);
            if jumped || lost > CONFIRM_ABOVE {
                // Too large to remember number by number: confirmed at once.
                self.confirmed.push(Confirmed {
                    node,
                    hw_id,
                    groups: lost,
                    reports,
                    expected_seq: expected,
                    received_seq: seq,
                    received_ns: now,
                });
            } else {
                if s.gaps.len() == OPEN_GAPS {
                    let old = s.gaps.remove(0);
                    self.confirmed.push(confirmed(key, s, &old));
                }
                s.gaps.push(OpenGap {
                    from: expected,
                    len: lost as u32,
                    filled: vec![0; (lost as usize).div_ceil(64)],
                    seen_ns: now,
                    at_ns: now,
                    received_seq: seq,
                });
                self.open.push_back((now, key));
            }
            SeqOutcome::Gap { lost, expected }
        } else if ahead <= self.window && ahead < space / 2 {
            // A previous unconfirmed gap was followed by another jump: neither is counted.
            if s.unconfirmed > 0 {
                s.restarts += 1;
            }
            s.unconfirmed = ahead as u32;
            s.unconfirmed_from = s.next;
            s.groups_received += 1;
            s.reports_received += 1;
            s.next = seq.wrapping_add(1) & mask;
            SeqOutcome::Jump
        } else if space - ahead <= LATE_WINDOW {
            let hole = s.gaps.iter_mut().find_map(|g| {
                let off = g.offset(seq, mask)?;
                let (w, b) = (off / 64, 1u64 << (off % 64));
                (g.filled[w] & b == 0).then(|| g.filled[w] |= b)
            });
            if hole.is_none() {
                s.groups_received += 1;
                s.reports_received += 1;
                s.duplicates += 1;
                return SeqOutcome::Duplicate;
            }
            // A late arrival we had counted as lost.
            s.reordered += 1;
            // What its gap added for it, at today's mean (its own size is not known yet).
            s.reports_lost = s.reports_lost.saturating_sub(s.reports_in(1));
            s.groups_lost = s.groups_lost.saturating_sub(1);
            s.groups_received += 1;
            s.reports_received += 1;
            SeqOutcome::Late
        } else {
            s.restarts += 1;
            s.unconfirmed = 0;
            s.groups_received += 1;
            s.reports_received += 1;
            s.next = seq.wrapping_add(1) & mask;
            SeqOutcome::Restart
        }
    }

    /// Counts one more report in the group last observed from `(node, hw_id)` (a v2.0 group's
    /// reports after its first), for the mean group size that prices lost groups.
    pub fn add_report(&mut self, node: u32, hw_id: u8) {
        match &mut self.pending {
            Some((k, n)) if *k == (node, hw_id) => *n += 1,
            _ => {
                self.flush_pending();
                self.pending = Some(((node, hw_id), 1));
            }
        }
    }

    /// Loss confirmed by receive time `now`: gaps found more than `reorder_ns` before it that
    /// late reports did not fill entirely (what is left of them), and those confirmed early.
    pub fn confirm(&mut self, now: u64, reorder_ns: u64) -> Vec<Confirmed> {
        let mut out = std::mem::take(&mut self.confirmed);
        while let Some(&(seen, key)) = self.open.front() {
            if now.saturating_sub(seen) < reorder_ns {
                break;
            }
            self.open.pop_front();
            let Some(s) = self.sources.get_mut(&key) else {
                continue;
            };
            while s
                .gaps
                .first()
                .is_some_and(|g| now.saturating_sub(g.seen_ns) >= reorder_ns)
            {
                let g = s.gaps.remove(0);
                out.push(confirmed(key, s, &g));
            }
        }
        out.retain(|c| c.groups > 0);
        out
    }

    fn flush_pending(&mut self) {
        if let Some((k, n)) = self.pending.take()
            && let Some(s) = self.sources.get_mut(&k)
        {
            s.reports_received += n;
        }
    }

    /// Evicts the least recently seen eighth of the sources (at least one), keeping what they
    /// counted in the totals: one pass every `limit / 8` new sources, none per report.
    #[cold]
    #[inline(never)]
    fn evict(&mut self) {
        let keep = self.limit - self.limit / 8;
        let k = self.sources.len().saturating_sub(keep).max(1);
        let mut times: Vec<u64> = self.sources.values().map(|s| s.seen).collect();
        let mut cut = crate::id_table::Cutoff::oldest(&mut times, k);
        let (mut groups, mut reports, mut restarts) = (0, 0, 0);
        self.sources.retain(|_, s| {
            let evict = cut.take(s.seen);
            if evict {
                groups += s.groups_lost;
                reports += s.reports_lost;
                restarts += s.restarts;
            }
            !evict
        });
        self.groups_lost_evicted += groups;
        self.reports_lost_evicted += reports;
        self.restarts_evicted += restarts;
        self.evicted += k as u64;
    }

    /// All sources and their counters (the group being read included).
    pub fn sources(&self) -> impl Iterator<Item = ((u32, u8), SeqState)> {
        self.sources.iter().map(|(k, v)| {
            let mut v = v.clone();
            v.gaps = Vec::new();
            if let Some((pk, n)) = self.pending
                && pk == *k
            {
                v.reports_received += n;
            }
            (*k, v)
        })
    }

    /// Sources tracked.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// Whether no source is tracked.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Reports lost across all sources, evicted ones included (v2.0: estimated, see the module
    /// doc).
    pub fn total_reports_lost(&self) -> u64 {
        self.reports_lost_evicted + self.sources.values().map(|s| s.reports_lost).sum::<u64>()
    }

    /// Report groups (datagrams) lost across all sources, evicted ones included.
    pub fn total_groups_lost(&self) -> u64 {
        self.groups_lost_evicted + self.sources.values().map(|s| s.groups_lost).sum::<u64>()
    }

    /// Sequence resets across all sources, evicted ones included.
    pub fn total_restarts(&self) -> u64 {
        self.restarts_evicted + self.sources.values().map(|s| s.restarts).sum::<u64>()
    }
}

/// Time buckets a node's [`LossHistory`] keeps (the oldest is reused for the newest).
pub const LOSS_BUCKETS: usize = 32;

/// Most nodes a [`LossHistory`] holds; past it, nodes without a report for [`LOSS_BUCKETS`]
/// buckets make room, and a node that finds no room is not tracked (counted).
pub const MAX_LOSS_NODES: usize = 4096;

/// One time bucket of a node's reports.
#[derive(Debug, Clone, Copy, Default)]
struct LossBucket {
    /// Bucket number (report time / bucket width, plus one; 0: unused).
    no: u64,
    received: u32,
    lost: u32,
}

/// Each node's recent reports received and lost, in time buckets (report time): what a flow
/// stage needs to tell a missing per-hop report that the report network lost from one the
/// node never sent (INT-XD/MX silent drops, `flow_shard::PostcardConfig::silent_drop_chance`).
/// Loss is what the sequence numbers confirmed ([`SeqTracker::confirm`]: gaps that no late
/// report filled), summed over a node's hw_ids: a postcard's hop names its node, not the
/// subsystem that sent it. Bounded: [`LOSS_BUCKETS`] buckets per node, [`MAX_LOSS_NODES`] nodes.
#[derive(Debug)]
pub struct LossHistory {
    nodes: HashMap<u32, [LossBucket; LOSS_BUCKETS]>,
    bucket_ns: u64,
    /// Newest bucket number a purge of stale nodes ran at.
    purged_at: u64,
    /// Nodes refused room since the last purge.
    refused_since_purge: u32,
    /// Reports of nodes not tracked for want of room.
    pub untracked: u64,
}

/// A full history purges stale nodes when time reaches a new bucket, or after this many nodes
/// were refused room since the last purge: a purge reads every node's buckets, so spoofed node
/// IDs (or report times) cost at most one purge per this many reports, not one each.
const PURGE_AFTER_REFUSED: u32 = 512;

impl LossHistory {
    /// A history in buckets of `bucket_ns` (at least 1 ms).
    pub fn new(bucket_ns: u64) -> Self {
        LossHistory {
            nodes: HashMap::default(),
            bucket_ns: bucket_ns.max(1_000_000),
            purged_at: 0,
            refused_since_purge: 0,
            untracked: 0,
        }
    }

    /// Width of a bucket, ns: the history spans [`LOSS_BUCKETS`] of them.
    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    fn bucket(&mut self, node: u32, at_ns: u64) -> Option<&mut LossBucket> {
        let no = at_ns / self.bucket_ns + 1;
        if !self.nodes.contains_key(&node) && self.nodes.len() >= MAX_LOSS_NODES {
            if no > self.purged_at || self.refused_since_purge >= PURGE_AFTER_REFUSED {
                // Stale as seen from this report's time, so one report from far in the future
                // empties the history once, not for good.
                let oldest_kept = no.saturating_sub(LOSS_BUCKETS as u64);
                self.nodes
                    .retain(|_, b| b.iter().any(|b| b.no > oldest_kept));
                self.purged_at = self.purged_at.max(no);
                self.refused_since_purge = 0;
            }
            if self.nodes.len() >= MAX_LOSS_NODES {
                self.refused_since_purge = self.refused_since_purge.saturating_add(1);
                self.untracked += 1;
                return None;
            }
        }
        let b = &mut self.nodes.entry(node).or_default()[(no % LOSS_BUCKETS as u64) as usize];
        if b.no > no {
            // Older than the history reaches.
            return None;
        }
        if b.no < no {
            *b = LossBucket {
                no,
                ..LossBucket::default()
            };
        }
        Some(b)
    }

    /// `n` reports of `node` received at report time `at_ns`.
    pub fn received(&mut self, node: u32, n: u64, at_ns: u64) {
        if let Some(b) = self.bucket(node, at_ns) {
            b.received = b
                .received
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// `n` reports of `node` lost (a confirmed gap found at report time `at_ns`).
    pub fn lost(&mut self, node: u32, n: u64, at_ns: u64) {
        if let Some(b) = self.bucket(node, at_ns) {
            b.lost = b.lost.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// Reports of `node` (lost, received) in the buckets from the one holding `from_ns` to the
    /// one holding `to_ns`, as far back as the history reaches.
    pub fn between(&self, node: u32, from_ns: u64, to_ns: u64) -> (u64, u64) {
        let Some(buckets) = self.nodes.get(&node) else {
            return (0, 0);
        };
        let (from, to) = (from_ns / self.bucket_ns + 1, to_ns / self.bucket_ns + 1);
        buckets
            .iter()
            .filter(|b| b.no != 0 && (from..=to).contains(&b.no))
            .fold((0, 0), |(l, r), b| {
                (l + u64::from(b.lost), r + u64::from(b.received))
            })
    }

    /// Nodes held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether `node` has no room in the history and will not get any until a purge: full, and
    /// `node` not held.
    pub fn refuses(&self, node: u32) -> bool {
        self.nodes.len() >= MAX_LOSS_NODES && !self.nodes.contains_key(&node)
    }

    /// Whether no node is held.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_history_sums_a_window_and_forgets_what_it_cannot_hold() {
        let ms = 1_000_000;
        let mut h = LossHistory::new(10 * ms);
        h.received(7, 8, 5 * ms);
        h.lost(7, 2, 6 * ms);
        h.received(7, 10, 25 * ms);
        h.lost(8, 5, 25 * ms);
        assert_eq!(h.between(7, 0, 9 * ms), (2, 8));
        assert_eq!(h.between(7, 0, 30 * ms), (2, 18));
        assert_eq!(h.between(7, 20 * ms, 30 * ms), (0, 10));
        assert_eq!(h.between(8, 0, 30 * ms), (5, 0), "per node");
        assert_eq!(h.between(9, 0, 30 * ms), (0, 0));
        // A bucket LOSS_BUCKETS later takes the slot of the first: the first is gone, and a
        // late loss for it is older than the history reaches.
        let later = 5 * ms + LOSS_BUCKETS as u64 * 10 * ms;
        h.received(7, 1, later);
        assert_eq!(h.between(7, 0, later), (0, 11));
        h.lost(7, 3, 5 * ms);
        assert_eq!(h.between(7, 0, later), (0, 11));
        // Bounded: past MAX_LOSS_NODES, stale nodes make room, and otherwise a node is not
        // tracked.
        let mut h = LossHistory::new(ms);
        for n in 0..MAX_LOSS_NODES as u32 {
            h.received(n, 1, 0);
        }
        h.received(u32::MAX, 1, 0);
        assert_eq!((h.len(), h.untracked), (MAX_LOSS_NODES, 1));
        h.received(u32::MAX, 1, 100 * ms);
        assert_eq!((h.len(), h.untracked), (1, 1), "the stale nodes left");
    }

    #[test]
    fn gaps_wraps_late_and_restarts() {
        let mut t = SeqTracker::default();
        assert_eq!(t.observe(1, 0, 10, 22, 0), SeqOutcome::First);
        assert_eq!(t.observe(1, 0, 11, 22, 0), SeqOutcome::InOrder);
        assert_eq!(
            t.observe(1, 0, 15, 22, 0),
            SeqOutcome::Gap {
                lost: 3,
                expected: 12
            }
        );
        assert_eq!(t.observe(1, 0, 13, 22, 0), SeqOutcome::Late);
        let max = (1u32 << 22) - 1;
        let mut w = SeqTracker::default();
        w.observe(2, 1, max - 1, 22, 0);
        assert_eq!(w.observe(2, 1, max, 22, 0), SeqOutcome::InOrder);
        assert_eq!(
            w.observe(2, 1, 0, 22, 0),
            SeqOutcome::InOrder,
            "22-bit wrap"
        );
        assert_eq!(
            w.observe(2, 1, 60_000, 22, 0),
            SeqOutcome::Jump,
            "a large jump within the window waits for the next report"
        );
        assert_eq!(
            w.observe(2, 1, 60_001, 22, 0),
            SeqOutcome::Gap {
                lost: 59_999,
                expected: 1
            },
            "the next report in order confirms it as loss"
        );
        assert_eq!(w.observe(2, 1, 100_000, 22, 0), SeqOutcome::Jump);
        assert_eq!(
            w.observe(2, 1, 3_000_000, 22, 0),
            SeqOutcome::Restart,
            "a jump not confirmed is not loss"
        );
        assert_eq!(
            w.observe(2, 1, 3_000_002 + DEFAULT_SEQ_WINDOW, 22, 0),
            SeqOutcome::Restart,
            "a jump beyond the window is a reset, not loss"
        );
        assert_eq!(
            w.observe(2, 1, 5, 22, 0),
            SeqOutcome::Restart,
            "a jump far back is a counter restart"
        );
        assert_eq!(
            w.observe(2, 1, 6, 22, 0),
            SeqOutcome::InOrder,
            "resynchronised"
        );
        assert_eq!((w.total_groups_lost(), w.total_restarts()), (59_999, 3));
        assert_eq!(
            w.total_reports_lost(),
            59_999,
            "one report a group: as many reports"
        );
        let s = t.sources().next().unwrap().1;
        assert_eq!((s.groups_received, s.groups_lost, s.reordered), (4, 2, 1));
    }

    /// Spoofed or garbage sequence numbers: each implausible jump is a reset, a jump within the
    /// window is not confirmed by the next number, and what counts as loss is the small gaps'
    /// share.
    #[test]
    fn random_sequence_numbers_are_resets_not_loss() {
        let mut t = SeqTracker::new(4096, usize::MAX);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let n = 100_000u64;
        let mut resets = 0;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if t.observe(7, 0, x as u32, 22, 0) == SeqOutcome::Restart {
                resets += 1;
            }
        }
        assert!(resets > n * 99 / 100, "{resets}");
        assert_eq!(t.total_restarts(), resets);
        // Only gaps up to CONFIRM_ABOVE count unconfirmed: 1024 / 2²² of the reports, 512 each,
        // an eighth of a report per report. The old half-space rule gave ~1 M.
        assert!(t.total_groups_lost() < n / 2, "{}", t.total_groups_lost());
    }

    /// A late number fills its gap once; again, or never missing, it is a duplicate; what no
    /// late number filled within the reorder time is confirmed.
    #[test]
    fn late_fills_duplicates_and_confirmation() {
        let mut t = SeqTracker::default();
        t.observe(1, 0, 0, 22, 0);
        assert!(matches!(
            t.observe(1, 0, 4, 22, 10),
            SeqOutcome::Gap { lost: 3, .. }
        ));
        assert_eq!(t.observe(1, 0, 2, 22, 20), SeqOutcome::Late);
        assert_eq!(t.observe(1, 0, 2, 22, 30), SeqOutcome::Duplicate);
        assert_eq!(t.observe(1, 0, 4, 22, 40), SeqOutcome::Duplicate);
        assert_eq!(t.observe(1, 0, 0, 22, 40), SeqOutcome::Duplicate);
        assert!(t.confirm(50, 100).is_empty(), "within the reorder time");
        let c = t.confirm(110, 100);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].groups, c[0].reports, c[0].expected_seq), (2, 2, 1));
        assert_eq!(t.total_groups_lost(), 2);
        let s = t.sources().next().unwrap().1;
        assert_eq!((s.reordered, s.duplicates), (1, 3));
        // Too late: its gap was confirmed and forgotten, so it changes nothing.
        assert_eq!(t.observe(1, 0, 1, 22, 120), SeqOutcome::Duplicate);
        assert_eq!(t.total_groups_lost(), 2);
        assert!(t.confirm(1_000, 100).is_empty());
    }

    /// Past the limit the least recently seen sources go, and their loss stays counted.
    #[test]
    fn trackers_are_bounded_and_keep_the_loss_of_the_evicted() {
        let mut t = SeqTracker::new(DEFAULT_SEQ_WINDOW, 64);
        t.observe(1, 0, 0, 22, 0);
        t.observe(1, 0, 11, 22, 1);
        for node in 100..10_000 {
            let now = u64::from(node) * 10;
            t.observe(node, 0, 0, 22, now);
            // Source 1 stays recent: it is never the one evicted.
            t.observe(1, 0, 12 + node - 100, 22, now + 1);
            assert!(t.len() <= 64);
        }
        assert!(t.sources().any(|(k, _)| k == (1, 0)));
        assert_eq!(t.evicted as usize, 9_900 + 1 - t.len());
        assert_eq!(t.total_groups_lost(), 10);
        assert_eq!(t.total_reports_lost(), 10);
    }

    /// A v2.0 group's report count is unknowable once lost: it is priced at the source's mean
    /// group size, and a late group takes back what its gap added.
    #[test]
    fn lost_groups_are_priced_at_the_mean_group_size() {
        let mut t = SeqTracker::default();
        for seq in 0..4 {
            t.observe(1, 0, seq, 22, 0);
            // Groups of 4 and 12 reports: a mean of 8.
            for _ in 0..if seq % 2 == 0 { 3 } else { 11 } {
                t.add_report(1, 0);
            }
        }
        assert!(matches!(
            t.observe(1, 0, 7, 22, 0),
            SeqOutcome::Gap { lost: 3, .. }
        ));
        assert_eq!((t.total_groups_lost(), t.total_reports_lost()), (3, 24));
        for _ in 0..7 {
            t.add_report(1, 0);
        }
        assert_eq!(t.observe(1, 0, 5, 22, 0), SeqOutcome::Late);
        assert_eq!((t.total_groups_lost(), t.total_reports_lost()), (2, 16));
    }
}
