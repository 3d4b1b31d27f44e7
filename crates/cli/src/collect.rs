//! `intscope collect`: receive (or replay) telemetry reports and serve the collector's API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intscope_collector::api;
use intscope_collector::api_config::ApiConfig;
use intscope_collector::http::HttpLimits;
use intscope_collector::hub::{Collector, CollectorConfig, IpNet};
use intscope_collector::ingest::recv::spawn_receivers;
use intscope_collector::ingest::replay::Replay;
use intscope_collector::webhook::Webhook;

use crate::capture::{self, Capture, Link};
use crate::usage::{bail_usage, usage};

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
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::usage::host_port)]
    pub listen: Vec<SocketAddr>,
    /// HTTP API address. Default 127.0.0.1:8080.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::usage::host_port)]
    pub http: Option<SocketAddr>,
    /// INT UDP port of the reported packets (INT_TBD); repeatable.
    #[arg(long = "int-udp-port", value_name = "P")]
    pub int_udp_ports: Vec<u16>,
    /// Domain-specific metadata registry (TOML, shared/spec/domains.example.toml format;
    /// `domains` in the config file): source-only metadata is then not read as hops.
    #[arg(long, value_name = "FILE.toml")]
    pub domains: Option<PathBuf>,
    /// Names for the nodes, shown beside their IDs (`topology` in the config file): an ONOS
    /// network configuration (JSON: devices' `segmentrouting.ipv4NodeSid`), a node list
    /// (`{"nodes": [{"id": 101, "name": "spine1"}]}`), `[[node]]` tables (TOML), or a lab /
    /// simulator file (`[topology]`: its leaves, spines and hosts, named as the lab names them).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Also read INT without a marking in the reported packets (`unmarked_int` in the config
    /// file; off by default): only where the report's F bit allows it and the block is exact.
    #[arg(long)]
    pub unmarked_int: bool,
    /// Replay a capture of report traffic instead of listening, then serve the result (pcap or
    /// pcapng: Ethernet, Linux cooked as `tcpdump -i any` writes it, raw IP). Datagrams larger
    /// than `recv_slot` are counted `oversize`, as a live run counts them.
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
    /// Where history goes: `sqlite:DIR` (the default, ./intscope-data) or
    /// `clickhouse:http://HOST:PORT[,http://HOST:PORT...]` (one server, or every shard of a
    /// cluster in its `remote_servers` order, a shard's replicas joined by `|`;
    /// docs/scale-out.md).
    #[arg(long, value_name = "BACKEND:WHERE", conflicts_with_all = ["no_store", "data"])]
    pub store: Option<String>,
    /// The ClickHouse cluster name (`remote_servers`) when --store names several servers.
    /// Default `intscope`.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// This collector's name in the shared store (each collector of a fabric its own).
    /// Default: the host name.
    #[arg(long, value_name = "NAME")]
    pub collector_name: Option<String>,
    /// Where writes a ClickHouse shard refused wait to be retried (on disk, bounded; see
    /// docs/scale-out.md). Default: `intscope-spool` under the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
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
    /// Datagrams one receive call takes at most, 1 to 1024 (`recv_batch` in the config file).
    #[arg(long, value_name = "N")]
    pub recv_batch: Option<usize>,
    /// Bytes of a receive slot, 64 to 65535: larger datagrams are discarded as `oversize`
    /// (`recv_slot` in the config file).
    #[arg(long, value_name = "BYTES")]
    pub recv_slot: Option<usize>,
    // Who may send reports, and sharing the port (docs/collector-config.md, "Exposure").
    /// Accept reports only from this source network; repeatable (replaces `allow` in the
    /// config file). Without any, a listen address off loopback takes reports from anyone.
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<IpNet>,
    /// Share the report port with other processes already bound to it (`SO_REUSEPORT`; each
    /// process then gets part of the reports). Without it a port in use is an error.
    #[arg(long)]
    pub reuse_port: bool,
    /// HTTP API access, TLS and limits (docs/collector-config.md, "Security and limits").
    #[command(flatten)]
    pub api: ApiArgs,
}

/// The HTTP API's access control, TLS and limits.
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// File holding the bearer token the API then requires on /api/ and /metrics
    /// (`Authorization: Bearer <token>`). Needed to serve --http off loopback.
    #[arg(long, value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
    /// Serve the API off loopback without a token: anyone who reaches the port reads everything.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// TLS certificate chain (PEM): serve HTTPS (with --tls-key).
    #[arg(long, value_name = "FILE.pem", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE.pem", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// HTTP connections served at once; more are closed on accept and counted.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub http_max_connections: usize,
    /// Requests for the large live lists (flows, nodes, links, queues, events, incidents,
    /// /metrics) handled at once; more wait their turn.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub max_list_requests: usize,
    /// HTTP connections one client (IPv4 address, IPv6 /64) may hold at once.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub http_max_connections_per_client: usize,
    /// Seconds a new connection has to send its first byte.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub http_first_byte_timeout: f64,
    /// Seconds a client has to send a request head (also how long a kept-alive connection
    /// waits for its next request).
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub http_header_timeout: f64,
    /// Seconds a client has to take an answer once it is made (slower readers are closed).
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub http_send_timeout: f64,
    /// MiB of large answers (over 64 KiB) held in memory at once, all clients together; beyond
    /// it such answers are 503s.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub http_max_answer_mib: usize,
    /// MiB of large answers one client's connections may hold at once.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub http_max_answer_mib_per_client: usize,
    /// Seconds without a byte moving either way after which a connection is closed.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub http_idle_timeout: f64,
    /// Seconds a request may take to produce its response (503 after).
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    pub http_request_timeout: f64,
    /// Seconds a history query may run before it is stopped (504).
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub query_timeout: f64,
    /// History queries running or waiting at once (503 beyond).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_queries: usize,
    /// History series over ranges longer than this many seconds are read per minute from the
    /// rollups (answers say `"resolution": "1m"`), shorter ones per store interval.
    #[arg(long, value_name = "S", default_value_t = 3600.0)]
    pub history_rollup_after: f64,
    /// Live event streams open at once (503 beyond).
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_event_streams: usize,
    /// Most series /metrics renders (the rest are counted in
    /// intscope_metrics_series_truncated).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub metrics_max_series: usize,
}

fn seconds(flag: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| usage(format!("--{flag} {s}: a positive number of seconds")))
}

/// The API's settings from the flags, and the access policy: off loopback, a token or an
/// explicit --insecure-no-auth, said on start.
pub(crate) fn api_config(a: &ApiArgs, http: SocketAddr) -> Result<ApiConfig> {
    let token = match &a.api_token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the API token file {}", p.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                bail!("the API token file {} is empty", p.display());
            }
            Some(t)
        }
        None => None,
    };
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(
            intscope_collector::http::tls_config(c, k).map_err(|e| anyhow::anyhow!("TLS: {e}"))?,
        ),
        _ => None,
    };
    if !http.ip().is_loopback() {
        match (&token, a.insecure_no_auth) {
            (None, false) => bail_usage!(
                "the HTTP API would listen on {http}, off loopback, with no authentication: \
                 give --api-token-file FILE (clients then send `Authorization: Bearer <token>`), \
                 or --insecure-no-auth to serve it open"
            ),
            (None, true) => tracing::warn!(
                "HTTP API on {http} is off loopback with NO authentication (--insecure-no-auth): \
                 anyone who can reach it reads all telemetry"
            ),
            (Some(_), _) if tls.is_none() => tracing::warn!(
                "HTTP API on {http} is off loopback: bearer token required, but sent in clear \
                 text (no --tls-cert/--tls-key)"
            ),
            (Some(_), _) => {
                tracing::warn!("HTTP API on {http} is off loopback: HTTPS, bearer token required")
            }
        }
    }
    Ok(ApiConfig {
        token,
        tls,
        http: HttpLimits {
            max_connections: a.http_max_connections.max(1),
            max_connections_per_client: a.http_max_connections_per_client.max(1),
            first_byte_timeout: seconds("http-first-byte-timeout", a.http_first_byte_timeout)?,
            header_timeout: seconds("http-header-timeout", a.http_header_timeout)?,
            idle_timeout: seconds("http-idle-timeout", a.http_idle_timeout)?,
            send_timeout: seconds("http-send-timeout", a.http_send_timeout)?,
            max_answer_bytes: a.http_max_answer_mib.saturating_mul(1 << 20),
            max_answer_bytes_per_client: a.http_max_answer_mib_per_client.saturating_mul(1 << 20),
            ..HttpLimits::default()
        },
        request_timeout: seconds("http-request-timeout", a.http_request_timeout)?,
        query_timeout: seconds("query-timeout", a.query_timeout)?,
        max_queries: a.max_queries.max(1),
        max_streams: a.max_event_streams.max(1),
        max_list_requests: a.max_list_requests.max(1),
        max_series: a.metrics_max_series,
        rollup_after: seconds("history-rollup-after", a.history_rollup_after)?,
    })
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
    cfg.webhook.check().map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}",
            args.config
                .as_deref()
                .unwrap_or("config".as_ref())
                .display()
        )
    })?;
    if !args.listen.is_empty() {
        cfg.listen = args.listen.clone();
    }
    if let Some(h) = args.http {
        cfg.http = h;
    }
    if !args.int_udp_ports.is_empty() {
        cfg.int_udp_ports = args.int_udp_ports.clone();
    }
    cfg.unmarked_int |= args.unmarked_int;
    if let Some(d) = &args.domains {
        cfg.domains = Some(d.clone());
    }
    if let Some(d) = &cfg.domains {
        cfg.registry = crate::detect::load_registry(Some(d))
            .with_context(|| "the domain registry (--domains / `domains`)")?
            .map(Arc::new);
    }
    if let Some(t) = &args.topology {
        cfg.topology = Some(t.clone());
    }
    if let Some(t) = &cfg.topology {
        cfg.names =
            Arc::new(load_names(t).with_context(|| "the topology (--topology / `topology`)")?);
    }
    if let Some(d) = &args.data {
        cfg.data = Some(d.clone());
    }
    if let Some(spec) = &args.store {
        let source = match &args.collector_name {
            Some(n) => n.clone(),
            None => host_name(),
        };
        match parse_store(spec, args.cluster.clone(), &source)? {
            StoreSpec::Sqlite(dir) => {
                cfg.data = Some(dir);
                cfg.store.clickhouse = None;
            }
            StoreSpec::ClickHouse(mut ch) => {
                ch.spool_dir = args.spool.clone();
                cfg.store.clickhouse = Some(ch);
            }
        }
    }
    if args.no_store || args.discard {
        cfg.data = None;
        cfg.store.clickhouse = None;
    }
    cfg.discard = args.discard;
    if let Some(n) = args.threads {
        cfg.threads = n;
    }
    if let Some(n) = args.recv_batch {
        cfg.recv_batch = n;
    }
    if let Some(n) = args.recv_slot {
        cfg.recv_slot = n;
    }
    if !(1..=intscope_collector::ingest::socket::MAX_BATCH).contains(&cfg.recv_batch) {
        bail!(
            "recv_batch {} is not within 1 to {}",
            cfg.recv_batch,
            intscope_collector::ingest::socket::MAX_BATCH
        );
    }
    if !intscope_collector::ingest::socket::SLOT_RANGE.contains(&cfg.recv_slot) {
        bail!(
            "recv_slot {} is not within {} to {} bytes",
            cfg.recv_slot,
            intscope_collector::ingest::socket::SLOT_RANGE.start(),
            intscope_collector::ingest::socket::SLOT_RANGE.end()
        );
    }
    if !args.allow.is_empty() {
        cfg.allow = args.allow.clone();
    }
    cfg.reuse_port |= args.reuse_port;
    Ok(cfg)
}

/// A `--store` value.
#[derive(Debug, PartialEq)]
pub(crate) enum StoreSpec {
    /// SQLite in this directory.
    Sqlite(PathBuf),
    /// ClickHouse.
    ClickHouse(intscope_collector::store::ClickHouseConfig),
}

/// Parses `sqlite:DIR` or `clickhouse:URL[,URL...]`.
pub(crate) fn parse_store(spec: &str, cluster: Option<String>, source: &str) -> Result<StoreSpec> {
    match spec.split_once(':') {
        Some(("sqlite", dir)) if !dir.is_empty() => Ok(StoreSpec::Sqlite(dir.into())),
        Some(("clickhouse", urls)) => Ok(StoreSpec::ClickHouse(
            intscope_collector::store::ClickHouseConfig::parse(urls, cluster, source)
                .map_err(|e| usage(format!("--store {spec}: {e}")))?,
        )),
        _ => bail_usage!(
            "--store {spec}: expected sqlite:DIR or clickhouse:http://HOST:PORT[,http://HOST:PORT...]"
        ),
    }
}

/// The host's name (the default collector name in a shared store).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "collector".into())
}

/// Runs the collector until Ctrl-C / SIGTERM.
pub fn run(args: &CollectArgs) -> Result<()> {
    let cfg = load_config(args)?;
    let webhook_cfg = cfg.webhook.clone();
    let http = cfg.http;
    // Refuses an open API off loopback before anything starts.
    let api_cfg = api_config(&args.api, http)?;
    let scheme = if api_cfg.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let auth = if api_cfg.token.is_some() {
        " (bearer token required)"
    } else {
        ""
    };
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
        // Started before reports arrive (or a replay runs), so that every incident is sent as it
        // starts and ends; kept until the server stops (dropping it stops its tasks).
        let webhook = if webhook_cfg.urls.is_empty() {
            None
        } else {
            let w = Webhook::start(Arc::clone(&collector), &webhook_cfg, &format!("{scheme}://{http_addr}/"))
                .map_err(|e| anyhow::anyhow!("webhook: {e}"))?;
            eprintln!("intscope collect: incidents go to {} webhook receiver(s)", webhook_cfg.urls.len());
            Some(w)
        };
        // Installed first: a Ctrl-C or SIGTERM during a replay, or as soon as a script has read
        // the startup line, is a graceful stop (stop summary, final flush), never the signal's
        // default death.
        let mut shutdown = Box::pin(shutdown_signal());
        let mut stopped = false;
        let (udp, handles) = if let Some(file) = &args.replay {
            let c = Arc::clone(&collector);
            let file = file.clone();
            let speed = args.replay_speed;
            let ports = if args.report_ports.is_empty() { c.config.listen.iter().map(SocketAddr::port).collect() } else { args.report_ports.clone() };
            let interrupt = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&interrupt);
            // Said once the signal handlers are in place: a script (or a test) that stops the
            // replay after this line gets the graceful stop, never the default death.
            eprintln!("intscope collect: replaying {}", file.display());
            let mut task = tokio::task::spawn_blocking(move || replay(&c, &file, speed, &ports, &flag));
            let summary = tokio::select! {
                r = &mut task => r??,
                () = &mut shutdown => {
                    // The replay ends at its next frame (or wait); then the collector stops.
                    interrupt.store(true, Ordering::Relaxed);
                    stopped = true;
                    task.await??
                }
            };
            eprintln!("{summary}");
            (Vec::new(), Vec::new())
        } else {
            for warning in collector.config.exposure_warnings() {
                tracing::warn!("{warning}");
                eprintln!("intscope collect: warning: {warning}");
            }
            spawn_receivers(&collector).context("cannot open the report sockets")?
        };
        if !stopped {
            // One line a script can read to find the (possibly ephemeral) ports.
            println!("{}", serde_json::json!({"http": http_addr.to_string(), "listen": udp.iter().map(ToString::to_string).collect::<Vec<_>>()}));
            eprintln!("intscope collect: API and UI on {scheme}://{http_addr}/{auth}, reports on {udp:?}");
            let api = api::Api::new(Arc::clone(&collector), api_cfg);
            if let Some(w) = &webhook {
                let _ = api.webhook.set(Arc::clone(&w.stats));
            }
            api::serve_with(listener, api, shutdown).await.context("HTTP server")?;
        }
        collector.stop();
        for h in handles {
            let _ = h.join();
        }
        if let Some(s) = store {
            // The final flush: everything received before the signal is committed.
            s.finish();
        }
        if let Some(w) = webhook {
            // After the last report was correlated: its incidents' starts and ends go out too.
            let s = w.stop().await;
            eprintln!(
                "intscope collect: webhook: {} notification(s) delivered, {} dropped at stop (over all \
                 receivers)",
                s.sent, s.dropped_at_stop
            );
        }
        let stats = collector.stats.snapshot();
        eprintln!("intscope collect: stopped; {stats}");
        Ok::<(), anyhow::Error>(())
    })
}

/// Ctrl-C, SIGTERM or SIGQUIT, as a future: a graceful stop (stop summary, final flush). The
/// handlers are installed when this is called, not when the future is first polled: a signal in
/// between would end the process by its default action (no stop summary, no final flush). Call
/// it inside the runtime, before saying the process is ready. SIGHUP, SIGUSR1 and SIGUSR2, whose
/// default action also ends a process, are taken and said on stderr: the configuration is read
/// at start, so there is nothing to reload, and nothing received is lost to them.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let stop = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::quit(),
        ]
        .map(|k| signal(k).ok());
        let ignored = [
            (SignalKind::hangup(), "SIGHUP"),
            (SignalKind::user_defined1(), "SIGUSR1"),
            (SignalKind::user_defined2(), "SIGUSR2"),
        ]
        .map(|(k, name)| (signal(k).ok(), name));
        async fn next(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        async move {
            let [mut int, mut term, mut quit] = stop;
            let [(mut hup, h), (mut usr1, u1), (mut usr2, u2)] = ignored;
            loop {
                let name = tokio::select! {
                    () = next(&mut int) => return,
                    () = next(&mut term) => return,
                    () = next(&mut quit) => return,
                    () = next(&mut hup) => h,
                    () = next(&mut usr1) => u1,
                    () = next(&mut usr2) => u2,
                };
                eprintln!(
                    "intscope: {name} ignored (the configuration is read at start: nothing to \
                     reload); SIGTERM, SIGINT or SIGQUIT stop with a final flush"
                );
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Feeds every report datagram of a capture to the collector (`ingest::replay`), at capture
/// time or as fast as it goes. A damaged capture is served as far as it could be read: the
/// damage is a warning (file, frame, byte offset) and is counted in the summary, not an abort
/// that would lose the frames before it.
///
/// `stop` set (a signal) ends the replay at the next frame or within a tenth of a second of a
/// realtime wait, said in the summary: a capture whose next frame lies far ahead (a long pause,
/// a corrupt timestamp) never holds a stop up.
fn replay(
    c: &Collector,
    file: &std::path::Path,
    speed: Speed,
    ports: &[u16],
    stop: &AtomicBool,
) -> Result<String> {
    let mut capture = Capture::open(file)?;
    let mut replay = Replay::new(c, ports);
    let mut damage = None;
    let started = Instant::now();
    let mut first_ts: Option<u128> = None;
    let mut interrupted = false;
    while let Some(frame) = capture.next_frame() {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                eprintln!("intscope collect: warning: {e}");
                damage = Some(e);
                break;
            }
        };
        replay.read();
        if capture::loopback_outgoing(frame.link_type, &frame.data) {
            replay.loopback_outgoing();
            continue;
        }
        let whole = frame.data.len() >= frame.orig_len as usize;
        // The layers after the link header: Ethernet, or IP after a Linux cooked header
        // (`tcpdump -i any`) or none (raw IP).
        let (layers, start) = match capture::link(frame.link_type, &frame.data) {
            Link::Layers { at, start } => (&frame.data[at..], start),
            Link::Other { .. } => {
                replay.other();
                continue;
            }
            Link::Broken(_) if !whole => {
                replay.undecodable("cut short by the capture");
                continue;
            }
            Link::Broken(_) => {
                replay.undecodable("link header");
                continue;
            }
            Link::Unsupported => {
                if replay.unsupported(capture::link_type_name(frame.link_type)) {
                    eprintln!(
                        "intscope collect: warning: frame {}: {} is not supported (Ethernet, \
                         LINUX_SLL, LINUX_SLL2, RAW, IPV4 and IPV6 are); such frames are skipped \
                         and counted",
                        frame.number,
                        capture::link_type_name(frame.link_type)
                    );
                }
                continue;
            }
        };
        let Some(datagram) = replay.datagram(layers, start, whole) else {
            continue;
        };
        if speed == Speed::Realtime {
            let t0 = *first_ts.get_or_insert(frame.time_ns);
            let due = Duration::from_nanos(
                u64::try_from(frame.time_ns.saturating_sub(t0)).unwrap_or(u64::MAX),
            );
            // A long pause in the capture is said, so that a silent replay is not taken for a
            // hung one; every frame before this one has been replayed.
            if let Some(wait) = due.checked_sub(started.elapsed())
                && wait > Duration::from_secs(1)
            {
                eprintln!(
                    "intscope collect: replay waits {:.1} s for frame {} (real time)",
                    wait.as_secs_f64(),
                    frame.number
                );
            }
            while let Some(wait) = due.checked_sub(started.elapsed()) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(wait.min(Duration::from_millis(100)));
            }
            if stop.load(Ordering::Relaxed) {
                // This frame was read, not replayed: it is one of "the rest".
                replay.unread();
                interrupted = true;
                break;
            }
        }
        replay.deliver(datagram, u64::try_from(frame.time_ns).unwrap_or(u64::MAX));
    }
    let n = replay.finish();
    let mut summary = format!(
        "replayed {}: {} frames, {} report datagrams, {} other frames, {:.2} s",
        file.display(),
        n.frames,
        n.datagrams,
        n.other,
        started.elapsed().as_secs_f64()
    );
    summary += &n.clauses(c.config.recv_slot);
    if let Some(d) = damage {
        summary += &format!(
            "; 1 damaged record (frame {} at byte offset {}), {} bytes not read",
            d.frame, d.offset, d.unread
        );
    }
    if interrupted {
        summary += &format!(
            "; stopped by a signal after {} frames (the rest not replayed)",
            n.frames
        );
    }
    Ok(summary)
}

/// Node names from a topology file: a lab or simulator file (`[topology]`) names its fabric as
/// the lab does; anything else is read by `NodeNames::load`.
pub fn load_names(path: &std::path::Path) -> Result<intscope_collector::names::NodeNames> {
    use intscope_collector::names::NodeNames;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    if let Ok(t) = toml::from_str::<toml::Table>(&text)
        && let Some(shape) = t.get("topology")
    {
        let shape: intscope_sim::topology::Topology = shape
            .clone()
            .try_into()
            .with_context(|| format!("{}: [topology]", path.display()))?;
        return Ok(NodeNames::from_pairs(shape.node_names())?);
    }
    Ok(NodeNames::load(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_specs_parse_or_say_what_is_expected() {
        assert_eq!(
            parse_store("sqlite:/tmp/x", None, "c").unwrap(),
            StoreSpec::Sqlite("/tmp/x".into())
        );
        let StoreSpec::ClickHouse(ch) =
            parse_store("clickhouse:http://a:8123,http://b:8123", None, "c7").unwrap()
        else {
            panic!("not clickhouse");
        };
        assert_eq!(ch.urls.len(), 2);
        assert_eq!(ch.cluster.as_deref(), Some("intscope"));
        assert_eq!(ch.source, "c7");
        for bad in ["sqlite:", "postgres:x", "clickhouse:", "nothing"] {
            let e = parse_store(bad, None, "c").unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
