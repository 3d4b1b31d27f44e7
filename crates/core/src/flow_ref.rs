//! A flow named for people and JSON: its addresses in their usual text form. The bottom of the
//! crate's names: events, evidence and incidents all name flows this way.

use core::net::IpAddr;
use std::io::Write as _;

use crate::flow::PathGap;
use intscope_wire::locate::FlowKey;

/// A flow as JSON-friendly strings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlowRef {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// IP protocol.
    pub proto: u8,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl From<&FlowKey> for FlowRef {
    fn from(k: &FlowKey) -> Self {
        FlowRef {
            src: ip_string(k.src_ip()),
            dst: ip_string(k.dst_ip()),
            proto: k.proto,
            src_port: k.src_port,
            dst_port: k.dst_port,
        }
    }
}

/// An address in its usual text form.
pub(crate) fn ip_string(ip: IpAddr) -> String {
    let mut text = Vec::with_capacity(15);
    write_ip(&mut text, ip);
    // Digits, dots and colons: always UTF-8.
    String::from_utf8(text).unwrap_or_default()
}

/// Appends `ip` in its usual text form. IPv4 is written by hand: `Ipv4Addr`'s `Display` goes
/// through the formatter's padding machinery, ~25× the cost, and culprit lists format dozens.
pub(crate) fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    let IpAddr::V4(v4) = ip else {
        // Writing to a `Vec` cannot fail.
        let _ = write!(out, "{ip}");
        return;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        write_decimal(out, u16::from(octet));
    }
}

/// Appends `n` in decimal, a digit at a time: a loop into a scratch array and a copy of its
/// tail took a third longer per search (copies of a varying length are calls).
fn write_decimal(out: &mut Vec<u8>, n: u16) {
    for scale in [10_000, 1_000, 100, 10] {
        if n >= scale {
            out.push(b'0' + (n / scale % 10) as u8);
        }
    }
    out.push(b'0' + (n % 10) as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_their_display_form() {
        for a in [
            "0.0.0.0",
            "10.0.0.1",
            "192.168.100.255",
            "1.20.255.9",
            "2001:db8::1",
            "::ffff:0:1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(ip_string(ip), ip.to_string(), "{a}");
        }
    }
}

/// What the flow stage learned about a record, for the fabric stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowSeen {
    /// The flow's API ID (`None` without a flow key).
    pub id: Option<u64>,
    /// Hops an intermediate report recorded before this report's stack began.
    pub head_hops: u8,
    /// Where an INT-MD stack with an M bit or hops without INT left hops out, when the links
    /// learned tell ([`crate::flow::LinkTable::gap_in`]).
    pub gap: Option<PathGap>,
    /// Of a drop report: the node the dropping hop's egress port leads to, when this flow
    /// stage learned that link (INT-XD's postcards teach links here, one hop per record).
    pub drop_peer: Option<u32>,
    /// The record said nothing new to the fabric's detectors: its hops were deferred
    /// (`crate::fast_path`), only its reporter's part is left.
    pub unchanged: bool,
}
