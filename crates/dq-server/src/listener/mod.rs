//! The HTTP listener: hyper's HTTP/1.1 and HTTP/2 connections, in clear or over TLS, under limits that
//! axum's `serve` does not set.
//!
//! With `server.tls_cert` and `server.tls_key` the listener serves HTTPS itself ([`tls`]): rustls, with
//! HTTP/2 or HTTP/1.1 chosen by ALPN (`h2`, `http/1.1`; a client that offers neither gets HTTP/1.1),
//! and the certificate read again on SIGHUP. Without them it serves plain HTTP, and HTTP/2 in clear
//! text to clients that start with its preface (prior knowledge, "h2c": `curl --http2-prior-knowledge`,
//! Go's and reqwest's h2c clients). HTTP/2's streams share one connection, so many long polls cost one
//! connection's buffers, not one each.
//!
//! - **Header timeout** (`server.header_timeout_ms`): a TLS handshake must complete within it. An
//!   HTTP/1.1 connection must send a complete request head within this time of being opened (after the
//!   handshake) or of its previous answer. hyper runs one timer for both, so it closes idle keep-alive
//!   connections and slow senders (slowloris) alike; axum's `serve` sets no timer, and without one
//!   hyper enforces neither. An HTTP/2 connection with no open stream for this long is closed the
//!   same way ([`idle`]: GOAWAY, then the close); it is also pinged every 20 s and closed when a ping
//!   goes unanswered for 20 s.
//! - **Connection cap** (`server.max_connections`): beyond it a connection gets one 503 `overloaded`
//!   answer and is closed, so the process never runs out of file descriptors or memory to clients that
//!   only connect. The answer is HTTP/1.1: over TLS such a connection is offered only `http/1.1`; a
//!   clear-text HTTP/2 one is closed unanswered.
//!
//! Each connection is served by a clone of one [`Router`](axum::Router) (an `Arc`): axum's `serve`
//! rebuilds the router's route table per connection, about 16 KiB each, which dominated what an idle
//! connection or a waiting long poll cost. On shutdown the listener stops accepting, connections still
//! in their handshake or first bytes are dropped, idle ones close, and requests in flight get
//! `shutdown.grace_ms` to finish.

mod idle;
mod tls;

pub use tls::Tls;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::ApiError;

/// How often an HTTP/2 connection is pinged, and how long a ping may go unanswered.
const H2_PING: Duration = Duration::from_secs(20);

/// Streams (requests, long polls included) at once on one HTTP/2 connection; more wait in the client.
const H2_STREAMS: u32 = 1024;

/// What the listener enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Time to complete a TLS handshake, and to receive a complete request head from the connection's
    /// opening or its previous answer; an HTTP/2 connection's longest time without a stream.
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long requests in flight may finish after shutdown begins.
    pub grace: Duration,
}

/// How every connection is served: shared by the connection tasks.
struct Protocols {
    /// HTTP/1.1 connections within the cap.
    h1: http1::Builder,
    /// HTTP/2 connections.
    h2: http2::Builder<TokioExecutor>,
    /// Connections beyond the cap: one answer, then closed.
    refusing: http1::Builder,
    /// HTTPS, when configured.
    tls: Option<Tls>,
    /// The limits.
    limits: ConnectionLimits,
    /// Cancelled when the drain begins.
    shutdown: CancellationToken,
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown`, then drains.
pub async fn serve(
    listener: TcpListener,
    app: crate::App,
    limits: ConnectionLimits,
    tls: Option<Tls>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    raise_open_files(limits.max_connections);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .keep_alive_interval(H2_PING)
        .keep_alive_timeout(H2_PING)
        .max_concurrent_streams(H2_STREAMS);
    let mut refusing = http1::Builder::new();
    refusing
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(false);
    let protocols = Arc::new(Protocols {
        h1,
        h2,
        refusing,
        tls,
        limits,
        shutdown: shutdown.clone(),
    });
    metrics::gauge!("dq_http_connections").set(0.0);
    metrics::counter!("dq_http_connections_refused_total").increment(0);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, mostly: wait for some to close rather than spin.
                    tracing::warn!(cause = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let protocols = protocols.clone();
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let service = TowerToHyperService::new(app.clone());
                metrics::gauge!("dq_http_connections").increment(1.0);
                connections.spawn(async move {
                    protocols.serve(stream, service).await;
                    metrics::gauge!("dq_http_connections").decrement(1.0);
                    drop(permit);
                });
            }
            Err(_) => {
                metrics::counter!("dq_http_connections_refused_total").increment(1);
                connections.spawn(async move { protocols.refuse(stream).await });
            }
        }
    }
    drop(listener);
    connections.close();
    tokio::select! {
        _ = connections.wait() => {}
        _ = tokio::time::sleep(limits.grace) => {
            tracing::warn!(grace_ms = limits.grace.as_millis() as u64, "requests still in flight after the grace period; exiting");
        }
    }
    Ok(())
}

/// The service of a connection within the cap.
type Service = TowerToHyperService<crate::App>;

impl Protocols {
    /// Serves one connection within the cap, in the version it speaks.
    async fn serve(&self, stream: TcpStream, service: Service) {
        let timeout = self.limits.header_timeout;
        let Some(tls) = &self.tls else {
            let h2 = tokio::select! {
                h2 = speaks_h2(&stream, timeout) => h2,
                _ = self.shutdown.cancelled() => None,
            };
            if let Some(h2) = h2 {
                self.serve_http(TokioIo::new(stream), h2, service).await;
            }
            return;
        };
        // On the heap: held inline, the handshake's and rustls's state would size every clear-text
        // connection's task too (5.9 KB rather than 1.1 KB, for as long as the connection lives).
        Box::pin(self.serve_tls(tls, stream, service)).await;
    }

    /// Serves one connection over TLS: the handshake, then the version ALPN chose.
    async fn serve_tls(&self, tls: &Tls, stream: TcpStream, service: Service) {
        if let Some(stream) = self.handshake(&tls.acceptor, stream).await {
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            self.serve_http(TokioIo::new(stream), h2, service).await;
        }
    }

    /// Serves HTTP/2 (`h2`) or HTTP/1.1 on `io` until it closes or the drain closes it.
    async fn serve_http<I>(&self, io: I, h2: bool, service: Service)
    where
        I: Read + Write + Unpin + Send + 'static,
    {
        let served = if h2 {
            let (streams, open) = idle::Streams::new();
            let service = idle::Counted {
                inner: service,
                streams,
            };
            // On the heap: held inline, HTTP/2's larger state would size every HTTP/1.1 connection's task
            // too (about 9 KiB each).
            let mut conn = Box::pin(self.h2.serve_connection(io, service));
            let idle = idle::idle(open, self.limits.header_timeout);
            until_closed(conn.as_mut(), &self.shutdown, idle).await
        } else {
            let conn = std::pin::pin!(self.h1.serve_connection(io, service));
            until_closed(conn, &self.shutdown, std::future::pending()).await
        };
        if let Err(e) = served {
            tracing::debug!(cause = %e, "connection ended with an error");
        }
    }

    /// Answers a connection beyond the cap with one 503 `overloaded` (HTTP/1.1) and closes it.
    async fn refuse(&self, stream: TcpStream) {
        let max = self.limits.max_connections;
        let answer = hyper::service::service_fn(move |_| async move {
            Ok::<_, Infallible>(
                ApiError::overloaded(format!(
                    "the server holds as many connections as it may (server.max_connections = {max})"
                ))
                .into_response(),
            )
        });
        let none = std::future::pending();
        let _ = match &self.tls {
            None => {
                let conn = std::pin::pin!(self.refusing.serve_connection(TokioIo::new(stream), answer));
                until_closed(conn, &self.shutdown, none).await
            }
            Some(tls) => {
                let Some(stream) = self.handshake(&tls.refusing, stream).await else {
                    return;
                };
                let conn = std::pin::pin!(self.refusing.serve_connection(TokioIo::new(stream), answer));
                until_closed(conn, &self.shutdown, none).await
            }
        };
    }

    /// The TLS handshake, within the header timeout; `None` when it fails, times out or the drain
    /// begins first.
    async fn handshake<S>(
        &self,
        acceptor: &tokio_rustls::TlsAcceptor,
        stream: S,
    ) -> Option<tokio_rustls::server::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        tokio::select! {
            done = tokio::time::timeout(self.limits.header_timeout, acceptor.accept(stream)) => match done {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(e)) => {
                    tracing::debug!(cause = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!("TLS handshake not done within server.header_timeout_ms");
                    None
                }
            },
            _ = self.shutdown.cancelled() => None,
        }
    }
}

/// Runs `conn` to its end. When the drain begins, or `idle` returns, it is asked to finish the requests
/// it has and close.
async fn until_closed<C>(
    mut conn: Pin<&mut C>,
    shutdown: &CancellationToken,
    idle: impl Future<Output = ()>,
) -> Result<(), C::Error>
where
    C: GracefulConnection,
{
    tokio::select! {
        done = conn.as_mut() => return done,
        _ = shutdown.cancelled() => {}
        _ = idle => tracing::debug!("closing an HTTP/2 connection without a stream for server.header_timeout_ms"),
    }
    conn.as_mut().graceful_shutdown();
    conn.await
}

/// Whether the client starts with HTTP/2's preface (prior knowledge), from the first bytes it sent,
/// looked at without reading them; `None` when it closes, or sends nothing within `within` (an idle
/// connection, closed as the header timeout would close it).
async fn speaks_h2(stream: &TcpStream, within: Duration) -> Option<bool> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut first = [0u8; 2];
    tokio::time::timeout(within, async {
        loop {
            let n = stream.peek(&mut first).await.ok()?;
            match n {
                0 => return None,
                // "PR" starts no method dq serves: only the preface.
                2 => return Some(first == PREFACE[..2]),
                // One byte: a P could still be POST, PUT or PATCH.
                _ if first[0] != PREFACE[0] => return Some(false),
                _ => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Raises the soft limit on open files to the hard one (as Go's runtime does): the soft limit is often
/// 1024, far below `server.max_connections`. Warns when even the hard limit leaves too few.
fn raise_open_files(max_connections: usize) {
    // Redis connections, the metrics listener, log and spare descriptors.
    const SPARE: u64 = 256;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < max_connections as u64 + SPARE => tracing::warn!(
            open_files = limit,
            max_connections,
            "the open-file limit is below server.max_connections + {SPARE}: connections beyond it fail to be accepted (raise LimitNOFILE, or lower server.max_connections)"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(cause = %e, "cannot raise the open-file limit"),
    }
}
