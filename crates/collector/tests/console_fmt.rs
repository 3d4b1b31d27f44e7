//! The console's formatting (`web/js/fmt.js`), run under Node as the browser runs it (an ES
//! module, no build step): counts read as words in one number format (`1 drop`, `13,977
//! reports`), never `1 drops` or `13977` beside `13,142`; spans under a microsecond and moments
//! just past read as words, never `lasted 0 ns` or `0 ns ago`.
//!
//! Node is required in CI (it runs the console's lint); elsewhere the test says it is skipped.

use std::path::Path;
use std::process::Command;

/// (expression over fmt.js's exports, the text it must give).
const CASES: [(&str, &str); 32] = [
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
    // A span under a microsecond, and a moment ago, as words, not `0 ns`.
    ("lasted(0)", "under 1 µs"),
    ("lasted(999)", "under 1 µs"),
    ("lasted(10300000)", "10.3 ms"),
    ("lasted(null)", "–"),
    // Long spans in minutes and hours, not `10800 s`.
    ("lasted(119000000000)", "119 s"),
    ("lasted(150000000000)", "2.5 min"),
    ("span(10800000000000)", "3 h"),
    ("ago(0, 7200000000000)", "2 h ago"),
    ("ago(5, 5)", "just now"),
    ("ago(0, 12300000000)", "12.3 s ago"),
    // A link's far end continues its near end.
    (
        "incidentPlace({ node: 4, port: 1, peer_node: 1, peer_port: 2 })",
        "node 4 · port 1 → node 1 port 2",
    ),
    (
        "incidentPlace({ node: 4, peer_node: 1 })",
        "node 4 → node 1",
    ),
    (
        "incidentPlace({ node: 4, port: 1, queue: 0, hw_id: 7 })",
        "node 4 · port 1 · q0 · hw 7",
    ),
    // Peaks and evidence count their units.
    ("peakText({ unit: 'occupancy', value: 1 })", "1 cell"),
    (
        "peakText({ unit: 'reports', value: 13977 })",
        "13,977 reports",
    ),
    ("peakText({ unit: 'nanoseconds', value: 2000 })", "2 µs"),
    (
        "evidence({ kind: 'non-int-hops', evidence: { non_int_hops: 1, ip_ttl: 60 } })",
        "1 hop without INT (TTL 60)",
    ),
    (
        "evidence({ kind: 'lost-reports', evidence: { lost: 2, hw_id: 3 } })",
        "2 reports lost from hw 3",
    ),
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
        "import {{ ago, count, evidence, incidentPlace, lasted, ns, num, peakText, span }} from {url:?};\n\
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
