//! The store's writer thread (encoding rows, SQLite's B-trees, ClickHouse's inserts) runs at a
//! lower CPU priority than the receive threads, so on a busy machine the kernel gives the CPU
//! to ingest first. A writer that gets less CPU falls behind, and then the flushes stretch (each
//! covers a longer interval, in as many rows as one): history grows coarser for a while, while
//! no report is dropped for it. The flusher keeps ingest's priority: it copies rows under the
//! flow shards' locks, which a descheduled low-priority holder would keep the receive threads
//! waiting on.
//!
//! Linux gives each thread its own nice value (`setpriority(PRIO_PROCESS, tid)`, see
//! setpriority(2), "Bugs": the nice value is a per-thread attribute); elsewhere this does
//! nothing.

/// Raises the calling thread's nice value by `by` (at most to 19; 0 leaves it as it is): a
/// step relative to the process's own, so a collector started under `nice` keeps the store
/// below its ingest. Returns whether it took (raising a nice value needs no privilege); a
/// failure is logged and otherwise harmless.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn lower_this_thread(by: u8) -> bool {
    if by == 0 {
        return true;
    }
    // SAFETY: gettid and getpriority have no preconditions; errno is this thread's, cleared
    // first because -1 is also a valid nice value; setpriority on our own thread id changes
    // only this thread's scheduling weight and reports failure through its return value.
    let done = unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        let now = if now == -1 && *libc::__errno_location() != 0 {
            0
        } else {
            now
        };
        libc::setpriority(libc::PRIO_PROCESS, tid, (now + i32::from(by)).min(19)) == 0
    };
    if !done {
        tracing::warn!(
            "store: could not lower a store thread's CPU priority: {}",
            std::io::Error::last_os_error()
        );
    }
    done
}

/// Raises the calling thread's nice value: not on this system.
#[cfg(not(target_os = "linux"))]
pub fn lower_this_thread(_by: u8) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The nice value of this thread, from `/proc/thread-self/stat` (field 19).
    fn nice_of_this_thread() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // The command name is in parentheses and may hold spaces: fields count after it.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    fn only_the_calling_thread_is_lowered() {
        let before = nice_of_this_thread();
        let lowered = std::thread::spawn(|| {
            assert!(super::lower_this_thread(7));
            nice_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (before + 7).min(19));
        assert_eq!(
            nice_of_this_thread(),
            before,
            "the caller's thread is untouched"
        );
        assert!(super::lower_this_thread(0), "0 leaves the thread as it is");
        assert_eq!(nice_of_this_thread(), before);
    }
}
