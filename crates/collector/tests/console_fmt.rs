//! The console's formatting (`web/js/fmt.js`), run under Node as the browser runs it (an ES
//! module, no build step): counts read as words in one number format (`1 drop`, `13,977
//! reports`), never `1 drops` or `13977` beside `13,142`.
//!
//! Node is required in CI (it runs the console's lint); elsewhere the test says it is skipped.

use std::path::Path;
use std::process::Command;

/// (expression over fmt.js's exports, the text it must give).
const CASES: [(&str, &str); 14] = [
    ("count(1, 'drop')", "1 drop"),
    ("count(2, 'drop')", "2 drops"),
    ("count(0, 'drop')", "0 drops"),
    ("count(13977, 'report')", "13,977 reports"),
    ("count(1, 'path change')", "1 path change"),
    ("count(3, 'path change')", "3 path changes"),
    ("count(1, 'report lost', 'reports lost')", "1 report lost"),
    (
        "count(32344888, 'report lost', 'reports lost')",
        "32,344,888 reports lost",
    ),
    ("count('1', 'cell')", "1 cell"),
    ("count(null, 'flow')", "–"),
    ("count(undefined, 'flow')", "–"),
    ("num(13142)", "13,142"),
    ("num(null)", "–"),
    ("ns(1500)", "1.5 µs"),
];

#[test]
fn counts_read_as_words_in_one_number_format() {
    if Command::new("node").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "node is required in CI (.ci/run installs npm, which brings it)"
        );
        eprintln!("node not installed: skipped outside CI");
        return;
    }
    let fmt = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../web/js/fmt.js")
        .canonicalize()
        .unwrap();
    let checks: Vec<String> = CASES
        .iter()
        .map(|(expr, want)| format!("[{expr:?}, {expr}, {want:?}]"))
        .collect();
    // Prints the cases that differ, one JSON line each.
    let script = format!(
        "import {{ count, ns, num }} from {url:?};\n\
         for (const [expr, got, want] of [{list}]) {{\n\
           if (got !== want) console.log(JSON.stringify({{ expr, got, want }}));\n\
         }}\n",
        url = format!("file://{}", fmt.display()),
        list = checks.join(",\n")
    );
    let out = Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.trim().is_empty(), "fmt.js differs:\n{stdout}");
}
