//! The agent's counters for Prometheus: a text exposition rendered by the agent's loop (once a
//! second) and served by a small HTTP thread, one connection at a time with a 2 s deadline,
//! so a slow scraper delays only itself and holds one socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The latest exposition.
pub type Exposition = Arc<Mutex<String>>;

/// Renders `(name, help, value)` counters, each as `intscope_agent_<name>_total`.
pub fn render(counters: &[(&str, &str, u64)]) -> String {
    let mut registry = Registry::with_prefix("intscope_agent");
    for (name, help, value) in counters {
        let c: Counter = Counter::default();
        c.inc_by(*value);
        registry.register(*name, *help, c);
    }
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

/// Serves `/metrics` (any path) on `addr` from a thread until the process ends.
pub fn serve(addr: SocketAddr, exposition: Exposition) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                let mut req = [0u8; 2048];
                let mut got = 0;
                // Up to the end of the headers (or 2 KiB, or the deadline).
                while got < req.len() {
                    match conn.read(&mut req[got..]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                    if req[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let body = exposition.lock().map(|s| s.clone()).unwrap_or_default();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })?;
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_as_openmetrics() {
        let text = render(&[
            ("events", "events read", 42),
            ("send_errors", "failed sends", 0),
        ]);
        assert!(
            text.contains("# TYPE intscope_agent_events counter"),
            "{text}"
        );
        assert!(text.contains("intscope_agent_events_total 42"), "{text}");
        assert!(
            text.contains("intscope_agent_send_errors_total 0"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn the_server_answers_with_the_latest_text() {
        let exposition: Exposition = Arc::new(Mutex::new("x_total 1\n".into()));
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::clone(&exposition)).unwrap();
        *exposition.lock().unwrap() = "x_total 2\n".into();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("x_total 2\n"), "{answer}");
    }
}
