//! Every frame of a capture accounted for, by reason: `intscope collect --replay`, `intscope dump`
//! and `intscope node` on hand-made captures with known contents (report frames cut by the snap
//! length, zero-length records, broken IP and UDP headers, Ethernet trailers, other link types).
//!
//! Every run has a deadline: a reader that loops fails the test instead of hanging it.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Temp, bin, repo};
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};

/// Longest any one run may take.
const DEADLINE: Duration = Duration::from_secs(20);

/// The frames of `examples/sample.pcap` (its frames 8 to 10 are telemetry report datagrams to
/// port 32766, frame 3 a UDP packet to another port).
fn sample_frames() -> Vec<Vec<u8>> {
    let mut r =
        PcapReader::new(std::fs::File::open(repo("examples/sample.pcap")).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

impl Temp {
    /// An Ethernet pcap of `records`: each its captured bytes and its length on the wire.
    fn pcap(name: &str, records: &[(Vec<u8>, usize)]) -> Temp {
        Self::pcap_of(name, DataLink::ETHERNET, records)
    }

    fn pcap_of(name: &str, datalink: DataLink, records: &[(Vec<u8>, usize)]) -> Temp {
        let t = Temp::path(name);
        let mut w = PcapWriter::with_header(
            std::fs::File::create(&t.0).unwrap(),
            PcapHeader {
                datalink,
                ..PcapHeader::default()
            },
        )
        .unwrap();
        for (i, (data, orig)) in records.iter().enumerate() {
            w.write_packet(&PcapPacket::new(
                Duration::from_millis(1_700_000_000_000 + i as u64),
                *orig as u32,
                data,
            ))
            .unwrap();
        }
        t
    }
}

/// Whole frames: captured as they were on the wire.
fn whole(frames: &[Vec<u8>]) -> Vec<(Vec<u8>, usize)> {
    frames.iter().map(|f| (f.clone(), f.len())).collect()
}

/// What `intscope collect --replay` served and said: `/api/stats` while it served, and its
/// stderr once stopped with SIGTERM.
fn replay(file: &Path) -> (serde_json::Value, String) {
    replay_with(file, &[])
}

/// [`replay`] with more arguments to `collect`.
fn replay_with(file: &Path, extra: &[&str]) -> (serde_json::Value, String) {
    common::replay_served(file, extra)
}

/// The exit status of `child`; `None` (the child killed) once [`DEADLINE`] has passed.
fn wait(child: &mut Child) -> Option<std::process::ExitStatus> {
    common::exit_within(child, DEADLINE)
}

/// The replay's summary line.
fn replayed(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("replayed "))
        .unwrap_or_else(|| panic!("no replay summary: {stderr}"))
}

/// A captured Ethernet trailer (padding, or the FCS some captures keep) after the IP packet is
/// not part of the UDP datagram: replayed, the sample's three report datagrams give their three
/// reports, not extra ones made of the trailer's bytes.
#[test]
fn replay_reads_the_udp_datagram_not_the_ethernet_trailer() {
    let frames = sample_frames();
    let plain = Temp::pcap("plain.pcap", &whole(&frames[7..10]));
    let (plain_stats, _) = replay(&plain.0);
    assert_eq!(plain_stats["ingest"]["reports_decoded"], 3);
    let trailed: Vec<Vec<u8>> = frames[7..10]
        .iter()
        .map(|f| [f.as_slice(), &[0u8; 16]].concat())
        .collect();
    let trailed = Temp::pcap("trailer.pcap", &whole(&trailed));
    let (stats, stderr) = replay(&trailed.0);
    let ingest = &stats["ingest"];
    assert_eq!(ingest["datagrams_received"], 3, "{stderr}");
    assert_eq!(ingest["datagrams_accepted"], 3, "{ingest}");
    assert_eq!(
        ingest["reports_decoded"], 3,
        "the trailer's zeros are no reports: {ingest}"
    );
}

/// A replayed capture's frames each land in one count: report datagrams (then accepted or
/// discarded by reason in /api/stats), other traffic, or undecodable by reason (a frame the
/// capture cut before its UDP header, a zero-length record, a broken IPv4 header, a UDP length
/// that disagrees with IP, IPv4 fragments) — the undecodable ones are not taken for other
/// traffic.
#[test]
fn replay_counts_undecodable_frames_by_reason_apart_from_other_traffic() {
    let frames = sample_frames();
    let report = frames[7].clone();
    let mut bad_ihl = report.clone();
    bad_ihl[14] = 0x43;
    let mut udp_len_4 = report.clone();
    udp_len_4[38..40].copy_from_slice(&4u16.to_be_bytes());
    // A first fragment (more fragments), and a later one (offset 1480 bytes).
    let mut first_fragment = report.clone();
    first_fragment[20] |= 0x20;
    let mut later_fragment = report.clone();
    later_fragment[20..22].copy_from_slice(&(1480u16 / 8).to_be_bytes());
    let records = vec![
        (first_fragment.clone(), first_fragment.len()),
        (later_fragment.clone(), later_fragment.len()),
        (report.clone(), report.len()),
        // Cut by the snap length inside the UDP header, and inside the report.
        (report[..38].to_vec(), report.len()),
        (report[..60].to_vec(), report.len()),
        (Vec::new(), report.len()),
        (bad_ihl.clone(), bad_ihl.len()),
        (udp_len_4.clone(), udp_len_4.len()),
        // UDP to port 17768: not report traffic.
        (frames[2].clone(), frames[2].len()),
    ];
    let file = Temp::pcap("hostile.pcap", &records);
    let (stats, stderr) = replay(&file.0);
    let line = replayed(&stderr);
    assert!(
        line.contains("9 frames, 2 report datagrams, 1 other frames"),
        "{line}"
    );
    assert!(
        line.contains("1 report datagrams cut short by the capture"),
        "{line}"
    );
    assert!(
        line.contains(
            "6 frames undecodable, not replayed (UDP length disagrees with IP 1, \
             cut short by the capture 2, ipv4 bad-value 1, ipv4 fragment 2)"
        ),
        "{line}"
    );
    let ingest = &stats["ingest"];
    assert_eq!(ingest["datagrams_received"], 2, "{ingest}");
    assert_eq!(ingest["datagrams_accepted"], 1, "{ingest}");
    assert_eq!(ingest["discarded"]["malformed"], 1, "{ingest}");
}

/// `intscope dump`: how many frames could not be decoded whole, by reason (the capture's snap
/// length, or the layer and kind of the first error), in one line on stderr; exit status 0, the
/// capture being whole.
#[test]
fn dump_counts_frames_not_decoded_whole_by_reason() {
    let frames = sample_frames();
    let report = frames[7].clone();
    let mut bad_ihl = report.clone();
    bad_ihl[14] = 0x43;
    let records = vec![
        (report.clone(), report.len()),
        (report[..38].to_vec(), report.len()),
        (Vec::new(), report.len()),
        (Vec::new(), 0),
        (bad_ihl.clone(), bad_ihl.len()),
        (frames[2].clone(), frames[2].len()),
    ];
    let file = Temp::pcap("dump-hostile.pcap", &records);
    let out = run(bin().args(["dump", "--format", "json"]).arg(&file.0));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 6);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "intscope dump: {}: 4 of 6 frames not decoded whole (cut short by the capture 2, \
             ethernet truncated 1, ipv4 bad-value 1)",
            file.0.display()
        )
    );
    // A link type not read is counted too, by name.
    let wifi = Temp::pcap_of("wifi.pcap", DataLink::IEEE802_11, &whole(&frames[..2]));
    let out = run(bin().arg("dump").arg(&wifi.0));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("2 of 2 frames not decoded whole (IEEE802_11 (105) not supported 2)"),
        "{stderr}"
    );
    // A whole, clean capture says nothing.
    let clean = Temp::pcap("clean.pcap", &whole(&frames[7..10]));
    let out = run(bin().arg("dump").arg(&clean.0));
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `intscope dump` reads a report datagram as far as its UDP length: an Ethernet trailer of
/// zeros after it is no reports (each of the sample's v2.0 report frames holds one).
#[test]
fn dump_reads_the_udp_datagram_not_the_ethernet_trailer() {
    let frames = sample_frames();
    let trailed: Vec<Vec<u8>> = frames[7..9]
        .iter()
        .map(|f| [f.as_slice(), &[0u8; 16]].concat())
        .collect();
    let file = Temp::pcap("dump-trailer.pcap", &whole(&trailed));
    let out = run(bin().args(["dump", "--format", "json"]).arg(&file.0));
    assert!(out.status.success());
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            v["report"]["reports"].as_array().map(Vec::len),
            Some(1),
            "{v}"
        );
        assert!(v["report"].get("error").is_none(), "{v}");
    }
}

/// Runs `cmd` to its end within [`DEADLINE`] (killed and failed after it).
fn run(cmd: &mut Command) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let e = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let status = wait(&mut child).unwrap_or_else(|| panic!("{cmd:?} did not end in {DEADLINE:?}"));
    std::process::Output {
        status,
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
}

/// `intscope node --config CONFIG --in INPUT --out OUT` with `extra` arguments: its summary (its
/// JSON line on stdout), exit code and stderr.
fn node(
    config: impl AsRef<std::ffi::OsStr>,
    input: &Path,
    out: &Path,
    extra: &[&std::ffi::OsStr],
) -> (Option<i32>, serde_json::Value, String) {
    let mut cmd = bin();
    cmd.arg("node")
        .arg("--config")
        .arg(config)
        .arg("--in")
        .arg(input);
    let out = run(cmd.arg("--out").arg(out).args(extra));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let summary = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no summary ({e}): {stderr}"));
    (out.status.code(), summary, stderr)
}

/// The frames of a pcap.
fn frames_of(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// A node's input is accounted for: every Ethernet frame is forwarded or discarded, every frame
/// written out is a forwarded one, a clone or a probe, frames of another link type are dropped
/// and counted (not an abort), and malformed frames are counted, forwarded as they came.
#[test]
fn node_accounts_for_every_input_frame() {
    let frames = sample_frames();
    let mut input = whole(&common::host_traffic(12));
    let report = frames[7].clone();
    input.push((report[..20].to_vec(), report.len()));
    input.push((Vec::new(), 0));
    let file = Temp::pcap("node-in.pcap", &input);
    let out = Temp::path("node-out.pcap");
    let source = repo("examples/node-source.toml");
    let (code, s, stderr) = node(&source, &file.0, &out.0, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(s["frames"], 14, "{s}");
    assert_eq!(s["inserted"], 12, "{s}");
    assert_eq!(s["malformed"], 2, "{s}");
    assert_eq!(s["forwarded"], 14, "{s}");
    assert_eq!(s["written"], 14, "{s}");
    assert_eq!(frames_of(&out.0).len(), 14);
    // Another link type: each frame dropped and counted, the run not aborted.
    let raw = Temp::pcap_of("node-raw.pcap", DataLink::RAW, &whole(&frames[..3]));
    let (code, s, stderr) = node(&source, &raw.0, &out.0, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (s["frames"].as_u64(), s["not_ethernet"].as_u64()),
        (Some(0), Some(3)),
        "{s}"
    );
    assert!(
        stderr.contains("link type RAW (101) is not supported"),
        "{stderr}"
    );
}

/// A node over a capture cut short: the frames before the damage are processed, the reports
/// still waiting to be coalesced are delivered, the summary accounts for them, and the damage
/// is the error (exit status 1).
/// Ten host packets through `examples/node-source.toml` then `node-transit.toml`, in a new
/// directory `name` (kept while the returned [`Temp`] lives): the transit hop's output.
fn source_and_transit(name: &str, host_file: &str) -> (Temp, PathBuf) {
    let dir = Temp::path(name);
    std::fs::create_dir_all(&dir.0).unwrap();
    let host = Temp::pcap(host_file, &whole(&common::host_traffic(10)));
    let mut input = host.0.clone();
    for (role, out) in [("source", "s.pcap"), ("transit", "t.pcap")] {
        let config = repo(&format!("examples/node-{role}.toml"));
        let out = dir.0.join(out);
        let (code, _, stderr) = node(&config, &input, &out, &[]);
        assert_eq!(code, Some(0), "{stderr}");
        input = out;
    }
    (dir, input)
}

#[test]
fn node_over_a_damaged_capture_accounts_for_what_it_read() {
    let (dir, input) = source_and_transit("chain", "host.pcap");
    let p = |name: &str| dir.0.join(name);
    let whole_t = std::fs::read(&input).unwrap();
    std::fs::write(p("cut.pcap"), &whole_t[..whole_t.len() - 7]).unwrap();
    // The sink coalesces its reports: the last waits for company when the capture breaks off.
    let sink = std::fs::read_to_string(repo("examples/node-sink.toml")).unwrap()
        + "\n[export]\ncoalesce_bytes = 1472\ncoalesce_delay_ns = 1000000000\n";
    std::fs::write(p("sink.toml"), sink).unwrap();
    let (code, s, stderr) = node(
        p("sink.toml"),
        &p("cut.pcap"),
        &p("k.pcap"),
        &["--reports".as_ref(), p("r.pcap").as_os_str()],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cut short in the middle of frame 10"),
        "{stderr}"
    );
    assert_eq!(
        (s["frames"].as_u64(), s["sunk"].as_u64()),
        (Some(9), Some(9)),
        "{s}"
    );
    assert_eq!(s["reports"], 9, "{s}");
    let datagrams = frames_of(&p("r.pcap")).len() as u64;
    assert!(datagrams >= 1, "the held reports were delivered");
    assert_eq!(s["datagrams"].as_u64(), Some(datagrams), "{s}");
    assert_eq!(frames_of(&p("k.pcap")).len(), 9);
}

/// `intscope collect` listening on loopback with `args`: the child, its API and report addresses.
fn collect(args: &[&str]) -> (Child, String, String) {
    let mut child = bin()
        .args([
            "collect",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let v = common::startup_line(&mut child);
    let http = v["http"].as_str().unwrap().to_string();
    let listen = v["listen"][0].as_str().unwrap().to_string();
    (child, http, listen)
}

/// SIGTERM, then the stop summary's counters (`intscope collect: stopped; {...}`).
fn stop(child: Child) -> serde_json::Value {
    stop_saying(child).0
}

/// [`stop`], with all the collector said on stderr.
fn stop_saying(child: Child) -> (serde_json::Value, String) {
    stop_saying_after(child, "")
}

/// Reads `child`'s stderr line by line on a thread: the receiver gets each line, and the
/// thread's result is the whole of it.
fn stderr_lines(child: &mut Child) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            all += &line;
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, reader)
}

/// Waits (up to [`DEADLINE`]) for a line of `lines` holding `needle`: a binary says when it is
/// ready for a signal, so that a test does not guess how long a loaded machine takes.
fn wait_for_line(lines: &mpsc::Receiver<String>, needle: &str) {
    let until = Instant::now() + DEADLINE;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return,
            Ok(_) => {}
            Err(e) => panic!("no stderr line with {needle:?} ({e})"),
        }
    }
}

/// [`stop_saying`], the signal sent once `child` wrote a stderr line holding `ready`.
fn stop_saying_after(mut child: Child, ready: &str) -> (serde_json::Value, String) {
    let (lines, reader) = stderr_lines(&mut child);
    if !ready.is_empty() {
        wait_for_line(&lines, ready);
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait(&mut child).expect("collect did not stop on SIGTERM");
    let stderr = reader.join().unwrap();
    assert!(status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("intscope collect: stopped; "))
        .unwrap_or_else(|| panic!("no stop summary: {stderr}"));
    (serde_json::from_str(line).unwrap(), stderr)
}

/// Stopped right after a burst faster than it decodes, `intscope collect` reads what its socket
/// still holds before it closes: the stop summary accounts for every datagram sent (received,
/// or dropped and counted by the kernel), and the history store holds every report decoded.
#[test]
fn a_stop_right_after_a_burst_accounts_for_every_datagram() {
    let data = Temp::path("burst-data");
    let data_arg = data.0.to_str().unwrap().to_string();
    let (child, _, listen) = collect(&["--data", &data_arg]);
    let out = run(bin().args([
        "blast",
        "--to",
        &listen,
        "--rate",
        "0",
        "--duration",
        "0.3",
        "--flows",
        "100",
    ]));
    assert!(out.status.success());
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = sent["datagrams"].as_u64().unwrap();
    let s = stop(child);
    let received = s["datagrams_received"].as_u64().unwrap();
    let Some(dropped) = s["kernel_dropped"].as_u64() else {
        eprintln!("no /proc/net/udp here: nothing to check");
        return;
    };
    assert_eq!(received + dropped, sent, "{s}");
    assert_eq!(s["datagrams_accepted"].as_u64(), Some(received), "{s}");
    // The store holds what was decoded, the backlog read at the stop included.
    let (child, http, _) = collect(&["--data", &data_arg]);
    let deadline = Instant::now() + DEADLINE;
    let totals = loop {
        let out = Command::new("curl")
            .args([
                "-sf",
                "--max-time",
                "10",
                &format!("http://{http}/api/stats"),
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if v["store"]["totals"].is_object() {
            break v["store"]["totals"].clone();
        }
        assert!(Instant::now() < deadline, "no store snapshot: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    stop(child);
    assert_eq!(totals["reports_v2"], s["reports_decoded"], "{totals} {s}");
}

/// SIGTERM as soon as `intscope collect` has said where it listens is a graceful stop (the stop
/// summary, the final flush), not the signal's default death: the handlers are in place before
/// the line a script waits for. (bash sends it the moment the line arrives; a spawned `kill`
/// would come too late to catch the window.)
#[test]
fn sigterm_right_after_the_startup_line_stops_gracefully() {
    let dir = Temp::path("sigterm");
    std::fs::create_dir_all(&dir.0).unwrap();
    let script = r#"
        fifo="$1/out"; mkfifo "$fifo"
        "$0" collect --no-store --listen 127.0.0.1:0 --http 127.0.0.1:0 >"$fifo" 2>"$1/err" &
        pid=$!
        exec 3<"$fifo"
        read -r line <&3
        kill -TERM "$pid"
        wait "$pid"
        echo "exit $?"
    "#;
    for round in 0..5 {
        let out = run(Command::new("bash")
            .args(["-c", script])
            .arg(env!("CARGO_BIN_EXE_intscope"))
            .arg(&dir.0));
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = std::fs::read_to_string(dir.0.join("err")).unwrap_or_default();
        let _ = std::fs::remove_file(dir.0.join("out"));
        assert_eq!(said.trim(), "exit 0", "round {round}: {err}");
        assert!(
            err.contains("intscope collect: stopped; "),
            "round {round}: {err}"
        );
    }
}

/// `intscope demo` stopped with SIGTERM mid-run stops as with Ctrl-C: the fabric ends, the
/// events are reported, the history is committed, exit status 0 (not the signal's death).
#[test]
fn sigterm_stops_the_demo_gracefully() {
    let data = Temp::path("demo-data");
    let mut child = bin()
        .args([
            "demo",
            "--duration",
            "60",
            "--http",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(&data.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("scripted faults") {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let status = wait(&mut child).expect("demo did not stop on SIGTERM");
    let rest = reader.join().unwrap();
    assert!(status.success(), "{status:?}: {rest}");
    assert!(rest.contains("events detected:"), "{rest}");
    assert!(data.0.join("intscope.db").exists());
}

/// `intscope node --collector` at a port where nothing listens: the datagrams the socket refuses
/// (ICMP port unreachable) are counted in `send_errors` and the node goes on over its whole input,
/// instead of ending at the second report.
#[test]
fn node_counts_reports_a_closed_collector_port_refused() {
    let (dir, input) = source_and_transit("refused", "host-refused.pcap");
    let p = |name: &str| dir.0.join(name);
    // A port just freed: nothing listens there.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let sink = repo("examples/node-sink.toml");
    let (code, s, stderr) = node(
        &sink,
        &input,
        &p("k.pcap"),
        &["--collector".as_ref(), closed.as_ref()],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (s["frames"].as_u64(), s["sunk"].as_u64()),
        (Some(10), Some(10)),
        "{s}"
    );
    let (sent, refused) = (
        s["datagrams"].as_u64().unwrap(),
        s["send_errors"].as_u64().unwrap(),
    );
    assert!(refused > 0, "{s}");
    assert_eq!(sent + refused, 10, "one report datagram a frame: {s}");
    assert!(stderr.contains("send_errors"), "{stderr}");
}

/// `intscope sim --collector` at a port where nothing listens: the reports the socket refuses
/// are counted in `send_errors` (before, they were dropped silently).
#[test]
fn sim_counts_reports_a_closed_collector_port_refused() {
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = run(bin().args([
        "sim",
        "--duration",
        "0.2",
        "--speed",
        "max",
        "--collector",
        &closed,
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = s["send_errors"].as_u64().unwrap_or(0);
    assert!(
        refused > 0 && refused <= s["reports"].as_u64().unwrap(),
        "{s}"
    );
    assert!(stderr.contains("send_errors"), "{stderr}");
}

/// A pcap whose header says `snaplen`, written raw (pcap-file's writer checks the lengths).
fn pcap_with_snaplen(name: &str, snaplen: u32, records: &[(Vec<u8>, usize)]) -> Temp {
    let t = Temp::path(name);
    let mut b = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&snaplen.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for (i, (data, orig)) in records.iter().enumerate() {
        for v in [1_700_000_000 + i as u32, 0, data.len() as u32, *orig as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(data);
    }
    std::fs::write(&t.0, b).unwrap();
    t
}

/// A capture taken with a snap length (`tcpdump -s 96`: every longer frame cut, its length on
/// the wire kept) is read to its end, as libpcap and tshark read it, and so is one whose header
/// says snap length 0: dump decodes every frame (counting the cut ones), replay serves the
/// report datagrams, and the node processes every frame. Before, the first frame longer than
/// the snap length ended the capture as "corrupt".
#[test]
fn captures_taken_with_a_snap_length_are_read_to_the_end() {
    let frames = sample_frames();
    let cut: Vec<(Vec<u8>, usize)> = frames
        .iter()
        .map(|f| (f[..f.len().min(96)].to_vec(), f.len()))
        .collect();
    let snap96 = pcap_with_snaplen("snap96.pcap", 96, &cut);
    let snap0 = pcap_with_snaplen("snap0.pcap", 0, &whole(&frames));
    for file in [&snap96, &snap0] {
        let out = run(bin()
            .args(["dump", "--format", "json", "--int-udp-port", "17768"])
            .arg(&file.0));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{}: {stderr}", file.0.display());
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().lines().count(),
            frames.len(),
            "{stderr}"
        );
    }
    let out = run(bin().arg("dump").arg(&snap96.0));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("cut short by the capture 3"), "{stderr}");
    let (stats, stderr) = replay(&snap96.0);
    assert!(
        replayed(&stderr).contains("11 frames, 3 report datagrams"),
        "{stderr}"
    );
    assert_eq!(stats["ingest"]["datagrams_received"], 3, "{stats}");
    let out = Temp::path("snap-out.pcap");
    let transit = repo("examples/node-transit.toml");
    let (code, s, stderr) = node(&transit, &snap96.0, &out.0, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(s["frames"], 11, "{s}");
}

/// `intscope blast` to a port where nothing listens: a refused send is one of `send_errors`, and
/// the datagrams and reports it held, which did not go, are counted too (a GSO send holds up to
/// 64 datagrams).
#[test]
fn blast_counts_the_datagrams_of_refused_sends() {
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = run(bin().args([
        "blast",
        "--to",
        &closed,
        "--rate",
        "50000",
        "--duration",
        "0.2",
    ]));
    assert!(out.status.success());
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = s["send_errors"].as_u64().unwrap();
    let refused = s["datagrams_refused"].as_u64().unwrap_or(0);
    assert!(errors > 0, "{s}");
    assert!(
        refused >= errors,
        "each refused send held a datagram at least: {s}"
    );
    assert_eq!(
        s["reports_refused"].as_u64(),
        Some(refused * 8),
        "8 reports a datagram: {s}"
    );
}

/// A realtime replay whose next frame lies a year ahead (a long pause, or a corrupt timestamp)
/// stops on SIGTERM within its wait: the replay says where it stopped, the collector stops
/// gracefully (stop summary, exit 0) with the frame before it counted.
#[test]
fn sigterm_ends_a_realtime_replay_waiting_for_a_far_frame() {
    let frames = sample_frames();
    let file = Temp::path("far.pcap");
    let mut w = PcapWriter::with_header(
        std::fs::File::create(&file.0).unwrap(),
        PcapHeader {
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        },
    )
    .unwrap();
    for (secs, f) in [(1_700_000_000u64, &frames[7]), (1_731_536_000, &frames[8])] {
        w.write_packet(&PcapPacket::new(
            Duration::from_secs(secs),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
    drop(w);
    let child = bin()
        .args([
            "collect",
            "--no-store",
            "--http",
            "127.0.0.1:0",
            "--replay-speed",
            "realtime",
            "--replay",
        ])
        .arg(&file.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Stopped once the first frame is replayed and the replay waits for the second.
    let (s, stderr) = stop_saying_after(child, "replay waits");
    assert_eq!(s["datagrams_received"], 1, "the first frame: {s}");
    assert!(
        replayed(&stderr).contains("stopped by a signal after 1 frames"),
        "{stderr}"
    );
}

/// `intscope sim` writing a reports pcap in real time, stopped with SIGTERM: the run ends at its
/// next step, the pcap is whole (dump reads it to the end) and the summary says how far the
/// fabric ran; before, the signal killed it with the file cut short and no summary.
#[test]
fn sigterm_ends_a_realtime_sim_with_a_whole_pcap() {
    let pcap = Temp::path("sim-stop.pcap");
    let mut child = bin()
        .args(["sim", "--duration", "60", "--reports"])
        .arg(&pcap.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut b = String::new();
        let _ = out.read_to_string(&mut b);
        b
    });
    let (lines, e) = stderr_lines(&mut child);
    // Stopped once sim has its handler in place and has run its first step.
    wait_for_line(&lines, "intscope sim: running");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait(&mut child).expect("sim did not stop on SIGTERM");
    let (stdout, stderr) = (o.join().unwrap(), e.join().unwrap());
    assert!(status.success(), "{status:?}: {stderr}");
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ran = s["virtual_seconds"].as_f64().unwrap();
    assert!(ran > 0.0 && ran < 60.0, "{s}");
    let dump = run(bin().arg("dump").arg(&pcap.0));
    assert_eq!(
        dump.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
}

/// Output that cannot be written (a full disk: /dev/full) is an error, exit status 1, not a
/// summary claiming frames written: the pcaps are flushed explicitly, not on drop (which
/// swallows the error). `intscope node` (forwarded frames and reports) and `intscope sim`.
#[test]
fn a_full_disk_is_an_error_not_a_summary() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("no /dev/full here: nothing to check");
        return;
    }
    let host = Temp::pcap("full-host.pcap", &whole(&common::host_traffic(4)));
    let source = repo("examples/node-source.toml");
    let out = run(bin()
        .args(["node", "--config", &source, "--in"])
        .arg(&host.0)
        .arg("--out")
        .arg(full));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("writing the output pcap"), "{stderr}");
    let fwd = Temp::path("full-fwd.pcap");
    let out = run(bin()
        .args(["node", "--config", &source, "--in"])
        .arg(&host.0)
        .arg("--out")
        .arg(&fwd.0)
        .arg("--reports")
        .arg(full));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("writing the reports pcap"), "{stderr}");
    let out = run(bin().args([
        "sim",
        "--duration",
        "0.001",
        "--speed",
        "max",
        "--reports",
        "/dev/full",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left"), "{stderr}");
}

/// `frames` re-wrapped as a capture of `link_type` (`tcpdump -i any` writes LINUX_SLL or
/// LINUX_SLL2; raw-IP captures RAW, IPV4, IPV6): the Ethernet header replaced by the link
/// header, the protocol type its Ethertype (layouts: tcpdump.org's link-layer header types).
/// The cooked headers name ARPHRD_LOOPBACK (772), as a collector host's loopback does.
fn rewrap(frames: &[Vec<u8>], link_type: DataLink) -> Vec<Vec<u8>> {
    frames
        .iter()
        .map(|f| {
            let (ethertype, payload) = (&f[12..14], &f[14..]);
            let header: Vec<u8> = match link_type {
                // Packet type (host), ARPHRD, address length, address (8), protocol type.
                DataLink::LINUX_SLL => {
                    [&[0, 0, 0x03, 0x04, 0, 6][..], &f[6..12], &[0, 0], ethertype].concat()
                }
                // Protocol type, reserved, interface index, ARPHRD, packet type, address
                // length, address (8).
                DataLink::LINUX_SLL2 => [
                    ethertype,
                    &[0, 0, 0, 0, 0, 1, 0x03, 0x04, 0, 6],
                    &f[6..12],
                    &[0, 0],
                ]
                .concat(),
                _ => Vec::new(),
            };
            [header, payload.to_vec()].concat()
        })
        .collect()
}

/// A dump's JSON with what differs between link types taken out: the frame's length, the
/// `link` key and offsets (checked apart), and error messages (which name offsets).
fn without_link(v: &serde_json::Value) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("offset");
                m.remove("message");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("len");
        m.remove("link");
        m.remove("packet_type");
    }
    strip(&mut v);
    v
}

fn dump_json(file: &Path) -> (Vec<serde_json::Value>, String) {
    let out = run(bin().args(["dump", "--format", "json"]).arg(file));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let frames = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (frames, stderr.replace(&file.display().to_string(), "FILE"))
}

/// Captures taken with `tcpdump -i any` (Linux cooked v1 and v2) and raw-IP captures hold the
/// same reports and INT as Ethernet ones: `intscope dump` shows each frame as it shows the
/// Ethernet original (offsets moved by the link header's length), and `collect --replay`
/// counts and decodes the same. Before, every frame of them was counted "not ethernet" and no
/// report was read.
#[test]
fn cooked_and_raw_ip_captures_read_as_their_ethernet_originals() {
    let frames = sample_frames();
    let eth = Temp::pcap("link-eth.pcap", &whole(&frames));
    let (eth_json, eth_stderr) = dump_json(&eth.0);
    let (eth_stats, eth_replay) = replay(&eth.0);
    let eth_line = replayed(&eth_replay).replace(&eth.0.display().to_string(), "FILE");
    let summary = |line: &str| line.rsplit_once(", ").map(|(a, _)| a.to_string()).unwrap();
    assert_eq!(eth_stats["ingest"]["reports_decoded"], 3);
    assert_eq!(
        eth_json
            .iter()
            .filter(|v| v.get("report").is_some())
            .count(),
        3
    );
    assert_eq!(
        eth_json.iter().filter(|v| v.get("int").is_some()).count(),
        4
    );
    for (link_type, key, header) in [
        (DataLink::LINUX_SLL, "linux_sll", 16i64),
        (DataLink::LINUX_SLL2, "linux_sll2", 20),
        (DataLink::RAW, "raw", 0),
        (DataLink::IPV4, "ipv4", 0),
    ] {
        let file = Temp::pcap_of(
            &format!("link-{key}.pcap"),
            link_type,
            &whole(&rewrap(&frames, link_type)),
        );
        let (json, stderr) = dump_json(&file.0);
        assert_eq!(stderr, eth_stderr, "{key}");
        assert_eq!(json.len(), eth_json.len());
        for (v, e) in json.iter().zip(&eth_json) {
            assert_eq!(v["link"], key, "{v}");
            assert_eq!(without_link(v), without_link(e), "{key}");
            assert_eq!(
                v["len"].as_i64().unwrap(),
                e["len"].as_i64().unwrap() - 14 + header
            );
            if let Some(off) = e["int"]["offset"].as_i64() {
                assert_eq!(v["int"]["offset"].as_i64(), Some(off - 14 + header), "{v}");
            }
            if let Some(off) = e["error"]["offset"].as_i64() {
                assert_eq!(
                    v["error"]["offset"].as_i64(),
                    Some(off - 14 + header),
                    "{v}"
                );
            }
        }
        let (stats, stderr) = replay(&file.0);
        let line = replayed(&stderr).replace(&file.0.display().to_string(), "FILE");
        assert_eq!(summary(&line), summary(&eth_line), "{key}");
        assert_eq!(stats["ingest"], eth_stats["ingest"], "{key}");
    }
    // `tcpdump -i any` on loopback (ARPHRD 772, as rewrap writes) records each packet twice:
    // sent (packet type 4) and received (0). dump shows both with their packet type; a replay
    // replays the received copy alone and counts the sent one apart, so each report datagram
    // counts once. Before, every report was ingested twice and seen as a sequence duplicate.
    for link_type in [DataLink::LINUX_SLL, DataLink::LINUX_SLL2] {
        let at = if link_type == DataLink::LINUX_SLL {
            1
        } else {
            10
        };
        let single = rewrap(&frames, link_type);
        let twice: Vec<Vec<u8>> = single
            .iter()
            .flat_map(|f| {
                let mut out = f.clone();
                out[at] = 4;
                [out, f.clone()]
            })
            .collect();
        let file = Temp::pcap_of("link-loopback.pcap", link_type, &whole(&twice));
        let (json, _) = dump_json(&file.0);
        assert_eq!(json.len(), 2 * frames.len());
        for (i, v) in json.iter().enumerate() {
            assert_eq!(v["packet_type"], if i % 2 == 0 { 4 } else { 0 }, "{v}");
        }
        let (stats, stderr) = replay(&file.0);
        let line = replayed(&stderr);
        assert!(
            line.contains(&format!(
                "{} frames, 3 report datagrams, {} other frames",
                2 * frames.len(),
                frames.len() - 3
            )) && line.contains(&format!(
                "loopback outgoing copies, not replayed: {}",
                frames.len()
            )),
            "{line}"
        );
        assert_eq!(
            stats["ingest"], eth_stats["ingest"],
            "{link_type:?}: {line}"
        );
    }
    // A non-IP cooked frame (ARP) is other traffic; a cooked header cut short is counted by
    // reason.
    let mut arp = rewrap(&frames[..1], DataLink::LINUX_SLL);
    arp[0][14..16].copy_from_slice(&[0x08, 0x06]);
    arp.push(arp[0][..10].to_vec());
    let file = Temp::pcap_of("link-arp.pcap", DataLink::LINUX_SLL, &whole(&arp));
    let (json, stderr) = dump_json(&file.0);
    assert_eq!(json[0]["protocol"], 0x0806, "{}", json[0]);
    assert!(json[0].get("error").is_none() && json[0].get("ip").is_none());
    assert!(
        stderr.contains("1 of 2 frames not decoded whole (link header 1)"),
        "{stderr}"
    );
    let (_, stderr) = replay(&file.0);
    let line = replayed(&stderr);
    assert!(
        line.contains("2 frames, 0 report datagrams, 1 other frames"),
        "{line}"
    );
    assert!(
        line.contains("1 frames undecodable, not replayed (link header 1)"),
        "{line}"
    );
}

/// An IPv6 report datagram: the sample's IPv4 report frame `f` with an IPv6 header instead,
/// and a Fragment extension header whose offset/M word is `offset_m` when given.
fn ipv6_report(f: &[u8], offset_m: Option<u16>) -> Vec<u8> {
    let udp = &f[34..];
    let frag = offset_m.map_or(Vec::new(), |w| {
        [vec![17, 0], w.to_be_bytes().to_vec(), vec![0, 0, 0, 9]].concat()
    });
    let mut ip6 = vec![0x60, 0, 0, 0];
    ip6.extend_from_slice(&((frag.len() + udp.len()) as u16).to_be_bytes());
    ip6.extend_from_slice(&[if frag.is_empty() { 17 } else { 44 }, 64]);
    ip6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    ip6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    [&f[..12], &[0x86, 0xdd], &ip6, &frag, udp].concat()
}

/// IPv6 fragments (RFC 8200 §4.5) are counted undecodable as IPv4 ones are: a replay does not
/// reassemble, a later fragment holds no UDP header and a first one only part of the datagram.
/// Before, both were replayed as whole report datagrams.
#[test]
fn replay_counts_ipv6_fragments_as_undecodable() {
    let frames = sample_frames();
    let records = [
        ipv6_report(&frames[7], None),
        ipv6_report(&frames[7], Some(0)),
        ipv6_report(&frames[7], Some(1)),
        ipv6_report(&frames[7], Some(181 << 3)),
    ];
    let file = Temp::pcap("v6-fragments.pcap", &whole(&records));
    let (stats, stderr) = replay(&file.0);
    let line = replayed(&stderr);
    assert!(
        line.contains("4 frames, 2 report datagrams, 0 other frames"),
        "{line}"
    );
    assert!(
        line.contains("2 frames undecodable, not replayed (ipv6 fragment 2)"),
        "{line}"
    );
    let ingest = &stats["ingest"];
    assert_eq!(ingest["datagrams_accepted"], 2, "{ingest}");
    assert_eq!(ingest["reports_decoded"], 2, "{ingest}");
    // The same in IPv6 and raw-IP captures (RAW tells IPv6 from IPv4 by the version) and a
    // cooked one.
    for link_type in [DataLink::IPV6, DataLink::RAW, DataLink::LINUX_SLL2] {
        let file = Temp::pcap_of(
            "v6-link.pcap",
            link_type,
            &whole(&rewrap(&records, link_type)),
        );
        let (again, stderr) = replay(&file.0);
        let l = replayed(&stderr);
        assert!(
            l.contains("4 frames, 2 report datagrams, 0 other frames"),
            "{l}"
        );
        assert!(l.contains("(ipv6 fragment 2)"), "{l}");
        assert_eq!(again["ingest"], stats["ingest"], "{link_type:?}");
    }
}

/// RFC 768: a UDP length under 8, or past what the IP Total Length leaves, is no datagram:
/// `intscope dump` says so (udp bad-length) instead of showing reports read from it.
#[test]
fn dump_shows_no_reports_from_an_impossible_udp_length() {
    let frames = sample_frames();
    let report = frames[7].clone();
    let ip_payload = usize::from(u16::from_be_bytes([report[16], report[17]])) - 20;
    let mut short = report.clone();
    short[38..40].copy_from_slice(&4u16.to_be_bytes());
    let mut long = report.clone();
    long[38..40].copy_from_slice(&((ip_payload + 1) as u16).to_be_bytes());
    // Padding after the IP packet does not make room for a longer UDP length.
    long.extend_from_slice(&[0; 8]);
    let file = Temp::pcap("udp-len.pcap", &whole(&[report, short, long]));
    let (json, stderr) = dump_json(&file.0);
    assert!(json[0].get("report").is_some(), "{}", json[0]);
    for v in &json[1..] {
        assert!(v.get("report").is_none(), "{v}");
        assert_eq!(v["error"]["layer"], "udp", "{v}");
        assert_eq!(v["error"]["kind"], "bad-length", "{v}");
    }
    assert!(
        stderr.contains("2 of 3 frames not decoded whole (udp bad-length 2)"),
        "{stderr}"
    );
}

/// A report datagram larger than `recv_slot` is what the live path cannot take whole (the
/// kernel cuts it to the slot): a replay counts it received and discarded `oversize` as the
/// live path does, instead of decoding it.
#[test]
fn replay_counts_datagrams_over_recv_slot_as_oversize() {
    let frames = sample_frames();
    let file = Temp::pcap("oversize.pcap", &whole(&frames[7..10]));
    let (stats, stderr) = replay_with(&file.0, &["--recv-slot", "64"]);
    let ingest = &stats["ingest"];
    assert_eq!(ingest["datagrams_received"], 3, "{ingest}");
    assert_eq!(ingest["discarded"]["oversize"], 3, "{ingest}");
    assert_eq!(ingest["reports_decoded"], 0, "{ingest}");
    assert!(
        replayed(&stderr).contains("3 report datagrams larger than recv_slot (64 bytes)"),
        "{stderr}"
    );
    // The largest of them (104 bytes) fits a 104-byte slot: all decoded.
    let (stats, _) = replay_with(&file.0, &["--recv-slot", "104"]);
    assert_eq!(stats["ingest"]["reports_decoded"], 3, "{stats}");
    assert_eq!(stats["ingest"]["discarded"]["oversize"], 0, "{stats}");
    // A live run of the same datagrams counts the same.
    let (child, http, listen) = collect(&["--no-store", "--recv-slot", "64"]);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for f in &frames[7..10] {
        let udp_len = usize::from(u16::from_be_bytes([f[38], f[39]]));
        sock.send_to(&f[42..34 + udp_len], &listen).unwrap();
    }
    let deadline = Instant::now() + DEADLINE;
    let live = loop {
        let out = Command::new("curl")
            .args([
                "-sf",
                "--max-time",
                "10",
                &format!("http://{http}/api/stats"),
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if v["ingest"]["datagrams_received"] == 3 {
            break v["ingest"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the live run did not receive 3: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    stop(child);
    for key in [
        "datagrams_received",
        "datagrams_accepted",
        "reports_decoded",
        "discarded",
    ] {
        assert_eq!(
            live[key], ingest[key],
            "{key}: live {live}, replay {ingest}"
        );
    }
}
