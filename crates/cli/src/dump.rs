//! `intscope dump`: decode every frame of a capture and print it as text or JSON Lines.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use intscope_wire::dissect;
use serde_json::{Value, json};

use crate::capture::{self, Capture, Link};
use crate::detect::DetectArgs;
use crate::text;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Indented text, one block per frame.
    Text,
    /// JSON Lines, one object per frame (docs/dump-json.md).
    Json,
}

/// Arguments of `intscope dump`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 when the whole capture was read (malformed frames are reported in \
                  the output, and counted by reason in one line on stderr: `N of M frames not \
                  decoded whole (...)`); 1 when it could not be opened or is damaged (cut short, a \
                  corrupt record): every frame before the damage is printed, then (after that \
                  count) one line on stderr names the file, the frame and its byte offset."
)]
pub struct DumpArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// How INT and reports are recognised.
    #[command(flatten)]
    pub detect: DetectArgs,
    /// Capture file (pcap or pcapng; link types Ethernet, Linux cooked SLL and SLL2 as
    /// `tcpdump -i any` writes them, raw IP).
    pub file: PathBuf,
}

/// Frames read and those not decoded whole, by reason.
#[derive(Debug, Default)]
pub struct Tally {
    /// Frames read.
    pub frames: u64,
    /// Frames not decoded whole, by reason: the capture cut the frame short (snap length), the
    /// layer and kind of the first decode error (`ipv4 bad-value`, as in the JSON's `error`), a
    /// link header that cannot be read, or a link type not supported.
    pub undecoded: BTreeMap<String, u64>,
}

impl Tally {
    /// Counts a printed frame: its first error, if it has one, by reason (`link`: the reason
    /// of an error in the link header, which has no layer and kind).
    fn count(&mut self, frame: &Value, cut: bool, link: &str) {
        self.frames += 1;
        let Some(e) = first_error(frame) else { return };
        let reason = if cut {
            "cut short by the capture".to_string()
        } else {
            match (e["layer"].as_str(), e["kind"].as_str()) {
                (Some(layer), Some(kind)) => format!("{layer} {kind}"),
                _ => link.to_string(),
            }
        };
        *self.undecoded.entry(reason).or_default() += 1;
    }

    /// One line for stderr when some frame was not decoded whole: how many, by reason.
    pub fn summary(&self, file: &std::path::Path) -> Option<String> {
        let total: u64 = self.undecoded.values().sum();
        (total > 0).then(|| {
            let reasons: Vec<String> = self
                .undecoded
                .iter()
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            format!(
                "intscope dump: {}: {total} of {} frames not decoded whole ({})",
                file.display(),
                self.frames,
                reasons.join(", ")
            )
        })
    }
}

/// The first `error` object in a frame's dissection (the frame's own, else its report's or a
/// deeper layer's), depth first.
fn first_error(v: &Value) -> Option<&Value> {
    let m = v.as_object()?;
    if let Some(e) = m.get("error") {
        return Some(e);
    }
    m.values().find_map(|child| match child {
        Value::Array(items) => items.iter().find_map(first_error),
        other => first_error(other),
    })
}

/// Runs the dump, writing to `out`. Returns the frames read and those not decoded whole, by
/// reason; the caller prints [`Tally::summary`] on stderr.
///
/// A damaged capture (cut short, a corrupt record) is an error after every frame before the
/// damage was written: the caller reports it (one line on stderr, after the summary, exit
/// status 1), so that a script cannot take a damaged capture for a whole one.
pub fn run(args: &DumpArgs, out: &mut dyn Write) -> Result<u64> {
    let mut tally = Tally::default();
    let result = run_counted(args, out, &mut tally);
    if let Some(line) = tally.summary(&args.file) {
        eprintln!("{line}");
    }
    result.map(|()| tally.frames)
}

/// [`run`], counting into `tally`.
fn run_counted(args: &DumpArgs, out: &mut dyn Write, tally: &mut Tally) -> Result<()> {
    let mut cfg = args.detect.config()?;
    let registry = args.detect.registry()?;
    cfg.domains = registry.clone().map(std::sync::Arc::new);
    let mut capture = Capture::open(&args.file)?;
    let mut out = BufWriter::new(out);
    while let Some(frame) = capture.next_frame() {
        let f = match frame {
            Ok(f) => f,
            Err(damage) => {
                out.flush().context("writing output")?;
                return Err(damage.into());
            }
        };
        let cut = (f.orig_len as usize) > f.data.len();
        let mut link_reason = "link header".to_string();
        let mut value = match capture::link(f.link_type, &f.data) {
            Link::Layers { at, start } => {
                dissect::frame_from(f.number, &f.data, at, start, &cfg, registry.as_ref())
            }
            Link::Other { protocol } => {
                json!({"frame": f.number, "len": f.data.len(), "protocol": protocol})
            }
            Link::Broken(message) => {
                json!({"frame": f.number, "len": f.data.len(), "error": {"message": message}})
            }
            Link::Unsupported => {
                link_reason = format!("{} not supported", capture::link_type_name(f.link_type));
                json!({"frame": f.number, "len": f.data.len(),
                       "error": {"message": format!("{} is not supported (Ethernet, LINUX_SLL, \
                                 LINUX_SLL2, RAW, IPV4 and IPV6 are)",
                                 capture::link_type_name(f.link_type))}})
            }
        };
        if let Some(m) = value.as_object_mut() {
            if let Some(key) = capture::link_key(f.link_type) {
                m.insert("link".into(), json!(key));
            }
            if let Some((packet_type, _)) = capture::cooked_packet_type(f.link_type, &f.data) {
                m.insert("packet_type".into(), json!(packet_type));
            }
            m.insert("time_ns".into(), json!(f.time_ns as u64));
            if f.orig_len as usize != f.data.len() {
                m.insert("orig_len".into(), json!(f.orig_len));
            }
        }
        tally.count(&value, cut, &link_reason);
        match args.format {
            Format::Json => writeln!(out, "{value}")?,
            Format::Text => writeln!(out, "{}", text::render(&value))?,
        }
    }
    out.flush().context("writing output")?;
    Ok(())
}
