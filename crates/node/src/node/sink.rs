//! The INT sink (INT v2.1 §"INT Sink Node"): INT removed and the original packet restored in every
//! encapsulation; the Destination header consumed.

use super::*;

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
                let block = frame[off..off + len].to_vec();
                let old_len = frame::l4_len(frame, &l);
                let new_len = old_len - len as u16;
                let udp = l.proto == 17;
                let csum_at = l.l4_checksum_at();
                let mut csum = frame::updated_l4_checksum(
                    frame::get16(frame, csum_at),
                    udp,
                    &block,
                    &[],
                    old_len,
                    new_len,
                    udp,
                );
                if npt == 1 {
                    let int_port = frame::get16(frame, l.l4_at + 2);
                    frame::set16(frame, l.l4_at + 2, s.udp_port());
                    if csum != 0 {
                        csum = intscope_wire::checksum::udp_wire_checksum(
                            intscope_wire::checksum::update(
                                csum,
                                &int_port.to_be_bytes(),
                                &s.udp_port().to_be_bytes(),
                            ),
                        );
                    }
                }
                if udp {
                    frame::set16(frame, l.l4_at + 4, new_len);
                }
                frame::set16(frame, csum_at, csum);
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
            frame::set16(frame, l.ip_at - 2, g.next_protocol);
        } else {
            frame::remove(frame, off, len);
            frame::set16(frame, l.l4_at + 2, g.next_protocol);
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
        let vx = l.l4_at + 8;
        if off != vx + 8 {
            return None;
        }
        let mut header: [u8; 8] = frame[vx..vx + 8].try_into().ok()?;
        header[3] = g.next_protocol;
        if g.g {
            header[0] &= !0x04;
            header[3] = 0;
            let port = self.detect.vxlan_port.to_be_bytes();
            frame::udp_overwrite(frame, l, l.l4_at + 2, &port);
        }
        frame::udp_overwrite(frame, l, vx, &header);
        frame::udp_remove(frame, l, off, len);
        Some(())
    }
}
