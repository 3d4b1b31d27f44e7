//! The house inside the crates (issue 30): no source file refers to another that refers back
//! to it, in any crate. A reference is what `../shared/tools/circles.py` reads: a `use` of
//! `crate::…` or `super::…` (with its `{…}` group), or such a path anywhere in the text, doc
//! links included (a lower module that names a higher one in its docs points up), unit tests
//! left out. Any circle fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every module of a crate's `src` (binaries left out), by path.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name() != Some("bin".as_ref()) {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension() != Some("rs".as_ref()) {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut m: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                m.pop();
            }
            out.insert(m, path);
        }
    }
    out
}

fn ident_len(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// The `crate::`/`super::` paths `text` refers to, as (root, segments).
fn references(text: &str) -> Vec<(String, Vec<String>)> {
    const TESTS: &str = "#[cfg(test)]";
    let unit_tests = text.match_indices(TESTS).map(|(at, _)| at).find(|&at| {
        let after = text[at + TESTS.len()..].trim_start();
        after
            .strip_prefix("mod tests")
            .is_some_and(|r| r.trim_start().starts_with('{'))
    });
    let text = &text[..unit_tests.unwrap_or(text.len())];
    let mut out = Vec::new();
    for root in ["crate", "super"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(root).map(|i| i + from) {
            from = i + root.len();
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let mut rest = &text[from..];
            let mut segments = Vec::new();
            while let Some(r) = rest.strip_prefix("::") {
                let n = ident_len(r);
                if n == 0 {
                    break;
                }
                segments.push(r[..n].to_string());
                rest = &r[n..];
            }
            if segments.is_empty() {
                continue;
            }
            // `use crate::a::{b, c::d}`: each item of the group too.
            let is_use = text[..i].trim_end().ends_with("use");
            if is_use && let Some(group) = rest.strip_prefix("::{") {
                let group = &group[..group.find(['}', ';']).unwrap_or(group.len())];
                for item in group.split(',') {
                    let item = item.trim();
                    let n = ident_len(item);
                    if n > 0 && &item[..n] != "self" {
                        let mut s = segments.clone();
                        s.push(item[..n].to_string());
                        out.push((root.to_string(), s));
                    }
                }
            }
            out.push((root.to_string(), segments));
        }
    }
    out
}

/// The modules of one crate each module refers to.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules(src);
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|k| path[..k].to_vec())
            .find(|p| mods.contains_key(p))
    };
    let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let is_mod_file = file
            .file_name()
            .is_some_and(|f| f == "mod.rs" || f == "lib.rs" || f == "main.rs");
        let edges = g.entry(m.clone()).or_default();
        for (root, segments) in references(&text) {
            let path: Vec<String> = if root == "crate" {
                segments
            } else {
                // `super` of a file module is its parent's module; of a mod.rs, the one above.
                let mut up = m.clone();
                if !is_mod_file || file.file_name().is_some_and(|f| f == "mod.rs") {
                    up.pop();
                }
                up.into_iter().chain(segments).collect()
            };
            if let Some(t) = resolve(&path)
                && &t != m
                && !t.is_empty()
            {
                edges.insert(t);
            }
        }
    }
    g
}

/// Strongly connected groups of two or more modules.
fn circles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    // Two modules are in one circle when each reaches the other.
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for t in g.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&Module, BTreeSet<Module>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<Module>> = Vec::new();
    for m in g.keys() {
        if out.iter().any(|c| c.contains(m)) {
            continue;
        }
        let circle: BTreeSet<Module> = reaches[m]
            .iter()
            .filter(|t| reaches.get(t).is_some_and(|r| r.contains(m)))
            .cloned()
            .collect();
        if circle.len() > 1 {
            out.push(circle);
        }
    }
    out
}

#[test]
fn no_module_refers_to_one_that_refers_back() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names: Vec<String> = std::fs::read_dir(&crates)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("src").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 7, "every crate read: {names:?}");
    let mut bad = Vec::new();
    for name in &names {
        for circle in circles(&graph(&crates.join(name).join("src"))) {
            let files: BTreeSet<String> = circle.iter().map(|m| m.join("/")).collect();
            bad.push(format!("{name}: {files:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "modules that refer to each other (move the shared part below both):\n{}",
        bad.join("\n")
    );
}

/// The reader finds what a reader of the source would: grouped uses, paths in code and docs,
/// `super` from a file and from a `mod.rs`; not a test module's, nor a longer identifier's.
#[test]
fn references_are_read_as_the_house_tool_reads_them() {
    let text = "use crate::a::{B, c::D, self};\n/// see [`crate::e::F`]\nfn x() { super::g::h(); \
                my_crate::i::j(); }\n#[cfg(test)]\nmod tests { use crate::k; }";
    let found: BTreeSet<String> = references(text)
        .into_iter()
        .map(|(r, s)| format!("{r}::{}", s.join("::")))
        .collect();
    let expected: BTreeSet<String> = [
        "crate::a",
        "crate::a::B",
        "crate::a::c",
        "crate::e::F",
        "super::g::h",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(found, expected);
    let mut g = BTreeMap::new();
    let m = |s: &str| vec![s.to_string()];
    g.insert(m("a"), BTreeSet::from([m("b")]));
    g.insert(m("b"), BTreeSet::from([m("c")]));
    g.insert(m("c"), BTreeSet::from([m("a")]));
    g.insert(m("d"), BTreeSet::from([m("a")]));
    assert_eq!(circles(&g), vec![BTreeSet::from([m("a"), m("b"), m("c")])]);
}
