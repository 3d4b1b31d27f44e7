//! The flags every subcommand shares for recognising INT and reports (`shared/spec/README.md`
//! "Interface conventions").

use std::path::PathBuf;

use anyhow::{Context, Result};
use intscope_wire::domain::Registry;
use intscope_wire::locate::{DetectConfig, DscpMatch};

use crate::usage::{bail_usage, usage};

/// INT detection flags.
#[derive(Debug, Clone, clap::Args)]
pub struct DetectArgs {
    /// UDP destination port that signals INT (INT_TBD); repeatable. Default: none.
    #[arg(long = "int-udp-port", value_name = "P")]
    pub int_udp_ports: Vec<u16>,
    /// DSCP value (and mask) that signals INT after TCP/UDP, e.g. 0x17 or 0x20/0x20; "none" disables.
    #[arg(long = "int-dscp", value_name = "V[/MASK]", default_value = "0x17")]
    pub int_dscp: String,
    /// 64-bit probe marker before the shim, in hex.
    #[arg(long = "probe-marker", value_name = "HEX")]
    pub probe_marker: Option<String>,
    /// GRE protocol type of INT (TBD_INT), e.g. 0x4569.
    #[arg(long = "int-gre-proto", value_name = "ETHERTYPE")]
    pub int_gre_proto: Option<String>,
    /// UDP destination port of telemetry reports; repeatable. Default: 32766.
    #[arg(long = "report-port", value_name = "P")]
    pub report_ports: Vec<u16>,
    /// Domain-specific metadata registry (TOML, see examples/domains.toml).
    #[arg(long, value_name = "FILE.toml")]
    pub domains: Option<PathBuf>,
    /// Also read INT without any marking after TCP/UDP (in a report's copy only when its F bit
    /// is set), where every reserved field is zero and the lengths agree. Off by default: the
    /// spec leaves the marking to the operator, and without one any payload can look like INT.
    #[arg(long)]
    pub unmarked_int: bool,
}

fn parse_num(s: &str, what: &str) -> Result<u64> {
    let s = s.trim();
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| usage(format!("{what}: '{s}' is not a number")))
}

impl DetectArgs {
    /// The wire crate's detection config.
    pub fn config(&self) -> Result<DetectConfig> {
        let mut cfg = DetectConfig {
            int_udp_ports: self.int_udp_ports.clone(),
            unmarked_int: self.unmarked_int,
            verify_checksums: true,
            ..DetectConfig::default()
        };
        if !self.report_ports.is_empty() {
            cfg.report_ports = self.report_ports.clone();
        }
        cfg.dscp = if self.int_dscp.eq_ignore_ascii_case("none") {
            None
        } else {
            let (v, m) = self
                .int_dscp
                .split_once('/')
                .unwrap_or((&self.int_dscp, "0x3f"));
            let (value, mask) = (
                parse_num(v, "--int-dscp")?,
                parse_num(m, "--int-dscp mask")?,
            );
            if value > 0x3f || mask > 0x3f {
                bail_usage!(
                    "--int-dscp: DSCP values are 6 bits (0..=0x3f), got {}",
                    self.int_dscp
                );
            }
            Some(DscpMatch {
                value: value as u8,
                mask: mask as u8,
            })
        };
        if let Some(p) = &self.probe_marker {
            let h = p.trim_start_matches("0x");
            cfg.probe_marker = Some(
                u64::from_str_radix(h, 16)
                    .map_err(|_| usage(format!("--probe-marker: '{p}' is not 64-bit hex")))?,
            );
        }
        if let Some(g) = &self.int_gre_proto {
            let v = parse_num(g, "--int-gre-proto")?;
            cfg.gre_proto = Some(
                u16::try_from(v)
                    .map_err(|_| usage(format!("--int-gre-proto: {g} exceeds 16 bits")))?,
            );
        }
        Ok(cfg)
    }

    /// The domain registry, if `--domains` was given.
    pub fn registry(&self) -> Result<Option<Registry>> {
        load_registry(self.domains.as_ref())
    }
}

/// Loads the registry file, if one was given.
pub fn load_registry(path: Option<&PathBuf>) -> Result<Option<Registry>> {
    let Some(p) = path else { return Ok(None) };
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    Ok(Some(
        Registry::from_toml(&text).with_context(|| p.display().to_string())?,
    ))
}
