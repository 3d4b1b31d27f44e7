//! `intscope agent`: the host INT agent ([`intscope_agent`]) in this network namespace, until
//! Ctrl-C, SIGTERM or SIGHUP (or `--duration`); its counters as a JSON summary at the end.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use intscope_agent::{Agent, AgentConfig};
use intscope_node::NodeConfig;
use intscope_node::config::ReportFormat;

/// Arguments of `intscope agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Node settings (docs/node-config.md): node_id, watchlist, watch_subnets, report_format,
    /// instructions, `[filters]` (queue thresholds), drop_reports. The mode is INT-XD, but with
    /// `--int-port` (md or mx).
    #[arg(long, value_name = "NODE.toml")]
    pub config: Option<PathBuf>,
    /// An ONOS netcfg (JSON) with SD-Fabric's INT app block, applied over `--config`: watch
    /// subnets, collector, minFlowHopLatencyChangeNs, queue thresholds, Report v0.5.
    #[arg(long, value_name = "NETCFG.json")]
    pub netcfg: Option<PathBuf>,
    /// Interfaces to watch (repeatable; `*` and `?` match, e.g. `veth*`, `cali*`). Default:
    /// every interface of the namespace but lo, re-read every second.
    #[arg(long = "interface", value_name = "NAME")]
    pub interfaces: Vec<String>,
    /// Where reports go (default: the netcfg's collector).
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::usage::host_port)]
    pub collector: Option<SocketAddr>,
    /// Node ID in the reports (overrides the config's).
    #[arg(long, conflicts_with = "netns")]
    pub node_id: Option<u32>,
    /// Watch the named network namespace (`ip netns add NAME`) as node NODE_ID instead of the
    /// agent's own; repeatable. One agent for all the namespaces of a machine (a lab) costs
    /// one BPF program run per packet instead of one per namespace.
    #[arg(long, value_name = "NAME=NODE_ID", value_parser = parse_netns)]
    pub netns: Vec<intscope_agent::agent::Namespace>,
    /// Report format (overrides the config's).
    #[arg(long, value_name = "v0.5|v2.0")]
    pub report_format: Option<String>,
    /// Watch packets from or to this prefix (repeatable; added to the config's).
    #[arg(long = "watch-subnet", value_name = "PREFIX")]
    pub watch_subnets: Vec<ipnet::IpNet>,
    /// A flow report at once when a hop latency moves by this much (a power of two;
    /// SD-Fabric's minFlowHopLatencyChangeNs). Default: the config's or netcfg's if it sets
    /// one, else 65536: a host's own jitter under load is tens of microseconds, and
    /// SD-Fabric's 256 ns would report nearly every packet.
    #[arg(long, value_name = "NS")]
    pub min_latency_change_ns: Option<u32>,
    /// A report for every watched packet (with `--int-port`: for every INT packet a hop
    /// reports): SD-Fabric's smart filters off.
    #[arg(long)]
    pub every_packet: bool,
    /// Serve the counters for Prometheus at this address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Run the INT-MD / INT-MX data path instead of INT-XD postcards: interface NAME's egress
    /// takes ROLE (`source`, `transit` or `sink`); repeatable. The mode is the config's
    /// (`mode = "md"`, the default, or `"mx"`) or `--mode`; ingress timestamps are taken on every
    /// `--interface` (all but lo by default) and on the role interfaces. docs/agent.md.
    #[arg(long = "int-port", value_name = "NAME=ROLE", value_parser = parse_int_port)]
    pub int_ports: Vec<(String, intscope_agent::datapath::PortRole)>,
    /// INT mode of the data path (`md` or `mx`; overrides the config's), with `--int-port`.
    #[arg(long, value_name = "md|mx", requires = "int_ports")]
    pub mode: Option<String>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
}

fn parse_int_port(text: &str) -> Result<(String, intscope_agent::datapath::PortRole), String> {
    let (name, role) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: expected NAME=ROLE (source, transit or sink)"))?;
    if name.is_empty() || name.contains('/') {
        return Err(format!("{name:?}: not an interface name"));
    }
    Ok((name.to_string(), role.parse()?))
}

fn parse_netns(text: &str) -> Result<intscope_agent::agent::Namespace, String> {
    let (name, id) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: expected NAME=NODE_ID"))?;
    if name.is_empty() || name.contains('/') {
        return Err(format!("{name:?}: not a namespace name"));
    }
    let node_id = id
        .parse()
        .map_err(|_| format!("{id}: not a node ID (0 to 4294967295)"))?;
    Ok(intscope_agent::agent::Namespace {
        name: Some(name.to_string()),
        node_id,
    })
}

/// Runs the agent; returns its summary (JSON).
pub fn run(args: &AgentArgs) -> Result<String> {
    let mut latency_change_set = false;
    let mut node: NodeConfig = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let value: toml::Value =
                toml::from_str(&text).with_context(|| path.display().to_string())?;
            latency_change_set = value
                .get("filters")
                .and_then(|f| f.get("min_flow_hop_latency_change_ns"))
                .is_some();
            toml::from_str(&text).with_context(|| path.display().to_string())?
        }
        None => NodeConfig::default(),
    };
    let mut collector = None;
    if let Some(path) = &args.netcfg {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let imported = intscope_node::netcfg::import(&text, node)
            .with_context(|| path.display().to_string())?;
        latency_change_set |= text.contains("minFlowHopLatencyChangeNs");
        node = imported.config;
        collector = Some(imported.collector);
    }
    match args.min_latency_change_ns {
        Some(ns) => node.filters.min_flow_hop_latency_change_ns = ns,
        None if !latency_change_set => {
            node.filters.min_flow_hop_latency_change_ns =
                intscope_agent::agent::HOST_MIN_LATENCY_CHANGE_NS;
        }
        None => {}
    }
    if let Some(c) = args.collector {
        collector = Some(c);
    }
    let Some(collector) = collector else {
        crate::usage::bail_usage!("--collector (or a --netcfg naming one) is required");
    };
    if let Some(id) = args.node_id {
        node.node_id = id;
    }
    node.report_format = match args.report_format.as_deref() {
        None => node.report_format,
        Some("v0.5" | "0.5") => ReportFormat::V05,
        Some("v2.0" | "2.0" | "v2") => ReportFormat::V2,
        Some(other) => {
            crate::usage::bail_usage!("--report-format {other}: expected v0.5 or v2.0")
        }
    };
    node.watch_subnets
        .extend(args.watch_subnets.iter().copied());
    match args.mode.as_deref() {
        None => {}
        Some("md") => node.mode = intscope_node::Mode::Md,
        Some("mx") => node.mode = intscope_node::Mode::Mx,
        Some(other) => crate::usage::bail_usage!("--mode {other}: expected md or mx"),
    }
    if args.duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
        crate::usage::bail_usage!("--duration must be a positive number of seconds");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).context("signal handler")?;
    }
    let mut agent = Agent::start(AgentConfig {
        node,
        interfaces: args.interfaces.clone(),
        collector,
        filters: !args.every_packet,
        namespaces: args.netns.clone(),
        int_ports: args.int_ports.clone(),
    })?;
    if let Some(addr) = args.metrics {
        let local = agent.serve_metrics(addr)?;
        eprintln!("intscope agent: metrics on http://{local}/metrics");
    }
    eprintln!(
        "intscope agent: attached, watching {} interfaces, reporting to {collector}",
        agent.stats().interfaces
    );
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    agent.run(&stop, deadline)?;
    let kernel: serde_json::Map<String, serde_json::Value> = agent
        .counters()
        .into_iter()
        .map(|(name, _, v)| (name.to_string(), v.into()))
        .collect();
    Ok(serde_json::json!({ "agent": kernel, "stats": agent.stats() }).to_string())
}
