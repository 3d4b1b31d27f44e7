//! Report delivery: sequence numbers per destination, coalescing several individual reports into
//! one v2.0 datagram within a size and time budget, and the Ethernet/IPv4/UDP framing of a report
//! written to a pcap (Report v2.0 §"Outer Encapsulation": the source address identifies the
//! reporting node; IPv4 with DF set, or IPv6).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use etherparse::PacketBuilder;
use intscope_wire::report::{GROUP_LEN, GroupHeaderRepr};

/// An Ethernet frame carrying `payload` from `src` to `collector` over UDP (checksum computed),
/// over IPv4 or IPv6 as the addresses are (Report v2.0 §"Outer Encapsulation": "an Ethernet
/// header, followed by an IPv4 or IPv6 header, followed by the UDP header"). When one address is IPv4 and the other IPv6, the IPv4 one is
/// written IPv4-mapped (`::ffff:a.b.c.d`) in an IPv6 header.
pub fn report_frame(
    src: impl Into<SocketAddr>,
    collector: impl Into<SocketAddr>,
    payload: &[u8],
) -> Vec<u8> {
    let (src, collector) = (src.into(), collector.into());
    let eth = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]);
    let builder = match (src.ip(), collector.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
        (s, d) => eth.ipv6(v6(s).octets(), v6(d).octets(), 64),
    }
    .udp(src.port(), collector.port());
    let mut out = Vec::with_capacity(builder.size(payload.len()));
    // Writing into a Vec cannot fail.
    let _ = builder.write(&mut out, payload);
    if src.is_ipv4() && collector.is_ipv4() {
        // Report v2.0 §"Outer Encapsulation": set DF so the IPv4 ID need not be unique.
        let ip = &mut out[14..14 + 20];
        ip[6] |= 0x40;
        ip[10..12].fill(0);
        let c = intscope_wire::checksum::internet_checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    out
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Report sequence numbers per (node, hw_id) for one destination (Report v2.0 §"Telemetry Report
/// Group Header": "the sequence of reports from a specific combination of (Node ID, hw_id) to a
/// particular telemetry report destination"). One switch may run several roles (source, transit,
/// sink); their reports share one sequence here.
#[derive(Debug, Default)]
pub struct Sequencer {
    next: std::collections::HashMap<(u32, u8), u32>,
}

impl Sequencer {
    /// Writes the next sequence number into a v2.0 report datagram's group header (other
    /// versions are left alone).
    pub fn stamp(&mut self, datagram: &mut [u8]) {
        let Ok(mut g) = GroupHeaderRepr::parse(datagram) else {
            return;
        };
        if g.version != 2 {
            return;
        }
        let n = self.next.entry((g.node_id, g.hw_id)).or_insert(0);
        g.sequence = *n & 0x3f_ffff;
        *n = n.wrapping_add(1);
        g.emit(&mut datagram[..8]);
    }
}

/// How reports leave the node (`[export]` in the node configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportConfig {
    /// Coalesce v2.0 reports into datagrams of at most this many bytes (UDP payload; 1472 fills
    /// a 1500-byte IPv4 MTU). 0: one report per datagram, as Tofino switches send them.
    pub coalesce_bytes: usize,
    /// A report waits at most this long for others to share its datagram.
    pub coalesce_delay_ns: u64,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            coalesce_bytes: 0,
            coalesce_delay_ns: 1_000_000,
        }
    }
}

/// A datagram being filled: the group header and the individual reports so far.
#[derive(Debug)]
struct Pending {
    datagram: Vec<u8>,
    since_ns: u64,
}

/// Numbers and (for v2.0, when configured) coalesces report datagrams on their way to one
/// destination. Report v2.0 §"Telemetry Report Group Header": a packet carries "one or more
/// individual reports" under one group header, so reports of one (Node ID, hw_id) share a
/// datagram; its sequence number counts datagrams to this destination.
#[derive(Debug, Default)]
pub struct Exporter {
    cfg: ExportConfig,
    pending: std::collections::BTreeMap<(u32, u8), Pending>,
    sequencer: Sequencer,
}

impl Exporter {
    /// An exporter with this budget.
    pub fn new(cfg: ExportConfig) -> Self {
        Exporter {
            cfg,
            ..Exporter::default()
        }
    }

    /// Takes one report datagram produced at `now_ns`; appends the datagrams ready to send to
    /// `out`.
    pub fn push(&mut self, now_ns: u64, mut datagram: Vec<u8>, out: &mut Vec<Vec<u8>>) {
        self.poll(now_ns, out);
        let group = GroupHeaderRepr::parse(&datagram)
            .ok()
            .filter(|g| g.version == 2);
        let (Some(g), true) = (group, self.cfg.coalesce_bytes > 0) else {
            self.sequencer.stamp(&mut datagram);
            out.push(datagram);
            return;
        };
        let key = (g.node_id, g.hw_id);
        // Report Length 0xFF ("to the end of the packet") must be the last report of its
        // datagram: it travels alone.
        let to_the_end = datagram.get(GROUP_LEN + 1) == Some(&0xff);
        let fits =
            |p: &Pending| p.datagram.len() + datagram.len() - GROUP_LEN <= self.cfg.coalesce_bytes;
        if let Some(p) = self.pending.get(&key)
            && (to_the_end || !fits(p))
        {
            self.send(key, out);
        }
        match self.pending.get_mut(&key) {
            Some(p) => p.datagram.extend_from_slice(&datagram[GROUP_LEN..]),
            None => {
                self.pending.insert(
                    key,
                    Pending {
                        datagram,
                        since_ns: now_ns,
                    },
                );
            }
        }
        if to_the_end || self.pending[&key].datagram.len() >= self.cfg.coalesce_bytes {
            self.send(key, out);
        }
    }

    /// Sends the datagrams whose oldest report has waited `coalesce_delay_ns` by `now_ns`.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        let due: Vec<(u32, u8)> = self
            .pending
            .iter()
            .filter(|(_, p)| now_ns.saturating_sub(p.since_ns) >= self.cfg.coalesce_delay_ns)
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            self.send(key, out);
        }
    }

    /// Sends everything still waiting (at the end of the input, on shutdown).
    pub fn flush(&mut self, out: &mut Vec<Vec<u8>>) {
        let keys: Vec<(u32, u8)> = self.pending.keys().copied().collect();
        for key in keys {
            self.send(key, out);
        }
    }

    fn send(&mut self, key: (u32, u8), out: &mut Vec<Vec<u8>>) {
        if let Some(mut p) = self.pending.remove(&key) {
            self.sequencer.stamp(&mut p.datagram);
            out.push(p.datagram);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn report_frames_over_ipv4_with_df() {
        let f = report_frame(
            "192.0.2.1:50000".parse::<SocketAddr>().unwrap(),
            "192.0.2.100:32766".parse::<SocketAddr>().unwrap(),
            &[1, 2, 3, 4],
        );
        assert_eq!(f.len(), 14 + 20 + 8 + 4);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[14 + 6] & 0x40, 0x40, "DF");
        assert_eq!(intscope_wire::checksum::internet_checksum(&f[14..34]), 0);
        assert_eq!(&f[14 + 12..14 + 20], &[192, 0, 2, 1, 192, 0, 2, 100]);
        assert_eq!(&f[34..38], &[0xc3, 0x50, 0x7f, 0xfe]);
        assert_eq!(&f[42..], &[1, 2, 3, 4]);
    }

    #[test]
    fn report_frames_over_ipv6() {
        let f = report_frame(
            "[2001:db8::1]:50000".parse::<SocketAddr>().unwrap(),
            "[2001:db8::64]:32766".parse::<SocketAddr>().unwrap(),
            &[1, 2, 3, 4],
        );
        assert_eq!(f.len(), 14 + 40 + 8 + 4);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert_eq!(f[14] >> 4, 6);
        assert_eq!(
            &f[14 + 4..14 + 8],
            &[0, 12, 17, 64],
            "payload length, UDP, hop limit"
        );
        assert_eq!(f[14 + 8 + 15], 1);
        assert_eq!(f[14 + 24 + 15], 0x64);
        assert_eq!(&f[54..58], &[0xc3, 0x50, 0x7f, 0xfe]);
        assert_ne!(&f[60..62], &[0, 0], "IPv6 needs the UDP checksum");
        let p = intscope_wire::locate::Packet::parse(
            &f,
            intscope_wire::locate::Start::Ethernet,
            &intscope_wire::locate::DetectConfig {
                verify_checksums: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(!p.warnings.has(intscope_wire::Warning::BadL4Checksum));
        // An IPv4 source towards an IPv6 collector: IPv4-mapped.
        let m = report_frame(
            "192.0.2.1:50000".parse::<SocketAddr>().unwrap(),
            "[2001:db8::64]:32766".parse::<SocketAddr>().unwrap(),
            &[],
        );
        assert_eq!(
            &m[14 + 8..14 + 24],
            &Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped().octets()
        );
    }
}
