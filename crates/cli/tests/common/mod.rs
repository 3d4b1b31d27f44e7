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

/// tshark's protocol stack and expert messages per frame of `pcap`, with IP/UDP/TCP checksums
/// checked, `udp.port==17768` read as data (the INT port: tshark has no INT dissector) and
/// `extra` decode-as rules. `None` when tshark is missing outside CI (in CI it is required).
pub fn tshark_frames(pcap: &std::path::Path, extra: &[&str]) -> Option<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args([
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
    ])
    .args([
        "-o",
        "tcp.check_checksum:TRUE",
        "-d",
        "udp.port==17768,data",
    ]);
    for rule in extra {
        cmd.args(["-d", rule]);
    }
    cmd.arg("-r").arg(pcap).args([
        "-T",
        "fields",
        "-e",
        "frame.protocols",
        "-e",
        "_ws.expert.message",
        "-e",
        "_ws.malformed",
    ]);
    let Ok(out) = cmd.output() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tshark is required in CI (.ci/run installs it)"
        );
        eprintln!("tshark not installed: skipped outside CI");
        return None;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    for l in &lines {
        let lower = l.to_lowercase();
        assert!(
            !lower.contains("malformed")
                && !lower.contains("bad checksum")
                && !lower.contains("incorrect"),
            "{}: {l}",
            pcap.display()
        );
    }
    Some(lines)
}
