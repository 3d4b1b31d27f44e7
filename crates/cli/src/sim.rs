//! `intscope sim` (a simulated fabric sending reports to a collector or a pcap) and
//! `intscope demo` (a collector and the simulated fabric together).

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use intscope_node::Mode;
use intscope_sim::{Fabric, Scenario, mix};

use crate::usage::bail_usage;

/// INT mode flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// INT-MD.
    Md,
    /// INT-MX.
    Mx,
    /// INT-XD (postcards).
    Xd,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Md => Mode::Md,
            ModeArg::Mx => Mode::Mx,
            ModeArg::Xd => Mode::Xd,
        }
    }
}

/// Pacing of virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimSpeed {
    /// Virtual time follows the wall clock.
    Realtime,
    /// As fast as possible.
    Max,
}

/// Arguments shared by `sim` and `demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct FabricArgs {
    /// Seconds of (virtual) time to run.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Simulation file (TOML: `[topology]`, flows, seed, `[[fault]]`); default: built-in leaf-spine
    /// with every fault kind within a minute.
    #[arg(long, value_name = "FILE.toml")]
    pub topology: Option<PathBuf>,
    /// INT mode of every switch.
    #[arg(long, value_enum, default_value_t = ModeArg::Md)]
    pub mode: ModeArg,
}

/// Arguments of `intscope sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Fabric, duration, mode.
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// Send reports over UDP to this collector.
    #[arg(
        long,
        value_name = "HOST:PORT",
        required_unless_present = "reports",
        value_parser = crate::usage::host_port
    )]
    pub collector: Option<SocketAddr>,
    /// Write reports to this pcap instead.
    #[arg(long, value_name = "FILE.pcap", conflicts_with = "collector")]
    pub reports: Option<PathBuf>,
    /// Pacing.
    #[arg(long, value_enum, default_value_t = SimSpeed::Realtime)]
    pub speed: SimSpeed,
}

fn scenario(path: Option<&PathBuf>) -> Result<Scenario> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            toml::from_str(&text).with_context(|| p.display().to_string())
        }
        None => Ok(Scenario::default()),
    }
}

/// The fabric of `args`, and how far its switches' clocks read from the collector's (ns).
fn fabric(args: &FabricArgs) -> Result<(Fabric, i64)> {
    if !args.duration.is_finite() || args.duration <= 0.0 {
        bail_usage!("--duration must be positive");
    }
    let sc = scenario(args.topology.as_ref())?;
    let mut f = Fabric::new(sc.sim_config(args.mode.into()))?;
    let end = (args.duration * 1e9) as u64;
    for flow in mix(f.topology(), sc.flows, sc.seed, end, &sc.mix) {
        f.add_flow(flow);
    }
    for s in sc.schedule(args.duration) {
        f.schedule(s);
    }
    let offset = sc.switch_clock_offset_ns().map_err(anyhow::Error::msg)?;
    Ok((f, offset))
}

/// How far the fabric may fall behind the wall clock before that is said: a step is 20 ms, and a
/// second is well past scheduling noise.
const LAG_SAID_NS: u64 = 1_000_000_000;

/// Runs the fabric, handing every report to `sink` and then the step's end (virtual ns) to
/// `stepped`, until the duration or `stop`. At realtime speed a fabric slower than the wall clock
/// (a busy machine) is said once, with how far behind it is: its telemetry stays the same, it only
/// comes later.
fn drive(
    mut f: Fabric,
    args: &FabricArgs,
    speed: SimSpeed,
    stop: &AtomicBool,
    mut sink: impl FnMut(&intscope_sim::Report) -> Result<()>,
    mut stepped: impl FnMut(u64),
    running: impl FnOnce(),
) -> Result<String> {
    let end = (args.duration * 1e9) as u64;
    let bar = ProgressBar::new(end / 1_000_000);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} ms of fabric time  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut running = Some(running);
    let step = 20_000_000u64;
    let mut t = 0;
    let (mut max_lag, mut lag_said) = (0u64, false);
    while t < end && !stop.load(Ordering::Relaxed) {
        t = (t + step).min(end);
        f.run(t);
        for r in f.take_reports() {
            sink(&r)?;
        }
        stepped(t);
        if let Some(said) = running.take() {
            said();
        }
        if speed == SimSpeed::Realtime {
            let wall = started.elapsed();
            match Duration::from_nanos(t).checked_sub(wall) {
                Some(wait) => std::thread::sleep(wait),
                None => {
                    let lag = (wall.as_nanos() as u64).saturating_sub(t);
                    max_lag = max_lag.max(lag);
                    if lag >= LAG_SAID_NS && !lag_said {
                        lag_said = true;
                        bar.suspend(|| {
                            eprintln!(
                                "intscope: warning: the fabric runs behind real time ({:.1} s \
                                 behind at {:.1} s of fabric time; this machine is busy): its \
                                 telemetry is the same, it only comes later",
                                lag as f64 / 1e9,
                                t as f64 / 1e9
                            )
                        });
                    }
                }
            }
        }
        bar.set_position(t / 1_000_000);
        bar.set_message(format!(
            "{} packets, {} reports",
            f.stats.sent, f.stats.reports
        ));
    }
    bar.finish_and_clear();
    let s = &f.stats;
    Ok(serde_json::json!({
        "virtual_seconds": t as f64 / 1e9, "packets_sent": s.sent, "delivered": s.delivered, "reports": s.reports,
        "dropped": s.dropped.iter().map(|(k, v)| (intscope_wire::report::drop_reason_name(*k).unwrap_or("other").to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>(),
        "wall_seconds": started.elapsed().as_secs_f64(),
        "max_behind_real_time_seconds": max_lag as f64 / 1e9,
    })
    .to_string())
}

/// Runs `intscope sim`.
pub fn run(args: &SimArgs) -> Result<String> {
    let (mut f, offset) = fabric(&args.fabric)?;
    if args.collector.is_some() {
        // A live collector receives by Unix time: the switches' clocks read it too (or as far
        // from it as the scenario sets them).
        f.set_clock_origin(intscope_collector::clock::now_ns().saturating_add_signed(offset));
    }
    // Ctrl-C or SIGTERM ends the run at the next step: the reports pcap is written whole and the
    // summary says how far the fabric ran (the signal's default death would cut the file short).
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal handler")?;
    let shutdown = {
        let _runtime = rt.enter();
        crate::collect::shutdown_signal()
    };
    {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                rt.block_on(shutdown);
                stop.store(true, Ordering::Relaxed);
            })
            .context("starting the signal handler")?;
    }
    // Said after the first step, with the signal handler in place: a stop from then on ends a
    // run that has written reports.
    let duration = args.fabric.duration;
    let running = move || {
        eprintln!("intscope sim: running {duration} s of fabric time; Ctrl-C stops");
    };
    if let Some(c) = args.collector {
        let sock = UdpSocket::bind(if c.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
            .context("opening the report socket")?;
        sock.connect(c)
            .with_context(|| format!("cannot reach {c}"))?;
        let mut send_errors = 0u64;
        let summary = drive(
            f,
            &args.fabric,
            args.speed,
            &stop,
            |r| {
                // An unreachable collector (ICMP) is not fatal: the switches keep reporting, and
                // the reports the socket refused are counted.
                if let Err(e) = sock.send(&r.payload) {
                    if send_errors == 0 {
                        eprintln!(
                            "intscope sim: warning: sending a report: {e}; reports not sent are \
                         counted in send_errors"
                        );
                    }
                    send_errors += 1;
                }
                Ok(())
            },
            |_| {},
            running,
        )?;
        let mut v: serde_json::Value = serde_json::from_str(&summary)?;
        v["send_errors"] = send_errors.into();
        Ok(v.to_string())
    } else {
        let path = args.reports.as_ref().context("--reports or --collector")?;
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = pcap_file::pcap::PcapWriter::with_header(
            std::io::BufWriter::new(file),
            pcap_file::pcap::PcapHeader {
                datalink: pcap_file::DataLink::ETHERNET,
                ..pcap_file::pcap::PcapHeader::default()
            },
        )?;
        let dst: std::net::SocketAddrV4 = "192.0.2.100:32766".parse()?;
        let summary = drive(
            f,
            &args.fabric,
            args.speed,
            &stop,
            |r| {
                let frame = intscope_node::export::report_frame(
                    std::net::SocketAddrV4::new(r.source, 50000),
                    dst,
                    &r.payload,
                );
                w.write_packet(&pcap_file::pcap::PcapPacket::new(
                    Duration::from_nanos(r.time_ns),
                    frame.len() as u32,
                    &frame,
                ))?;
                Ok(())
            },
            |_| {},
            running,
        )?;
        // Flushed here, not on drop, which would swallow a failed write (a full disk).
        std::io::Write::flush(&mut w.into_writer())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(summary)
    }
}

/// Arguments of `intscope demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Fabric, duration, mode.
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// HTTP address of the collector's API.
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8080",
        value_parser = crate::usage::host_port
    )]
    pub http: SocketAddr,
    /// History store directory (default: a temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Keep serving the API after the simulation ends, until Ctrl-C.
    #[arg(long)]
    pub serve: bool,
    /// HTTP API access, TLS and limits, as for `intscope collect`: off loopback the demo's API
    /// needs a token or an explicit --insecure-no-auth too.
    #[command(flatten)]
    pub api: crate::collect::ApiArgs,
}

/// Runs `intscope demo`: a collector serving its API and the fabric reporting into it, in fabric
/// time.
pub fn demo(args: &DemoArgs) -> Result<()> {
    use intscope_collector::hub::{Collector, CollectorConfig};
    use intscope_core::RecordBatch;
    // Every input is checked before anything is said, created or bound: a mistyped duration or
    // topology leaves no banner, temporary folder or open port behind.
    let (mut f, offset) = fabric(&args.fabric)?;
    let api_cfg = crate::collect::api_config(&args.api, args.http)?;
    let data = args.data.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("intscope-demo-{}", std::process::id()))
    });
    // A history of its own goes with the run (declared before the collector, so removed after
    // it closed its store, on every way out); one the user named stays.
    let _temporary = args.data.is_none().then(|| RemovedOnDrop(data.clone()));
    let cfg = CollectorConfig {
        listen: vec!["127.0.0.1:0".parse()?],
        http: args.http,
        int_udp_ports: vec![17768],
        data: Some(data.clone()),
        names: Arc::new(intscope_collector::names::NodeNames::from_pairs(
            f.topology().node_names(),
        )?),
        ..CollectorConfig::default()
    };
    let collector = Collector::open(cfg).context("opening the history store")?;
    let store = collector.start_store();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(args.http))
        .with_context(|| format!("cannot bind {}", args.http))?;
    let http = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(intscope_collector::api::serve_with(
        listener,
        intscope_collector::api::Api::new(Arc::clone(&collector), api_cfg),
        async {
            let _ = rx.await;
        },
    ));
    {
        // Ctrl-C or SIGTERM ends the run gracefully (the history committed); installed now,
        // before the run is announced.
        let shutdown = {
            let _runtime = rt.enter();
            crate::collect::shutdown_signal()
        };
        let stop = Arc::clone(&stop);
        rt.spawn(async move {
            shutdown.await;
            stop.store(true, Ordering::Relaxed);
        });
    }
    eprintln!(
        "intscope demo: collector API on http://{http}/ (try /api/flows, /api/events, /metrics); history in {}",
        data.display()
    );
    eprintln!(
        "intscope demo: a {}-leaf, {}-spine fabric runs for {} s with scripted faults; Ctrl-C stops",
        4, 2, args.fabric.duration
    );
    // The fabric's reports go straight into the collector, stamped with the fabric's own time
    // (from the run's start): what is detected depends on the simulated traffic only. Sent over
    // UDP they were stamped on arrival, and a busy machine, on which the fabric falls behind the
    // wall clock and its reports arrive late and bunched, saw other latencies and bursts (401
    // hop-latency anomalies against ~140 on a quiet one).
    let epoch = intscope_collector::clock::now_ns();
    // The switches' clocks read the same timeline, or as far from it as the scenario sets them
    // (a collector bounds how far a switch's time may be from its receive time).
    f.set_clock_origin(epoch.saturating_add_signed(offset));
    let mut batch = RecordBatch::default();
    let summary = drive(
        f,
        &args.fabric,
        SimSpeed::Realtime,
        &stop,
        |r| {
            collector.ingest(
                &r.payload,
                std::net::IpAddr::V4(r.source),
                epoch + r.time_ns,
                &mut batch,
            );
            Ok(())
        },
        |t| collector.tick(epoch + t),
        || {},
    )?;
    // The fabric is over: close joins and episodes still waiting for reports, as a replay does.
    let d = &collector.config.detect;
    let end = collector.state.last_time_ns();
    collector.tick(end.saturating_add(d.join_window_ns.max(d.episode_quiet_ns) + 1));
    collector.state.finish_incidents();
    eprintln!("intscope demo: fabric {summary}");
    let events = collector
        .state
        .events()
        .counts()
        .iter()
        .map(|(k, v)| format!("{} {v}", k.label()))
        .collect::<Vec<_>>()
        .join(", ");
    eprintln!("intscope demo: events detected: {events}");
    if args.serve {
        eprintln!("intscope demo: still serving http://{http}/ until Ctrl-C");
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let _ = tx.send(());
    let _ = rt.block_on(server);
    collector.stop();
    if let Some(s) = store {
        s.finish();
    }
    Ok(())
}

/// A directory removed when the value is dropped (the demo's temporary history).
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("intscope demo: could not remove {}: {e}", self.0.display());
        }
    }
}
