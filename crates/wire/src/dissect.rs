//! Owned, JSON-shaped dissection of a frame: what `intscope dump` prints (schema:
//! `docs/dump-json.md`). Built on the zero-copy decoders; allocates, so it stays off hot paths.

use serde_json::{Map, Value, json};

use crate::domain::{Mode, Registry};
use crate::error::{Error, Field};
use crate::int::{AnyShim, Encap, IntBlock, IntHeader};
use crate::legacy::V05HeaderRepr;
use crate::locate::{DetectConfig, FlowKey, Packet, Start};
use crate::metadata::{Format, HopMetadata};
use crate::report::{InType, IndividualReport, RepType, Report, drop_reason_name};
use crate::shim::Shim;
use crate::warning::Warnings;

/// Dissects one frame (starting with Ethernet). `frame` is its 1-based number.
pub fn frame(frame: u64, bytes: &[u8], cfg: &DetectConfig, registry: Option<&Registry>) -> Value {
    frame_from(frame, bytes, 0, Start::Ethernet, cfg, registry)
}

/// Dissects one frame whose layers start `at` bytes in, with `start` (after a link header that
/// is not Ethernet: a Linux cooked capture header, or none for raw IP). `len` and every offset
/// stay counted from the frame's first byte.
pub fn frame_from(
    frame: u64,
    bytes: &[u8],
    at: usize,
    start: Start,
    cfg: &DetectConfig,
    registry: Option<&Registry>,
) -> Value {
    let mut out = Map::new();
    out.insert("frame".into(), json!(frame));
    out.insert("len".into(), json!(bytes.len()));
    let mut warnings = Warnings::default();
    let at = at.min(bytes.len());
    let result = packet_value(
        &bytes[at..],
        start,
        cfg,
        registry,
        None,
        &mut warnings,
        &mut out,
    );
    if at > 0 {
        for key in ["int", "int_stacked"] {
            if let Some(Value::Object(m)) = out.get_mut(key)
                && let Some(off) = m.get("offset").and_then(Value::as_u64)
            {
                m.insert("offset".into(), json!(off + at as u64));
            }
        }
    }
    if let Err(e) = result {
        out.insert("error".into(), error_value(&e.shifted(at)));
    }
    if !warnings.is_empty() {
        out.insert("warnings".into(), warnings_value(warnings));
    }
    Value::Object(out)
}

/// An error as JSON: message, layer, offset and the typed details.
pub fn error_value(e: &Error) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("message".into(), json!(e.to_string()));
    }
    v
}

fn warnings_value(w: Warnings) -> Value {
    Value::Array(
        w.iter()
            .map(|w| json!({"code": w.code(), "message": w.message()}))
            .collect(),
    )
}

fn flow_value(f: &FlowKey) -> Value {
    json!({"src": f.src_ip().to_string(), "dst": f.dst_ip().to_string(), "proto": f.proto, "src_port": f.src_port, "dst_port": f.dst_port})
}

/// Fills `out` with the layers, INT and report of a packet. A malformed layer is the error
/// returned, after the layers decoded before it were filled in (as tshark keeps a malformed
/// frame's good layers and marks where it broke); the error's layer and offset say where.
/// `copy`: `Some(F bit)` for a report's copy of a packet ([`Packet::locate_copy`]).
fn packet_value(
    bytes: &[u8],
    start: Start,
    cfg: &DetectConfig,
    registry: Option<&Registry>,
    copy: Option<bool>,
    warnings: &mut Warnings,
    out: &mut Map<String, Value>,
) -> Result<(), Error> {
    let mut p = Packet::new(bytes);
    let located = match copy {
        Some(tracked) => p.locate_copy(start, cfg, tracked),
        None => p.locate(start, cfg),
    };
    warnings.merge(p.warnings);
    if p.vlan_count > 0 {
        let n = usize::from(p.vlan_count).min(2);
        out.insert("vlans".into(), json!(p.vlans[..n]));
    }
    if let Some(ip) = p.ip {
        out.insert(
            "ip".into(),
            json!({"version": ip.version, "src": ip.src.to_canonical().to_string(), "dst": ip.dst.to_canonical().to_string(),
                   "proto": ip.proto, "dscp": ip.dscp, "ttl": ip.ttl}),
        );
    }
    if let Some(l4) = p.l4 {
        out.insert(
            "l4".into(),
            json!({"proto": if l4.proto == 6 {"tcp"} else {"udp"}, "src_port": l4.src_port, "dst_port": l4.dst_port, "checksum": l4.checksum}),
        );
    }
    // A flow whose L4 header failed has no ports yet: not a 5-tuple to show.
    if let Some(f) = &p.flow
        && (located.is_ok() || p.l4.is_some() || !matches!(f.proto, 6 | 17))
    {
        out.insert("flow".into(), flow_value(f));
    }
    if let Some(f) = &p.inner_flow {
        out.insert("inner_flow".into(), flow_value(f));
    }
    if let Some((offset, block)) = &p.int {
        let mut v = int_value(block, registry, warnings);
        if let Value::Object(m) = &mut v {
            m.insert("offset".into(), json!(offset));
        }
        out.insert("int".into(), v);
    }
    if let Some((offset, block)) = &p.int2 {
        let mut v = int_value(block, registry, warnings);
        if let Value::Object(m) = &mut v {
            m.insert("offset".into(), json!(offset));
        }
        out.insert("int_stacked".into(), v);
    }
    located?;
    if let (Some(l4), Some(ip)) = (p.l4, p.ip)
        && l4.proto == 17
        && cfg.is_report_port(l4.dst_port)
        && p.int.is_none()
    {
        // RFC 768: "Length is the length in octets of this user datagram including this header
        // and the data. (This means the minimum value of the length is eight.)" The datagram
        // is the IP packet's payload (RFC 791 Total Length; RFC 8200 Payload Length), so a
        // length under 8 or past what the IP length leaves is no datagram to read reports from.
        let udp_len = bytes
            .get(l4.offset + 4..l4.offset + 6)
            .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        let room = (ip.offset + ip.declared_len).saturating_sub(l4.offset);
        // A first fragment (RFC 791 More Fragments set, offset 0; RFC 8200 §4.5 M flag) holds
        // the UDP header of the whole datagram, whose length the fragment's own IP length does
        // not cover: its reports are read as far as the fragment goes, as truncated ones.
        let first_fragment = p.warnings.has(crate::Warning::IpFirstFragment);
        if udp_len < 8 || (udp_len > room && !first_fragment) {
            return Err(Error::bad_length(
                crate::error::Layer::Udp,
                l4.offset + 4,
                Field::Length,
                udp_len,
                room,
            ));
        }
        // The datagram is what the UDP length declares, cut to what was captured: an Ethernet
        // trailer after it (padding, an FCS) holds no reports.
        let start = (l4.offset + 8).min(bytes.len());
        let end = (l4.offset + udp_len).min(l4.offset + room);
        let payload = &bytes[start..end.clamp(start, bytes.len())];
        let mut inner_cfg = cfg.clone();
        inner_cfg.truncated = true;
        inner_cfg.verify_checksums = false;
        let cut = first_fragment && udp_len > room;
        let r = report_value(payload, cut, &inner_cfg, registry)
            .map_err(|e| e.shifted(l4.offset + 8))?;
        out.insert("report".into(), r);
    }
    Ok(())
}

fn shim_value(shim: &AnyShim) -> Value {
    match shim {
        AnyShim::V2(Shim::TcpUdp(s)) => {
            let mut m = json!({"type": s.int_type, "npt": s.npt, "length": s.length});
            let o = m.as_object_mut().expect("object");
            match s.npt {
                0 => o.insert("dscp".into(), json!(s.dscp())),
                1 => o.insert("udp_port".into(), json!(s.udp_port())),
                2 => o.insert("ip_proto".into(), json!(s.ip_proto())),
                _ => o.insert("content".into(), json!(s.content)),
            };
            if s.reserved != 0 {
                o.insert("reserved".into(), json!(s.reserved));
            }
            m
        }
        AnyShim::V2(Shim::Gre(s)) => {
            json!({"type": s.int_type, "g": s.g, "length": s.length, "next_protocol": s.next_protocol})
        }
        AnyShim::V2(Shim::Gpe(s)) => {
            json!({"type": s.int_type, "length": s.length, "g": s.g, "next_protocol": s.next_protocol})
        }
        AnyShim::V2(Shim::Geneve(s)) => {
            json!({"type": s.option_type, "length": s.length, "option_class": s.option_class})
        }
        AnyShim::Legacy(s) => {
            json!({"type": s.int_type, "length": s.length, "dscp": s.dscp(), "reserved": s.reserved})
        }
    }
}

fn raw_domain(bytes: &[u8]) -> Value {
    match bytes.len() {
        4 => json!(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        _ => json!(hex(bytes)),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Domain metadata of one hop or report: named when the registry knows the domain.
fn domain_value(
    ds_id: u16,
    bits: u16,
    bytes: &[u8],
    registry: Option<&Registry>,
    modes: &[Mode],
) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    let Some(d) = registry.and_then(|r| r.get(ds_id)) else {
        return json!({"raw": hex(bytes)});
    };
    let mut m = Map::new();
    let mut rest = bytes;
    for &mode in modes {
        let len = d.len_of(bits, mode).unwrap_or(0).min(rest.len());
        for (name, b) in d.split(bits, mode, &rest[..len]) {
            m.insert(name.to_string(), raw_domain(b));
        }
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        m.insert("unparsed".into(), json!(hex(rest)));
    }
    Value::Object(m)
}

fn hop_value(h: &HopMetadata<'_>, format: Format) -> Map<String, Value> {
    let mut m = Map::new();
    for (name, v) in h.fields(format) {
        m.insert(name.into(), v.map_or(Value::Null, |v| json!(v)));
    }
    m
}

/// The fields of the INT v0.5 metadata header, which the 2016 format shares (one parser, one
/// [`V05HeaderRepr`]), in the order `dump` prints them.
fn insert_v05_header(m: &mut Map<String, Value>, h: &V05HeaderRepr) {
    for (k, v) in [
        ("rep", json!(h.rep)),
        ("c", json!(h.c)),
        ("e", json!(h.e)),
        ("ins_cnt", json!(h.ins_cnt)),
        ("max_hop_count", json!(h.max_hop_count)),
        ("total_hop_count", json!(h.total_hop_count)),
        ("instruction_bitmap", json!(h.instructions)),
    ] {
        m.insert(k.into(), v);
    }
}

/// The instruction and domain-specific fields INT-MD and INT-MX headers share (INT v2.1
/// "INT-MD Metadata Header Format", "INT-MX Header Format"); the reserved bits only when set.
fn insert_domain_header(
    m: &mut Map<String, Value>,
    instructions: u16,
    ds_id: u16,
    ds_instruction: u16,
    ds_flags: u16,
    reserved: u64,
) {
    for (k, v) in [
        ("instruction_bitmap", json!(instructions)),
        ("ds_id", json!(ds_id)),
        ("ds_instruction", json!(ds_instruction)),
        ("ds_flags", json!(ds_flags)),
    ] {
        m.insert(k.into(), v);
    }
    if reserved != 0 {
        m.insert("reserved".into(), json!(reserved));
    }
}

fn int_value(block: &IntBlock<'_>, registry: Option<&Registry>, warnings: &mut Warnings) -> Value {
    let mut m = Map::new();
    m.insert("encap".into(), json!(block.encap.name()));
    m.insert("type".into(), json!(block.int_type().name()));
    m.insert("version".into(), json!(block.version()));
    match block.shim {
        // A legacy shim after VXLAN-GPE is the 2016 format's (Next Protocol 0x05).
        AnyShim::Legacy(s) if block.encap == Encap::VxlanGpe => {
            m.insert("spec".into(), json!("2016"));
            m.insert(
                "shim".into(),
                json!({"type": s.int_type, "length": s.length, "next_protocol": s.last, "reserved": s.reserved}),
            );
        }
        shim => {
            m.insert("shim".into(), shim_value(&shim));
        }
    }
    warnings.merge(block.warnings);
    let (stack, w) = block.stack(registry);
    warnings.merge(w);
    let (format, ds_id, ds_bits) = match block.header {
        IntHeader::Md(h) => {
            for (k, v) in [
                ("d", json!(h.d)),
                ("e", json!(h.e)),
                ("m", json!(h.m)),
                ("hop_ml", json!(h.hop_ml)),
                ("remaining_hop_count", json!(h.remaining_hop_count)),
            ] {
                m.insert(k.into(), v);
            }
            insert_domain_header(
                &mut m,
                h.instructions,
                h.ds_id,
                h.ds_instruction,
                h.ds_flags,
                h.reserved.into(),
            );
            (Format::IntV2, h.ds_id, h.ds_instruction)
        }
        IntHeader::Mx(h) => {
            m.insert("d".into(), json!(h.d));
            insert_domain_header(
                &mut m,
                h.instructions,
                h.ds_id,
                h.ds_instruction,
                h.ds_flags,
                h.reserved.into(),
            );
            let dv = domain_value(
                h.ds_id,
                h.ds_instruction,
                block.body,
                registry,
                &[Mode::SourceInserted],
            );
            if !dv.is_null() {
                m.insert("domain".into(), dv);
            }
            (Format::IntV2, h.ds_id, h.ds_instruction)
        }
        IntHeader::V1(h) => {
            for (k, v) in [
                ("rep", json!(h.rep)),
                ("c", json!(h.c)),
                ("e", json!(h.e)),
                ("m", json!(h.m)),
                ("hop_ml", json!(h.hop_ml)),
                ("remaining_hop_count", json!(h.remaining_hop_count)),
                ("instruction_bitmap", json!(h.instructions)),
            ] {
                m.insert(k.into(), v);
            }
            (Format::IntV1, 0, 0)
        }
        IntHeader::V05(h, tail) => {
            insert_v05_header(&mut m, &h);
            m.insert(
                "tail".into(),
                json!({"next_proto": tail.next_proto, "dest_port": tail.dest_port, "dscp": tail.dscp}),
            );
            (Format::IntV05, 0, 0)
        }
        IntHeader::V2016(h) => {
            insert_v05_header(&mut m, &h);
            (Format::Int2016, 0, 0)
        }
        IntHeader::Opaque => {
            m.insert("data".into(), json!(hex(block.body)));
            return Value::Object(m);
        }
    };
    if !matches!(block.header, IntHeader::Mx(_)) {
        let mut hops = Vec::new();
        for hop in stack {
            match hop.map(|v| v.to_metadata()) {
                Ok(h) => {
                    let mut hv = hop_value(&h, format);
                    if format == Format::Int2016 && h.bos {
                        hv.insert("bos".into(), json!(true));
                    }
                    let dv = domain_value(
                        ds_id,
                        ds_bits,
                        h.domain,
                        registry,
                        &[Mode::Export, Mode::SourceInserted],
                    );
                    if !dv.is_null() {
                        hv.insert("domain".into(), dv);
                    }
                    hops.push(Value::Object(hv));
                }
                Err(e) => {
                    m.insert("stack_error".into(), error_value(&e));
                    break;
                }
            }
        }
        m.insert("hops".into(), Value::Array(hops));
    }
    Value::Object(m)
}

fn report_value(
    payload: &[u8],
    cut: bool,
    cfg: &DetectConfig,
    registry: Option<&Registry>,
) -> Result<Value, Error> {
    // In a datagram cut short (a first fragment), a length past the end is the missing rest of
    // the datagram, not a false length: the structure is truncated.
    let as_cut = |e: Error| match e.kind {
        crate::ErrorKind::BadLength {
            claimed, available, ..
        } if cut && claimed > available => Error::truncated(e.layer, e.offset, claimed, available),
        _ => e,
    };
    let report = Report::parse(payload).map_err(as_cut)?;
    let mut m = Map::new();
    m.insert("version".into(), json!(report.version_name()));
    let mut warnings = Warnings::default();
    match report {
        Report::V2 { group, .. } => {
            m.insert("hw_id".into(), json!(group.hw_id));
            m.insert("seq".into(), json!(group.sequence));
            m.insert("node_id".into(), json!(group.node_id));
            let mut reports = Vec::new();
            for r in report.individual_reports() {
                match r {
                    Ok(r) => reports.push(individual_value(&r, cfg, registry)),
                    Err(e) => {
                        m.insert("error".into(), error_value(&as_cut(e)));
                        break;
                    }
                }
            }
            m.insert("reports".into(), Value::Array(reports));
        }
        Report::V1 {
            header: h,
            inner,
            warnings: w,
        } => {
            warnings.merge(w);
            for (k, v) in [
                ("len", json!(h.len)),
                ("nproto", json!(h.nproto)),
                ("rep_md_bits", json!(h.rep_md_bits)),
                ("d", json!(h.d)),
                ("q", json!(h.q)),
                ("f", json!(h.f)),
                ("hw_id", json!(h.hw_id)),
                ("node_id", json!(h.switch_id)),
                ("seq", json!(h.sequence)),
                ("ingress_ts", json!(h.ingress_ts)),
            ] {
                m.insert(k.into(), v);
            }
            let start = match h.nproto {
                1 => Start::Ipv4,
                2 => Start::Ipv6,
                _ => Start::Ethernet,
            };
            if !inner.is_empty() {
                m.insert(
                    "inner".into(),
                    inner_value(inner, start, cfg, registry, h.f),
                );
            }
        }
        Report::V05 {
            fixed: f,
            switch,
            inner,
            warnings: w,
        } => {
            warnings.merge(w);
            for (k, v) in [
                ("nproto", json!(f.nproto)),
                ("d", json!(f.d)),
                ("q", json!(f.q)),
                ("f", json!(f.f)),
                ("hw_id", json!(f.hw_id)),
                ("seq", json!(f.sequence)),
                ("ingress_ts", json!(f.ingress_ts)),
            ] {
                m.insert(k.into(), v);
            }
            if let Some(s) = switch {
                let mut sm = json!({"node_id": s.switch_id, "l1_ingress_if": s.ingress_port, "l1_egress_if": s.egress_port, "queue_id": s.queue_id});
                let o = sm.as_object_mut().expect("object");
                if let Some(r) = s.drop_reason {
                    o.insert("drop_reason".into(), json!(r));
                    if let Some(n) = drop_reason_name(r) {
                        o.insert("drop_reason_name".into(), json!(n));
                    }
                }
                if let Some(q) = s.queue_occupancy {
                    o.insert("queue_occupancy".into(), json!(q));
                }
                if let Some(t) = s.egress_ts {
                    o.insert("egress_ts".into(), json!(t));
                }
                m.insert(
                    if s.drop_reason.is_some() {
                        "drop"
                    } else {
                        "local"
                    }
                    .into(),
                    sm,
                );
            }
            if !inner.is_empty() {
                m.insert(
                    "inner".into(),
                    inner_value(inner, Start::Ethernet, cfg, registry, f.f),
                );
            }
        }
    }
    if !warnings.is_empty() {
        m.insert("warnings".into(), warnings_value(warnings));
    }
    Ok(Value::Object(m))
}

/// A report's copy of a packet; `tracked`: the report's F bit.
fn inner_value(
    bytes: &[u8],
    start: Start,
    cfg: &DetectConfig,
    registry: Option<&Registry>,
    tracked: bool,
) -> Value {
    let mut m = Map::new();
    m.insert("len".into(), json!(bytes.len()));
    let mut w = Warnings::default();
    if let Err(e) = packet_value(bytes, start, cfg, registry, Some(tracked), &mut w, &mut m) {
        m.insert("error".into(), error_value(&e));
    }
    if !w.is_empty() {
        m.insert("warnings".into(), warnings_value(w));
    }
    Value::Object(m)
}

fn individual_value(
    r: &IndividualReport<'_>,
    cfg: &DetectConfig,
    registry: Option<&Registry>,
) -> Value {
    let h = r.header;
    let mut m = Map::new();
    for (k, v) in [
        ("offset", json!(r.offset)),
        ("rep_type", json!(RepType::from_raw(h.rep_type).name())),
        ("in_type", json!(InType::from_raw(h.in_type).name())),
        ("report_length", json!(h.report_length)),
        ("md_length", json!(h.md_length)),
        ("d", json!(h.d)),
        ("q", json!(h.q)),
        ("f", json!(h.f)),
        ("i", json!(h.i)),
    ] {
        m.insert(k.into(), v);
    }
    if let Some(main) = r.main {
        m.insert("rep_md_bits".into(), json!(main.rep_md_bits));
        m.insert("ds_id".into(), json!(main.ds_id));
        m.insert("ds_md_bits".into(), json!(main.ds_md_bits));
        m.insert("ds_md_status".into(), json!(main.ds_md_status));
        match r.hop().map(|h| h.map(|v| v.to_metadata())) {
            Some(Ok(hop)) => {
                let mut md = hop_value(&hop, Format::ReportV2);
                if let Some(reason) = hop.drop_reason.and_then(drop_reason_name) {
                    md.insert("drop_reason_name".into(), json!(reason));
                }
                let dv = domain_value(
                    main.ds_id,
                    main.ds_md_bits,
                    hop.domain,
                    registry,
                    &[Mode::Export, Mode::SourceInserted],
                );
                if !dv.is_null() {
                    md.insert("domain".into(), dv);
                }
                m.insert("metadata".into(), Value::Object(md));
            }
            Some(Err(e)) => {
                m.insert("metadata_error".into(), error_value(&e));
            }
            None => {}
        }
    }
    match r.inner_type {
        InType::Ethernet | InType::Ipv4 | InType::Ipv6 if !r.inner.is_empty() => {
            let start = match r.inner_type {
                InType::Ipv4 => Start::Ipv4,
                InType::Ipv6 => Start::Ipv6,
                _ => Start::Ethernet,
            };
            m.insert(
                "inner".into(),
                inner_value(r.inner, start, cfg, registry, h.f),
            );
        }
        InType::Tlv => {
            let mut tlvs = Vec::new();
            for t in r.tlvs() {
                match t {
                    Ok(t) => {
                        let mut tv = json!({"type": t.header.tlv_type, "length": t.header.length, "template": t.header.template});
                        let o = tv.as_object_mut().expect("object");
                        match t.header.in_type() {
                            it @ (InType::Ethernet | InType::Ipv4 | InType::Ipv6) => {
                                let start = match it {
                                    InType::Ipv4 => Start::Ipv4,
                                    InType::Ipv6 => Start::Ipv6,
                                    _ => Start::Ethernet,
                                };
                                o.insert(
                                    "inner".into(),
                                    inner_value(t.data, start, cfg, registry, h.f),
                                );
                            }
                            _ => {
                                o.insert("data".into(), json!(hex(t.data)));
                            }
                        }
                        tlvs.push(tv);
                    }
                    Err(e) => {
                        m.insert("tlv_error".into(), error_value(&e));
                        break;
                    }
                }
            }
            m.insert("tlvs".into(), Value::Array(tlvs));
        }
        _ if !r.inner.is_empty() => {
            m.insert("inner_data".into(), json!(hex(r.inner)));
        }
        _ => {}
    }
    if !r.warnings.is_empty() {
        m.insert("warnings".into(), warnings_value(r.warnings));
    }
    Value::Object(m)
}
