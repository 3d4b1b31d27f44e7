//! Report loss from sequence numbers under corruption (issue 34, item 1): corrupting k datagrams
//! of a stream — any value, or one flipped bit — moves the loss estimate by at most k groups
//! (checked here for k up to 2 at any places, and for 1 % of a long stream's datagrams).
//! Each corrupted datagram is one number missing from the stream, or one that fills a gap; it
//! never confirms a jump on its own, and a jump that two agreeing ones confirm is taken back when
//! the stream comes back (`intscope_core::SeqTracker`).

use intscope_core::{SeqTotals, SeqTracker};
use proptest::prelude::*;

/// How one datagram is corrupted.
#[derive(Debug, Clone, Copy)]
enum Corruption {
    /// One bit of the sequence number flipped.
    Flip(u32),
    /// The sequence number replaced.
    Value(u32),
}

/// Numbers an honest stream goes on after its body: enough for the late numbers a corrupted jump
/// of up to `LATE_WINDOW` (1024) left behind to arrive and fill its gap.
const TAIL: u32 = 1100;

/// An honest stream: `n` numbers from `start`, those in `lost` left out, neighbours swapped at
/// `swaps` (reordering by one), then [`TAIL`] more in order.
fn honest(start: u32, n: u32, lost: &[u32], swaps: &[u32], mask: u32) -> (Vec<u32>, u64) {
    let mut seqs: Vec<u32> = (0..n)
        .filter(|i| !lost.contains(i))
        .map(|i| start.wrapping_add(i) & mask)
        .collect();
    for &i in swaps {
        // Not the first: it fixes where the stream starts.
        let i = 1 + i as usize % seqs.len().saturating_sub(2).max(1);
        if i + 1 < seqs.len() {
            seqs.swap(i, i + 1);
        }
    }
    seqs.extend((n..n + TAIL).map(|i| start.wrapping_add(i) & mask));
    let missing = (0..n).filter(|i| lost.contains(i)).count() as u64;
    (seqs, missing)
}

fn run(seqs: &[u32], bits: u32) -> SeqTotals {
    let mut t = SeqTracker::default();
    for (i, &s) in seqs.iter().enumerate() {
        t.observe(9, 1, s, bits, i as u64);
    }
    t.totals()
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        (0u32..32).prop_map(Corruption::Flip),
        any::<u32>().prop_map(Corruption::Value),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn corrupting_k_datagrams_moves_the_loss_by_at_most_k(
        bits in prop_oneof![Just(22u32), Just(32u32)],
        start in any::<u32>(),
        n in 50u32..600,
        lost in prop::collection::vec(0u32..600, 0..3),
        burst in 0u32..200,
        swaps in prop::collection::vec(any::<u32>(), 0..4),
        // Up to two: with three or more, two pairs of agreeing flips interleaved can still
        // add a few groups (found at about 1 in 20 000 cases; see the module doc of seq).
        corrupt in prop::collection::vec((any::<prop::sample::Index>(), corruption()), 0..3),
    ) {
        let mask = u32::MAX >> (32 - bits);
        // Single losses, and one burst after the first of them.
        let mut lost: Vec<u32> = lost.into_iter().filter(|&i| i > 0 && i < n).collect();
        if let Some(&first) = lost.first() {
            lost.extend((first + 1..first + 1 + burst).filter(|&i| i < n));
        }
        let (clean, missing) = honest(start, n, &lost, &swaps, mask);
        let base = run(&clean, bits);
        prop_assert_eq!(base.groups_lost, missing, "honest loss is exact: {:?}", base);
        prop_assert_eq!(base.restarts + base.implausible, 0);
        // Corrupt k distinct datagrams (not the first: that one fixes where the stream starts).
        let body = clean.len() - TAIL as usize;
        let mut seqs = clean.clone();
        let mut hit = std::collections::BTreeSet::new();
        for (at, c) in corrupt.iter().filter(|_| body >= 2) {
            let i = 1 + at.index(body - 1);
            if !hit.insert(i) {
                continue;
            }
            seqs[i] = match *c {
                Corruption::Flip(b) => seqs[i] ^ (1 << (b % bits)),
                Corruption::Value(v) => v,
            } & mask;
        }
        let k = hit.len() as u64;
        let after = run(&seqs, bits);
        prop_assert!(
            after.groups_lost.abs_diff(base.groups_lost) <= k,
            "k {} honest {:?} corrupted {:?}: {:?}", k, base, after,
            hit.iter().map(|&i| (i, clean[i], seqs[i])).collect::<Vec<_>>()
        );
    }
}

/// The figure at test scale: one honest source, 1 % of 100 000 datagrams with one
/// sequence bit flipped, none lost. Measured before: 1 881 112 groups lost (32 bits: 2.0 M).
#[test]
fn one_percent_flipped_bits_lose_at_most_the_flipped_datagrams() {
    for bits in [22u32, 32] {
        let mask = u32::MAX >> (32 - bits);
        let mut t = SeqTracker::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut flipped = 0;
        for i in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut seq = 0x0012_3456u32.wrapping_add(i) & mask;
            if x.is_multiple_of(100) {
                seq ^= 1 << ((x >> 8) as u32 % bits);
                flipped += 1;
            }
            t.observe(1, 0, seq, bits, u64::from(i));
        }
        let totals = t.totals();
        assert!(
            totals.groups_lost <= flipped,
            "{bits} bits, {flipped} flipped: {totals:?}"
        );
        assert_eq!(totals.restarts, 0, "{totals:?}");
    }
}
