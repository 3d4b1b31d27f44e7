//! The ONOS network configuration of SD-Fabric's INT app, read as a node configuration
//! (shared/spec/sd-fabric-int.txt, "ONOS Configuration"), so a deployment's netcfg runs
//! unchanged: `intscope node --netcfg netcfg.json`.
//!
//! The app block is `apps."org.stratumproject.fabric.tna.inbandtelemetry".report` with
//! `collectorIp` and `collectorPort` (required), `minFlowHopLatencyChangeNs` (default 256),
//! `watchSubnets` (default empty: no flow and no drop reports) and
//! `queueReportLatencyThresholds` (queue ID → `triggerNs`, `resetNs` default `triggerNs`/2).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::config::{DropReports, Mode, NodeConfig, ReportFormat};
use crate::filter::QueueThreshold;

/// The app ID of SD-Fabric's INT app in the ONOS netcfg.
pub const APP_ID: &str = "org.stratumproject.fabric.tna.inbandtelemetry";

/// SD-Fabric's queue report quota per congestion event ("Currently the default quota is 1024 and
/// cannot be configured").
pub const SD_FABRIC_QUEUE_QUOTA: u32 = 1024;

/// Why a netcfg cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NetcfgError {
    /// Not JSON, or a field of the wrong JSON type.
    #[error("netcfg is not valid JSON for the INT app: {0}")]
    Json(#[from] serde_json::Error),
    /// No `apps."org.stratumproject.fabric.tna.inbandtelemetry".report` block.
    #[error("netcfg has no apps.\"{APP_ID}\".report block")]
    NoIntApp,
    /// A required field is absent.
    #[error("netcfg INT report block: {0} is required")]
    Missing(&'static str),
    /// A field's value cannot be used.
    #[error("netcfg INT report block: {field} = {value:?}: {why}")]
    Invalid {
        /// The netcfg field name.
        field: &'static str,
        /// The value found.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// `queueReportLatencyThresholds` values.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Threshold {
    trigger_ns: Option<u64>,
    reset_ns: Option<u64>,
}

/// The `report` block, exactly the fields the INT app knows (a typo is an error, not ignored).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Report {
    collector_ip: Option<String>,
    collector_port: Option<u64>,
    min_flow_hop_latency_change_ns: Option<u64>,
    #[serde(default)]
    watch_subnets: Vec<String>,
    #[serde(default)]
    queue_report_latency_thresholds: BTreeMap<String, Threshold>,
}

/// A netcfg read: where reports go, and the node configuration that behaves as an SD-Fabric
/// switch with this INT app configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// `collectorIp`:`collectorPort`.
    pub collector: SocketAddr,
    /// `base` with the netcfg's settings applied.
    pub config: NodeConfig,
}

fn invalid(field: &'static str, value: impl ToString, why: &'static str) -> NetcfgError {
    NetcfgError::Invalid {
        field,
        value: value.to_string(),
        why,
    }
}

/// Reads an ONOS netcfg (the whole document with `apps`, or the app's own object with `report`)
/// and applies it to `base`: INT-XD postcards (SD-Fabric's mode), Telemetry Report v0.5 (what
/// its collectors read), the smart filters on (1 flow or drop report per second per 5-tuple,
/// sooner on a hop latency change of `minFlowHopLatencyChangeNs`), drop reports for watched
/// flows only, `watchSubnets` as [`NodeConfig::watch_subnets`], queue reports for the queues in
/// `queueReportLatencyThresholds` with a quota of 1024, and the collector's port as a report
/// port (INT traffic is never watched). Everything else (node ID, device model) stays `base`'s.
pub fn import(json: &str, base: NodeConfig) -> Result<Imported, NetcfgError> {
    let doc: serde_json::Value = serde_json::from_str(json)?;
    let block = doc
        .pointer(&format!("/apps/{APP_ID}/report"))
        .or_else(|| doc.get("report"))
        .ok_or(NetcfgError::NoIntApp)?;
    let r: Report = serde_json::from_value(block.clone())?;
    let ip_text = r.collector_ip.ok_or(NetcfgError::Missing("collectorIp"))?;
    let ip: IpAddr = ip_text
        .parse()
        .map_err(|_| invalid("collectorIp", &ip_text, "not an IP address"))?;
    let port = r
        .collector_port
        .ok_or(NetcfgError::Missing("collectorPort"))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| invalid("collectorPort", port, "not a UDP port (1-65535)"))?;
    let min_change = r.min_flow_hop_latency_change_ns.unwrap_or(256);
    let min_change = u32::try_from(min_change).map_err(|_| {
        invalid(
            "minFlowHopLatencyChangeNs",
            min_change,
            "larger than 32 bits of nanoseconds",
        )
    })?;
    let mut subnets = Vec::with_capacity(r.watch_subnets.len());
    for s in &r.watch_subnets {
        let net: IpNet = s
            .parse()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| invalid("watchSubnets", s, "not an IP prefix"))?;
        subnets.push(net);
    }
    let mut queues = Vec::new();
    for (key, t) in &r.queue_report_latency_thresholds {
        let queue_id: u8 = key.parse().map_err(|_| {
            invalid(
                "queueReportLatencyThresholds",
                key,
                "a key is not a queue ID (0-255)",
            )
        })?;
        let trigger = t.trigger_ns.ok_or(NetcfgError::Missing(
            "queueReportLatencyThresholds.*.triggerNs",
        ))?;
        let trigger_ns = u32::try_from(trigger)
            .map_err(|_| invalid("triggerNs", trigger, "larger than 32 bits of nanoseconds"))?;
        let reset_ns = t
            .reset_ns
            .map(|r| {
                u32::try_from(r)
                    .map_err(|_| invalid("resetNs", r, "larger than 32 bits of nanoseconds"))
            })
            .transpose()?;
        queues.push(QueueThreshold {
            queue_id,
            trigger_ns,
            reset_ns,
        });
    }
    let mut config = base;
    config.mode = Mode::Xd;
    config.report_format = ReportFormat::V05;
    config.watch_subnets = subnets;
    config.drop_reports = DropReports::Watched;
    config.filters.enabled = true;
    config.filters.interval_ns = 1_000_000_000;
    config.filters.min_flow_hop_latency_change_ns = min_change;
    config.filters.queues = queues;
    config.filters.queue_quota = SD_FABRIC_QUEUE_QUOTA;
    if !config.report_ports.contains(&port) {
        config.report_ports.push(port);
    }
    Ok(Imported {
        collector: SocketAddr::new(ip, port),
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SD-Fabric's documented example, with the collector and a subnet filled in.
    const EXAMPLE: &str = r#"{
      "devices": {"device:leaf1": {"basic": {"pipeconf": "org.stratumproject.fabric-int"}}},
      "apps": {
        "org.stratumproject.fabric.tna.inbandtelemetry": {
          "report": {
            "collectorIp": "10.32.11.2",
            "collectorPort": 32766,
            "minFlowHopLatencyChangeNs": 256,
            "watchSubnets": ["10.32.11.0/24"],
            "queueReportLatencyThresholds": {
              "0": {"triggerNs": 2000, "resetNs": 500},
              "2": {"triggerNs": 1000}
            }
          }
        }
      }
    }"#;

    #[test]
    fn the_documented_example_imports() {
        let i = import(EXAMPLE, NodeConfig::default()).unwrap();
        assert_eq!(i.collector, "10.32.11.2:32766".parse().unwrap());
        let c = &i.config;
        assert_eq!((c.mode, c.report_format), (Mode::Xd, ReportFormat::V05));
        assert_eq!(c.watch_subnets, vec!["10.32.11.0/24".parse().unwrap()]);
        assert!(c.filters.enabled);
        assert_eq!(c.filters.min_flow_hop_latency_change_ns, 256);
        assert_eq!(c.filters.queue_quota, 1024);
        assert_eq!(
            c.filters.queues,
            vec![
                QueueThreshold {
                    queue_id: 0,
                    trigger_ns: 2000,
                    reset_ns: Some(500)
                },
                QueueThreshold {
                    queue_id: 2,
                    trigger_ns: 1000,
                    reset_ns: None
                },
            ]
        );
        assert!(c.report_ports.contains(&32766));
        c.validate().unwrap();
    }

    #[test]
    fn defaults_and_the_bare_app_object() {
        let i = import(
            r#"{"report": {"collectorIp": "::1", "collectorPort": 9999}}"#,
            NodeConfig::default(),
        )
        .unwrap();
        assert_eq!(i.collector, "[::1]:9999".parse().unwrap());
        assert_eq!(i.config.filters.min_flow_hop_latency_change_ns, 256);
        assert!(i.config.watch_subnets.is_empty(), "no flow or drop reports");
        assert!(i.config.filters.queues.is_empty());
        assert_eq!(i.config.report_ports, vec![32766, 9999]);
    }

    #[test]
    fn bad_netcfgs_say_what_is_wrong() {
        let err = |json: &str| import(json, NodeConfig::default()).unwrap_err().to_string();
        assert!(err("{").contains("not valid JSON"));
        assert!(err(r#"{"apps": {}}"#).contains("no apps."));
        assert!(err(r#"{"report": {"collectorPort": 1}}"#).contains("collectorIp is required"));
        assert!(err(r#"{"report": {"collectorIp": ""}}"#).contains("not an IP address"));
        assert!(
            err(r#"{"report": {"collectorIp": "10.0.0.1"}}"#).contains("collectorPort is required")
        );
        assert!(
            err(r#"{"report": {"collectorIp": "10.0.0.1", "collectorPort": 70000}}"#)
                .contains("not a UDP port")
        );
        let base = r#""collectorIp": "10.0.0.1", "collectorPort": 1"#;
        assert!(
            err(&format!(
                r#"{{"report": {{{base}, "watchSubnets": ["10.0.0.0/33"]}}}}"#
            ))
            .contains("not an IP prefix")
        );
        assert!(
            err(&format!(
                r#"{{"report": {{{base}, "queueReportLatencyThresholds": {{"x": {{"triggerNs": 1}}}}}}}}"#
            ))
            .contains("not a queue ID")
        );
        assert!(
            err(&format!(
                r#"{{"report": {{{base}, "queueReportLatencyThresholds": {{"1": {{"resetNs": 1}}}}}}}}"#
            ))
            .contains("triggerNs is required")
        );
        assert!(
            err(&format!(r#"{{"report": {{{base}, "colectorPort": 1}}}}"#))
                .contains("unknown field"),
            "a typo is an error"
        );
    }
}
