//! Whether the receive threads are short of CPU, so that the store writes less while they are:
//! a flush that is due is put off while ingest is under pressure (up to
//! `store.max_stretch` intervals), and the next one covers the longer interval in as many rows
//! as one. The writer's own CPU is already below ingest's ([`crate::store::priority`]); this
//! also spares what a flush costs elsewhere on the machine (a local ClickHouse server parsing
//! and merging the rows, SQLite's page cache).
//!
//! The signal is the receive threads' own: a `recvmmsg` call that fills the whole batch found
//! more datagrams queued than one batch holds, so the socket is filling faster than the thread
//! empties it; and datagrams the kernel dropped on the report sockets. Over a flush interval,
//! at least half the calls full, or any kernel drop, is pressure.

use std::sync::atomic::Ordering;

use super::IngestStats;

/// The share of full `recvmmsg` batches, in 1/1024, at and above which ingest is under
/// pressure: half of them.
const FULL_SHARE_1024: u64 = 512;

/// Fewer receive calls than this in a period say nothing either way (an idle collector's
/// timeouts, a test's few datagrams).
const MIN_CALLS: u64 = 16;

/// The receive threads' counters at the last look.
#[derive(Debug, Default)]
pub struct Pressure {
    calls: u64,
    full: u64,
    kernel_dropped: Option<u64>,
}

impl Pressure {
    /// Starts from the counters as they are now.
    pub fn new(stats: &IngestStats) -> Self {
        let mut p = Pressure::default();
        p.under_pressure(stats);
        p
    }

    /// Whether ingest was under pressure since the last look.
    pub fn under_pressure(&mut self, stats: &IngestStats) -> bool {
        let calls = stats.recv_calls.load(Ordering::Relaxed);
        let full = stats.recv_full.load(Ordering::Relaxed);
        let dropped = stats.kernel_dropped();
        let (d_calls, d_full) = (calls - self.calls, full - self.full);
        let drops = matches!((self.kernel_dropped, dropped), (Some(a), Some(b)) if b > a);
        (self.calls, self.full, self.kernel_dropped) = (calls, full, dropped);
        drops || (d_calls >= MIN_CALLS && d_full * 1024 >= d_calls * FULL_SHARE_1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_batches_are_pressure_and_few_calls_say_nothing() {
        let stats = IngestStats::default();
        let mut p = Pressure::new(&stats);
        assert!(!p.under_pressure(&stats), "nothing happened");
        stats.recv_calls.fetch_add(100, Ordering::Relaxed);
        stats.recv_full.fetch_add(49, Ordering::Relaxed);
        assert!(!p.under_pressure(&stats), "49 of 100 full");
        stats.recv_calls.fetch_add(100, Ordering::Relaxed);
        stats.recv_full.fetch_add(50, Ordering::Relaxed);
        assert!(p.under_pressure(&stats), "50 of 100 full");
        stats.recv_calls.fetch_add(10, Ordering::Relaxed);
        stats.recv_full.fetch_add(10, Ordering::Relaxed);
        assert!(!p.under_pressure(&stats), "10 calls are too few to tell");
    }
}
