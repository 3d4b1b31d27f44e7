//! A table keyed by a device's own small numbers (node IDs, port numbers): every hop of every
//! report finds its node and its egress port here, so the lookup is an array index for the usual
//! IDs and a hash only for large ones.
//!
//! Written by hand rather than taken from a crate: switches number their nodes and ports from
//! small integers (SD-Fabric's device IDs, Tofino's port numbers below 512), and for those a
//! direct index skips the hashing and the group probe a hash map spends on every lookup (the
//! probes were a third of the fabric's per-hop work in perf). IDs from [`DIRECT_IDS`] up are
//! hashed, so any `u32` works.

use rustc_hash::FxHashMap as HashMap;

/// IDs below this are indexed directly: 4 bytes of index per ID up to the largest seen, so at
/// most 4 KiB per table whatever a report claims (Tofino's port numbers stay below 512).
pub const DIRECT_IDS: u32 = 1024;

/// Entries by `u32` ID, in insertion order.
#[derive(Debug, Clone)]
pub struct IdTable<V> {
    /// For each small ID, its entry's position plus one (0: none).
    direct: Vec<u32>,
    /// Positions of the entries of large IDs.
    hashed: HashMap<u32, u32>,
    entries: Vec<(u32, V)>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            direct: Vec::new(),
            hashed: HashMap::default(),
            entries: Vec::new(),
        }
    }
}

impl<V> IdTable<V> {
    #[inline(always)]
    fn position(&self, id: u32) -> Option<usize> {
        // Most tables of a port (its queues, the links from it) hold one entry: one comparison.
        if let Some((first, _)) = self.entries.first()
            && *first == id
        {
            return Some(0);
        }
        if id < DIRECT_IDS {
            match self.direct.get(id as usize) {
                Some(&p) if p > 0 => Some(p as usize - 1),
                _ => None,
            }
        } else {
            self.hashed.get(&id).map(|&p| p as usize)
        }
    }

    /// The entry of `id`.
    #[inline]
    pub fn get(&self, id: &u32) -> Option<&V> {
        let p = self.position(*id)?;
        Some(&self.entries[p].1)
    }

    /// The entry of `id`, to change.
    #[inline]
    pub fn get_mut(&mut self, id: &u32) -> Option<&mut V> {
        let p = self.position(*id)?;
        Some(&mut self.entries[p].1)
    }

    /// The entry of `id`, made by `new` if there is none.
    #[inline(always)]
    pub fn get_or_insert_with(&mut self, id: u32, new: impl FnOnce() -> V) -> &mut V {
        let p = match self.position(id) {
            Some(p) => p,
            None => self.insert_new(id, new()),
        };
        &mut self.entries[p].1
    }

    #[inline(never)]
    fn insert_new(&mut self, id: u32, value: V) -> usize {
        let p = self.entries.len();
        self.entries.push((id, value));
        if id < DIRECT_IDS {
            let at = id as usize;
            if self.direct.len() <= at {
                self.direct.resize(at + 1, 0);
            }
            self.direct[at] = p as u32 + 1;
        } else {
            self.hashed.insert(id, p as u32);
        }
        p
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&u32, &V)> {
        self.entries.iter().map(|(id, v)| (id, v))
    }

    /// Every entry, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&u32, &mut V)> {
        self.entries.iter_mut().map(|(id, v)| (&*id, v))
    }

    /// Every entry in ID order (for output).
    pub fn in_id_order(&self) -> Vec<(u32, &V)> {
        let mut entries: Vec<(u32, &V)> = self.entries.iter().map(|(id, v)| (*id, v)).collect();
        entries.sort_unstable_by_key(|(id, _)| *id);
        entries
    }
}

impl<V> IdTable<V> {
    /// Keeps the entries `keep` says yes to (in their order) and rebuilds the index: a pass over
    /// the table, for evictions, which come once per many insertions. Returns how many went.
    pub fn retain(&mut self, mut keep: impl FnMut(u32, &mut V) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain_mut(|(id, v)| keep(*id, v));
        let removed = before - self.entries.len();
        if removed > 0 {
            self.direct.fill(0);
            self.hashed.clear();
            for (p, (id, _)) in self.entries.iter().enumerate() {
                if *id < DIRECT_IDS {
                    self.direct[*id as usize] = p as u32 + 1;
                } else {
                    self.hashed.insert(*id, p as u32);
                }
            }
        }
        removed
    }
}

/// Which entries an eviction takes: the `k` oldest by last-seen time, ties broken by order of
/// visit. [`Cutoff::oldest`] finds the time at the k-th place in one selection (no sort), then
/// [`Cutoff::take`] answers for each entry in a second pass.
#[derive(Debug, Clone, Copy)]
pub struct Cutoff {
    /// Entries seen before this are taken.
    time: u64,
    /// Entries seen exactly at `time` still to take.
    ties: usize,
}

impl Cutoff {
    /// The cutoff that takes the `k` oldest of `times` (reordered in the process).
    pub fn oldest(times: &mut [u64], k: usize) -> Self {
        if k == 0 || times.is_empty() {
            return Cutoff { time: 0, ties: 0 };
        }
        let k = k.min(times.len());
        let (_, &mut time, _) = times.select_nth_unstable(k - 1);
        let before = times.iter().filter(|&&t| t < time).count();
        Cutoff {
            time,
            ties: k - before,
        }
    }

    /// Whether the entry last seen at `time` is taken.
    pub fn take(&mut self, time: u64) -> bool {
        if time < self.time {
            true
        } else if time == self.time && self.ties > 0 {
            self.ties -= 1;
            true
        } else {
            false
        }
    }
}

impl<V: Default> IdTable<V> {
    /// The entry of `id`, empty if new.
    #[inline]
    pub fn get_or_default(&mut self, id: u32) -> &mut V {
        self.get_or_insert_with(id, V::default)
    }
}

impl<V> std::ops::Index<&u32> for IdTable<V> {
    type Output = V;
    fn index(&self, id: &u32) -> &V {
        self.get(id).expect("no entry for this ID")
    }
}

impl<'a, V> IntoIterator for &'a IdTable<V> {
    type Item = (&'a u32, &'a V);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (u32, V)>, fn(&'a (u32, V)) -> (&'a u32, &'a V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(id, v)| (id, v))
    }
}

impl<'a, V> IntoIterator for &'a mut IdTable<V> {
    type Item = (&'a u32, &'a mut V);
    type IntoIter = std::iter::Map<
        std::slice::IterMut<'a, (u32, V)>,
        fn(&'a mut (u32, V)) -> (&'a u32, &'a mut V),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter_mut().map(|(id, v)| (&*id, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The table holds what a hash map holds, for small and large IDs alike.
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec((prop_oneof![0u32..300, DIRECT_IDS - 2..DIRECT_IDS + 2, any::<u32>()], any::<u8>()), 0..200)) {
            let mut table: IdTable<u64> = IdTable::default();
            let mut model: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
            for (id, add) in ops {
                *table.get_or_default(id) += u64::from(add);
                *model.entry(id).or_default() += u64::from(add);
                prop_assert_eq!(table.get(&id), model.get(&id));
            }
            prop_assert_eq!(table.len(), model.len());
            let mut expected: Vec<(u32, &u64)> = model.iter().map(|(k, v)| (*k, v)).collect();
            expected.sort_unstable();
            prop_assert_eq!(table.in_id_order(), expected);
            prop_assert_eq!(table.get(&12345678).is_some(), model.contains_key(&12345678));
        }
    }

    proptest! {
        /// After a retain the table holds what a filtered hash map holds.
        #[test]
        fn retain_keeps_the_index_right(ids in proptest::collection::vec(prop_oneof![0u32..300, any::<u32>()], 0..100), cut in any::<u32>()) {
            let mut table: IdTable<u32> = IdTable::default();
            for &id in &ids {
                *table.get_or_default(id) = id;
            }
            table.retain(|id, _| id % 3 != cut % 3);
            for &id in &ids {
                prop_assert_eq!(table.get(&id).is_some(), id % 3 != cut % 3);
            }
            *table.get_or_default(5) += 1;
            prop_assert!(table.get(&5).is_some());
        }

        /// A cutoff takes exactly `k` entries, and none newer than one it leaves.
        #[test]
        fn cutoff_takes_the_k_oldest(times in proptest::collection::vec(0u64..20, 1..200), k in 0usize..250) {
            let mut scratch = times.clone();
            let mut cut = Cutoff::oldest(&mut scratch, k);
            let taken: Vec<bool> = times.iter().map(|&t| cut.take(t)).collect();
            prop_assert_eq!(taken.iter().filter(|&&t| t).count(), k.min(times.len()));
            let newest_taken = times.iter().zip(&taken).filter(|(_, t)| **t).map(|(t, _)| *t).max();
            let oldest_kept = times.iter().zip(&taken).filter(|(_, t)| !**t).map(|(t, _)| *t).min();
            if let (Some(a), Some(b)) = (newest_taken, oldest_kept) {
                prop_assert!(a <= b);
            }
        }
    }
}
