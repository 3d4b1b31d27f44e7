//! Damaged captures end: `intscope dump` and `intscope collect --replay` on captures cut short,
//! bit-flipped, or with pcapng blocks of odd or impossible lengths print (or serve) every frame
//! before the damage, name the file, the frame and the byte offset, and stop.
//!
//! Every run has a deadline: a reader that loops fails the test instead of hanging it.

mod common;

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use common::{DUMP_SAMPLE_JSON, Temp, bin, repo};
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;

/// Longest any one run may take (the whole sample dumps in milliseconds).
const DEADLINE: Duration = Duration::from_secs(20);

fn sample() -> Vec<u8> {
    std::fs::read(repo("examples/sample.pcap")).unwrap()
}

impl Temp {
    /// A file of `bytes`, removed with its folder when the `Temp` is dropped.
    fn new(name: &str, bytes: &[u8]) -> Temp {
        let t = Temp::path(name);
        std::fs::write(&t.0, bytes).unwrap();
        t
    }
}

/// The exit status of `child`, polled every `poll`; `None` once [`DEADLINE`] has passed, by
/// which time the child is killed and reaped so that no test leaves a process behind.
fn exit_within_deadline(child: &mut Child, poll: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(poll);
    }
}

/// Runs `cmd` with stdout and stderr in files, killing it and failing at the deadline.
fn run_with_deadline(cmd: &mut Command) -> Output {
    let out = Temp::new("stdout", b"");
    let err = Temp::new("stderr", b"");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out.0).unwrap())
        .stderr(std::fs::File::create(&err.0).unwrap())
        .spawn()
        .unwrap();
    let Some(status) = exit_within_deadline(&mut child, Duration::from_millis(2)) else {
        let head: String = std::fs::read_to_string(&err.0)
            .unwrap_or_default()
            .chars()
            .take(400)
            .collect();
        panic!("{cmd:?} did not end within {DEADLINE:?}: {head}");
    };
    Output {
        status,
        stdout: std::fs::read(&out.0).unwrap(),
        stderr: std::fs::read(&err.0).unwrap(),
    }
}

fn dump(file: &Path) -> (Option<i32>, Vec<String>, String) {
    let out = run_with_deadline(bin().args(DUMP_SAMPLE_JSON).arg(file));
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Byte offsets where the sample's records start, and the end of the file (a classic big-endian
/// pcap: 24-byte header, then 16-byte record headers with the captured length at offset 8).
fn record_starts(pcap: &[u8]) -> Vec<usize> {
    let mut at = 24;
    let mut starts = vec![];
    while at < pcap.len() {
        starts.push(at);
        let incl = u32::from_be_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
    }
    assert_eq!(at, pcap.len(), "the sample is whole");
    starts.push(at);
    starts
}

#[test]
fn a_capture_cut_by_one_byte_ends_after_every_whole_frame() {
    let whole = sample();
    let (code, full, _) = dump(&Temp::new("whole.pcap", &whole).0);
    assert_eq!(code, Some(0));
    assert_eq!(full.len(), 11);
    let cut = Temp::new("cut.pcap", &whole[..whole.len() - 1]);
    let (code, lines, stderr) = dump(&cut.0);
    assert_eq!(code, Some(1), "a damaged capture is not a clean one");
    assert_eq!(
        lines,
        full[..10],
        "the ten whole frames, as in the whole file"
    );
    let last = *record_starts(&whole).iter().rev().nth(1).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for part in [
        cut.0.display().to_string(),
        "cut short in the middle of frame 11".into(),
        format!("byte offset {last}"),
    ] {
        assert!(stderr.contains(&part), "{part:?} not in {stderr}");
    }
}

/// Property: every cut of the sample ends, prints exactly the frames wholly before the cut
/// (identical to the whole file's), and exits 0 only when the cut falls between records.
#[test]
fn every_truncation_of_the_sample_ends_with_the_frames_before_it() {
    let whole = sample();
    let (_, full, _) = dump(&Temp::new("whole.pcap", &whole).0);
    let starts = record_starts(&whole);
    for len in 0..whole.len() {
        let t = Temp::new("t.pcap", &whole[..len]);
        let (code, lines, stderr) = dump(&t.0);
        let complete = starts
            .iter()
            .filter(|&&s| s <= len)
            .count()
            .saturating_sub(1);
        assert_eq!(lines, full[..complete], "cut at {len}");
        if len >= 24 && starts.contains(&len) {
            assert_eq!(code, Some(0), "cut at {len}, a record boundary: {stderr}");
            assert!(stderr.is_empty(), "{stderr}");
        } else {
            assert_eq!(code, Some(1), "cut at {len}");
            assert_eq!(stderr.lines().count(), 1, "cut at {len}: {stderr}");
            if len >= 24 {
                let at = starts[complete];
                assert!(
                    stderr.contains(&format!("frame {} at byte offset {at}", complete + 1)),
                    "cut at {len}: {stderr}"
                );
            }
        }
    }
}

/// A record whose captured length was hit by a flipped bit: the frames before it, then one error
/// at its offset. High bits make an impossible length (over the 16 MiB bound), low bits
/// misalign what follows; either way the dump ends.
#[test]
fn bit_flipped_record_lengths_end_at_the_record() {
    let whole = sample();
    let (_, full, _) = dump(&Temp::new("whole.pcap", &whole).0);
    let starts = record_starts(&whole);
    for (i, &at) in starts[..starts.len() - 1].iter().enumerate() {
        for bit in 0..32 {
            let mut b = whole.clone();
            let field = at + 8;
            let word = u32::from_be_bytes(b[field..field + 4].try_into().unwrap()) ^ (1 << bit);
            b[field..field + 4].copy_from_slice(&word.to_be_bytes());
            let (code, lines, stderr) = dump(&Temp::new("flip.pcap", &b).0);
            assert!(
                lines.len() >= i && lines[..i] == full[..i],
                "frames before record {i} unchanged (bit {bit})"
            );
            if code == Some(0) {
                continue; // a shorter length whose misread tail happens to parse as records
            }
            assert_eq!(code, Some(1), "record {i} bit {bit}");
            assert!(stderr.contains("byte offset"), "{stderr}");
            if bit >= 24 {
                assert_eq!(lines.len(), i, "record {i} bit {bit}: {stderr}");
                assert!(
                    stderr.contains(&format!("frame {} at byte offset {at}", i + 1)),
                    "record {i} bit {bit}: {stderr}"
                );
                assert!(stderr.contains("maximum"), "{stderr}");
            }
        }
    }
}

/// Deterministic pseudo-random single and multiple bit flips anywhere in the file: every run
/// ends, exits 0 or 1, prints JSON frames numbered from 1 and says where the damage is when it
/// stops early (after the count of frames not decoded whole, if any).
#[test]
fn random_bit_flips_always_end() {
    let whole = sample();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for run in 0..300 {
        let mut b = whole.clone();
        for _ in 0..1 + run % 4 {
            let bit = next() as usize % (b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
        }
        let (code, lines, stderr) = dump(&Temp::new("rnd.pcap", &b).0);
        for (i, l) in lines.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["frame"], i as u64 + 1, "run {run}");
        }
        match code {
            Some(0) => assert_eq!(lines.len(), 11, "run {run}"),
            // The damage, after the count of frames not decoded whole when some were not.
            Some(1) => {
                let err: Vec<&str> = stderr.lines().collect();
                assert!(
                    err.len() == 1
                        || (err.len() == 2 && err[0].contains("frames not decoded whole")),
                    "run {run}: {stderr}"
                );
                assert!(
                    err.last().unwrap().starts_with("intscope: "),
                    "run {run}: {stderr}"
                );
            }
            other => panic!("run {run}: exit {other:?}: {stderr}"),
        }
    }
}

/// The sample's frames as a pcapng (little-endian: section, interface, enhanced packets), and
/// the offsets of its blocks.
fn sample_pcapng() -> (Vec<u8>, Vec<usize>) {
    let whole = sample();
    let starts = record_starts(&whole);
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 65535,
        options: vec![],
    })
    .unwrap();
    for win in starts.windows(2) {
        let rec = &whole[win[0]..win[1]];
        let secs = u32::from_be_bytes(rec[0..4].try_into().unwrap());
        let micros = u32::from_be_bytes(rec[4..8].try_into().unwrap());
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::new(u64::from(secs), micros * 1000),
            original_len: (rec.len() - 16) as u32,
            data: rec[16..].into(),
            options: vec![],
        })
        .unwrap();
    }
    let bytes = w.into_inner();
    assert_eq!(
        bytes[8..12],
        [0x4d, 0x3c, 0x2b, 0x1a],
        "little-endian section"
    );
    let mut blocks = vec![];
    let mut at = 0;
    while at < bytes.len() {
        blocks.push(at);
        at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    blocks.push(at);
    (bytes, blocks)
}

#[test]
fn pcapng_cut_anywhere_ends_with_the_frames_before_it() {
    let (ng, blocks) = sample_pcapng();
    let (code, full, stderr) = dump(&Temp::new("whole.pcapng", &ng).0);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(full.len(), 11);
    // Blocks 0 and 1 are the section and the interface; frame k is block k + 2.
    for len in blocks[2]..ng.len() {
        let (code, lines, stderr) = dump(&Temp::new("t.pcapng", &ng[..len]).0);
        let complete = blocks.iter().filter(|&&s| s <= len).count() - 3;
        assert_eq!(lines, full[..complete], "cut at {len}");
        if blocks.contains(&len) {
            assert_eq!(code, Some(0), "cut at {len}: {stderr}");
        } else {
            assert_eq!(code, Some(1), "cut at {len}");
            let at = blocks[complete + 2];
            assert!(
                stderr.contains(&format!("frame {} at byte offset {at}", complete + 1)),
                "cut at {len}: {stderr}"
            );
        }
    }
}

/// `ng` with the little-endian `value` written at each of `offsets` (a block's leading length
/// at `at + 4`, its trailing copy, or a field inside it).
fn with_u32_le(ng: &[u8], offsets: &[usize], value: u32) -> Vec<u8> {
    let mut b = ng.to_vec();
    for &o in offsets {
        b[o..o + 4].copy_from_slice(&value.to_le_bytes());
    }
    b
}

/// pcapng blocks whose lengths are odd, too small, disagree with their trailer or are
/// impossibly large: the frames before the bad block, then one error at its offset.
#[test]
fn pcapng_bad_block_lengths_end_at_the_block() {
    let (ng, blocks) = sample_pcapng();
    let (_, full, _) = dump(&Temp::new("whole.pcapng", &ng).0);
    let k = 5; // the block of frame 4
    let at = blocks[k];
    let len = (blocks[k + 1] - at) as u32;
    let trailer = blocks[k + 1] - 4;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("odd", with_u32_le(&ng, &[at + 4, trailer], len + 1), "% 4"),
        (
            "odd-leading-only",
            with_u32_le(&ng, &[at + 4], len + 2),
            "corrupt record",
        ),
        (
            "trailer-disagrees",
            with_u32_le(&ng, &[trailer], len + 4),
            "initial_length != trailer_length",
        ),
        (
            "too-small",
            with_u32_le(&ng, &[at + 4, trailer], 8),
            "initial_len < 12",
        ),
        (
            "zero",
            with_u32_le(&ng, &[at + 4, trailer], 0),
            "initial_len < 12",
        ),
        (
            "huge",
            with_u32_le(&ng, &[at + 4, trailer], 0xffff_fff0),
            "maximum",
        ),
        (
            "past-the-end",
            with_u32_le(&ng, &[at + 4, trailer], 1 << 20),
            "cut short",
        ),
        (
            "packet-longer-than-block",
            // EPB body: interface, ts high, ts low, captured length.
            with_u32_le(&ng, &[at + 20], len * 2),
            "corrupt record",
        ),
    ];
    for (name, bytes, says) in cases {
        let (code, lines, stderr) = dump(&Temp::new(&format!("{name}.pcapng"), &bytes).0);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert_eq!(lines, full[..k - 2], "{name}: the frames before the block");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("frame {} at byte offset {at}", k - 1)),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(says), "{name}: {says:?} not in {stderr}");
    }
}

/// A malformed INT layer keeps the IP, L4 and flow layers decoded before it, with the error
/// (layer, offset) after them, in JSON and in text.
#[test]
fn a_malformed_layer_keeps_the_layers_before_it() {
    let (_, lines, _) = dump(Path::new(&repo("examples/sample.pcap")));
    let f: serde_json::Value = serde_json::from_str(&lines[10]).unwrap();
    assert_eq!(f["ip"]["src"], "10.0.1.1");
    assert_eq!(f["l4"]["dst_port"], 80);
    assert_eq!(f["flow"]["src_port"], 5000);
    assert_eq!(f["error"]["layer"], "int-shim");
    assert_eq!(f["error"]["offset"], 54);
    assert!(f.get("int").is_none());
    let keys: Vec<_> = f.as_object().unwrap().keys().cloned().collect();
    let pos = |k: &str| keys.iter().position(|x| x == k).unwrap();
    assert!(
        pos("flow") < pos("error"),
        "the error where decoding stopped"
    );
    let out = run_with_deadline(
        bin()
            .args(["dump", "--int-udp-port", "17768"])
            .arg(repo("examples/sample.pcap")),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let frame11 = &text[text.find("Frame 11:").unwrap()..];
    let ip = frame11.find("Internet Protocol").unwrap();
    let l4 = frame11.find("Transport").unwrap();
    let bad = frame11
        .find("[Malformed: INT shim header at byte 54")
        .unwrap();
    assert!(ip < l4 && l4 < bad, "{frame11}");
}

/// `collect --replay` on a capture cut short serves the reports it read (the sample's three)
/// and reports the damage with its frame and offset instead of aborting.
#[test]
fn replay_of_a_cut_capture_serves_what_it_read() {
    let whole = sample();
    let cut = Temp::new("cut-replay.pcap", &whole[..whole.len() - 1]);
    let (stats, stderr) = common::replay_served(&cut.0, &[]);
    assert_eq!(
        stats["ingest"]["datagrams_received"], 3,
        "the three report frames before the damage"
    );
    let last = *record_starts(&whole).iter().rev().nth(1).unwrap();
    assert!(
        stderr.contains(&format!("warning: {}", cut.0.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "1 damaged record (frame 11 at byte offset {last}), 101 bytes not read"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("replayed"), "{stderr}");
}
