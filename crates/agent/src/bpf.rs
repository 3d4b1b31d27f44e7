//! The kernel half: loads `bpf/agent.bpf.c`'s object (built by `build.rs`), writes the settings
//! into its read-only globals, attaches its three BTF tracepoints, and keeps the maps userspace
//! fills (interfaces, local addresses, watched prefixes) and reads (counters, events).
//!
//! The tracepoints attach through BPF links held by file descriptors: the kernel detaches them
//! when the process ends in any way, a SIGKILL too.

use std::net::IpAddr;

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf, EbpfLoader};
use ipnet::IpNet;

use crate::AgentError;

/// The compiled object (empty when the build had no BPF toolchain).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agent.bpf.o"));

/// Why the build made no object, if it did not.
const NOT_BUILT: Option<&str> = option_env!("INTSCOPE_AGENT_NO_BPF_WHY");

/// (program, tracepoint) pairs of the object.
const HOOKS: [(&str, &str); 3] = [
    ("on_receive", "netif_receive_skb"),
    ("on_transmit", "net_dev_start_xmit"),
    ("on_drop", "kfree_skb"),
];

/// The kernel half's counters, in the order of `enum counter` in the C source.
pub const COUNTERS: [(&str, &str); 17] = [
    ("received", "packets received on a watched interface"),
    ("transmitted", "packets sent on a watched interface"),
    (
        "delivered",
        "received packets delivered to this host (reported there)",
    ),
    (
        "not_ip",
        "packets seen that are not IPv4/IPv6 (not watched)",
    ),
    ("unwatched", "packets seen on no watchlist"),
    (
        "report_traffic",
        "packets seen that are telemetry reports (never watched)",
    ),
    (
        "filtered",
        "packets the smart filters held back (a report of their flow was recent)",
    ),
    ("events", "packets sent to userspace to report"),
    (
        "ring_full",
        "packets to report lost because the ring buffer was full",
    ),
    (
        "no_ingress",
        "packets sent with no ingress record (originated on this host)",
    ),
    ("drops", "packets the kernel dropped on a watched interface"),
    ("drop_events", "drops sent to userspace to report"),
    (
        "drop_filtered",
        "drops held back (a drop of their flow was reported this interval)",
    ),
    ("drop_unwatched", "drops of packets on no watchlist"),
    ("drop_not_ip", "drops of packets that are not IPv4/IPv6"),
    (
        "drop_ring_full",
        "drops to report lost because the ring buffer was full",
    ),
    (
        "ingress_stale",
        "ingress records refused at egress (another packet or too old)",
    ),
];

/// Namespaces (nodes) one agent watches at most (`MAX_NODES` in the C source).
pub const MAX_NODES: usize = 32;

/// Settings of the kernel half (its read-only globals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The network namespaces watched, each a node (their inode numbers, at most
    /// [`MAX_NODES`]); an event names its namespace by its index here.
    pub netns: Vec<u32>,
    /// The smart filters' interval, ns.
    pub interval_ns: u64,
    /// `minFlowHopLatencyChangeNs` as a power of two: its log2.
    pub latency_shift: u32,
    /// SD-Fabric's smart filters on.
    pub filters: bool,
    /// Every IP packet is watched (no prefix to look up).
    pub watch_all: bool,
    /// Queue reports from this hop latency on, ns (0: none).
    pub queue_trigger_ns: u32,
    /// The quota resets under this latency, ns.
    pub queue_reset_ns: u32,
    /// UDP port of telemetry reports (never watched).
    pub report_port: u16,
    /// Drop reports for unwatched packets too.
    pub drops_all: bool,
    /// The watched prefixes (ignored with `watch_all`).
    pub watch: Vec<IpNet>,
}

/// Local addresses of each family the kernel half knows (`LOCAL_ADDRS` in the C source).
pub const LOCAL_ADDRS: usize = 32;
const LOCAL_ADDRS_LEN: usize = 8 + LOCAL_ADDRS * 4 + LOCAL_ADDRS * 16;

/// `struct local_addrs` of the C source: the IPv4 and IPv6 counts, the IPv4 addresses (network
/// order), then the IPv6 ones.
fn local_addrs_value(addrs: &[IpAddr]) -> [u8; LOCAL_ADDRS_LEN] {
    let mut out = [0u8; LOCAL_ADDRS_LEN];
    let v4: Vec<[u8; 4]> = addrs
        .iter()
        .filter_map(|a| match a {
            IpAddr::V4(a) => Some(a.octets()),
            IpAddr::V6(_) => None,
        })
        .collect();
    let v6: Vec<[u8; 16]> = addrs
        .iter()
        .filter_map(|a| match a {
            IpAddr::V6(a) => Some(a.octets()),
            IpAddr::V4(_) => None,
        })
        .collect();
    for (family, n) in [("IPv4", v4.len()), ("IPv6", v6.len())] {
        if n > LOCAL_ADDRS {
            tracing::warn!(
                "{n} local {family} addresses, the agent knows the first {LOCAL_ADDRS}: packets \
                 to the others get no postcard at this host"
            );
        }
    }
    let (n4, n6) = (v4.len().min(LOCAL_ADDRS), v6.len().min(LOCAL_ADDRS));
    out[..4].copy_from_slice(&(n4 as u32).to_ne_bytes());
    out[4..8].copy_from_slice(&(n6 as u32).to_ne_bytes());
    let (four, six) = out[8..].split_at_mut(LOCAL_ADDRS * 4);
    for (slot, a) in four.chunks_exact_mut(4).zip(&v4) {
        slot.copy_from_slice(a);
    }
    for (slot, a) in six.chunks_exact_mut(16).zip(&v6) {
        slot.copy_from_slice(a);
    }
    out
}

/// Prefixes the kernel half checks inline (`WATCH_FAST` in the C source); more go to its trie.
pub const WATCH_FAST: usize = 16;

/// `watch_prefixes` of the C source: per prefix its network then its mask, IPv4 mapped.
pub(crate) fn fast_prefixes(nets: &[IpNet]) -> [u8; WATCH_FAST * 32] {
    let mut out = [0u8; WATCH_FAST * 32];
    for (slot, net) in out.chunks_exact_mut(32).zip(nets) {
        let (addr, mask) = match net {
            IpNet::V4(n) => (
                n.network().to_ipv6_mapped().octets(),
                (u128::MAX << (32 - u32::from(n.prefix_len()))).to_be_bytes(),
            ),
            IpNet::V6(n) => (n.network().octets(), n.netmask().octets()),
        };
        slot[..16].copy_from_slice(&addr);
        slot[16..].copy_from_slice(&mask);
    }
    out
}

/// Interface indexes the kernel half tests in a per-namespace bitmap (`IFACE_BITS` in the C
/// source); higher ones are looked up in a hash.
pub const IFACE_BITS: usize = 4096;

/// The loaded, attached programs and their maps.
pub struct Programs {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    /// The interface bitmaps last written, by node.
    iface_bits: Vec<[u8; IFACE_BITS / 8]>,
}

/// Map `name` of `ebpf` as the typed map `M` (a `HashMap`, an `Array` …).
pub(crate) fn typed_map<'a, M>(ebpf: &'a mut aya::Ebpf, name: &str) -> Result<M, AgentError>
where
    M: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .map_mut(name)
        .ok_or_else(|| AgentError::Bpf(format!("map {name} missing")))?;
    M::try_from(map).map_err(|e| load_error(name, e))
}

pub(crate) fn load_error(what: &str, e: impl std::fmt::Display) -> AgentError {
    let text = e.to_string();
    let hint = if text.contains("Operation not permitted") || text.contains("EPERM") {
        " (loading BPF needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN, or root; \
         and kernel.unprivileged_bpf_disabled does not matter then)"
    } else {
        ""
    };
    AgentError::Bpf(format!("{what}: {text}{hint}"))
}

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs").finish_non_exhaustive()
    }
}

impl Programs {
    /// Loads the programs with `s` and attaches them.
    pub fn load(s: &Settings) -> Result<Self, AgentError> {
        if OBJECT.is_empty() {
            return Err(AgentError::NotBuilt(
                NOT_BUILT
                    .unwrap_or("the build made no BPF object")
                    .to_string(),
            ));
        }
        let btf = Btf::from_sys_fs().map_err(|e| {
            AgentError::Bpf(format!(
                "the kernel's BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF) cannot be read: {e}"
            ))
        })?;
        let (filters, watch_all, drops_all) = (
            u32::from(s.filters),
            u32::from(s.watch_all),
            u32::from(s.drops_all),
        );
        let report_port = u32::from(s.report_port);
        if s.netns.is_empty() || s.netns.len() > MAX_NODES {
            return Err(AgentError::Config(format!(
                "{} namespaces: an agent watches 1 to {MAX_NODES}",
                s.netns.len()
            )));
        }
        let node_count = s.netns.len() as u32;
        let mut netns = [0u32; MAX_NODES];
        netns[..s.netns.len()].copy_from_slice(&s.netns);
        let (watch_count, prefixes) = if s.watch.len() <= WATCH_FAST {
            (s.watch.len() as u32, fast_prefixes(&s.watch))
        } else {
            (0xff, [0u8; WATCH_FAST * 32])
        };
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("node_count", &node_count, true)
            .override_global("netns_inums", &netns, true)
            .override_global("interval_ns", &s.interval_ns, true)
            .override_global("latency_shift", &s.latency_shift, true)
            .override_global("filters_on", &filters, true)
            .override_global("watch_all", &watch_all, true)
            .override_global("queue_trigger_ns", &s.queue_trigger_ns, true)
            .override_global("queue_reset_ns", &s.queue_reset_ns, true)
            .override_global("report_port", &report_port, true)
            .override_global("drops_all", &drops_all, true)
            .override_global("watch_count", &watch_count, true)
            .override_global("watch_prefixes", &prefixes, true)
            .load(OBJECT)
            .map_err(|e| load_error("loading the BPF object (its maps)", e))?;
        for (name, tracepoint) in HOOKS {
            let program: &mut BtfTracePoint = ebpf
                .program_mut(name)
                .ok_or_else(|| AgentError::Bpf(format!("program {name} missing from the object")))?
                .try_into()
                .map_err(|e| load_error(name, e))?;
            program.load(tracepoint, &btf).map_err(|e| {
                load_error(&format!("loading {name} for tracepoint {tracepoint}"), e)
            })?;
            program.attach().map_err(|e| {
                load_error(
                    &format!("attaching {name} to the BTF tracepoint {tracepoint} (raw tracepoints, BPF_TRACE_RAW_TP)"),
                    e,
                )
            })?;
        }
        let events = ebpf
            .take_map("events")
            .ok_or_else(|| AgentError::Bpf("map events missing".into()))?;
        let events = RingBuf::try_from(events).map_err(|e| load_error("events", e))?;
        let mut programs = Programs {
            ebpf,
            events,
            iface_bits: Vec::new(),
        };
        if s.watch.len() > WATCH_FAST {
            for net in &s.watch {
                programs.watch(*net)?;
            }
        }
        Ok(programs)
    }

    /// The ring buffer of events.
    pub fn events(&mut self) -> &mut RingBuf<MapData> {
        &mut self.events
    }

    fn hash<K: aya::Pod, V: aya::Pod>(
        &mut self,
        name: &str,
    ) -> Result<HashMap<&mut MapData, K, V>, AgentError> {
        typed_map(&mut self.ebpf, name)
    }

    /// Makes `interfaces` the watched interfaces: per node (the index in
    /// [`Settings::netns`]), its namespace's inode number and the interface indexes. Indexes
    /// below [`IFACE_BITS`] go to the node's bitmap (rewritten only when it changed), the others
    /// to the `ifaces` hash.
    pub fn set_interfaces(&mut self, interfaces: &[(u32, Vec<u32>)]) -> Result<(), AgentError> {
        let mut high: Vec<[u32; 2]> = Vec::new();
        for (node, (inum, ifindexes)) in interfaces.iter().enumerate() {
            let mut bits = [0u8; IFACE_BITS / 8];
            for &i in ifindexes {
                match usize::try_from(i) {
                    Ok(i) if i < IFACE_BITS => bits[i / 8] |= 1 << (i % 8),
                    _ => high.push([*inum, i]),
                }
            }
            if self.iface_bits.get(node) == Some(&bits) {
                continue;
            }
            let mut array: aya::maps::Array<&mut MapData, [u8; IFACE_BITS / 8]> =
                typed_map(&mut self.ebpf, "iface_bits")?;
            array
                .set(node as u32, bits, 0)
                .map_err(|e| load_error("iface_bits", e))?;
            if self.iface_bits.len() <= node {
                self.iface_bits.resize(node + 1, [0u8; IFACE_BITS / 8]);
            }
            self.iface_bits[node] = bits;
        }
        let mut map = self.hash::<[u32; 2], u32>("ifaces")?;
        let old: Vec<[u32; 2]> = map.keys().filter_map(Result::ok).collect();
        for i in old.iter().filter(|i| !high.contains(i)) {
            let _ = map.remove(i);
        }
        for i in high.iter().filter(|i| !old.contains(i)) {
            map.insert(i, 1, 0).map_err(|e| load_error("ifaces", e))?;
        }
        Ok(())
    }

    /// Makes `addrs` this host's addresses (packets to them are delivered here); past
    /// [`LOCAL_ADDRS`] the rest are left out (a warning: their packets' last hop goes
    /// unreported).
    pub fn set_local_addrs(&mut self, node: u32, addrs: &[IpAddr]) -> Result<(), AgentError> {
        let value = local_addrs_value(addrs);
        let mut array: aya::maps::Array<&mut MapData, [u8; LOCAL_ADDRS_LEN]> =
            typed_map(&mut self.ebpf, "local_addrs")?;
        array
            .set(node, value, 0)
            .map_err(|e| load_error("local_addrs", e))
    }

    /// Watches packets from or to `net` (the trie, for more than [`WATCH_FAST`] prefixes).
    fn watch(&mut self, net: IpNet) -> Result<(), AgentError> {
        let mut trie: LpmTrie<&mut MapData, [u8; 16], u32> = typed_map(&mut self.ebpf, "watch")?;
        let len = match net {
            IpNet::V4(n) => 96 + u32::from(n.prefix_len()),
            IpNet::V6(n) => u32::from(n.prefix_len()),
        };
        trie.insert(&Key::new(len, mapped(net.network())), 1, 0)
            .map_err(|e| load_error("watch", e))
    }

    /// The counters (summed over CPUs), in [`COUNTERS`]' order.
    pub fn counters(&self) -> Result<[u64; COUNTERS.len()], AgentError> {
        read_counters(&self.ebpf)
    }
}

/// An address as the kernel half keys it: IPv6, IPv4 mapped (`::ffff:a.b.c.d`).
pub fn mapped(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// An object's `counters` map (a per-CPU array), each slot summed over the CPUs.
pub(crate) fn read_counters<const N: usize>(ebpf: &Ebpf) -> Result<[u64; N], AgentError> {
    let map = ebpf
        .map("counters")
        .ok_or_else(|| AgentError::Bpf("map counters missing".into()))?;
    let array: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(map).map_err(|e| load_error("counters", e))?;
    let mut out = [0u64; N];
    for (i, slot) in out.iter_mut().enumerate() {
        let values = array
            .get(&(i as u32), 0)
            .map_err(|e| load_error("counters", e))?;
        *slot = values.iter().sum();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_prefixes_are_network_then_mask_ipv4_mapped() {
        let p = fast_prefixes(&[
            "10.1.0.0/16".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ]);
        assert_eq!(
            &p[..16],
            &"::ffff:10.1.0.0"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(&p[16..28], &[0xff; 12]);
        assert_eq!(&p[28..32], &[0xff, 0xff, 0, 0]);
        assert_eq!(&p[32..36], &[0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(&p[48..52], &[0xff; 4]);
        assert_eq!(&p[52..64], &[0; 12]);
        assert!(p[64..].iter().all(|b| *b == 0));
    }

    #[test]
    fn local_addresses_are_counts_then_ipv4_then_ipv6() {
        let v = local_addrs_value(&[
            "10.1.1.1".parse().unwrap(),
            "::1".parse().unwrap(),
            "10.1.2.1".parse().unwrap(),
        ]);
        assert_eq!(&v[..4], &2u32.to_ne_bytes());
        assert_eq!(&v[4..8], &1u32.to_ne_bytes());
        assert_eq!(&v[8..12], &[10, 1, 1, 1]);
        assert_eq!(&v[12..16], &[10, 1, 2, 1]);
        let six = 8 + LOCAL_ADDRS * 4;
        assert_eq!(v[six + 15], 1);
        assert!(v[six..six + 15].iter().all(|b| *b == 0));
        let many: Vec<IpAddr> = (0..40u8).map(|i| IpAddr::from([10, 0, 0, i])).collect();
        let v = local_addrs_value(&many);
        assert_eq!(&v[..4], &32u32.to_ne_bytes());
        assert_eq!(&v[4..8], &0u32.to_ne_bytes());
        assert_eq!(&v[8 + 31 * 4..8 + 32 * 4], &[10, 0, 0, 31]);
    }
}
