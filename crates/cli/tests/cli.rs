//! End-to-end tests of the `intscope` binary.

mod common;

use std::path::PathBuf;

use common::{DUMP_SAMPLE_JSON, bin, interop_file, succeed, tempdir, tshark_frames};

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

fn dump_json() -> Vec<serde_json::Value> {
    let out = succeed(bin().args(DUMP_SAMPLE_JSON).arg(sample()));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn json_lines_one_object_per_frame() {
    let frames = dump_json();
    assert_eq!(frames.len(), 11);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["frame"], i + 1);
        assert!(f["len"].as_u64().unwrap() > 0);
    }
    let encaps: Vec<_> = frames[..7]
        .iter()
        .map(|f| f["int"]["encap"].as_str().unwrap())
        .collect();
    assert_eq!(
        encaps,
        ["tcp", "tcp", "udp-new", "udp", "gre", "vxlan-gpe", "geneve"]
    );
    assert_eq!(frames[0]["int"]["type"], "md");
    assert_eq!(frames[1]["int"]["type"], "mx");
    let hops = frames[0]["int"]["hops"].as_array().unwrap();
    assert_eq!(hops.len(), 2);
    assert_eq!(hops[0]["node_id"], 2, "top of stack first");
    assert_eq!(hops[0]["queue_occupancy"], 200);
    assert_eq!(
        frames[3]["flow"]["dst_port"], 5001,
        "original UDP port restored"
    );
}

#[test]
fn reports_decode_down_to_embedded_int() {
    let frames = dump_json();
    let r = &frames[7]["report"];
    assert_eq!(r["version"], "2.0");
    assert_eq!(
        (
            r["hw_id"].as_u64(),
            r["seq"].as_u64(),
            r["node_id"].as_u64()
        ),
        (Some(1), Some(9), Some(3))
    );
    let ir = &r["reports"][0];
    assert_eq!(
        (
            ir["rep_type"].as_str(),
            ir["in_type"].as_str(),
            ir["report_length"].as_u64()
        ),
        (Some("int"), Some("ipv4"), Some(23))
    );
    assert_eq!(ir["metadata"]["queue_occupancy"], 300);
    assert_eq!(ir["inner"]["int"]["hops"].as_array().unwrap().len(), 2);
    let drop = &frames[8]["report"]["reports"][0];
    assert_eq!(drop["d"], true);
    assert_eq!(drop["metadata"]["drop_reason"], 71);
    let v05 = &frames[9]["report"];
    assert_eq!(v05["version"], "0.5");
    assert_eq!(v05["drop"]["drop_reason_name"], "routing-miss");
}

#[test]
fn malformed_frame_reports_where_and_the_dump_goes_on() {
    let frames = dump_json();
    let e = &frames[10]["error"];
    assert_eq!(e["layer"], "int-shim");
    assert_eq!(e["kind"], "bad-length");
    assert!(e["offset"].as_u64().unwrap() > 0);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("Length claims 160 bytes"),
        "{e}"
    );
}

#[test]
fn text_format_is_a_tree() {
    let out = bin()
        .args(["dump", "--int-udp-port", "17768"])
        .arg(sample())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Frame 1: "));
    assert!(text.contains("In-band Network Telemetry"));
    assert!(text.contains("Hop 0 (top of stack: most recent)"));
    assert!(text.contains("[Malformed: INT shim header"));
}

#[test]
fn missing_file_is_one_line_error_exit_1() {
    let out = bin()
        .args(["dump", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot open /nonexistent/x.pcap"));
}

#[test]
fn bad_flag_values_are_errors() {
    let out = bin()
        .args(["dump", "--int-dscp", "0x99"])
        .arg(sample())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("6 bits"));
}

/// The exit status says whose the mistake is: 2 for a wrong command line, whether clap or the
/// command found it, 1 for a command that could not do its job. Each case: arguments, status,
/// what stderr must say.
#[test]
fn usage_errors_exit_2_runtime_errors_exit_1() {
    let tmp = tempdir("exit");
    let dir = tmp.path();
    let pcap = dir.join("r.pcap");
    let pcap = pcap.to_str().unwrap();
    let missing = dir.join("no-such-store");
    let missing = missing.to_str().unwrap();
    let source = common::repo("examples/node-source.toml");
    let sample = sample();
    let sample = sample.to_str().unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        // clap's own findings.
        (
            &["dump", "--int-udp-port", "abc", sample],
            2,
            "invalid value",
        ),
        (
            &["sim", "--duration", "abc", "--reports", pcap],
            2,
            "invalid value",
        ),
        (&["no-such-command"], 2, "unrecognized subcommand"),
        // Checks clap cannot express: the same kind of mistake, the same status.
        (
            &["sim", "--duration", "0", "--reports", pcap],
            2,
            "--duration must be positive",
        ),
        (&["demo", "--duration=-1"], 2, "--duration must be positive"),
        (
            &["blast", "--to", "127.0.0.1:9", "--duration", "0"],
            2,
            "--duration",
        ),
        (
            &["blast", "--to", "127.0.0.1:9", "--version", "3"],
            2,
            "expected 2 or 0.5",
        ),
        (
            &["dump", "--int-gre-proto", "0x12345", sample],
            2,
            "exceeds 16 bits",
        ),
        (&["dump", "--probe-marker", "xyz", sample], 2, "64-bit hex"),
        (&["node", "--config", &source, "--out", pcap], 2, "--in"),
        (
            &["collect", "--store", "mysql:x", "--http", "127.0.0.1:0"],
            2,
            "expected sqlite:DIR",
        ),
        (
            &["collect", "--http", "0.0.0.0:0", "--no-store"],
            2,
            "off loopback",
        ),
        (
            &["collect", "--http-idle-timeout", "0", "--no-store"],
            2,
            "positive number",
        ),
        (
            &["serve", "--store", "nosuch:x", "--http", "127.0.0.1:0"],
            2,
            "expected sqlite:DIR",
        ),
        (
            &["collect", "--listen", "localhost", "--no-store"],
            2,
            "not HOST:PORT",
        ),
        (
            &[
                "sim",
                "--collector",
                "no-such-host.invalid:9",
                "--duration",
                "1",
            ],
            2,
            "cannot resolve",
        ),
        // Runtime: the command line is fine, the world is not.
        (&["dump", "/nonexistent/x.pcap"], 1, "cannot open"),
        (
            &[
                "collect",
                "--domains",
                "/nonexistent/domains.toml",
                "--no-store",
                "--http",
                "127.0.0.1:0",
            ],
            1,
            "domain registry",
        ),
        (
            &["sim", "--topology", "/nonexistent.toml", "--reports", pcap],
            1,
            "cannot read",
        ),
        (
            &["serve", "--store", &format!("sqlite:{missing}")],
            1,
            "no history store",
        ),
    ];
    for (args, code, says) in cases {
        let out = bin().args(*args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(
        !std::path::Path::new(missing).exists(),
        "serve created the store folder it was asked to read"
    );
}

/// `HOST:PORT` options take host names, resolved as any other program would.
#[test]
fn host_names_are_accepted_where_addresses_are() {
    let out = succeed(bin().args([
        "sim",
        "--collector",
        "localhost:9",
        "--duration",
        "0.05",
        "--speed",
        "max",
    ]));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["reports"].as_u64().unwrap() > 0, "{summary}");
}

/// The demo checks its input before it says anything or creates anything: a bad duration or a
/// missing topology file leaves no banner and no temporary history folder behind; a run that
/// ends removes the temporary history it made.
#[test]
fn demo_checks_its_input_before_side_effects() {
    let tmp = tempdir("demo-tmp");
    let tmp = tmp.path();
    for (args, code) in [
        (&["demo", "--duration", "0", "--http", "127.0.0.1:0"][..], 2),
        (
            &[
                "demo",
                "--topology",
                "/nonexistent.toml",
                "--http",
                "127.0.0.1:0",
            ][..],
            1,
        ),
    ] {
        let out = bin().args(args).env("TMPDIR", tmp).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("collector API on"), "{args:?}: {stderr}");
        assert_eq!(
            std::fs::read_dir(tmp).unwrap().count(),
            0,
            "{args:?} created a folder in TMPDIR"
        );
    }
    // A run that went well takes its temporary history with it.
    let out = bin()
        .args(["demo", "--duration", "1", "--http", "127.0.0.1:0"])
        .env("TMPDIR", tmp)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("history in"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(tmp).unwrap().collect();
    assert!(left.is_empty(), "the demo left {left:?} in TMPDIR");
}

/// The sample capture is written by the wire crate's emitters: tshark must find its outer
/// Ethernet/IP/UDP/TCP/GRE/VXLAN/Geneve layers well-formed with valid checksums.
#[test]
fn tshark_reads_our_frames_cleanly() {
    let Some(lines) = tshark_frames(&sample(), &[]) else {
        return;
    };
    assert_eq!(lines.len(), 11);
    assert!(lines[4].contains("gre"), "{}", lines[4]);
    assert!(lines[6].contains("geneve"), "{}", lines[6]);
}

/// pcapng input: the BMv2 INT-MX capture from the interop corpus (read in place).
#[test]
fn reads_pcapng() {
    let Some(file) = interop_file(
        "reads_pcapng",
        "laofan13_P4-INT__int-mx_pcap_s2-eth1_in.pcap",
    ) else {
        return;
    };
    let out = bin()
        .args(["dump", "--format", "json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let frames: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.len(), 18);
    assert_eq!(frames[17]["int"]["type"], "mx");
    assert_eq!(frames[17]["int"]["instruction_bitmap"], 0xff00);
    assert_eq!(frames[17]["warnings"][0]["code"], "bad-l4-checksum");
    assert!(
        frames[..17]
            .iter()
            .all(|f| f.get("int").is_none() && f.get("error").is_none())
    );
}

/// Without the `live` feature, asking for an interface says how to get it.
#[cfg(not(feature = "live"))]
#[test]
fn live_interfaces_need_the_live_feature() {
    let out = bin()
        .args(["node", "--config"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/node-source.toml"))
        .args(["--interface", "lo", "--out", "/dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--features live"));
}
