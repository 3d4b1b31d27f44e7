//! A simulation file (`intscope sim --topology FILE.toml`, `intscope demo --topology`): the
//! fabric, the traffic mix and a fault timeline in seconds. The built-in default shows every
//! fault kind within a minute.

use crate::fabric::{Fault, Scheduled};
use crate::topology::Topology;

/// A fault with its time window in seconds.
// No deny_unknown_fields: serde cannot combine it with the flattened fault; the fault's own
// fields are still checked by its tagged enum.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct TimedFault {
    /// Start, s of virtual time.
    pub from_s: f64,
    /// End, s.
    pub until_s: f64,
    /// The fault.
    #[serde(flatten)]
    pub fault: Fault,
}

/// Everything a simulation run needs.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// The fabric.
    pub topology: Topology,
    /// Flows in the traffic mix.
    pub flows: usize,
    /// Seed of the traffic mix.
    pub seed: u64,
    /// Faults; the timeline repeats every `period_s` seconds.
    pub fault: Vec<TimedFault>,
    /// Length of the fault timeline, s.
    pub period_s: f64,
}

impl Default for Scenario {
    fn default() -> Self {
        let f = |from_s: f64, until_s: f64, fault: Fault| TimedFault {
            from_s,
            until_s,
            fault,
        };
        Scenario {
            topology: Topology::default(),
            flows: 64,
            seed: 1,
            period_s: 60.0,
            fault: vec![
                f(
                    3.0,
                    3.1,
                    Fault::Incast {
                        leaf: 3,
                        host: 1,
                        packets: 40,
                    },
                ),
                f(8.0, 18.0, Fault::LinkDown { leaf: 1, spine: 1 }),
                f(
                    12.0,
                    16.0,
                    Fault::RoutingMiss {
                        leaf: 2,
                        dst_leaf: 4,
                    },
                ),
                f(22.0, 28.0, Fault::NonIntSpine { spine: 2 }),
                f(
                    32.0,
                    36.0,
                    Fault::SmallMtu {
                        spine: 1,
                        mtu: 1400,
                    },
                ),
                f(
                    40.0,
                    41.0,
                    Fault::Loop {
                        spine: 2,
                        leaf: 3,
                        dst_leaf: 1,
                    },
                ),
                f(
                    48.0,
                    48.1,
                    Fault::Incast {
                        leaf: 1,
                        host: 2,
                        packets: 60,
                    },
                ),
                // The mix's first elephant (200 Mb/s) goes to 10.0.2.2: its port at 100 Mb/s
                // congests for seconds.
                f(
                    52.0,
                    54.0,
                    Fault::SlowPort {
                        leaf: 2,
                        host: 2,
                        gbps: 0.1,
                    },
                ),
            ],
        }
    }
}

impl Scenario {
    /// The fault schedule, repeated to cover `duration_s`.
    pub fn schedule(&self, duration_s: f64) -> Vec<Scheduled> {
        let period = if self.period_s > 0.0 {
            self.period_s
        } else {
            f64::INFINITY
        };
        let mut out = Vec::new();
        let mut base = 0.0;
        while base < duration_s {
            for t in &self.fault {
                if base + t.from_s < duration_s {
                    let ns = |s: f64| (s * 1e9) as u64;
                    out.push(Scheduled {
                        from_ns: ns(base + t.from_s),
                        until_ns: ns(base + t.until_s),
                        fault: t.fault.clone(),
                    });
                }
            }
            base += period;
        }
        out
    }
}
