//! `intscope dump`: decode every frame of a capture and print it as text or JSON Lines.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use intscope_wire::dissect;
use intscope_wire::domain::Registry;
use serde_json::json;

use crate::capture::{Capture, LINKTYPE_ETHERNET};
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
                  the output); 1 when it could not be opened or is damaged (cut short, a corrupt \
                  record): every frame before the damage is printed, then one line on stderr names \
                  the file, the frame and its byte offset."
)]
pub struct DumpArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// How INT and reports are recognised.
    #[command(flatten)]
    pub detect: DetectArgs,
    /// Capture file (pcap or pcapng, Ethernet link type).
    pub file: PathBuf,
}

/// Runs the dump, writing to `out`. Returns the number of frames.
///
/// A damaged capture (cut short, a corrupt record) is an error after every frame before the
/// damage was written: the caller reports it (one line on stderr, exit status 1), so that a
/// script cannot take a damaged capture for a whole one.
pub fn run(args: &DumpArgs, out: &mut dyn Write) -> Result<u64> {
    let cfg = args.detect.config()?;
    let registry = args.detect.registry()?;
    let mut capture = Capture::open(&args.file)?;
    let mut out = BufWriter::new(out);
    let mut frames = 0;
    while let Some(frame) = capture.next_frame() {
        let value = match frame {
            Ok(f) if f.link_type == LINKTYPE_ETHERNET => {
                let mut v = dissect::frame(f.number, &f.data, &cfg, registry.as_ref());
                if let Some(m) = v.as_object_mut() {
                    m.insert("time_ns".into(), json!(f.time_ns as u64));
                    if f.orig_len as usize != f.data.len() {
                        m.insert("orig_len".into(), json!(f.orig_len));
                    }
                }
                v
            }
            Ok(f) => json!({"frame": f.number, "len": f.data.len(),
                             "error": {"message": format!("link type {} is not supported (Ethernet only)", f.link_type)}}),
            Err(damage) => {
                out.flush().context("writing output")?;
                return Err(damage.into());
            }
        };
        frames += 1;
        match args.format {
            Format::Json => writeln!(out, "{value}")?,
            Format::Text => writeln!(out, "{}", text::render(&value))?,
        }
    }
    out.flush().context("writing output")?;
    Ok(frames)
}

/// Loads the registry file, if one was given.
pub fn load_registry(path: Option<&PathBuf>) -> Result<Option<Registry>> {
    let Some(p) = path else { return Ok(None) };
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    Ok(Some(
        Registry::from_toml(&text).with_context(|| p.display().to_string())?,
    ))
}
