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

/// One lab at a time: two would share the two cores and each other's timing.
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs a lab to its end (the built-in one, or `topology`); its ground truth (with the score),
/// or the error it said.
fn lab(mode: &str, dir: &Path, topology: Option<&str>) -> Result<serde_json::Value, String> {
    let name = topology.map_or("small", |t| t.trim_end_matches(".toml"));
    let truth = dir.join(format!("{name}-{mode}.json"));
    let started = Instant::now();
    let mut cmd = bin();
    cmd.args([
        "lab",
        "--mode",
        mode,
        "--duration",
        "16",
        "--http",
        "127.0.0.1:0",
    ])
    .arg("--truth")
    .arg(&truth);
    if let Some(t) = topology {
        cmd.arg("--topology").arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples")
                .join(t),
        );
    }
    let out = cmd.output().unwrap();
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

fn check_score(mode: &str, truth: &serde_json::Value, faults: usize) {
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
    let (faults_expected, faults) = (faults, score["faults"].as_array().unwrap());
    assert_eq!(faults.len(), faults_expected, "{score}");
    for f in faults.iter().filter(|f| f["visible"] == true) {
        assert!(
            f["in_time"] == true,
            "{mode}: {} not raised at its place within 1 s: {f}\nincidents: {all:#?}",
            f["what"]
        );
        assert!(f["earliest_s"].as_f64().unwrap() <= 1.0);
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
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
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
    let none = lab("none", dir, None).expect("the lab without INT");
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
        let truth = lab(mode, dir, None).unwrap_or_else(|e| panic!("lab {mode}: {e}"));
        check_score(mode, &truth, 3);
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
fn an_incast_and_a_silent_loss_are_raised_where_int_can_see_them() {
    if let Some(what) = missing() {
        skip(&what);
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempdir("lab-loss");
    for mode in ["xd", "md"] {
        let truth = match lab(mode, tmp.path(), Some("lab-loss.toml")) {
            Ok(t) => t,
            Err(e) if e.contains("built without its BPF programs") => {
                skip(&format!("the agent cannot run here: {e}"));
                return;
            }
            Err(e) => panic!("lab {mode}: {e}"),
        };
        check_score(mode, &truth, 2);
        let faults = truth["faults"].as_array().unwrap();
        let incast = &truth["score"]["faults"][0];
        assert!(
            ["microburst/-", "congestion/-"].contains(&incast["kinds"][0].as_str().unwrap()),
            "{mode}: the incast as a queue at the leaf's port: {incast}"
        );
        assert!(
            faults[0]["what"].as_str().unwrap().contains("600 sent"),
            "{}",
            faults[0]["what"]
        );
        // The loss stole packets, and no drop report shows any of them: nothing is raised in
        // INT-MD, and in INT-XD a silent drop (not a kernel drop) on that link.
        let what = faults[1]["what"].as_str().unwrap();
        let lost: u64 = what
            .rsplit_once(": ")
            .and_then(|(_, n)| n.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{what}"));
        let loss = &truth["score"]["faults"][1];
        if lost == 0 {
            assert_eq!(loss["visible"], false, "nothing crossed: {loss}");
            continue;
        }
        match mode {
            "md" => {
                assert_eq!(loss["visible"], false, "{loss}");
                assert_eq!(loss["incidents"], serde_json::json!([]), "{loss}");
            }
            _ => {
                assert_eq!(loss["visible"], true, "{loss}");
                assert_eq!(loss["kinds"], serde_json::json!(["drop/silent"]), "{loss}");
            }
        }
        eprintln!(
            "{mode}: one incident per fault: {}",
            truth["score"]["exact"]
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
        "[[fault]]\nkind = \"report-outage\"\nnode = 1\nfrom_s = 1.0\nuntil_s = 2.0\n",
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("slow-port, incast, link-down"), "{err}");
    let (code, err) = run(
        "[[fault]]\nkind = \"silent-drop\"\nleaf = 1\nspine = 1\nshare = 1.5\nfrom_s = 1.0\nuntil_s = 2.0\n",
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a silent drop a share"), "{err}");
    let (code, err) = run("[lab]\nhost_port_mbps = -1\n", &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("host_port_mbps"), "{err}");
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
