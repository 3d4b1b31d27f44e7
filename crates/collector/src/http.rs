//! Serving the API over HTTP/1.1, and optionally TLS (rustls), with the limits a network-facing
//! server needs: at most `max_connections` connections at once (at the limit, the oldest
//! connection that has not sent a byte yet makes room for the new one; with none such, the new
//! one is closed at once; both counted), a deadline for each request head (`header_timeout`, which also bounds how
//! long a kept-alive connection may sit waiting for its next request), and an idle timeout
//! (`idle_timeout`: no byte read or written, e.g. a client that stopped reading an event
//! stream). hyper serves each connection; this module is the accept loop around it.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::rustls;

/// Connection limits of the HTTP server.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Connections served at once; more are closed on accept (counted).
    pub max_connections: usize,
    /// Time a client has to send a request head, counted from when the server is ready for it
    /// (so also the longest a kept-alive connection waits for its next request), and to
    /// complete a TLS handshake.
    pub header_timeout: Duration,
    /// A connection on which no byte moved either way for this long is closed.
    pub idle_timeout: Duration,
    /// How long shutdown waits for open connections (event streams never end by themselves).
    pub shutdown_grace: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
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
    /// Connections closed to make room at the limit: they had not sent a byte.
    pub evicted_silent: AtomicU64,
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
        use intscope_core::counters::{HTTP_CONNECTIONS, HTTP_CONNECTIONS_OPEN};
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (event, n) in [
            ("accepted", g(&self.accepted)),
            ("refused_over_limit", g(&self.refused_over_limit)),
            ("evicted_silent", g(&self.evicted_silent)),
            ("idle_closed", g(&self.idle_closed)),
            ("error", g(&self.errors)),
            ("tls_failed", g(&self.tls_failed)),
            ("accept_error", g(&self.accept_errors)),
        ] {
            out.add(&HTTP_CONNECTIONS, &[event], n);
        }
        out.add(&HTTP_CONNECTIONS_OPEN, &[], g(&self.open));
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
    let open: Open = Arc::default();
    let mut next_id = 0u64;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
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
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => Some(slot),
            // At the limit: a connection that never sent a byte (an idle flood) gives way.
            Err(_) if evict_silent(&open, &stats) => {
                tokio::time::timeout(Duration::from_secs(1), Arc::clone(&slots).acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(slot) = slot else {
            stats.refused_over_limit.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let (app, limits, stats, closing, acceptor, open) = (
            app.clone(),
            limits.clone(),
            Arc::clone(&stats),
            closing.clone(),
            acceptor.clone(),
            Arc::clone(&open),
        );
        let activity = Activity::new();
        next_id += 1;
        let id = next_id;
        lock(&open).push((id, Arc::clone(&activity)));
        tokio::spawn(async move {
            let io = Watched {
                inner: stream,
                activity: Arc::clone(&activity),
            };
            match acceptor {
                None => connection(io, app, &limits, &stats, &activity, closing).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.header_timeout, acceptor.accept(io));
                    tokio::select! {
                        tls = handshake => match tls {
                            Ok(Ok(tls)) => {
                                connection(tls, app, &limits, &stats, &activity, closing).await;
                            }
                            _ => {
                                stats.tls_failed.fetch_add(1, Ordering::Relaxed);
                            }
                        },
                        () = activity.evict.notified() => {}
                    }
                }
            }
            lock(&open).retain(|(i, _)| *i != id);
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

/// The open connections, oldest first.
type Open = Arc<std::sync::Mutex<Vec<(u64, Arc<Activity>)>>>;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Tells the oldest connection that has not sent a byte to close; whether there was one.
fn evict_silent(open: &Open, stats: &HttpStats) -> bool {
    let mut open = lock(open);
    let Some(at) = open
        .iter()
        .position(|(_, a)| !a.read_any.load(Ordering::Relaxed))
    else {
        return false;
    };
    let (_, activity) = open.remove(at);
    activity.evict.notify_one();
    stats.evicted_silent.fetch_add(1, Ordering::Relaxed);
    true
}

/// Serves one connection until it ends, goes idle, is evicted or the server shuts down.
async fn connection<I>(
    io: I,
    app: Router,
    limits: &HttpLimits,
    stats: &HttpStats,
    activity: &Activity,
    mut closing: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    let mut draining = false;
    loop {
        let idle_left = limits.idle_timeout.saturating_sub(activity.since());
        tokio::select! {
            result = conn.as_mut() => {
                if result.is_err() {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            () = tokio::time::sleep(idle_left) => {
                if activity.since() >= limits.idle_timeout {
                    stats.idle_closed.fetch_add(1, Ordering::Relaxed);
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

/// When a connection last moved a byte, whether it ever sent one, and its eviction notice.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
    read_any: std::sync::atomic::AtomicBool,
    evict: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            read_any: std::sync::atomic::AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        })
    }

    fn touch(&self) {
        self.last_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn since(&self) -> Duration {
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
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
            this.activity.read_any.store(true, Ordering::Relaxed);
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
