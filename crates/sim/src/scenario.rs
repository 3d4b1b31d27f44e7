//! A simulation file (`intscope sim --topology FILE.toml`, `intscope demo --topology`): the
//! fabric (`[topology]`), the traffic mix (`[mix]`, with `burst_packets` for bursty traffic
//! within the links' capacity), a fault timeline in seconds (`[[fault]]`, `kind = "link-down"`,
//! `"silent-drop"`, ...) and the report network between fabric and collector (`[delivery]`:
//! `loss`, `duplicate`, `reorder` shares, `reorder_depth`, `seed`); `switch_clock_offset_s` sets
//! the switches' clocks that far from the collector's (switches without PTP). The built-in default shows
//! every fault kind within a minute; `examples/sim-xd-clean.toml` and `sim-xd-faults.toml` are
//! the 8-leaf, 4-spine, 400-flow fabric of issue #16.

use crate::fabric::{Delivery, Fault, MixShape, Scheduled, SimConfig, Xorshift};
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
    /// Shape of the traffic mix.
    pub mix: MixShape,
    /// Faults; the timeline repeats every `period_s` seconds.
    pub fault: Vec<TimedFault>,
    /// Length of the fault timeline, s.
    pub period_s: f64,
    /// Random faults added to the timeline in every period (drawn from `seed`; each 1–5 s long).
    pub random_faults: usize,
    /// The report network between the fabric and the collector.
    pub delivery: Delivery,
    /// What the switches' clocks read minus the collector's, s, in runs sent to a live collector
    /// (`demo`, `sim --collector`): 0 (the default) for PTP-synchronized switches; a switch set
    /// to local time instead of UTC reads hours off.
    pub switch_clock_offset_s: f64,
}

/// The farthest the switches' clocks may be set from the collector's: ten years, s.
pub const MAX_SWITCH_CLOCK_OFFSET_S: f64 = 10.0 * 365.25 * 86_400.0;

impl Scenario {
    /// [`Scenario::switch_clock_offset_s`] in ns; an error when it is not finite or beyond
    /// [`MAX_SWITCH_CLOCK_OFFSET_S`] either way.
    pub fn switch_clock_offset_ns(&self) -> Result<i64, String> {
        let s = self.switch_clock_offset_s;
        if !s.is_finite() || s.abs() > MAX_SWITCH_CLOCK_OFFSET_S {
            return Err(format!(
                "switch_clock_offset_s = {s}: expected at most ten years ({MAX_SWITCH_CLOCK_OFFSET_S} s) either way"
            ));
        }
        Ok((s * 1e9) as i64)
    }
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
            mix: MixShape::default(),
            period_s: 60.0,
            random_faults: 0,
            delivery: Delivery::default(),
            switch_clock_offset_s: 0.0,
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
    /// The fabric of this scenario with every switch in `mode` (other settings: the defaults).
    pub fn sim_config(&self, mode: intscope_node::Mode) -> SimConfig {
        SimConfig {
            topology: self.topology.clone(),
            mode,
            delivery: self.delivery.clone(),
            ..SimConfig::default()
        }
    }

    /// A fault of a random kind at a random place of the topology, starting within `span_s`.
    fn random_fault(&self, rng: &mut Xorshift, span_s: f64) -> TimedFault {
        let t = &self.topology;
        let leaf = |rng: &mut Xorshift| rng.between(1, u64::from(t.leaves.max(1))) as u32;
        let spine = |rng: &mut Xorshift| rng.between(1, u64::from(t.spines.max(1))) as u32;
        let host = |rng: &mut Xorshift| rng.between(1, u64::from(t.hosts_per_leaf.max(1))) as u32;
        let fault = match rng.next() % 6 {
            0 => Fault::LinkDown {
                leaf: leaf(rng),
                spine: spine(rng),
            },
            1 => {
                // Another leaf's subnet: the mix has no flows within a leaf.
                let l = leaf(rng);
                let others = u64::from(t.leaves.max(2)) - 2;
                Fault::RoutingMiss {
                    leaf: l,
                    dst_leaf: (l + rng.between(0, others) as u32) % t.leaves.max(1) + 1,
                }
            }
            2 => Fault::Incast {
                leaf: leaf(rng),
                host: host(rng),
                packets: rng.between(20, 60) as u32,
            },
            3 => Fault::NonIntSpine { spine: spine(rng) },
            4 => Fault::SmallMtu {
                spine: spine(rng),
                mtu: 1400,
            },
            _ => Fault::SlowPort {
                leaf: leaf(rng),
                host: host(rng),
                gbps: 0.1,
            },
        };
        let from_s = (rng.next() % 1000) as f64 / 1000.0 * (span_s - 1.0).max(0.0);
        let until_s = from_s + rng.between(1, 5) as f64;
        TimedFault {
            from_s,
            until_s,
            fault,
        }
    }

    /// The fault schedule, repeated to cover `duration_s`.
    pub fn schedule(&self, duration_s: f64) -> Vec<Scheduled> {
        let period = if self.period_s > 0.0 {
            self.period_s
        } else {
            f64::INFINITY
        };
        let mut out = Vec::new();
        let mut base = 0.0;
        let mut rng = Xorshift::new(self.seed ^ 0x5eed_fa17);
        while base < duration_s {
            let random: Vec<TimedFault> = (0..self.random_faults)
                .map(|_| self.random_fault(&mut rng, period.min(duration_s)))
                .collect();
            for t in self.fault.iter().chain(&random) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_shaped_by_the_file() {
        let sc: Scenario = toml::from_str(
            "flows = 12\n[mix]\nelephant_every = 4\nelephant_mbps = 400.0\nmouse_pps = 50.0\ntcp_share = 0.0",
        )
        .unwrap();
        let flows = crate::fabric::mix(&sc.topology, sc.flows, sc.seed, 1, &sc.mix);
        assert_eq!(flows.len(), 12);
        for (i, f) in flows.iter().enumerate() {
            if i % 4 == 0 {
                assert_eq!(
                    (f.size, f.pps),
                    (1400, 400e6 / (1400.0 * 8.0)),
                    "elephant {i}"
                );
            } else {
                assert_eq!(f.pps, 50.0, "mouse {i}");
                assert!(f.size < 600);
            }
            assert_eq!(f.proto, 17, "tcp_share 0: all UDP");
        }
        let tcp = |share: f64| {
            let shape = MixShape {
                tcp_share: share,
                ..MixShape::default()
            };
            let flows = crate::fabric::mix(&sc.topology, 1000, 3, 1, &shape);
            flows.iter().filter(|f| f.proto == 6).count()
        };
        assert_eq!(tcp(1.0), 1000);
        assert!((200..300).contains(&tcp(0.25)), "{}", tcp(0.25));
        assert_eq!(
            crate::fabric::mix(&sc.topology, 12, 1, 1, &MixShape::default()),
            crate::default_mix(&sc.topology, 12, 1, 1),
            "no [mix]: the default"
        );
    }

    #[test]
    fn switch_clocks_are_set_off_within_ten_years() {
        let off = |text: &str| {
            toml::from_str::<Scenario>(text)
                .unwrap()
                .switch_clock_offset_ns()
        };
        assert_eq!(off(""), Ok(0), "synchronized by default");
        assert_eq!(
            off("switch_clock_offset_s = -10800.0"),
            Ok(-10_800_000_000_000)
        );
        for bad in [
            "switch_clock_offset_s = 4e8",
            "switch_clock_offset_s = -4e8",
            "switch_clock_offset_s = nan",
        ] {
            let e = off(bad).unwrap_err();
            assert!(e.contains("at most ten years"), "{bad}: {e}");
        }
    }

    #[test]
    fn random_faults_are_reproducible_and_inside_the_fabric() {
        let sc: Scenario =
            toml::from_str("random_faults = 4\nperiod_s = 20.0\nfault = []").unwrap();
        let a = sc.schedule(60.0);
        assert_eq!(a.len(), 12, "four per 20 s period");
        assert_eq!(a, sc.schedule(60.0), "same seed, same faults");
        let other = Scenario {
            seed: 2,
            ..sc.clone()
        };
        assert_ne!(a, other.schedule(60.0));
        let t = &sc.topology;
        for s in &a {
            assert!(s.from_ns < 60_000_000_000 && s.until_ns > s.from_ns);
            let (leaf, spine) = match s.fault {
                Fault::LinkDown { leaf, spine } => (leaf, spine),
                Fault::RoutingMiss { leaf, dst_leaf } => {
                    assert_ne!(leaf, dst_leaf);
                    (leaf.max(dst_leaf), 1)
                }
                Fault::Incast { leaf, host, .. } | Fault::SlowPort { leaf, host, .. } => {
                    assert!((1..=t.hosts_per_leaf).contains(&host));
                    (leaf, 1)
                }
                Fault::NonIntSpine { spine } | Fault::SmallMtu { spine, .. } => (1, spine),
                Fault::SilentDrop { .. } => unreachable!("silent drops are scripted only"),
                Fault::Loop { .. } => unreachable!("loops are scripted only"),
                Fault::ReportOutage { .. } => unreachable!("outages are scripted only"),
            };
            assert!(
                (1..=t.leaves).contains(&leaf) && (1..=t.spines).contains(&spine),
                "{s:?}"
            );
        }
        let kinds: std::collections::HashSet<_> =
            a.iter().map(|s| std::mem::discriminant(&s.fault)).collect();
        assert!(kinds.len() >= 3, "a mix of kinds");
    }

    #[test]
    fn the_xd_scenarios_are_the_issues_fabric() {
        for text in [
            include_str!("../../../examples/sim-xd-clean.toml"),
            include_str!("../../../examples/sim-xd-faults.toml"),
        ] {
            let sc: Scenario = toml::from_str(text).unwrap();
            assert_eq!(
                (sc.topology.leaves, sc.topology.spines, sc.flows),
                (8, 4, 400)
            );
            assert_eq!(sc.mix.burst_packets, 4);
            let cfg = sc.sim_config(intscope_node::Mode::Xd);
            assert_eq!(cfg.delivery, sc.delivery);
            assert_eq!(cfg.topology, sc.topology);
        }
        let faults: Scenario =
            toml::from_str(include_str!("../../../examples/sim-xd-faults.toml")).unwrap();
        assert_eq!(faults.delivery.loss, 0.01);
        assert!(faults.schedule(60.0).iter().any(|s| s.fault
            == Fault::SilentDrop {
                leaf: 5,
                spine: 4,
                share: 1.0,
            }));
        let clean: Scenario =
            toml::from_str(include_str!("../../../examples/sim-xd-clean.toml")).unwrap();
        assert!(clean.schedule(600.0).is_empty(), "fault-free");
    }
}
