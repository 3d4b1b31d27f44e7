//! `intscope blast`: send synthetic report traffic to a collector at a given rate, and print
//! exactly what was sent so loss can be computed.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use intscope_collector::loadgen::{Generator, LoadConfig, LoadVersion};

/// Arguments of `intscope blast`.
#[derive(Debug, clap::Args)]
pub struct BlastArgs {
    /// Collector address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub to: SocketAddr,
    /// Reports per second (0: as fast as possible).
    #[arg(long, default_value_t = 100_000)]
    pub rate: u64,
    /// Seconds to send for.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Distinct flows.
    #[arg(long, default_value_t = 1000)]
    pub flows: u32,
    /// Nodes per path (source, transit..., sink).
    #[arg(long, default_value_t = 3)]
    pub hops: u8,
    /// Report version: 2 (coalesced v2.0) or 0.5 (one SD-Fabric report per datagram).
    #[arg(long, default_value = "2")]
    pub version: String,
    /// v2.0: reports coalesced per datagram.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
}

/// Sends; returns the summary line.
pub fn run(args: &BlastArgs) -> Result<String> {
    let version = match args.version.as_str() {
        "2" | "2.0" => LoadVersion::V2,
        "0.5" => LoadVersion::V05,
        v => bail!("--version: {v} (expected 2 or 0.5)"),
    };
    if !args.duration.is_finite() || args.duration <= 0.0 {
        bail!("--duration must be positive");
    }
    let mut g = Generator::new(LoadConfig {
        flows: args.flows,
        hops: args.hops,
        version,
        batch: args.batch,
        ..LoadConfig::default()
    });
    let bind: SocketAddr = if args.to.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let sock = UdpSocket::bind(bind).context("opening the sending socket")?;
    sock.connect(args.to)
        .with_context(|| format!("cannot reach {}", args.to))?;
    let duration = Duration::from_secs_f64(args.duration);
    let bar = ProgressBar::new(duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut datagrams, mut reports, mut bytes, mut send_errors) = (0u64, 0u64, 0u64, 0u64);
    let mut buf = Vec::with_capacity(1500);
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        // Send what the rate allows by now, then yield for a millisecond.
        let allowed = if args.rate == 0 {
            u64::MAX
        } else {
            (elapsed.as_secs_f64() * args.rate as f64) as u64 + 1
        };
        let mut burst = 0;
        while reports < allowed && burst < 4096 {
            let n = g.next_datagram(&mut buf);
            match sock.send(&buf) {
                Ok(_) => {
                    datagrams += 1;
                    reports += n as u64;
                    bytes += buf.len() as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    // ICMP port unreachable from an earlier datagram: the collector is not up yet.
                    send_errors += 1;
                }
                Err(e) => return Err(e).context("sending"),
            }
            burst += 1;
        }
        if reports >= allowed {
            std::thread::sleep(Duration::from_millis(1));
        }
        if datagrams % 1024 == 0 {
            bar.set_position(start.elapsed().as_millis() as u64);
            bar.set_message(format!("{reports} reports"));
        }
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "to": args.to.to_string(),
        "version": args.version,
        "datagrams": datagrams,
        "reports": reports,
        "bytes": bytes,
        "send_errors": send_errors,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "reports_per_second": (reports as f64 / secs).round(),
    })
    .to_string())
}
