//! The fabric's shape: a leaf-spine (Clos) network, its addressing and its routing.
//!
//! Leaves are nodes 1..=L, spines 101..=100+S. Leaf ports 1..=H face hosts `10.0.<leaf>.<h>`,
//! ports H+s face spine s; spine port l faces leaf l. Leaves spread traffic to other leaves over
//! the spines by flow hash (ECMP); spines route by destination leaf.

use std::net::Ipv4Addr;

/// Shape and link properties.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Topology {
    /// Leaf switches.
    pub leaves: u32,
    /// Spine switches.
    pub spines: u32,
    /// Hosts per leaf.
    pub hosts_per_leaf: u32,
    /// Host link speed, Gb/s.
    pub host_gbps: f64,
    /// Leaf-spine link speed, Gb/s.
    pub fabric_gbps: f64,
    /// Egress buffer per port, bytes (tail drop beyond).
    pub buffer_bytes: u32,
    /// Link propagation delay, ns.
    pub link_delay_ns: u64,
    /// Up to this much more delay on a link, drawn per packet, ns: a software switch's or a
    /// host's timestamps, taken by a CPU, wander by tens of µs (0: none).
    pub link_jitter_ns: u64,
    /// IP MTU of every link.
    pub mtu: usize,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            leaves: 4,
            spines: 2,
            hosts_per_leaf: 4,
            host_gbps: 10.0,
            fabric_gbps: 40.0,
            buffer_bytes: 200_000,
            link_delay_ns: 500,
            link_jitter_ns: 0,
            mtu: 1500,
        }
    }
}

impl Topology {
    /// Every node's INT ID and name, as the lab names its namespaces: leaf `l` is `leaf<l>`
    /// (ID `l`), spine `s` is `spine<s>` ([`spine_id`]), host `h` of leaf `l` is `host<l>-<h>`
    /// (ID `1000 × l + h`, where a host runs INT: the lab's host agents).
    pub fn node_names(&self) -> Vec<(u32, String)> {
        let leaves = (1..=self.leaves).map(|l| (l, format!("leaf{l}")));
        let spines = (1..=self.spines).map(|s| (spine_id(s), format!("spine{s}")));
        let hosts = (1..=self.leaves).flat_map(|l| {
            (1..=self.hosts_per_leaf).map(move |h| (1000 * l + h, format!("host{l}-{h}")))
        });
        leaves.chain(spines).chain(hosts).collect()
    }
}

/// Node ID of spine `s` (1-based).
pub fn spine_id(s: u32) -> u32 {
    100 + s
}

/// Address of host `h` on leaf `l` (both 1-based).
pub fn host_ip(l: u32, h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, l as u8, h as u8)
}

/// The leaf and host index of an address in the fabric.
pub fn locate(ip: Ipv4Addr) -> Option<(u32, u32)> {
    let o = ip.octets();
    (o[0] == 10 && o[1] == 0 && o[2] > 0 && o[3] > 0).then_some((u32::from(o[2]), u32::from(o[3])))
}

impl Topology {
    /// Leaf port facing spine `s`.
    pub fn uplink(&self, s: u32) -> u32 {
        self.hosts_per_leaf + s
    }

    /// The spine behind a leaf's uplink port, if it is one.
    pub fn spine_of_port(&self, port: u32) -> Option<u32> {
        (port > self.hosts_per_leaf && port <= self.hosts_per_leaf + self.spines)
            .then(|| port - self.hosts_per_leaf)
    }

    /// Every host address.
    pub fn hosts(&self) -> Vec<Ipv4Addr> {
        (1..=self.leaves)
            .flat_map(|l| (1..=self.hosts_per_leaf).map(move |h| host_ip(l, h)))
            .collect()
    }
}
