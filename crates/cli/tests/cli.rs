//! End-to-end tests of the `intscope` binary.

mod common;

use std::path::PathBuf;

use common::{DUMP_SAMPLE_JSON, bin, interop_file, succeed, tshark_frames};

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
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("6 bits"));
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
