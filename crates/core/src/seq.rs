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
//! A sequence number is only as trustworthy as its sender and the path it took: a spoofed
//! datagram, a flipped bit or a rebooted switch jumps anywhere in the number space. So no jump
//! counts before later numbers agree with it: a number that neither continues the stream nor
//! fills one of its gaps is *held* until a report continues it (a number at most
//! [`CONTINUE_SPAN`] past it). Then the jump is confirmed: within the window
//! ([`DEFAULT_SEQ_WINDOW`], configurable) as loss, beyond it or backwards as a reset of the
//! source's counter. A held number that no report continued within [`REORDER_WINDOW`] reports of
//! its source, while the stream went on from where it was, was corruption: counted as
//! implausible, never as loss. And when a confirmed jump or reset is itself contradicted (the
//! stream comes back to where it was before it, as it does after two corrupted datagrams that
//! happened to agree), it is taken back: its loss is removed and it is counted as implausible.
//! So corrupting k datagrams of a stream moves its loss by at most k groups (each corrupted
//! datagram is one number missing from the stream, or, landing in a gap, one filled), as long
//! as the gaps it leaves are still open when the late numbers come (`tests/seq_properties.rs`
//! checks k up to 2 anywhere, and 1 % of a stream flipped). Not quite always beyond that: two
//! interleaved pairs of agreeing corrupt numbers can leave a few groups more (about one case in
//! 20 000 of the property test with up to five), and a corrupt pair that agrees on a jump of at
//! most 1024 leaves its gap to late numbers, so a source slower than 1024 reports per
//! `report_reorder_ns` keeps up to that many lost.
//!
//! Width: v2.0 numbers have 22 bits, v1.0 and v0.5 numbers 32 (Report v2.0 §"Telemetry Report
//! Group Header": "Sequence Number (22 bits)"). A source's width is the one its first report
//! had; a report of the other width is a conflict (counted, its number not used), until
//! [`WIDTH_SWITCH_AFTER`] in a row show the source changed format (a reset in the new width).
//! The trackers are bounded too: past the limit the least recently seen eighth is evicted
//! (counted), and the loss they had counted stays in the total.
//!
//! Reordered and duplicated reports: each source remembers its last [`OPEN_GAPS`] gaps with the
//! numbers of those of at most [`CONFIRM_ABOVE`] numbers that have since arrived. A late number
//! that falls in one fills it (counted as reordered; the loss it was counted as is taken back);
//! a held number the stream reaches is reordered too; a late number that is not missing (it
//! arrived already, or its gap is no longer remembered) is a duplicate, counted as such, and
//! changes no loss. A gap is *confirmed* once `report_reorder_ns` of receive time passed without
//! filling it ([`SeqTracker::confirm`]): only confirmed loss raises an event or a report-loss
//! incident, so a reordered report raises nothing. Loss totals count when later numbers agree
//! (and go down on a fill).

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

/// Forward jumps up to this many numbers count as lost reports; beyond it, as a reset.
pub const DEFAULT_SEQ_WINDOW: u32 = 65_536;

/// Numbers this far back (or less) are late arrivals: they fill a gap or are duplicates.
const LATE_WINDOW: u64 = 1024;

/// Gaps up to this many numbers remember which of their numbers arrived late (larger ones cannot
/// be filled: a report that late is rather the stream coming back after a corrupt jump).
pub const CONFIRM_ABOVE: u64 = 1024;

/// Gaps a source remembers for reorder and duplicate detection (the oldest is confirmed
/// early when a newer one needs room).
pub const OPEN_GAPS: usize = 4;

/// A held number is continued by a report at most this many numbers past it: its successor, or
/// one after a few more lost. Small, so that two corrupted numbers rarely agree by chance.
pub const CONTINUE_SPAN: u32 = 64;

/// Reports of its source a held number waits for one that continues it; after that many, the
/// stream went on without it: it was implausible (corrupt or spoofed).
pub const REORDER_WINDOW: u64 = 64;

/// Numbers a source holds at once (past it, the oldest not just ahead of the stream is
/// implausible).
pub const MAX_HELD: usize = 4;

/// Reports in a row of the other sequence width after which a source is taken to have changed
/// format (a switch upgraded between v0.5/v1.0 and v2.0): a reset in the new width.
pub const WIDTH_SWITCH_AFTER: u32 = 64;

/// A gap waiting for its reorder time: the numbers missing and which arrived late since.
#[derive(Debug, Clone, Default)]
struct OpenGap {
    from: u32,
    len: u32,
    /// Bit `i`: number `from + i` arrived late (empty for gaps over [`CONFIRM_ABOVE`]: not
    /// fillable).
    filled: Vec<u64>,
    /// Receive time it was found.
    seen_ns: u64,
    /// Switch (report) time it was found, for the incident.
    at_ns: u64,
    /// Report time of the source's last number in order before it: the reports went missing
    /// after this.
    since_ns: u64,
    /// The sequence number that revealed it.
    received_seq: u32,
}

impl OpenGap {
    /// Marks `seq` arrived if it is missing from this gap; whether it was.
    fn fill(&mut self, seq: u32, mask: u32) -> bool {
        let off = (seq.wrapping_sub(self.from) & mask) as usize;
        if off >= self.len as usize || self.filled.is_empty() {
            return false;
        }
        let (w, b) = (off / 64, 1u64 << (off % 64));
        let missing = self.filled[w] & b == 0;
        self.filled[w] |= b;
        missing
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

/// A number that neither continued the stream nor filled a gap, waiting for one that continues
/// it.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    seq: u32,
    /// The source's groups received when it arrived (its age in reports).
    index: u64,
}

/// The last confirmed jump or reset, until a later one: taken back if the stream returns to
/// where it was before it.
#[derive(Debug, Clone, Copy, Default)]
struct Jump {
    /// The number expected before it.
    origin: u32,
    /// The number it jumped to.
    target: u32,
    /// The source's groups received when it was confirmed.
    index: u64,
    /// A reset (else a forward jump).
    reset: bool,
    /// Where the gaps it opened start (the jumped numbers, those between the number it jumped
    /// to and the one that continued it).
    gaps: [Option<u32>; 2],
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
    /// Report time of the source's last number in order before the gap: its reports went
    /// missing between this and `received_ns`.
    pub since_ns: u64,
}

/// What one sequence number tells about the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqOutcome {
    /// The first report from this source.
    First,
    /// The expected next number.
    InOrder,
    /// It continued a held number: the jump to that one is confirmed, and `lost` numbers were
    /// skipped (before the held one and between it and this one).
    Gap {
        /// Report groups (datagrams) missing.
        lost: u64,
        /// The number expected.
        expected: u32,
    },
    /// An old number arrived late and filled its gap (counted as reordered, not lost).
    Late,
    /// An old number that was not missing: a duplicate (counted, no loss change).
    Duplicate,
    /// Neither the next number nor a late one: held until a later report continues it (or the
    /// stream goes on without it: then it was implausible).
    Held,
    /// It continued a held number far from the stream (beyond the window forward, or back):
    /// the source restarted its counter. Counted as a reset, not as loss.
    Restart,
    /// It continued a held number where the stream was before its last jump or reset: that
    /// was corruption, taken back (counted as implausible); `lost` numbers are missing since.
    Return {
        /// Report groups (datagrams) missing from where the stream was.
        lost: u64,
    },
    /// A number of the other width (22 or 32 bits) than the source's: counted, not used.
    WidthConflict,
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
    /// Sequence resets: counter restarts (a far jump later numbers continued).
    pub restarts: u64,
    /// Numbers later numbers contradicted (corrupt or spoofed): held numbers nothing continued,
    /// and jumps or resets the stream came back from.
    pub implausible: u64,
    /// Reports whose sequence width (22 bits for v2.0, 32 for v1.0 and v0.5) was not the
    /// source's.
    pub width_conflicts: u64,
    /// Sequence width in bits, fixed by the source's first report.
    #[serde(skip)]
    bits: u8,
    /// Reports of the other width in a row.
    #[serde(skip)]
    conflict_run: u32,
    /// Numbers waiting for one that continues them.
    #[serde(skip)]
    held: Vec<Held>,
    /// The last confirmed jump or reset.
    #[serde(skip)]
    jump: Option<Jump>,
    /// Report time it was last seen (for eviction).
    #[serde(skip)]
    seen: u64,
    /// Report time of its last number in order (where a gap found later began).
    #[serde(skip)]
    in_order_ns: u64,
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
    /// What sources since evicted had counted (the totals never go down).
    evicted_totals: SeqTotals,
    /// Sources evicted to stay within the limit.
    pub evicted: u64,
    /// The source of the group being read and its reports after the first, added to its
    /// counters when another group arrives: one lookup a group, none a report.
    pending: Option<((u32, u8), u64)>,
    /// Sources with open gaps, by the receive time they were found (in order).
    open: VecDeque<(u64, (u32, u8))>,
    /// Loss confirmed early (a gap pushed out by newer ones), for the next
    /// [`SeqTracker::confirm`].
    confirmed: Vec<Confirmed>,
}

/// Sequence totals over sources (evicted ones included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqTotals {
    /// Report groups lost.
    pub groups_lost: u64,
    /// Reports lost (v2.0: estimated).
    pub reports_lost: u64,
    /// Sequence resets.
    pub restarts: u64,
    /// Numbers later numbers contradicted.
    pub implausible: u64,
    /// Reports of the other sequence width than their source's.
    pub width_conflicts: u64,
}

impl SeqTotals {
    fn add_state(&mut self, s: &SeqState) {
        self.groups_lost += s.groups_lost;
        self.reports_lost += s.reports_lost;
        self.restarts += s.restarts;
        self.implausible += s.implausible;
        self.width_conflicts += s.width_conflicts;
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &SeqTotals) {
        self.groups_lost += other.groups_lost;
        self.reports_lost += other.reports_lost;
        self.restarts += other.restarts;
        self.implausible += other.implausible;
        self.width_conflicts += other.width_conflicts;
    }
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
        since_ns: g.since_ns,
    }
}

/// What a source's step needs besides its state.
struct Step<'a> {
    key: (u32, u8),
    now: u64,
    window: u64,
    mask: u32,
    /// The number being read (the one that revealed a gap).
    seq: u32,
    confirmed: &'a mut Vec<Confirmed>,
    open: &'a mut VecDeque<(u64, (u32, u8))>,
}

impl Step<'_> {
    /// Numbers in the space.
    fn space(&self) -> u64 {
        u64::from(self.mask) + 1
    }
    /// How far `to` is ahead of `from`, modulo the space (wrapping: never an overflow).
    fn ahead(&self, from: u32, to: u32) -> u64 {
        u64::from(to.wrapping_sub(from) & self.mask)
    }
}

impl SeqState {
    /// A source whose first report had number `seq` of `bits` width (`mask`).
    fn starting(seq: u32, bits: u32, mask: u32, now: u64) -> Self {
        SeqState {
            next: seq.wrapping_add(1) & mask,
            groups_received: 1,
            reports_received: 1,
            bits: bits as u8,
            seen: now,
            in_order_ns: now,
            ..SeqState::default()
        }
    }

    /// Reports that `groups` groups held, at this source's mean reports per received group
    /// (rounded to the nearest report).
    fn reports_in(&self, groups: u64) -> u64 {
        let n = u128::from(self.groups_received.max(1));
        let r = u128::from(self.reports_received.max(self.groups_received));
        u64::try_from((u128::from(groups) * r + n / 2) / n).unwrap_or(u64::MAX)
    }

    /// Reads number `seq` (the source's width, masked): returns what it was. Received counts
    /// are the caller's.
    fn step(&mut self, cx: &mut Step<'_>) -> SeqOutcome {
        let seq = cx.seq;
        let ahead = cx.ahead(self.next, seq);
        if ahead == 0 {
            self.next = seq.wrapping_add(1) & cx.mask;
            if !self.gaps.is_empty() {
                // Back after a corrupt jump was taken back, the stream's numbers may be in a
                // gap counted before.
                self.fill(seq, cx.mask);
            }
            self.in_order_ns = cx.now;
            self.settle(cx);
            return SeqOutcome::InOrder;
        }
        if cx.space() - ahead <= LATE_WINDOW {
            return self.late(seq, cx.mask);
        }
        if let Some(h) = self.held.iter_mut().find(|h| h.seq == seq) {
            // Held again: a duplicate, and recent again (had the first been corrupt, this one
            // may be the stream's own).
            h.index = self.groups_received;
            self.duplicates += 1;
            return SeqOutcome::Duplicate;
        }
        let continued = self.held.iter().position(|h| {
            let e = cx.ahead(h.seq, seq);
            (1..=u64::from(CONTINUE_SPAN)).contains(&e)
        });
        if let Some(i) = continued {
            let h = self.held.remove(i);
            return self.confirm_jump(h.seq, cx);
        }
        self.held.push(Held {
            seq,
            index: self.groups_received,
        });
        if self.held.len() > MAX_HELD {
            // The oldest goes, unless it is just ahead of the stream: such a number is the
            // stream's own, past one that went missing (corrupt ones land anywhere).
            let next = self.next;
            let far = (0..self.held.len())
                .find(|&i| cx.ahead(next, self.held[i].seq) > u64::from(CONTINUE_SPAN))
                .unwrap_or(0);
            self.held.remove(far);
            self.implausible += 1;
        }
        SeqOutcome::Held
    }

    /// Held number `held` was continued by the number being read: the stream jumped there.
    fn confirm_jump(&mut self, held: u32, cx: &mut Step<'_>) -> SeqOutcome {
        let seq = cx.seq;
        let after = cx.ahead(held, seq) - 1;
        if let Some(j) = self.jump.take() {
            // Where the stream was before its last jump or reset (a little before, had a
            // corrupt number moved it on; a little further on, about one number per report
            // since), short of where it jumped to: that jump was corrupt, and this is the
            // stream.
            let from = j.origin.wrapping_sub(LATE_WINDOW as u32) & cx.mask;
            let back = cx.ahead(from, held);
            if back < cx.ahead(from, j.target)
                && back <= self.groups_received - j.index + 2 * LATE_WINDOW
            {
                for from in j.gaps.into_iter().flatten() {
                    if let Some(i) = self.gaps.iter().position(|g| g.from == from) {
                        let g = self.gaps.remove(i);
                        let missing = g.missing();
                        self.groups_lost = self.groups_lost.saturating_sub(missing);
                        self.reports_lost =
                            self.reports_lost.saturating_sub(self.reports_in(missing));
                    }
                }
                if j.reset {
                    self.restarts = self.restarts.saturating_sub(1);
                }
                self.implausible += 1;
                // Numbers from where it was to the one continued are missing (none if it
                // was a little before).
                let missing = back.saturating_sub(LATE_WINDOW);
                self.open_gap(j.origin, missing, cx);
                self.open_gap(held.wrapping_add(1) & cx.mask, after, cx);
                self.next = seq.wrapping_add(1) & cx.mask;
                self.settle(cx);
                return SeqOutcome::Return {
                    lost: missing + after,
                };
            }
        }
        let origin = self.next;
        let jumped = cx.ahead(origin, held);
        let loss = jumped <= cx.window && jumped < cx.space() / 2;
        let mut gaps = [None; 2];
        if loss {
            gaps[0] = self.open_gap(origin, jumped, cx);
        } else {
            self.restarts += 1;
        }
        gaps[1] = self.open_gap(held.wrapping_add(1) & cx.mask, after, cx);
        self.jump = Some(Jump {
            origin,
            target: held,
            index: self.groups_received,
            reset: !loss,
            gaps,
        });
        self.next = seq.wrapping_add(1) & cx.mask;
        self.in_order_ns = cx.now;
        self.settle(cx);
        if loss {
            SeqOutcome::Gap {
                lost: jumped + after,
                expected: origin,
            }
        } else {
            SeqOutcome::Restart
        }
    }

    /// Counts `len` numbers from `from` as lost, in a gap late numbers may fill; returns
    /// `from` if there was one.
    fn open_gap(&mut self, from: u32, len: u64, cx: &mut Step<'_>) -> Option<u32> {
        if len == 0 {
            return None;
        }
        // Estimated before this group counts, from the groups received before the gap.
        self.groups_lost += len;
        self.reports_lost += self.reports_in(len);
        if self.gaps.len() == OPEN_GAPS {
            let old = self.gaps.remove(0);
            cx.confirmed.push(confirmed(cx.key, self, &old));
        }
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let words = if u64::from(len) <= CONFIRM_ABOVE {
            (len as usize).div_ceil(64)
        } else {
            0
        };
        self.gaps.push(OpenGap {
            from,
            len,
            filled: vec![0; words],
            seen_ns: cx.now,
            at_ns: cx.now,
            since_ns: self.in_order_ns.min(cx.now),
            received_seq: cx.seq,
        });
        cx.open.push_back((cx.now, cx.key));
        Some(from)
    }

    /// After the stream moved on: held numbers it reached are reordered, those it passed are
    /// late.
    fn settle(&mut self, cx: &Step<'_>) {
        let mut i = 0;
        while i < self.held.len() {
            let seq = self.held[i].seq;
            let ahead = cx.ahead(self.next, seq);
            if ahead == 0 {
                self.held.remove(i);
                self.next = seq.wrapping_add(1) & cx.mask;
                self.reordered += 1;
                // The stream moved: the ones before may now be reached.
                i = 0;
            } else if cx.space() - ahead <= LATE_WINDOW {
                self.held.remove(i);
                self.late(seq, cx.mask);
            } else {
                i += 1;
            }
        }
    }

    /// Late number `seq`: fills its gap, or is a duplicate.
    fn late(&mut self, seq: u32, mask: u32) -> SeqOutcome {
        if !self.fill(seq, mask) {
            self.duplicates += 1;
            return SeqOutcome::Duplicate;
        }
        self.reordered += 1;
        SeqOutcome::Late
    }

    /// Number `seq` arrived: if a gap counted it lost, it is no longer; whether one did.
    fn fill(&mut self, seq: u32, mask: u32) -> bool {
        if !self.gaps.iter_mut().any(|g| g.fill(seq, mask)) {
            return false;
        }
        // What its gap added for it, at today's mean (its own size is not known yet).
        self.reports_lost = self.reports_lost.saturating_sub(self.reports_in(1));
        self.groups_lost = self.groups_lost.saturating_sub(1);
        true
    }

    /// Held numbers nothing continued within [`REORDER_WINDOW`] reports: implausible.
    fn age(&mut self) {
        let now = self.groups_received;
        let before = self.held.len();
        self.held.retain(|h| now - h.index <= REORDER_WINDOW);
        self.implausible += (before - self.held.len()) as u64;
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
            evicted_totals: SeqTotals::default(),
            evicted: 0,
            pending: None,
            open: VecDeque::new(),
            confirmed: Vec::new(),
        }
    }

    /// Accounts the group with sequence number `seq` (of `bits` width: 22 for v2.0, 32 for
    /// v1.0 and v0.5) from `(node, hw_id)` at report time `now`, and the first of its reports
    /// (the others: [`SeqTracker::add_report`]).
    pub fn observe(&mut self, node: u32, hw_id: u8, seq: u32, bits: u32, now: u64) -> SeqOutcome {
        let bits = bits.clamp(1, 32);
        let mask = u32::MAX >> (32 - bits);
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
        let SeqTracker {
            sources,
            window,
            confirmed,
            open,
            ..
        } = self;
        let Some(s) = sources.get_mut(&(node, hw_id)) else {
            self.sources
                .insert((node, hw_id), SeqState::starting(seq, bits, mask, now));
            if self.sources.len() > self.limit {
                self.evict();
            }
            return SeqOutcome::First;
        };
        s.seen = now;
        s.reports_received += extra;
        if u32::from(s.bits) != bits {
            s.groups_received += 1;
            s.reports_received += 1;
            s.width_conflicts += 1;
            s.conflict_run += 1;
            if s.conflict_run < WIDTH_SWITCH_AFTER {
                return SeqOutcome::WidthConflict;
            }
            // The source changed format: its stream starts over in the new width.
            let mut fresh = SeqState::starting(seq, bits, mask, now);
            fresh.groups_received = s.groups_received;
            fresh.reports_received = s.reports_received;
            let old = std::mem::replace(s, fresh);
            s.groups_lost = old.groups_lost;
            s.reports_lost = old.reports_lost;
            s.reordered = old.reordered;
            s.duplicates = old.duplicates;
            s.restarts = old.restarts + 1;
            s.implausible = old.implausible + old.held.len() as u64;
            s.width_conflicts = old.width_conflicts;
            return SeqOutcome::Restart;
        }
        s.conflict_run = 0;
        s.age();
        let outcome = s.step(&mut Step {
            key: (node, hw_id),
            now,
            window: *window,
            mask,
            seq,
            confirmed,
            open,
        });
        s.groups_received += 1;
        s.reports_received += 1;
        outcome
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
        let mut gone = SeqTotals::default();
        self.sources.retain(|_, s| {
            let evict = cut.take(s.seen);
            if evict {
                gone.add_state(s);
            }
            !evict
        });
        self.evicted_totals.add(&gone);
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

    /// Loss, resets, implausible numbers and width conflicts across all sources, evicted ones
    /// included.
    pub fn totals(&self) -> SeqTotals {
        let mut t = self.evicted_totals;
        for s in self.sources.values() {
            t.add_state(s);
        }
        t
    }

    /// Reports lost across all sources, evicted ones included (v2.0: estimated, see the module
    /// doc).
    pub fn total_reports_lost(&self) -> u64 {
        self.totals().reports_lost
    }

    /// Report groups (datagrams) lost across all sources, evicted ones included.
    pub fn total_groups_lost(&self) -> u64 {
        self.totals().groups_lost
    }

    /// Sequence resets across all sources, evicted ones included.
    pub fn total_restarts(&self) -> u64 {
        self.totals().restarts
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
/// node never sent (INT-XD/MX silent drops, `thresholds::PostcardConfig::silent_drop_chance`).
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

    /// How long, within report times `from_ns..=to_ns`, `node` was heard from: the overlap
    /// of the window with the buckets that received any report of it, as far back as the
    /// history reaches. A node silent for most of a window whose flows went quiet went silent
    /// as a whole (a reporting outage), which a link or queue never makes.
    pub fn heard_ns(&self, node: u32, from_ns: u64, to_ns: u64) -> u64 {
        let Some(buckets) = self.nodes.get(&node) else {
            return 0;
        };
        let w = self.bucket_ns;
        buckets
            .iter()
            .filter(|b| b.no != 0 && b.received > 0)
            .map(|b| {
                let (start, end) = ((b.no - 1).saturating_mul(w), b.no.saturating_mul(w));
                end.min(to_ns.saturating_add(1))
                    .saturating_sub(start.max(from_ns))
            })
            .sum()
    }

    /// The longest stretch of report times within `from_ns..=to_ns` with no report of `node`,
    /// to the bucket (a window the history no longer reaches counts as unheard). A node whose
    /// report filter sends each flow once an interval is heard every interval or so; one silent
    /// for long stretches of a window stopped reporting.
    pub fn longest_unheard_ns(&self, node: u32, from_ns: u64, to_ns: u64) -> u64 {
        let Some(buckets) = self.nodes.get(&node) else {
            return to_ns.saturating_sub(from_ns);
        };
        let w = self.bucket_ns;
        let mut heard: Vec<(u64, u64)> = buckets
            .iter()
            .filter(|b| b.no != 0 && b.received > 0)
            .map(|b| ((b.no - 1).saturating_mul(w), b.no.saturating_mul(w)))
            .filter(|&(start, end)| end > from_ns && start <= to_ns)
            .collect();
        heard.sort_unstable();
        let (mut at, mut longest) = (from_ns, 0);
        for (start, end) in heard {
            longest = longest.max(start.saturating_sub(at));
            at = at.max(end);
        }
        longest.max(to_ns.saturating_sub(at))
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
        // Heard in the buckets [0, 10) and [20, 30) ms: 5 ms of [5, 15) ms, 10 ms of [0, 30].
        assert_eq!(h.heard_ns(7, 5 * ms, 15 * ms - 1), 5 * ms);
        assert_eq!(h.heard_ns(7, 0, 30 * ms), 20 * ms);
        assert_eq!(h.heard_ns(8, 0, 30 * ms), 0, "lost reports are not heard");
        // Unheard: [10, 20) ms between the two buckets; all of a window with nothing heard.
        assert_eq!(h.longest_unheard_ns(7, 0, 30 * ms), 10 * ms);
        assert_eq!(h.longest_unheard_ns(7, 2 * ms, 12 * ms), 2 * ms);
        assert_eq!(
            h.longest_unheard_ns(7, 0, 45 * ms),
            15 * ms,
            "silent since 30 ms"
        );
        assert_eq!(h.longest_unheard_ns(8, 0, 30 * ms), 30 * ms);
        assert_eq!(h.longest_unheard_ns(9, 0, 30 * ms), 30 * ms, "never heard");
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
        assert_eq!(t.observe(1, 0, 15, 22, 0), SeqOutcome::Held);
        assert_eq!(
            t.total_groups_lost(),
            0,
            "a jump counts once a later number agrees"
        );
        assert_eq!(
            t.observe(1, 0, 16, 22, 0),
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
        assert_eq!(w.observe(2, 1, 60_000, 22, 0), SeqOutcome::Held);
        assert_eq!(
            w.observe(2, 1, 60_001, 22, 0),
            SeqOutcome::Gap {
                lost: 59_999,
                expected: 1
            },
            "the next report continuing it confirms it as loss"
        );
        assert_eq!(w.observe(2, 1, 100_000, 22, 0), SeqOutcome::Held);
        assert_eq!(w.observe(2, 1, 3_000_000, 22, 0), SeqOutcome::Held);
        assert_eq!(
            w.observe(2, 1, 3_000_001, 22, 0),
            SeqOutcome::Restart,
            "a jump beyond the window that later numbers continue is a reset, not loss"
        );
        for i in 0..=REORDER_WINDOW as u32 {
            assert_eq!(w.observe(2, 1, 3_000_002 + i, 22, 0), SeqOutcome::InOrder);
        }
        assert_eq!(
            w.sources().next().unwrap().1.implausible,
            1,
            "100 000, which nothing continued, was implausible"
        );
        assert_eq!(w.observe(2, 1, 5, 22, 0), SeqOutcome::Held);
        assert_eq!(
            w.observe(2, 1, 6, 22, 0),
            SeqOutcome::Restart,
            "a jump far back that later numbers continue is a counter restart"
        );
        assert_eq!(
            w.observe(2, 1, 7, 22, 0),
            SeqOutcome::InOrder,
            "resynchronised"
        );
        let totals = w.totals();
        assert_eq!((totals.groups_lost, totals.restarts), (59_999, 2));
        assert_eq!(
            totals.reports_lost, 59_999,
            "one report a group: as many reports"
        );
        let s = t.sources().next().unwrap().1;
        assert_eq!((s.groups_received, s.groups_lost, s.reordered), (5, 2, 1));
    }

    /// Spoofed or garbage sequence numbers: nothing continues them, so each is implausible and
    /// almost none is loss (two random numbers within [`CONTINUE_SPAN`] of each other are rare).
    #[test]
    fn random_sequence_numbers_are_implausible_not_loss() {
        let mut t = SeqTracker::new(4096, usize::MAX);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let n = 100_000u64;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.observe(7, 0, x as u32, 22, 0);
        }
        let totals = t.totals();
        assert!(totals.implausible > n * 99 / 100, "{totals:?}");
        // Before: every number was a reset or a gap, ~n/8 groups lost; now ~140 (0.14 %).
        assert!(totals.groups_lost < n / 200, "{totals:?}");
    }

    /// One stream of `n` numbers from `start` with `corrupt` applied to (index, number), in
    /// `bits`: its totals.
    fn stream(start: u32, n: u32, bits: u32, corrupt: impl Fn(u32, u32) -> u32) -> SeqTotals {
        let mask = u32::MAX >> (32 - bits);
        let mut t = SeqTracker::default();
        for i in 0..n {
            let seq = start.wrapping_add(i) & mask;
            t.observe(1, 0, corrupt(i, seq) & mask, bits, u64::from(i));
        }
        t.totals()
    }

    /// The measurement, one datagram at a time: one flipped bit of one sequence
    /// number, any bit, in either direction, is at most the one number missing, never a jump's
    /// worth of loss. (Before: a flip of a set bit 10-16 counted up to 65 536 lost groups.)
    #[test]
    fn one_flipped_bit_is_at_most_one_lost_group() {
        for bits in [22, 32] {
            // Starts with alternating bits, so flips go both up and down.
            for start in [0x0015_5555u32, 0x002a_aaaa, 0xaaaa_aaaa] {
                assert_eq!(stream(start, 3000, bits, |_, s| s).groups_lost, 0);
                for bit in 0..bits {
                    let t = stream(start, 3000, bits, |i, s| {
                        if i == 1000 { s ^ (1 << bit) } else { s }
                    });
                    assert!(
                        t.groups_lost <= 1,
                        "bits {bits} start {start:#x} bit {bit}: {t:?}"
                    );
                    assert_eq!(t.restarts, 0, "bit {bit}: {t:?}");
                }
            }
        }
    }

    /// Two corrupted numbers in a row that agree with each other (the same bit flipped in
    /// both) confirm a jump or a reset; the stream coming back takes it back.
    #[test]
    fn two_agreeing_flips_are_taken_back() {
        for bits in [22, 32] {
            for start in [0x0015_5555u32, 0x002a_aaaa] {
                for bit in 10..bits {
                    let t = stream(start, 3000, bits, |i, s| {
                        if i == 1000 || i == 1001 {
                            s ^ (1 << bit)
                        } else {
                            s
                        }
                    });
                    assert!(t.groups_lost <= 2, "start {start:#x} bit {bit}: {t:?}");
                    assert_eq!(t.restarts, 0, "bit {bit}: {t:?}");
                    // Closer, the stream's next numbers are late ones that fill the gap.
                    if 1u64 << bit > LATE_WINDOW {
                        assert!(t.implausible >= 1, "bit {bit}: {t:?}");
                    }
                }
            }
        }
    }

    /// One (node, hw_id) sending v0.5 (32-bit) and v2.0 (22-bit) numbers: the width is its
    /// first report's, the others are conflicts (counted, not used), never an overflow. (Before:
    /// `attempt to subtract with overflow` in debug builds, false loss in release ones.)
    #[test]
    fn mixed_widths_are_conflicts_not_overflow_or_loss() {
        let mut t = SeqTracker::default();
        assert_eq!(t.observe(1, 0, 0xffff_fff0, 32, 0), SeqOutcome::First);
        for i in 0..10u32 {
            assert_eq!(t.observe(1, 0, i, 22, 1), SeqOutcome::WidthConflict);
            let seq = 0xffff_fff1u32.wrapping_add(i);
            assert_eq!(t.observe(1, 0, seq, 32, 2), SeqOutcome::InOrder);
        }
        let totals = t.totals();
        assert_eq!((totals.groups_lost, totals.width_conflicts), (0, 10));
        // 22 bits first, then 32.
        let mut t = SeqTracker::default();
        t.observe(2, 0, 5, 22, 0);
        assert_eq!(
            t.observe(2, 0, 0xffff_ffff, 32, 0),
            SeqOutcome::WidthConflict
        );
        assert_eq!(t.observe(2, 0, 6, 22, 0), SeqOutcome::InOrder);
        // A source that changed format for good starts over in the new width.
        for i in 0..WIDTH_SWITCH_AFTER - 1 {
            assert_eq!(t.observe(2, 0, 1000 + i, 32, 0), SeqOutcome::WidthConflict);
        }
        assert_eq!(t.observe(2, 0, 2000, 32, 0), SeqOutcome::Restart);
        assert_eq!(t.observe(2, 0, 2001, 32, 0), SeqOutcome::InOrder);
        let totals = t.totals();
        assert_eq!((totals.groups_lost, totals.restarts), (0, 1));
        assert_eq!(totals.width_conflicts, u64::from(WIDTH_SWITCH_AFTER) + 1);
    }

    /// A late number fills its gap once; again, or never missing, it is a duplicate; what no
    /// late number filled within the reorder time is confirmed.
    #[test]
    fn late_fills_duplicates_and_confirmation() {
        let mut t = SeqTracker::default();
        t.observe(1, 0, 0, 22, 0);
        assert_eq!(t.observe(1, 0, 4, 22, 10), SeqOutcome::Held);
        assert!(matches!(
            t.observe(1, 0, 5, 22, 10),
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
        assert_eq!(t.observe(1, 0, 7, 22, 0), SeqOutcome::Held);
        for _ in 0..7 {
            t.add_report(1, 0);
        }
        // Confirmed by the next group, priced at the mean of the five received (8).
        assert!(matches!(
            t.observe(1, 0, 8, 22, 0),
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
