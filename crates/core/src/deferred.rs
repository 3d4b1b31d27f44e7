//! What a flow shard's unchanged reports ([`crate::fast_path`]) leave for the fabric: per path
//! and queues, a [`Fold`] per hop, handed over at each sweep.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::fabric::QUEUE_BUCKET_NS;
use crate::fast_path::{ANCHOR_HOPS, Fold};
use crate::flow::Path;
use crate::record::Hop;

/// Paths (with their queues) one flow shard defers between two sweeps: a report on another
/// one goes through the detectors. A path is forgotten at the first sweep it deferred nothing
/// since the one before.
pub const MAX_DEFERRED_PATHS: usize = 4096;

/// One path's (and queues') folds since the last sweep.
#[derive(Debug)]
struct Entry {
    /// Held so that its address, the key, names no other path while deferred.
    _path: Path,
    key: (usize, u64),
    /// Reports deferred since the last sweep.
    reports: u32,
    /// The heatmap bucket the folds are in: `[start, end)`.
    bucket: (u64, u64),
    hops: Vec<Fold>,
}

/// A flow shard's deferred hops, by path and queues.
#[derive(Debug, Default)]
pub struct Deferred {
    index: FxHashMap<(usize, u64), u32>,
    entries: Vec<Entry>,
    /// Folds closed before a sweep (a report in the next heatmap bucket).
    ready: Vec<Fold>,
}

impl Deferred {
    /// Defers `hops`, an unchanged report at `now` on `path` through `queues`
    /// ([`crate::fast_path::packed_queues`]); `slot`: where the path was found last (a hint,
    /// updated). `false` when the table is full, and the report goes through the detectors.
    pub fn add(
        &mut self,
        path: &Path,
        queues: u64,
        now: u64,
        hops: &[Hop],
        slot: &mut u32,
    ) -> bool {
        let key = (Arc::as_ptr(path) as usize, queues);
        let i = match self.entries.get(*slot as usize) {
            Some(e) if e.key == key => *slot as usize,
            _ => match self.index.get(&key) {
                Some(&i) => i as usize,
                None => {
                    if self.entries.len() >= MAX_DEFERRED_PATHS {
                        return false;
                    }
                    self.index.insert(key, self.entries.len() as u32);
                    let bucket = bucket_of(now);
                    self.entries.push(Entry {
                        _path: Arc::clone(path),
                        key,
                        reports: 0,
                        bucket,
                        hops: folds_of(path, queues, bucket.0),
                    });
                    self.entries.len() - 1
                }
            },
        };
        *slot = i as u32;
        let e = &mut self.entries[i];
        if now < e.bucket.0 || now >= e.bucket.1 {
            // A fold's occupancy maximum belongs to one heatmap bucket.
            e.bucket = bucket_of(now);
            if e.reports > 0 {
                self.ready.extend(e.hops.iter().copied());
            }
            for f in &mut e.hops {
                *f = f.emptied(e.bucket.0);
            }
        }
        e.reports += 1;
        for (f, h) in e.hops.iter_mut().zip(hops) {
            f.add(h, now);
        }
        true
    }

    /// Whether nothing is deferred.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.entries.iter().all(|e| e.reports == 0)
    }

    /// Hands every fold over to `out` and starts anew; forgets the paths that deferred nothing
    /// since the last time.
    pub fn take(&mut self, out: &mut Vec<Fold>) {
        out.append(&mut self.ready);
        let before = self.entries.len();
        self.entries.retain(|e| e.reports > 0);
        for e in &mut self.entries {
            for f in &mut e.hops {
                out.push(*f);
                *f = f.emptied(e.bucket.0);
            }
            e.reports = 0;
        }
        if self.entries.len() != before {
            self.index.clear();
            self.index.extend(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.key, i as u32)),
            );
        }
    }
}

/// The heatmap bucket of report time `now`: `[start, end)`.
fn bucket_of(now: u64) -> (u64, u64) {
    let start = now - now % QUEUE_BUCKET_NS;
    (start, start + QUEUE_BUCKET_NS)
}

/// Empty folds for each hop of `path` through `queues`, in the heatmap bucket at `bucket`.
fn folds_of(path: &Path, queues: u64, bucket: u64) -> Vec<Fold> {
    path.iter()
        .take(ANCHOR_HOPS)
        .enumerate()
        .map(|(i, h)| {
            let queue = match (queues >> (8 * i)) & 0xFF {
                0xFF => None,
                q => Some(q as u8),
            };
            let link = path
                .get(i + 1)
                .and_then(|next| Some((next.node_id, next.ingress_if?)));
            Fold::at(h.node_id, h.egress_if, queue, link, bucket)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast_path::packed_queues;
    use crate::flow::PathTable;

    #[test]
    fn folds_gather_per_path_and_queues_and_split_at_a_heatmap_bucket() {
        let hops = [
            Hop::at(1)
                .with_interfaces(Some(10), Some(11))
                .with_hop_latency(Some(900))
                .with_queue(Some(0), Some(12)),
            Hop::at(2)
                .with_interfaces(Some(3), Some(4))
                .with_hop_latency(Some(500))
                .with_queue(Some(1), Some(40)),
        ];
        let path = PathTable::default().intern(&hops);
        let q = packed_queues(&hops);
        let mut d = Deferred::default();
        assert!(d.is_empty());
        let mut slot = u32::MAX;
        for t in [10, 20, QUEUE_BUCKET_NS + 5] {
            assert!(d.add(&path, q, t, &hops, &mut slot));
        }
        assert_eq!(slot, 0);
        let mut out = Vec::new();
        d.take(&mut out);
        // The first bucket's two reports, then the next bucket's one, per hop.
        assert_eq!(out.len(), 4);
        assert_eq!((out[0].node, out[0].reports, out[0].bucket_ns), (1, 2, 0));
        assert_eq!(out[0].link, Some((2, 3)));
        assert_eq!((out[1].node, out[1].link, out[1].queue), (2, None, Some(1)));
        assert_eq!((out[2].reports, out[2].bucket_ns), (1, QUEUE_BUCKET_NS));
        assert_eq!(out[3].occupancy.sum, 40);
        assert!(d.is_empty());
        // Nothing deferred since: the path is forgotten.
        out.clear();
        d.take(&mut out);
        assert!(out.is_empty());
        assert!(d.entries.is_empty() && d.index.is_empty());
    }
}
