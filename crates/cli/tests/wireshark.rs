//! The Wireshark dissector (`wireshark/intscope.lua`) against `intscope dump`: for the sample
//! capture, the interop corpus (`$INTSCOPE_SHARED/interop`, read in place) and captures made by
//! `intscope node` and `intscope sim`, tshark with the plugin must find, frame by frame, the INT
//! blocks and telemetry reports dump finds, with the same field values; valid frames carry no
//! error, malformed ones are marked with expert info.
//!
//! tshark is required: CI installs it (`.ci/run`); a missing tshark fails these tests.
//!
//! One relaxed comparison remains: [`RELAX_L4_PROTOCOL_MISMATCH`] (a limitation of Wireshark's
//! TCP dissector, not of either decoder); the
//! legacy formats (INT v1.0, v0.5 with its bit 6
//! split as ONOS fabric.p4's `int_q_congestion_t`, the 2016 format with its BOS bits) compare
//! field by field like every other block (`legacy_frames_match_dump`, `spec_2016_example`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Rng, Temp, bin, host_traffic, interop_dir, repo, succeed, tempdir, write_pcap};
use serde_json::{Map, Value};

/// CableLabs' IPv6 vectors keep IP next header = TCP in front of the inserted UDP header: dump
/// re-reads the segment as UDP (`l4-protocol-mismatch`), Wireshark's TCP dissector takes it and
/// the plugin never sees the INT behind it. Not an issue-22 item: a known limitation.
const RELAX_L4_PROTOCOL_MISMATCH: bool = true;

fn plugin() -> String {
    repo("wireshark/intscope.lua")
}

/// `frames` written to `<name>.pcap` in a directory of its own (removed with the `Temp`), for
/// both tools to read.
fn frames_pcap(name: &str, frames: &[Vec<u8>]) -> Temp {
    let pcap = Temp::path(&format!("{name}.pcap"));
    write_pcap(&pcap, frames);
    pcap
}

/// tshark must be there: a silent skip would let the dissector rot.
fn require_tshark() {
    let ok = Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "tshark is required by the Wireshark dissector tests: install it \
         (DEBIAN_FRONTEND=noninteractive apt-get install -y tshark; .ci/run does)"
    );
}

/// Detection settings given to both tools.
#[derive(Default, Clone)]
struct Opts {
    int_udp_ports: Vec<u16>,
    report_ports: Vec<u16>,
    gre_proto: Option<u16>,
    probe_marker: Option<String>,
    domains: Option<String>,
}

impl Opts {
    /// The sample capture's settings: INT on UDP port 17768 and GRE protocol 0x4569.
    fn sample() -> Opts {
        Opts {
            int_udp_ports: vec![17768],
            gre_proto: Some(0x4569),
            ..Opts::default()
        }
    }

    fn dump_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        for p in &self.int_udp_ports {
            a.extend(["--int-udp-port".to_string(), p.to_string()]);
        }
        for p in &self.report_ports {
            a.extend(["--report-port".to_string(), p.to_string()]);
        }
        if let Some(g) = self.gre_proto {
            a.extend(["--int-gre-proto".to_string(), format!("{g:#x}")]);
        }
        if let Some(d) = &self.domains {
            a.extend(["--domains".to_string(), d.clone()]);
        }
        if let Some(m) = &self.probe_marker {
            a.extend(["--probe-marker".to_string(), m.clone()]);
        }
        a
    }
    fn tshark_prefs(&self) -> Vec<String> {
        let join = |v: &[u16]| {
            v.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut a = vec![
            format!("int.udp_ports:{}", join(&self.int_udp_ports)),
            // An empty range would keep the default; dump's default is 32766 too.
            format!(
                "intrep.udp_ports:{}",
                if self.report_ports.is_empty() {
                    "32766".to_string()
                } else {
                    join(&self.report_ports)
                }
            ),
            // DSCP-marked INT must reach the heuristic before port dissectors (docs/wireshark.md).
            "tcp.try_heuristic_first:TRUE".to_string(),
            "udp.try_heuristic_first:TRUE".to_string(),
            // The synthetic captures repeat sequence numbers: TCP's analysis would call those
            // retransmissions and keep their payload from the subdissectors.
            "tcp.analyze_sequence_numbers:FALSE".to_string(),
            "tcp.desegment_tcp_streams:FALSE".to_string(),
        ];
        if let Some(g) = self.gre_proto {
            a.push(format!("int.gre_proto:{g:#x}"));
        }
        if let Some(d) = &self.domains {
            a.push(format!("int.domains:{d}"));
        }
        if let Some(m) = &self.probe_marker {
            a.push(format!("int.probe_marker:{m}"));
        }
        a
    }
}

fn dump(pcap: &Path, opts: &Opts) -> Vec<Value> {
    let out = succeed(
        bin()
            .args(["dump", "--format", "json"])
            .args(opts.dump_args())
            .arg(pcap),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// tshark's JSON tree of every frame, with the plugin; stderr must be clean of Lua errors.
fn tshark(pcap: &Path, opts: &Opts) -> Vec<Value> {
    require_tshark();
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"])
        .arg(pcap)
        .args(["-X", &format!("lua_script:{}", plugin())]);
    for p in opts.tshark_prefs() {
        cmd.args(["-o", &p]);
    }
    cmd.args(["-T", "json", "--no-duplicate-keys"]);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?}: {stderr}");
    assert!(
        !stderr.contains("Lua") && !stderr.contains("lua"),
        "tshark reported a Lua problem: {stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| f["_source"]["layers"].clone())
        .collect()
}

// ---- reading tshark's JSON ----

/// A key's values: `--no-duplicate-keys` merges repeated keys into arrays.
fn all<'a>(o: &'a Value, key: &str) -> Vec<&'a Value> {
    match o.get(key) {
        None => vec![],
        Some(Value::Array(a)) if !key.ends_with("_tree") || a.iter().all(Value::is_object) => {
            a.iter().collect()
        }
        Some(v) => vec![v],
    }
}

/// Every value of `key` anywhere under `v`, in document order.
fn find_all<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == key {
                    match x {
                        Value::Array(a) => out.extend(a.iter()),
                        _ => out.push(x),
                    }
                } else {
                    find_all(x, key, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| find_all(x, key, out)),
        _ => {}
    }
}

/// Every key anywhere under `v` (expert info fields, warnings).
fn keys_under(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                keys_under(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys_under(x, out)),
        _ => {}
    }
}

/// Fields of an object and of its subtrees (`*_tree`), except the subtrees named in `keep`.
fn flat(o: &Value, keep: &[&str]) -> Map<String, Value> {
    let mut m = Map::new();
    if let Value::Object(obj) = o {
        for (k, v) in obj {
            if keep.contains(&k.as_str()) {
                continue;
            }
            if k.ends_with("_tree") {
                for sub in all(o, k) {
                    for (k2, v2) in flat(sub, keep) {
                        m.entry(k2).or_insert(v2);
                    }
                }
            } else {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    m
}

/// A tshark value as a number: "0x9000", "17", "1" (booleans).
fn num(v: &Value) -> Option<u64> {
    let s = v.as_str()?;
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A dump value in tshark's terms: numbers, booleans as 0/1, strings.
fn same(dump: &Value, ts: &Value) -> bool {
    match dump {
        Value::Bool(b) => num(ts) == Some(u64::from(*b)),
        Value::Number(n) => num(ts) == n.as_u64(),
        Value::String(s) => ts.as_str() == Some(s.as_str()) || bytes_hex(ts).as_deref() == Some(s),
        _ => false,
    }
}

/// tshark bytes ("aa:bb") as dump's hex ("0xaabb").
fn bytes_hex(v: &Value) -> Option<String> {
    let s = v.as_str()?;
    if s.is_empty() {
        return Some("0x".into());
    }
    s.split(':')
        .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| format!("0x{}", s.replace(':', "")))
}

/// Collects mismatches for one frame.
struct Cmp {
    frame: String,
    errors: Vec<String>,
}

impl Cmp {
    fn fail(&mut self, what: String) {
        self.errors.push(format!("{}: {what}", self.frame));
    }
    fn field(&mut self, path: &str, dump: &Value, ts: Option<&Value>) {
        match ts {
            Some(t) if same(dump, t) => {}
            Some(t) => self.fail(format!("{path}: dump {dump}, tshark {t}")),
            None => self.fail(format!("{path}: dump {dump}, missing in tshark")),
        }
    }
}

fn type_number(name: &str, table: &[(&str, u64)]) -> Value {
    for (n, v) in table {
        if *n == name {
            return Value::from(*v);
        }
    }
    Value::from(
        name.rsplit('-')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(u64::MAX),
    )
}

/// Domain metadata: dump `{"raw": hex}` or `{name: value}` against the plugin's `*.ds` subtree.
fn cmp_domain(c: &mut Cmp, path: &str, dump: &Value, ds_tree: Option<&Value>, prefix: &str) {
    let Some(t) = ds_tree else {
        return c.fail(format!("{path}: dump {dump}, no domain metadata in tshark"));
    };
    let mut got = Map::new();
    if let Some(raw) = t.get(format!("{prefix}.ds_raw")) {
        got.insert(
            "raw".into(),
            Value::from(bytes_hex(raw).unwrap_or_default()),
        );
    }
    let names = all(t, &format!("{prefix}.ds_name"));
    let vals = all(t, &format!("{prefix}.ds_name_tree"));
    for (n, v) in names.iter().zip(vals.iter()) {
        let value = match v.get(format!("{prefix}.ds_value")) {
            Some(x) => Value::from(num(x).unwrap_or(u64::MAX)),
            None => Value::from(
                v.get(format!("{prefix}.ds_bytes"))
                    .and_then(bytes_hex)
                    .unwrap_or_default(),
            ),
        };
        got.insert(n.as_str().unwrap_or("").to_string(), value);
    }
    if &Value::Object(got.clone()) != dump {
        c.fail(format!("{path}: dump {dump}, tshark {got:?}"));
    }
}

/// One hop's (or report's) metadata. `prefix`: `int.hop` or `intrep.md`.
fn cmp_hop(c: &mut Cmp, path: &str, dump: &Value, ts: &Value, prefix: &str) {
    let unavailable: Vec<String> = all(ts, &format!("{prefix}.unavailable"))
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let Some(d) = dump.as_object() else {
        return c.fail(format!("{path}: not an object"));
    };
    let mut expected: Vec<String> = Vec::new();
    for (k, v) in d {
        let p = format!("{path}.{k}");
        if k == "domain" {
            cmp_domain(c, &p, v, ts.get(format!("{prefix}.ds_tree")), prefix);
            continue;
        }
        expected.push(k.clone());
        if v.is_null() {
            if !unavailable.iter().any(|u| u == k) {
                c.fail(format!("{p}: dump null (unavailable), tshark not marked"));
            }
        } else {
            c.field(&p, v, ts.get(format!("{prefix}.{k}")));
        }
    }
    // Nothing more in tshark than in dump.
    if let Value::Object(m) = ts {
        for k in m.keys() {
            let Some(name) = k.strip_prefix(&format!("{prefix}.")) else {
                continue;
            };
            if name.starts_with("ds") || name == "unavailable" {
                continue;
            }
            if !expected.iter().any(|e| e == name) {
                c.fail(format!("{path}: tshark has {k}, dump has not"));
            }
        }
    }
    for u in &unavailable {
        if !expected.contains(u) {
            c.fail(format!(
                "{path}: tshark marks {u} unavailable, dump has no such field"
            ));
        }
    }
}

const INT_TYPES: [(&str, u64); 3] = [("md", 1), ("destination", 2), ("mx", 3)];

fn cmp_int(c: &mut Cmp, path: &str, dump: &Value, ts: &Value) {
    let f = flat(ts, &["int.hop_tree", "int.hop.ds_tree"]);
    let Some(d) = dump.as_object() else { return };
    for (k, v) in d {
        let p = format!("{path}.{k}");
        match k.as_str() {
            "offset" => {}
            "type" => c.field(
                &p,
                &type_number(v.as_str().unwrap_or(""), &INT_TYPES),
                f.get("int.type"),
            ),
            "shim" | "tail" => {
                for (k2, v2) in v.as_object().unwrap() {
                    c.field(&format!("{p}.{k2}"), v2, f.get(&format!("int.{k}.{k2}")));
                }
            }
            "hops" => {
                let dh = v.as_array().unwrap();
                let th = all(ts, "int.hop_tree");
                if dh.len() != th.len() {
                    c.fail(format!("{p}: dump {} hops, tshark {}", dh.len(), th.len()));
                }
                for (i, (a, b)) in dh.iter().zip(th).enumerate() {
                    cmp_hop(c, &format!("{p}[{i}]"), a, b, "int.hop");
                }
            }
            "domain" => cmp_domain(c, &p, v, ts.get("int.hop.ds_tree"), "int.hop"),
            "stack_error" => {
                let mut keys = Vec::new();
                keys_under(ts, &mut keys);
                if !keys.iter().any(|k| k == "int.malformed") {
                    c.fail(format!("{p}: dump {v}, tshark has no int.malformed"));
                }
            }
            _ => c.field(&p, v, f.get(&format!("int.{k}"))),
        }
    }
}

const REP_TYPES: [(&str, u64); 3] = [("inner-only", 0), ("int", 1), ("ioam", 2)];
const IN_TYPES: [(&str, u64); 6] = [
    ("none", 0),
    ("tlv", 1),
    ("ds-extension", 2),
    ("ethernet", 3),
    ("ipv4", 4),
    ("ipv6", 5),
];

fn has_key(ts: &Value, key: &str) -> bool {
    let mut keys = Vec::new();
    keys_under(ts, &mut keys);
    keys.iter().any(|k| k == key)
}

fn cmp_individual(c: &mut Cmp, path: &str, dump: &Value, ts: &Value, offset: Option<&Value>) {
    let f = flat(
        ts,
        &["intrep.metadata", "intrep.tlv_tree", "intrep.md.ds_tree"],
    );
    for (k, v) in dump.as_object().unwrap() {
        let p = format!("{path}.{k}");
        match k.as_str() {
            "offset" => c.field(&p, v, offset),
            "rep_type" => c.field(
                &p,
                &type_number(v.as_str().unwrap(), &REP_TYPES),
                f.get("intrep.rep_type"),
            ),
            "in_type" => c.field(
                &p,
                &type_number(v.as_str().unwrap(), &IN_TYPES),
                f.get("intrep.in_type"),
            ),
            // A subtree item without a value: its children are the key's value.
            "metadata" => match ts.get("intrep.metadata") {
                Some(m) if m.is_object() => cmp_hop(c, &p, v, m, "intrep.md"),
                // No RepMdBits: an empty object in dump, an item without children in tshark.
                Some(_) if v.as_object().is_some_and(|o| o.is_empty()) => {}
                _ => c.fail(format!("{p}: missing in tshark")),
            },
            "tlvs" => {
                let dt = v.as_array().unwrap();
                let tt = all(ts, "intrep.tlv_tree");
                if dt.len() != tt.len() {
                    c.fail(format!("{p}: dump {} TLVs, tshark {}", dt.len(), tt.len()));
                }
                for (i, (a, b)) in dt.iter().zip(tt).enumerate() {
                    for (k2, v2) in a.as_object().unwrap() {
                        match k2.as_str() {
                            "inner" => {}
                            _ => c.field(
                                &format!("{p}[{i}].{k2}"),
                                v2,
                                b.get(format!("intrep.tlv.{k2}")),
                            ),
                        }
                    }
                }
            }
            "metadata_error" | "tlv_error" => {
                if !has_key(ts, "intrep.malformed") {
                    c.fail(format!("{p}: dump {v}, tshark has no intrep.malformed"));
                }
            }
            // Compared with the frame's other INT blocks and warnings.
            "inner" | "warnings" => {}
            _ => c.field(&p, v, f.get(&format!("intrep.{k}"))),
        }
    }
}

fn cmp_report(c: &mut Cmp, dump: &Value, ts: &Value) {
    let f = flat(ts, &["intrep.report_tree"]);
    for (k, v) in dump.as_object().unwrap() {
        let p = format!("report.{k}");
        match k.as_str() {
            "reports" => {
                let dr = v.as_array().unwrap();
                let tr = all(ts, "intrep.report_tree");
                let offsets = all(ts, "intrep.report");
                if dr.len() != tr.len() {
                    c.fail(format!(
                        "{p}: dump {} reports, tshark {}",
                        dr.len(),
                        tr.len()
                    ));
                }
                for (i, (a, b)) in dr.iter().zip(tr).enumerate() {
                    cmp_individual(c, &format!("{p}[{i}]"), a, b, offsets.get(i).copied());
                }
            }
            "drop" | "local" => {
                for (k2, v2) in v.as_object().unwrap() {
                    c.field(&format!("{p}.{k2}"), v2, f.get(&format!("intrep.sw.{k2}")));
                }
            }
            "rep_md_bits" => c.field(&p, v, f.get("intrep.v1_rep_md_bits")),
            "error" => {
                if !has_key(ts, "intrep.malformed") {
                    c.fail(format!("{p}: dump {v}, tshark has no intrep.malformed"));
                }
            }
            "inner" | "warnings" => {}
            _ => c.field(&p, v, f.get(&format!("intrep.{k}"))),
        }
    }
}

/// dump's INT blocks of a frame, in the order tshark dissects them.
fn dump_ints<'a>(frame: &'a Value, out: &mut Vec<&'a Value>) {
    for k in ["int", "int_stacked"] {
        if let Some(v) = frame.get(k) {
            out.push(v);
        }
    }
    // A report's own inner packet, then each individual report's, then each of its TLVs'.
    fn inner_ints<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        if let Some(i) = v.get("inner") {
            dump_ints(i, out);
        }
    }
    fn elements<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
        v.get(key).and_then(Value::as_array).into_iter().flatten()
    }
    if let Some(r) = frame.get("report") {
        inner_ints(r, out);
        for ir in elements(r, "reports") {
            inner_ints(ir, out);
            for t in elements(ir, "tlvs") {
                inner_ints(t, out);
            }
        }
    }
}

/// Warning codes anywhere in a dump frame, and whether any layer failed.
fn dump_notes(v: &Value, codes: &mut Vec<String>, error: &mut bool) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match k.as_str() {
                    "warnings" => {
                        for w in x.as_array().into_iter().flatten() {
                            codes.push(w["code"].as_str().unwrap().to_string());
                        }
                    }
                    "error" | "stack_error" | "metadata_error" | "tlv_error" => *error = true,
                    _ => dump_notes(x, codes, error),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| dump_notes(x, codes, error)),
        _ => {}
    }
}

/// Warnings about a report itself (not about INT inside its inner packet).
const REPORT_WARNINGS: [&str; 5] = [
    "main-contents-in-inner-only",
    "inner-type-mismatch",
    "report-length-extended",
    "v05-layout-version-1",
    "v1-report-length",
];

/// Warning codes Wireshark checks itself (checksums) or the plugin leaves to Wireshark's TCP/UDP.
const NOT_PLUGIN_WARNINGS: [&str; 3] = ["bad-l4-checksum", "bad-ip-checksum", "reserved-set"];

/// Compares every frame; returns how many carried INT or a report in dump.
fn compare(name: &str, pcap: &Path, opts: &Opts) -> usize {
    compare_with(name, pcap, opts, true)
}

/// `strict`: a frame dump decodes without error must carry no malformed mark at all (with cut
/// frames, Wireshark's own dissectors rightly mark the cut headers after INT that dump skips).
fn compare_with(name: &str, pcap: &Path, opts: &Opts, strict: bool) -> usize {
    let d = dump(pcap, opts);
    let t = tshark(pcap, opts);
    assert_eq!(d.len(), t.len(), "{name}: frame counts differ");
    let mut errors = Vec::new();
    let mut decoded = 0;
    for (df, tf) in d.iter().zip(&t) {
        let mut c = Cmp {
            frame: format!("{name} frame {}", df["frame"]),
            errors: Vec::new(),
        };
        let mut dints = Vec::new();
        dump_ints(df, &mut dints);
        let mut tints = Vec::new();
        find_all(tf, "int", &mut tints);
        // An INT item without an encapsulation only carries an error (dump: no `int` object).
        tints.retain(|i| i.get("int.encap").is_some());
        let l4_mismatch = df.to_string().contains("l4-protocol-mismatch");
        if dints.len() != tints.len() && !(l4_mismatch && RELAX_L4_PROTOCOL_MISMATCH) {
            c.fail(format!(
                "dump has {} INT blocks, tshark {}",
                dints.len(),
                tints.len()
            ));
        }
        for (i, (a, b)) in dints.iter().zip(&tints).enumerate() {
            cmp_int(&mut c, &format!("int[{i}]"), a, b);
            // Offsets in the frame: dump's are relative to the inner packet inside reports.
            if df.get("report").is_none() {
                c.field(
                    &format!("int[{i}].offset"),
                    &a["offset"],
                    b.get("int.offset"),
                );
            }
        }
        let mut treps = Vec::new();
        find_all(tf, "intrep", &mut treps);
        match (df.get("report"), treps.first()) {
            (Some(r), Some(tr)) if treps.len() == 1 => cmp_report(&mut c, r, tr),
            (None, None) => {}
            // dump drops the whole report on a malformed datagram; the plugin shows what it
            // could read, marked malformed.
            (None, Some(tr)) if df.get("error").is_some() && has_key(tr, "intrep.malformed") => {}
            (r, _) => c.fail(format!(
                "dump report {}, tshark {} reports",
                r.is_some(),
                treps.len()
            )),
        }
        if !dints.is_empty() || df.get("report").is_some() {
            decoded += 1;
        }
        // Warnings and errors.
        let (mut codes, mut error) = (Vec::new(), false);
        dump_notes(df, &mut codes, &mut error);
        codes.retain(|c| !NOT_PLUGIN_WARNINGS.contains(&c.as_str()));
        if l4_mismatch && RELAX_L4_PROTOCOL_MISMATCH {
            // The plugin never sees that INT block: only the report's own warnings compare.
            codes.retain(|c| REPORT_WARNINGS.contains(&c.as_str()));
        }
        // dump rejects a marked segment, a tunnel or report port with no payload at all (no
        // header to read); Wireshark calls no subdissector for an empty payload: nothing to mark.
        if df["error"]["available"] == 0 && df["error"]["offset"] == df["len"] {
            error = false;
        }
        // A VXLAN-GPE header without the P bit is Wireshark's VXLAN dissector's to judge (it
        // then hands nothing to the plugin); dump rejects it.
        if df["error"]["layer"] == "vxlan-gpe"
            && df["error"]["field"] == "P bit"
            && tints.is_empty()
        {
            error = false;
        }
        codes.sort();
        codes.dedup();
        let mut keys = Vec::new();
        keys_under(tf, &mut keys);
        let mut tcodes: Vec<String> = keys
            .iter()
            .filter_map(|k| {
                k.strip_prefix("int.warning.")
                    .or_else(|| k.strip_prefix("intrep.warning."))
            })
            .map(|c| c.replace('_', "-"))
            .collect();
        tcodes.sort();
        tcodes.dedup();
        if codes != tcodes {
            c.fail(format!("warnings: dump {codes:?}, tshark {tcodes:?}"));
        }
        let marked = keys
            .iter()
            .any(|k| k == "int.malformed" || k == "intrep.malformed" || k == "_ws.malformed");
        if keys
            .iter()
            .any(|k| k == "int.dissector_bug" || k.starts_with("_ws.lua.error"))
        {
            c.fail(format!("Lua error: {}", short(tf)));
        }
        // Any error-severity expert info counts (Wireshark's own, e.g. a bogus IP version in an
        // inner packet, as well as the plugin's).
        let mut severities = Vec::new();
        find_all(tf, "_ws.expert.severity", &mut severities);
        let error_expert = severities.iter().any(|v| num(v) == Some(8_388_608));
        if error && !marked && !error_expert {
            c.fail("dump found an error, tshark shows no malformed mark".into());
        }
        // Wireshark's own IP/UDP dissectors flag a report's truncated inner copy (total length
        // beyond the copy): a Lua dissector cannot give them a buffer whose reported length is
        // the original's. Only the plugin's own marks count in reports.
        let own_mark = keys
            .iter()
            .any(|k| k == "int.malformed" || k == "intrep.malformed");
        let marked_here = if df.get("report").is_some() {
            own_mark
        } else {
            marked
        };
        if strict && !error && marked_here {
            c.fail(format!(
                "valid frame marked malformed by tshark: {}",
                short(tf)
            ));
        }
        errors.extend(c.errors);
    }
    assert!(
        errors.is_empty(),
        "{} mismatches:\n{}",
        errors.len(),
        errors.join("\n")
    );
    decoded
}

/// The part of a tshark frame worth reading in a failure message.
fn short(v: &Value) -> String {
    let mut keys = Vec::new();
    keys_under(v, &mut keys);
    let s: Vec<_> = keys
        .iter()
        .filter(|k| k.starts_with("int") || k.contains("expert.message") || k.contains("malformed"))
        .collect();
    let mut msgs = Vec::new();
    find_all(v, "_ws.expert.message", &mut msgs);
    format!("{s:?} {msgs:?}")
}

fn sample() -> PathBuf {
    PathBuf::from(repo("examples/sample.pcap"))
}

#[test]
fn sample_capture_matches_dump() {
    let opts = Opts::sample();
    // 10 frames carry INT or a report; the 11th is malformed (and must be marked so).
    assert_eq!(compare("sample", &sample(), &opts), 10);
}

#[test]
fn interop_captures_match_dump() {
    let Some(dir) = interop_dir("interop_captures_match_dump") else {
        return;
    };
    let mut decoded = 0;
    for (file, opts) in [
        (
            "serkantul_prometheus_int_exporter__src_test_resources_int_report.pcap",
            Opts {
                report_ports: vec![1234],
                ..Opts::default()
            },
        ),
        (
            "laofan13_P4-INT__int-mx_ipv4-frames-only.pcap",
            Opts::default(),
        ),
        (
            "laofan13_P4-INT__int-mx_pcap_s2-eth1_in.pcap",
            Opts::default(),
        ),
        (
            "laofan13_P4-INT__int-mx_pcap_s3-eth3_in.pcap",
            Opts::default(),
        ),
        (
            "rendered__third-party-scapy-classes.pcap",
            Opts {
                int_udp_ports: vec![0x4568],
                gre_proto: Some(0x4569),
                report_ports: vec![32766, 5900, 8090, 8086],
                ..Opts::default()
            },
        ),
    ] {
        decoded += compare(file, &dir.join(file), &opts);
    }
    // ONOS v0.5 report, three INT-MX frames, ten rendered frames.
    assert_eq!(decoded, 1 + 2 + 1 + 1 + 10);
}

/// `## name` → bytes, from one of the corpus's vectors-*.txt files.
fn vectors(dir: &Path, file: &str) -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let mut out = Vec::new();
    let mut name = None;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("## ") {
            name = Some(n.split_whitespace().next().unwrap().to_string());
        } else if !line.starts_with('#')
            && !line.trim().is_empty()
            && line.chars().all(|c| c.is_ascii_hexdigit())
        {
            out.push((name.clone().unwrap(), hex::decode(line).unwrap()));
        }
    }
    out
}

/// Ethernet and an IPv4 header with DSCP `dscp` and protocol `proto`, ready for an L4 header.
fn ipv4_with_dscp(
    dscp: u8,
    proto: etherparse::IpNumber,
) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    let mut ip = etherparse::Ipv4Header::new(0, 64, proto, [10, 0, 0, 1], [10, 0, 0, 2]).unwrap();
    ip.dscp = etherparse::IpDscp::try_new(dscp).unwrap();
    etherparse::PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
        .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
}

/// A TCP segment (DSCP `dscp`, to `dport`) carrying `payload` after its header.
fn tcp_frame(dscp: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    ipv4_with_dscp(dscp, etherparse::IpNumber::TCP)
        .tcp(40000, dport, 1, 1000)
        .write(&mut f, payload)
        .unwrap();
    f
}

fn udp_frame(dscp: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    ipv4_with_dscp(dscp, etherparse::IpNumber::UDP)
        .udp(4000, dport)
        .write(&mut f, payload)
        .unwrap();
    f
}

/// The corpus's byte vectors that are not frames of its captures: CableLabs' Report v2.0
/// variant (with embedded INT over a new UDP header, domain 0x5453) and ONOS's Report v0.5 and
/// INT v0.5 test arrays, wrapped in Ethernet/IPv4/UDP.
#[test]
fn interop_vectors_match_dump() {
    let Some(dir) = interop_dir("interop_vectors_match_dump") else {
        return;
    };
    let mut frames = Vec::new();
    for (_, v) in vectors(&dir, "vectors-hardcoded-cablelabs-siddhi-map-p4-trpt.txt") {
        frames.push(udp_frame(0, 556, &v));
    }
    for (name, v) in vectors(
        &dir,
        "vectors-hardcoded-onos-monitoring-prometheus_int_exporter.txt",
    ) {
        if name == "bytePacketINT" {
            // INT v0.5 shim + header + stack + tail after a DSCP-marked UDP header.
            frames.push(udp_frame(0x17, 5000, &v));
        } else {
            frames.push(udp_frame(0, 556, &v));
        }
    }
    let pcap = frames_pcap("vectors", &frames);
    let opts = Opts {
        int_udp_ports: vec![555],
        report_ports: vec![556],
        domains: Some(repo("examples/domains.toml")),
        ..Opts::default()
    };
    assert_eq!(compare("vectors", &pcap, &opts), frames.len());
}

/// Captures written by `intscope node` (source, transit, sink with reports) and `intscope sim`
/// in its three modes.
#[test]
fn node_and_sim_captures_match_dump() {
    let dir = tempdir("ws-node");
    let p = |n: &str| dir.path().join(n);
    write_pcap(&p("host.pcap"), &host_traffic(12));
    let node = |config: &str, input: &str, output: &str, reports: Option<&str>| {
        let mut c = bin();
        c.args(["node", "--config", &repo(config), "--in"])
            .arg(p(input))
            .arg("--out")
            .arg(p(output));
        if let Some(r) = reports {
            c.arg("--reports").arg(p(r));
        }
        succeed(&mut c);
    };
    node("examples/node-source.toml", "host.pcap", "s1.pcap", None);
    node("examples/node-transit.toml", "s1.pcap", "s2.pcap", None);
    node(
        "examples/node-sink.toml",
        "s2.pcap",
        "host2.pcap",
        Some("reports.pcap"),
    );
    let opts = Opts {
        int_udp_ports: vec![17768],
        ..Opts::default()
    };
    assert_eq!(compare("node s1", &p("s1.pcap"), &opts), 12);
    assert_eq!(compare("node s2", &p("s2.pcap"), &opts), 12);
    assert_eq!(compare("node reports", &p("reports.pcap"), &opts), 12);

    for mode in ["md", "mx", "xd"] {
        let out = p(&format!("sim-{mode}.pcap"));
        succeed(
            bin()
                .args(["sim", "--duration", "0.5", "--mode", mode, "--reports"])
                .arg(&out),
        );
        let n = compare(&format!("sim {mode}"), &out, &Opts::default());
        assert!(n > 10, "sim {mode}: only {n} reports");
    }
}

/// Malformed frames get expert info, never a Lua error: every prefix of the sample's INT and
/// report frames (cut stacks, cut shims, cut reports) is dissected, and whatever dump rejects is
/// marked.
#[test]
fn truncated_frames_are_marked_not_lua_errors() {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(sample()).unwrap()).unwrap();
    let mut cut = Vec::new();
    while let Some(pkt) = r.next_packet() {
        let f = pkt.unwrap().data.into_owned();
        // Cut inside the payload only: the outer headers stay valid, their lengths too.
        for len in (42..f.len()).step_by(3) {
            let mut g = f[..len].to_vec();
            fix_lengths(&mut g);
            cut.push(g);
        }
    }
    let pcap = frames_pcap("cut", &cut);
    let opts = Opts::sample();
    compare_with("cut", &pcap, &opts, false);
}

/// Rewrites IPv4 total length and UDP length for a cut frame (checksums are left: neither tool
/// verifies them by default in these comparisons).
fn fix_lengths(f: &mut [u8]) {
    if f.len() < 34 || f[12..14] != [0x08, 0x00] {
        return;
    }
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    let ihl = usize::from(f[14] & 0xf) * 4;
    if f[23] == 17 && f.len() >= 14 + ihl + 8 {
        let udp_len = ip_len - ihl as u16;
        f[14 + ihl + 4..14 + ihl + 6].copy_from_slice(&udp_len.to_be_bytes());
    }
}

/// The 2016 format, by the 2016 spec's own VXLAN-GPE example (int-spec-2016.txt "Example with
/// VXLAN GPE encapsulation"): a hop-by-hop header (switch id + queue occupancy from three hops,
/// BOS on the last word) then a destination header, then Ethernet. One word carries the
/// 0x7FFFFFFF "invalid" value.
#[test]
fn spec_2016_example() {
    let inner = {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
            .udp(7, 9)
            .write(&mut f, b"x")
            .unwrap();
        f
    };
    let mut gpe = vec![0x0c, 0, 0, 0x05, 0, 0, 0x2a, 0];
    gpe.extend([0x01, 0x00, 9, 0x05]); // shim: type 1, length 9 (shim counted), next 0x05
    gpe.extend([0x00, 0x02, 16, 3, 0x90, 0x00, 0, 0]); // ins_cnt 2, max 16, total 3, bits 0+3
    for w in [3u32, 0x7fff_ffff, 2, 200, 1, 0x8000_0000 | 100] {
        gpe.extend(w.to_be_bytes());
    }
    gpe.extend([0x02, 0x00, 6, 0x03]); // destination header, next protocol Ethernet
    gpe.extend([0x00, 0x01, 16, 3, 0x10, 0x00, 0, 0]);
    for w in [7u32, 8, 0x8000_0009] {
        gpe.extend(w.to_be_bytes());
    }
    gpe.extend(&inner);
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([0; 6], [1; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(999, 4790)
        .write(&mut f, &gpe)
        .unwrap();
    let pcap = frames_pcap("2016", &[f]);
    // Field by field against dump first (both blocks, the BOS hop, the invalid word).
    assert_eq!(compare("2016", &pcap, &Opts::default()), 1);
    let t = tshark(&pcap, &Opts::default());
    let mut ints = Vec::new();
    find_all(&t[0], "int", &mut ints);
    assert_eq!(ints.len(), 2, "{}", t[0]);
    let hbh = ints[0];
    let f = flat(hbh, &["int.hop_tree"]);
    assert_eq!(f["int.spec"], "2016");
    assert_eq!(f["int.shim.length"], "9");
    assert_eq!(f["int.ins_cnt"], "2");
    assert_eq!(f["int.total_hop_count"], "3");
    let hops = all(hbh, "int.hop_tree");
    assert_eq!(hops.len(), 3);
    assert_eq!(hops[0]["int.hop.node_id"], "3");
    assert_eq!(hops[0]["int.hop.unavailable"], "queue_occupancy");
    assert_eq!(hops[1]["int.hop.queue_occupancy"], "200");
    assert_eq!(
        hops[2]["int.hop.queue_occupancy"], "100",
        "BOS bit not in the value"
    );
    assert_eq!(hops[2]["int.hop.bos"], "1");
    assert!(hops[0].get("int.hop.bos").is_none());
    let dest = ints[1];
    assert_eq!(flat(dest, &[])["int.type"], "2");
    assert_eq!(all(dest, "int.hop_tree").len(), 3);
    // The Ethernet frame after the destination header reaches Wireshark's own dissectors.
    let mut udp = Vec::new();
    find_all(&t[0], "udp", &mut udp);
    assert_eq!(udp.len(), 2, "outer and inner UDP");
    let mut keys = Vec::new();
    keys_under(&t[0], &mut keys);
    assert!(!keys.iter().any(|k| k.ends_with("malformed")), "{}", t[0]);
}

/// `intscope wireshark install` writes the embedded plugin where Wireshark looks for personal
/// Lua plugins (`tshark -G folders`), and tshark then knows the protocols.
/// The README's tshark commands, as written (Wireshark section), with the plugin installed as
/// its block installs it — so the "without installing" line loads a second copy, which must
/// step aside without a Lua error — each find INT or a report in every frame of the sample where
/// `dump` finds one (DSCP-marked TCP to port 80, INT-MX, GRE included).
#[test]
fn readme_tshark_commands_decode_what_dump_decodes() {
    require_tshark();
    let home_dir = tempdir("ws-readme-home");
    let home = home_dir.path();
    succeed(bin().env("HOME", home).args(["wireshark", "install"]));
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    let section = &readme[readme.find("## Wireshark and tshark").unwrap()..];
    let block = &section[section.find("```sh").unwrap() + 5..];
    let block = &block[..block.find("```").unwrap()];
    let commands: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("tshark "))
        .collect();
    assert_eq!(commands.len(), 2, "{block}");
    let decoded_by_dump: Vec<u64> = dump(&sample(), &Opts::sample())
        .iter()
        .filter(|f| {
            let mut ints = Vec::new();
            dump_ints(f, &mut ints);
            !ints.is_empty() || f.get("report").is_some()
        })
        .map(|f| f["frame"].as_u64().unwrap())
        .collect();
    assert_eq!(decoded_by_dump, (1..=10).collect::<Vec<_>>());
    for cmd in commands {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{cmd} -T json --no-duplicate-keys"))
            .current_dir(repo(""))
            .env("HOME", home)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd}: {stderr}");
        assert!(!stderr.contains("Lua"), "{cmd}: {stderr}");
        let frames: Value = serde_json::from_slice(&out.stdout).unwrap();
        let decoded: Vec<u64> = frames
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                let layers = &f["_source"]["layers"];
                let mut ints = Vec::new();
                find_all(layers, "int", &mut ints);
                ints.retain(|i| i.get("int.encap").is_some());
                let mut reps = Vec::new();
                find_all(layers, "intrep", &mut reps);
                !ints.is_empty() || !reps.is_empty()
            })
            .map(|(i, _)| i as u64 + 1)
            .collect();
        assert_eq!(decoded, decoded_by_dump, "{cmd}");
    }
}

#[test]
fn install_puts_the_plugin_where_wireshark_finds_it() {
    require_tshark();
    let home_dir = tempdir("ws-home");
    let home = home_dir.path();
    let out = succeed(
        bin()
            .env("HOME", home)
            .args(["wireshark", "install", "--print-path"]),
    );
    let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(!path.exists(), "--print-path only prints");
    succeed(bin().env("HOME", home).args(["wireshark", "install"]));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        std::fs::read_to_string(plugin()).unwrap()
    );
    let folders = succeed(
        Command::new("tshark")
            .env("HOME", home)
            .args(["-G", "folders"]),
    );
    let folders = String::from_utf8(folders.stdout).unwrap();
    let lua_dir = folders
        .lines()
        .find_map(|l| l.strip_prefix("Personal Lua Plugins:"))
        .unwrap()
        .trim();
    assert_eq!(Path::new(lua_dir), path.parent().unwrap());
    let protocols = succeed(
        Command::new("tshark")
            .env("HOME", home)
            .args(["-G", "protocols"]),
    );
    let protocols = String::from_utf8(protocols.stdout).unwrap();
    assert!(
        protocols.lines().any(|l| l.ends_with("\tint")),
        "int registered"
    );
    assert!(protocols.lines().any(|l| l.ends_with("\tintrep")));
    // docs/wireshark.md lists every field the plugin registers.
    let fields = succeed(
        Command::new("tshark")
            .env("HOME", home)
            .args(["-G", "fields"]),
    );
    let docs = std::fs::read_to_string(repo("docs/wireshark.md")).unwrap();
    let mut n = 0;
    for line in String::from_utf8(fields.stdout).unwrap().lines() {
        let cols: Vec<_> = line.split('\t').collect();
        if cols.len() > 4 && cols[0] == "F" && (cols[4] == "int" || cols[4] == "intrep") {
            n += 1;
            assert!(
                docs.contains(&format!("| `{}` |", cols[2])),
                "docs/wireshark.md does not list {}",
                cols[2]
            );
        }
    }
    assert!(n > 100, "only {n} fields registered");
    let printed = succeed(bin().args(["wireshark", "print"]));
    assert_eq!(printed.stdout, std::fs::read(plugin()).unwrap());
}

/// Host traffic for the node chains: IPv4 and IPv6 UDP/TCP, VXLAN, Geneve and GRE tunnels.
fn host_frames() -> Vec<Vec<u8>> {
    use etherparse::PacketBuilder;
    let mut frames = Vec::new();
    let inner = |i: u8| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([192, 168, 0, 1], [192, 168, 0, i], 64)
            .udp(7000, 7001)
            .write(&mut f, b"tenant")
            .unwrap();
        f
    };
    for i in 0..4u16 {
        let b4 = || {
            PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2]).ipv4(
                [10, 0, 1, 1],
                [10, 0, 3, (i % 4) as u8 + 1],
                64,
            )
        };
        let b6 = || {
            let mut dst = [0u8; 16];
            dst[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 3]);
            dst[15] = i as u8 + 1;
            let mut src = dst;
            src[5] = 1;
            PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2]).ipv6(src, dst, 64)
        };
        let mut f = Vec::new();
        b4().udp(40000 + i, 5001)
            .write(&mut f, b"over udp")
            .unwrap();
        frames.push(std::mem::take(&mut f));
        b4().tcp(40000 + i, 443, 1, 1024)
            .ack(1)
            .write(&mut f, b"over tcp")
            .unwrap();
        frames.push(std::mem::take(&mut f));
        b6().udp(41000 + i, 5001)
            .write(&mut f, b"over udp6")
            .unwrap();
        frames.push(std::mem::take(&mut f));
        b6().tcp(41000 + i, 443, 1, 1024)
            .ack(1)
            .write(&mut f, b"over tcp6")
            .unwrap();
        frames.push(std::mem::take(&mut f));
        // VXLAN (RFC 7348: I flag, VNI) and Geneve (RFC 8926: no options, TEB) tunnels.
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 0x2a, 0];
        vx.extend(inner(i as u8 + 10));
        b4().udp(50000 + i, 4789).write(&mut f, &vx).unwrap();
        frames.push(std::mem::take(&mut f));
        let mut gn = vec![0, 0, 0x65, 0x58, 0, 0, 0x2a, 0];
        gn.extend(inner(i as u8 + 20));
        b4().udp(50000 + i, 6081).write(&mut f, &gn).unwrap();
        frames.push(std::mem::take(&mut f));
        // GRE (RFC 2784) carrying IPv4.
        let mut gre = vec![0, 0, 0x08, 0x00];
        gre.extend(&inner(i as u8 + 30)[14..]);
        PacketBuilder::ethernet2([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2])
            .ip(etherparse::IpHeaders::Ipv4(
                etherparse::Ipv4Header::new(
                    0,
                    64,
                    etherparse::IpNumber::GRE,
                    [10, 0, 1, 1],
                    [10, 0, 3, 9],
                )
                .unwrap(),
                Default::default(),
            ))
            .write(&mut f, etherparse::IpNumber::GRE, &gre)
            .unwrap();
        frames.push(std::mem::take(&mut f));
    }
    frames
}

/// Node chains in every source encapsulation and mode, with all baseline instructions (8-byte
/// timestamps, level 2 interfaces, buffer; unavailable values as all ones), v0.5 reports too:
/// every hop's capture and the sink's reports, tshark against dump.
#[test]
fn node_encapsulations_match_dump() {
    let dir = tempdir("ws-encaps");
    let p = |n: &str| dir.path().join(n);
    write_pcap(&p("host.pcap"), &host_frames());
    let common = "int_udp_port = 17768\nint_dscp = 0x17\nint_gre_proto = 0x4569\n\
                  probe_marker = \"0x1122334455667788\"\n";
    let opts = Opts {
        probe_marker: Some("0x1122334455667788".into()),
        ..Opts::sample()
    };
    let mut total = 0;
    // The last column: bytes of the packet a report carries (90 cuts the INT stacks).
    for (encap, mode, instructions, report_format, truncate) in [
        ("dscp", "md", 0xff80, "v2.0", 256),
        ("probe-marker", "md", 0x9000, "v2.0", 256),
        ("udp-new", "md", 0xff80, "v2.0", 256),
        ("udp-port", "md", 0xf000, "v0.5", 256),
        ("udp-port", "md", 0xff80, "v2.0", 90),
        ("gre", "md", 0xd000, "v2.0", 256),
        ("vxlan-gpe", "md", 0x9000, "v2.0", 256),
        ("geneve", "md", 0x9000, "v2.0", 256),
        ("udp-port", "mx", 0xff80, "v2.0", 256),
        ("dscp", "xd", 0xff80, "v2.0", 256),
    ] {
        let tag = format!("{encap}-{mode}-{report_format}-{truncate}");
        let cfg = |name: &str, body: String| {
            let path = p(&format!("{tag}-{name}.toml"));
            std::fs::write(&path, format!("mode = \"{mode}\"\n{common}{body}")).unwrap();
            path
        };
        let source = cfg(
            "source",
            format!(
                "node_id = 1\nrole = \"source\"\nencap = \"{encap}\"\ninstructions = {instructions}\n\
                 max_hops = 8\n[[watchlist]]\ndst = \"10.0.3.0/24\"\n\
                 [[watchlist]]\ndst = \"2001:db8:3::/64\"\n[telemetry]\nqueue_occupancy = 100\n"
            ),
        );
        let transit = cfg(
            "transit",
            "node_id = 2\nrole = \"transit\"\n[telemetry]\nqueue_occupancy = 200\n".into(),
        );
        let sink = cfg(
            "sink",
            format!(
                "node_id = 3\nrole = \"sink\"\nsink_metadata = \"report\"\nreport_truncate = {truncate}\n\
                 report_format = \"{report_format}\"\n[telemetry]\nqueue_occupancy = 300\n"
            ),
        );
        let run = |config: &Path, input: &str, output: &str, reports: Option<&str>| {
            let mut c = bin();
            c.args(["node", "--config"])
                .arg(config)
                .arg("--in")
                .arg(p(input))
                .arg("--out")
                .arg(p(output));
            if let Some(r) = reports {
                c.arg("--reports").arg(p(r));
            }
            succeed(&mut c);
        };
        let (s1, s2, h2, rep) = (
            format!("{tag}-s1.pcap"),
            format!("{tag}-s2.pcap"),
            format!("{tag}-h2.pcap"),
            format!("{tag}-reports.pcap"),
        );
        run(&source, "host.pcap", &s1, Some(&format!("{tag}-r1.pcap")));
        run(&transit, &s1, &s2, Some(&format!("{tag}-r2.pcap")));
        run(&sink, &s2, &h2, Some(&rep));
        for f in [
            s1,
            s2,
            rep,
            format!("{tag}-r1.pcap"),
            format!("{tag}-r2.pcap"),
        ] {
            total += compare(&f, &p(&f), &opts);
        }
    }
    assert!(total > 200, "only {total} frames with INT or reports");
}

/// The sample capture's frames, by number (1-based).
fn sample_frames() -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(sample()).unwrap()).unwrap();
    let mut out = vec![Vec::new()];
    while let Some(pkt) = r.next_packet() {
        out.push(pkt.unwrap().data.into_owned());
    }
    out
}

/// Pads to a whole number of words (an Ethernet trailer: the IP length still says the truth).
fn padded(mut f: Vec<u8>) -> Vec<u8> {
    while !f.len().is_multiple_of(4) {
        f.push(0);
    }
    f
}

/// An individual report (Report v2.0 §"Individual Report Header"), RepType 1 unless `md` is None.
fn individual(in_type: u8, md: Option<(u16, u16, u16, &[u8])>, inner: &[u8], flags: u8) -> Vec<u8> {
    let mut body = Vec::new();
    let mut md_len = 0;
    if let Some((bits, ds_id, ds_bits, md)) = md {
        body.extend(bits.to_be_bytes());
        body.extend(ds_id.to_be_bytes());
        body.extend(ds_bits.to_be_bytes());
        body.extend(0u16.to_be_bytes());
        body.extend(md);
        md_len = md.len() / 4;
    }
    body.extend(inner);
    assert!(body.len().is_multiple_of(4));
    let rep_type = u8::from(md.is_some());
    let mut r = vec![
        rep_type << 4 | in_type,
        (body.len() / 4) as u8,
        md_len as u8,
        flags,
    ];
    r.extend(body);
    r
}

/// Reports the sample capture does not have: coalesced individual reports, TLVs (an Ethernet
/// frame with INT and domain-specific extension data), unavailable values, a drop reason from
/// RepMdBits bit 15, named domain metadata (examples/domains.toml), an Inner-Only report, a
/// report whose MD Length is too short for its RepMdBits, and INT with E and M set and a Hop
/// ML too short for its bitmap.
#[test]
fn synthetic_reports_match_dump() {
    let s = sample_frames();
    let mut tlvs = vec![0x10, (padded(s[4].clone()).len() / 4) as u8, 0, 0];
    tlvs.extend(padded(s[4].clone()));
    tlvs.extend([0x00, 1, 0xab, 0xcd, 0xde, 0xad, 0xbe, 0xef]);
    let mut md1 = Vec::new();
    md1.extend(u32::MAX.to_be_bytes()); // node id: unavailable
    md1.extend(u32::MAX.to_be_bytes()); // queue: unavailable (queue id comes from bit 15)
    md1.extend(0x0450_0000u32.to_be_bytes()); // queue 4, drop reason 80 (acl-deny)
    let mut md2 = vec![0, 1, 0, 2];
    md2.extend(7u32.to_be_bytes()); // domain 0xABCD bit 0: sequence_number
    md2.extend(9u32.to_be_bytes()); // bit 1: flow_id
    let mut coalesced = vec![0x20 | 5 >> 2, (5 & 3) << 6, 0, 77, 0, 0, 0, 9];
    coalesced.extend(individual(1, Some((0x9001, 0, 0, &md1)), &tlvs, 0x80));
    coalesced.extend(individual(
        3,
        Some((0x4000, 0xabcd, 0xc000, &md2)),
        &padded(s[1].clone()),
        0x20,
    ));
    coalesced.extend(individual(4, None, &padded(s[2][14..].to_vec()), 0x40));
    let mut short_md = vec![0x20, 0, 0, 1, 0, 0, 0, 9];
    short_md.extend(individual(0, Some((0xff00, 0, 0, &[0, 0, 0, 1])), &[], 0));
    short_md[8] = 0x10; // RepType 1 with one word of metadata for eleven words of RepMdBits

    // INT over the INT UDP port: E and M set; then Hop ML 1 for a bitmap asking 2 words.
    let mut em = s[4].clone();
    em[42 + 4] |= 0x06;
    let mut short_hop = s[4].clone();
    short_hop[42 + 6] = 0x01;

    // INT-MX over TCP (DSCP) with source-inserted metadata of domain 0xABCD (INT v2.1 §"INT-MX
    // Header Format"): sample frame 2 with DS ID, DS Instruction and 8 more bytes.
    let mut mx = s[2].clone();
    mx[54 + 1] = 5;
    mx[58 + 6..58 + 10].copy_from_slice(&[0xab, 0xcd, 0xc0, 0x00]);
    mx.splice(70..70, [0, 0, 0, 42, 0, 0, 0, 43]);
    let ip_len = u16::from_be_bytes([mx[16], mx[17]]) + 8;
    mx[16..18].copy_from_slice(&ip_len.to_be_bytes());
    // Two INT headers stacked in VXLAN-GPE (next protocol 0x82 twice), then Ethernet.
    let mut gpe = vec![0x0c, 0, 0, 0x82, 0, 0, 0x2a, 0];
    gpe.extend([
        0x10, 5, 0x00, 0x82, 0x20, 0, 0x02, 0x05, 0x90, 0, 0, 0, 0, 0, 0, 0,
    ]);
    gpe.extend([0, 0, 0, 7, 0x01, 0, 0, 0x2c]);
    gpe.extend([
        0x30, 3, 0x00, 0x03, 0x20, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0,
    ]);
    // An inner frame without INT: dump decodes INT in tunnels' outer layers only.
    gpe.extend(udp_frame(0, 5000, b"inner"));
    let mut stacked = Vec::new();
    etherparse::PacketBuilder::ethernet2([0; 6], [1; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(999, 4790)
        .write(&mut stacked, &gpe)
        .unwrap();

    let frames = vec![
        udp_frame(0, 32766, &coalesced),
        udp_frame(0, 32766, &short_md),
        em,
        short_hop,
        mx,
        stacked,
    ];
    let pcap = frames_pcap("synthetic", &frames);
    let opts = Opts {
        int_udp_ports: vec![17768],
        domains: Some(repo("examples/domains.toml")),
        ..Opts::default()
    };
    assert_eq!(compare("synthetic", &pcap, &opts), 6);
    // What the comparison alone would not show: the named values and the experts.
    let t = tshark(&pcap, &opts);
    let reports = all(&t[0]["intrep"], "intrep.report_tree");
    assert_eq!(reports.len(), 3);
    let md = &reports[0]["intrep.metadata"];
    assert_eq!(md["intrep.md.drop_reason_name"], "acl-deny");
    assert_eq!(md["intrep.md.queue_id"], "4");
    assert_eq!(all(reports[0], "intrep.tlv_tree").len(), 2);
    let ds = &reports[1]["intrep.metadata"]["intrep.md.ds_tree"];
    assert_eq!(
        all(ds, "intrep.md.ds_name"),
        [&Value::from("sequence_number"), &Value::from("flow_id")]
    );
    for (frame, key) in [
        (1, "intrep.malformed"),
        (2, "int.e_bit"),
        (2, "int.m_bit"),
        (3, "int.warning.hop_too_short"),
    ] {
        assert!(has_key(&t[frame], key), "frame {}: no {key}", frame + 1);
    }
    let mut ints = Vec::new();
    find_all(&t[5], "int", &mut ints);
    assert_eq!(ints.len(), 2, "two stacked blocks");
    assert_eq!(flat(ints[1], &[])["int.type"], "3");
}

/// `copies` copies of `frame`, each with one to three bytes overwritten (with 0xff, 0 or an
/// arbitrary value) at positions `pick` draws: the corruption tests share it so that they
/// differ only in which bytes they may touch.
fn corrupted_copies(
    frame: &[u8],
    copies: usize,
    rng: &mut Rng,
    mut pick: impl FnMut(&mut Rng) -> usize,
) -> Vec<Vec<u8>> {
    (0..copies)
        .map(|_| {
            let mut g = frame.to_vec();
            for _ in 0..1 + rng.next() % 3 {
                let at = pick(rng);
                g[at] = match rng.next() % 4 {
                    0 => 0xff,
                    1 => 0,
                    _ => rng.next() as u8,
                };
            }
            g
        })
        .collect()
}

/// Corrupted frames: bytes of the sample's INT blocks and report headers overwritten (a fixed
/// pseudo-random sequence; the Ethernet/IP/TCP/UDP headers stay intact, those are Wireshark's).
/// Whatever dump decodes the plugin decodes the same way, what dump rejects is marked, and the
/// script never fails.
#[test]
fn corrupted_frames_match_dump() {
    let s = sample_frames();
    // Per sample frame: the byte ranges of its INT block(s) and report headers.
    let regions: [&[(usize, usize)]; 10] = [
        &[(54, 86)],
        &[(54, 70)],
        &[(42, 74)],
        &[(42, 74)],
        &[(38, 70)],
        &[(42, 90)],
        &[(42, 90)],
        &[(42, 66), (94, 126)],
        &[(42, 66)],
        &[(42, 66)],
    ];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut frames = Vec::new();
    for (f, region) in s[1..].iter().zip(regions) {
        frames.extend(corrupted_copies(f, 60, &mut rng, |rng| {
            let (a, b) = region[(rng.next() as usize) % region.len()];
            a + (rng.next() as usize) % (b - a)
        }));
    }
    let pcap = frames_pcap("corrupt", &frames);
    let opts = Opts::sample();
    compare_with("corrupt", &pcap, &opts, false);
}

/// As [`corrupted_frames_match_dump`], for the corpus's report vectors (CableLabs v2.0 variant,
/// ONOS v0.5): their headers and embedded INT, where dump's tolerances for other producers'
/// deviations are exercised.
#[test]
fn corrupted_vectors_match_dump() {
    let Some(dir) = interop_dir("corrupted_vectors_match_dump") else {
        return;
    };
    let mut payloads = Vec::new();
    for (_, v) in vectors(&dir, "vectors-hardcoded-cablelabs-siddhi-map-p4-trpt.txt") {
        payloads.push(v);
    }
    for (name, v) in vectors(
        &dir,
        "vectors-hardcoded-onos-monitoring-prometheus_int_exporter.txt",
    ) {
        if name != "bytePacketINT" {
            payloads.push(v);
        }
    }
    let mut rng = Rng(0x6a09_e667_f3bc_c908);
    let mut frames = Vec::new();
    for p in &payloads {
        // The report headers, and the INT block behind the inner UDP header to port 555 (the
        // inner Ethernet/IP/UDP headers are Wireshark's own to judge).
        let mut regions = vec![(0, 24.min(p.len()))];
        if let Some(i) = p.windows(2).position(|w| w == [0x02, 0x2b]) {
            regions.push((i + 6, (i + 42).min(p.len())));
        }
        let copies = corrupted_copies(p, 40, &mut rng, |rng| {
            let (a, b) = regions[(rng.next() as usize) % regions.len()];
            a + (rng.next() as usize) % (b - a)
        });
        frames.extend(copies.iter().map(|g| udp_frame(0, 556, g)));
    }
    let pcap = frames_pcap("corrupt-vectors", &frames);
    let opts = Opts {
        int_udp_ports: vec![555],
        report_ports: vec![556],
        domains: Some(repo("examples/domains.toml")),
        ..Opts::default()
    };
    compare_with("corrupt vectors", &pcap, &opts, false);
}

/// One frame per legacy case of [`legacy_frames_match_dump`], with the tshark keys it must carry
/// and the `field` of dump's error, if it must fail.
type LegacyCase = (Vec<u8>, &'static [&'static str], Option<&'static str>);

fn legacy_cases() -> Vec<LegacyCase> {
    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }
    // INT v0.5 (ONOS fabric.p4): shim type(8) rsvd(8) len(8) rsvd(8); header ver(2) rep(2) c e
    // rsvd(5) ins_cnt(5) | max_hop(8) total_hop(8) | bitmap(16) rsvd(16); stack; tail.
    let v05 = |len: u8, ins_cnt: u8, total: u8, bitmap: u16, stack: &[u32]| {
        let mut b = vec![1, 0, len, 0, 0, ins_cnt, 8, total];
        b.extend(bitmap.to_be_bytes());
        b.extend([0, 0]);
        b.extend(words(stack));
        b.extend([17, 0x13, 0x88, 0x5c]);
        b.extend(b"payload!");
        b
    };
    // INT v1.0 (GEANT / AmLight): shim type(8) rsvd(8) len(8) dscp(6) rsvd(2); header ver(4)
    // rep(2) c e | m rsvd | rsvd hop_ml(5) | rhc(8) | bitmap(16) rsvd(16).
    let v1 = |ver: u8, bitmap: u16, stack: &[u32]| {
        let len = (12 + stack.len() * 4) / 4;
        let mut b = vec![1, 0, len as u8, 0x0a << 2, ver << 4, 0];
        b.extend([bitmap.count_ones() as u8, 6]);
        b.extend(bitmap.to_be_bytes());
        b.extend([0, 0]);
        b.extend(words(stack));
        b.extend(b"payload!");
        b
    };
    // The 2016 format after VXLAN-GPE next protocol 0x05 (int-spec-2016.txt 5.3.2-5.3.3).
    let y2016 = |itype: u8, b0: u8, ins_cnt: u8, total: u8, bitmap: u16, stack: &[u32]| {
        let mut g = vec![0x0c, 0, 0, 0x05, 0, 0, 0x2a, 0];
        g.extend([itype, 0, (3 + stack.len()) as u8, 0]);
        g.extend([b0, ins_cnt, 8, total]);
        g.extend(bitmap.to_be_bytes());
        g.extend([0, 0]);
        g.extend(words(stack));
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([0; 6], [1; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(999, 4790)
            .write(&mut f, &g)
            .unwrap();
        f
    };
    // Sample frame 7 (INT-MD in a Geneve option): the option cut to one hop, then an option
    // whose Length runs past the options.
    let mut geneve = sample_frames()[7].clone();
    geneve[53] = 0x05;
    geneve[74..78].copy_from_slice(&[0, 0, 0x01, 0x1f]);

    vec![
        // Two hops by the shim, one by the count; bits 0, 6 (queue 2, congestion 12), 15.
        (
            udp_frame(
                0x17,
                5000,
                &v05(
                    10,
                    3,
                    1,
                    0x8201,
                    &[1, 0x0200_000c, 0xdead_beef, 2, u32::MAX, 5],
                ),
            ),
            &["int.warning.legacy_hop_count"],
            None,
        ),
        (
            udp_frame(0x17, 5000, &v05(0, 1, 1, 0x8000, &[7])),
            &["int.warning.legacy_shim_length"],
            None,
        ),
        // v0.5 after a DSCP-marked TCP header, to the SSH port: INT, not SSH (issue 36).
        (
            tcp_frame(0x17, 22, &v05(5, 1, 1, 0x8000, &[7])),
            &["int.hop.node_id"],
            None,
        ),
        (
            udp_frame(0x17, 5000, &v1(1, 0x8001, &[1, 0x1234_abcd, 2, u32::MAX])),
            &["int.hop.checksum_complement"],
            None,
        ),
        (
            udp_frame(0x17, 5000, &v1(7, 0x8001, &[1, 0x1234_abcd])),
            &["int.malformed"],
            Some("Ver"),
        ),
        (
            y2016(1, 0, 1, 3, 0x8000, &[0x8000_0005, 0x8000_0004]),
            &["int.warning.legacy_hop_count", "int.warning.bos_misplaced"],
            None,
        ),
        // Bits 1, 5, 6, 8: port IDs, congestion, reserved bit 8 (one word invalid).
        (
            y2016(
                1,
                0,
                4,
                2,
                0x4680,
                &[10, 0x7fff_ffff, 0x12345, 1, 11, 12, 13, 2],
            ),
            &["int.warning.bos_missing", "int.hop.reserved_bit8"],
            None,
        ),
        (
            y2016(1, 0x40, 1, 1, 0x8000, &[0x8000_0001]),
            &["int.malformed"],
            Some("Ver"),
        ),
        (
            y2016(2, 0, 2, 1, 0x8000, &[0x8000_0001]),
            &["int.data"],
            None,
        ),
        (geneve, &["int.malformed", "int.hop_tree"], None),
    ]
}

/// The legacy formats where the two tools once differed, one frame each, against dump and with
/// the expert info each must raise (dump's JSON must carry the same code, so the frame really
/// exercises it): INT v0.5 whose shim length outgrows its Total Hop Count, a v0.5 shim length of
/// 0, v0.5 bit 6 and bit 15, v1.0 bit 15 (Checksum Complement, once unavailable), an unknown
/// legacy version nibble, 2016 blocks with a disagreeing hop count, BOS misplaced / missing, a
/// version that is not 0, an inconsistent destination header, and a Geneve header whose INT
/// option is followed by a malformed option (the INT block is kept, the frame marked).
#[test]
fn legacy_frames_match_dump() {
    let cases = legacy_cases();
    let frames: Vec<Vec<u8>> = cases.iter().map(|(f, _, _)| f.clone()).collect();
    let pcap = frames_pcap("legacy", &frames);
    let opts = Opts::default();
    compare("legacy", &pcap, &opts);
    let d = dump(&pcap, &opts);
    let t = tshark(&pcap, &opts);
    for (i, (_, keys, error_field)) in cases.iter().enumerate() {
        for key in *keys {
            assert!(
                has_key(&t[i], key),
                "frame {}: no {key}: {}",
                i + 1,
                short(&t[i])
            );
            if let Some(code) = key.strip_prefix("int.warning.") {
                let code = code.replace('_', "-");
                assert!(
                    d[i].to_string().contains(&format!("\"code\":\"{code}\"")),
                    "frame {}: dump has no {code}: {}",
                    i + 1,
                    d[i]
                );
            }
        }
        if let Some(field) = error_field {
            assert_eq!(d[i]["error"]["field"], *field, "frame {}: {}", i + 1, d[i]);
        }
    }
    // The layers before the malformed Geneve option: dump and the plugin keep the INT block.
    assert_eq!(
        d[9]["int"]["hops"].as_array().map(Vec::len),
        Some(1),
        "{}",
        d[9]
    );
    assert!(d[9].get("error").is_some());
    // v0.5 over TCP to port 22: dump reads the INT hop (tshark's plugin too, checked above).
    assert_eq!(d[2]["int"]["hops"][0]["node_id"], 7, "{}", d[2]);
    // v0.5 bit 6 split, v1.0 bit 15 a Checksum Complement, v0.5 bit 15 reserved.
    let hop = &d[0]["int"]["hops"][0];
    assert_eq!(hop["congestion_queue_id"], 2);
    assert_eq!(hop["congestion_status"], 12);
    assert_eq!(hop["reserved_bit15"], 0xdead_beefu32);
    assert_eq!(d[3]["int"]["hops"][0]["checksum_complement"], 0x1234_abcd);
    assert!(d[3]["int"]["hops"][1]["checksum_complement"].is_null());
}

/// As [`corrupted_frames_match_dump`], for the legacy frames of [`legacy_cases`] and the 2016
/// specification's example: their INT bytes (and the VXLAN-GPE header in front of 2016 blocks)
/// overwritten; whatever dump decodes the plugin decodes the same way, and the script never fails.
#[test]
fn corrupted_legacy_frames_match_dump() {
    let mut rng = Rng(0xbb67_ae85_84ca_a73b);
    let mut frames = Vec::new();
    for (f, _, _) in legacy_cases() {
        // After Ethernet/IPv4/UDP: the INT block (or VXLAN-GPE and the 2016 blocks).
        let (a, b) = (42, f.len().min(42 + 64));
        frames.extend(corrupted_copies(&f, 60, &mut rng, |rng| {
            a + (rng.next() as usize) % (b - a)
        }));
    }
    let pcap = frames_pcap("corrupt-legacy", &frames);
    compare_with("corrupt legacy", &pcap, &Opts::default(), false);
}
