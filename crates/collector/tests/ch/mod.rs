//! A real ClickHouse for tests: one server or a cluster on free loopback ports, started with
//! `scripts/clickhouse.sh` in a temporary directory and stopped when dropped. No ClickHouse
//! installed is a failure, not a skip (`.ci/run` installs it).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

use intscope_collector::store::ClickHouseConfig;

/// Running servers (stopped on drop).
pub struct ClickHouse {
    /// The servers' files, removed after [`Drop`] has stopped the servers (`common::tempdir`:
    /// the collector's and the binary's tests that include this module both have one).
    dir: tempfile::TempDir,
    /// HTTP port of the first server (the others follow).
    pub port: u16,
    /// Shards.
    pub shards: usize,
    /// Replicas of each shard (servers: `shards * replicas`, shard by shard).
    pub replicas: usize,
    /// The `--store clickhouse:` value (`|` between a shard's replicas).
    spec: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/clickhouse.sh")
}

/// Whether every port a cluster of `servers` at `base` uses is free now (ZooKeeper's too).
fn free(base: u16, servers: usize) -> bool {
    TcpListener::bind(("127.0.0.1", base + 300)).is_ok()
        && (0..servers as u16).all(|i| {
            [base + i, base + 100 + i, base + 200 + i]
                .iter()
                .all(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        })
}

impl ClickHouse {
    /// Starts `shards` servers (a cluster named `intscope` when more than one).
    pub fn start(shards: usize) -> ClickHouse {
        Self::start_replicated(shards, 1)
    }

    /// Starts `shards` × `replicas` servers, and ZooKeeper when `replicas` > 1.
    pub fn start_replicated(shards: usize, replicas: usize) -> ClickHouse {
        assert!(
            Command::new("sh")
                .args([
                    "-c",
                    "command -v clickhouse-server || test -x /usr/sbin/clickhouse-server"
                ])
                .output()
                .is_ok_and(|o| o.status.success()),
            "clickhouse-server is not installed (apt-get install -y clickhouse-server clickhouse-client; .ci/run does)"
        );
        // Ports from the process ID and a counter, checked free (another test or process may
        // race for them: the script then fails to start and the next base is tried).
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        for _ in 0..20 {
            let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let base = 20_000 + ((std::process::id() as u16 % 400) * 50 + k * 5) % 30_000;
            if !free(base, shards * replicas) {
                continue;
            }
            let dir = crate::common::tempdir(&format!("ch-{base}"));
            let out = Command::new("bash")
                .arg(script())
                .arg("start")
                .arg(dir.path())
                .args(["--shards", &shards.to_string(), "--port", &base.to_string()])
                .args(["--replicas", &replicas.to_string()])
                .output()
                .expect("running scripts/clickhouse.sh");
            let ch = ClickHouse {
                dir,
                port: base,
                shards,
                replicas,
                spec: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            };
            if out.status.success() {
                return ch;
            }
            eprintln!(
                "clickhouse at {base} did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        panic!("could not start clickhouse-server on any free port");
    }

    /// The `--store clickhouse:` value.
    pub fn urls(&self) -> String {
        self.spec.clone()
    }

    /// Kills server `k` (shard `k / replicas`, replica `k % replicas`) with SIGKILL.
    pub fn kill(&self, k: usize) {
        self.script(&["kill", &self.dir.path().to_string_lossy(), &k.to_string()]);
    }

    /// Starts server `k` again, returning once it answers.
    pub fn revive(&self, k: usize) {
        self.script(&["revive", &self.dir.path().to_string_lossy(), &k.to_string()]);
    }

    fn script(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(script())
            .args(args)
            .output()
            .expect("running scripts/clickhouse.sh");
        assert!(
            out.status.success(),
            "clickhouse.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `sql` on server `k` over HTTP, returning its answer's text.
    pub fn query(&self, k: usize, sql: &str) -> String {
        let out = Command::new("curl")
            .args([
                "-sS",
                &format!("http://127.0.0.1:{}/", self.port + k as u16),
            ])
            .args(["--data-binary", sql])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A store configuration on database `db`, writing as collector `source`, its spool in the
    /// servers' folder (not the default `intscope-spool` in the system's temporary directory).
    pub fn config(&self, db: &str, source: &str) -> ClickHouseConfig {
        let mut c = ClickHouseConfig::parse(&self.urls(), None, source).unwrap();
        c.database = db.into();
        c.spool_dir = Some(self.dir.path().join("spool"));
        c
    }
}

impl Drop for ClickHouse {
    /// Kills the servers at once: their data is deleted next, a clean shutdown would only cost
    /// time (seconds per replicated server).
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(self.dir.path())
            .arg("--now")
            .output();
    }
}
