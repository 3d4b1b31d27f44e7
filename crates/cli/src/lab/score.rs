//! The lab's ground truth (what it did: nodes, faults with their times and places, flows with
//! what they delivered) and its score against a collector's incidents: each fault raised at one
//! of its places within a second of its start, as one incident, and no incident that no fault
//! explains.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A place a fault may be seen at: a node, and the port when it matters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    /// Node ID.
    pub node: u32,
    /// Port (interface index in the node's namespace); `None`: any port of the node.
    pub port: Option<u32>,
}

/// One fault as the lab applied it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultTruth {
    /// The fault as scripted (the simulator's `[[fault]]` fields).
    pub fault: serde_json::Value,
    /// What was done, in words (`tc qdisc ... tbf` at leaf1's port h2, ...).
    pub what: String,
    /// Scripted start and end, s from the traffic's start.
    pub from_s: f64,
    /// Scripted end.
    pub until_s: f64,
    /// When it was in force: Unix ns when its commands started (None: never applied).
    pub start_ns: Option<u64>,
    /// When it was undone: Unix ns when the commands undoing it had returned.
    pub end_ns: Option<u64>,
    /// Where an incident of it may be placed.
    pub places: Vec<Place>,
    /// Whether the lab's INT can show it at all (a silent loss cannot in INT-MD): a fault that
    /// is not need not be raised, and incidents at its places in its window are still its.
    #[serde(default = "yes")]
    pub visible: bool,
}

fn yes() -> bool {
    true
}

/// One flow and what it delivered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowTruth {
    /// The flow (addresses, protocol, port, rate, size).
    pub flow: serde_json::Value,
    /// Bytes handed to the sender's kernel.
    pub sent_bytes: u64,
    /// Bytes the receiver read.
    pub received_bytes: u64,
    /// Failed sends and connects, resets.
    pub errors: u64,
    /// TCP connections made.
    pub connects: u64,
    /// Goodput each second, bit/s.
    pub goodput_bps: Vec<f64>,
    /// Indexes of the faults on its path (either direction: a TCP flow's ACKs count).
    pub affected_by: Vec<usize>,
    /// Mean goodput over the seconds no fault of `affected_by` was in force (nor within a
    /// second after), bit/s; the first second left out (connection set-up). None: no such
    /// second.
    pub clean_goodput_bps: Option<f64>,
}

/// A node of the lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeTruth {
    /// Its name (`leaf1`, `spine2`, `host1-2`).
    pub name: String,
    /// Its INT node ID.
    pub id: u32,
    /// Its network namespace (gone once the lab ended).
    pub namespace: String,
    /// Its interfaces' indexes (the ports in reports), by name.
    pub ports: BTreeMap<String, u32>,
}

/// Everything a lab run did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Truth {
    /// `xd`, `md`, `mx`, or `none` (no INT: the baseline).
    pub mode: String,
    /// Unix ns when the traffic started (fault times count from here).
    pub started_ns: u64,
    /// Unix ns when it stopped.
    pub ended_ns: u64,
    /// The nodes.
    pub nodes: Vec<NodeTruth>,
    /// The faults, in script order.
    pub faults: Vec<FaultTruth>,
    /// The flows.
    pub flows: Vec<FlowTruth>,
}

/// Tolerances of the score.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    /// An incident is raised in time when it starts at most this long after its fault, ns.
    pub in_time_ns: u64,
    /// ...or this long before (clock mapping, a command's own time), ns.
    pub early_ns: u64,
    /// After a fault ends, incidents of it may still start this long (a queue draining, the
    /// link's repair), ns.
    pub tail_ns: u64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            in_time_ns: 1_000_000_000,
            early_ns: 200_000_000,
            tail_ns: 1_000_000_000,
        }
    }
}

/// How one fault was seen.
#[derive(Debug, Clone, Serialize)]
pub struct FaultScore {
    /// Index in the truth's faults.
    pub fault: usize,
    /// What it was.
    pub what: String,
    /// Incidents at its places within its window (IDs).
    pub incidents: Vec<u64>,
    /// Their kinds and causes, as `kind/cause`.
    pub kinds: Vec<String>,
    /// The first one's start after the fault's, s (negative: before).
    pub delay_s: Option<f64>,
    /// The earliest it may have begun (its start less its `start_uncertainty_ns`) after the
    /// fault's start, s: a silent drop is confirmed a window after it began.
    pub earliest_s: Option<f64>,
    /// Raised at one of its places within the tolerance of its start.
    pub in_time: bool,
    /// Whether it had to be raised (the truth's `visible`).
    pub visible: bool,
}

/// The score of a lab run.
#[derive(Debug, Clone, Serialize)]
pub struct Score {
    /// Every visible fault raised in time, and no false incident.
    pub ok: bool,
    /// As `ok`, each visible fault exactly one incident and each other at most one.
    pub exact: bool,
    /// Per fault.
    pub faults: Vec<FaultScore>,
    /// Incidents no fault explains (place or time), as the API gave them.
    pub false_incidents: Vec<serde_json::Value>,
}

fn place_matches(place: &serde_json::Value, p: &Place) -> bool {
    let node = |k: &str| place[k].as_u64();
    let at_node =
        node("node") == Some(u64::from(p.node)) || node("peer_node") == Some(u64::from(p.node));
    at_node
        && p.port.is_none_or(|port| {
            (node("node") == Some(u64::from(p.node)) && node("port") == Some(u64::from(port)))
                || (node("peer_node") == Some(u64::from(p.node))
                    && node("peer_port") == Some(u64::from(port)))
        })
}

/// Scores `incidents` (the `incidents` array of `/api/incidents`) against `truth`.
pub fn score(truth: &Truth, incidents: &[serde_json::Value], tol: Tolerance) -> Score {
    let start_of = |i: &serde_json::Value| i["start_ns"].as_u64().unwrap_or(0);
    // An incident confirmed some time after it began says so (`start_uncertainty_ns`: a
    // silent drop dates from the last report past the loss): it may have begun any time in
    // `earliest..=start`.
    let earliest = |i: &serde_json::Value| {
        start_of(i).saturating_sub(i["start_uncertainty_ns"].as_u64().unwrap_or(0))
    };
    let window = |f: &FaultTruth| -> Option<(u64, u64)> {
        let s = f.start_ns?;
        let e = f.end_ns.unwrap_or(truth.ended_ns).max(s);
        Some((s.saturating_sub(tol.early_ns), e + tol.tail_ns))
    };
    let explains = |f: &FaultTruth, i: &serde_json::Value| {
        window(f).is_some_and(|(a, b)| earliest(i) <= b && start_of(i) >= a)
            && f.places.iter().any(|p| place_matches(&i["place"], p))
    };
    let mut faults = Vec::new();
    for (n, f) in truth.faults.iter().enumerate() {
        let mine: Vec<&serde_json::Value> = incidents.iter().filter(|i| explains(f, i)).collect();
        let first = mine.iter().map(|i| start_of(i)).min();
        let since_fault = |t: u64| f.start_ns.map(|s| (t as f64 - s as f64) / 1e9);
        let delay_s = first.and_then(since_fault);
        let earliest_s = mine.iter().map(|i| earliest(i)).min().and_then(since_fault);
        let in_time = f.start_ns.is_some_and(|s| {
            mine.iter().any(|i| {
                let t = start_of(i);
                t + tol.early_ns >= s && earliest(i) <= s + tol.in_time_ns
            })
        });
        faults.push(FaultScore {
            fault: n,
            what: f.what.clone(),
            incidents: mine.iter().filter_map(|i| i["id"].as_u64()).collect(),
            kinds: mine
                .iter()
                .map(|i| {
                    format!(
                        "{}/{}",
                        i["kind"].as_str().unwrap_or("?"),
                        i["cause"].as_str().unwrap_or("-")
                    )
                })
                .collect(),
            delay_s,
            earliest_s,
            in_time,
            visible: f.visible,
        });
    }
    let false_incidents: Vec<serde_json::Value> = incidents
        .iter()
        .filter(|i| !truth.faults.iter().any(|f| explains(f, i)))
        .cloned()
        .collect();
    let ok = faults.iter().all(|f| f.in_time || !f.visible) && false_incidents.is_empty();
    let exact = ok
        && faults
            .iter()
            .all(|f| f.incidents.len() == 1 || (!f.visible && f.incidents.is_empty()));
    Score {
        ok,
        exact,
        faults,
        false_incidents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn truth() -> Truth {
        Truth {
            mode: "xd".into(),
            started_ns: 0,
            ended_ns: 20_000_000_000,
            nodes: Vec::new(),
            faults: vec![FaultTruth {
                fault: json!({"kind": "slow-port"}),
                what: "slow port".into(),
                from_s: 2.0,
                until_s: 5.0,
                start_ns: Some(2_000_000_000),
                end_ns: Some(5_000_000_000),
                places: vec![Place {
                    node: 2,
                    port: Some(7),
                }],
                visible: true,
            }],
            flows: Vec::new(),
        }
    }

    fn incident(id: u64, node: u64, port: u64, start_ns: u64) -> serde_json::Value {
        json!({"id": id, "kind": "congestion", "cause": null, "start_ns": start_ns,
               "place": {"node": node, "port": port, "peer_node": null, "peer_port": null}})
    }

    #[test]
    fn a_fault_raised_in_time_at_its_place_scores() {
        let s = score(
            &truth(),
            &[incident(1, 2, 7, 2_300_000_000)],
            Tolerance::default(),
        );
        assert!(s.ok && s.exact, "{s:?}");
        assert_eq!(s.faults[0].incidents, vec![1]);
        assert!((s.faults[0].delay_s.unwrap() - 0.3).abs() < 1e-9);
    }

    #[test]
    fn late_elsewhere_or_outside_the_window_fails() {
        // Late: explained (inside the window) but not in time.
        let late = score(
            &truth(),
            &[incident(1, 2, 7, 3_500_000_000)],
            Tolerance::default(),
        );
        assert!(!late.ok && late.false_incidents.is_empty());
        // Another port of the node: false, and the fault missed.
        let elsewhere = score(
            &truth(),
            &[incident(1, 2, 8, 2_100_000_000)],
            Tolerance::default(),
        );
        assert!(!elsewhere.ok && elsewhere.false_incidents.len() == 1);
        // After the window.
        let after = score(
            &truth(),
            &[
                incident(1, 2, 7, 2_100_000_000),
                incident(2, 2, 7, 6_500_000_000),
            ],
            Tolerance::default(),
        );
        assert!(!after.ok && after.false_incidents.len() == 1);
        // Two incidents of one fault: raised, but not exact.
        let two = score(
            &truth(),
            &[
                incident(1, 2, 7, 2_100_000_000),
                incident(2, 2, 7, 2_200_000_000),
            ],
            Tolerance::default(),
        );
        assert!(two.ok && !two.exact);
    }

    #[test]
    fn a_link_matches_either_end() {
        let mut t = truth();
        t.faults[0].places = vec![Place {
            node: 101,
            port: None,
        }];
        let link = json!({"id": 3, "kind": "path-change", "cause": "link", "start_ns": 2_000_000_000u64,
            "place": {"node": 1, "port": 5, "peer_node": 101, "peer_port": 9}});
        assert!(score(&t, &[link], Tolerance::default()).ok);
    }

    #[test]
    fn a_fault_the_mode_cannot_show_need_not_be_raised_but_explains_its_incidents() {
        let mut t = truth();
        t.faults[0].visible = false;
        let none = score(&t, &[], Tolerance::default());
        assert!(none.ok && none.exact, "{none:?}");
        let one = score(
            &t,
            &[incident(1, 2, 7, 2_100_000_000)],
            Tolerance::default(),
        );
        assert!(
            one.ok && one.exact && one.false_incidents.is_empty(),
            "{one:?}"
        );
        // A visible fault still must be raised.
        t.faults[0].visible = true;
        assert!(!score(&t, &[], Tolerance::default()).ok);
    }

    #[test]
    fn an_incident_confirmed_late_is_in_time_when_its_uncertain_start_covers_the_fault() {
        let mut late = incident(1, 2, 7, 7_000_000_000);
        assert!(!score(&truth(), &[late.clone()], Tolerance::default()).ok);
        // Began between 1.5 s and 7 s, the fault at 2 s: in time.
        late["start_uncertainty_ns"] = json!(5_500_000_000u64);
        let s = score(&truth(), &[late.clone()], Tolerance::default());
        assert!(s.exact, "{s:?}");
        // Began between 3.5 s and 7 s: more than a second after the fault's start.
        late["start_uncertainty_ns"] = json!(3_500_000_000u64);
        assert!(!score(&truth(), &[late], Tolerance::default()).ok);
    }
}
