//! The house inside the crates (issue 30): no source file refers to another that refers back
//! to it, in any crate. A reference is what `../shared/tools/circles.py` reads: a `use` of
//! `crate::…` or `super::…` (with its `{…}` group), or such a path anywhere in the text, doc
//! links included (a lower module that names a higher one in its docs points up), unit tests
//! left out. Any circle fails. And the house's plan, `docs/ARCHITECTURE.md`, names only types,
//! modules and functions the sources declare.

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

/// What the workspace's sources declare, read as text: every item name (`struct`, `enum`, `trait`,
/// `type`, `fn`, `mod`, `const`, `static`, `union`, `macro_rules!`, enum variants), and per file
/// the names it declares or re-exports (`pub use`), for `module::Item` paths.
#[derive(Default)]
struct Declared {
    /// Every item name in any crate.
    items: BTreeSet<String>,
    /// Names a file declares or re-exports, by file.
    in_file: BTreeMap<PathBuf, BTreeSet<String>>,
    /// The files of each module name (`x.rs`, `x/mod.rs`; a crate's root under its folder name
    /// and its package name).
    files_of: BTreeMap<String, Vec<PathBuf>>,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` without `//` comments (doc comments included: they name items, they do not declare).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names `code` declares: items after their keyword, and the variants of its enums.
fn declarations(code: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "struct", "enum", "trait", "type", "fn", "mod", "const", "static", "union",
    ];
    let mut out = BTreeSet::new();
    // Each word with its byte offset (a word: identifier characters, and `!` for macro_rules!).
    let mut words: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (i, c) in code.char_indices().chain([(code.len(), ' ')]) {
        match (start, is_ident_char(c) || c == '!') {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                words.push((s, &code[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    for pair in words.windows(2) {
        let ((at, kw), (_, name)) = (pair[0], pair[1]);
        let keyword = KEYWORDS.contains(&kw) || kw == "macro_rules!";
        // A name starts with a letter or `_`, and a macro call (`x!`) is not one.
        if !keyword || name.starts_with(|c: char| c.is_ascii_digit()) || name.contains('!') {
            continue;
        }
        out.insert(name.to_string());
        if kw == "enum" {
            out.extend(variants(&code[at..]));
        }
    }
    out
}

/// The variants of the enum whose declaration starts `code`: at depth one of its braces, the
/// identifier that starts each comma-separated entry (after any attributes).
fn variants(code: &str) -> Vec<String> {
    let Some(open) = code
        .find(['{', ';'])
        .filter(|&i| code[i..].starts_with('{'))
    else {
        return Vec::new();
    };
    let body = &code[open + 1..];
    let mut out = Vec::new();
    let (mut depth, mut entry_start, mut i) = (0i32, true, 0);
    let bytes = body.as_bytes();
    while i < bytes.len() {
        let c = bytes[i] as char;
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' if depth == 0 => break,
            '}' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => entry_start = true,
            '#' if depth == 0 => {}
            c if depth == 0 && entry_start && (c.is_ascii_alphabetic() || c == '_') => {
                let n = ident_len(&body[i..]);
                out.push(body[i..i + n].to_string());
                entry_start = false;
                i += n;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The names of `pub use` statements in `code` (re-exports: `pub use a::{B, c::D}` gives `B`,
/// `D`, and the path segments before them).
fn re_exports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("pub use ") {
        let rest = &code[at + "pub use ".len()..];
        let stmt = &rest[..rest.find(';').unwrap_or(rest.len())];
        out.extend(
            stmt.split(|c: char| !is_ident_char(c))
                .filter(|w| !w.is_empty())
                .map(String::from),
        );
    }
    out
}

/// Reads every crate's `src` (binaries included) under `crates`.
fn declared(crates: &Path) -> Declared {
    let mut d = Declared::default();
    for entry in std::fs::read_dir(crates).unwrap().flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let folder = entry.file_name().to_string_lossy().into_owned();
        let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml")).unwrap();
        let package = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .map(|n| n.replace('-', "_"));
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for f in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = f.path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension() != Some("rs".as_ref()) {
                    continue;
                }
                let code = without_comments(&std::fs::read_to_string(&path).unwrap());
                let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                let mut names: Vec<String> = match stem.as_str() {
                    "lib" | "main" if path.parent() == Some(src.as_path()) => {
                        [Some(folder.clone()), package.clone()]
                            .into_iter()
                            .flatten()
                            .collect()
                    }
                    "mod" => path
                        .parent()
                        .and_then(|p| p.file_name())
                        .map(|n| vec![n.to_string_lossy().into_owned()])
                        .unwrap_or_default(),
                    _ => vec![stem.clone()],
                };
                names.dedup();
                for n in names {
                    d.items.insert(n.clone());
                    d.files_of.entry(n).or_default().push(path.clone());
                }
                let decls = declarations(&code);
                d.items.extend(decls.iter().cloned());
                let mut here = decls;
                here.extend(re_exports(&code));
                d.in_file.insert(path, here);
            }
        }
    }
    d
}

/// Names the document may use that no crate declares: the standard library's and other
/// projects' (ClickHouse's table engines, the web's pieces).
const NOT_OURS: &[&str] = &[
    "Arc",
    "Mutex",
    "RwLock",
    "Condvar",
    "Instant",
    "Option",
    "AsMut",
    "AsRef",
    "Vec",
    "ClickHouse",
    "SQLite",
    "OpenMetrics",
    "ZooKeeper",
    "Linux",
    "Lua",
    "Wireshark",
];

fn camel(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase()) && s.contains(|c: char| c.is_ascii_lowercase())
}

/// Two humps or more (`FlowShard`, not `Nothing`): a type name even where a capitalised word
/// could start a sentence.
fn camel_humps(s: &str) -> bool {
    camel(s) && s.chars().skip(1).any(|c| c.is_ascii_uppercase())
}

/// The Rust names in an inline code span: `Name`, `a::b::Name`, `Type::method`, optionally with
/// generics or a call (`MdHeader<T>`, `now_ns()`). Anything else is not a name: a command, a
/// file path, a flag, a config key or a value, a lower-case word alone (a module, a key or a
/// counter: too ambiguous to check).
fn code_span_name(span: &str) -> Option<Vec<String>> {
    let path_len = span
        .find(|c: char| !(is_ident_char(c) || c == ':'))
        .unwrap_or(span.len());
    let (path, rest) = span.split_at(path_len);
    let rest = rest.trim_end_matches("()");
    let generic = rest.starts_with('<') && rest.ends_with('>');
    if !(rest.is_empty() || generic) || path.is_empty() {
        return None;
    }
    let segments: Vec<String> = path.split("::").map(String::from).collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()))
    {
        return None;
    }
    (segments.len() > 1 || camel(&segments[0])).then_some(segments)
}

/// Every Rust name `doc` uses: in inline code, and in fenced blocks (diagrams) the paths
/// (`a::B`) and CamelCase words, but for a capitalised word that starts a line or a sentence.
fn doc_names(doc: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let mut sentence_start = true;
            for token in line.split_inclusive(|c: char| !(is_ident_char(c) || c == ':')) {
                let end = token.trim_end_matches(|c: char| !(is_ident_char(c) || c == ':'));
                let word = end.trim_matches(':');
                let prose = sentence_start && camel(word) && !camel_humps(word);
                if !prose && (word.contains("::") || camel(word)) {
                    out.insert(word.to_string());
                }
                if !word.is_empty() {
                    sentence_start = false;
                }
                if token[end.len()..].contains(['.', ';']) {
                    sentence_start = true;
                }
            }
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1
                && let Some(segments) = code_span_name(span)
            {
                out.insert(segments.join("::"));
            }
        }
    }
    out
}

impl Declared {
    /// Whether `path` names something that exists: its last segment is declared somewhere, and
    /// each segment after a module (or crate) is declared or re-exported in that module's file;
    /// a segment after a type (`Type::method`, `Enum::Variant`) is declared anywhere.
    fn resolves(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.split("::").collect();
        let last = segments[segments.len() - 1];
        if !self.items.contains(last) && !NOT_OURS.contains(&last) {
            return false;
        }
        segments.windows(2).all(|pair| {
            let (outer, inner) = (pair[0], pair[1]);
            if camel(outer) {
                return self.items.contains(outer) && self.items.contains(inner);
            }
            self.files_of.get(outer).is_some_and(|files| {
                files.iter().any(|f| {
                    self.in_file
                        .get(f)
                        .is_some_and(|names| names.contains(inner))
                })
            })
        })
    }
}

/// The names in `doc` that no crate declares.
fn missing_names(doc: &str, d: &Declared) -> Vec<String> {
    doc_names(doc)
        .into_iter()
        .filter(|n| !NOT_OURS.contains(&n.as_str()) && !d.resolves(n))
        .collect()
}

/// docs/ARCHITECTURE.md names only types, modules and functions that exist (issue 30): every
/// Rust name in it resolves against the sources, so a rename or a design never built shows up
/// here instead of misleading a newcomer.
#[test]
fn the_architecture_names_only_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let d = declared(&root.join("crates"));
    assert!(
        d.items.contains("State") && d.items.contains("Discard"),
        "the sources were read"
    );
    assert!(doc_names(&doc).len() > 50, "the document's names were read");
    let missing = missing_names(&doc, &d);
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names what no crate declares (rename it, or describe what is):\n{}",
        missing.join("\n")
    );
}

/// The name reader takes Rust names and leaves prose, commands, paths, flags and keys alone; a
/// path resolves only through the module that declares its last segment.
#[test]
fn architecture_names_are_read_precisely() {
    let doc = "The `State`, `hub::Collector`, `Type::method`, `MdHeader<T>`, `now_ns()`; not \
               `cargo test -p intscope`, `crates/core/src/lib.rs`, `--netns`, \
               `snapshot_interval_ms`, `[webhook] queue`, `backpressure = true`, `SO_REUSEPORT`, \
               `web/`, `#![deny(unsafe_code)]`, `ingest-<addr>-<i>`, `parse → emit`.\n\
               ```text\nframe ─ Packet::locate ─▶ IntView + Verdict\n\
               Nothing here. Parses too\n```\n";
    let names = doc_names(doc);
    let expected: BTreeSet<String> = [
        "State",
        "hub::Collector",
        "Type::method",
        "MdHeader",
        "Packet::locate",
        "IntView",
        "Verdict",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(names, expected);

    let code = "pub struct Collector;\npub enum Discard {\n    /// A doc.\n    NotAllowed,\n    \
                #[default]\n    Oversize { len: usize },\n    Truncated(u8),\n}\npub fn of() {}\n";
    let mut d = Declared::default();
    let decls = declarations(&without_comments(code));
    for n in [
        "Collector",
        "Discard",
        "NotAllowed",
        "Oversize",
        "Truncated",
        "of",
    ] {
        assert!(decls.contains(n), "{n} declared: {decls:?}");
    }
    assert!(
        !decls.contains("len") && !decls.contains("default"),
        "{decls:?}"
    );
    d.items.extend(decls.iter().cloned());
    d.items.insert("hub".into());
    d.items.insert("snapshot".into());
    d.files_of
        .insert("hub".into(), vec![PathBuf::from("hub.rs")]);
    d.files_of
        .insert("snapshot".into(), vec![PathBuf::from("snapshot.rs")]);
    d.in_file.insert(PathBuf::from("hub.rs"), decls);
    d.in_file
        .insert(PathBuf::from("snapshot.rs"), BTreeSet::new());
    assert!(d.resolves("hub::Collector"));
    assert!(d.resolves("Discard::of") && d.resolves("Discard::Oversize"));
    // Declared, but not in that module: a stale path.
    assert!(!d.resolves("snapshot::Collector"));
    assert!(!d.resolves("IntView") && !d.resolves("hub::Verdict"));
}
