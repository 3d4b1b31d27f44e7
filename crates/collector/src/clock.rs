//! The collector's clock: receive times, storage times and retention go by it, while the
//! correlation (in `intscope-core`, which reads no clock) goes by the times it is handed. A
//! module of its own below the ingest and the store, which both read it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in ns since the epoch (0 on a clock set before 1970).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
