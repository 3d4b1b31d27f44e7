//! Incidents: the one typed shape of "what hurts, where, since when, because of whom" that the
//! detectors produce, the store keeps (SQLite and ClickHouse alike) and the console shows.
//!
//! An incident is an episode with a lifecycle: it starts with the first evidence of one cause at
//! one place, takes updates while the evidence lasts (`ongoing`), and ends (`resolved`) when the
//! place is back to normal. One place and cause has at most one ongoing incident, so a storm of
//! observations becomes one incident with counts, not a storm of events.
//!
//! Every time in an incident is the switches' (report time, the clock the evidence carries), so
//! a start, a peak and an end can be compared; the collector's own receive time of the first
//! evidence is kept apart in [`Incident::received_ns`].
//!
//! Bounds: an incident lists at most [`MAX_INCIDENT_FLOWS`] flows (the most involved first);
//! [`IncidentCounts::flows`] counts them all.

use intscope_wire::locate::FlowKey;
use serde::Serialize;

use crate::evidence::Evidence;
use crate::flow_ref::FlowRef;

/// Most flows an incident lists (the most involved first; the rest are only counted).
pub const MAX_INCIDENT_FLOWS: usize = 32;

/// What kind of trouble, which also says what the place is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum IncidentKind {
    /// A queue held more than the congestion threshold (place: node, port, queue).
    Congestion,
    /// A congestion episode shorter than the microburst window (decided when it ends).
    Microburst,
    /// Hop latency far above the port's baseline (place: node, egress port).
    Latency,
    /// Packets dropped (place: node and port; `cause`: the drop reason's name, `silent` for
    /// packets seen at a hop and never at the next, with the next hop as the peer).
    Drop,
    /// Telemetry reports lost between a switch and the collector (place: node, hw_id).
    ReportLoss,
    /// Flows moved to other paths (place: the link or node they left, `cause` `link` or
    /// `node`; or where they went back to, `link-restored` or `node-restored`; its flows are
    /// the ones that moved).
    PathChange,
    /// The INT hop limit was reached (E bit): a long path or a forwarding loop.
    HopLimit,
    /// A node could not add its metadata because of the MTU (M bit).
    Mtu,
    /// Hops without INT on the path (place: the last INT hop and its egress port, behind which
    /// they hide, or the hidden node itself when the links seen name it; the next INT hop,
    /// which differs from flow to flow, is in the evidence).
    NonIntHops,
}

impl IncidentKind {
    /// Every kind, for metrics and quotas.
    pub const ALL: [IncidentKind; 9] = [
        IncidentKind::Congestion,
        IncidentKind::Microburst,
        IncidentKind::Latency,
        IncidentKind::Drop,
        IncidentKind::ReportLoss,
        IncidentKind::PathChange,
        IncidentKind::HopLimit,
        IncidentKind::Mtu,
        IncidentKind::NonIntHops,
    ];

    /// Label value (kebab-case, as serialized).
    pub fn label(self) -> &'static str {
        match self {
            IncidentKind::Congestion => "congestion",
            IncidentKind::Microburst => "microburst",
            IncidentKind::Latency => "latency",
            IncidentKind::Drop => "drop",
            IncidentKind::ReportLoss => "report-loss",
            IncidentKind::PathChange => "path-change",
            IncidentKind::HopLimit => "hop-limit",
            IncidentKind::Mtu => "mtu",
            IncidentKind::NonIntHops => "non-int-hops",
        }
    }

    /// The kind of a label.
    pub fn from_label(label: &str) -> Option<IncidentKind> {
        IncidentKind::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// Whether the evidence still lasts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum IncidentState {
    /// Evidence still arrives, or the place has not yet been seen normal again.
    Ongoing,
    /// The place was seen normal again (or went quiet for the documented time).
    Resolved,
}

/// How much it hurts, for ranking (most severe first sorts `Critical` last: compare with `>`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Worth knowing, nothing lost (a microburst, a short latency excursion).
    Info,
    /// Service degraded (congestion, latency, report loss).
    Warning,
    /// Packets lost or flows moved.
    Major,
    /// Loss or moves at a scale that takes a link or node out (many flows, or a silent drop).
    Critical,
}

/// Where: a node, port or queue, or a link (the place and its peer), or a reporter (node and
/// hw_id). Fields a kind does not use are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct IncidentPlace {
    /// Node ID.
    pub node: Option<u32>,
    /// Port (egress unless the kind says otherwise).
    pub port: Option<u32>,
    /// Queue.
    pub queue: Option<u8>,
    /// The far end of the link leaving `port`: node...
    pub peer_node: Option<u32>,
    /// ...and its ingress port.
    pub peer_port: Option<u32>,
    /// The reporter's hardware subsystem (report loss).
    pub hw_id: Option<u8>,
}

/// Why an incident ended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// A normal sample at the place (occupancy at or below `congestion_end`, a hop latency
    /// within its baseline's bounds): `end_ns` is that sample's time.
    Normal,
    /// No evidence for the kind's quiet time: `end_ns` is the last evidence's time.
    Quiet,
    /// Resolved early to keep its kind within the ongoing quota (`end_ns`: last evidence).
    Evicted,
}

/// What an incident counted, each named for what it counts. A count missing from a stored
/// incident (written by an older version) reads as 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct IncidentCounts {
    /// Samples (hops in reports) that showed the anomaly.
    pub samples: u64,
    /// Reports that carried evidence (drop reports are filtered by switches to about one per
    /// flow per second, so this is not a count of packets).
    pub reports: u64,
    /// Packets dropped, where the switches count them (`None` when only reports are known).
    pub packets_dropped: Option<u64>,
    /// Telemetry reports lost (report loss), estimated from sequence gaps.
    pub reports_lost: u64,
    /// Distinct flows involved (exact up to `incidents::TRACKED_FLOWS`; [`Incident::flows`]
    /// lists the first [`MAX_INCIDENT_FLOWS`]).
    pub flows: u64,
    /// Episodes merged into it: 1, plus one for each end followed by a restart at the same
    /// place within `incident_merge_ns` (flapping).
    pub episodes: u64,
}

/// The unit of a peak value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// Queue occupancy in the device's unit (cells or bytes, as the switch reports it).
    Occupancy,
    /// Nanoseconds.
    Nanoseconds,
    /// Reports.
    Reports,
    /// Packets.
    Packets,
    /// Hops.
    Hops,
    /// Flows.
    Flows,
}

/// The worst value an incident saw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Peak {
    /// The value.
    pub value: u64,
    /// Its unit.
    pub unit: Unit,
    /// When (switch time, ns since the epoch).
    pub at_ns: u64,
}

/// A flow an incident involves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct IncidentFlow {
    /// The flow (served as a [`FlowRef`], read back from one).
    #[serde(serialize_with = "flow_ref", deserialize_with = "flow_key")]
    pub flow: FlowKey,
    /// Its API ID (in the collector that saw it).
    pub flow_id: u64,
    /// Its share of the incident (of a queue's occupancy, of the drops), when one is known
    /// (three decimals).
    pub share: Option<f64>,
    /// Samples of this flow among the incident's.
    pub samples: u64,
}

fn flow_ref<S: serde::Serializer>(flow: &FlowKey, s: S) -> Result<S::Ok, S::Error> {
    FlowRef::from(flow).serialize(s)
}

/// The key a [`FlowRef`] was written from (IPv4 addresses back as IPv4-mapped IPv6).
fn flow_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<FlowKey, D::Error> {
    use serde::de::Error;
    let r: FlowRef = serde::Deserialize::deserialize(d)?;
    let ip = |text: &str| {
        text.parse::<std::net::IpAddr>()
            .map(|ip| match ip {
                std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                std::net::IpAddr::V6(v6) => v6,
            })
            .map_err(|e| D::Error::custom(format!("flow address {text:?}: {e}")))
    };
    Ok(FlowKey {
        src: ip(&r.src)?,
        dst: ip(&r.dst)?,
        proto: r.proto,
        src_port: r.src_port,
        dst_port: r.dst_port,
    })
}

/// One incident. Its JSON is its fields in declaration order under these names
/// (`docs/collector-api.openapi.yaml`, schema `Incident`).
///
/// `E` is the evidence's type: the typed `Evidence` while the incident is live, its JSON
/// (`serde_json::Value`) once read back from a store, so the stored shape cannot drift from the
/// live one.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Incident<E = Evidence> {
    /// Increasing ID (unique within a collector; a cluster prefixes the collector's ID).
    pub id: u64,
    /// What.
    pub kind: IncidentKind,
    /// Where.
    pub place: IncidentPlace,
    /// The cause within the kind (a drop reason's name, `silent`, `link-down`, ...), when known.
    pub cause: Option<String>,
    /// Ongoing or resolved.
    pub state: IncidentState,
    /// How much it hurts.
    pub severity: Severity,
    /// Switch time of the first evidence, ns since the epoch.
    pub start_ns: u64,
    /// The start lies within this much before `start_ns` (time since the last normal sample
    /// before it; 0 when unknown or exact).
    pub start_uncertainty_ns: u64,
    /// Switch time of the newest evidence.
    pub last_update_ns: u64,
    /// Switch time of the first normal sample after it (or of its last evidence when it ended
    /// by going quiet or was evicted), once resolved.
    pub end_ns: Option<u64>,
    /// The end lies within this much before `end_ns` (time from the last anomalous sample to
    /// the normal one; 0 when it ended quiet: then it lies after `end_ns`, within the quiet
    /// time).
    pub end_uncertainty_ns: u64,
    /// Why it ended, once resolved.
    pub end_reason: Option<EndReason>,
    /// The collector's receive time of the first evidence, ns since the epoch (its own clock,
    /// kept apart from the switches'; `None` in replays without one).
    pub received_ns: Option<u64>,
    /// Evidence items merged into it (observations after the first).
    pub updates: u64,
    /// What it counted.
    pub counts: IncidentCounts,
    /// The worst value seen.
    pub peak: Option<Peak>,
    /// The threshold it crossed (same unit as the peak), when one applies.
    pub threshold: Option<u64>,
    /// The normal value before it (a latency baseline, frozen while the incident lasts).
    pub baseline: Option<u64>,
    /// The flows involved, most involved first (at most [`MAX_INCIDENT_FLOWS`]).
    pub flows: Vec<IncidentFlow>,
    /// The fault's other symptoms, earliest first: the kind, place and cause above are the
    /// root cause's (see `docs/detection.md`); an incident stored by an older version has none.
    #[serde(default)]
    pub symptoms: Vec<Symptom>,
    /// The first evidence in full (paths before and after, the drop reason code, ...).
    pub evidence: Option<E>,
}

/// One symptom of an incident besides its root: a kind of evidence at one place, with its own
/// span (congestion's latency and tail drops at the same port; the latency a loop adds at
/// each of its hops).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Symptom {
    /// What.
    pub kind: IncidentKind,
    /// Where.
    pub place: IncidentPlace,
    /// The cause within the kind (a drop reason's name), when known.
    pub cause: Option<String>,
    /// Switch time of its first evidence.
    pub start_ns: u64,
    /// Switch time of its newest evidence.
    pub last_update_ns: u64,
    /// Switch time of its end, once it ended.
    pub end_ns: Option<u64>,
    /// Samples that showed it.
    pub samples: u64,
    /// Distinct flows it involved.
    pub flows: u64,
    /// Its worst value.
    pub peak: Option<Peak>,
}

impl Symptom {
    /// The symptom an incident of the engine is.
    pub fn of<E>(i: &Incident<E>) -> Self {
        Symptom {
            kind: i.kind,
            place: i.place,
            cause: i.cause.clone(),
            start_ns: i.start_ns,
            last_update_ns: i.last_update_ns,
            end_ns: i.end_ns,
            samples: i.counts.samples,
            flows: i.counts.flows,
            peak: i.peak,
        }
    }
}

impl<E> Incident<E> {
    /// Duration on the switches' clock: to the end, or to the newest evidence while ongoing.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns
            .unwrap_or(self.last_update_ns)
            .saturating_sub(self.start_ns)
    }
}

impl Incident {
    /// As JSON (what the API serves and the store keeps).
    pub fn to_json(&self) -> serde_json::Value {
        // Only maps with non-string keys fail to serialize; there are none.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_match_serde() {
        for k in IncidentKind::ALL {
            assert_eq!(IncidentKind::from_label(k.label()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::Value::String(k.label().into())
            );
        }
        assert_eq!(IncidentKind::from_label("congestion-start"), None);
    }

    #[test]
    fn json_shape_is_documented_one() {
        let key = FlowKey {
            src: "::ffff:10.0.0.1".parse().unwrap(),
            dst: "::ffff:10.0.0.2".parse().unwrap(),
            proto: 6,
            src_port: 1234,
            dst_port: 80,
        };
        let i = Incident {
            id: 7,
            kind: IncidentKind::Congestion,
            place: IncidentPlace {
                node: Some(101),
                port: Some(3),
                queue: Some(0),
                ..IncidentPlace::default()
            },
            cause: None,
            state: IncidentState::Ongoing,
            severity: Severity::Warning,
            start_ns: 1_000,
            start_uncertainty_ns: 10,
            last_update_ns: 5_000,
            end_ns: None,
            end_uncertainty_ns: 0,
            end_reason: None,
            received_ns: Some(2_000),
            updates: 3,
            counts: IncidentCounts {
                samples: 4,
                reports: 4,
                flows: 1,
                episodes: 1,
                ..IncidentCounts::default()
            },
            peak: Some(Peak {
                value: 1500,
                unit: Unit::Occupancy,
                at_ns: 3_000,
            }),
            threshold: Some(1000),
            baseline: None,
            flows: vec![IncidentFlow {
                flow: key,
                flow_id: 9,
                share: Some(1.0),
                samples: 4,
            }],
            symptoms: Vec::new(),
            evidence: None,
        };
        assert_eq!(i.duration_ns(), 4_000);
        let j = i.to_json();
        assert_eq!(j["kind"], "congestion");
        assert_eq!(j["state"], "ongoing");
        assert_eq!(j["severity"], "warning");
        assert_eq!(j["place"]["node"], 101);
        assert_eq!(j["place"]["peer_node"], serde_json::Value::Null);
        assert_eq!(j["peak"]["unit"], "occupancy");
        assert_eq!(j["flows"][0]["flow"]["src"], "10.0.0.1");
        assert_eq!(j["counts"]["packets_dropped"], serde_json::Value::Null);
        assert!(Severity::Critical > Severity::Info);
    }
}
