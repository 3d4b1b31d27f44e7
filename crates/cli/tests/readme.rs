//! The README, as a newcomer runs it: every ```sh block, in order, each command in a scratch
//! folder holding the repository's sample inputs (`examples/`, `wireshark/`, `scripts/`), with the
//! binary under test on PATH as `intscope` (what `cargo install --path crates/cli` gives) and a
//! HOME of its own (`intscope wireshark install` writes there). Every command must exit 0.
//!
//! Commands that run until Ctrl-C (`collect`, `serve`, `demo`) are started, waited for until
//! they say they serve, left running for the rest of their block (later lines talk to them), then
//! sent SIGINT, as a newcomer's Ctrl-C, and must then exit 0 too. A few lines are not run, each
//! for the reason [`not_run`] gives (root, or the suite itself). Lines needing a tool the machine
//! lacks (tshark, ClickHouse, curl) are skipped with a note outside CI and fail in CI, which
//! installs them all.
//!
//! Also here: `examples/host1.pcap`, the node chain's input, is what [`host1_frames`] generates
//! (`INTSCOPE_REGENERATE=1` rewrites it).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Temp, exit_within, host_traffic, repo, tempdir, write_pcap};

/// The node chain's sample input: host traffic the example source node watches (10.0.1.1 to
/// 10.0.3.1–4, UDP and TCP) and one frame to another network it leaves alone.
fn host1_frames() -> Vec<Vec<u8>> {
    let mut frames = host_traffic(8);
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 1, 1], [192, 0, 2, 9], 64)
        .udp(40100, 53)
        .write(&mut f, b"not watched")
        .unwrap();
    frames.push(f);
    frames
}

/// The committed sample is the generator's output, byte for byte: deterministic, so it can be
/// regenerated and reviewed.
#[test]
fn examples_host1_pcap_is_generated() {
    let committed = PathBuf::from(repo("examples/host1.pcap"));
    let fresh = Temp::path("host1.pcap");
    write_pcap(&fresh, &host1_frames());
    let want = std::fs::read(&fresh.0).unwrap();
    drop(fresh);
    if std::env::var_os("INTSCOPE_REGENERATE").is_some() {
        std::fs::write(&committed, &want).unwrap();
    }
    let have = std::fs::read(&committed).unwrap_or_default();
    assert!(
        have == want,
        "examples/host1.pcap differs from host1_frames(): INTSCOPE_REGENERATE=1 cargo test -p \
         intscope --test readme rewrites it"
    );
}

/// Why a README line is not run here, or `None` to run it.
fn not_run(cmd: &str) -> Option<&'static str> {
    if cmd.starts_with("cargo test") {
        Some("the test suite itself")
    } else if cmd.starts_with("cargo install") {
        Some("a release build takes minutes: the binary under test is on PATH instead")
    } else if cmd.starts_with("sudo ") || cmd.contains("--features live") {
        Some("needs root and network interfaces: tests/live.rs and tests/agent.rs cover it")
    } else if cmd.starts_with("git clone") || cmd.starts_with("cd ") {
        Some("the scratch folder stands for the clone")
    } else {
        None
    }
}

/// The tool a line needs beyond `intscope`, when the machine may lack it.
fn needs(cmd: &str) -> Option<&'static str> {
    if cmd.contains("clickhouse") {
        Some("clickhouse")
    } else if cmd.starts_with("tshark") {
        Some("tshark")
    } else if cmd.starts_with("curl") {
        Some("curl")
    } else {
        None
    }
}

/// Whether `cmd` runs until Ctrl-C.
fn long_running(cmd: &str) -> bool {
    ["intscope collect", "intscope serve", "intscope demo"]
        .iter()
        .any(|p| cmd.starts_with(p))
}

fn have(tool: &str) -> bool {
    // Debian's clickhouse-server may live in /usr/sbin, off a user's PATH (scripts/clickhouse.sh).
    let probe = match tool {
        "clickhouse" => "command -v clickhouse-server || test -x /usr/sbin/clickhouse-server",
        "tshark" => "command -v tshark",
        _ => "command -v curl",
    };
    Command::new("sh")
        .args(["-c", probe])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The README's ```sh blocks, each as its command lines (`\` continuations joined, comments and
/// blank lines dropped).
fn sh_blocks(readme: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in readme.lines() {
        match &mut current {
            None if line.trim_start() == "```sh" => current = Some(Vec::new()),
            None => {}
            Some(_) if line.trim_start().starts_with("```") => {
                blocks.push(current.take().unwrap());
            }
            Some(lines) => {
                let l = line.trim();
                if let Some(head) = l.strip_suffix('\\') {
                    pending.push_str(head);
                    pending.push(' ');
                    continue;
                }
                pending.push_str(l);
                let cmd = std::mem::take(&mut pending);
                if !cmd.is_empty() && !cmd.starts_with('#') {
                    lines.push(cmd);
                }
            }
        }
    }
    blocks
}

/// A command left running for the rest of its block.
struct Background {
    cmd: String,
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Background {
    fn read(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default(),
        )
    }

    /// Ctrl-C: SIGINT, then a clean exit within the deadline.
    fn interrupt(mut self) {
        Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = exit_within(&mut self.child, Duration::from_secs(30));
        let (_, err) = self.read();
        assert!(
            status.is_some_and(|s| s.success()),
            "`{}` did not exit 0 on Ctrl-C ({status:?}): {err}",
            self.cmd
        );
    }
}

struct Scratch {
    /// The clone's stand-in, removed with the `Scratch`.
    dir: tempfile::TempDir,
    path: String,
    n: usize,
}

impl Scratch {
    fn sh(&self, cmd: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(cmd)
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env("HOME", self.dir.path().join("home"))
            .env_remove("INTSCOPE_LOG")
            .stdin(Stdio::null());
        c
    }

    fn files(&mut self) -> (PathBuf, PathBuf) {
        self.n += 1;
        let logs = self.dir.path().join("logs");
        (
            logs.join(format!("{}.out", self.n)),
            logs.join(format!("{}.err", self.n)),
        )
    }

    /// Runs `cmd` to completion (at most 2 minutes); fails the test unless it exits 0.
    fn run(&mut self, cmd: &str) {
        let (out, err) = self.files();
        let mut child = self
            .sh(cmd)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let status = exit_within(&mut child, Duration::from_secs(120));
        let stderr = std::fs::read_to_string(&err).unwrap_or_default();
        assert!(
            status.is_some_and(|s| s.success()),
            "`{cmd}` failed ({status:?}): {stderr}"
        );
        // tshark reports a Lua plugin that fails to load on stderr and still exits 0.
        assert!(!stderr.contains("Lua: Error"), "`{cmd}`: {stderr}");
    }

    /// Starts `cmd` and waits until it serves: the startup line `collect` and `serve` print on
    /// stdout, the demo's "collector API on" on stderr.
    fn start(&mut self, cmd: &str) -> Background {
        let (out, err) = self.files();
        let child = self
            .sh(&format!("exec {cmd}"))
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let mut b = Background {
            cmd: cmd.to_string(),
            child,
            out,
            err,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (o, e) = b.read();
            if o.contains('\n') || e.contains("collector API on") {
                return b;
            }
            if let Some(s) = b.child.try_wait().unwrap() {
                panic!("`{cmd}` exited ({s}) instead of serving: {e}");
            }
            if Instant::now() > deadline {
                let _ = b.child.kill();
                panic!("`{cmd}` did not start serving within 60 s: {e}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn readme_blocks_run_in_order() {
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    let blocks = sh_blocks(&readme);
    assert!(blocks.len() >= 5, "README ```sh blocks: {blocks:?}");
    let dir = tempdir("readme");
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    // The sample inputs, as a clone has them.
    for sub in ["examples", "wireshark", "scripts"] {
        std::os::unix::fs::symlink(repo(sub), dir.path().join(sub)).unwrap();
    }
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_intscope")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut s = Scratch { dir, path, n: 0 };
    let in_ci = std::env::var_os("CI").is_some();
    let mut stderr = std::io::stderr();
    for block in &blocks {
        let mut running = Vec::new();
        for line in block {
            // `cargo run --release --` runs the same binary: a debug build of it stands in.
            let cmd = line
                .strip_prefix("cargo run --release -- ")
                .map_or_else(|| line.clone(), |rest| format!("intscope {rest}"));
            if let Some(why) = not_run(&cmd) {
                let _ = writeln!(stderr, "readme: not run: {cmd}  ({why})");
                continue;
            }
            if let Some(tool) = needs(&cmd).filter(|t| !have(t)) {
                assert!(!in_ci, "`{cmd}` needs {tool}, which CI installs");
                let _ = writeln!(stderr, "readme: skipped: {cmd}  ({tool} not installed)");
                continue;
            }
            if long_running(&cmd) {
                running.push(s.start(&cmd));
            } else {
                s.run(&cmd);
            }
        }
        for b in running.into_iter().rev() {
            b.interrupt();
        }
    }
    // The `intscope` the blocks ran is the binary under test, not one installed elsewhere.
    let which = s.sh("command -v intscope").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&which.stdout).trim(),
        env!("CARGO_BIN_EXE_intscope")
    );
}
