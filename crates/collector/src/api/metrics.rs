//! `/metrics`: the counters and a bounded inventory of series, in Prometheus text.

use std::sync::atomic::Ordering;

use axum::extract::State as AxState;
use axum::http::header;
use axum::response::IntoResponse;
use intscope_core::counters::{self, Samples};

use crate::openmetrics;

use intscope_core::Snapshot;

use super::context::{Api, Shared};
use super::fabric::utilization;
use super::stats::sample_counters;

/// Series `/metrics` may still render; those beyond are counted instead.
pub(super) struct Budget {
    left: usize,
    truncated: u64,
}

impl Budget {
    fn take(&mut self) -> bool {
        if self.left == 0 {
            self.truncated += 1;
            false
        } else {
            self.left -= 1;
            true
        }
    }
}

/// Adds the network's per-entity series (loss per source, queues, ports, drops per node, in
/// that order) while `budget` lasts.
pub(super) fn sample_inventory(
    s: &Snapshot,
    full_scale: u32,
    budget: &mut Budget,
    out: &mut Samples,
) {
    for ((node, hw), st) in s.sources() {
        // Two series a source, each within the budget.
        if !budget.take() {
            continue;
        }
        let (node, hw) = (node.to_string(), hw.to_string());
        out.add(&counters::REPORTS_LOST, &[&node, &hw], st.reports_lost);
        if budget.take() {
            out.add(&counters::REPORT_GROUPS_LOST, &[&node, &hw], st.groups_lost);
        }
    }
    for (k, qs) in s.queues() {
        if !budget.take() {
            continue;
        }
        let l = [
            k.node().to_string(),
            k.port().to_string(),
            k.queue().to_string(),
        ];
        let l = [l[0].as_str(), l[1].as_str(), l[2].as_str()];
        out.add(&counters::QUEUE_OCCUPANCY, &l, u64::from(qs.occupancy));
        if let Some(lat) = qs.hop_latency {
            out.add(&counters::QUEUE_HOP_LATENCY, &l, u64::from(lat));
        }
    }
    for (node, n) in s.nodes() {
        let node_s = node.to_string();
        for (port, ps) in &n.ports {
            if let Some(u) = ps.tx_util {
                if !budget.take() {
                    continue;
                }
                let port = port.to_string();
                out.add(
                    &counters::PORT_TX_UTILIZATION,
                    &[&node_s, &port],
                    u64::from(u),
                );
                if let Some(r) = utilization(Some(u), full_scale) {
                    out.add_float(&counters::PORT_TX_UTILIZATION_RATIO, &[&node_s, &port], r);
                }
            }
        }
        for (reason, count) in &n.drops {
            if !budget.take() {
                continue;
            }
            let name = intscope_wire::report::drop_reason_name(*reason)
                .map_or_else(|| reason.to_string(), str::to_string);
            out.add(&counters::DROPS, &[&node_s, &name], *count);
        }
    }
}

/// Renders the metrics in the OpenMetrics text format: the counters of [`sample_counters`] (as
/// `/api/stats` shows them) and the network's per-entity series, all declared in [`counters`].
/// Label values come from small sets (outcome, version, kind) or from the network's own
/// inventory (node, port, queue). The inventory's series stop at `max_series` (in the order
/// sources, queues, ports, drops); `intscope_metrics_series_truncated` says how many were left
/// out, so the answer's size and time stay bounded whatever the input. Everything is read from
/// the published snapshot, never under the shard locks.
pub fn render_metrics(api: &Api) -> String {
    let published = api.collector.snapshot();
    let mut samples = Samples::default();
    sample_counters(api, &published, &mut samples);
    let mut budget = Budget {
        left: api.cfg.max_series,
        truncated: 0,
    };
    sample_inventory(
        &published.state,
        api.collector.config.tx_util_full_scale,
        &mut budget,
        &mut samples,
    );
    api.stats
        .metrics_series_truncated
        .store(budget.truncated, Ordering::Relaxed);
    samples.add(&counters::METRICS_SERIES_TRUNCATED, &[], budget.truncated);
    if let Some(w) = api.webhook.get() {
        w.sample(&mut samples);
    }
    openmetrics::text(samples)
}

pub(super) async fn metrics(AxState(api): Shared) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        render_metrics(&api),
    )
}
