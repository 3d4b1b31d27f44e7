//! What the plain (non-criterion) benchmarks share.

/// The flow count given on the command line (`cargo bench --bench NAME -- FLOWS`), else `default`.
pub fn flows_arg(default: u32) -> u32 {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}
