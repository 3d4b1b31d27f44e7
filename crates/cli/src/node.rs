//! `intscope node`: run a software INT node over a capture or live Linux interfaces, writing the
//! forwarded frames (a pcap, or an interface) and the telemetry reports (a pcap, or UDP to a
//! collector).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use intscope_node::export::{Exporter, report_frame};
use intscope_node::frame::{Layout, finish_l4_checksum, l4_checksum_verifies};
use intscope_node::{MeasuredTelemetry, Node, NodeConfig, StaticTelemetry, Telemetry};
use intscope_wire::locate::{DetectConfig, Packet, Start};
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};

use crate::capture::{Capture, LINKTYPE_ETHERNET};
use crate::frames::{FrameSink, FrameSource, Input};
use crate::live;
use crate::usage::bail_usage;

/// Arguments of `intscope node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// Node configuration (TOML, docs/node-config.md).
    #[arg(long, value_name = "NODE.toml", required_unless_present = "netcfg")]
    pub config: Option<PathBuf>,
    /// An ONOS netcfg (JSON) with SD-Fabric's INT app block, applied over `--config` (or the
    /// defaults): INT-XD, v0.5 reports to its `collectorIp`:`collectorPort`, its watch subnets,
    /// filters and queue thresholds.
    #[arg(long, value_name = "NETCFG.json")]
    pub netcfg: Option<PathBuf>,
    /// Input capture (pcap or pcapng, Ethernet).
    #[arg(
        long = "in",
        value_name = "IN.pcap",
        required_unless_present = "interface",
        conflicts_with = "interface"
    )]
    pub input: Option<PathBuf>,
    /// Forwarded frames (pcap).
    #[arg(
        long = "out",
        value_name = "OUT.pcap",
        required_unless_present = "out_interface",
        conflicts_with = "out_interface"
    )]
    pub output: Option<PathBuf>,
    /// Receive frames live from this Linux interface (needs a build with `--features live`
    /// and libpcap; root or CAP_NET_RAW).
    #[arg(long, value_name = "IFACE")]
    pub interface: Option<String>,
    /// Send forwarded frames out of this Linux interface.
    #[arg(long, value_name = "IFACE")]
    pub out_interface: Option<String>,
    /// Live mode: stop after this many frames (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
    /// Live mode: complete the TCP/UDP checksum of frames that arrive without a finished one
    /// (a sender with checksum offload, e.g. a veth peer with `tx` on), so their receiver does
    /// not drop them. Off, such frames are counted (`bad_checksums`) and forwarded as they are.
    #[arg(long, requires = "interface")]
    pub finish_checksums: bool,
    /// Write the reports to this pcap (Ethernet/IPv4/UDP to the collector address).
    #[arg(long, value_name = "REPORTS.pcap", conflicts_with = "collector")]
    pub reports: Option<PathBuf>,
    /// Send the reports over UDP to this collector.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::usage::host_port)]
    pub collector: Option<SocketAddr>,
    /// Source address of reports written to a pcap.
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "192.0.2.1:50000",
        value_parser = crate::usage::host_port
    )]
    pub report_source: SocketAddr,
    /// Collector address written into report frames in a pcap (default: the netcfg's
    /// collector, else 192.0.2.100:32766). IPv4 or IPv6: the frames follow its family.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::usage::host_port)]
    pub report_destination: Option<SocketAddr>,
}

fn writer(path: &PathBuf) -> Result<PcapWriter<BufWriter<File>>> {
    let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    PcapWriter::with_header(
        BufWriter::new(f),
        PcapHeader {
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        },
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// Runs the node; returns a summary line (JSON). Input that ends in an error (a damaged capture,
/// a failing interface) still has its summary printed, after the reports of the frames before it
/// were delivered, and then is the error: the frames it did process are accounted for.
pub fn run(args: &NodeArgs) -> Result<String> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            toml::from_str(&text).with_context(|| path.display().to_string())?
        }
        None => NodeConfig::default(),
    };
    let mut netcfg_collector = None;
    if let Some(path) = &args.netcfg {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let imported = intscope_node::netcfg::import(&text, cfg)
            .with_context(|| path.display().to_string())?;
        cfg = imported.config;
        netcfg_collector = Some(imported.collector);
    }
    let source = args
        .config
        .as_ref()
        .or(args.netcfg.as_ref())
        .map_or(String::new(), |p| p.display().to_string());
    let mut node = Node::new(cfg).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    let report_destination = args
        .report_destination
        .or(netcfg_collector)
        .unwrap_or(SocketAddrV4::new([192, 0, 2, 100].into(), 32766).into());
    // A netcfg names the collector: reports go there unless a pcap or another collector is given.
    let collector = args
        .collector
        .or(netcfg_collector.filter(|_| args.reports.is_none()));
    let mut input: Box<dyn FrameSource> = match (&args.input, &args.interface) {
        (Some(path), _) => Box::new(PcapSource {
            capture: Capture::open(path)?,
        }),
        (None, Some(iface)) => live::source(iface)?,
        (None, None) => bail_usage!("--in or --interface is required"),
    };
    let mut out: Box<dyn FrameSink> = match (&args.output, &args.out_interface) {
        (Some(path), _) => Box::new(writer(path)?),
        (None, Some(iface)) => live::sink(iface)?,
        (None, None) => bail_usage!("--out or --out-interface is required"),
    };
    let mut reports = args.reports.as_ref().map(writer).transpose()?;
    let sock = match collector {
        Some(c) => {
            let bind: SocketAddr = if c.is_ipv4() {
                "0.0.0.0:0".parse()?
            } else {
                "[::]:0".parse()?
            };
            let s = UdpSocket::bind(bind)?;
            s.connect(c).with_context(|| format!("cannot reach {c}"))?;
            Some(s)
        }
        None => None,
    };
    let mut exporter = Exporter::new(node.config().export);
    let mut ready = Vec::new();
    // Report datagrams sent (or written), and those the socket refused (lost, counted).
    let (mut forwarded, mut discarded, mut sent, mut send_errors) = (0u64, 0u64, 0u64, 0u64);
    // Frames written out (forwarded, clones, probes), and frames of another link type dropped.
    let (mut written, mut not_ethernet) = (0u64, 0u64);
    let mut failed = None;
    let mut deliver = |ts: Duration, ready: &mut Vec<Vec<u8>>| -> Result<()> {
        for r in ready.drain(..) {
            if let Some(w) = reports.as_mut() {
                let f = report_frame(args.report_source, report_destination, &r);
                w.write_packet(&PcapPacket::new(ts, f.len() as u32, &f))?;
            }
            if let Some(s) = &sock
                && let Err(e) = s.send(&r)
            {
                // A collector not (yet) listening refuses datagrams (ICMP port unreachable):
                // the report is lost and counted, the node goes on.
                if send_errors == 0 {
                    eprintln!(
                        "intscope node: warning: sending a report: {e}; reports not sent are \
                         counted in send_errors"
                    );
                }
                send_errors += 1;
                continue;
            }
            sent += 1;
        }
        Ok(())
    };
    let (mut last_ts, mut produced) = (Duration::ZERO, 0u64);
    // Live input: frames over the output's MTU (merged by GRO/LRO, or GSO frames of a local
    // sender) cannot be sent; frames whose checksum the sender left to its NIC would be
    // dropped by their receiver. Both are counted, and said once.
    let live_in = args.interface.is_some();
    let out_mtu = args
        .out_interface
        .as_ref()
        .and_then(|i| std::fs::read_to_string(format!("/sys/class/net/{i}/mtu")).ok())
        .and_then(|m| m.trim().parse::<usize>().ok());
    let (mut oversize, mut bad_checksums, mut checksums_finished) = (0u64, 0u64, 0u64);
    let plain = DetectConfig::default();
    let stop = live::stop_flag();
    loop {
        let input = match input.next_frame(&stop) {
            Ok(Some(input)) => input,
            Ok(None) => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        let (ts, frame) = match input {
            Input::Frame(ts, data) => (ts, Some(data)),
            Input::Idle(ts) => (ts, None),
            Input::NotEthernet(number, link_type) => {
                if not_ethernet == 0 {
                    // A node forwards Ethernet frames and writes an Ethernet capture: a cooked
                    // or raw-IP frame has no Ethernet header to keep, and one made up would
                    // claim MAC addresses nobody sent.
                    eprintln!(
                        "intscope node: warning: frame {number}: link type {} is not supported \
                         (a node reads Ethernet only: it forwards and writes Ethernet frames); \
                         such frames are dropped and counted in not_ethernet",
                        crate::capture::link_type_name(link_type)
                    );
                }
                not_ethernet += 1;
                continue;
            }
        };
        let model = node.config().telemetry.clone();
        // Live frames: the kernel's receive time and the time of sending, measured; pcap
        // files: the capture's time and the configured model (deterministic chains).
        let tel: Box<dyn Telemetry> = if live_in {
            Box::new(MeasuredTelemetry {
                model,
                ingress_ns: ts.as_nanos() as u64,
                egress_ns: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            })
        } else {
            Box::new(StaticTelemetry {
                model,
                time_ns: ts.as_nanos() as u64,
            })
        };
        let tel = tel.as_ref();
        // Probes due by this time go out first (pcap mode: time is the capture's).
        for probe in node.probes(ts.as_nanos() as u64, tel) {
            out.send(ts, &probe)?;
            written += 1;
        }
        let Some(data) = frame else {
            // Idle: only what the clock made due.
            exporter.poll(ts.as_nanos() as u64, &mut ready);
            deliver(ts, &mut ready)?;
            continue;
        };
        let mut data = data;
        if live_in {
            if out_mtu.is_some_and(|mtu| data.len() > mtu + 18) {
                if oversize == 0 {
                    eprintln!(
                        "intscope node: warning: a frame of {} bytes arrived, over {}'s MTU of \
                         {}: the input merges frames (GRO/LRO: ethtool -K {} gro off lro off; a \
                         local sender's TSO/GSO: ethtool -K <sender> tso off gso off); such \
                         frames cannot be forwarded and are counted in oversize",
                        data.len(),
                        args.out_interface.as_deref().unwrap_or_default(),
                        out_mtu.unwrap_or_default(),
                        args.interface.as_deref().unwrap_or_default(),
                    );
                }
                oversize += 1;
                if args
                    .count
                    .is_some_and(|n| node.stats.frames + oversize >= n)
                {
                    break;
                }
                continue;
            }
            if let Ok(p) = Packet::parse(&data, Start::Ethernet, &plain)
                && let (Some(l), Some(ip)) = (Layout::of(&p), p.ip)
            {
                let ip_end = ip.offset + ip.declared_len;
                if l4_checksum_verifies(&data, &l, ip_end) == Some(false) {
                    if args.finish_checksums && finish_l4_checksum(&mut data, &l, ip_end) {
                        checksums_finished += 1;
                    } else {
                        if bad_checksums == 0 {
                            eprintln!(
                                "intscope node: warning: frames arrive with TCP/UDP checksums \
                                 that do not verify: their sender leaves checksums to its NIC \
                                 (on a veth: ethtool -K <peer> tx off), and forwarded as they \
                                 are their receiver drops them; --finish-checksums completes \
                                 them; counted in bad_checksums"
                            );
                        }
                        bad_checksums += 1;
                    }
                }
            }
        }
        let outcome = node.process(&mut data, tel);
        if outcome.forward {
            out.send(ts, &data)?;
            forwarded += 1;
            written += 1;
        } else {
            discarded += 1;
        }
        for copy in &outcome.synthetic {
            out.send(ts, copy)?;
            written += 1;
        }
        let now = ts.as_nanos() as u64;
        exporter.poll(now, &mut ready);
        produced += outcome.reports.len() as u64;
        for r in outcome.reports {
            exporter.push(now, r, &mut ready);
        }
        deliver(ts, &mut ready)?;
        last_ts = ts;
        if args
            .count
            .is_some_and(|n| node.stats.frames + oversize >= n)
        {
            break;
        }
    }
    exporter.flush(&mut ready);
    deliver(last_ts, &mut ready)?;
    let (capture_dropped, capture_if_dropped) = input.capture_stats().unwrap_or((0, 0));
    let tx_errors = out.tx_errors();
    // Flushed here, not on drop, which would swallow a failed write (a full disk).
    out.finish()?;
    if let Some(w) = reports {
        w.into_writer()
            .flush()
            .context("writing the reports pcap")?;
    }
    let st = node.stats;
    let summary = serde_json::json!({
        "capture_dropped": capture_dropped, "capture_if_dropped": capture_if_dropped, "tx_errors": tx_errors,
        "oversize": oversize, "bad_checksums": bad_checksums, "checksums_finished": checksums_finished,
        "frames": st.frames, "forwarded": forwarded, "discarded": discarded, "written": written, "not_ethernet": not_ethernet, "reports": produced, "datagrams": sent, "send_errors": send_errors,
        "inserted": st.inserted, "inserted_m": st.inserted_m, "too_big": st.too_big, "added": st.added,
        "hop_limit": st.hop_limit, "mtu": st.mtu, "sunk": st.sunk, "untouched": st.untouched, "fragments": st.fragments, "malformed": st.malformed, "report_only": st.report_only,
        "filtered": st.filtered, "clones": st.clones, "skipped": st.skipped, "probes": st.probes, "intermediate": st.intermediate,
        "postcards": st.postcards, "mx_reports": st.mx_reports, "queue_reports": st.queue_reports, "unwatched_drops": st.unwatched_drops, "marked_without_int": st.marked_without_int, "destinations": st.destinations,
    })
    .to_string();
    match failed {
        None => Ok(summary),
        Some(e) => {
            // What was processed is accounted for before the error ends the run.
            println!("{summary}");
            Err(e)
        }
    }
}

struct PcapSource {
    capture: Capture,
}

impl FrameSource for PcapSource {
    fn next_frame(&mut self, _stop: &std::sync::atomic::AtomicBool) -> Result<Option<Input>> {
        let Some(frame) = self.capture.next_frame() else {
            return Ok(None);
        };
        let frame = frame?;
        if frame.link_type != LINKTYPE_ETHERNET {
            return Ok(Some(Input::NotEthernet(frame.number, frame.link_type)));
        }
        let ts = Duration::from_nanos(u64::try_from(frame.time_ns).unwrap_or(u64::MAX));
        Ok(Some(Input::Frame(ts, frame.data)))
    }
}

impl FrameSink for PcapWriter<BufWriter<File>> {
    fn send(&mut self, ts: Duration, frame: &[u8]) -> Result<()> {
        self.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame))?;
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.into_writer()
            .flush()
            .context("writing the output pcap")
    }
}
