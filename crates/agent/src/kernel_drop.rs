//! The kernel's drop reasons (`enum skb_drop_reason`, the `reason` of the `skb:kfree_skb`
//! tracepoint) as telemetry report drop reasons. The enum's values change between kernels, so
//! they are read by name from the running kernel's tracepoint format, then mapped:
//!
//! | kernel reasons | report code |
//! |---|---|
//! | `IP_INNOROUTES`, `IP_OUTNOROUTES`, `IP_INADDRERRORS` | 29 `routing-miss` (SD-Fabric) |
//! | `IP_INHDR` of a packet whose TTL / hop limit was ≤ 1 (how `ip_forward` drops it) | 26 `ip-ttl-zero` |
//! | `QDISC_*`, `CPU_BACKLOG`, `FULL_RING`, `FQ_*`, `CAKE_FLOOD`, `DUALPI2_*`, `TC_RECLASSIFY_LOOP` | 71 `traffic-manager` |
//! | `NETFILTER_DROP`, `TC_INGRESS`, `TC_EGRESS`, `TC_*`, `BPF_CGROUP_EGRESS`, `XDP`, `SECURITY_HOOK`, `IP_RPFILTER`, `SOCKET_FILTER`, `TAP_*FILTER` | 80 `acl-deny` |
//! | `NEIGH_*` | 128 `next-id-miss` (no next hop) |
//! | `PKT_TOO_BIG` | 70 `mtu-check-fail` (p4lang/switch) |
//!
//! Every other reason has a code of intscope's host kernel range (192–200,
//! [`intscope_wire::drop_reason::host_kernel`]) by family, never "unknown": malformed headers
//! and checksums 192, sockets and TCP 193, addresses 194, memory 195, devices 196, fragments
//! 197, tunnels and IPsec 198, `NOT_SPECIFIED` 199, anything newer 200.

use std::collections::HashMap;

/// Where the tracepoint's format is read (tracefs, or its old place under debugfs).
const FORMATS: [&str; 2] = [
    "/sys/kernel/tracing/events/skb/kfree_skb/format",
    "/sys/kernel/debug/tracing/events/skb/kfree_skb/format",
];

/// The running kernel's drop reason names by value.
#[derive(Debug, Clone, Default)]
pub struct KernelReasons {
    names: HashMap<u32, String>,
}

impl KernelReasons {
    /// The names of the running kernel: from the tracepoint's format where tracefs is mounted,
    /// else from the kernel's BTF (`ip netns exec` gives a process a /sys without tracefs);
    /// none when neither can be read (each reason then gets [`OTHER`]).
    pub fn load() -> Self {
        FORMATS
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|f| Self::from_format(&f))
            .filter(|k| !k.is_empty())
            .or_else(|| {
                std::fs::read("/sys/kernel/btf/vmlinux")
                    .ok()
                    .map(|b| Self::from_btf(&b))
            })
            .unwrap_or_default()
    }

    /// The enumerators of `enum skb_drop_reason` in raw BTF (the kernel's
    /// `Documentation/bpf/btf.rst` layout: a header, then the type section, each type a 12-byte
    /// `btf_type` and its kind's trailing records, then the string section), without its
    /// `SKB_DROP_REASON_` prefix. Unreadable BTF gives no names.
    pub fn from_btf(b: &[u8]) -> Self {
        let mut names = HashMap::new();
        let _ = btf_enum(b, "skb_drop_reason", |name, value| {
            let short = name.strip_prefix("SKB_DROP_REASON_").unwrap_or(name);
            names.insert(value, short.to_string());
        });
        KernelReasons { names }
    }

    /// The names in a tracepoint format's `__print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, …)`.
    pub fn from_format(format: &str) -> Self {
        let mut names = HashMap::new();
        let Some(at) = format.find("__print_symbolic(REC->reason") else {
            return KernelReasons { names };
        };
        let mut rest = &format[at..];
        while let Some(open) = rest.find('{') {
            rest = &rest[open + 1..];
            let Some(close) = rest.find('}') else { break };
            let entry = &rest[..close];
            rest = &rest[close + 1..];
            let mut parts = entry.splitn(2, ',');
            let (Some(v), Some(n)) = (parts.next(), parts.next()) else {
                continue;
            };
            if let Ok(v) = v.trim().parse::<u32>() {
                names.insert(v, n.trim().trim_matches('"').to_string());
            }
        }
        KernelReasons { names }
    }

    /// The kernel's name of `reason`.
    pub fn name(&self, reason: u32) -> Option<&str> {
        self.names.get(&reason).map(String::as_str)
    }

    /// How many names are known.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// No names are known.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The report drop reason of the kernel's `reason` for a packet whose IP TTL (hop limit)
    /// was `ttl`.
    pub fn report_code(&self, reason: u32, ttl: Option<u8>) -> u8 {
        self.name(reason).map_or(OTHER, |n| code_of(n, ttl))
    }
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn cstr(b: &[u8], at: usize) -> Option<&str> {
    let s = b.get(at..)?;
    std::str::from_utf8(&s[..s.iter().position(|&c| c == 0)?]).ok()
}

/// Calls `f` with each enumerator of the BTF enum `wanted`; `None` when the BTF is unreadable
/// (little-endian only, as the machines it runs on).
fn btf_enum(b: &[u8], wanted: &str, mut f: impl FnMut(&str, u32)) -> Option<()> {
    if b.get(..2)? != [0x9f, 0xeb] {
        return None;
    }
    let hdr_len = le32(b, 4)? as usize;
    let (type_off, type_len) = (le32(b, 8)? as usize, le32(b, 12)? as usize);
    let str_off = le32(b, 16)? as usize;
    let types = b.get(hdr_len + type_off..hdr_len + type_off + type_len)?;
    let strings = b.get(hdr_len + str_off..)?;
    let mut at = 0;
    while at + 12 <= types.len() {
        let (name_off, info) = (le32(types, at)? as usize, le32(types, at + 4)?);
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        let trailing = match kind {
            1 | 14 | 17 => 4,        // INT, VAR, DECL_TAG
            3 => 12,                 // ARRAY
            4 | 5 | 15 => vlen * 12, // STRUCT, UNION, DATASEC
            6 | 13 => vlen * 8,      // ENUM, FUNC_PROTO
            19 => vlen * 12,         // ENUM64
            2 | 7..=12 | 16 | 18 => 0,
            _ => return None,
        };
        if kind == 6 && cstr(strings, name_off) == Some(wanted) {
            for i in 0..vlen {
                let e = at + 12 + i * 8;
                let name = cstr(strings, le32(types, e)? as usize)?;
                f(name, le32(types, e + 4)?);
            }
            return Some(());
        }
        at += 12 + trailing;
    }
    None
}

/// The code of a reason this table does not know.
pub const OTHER: u8 = 200;

/// The report code of the kernel reason named `name`.
pub fn code_of(name: &str, ttl: Option<u8>) -> u8 {
    let any = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    match name {
        "IP_INNOROUTES" | "IP_OUTNOROUTES" | "IP_INADDRERRORS" => 29,
        "IP_INHDR" if ttl.is_some_and(|t| t <= 1) => 26,
        "PKT_TOO_BIG" => 70,
        "NOT_SPECIFIED" => 199,
        "CPU_BACKLOG" | "FULL_RING" | "CAKE_FLOOD" | "TC_RECLASSIFY_LOOP" => 71,
        "NETFILTER_DROP" | "BPF_CGROUP_EGRESS" | "XDP" | "SECURITY_HOOK" | "IP_RPFILTER"
        | "SOCKET_FILTER" | "TAP_FILTER" | "TAP_TXFILTER" => 80,
        _ if any(&["QDISC_", "FQ_", "DUALPI2_"]) => 71,
        _ if any(&["TC_"]) => 80,
        _ if any(&["NEIGH_"]) => 128,
        "IP_CSUM" | "IP_INHDR" | "TCP_CSUM" | "UDP_CSUM" | "ICMP_CSUM" | "SKB_CSUM"
        | "PKT_TOO_SMALL" | "HDR_TRUNC" | "INVALID_PROTO" | "UNHANDLED_PROTO" | "IP_NOPROTO"
        | "IPV6_BAD_EXTHDR" | "SKB_GSO_SEG" | "TCP_FLAGS" => 192,
        _ if any(&["IPV6_NDISC_"]) => 192,
        _ if any(&["TCP_", "SOCKET_", "UNIX_", "PROTO_MEM", "NO_SOCKET"]) => 193,
        "OTHERHOST"
        | "UNICAST_IN_L2_MULTICAST"
        | "IP_LOCAL_SOURCE"
        | "IP_INVALID_SOURCE"
        | "IP_LOCALNET"
        | "IP_INVALID_DEST"
        | "LOCAL_MAC"
        | "MAC_INVALID_SOURCE"
        | "MAC_IEEE_MAC_CONTROL"
        | "IPV6DISABLED"
        | "ARP_PVLAN_DISABLE" => 194,
        "NOMEM" | "PFMEMALLOC" | "SKB_UCOPY_FAULT" | "QUEUE_PURGE" | "RECURSION_LIMIT" => 195,
        "DEV_HDR" | "DEV_READY" | "NO_TX_TARGET" | "PACKET_SOCK_ERROR" => 196,
        "DUP_FRAG" | "FRAG_REASM_TIMEOUT" | "FRAG_TOO_FAR" => 197,
        _ if any(&["VXLAN_", "XFRM_", "IP_TUNNEL_", "TUNNEL_", "PSP_"]) => 198,
        _ => OTHER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intscope_wire::drop_reason::name;

    const FORMAT: &str = r#"print fmt: "skbaddr=%p reason: %s", REC->skbaddr, __print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 12, "NETFILTER_DROP" }, { 15, "IP_INHDR" }, { 64, "QDISC_DROP" }, { 73, "TC_INGRESS" }, { 88, "IP_INNOROUTES" }, { 128, "MAX" })"#;

    #[test]
    fn names_come_from_the_tracepoint_format() {
        let k = KernelReasons::from_format(FORMAT);
        assert_eq!(k.len(), 7);
        assert_eq!(k.name(88), Some("IP_INNOROUTES"));
        assert_eq!(k.report_code(88, Some(64)), 29);
        assert_eq!(k.report_code(15, Some(1)), 26, "ip_forward's TTL drop");
        assert_eq!(k.report_code(15, Some(64)), 192, "a bad header otherwise");
        assert_eq!(k.report_code(64, None), 71);
        assert_eq!(k.report_code(73, None), 80);
        assert_eq!(k.report_code(2, None), 199);
        assert_eq!(
            k.report_code(999, None),
            OTHER,
            "a value the kernel did not list"
        );
        assert!(KernelReasons::from_format("no symbols").is_empty());
    }

    #[test]
    fn every_code_has_a_name_in_dump_and_the_collector() {
        for n in [
            "IP_OUTNOROUTES",
            "QDISC_OVERLIMIT",
            "TC_EGRESS",
            "NEIGH_FAILED",
            "PKT_TOO_BIG",
            "TCP_CSUM",
            "NO_SOCKET",
            "OTHERHOST",
            "NOMEM",
            "DEV_READY",
            "DUP_FRAG",
            "VXLAN_INVALID_HDR",
            "NOT_SPECIFIED",
            "SOMETHING_NEW",
        ] {
            let code = code_of(n, None);
            assert!(name(code).is_some(), "{n} -> {code} has no name");
            assert_ne!(name(code), Some("unknown"), "{n}");
        }
    }

    #[test]
    fn btf_names_equal_the_tracepoint_names() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            eprintln!("no kernel BTF here: not checked");
            return;
        };
        let from_btf = KernelReasons::from_btf(&btf);
        assert!(from_btf.len() > 50, "{}", from_btf.len());
        assert!(from_btf.names.values().any(|n| n == "IP_INNOROUTES"));
        if let Some(f) = FORMATS.iter().find_map(|p| std::fs::read_to_string(p).ok()) {
            let from_format = KernelReasons::from_format(&f);
            for (v, n) in &from_format.names {
                assert_eq!(from_btf.name(*v), Some(n.as_str()), "{v}");
            }
        }
        assert!(KernelReasons::from_btf(b"not btf").is_empty());
        assert!(
            KernelReasons::from_btf(&btf[..100]).is_empty(),
            "cut BTF gives no names"
        );
    }

    #[test]
    fn the_running_kernel_lists_the_reasons_the_table_maps() {
        let k = KernelReasons::load();
        if k.is_empty() {
            eprintln!("tracefs not readable here: the running kernel's names are not checked");
            return;
        }
        let names: Vec<&str> = k.names.values().map(String::as_str).collect();
        for n in ["IP_INNOROUTES", "QDISC_DROP", "TC_INGRESS", "NOT_SPECIFIED"] {
            assert!(names.contains(&n), "{n} missing from the kernel's list");
        }
    }
}
