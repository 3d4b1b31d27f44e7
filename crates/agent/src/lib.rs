//! # intscope-agent
//!
//! A host INT agent (SD-Fabric's "Enabling Host-INT", `shared/spec/sd-fabric-int.txt`): eBPF
//! programs watch packets where the Linux kernel receives, sends and drops them, and the agent
//! sends INT-XD postcards and drop and queue reports about them, in Telemetry Report v0.5 (as
//! SD-Fabric's hosts and switches do) or v2.0, to any INT collector.
//!
//! The kernel half is C (`bpf/agent.bpf.c`), compiled by Debian's clang during the build
//! (`build.rs`), CO-RE against the kernel's BTF; userspace is Rust over [aya], which loads the
//! object, relocates it and attaches it with no C library (libbpf) at run time. C rather than
//! Rust for the kernel half: aya's BPF target needs a nightly toolchain and bpf-linker, which
//! the package registries here do not give a stable build of, while clang 14 and libbpf's
//! headers come with Debian and are what kernel developers read.
//!
//! - [`bpf`]: loading, settings, maps, counters of the kernel half;
//! - [`event`]: what the kernel half sends, read without `unsafe`;
//! - [`kernel_drop`]: the kernel's drop reasons as report drop reasons;
//! - [`agent`]: the loop from events to reports, with [`intscope_node::Node`]'s watchlist,
//!   report formats and queue quota;
//! - [`metrics`]: the counters in Prometheus' text format, over HTTP;
//! - [`datapath`]: the INT-MD / INT-MX data path (`bpf/int.bpf.c`: source, transit and sink at
//!   tc), loaded instead of the postcard programs when interfaces have INT roles
//!   (`--int-port`);
//! - [`int_report`]: its events to Telemetry Reports, through the node's sink and INT-MX code;
//! - [`loss`]: a silent loss on an interface (`bpf/loss.bpf.c`), the lab's bad cable.

pub mod agent;
pub mod bpf;
pub mod datapath;
pub mod event;
pub mod int_report;
pub mod kernel_drop;
pub mod loss;
pub mod metrics;

pub use agent::{Agent, AgentConfig, AgentStats};

/// Why the agent cannot run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The build had no BPF toolchain.
    #[error(
        "this intscope was built without its BPF programs ({0}); install clang, libbpf-dev and bpftool and rebuild"
    )]
    NotBuilt(String),
    /// The kernel refused (a capability, a hook, BTF).
    #[error("BPF: {0}")]
    Bpf(String),
    /// A setting cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// An I/O error (the report socket, the namespace).
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}
