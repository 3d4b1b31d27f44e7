//! The eBPF roles (`bpf/int.bpf.c`, run by `BPF_PROG_TEST_RUN`) against the userspace node
//! ([`intscope_node::Node`]) on the same frames: IPv4 and IPv6, TCP and UDP, payloads from empty
//! to past the MTU, INT-MD with several instruction bitmaps and Remaining Hop Counts, INT-MX;
//! each of them in the three encapsulations over TCP/UDP (NPT 2, NPT 1, NPT 0 under a DSCP),
//! with DSCP and ECN values of their own. Each frame goes source → transit → sink through both;
//! at every stage the bytes must be the node's, checksums included (but the new UDP header's
//! source port, a flow hash each computes its own way), and the sink must give back the original
//! frame byte for byte.
//!
//! The telemetry both see is the same: ingress interface 5 (the test run's `ingress_ifindex`),
//! egress the namespace's `lo`, no ingress time (a test run carries no delivery time: hop
//! latency all ones), queue 0 empty; bitmaps without timestamps (the kernel's clock moves).
//!
//! Needs root (loading BPF); without it the test says so and returns, unless
//! `INTSCOPE_AGENT_REQUIRE_BPF` is set (CI), when it fails.

use etherparse::PacketBuilder;
use intscope_agent::datapath::{DataPath, DataPathSettings, Encap, INT_COUNTERS, PortRole};
use intscope_node::domain::KnownDomain;
use intscope_node::{Mode, Node, NodeConfig, Role, SourceEncap, Telemetry, WatchEntry};
use intscope_wire::metadata::HopMetadata;

const INGRESS_IF: u32 = 5;
const TC_ACT_OK: u32 = 0;
/// What `int_ingress` returns for a packet it lets through: TCX_NEXT (-1), the verdict left to
/// the programs after it.
const TCX_NEXT: u32 = u32::MAX;

fn skip(what: &str) -> bool {
    if std::env::var_os("INTSCOPE_AGENT_REQUIRE_BPF").is_some() {
        panic!("INTSCOPE_AGENT_REQUIRE_BPF is set and this test cannot run: {what}");
    }
    eprintln!("skipped: {what}");
    true
}

/// A `struct __sk_buff` for the test run: the ingress interface set (a forwarded packet).
fn ctx() -> Vec<u8> {
    let mut c = vec![0u8; 192];
    c[36..40].copy_from_slice(&INGRESS_IF.to_ne_bytes());
    c
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A frame: IPv4 or IPv6, TCP or UDP, `len` bytes of payload, its traffic class `tos` (DSCP and
/// ECN).
fn frame(rng: &mut Rng, v6: bool, tcp: bool, len: usize, tos: u8) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip = if v6 {
        eth.ipv6(
            [0xfd, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0xfd, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            63,
        )
    } else {
        eth.ipv4([10, 2, 1, 1], [10, 2, 4, 1], 63)
    };
    let (sp, dp) = (1024 + rng.below(60000) as u16, 1 + rng.below(30000) as u16);
    let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let mut out = Vec::new();
    if tcp {
        ip.tcp(sp, dp, rng.next() as u32, 64240)
            .ack(rng.next() as u32)
            .write(&mut out, &payload)
            .unwrap();
    } else {
        ip.udp(sp, dp).write(&mut out, &payload).unwrap();
    }
    set_tos(&mut out, tos);
    out
}

/// The frame's traffic class (DSCP and ECN) set to `tos`, IPv4's header checksum recomputed.
fn set_tos(frame: &mut [u8], tos: u8) {
    if frame[12] == 0x86 {
        // Version 6, then the traffic class across the nibbles (not in the L4 pseudo-header).
        frame[14] = 0x60 | (tos >> 4);
        frame[15] = (tos << 4) | (frame[15] & 0x0f);
    } else {
        frame[15] = tos;
        frame[24..26].copy_from_slice(&[0, 0]);
        let c = intscope_wire::checksum::internet_checksum(&frame[14..34]);
        frame[24..26].copy_from_slice(&c.to_be_bytes());
    }
}

/// A hop's metadata, whatever the node ID asked.
struct Fixed(HopMetadata<'static>);

impl Telemetry for Fixed {
    fn hop(&self, _node_id: u32) -> HopMetadata<'static> {
        self.0
    }
}

/// What both see of a hop: node `id`, in 5 out `lo`, no latency, queue 0 empty.
fn telemetry(id: u32, lo: u32) -> Fixed {
    let hop = HopMetadata {
        node_id: Some(id),
        l1_ingress_if: Some(INGRESS_IF as u16),
        l1_egress_if: Some(lo as u16),
        l2_ingress_if: Some(INGRESS_IF),
        l2_egress_if: Some(lo),
        queue_id: Some(0),
        queue_occupancy: Some(0),
        ..HopMetadata::default()
    };
    let mut hop = hop;
    hop.present = hop.available_bits();
    Fixed(hop)
}

fn node_config(
    role: Role,
    id: u32,
    mode: Mode,
    encap: SourceEncap,
    instructions: u16,
    max_hops: u8,
) -> NodeConfig {
    NodeConfig {
        node_id: id,
        role,
        mode,
        encap,
        // The eBPF roles keep the L4 checksum right themselves and write the Checksum
        // Complement all ones ("not used").
        use_checksum_complement: false,
        instructions,
        max_hops,
        mtu: 1500,
        watch_subnets: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        ..NodeConfig::default()
    }
}

#[allow(clippy::too_many_arguments)]
fn datapath(
    id: u32,
    mode: Mode,
    encap: SourceEncap,
    instructions: u16,
    max_hops: u8,
    role: PortRole,
    lo: u32,
    domains: &[KnownDomain],
) -> DataPath {
    let mut d = DataPath::load(&DataPathSettings {
        netns: 0,
        node_id: id,
        mx: mode == Mode::Mx,
        instructions,
        max_hops,
        int_port: 17768,
        mtu: 1500,
        report_port: 32766,
        watch_all: true,
        watch: Vec::new(),
        filters: false,
        interval_ns: 1_000_000_000,
        latency_shift: 8,
        encap: match encap {
            SourceEncap::UdpNew => Encap::UdpNew,
            SourceEncap::UdpPort => Encap::UdpPort,
            SourceEncap::Dscp => Encap::Dscp,
            other => panic!("{other:?}: not an eBPF encapsulation"),
        },
        int_dscp: 0x17,
        int_dscp_mask: 0x3f,
        remark: true,
        remark_dscp: 0,
        restore_dscp: true,
        domains: domains.to_vec(),
    })
    .unwrap();
    d.set_role(lo, role).unwrap();
    d
}

/// The new UDP header's source port offset (it follows the IP header), if the frame has INT.
fn sport_at(frame: &[u8]) -> usize {
    14 + if frame[12] == 0x86 { 40 } else { 20 }
}

/// The NPT of the INT block right behind the L4 header that follows the IP header (a new UDP
/// header's, or the flow's own TCP/UDP header's), and the frame's DSCP.
fn npt_of(frame: &[u8]) -> (u8, u8) {
    let l4 = sport_at(frame);
    let (proto, dscp) = if frame[12] == 0x86 {
        (frame[20], ((frame[14] & 0x0f) << 2) | (frame[15] >> 6))
    } else {
        (frame[23], frame[15] >> 2)
    };
    let l4h = if proto == 6 {
        usize::from(frame[l4 + 12] >> 4) * 4
    } else {
        8
    };
    ((frame[l4 + l4h] >> 2) & 3, dscp)
}

/// Every packet a program saw ended in exactly one outcome (`datapath::INT_COUNTERS`), and none
/// was dropped or left half-edited.
fn outcomes_add_up(d: &DataPath, what: &str) {
    let c = d.counters().unwrap();
    let at = |name: &str| {
        let i = INT_COUNTERS.iter().position(|(n, _)| *n == name).unwrap();
        c[i]
    };
    let first = INT_COUNTERS
        .iter()
        .position(|(n, _)| *n == "int_not_ip")
        .unwrap();
    let last = INT_COUNTERS
        .iter()
        .position(|(n, _)| *n == "int_drop_discard")
        .unwrap();
    let outcomes: u64 =
        c[first..=last].iter().sum::<u64>() + at("int_marked_without_int") + at("int_too_long");
    assert_eq!(outcomes, at("int_seen"), "{what}: {c:?}");
    for bad in ["int_drop_helper", "int_adjust_failed", "int_malformed"] {
        assert_eq!(at(bad), 0, "{what}: {bad}: {c:?}");
    }
}

/// Whether this test run may load BPF (root); otherwise it says it skipped, or fails in CI.
fn loads_bpf() -> bool {
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&uid.stdout).trim() == "0" || !skip("root (loading BPF)")
}

/// `frame` (INT in it) through the eBPF transit and sink and through the node's: the bytes
/// equal at each; the sink's.
fn transit_then_sink(
    (transit, n_transit): (&DataPath, &mut Node),
    (sink, n_sink): (&DataPath, &mut Node),
    frame: &[u8],
    lo: u32,
    what: &str,
) -> Vec<u8> {
    let (verdict, b2) = transit.run_egress(frame, &ctx()).unwrap();
    assert_eq!(verdict, TC_ACT_OK, "{what}");
    let mut u2 = frame.to_vec();
    n_transit.process(&mut u2, &telemetry(2, lo));
    assert_eq!(hex::encode(&b2), hex::encode(&u2), "transit: {what}");
    let (verdict, b3) = sink.run_ingress(&b2, &ctx()).unwrap();
    assert_eq!(verdict, TCX_NEXT, "{what}");
    let mut u3 = b2.clone();
    n_sink.process(&mut u3, &telemetry(3, lo));
    assert_eq!(hex::encode(&b3), hex::encode(&u3), "sink: {what}");
    b3
}

#[test]
fn ebpf_roles_write_the_bytes_the_userspace_node_writes() {
    if !loads_bpf() {
        return;
    }
    let lo = nix::net::if_::if_nametoindex("lo").unwrap();
    let configs: [(Mode, u16, u8); 6] = [
        (Mode::Md, 0xf000, 8),
        (Mode::Md, 0xc300, 3),
        (Mode::Md, 0xf380, 8),
        (Mode::Md, 0xf001, 8),
        (Mode::Md, 0xf000, 0),
        (Mode::Mx, 0xf000, 8),
    ];
    let encaps = [SourceEncap::UdpNew, SourceEncap::UdpPort, SourceEncap::Dscp];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut compared = [0usize; 3];
    let mut with_int = [0usize; 3];
    for (encap, (mode, instructions, hops)) in encaps
        .into_iter()
        .flat_map(|e| configs.into_iter().map(move |c| (e, c)))
    {
        let dp = |id, role| datapath(id, mode, encap, instructions, hops, role, lo, &[]);
        let (src, transit, sink) = (
            dp(1, PortRole::Source),
            dp(2, PortRole::Transit),
            dp(3, PortRole::Sink),
        );
        let n =
            |role, id| Node::new(node_config(role, id, mode, encap, instructions, hops)).unwrap();
        let mut n_src = n(Role::Source, 1);
        let mut n_transit = n(Role::Transit, 2);
        let mut n_sink = n(Role::Sink, 3);
        for case in 0..120 {
            let (v6, tcp) = (rng.below(2) == 1, rng.below(2) == 1);
            // Any DSCP, any ECN; INT's marking value (0x17) one time in eight: a marking under
            // encap dscp, the traffic's own QoS value under the UDP encapsulations.
            let dscp = match rng.below(8) {
                0 => 0x17,
                _ => match rng.below(64) as u8 {
                    0x17 => 0,
                    d => d,
                },
            };
            let tos = dscp << 2 | rng.below(4) as u8;
            // Mostly small, some at the MTU's edge (M bit, no room), some empty.
            let len = match rng.below(4) {
                0 => 1380 + rng.below(100) as usize,
                1 => 0,
                _ => rng.below(1400) as usize,
            };
            // Marked as INT but without it: a payload too short for any INT version's shim
            // (the node reads older versions' INT too, the eBPF roles v2.1's alone, so random
            // bytes could be INT to one and not to the other).
            let len = if dscp == 0x17 { len % 4 } else { len };
            let original = frame(&mut rng, v6, tcp, len, tos);
            let what = format!(
                "{encap:?} {mode:?} 0x{instructions:04x} rhc {hops}, case {case}, v6 {v6}, \
                 tcp {tcp}, {len} bytes, tos 0x{tos:02x}"
            );

            let (verdict, b1) = src.run_egress(&original, &ctx()).unwrap();
            assert_eq!(verdict, TC_ACT_OK, "{what}");
            let mut u1 = original.clone();
            n_src.process(&mut u1, &telemetry(1, lo));
            if u1 != original
                && (encap == SourceEncap::UdpNew || (tcp && encap != SourceEncap::Dscp))
            {
                let at = sport_at(&u1);
                u1[at..at + 2].copy_from_slice(&b1[at..at + 2]);
            }
            assert_eq!(hex::encode(&b1), hex::encode(&u1), "source: {what}");
            if b1 != original {
                let (npt, dscp) = npt_of(&b1);
                let expected = match encap {
                    SourceEncap::UdpPort if !tcp => 1,
                    SourceEncap::Dscp => 0,
                    _ => 2,
                };
                assert_eq!(npt, expected, "NPT: {what}");
                if encap == SourceEncap::Dscp {
                    assert_eq!(dscp, 0x17, "INT's DSCP marking: {what}");
                }
                with_int[expected as usize] += 1;
            }
            compared[0] += 1;

            let b3 = transit_then_sink(
                (&transit, &mut n_transit),
                (&sink, &mut n_sink),
                &b1,
                lo,
                &what,
            );
            compared[1] += 1;
            // A source marking INT with the DSCP remarks a packet marked so without INT
            // (remark_dscp 0): that is what the sink restores.
            let mut restored = original.clone();
            if encap == SourceEncap::Dscp && dscp == 0x17 {
                set_tos(&mut restored, tos & 3);
            }
            assert_eq!(
                hex::encode(&b3),
                hex::encode(&restored),
                "sink restores: {what}"
            );
            compared[2] += 1;
        }
        if encap == SourceEncap::Dscp {
            // Echo requests marked like INT: no INT goes in, the marking is remarked all the same.
            for v6 in [false, true] {
                let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
                let mut icmp = Vec::new();
                if v6 {
                    eth.ipv6(
                        [0xfd, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                        [0xfd; 16],
                        63,
                    )
                    .icmpv6_echo_request(7, 1)
                    .write(&mut icmp, &[1, 2, 3])
                    .unwrap();
                } else {
                    eth.ipv4([10, 2, 1, 1], [10, 2, 4, 1], 63)
                        .icmpv4_echo_request(7, 1)
                        .write(&mut icmp, &[1, 2, 3])
                        .unwrap();
                }
                set_tos(&mut icmp, 0x17 << 2 | 1);
                let (verdict, b1) = src.run_egress(&icmp, &ctx()).unwrap();
                assert_eq!(verdict, TC_ACT_OK);
                let mut u1 = icmp.clone();
                n_src.process(&mut u1, &telemetry(1, lo));
                let mut remarked = icmp.clone();
                set_tos(&mut remarked, 1);
                assert_eq!(hex::encode(&b1), hex::encode(&remarked), "ICMP, v6 {v6}");
                assert_eq!(
                    hex::encode(&b1),
                    hex::encode(&u1),
                    "ICMP, v6 {v6}: the node"
                );
            }
        }
        for (d, role) in [(&src, "source"), (&transit, "transit"), (&sink, "sink")] {
            outcomes_add_up(
                d,
                &format!("{role}: {encap:?} {mode:?} 0x{instructions:04x}"),
            );
        }
    }
    eprintln!("compared {compared:?} frames (source, transit, sink); with INT by NPT {with_int:?}");
    assert!(
        with_int.iter().all(|&n| n > 200),
        "too few frames with INT in some encapsulation: {with_int:?}"
    );
}

/// Domain 0xABCD: DS Instruction bit 2 is 4 bytes of export metadata, bit 3 is source-inserted,
/// and with `bit4` bit 4 is 8 bytes of export metadata too; this hop's value `value` of bit 2
/// (none: all ones), the DS Flags it sets `flags`.
fn domain(value: Option<&str>, flags: u16, bit4: bool) -> KnownDomain {
    let mut metadata = vec![
        serde_json::json!({ "bit": 2, "name": "queue_delay", "size": 4, "mode": "export" }),
        serde_json::json!({ "bit": 3, "name": "tag", "size": 4, "mode": "source-inserted" }),
    ];
    if bit4 {
        metadata.push(serde_json::json!({ "bit": 4, "name": "path", "size": 8, "mode": "export" }));
    }
    let mut d = serde_json::json!({ "id": 0xABCD, "metadata": metadata, "set_ds_flags": flags });
    if let Some(v) = value {
        d["values"] = serde_json::json!({ "queue_delay": v });
    }
    serde_json::from_value(d).unwrap()
}

/// INT v2.1 §"INT-MD Metadata Header Format" (Domain Specific ID): a transit hop that knows the
/// packet's domain pushes its export metadata and sets its DS Flags (INT-MX: the flags); one
/// that does not, or whose DS Instruction names a bit the domain leaves undefined, pads the words
/// with all ones. The eBPF transit against the node's, byte for byte, and the sink restoring.
#[test]
fn a_transit_hop_pushes_a_known_domains_metadata() {
    if !loads_bpf() {
        return;
    }
    let lo = nix::net::if_::if_nametoindex("lo").unwrap();
    let mut rng = Rng(0x5eed);
    let mut compared = 0;
    // The source's DS ID and DS Instruction: the domain with its export bit, with a bit it does
    // not define (0x0800), a domain the transit does not know.
    let packets = [(0xABCD, 0x2000), (0xABCD, 0x2800), (0xBEEF, 0x2000)];
    let transits = [(Some("0000002a"), 0x0100), (None, 0x0001)];
    for (encap, mode, (ds_id, ds_instruction), (value, flags)) in
        [SourceEncap::UdpNew, SourceEncap::Dscp]
            .into_iter()
            .flat_map(|e| {
                [Mode::Md, Mode::Mx].into_iter().flat_map(move |m| {
                    packets
                        .into_iter()
                        .flat_map(move |p| transits.into_iter().map(move |t| (e, m, p, t)))
                })
            })
    {
        let what = format!(
            "{encap:?} {mode:?} DS 0x{ds_id:04x}/0x{ds_instruction:04x}, transit {value:?} \
             flags 0x{flags:04x}"
        );
        let instructions = 0xc000;
        let watch: WatchEntry = serde_json::from_value(serde_json::json!({
            "ds_id": ds_id, "ds_instruction": ds_instruction, "ds_flags": 0x1000,
        }))
        .unwrap();
        let config = |role, id, domains: Vec<KnownDomain>, watchlist: Vec<WatchEntry>| {
            Node::new(NodeConfig {
                domains,
                watchlist,
                ..node_config(role, id, mode, encap, instructions, 8)
            })
            .unwrap()
        };
        let mut n_src = config(
            Role::Source,
            1,
            vec![domain(Some("00000007"), 0, true)],
            vec![watch],
        );
        let known = vec![domain(value, flags, false)];
        let mut n_transit = config(Role::Transit, 2, known.clone(), Vec::new());
        let mut n_sink = config(Role::Sink, 3, Vec::new(), Vec::new());
        let transit = datapath(
            2,
            mode,
            encap,
            instructions,
            8,
            PortRole::Transit,
            lo,
            &known,
        );
        let sink = datapath(3, mode, encap, instructions, 8, PortRole::Sink, lo, &[]);
        for case in 0..8 {
            let (v6, tcp) = (case & 1 == 1, case & 2 == 2);
            let original = frame(&mut rng, v6, tcp, 100 + case * 50, 0);
            let mut u1 = original.clone();
            n_src.process(&mut u1, &telemetry(1, lo));
            assert_ne!(u1, original, "the node's source: {what}");
            let b3 = transit_then_sink(
                (&transit, &mut n_transit),
                (&sink, &mut n_sink),
                &u1,
                lo,
                &format!("{what}, case {case}"),
            );
            assert_eq!(
                hex::encode(&b3),
                hex::encode(&original),
                "sink restores: {what}"
            );
            compared += 1;
        }
        outcomes_add_up(&transit, &format!("transit: {what}"));
    }
    eprintln!("compared {compared} frames through a transit hop with domains");
}
