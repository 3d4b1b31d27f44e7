//! `intscope serve` serves the web console over the shared store (issue 35, item 7): `/` and
//! every file of the console as a collector serves them, the fabric `/api/stats` the console
//! tells the two apart by, the stored incidents its incidents page reads, and a JSON 404 that
//! says why for the live-state calls a store cannot answer.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{bin, exit_within, repo, spawn_started, tempdir};
use serde_json::Value;

/// `GET path` on `addr`: status, the Content-Type header, body.
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

#[test]
fn serve_serves_the_console_over_the_store() {
    let dir = tempdir("serve-ui");
    let data = dir.path().to_str().unwrap();
    // A store a collector wrote: the sample capture replayed, then a graceful stop.
    let (mut c, _) = spawn_started(
        bin()
            .current_dir(repo(""))
            .args(["collect", "--http", "127.0.0.1:0", "--data", data])
            .args([
                "--replay",
                "examples/sample.pcap",
                "--int-udp-port",
                "17768",
            ]),
    );
    let pid = c.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(exit_within(&mut c, Duration::from_secs(60)).is_some_and(|s| s.success()));

    // Names for the console, as a collector takes them.
    let topology = dir.path().join("nodes.json");
    std::fs::write(&topology, r#"{"nodes": [{"id": 1, "name": "tor-1"}]}"#).unwrap();
    let (mut s, line) = spawn_started(
        bin()
            .args([
                "serve",
                "--store",
                &format!("sqlite:{data}"),
                "--http",
                "127.0.0.1:0",
                "--topology",
            ])
            .arg(&topology),
    );
    let addr = line["http"].as_str().unwrap().to_string();
    let (status, ctype, index) = get(&addr, "/");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(index.contains("js/main.js"), "{index}");
    for &(path, mime, body) in intscope_collector::ui::FILES {
        let (status, ctype, got) = get(&addr, path);
        assert_eq!((status, ctype.as_str()), (200, mime), "{path}");
        assert_eq!(got.len(), body.len(), "{path}");
    }
    // The console tells serve from a collector by this, and shows the store's pages.
    let (status, _, stats) = get(&addr, "/api/stats");
    assert_eq!(status, 200, "{stats}");
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["mode"], "fabric");
    let (status, _, names) = get(&addr, "/api/names");
    assert_eq!(status, 200, "{names}");
    let names: Value = serde_json::from_str(&names).unwrap();
    assert_eq!(names, serde_json::json!({"nodes": {"1": "tor-1"}}));
    let (status, _, inc) = get(&addr, "/api/incidents?limit=5");
    assert_eq!(status, 200, "{inc}");
    let inc: Value = serde_json::from_str(&inc).unwrap();
    assert!(inc["incidents"].is_array(), "{inc}");
    // A live-state call says why it is not here, as JSON the console shows.
    for path in ["/api/nodes", "/api/events/stream", "/api/incidents/1"] {
        let (status, ctype, body) = get(&addr, path);
        assert_eq!(status, 404, "{path}");
        assert!(ctype.starts_with("application/json"), "{path}: {ctype}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert!(
            e["error"].as_str().unwrap().contains("intscope serve"),
            "{path}: {body}"
        );
    }
    let _ = s.kill();
    let _ = s.wait();
}
