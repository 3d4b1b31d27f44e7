//! `intscope lab` end to end: the built-in lab (2 leaves, 2 spines, 4 hosts; a slow port at 2–5
//! s, a link down at 7–10 s, a routing miss at 12–14.5 s) for 16 s of traffic, without INT, in
//! INT-XD and in INT-MD. Checked from each run's ground truth and score: every fault raised at
//! one of its places within 1 s of its start, no incident that no fault explains (place and
//! window), and the TCP elephant's goodput over its fault-free seconds within 10 % of the same
//! lab's without INT. Before them a lab is killed with SIGKILL: the next one removes what it
//! left (namespaces, its agent).
//!
//! Needs root, iproute2 and an intscope built with its BPF programs. Without them the test says
//! what is missing and returns, unless `INTSCOPE_AGENT_REQUIRE_BPF` is set (CI sets it), when it
//! fails. Bad input is checked everywhere.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, tempdir};

fn missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("root (network namespaces, BPF)".into());
    }
    common::missing_tool(&["ip", "tc"])
}

fn skip(what: &str) {
    if std::env::var_os("INTSCOPE_AGENT_REQUIRE_BPF").is_some() {
        panic!("INTSCOPE_AGENT_REQUIRE_BPF is set and this test cannot run: {what}");
    }
    eprintln!("skipped: {what}");
}

/// Namespaces of lab process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let prefix = format!("il{pid}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// Processes whose command line names lab `pid`'s namespaces (its agents).
fn processes_of(pid: u32) -> Vec<u32> {
    let needle = format!("il{pid}-");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

/// Runs a lab to its end; its ground truth (with the score), or the error it said.
fn lab(mode: &str, dir: &Path) -> Result<serde_json::Value, String> {
    let truth = dir.join(format!("{mode}.json"));
    let started = Instant::now();
    let out = bin()
        .args([
            "lab",
            "--mode",
            mode,
            "--duration",
            "16",
            "--http",
            "127.0.0.1:0",
        ])
        .arg("--truth")
        .arg(&truth)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!(
        "lab {mode}: {:.1} s\n{said}",
        started.elapsed().as_secs_f64()
    );
    if !out.status.success() {
        return Err(said);
    }
    let text = std::fs::read_to_string(&truth).unwrap();
    Ok(serde_json::from_str(&text).unwrap())
}

/// The TCP elephant's (10.0.1.1 -> 10.0.2.1) goodput over its fault-free seconds, bit/s.
fn elephant(truth: &serde_json::Value) -> f64 {
    let f = truth["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["flow"]["src"] == "10.0.1.1" && f["flow"]["dst"] == "10.0.2.1")
        .expect("the elephant");
    assert_eq!(f["flow"]["proto"], 6);
    f["clean_goodput_bps"].as_f64().expect("fault-free seconds")
}

fn check_score(mode: &str, truth: &serde_json::Value) {
    let score = &truth["score"];
    let at = |i: &serde_json::Value| {
        format!(
            "{} {} at {} +{:.3} s",
            i["kind"],
            i["cause"],
            i["place"],
            (i["start_ns"].as_u64().unwrap() as f64 - truth["started_ns"].as_u64().unwrap() as f64)
                / 1e9
        )
    };
    let all: Vec<String> = truth["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(at)
        .collect();
    let faults = score["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 3, "{score}");
    for f in faults {
        assert!(
            f["in_time"] == true,
            "{mode}: {} not raised at its place within 1 s: {f}\nincidents: {all:#?}",
            f["what"]
        );
        assert!(f["delay_s"].as_f64().unwrap() <= 1.0);
    }
    let false_ones: Vec<String> = score["false_incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(at)
        .collect();
    assert!(
        false_ones.is_empty(),
        "{mode}: incidents no fault explains: {false_ones:#?}\nall: {all:#?}"
    );
}

#[test]
fn a_lab_raises_its_faults_where_and_when_they_happen() {
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let tmp = tempdir("lab-test");
    let dir = tmp.path();

    // A lab killed with SIGKILL once its agent runs: its namespaces and agent stay behind.
    let mut killed = bin()
        .args([
            "lab",
            "--mode",
            "xd",
            "--duration",
            "30",
            "--http",
            "127.0.0.1:0",
        ])
        .arg("--truth")
        .arg(dir.join("killed.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = killed.id();
    let mut stderr = BufReader::new(killed.stderr.take().unwrap());
    let mut said = String::new();
    let ready = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            break false;
        }
        said.push_str(&line);
        if line.contains(" start ") {
            break true;
        }
    };
    if !ready {
        let _ = killed.wait();
        if said.contains("built without its BPF programs") || said.contains("did not attach") {
            skip(&format!("the agent cannot run here: {said}"));
            return;
        }
        panic!("the lab to be killed ended: {said}");
    }
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    let _ = killed.wait();
    assert!(
        !namespaces_of(pid).is_empty(),
        "a killed lab cannot remove its namespaces"
    );

    // The baseline removes them, and the agent is gone.
    let none = lab("none", dir).expect("the lab without INT");
    assert!(
        namespaces_of(pid).is_empty(),
        "left by the killed lab: {:?}",
        namespaces_of(pid)
    );
    let until = Instant::now() + Duration::from_secs(5);
    while !processes_of(pid).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        processes_of(pid),
        Vec::<u32>::new(),
        "the killed lab's agent"
    );
    for left in [
        format!("intscope-lab-{pid}"),
        format!("intscope-lab-{pid}-agents"),
    ] {
        let path = std::env::temp_dir().join(left);
        assert!(!path.exists(), "the killed lab's {}", path.display());
    }
    assert_eq!(
        none["incidents"].as_array().map(Vec::len),
        Some(0),
        "no INT, no reports"
    );
    let base = elephant(&none);
    assert!(base > 90e6, "the paced 100 Mb/s elephant: {base}");

    for mode in ["xd", "md"] {
        let truth = lab(mode, dir).unwrap_or_else(|e| panic!("lab {mode}: {e}"));
        check_score(mode, &truth);
        let g = elephant(&truth);
        assert!(
            (g - base).abs() <= 0.1 * base,
            "{mode}: the elephant's goodput {g:.0} bit/s, without INT {base:.0}"
        );
        let lab_pid = truth["nodes"][0]["namespace"]
            .as_str()
            .and_then(|n| n.strip_prefix("il")?.split_once('-')?.0.parse::<u32>().ok())
            .expect("the lab's namespaces");
        assert_eq!(
            namespaces_of(lab_pid),
            Vec::<String>::new(),
            "{mode}: left behind"
        );
        assert_eq!(
            processes_of(lab_pid),
            Vec::<u32>::new(),
            "{mode}: agents left"
        );
    }
}

#[test]
fn a_lab_with_bad_input_says_why() {
    let tmp = tempdir("lab-bad");
    let dir = tmp.path();
    let run = |toml: &str, extra: &[&str]| {
        let path = dir.join("lab.toml");
        std::fs::write(&path, toml).unwrap();
        let out = bin()
            .arg("lab")
            .arg("--topology")
            .arg(&path)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(
        "[[fault]]\nkind = \"incast\"\nleaf = 1\nhost = 1\npackets = 5\nfrom_s = 1.0\nuntil_s = 2.0\n",
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("slow-port, link-down, routing-miss"), "{err}");
    let (code, err) = run(
        "[[fault]]\nkind = \"non-int-spine\"\nspine = 1\nfrom_s = 1.0\nuntil_s = 2.0\n",
        &["--mode", "xd"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs --mode md or mx"), "{err}");
    let (code, err) = run("[topology]\nleaves = 40\n", &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("1-16 leaves"), "{err}");
    let (code, err) = run(
        "[[fault]]\nkind = \"link-down\"\nleaf = 9\nspine = 1\nfrom_s = 1.0\nuntil_s = 2.0\n",
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a place of this fabric"), "{err}");
    let (code, err) = run(
        "[[lab.flow]]\nsrc = \"10.0.1.1\"\ndst = \"10.0.9.1\"\nproto = \"tcp\"\nmbps = 1.0\n",
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("hosts of the topology"), "{err}");
    let (code, err) = run("[lab]\nflows = 3\n", &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown field"), "{err}");
    let (code, err) = run("", &["--duration", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--duration"), "{err}");
    // A ground truth that is not one.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    let out = bin().args(["lab", "--score"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a lab's ground truth"));
}
