//! Frame builders for tests: outer headers from etherparse (checksums computed), INT bytes from
//! the crate's own `emit` functions.
#![allow(dead_code)]

use etherparse::{IpNumber, Ipv4Header, TcpHeader, UdpHeader};
use intscope_wire::md::MdHeaderRepr;
use intscope_wire::metadata::{Format, HopMetadata};
use intscope_wire::mx::MxHeaderRepr;
use intscope_wire::shim::{Shim, TcpUdpShimRepr};

pub const SRC: [u8; 4] = [10, 0, 1, 1];
pub const DST: [u8; 4] = [10, 0, 3, 3];

/// The spec examples' INT-MD header: Ver 2, Hop ML 2, bitmap = node id + queue, RHC as given.
pub fn md(rhc: u8) -> MdHeaderRepr {
    MdHeaderRepr {
        version: 2,
        hop_ml: 2,
        remaining_hop_count: rhc,
        instructions: 0x9000,
        ..Default::default()
    }
}

/// The spec examples' INT-MX header (node id + queue).
pub fn mx() -> MxHeaderRepr {
    MxHeaderRepr {
        version: 2,
        instructions: 0x9000,
        ..Default::default()
    }
}

/// A TCP/UDP shim (INT-MD type) with `npt` and its content field; `md_block` sets the length.
pub fn tcp_shim(npt: u8, content: u16) -> Shim {
    Shim::TcpUdp(TcpUdpShimRepr {
        int_type: 1,
        npt,
        reserved: 0,
        length: 0,
        content,
    })
}

/// Ethernet + IPv4 (`proto`, `dscp`) + `payload`.
pub fn eth_ipv4(proto: u8, dscp: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00];
    out.extend(ipv4(proto, dscp, payload));
    out
}

/// IPv4 header (checksum computed) + payload.
pub fn ipv4(proto: u8, dscp: u8, payload: &[u8]) -> Vec<u8> {
    let mut ip = Ipv4Header::new(payload.len() as u16, 64, IpNumber(proto), SRC, DST).unwrap();
    ip.dscp = etherparse::IpDscp::try_new(dscp).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = ip.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// UDP header (checksum over IPv4 SRC→DST) + payload.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let h = UdpHeader::with_ipv4_checksum(
        sport,
        dport,
        &Ipv4Header::new(0, 64, IpNumber::UDP, SRC, DST).unwrap(),
        payload,
    )
    .unwrap();
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// UDP header with a zero checksum + payload.
pub fn udp_no_checksum(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let h = UdpHeader {
        source_port: sport,
        destination_port: dport,
        length: (8 + payload.len()) as u16,
        checksum: 0,
    };
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// TCP header (SYN-ACK-less data segment, checksum over IPv4 SRC→DST with protocol 6) + payload.
pub fn tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = TcpHeader::new(sport, dport, 1000, 8192);
    h.psh = true;
    h.ack = true;
    h.acknowledgment_number = 77;
    h.checksum = h.calc_checksum_ipv4_raw(SRC, DST, payload).unwrap();
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// An INT-MD block: shim (its length set), header, hops (top first) + extra bytes (source-only).
pub fn md_block(
    mut shim: Shim,
    header: MdHeaderRepr,
    hops: &[HopMetadata<'_>],
    source_only: &[u8],
) -> Vec<u8> {
    let mut body = vec![0u8; 256];
    let mut at = 0;
    for h in hops {
        at += h.encode(header.instructions, Format::IntV2, &mut body[at..]);
    }
    body.truncate(at);
    body.extend_from_slice(source_only);
    shim.set_length_words(((12 + body.len()) / 4) as u8);
    let mut out = vec![0u8; 16];
    shim.emit(&mut out[..4]);
    header.emit(&mut out[4..16]);
    out.extend(body);
    out
}

/// An INT-MX block with source-inserted metadata.
pub fn mx_block(mut shim: Shim, header: MxHeaderRepr, source_inserted: &[u8]) -> Vec<u8> {
    shim.set_length_words(((12 + source_inserted.len()) / 4) as u8);
    let mut out = vec![0u8; 16];
    shim.emit(&mut out[..4]);
    header.emit(&mut out[4..16]);
    out.extend_from_slice(source_inserted);
    out
}

/// A hop with node id and queue occupancy (queue id 0), as in the spec examples.
pub fn node_q(node: u32, occupancy: u32) -> HopMetadata<'static> {
    HopMetadata {
        present: 0x9000,
        node_id: Some(node),
        queue_id: Some(0),
        queue_occupancy: Some(occupancy),
        ..Default::default()
    }
}

/// Decodes a hex string (whitespace ignored).
pub fn unhex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    hex::decode(clean).unwrap()
}

/// Report v2.0 example 3 (§"Example with Embedded INT-MD in a TCP Packet"): Switch3's report
/// about `inner` (IPv4, embedded INT-MD) with its own queue occupancy 300 in the header.
pub fn embedded_int_report(inner: &[u8]) -> Vec<u8> {
    use intscope_wire::report::{GroupHeaderRepr, IndividualHeaderRepr, IntMainRepr};
    let mut b = vec![0u8; 24];
    GroupHeaderRepr {
        version: 2,
        hw_id: 1,
        sequence: 9,
        node_id: 3,
    }
    .emit(&mut b[..8]);
    IndividualHeaderRepr {
        rep_type: 1,
        in_type: 4,
        report_length: 23,
        md_length: 1,
        f: true,
        ..Default::default()
    }
    .emit(&mut b[8..12]);
    IntMainRepr {
        rep_md_bits: 0x1000,
        ..Default::default()
    }
    .emit(&mut b[12..20]);
    b[20..24].copy_from_slice(&[0, 0, 0x01, 0x2c]);
    b.extend_from_slice(inner);
    b
}

/// The interop corpus, `$INTSCOPE_SHARED/interop` (else `../shared/interop` beside the checkout),
/// or `None` when it is absent: the corpus belongs to other projects and is never copied into this
/// repository, so a plain clone cannot have it. `test` then says on stderr that it is skipped and
/// why — written past the test harness's capture, so `cargo test` shows it — unless
/// `INTSCOPE_REQUIRE_INTEROP=1` (CI, which always has the corpus), where the absence fails.
pub fn interop_dir(test: &str) -> Option<std::path::PathBuf> {
    use std::io::Write;
    let base = std::env::var_os("INTSCOPE_SHARED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
        });
    let dir = base.join("interop");
    if dir.join("INDEX.md").exists() {
        return Some(dir);
    }
    let why = format!(
        "interop corpus not found at {} (INTSCOPE_SHARED names the folder holding interop/)",
        dir.display()
    );
    assert!(
        std::env::var_os("INTSCOPE_REQUIRE_INTEROP").is_none_or(|v| v.is_empty() || v == "0"),
        "{why}; INTSCOPE_REQUIRE_INTEROP is set, so this is a failure"
    );
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
    None
}
