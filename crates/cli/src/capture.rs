//! Reading pcap and pcapng files (pcap-file) as a stream of frames.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result, bail};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;

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

enum Inner {
    Pcap(PcapReader<BufReader<File>>, u32),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// A capture file opened for reading.
pub struct Capture {
    inner: Inner,
    count: u64,
}

impl Capture {
    /// Opens `path`, telling pcap from pcapng by the magic number.
    pub fn open(path: &Path) -> Result<Self> {
        let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut magic = [0u8; 4];
        f.read_exact(&mut magic)
            .with_context(|| format!("{}: too short to be a capture", path.display()))?;
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let r = BufReader::new(f);
        let inner = match magic {
            [0x0a, 0x0d, 0x0d, 0x0a] => Inner::PcapNg(
                PcapNgReader::new(r)
                    .with_context(|| format!("{}: bad pcapng header", path.display()))?,
            ),
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d] => {
                let reader = PcapReader::new(r)
                    .with_context(|| format!("{}: bad pcap header", path.display()))?;
                let lt = u32::from(reader.header().datalink);
                Inner::Pcap(reader, lt)
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
        Ok(Capture { inner, count: 0 })
    }

    /// The next frame, `None` at the end. A damaged record is an error naming the frame.
    pub fn next_frame(&mut self) -> Option<Result<Frame>> {
        loop {
            let number = self.count + 1;
            match &mut self.inner {
                Inner::Pcap(r, lt) => {
                    let p = r.next_packet()?;
                    self.count += 1;
                    return Some(
                        p.map_err(|e| anyhow::anyhow!("frame {number}: {e}"))
                            .map(|p| Frame {
                                number,
                                time_ns: p.timestamp.as_nanos(),
                                link_type: *lt,
                                orig_len: p.orig_len,
                                data: p.data.into_owned(),
                            }),
                    );
                }
                Inner::PcapNg(r) => {
                    let block = match r.next_block()? {
                        Ok(b) => b.into_owned(),
                        Err(e) => return Some(Err(anyhow::anyhow!("frame {number}: {e}"))),
                    };
                    let (data, time_ns, link_type, orig_len) = match block {
                        Block::EnhancedPacket(p) => {
                            let lt = r.packet_interface(&p).map_or(0, |i| u32::from(i.linktype));
                            (
                                p.data.into_owned(),
                                p.timestamp.as_nanos(),
                                lt,
                                p.original_len,
                            )
                        }
                        Block::SimplePacket(p) => {
                            let lt = r.interfaces().first().map_or(0, |i| u32::from(i.linktype));
                            let len = p.original_len;
                            (p.data.into_owned(), 0, lt, len)
                        }
                        Block::Packet(p) => {
                            let lt = r
                                .interfaces()
                                .get(usize::from(p.interface_id))
                                .map_or(0, |i| u32::from(i.linktype));
                            (
                                p.data.into_owned(),
                                u128::from(p.timestamp) * 1000,
                                lt,
                                p.original_len,
                            )
                        }
                        _ => continue,
                    };
                    self.count += 1;
                    return Some(Ok(Frame {
                        number,
                        time_ns,
                        link_type,
                        data,
                        orig_len,
                    }));
                }
            }
        }
    }
}
