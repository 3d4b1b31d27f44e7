//! Helpers shared by the binary's end-to-end tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a test waits for a child process to start serving, answer or exit.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// The `intscope` binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_intscope"))
}

/// The first of `tools` not on PATH, if any (what a test needs and the machine lacks).
pub fn missing_tool(tools: &[&str]) -> Option<String> {
    tools
        .iter()
        .find(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|tool| tool.to_string())
}

/// A path inside the repository.
pub fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .display()
        .to_string()
}

/// The `dump` options under which every frame of `examples/sample.pcap` decodes as the tests
/// expect (its INT rides UDP port 17768 and GRE protocol 0x4569).
pub const DUMP_SAMPLE_JSON: [&str; 7] = [
    "dump",
    "--format",
    "json",
    "--int-udp-port",
    "17768",
    "--int-gre-proto",
    "0x4569",
];

/// The interop corpus, `$INTSCOPE_SHARED/interop` (else `../shared/interop` beside the checkout;
/// read in place, never copied into the repo), or `None` when it is absent: the corpus belongs to
/// other projects, so a plain clone cannot have it. `test` then says on stderr that it is skipped
/// and why — written past the test harness's capture, so `cargo test` shows it — unless
/// `INTSCOPE_REQUIRE_INTEROP=1` (CI, which always has the corpus), where the absence fails.
pub fn interop_dir(test: &str) -> Option<PathBuf> {
    use std::io::Write;
    let base = std::env::var_os("INTSCOPE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let dir = base.join("interop");
    if dir.join("INDEX.md").exists() {
        return Some(dir);
    }
    let why = format!(
        "interop corpus not found at {} (INTSCOPE_SHARED names the folder holding interop/)",
        dir.display()
    );
    assert!(
        std::env::var_os("INTSCOPE_REQUIRE_INTEROP").is_none_or(|v| v.is_empty() || v == "0"),
        "{why}; INTSCOPE_REQUIRE_INTEROP is set, so this is a failure"
    );
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
    None
}

/// A file of the interop corpus (`None`, the test skipped, as [`interop_dir`] says); fails the
/// test when the corpus is there but the file is not, so a moved file is noticed.
pub fn interop_file(test: &str, name: &str) -> Option<PathBuf> {
    let file = interop_dir(test)?.join(name);
    assert!(
        file.exists(),
        "{} not in the interop corpus",
        file.display()
    );
    Some(file)
}

/// A small xorshift generator: the tests' bytes only need to be arbitrary, and a fixed seed
/// makes a failing run repeatable.
pub struct Rng(pub u64);

impl Rng {
    /// The next value of the sequence.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Fills `buf` with the next values' low bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

/// Writes `frames` as an Ethernet pcap, a millisecond apart.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let mut w = PcapWriter::with_header(
        std::fs::File::create(path).unwrap(),
        PcapHeader {
            datalink: pcap_file::DataLink::ETHERNET,
            ..PcapHeader::default()
        },
    )
    .unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(1_700_000_000_000 + i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
}

/// `n` host packets from 10.0.1.1 to 10.0.3.1–4, UDP and TCP in turn: the traffic the example
/// nodes (examples/node-*.toml) watch and add INT to.
pub fn host_traffic(n: u16) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let b = etherparse::PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
                .ipv4([10, 0, 1, 1], [10, 0, 3, (i % 4) as u8 + 1], 64);
            let mut f = Vec::new();
            if i % 2 == 0 {
                b.udp(40000 + i, 5001).write(&mut f, b"over udp").unwrap();
            } else {
                b.tcp(40000 + i, 443, 1, 1024)
                    .ack(1)
                    .write(&mut f, b"over tcp")
                    .unwrap();
            }
            f
        })
        .collect()
}

/// The line `intscope collect` prints on stdout once it listens (its UDP and API addresses), read
/// from `child`'s piped stdout: tests wait for it before they send or ask anything.
pub fn startup_line(child: &mut std::process::Child) -> serde_json::Value {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("stdout is piped"))
        .read_line(&mut line)
        .unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// Starts `cmd` (an intscope command that prints its startup line: `collect`, `serve`) with its
/// stdout piped and its stderr discarded, and waits for that line: the child and the line.
pub fn spawn_started(cmd: &mut Command) -> (Child, serde_json::Value) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = startup_line(&mut child);
    (child, line)
}

/// Polls the collector's statistics (`stats`) until `sent` datagrams are accounted for —
/// received, or dropped and counted by the kernel — or `within` has passed, and fails the test
/// unless every one is; returns the statistics then.
pub fn wait_until_accounted(
    sent: u64,
    within: Duration,
    poll: Duration,
    mut stats: impl FnMut() -> serde_json::Value,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let s = stats();
        let got = s["ingest"]["datagrams_received"].as_u64().unwrap()
            + s["ingest"]["kernel_dropped"].as_u64().unwrap_or(0);
        if got >= sent || Instant::now() > deadline {
            assert_eq!(got, sent, "{s}");
            return s;
        }
        std::thread::sleep(poll);
    }
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

/// The exit status of `child`; `None` (the child killed) once `within` has passed.
pub fn exit_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What `intscope collect --replay FILE` (with `extra` arguments) served and said: its
/// `/api/stats` while it served, and its stderr once it stopped on SIGTERM (which it must, with
/// exit status 0).
pub fn replay_served(file: &Path, extra: &[&str]) -> (serde_json::Value, String) {
    let mut child = bin()
        .args(["collect", "--no-store", "--http", "127.0.0.1:0", "--replay"])
        .arg(file)
        .args(["--int-udp-port", "17768"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let (etx, erx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr_pipe.read_to_string(&mut err);
        let _ = etx.send(err);
    });
    let line = match rx.recv_timeout(DEADLINE) {
        Ok(l) if !l.is_empty() => l,
        got => {
            let _ = child.kill();
            let _ = child.wait();
            let err = erx.recv_timeout(DEADLINE).unwrap_or_default();
            panic!("collect did not start serving ({got:?}): {err}");
        }
    };
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let http = v["http"].as_str().unwrap().to_string();
    let stats = Command::new("curl")
        .args([
            "-sf",
            "--max-time",
            "10",
            &format!("http://{http}/api/stats"),
        ])
        .output()
        .expect("curl");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = exit_within(&mut child, DEADLINE).expect("collect did not stop on SIGTERM");
    let stderr = erx.recv_timeout(DEADLINE).expect("stderr closes at exit");
    assert!(status.success(), "{stderr}");
    assert!(stats.status.success(), "GET /api/stats: {stderr}");
    (serde_json::from_slice(&stats.stdout).unwrap(), stderr)
}

/// A folder of this test's own in the system's temporary directory, named `intscope-<what>-…`
/// (unique per call, so tests running side by side never share one). Removed when the returned
/// `TempDir` is dropped — when the test ends, passed or failed (a panic unwinds through it) — so
/// keep it bound to a variable (not `_`) while anything, a child process included, uses the
/// folder.
pub fn tempdir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("intscope-{what}-"))
        .tempdir()
        .unwrap()
}

/// A path, `name`, in a folder of its own (`intscope-<test binary>-…`, [`tempdir`]): the folder,
/// with whatever the test put at the path (a file or a directory), is removed when the `Temp` is
/// dropped.
pub struct Temp(pub PathBuf, tempfile::TempDir);

impl Temp {
    pub fn path(name: &str) -> Temp {
        let dir = tempdir(env!("CARGO_CRATE_NAME"));
        Temp(dir.path().join(name), dir)
    }
}

/// The path: a `&Temp` is taken where a `&Path` is.
impl std::ops::Deref for Temp {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}
