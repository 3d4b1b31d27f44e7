//! The `[webhook]` table of the collector's configuration, below both the collector (whose
//! configuration holds it) and the webhook sink (which reads the collector).

/// The `[webhook]` table of the collector's configuration (docs/collector-config.md).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// Receivers (`http://HOST:PORT/PATH`), each sent every notification; none: no webhook.
    pub urls: Vec<String>,
    /// The console's address as the receivers' readers reach it, for each alert's
    /// `generatorURL` (`<console_url>#/incident/<id>`); default: `http://<http>/`.
    pub console_url: Option<String>,
    /// Time one POST may take (connect, send, status line), ms.
    pub timeout_ms: u64,
    /// Attempts after the first before a notification is given up (and counted).
    pub retries: u32,
    /// Wait before the first retry, ms; doubled before each next one, at most a minute.
    pub backoff_ms: u64,
    /// Notifications each receiver's queue holds; when it is full the newest is dropped.
    pub queue: usize,
    /// How often the incident log is read for starts and ends, ms.
    pub poll_interval_ms: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            urls: Vec::new(),
            console_url: None,
            timeout_ms: 5_000,
            retries: 4,
            backoff_ms: 500,
            queue: 1024,
            poll_interval_ms: 1_000,
        }
    }
}

impl WebhookConfig {
    /// The receivers' URIs, or why the table cannot be used (an `https` URL among them: this
    /// client speaks plain HTTP; put a TLS-terminating proxy on loopback in front).
    pub fn check(&self) -> Result<Vec<hyper::Uri>, String> {
        if self.queue == 0 {
            return Err("webhook.queue must be at least 1".into());
        }
        if self.timeout_ms == 0 {
            return Err("webhook.timeout_ms must be at least 1".into());
        }
        if self.poll_interval_ms < 10 {
            return Err("webhook.poll_interval_ms must be at least 10".into());
        }
        self.urls
            .iter()
            .map(|u| {
                let uri: hyper::Uri = u
                    .parse()
                    .map_err(|e| format!("webhook URL {u:?} is not a URL: {e}"))?;
                match uri.scheme_str() {
                    Some("http") if uri.host().is_some() => Ok(uri),
                    Some("https") => Err(format!(
                        "webhook URL {u:?}: https is not supported; send to an http:// \
                         TLS-terminating proxy instead"
                    )),
                    _ => Err(format!(
                        "webhook URL {u:?}: expected http://HOST[:PORT]/PATH"
                    )),
                }
            })
            .collect()
    }
}
