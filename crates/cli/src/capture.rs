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
use intscope_wire::Start;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{Endianness, PcapError, TsResolution};

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// LINKTYPE_RAW: an IPv4 or IPv6 packet, told apart by its version nibble.
pub const LINKTYPE_RAW: u32 = 101;
/// LINKTYPE_LINUX_SLL: Linux cooked capture v1 (`tcpdump -i any` before libpcap 1.10).
pub const LINKTYPE_LINUX_SLL: u32 = 113;
/// LINKTYPE_IPV4: an IPv4 packet.
pub const LINKTYPE_IPV4: u32 = 228;
/// LINKTYPE_IPV6: an IPv6 packet.
pub const LINKTYPE_IPV6: u32 = 229;
/// LINKTYPE_LINUX_SLL2: Linux cooked capture v2 (`tcpdump -i any` since libpcap 1.10).
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

/// Where the layers intscope reads begin in a captured frame, by its link type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// The layers start `at` bytes in, with `start`.
    Layers {
        /// Bytes of link header before them.
        at: usize,
        /// What they start with.
        start: Start,
    },
    /// A cooked frame of a protocol other than IP (ARP, a netlink message): nothing to read.
    Other {
        /// The cooked header's protocol type.
        protocol: u16,
    },
    /// The link header cannot be read (cut short, an IP version that is neither 4 nor 6).
    Broken(String),
    /// A link type intscope does not read.
    Unsupported,
}

/// The name of a link type as tcpdump.org's LINKTYPE list spells it (`LINUX_SLL (113)`), or
/// its number.
pub fn link_type_name(link_type: u32) -> String {
    let name = match link_type {
        LINKTYPE_ETHERNET => "ETHERNET",
        LINKTYPE_RAW => "RAW",
        LINKTYPE_LINUX_SLL => "LINUX_SLL",
        LINKTYPE_IPV4 => "IPV4",
        LINKTYPE_IPV6 => "IPV6",
        LINKTYPE_LINUX_SLL2 => "LINUX_SLL2",
        105 => "IEEE802_11",
        127 => "IEEE802_11_RADIOTAP",
        0 => "NULL",
        108 => "LOOP",
        _ => return format!("link type {link_type}"),
    };
    format!("{name} ({link_type})")
}

/// The short name `intscope dump` gives a link type other than Ethernet in its JSON (`link`).
pub fn link_key(link_type: u32) -> Option<&'static str> {
    match link_type {
        LINKTYPE_RAW => Some("raw"),
        LINKTYPE_LINUX_SLL => Some("linux_sll"),
        LINKTYPE_IPV4 => Some("ipv4"),
        LINKTYPE_IPV6 => Some("ipv6"),
        LINKTYPE_LINUX_SLL2 => Some("linux_sll2"),
        _ => None,
    }
}

/// Linux's ARPHRD_NETLINK: a cooked frame of a netlink monitor device, whose protocol type is a
/// netlink protocol, not an Ethertype.
const ARPHRD_NETLINK: u16 = 824;

/// Linux's ARPHRD_LOOPBACK: the loopback device.
const ARPHRD_LOOPBACK: u16 = 772;

/// Linux's PACKET_OUTGOING packet type: a frame the host sent, as the capture saw it leave.
const PACKET_OUTGOING: u8 = 4;

/// The Linux packet type of a cooked frame (`linux/if_packet.h`: 0 to this host, 1 broadcast,
/// 2 multicast, 3 to another host, 4 sent by this host), and its ARPHRD type; `None` for other
/// link types and for a cooked header cut short. LINKTYPE_LINUX_SLL: "packet type (2), ARPHRD
/// type (2)" at offsets 0 and 2; LINKTYPE_LINUX_SLL2: "ARPHRD type (2), packet type (1)" at
/// offsets 8 and 10 (tcpdump.org's link-layer header types).
pub fn cooked_packet_type(link_type: u32, data: &[u8]) -> Option<(u16, u16)> {
    let be = |at: usize| {
        data.get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    match link_type {
        LINKTYPE_LINUX_SLL if data.len() >= 16 => Some((be(0)?, be(2)?)),
        LINKTYPE_LINUX_SLL2 if data.len() >= 20 => Some((u16::from(data[10]), be(8)?)),
        _ => None,
    }
}

/// Whether `data` is the outgoing copy of a loopback frame in a cooked capture: on the loopback
/// device `tcpdump -i any` records every packet twice, once as sent (PACKET_OUTGOING) and once
/// as received (PACKET_HOST), and only the received one reached a socket.
pub fn loopback_outgoing(link_type: u32, data: &[u8]) -> bool {
    cooked_packet_type(link_type, data) == Some((u16::from(PACKET_OUTGOING), ARPHRD_LOOPBACK))
}

/// Where the layers of `data`, a frame of `link_type`, begin.
///
/// The cooked headers are read by hand, not with etherparse's `LinuxSllHeaderSlice`: it refuses
/// every ARPHRD type but Ethernet, netlink, IP GRE and two wireless ones, and a collector host's
/// reports arrive as often over loopback (ARPHRD_LOOPBACK) or a tunnel (ARPHRD_NONE), which
/// `tcpdump -i any` records with the same Ethertype. Layouts from tcpdump.org's link-layer
/// header types: LINKTYPE_LINUX_SLL, "16 bytes: packet type (2), ARPHRD type (2), link-layer
/// address length (2), link-layer address (8), protocol type (2)"; LINKTYPE_LINUX_SLL2, "20
/// bytes: protocol type (2), reserved (2), interface index (4), ARPHRD type (2), packet type
/// (1), link-layer address length (1), link-layer address (8)"; in both, "the protocol type
/// field is an Ethertype value" but for netlink. LINKTYPE_RAW: "raw IP; the packet begins with an
/// IPv4 or IPv6 header, with the version field of the header indicating whether it's an IPv4 or
/// IPv6 header". A VLAN tag libpcap put back after a cooked header (protocol 0x8100) is skipped:
/// the JSON does not show its ID.
pub fn link(link_type: u32, data: &[u8]) -> Link {
    let cooked = |len: usize, protocol_at: usize, arphrd_at: usize| {
        let Some(h) = data.get(..len) else {
            return Link::Broken(format!(
                "{} header cut short: {} of its {len} bytes",
                link_type_name(link_type),
                data.len()
            ));
        };
        let be = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
        let (mut protocol, mut at) = (be(protocol_at), len);
        if be(arphrd_at) == ARPHRD_NETLINK {
            return Link::Other { protocol };
        }
        while matches!(protocol, 0x8100 | 0x88a8 | 0x9100) {
            let Some(tag) = data.get(at..at + 4) else {
                return Link::Broken(format!(
                    "VLAN tag after the {} header cut short",
                    link_type_name(link_type)
                ));
            };
            protocol = u16::from_be_bytes([tag[2], tag[3]]);
            at += 4;
        }
        match protocol {
            0x0800 => Link::Layers {
                at,
                start: Start::Ipv4,
            },
            0x86dd => Link::Layers {
                at,
                start: Start::Ipv6,
            },
            protocol => Link::Other { protocol },
        }
    };
    match link_type {
        LINKTYPE_ETHERNET => Link::Layers {
            at: 0,
            start: Start::Ethernet,
        },
        LINKTYPE_LINUX_SLL => cooked(16, 14, 2),
        LINKTYPE_LINUX_SLL2 => cooked(20, 0, 8),
        LINKTYPE_IPV4 => Link::Layers {
            at: 0,
            start: Start::Ipv4,
        },
        LINKTYPE_IPV6 => Link::Layers {
            at: 0,
            start: Start::Ipv6,
        },
        LINKTYPE_RAW => match data.first().map(|b| b >> 4) {
            Some(4) => Link::Layers {
                at: 0,
                start: Start::Ipv4,
            },
            Some(6) => Link::Layers {
                at: 0,
                start: Start::Ipv6,
            },
            Some(v) => Link::Broken(format!(
                "RAW (101) frame of IP version {v}: neither 4 nor 6"
            )),
            None => Link::Broken("RAW (101) frame is empty".into()),
        },
        _ => Link::Unsupported,
    }
}

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
