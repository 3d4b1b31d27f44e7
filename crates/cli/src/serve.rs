//! `intscope serve`: the API for a whole fabric, read from the history store that the
//! collectors write (ClickHouse cluster mode; docs/scale-out.md), and the web console over it.
//! No reports are received here, so the console's live pages say so instead of breaking.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use intscope_collector::api_cluster::{FabricApi, app, console_app, metrics_app};
use intscope_collector::http::HttpStats;
use intscope_collector::store::{ClickHouseStore, SqliteStore, Store};

use crate::collect::{ApiArgs, StoreSpec, api_config, parse_store, shutdown_signal};

/// Arguments of `intscope serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The store the collectors write: `clickhouse:http://HOST:PORT[,...]` (every shard) or
    /// `sqlite:DIR`.
    #[arg(long, value_name = "BACKEND:WHERE")]
    pub store: String,
    /// The ClickHouse cluster name when --store names several servers. Default `intscope`.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// HTTP API address.
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8081",
        value_parser = crate::usage::host_port
    )]
    pub http: SocketAddr,
    /// Names for the nodes, shown by the console (as `collect --topology`).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// HTTP API access, TLS and limits (as for `collect`).
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Serves until Ctrl-C / SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    let cfg = api_config(&args.api, args.http)?;
    let names = match &args.topology {
        Some(t) => crate::collect::load_names(t).context("the topology (--topology)")?,
        None => Default::default(),
    };
    let store: Arc<dyn Store> = match parse_store(&args.store, args.cluster.clone(), "serve")? {
        StoreSpec::Sqlite(dir) => {
            // `serve` reads what collectors wrote: opening would create an empty store where a
            // folder name was mistyped, and serve nothing without a word.
            let db = dir.join(SqliteStore::FILE);
            if !db.is_file() {
                bail!(
                    "no history store at {} ({} does not exist): give the folder a collector \
                     writes (`intscope collect --data DIR`)",
                    dir.display(),
                    db.display()
                );
            }
            Arc::new(
                SqliteStore::open_reader(&dir)
                    .with_context(|| format!("opening {}", dir.display()))?,
            )
        }
        StoreSpec::ClickHouse(ch) => {
            Arc::new(ClickHouseStore::open_reader(ch).context("connecting to ClickHouse")?)
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.http)
            .await
            .with_context(|| format!("cannot bind the HTTP API to {}", args.http))?;
        let addr = listener.local_addr()?;
        // Before the line below: a script may stop the server as soon as it reads it.
        let shutdown = shutdown_signal();
        // One line a script can read to find the (possibly ephemeral) port.
        println!("{}", serde_json::json!({"http": addr.to_string()}));
        eprintln!(
            "intscope serve: console on http://{addr}/, fabric API on /api/ (metrics: /metrics) \
             from {}",
            args.store
        );
        let (limits, tls) = (cfg.http.clone(), cfg.tls.clone());
        let api = FabricApi::named(store, cfg, Arc::new(names));
        let router = app(Arc::clone(&api), "/api")
            .merge(metrics_app(api))
            .merge(console_app());
        intscope_collector::http::serve(
            listener,
            router,
            limits,
            tls,
            Arc::new(HttpStats::default()),
            shutdown,
        )
        .await
        .context("HTTP server")
    })
}
