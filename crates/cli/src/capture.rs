//! Reading pcap and pcapng files as a stream of frames.
//!
//! pcap-file's parsers decode the records; the buffering is ours, so that every record's byte
//! offset is known and a damaged record ends the stream. (pcap-file's own readers return the
//! same error again and again without advancing, so a loop over them never ends on a capture
//! cut short, the usual state of a file whose writer was killed or whose disk filled.)
//!
//! A capture ends in one of two ways: `None` after the last whole record, or one
//! [`CaptureError`] naming the file, the frame and the byte offset of the first record that
//! cannot be read (cut short, a length no record can have, a field pcap-file rejects), and then
//! `None`. Every frame before it is returned first, as tshark does ("The file appears to have
//! been cut short in the middle of a packet").

use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{Endianness, PcapError, TsResolution};

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Largest record (pcap packet record or pcapng block) accepted: the bound tshark puts on a
/// pcapng block. A length above it is corruption, and reading it would hold it all in memory.
pub const MAX_RECORD: usize = 16 << 20;

/// Bytes asked of the file per read.
const CHUNK: usize = 256 << 10;

/// pcap's per-record header: ts_sec, ts_frac, incl_len, orig_len.
const PCAP_RECORD_HEADER: usize = 16;

/// A pcapng block's type, length and trailing length: its smallest size.
const PCAPNG_BLOCK_MIN: usize = 12;

/// One captured frame.
pub struct Frame {
    /// 1-based frame number.
    pub number: u64,
    /// Capture time in nanoseconds since the epoch.
    pub time_ns: u128,
    /// Link type of the interface it was captured on.
    pub link_type: u32,
    /// Captured bytes.
    pub data: Vec<u8>,
    /// Original length on the wire.
    pub orig_len: u32,
}

/// Why a capture could not be read to its end.
#[derive(Debug)]
pub enum DamageKind {
    /// The file ends inside a record.
    CutShort {
        /// Bytes the record needs (its header, or the length its header declares).
        needed: usize,
        /// Bytes left in the file.
        available: usize,
    },
    /// A record declares a length above [`MAX_RECORD`].
    TooLarge {
        /// The declared length in bytes.
        declared: usize,
    },
    /// pcap-file rejected the record (lengths that disagree, a bad field).
    Corrupt(String),
    /// Reading the file failed.
    Io(std::io::Error),
}

/// A capture that could not be read to its end: the first bad record, where it is, and how many
/// bytes of the file were left unread.
#[derive(Debug)]
pub struct CaptureError {
    /// The capture file.
    pub path: PathBuf,
    /// The number the frame in the bad record would have had (frames before it were returned;
    /// in pcapng the bad block may be a non-packet block before that frame).
    pub frame: u64,
    /// Byte offset of the bad record in the file.
    pub offset: u64,
    /// Bytes from `offset` to the end of the file, not read as frames.
    pub unread: u64,
    /// What was wrong.
    pub kind: DamageKind,
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (path, frame, offset) = (self.path.display(), self.frame, self.offset);
        match &self.kind {
            DamageKind::CutShort { needed, available } => write!(
                f,
                "{path}: cut short in the middle of frame {frame} at byte offset {offset} \
                 (its record needs {needed} bytes, {available} remain); {}",
                match frame - 1 {
                    0 => "no whole frame before it".to_string(),
                    1 => "the 1 frame before it was read".to_string(),
                    n => format!("the {n} frames before it were read"),
                }
            ),
            DamageKind::TooLarge { declared } => write!(
                f,
                "{path}: frame {frame} at byte offset {offset}: record length {declared} is over \
                 the {MAX_RECORD}-byte maximum (corrupt capture); {} bytes not read",
                self.unread
            ),
            DamageKind::Corrupt(reason) => write!(
                f,
                "{path}: frame {frame} at byte offset {offset}: corrupt record ({reason}); \
                 {} bytes not read",
                self.unread
            ),
            DamageKind::Io(e) => write!(
                f,
                "{path}: frame {frame} at byte offset {offset}: read error: {e}"
            ),
        }
    }
}

impl std::error::Error for CaptureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            DamageKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// The file's bytes, read in chunks, with the offset of what is buffered.
struct Source {
    file: File,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
}

impl Source {
    fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Reads until `want` bytes are buffered or the file ends; false when it ended first.
    fn fill_to(&mut self, want: usize) -> std::io::Result<bool> {
        if self.end - self.start >= want {
            return Ok(true);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < want.max(CHUNK) {
            self.buf.resize(want.max(CHUNK), 0);
        }
        while self.end < want && !self.eof {
            match self.file.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.end >= want)
    }
}

enum Format {
    Pcap(PcapParser),
    PcapNg(Box<PcapNgParser>),
}

/// A capture file opened for reading.
pub struct Capture {
    path: PathBuf,
    len: u64,
    src: Source,
    format: Format,
    count: u64,
    done: bool,
}

fn u32_at(b: &[u8], at: usize, e: Endianness) -> usize {
    let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    (match e {
        Endianness::Big => u32::from_be_bytes(w),
        Endianness::Little => u32::from_le_bytes(w),
    }) as usize
}

/// A pcapng block's declared length, once its first 12 bytes are there. A section header's byte
/// order is its own (its magic); other blocks use the section's.
fn pcapng_block_len(b: &[u8], section: Endianness) -> usize {
    if b.len() < PCAPNG_BLOCK_MIN {
        return PCAPNG_BLOCK_MIN;
    }
    let e = if b[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        if b[8..12] == [0x1a, 0x2b, 0x3c, 0x4d] {
            Endianness::Big
        } else {
            Endianness::Little
        }
    } else {
        section
    };
    u32_at(b, 4, e).max(PCAPNG_BLOCK_MIN)
}

impl Capture {
    /// Opens `path`, telling pcap from pcapng by the magic number.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut src = Source {
            file,
            buf: Vec::new(),
            start: 0,
            end: 0,
            base: 0,
            eof: false,
        };
        let whole = |src: &mut Source, want: usize, what: &str| -> Result<()> {
            if !src
                .fill_to(want)
                .with_context(|| format!("cannot read {}", path.display()))?
            {
                bail!("{}: too short to be a {what}", path.display());
            }
            Ok(())
        };
        whole(&mut src, 4, "capture")?;
        let magic: [u8; 4] = src.avail()[..4].try_into().expect("4 bytes");
        let format = match magic {
            [0x0a, 0x0d, 0x0d, 0x0a] => {
                whole(&mut src, PCAPNG_BLOCK_MIN, "pcapng file")?;
                let shb = pcapng_block_len(src.avail(), Endianness::Big);
                if shb > MAX_RECORD {
                    bail!(
                        "{}: bad pcapng header (section header length {shb})",
                        path.display()
                    );
                }
                whole(&mut src, shb, "pcapng file")?;
                let (rem, parser) = PcapNgParser::new(src.avail())
                    .map_err(|e| anyhow::anyhow!("{e}"))
                    .with_context(|| format!("{}: bad pcapng header", path.display()))?;
                src.start += src.end - src.start - rem.len();
                Format::PcapNg(Box::new(parser))
            }
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d] => {
                whole(&mut src, 24, "pcap file")?;
                let (rem, parser) = PcapParser::new(src.avail())
                    .map_err(|e| anyhow::anyhow!("{e}"))
                    .with_context(|| format!("{}: bad pcap header", path.display()))?;
                src.start += src.end - src.start - rem.len();
                Format::Pcap(parser)
            }
            m => bail!(
                "{}: not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x})",
                path.display(),
                m[0],
                m[1],
                m[2],
                m[3]
            ),
        };
        Ok(Capture {
            path: path.to_path_buf(),
            len,
            src,
            format,
            count: 0,
            done: false,
        })
    }

    fn damage(&mut self, kind: DamageKind) -> CaptureError {
        self.done = true;
        let offset = self.src.offset();
        CaptureError {
            path: self.path.clone(),
            frame: self.count + 1,
            offset,
            unread: self.len.saturating_sub(offset),
            kind,
        }
    }

    /// Bytes the record at the read position needs in all, from what its header declares.
    fn needed(&self) -> usize {
        let b = self.src.avail();
        match &self.format {
            Format::Pcap(p) if b.len() >= PCAP_RECORD_HEADER => {
                PCAP_RECORD_HEADER + u32_at(b, 8, p.header().endianness)
            }
            Format::Pcap(_) => PCAP_RECORD_HEADER,
            Format::PcapNg(p) => pcapng_block_len(b, p.section().endianness),
        }
    }

    /// Makes the whole record at the read position available. `Ok(false)` at a clean end of
    /// file (nothing left); an error when the file ends inside the record or its length is
    /// impossible.
    fn load_record(&mut self) -> Result<bool, CaptureError> {
        // The header first, then the length it declares.
        loop {
            let needed = self.needed();
            if needed > MAX_RECORD {
                return Err(self.damage(DamageKind::TooLarge { declared: needed }));
            }
            match self.src.fill_to(needed) {
                Ok(true) if self.needed() == needed => return Ok(true),
                Ok(true) => {}
                Ok(false) if self.src.avail().is_empty() => return Ok(false),
                Ok(false) => {
                    let available = self.src.avail().len();
                    return Err(self.damage(DamageKind::CutShort { needed, available }));
                }
                Err(e) => return Err(self.damage(DamageKind::Io(e))),
            }
        }
    }

    /// The next frame; `None` at the end. A damaged record is one error (every frame before it
    /// was returned), and the stream ends there.
    pub fn next_frame(&mut self) -> Option<Result<Frame, CaptureError>> {
        loop {
            if self.done {
                return None;
            }
            match self.load_record() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return None;
                }
                Err(e) => return Some(Err(e)),
            }
            let number = self.count + 1;
            let avail = &self.src.buf[self.src.start..self.src.end];
            let parsed: Result<(usize, Option<Frame>), PcapError> = match &mut self.format {
                Format::Pcap(p) => {
                    let header = p.header();
                    let lt = u32::from(header.datalink);
                    // The raw record: pcap-file's checked one refuses every record longer on the
                    // wire than the file's snap length (orig_len > snap_len), which is what a
                    // capture taken with a snap length is made of, and records over a snap
                    // length of 0 or too small; libpcap and tshark read them. The record's
                    // length is bounded by MAX_RECORD above.
                    let frac_ns = match header.ts_resolution {
                        TsResolution::MicroSecond => 1_000,
                        TsResolution::NanoSecond => 1,
                    };
                    p.next_raw_packet(avail).map(|(rem, pkt)| {
                        let frame = Frame {
                            number,
                            time_ns: u128::from(pkt.ts_sec) * 1_000_000_000
                                + u128::from(pkt.ts_frac) * frac_ns,
                            link_type: lt,
                            orig_len: pkt.orig_len,
                            data: pkt.data.into_owned(),
                        };
                        (avail.len() - rem.len(), Some(frame))
                    })
                }
                Format::PcapNg(p) => p.next_block(avail).map(|(rem, block)| {
                    let used = avail.len() - rem.len();
                    let frame = match block {
                        Block::EnhancedPacket(b) => Some(Frame {
                            number,
                            time_ns: b.timestamp.as_nanos(),
                            link_type: p.packet_interface(&b).map_or(0, |i| u32::from(i.linktype)),
                            orig_len: b.original_len,
                            data: b.data.into_owned(),
                        }),
                        Block::SimplePacket(b) => Some(Frame {
                            number,
                            time_ns: 0,
                            link_type: p.interfaces().first().map_or(0, |i| u32::from(i.linktype)),
                            orig_len: b.original_len,
                            data: b.data.into_owned(),
                        }),
                        Block::Packet(b) => Some(Frame {
                            number,
                            time_ns: u128::from(b.timestamp) * 1000,
                            link_type: p
                                .interfaces()
                                .get(usize::from(b.interface_id))
                                .map_or(0, |i| u32::from(i.linktype)),
                            orig_len: b.original_len,
                            data: b.data.into_owned(),
                        }),
                        _ => None,
                    };
                    (used, frame)
                }),
            };
            match parsed {
                Ok((used, frame)) => {
                    self.src.start += used;
                    if let Some(frame) = frame {
                        self.count += 1;
                        return Some(Ok(frame));
                    }
                }
                // The whole record was loaded, so pcap-file wanting more means a length inside
                // it (a pcapng block's body) runs past its end.
                Err(PcapError::IncompleteBuffer) => {
                    return Some(Err(self.damage(DamageKind::Corrupt(
                        "a length inside the record runs past its end".into(),
                    ))));
                }
                Err(e) => return Some(Err(self.damage(DamageKind::Corrupt(e.to_string())))),
            }
        }
    }
}
