//! Three `intscope node` processes in a chain (examples/node-{source,transit,sink}.toml), then
//! the sink's reports replayed into `intscope collect`: the whole data path from a host's packet
//! to a flow's path in the collector's API.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, host_traffic, repo, startup_line, succeed, tempdir, tshark_frames, write_pcap};

use etherparse::PacketBuilder;

fn host_capture(path: &Path) -> Vec<Vec<u8>> {
    let mut frames = host_traffic(20);
    // One frame nobody watches (other destination network).
    let mut f = Vec::new();
    PacketBuilder::ethernet2([0; 6], [1; 6])
        .ipv4([10, 0, 1, 1], [192, 0, 2, 9], 64)
        .udp(1, 2)
        .write(&mut f, b"x")
        .unwrap();
    frames.push(f);
    write_pcap(path, &frames);
    frames
}

fn read(path: &PathBuf) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

fn node(
    config: &str,
    input: &PathBuf,
    output: &PathBuf,
    reports: Option<&PathBuf>,
) -> serde_json::Value {
    let mut c = bin();
    c.args(["node", "--config", &repo(config), "--in"])
        .arg(input)
        .arg("--out")
        .arg(output);
    if let Some(r) = reports {
        c.arg("--reports").arg(r);
    }
    let out = succeed(&mut c);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn host_to_host_through_three_nodes_then_the_collector() {
    let dir = tempdir("chain");
    let p = |n: &str| dir.path().join(n);
    let sent = host_capture(&p("host1.pcap"));
    let s1 = node(
        "examples/node-source.toml",
        &p("host1.pcap"),
        &p("s1.pcap"),
        None,
    );
    assert_eq!(
        (s1["inserted"].as_u64(), s1["untouched"].as_u64()),
        (Some(20), Some(1))
    );
    let s2 = node(
        "examples/node-transit.toml",
        &p("s1.pcap"),
        &p("s2.pcap"),
        None,
    );
    assert_eq!(s2["added"], 20);
    // The frames with INT are clean IP/UDP/TCP to tshark, checksums included.
    if let Some(lines) = tshark_frames(&p("s2.pcap"), &[]) {
        assert_eq!(lines.len(), 21);
    }
    let s3 = node(
        "examples/node-sink.toml",
        &p("s2.pcap"),
        &p("host2.pcap"),
        Some(&p("reports.pcap")),
    );
    assert_eq!(
        (s3["sunk"].as_u64(), s3["reports"].as_u64()),
        (Some(20), Some(20))
    );
    assert_eq!(
        read(&p("host2.pcap")),
        sent,
        "Host2 receives exactly what Host1 sent"
    );

    // The reports decode with dump: v2.0 from node 3, two hops embedded.
    let out = bin()
        .args(["dump", "--format", "json", "--int-udp-port", "17768"])
        .arg(p("reports.pcap"))
        .output()
        .unwrap();
    let first: serde_json::Value = serde_json::from_str(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["report"]["node_id"], 3);
    assert_eq!(
        first["report"]["reports"][0]["inner"]["int"]["hops"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(
        first.get("warnings").is_none(),
        "report frames are well-formed: {first}"
    );

    // The collector sees 20 flows whose path is 1 -> 2 -> 3: from v2.0 reports one per
    // datagram, from coalesced ones, and from v0.5 reports.
    let sink = std::fs::read_to_string(repo("examples/node-sink.toml")).unwrap();
    let variants = [
        ("v2.0", sink.clone()),
        (
            "coalesced",
            format!("{sink}\n[export]\ncoalesce_bytes = 1472\ncoalesce_delay_ns = 1000000000\n"),
        ),
        ("v0.5", format!("report_format = \"v0.5\"\n{sink}")),
    ];
    for (name, config) in variants {
        let reports = p(&format!("reports-{name}.pcap"));
        let toml = p(&format!("sink-{name}.toml"));
        std::fs::write(&toml, config).unwrap();
        let s3 = node(
            toml.to_str().unwrap(),
            &p("s2.pcap"),
            &p("host2-again.pcap"),
            Some(&reports),
        );
        assert_eq!(s3["reports"], 20, "{name}");
        let datagrams = read(&reports).len();
        assert_eq!(s3["datagrams"], datagrams as u64, "{name}");
        if name == "coalesced" {
            // Reports of 108 and 128 bytes (UDP and TCP packets), 100 and 120 of them after the
            // group header: 13 fill a 1472-byte datagram, the other 7 wait for the end.
            assert_eq!(datagrams, 2, "{name}");
        } else {
            assert_eq!(datagrams, 20, "{name}");
        }
        // Every report decodes with dump, without an error or a tolerated deviation.
        let dumped = succeed(
            bin()
                .args(["dump", "--format", "json", "--int-udp-port", "17768"])
                .arg(&reports),
        );
        let lines: Vec<serde_json::Value> = String::from_utf8(dumped.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), datagrams, "{name}");
        for l in &lines {
            assert!(l.get("report").is_some(), "{name}: {l}");
            assert!(
                l.get("error").is_none() && l.get("warnings").is_none(),
                "{name}: {l}"
            );
        }
        // Every report frame is clean UDP/IP to tshark (the report port decoded as data: its
        // INT-report dissector predates v2.0).
        if let Some(lines) = tshark_frames(&reports, &["udp.port==32766,data"]) {
            assert_eq!(lines.len(), datagrams, "{name}");
            assert!(
                lines.iter().all(|l| l.starts_with("eth:ethertype:ip:udp")),
                "{name}: {lines:?}"
            );
        }
        let flows = collected_flows(&reports);
        assert_eq!(flows["total"], 20, "{name}");
        for f in flows["flows"].as_array().unwrap() {
            assert_eq!(f["path"], serde_json::json!([1, 2, 3]), "{name}: {f}");
            assert_eq!(f["reports"], 1, "{name}");
            if name != "v0.5" {
                assert!(
                    f["e2e_latency_p50"].is_null(),
                    "the example requests no hop latency"
                );
            }
        }
    }
}

/// The flows `intscope collect --replay` finds in a pcap of reports.
fn collected_flows(reports: &PathBuf) -> serde_json::Value {
    let mut c = bin()
        .args([
            "collect",
            "--no-store",
            "--http",
            "127.0.0.1:0",
            "--int-udp-port",
            "17768",
            "--replay",
        ])
        .arg(reports)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let http = startup_line(&mut c)["http"].as_str().unwrap().to_string();
    let flows = Command::new("curl")
        .args(["-sf", &format!("http://{http}/api/flows?limit=100")])
        .output()
        .unwrap();
    let _ = c.kill();
    let _ = c.wait();
    serde_json::from_slice(&flows.stdout).unwrap()
}

/// `intscope node --netcfg`: SD-Fabric's ONOS netcfg runs unchanged — postcards for the watched
/// subnet, a queue report for the unwatched packet in the congested queue, v0.5 reports to the
/// netcfg's collector (in report frames, and over UDP when no pcap is given).
#[test]
fn an_onos_netcfg_runs_unchanged() {
    let dir = tempdir("netcfg");
    let p = |n: &str| dir.path().join(n);
    let sent = host_capture(&p("host1.pcap"));
    // The device: node 2, its queue 0 at 5 µs (over the 2 µs trigger).
    std::fs::write(
        p("device.toml"),
        "node_id = 2\n[telemetry]\nhop_latency_ns = 5000\n",
    )
    .unwrap();
    let run = |netcfg: &str, reports: Option<&PathBuf>| {
        let mut c = bin();
        c.args(["node", "--netcfg", netcfg, "--config"])
            .arg(p("device.toml"))
            .arg("--in")
            .arg(p("host1.pcap"))
            .arg("--out")
            .arg(p("out.pcap"));
        if let Some(r) = reports {
            c.arg("--reports").arg(r);
        }
        let out = succeed(&mut c);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let summary = run(&repo("examples/sd-fabric-netcfg.json"), Some(&p("r.pcap")));
    assert_eq!(read(&p("out.pcap")), sent, "INT-XD changes no packet");
    // 20 packets to 10.0.3.0/24, each a new 5-tuple; the 21st is watched by nobody, but it sat in
    // the congested queue; the 20 watched postcards carry Q as well.
    assert_eq!(
        (
            summary["postcards"].as_u64(),
            summary["queue_reports"].as_u64()
        ),
        (Some(20), Some(1)),
        "{summary}"
    );
    let frames = read(&p("r.pcap"));
    assert_eq!(frames.len(), 21);
    assert_eq!(
        &frames[0][30..34],
        &[10, 32, 11, 2],
        "to the netcfg's collectorIp"
    );
    assert_eq!(
        &frames[0][36..38],
        &32766u16.to_be_bytes(),
        "and collectorPort"
    );
    assert_eq!(frames[0][42] >> 4, 0, "Telemetry Report v0.5");

    // Over UDP to the collector the netcfg names.
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    collector
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let port = collector.local_addr().unwrap().port();
    let netcfg = std::fs::read_to_string(repo("examples/sd-fabric-netcfg.json"))
        .unwrap()
        .replace("10.32.11.2", "127.0.0.1")
        .replace("32766", &port.to_string());
    std::fs::write(p("local.json"), netcfg).unwrap();
    let summary = run(p("local.json").to_str().unwrap(), None);
    assert_eq!(summary["datagrams"], 21, "{summary}");
    let mut buf = [0u8; 2048];
    for _ in 0..21 {
        let n = collector.recv(&mut buf).unwrap();
        assert!(n > 12 && buf[0] >> 4 == 0, "a v0.5 report");
    }
}
