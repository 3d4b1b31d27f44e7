//! What the kernel half sends: `struct event` of `bpf/agent.bpf.c`, read field by field from
//! the ring buffer's bytes (host byte order, the C compiler's natural alignment).

/// Bytes of the packet an event carries, from its IP header (`CAPTURE` in the C source).
pub const CAPTURE: usize = 128;
/// Bytes of one event.
pub const EVENT_LEN: usize = 56 + CAPTURE;

/// Why the kernel half sent an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A watched packet left an interface (its postcard is due, or its queue is congested).
    Transmit,
    /// A watched packet arrived for this host: its hop ends here.
    Local,
    /// The kernel dropped a watched packet.
    Drop,
}

/// The ingress interface is known.
pub const F_INGRESS: u8 = 1;
/// The ingress time is known.
pub const F_INGRESS_TS: u8 = 2;
/// The egress device's root qdisc was read.
pub const F_QUEUE: u8 = 4;
/// The hop latency is at or above the queue report trigger.
pub const F_CONGESTED: u8 = 8;
/// Dropped on the way out: `egress_if` is where.
pub const F_EGRESS_DROP: u8 = 16;
/// The flow filter let the packet's flow report through (else only its queue reports).
pub const F_FLOW_DUE: u8 = 32;

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// What happened.
    pub kind: Kind,
    /// `F_*` bits.
    pub flags: u8,
    /// The kernel's `enum skb_drop_reason` (drops).
    pub drop_reason: u32,
    /// Ingress interface index (0: this host's own stack).
    pub ingress_if: u32,
    /// Egress interface index (0: delivered to this host).
    pub egress_if: u32,
    /// Ingress time, CLOCK_MONOTONIC ns (with `F_INGRESS_TS`).
    pub ingress_ns: u64,
    /// Egress (or drop) time, CLOCK_MONOTONIC ns.
    pub egress_ns: u64,
    /// Packets in the egress device's root qdisc after this one left (with `F_QUEUE`).
    pub qlen: u32,
    /// Bytes in it.
    pub backlog: u32,
    /// The transmit queue the packet left by.
    pub queue_id: u32,
    /// The packet's length (all segments of a GSO packet).
    pub pkt_len: u32,
    /// EtherType of the packet (IPv4 or IPv6).
    pub l3_proto: u16,
    /// The namespace (node) that saw it: its index among the agent's namespaces.
    pub node: u16,
    /// The packet from its IP header, as far as it was captured.
    pub packet: &'a [u8],
}

/// An event that cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Fewer bytes than an event.
    #[error("event of {0} bytes, expected {EVENT_LEN}")]
    Short(usize),
    /// A kind the C source does not send.
    #[error("event kind {0} unknown")]
    Kind(u8),
}

/// A field of a kernel-written record (host byte order); the caller checked the length.
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// See [`u16_at`].
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// See [`u16_at`].
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

impl<'a> Event<'a> {
    /// Reads an event.
    pub fn parse(b: &'a [u8]) -> Result<Self, EventError> {
        if b.len() < EVENT_LEN {
            return Err(EventError::Short(b.len()));
        }
        let kind = match b[0] {
            1 => Kind::Transmit,
            2 => Kind::Local,
            3 => Kind::Drop,
            k => return Err(EventError::Kind(k)),
        };
        let caplen = usize::from(u16_at(b, 2)).min(CAPTURE);
        Ok(Event {
            kind,
            flags: b[1],
            drop_reason: u32_at(b, 4),
            ingress_if: u32_at(b, 8),
            egress_if: u32_at(b, 12),
            ingress_ns: u64_at(b, 16),
            egress_ns: u64_at(b, 24),
            qlen: u32_at(b, 32),
            backlog: u32_at(b, 36),
            queue_id: u32_at(b, 40),
            pkt_len: u32_at(b, 44),
            l3_proto: u16_at(b, 48),
            node: u16_at(b, 50),
            packet: &b[56..56 + caplen],
        })
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The packet as an Ethernet frame (the node's input): a locally administered, all-zero
    /// address pair and the packet's EtherType in front of its IP header. The kernel's own MAC
    /// header is not carried: a packet dropped or sent by the stack may not have one yet.
    pub fn frame(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(14 + self.packet.len());
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&self.l3_proto.to_be_bytes());
        f.extend_from_slice(self.packet);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: u8, caplen: u16) -> Vec<u8> {
        let mut b = vec![0u8; EVENT_LEN];
        b[0] = kind;
        b[1] = F_INGRESS | F_QUEUE;
        b[2..4].copy_from_slice(&caplen.to_ne_bytes());
        b[8..12].copy_from_slice(&7u32.to_ne_bytes());
        b[16..24].copy_from_slice(&1_000u64.to_ne_bytes());
        b[24..32].copy_from_slice(&3_500u64.to_ne_bytes());
        b[48..50].copy_from_slice(&0x0800u16.to_ne_bytes());
        b[50..52].copy_from_slice(&3u16.to_ne_bytes());
        b[56] = 0x45;
        b
    }

    #[test]
    fn fields_are_where_the_c_struct_puts_them() {
        let b = raw(1, 20);
        let e = Event::parse(&b).unwrap();
        assert_eq!(e.kind, Kind::Transmit);
        assert!(e.has(F_INGRESS) && e.has(F_QUEUE) && !e.has(F_INGRESS_TS));
        assert_eq!((e.ingress_if, e.ingress_ns, e.egress_ns), (7, 1_000, 3_500));
        assert_eq!(e.packet.len(), 20);
        assert_eq!(e.node, 3);
        let f = e.frame();
        assert_eq!(&f[12..15], &[0x08, 0x00, 0x45]);
    }

    #[test]
    fn short_unknown_and_overlong_captures_are_refused_or_bounded() {
        assert_eq!(Event::parse(&[1; 10]), Err(EventError::Short(10)));
        assert_eq!(Event::parse(&raw(9, 0)), Err(EventError::Kind(9)));
        let long = raw(3, 9999);
        let e = Event::parse(&long).unwrap();
        assert_eq!(e.packet.len(), CAPTURE);
    }
}
