//! Node configuration (the `intscope node --config` file; docs/node-config.md).

use ipnet::IpNet;

pub use crate::hex_bytes::HexBytes;

/// What the node does with INT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Inserts INT into watched flows (and adds its own metadata).
    Source,
    /// Adds its metadata to INT-MD packets.
    Transit,
    /// Reports and removes INT, restoring the original packet.
    Sink,
}

/// INT mode (INT v2.1 §"INT Application Modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// INT-MD: metadata travels in the packet; the sink reports the stack.
    Md,
    /// INT-MX: instructions travel in the packet; every node reports its own metadata.
    Mx,
    /// INT-XD: no INT in the packet; every node reports watched flows itself (postcards).
    Xd,
}

/// Where a source puts INT (INT v2.1 §"INT over TCP/UDP").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceEncap {
    /// After the TCP/UDP header, signalled by the DSCP value (NPT=0; the shim keeps the DSCP).
    Dscp,
    /// After the UDP header with the destination port changed to the INT port (NPT=1); TCP
    /// flows get a new UDP header instead.
    UdpPort,
    /// A new UDP header before the original L4 header (NPT=2).
    UdpNew,
    /// After the TCP/UDP header, behind the configured 64-bit `probe_marker` (INT v2.1 §"INT
    /// over TCP/UDP", option 3: for domains that cannot reserve a DSCP value); the DSCP and ports
    /// stay as they are.
    ProbeMarker,
    /// An outer IP header and GRE (protocol type `int_gre_proto`) with INT in front of the
    /// original IP packet (INT v2.1 §"INT over IPv4/GRE", G = 1); the sink removes the GRE
    /// encapsulation again.
    Gre,
    /// For VXLAN and VXLAN-GPE tunnel packets: INT behind the VXLAN-GPE header (next protocol
    /// 0x82; INT v2.1 §"INT over VXLAN GPE"), VXLAN converted to VXLAN-GPE (shim G = 1) and
    /// back at the sink. Other packets are left alone.
    VxlanGpe,
    /// For Geneve tunnel packets: INT as a Geneve option of class 0x0103 after the existing
    /// options (INT v2.1 §"INT over Geneve"; at most 124 bytes, so the Remaining Hop Count is
    /// capped to what fits). Other packets are left alone.
    Geneve,
}

/// Where the sink puts its own metadata (INT v2.1 §"INT-MD Metadata Header Format", sink options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SinkMetadata {
    /// In the report's main contents (RepMdBits), option 2.
    Report,
    /// Pushed on the stack like a transit hop, then reported in the truncated packet, option 1.
    Stack,
}

/// What a DSCP-marking source does with a packet that arrives marked but carries no INT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkedWithoutInt {
    /// Rewrite the marking bits with `remark_dscp`, then process the packet as any other.
    #[default]
    Remark,
    /// Forward it unchanged without INT processing (the operator keeps such packets out).
    Skip,
}

/// What a transit hop does when its metadata would exceed the egress MTU (INT v2.1 §"MTU
/// Settings": it must do one of the two, never fragment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MtuAction {
    /// Add nothing and set the M bit.
    #[default]
    MBit,
    /// Report the stack so far with this hop's metadata (I bit) and remove it from the packet.
    IntermediateReport,
}

/// What a transit hop does with metadata it cannot provide: domain-specific metadata of a domain
/// it does not know, or reserved instruction bits (INT v2.1 §"INT-MD Metadata Header Format").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unsupported {
    /// Insert all ones in their place (the hop still adds Hop ML × 4 bytes).
    #[default]
    Pad,
    /// Skip INT processing for the packet altogether: add nothing.
    Skip,
}

/// The telemetry report format the node sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
pub enum ReportFormat {
    /// Telemetry Report v2.0 (the spec).
    #[default]
    #[serde(rename = "v2.0")]
    V2,
    /// Telemetry Report v0.5 as ONOS / SD-Fabric (fabric-tna) and DeepInsight collectors read it:
    /// fixed header, then a switch-local (flow and queue reports) or drop header, then the packet.
    #[serde(rename = "v0.5")]
    V05,
}

/// One watchlist entry: a flow matches when every given field matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchEntry {
    /// Source prefix.
    pub src: Option<IpNet>,
    /// Destination prefix.
    pub dst: Option<IpNet>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// Destination port range, inclusive.
    pub dst_ports: Option<(u16, u16)>,
    /// Source port range, inclusive.
    pub src_ports: Option<(u16, u16)>,
    /// Source *or* destination in this prefix (SD-Fabric's `watchSubnets` meaning, one entry
    /// per prefix).
    pub subnet: Option<IpNet>,
    /// Ingress interface (the device's level-1 port the packet arrived on).
    pub ingress_port: Option<u16>,
    /// Reports this node sends about these flows (default: all: flow, drop, queue).
    pub reports: Option<Vec<ReportCategory>>,
    /// Which headers the entry matches. Unset (the default): the user's flow inside a GTP-U tunnel
    /// (SD-Fabric: "For GTP-U encapsulated traffic, the watchlist is always applied to the inner
    /// headers"), the packet's own headers otherwise. `true`: the innermost flow through any
    /// tunnel (GTP-U, VXLAN, Geneve, GRE, IP-in-IP), never a packet without one. `false`: the
    /// packet's own headers, GTP-U included. INT always goes on the outer headers.
    pub inner: Option<bool>,
    /// INT mode for these flows (default: the node's).
    pub mode: Option<Mode>,
    /// Instruction bitmap for these flows (default: the node's).
    pub instructions: Option<u16>,
    /// Remaining Hop Count at creation (default: the node's).
    pub max_hops: Option<u8>,
    /// Where the source puts INT (default: the node's).
    pub encap: Option<SourceEncap>,
    /// Domain Specific ID of the INT header (0: none).
    pub ds_id: u16,
    /// DS Instruction bitmap.
    pub ds_instruction: u16,
    /// DS Flags.
    pub ds_flags: u16,
    /// The source's domain-specific metadata (hex): INT-MD, its export metadata after its
    /// baseline metadata in its hop, inside Hop ML (empty: the known domain's `values`; transit
    /// hops that do not know the domain pad theirs with all ones); INT-MX, the source-inserted
    /// metadata after the header. A multiple of 4 bytes.
    pub ds_metadata: HexBytes,
    /// INT-MD 'source-only' domain-specific metadata (hex, a multiple of 4 bytes): after the
    /// source's hop at the bottom of the stack, excluded from Hop ML and counted in the shim
    /// length (INT v2.1 §"INT-MD Metadata Header Format", DS Instruction). With a known domain,
    /// its size must be what the DS Instruction's source-inserted bits define.
    pub source_only: HexBytes,
    /// The body of a Destination header (INT type 2; hex, whole 4-byte words, at most 1020
    /// bytes) the source adds after the MD or MX header, for the sink alone (INT v2.1 §"INT
    /// Header Types": e.g. a sequence number). TCP/UDP encapsulations only.
    pub destination: HexBytes,
    /// Clone-and-mark (INT v2.1 §"INT Applied to Synthetic Traffic"): leave these packets alone
    /// and send an INT-marked copy with the D bit, which the sink reports and discards.
    pub clone: bool,
}

/// A stream of probe packets the node generates (INT v2.1 §"INT Applied to Synthetic Traffic"):
/// UDP packets made up for measurement, INT-marked like a watched flow with the node's settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeConfig {
    /// Source address (IPv4 or IPv6, the same family as `dst`).
    pub src: std::net::IpAddr,
    /// Destination address.
    pub dst: std::net::IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Frame size before INT, bytes.
    pub size: usize,
    /// One probe every this many nanoseconds.
    pub interval_ns: u64,
    /// D bit: the sink discards the probe after reporting it (false: it is delivered).
    pub discard: bool,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            src: std::net::Ipv4Addr::UNSPECIFIED.into(),
            dst: std::net::Ipv4Addr::UNSPECIFIED.into(),
            src_port: 50_000,
            dst_port: 50_001,
            size: 128,
            interval_ns: 1_000_000_000,
            discard: true,
        }
    }
}

/// Which dropped packets get drop reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropReports {
    /// Packets of watched flows (a watchlist entry or `watch_subnets` matches, or the packet
    /// carries INT, so a source watched it): SD-Fabric's behaviour, and Report v2.0
    /// §"Telemetry Report Associations" ("Dropped Packets ... matching a watchlist"). With an
    /// empty watchlist no drop is reported.
    #[default]
    Watched,
    /// Every dropped packet except report traffic; unwatched ones have F = 0.
    All,
}

/// A kind of report a watchlist entry asks for (SD-Fabric's report types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportCategory {
    /// Flow reports (INT-XD postcards, INT-MX reports) as the flow filter lets them through.
    Flow,
    /// Drop reports for the flow's packets this node drops.
    Drop,
    /// Queue reports (Q flag) while a configured queue is congested (`[filters]` queues).
    Queue,
}

/// The deterministic telemetry model of pcap mode: what this node reports for every packet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryModel {
    /// Ingress interface.
    pub ingress_port: u16,
    /// Egress interface.
    pub egress_port: u16,
    /// Queue ID.
    pub queue_id: u8,
    /// Queue occupancy.
    pub queue_occupancy: u32,
    /// Hop latency in ns.
    pub hop_latency_ns: u32,
    /// Egress Tx utilization.
    pub tx_util: u32,
}

impl Default for TelemetryModel {
    fn default() -> Self {
        TelemetryModel {
            ingress_port: 1,
            egress_port: 2,
            queue_id: 0,
            queue_occupancy: 0,
            hop_latency_ns: 1000,
            tx_util: 0,
        }
    }
}

/// A node's configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Node ID (INT metadata bit 0, report group header).
    pub node_id: u32,
    /// Role.
    pub role: Role,
    /// INT mode.
    pub mode: Mode,
    /// Egress link MTU: the largest IP packet the node may send.
    pub mtu: usize,
    /// DSCP value marking INT (`dscp` encapsulation and detection), within `int_dscp_mask`.
    pub int_dscp: u8,
    /// The DSCP bits that mark INT (INT v2.1 §"INT over TCP/UDP": "A value or a bit can be
    /// used"): 0x3F (default) marks with the whole value `int_dscp`; a single bit (e.g. 0x20 with
    /// `int_dscp` 0x20) marks with that bit and leaves the others to QoS.
    pub int_dscp_mask: u8,
    /// A source using DSCP marking, for a packet arriving with the INT marking but no INT
    /// header (INT v2.1: a node forwarding a packet into the domain without INT "must ensure that
    /// the DSCP/Traffic class value is not the same as any of the values used to indicate INT"):
    /// `"remark"` it with `remark_dscp` (default), or `"skip"` it (forwarded as it came, no INT
    /// added). Counted in `marked_without_int` either way.
    pub dscp_marked_without_int: MarkedWithoutInt,
    /// The DSCP bits under `int_dscp_mask` written when remarking (default 0: best effort for
    /// value marking; the marking bit cleared for bit marking); the other bits are kept.
    pub remark_dscp: u8,
    /// UDP destination port of INT (INT_TBD).
    pub int_udp_port: u16,
    /// GRE protocol type of INT (TBD_INT in the spec; default 0x88B5, IEEE 802 "local
    /// experimental EtherType 1").
    pub int_gre_proto: u16,
    /// The 64-bit probe marker (hex, 8 bytes) in front of INT after TCP/UDP, for the
    /// `probe-marker` encapsulation and for finding INT behind it.
    pub probe_marker: Option<HexBytes>,
    /// Source: where to put INT.
    pub encap: SourceEncap,
    /// Source: instruction bitmap (default node id, L1 interfaces, hop latency, queue).
    pub instructions: u16,
    /// Source: Remaining Hop Count at creation.
    pub max_hops: u8,
    /// Source (and every node in INT-XD): flows to monitor (empty: none).
    pub watchlist: Vec<WatchEntry>,
    /// SD-Fabric's `watchSubnets`: a packet is watched when its source or destination address
    /// is in one of these prefixes (GTP-U: the user's inner addresses). Checked after
    /// `watchlist`, with the node's settings.
    pub watch_subnets: Vec<IpNet>,
    /// Drop reports for watched flows only (`"watched"`, default) or for every drop (`"all"`).
    pub drop_reports: DropReports,
    /// INT domains this node knows (`[[domains]]`): their DS Instruction bits, this node's
    /// export metadata values and the DS Flags it sets.
    pub domains: Vec<crate::domain::KnownDomain>,
    /// Source: probe packets to generate (`[[probes]]`).
    pub probes: Vec<ProbeConfig>,
    /// Sink: where its own metadata goes.
    pub sink_metadata: SinkMetadata,
    /// Sink: the domain's sources add Destination headers (watchlist `destination`), so one
    /// after a TCP/UDP INT block, repeating its shim, is consumed with it. Off (the default), a
    /// payload that happens to start like one is left alone: the spec signals none.
    pub destination_headers: bool,
    /// Sink: restore the original DSCP saved in the shim (`dscp` encapsulation).
    pub restore_dscp: bool,
    /// Sink: bytes of the received packet carried in the report; more when the INT stack would
    /// push the headers that name the flow (an NPT=2 block's original L4 header, a tunnel's
    /// inner headers) past them.
    pub report_truncate: usize,
    /// Transit: a Domain Specific ID it does not know (DS metadata in Hop ML): `"pad"` with
    /// all ones or `"skip"` the packet.
    pub unknown_domain: Unsupported,
    /// Transit: reserved instruction bits (9–14): `"pad"` with all ones or `"skip"` the packet.
    pub reserved_bits: Unsupported,
    /// Transit: without room for its metadata, set the M bit (`"m-bit"`) or send an
    /// intermediate report (`"intermediate-report"`).
    pub on_mtu_exceeded: MtuAction,
    /// Source and transit: when the instruction bitmap has the Checksum Complement (bit 15),
    /// keep the L4 checksum and write the complement (true), or update the checksum field and
    /// write the complement as all ones (false). The sink always updates the field.
    pub use_checksum_complement: bool,
    /// Report format: `"v2.0"` (default) or `"v0.5"`.
    pub report_format: ReportFormat,
    /// Report delivery: coalescing budget (`[export]`).
    pub export: crate::export::ExportConfig,
    /// UDP ports of telemetry reports (never watched).
    pub report_ports: Vec<u16>,
    /// Telemetry model of pcap mode.
    pub telemetry: TelemetryModel,
    /// SD-Fabric's report filters (off by default: every packet reported).
    pub filters: crate::filter::FilterConfig,
}

impl NodeConfig {
    /// Whether a source marks INT with the DSCP (the node's or a watchlist entry's `dscp`
    /// encapsulation).
    pub fn marks_dscp(&self) -> bool {
        self.encap == SourceEncap::Dscp
            || self
                .watchlist
                .iter()
                .any(|w| w.encap == Some(SourceEncap::Dscp))
    }

    /// `dscp` with the INT marking written in.
    pub fn mark_dscp(&self, dscp: u8) -> u8 {
        (dscp & !self.int_dscp_mask) | (self.int_dscp & self.int_dscp_mask)
    }

    /// `dscp` with the INT marking replaced by `remark_dscp`.
    pub fn remark(&self, dscp: u8) -> u8 {
        (dscp & !self.int_dscp_mask) | (self.remark_dscp & self.int_dscp_mask)
    }

    /// The probe marker as the number it is on the wire.
    pub fn probe_marker(&self) -> Option<u64> {
        let b: [u8; 8] = self.probe_marker.as_ref()?.0.as_slice().try_into().ok()?;
        Some(u64::from_be_bytes(b))
    }

    /// Checks what serde cannot: metadata sizes the INT headers can express, a probe marker of
    /// 8 bytes where one is needed, a DSCP marking that can be written, domains and watchlist
    /// entries that agree. [`crate::Node::new`] calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mask = self.int_dscp_mask;
        let (value, remark) = (self.int_dscp, self.remark_dscp);
        if mask == 0 || mask > 0x3f || value > 0x3f || value & !mask != 0 {
            return Err(ConfigError::DscpMarking { value, mask });
        }
        if remark & mask == value & mask {
            return Err(ConfigError::Remark {
                remark,
                value,
                mask,
            });
        }
        if !(MIN_MTU..=usize::from(u16::MAX)).contains(&self.mtu) {
            return Err(ConfigError::Mtu(self.mtu));
        }
        for (index, p) in self.probes.iter().enumerate() {
            if p.src.is_ipv4() != p.dst.is_ipv4() || p.dst.is_unspecified() {
                return Err(ConfigError::Probe {
                    index,
                    problem: "src and dst must be addresses of one family",
                });
            }
            if p.interval_ns == 0 {
                return Err(ConfigError::Probe {
                    index,
                    problem: "interval_ns must be positive",
                });
            }
        }
        if let Some(m) = &self.probe_marker
            && m.0.len() != 8
        {
            return Err(ConfigError::ProbeMarkerLen(m.0.len()));
        }
        let wants_marker = self.encap == SourceEncap::ProbeMarker
            || self
                .watchlist
                .iter()
                .any(|w| w.encap == Some(SourceEncap::ProbeMarker));
        if wants_marker && self.probe_marker.is_none() {
            return Err(ConfigError::ProbeMarkerMissing);
        }
        let mut ids = std::collections::BTreeSet::new();
        for d in &self.domains {
            d.validate().map_err(|e| ConfigError::Domain {
                id: e.id,
                problem: e.problem,
            })?;
            if !ids.insert(d.id) {
                return Err(ConfigError::Domain {
                    id: d.id,
                    problem: "defined twice".into(),
                });
            }
        }
        for (i, w) in self.watchlist.iter().enumerate() {
            self.validate_entry(w)
                .map_err(|problem| ConfigError::Watch {
                    at: format!("watchlist[{i}]"),
                    problem,
                })?;
        }
        let entries = std::iter::once((None, self.instructions)).chain(
            self.watchlist
                .iter()
                .enumerate()
                .map(|(i, w)| (Some(i), w.instructions.unwrap_or(self.instructions))),
        );
        for (i, instructions) in entries {
            let ds = i.map_or(0, |i| self.watchlist[i].ds_metadata.0.len());
            let at = i.map_or_else(|| "instructions".to_string(), |i| format!("watchlist[{i}]"));
            // Hop ML is 5 bits of 4-byte words (INT v2.1 §"INT-MD Metadata Header Format").
            let words =
                (intscope_wire::metadata::Format::IntV2.baseline_len(instructions) + ds) / 4;
            if words > 31 {
                return Err(ConfigError::HopMl { at, words });
            }
        }
        Ok(())
    }

    /// One watchlist entry's domain-specific and destination settings.
    fn validate_entry(&self, w: &WatchEntry) -> Result<(), String> {
        let dest = w.destination.0.len();
        if !dest.is_multiple_of(4) || dest > intscope_wire::destination::MAX_BODY_LEN {
            return Err(format!(
                "destination is {dest} bytes, not whole words of at most 1020"
            ));
        }
        if dest > 0
            && matches!(
                w.encap.unwrap_or(self.encap),
                SourceEncap::Gre | SourceEncap::VxlanGpe | SourceEncap::Geneve
            )
        {
            return Err("a destination header needs a TCP/UDP encapsulation".into());
        }
        let (ds, so) = (w.ds_metadata.0.len(), w.source_only.0.len());
        if !ds.is_multiple_of(4) || !so.is_multiple_of(4) {
            return Err(format!(
                "ds_metadata ({ds} bytes) and source_only ({so} bytes) must be whole 4-byte words"
            ));
        }
        let Some(d) = self
            .domains
            .iter()
            .find(|d| d.id == w.ds_id && w.ds_id != 0)
        else {
            return Ok(());
        };
        let d = crate::domain::Domain::of(d);
        use intscope_wire::domain::Mode as DsMode;
        let (Some(export), Some(inserted)) = (
            d.len_of(w.ds_instruction, DsMode::Export),
            d.len_of(w.ds_instruction, DsMode::SourceInserted),
        ) else {
            return Err(format!(
                "ds_instruction 0x{:04x} sets bits domain 0x{:04x} does not define",
                w.ds_instruction, w.ds_id
            ));
        };
        let mx = w.mode.unwrap_or(self.mode) == Mode::Mx;
        let (what, found, wanted) = if mx {
            ("ds_metadata (source-inserted)", ds, inserted)
        } else if ds != 0 && ds != export {
            ("ds_metadata (export)", ds, export)
        } else {
            ("source_only", so, inserted)
        };
        if found != wanted {
            return Err(format!(
                "{what} is {found} bytes; domain 0x{:04x} defines {wanted} for ds_instruction 0x{:04x}",
                w.ds_id, w.ds_instruction
            ));
        }
        Ok(())
    }
}

/// The smallest MTU an IPv4 link may have (RFC 791: 68 bytes).
pub const MIN_MTU: usize = 68;

/// A node configuration that cannot run, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The DSCP marking is not a 6-bit value inside a non-zero mask.
    #[error(
        "int_dscp 0x{value:02x} / int_dscp_mask 0x{mask:02x}: a 6-bit DSCP value inside a non-zero mask"
    )]
    DscpMarking {
        /// `int_dscp`.
        value: u8,
        /// `int_dscp_mask`.
        mask: u8,
    },
    /// Remarking would write the INT marking again.
    #[error(
        "remark_dscp 0x{remark:02x} would mark INT again (int_dscp 0x{value:02x} under mask 0x{mask:02x})"
    )]
    Remark {
        /// `remark_dscp`.
        remark: u8,
        /// `int_dscp`.
        value: u8,
        /// `int_dscp_mask`.
        mask: u8,
    },
    /// An MTU no IPv4 link has.
    #[error("mtu {0}: not between the 68 bytes every IPv4 link carries and 65535")]
    Mtu(usize),
    /// A probe stream that cannot be generated.
    #[error("probes[{index}]: {problem}")]
    Probe {
        /// Index in `probes`.
        index: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// A probe marker of another size than 64 bits.
    #[error("probe_marker is {0} bytes, not 8")]
    ProbeMarkerLen(usize),
    /// The probe-marker encapsulation without a marker.
    #[error("the probe-marker encapsulation needs probe_marker")]
    ProbeMarkerMissing,
    /// A `[[domains]]` entry.
    #[error("domains[0x{id:04x}]: {problem}")]
    Domain {
        /// Its ID.
        id: u16,
        /// What is wrong.
        problem: String,
    },
    /// A watchlist entry's settings.
    #[error("{at}: {problem}")]
    Watch {
        /// `watchlist[i]`.
        at: String,
        /// What is wrong.
        problem: String,
    },
    /// More metadata per hop than Hop ML can say.
    #[error("{at}: {words} words of metadata per hop; Hop ML holds at most 31")]
    HopMl {
        /// `instructions` or `watchlist[i]`.
        at: String,
        /// Words per hop.
        words: usize,
    },
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            node_id: 1,
            role: Role::Transit,
            mode: Mode::Md,
            mtu: 1500,
            int_dscp: 0x17,
            int_dscp_mask: 0x3f,
            dscp_marked_without_int: MarkedWithoutInt::Remark,
            remark_dscp: 0,
            int_udp_port: 17768,
            probe_marker: None,
            int_gre_proto: 0x88b5,
            encap: SourceEncap::UdpPort,
            instructions: 0xf000,
            max_hops: 8,
            watchlist: Vec::new(),
            watch_subnets: Vec::new(),
            domains: Vec::new(),
            drop_reports: DropReports::Watched,
            probes: Vec::new(),
            sink_metadata: SinkMetadata::Report,
            destination_headers: false,
            restore_dscp: true,
            report_truncate: 256,
            report_format: ReportFormat::V2,
            use_checksum_complement: true,
            on_mtu_exceeded: MtuAction::MBit,
            unknown_domain: Unsupported::Pad,
            reserved_bits: Unsupported::Pad,
            export: crate::export::ExportConfig::default(),
            report_ports: vec![intscope_wire::report::DEFAULT_REPORT_PORT],
            telemetry: TelemetryModel::default(),
            filters: crate::filter::FilterConfig::default(),
        }
    }
}
