//! Drop reason codes of telemetry drop reports (Report v2.0 §"Individual Report Main Contents":
//! "An enumeration that indicates the reason why a packet was dropped, for example as defined in
//! github.com/p4lang/switch"). Two tables are in use: SD-Fabric's (fabric-tna, which took its
//! codes from p4lang/switch and added its own from 128 up) and p4lang/switch's
//! `drop_reason_codes.h`. [`name`] looks in SD-Fabric's first, so a code both define reads as
//! SD-Fabric names it, and falls back on p4lang/switch's.

/// The name p4lang/switch's `drop_reason_codes.h` gives `code` (the `DROP_` macro in kebab case).
pub fn p4lang_switch(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "unknown",
        10 => "outer-src-mac-zero",
        11 => "outer-src-mac-multicast",
        12 => "outer-dst-mac-zero",
        13 => "outer-ethernet-miss",
        14 => "src-mac-zero",
        15 => "src-mac-multicast",
        16 => "dst-mac-zero",
        25 => "outer-ip-version-invalid",
        26 => "outer-ip-ttl-zero",
        27 => "outer-ip-src-multicast",
        28 => "outer-ip-src-loopback",
        29 => "outer-ip-miss",
        30 => "outer-ip-ihl-invalid",
        40 => "ip-version-invalid",
        41 => "ip-ttl-zero",
        42 => "ip-src-multicast",
        43 => "ip-src-loopback",
        44 => "ip-ihl-invalid",
        55 => "port-vlan-mapping-miss",
        56 => "stp-check-fail-ingress",
        57 => "stp-check-fail-egress",
        58 => "same-ifindex",
        59 => "multicast-snooping-enabled",
        70 => "mtu-check-fail",
        71 => "traffic-manager",
        72 => "meter",
        73 => "wred",
        80 => "acl-deny",
        81 => "racl-deny",
        82 => "urpf-check-fail",
        83 => "ipsg-miss",
        84 => "ifindex",
        85 => "cpu-color-yellow",
        86 => "cpu-color-red",
        87 => "storm-control-color-yellow",
        88 => "storm-control-color-red",
        89 => "l2-miss-unicast",
        90 => "l2-miss-multicast",
        91 => "l2-miss-broadcast",
        92 => "egress-acl-deny",
        93 => "nhop",
        94 => "rmac-hit-non-ip",
        95 => "mlag",
        96 => "ttl4",
        97 => "same-port-check",
        98 => "pfc-tc-drop",
        100 => "csum-error",
        101 => "parser-error",
        254 => "others-ingress",
        255 => "others-egress",
        _ => return None,
    })
}

/// SD-Fabric's name for `code` (stratum/fabric-tna `IntDropReason_t`, the table in
/// `shared/spec/sd-fabric-int.txt`).
pub fn sd_fabric(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "unknown",
        26 => "ip-ttl-zero",
        29 => "routing-miss",
        55 => "port-vlan-mapping-miss",
        71 => "traffic-manager",
        80 => "acl-deny",
        89 => "bridging-miss",
        128 => "next-id-miss",
        129 => "mpls-miss",
        130 => "egress-next-miss",
        131 => "mpls-ttl-zero",
        132 => "downlink-pdr-miss",
        133 => "uplink-pdr-miss",
        134 => "far-miss",
        150 => "spgw-uplink-recirc-deny",
        160 => "ingress-qos-meter",
        _ => return None,
    })
}

/// intscope's codes for drops a Linux kernel makes that neither table names (the host agent's
/// drop reports, `crates/agent` and `docs/agent.md`), in 192–200, a range both tables leave
/// free: one code per family of the kernel's `enum skb_drop_reason`.
pub fn host_kernel(code: u8) -> Option<&'static str> {
    Some(match code {
        192 => "kernel-malformed",
        193 => "kernel-socket",
        194 => "kernel-address",
        195 => "kernel-resources",
        196 => "kernel-device",
        197 => "kernel-fragment",
        198 => "kernel-tunnel",
        199 => "kernel-unspecified",
        200 => "kernel-other",
        _ => return None,
    })
}

/// The name of a drop reason code: SD-Fabric's, else p4lang/switch's, else intscope's host
/// kernel range.
pub fn name(code: u8) -> Option<&'static str> {
    sd_fabric(code)
        .or_else(|| p4lang_switch(code))
        .or_else(|| host_kernel(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sd_fabric_first_then_p4lang_switch() {
        assert_eq!(
            name(29),
            Some("routing-miss"),
            "SD-Fabric's reading of a shared code"
        );
        assert_eq!(p4lang_switch(29), Some("outer-ip-miss"));
        assert_eq!(name(41), Some("ip-ttl-zero"));
        assert_eq!(name(70), Some("mtu-check-fail"));
        assert_eq!(name(72), Some("meter"));
        assert_eq!(name(73), Some("wred"));
        assert_eq!(
            name(132),
            Some("downlink-pdr-miss"),
            "SD-Fabric's own range"
        );
        assert_eq!(name(99), None);
        // Every SD-Fabric code keeps its name; every p4lang/switch code has one.
        assert!((0..=255u8).all(|c| sd_fabric(c).is_none_or(|n| name(c) == Some(n))));
        assert_eq!((0..=255u8).filter(|c| name(*c).is_some()).count(), 69);
        // The host kernel range shadows no code of the two tables.
        assert!((192..=200u8).all(|c| sd_fabric(c).is_none() && p4lang_switch(c).is_none()));
        assert_eq!(name(197), Some("kernel-fragment"));
    }
}
