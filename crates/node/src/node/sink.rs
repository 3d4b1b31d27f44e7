//! The INT sink (INT v2.1 §"INT Sink Node"): INT removed and the original packet restored in every
//! encapsulation; the Destination header consumed.

use super::Node;
use crate::frame::{self, Layout};
use intscope_wire::destination::Destination;
use intscope_wire::int::AnyShim;
use intscope_wire::locate::{Packet, Start};
use intscope_wire::shim::{GpeShimRepr, GreShimRepr, SHIM_LEN, Shim, TcpUdpShim, TcpUdpShimRepr};

use intscope_wire::tunnel::{VXLAN_LEN, VxlanPacket};
use intscope_wire::udp::UDP_HEADER_LEN;

impl Node {
    /// The body of the Destination header after the TCP/UDP INT block at `off`, which the sink
    /// consumes (INT v2.1 §"INT Header Types").
    pub(super) fn consume_destination(
        &mut self,
        frame: &[u8],
        off: usize,
        shim: AnyShim,
    ) -> Option<Vec<u8>> {
        let AnyShim::V2(Shim::TcpUdp(_)) = shim else {
            return None;
        };
        // The shim as it is now (a sink pushing its metadata on the stack made it longer).
        let d = self.destination_after(frame, off)?;
        self.stats.destinations += 1;
        Some(d.body().to_vec())
    }

    /// The Destination header after the TCP/UDP INT block at `off`, when this sink expects them
    /// (`destination_headers`: the spec signals none, so a payload starting like one must not be
    /// taken for one) and it repeats the block's shim (NPT and field), as sources write it.
    pub(super) fn destination_after<'f>(
        &self,
        frame: &'f [u8],
        off: usize,
    ) -> Option<Destination<&'f [u8]>> {
        if !self.cfg.destination_headers {
            return None;
        }
        // The shim as it is now (a sink pushing its metadata on the stack made it longer).
        let shim = TcpUdpShimRepr::parse(&TcpUdpShim::new_checked(frame.get(off..)?).ok()?);
        let end = off + SHIM_LEN + usize::from(shim.length) * 4;
        Destination::new_checked(frame.get(end..)?)
            .ok()
            .filter(|d| d.npt() == shim.npt && d.content() == shim.content)
    }

    /// INT v2.1 §"INT Sink Node": remove INT and restore the original packet (DSCP, UDP
    /// destination port, or IP protocol with the new UDP header removed).
    pub(super) fn strip(&mut self, frame: &mut Vec<u8>) -> Option<()> {
        let p = Packet::parse(frame, Start::Ethernet, &self.detect).ok()?;
        let l = Layout::of(&p)?;
        let (off, block) = p.int?;
        // A Destination header after a TCP/UDP block goes with it.
        let len = block.len
            + match block.shim {
                AnyShim::V2(Shim::TcpUdp(_)) => self
                    .destination_after(frame, off)
                    .map_or(0, |d| d.total_len()),
                _ => 0,
            };
        if let AnyShim::V2(Shim::Gre(g)) = block.shim {
            self.strip_gre(frame, &l, off, len, g);
            self.stats.sunk += 1;
            return Some(());
        }
        if let AnyShim::V2(Shim::Gpe(g)) = block.shim {
            self.strip_gpe(frame, &l, off, len, g)?;
            self.stats.sunk += 1;
            return Some(());
        }
        if let AnyShim::V2(Shim::Geneve(_)) = block.shim {
            // Remove the INT option; the Geneve header's options shrink by it.
            frame::adjust_geneve_opt_len(frame, &l, -((len / 4) as isize));
            frame::udp_remove(frame, &l, off, len);
            self.stats.sunk += 1;
            return Some(());
        }
        let AnyShim::V2(Shim::TcpUdp(s)) = block.shim else {
            return None;
        };
        match s.npt {
            2 => {
                // Remove the new UDP header with the INT block; the original L4 header follows.
                let removed = off + len - l.l4_at;
                frame::remove(frame, l.l4_at, removed);
                frame::adjust_ip_len(frame, &l, -(removed as isize));
                frame::set_ip_proto(frame, &l, s.ip_proto());
            }
            npt => {
                // A probe marker in front of the shim goes with it.
                let marker = self.cfg.probe_marker().map(u64::to_be_bytes);
                let (off, len) = match marker {
                    Some(m) if off >= l.l4_at + l.l4_len + 8 && frame[off - 8..off] == m => {
                        (off - 8, len + 8)
                    }
                    _ => (off, len),
                };
                let block = frame.get(off..off + len)?.to_vec();
                let old_len = frame::l4_len(frame, &l);
                // A length field shorter than the INT block it holds: malformed, left as it is.
                let new_len = old_len.checked_sub(u16::try_from(len).ok()?)?;
                let udp = l.is_udp();
                let csum = frame::updated_l4_checksum(
                    frame::l4_checksum(frame, &l),
                    udp,
                    &block,
                    &[],
                    old_len,
                    new_len,
                    udp,
                );
                frame::set_l4_checksum(frame, &l, csum);
                if udp {
                    frame::set_udp_len(frame, &l, new_len);
                }
                if npt == 1 {
                    // The original destination port from the shim.
                    frame::set_udp_dst_port(frame, &l, s.udp_port());
                }
                frame::remove(frame, off, len);
                frame::adjust_ip_len(frame, &l, -(len as isize));
                if npt == 0 && self.cfg.restore_dscp {
                    frame::set_dscp(frame, &l, s.dscp());
                }
            }
        }
        self.stats.sunk += 1;
        Some(())
    }

    /// INT v2.1 §"INT over IPv4/GRE": G = 1, the source added the GRE encapsulation — remove it
    /// with INT, leaving the original IP packet; G = 0, remove INT and give GRE back its protocol
    /// type (the shim's Next Protocol).
    pub(super) fn strip_gre(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        len: usize,
        g: GreShimRepr,
    ) {
        if g.g {
            frame::remove(frame, l.ip_at, off + len - l.ip_at);
            // The EtherType in front of the IP header names what is there now.
            frame::set_ethertype(frame, l, g.next_protocol);
        } else {
            frame::remove(frame, off, len);
            frame::set_gre_protocol(frame, l, g.next_protocol);
            frame::payload_resized(frame, l, -(len as isize));
        }
    }

    /// INT v2.1 §"INT over VXLAN GPE": remove INT behind the VXLAN-GPE header and give the
    /// header back the next protocol the shim saved; G = 1, the packet was VXLAN: clear the P bit
    /// and the next protocol, and return to VXLAN's port.
    pub(super) fn strip_gpe(
        &mut self,
        frame: &mut Vec<u8>,
        l: &Layout,
        off: usize,
        len: usize,
        g: GpeShimRepr,
    ) -> Option<()> {
        let vx = l.l4_at + UDP_HEADER_LEN;
        if off != vx + VXLAN_LEN {
            return None;
        }
        let mut header: [u8; VXLAN_LEN] = frame.get(vx..vx + VXLAN_LEN)?.try_into().ok()?;
        let mut v = VxlanPacket::new_checked(&mut header[..]).ok()?;
        v.set_next_protocol(g.next_protocol);
        if g.g {
            // It was VXLAN: no next protocol, and VXLAN's port again.
            v.set_next_protocol_present(false);
            v.set_next_protocol(0);
            frame::set_udp_dst_port(frame, l, self.detect.vxlan_port);
        }
        frame::udp_overwrite(frame, l, vx, &header);
        frame::udp_remove(frame, l, off, len);
        Some(())
    }
}
