//! No detector takes a lock (issue 30): the detectors write into their shard's outbox
//! (`event::Raiser`) and read what other shards learned through plain references; only
//! `state.rs`, which owns the shards, the event log and the report-loss history, names a lock.
//! A detector that locked would serialize the receive threads at an arbitrary point of a batch.

use std::path::Path;

/// The lock types and calls a source file could use.
const LOCK_WORDS: &[&str] = &[
    "Mutex", "RwLock", ".lock()", ".read()", ".write()", "Condvar",
];

/// `text` without its comments (`//` to the end of a line), which may speak of locks, and
/// without its unit tests (which drive the state as a reader does).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn only_the_state_names_a_lock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut read = 0;
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") {
            continue;
        }
        read += 1;
        if name == "state.rs" {
            continue;
        }
        let text = code(&std::fs::read_to_string(&path).unwrap());
        for word in LOCK_WORDS {
            if text.contains(word) {
                bad.push(format!("{name}: {word}"));
            }
        }
    }
    assert!(read >= 20, "core's sources read ({read})");
    assert!(bad.is_empty(), "locks outside the state: {bad:?}");
}

#[test]
fn comments_are_not_code() {
    assert_eq!(code("let a = 1; // a Mutex\n// RwLock"), "let a = 1; \n");
    assert!(code("m.lock().unwrap()").contains(".lock()"));
    assert_eq!(code("a\n#[cfg(test)]\nmod tests {\n m.lock()\n}"), "a");
}
