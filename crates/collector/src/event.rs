//! Events the detectors raise: what happened, when, where (node / port / queue), to which flow,
//! and the evidence.

use core::net::IpAddr;

use intscope_wire::locate::FlowKey;
use serde_json::Value;

/// Kinds of event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A flow's path (nodes and ports) changed.
    PathChange,
    /// A hop's latency far above its baseline.
    LatencyAnomaly,
    /// A packet was dropped (with the reason when reported).
    Drop,
    /// A queue's occupancy crossed the congestion threshold.
    CongestionStart,
    /// A congestion episode ended (with its culprit flows).
    CongestionEnd,
    /// A short occupancy spike (a congestion episode shorter than the microburst window).
    Microburst,
    /// Telemetry reports were lost (sequence gap per node and hw_id).
    LostReports,
    /// The INT hop limit was reached (E bit): a long path or a forwarding loop.
    HopLimit,
    /// A node could not add its metadata because of the MTU (M bit).
    MtuExceeded,
    /// The IP TTL decreased more than INT hops were added: hops without INT on the path.
    NonIntHops,
}

impl EventKind {
    /// Every kind, for metrics.
    pub const ALL: [EventKind; 10] = [
        EventKind::PathChange,
        EventKind::LatencyAnomaly,
        EventKind::Drop,
        EventKind::CongestionStart,
        EventKind::CongestionEnd,
        EventKind::Microburst,
        EventKind::LostReports,
        EventKind::HopLimit,
        EventKind::MtuExceeded,
        EventKind::NonIntHops,
    ];

    /// Label value (kebab-case).
    pub fn label(self) -> &'static str {
        match self {
            EventKind::PathChange => "path-change",
            EventKind::LatencyAnomaly => "latency-anomaly",
            EventKind::Drop => "drop",
            EventKind::CongestionStart => "congestion-start",
            EventKind::CongestionEnd => "congestion-end",
            EventKind::Microburst => "microburst",
            EventKind::LostReports => "lost-reports",
            EventKind::HopLimit => "hop-limit",
            EventKind::MtuExceeded => "mtu-exceeded",
            EventKind::NonIntHops => "non-int-hops",
        }
    }
}

/// A flow as JSON-friendly strings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlowRef {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// IP protocol.
    pub proto: u8,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl From<&FlowKey> for FlowRef {
    fn from(k: &FlowKey) -> Self {
        FlowRef {
            src: ip_string(k.src_ip()),
            dst: ip_string(k.dst_ip()),
            proto: k.proto,
            src_port: k.src_port,
            dst_port: k.dst_port,
        }
    }
}

fn flow_as_ref<S: serde::Serializer>(flow: &Option<FlowKey>, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&flow.as_ref().map(FlowRef::from), s)
}

/// An address in its usual text form. IPv4 is written by hand: `Ipv4Addr`'s `Display` goes
/// through the formatter's padding machinery, ~25× the cost, and culprit lists format dozens.
fn ip_string(ip: IpAddr) -> String {
    let IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut s = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if octet >= 100 {
            s.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            s.push(char::from(b'0' + octet / 10 % 10));
        }
        s.push(char::from(b'0' + octet % 10));
    }
    s
}

/// One event.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Event {
    /// Increasing ID.
    pub id: u64,
    /// When (report time), ns since the epoch.
    pub time_ns: u64,
    /// What.
    pub kind: EventKind,
    /// Where: node.
    pub node_id: Option<u32>,
    /// Where: port (egress unless the evidence says otherwise).
    pub port: Option<u32>,
    /// Where: queue.
    pub queue_id: Option<u8>,
    /// Which flow (served as a [`FlowRef`]; formatted on output, not when the event is raised).
    #[serde(serialize_with = "flow_as_ref")]
    pub flow: Option<FlowKey>,
    /// The flow's API ID.
    pub flow_id: Option<u64>,
    /// Evidence (kind-specific).
    pub evidence: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_their_display_form() {
        for a in [
            "0.0.0.0",
            "10.0.0.1",
            "192.168.100.255",
            "1.20.255.9",
            "2001:db8::1",
            "::ffff:0:1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(ip_string(ip), ip.to_string(), "{a}");
        }
    }
}
