//! Incidents that reach people: each incident's start and end POSTed to webhook receivers as
//! Alertmanager's webhook JSON (`version: "4"`), so that anything that takes Alertmanager's
//! notifications (chat bridges, paging gateways, ticket systems) takes the collector's.
//!
//! Nothing here runs on the receive threads or under the correlation's locks: a watcher task
//! reads the incident log every `poll_interval_ms` under the log's own lock (as
//! `/api/incidents` does), turns what started and ended since into notifications and hands each
//! receiver a copy through that receiver's bounded queue without waiting; one sender task per
//! receiver POSTs them in order, each attempt with a timeout, retried with doubling backoff a
//! bounded number of times. A dead receiver therefore fills only its own queue: what does not
//! fit is dropped and counted, and neither ingest, the correlation, nor the other receivers
//! wait for it. At a stop the log is read a last time and the queues drain for a bounded time
//! ([`Webhook::stop`]). Counters are in `/metrics` (`intscope_webhook_*`,
//! [`WebhookStats::sample`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use intscope_core::counters::{
    Samples, WEBHOOK_ATTEMPTS_FAILED, WEBHOOK_DROPPED, WEBHOOK_QUEUE_DEPTH, WEBHOOK_SENT,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::hub::Collector;
use crate::webhook_config::WebhookConfig;
use intscope_core::{Incident, IncidentLog, IncidentState};

/// Longest wait between two attempts, however many came before.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// One receiver's counters.
#[derive(Debug, Default)]
pub struct ReceiverStats {
    /// Notifications delivered (a 2xx answer).
    pub sent: AtomicU64,
    /// Attempts that timed out.
    pub timeouts: AtomicU64,
    /// Attempts that failed to connect or to send (transport errors).
    pub connect_errors: AtomicU64,
    /// Attempts answered with a status other than 2xx.
    pub bad_status: AtomicU64,
    /// Notifications dropped because the queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Notifications given up after the last retry.
    pub dropped_retries: AtomicU64,
    /// Notifications still queued or being sent when the collector stopped and the drain
    /// time (`timeout_ms`) ran out.
    pub dropped_at_stop: AtomicU64,
    /// Notifications waiting in the queue.
    pub depth: AtomicU64,
    /// Notifications being sent or waiting for a retry (0 or 1).
    pub in_flight: AtomicU64,
}

/// The webhook's counters, one entry per receiver (in the order of `urls`).
#[derive(Debug, Default)]
pub struct WebhookStats {
    /// Per receiver.
    pub receivers: Vec<ReceiverStats>,
    /// Incidents whose start was sent (to the queues).
    pub firing: AtomicU64,
    /// Incidents whose end was sent.
    pub resolved: AtomicU64,
}

impl WebhookStats {
    /// Adds the webhook's series to `out` (receiver labels are positions, never URLs: those
    /// may carry secrets).
    pub fn sample(&self, out: &mut Samples) {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (i, r) in self.receivers.iter().enumerate() {
            let i = i.to_string();
            out.add(&WEBHOOK_SENT, &[&i], g(&r.sent));
            for (reason, n) in [
                ("timeout", g(&r.timeouts)),
                ("connect", g(&r.connect_errors)),
                ("status", g(&r.bad_status)),
            ] {
                out.add(&WEBHOOK_ATTEMPTS_FAILED, &[&i, reason], n);
            }
            for (reason, n) in [
                ("queue_full", g(&r.dropped_queue_full)),
                ("retries_exhausted", g(&r.dropped_retries)),
                ("stopped", g(&r.dropped_at_stop)),
            ] {
                out.add(&WEBHOOK_DROPPED, &[&i, reason], n);
            }
            out.add(&WEBHOOK_QUEUE_DEPTH, &[&i], g(&r.depth));
        }
    }
}

/// A running webhook: the watcher and one sender per receiver, on the runtime it was started
/// on. [`Webhook::stop`] sends what is due and drains the queues; dropping it stops at once.
#[derive(Debug)]
pub struct Webhook {
    /// Counters (shared with `/metrics`).
    pub stats: Arc<WebhookStats>,
    /// Tells the watcher to read the log a last time and close the queues.
    last_poll: Option<tokio::sync::oneshot::Sender<()>>,
    watcher: Option<tokio::task::JoinHandle<()>>,
    senders: Vec<tokio::task::JoinHandle<()>>,
    /// How long the queues may take to drain at stop.
    drain: Duration,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        for t in self.watcher.iter().chain(&self.senders) {
            t.abort();
        }
    }
}

/// What a webhook did at its stop, over all receivers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Notifications delivered since start, summed over the receivers.
    pub sent: u64,
    /// Notifications still queued or in flight when the drain time ran out: dropped, counted
    /// (`reason="stopped"`).
    pub dropped_at_stop: u64,
}

impl Webhook {
    /// Starts watching `collector`'s incidents and sending them to `cfg.urls`; `console` is the
    /// console's base URL for `generatorURL` when `cfg.console_url` is not set. Call it inside
    /// a Tokio runtime.
    pub fn start(
        collector: Arc<Collector>,
        cfg: &WebhookConfig,
        console: &str,
    ) -> Result<Webhook, String> {
        let uris = cfg.check()?;
        let stats = Arc::new(WebhookStats {
            receivers: uris.iter().map(|_| ReceiverStats::default()).collect(),
            ..WebhookStats::default()
        });
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(cfg.timeout_ms)));
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        let mut queues = Vec::new();
        let mut tasks = Vec::new();
        for (i, uri) in uris.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Arc<Bytes>>(cfg.queue);
            queues.push(tx);
            tasks.push(tokio::spawn(send_loop(
                client.clone(),
                uri,
                rx,
                Arc::clone(&stats),
                i,
                Policy::of(cfg),
            )));
        }
        let mut base = cfg
            .console_url
            .clone()
            .unwrap_or_else(|| console.to_string());
        if !base.ends_with('/') {
            base.push('/');
        }
        let every = Duration::from_millis(cfg.poll_interval_ms);
        let s = Arc::clone(&stats);
        let (last_poll, mut stopping) = tokio::sync::oneshot::channel::<()>();
        let watcher = tokio::spawn(async move {
            let mut watch = Watch::default();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let last = tokio::select! {
                    _ = tick.tick() => false,
                    _ = &mut stopping => true,
                };
                let now = crate::clock::now_ns();
                let notes = collector.with_incidents(|log| watch.poll(log, now, &base));
                for note in notes {
                    match note.status {
                        Status::Firing => s.firing.fetch_add(1, Ordering::Relaxed),
                        Status::Resolved => s.resolved.fetch_add(1, Ordering::Relaxed),
                    };
                    let body = Arc::new(Bytes::from(note.body.to_string()));
                    for (i, q) in queues.iter().enumerate() {
                        let r = &s.receivers[i];
                        // Counted before the send: the sender may take it at once.
                        r.depth.fetch_add(1, Ordering::Relaxed);
                        if q.try_send(Arc::clone(&body)).is_err() {
                            r.depth.fetch_sub(1, Ordering::Relaxed);
                            r.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if last {
                    // Dropping the queues' senders ends each sender once its queue is empty.
                    return;
                }
            }
        });
        Ok(Webhook {
            stats,
            last_poll: Some(last_poll),
            watcher: Some(watcher),
            senders: tasks,
            drain: Duration::from_millis(cfg.timeout_ms),
        })
    }

    /// Stops it without losing what is due: the incident log is read a last time (what
    /// started or ended since the last poll is queued), then the receivers get up to
    /// `timeout_ms` to take what is queued, retries included. What is left then is dropped and
    /// counted (`dropped_at_stop`). Call it after the collector's last report was correlated.
    pub async fn stop(mut self) -> Stopped {
        if let Some(tx) = self.last_poll.take() {
            let _ = tx.send(());
        }
        if let Some(w) = self.watcher.take() {
            let _ = w.await;
        }
        let deadline = tokio::time::Instant::now() + self.drain;
        for mut task in std::mem::take(&mut self.senders) {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                // Abort only asks: the task may be mid-poll on another worker. Its counters
                // are read once it has really stopped.
                task.abort();
                let _ = task.await;
            }
        }
        let mut out = Stopped::default();
        for r in &self.stats.receivers {
            let left = r.depth.swap(0, Ordering::Relaxed) + r.in_flight.swap(0, Ordering::Relaxed);
            r.dropped_at_stop.fetch_add(left, Ordering::Relaxed);
            out.dropped_at_stop += left;
            out.sent += r.sent.load(Ordering::Relaxed);
        }
        out
    }
}

/// Timeout and retries of one receiver's sender.
#[derive(Debug, Clone, Copy)]
struct Policy {
    timeout: Duration,
    retries: u32,
    backoff: Duration,
}

impl Policy {
    fn of(cfg: &WebhookConfig) -> Self {
        Policy {
            timeout: Duration::from_millis(cfg.timeout_ms),
            retries: cfg.retries,
            backoff: Duration::from_millis(cfg.backoff_ms),
        }
    }
}

/// One receiver's sender: its queue's notifications in order, each retried until delivered or
/// given up.
async fn send_loop(
    client: Client<HttpConnector, Full<Bytes>>,
    uri: hyper::Uri,
    mut rx: mpsc::Receiver<Arc<Bytes>>,
    stats: Arc<WebhookStats>,
    i: usize,
    p: Policy,
) {
    let r = &stats.receivers[i];
    while let Some(body) = rx.recv().await {
        r.depth.fetch_sub(1, Ordering::Relaxed);
        r.in_flight.store(1, Ordering::Relaxed);
        let mut wait = p.backoff;
        for attempt in 0..=p.retries {
            let req = hyper::Request::post(uri.clone())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(
                    hyper::header::USER_AGENT,
                    concat!("intscope/", env!("CARGO_PKG_VERSION")),
                )
                .body(Full::new((*body).clone()));
            let Ok(req) = req else {
                // The URI was checked at start; a request that cannot be built is a failure
                // to send, never a panic.
                r.connect_errors.fetch_add(1, Ordering::Relaxed);
                r.dropped_retries.fetch_add(1, Ordering::Relaxed);
                break;
            };
            let failed = match tokio::time::timeout(p.timeout, client.request(req)).await {
                Ok(Ok(resp)) if resp.status().is_success() => None,
                Ok(Ok(_)) => Some(&r.bad_status),
                Ok(Err(_)) => Some(&r.connect_errors),
                Err(_) => Some(&r.timeouts),
            };
            match failed {
                None => {
                    r.sent.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Some(counter) => {
                    counter.fetch_add(1, Ordering::Relaxed);
                    if attempt == p.retries {
                        r.dropped_retries.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(BACKOFF_MAX);
                    }
                }
            }
        }
        r.in_flight.store(0, Ordering::Relaxed);
    }
}

/// Whether an alert is firing or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The incident started (or reopened).
    Firing,
    /// It ended.
    Resolved,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Firing => "firing",
            Status::Resolved => "resolved",
        }
    }
}

/// One notification: an incident's start or end as Alertmanager's webhook JSON.
#[derive(Debug, Clone)]
pub struct Note {
    /// Firing or resolved.
    pub status: Status,
    /// The incident's ID.
    pub id: u64,
    /// The payload.
    pub body: Value,
}

/// What the watcher has sent: the labels of each incident whose start was sent and whose end
/// was not (at most the log's ongoing incidents, 256 per kind), and the highest ID seen, so
/// that an incident that started and ended between two reads is sent as both.
#[derive(Debug, Default)]
pub struct Watch {
    firing: HashMap<u64, Map<String, Value>>,
    seen: u64,
}

impl Watch {
    /// The notifications of what started and ended in `log` since the last call, oldest
    /// incident first, a start before its end. `now_ns` ends the alerts of incidents that left
    /// the log unseen; `console` is the console's base URL.
    pub fn poll(&mut self, log: &IncidentLog, now_ns: u64, console: &str) -> Vec<Note> {
        let mut notes = Vec::new();
        let seen = self.seen;
        for i in log.iter() {
            self.seen = self.seen.max(i.id);
            let sent = self.firing.contains_key(&i.id);
            match i.state {
                IncidentState::Ongoing if !sent => {
                    let labels = labels(i);
                    notes.push(note(Status::Firing, i, labels.clone(), now_ns, console));
                    self.firing.insert(i.id, labels);
                }
                IncidentState::Resolved if sent => {
                    let labels = self.firing.remove(&i.id).unwrap_or_else(|| labels(i));
                    notes.push(note(Status::Resolved, i, labels, now_ns, console));
                }
                IncidentState::Resolved if i.id > seen => {
                    notes.push(note(Status::Firing, i, labels(i), now_ns, console));
                    notes.push(note(Status::Resolved, i, labels(i), now_ns, console));
                }
                _ => {}
            }
        }
        // Incidents that left the log while firing (far past the per-kind quotas): resolved
        // now, so that no receiver keeps an alert open forever.
        let gone: Vec<u64> = self
            .firing
            .keys()
            .copied()
            .filter(|id| log.get(*id).is_none())
            .collect();
        for id in gone {
            if let Some(labels) = self.firing.remove(&id) {
                notes.push(Note {
                    status: Status::Resolved,
                    id,
                    body: payload(
                        Status::Resolved,
                        alert_gone(id, labels, now_ns, console),
                        console,
                    ),
                });
            }
        }
        notes.sort_by_key(|n| (n.id, n.status == Status::Resolved));
        notes
    }
}

/// The labels of an incident's alert: what (`alertname`: the kind), where (node, port, queue,
/// peer, hw_id, those it has), how bad (`severity`), which (`incident`), and the cause.
fn labels(i: &Incident) -> Map<String, Value> {
    let mut l = Map::new();
    l.insert("alertname".into(), i.kind.label().into());
    l.insert("incident".into(), i.id.to_string().into());
    l.insert("severity".into(), enum_label(&i.severity).into());
    let p = &i.place;
    for (k, v) in [
        ("node", p.node.map(u64::from)),
        ("port", p.port.map(u64::from)),
        ("queue", p.queue.map(u64::from)),
        ("peer_node", p.peer_node.map(u64::from)),
        ("peer_port", p.peer_port.map(u64::from)),
        ("hw_id", p.hw_id.map(u64::from)),
    ] {
        if let Some(v) = v {
            l.insert(k.into(), v.to_string().into());
        }
    }
    if let Some(c) = &i.cause {
        l.insert("cause".into(), c.clone().into());
    }
    l.insert("source".into(), "intscope".into());
    l
}

/// A serde enum's kebab-case name (`warning`, `ongoing`, `normal`).
fn enum_label<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Where an incident is, in words: "node 101 port 2 queue 0 → node 1 port 3".
fn place_text(i: &Incident) -> String {
    let p = &i.place;
    let mut out = Vec::new();
    if let Some(n) = p.node {
        out.push(format!("node {n}"));
    }
    if let Some(x) = p.port {
        out.push(format!("port {x}"));
    }
    if let Some(q) = p.queue {
        out.push(format!("queue {q}"));
    }
    if let Some(h) = p.hw_id {
        out.push(format!("hw_id {h}"));
    }
    let mut s = out.join(" ");
    if let Some(n) = p.peer_node {
        s += &format!(" → node {n}");
        if let Some(x) = p.peer_port {
            s += &format!(" port {x}");
        }
    }
    if s.is_empty() {
        s = "an unknown place".into();
    }
    s
}

/// When it started on the collector's clock (the receive time of its first evidence), else
/// the switch's; when it ended likewise (the switch-time span added to the receive time).
fn times(i: &Incident) -> (u64, Option<u64>) {
    let start = i.received_ns.unwrap_or(i.start_ns);
    let end = i
        .end_ns
        .map(|e| start.saturating_add(e.saturating_sub(i.start_ns)));
    (start, end)
}

fn note(status: Status, i: &Incident, labels: Map<String, Value>, now: u64, c: &str) -> Note {
    let (start, end) = times(i);
    let ends_at = match status {
        Status::Firing => "0001-01-01T00:00:00Z".to_string(),
        Status::Resolved => rfc3339(end.unwrap_or(now)),
    };
    let mut d = format!(
        "{} ({}) at {}",
        i.kind.label(),
        enum_label(&i.severity),
        place_text(i)
    );
    if let Some(c) = &i.cause {
        d += &format!(", cause {c}");
    }
    d += &format!(", since {}", rfc3339(start));
    if i.received_ns.is_some() && i.start_ns.abs_diff(start) > 1_000_000_000 {
        d += &format!(" (switch clock {} ns)", i.start_ns);
    }
    if let Some(p) = &i.peak {
        d += &format!("; peak {} {}", p.value, enum_label(&p.unit));
        if let Some(t) = i.threshold {
            d += &format!(" (threshold {t})");
        }
    }
    d += &format!("; {} flows", i.counts.flows);
    if !i.symptoms.is_empty() {
        let s: Vec<&str> = i.symptoms.iter().map(|s| s.kind.label()).collect();
        d += &format!("; symptoms: {}", s.join(", "));
    }
    if let (Status::Resolved, Some(r)) = (status, &i.end_reason) {
        d += &format!("; ended ({})", enum_label(r));
    }
    let alert = json!({
        "status": status.label(),
        "labels": labels.clone(),
        "annotations": {
            "summary": format!("{} at {}", i.kind.label(), place_text(i)),
            "description": d,
        },
        "startsAt": rfc3339(start),
        "endsAt": ends_at,
        "generatorURL": format!("{c}#/incident/{}", i.id),
        "fingerprint": fingerprint(&labels),
    });
    Note {
        status,
        id: i.id,
        body: payload(status, alert, c),
    }
}

fn alert_gone(id: u64, labels: Map<String, Value>, now: u64, c: &str) -> Value {
    json!({
        "status": "resolved",
        "labels": labels.clone(),
        "annotations": {
            "summary": format!("incident {id} left the collector's memory"),
            "description": "resolved when it left the live incident log (its history is in the store)",
        },
        "startsAt": rfc3339(now),
        "endsAt": rfc3339(now),
        "generatorURL": format!("{c}#/incident/{id}"),
        "fingerprint": fingerprint(&labels),
    })
}

/// Alertmanager's webhook message around one alert: one incident per message, grouped by it.
fn payload(status: Status, alert: Value, console: &str) -> Value {
    let id = alert["labels"]["incident"]
        .as_str()
        .unwrap_or("")
        .to_string();
    json!({
        "version": "4",
        "groupKey": format!("{{}}:{{incident=\"{id}\"}}"),
        "truncatedAlerts": 0,
        "status": status.label(),
        "receiver": "intscope",
        "groupLabels": {"incident": id},
        "commonLabels": alert["labels"].clone(),
        "commonAnnotations": alert["annotations"].clone(),
        "externalURL": console,
        "alerts": [alert],
    })
}

/// 16 hex digits of the FNV-1a hash of the sorted labels: the same alert, the same print,
/// in every process and version.
fn fingerprint(labels: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = labels.keys().collect();
    keys.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for k in keys {
        let v = labels[k].as_str().unwrap_or("");
        for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// RFC 3339 in UTC with milliseconds (`2026-03-01T12:00:00.123Z`) of ns since the epoch.
pub fn rfc3339(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let ms = (ns / 1_000_000) % 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_reads_as_the_calendar() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.789.
        assert_eq!(rfc3339(951_827_696_789_000_000), "2000-02-29T12:34:56.789Z");
        assert_eq!(
            rfc3339(1_767_225_600_000_000_000),
            "2026-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn https_and_nonsense_urls_are_refused_with_a_reason() {
        let cfg = |u: &str| WebhookConfig {
            urls: vec![u.into()],
            ..WebhookConfig::default()
        };
        assert!(cfg("http://127.0.0.1:9/hook").check().is_ok());
        assert!(
            cfg("https://example.org/")
                .check()
                .unwrap_err()
                .contains("https")
        );
        assert!(cfg("not a url").check().is_err());
        assert!(cfg("/relative").check().is_err());
    }
}
