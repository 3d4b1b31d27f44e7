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
}
