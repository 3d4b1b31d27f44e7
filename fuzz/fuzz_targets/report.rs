#![no_main]
//! Entry point: `Report::parse` and everything reachable from an individual report.
use intscope_wire::report::Report;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Report::parse(data) {
        for ir in r.individual_reports().flatten() {
            let _ = ir.hop();
            ir.tlvs().for_each(drop);
        }
    }
});
