//! A bounded on-disk FIFO of writes a store could not make: the ClickHouse store keeps one per
//! shard, appends a table insert that failed (or that would overtake older spooled ones), and
//! replays them oldest first once the shard answers again, so an outage is lag, not loss.
//!
//! Each entry is one file `<seq>-<rows>.spool` written to a temporary name, synced and renamed
//! before [`Spool::push`] returns: the writer acknowledges a flush only once its rows are in
//! ClickHouse or here, so a kill -9 during an outage loses at most the flush in hand. On open
//! the directory's entries are taken up again in sequence order (temporary leftovers of a
//! killed write are deleted).
//!
//! The bound is on bytes ([`Spool::max_bytes`]): an entry that would pass it first evicts the
//! oldest entries (the newest rows are worth more: versioned rows supersede older versions),
//! and every row evicted or unreadable is counted by reason ([`SpoolStats`]), never lost
//! silently.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::lock;

/// One spooled entry as the queue remembers it (its content stays on disk).
#[derive(Debug, Clone)]
struct Entry {
    seq: u64,
    rows: u64,
    bytes: u64,
    created: SystemTime,
}

#[derive(Debug, Default)]
struct Queue {
    entries: VecDeque<Entry>,
    bytes: u64,
    next_seq: u64,
}

/// A spool's counters and gauges (summed over shards for `/api/stats` and `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpoolStats {
    /// Entries waiting (gauge).
    pub entries: u64,
    /// Rows waiting (gauge).
    pub rows: u64,
    /// Bytes on disk (gauge).
    pub bytes: u64,
    /// Age of the oldest entry, milliseconds (gauge; 0 when empty).
    pub oldest_age_ms: u64,
    /// Rows spooled since start (counter).
    pub spooled_rows: u64,
    /// Rows replayed into the store from the spool since start (counter).
    pub replayed_rows: u64,
    /// Rows evicted to keep the spool within its bound (counter).
    pub dropped_full_rows: u64,
    /// Rows of entries that could not be written to or read back from disk (counter).
    pub dropped_io_rows: u64,
}

impl SpoolStats {
    /// Adds these to `out` (`/metrics`, `/api/stats` under `store.spool`).
    pub fn sample(&self, out: &mut intscope_core::counters::Samples) {
        use intscope_core::counters as c;
        out.add(&c::STORE_SPOOL_ROWS, &[], self.rows);
        out.add(&c::STORE_SPOOL_BYTES, &[], self.bytes);
        out.add(&c::STORE_SPOOL_AGE, &[], self.oldest_age_ms);
        out.add(&c::STORE_SPOOLED, &[], self.spooled_rows);
        out.add(&c::STORE_SPOOL_REPLAYED, &[], self.replayed_rows);
        out.add(&c::STORE_SPOOL_DROPPED, &["full"], self.dropped_full_rows);
        out.add(&c::STORE_SPOOL_DROPPED, &["io"], self.dropped_io_rows);
    }

    /// Adds `o` to these (gauges and counters alike: the sum over shards).
    pub fn add(&mut self, o: &SpoolStats) {
        self.entries += o.entries;
        self.rows += o.rows;
        self.bytes += o.bytes;
        self.oldest_age_ms = self.oldest_age_ms.max(o.oldest_age_ms);
        self.spooled_rows += o.spooled_rows;
        self.replayed_rows += o.replayed_rows;
        self.dropped_full_rows += o.dropped_full_rows;
        self.dropped_io_rows += o.dropped_io_rows;
    }
}

/// A bounded FIFO of byte blobs on disk (see the module's documentation).
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    queue: Mutex<Queue>,
    counters: Mutex<SpoolStats>,
}

const EXT: &str = "spool";

impl Spool {
    /// Opens (creating) the spool in `dir`, taking up the entries a previous run left there.
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let mut entries = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                // A write a kill interrupted: never acknowledged, so never counted as stored.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Some(stem) = name.strip_suffix(&format!(".{EXT}")) else {
                continue;
            };
            let Some((seq, rows)) = stem.split_once('-') else {
                continue;
            };
            let (Ok(seq), Ok(rows)) = (seq.parse::<u64>(), rows.parse::<u64>()) else {
                continue;
            };
            let meta = e.metadata()?;
            entries.push(Entry {
                seq,
                rows,
                bytes: meta.len(),
                created: meta.modified().unwrap_or_else(|_| SystemTime::now()),
            });
        }
        entries.sort_by_key(|e| e.seq);
        let queue = Queue {
            bytes: entries.iter().map(|e| e.bytes).sum(),
            next_seq: entries.last().map_or(0, |e| e.seq + 1),
            entries: entries.into(),
        };
        Ok(Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            queue: Mutex::new(queue),
            counters: Mutex::new(SpoolStats::default()),
        })
    }

    /// The spool's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound on the bytes the spool holds on disk.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        lock(&self.queue).entries.is_empty()
    }

    fn path(&self, seq: u64, rows: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}-{rows}.{EXT}"))
    }

    /// Appends an entry of `rows` rows, on disk and synced before this returns; evicts the
    /// oldest entries first if it would pass the bound. An entry larger than the whole bound,
    /// or one the disk refuses, is dropped and counted (the error says why).
    pub fn push(&self, rows: u64, data: &[u8]) -> std::io::Result<()> {
        let len = data.len() as u64;
        if len > self.max_bytes {
            lock(&self.counters).dropped_full_rows += rows;
            return Err(std::io::Error::other(format!(
                "an entry of {len} bytes is larger than the spool's bound of {} bytes",
                self.max_bytes
            )));
        }
        let mut q = lock(&self.queue);
        while q.bytes + len > self.max_bytes {
            let Some(old) = q.entries.pop_front() else {
                break;
            };
            q.bytes -= old.bytes;
            let _ = std::fs::remove_file(self.path(old.seq, old.rows));
            lock(&self.counters).dropped_full_rows += old.rows;
        }
        let seq = q.next_seq;
        let path = self.path(seq, rows);
        let tmp = path.with_extension("tmp");
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(data)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            // The rename itself is durable once the directory is synced.
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&path);
            lock(&self.counters).dropped_io_rows += rows;
            return Err(e);
        }
        q.next_seq += 1;
        q.bytes += len;
        q.entries.push_back(Entry {
            seq,
            rows,
            bytes: len,
            created: SystemTime::now(),
        });
        lock(&self.counters).spooled_rows += rows;
        Ok(())
    }

    /// The oldest entry: its sequence number (for [`Spool::pop`]) and content. An entry that
    /// cannot be read is dropped, counted, and the next one returned.
    pub fn head(&self) -> Option<(u64, Vec<u8>)> {
        loop {
            let e = lock(&self.queue).entries.front().cloned()?;
            match std::fs::read(self.path(e.seq, e.rows)) {
                Ok(data) => return Some((e.seq, data)),
                Err(err) => {
                    tracing::error!(
                        "spool {}: entry {} unreadable, {} rows dropped: {err}",
                        self.dir.display(),
                        e.seq,
                        e.rows
                    );
                    self.remove(e.seq, false);
                    lock(&self.counters).dropped_io_rows += e.rows;
                }
            }
        }
    }

    /// Removes the entry `seq` once its rows are stored (a no-op if it was evicted meanwhile).
    pub fn pop(&self, seq: u64) {
        self.remove(seq, true);
    }

    /// Drops the entry `seq` whose content cannot be used (counted as an I/O drop).
    pub fn discard(&self, seq: u64) {
        if let Some(rows) = self.remove(seq, false) {
            lock(&self.counters).dropped_io_rows += rows;
        }
    }

    fn remove(&self, seq: u64, replayed: bool) -> Option<u64> {
        let mut q = lock(&self.queue);
        let at = q.entries.iter().position(|e| e.seq == seq)?;
        let e = q.entries.remove(at)?;
        q.bytes -= e.bytes;
        drop(q);
        let _ = std::fs::remove_file(self.path(e.seq, e.rows));
        if replayed {
            lock(&self.counters).replayed_rows += e.rows;
        }
        Some(e.rows)
    }

    /// The spool's gauges and counters now.
    pub fn stats(&self) -> SpoolStats {
        let q = lock(&self.queue);
        let mut s = *lock(&self.counters);
        s.entries = q.entries.len() as u64;
        s.rows = q.entries.iter().map(|e| e.rows).sum();
        s.bytes = q.bytes;
        s.oldest_age_ms = q.entries.front().map_or(0, |e| {
            e.created
                .elapsed()
                .unwrap_or(Duration::ZERO)
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX)
        });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("intscope-spool-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn entries_come_back_in_order_across_a_reopen() {
        let d = dir("order");
        let s = Spool::open(&d, 1 << 20).unwrap();
        s.push(1, b"a").unwrap();
        s.push(2, b"bb").unwrap();
        // A write killed before its rename is not an entry.
        std::fs::write(d.join("00000000000000000009-5.tmp"), b"x").unwrap();
        drop(s);
        let s = Spool::open(&d, 1 << 20).unwrap();
        let (seq, data) = s.head().unwrap();
        assert_eq!(data, b"a");
        s.pop(seq);
        s.push(3, b"ccc").unwrap();
        let (seq, data) = s.head().unwrap();
        assert_eq!(data, b"bb");
        s.pop(seq);
        assert_eq!(s.head().unwrap().1, b"ccc");
        let st = s.stats();
        assert_eq!((st.entries, st.rows, st.bytes), (1, 3, 3));
        assert!(!d.join("00000000000000000009-5.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_bound_evicts_the_oldest_and_counts_their_rows() {
        let d = dir("bound");
        let s = Spool::open(&d, 10).unwrap();
        s.push(4, b"aaaa").unwrap();
        s.push(5, b"bbbb").unwrap();
        s.push(6, b"cccc").unwrap();
        let st = s.stats();
        assert_eq!(st.dropped_full_rows, 4);
        assert_eq!((st.entries, st.bytes), (2, 8));
        assert_eq!(s.head().unwrap().1, b"bbbb");
        assert!(s.push(7, &[0; 11]).is_err());
        assert_eq!(s.stats().dropped_full_rows, 11);
        let _ = std::fs::remove_dir_all(&d);
    }
}
