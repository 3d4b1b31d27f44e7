//! SD-Fabric's report filters (shared/spec/sd-fabric-int.txt, "Smart filters and triggers"):
//! flow reports at most once per interval per 5-tuple unless the ingress/egress port or queue
//! changed or the hop latency moved by more than `minFlowHopLatencyChangeNs` (a power of two);
//! drop reports at the same rate per 5-tuple and reason; queue congestion reports for configured
//! queues once latency crosses `triggerNs`, up to a quota per event, reset below `resetNs`.

use std::collections::HashMap;

use intscope_wire::locate::FlowKey;

/// A queue's report thresholds (`queueReportLatencyThresholds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct QueueThreshold {
    /// Queue ID.
    pub queue_id: u8,
    /// Latency that triggers queue reports, ns.
    pub trigger_ns: u32,
    /// Latency below which the quota resets, ns (default trigger/2).
    pub reset_ns: Option<u32>,
}

/// Filter settings (the `[filters]` table of a node config).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterConfig {
    /// Report every packet (no filtering) when false.
    pub enabled: bool,
    /// Flow and drop reports per 5-tuple at most once per this interval, ns.
    pub interval_ns: u64,
    /// `minFlowHopLatencyChangeNs`: a latency change at least this large reports at once
    /// (rounded down to a power of two, as SD-Fabric implements it).
    pub min_flow_hop_latency_change_ns: u32,
    /// Queues with congestion reports.
    pub queues: Vec<QueueThreshold>,
    /// Queue reports per congestion event.
    pub queue_quota: u32,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            enabled: false,
            interval_ns: 1_000_000_000,
            min_flow_hop_latency_change_ns: 256,
            queues: Vec::new(),
            queue_quota: 1024,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Last {
    at: u64,
    ingress: u32,
    egress: u32,
    queue: u8,
    latency_bucket: u32,
}

/// What the filter decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Send a report.
    pub report: bool,
    /// It is a queue congestion report (Q flag).
    pub congested: bool,
    /// A flow report is due (first, interval passed, or a change).
    pub flow_due: bool,
}

/// The filter state of one node.
#[derive(Debug, Default)]
pub struct ReportFilter {
    cfg: FilterConfig,
    flows: HashMap<FlowKey, Last>,
    drops: HashMap<(FlowKey, u8), u64>,
    quota: HashMap<(u32, u8), u32>,
    /// When entries older than the interval are next forgotten (they suppress nothing).
    next_sweep: u64,
}

impl ReportFilter {
    /// A filter with these settings.
    pub fn new(cfg: FilterConfig) -> Self {
        ReportFilter {
            cfg,
            ..ReportFilter::default()
        }
    }

    fn bucket(&self, latency: u32) -> u32 {
        let step = self.cfg.min_flow_hop_latency_change_ns.max(1);
        let pow2 = 1u32 << (31 - step.leading_zeros());
        latency / pow2
    }

    /// A flow (or postcard) report for `flow` seen now at these ports / queue / latency.
    pub fn flow(
        &mut self,
        flow: FlowKey,
        now: u64,
        ingress: u32,
        egress: u32,
        queue: u8,
        latency: u32,
    ) -> Decision {
        if !self.cfg.enabled {
            return Decision {
                report: true,
                congested: false,
                flow_due: true,
            };
        }
        self.sweep(now);
        let congested = self.queue(egress, queue, latency);
        let bucket = self.bucket(latency);
        let interval = self.cfg.interval_ns;
        let next = Last {
            at: now,
            ingress,
            egress,
            queue,
            latency_bucket: bucket,
        };
        let due = match self.flows.get(&flow) {
            None => true,
            Some(l) => {
                now.saturating_sub(l.at) >= interval
                    || l.ingress != ingress
                    || l.egress != egress
                    || l.queue != queue
                    || l.latency_bucket != bucket
            }
        };
        if due {
            self.flows.insert(flow, next);
        }
        let report = due || congested;
        Decision {
            report,
            congested,
            flow_due: due,
        }
    }

    /// A drop report for `flow` with `reason`.
    pub fn drop(&mut self, flow: FlowKey, reason: u8, now: u64) -> bool {
        if !self.cfg.enabled {
            return true;
        }
        self.sweep(now);
        let last = self.drops.get(&(flow, reason)).copied();
        if last.is_some_and(|t| now.saturating_sub(t) < self.cfg.interval_ns) {
            return false;
        }
        self.drops.insert((flow, reason), now);
        true
    }

    /// Once an interval, forgets flows and drops last reported an interval ago or more: their
    /// next report is due whether they are remembered or not, so the tables hold only the flows
    /// of the last interval instead of every flow ever seen.
    fn sweep(&mut self, now: u64) {
        if now < self.next_sweep {
            return;
        }
        let interval = self.cfg.interval_ns;
        self.flows
            .retain(|_, l| now.saturating_sub(l.at) < interval);
        self.drops
            .retain(|_, at| now.saturating_sub(*at) < interval);
        self.next_sweep = now.saturating_add(interval.max(1));
    }

    /// Flows and drops remembered now.
    pub fn tracked(&self) -> usize {
        self.flows.len() + self.drops.len()
    }

    /// Queue congestion: `true` while latency is at or above the trigger and quota remains.
    fn queue(&mut self, port: u32, queue: u8, latency: u32) -> bool {
        let Some(t) = self
            .cfg
            .queues
            .iter()
            .find(|t| t.queue_id == queue)
            .copied()
        else {
            return false;
        };
        let quota = self
            .quota
            .entry((port, queue))
            .or_insert(self.cfg.queue_quota);
        if latency < t.reset_ns.unwrap_or(t.trigger_ns / 2) {
            *quota = self.cfg.queue_quota;
        }
        if latency >= t.trigger_ns && *quota > 0 {
            *quota -= 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: u16) -> FlowKey {
        FlowKey {
            src: "::ffff:10.0.0.1".parse().unwrap(),
            dst: "::ffff:10.0.0.2".parse().unwrap(),
            proto: 17,
            src_port: p,
            dst_port: 80,
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn once_per_second_unless_something_changes() {
        let mut f = ReportFilter::new(FilterConfig {
            enabled: true,
            ..FilterConfig::default()
        });
        assert!(f.flow(key(1), 0, 1, 2, 0, 1000).report, "first packet");
        // SD-Fabric compares latency masked to the step: 1000 and 1020 share a 256 ns step.
        assert!(
            !f.flow(key(1), S / 2, 1, 2, 0, 1020).report,
            "same ports, latency in the same step"
        );
        assert!(
            f.flow(key(1), S / 2 + 1, 1, 3, 0, 1020).report,
            "egress port changed"
        );
        assert!(
            f.flow(key(1), S / 2 + 2, 1, 3, 0, 1900).report,
            "latency moved to another 256 ns step"
        );
        assert!(!f.flow(key(1), S / 2 + 3, 1, 3, 0, 1950).report);
        assert!(
            f.flow(key(1), S * 2, 1, 3, 0, 1950).report,
            "a second passed"
        );
        assert!(f.flow(key(2), S * 2, 1, 3, 0, 1950).report, "per 5-tuple");
    }

    #[test]
    fn the_tables_hold_only_the_last_interval() {
        let mut f = ReportFilter::new(FilterConfig {
            enabled: true,
            ..FilterConfig::default()
        });
        for k in 0..1000 {
            assert!(f.flow(key(k), 0, 1, 2, 0, 100).report);
            assert!(f.drop(key(k), 71, 0));
        }
        assert_eq!(f.tracked(), 2000);
        assert!(
            !f.flow(key(1), S / 2, 1, 2, 0, 100).report,
            "still suppressed"
        );
        // An interval later the old entries are gone, and nothing changes for the flows.
        assert!(f.flow(key(1), S + 1, 1, 2, 0, 100).report);
        assert_eq!(f.tracked(), 1);
        assert!(
            !f.flow(key(1), S + 2, 1, 2, 0, 100).report,
            "remembered again"
        );
        assert!(f.drop(key(7), 71, S + 3), "due, as it was before");
    }

    #[test]
    fn drops_once_per_second_per_reason() {
        let mut f = ReportFilter::new(FilterConfig {
            enabled: true,
            ..FilterConfig::default()
        });
        assert!(f.drop(key(1), 71, 0));
        assert!(!f.drop(key(1), 71, 10));
        assert!(f.drop(key(1), 29, 10), "another reason");
        assert!(f.drop(key(1), 71, S + 10));
    }

    #[test]
    fn queue_reports_up_to_the_quota_then_reset() {
        let q = QueueThreshold {
            queue_id: 0,
            trigger_ns: 2000,
            reset_ns: None,
        };
        let mut f = ReportFilter::new(FilterConfig {
            enabled: true,
            queues: vec![q],
            queue_quota: 3,
            ..FilterConfig::default()
        });
        f.flow(key(9), 0, 1, 2, 0, 100);
        let congested: Vec<bool> = (0..5)
            .map(|i| f.flow(key(9), 1 + i, 1, 2, 0, 5000).congested)
            .collect();
        assert_eq!(
            congested,
            vec![true, true, true, false, false],
            "quota 3 per event"
        );
        assert!(
            !f.flow(key(9), 10, 1, 2, 0, 900).congested,
            "below trigger/2: quota reset"
        );
        assert!(f.flow(key(9), 11, 1, 2, 0, 5000).congested);
        assert!(
            !f.flow(key(9), 12, 1, 2, 7, 5000).congested,
            "queue 7 has no threshold"
        );
    }

    #[test]
    fn disabled_reports_everything() {
        let mut f = ReportFilter::default();
        assert!((0..10).all(|i| f.flow(key(1), i, 1, 2, 0, 1).report));
    }
}
