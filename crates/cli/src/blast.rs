//! `intscope blast`: send synthetic report traffic to a collector at a given rate, and print
//! exactly what was sent so loss can be computed.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::usage::bail_usage;
use indicatif::{ProgressBar, ProgressStyle};
use intscope_core::loadgen::{Generator, LoadConfig, LoadVersion};

/// Arguments of `intscope blast`.
#[derive(Debug, clap::Args)]
pub struct BlastArgs {
    /// Collector address.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::usage::host_port)]
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
    /// v2.0: INT-XD postcards, one per hop and datagram from each node of the path, instead
    /// of the sinks' coalesced INT-MD reports (v0.5 traffic is always postcards).
    #[arg(long)]
    pub postcards: bool,
    /// v2.0: reports coalesced per datagram.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Send one datagram per system call instead of batches of equal-sized datagrams through
    /// UDP GSO (the datagrams on the wire are the same either way).
    #[arg(long)]
    pub no_gso: bool,
}

/// Datagrams of one size waiting to leave in one GSO send (Linux UDP_SEGMENT: the kernel cuts
/// `contents` into datagrams of `segment` bytes, the last may be shorter).
struct Batcher {
    udp: quinn_udp::UdpSocketState,
    sock: UdpSocket,
    to: SocketAddr,
    contents: Vec<u8>,
    segment: usize,
    max: usize,
    /// Queued: datagrams and the reports they hold.
    queued: Sent,
    /// Datagrams (and reports) in sends the socket refused: they did not go.
    refused: Sent,
}

/// What left (or was refused).
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    datagrams: u64,
    reports: u64,
    bytes: u64,
}

impl Batcher {
    fn new(sock: UdpSocket, to: SocketAddr, gso: bool) -> Result<Self> {
        let udp = quinn_udp::UdpSocketState::new((&sock).into()).context("socket setup")?;
        let max = if gso {
            udp.max_gso_segments().min(64)
        } else {
            1
        };
        Ok(Batcher {
            udp,
            sock,
            to,
            contents: Vec::with_capacity(65_536),
            segment: 0,
            max,
            queued: Sent::default(),
            refused: Sent::default(),
        })
    }

    /// Queues one datagram holding `reports`; first sends what was queued when it cannot join.
    fn push(&mut self, datagram: &[u8], reports: usize) -> std::io::Result<Sent> {
        let n = self.queued.datagrams as usize;
        let joins = datagram.len() == self.segment
            && n < self.max
            && self.contents.len() + datagram.len() <= 65_000;
        let sent = if n > 0 && !joins {
            self.flush()?
        } else {
            Sent::default()
        };
        if self.queued.datagrams == 0 {
            self.segment = datagram.len();
        }
        self.contents.extend_from_slice(datagram);
        self.queued.datagrams += 1;
        self.queued.reports += reports as u64;
        self.queued.bytes += datagram.len() as u64;
        Ok(sent)
    }

    /// Sends what is queued, waiting while the socket buffer is full. The queue is emptied
    /// either way; an error (ICMP port unreachable from an earlier datagram) means it did not go.
    fn flush(&mut self) -> std::io::Result<Sent> {
        if self.queued.datagrams == 0 {
            return Ok(Sent::default());
        }
        let t = quinn_udp::Transmit {
            destination: self.to,
            ecn: None,
            contents: &self.contents,
            segment_size: (self.queued.datagrams > 1).then_some(self.segment),
            src_ip: None,
        };
        let result = loop {
            match self.udp.try_send((&self.sock).into(), &t) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_micros(20));
                }
                other => break other,
            }
        };
        let sent = std::mem::take(&mut self.queued);
        self.contents.clear();
        if result.is_err() {
            self.refused.datagrams += sent.datagrams;
            self.refused.reports += sent.reports;
            self.refused.bytes += sent.bytes;
        }
        result.map(|()| sent)
    }
}

/// Adds what a send did to `total`; a refused send (ICMP port unreachable from an earlier
/// datagram: the collector is not up yet) is counted in `errors`, its datagrams in the
/// batcher's `refused`.
fn account(total: &mut Sent, errors: &mut u64, r: std::io::Result<Sent>) -> Result<()> {
    match r {
        Ok(s) => {
            total.datagrams += s.datagrams;
            total.reports += s.reports;
            total.bytes += s.bytes;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            *errors += 1;
            Ok(())
        }
        Err(e) => Err(e).context("sending"),
    }
}

/// Sends; returns the summary line.
pub fn run(args: &BlastArgs) -> Result<String> {
    let version = match args.version.as_str() {
        "2" | "2.0" if args.postcards => LoadVersion::V2Postcards,
        "2" | "2.0" => LoadVersion::V2,
        "0.5" => LoadVersion::V05,
        v => bail_usage!("--version: {v} (expected 2 or 0.5)"),
    };
    if !args.duration.is_finite() || args.duration <= 0.0 {
        bail_usage!("--duration must be positive");
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
    let mut out = Batcher::new(sock, args.to, !args.no_gso)?;
    let duration = Duration::from_secs_f64(args.duration);
    let bar = ProgressBar::new(duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut total, mut send_errors) = (Sent::default(), 0u64);
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
        // Reports queued but not yet sent count towards the rate already.
        while total.reports + out.queued.reports < allowed && burst < 4096 {
            let n = g.next_datagram(&mut buf);
            account(&mut total, &mut send_errors, out.push(&buf, n))?;
            burst += 1;
        }
        account(&mut total, &mut send_errors, out.flush())?;
        let (datagrams, reports) = (total.datagrams, total.reports);
        if reports >= allowed {
            std::thread::sleep(Duration::from_millis(1));
        }
        bar.set_position(start.elapsed().as_millis() as u64);
        bar.set_message(format!("{reports} reports in {datagrams} datagrams"));
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let Sent {
        datagrams,
        reports,
        bytes,
    } = total;
    Ok(serde_json::json!({
        "to": args.to.to_string(),
        "version": args.version,
        "postcards": version == LoadVersion::V2Postcards,
        "datagrams": datagrams,
        "reports": reports,
        "bytes": bytes,
        "send_errors": send_errors,
        "datagrams_refused": out.refused.datagrams,
        "reports_refused": out.refused.reports,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "reports_per_second": (reports as f64 / secs).round(),
    })
    .to_string())
}
