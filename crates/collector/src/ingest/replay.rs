//! Replaying a capture: the report datagrams a pcap file holds go to the same [`Collector`] the
//! receive threads feed, counted by the same rules, so a replay and a live run of the same
//! traffic give the same counters. The capture reader (the CLI's) reads the file and the link
//! header and hands over each frame's layers; this module finds the report datagrams in them
//! and accounts for every frame: replayed, other traffic, or undecodable by reason.
//!
//! A replay does not reassemble IP fragments (the kernel does, live): a later fragment has no
//! UDP header at all, and a first one holds only part of the datagram, so both are counted
//! undecodable.

use std::collections::BTreeMap;
use std::net::IpAddr;

use intscope_core::RecordBatch;
use intscope_wire::locate::{DetectConfig, Packet, Start};
use intscope_wire::warning::Warning;

use super::Tally;
use crate::hub::Collector;

/// What a replay did with each frame of a capture: every frame read lands in exactly one of
/// `datagrams`, `other`, `undecodable`, `unsupported` and `loopback_outgoing`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Frames read.
    pub frames: u64,
    /// UDP datagrams to a report port, handed to the collector (which accepts or discards each,
    /// by reason, in its ingest counters).
    pub datagrams: u64,
    /// Of `datagrams`: cut short by the capture's snap length (decoded as far as they go).
    pub cut_by_capture: u64,
    /// Frames that are not report traffic (another protocol or port).
    pub other: u64,
    /// Frames whose link, IP or UDP headers could not be read, so that nobody can tell
    /// whether they held a report, by reason.
    pub undecodable: BTreeMap<String, u64>,
    /// Frames of a link type not read, by its name.
    pub unsupported: BTreeMap<String, u64>,
    /// Of `datagrams`: larger than `recv_slot`, counted `oversize` as the live path does.
    pub oversize: u64,
    /// Outgoing copies of loopback frames in a cooked capture, not replayed: the host received
    /// each of them once more, recorded as its own frame, which is the one replayed.
    pub loopback_outgoing: u64,
}

impl ReplayCounts {
    /// The counts as clauses of one summary line (`; 3 frames undecodable, …`), each only when
    /// it is not zero; `recv_slot` is the receive slot the oversize ones exceeded.
    pub fn clauses(&self, recv_slot: usize) -> String {
        let mut out = String::new();
        if self.loopback_outgoing > 0 {
            out += &format!(
                "; loopback outgoing copies, not replayed: {}",
                self.loopback_outgoing
            );
        }
        if self.cut_by_capture > 0 {
            out += &format!(
                "; {} report datagrams cut short by the capture (decoded as far as they go)",
                self.cut_by_capture
            );
        }
        if !self.undecodable.is_empty() {
            let total: u64 = self.undecodable.values().sum();
            let reasons: Vec<String> = self
                .undecodable
                .iter()
                .map(|(reason, k)| format!("{reason} {k}"))
                .collect();
            out += &format!(
                "; {total} frames undecodable, not replayed ({})",
                reasons.join(", ")
            );
        }
        if self.oversize > 0 {
            out += &format!(
                "; {} report datagrams larger than recv_slot ({recv_slot} bytes) counted \
                 oversize, not decoded",
                self.oversize
            );
        }
        for (name, k) in &self.unsupported {
            out += &format!("; {k} frames of {name} (not supported) skipped");
        }
        out
    }
}

/// A report datagram found in a frame, not yet handed to the collector.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// The UDP payload as captured (cut short when `cut`).
    pub payload: &'a [u8],
    /// Its length on the wire (the UDP length minus the header), not what the capture kept.
    pub len: usize,
    /// The sender.
    pub src: IpAddr,
    /// The capture holds less than the datagram.
    pub cut: bool,
}

/// A replay in progress: the collector it feeds, the report ports it looks for, and its counts.
pub struct Replay<'c> {
    collector: &'c Collector,
    /// How INT is found: only the report ports, no DSCP (its `report_ports` are the ports).
    locate: DetectConfig,
    batch: RecordBatch,
    counts: ReplayCounts,
}

impl<'c> Replay<'c> {
    /// A replay into `collector` of the UDP datagrams to `ports`.
    pub fn new(collector: &'c Collector, ports: &[u16]) -> Self {
        Replay {
            collector,
            locate: DetectConfig {
                report_ports: ports.to_vec(),
                dscp: None,
                ..DetectConfig::default()
            },
            batch: RecordBatch::default(),
            counts: ReplayCounts::default(),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> &ReplayCounts {
        &self.counts
    }

    /// A frame was read from the capture; each read frame is then one of the outcomes below.
    pub fn read(&mut self) {
        self.counts.frames += 1;
    }

    /// The last frame read is not replayed after all (a stop came while it waited for its time).
    pub fn unread(&mut self) {
        self.counts.frames -= 1;
    }

    /// The frame is an outgoing copy of a loopback frame (see [`ReplayCounts`]).
    pub fn loopback_outgoing(&mut self) {
        self.counts.loopback_outgoing += 1;
    }

    /// The frame is not IP traffic (its link header says so).
    pub fn other(&mut self) {
        self.counts.other += 1;
    }

    /// The frame's headers could not be read, for `reason`.
    pub fn undecodable(&mut self, reason: impl Into<String>) {
        *self.counts.undecodable.entry(reason.into()).or_default() += 1;
    }

    /// The frame's link type (`name`) is not read; true for the first such frame, so the caller
    /// can say it once.
    pub fn unsupported(&mut self, name: String) -> bool {
        let first = self.counts.unsupported.is_empty();
        *self.counts.unsupported.entry(name).or_default() += 1;
        first
    }

    /// The report datagram in a frame's `layers` (starting with `start`, after the link
    /// header), or `None` with the frame counted as other traffic or undecodable. `whole`: the
    /// capture kept the whole frame (else an unreadable header is put down to the snap length).
    pub fn datagram<'a>(
        &mut self,
        layers: &'a [u8],
        start: Start,
        whole: bool,
    ) -> Option<Datagram<'a>> {
        // Located in place: the layers read before an error stay known.
        let mut p = Packet::new(layers);
        let located = p.locate(start, &self.locate);
        let version = p.ip.map_or(4, |ip| ip.version);
        if p.warnings.has(Warning::IpLaterFragment) {
            self.undecodable(format!("ipv{version} fragment"));
            return None;
        }
        let ports = &self.locate.report_ports;
        let to_report_port =
            |l4: &intscope_wire::locate::L4Info| l4.proto == 17 && ports.contains(&l4.dst_port);
        let (ip, l4) = match (p.ip, p.l4, located) {
            (Some(_), Some(l4), _)
                if to_report_port(&l4) && p.warnings.has(Warning::IpFirstFragment) =>
            {
                self.undecodable(format!("ipv{version} fragment"));
                return None;
            }
            (Some(ip), Some(l4), _) if to_report_port(&l4) => (ip, l4),
            // An L4 header of another port or protocol (an error behind it is in that traffic),
            // or a frame that is whole and has no IP or no L4 (ARP, ICMP).
            (_, Some(_), _) | (_, _, Ok(())) => {
                self.other();
                return None;
            }
            (_, None, Err(e)) => {
                self.undecodable(if whole {
                    format!("{} {}", e.layer.id(), e.kind.id())
                } else {
                    "cut short by the capture".to_string()
                });
                return None;
            }
        };
        let Ok((payload, cut, len)) = udp_payload(layers, l4.offset, ip.offset + ip.declared_len)
        else {
            self.undecodable("UDP length disagrees with IP");
            return None;
        };
        Some(Datagram {
            payload,
            len,
            src: ip.src.to_canonical(),
            cut,
        })
    }

    /// Hands `d`, received at `time_ns` (capture time), to the collector, counted as the receive
    /// threads count a datagram: one larger than the receive slot is `oversize` and not decoded,
    /// as the kernel would have cut it.
    pub fn deliver(&mut self, d: Datagram<'_>, time_ns: u64) {
        let c = self.collector;
        self.counts.datagrams += 1;
        if d.len > c.config.recv_slot {
            self.counts.oversize += 1;
            let mut tally = Tally::default();
            c.note_oversize(d.src, &mut tally);
            c.count(&tally);
            return;
        }
        c.ingest(d.payload, d.src, time_ns, &mut self.batch);
        self.counts.cut_by_capture += u64::from(d.cut);
    }

    /// The capture is over: joins and episodes still waiting for reports are closed, and the
    /// incidents published. Returns the counts.
    pub fn finish(self) -> ReplayCounts {
        let c = self.collector;
        let end = c.state.last_time_ns();
        let d = &c.config.detect;
        c.tick(end.saturating_add(d.join_window_ns.max(d.episode_quiet_ns) + 1));
        c.state.finish_incidents();
        self.counts
    }
}

/// The UDP payload of a report datagram in `data` (UDP header at `l4`, inside the IP packet
/// ending at `ip_end`): what the UDP length declares, cut to what was captured, so that Ethernet
/// padding or a trailer (FCS) after the IP packet is not read as reports. `Err` when the UDP
/// length is impossible (under its own header, or past the IP packet), as the kernel would
/// drop it; `Ok((payload, cut, len))`, `cut` when the capture holds less than the datagram,
/// `len` the payload's length on the wire.
fn udp_payload(data: &[u8], l4: usize, ip_end: usize) -> Result<(&[u8], bool, usize), ()> {
    let udp_len = data
        .get(l4 + 4..l4 + 6)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        .ok_or(())?;
    if udp_len < 8 || l4 + udp_len > ip_end {
        return Err(());
    }
    let end = l4 + udp_len;
    let start = (l4 + 8).min(data.len());
    Ok((
        &data[start..end.min(data.len()).max(start)],
        end > data.len(),
        udp_len - 8,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_udp_length_bounds_the_payload() {
        // IPv4 (20) + UDP (8) + 4 bytes of payload + 2 bytes of Ethernet padding.
        let mut d = vec![0u8; 34];
        d[24..26].copy_from_slice(&12u16.to_be_bytes());
        assert_eq!(udp_payload(&d, 20, 32), Ok((&d[28..32], false, 4)));
        // Cut by the capture after 2 payload bytes.
        assert_eq!(udp_payload(&d[..30], 20, 32), Ok((&d[28..30], true, 4)));
        // Under its own header, or past the IP packet.
        d[24..26].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(udp_payload(&d, 20, 32), Err(()));
        d[24..26].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(udp_payload(&d, 20, 32), Err(()));
    }
}
