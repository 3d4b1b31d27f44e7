//! Renders a dissection (JSON value) as an indented tree, one block per frame, in the spirit of
//! `tshark -V`.

use std::fmt::Write;

use serde_json::Value;

/// Metadata fields shown in hex as well as decimal.
const HEX_KEYS: [&str; 7] = [
    "instruction_bitmap",
    "ds_id",
    "ds_instruction",
    "ds_flags",
    "rep_md_bits",
    "ds_md_bits",
    "ds_md_status",
];

/// The text block for one frame.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    let frame = v.get("frame").and_then(Value::as_u64).unwrap_or(0);
    let len = v.get("len").and_then(Value::as_u64).unwrap_or(0);
    let _ = writeln!(out, "Frame {frame}: {len} bytes");
    if let Value::Object(m) = v {
        for (k, val) in m {
            if k != "frame" && k != "len" {
                node(&mut out, k, val, 1);
            }
        }
    }
    out
}

fn title(k: &str) -> String {
    match k {
        "ip" => "Internet Protocol".into(),
        "l4" => "Transport".into(),
        "int" => "In-band Network Telemetry".into(),
        "int_stacked" => "In-band Network Telemetry (stacked)".into(),
        "report" => "Telemetry Report".into(),
        "inner" => "Inner packet".into(),
        other => other.replace('_', " "),
    }
}

fn scalar(k: &str, v: &Value) -> String {
    match v {
        Value::Null => "unavailable".into(),
        Value::Number(n) if HEX_KEYS.contains(&k) => format!("0x{:04x}", n.as_u64().unwrap_or(0)),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn node(out: &mut String, k: &str, v: &Value, depth: usize) {
    let pad = "    ".repeat(depth);
    match v {
        Value::Object(m) => {
            if k == "error" || k.ends_with("_error") {
                let msg = m
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("malformed");
                let _ = writeln!(out, "{pad}[Malformed: {msg}]");
                return;
            }
            let _ = writeln!(out, "{pad}{}", title(k));
            for (ck, cv) in m {
                node(out, ck, cv, depth + 1);
            }
        }
        Value::Array(items) if k == "warnings" => {
            for w in items {
                let msg = w.get("message").and_then(Value::as_str).unwrap_or("");
                let _ = writeln!(out, "{pad}[Warning: {msg}]");
            }
        }
        Value::Array(items) if items.iter().all(|i| i.is_object()) => {
            let singular = match k {
                "hops" => "Hop",
                "reports" => "Individual report",
                "tlvs" => "TLV",
                _ => "Item",
            };
            for (i, item) in items.iter().enumerate() {
                let label = match (k, i) {
                    ("hops", 0) => format!("{singular} 0 (top of stack: most recent)"),
                    ("hops", _) => format!("{singular} {i}"),
                    _ => format!("{singular} {}", i + 1),
                };
                let _ = writeln!(out, "{pad}{label}");
                if let Value::Object(m) = item {
                    for (ck, cv) in m {
                        node(out, ck, cv, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(|i| scalar(k, i)).collect();
            let _ = writeln!(out, "{pad}{}: [{}]", k.replace('_', " "), parts.join(", "));
        }
        _ => {
            let _ = writeln!(out, "{pad}{}: {}", k.replace('_', " "), scalar(k, v));
        }
    }
}
