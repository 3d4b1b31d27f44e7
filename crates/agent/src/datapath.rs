//! The INT-MD / INT-MX data path's kernel half: loads `bpf/int.bpf.c`'s object, writes the
//! node's settings into its read-only globals, attaches `int_ingress` at tc ingress of every
//! watched interface, `int_egress` at tc egress of every interface with a role, and the
//! `on_xmit` tracepoint; reads its counters and events.
//!
//! What each role does to a packet (INT v2.1 §"INT Source Node", §"INT Transit Hop Node",
//! §"INT Sink Node"), how each encapsulation (NPT 0, 1, 2) keeps the checksums right under the
//! kernel's offloads and why GSO packets pass without INT, is in the C source's header comment
//! and in docs/ARCHITECTURE.md ("The eBPF INT data path").
//!
//! On kernels from 6.6 the tc programs attach through TCX links (no qdisc needed), held by file
//! descriptors: the kernel detaches them when the process ends in any way, a SIGKILL too.

use aya::maps::{Array, HashMap, MapData, RingBuf};
use aya::programs::tc::{self, SchedClassifier, TcAttachType};
use aya::programs::{BtfTracePoint, TestRun, TestRunOptions};
use aya::{Btf, Ebpf, EbpfLoader};
use ipnet::IpNet;

use crate::AgentError;
use crate::bpf::{WATCH_FAST, fast_prefixes, load_error, typed_map};
use crate::int_report::INT_EVENT_LEN;
use intscope_node::domain::{Domain, KnownDomain};

/// The compiled object (empty when the build had no BPF toolchain).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/int.bpf.o"));

/// Why the build made no object, if it did not.
const NOT_BUILT: Option<&str> = option_env!("INTSCOPE_AGENT_NO_BPF_WHY");

/// What an egress interface does with INT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortRole {
    /// Inserts INT into watched TCP/UDP packets leaving here.
    Source,
    /// Pushes this hop's metadata on INT-MD packets leaving here (INT-MX: reports them).
    Transit,
    /// Reports and removes INT from packets arriving here (at tc ingress: before the routing
    /// decision, so the restored packet meets the next link's MTU at its own size).
    Sink,
}

impl PortRole {
    fn code(self) -> u32 {
        match self {
            PortRole::Source => 1,
            PortRole::Transit => 2,
            PortRole::Sink => 3,
        }
    }
}

impl std::str::FromStr for PortRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "source" => Ok(PortRole::Source),
            "transit" => Ok(PortRole::Transit),
            "sink" => Ok(PortRole::Sink),
            _ => Err(format!("{s:?}: a role is source, transit or sink")),
        }
    }
}

/// The data path's counters, in the order of `enum counter` in `bpf/int.bpf.c`. Every packet
/// sent on a role interface (`int_seen`) ends in exactly one of the others from `int_not_ip` to
/// `int_drop_discard`, or in `int_marked_without_int` or `int_too_long`; `int_events` to
/// `int_stamped`, `int_remarked` and the sink's held reports count along. Every packet a hop would
/// report (an INT-MX packet at a source or transit, any at a sink) ends in one of
/// `int_events`, `int_ring_full`, `int_filtered` and `int_sink_deferred` (a sink's report held
/// for its packet's egress); a held one in `int_sink_egress`, `int_sink_egress_lost` or the
/// agent's `int_sink_unseen_egress`.
pub const INT_COUNTERS: [(&str, &str); 34] = [
    (
        "int_seen",
        "packets sent on a source or transit interface, or received on a sink interface",
    ),
    ("int_not_ip", "not IPv4/IPv6, or their headers unreadable"),
    (
        "int_unsupported_ip",
        "IPv4 with options, IPv6 with extension headers, or not TCP/UDP: no INT",
    ),
    ("int_fragments", "IP fragments: never changed"),
    ("int_unwatched", "source: on no watchlist"),
    ("int_report_traffic", "telemetry reports: never changed"),
    (
        "int_gso_skipped",
        "source: GSO packets sent on without INT (segmentation would not carry it)",
    ),
    ("int_has_int", "source: INT already present, sent on"),
    (
        "int_inserted",
        "source: INT inserted with this hop's metadata",
    ),
    (
        "int_inserted_m",
        "source: INT inserted without metadata (M bit: no room; or Remaining Hop Count 0)",
    ),
    ("int_too_big", "source: no INT, its headers exceed the MTU"),
    ("int_not_int", "transit/sink: no INT in the packet"),
    ("int_added", "transit: this hop's metadata pushed"),
    ("int_hop_limit", "transit: Remaining Hop Count 0, E bit set"),
    ("int_mtu", "transit: no room under the MTU, M bit set"),
    ("int_mx", "transit: INT-MX packets (reported, unchanged)"),
    (
        "int_sunk",
        "sink: INT removed, the original packet restored",
    ),
    (
        "int_malformed",
        "transit/sink: INT headers inconsistent, sent on unchanged",
    ),
    (
        "int_unsupported_int",
        "transit/sink: INT this data path does not edit (another version or type, NPT 2 with a \
         non-zero UDP checksum, a GRO packet at a sink)",
    ),
    (
        "int_adjust_failed",
        "the kernel refused to resize the packet: sent on unchanged",
    ),
    (
        "int_drop_helper",
        "dropped: a rewrite failed half-way (the frame would have been corrupt)",
    ),
    (
        "int_drop_discard",
        "dropped at the sink for the D bit, after its report",
    ),
    ("int_events", "packets handed to userspace to report"),
    (
        "int_ring_full",
        "packets to report lost: the ring buffer was full",
    ),
    (
        "int_filtered",
        "packets not reported: the flow filter held them back (their flow reported this \
         interval, its ports and latencies unchanged)",
    ),
    (
        "int_no_ingress_ts",
        "packets with no ingress time (sent by this host): hop latency all ones",
    ),
    ("int_stamped", "packets stamped at tc ingress"),
    (
        "int_remarked",
        "source (encap dscp): packets marked with INT's DSCP but without INT, remarked with \
         remark_dscp",
    ),
    (
        "int_marked_without_int",
        "source (encap dscp): packets marked with INT's DSCP but without INT, sent on unchanged \
         (dscp_marked_without_int = \"skip\")",
    ),
    (
        "int_too_long",
        "NPT 0/1: more than 10 KiB behind the INT block to move; sent on unchanged",
    ),
    (
        "int_sink_deferred",
        "sink: reports of forwarded packets held until the packet leaves (its egress metadata)",
    ),
    (
        "int_sink_egress",
        "sink: held reports sent as their packet left, with its egress, latency and queue",
    ),
    (
        "int_sink_egress_lost",
        "sink: held reports lost as their packet left: the ring buffer was full",
    ),
    (
        "int_sink_pending_full",
        "sink: reports sent at once without egress metadata: the table of held reports was full",
    ),
];

/// Settings of the kernel half (its read-only globals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPathSettings {
    /// The agent's namespace (its inode number): `on_xmit` sees every namespace's devices.
    pub netns: u32,
    /// Node ID (INT metadata bit 0).
    pub node_id: u32,
    /// INT-MX (true) or INT-MD.
    pub mx: bool,
    /// Source: instruction bitmap (bits 0–8 measured or all ones, 9–15 all ones).
    pub instructions: u16,
    /// Source: Remaining Hop Count at creation.
    pub max_hops: u8,
    /// UDP destination port of INT (INT_TBD).
    pub int_port: u16,
    /// The egress MTU at most (the device's if smaller).
    pub mtu: u32,
    /// UDP port of telemetry reports (never changed).
    pub report_port: u16,
    /// Every TCP/UDP packet is watched.
    pub watch_all: bool,
    /// The watched prefixes (at most [`WATCH_FAST`]).
    pub watch: Vec<IpNet>,
    /// SD-Fabric's flow report filter on the reports (sink stacks, INT-MX hops), in the kernel
    /// (`bpf/flow_filter.h`, as the INT-XD agent's): off, every INT packet is reported.
    pub filters: bool,
    /// The filter's interval, ns: one report per flow per interval unless something changed.
    pub interval_ns: u64,
    /// `minFlowHopLatencyChangeNs` as a power of two: its log2.
    pub latency_shift: u32,
    /// Where INT goes (INT v2.1 §"INT over TCP/UDP"): NPT 2 (`UdpNew`), NPT 1 for UDP flows and
    /// NPT 2 for TCP (`UdpPort`), or NPT 0 under a DSCP marking (`Dscp`).
    pub encap: Encap,
    /// The DSCP bits marking INT (encap `Dscp`), within `int_dscp_mask`.
    pub int_dscp: u8,
    /// Which DSCP bits mark INT.
    pub int_dscp_mask: u8,
    /// A source's packets marked like INT but carrying none: remarked with `remark_dscp` (true)
    /// or sent on unchanged.
    pub remark: bool,
    /// The DSCP bits written under the mask when remarking.
    pub remark_dscp: u8,
    /// Sink: the original DSCP restored from the shim.
    pub restore_dscp: bool,
    /// The INT domains this node knows: a transit hop pushes their export metadata and sets
    /// their DS Flags (INT v2.1 §"INT-MD Metadata Header Format").
    pub domains: Vec<KnownDomain>,
}

/// DS ID and DS Instruction combinations the kernel half holds for the domains (all of them:
/// `DOMAIN_ENTRIES` in `bpf/int.bpf.c`), and domains.
const DOMAIN_ENTRIES: usize = 4096;
const DOMAINS: usize = 256;

/// Where the data path puts INT in a packet (INT v2.1 §"INT over TCP/UDP").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encap {
    /// NPT 2: a new UDP header between the IP header and the original L4 header.
    #[default]
    UdpNew,
    /// NPT 1 for UDP flows: behind their UDP header, the destination port becomes the INT port;
    /// TCP flows get NPT 2.
    UdpPort,
    /// NPT 0: behind the TCP/UDP header, marked by the DSCP.
    Dscp,
}

impl Encap {
    fn code(self) -> u32 {
        match self {
            Encap::Dscp => 0,
            Encap::UdpPort => 1,
            Encap::UdpNew => 2,
        }
    }
}

/// The loaded data path, attached.
pub struct DataPath {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    /// The sink's held reports userspace took out of `pending`, so far (`pending_count[1]`).
    taken: u64,
}

/// A sink's report waits this long for its packet to leave the host (`pending` in
/// `bpf/int.bpf.c`); then userspace sends it without the egress (the packet was delivered or
/// dropped here after all, or a role at its egress re-stamped it). Longer than any queue the
/// packet could wait in and still be useful to report (a 1 Mbit/s `tbf` holds ~300 ms).
pub const PENDING_TIMEOUT_NS: u64 = 1_000_000_000;

impl std::fmt::Debug for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPath").finish_non_exhaustive()
    }
}

/// Words of the INT v2.1 metadata `instructions` asks for (Hop ML), as the node counts them.
pub fn hop_words(instructions: u16) -> u32 {
    (intscope_wire::metadata::Format::IntV2.baseline_len(instructions) / 4) as u32
}

fn unix_offset_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    let ns = |c| {
        clock_gettime(c)
            .map(|t| (t.tv_sec() as i128) * 1_000_000_000 + i128::from(t.tv_nsec()))
            .unwrap_or(0)
    };
    let mono = ns(ClockId::CLOCK_MONOTONIC);
    let real = ns(ClockId::CLOCK_REALTIME);
    (real - mono).max(0) as u64
}

/// `ds_exports` and `ds_flags_set` of the kernel half from `domains`: every DS Instruction of a
/// domain's defined bits with its export metadata (value: length, pad, 124 bytes), and the DS
/// Flags it sets. Refused, naming the domain, past the tables' sizes.
fn load_domains(ebpf: &mut Ebpf, domains: &[KnownDomain]) -> Result<(), AgentError> {
    if domains.len() > DOMAINS {
        return Err(AgentError::Config(format!(
            "{} domains: the INT data path knows at most {DOMAINS}",
            domains.len()
        )));
    }
    let mut left = DOMAIN_ENTRIES;
    let mut tables = Vec::new();
    for k in domains {
        let d = Domain::of(k);
        let table = d.export_table(left).ok_or_else(|| {
            AgentError::Config(format!(
                "domain 0x{:04x}: its defined DS Instruction bits make more combinations than \
                 the INT data path holds ({DOMAIN_ENTRIES} for all domains)",
                d.id
            ))
        })?;
        if let Some((bits, md)) = table.iter().find(|(_, md)| md.len() > 124) {
            return Err(AgentError::Config(format!(
                "domain 0x{:04x}: DS Instruction 0x{bits:04x} asks for {} bytes of export \
                 metadata, a hop holds at most 124",
                d.id,
                md.len()
            )));
        }
        left -= table.len();
        tables.push((d, table));
    }
    let mut exports: HashMap<&mut MapData, u32, [u8; 132]> = typed_map(ebpf, "ds_exports")?;
    for (d, table) in &tables {
        for (bits, md) in table {
            let mut value = [0u8; 132];
            value[..4].copy_from_slice(&(md.len() as u32).to_ne_bytes());
            value[8..8 + md.len()].copy_from_slice(md);
            exports
                .insert(u32::from(d.id) << 16 | u32::from(*bits), value, 0)
                .map_err(|e| load_error("ds_exports", e))?;
        }
    }
    let mut flags: HashMap<&mut MapData, u32, u32> = typed_map(ebpf, "ds_flags_set")?;
    for (d, _) in &tables {
        flags
            .insert(u32::from(d.id), u32::from(d.set_ds_flags), 0)
            .map_err(|e| load_error("ds_flags_set", e))?;
    }
    Ok(())
}

impl DataPath {
    /// Loads the programs with `s` (nothing attached yet).
    pub fn load(s: &DataPathSettings) -> Result<Self, AgentError> {
        if OBJECT.is_empty() {
            return Err(AgentError::NotBuilt(
                NOT_BUILT
                    .unwrap_or("the build made no BPF object")
                    .to_string(),
            ));
        }
        if s.watch.len() > WATCH_FAST {
            return Err(AgentError::Config(format!(
                "{} watched prefixes: the INT data path checks at most {WATCH_FAST}",
                s.watch.len()
            )));
        }
        let hop_ml = hop_words(s.instructions);
        if hop_ml > 31 {
            return Err(AgentError::Config(format!(
                "instructions 0x{:04x}: {hop_ml} words per hop, Hop ML holds 31",
                s.instructions
            )));
        }
        let btf = Btf::from_sys_fs().map_err(|e| {
            AgentError::Bpf(format!(
                "the kernel's BTF (/sys/kernel/btf/vmlinux) cannot be read: {e}"
            ))
        })?;
        let int_type: u32 = if s.mx { 3 } else { 1 };
        let instructions = u32::from(s.instructions);
        let (max_hops, int_port, report_port) = (
            u32::from(s.max_hops),
            u32::from(s.int_port),
            u32::from(s.report_port),
        );
        let watch_all = u32::from(s.watch_all);
        let filters = u32::from(s.filters);
        let watch_count = s.watch.len() as u32;
        let prefixes = fast_prefixes(&s.watch);
        let offset = unix_offset_ns();
        let encap = s.encap.code();
        let (int_dscp, int_dscp_mask, remark_dscp) = (
            u32::from(s.int_dscp),
            u32::from(s.int_dscp_mask),
            u32::from(s.remark_dscp),
        );
        let (remark, restore_dscp) = (u32::from(s.remark), u32::from(s.restore_dscp));
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("netns_inum", &s.netns, true)
            .override_global("node_id", &s.node_id, true)
            .override_global("int_type", &int_type, true)
            .override_global("instructions", &instructions, true)
            .override_global("hop_ml", &hop_ml, true)
            .override_global("max_hops", &max_hops, true)
            .override_global("int_port", &int_port, true)
            .override_global("mtu_cap", &s.mtu, true)
            .override_global("report_port", &report_port, true)
            .override_global("unix_offset_ns", &offset, true)
            .override_global("watch_all", &watch_all, true)
            .override_global("watch_count", &watch_count, true)
            .override_global("watch_prefixes", &prefixes, true)
            .override_global("filters_on", &filters, true)
            .override_global("interval_ns", &s.interval_ns, true)
            .override_global("latency_shift", &s.latency_shift, true)
            .override_global("encap", &encap, true)
            .override_global("int_dscp", &int_dscp, true)
            .override_global("int_dscp_mask", &int_dscp_mask, true)
            .override_global("remark_dscp", &remark_dscp, true)
            .override_global("remark_on", &remark, true)
            .override_global("restore_dscp", &restore_dscp, true)
            .load(OBJECT)
            .map_err(|e| load_error("loading the INT data path's object", e))?;
        for name in ["int_ingress", "int_egress"] {
            let p: &mut SchedClassifier = ebpf
                .program_mut(name)
                .ok_or_else(|| AgentError::Bpf(format!("program {name} missing")))?
                .try_into()
                .map_err(|e| load_error(name, e))?;
            p.load()
                .map_err(|e| load_error(&format!("loading {name}"), e))?;
        }
        let p: &mut BtfTracePoint = ebpf
            .program_mut("on_xmit")
            .ok_or_else(|| AgentError::Bpf("program on_xmit missing".into()))?
            .try_into()
            .map_err(|e| load_error("on_xmit", e))?;
        p.load("net_dev_start_xmit", &btf)
            .map_err(|e| load_error("loading on_xmit", e))?;
        load_domains(&mut ebpf, &s.domains)?;
        let events = ebpf
            .take_map("events")
            .ok_or_else(|| AgentError::Bpf("map events missing".into()))?;
        let events = RingBuf::try_from(events).map_err(|e| load_error("events", e))?;
        Ok(DataPath {
            ebpf,
            events,
            taken: 0,
        })
    }

    /// Attaches: `int_ingress` on `ingress` (timestamps; the sink role), `int_egress` on each
    /// source and transit interface of `egress`, `on_xmit` once. Interfaces by name, in this thread's namespace.
    pub fn attach(
        &mut self,
        ingress: &[String],
        egress: &[(String, PortRole)],
    ) -> Result<(), AgentError> {
        let mut roles: HashMap<&mut MapData, u32, u32> = typed_map(&mut self.ebpf, "roles")?;
        for (name, role) in egress {
            let index = nix::net::if_::if_nametoindex(name.as_str())
                .map_err(|e| AgentError::Config(format!("interface {name} (an INT role): {e}")))?;
            roles
                .insert(index, role.code(), 0)
                .map_err(|e| load_error("roles", e))?;
        }
        let mut attach = |program: &str, iface: &str, at: TcAttachType| -> Result<(), AgentError> {
            // Before 6.6 (no TCX) tc programs hang off the clsact qdisc; one already there, or
            // none needed, is fine.
            let _ = tc::qdisc_add_clsact(iface);
            let p: &mut SchedClassifier = self
                .ebpf
                .program_mut(program)
                .ok_or_else(|| AgentError::Bpf(format!("program {program} missing")))?
                .try_into()
                .map_err(|e| load_error(program, e))?;
            p.attach(iface, at).map_err(|e| {
                load_error(&format!("attaching {program} at tc {at:?} of {iface}"), e)
            })?;
            Ok(())
        };
        for iface in ingress {
            attach("int_ingress", iface, TcAttachType::Ingress)?;
        }
        for (iface, role) in egress {
            if *role != PortRole::Sink {
                attach("int_egress", iface, TcAttachType::Egress)?;
            }
        }
        let p: &mut BtfTracePoint = self
            .ebpf
            .program_mut("on_xmit")
            .ok_or_else(|| AgentError::Bpf("program on_xmit missing".into()))?
            .try_into()
            .map_err(|e| load_error("on_xmit", e))?;
        p.attach()
            .map_err(|e| load_error("attaching on_xmit (net_dev_start_xmit)", e))?;
        Ok(())
    }

    /// Gives interface index `ifindex` the role `role` without attaching anything (tests run
    /// `int_egress` through `BPF_PROG_TEST_RUN`, where the device is the namespace's `lo`).
    pub fn set_role(&mut self, ifindex: u32, role: PortRole) -> Result<(), AgentError> {
        let mut roles: HashMap<&mut MapData, u32, u32> = typed_map(&mut self.ebpf, "roles")?;
        roles
            .insert(ifindex, role.code(), 0)
            .map_err(|e| load_error("roles", e))
    }

    /// Runs `int_egress` once on `frame` (`BPF_PROG_TEST_RUN`) with `ctx` as its `__sk_buff`
    /// (ingress_ifindex …); the verdict and the frame as the program left it.
    pub fn run_egress(&self, frame: &[u8], ctx: &[u8]) -> Result<(u32, Vec<u8>), AgentError> {
        self.run("int_egress", frame, ctx)
    }

    /// Runs `int_ingress` once on `frame`, as [`DataPath::run_egress`].
    pub fn run_ingress(&self, frame: &[u8], ctx: &[u8]) -> Result<(u32, Vec<u8>), AgentError> {
        self.run("int_ingress", frame, ctx)
    }

    fn run(&self, name: &str, frame: &[u8], ctx: &[u8]) -> Result<(u32, Vec<u8>), AgentError> {
        let p: &SchedClassifier = self
            .ebpf
            .program(name)
            .ok_or_else(|| AgentError::Bpf(format!("program {name} missing")))?
            .try_into()
            .map_err(|e| load_error(name, e))?;
        let mut out = vec![0u8; frame.len() + 1024];
        let r = p
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(ctx),
                ..TestRunOptions::default()
            })
            .map_err(|e| load_error(&format!("running {name} (BPF_PROG_TEST_RUN)"), e))?;
        out.truncate(r.data_size_out as usize);
        Ok((r.return_value, out))
    }

    /// The ring buffer of events.
    pub fn events(&mut self) -> &mut RingBuf<MapData> {
        &mut self.events
    }

    /// The sink's reports that waited in `pending` since before `now_ns - PENDING_TIMEOUT_NS`
    /// (CLOCK_MONOTONIC), taken out of it (each by the one who deletes it: the kernel may send
    /// one meanwhile) and handed to `f` as events without their egress; how many.
    pub fn take_expired(
        &mut self,
        now_ns: u64,
        mut f: impl FnMut(&[u8]),
    ) -> Result<u64, AgentError> {
        // `pending_count`: [0] the entries the kernel put in less those it took out, [1] those
        // taken here (written here alone). Nothing waits while [0] is not above [1].
        let held = {
            let count: Array<&mut MapData, u64> = typed_map(&mut self.ebpf, "pending_count")?;
            count
                .get(&0, 0)
                .map_err(|e| load_error("pending_count", e))?
        };
        if held <= self.taken {
            return Ok(0);
        }
        let mut pending: HashMap<&mut MapData, [u8; 16], [u8; INT_EVENT_LEN]> =
            typed_map(&mut self.ebpf, "pending")?;
        let mut taken = 0;
        // Keys first: the map changes under the walk.
        let keys: Vec<[u8; 16]> = pending.keys().filter_map(Result::ok).collect();
        for key in keys {
            let arrived = u64::from_ne_bytes(key[..8].try_into().expect("8 bytes"));
            if arrived.saturating_add(PENDING_TIMEOUT_NS) > now_ns {
                continue;
            }
            let Ok(event) = pending.get(&key, 0) else {
                continue;
            };
            if pending.remove(&key).is_ok() {
                f(&event);
                taken += 1;
            }
        }
        if taken > 0 {
            self.taken += taken;
            let mut count: Array<&mut MapData, u64> = typed_map(&mut self.ebpf, "pending_count")?;
            count
                .set(1, self.taken, 0)
                .map_err(|e| load_error("pending_count", e))?;
        }
        Ok(taken)
    }

    /// The counters (summed over CPUs), in [`INT_COUNTERS`]' order.
    pub fn counters(&self) -> Result<[u64; INT_COUNTERS.len()], AgentError> {
        crate::bpf::read_counters(&self.ebpf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_words_follow_the_bitmap() {
        assert_eq!(hop_words(0xf000), 4);
        assert_eq!(hop_words(0xfc00), 8);
        assert_eq!(hop_words(0xff80), 12);
        assert_eq!(hop_words(0), 0);
    }
}
