//! Helpers shared by the binary's end-to-end tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `intscope` binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_intscope"))
}

/// A path inside the repository.
pub fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .display()
        .to_string()
}

/// Runs `cmd` to completion; fails the test with its stderr unless it succeeded.
pub fn succeed(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
