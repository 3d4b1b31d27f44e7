//! The first `k` of many items in some order, found in one pass without collecting them all:
//! a heap holds the `k` best so far, so each further item costs one comparison with its top.
//! Used by the flow list (a page of a million flows) and by culprit ranking (ten of thousands).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// An item and its rank; ordered by the rank alone.
struct Ranked<R, T> {
    rank: R,
    item: T,
}

impl<R: Ord, T> PartialEq for Ranked<R, T> {
    fn eq(&self, other: &Self) -> bool {
        self.rank == other.rank
    }
}

impl<R: Ord, T> Eq for Ranked<R, T> {}

impl<R: Ord, T> PartialOrd for Ranked<R, T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<R: Ord, T> Ord for Ranked<R, T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank.cmp(&other.rank)
    }
}

/// The `k` items of smallest `rank`, smallest first. Items of equal rank may come in any order,
/// so callers break ties inside the rank.
pub fn smallest<T, R: Ord>(
    items: impl IntoIterator<Item = T>,
    k: usize,
    rank: impl Fn(&T) -> R,
) -> Vec<T> {
    if k == 0 {
        return Vec::new();
    }
    let items = items.into_iter();
    let mut first: BinaryHeap<Ranked<R, T>> =
        BinaryHeap::with_capacity(k.min(items.size_hint().0.max(1)));
    // Internal iteration: a chain of adapters over nested tables (the flows of every shard)
    // folds in tight loops, where a `for` loop would go through every layer's `next` per item.
    items.for_each(|item| {
        let r = Ranked {
            rank: rank(&item),
            item,
        };
        if first.len() < k {
            first.push(r);
        } else if let Some(mut last) = first.peek_mut()
            && r < *last
        {
            *last = r;
        }
    });
    first
        .into_sorted_vec()
        .into_iter()
        .map(|r| r.item)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_first_k_of_a_full_sort(v in proptest::collection::vec(0u32..50, 0..200), k in 0usize..20) {
            // Ties broken by position, as callers do inside the rank.
            let items: Vec<(usize, u32)> = v.into_iter().enumerate().collect();
            let mut sorted = items.clone();
            sorted.sort_by_key(|&(i, x)| (x, i));
            sorted.truncate(k);
            prop_assert_eq!(smallest(items, k, |&(i, x)| (x, i)), sorted);
        }
    }
}
