#![no_main]
//! Entry point: `IntBlock::parse` in every encapsulation, and its metadata stack.
use intscope_wire::domain::Registry;
use intscope_wire::int::{Encap, IntBlock, LengthSemantics};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static REGISTRY: std::sync::OnceLock<Option<Registry>> = std::sync::OnceLock::new();
    let registry = REGISTRY.get_or_init(|| Registry::from_toml(include_str!("../../examples/domains.toml")).ok());
    for encap in [Encap::Tcp, Encap::Udp, Encap::UdpNew, Encap::VxlanGpe, Encap::Geneve, Encap::Gre] {
        for sem in [LengthSemantics::Spec, LengthSemantics::CountsShim] {
            if let Ok(b) = IntBlock::parse_with(data, encap, sem) {
                b.stack(registry.as_ref()).0.for_each(drop);
                b.stack(None).0.for_each(drop);
            }
        }
    }
});
