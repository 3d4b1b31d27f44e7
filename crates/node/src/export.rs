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
