//! The frame I/O of `intscope node`: where frames come from (a capture, a live interface) and
//! where forwarded frames go, as two small traits, so the node's loop (`node`) and the live
//! interfaces (`live`) meet here instead of importing each other.

use std::time::Duration;

use anyhow::Result;

/// Where frames come from: `None` at the end (of the file, or of a live run stopped by a
/// signal); each frame with its time.
pub trait FrameSource {
    /// The next Ethernet frame, or word that time passed without one (live interfaces).
    fn next_frame(&mut self, stop: &std::sync::atomic::AtomicBool) -> Result<Option<Input>>;

    /// Frames the source lost before the node saw them (a live capture's kernel buffer
    /// overflow, the interface's own drops): `None` where nothing can be lost (a file).
    fn capture_stats(&mut self) -> Option<(u64, u64)> {
        None
    }
}

/// What a [`FrameSource`] yields.
pub enum Input {
    /// A frame and its time (since the epoch, or the capture's).
    Frame(Duration, Vec<u8>),
    /// No frame for a while; the time now. Probes and delayed (coalesced) reports fall due by
    /// the clock, not only when traffic comes.
    #[cfg_attr(not(feature = "live"), allow(dead_code))]
    Idle(Duration),
    /// A frame of a link type other than Ethernet (its number and link type): dropped, counted.
    NotEthernet(u64, u32),
}

/// Where forwarded frames go.
pub trait FrameSink {
    /// Sends (or writes) one frame. An interface that refuses a frame counts it
    /// ([`FrameSink::tx_errors`]); only a failure that ends the output is an error.
    fn send(&mut self, ts: Duration, frame: &[u8]) -> Result<()>;

    /// Frames an interface refused.
    fn tx_errors(&self) -> u64 {
        0
    }

    /// Writes out what is buffered, at the end: an error here (a full disk) is the run's, not
    /// one a drop would swallow.
    fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
