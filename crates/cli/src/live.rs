//! Live Linux interfaces for `intscope node` (`--interface`, `--out-interface`): frames captured
//! and injected through libpcap (the `pcap` crate), in a build with `--features live`. Capture
//! runs in immediate mode, inbound only (frames we inject are not read back), with a short
//! timeout so a stop signal (Ctrl-C, SIGTERM) is noticed and a 32 MiB kernel buffer; frame
//! times are the kernel's receive timestamps in nanoseconds, the node's ingress time. What the
//! capture lost (`pcap_stats`) and the frames the output refused (too big, a full queue) are
//! counted, never the end of the run.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::frames::{FrameSink, FrameSource};

/// A flag set by Ctrl-C or SIGTERM (live runs stop on it; file runs ignore it).
pub fn stop_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    #[cfg(feature = "live")]
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registration only fails for forbidden signals; these two are allowed.
        let _ = signal_hook::flag::register(signal, Arc::clone(&flag));
    }
    flag
}

#[cfg(feature = "live")]
mod imp {
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    use anyhow::{Context, Result};
    use pcap::{Active, Capture, Direction};

    use super::*;
    use crate::frames::Input;

    pub struct Live(Capture<Active>);

    fn open(iface: &str) -> Result<Capture<Active>> {
        Capture::from_device(iface)
            .and_then(|c| {
                c.promisc(true)
                    .immediate_mode(true)
                    .snaplen(65535)
                    .buffer_size(32 << 20)
                    .precision(pcap::Precision::Nano)
                    .timeout(100)
                    .open()
            })
            .with_context(|| format!("cannot open interface {iface} (root or CAP_NET_RAW needed)"))
    }

    /// An output interface: frames it refuses are counted (`tx_errors`), the first one said.
    pub struct Sink {
        capture: Capture<Active>,
        iface: String,
        errors: u64,
    }

    pub fn source(iface: &str) -> Result<Box<dyn FrameSource>> {
        let c = open(iface)?;
        c.direction(Direction::In)
            .with_context(|| format!("{iface}: inbound-only capture"))?;
        // Non-blocking, waited on with poll(2): libpcap's own read timeout does not return on
        // an interface without traffic (TPACKET_V3 in immediate mode keeps polling), and then
        // neither a stop signal nor the node's clock (probes, delayed reports) would be heard.
        let c = c
            .setnonblock()
            .with_context(|| format!("{iface}: non-blocking capture"))?;
        Ok(Box::new(Live(c)))
    }

    pub fn sink(iface: &str) -> Result<Box<dyn FrameSink>> {
        Ok(Box::new(Sink {
            capture: open(iface)?,
            iface: iface.to_string(),
            errors: 0,
        }))
    }

    impl FrameSource for Live {
        fn capture_stats(&mut self) -> Option<(u64, u64)> {
            Live::capture_stats(self)
        }

        fn next_frame(&mut self, stop: &AtomicBool) -> Result<Option<Input>> {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            loop {
                match self.0.next_packet() {
                    Ok(p) => {
                        // Nanosecond precision: tv_usec holds nanoseconds.
                        let ts = Duration::from_secs(p.header.ts.tv_sec as u64)
                            + Duration::from_nanos(p.header.ts.tv_usec as u64);
                        return Ok(Some(Input::Frame(ts, p.data.to_vec())));
                    }
                    Err(pcap::Error::TimeoutExpired) => {}
                    Err(e) => return Err(e).context("capturing"),
                }
                // Nothing queued: wait up to 100 ms for a frame; without one, the node hears
                // the time (probes, delayed reports) and a stop signal is noticed.
                let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(100u16)) {
                    Ok(0) => {
                        return Ok(Some(Input::Idle(
                            SystemTime::now()
                                .duration_since(UNIX_EPOCH)
                                .unwrap_or_default(),
                        )));
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(None);
                        }
                    }
                    Err(e) => return Err(e).context("waiting for frames"),
                }
            }
        }
    }

    impl FrameSink for Sink {
        fn send(&mut self, _ts: Duration, frame: &[u8]) -> Result<()> {
            if let Err(e) = self.capture.sendpacket(frame) {
                // A frame over the MTU (merged by GRO/LRO, or a GSO frame from a local sender)
                // or a full transmit queue: congestion is what INT is for, not a reason to stop.
                if self.errors == 0 {
                    eprintln!(
                        "intscope node: warning: {} refused a frame of {} bytes: {e}; frames not \
                         sent are counted in tx_errors",
                        self.iface,
                        frame.len()
                    );
                }
                self.errors += 1;
            }
            Ok(())
        }

        fn tx_errors(&self) -> u64 {
            self.errors
        }
    }

    impl Live {
        /// What the capture lost: (dropped for want of buffer, dropped by the interface).
        pub fn capture_stats(&mut self) -> Option<(u64, u64)> {
            self.0
                .stats()
                .ok()
                .map(|s| (u64::from(s.dropped), u64::from(s.if_dropped)))
        }
    }
}

#[cfg(feature = "live")]
pub use imp::{sink, source};

#[cfg(not(feature = "live"))]
const NOT_BUILT: &str = "live interfaces need a build with `--features live` (and libpcap: \
    apt-get install libpcap-dev), e.g. cargo run --release --features live -- node ...";

/// Frames from a live interface.
#[cfg(not(feature = "live"))]
pub fn source(_iface: &str) -> anyhow::Result<Box<dyn FrameSource>> {
    Err(crate::usage::usage(NOT_BUILT))
}

/// Frames out of a live interface.
#[cfg(not(feature = "live"))]
pub fn sink(_iface: &str) -> anyhow::Result<Box<dyn FrameSink>> {
    Err(crate::usage::usage(NOT_BUILT))
}
