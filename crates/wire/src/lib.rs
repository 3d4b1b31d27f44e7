//! # intscope-wire
//!
//! Bytes ⇄ typed values for In-band Network Telemetry: every INT v2.1 header and shim
//! (`shared/spec/int-dataplane-spec-v2.1.mdk`), Telemetry Report v2.0
//! (`telemetry-report-v2.0.mdk`), and the INT v1.0 / v0.5 and Report v1.0 / v0.5 formats that
//! deployed equipment (ONOS/SD-Fabric, GEANT, AmLight, BMv2) still emits.
//!
//! Shape (the smoltcp pattern): a checked view or a `parse` over borrowed bytes, plus an owned
//! `Repr` with `emit`; variable-length parts (metadata stacks, coalesced reports, TLVs) are lazy
//! iterators of `Result`. No I/O, no clock, no allocation on the decode path.
//!
//! **Panic contract.** Decoders take arbitrary bytes and return [`Error`] — they never panic
//! (fuzzed: `fuzz/`). The headers a node builds or rewrites in place (UDP, IPv4, IPv6, GRE,
//! Geneve, VXLAN-GPE, Destination) emit into checked views: a buffer too short for the `Repr` is
//! an error at the view's constructor or at `emit`, never a panic. The other `emit` functions
//! write into a buffer the caller sized for the `Repr`.
//!
//! Hand-written here: the INT-specific formats, GRE / VXLAN-GPE / Geneve (not in etherparse) and
//! RFC 1624 checksum updates. Ethernet, VLAN, IPv4, IPv6 and TCP/UDP headers come from
//! etherparse.
#![deny(unsafe_code)]

mod block;
pub mod checksum;
pub mod destination;
#[cfg(feature = "dissect")]
pub mod dissect;
pub mod domain;
pub mod drop_reason;
pub mod encap;
pub mod error;
mod field;
pub mod int;
pub mod ip;
pub mod legacy;
mod legacy_block;
pub mod locate;
pub mod md;
pub mod metadata;
pub mod mx;
pub mod report;
pub mod shim;
pub mod tunnel;
pub mod udp;
pub mod warning;

pub use error::{Error, ErrorKind, Field, Layer, Result};
pub use int::{Encap, IntBlock, IntHeader};
pub use locate::{DetectConfig, FlowKey, Packet, Start};
pub use metadata::{HopMetadata, HopView};
pub use report::Report;
pub use warning::{Warning, Warnings};
