//! From the INT data path's events to reports. The kernel half hands over the frame as it left
//! the hop (a sink's: as it arrived, INT still in it) with the hop's measurements; the reports
//! are made by [`intscope_node::Node`]'s own sink and INT-MX code, so an eBPF hop reports
//! exactly what a userspace node would (Telemetry Report v2.0 or v0.5, the stack, the sink's
//! own metadata in the report, INT v2.1 §"INT Sink Node" option 2).
//!
//! An event carries the first [`INT_CAPTURE`] bytes of the frame; the rest is zeros up to the
//! frame's length, so the node sees lengths that agree (the report carries at most
//! `report_truncate` bytes of the packet, and the headers that name the flow are in the capture).

use intscope_node::{Mode, Node, NodeConfig, Role, Telemetry};
use intscope_wire::metadata::HopMetadata;

use crate::event::{u32_at, u64_at};

/// Bytes of the frame an event carries (`CAPTURE` in `bpf/int.bpf.c`).
pub const INT_CAPTURE: usize = 256;
/// Bytes of one event.
pub const INT_EVENT_LEN: usize = 48 + INT_CAPTURE;
/// The longest frame an event is rebuilt to (a GSO packet never carries INT).
const MAX_FRAME: usize = 65_535 + 14;

/// Why the data path sent an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntKind {
    /// A sink removed INT-MD: report the stack and the sink's metadata.
    Sink,
    /// An INT-MX packet passed a source or transit hop: report this hop's metadata.
    Mx,
    /// A sink removed INT-MX: report its own metadata.
    MxSink,
}

/// The ingress time is known.
pub const F_INGRESS_TS: u8 = 1;
/// The egress device's qdisc was measured.
pub const F_QUEUE: u8 = 2;
/// The egress is known (not at a sink, which works at tc ingress).
pub const F_EGRESS: u8 = 4;

/// One event of the data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntEvent<'a> {
    /// What happened.
    pub kind: IntKind,
    /// `F_*` bits.
    pub flags: u8,
    /// The frame's length.
    pub pkt_len: u32,
    /// Ingress interface index (0: sent by this host).
    pub ingress_if: u32,
    /// Egress interface index.
    pub egress_if: u32,
    /// Ingress time, CLOCK_MONOTONIC ns (with [`F_INGRESS_TS`]).
    pub ingress_ns: u64,
    /// Egress time (tc egress), CLOCK_MONOTONIC ns.
    pub egress_ns: u64,
    /// Hop latency as written into INT (all ones: unknown).
    pub latency_ns: u32,
    /// Bytes in the egress qdisc the packet before met (with [`F_QUEUE`]).
    pub backlog: u32,
    /// Transmit queue.
    pub queue_id: u32,
    /// The frame's first bytes, from its Ethernet header.
    pub frame: &'a [u8],
}

/// An event that cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IntEventError {
    /// Fewer bytes than an event.
    #[error("event of {0} bytes, expected {INT_EVENT_LEN}")]
    Short(usize),
    /// A kind the C source does not send.
    #[error("event kind {0} unknown")]
    Kind(u8),
}

impl<'a> IntEvent<'a> {
    /// Reads `struct event` of `bpf/int.bpf.c`.
    pub fn parse(b: &'a [u8]) -> Result<Self, IntEventError> {
        if b.len() < INT_EVENT_LEN {
            return Err(IntEventError::Short(b.len()));
        }
        let kind = match b[0] {
            1 => IntKind::Sink,
            2 => IntKind::Mx,
            3 => IntKind::MxSink,
            k => return Err(IntEventError::Kind(k)),
        };
        let caplen = usize::from(crate::event::u16_at(b, 2)).min(INT_CAPTURE);
        Ok(IntEvent {
            kind,
            flags: b[1],
            pkt_len: u32_at(b, 4),
            ingress_if: u32_at(b, 8),
            egress_if: u32_at(b, 12),
            ingress_ns: u64_at(b, 16),
            egress_ns: u64_at(b, 24),
            latency_ns: u32_at(b, 32),
            backlog: u32_at(b, 36),
            queue_id: u32_at(b, 40),
            frame: &b[48..48 + caplen],
        })
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The frame: the captured bytes, then zeros up to its length.
    pub fn frame(&self) -> Vec<u8> {
        let len = (self.pkt_len as usize).clamp(self.frame.len(), MAX_FRAME);
        let mut f = Vec::with_capacity(len);
        f.extend_from_slice(self.frame);
        f.resize(len, 0);
        f
    }
}

/// The hop's metadata, measured by the kernel half.
struct Measured(HopMetadata<'static>);

impl Telemetry for Measured {
    fn hop(&self, _node_id: u32) -> HopMetadata<'static> {
        self.0
    }
}

/// Makes reports of events with two nodes of the agent's configuration: a sink (INT-MD stacks,
/// INT-MX at the last hop) and a transit (INT-MX reports at the source and transit hops).
#[derive(Debug)]
pub struct IntReporter {
    sink: Node,
    mx: Node,
}

impl IntReporter {
    /// Reporters with `cfg`'s node ID, report format and ports, filters and sink settings.
    pub fn new(cfg: &NodeConfig) -> Result<Self, intscope_node::ConfigError> {
        let mut sink = cfg.clone();
        sink.role = Role::Sink;
        sink.sink_metadata = intscope_node::SinkMetadata::Report;
        let mut mx = cfg.clone();
        mx.role = Role::Transit;
        mx.mode = Mode::Mx;
        Ok(IntReporter {
            sink: Node::new(sink)?,
            mx: Node::new(mx)?,
        })
    }

    /// The reports of event `e` with this hop's metadata `hop`.
    pub fn reports(&mut self, e: &IntEvent<'_>, hop: HopMetadata<'static>) -> Vec<Vec<u8>> {
        let mut frame = e.frame();
        let tel = Measured(hop);
        let node = if e.kind == IntKind::Mx {
            &mut self.mx
        } else {
            &mut self.sink
        };
        node.process(&mut frame, &tel).reports
    }

    /// Counters of the two nodes (frames, reports …), summed.
    pub fn node_reports(&self) -> u64 {
        self.sink.stats.reports + self.mx.stats.reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `struct event` as the C compiler lays it out (host order).
    fn raw(kind: u8, caplen: u16, pkt_len: u32) -> Vec<u8> {
        let mut b = vec![0u8; INT_EVENT_LEN];
        b[0] = kind;
        b[1] = F_INGRESS_TS | F_EGRESS;
        b[2..4].copy_from_slice(&caplen.to_ne_bytes());
        b[4..8].copy_from_slice(&pkt_len.to_ne_bytes());
        b[8..12].copy_from_slice(&7u32.to_ne_bytes());
        b[12..16].copy_from_slice(&9u32.to_ne_bytes());
        b[16..24].copy_from_slice(&1_000u64.to_ne_bytes());
        b[24..32].copy_from_slice(&5_000u64.to_ne_bytes());
        b[32..36].copy_from_slice(&4_000u32.to_ne_bytes());
        b[36..40].copy_from_slice(&1_500u32.to_ne_bytes());
        for (i, x) in b[48..].iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    #[test]
    fn events_read_field_by_field_and_frames_pad_to_their_length() {
        let b = raw(1, 100, 1400);
        let e = IntEvent::parse(&b).unwrap();
        assert_eq!(e.kind, IntKind::Sink);
        assert!(e.has(F_INGRESS_TS) && e.has(F_EGRESS) && !e.has(F_QUEUE));
        assert_eq!((e.ingress_if, e.egress_if), (7, 9));
        assert_eq!(
            (e.ingress_ns, e.egress_ns, e.latency_ns),
            (1_000, 5_000, 4_000)
        );
        assert_eq!(e.backlog, 1_500);
        let f = e.frame();
        assert_eq!(f.len(), 1400);
        assert_eq!(&f[..100], &b[48..148]);
        assert!(f[100..].iter().all(|x| *x == 0));
    }

    #[test]
    fn bad_events_are_errors() {
        assert_eq!(IntEvent::parse(&[0u8; 10]), Err(IntEventError::Short(10)));
        assert_eq!(
            IntEvent::parse(&raw(9, 10, 10)),
            Err(IntEventError::Kind(9))
        );
        // A capture longer than the array is cut to it; a length shorter than the capture
        // gives the capture.
        let b = raw(3, 9999, 10);
        let e = IntEvent::parse(&b).unwrap();
        assert_eq!(e.kind, IntKind::MxSink);
        assert_eq!(e.frame().len(), INT_CAPTURE);
    }
}
