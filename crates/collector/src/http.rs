//! Serving the API over HTTP/1.1, and optionally TLS (rustls), with the limits a network-facing
//! server needs, so that no client can starve the others:
//!
//! - at most `max_connections` connections at once, and at most `max_connections_per_client`
//!   from one client (an IPv4 address, an IPv6 /64) — beyond it a new connection is closed at
//!   once (counted);
//! - at the global limit a new connection takes the place of the least trusted one, oldest
//!   first: one that has not sent a byte for [`SILENT_GRACE`], then one that has not sent a
//!   whole request head (slowloris), then a younger silent one, then one that has sent no
//!   authenticated request ([`mark_authenticated`]),
//!   then an authenticated one whose answer has been under way for [`STALLED`] (a slow
//!   reader); with only other authenticated connections open the new one is closed (counted);
//! - deadlines: the first byte within `first_byte_timeout` of the accept, each request head
//!   within `header_timeout` (which also bounds how long a kept-alive connection may sit
//!   waiting for its next request), each answer handed to the kernel within `send_timeout`
//!   (a client that reads too slowly), and nothing moving either way for `idle_timeout`;
//! - answer memory: an answer of a known size above [`SMALL_ANSWER`] holds its bytes against
//!   `max_answer_bytes` in total and `max_answer_bytes_per_client`, from when the handler made
//!   it until it has been handed to hyper, which the body feeds copies of [`ANSWER_CHUNK`]
//!   bytes at a time so that its write queue ([`HYPER_BUFFER`]) holds little of it; beyond
//!   either bound the answer is a 503 with `Retry-After` (counted). Smaller answers always go
//!   out. So answers hold at most `max_answer_bytes` + `max_connections` × ([`HYPER_BUFFER`] +
//!   [`SMALL_ANSWER`]) (48 MiB with the defaults, besides the answer bound). Event streams (no
//!   known size) are bounded by the API's `max_streams` and their lag drop.
//!
//! hyper serves each connection; this module is the accept loop around it.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::{Body as _, Bytes, Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::rustls;

/// Answers of at most this many bytes are never refused for memory.
pub const SMALL_ANSWER: usize = 64 << 10;

/// The size of the pieces an answer is handed to hyper in.
pub const ANSWER_CHUNK: usize = 32 << 10;

/// hyper's buffer per connection (reading a request head, and queueing an answer's pieces):
/// small, so that a slow reader's connection holds little beside its counted answer.
pub const HYPER_BUFFER: usize = 64 << 10;

/// The body of every error answer: what was wrong and what to do, and the status again.
#[derive(Debug, serde::Serialize)]
pub struct ErrorBody {
    /// What was wrong and what to do.
    pub error: String,
    /// The HTTP status again.
    pub status: u16,
}

/// Connection limits of the HTTP server.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Connections served at once; more are closed on accept (counted).
    pub max_connections: usize,
    /// Connections one client (IPv4 address, IPv6 /64) may hold at once; more are closed on
    /// accept (counted).
    pub max_connections_per_client: usize,
    /// Time a new connection has to send its first byte.
    pub first_byte_timeout: Duration,
    /// Time a client has to send a request head, counted from when the server is ready for it
    /// (so also the longest a kept-alive connection waits for its next request), and to
    /// complete a TLS handshake.
    pub header_timeout: Duration,
    /// A connection on which no byte moved either way for this long is closed.
    pub idle_timeout: Duration,
    /// Time an answer of known size has to be handed to the kernel, once made: a client that
    /// reads it more slowly is closed (counted), so it cannot hold the answer's memory.
    pub send_timeout: Duration,
    /// Bytes of answers above [`SMALL_ANSWER`] held at once, all connections together.
    pub max_answer_bytes: usize,
    /// Bytes of answers above [`SMALL_ANSWER`] one client's connections hold at once.
    pub max_answer_bytes_per_client: usize,
    /// Each connection's kernel send buffer (`SO_SNDBUF`; 0: the kernel's autotuning, which
    /// lets a reader that does not read park megabytes of answer in kernel memory).
    pub send_buffer: usize,
    /// How long shutdown waits for open connections (event streams never end by themselves).
    pub shutdown_grace: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 256,
            max_connections_per_client: 32,
            first_byte_timeout: Duration::from_secs(2),
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            max_answer_bytes: 256 << 20,
            max_answer_bytes_per_client: 64 << 20,
            send_buffer: 256 << 10,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Counters of the HTTP server (shown by `/metrics` and `/api/stats`).
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections closed on accept because `max_connections` were open.
    pub refused_over_limit: AtomicU64,
    /// Connections closed on accept because their client held `max_connections_per_client`.
    pub refused_client_limit: AtomicU64,
    /// Connections closed to make room at the limit: they had not sent a byte.
    pub evicted_silent: AtomicU64,
    /// Connections closed to make room at the limit: they had not sent a whole request head.
    pub evicted_partial: AtomicU64,
    /// Connections closed to make room at the limit: no request of theirs was authenticated.
    pub evicted_unauthenticated: AtomicU64,
    /// Connections closed to make room at the limit: authenticated, but their answer had been
    /// under way for [`STALLED`] or more.
    pub evicted_stalled: AtomicU64,
    /// Connections closed because their first byte did not come within `first_byte_timeout`.
    pub first_byte_timeouts: AtomicU64,
    /// Connections closed because an answer was not taken within `send_timeout`.
    pub send_timeouts: AtomicU64,
    /// Answers replaced by a 503 because the answer memory bounds were reached.
    pub answers_refused_memory: AtomicU64,
    /// Bytes of answers above [`SMALL_ANSWER`] held now.
    pub answer_bytes: AtomicU64,
    /// Connections closed because nothing moved for `idle_timeout`.
    pub idle_closed: AtomicU64,
    /// Connections that ended in a protocol error (a request head not sent within
    /// `header_timeout` among them).
    pub errors: AtomicU64,
    /// TLS handshakes that failed or timed out.
    pub tls_failed: AtomicU64,
    /// Accept errors (e.g. out of file descriptors): the loop waits a little and goes on.
    pub accept_errors: AtomicU64,
}

impl HttpStats {
    /// Adds the connection counters and the connections open to `out`.
    pub fn sample(&self, out: &mut intscope_core::counters::Samples) {
        use intscope_core::counters::{
            HTTP_ANSWER_BYTES, HTTP_ANSWERS_REFUSED_MEMORY, HTTP_CONNECTIONS, HTTP_CONNECTIONS_OPEN,
        };
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (event, n) in [
            ("accepted", g(&self.accepted)),
            ("refused_over_limit", g(&self.refused_over_limit)),
            ("refused_client_limit", g(&self.refused_client_limit)),
            ("evicted_silent", g(&self.evicted_silent)),
            ("evicted_partial", g(&self.evicted_partial)),
            ("evicted_unauthenticated", g(&self.evicted_unauthenticated)),
            ("evicted_stalled", g(&self.evicted_stalled)),
            ("first_byte_timeout", g(&self.first_byte_timeouts)),
            ("send_timeout", g(&self.send_timeouts)),
            ("idle_closed", g(&self.idle_closed)),
            ("error", g(&self.errors)),
            ("tls_failed", g(&self.tls_failed)),
            ("accept_error", g(&self.accept_errors)),
        ] {
            out.add(&HTTP_CONNECTIONS, &[event], n);
        }
        out.add(&HTTP_CONNECTIONS_OPEN, &[], g(&self.open));
        out.add(
            &HTTP_ANSWERS_REFUSED_MEMORY,
            &[],
            g(&self.answers_refused_memory),
        );
        out.add(&HTTP_ANSWER_BYTES, &[], g(&self.answer_bytes));
    }
}

/// Loads a PEM certificate chain and private key into a rustls server configuration (ring
/// crypto provider, TLS 1.2 and 1.3, ALPN `http/1.1`).
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in the file", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key: {e}"))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Serves `app` on `listener` until `shutdown` completes, then lets open connections finish
/// their requests for up to `shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    stats: Arc<HttpStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max = limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (closing_tx, closing) = watch::channel(false);
    let registry: Shared = Arc::default();
    let mut next_id = 0u64;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: not fatal; back off so the loop does not spin.
                    let n = stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    if n < 10 || n.is_power_of_two() {
                        tracing::warn!(errors = n + 1, "HTTP accept failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let client = Client::of(peer);
        // One client cannot take more than its share, whatever the global room.
        if !lock(&registry).admit(client, limits.max_connections_per_client) {
            stats.refused_client_limit.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        }
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => Some(slot),
            // At the limit: the least trusted connection gives way.
            Err(_) if evict_least_trusted(&registry, &stats) => {
                tokio::time::timeout(Duration::from_secs(1), Arc::clone(&slots).acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(slot) = slot else {
            lock(&registry).leave(client);
            stats.refused_over_limit.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        if limits.send_buffer > 0 {
            let _ = socket2::SockRef::from(&stream).set_send_buffer_size(limits.send_buffer);
        }
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let (app, limits, stats, closing, acceptor, registry) = (
            app.clone(),
            limits.clone(),
            Arc::clone(&stats),
            closing.clone(),
            acceptor.clone(),
            Arc::clone(&registry),
        );
        let activity = Activity::new();
        next_id += 1;
        let id = next_id;
        lock(&registry).open.push((id, Arc::clone(&activity)));
        tokio::spawn(async move {
            let io = Watched {
                inner: stream,
                activity: Arc::clone(&activity),
            };
            let conn = Conn {
                limits: &limits,
                stats: &stats,
                activity: &activity,
                registry: &registry,
                client,
            };
            match acceptor {
                None => conn.serve(io, app, closing).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.header_timeout, acceptor.accept(io));
                    tokio::select! {
                        tls = handshake => match tls {
                            Ok(Ok(tls)) => conn.serve(tls, app, closing).await,
                            _ => {
                                stats.tls_failed.fetch_add(1, Ordering::Relaxed);
                            }
                        },
                        () = activity.evict.notified() => {}
                    }
                }
            }
            {
                let mut r = lock(&registry);
                r.open.retain(|(i, _)| *i != id);
                r.leave(client);
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(slot);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    // Every slot back means every connection ended.
    let _ = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(max as u32)).await;
    Ok(())
}

/// A client as the per-client bounds count it: an IPv4 address, or an IPv6 /64 (one host
/// usually holds a whole /64, so counting addresses would not bound it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Client(u128);

impl Client {
    fn of(peer: SocketAddr) -> Self {
        match peer.ip() {
            IpAddr::V4(v4) => Client(u128::from(v4.to_bits())),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client(u128::from(v4.to_bits())),
                None => Client(v6.to_bits() & !((1u128 << 64) - 1)),
            },
        }
    }
}

/// What one client holds: connections, and bytes of answers above [`SMALL_ANSWER`].
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    connections: usize,
    answer_bytes: usize,
}

/// The open connections (oldest first) and what each client holds: at most
/// `max_connections` + the connections being refused of each, so both stay bounded.
#[derive(Debug, Default)]
struct Registry {
    open: Vec<(u64, Arc<Activity>)>,
    clients: HashMap<Client, Held>,
    answer_bytes: usize,
}

impl Registry {
    /// Counts a connection of `client` if it holds fewer than `max`.
    fn admit(&mut self, client: Client, max: usize) -> bool {
        let held = self.clients.entry(client).or_default();
        if held.connections >= max.max(1) {
            if held.connections == 0 && held.answer_bytes == 0 {
                self.clients.remove(&client);
            }
            return false;
        }
        held.connections += 1;
        true
    }

    fn leave(&mut self, client: Client) {
        if let Some(held) = self.clients.get_mut(&client) {
            held.connections = held.connections.saturating_sub(1);
            if held.connections == 0 && held.answer_bytes == 0 {
                self.clients.remove(&client);
            }
        }
    }

    /// Reserves `n` answer bytes for `client` if both bounds allow.
    fn reserve(&mut self, client: Client, n: usize, limits: &HttpLimits) -> bool {
        let held = self.clients.entry(client).or_default();
        if self.answer_bytes.saturating_add(n) > limits.max_answer_bytes
            || held.answer_bytes.saturating_add(n) > limits.max_answer_bytes_per_client
        {
            return false;
        }
        held.answer_bytes += n;
        self.answer_bytes += n;
        true
    }

    fn release(&mut self, client: Client, n: usize) {
        self.answer_bytes = self.answer_bytes.saturating_sub(n);
        if let Some(held) = self.clients.get_mut(&client) {
            held.answer_bytes = held.answer_bytes.saturating_sub(n);
            if held.connections == 0 && held.answer_bytes == 0 {
                self.clients.remove(&client);
            }
        }
    }
}

type Shared = Arc<std::sync::Mutex<Registry>>;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How far a connection has earned its slot; the least trusted give way first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Trust {
    /// Not a byte sent.
    Silent = 0,
    /// Bytes, but no whole request head yet.
    Partial = 1,
    /// Whole requests, none of them authenticated.
    Unauthenticated = 2,
    /// An authenticated request (or any request, when the API needs no token): never evicted.
    Authenticated = 3,
}

/// A connection silent for this long goes first at the limit; a younger silent one only after
/// those that sent part of a request head.
pub const SILENT_GRACE: Duration = Duration::from_secs(1);

/// An authenticated connection whose answer has been under way this long is stalled (its client
/// reads slowly, or not at all): it gives way after the unauthenticated ones.
pub const STALLED: Duration = Duration::from_secs(1);

/// Tells the least trusted connection (the oldest among equals) to close, unless all are
/// authenticated and not stalled; whether there was one.
fn evict_least_trusted(registry: &Shared, stats: &HttpStats) -> bool {
    // Ranks: silent for `SILENT_GRACE`, partial, silent but young (under a flood a new client
    // is silent until its task first runs, while the flood's connections have sent their byte
    // long ago), unauthenticated, stalled; authenticated ones are kept.
    let rank = |a: &Activity| match a.trust() {
        Trust::Silent if a.epoch.elapsed() >= SILENT_GRACE => 0u8,
        Trust::Partial => 1,
        Trust::Silent => 2,
        Trust::Unauthenticated => 3,
        Trust::Authenticated if a.sending_for().is_some_and(|d| d >= STALLED) => 4,
        Trust::Authenticated => 5,
    };
    let mut r = lock(registry);
    let Some((at, rank)) = r
        .open
        .iter()
        .enumerate()
        .map(|(i, (_, a))| (i, rank(a)))
        .filter(|&(_, k)| k < 5)
        .min_by_key(|&(i, k)| (k, i))
    else {
        return false;
    };
    let (_, activity) = r.open.remove(at);
    activity.evict.notify_one();
    match rank {
        0 | 2 => &stats.evicted_silent,
        1 => &stats.evicted_partial,
        3 => &stats.evicted_unauthenticated,
        _ => &stats.evicted_stalled,
    }
    .fetch_add(1, Ordering::Relaxed);
    true
}

/// Marks the connection that `req` came on as authenticated: the API's token check calls it
/// when the token matched (or when no token is needed), so that the connection is never closed
/// to make room for another.
pub fn mark_authenticated<B>(req: &Request<B>) {
    if let Some(c) = req.extensions().get::<ConnMark>() {
        c.0.raise(Trust::Authenticated);
    }
}

/// The request extension through which handlers reach their connection's [`Activity`].
#[derive(Clone)]
struct ConnMark(Arc<Activity>);

/// One connection being served, and what it needs from the server.
struct Conn<'a> {
    limits: &'a HttpLimits,
    stats: &'a Arc<HttpStats>,
    activity: &'a Arc<Activity>,
    registry: &'a Shared,
    client: Client,
}

impl Conn<'_> {
    /// Serves the connection until it ends, times out, is evicted or the server shuts down.
    async fn serve<I>(self, io: I, app: Router, mut closing: watch::Receiver<bool>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limits = self.limits;
        let stats = self.stats;
        let activity = self.activity;
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(HYPER_BUFFER)
            .keep_alive(true);
        let marked = {
            let a = Arc::clone(activity);
            let (registry, client) = (Arc::clone(self.registry), self.client);
            let (lim, st) = (limits.clone(), Arc::clone(stats));
            let answer_activity = Arc::clone(activity);
            tower::ServiceBuilder::new()
                .map_request(move |mut req: Request<hyper::body::Incoming>| {
                    // A whole head arrived.
                    a.raise(Trust::Unauthenticated);
                    req.extensions_mut().insert(ConnMark(Arc::clone(&a)));
                    req
                })
                .map_response(move |res: Response<Body>| {
                    bound_answer(res, &registry, client, &lim, &st, &answer_activity)
                })
                .service(app)
        };
        let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(marked));
        let mut conn = std::pin::pin!(conn);
        let mut draining = false;
        loop {
            let idle_left = limits.idle_timeout.saturating_sub(activity.since());
            let first_left = if activity.trust() == Trust::Silent {
                limits
                    .first_byte_timeout
                    .saturating_sub(activity.epoch.elapsed())
            } else {
                Duration::MAX
            };
            let send_left = activity
                .sending_for()
                .map_or(Duration::MAX, |d| limits.send_timeout.saturating_sub(d));
            let wake = idle_left.min(first_left).min(send_left);
            tokio::select! {
                result = conn.as_mut() => {
                    if result.is_err() {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                () = tokio::time::sleep(wake) => {
                    if activity.since() >= limits.idle_timeout {
                        stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    if activity.trust() == Trust::Silent
                        && activity.epoch.elapsed() >= limits.first_byte_timeout
                    {
                        stats.first_byte_timeouts.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    if activity.sending_for().is_some_and(|d| d >= limits.send_timeout) {
                        stats.send_timeouts.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                () = activity.evict.notified() => return,
                changed = closing.changed(), if !draining => {
                    draining = true;
                    if changed.is_ok() {
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// Holds an answer of known size above [`SMALL_ANSWER`] against the memory bounds (a 503 when
/// they are reached) and hands it to hyper in [`ANSWER_CHUNK`] pieces.
fn bound_answer(
    res: Response<Body>,
    registry: &Shared,
    client: Client,
    limits: &HttpLimits,
    stats: &Arc<HttpStats>,
    activity: &Arc<Activity>,
) -> Response<Body> {
    let Some(size) = res.body().size_hint().exact() else {
        return res;
    };
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if size <= SMALL_ANSWER {
        return res;
    }
    if !lock(registry).reserve(client, size, limits) {
        stats.answers_refused_memory.fetch_add(1, Ordering::Relaxed);
        let body = ErrorBody {
            error: format!(
                "the server is sending too many large answers ({} MiB at most, {} MiB per \
                 client); retry shortly",
                limits.max_answer_bytes >> 20,
                limits.max_answer_bytes_per_client >> 20
            ),
            status: 503,
        };
        let mut r = Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()));
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    stats.answer_bytes.fetch_add(size as u64, Ordering::Relaxed);
    activity.start_sending();
    let (parts, inner) = res.into_parts();
    let held = HeldAnswer {
        registry: Arc::clone(registry),
        stats: Arc::clone(stats),
        activity: Arc::clone(activity),
        client,
        bytes: size,
    };
    Response::from_parts(
        parts,
        Body::new(Chunked {
            inner,
            pending: Bytes::new(),
            _held: held,
        }),
    )
}

/// An answer's bytes held against the bounds until the answer is dropped.
struct HeldAnswer {
    registry: Shared,
    stats: Arc<HttpStats>,
    activity: Arc<Activity>,
    client: Client,
    bytes: usize,
}

impl Drop for HeldAnswer {
    fn drop(&mut self) {
        lock(&self.registry).release(self.client, self.bytes);
        self.stats
            .answer_bytes
            .fetch_sub(self.bytes as u64, Ordering::Relaxed);
        self.activity.stop_sending();
    }
}

/// A body handed on in [`ANSWER_CHUNK`] pieces: hyper asks for the next piece only when its
/// write queue has room, so a slow reader's answer waits here, counted, not in hyper.
struct Chunked {
    inner: Body,
    pending: Bytes,
    _held: HeldAnswer,
}

impl hyper::body::Body for Chunked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.pending.is_empty() {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            }
        }
        let n = self.pending.len().min(ANSWER_CHUNK);
        // A copy, not a slice: a slice in hyper's queue would keep the whole answer alive
        // after this body (and its hold on the bounds) is gone.
        let piece = Bytes::copy_from_slice(&self.pending[..n]);
        let _ = self.pending.split_to(n);
        if self.pending.is_empty() {
            // Let the answer go as soon as its last piece is out.
            self.pending = Bytes::new();
        }
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut h = self.inner.size_hint();
        let p = self.pending.len() as u64;
        h.set_lower(h.lower() + p);
        if let Some(u) = h.upper() {
            h.set_upper(u + p);
        }
        h
    }
}

/// When a connection last moved a byte, how far it earned its slot, whether an answer is
/// being sent (since when), and its eviction notice.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
    trust: AtomicU8,
    /// When the answer being sent was made, in ms since `epoch` plus one; 0: none.
    sending_ms: AtomicU64,
    evict: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            trust: AtomicU8::new(Trust::Silent as u8),
            sending_ms: AtomicU64::new(0),
            evict: tokio::sync::Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn since(&self) -> Duration {
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }

    fn trust(&self) -> Trust {
        match self.trust.load(Ordering::Relaxed) {
            0 => Trust::Silent,
            1 => Trust::Partial,
            2 => Trust::Unauthenticated,
            _ => Trust::Authenticated,
        }
    }

    /// Raises the trust to `t` (never lowers it).
    fn raise(&self, t: Trust) {
        self.trust.fetch_max(t as u8, Ordering::Relaxed);
    }

    fn start_sending(&self) {
        self.sending_ms.store(self.now_ms() + 1, Ordering::Relaxed);
    }

    fn stop_sending(&self) {
        self.sending_ms.store(0, Ordering::Relaxed);
    }

    /// How long the answer being sent has been under way.
    fn sending_for(&self) -> Option<Duration> {
        match self.sending_ms.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Duration::from_millis(self.now_ms().saturating_sub(t - 1))),
        }
    }
}

/// A stream that notes when bytes move, for the idle timeout.
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.touch();
            this.activity.raise(Trust::Partial);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
