#![no_main]
//! Entry point: the whole `intscope dump` dissection of one frame.
use intscope_wire::dissect;
use intscope_wire::domain::Registry;
use intscope_wire::locate::DetectConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static REGISTRY: std::sync::OnceLock<Option<Registry>> = std::sync::OnceLock::new();
    let registry = REGISTRY.get_or_init(|| Registry::from_toml(include_str!("../../examples/domains.toml")).ok());
    let cfg = DetectConfig { int_udp_ports: vec![17768], report_ports: vec![32766, 17769], unmarked_int: true, verify_checksums: true, ..DetectConfig::default() };
    let _ = dissect::frame(1, data, &cfg, registry.as_ref());
});
