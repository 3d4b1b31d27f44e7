//! The keys fabric state is kept and named under: a queue ([`QueueKey`]) and a link
//! ([`LinkKey`]). They sit below the fabric shard and its detectors, which both name them.

/// A queue: node, egress port and queue ID, packed in one integer (what the open-episode list,
/// events and readers name a queue by). Orders like the tuple. (As a hash key, a `(u32, u32, u8)`
/// tuple was read back from a stack copy in wider words than the three stores that made it, a
/// store-forwarding stall; queues are now found through their node and port.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey(u128);

impl QueueKey {
    /// The key of queue `queue` on `node`'s egress `port`.
    pub fn new(node: u32, port: u32, queue: u8) -> Self {
        QueueKey((u128::from(node) << 64) | (u128::from(port) << 32) | u128::from(queue))
    }
    /// Node ID.
    pub fn node(self) -> u32 {
        (self.0 >> 64) as u32
    }
    /// Egress port.
    pub fn port(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// Queue ID.
    pub fn queue(self) -> u8 {
        self.0 as u8
    }
}

/// `(from node, from egress port, to node, to ingress port)`.
pub type LinkKey = (u32, u32, u32, u32);
