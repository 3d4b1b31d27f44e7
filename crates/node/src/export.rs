//! Report delivery framing: a report datagram wrapped in Ethernet/IPv4/UDP to the collector, for
//! writing reports to a pcap (Report v2.0 §"Outer Encapsulation": the source address identifies
//! the reporting node; DF set).

use std::net::SocketAddrV4;

use etherparse::PacketBuilder;

/// An Ethernet frame carrying `payload` from `src` to `collector` over UDP (checksum computed).
pub fn report_frame(src: SocketAddrV4, collector: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2])
        .ipv4(src.ip().octets(), collector.ip().octets(), 64)
        .udp(src.port(), collector.port());
    let mut out = Vec::with_capacity(builder.size(payload.len()));
    // Writing into a Vec cannot fail.
    let _ = builder.write(&mut out, payload);
    // Report v2.0 §"Outer Encapsulation": set DF so the IPv4 ID need not be unique.
    out[14 + 6] |= 0x40;
    let ihl = 14;
    out[ihl + 10] = 0;
    out[ihl + 11] = 0;
    let c = intscope_wire::checksum::internet_checksum(&out[ihl..ihl + 20]);
    out[ihl + 10..ihl + 12].copy_from_slice(&c.to_be_bytes());
    out
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
        let Ok(mut g) = intscope_wire::report::GroupHeaderRepr::parse(datagram) else {
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
