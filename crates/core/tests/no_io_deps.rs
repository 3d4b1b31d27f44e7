//! The core's rule, checked on its manifest: no I/O crate among its dependencies, so the
//! correlation core stays testable and embeddable (see the crate's top doc comment).

use toml::Table;

/// Crates that do I/O (sockets, files, databases, an async runtime, HTTP, a metrics registry
/// meant for a server): the collector's adapters use them, the core must not.
const IO_CRATES: &[&str] = &[
    "tokio",
    "axum",
    "hyper",
    "rusqlite",
    "socket2",
    "quinn-udp",
    "nix",
    "prometheus-client",
    "futures-util",
    "pcap",
    "signal-hook",
    "clickhouse",
    "reqwest",
];

fn manifest() -> Table {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let text = std::fs::read_to_string(path).expect("read crates/core/Cargo.toml");
    text.parse::<Table>()
        .expect("crates/core/Cargo.toml is TOML")
}

/// Every dependency name in the `[dependencies]` and `[build-dependencies]` tables, including
/// target-specific ones, with its `package = "..."` rename resolved.
fn dependency_names(manifest: &Table) -> Vec<String> {
    let mut tables: Vec<&Table> = Vec::new();
    for key in ["dependencies", "build-dependencies"] {
        if let Some(t) = manifest.get(key).and_then(|v| v.as_table()) {
            tables.push(t);
        }
    }
    if let Some(targets) = manifest.get("target").and_then(|v| v.as_table()) {
        for target in targets.values().filter_map(|v| v.as_table()) {
            for key in ["dependencies", "build-dependencies"] {
                if let Some(t) = target.get(key).and_then(|v| v.as_table()) {
                    tables.push(t);
                }
            }
        }
    }
    let mut names = Vec::new();
    for table in tables {
        for (name, spec) in table {
            let package = spec
                .as_table()
                .and_then(|s| s.get("package"))
                .and_then(|p| p.as_str())
                .unwrap_or(name);
            names.push(package.to_owned());
        }
    }
    names
}

fn io_crates_in(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| IO_CRATES.contains(&n.as_str()))
        .cloned()
        .collect()
}

#[test]
fn core_depends_on_no_io_crate() {
    let manifest = manifest();
    let names = dependency_names(&manifest);
    // The manifest really was read: the core decodes with the wire crate.
    assert!(
        names.iter().any(|n| n == "intscope-wire"),
        "expected intscope-wire among {names:?}"
    );
    let found = io_crates_in(&names);
    assert!(
        found.is_empty(),
        "intscope-core must do no I/O, but depends on {found:?}: put that code in \
         intscope-collector and pass what the core needs in"
    );
}

#[test]
fn the_check_catches_io_crates_however_they_are_declared() {
    let sample: Table = r#"
        [dependencies]
        serde = "1"
        tokio.workspace = true
        sock = { package = "socket2", version = "0.6" }
        [target.'cfg(unix)'.dependencies]
        nix = "0.30"
        [build-dependencies]
        rusqlite = "0.37"
    "#
    .parse()
    .unwrap();
    let mut found = io_crates_in(&dependency_names(&sample));
    found.sort();
    assert_eq!(found, ["nix", "rusqlite", "socket2", "tokio"]);
}
