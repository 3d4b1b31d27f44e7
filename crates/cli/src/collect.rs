//! `intscope collect`: receive (or replay) telemetry reports and serve the collector's API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use intscope_collector::api;
use intscope_collector::ingest::{Collector, CollectorConfig, IpNet, spawn_receivers};
use intscope_collector::record::RecordBatch;
use intscope_wire::locate::{DetectConfig, Packet, Start};

use crate::capture::{Capture, LINKTYPE_ETHERNET};

/// Replay pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Speed {
    /// As fast as possible.
    Max,
    /// At the capture's timestamps.
    Realtime,
}

/// Arguments of `intscope collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// Collector configuration (TOML, docs/collector-config.md).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// UDP address to receive reports on; repeatable. Default 0.0.0.0:32766.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Vec<SocketAddr>,
    /// HTTP API address. Default 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// INT UDP port of the reported packets (INT_TBD); repeatable.
    #[arg(long = "int-udp-port", value_name = "P")]
    pub int_udp_ports: Vec<u16>,
    /// Replay a capture of report traffic instead of listening, then serve the result.
    #[arg(long, value_name = "FILE.pcap")]
    pub replay: Option<PathBuf>,
    /// Replay pacing.
    #[arg(long, value_enum, default_value_t = Speed::Max)]
    pub replay_speed: Speed,
    /// Directory of the embedded history store (SQLite). Default ./intscope-data.
    #[arg(long, value_name = "DIR", conflicts_with = "no_store")]
    pub data: Option<PathBuf>,
    /// Keep no history (live state only).
    #[arg(long)]
    pub no_store: bool,
    /// UDP destination ports of reports inside the replayed capture; repeatable. Default: the
    /// listen ports.
    #[arg(long = "report-port", value_name = "P")]
    pub report_ports: Vec<u16>,
    /// Measurement mode: receive and count datagrams without decoding them (the receive limit
    /// of this machine and socket setup, to compare the full pipeline with).
    #[arg(long, conflicts_with = "replay")]
    pub discard: bool,
    /// Receive threads per listen address (`threads` in the config file).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    // Who may send reports, and sharing the port (docs/collector-config.md, "Exposure").
    /// Accept reports only from this source network; repeatable (replaces `allow` in the
    /// config file). Without any, a listen address off loopback takes reports from anyone.
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<IpNet>,
    /// Share the report port with other processes already bound to it (`SO_REUSEPORT`; each
    /// process then gets part of the reports). Without it a port in use is an error.
    #[arg(long)]
    pub reuse_port: bool,
}

fn load_config(args: &CollectArgs) -> Result<CollectorConfig> {
    let mut cfg = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("{}", p.display()))?
        }
        None => CollectorConfig::default(),
    };
    if !args.listen.is_empty() {
        cfg.listen = args.listen.clone();
    }
    if let Some(h) = args.http {
        cfg.http = h;
    }
    if !args.int_udp_ports.is_empty() {
        cfg.int_udp_ports = args.int_udp_ports.clone();
    }
    if let Some(d) = &args.data {
        cfg.data = Some(d.clone());
    }
    if args.no_store || args.discard {
        cfg.data = None;
    }
    cfg.discard = args.discard;
    if let Some(n) = args.threads {
        cfg.threads = n;
    }
    if !args.allow.is_empty() {
        cfg.allow = args.allow.clone();
    }
    cfg.reuse_port |= args.reuse_port;
    Ok(cfg)
}

/// Runs the collector until Ctrl-C / SIGTERM.
pub fn run(args: &CollectArgs) -> Result<()> {
    let cfg = load_config(args)?;
    let http = cfg.http;
    let collector = Collector::open(cfg).context("opening the history store")?;
    let store = collector.start_store();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(http).await.with_context(|| format!("cannot bind the HTTP API to {http}"))?;
        let http_addr = listener.local_addr()?;
        let (udp, handles) = if let Some(file) = &args.replay {
            let c = Arc::clone(&collector);
            let file = file.clone();
            let speed = args.replay_speed;
            let ports = if args.report_ports.is_empty() { c.config.listen.iter().map(SocketAddr::port).collect() } else { args.report_ports.clone() };
            let summary = tokio::task::spawn_blocking(move || replay(&c, &file, speed, &ports)).await??;
            eprintln!("{summary}");
            (Vec::new(), Vec::new())
        } else {
            for warning in collector.config.exposure_warnings() {
                tracing::warn!("{warning}");
                eprintln!("intscope collect: warning: {warning}");
            }
            spawn_receivers(&collector).context("cannot open the report sockets")?
        };
        // One line a script can read to find the (possibly ephemeral) ports.
        println!("{}", serde_json::json!({"http": http_addr.to_string(), "listen": udp.iter().map(ToString::to_string).collect::<Vec<_>>()}));
        eprintln!("intscope collect: API and UI on http://{http_addr}/ , reports on {udp:?}");
        api::serve(listener, Arc::clone(&collector), shutdown_signal()).await.context("HTTP server")?;
        collector.stop();
        for h in handles {
            let _ = h.join();
        }
        if let Some(s) = store {
            // The final flush: everything received before the signal is committed.
            s.finish();
        }
        let stats = collector.stats.snapshot();
        eprintln!("intscope collect: stopped; {stats}");
        Ok::<(), anyhow::Error>(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}

/// Feeds every report datagram of a capture to the collector, at capture time. A damaged
/// capture is served as far as it could be read: the damage is a warning (file, frame, byte
/// offset) and is counted in the summary, not an abort that would lose the frames before it.
fn replay(c: &Collector, file: &std::path::Path, speed: Speed, ports: &[u16]) -> Result<String> {
    let mut capture = Capture::open(file)?;
    let cfg = DetectConfig {
        report_ports: ports.to_vec(),
        dscp: None,
        ..DetectConfig::default()
    };
    let mut batch = RecordBatch::default();
    let (mut frames, mut datagrams, mut skipped, mut not_ethernet) = (0u64, 0u64, 0u64, 0u64);
    let mut damage = None;
    let started = Instant::now();
    let mut first_ts: Option<u128> = None;
    while let Some(frame) = capture.next_frame() {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                eprintln!("intscope collect: warning: {e}");
                damage = Some(e);
                break;
            }
        };
        frames += 1;
        if frame.link_type != LINKTYPE_ETHERNET {
            not_ethernet += 1;
            continue;
        }
        let Ok(p) = Packet::parse(&frame.data, Start::Ethernet, &cfg) else {
            skipped += 1;
            continue;
        };
        let (Some(ip), Some(l4)) = (p.ip, p.l4) else {
            skipped += 1;
            continue;
        };
        if l4.proto != 17 || !ports.contains(&l4.dst_port) {
            skipped += 1;
            continue;
        }
        if speed == Speed::Realtime {
            let t0 = *first_ts.get_or_insert(frame.time_ns);
            let due = Duration::from_nanos(
                u64::try_from(frame.time_ns.saturating_sub(t0)).unwrap_or(u64::MAX),
            );
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let payload = &frame.data[(l4.offset + 8).min(frame.data.len())..];
        c.ingest(
            payload,
            ip.src.to_canonical(),
            u64::try_from(frame.time_ns).unwrap_or(u64::MAX),
            &mut batch,
        );
        datagrams += 1;
    }
    // The capture is over: close joins and episodes still waiting for reports.
    let end = c.state.last_time_ns();
    let d = &c.config.detect;
    c.tick(end.saturating_add(d.join_window_ns.max(d.episode_quiet_ns) + 1));
    let mut summary = format!(
        "replayed {}: {frames} frames, {datagrams} report datagrams, {skipped} other frames, {:.2} s",
        file.display(),
        started.elapsed().as_secs_f64()
    );
    if not_ethernet > 0 {
        summary += &format!("; {not_ethernet} frames of a link type other than Ethernet skipped");
    }
    if let Some(d) = damage {
        summary += &format!(
            "; 1 damaged record (frame {} at byte offset {}), {} bytes not read",
            d.frame, d.offset, d.unread
        );
    }
    Ok(summary)
}
