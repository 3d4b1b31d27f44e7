//! SD-Fabric's report filters (shared/spec/sd-fabric-int.txt, "Smart filters and triggers"):
//! flow reports at most once per interval per 5-tuple unless the ingress/egress port or queue
//! changed or the hop latency moved by more than `minFlowHopLatencyChangeNs` (a power of two);
//! drop reports at the same rate per 5-tuple ("For flow reports and drop reports, the pipeline
//! generates 1 report/sec for each 5-tuple"), whatever the reason; queue congestion reports for
//! configured queues while latency is at or above `triggerNs`, "independently of the watchlist,
//! up to the quota", which resets once latency falls below `resetNs`.
//!
//! Bounds: the flow and drop tables hold the 5-tuples of the last interval (older entries are
//! swept once an interval); the quota table one entry per (egress port, configured queue).

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
    /// Flow and drop reports for every packet (no per-5-tuple limit) when false. Queue reports
    /// follow `queues` either way.
    pub enabled: bool,
    /// Flow and drop reports per 5-tuple at most once per this interval, ns.
    pub interval_ns: u64,
    /// `minFlowHopLatencyChangeNs`: a latency change at least this large reports at once
    /// (rounded down to a power of two, as SD-Fabric implements it).
    pub min_flow_hop_latency_change_ns: u32,
    /// Queues with congestion reports (`queueReportLatencyThresholds`; empty: none).
    pub queues: Vec<QueueThreshold>,
    /// Queue reports per congestion event (SD-Fabric: 1024).
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

/// The filter state of one node.
#[derive(Debug, Default)]
pub struct ReportFilter {
    cfg: FilterConfig,
    flows: HashMap<FlowKey, Last>,
    drops: HashMap<FlowKey, u64>,
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

    /// Whether a flow (or postcard) report for `flow` seen now at these ports / queue / latency
    /// is due: the first of the interval, or a change (always, with the filters off).
    pub fn flow(
        &mut self,
        flow: FlowKey,
        now: u64,
        ingress: u32,
        egress: u32,
        queue: u8,
        latency: u32,
    ) -> bool {
        if !self.cfg.enabled {
            return true;
        }
        self.sweep(now);
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
        due
    }

    /// Whether a drop report for `flow` is due: one per interval per 5-tuple, whatever the
    /// reason (always, with the filters off).
    pub fn drop(&mut self, flow: FlowKey, now: u64) -> bool {
        if !self.cfg.enabled {
            return true;
        }
        self.sweep(now);
        let last = self.drops.get(&flow).copied();
        if last.is_some_and(|t| now.saturating_sub(t) < self.cfg.interval_ns) {
            return false;
        }
        self.drops.insert(flow, now);
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

    /// Some queue has report thresholds (queue reports are possible at all).
    pub fn has_queues(&self) -> bool {
        !self.cfg.queues.is_empty()
    }

    /// A packet leaving through `port`'s `queue` after `latency` ns in it: `true` when it gets a
    /// queue report (latency at or above the trigger, quota left; the quota is spent). A latency
    /// below the reset threshold refills the quota. Queues without thresholds never report.
    pub fn queue(&mut self, port: u32, queue: u8, latency: u32) -> bool {
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
        assert!(f.flow(key(1), 0, 1, 2, 0, 1000), "first packet");
        // SD-Fabric compares latency masked to the step: 1000 and 1020 share a 256 ns step.
        assert!(
            !f.flow(key(1), S / 2, 1, 2, 0, 1020),
            "same ports, latency in the same step"
        );
        assert!(
            f.flow(key(1), S / 2 + 1, 1, 3, 0, 1020),
            "egress port changed"
        );
        assert!(
            f.flow(key(1), S / 2 + 2, 1, 3, 0, 1900),
            "latency moved to another 256 ns step"
        );
        assert!(!f.flow(key(1), S / 2 + 3, 1, 3, 0, 1950));
        assert!(f.flow(key(1), S * 2, 1, 3, 0, 1950), "a second passed");
        assert!(f.flow(key(2), S * 2, 1, 3, 0, 1950), "per 5-tuple");
    }

    #[test]
    fn the_tables_hold_only_the_last_interval() {
        let mut f = ReportFilter::new(FilterConfig {
            enabled: true,
            ..FilterConfig::default()
        });
        for k in 0..1000 {
            assert!(f.flow(key(k), 0, 1, 2, 0, 100));
            assert!(f.drop(key(k), 0));
        }
        assert_eq!(f.tracked(), 2000);
        assert!(!f.flow(key(1), S / 2, 1, 2, 0, 100), "still suppressed");
        // An interval later the old entries are gone, and nothing changes for the flows.
        assert!(f.flow(key(1), S + 1, 1, 2, 0, 100));
        assert_eq!(f.tracked(), 1);
        assert!(!f.flow(key(1), S + 2, 1, 2, 0, 100), "remembered again");
        assert!(f.drop(key(7), S + 3), "due, as it was before");
    }

    #[test]
    fn drops_once_per_second_per_five_tuple() {
        let mut f = ReportFilter::new(FilterConfig {
            enabled: true,
            ..FilterConfig::default()
        });
        assert!(f.drop(key(1), 0));
        assert!(
            !f.drop(key(1), 10),
            "another drop (of any reason) in the second"
        );
        assert!(f.drop(key(2), 10), "another 5-tuple");
        assert!(f.drop(key(1), S + 10), "a second later");
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
        assert!(!f.queue(2, 0, 100));
        let congested: Vec<bool> = (0..5).map(|_| f.queue(2, 0, 5000)).collect();
        assert_eq!(
            congested,
            vec![true, true, true, false, false],
            "quota 3 per event"
        );
        assert!(!f.queue(2, 0, 1500), "between reset and trigger: no report");
        assert!(!f.queue(2, 0, 5000), "and no refill");
        assert!(!f.queue(2, 0, 900), "below trigger/2: quota reset");
        assert!(f.queue(2, 0, 5000));
        assert!(
            f.queue(3, 0, 5000),
            "another port's queue 0 has its own quota"
        );
        assert!(!f.queue(2, 7, 5000), "queue 7 has no threshold");
    }

    #[test]
    fn queue_reports_do_not_need_the_flow_filters() {
        let mut f = ReportFilter::new(FilterConfig {
            queues: vec![QueueThreshold {
                queue_id: 1,
                trigger_ns: 10,
                reset_ns: Some(5),
            }],
            ..FilterConfig::default()
        });
        assert!(f.has_queues());
        assert!(f.queue(1, 1, 10), "at the trigger");
        assert!(!f.queue(1, 1, 9));
    }

    #[test]
    fn disabled_reports_everything() {
        let mut f = ReportFilter::default();
        assert!((0..10).all(|i| f.flow(key(1), i, 1, 2, 0, 1)));
    }
}
