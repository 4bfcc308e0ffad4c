//! The HTTP listener: hyper's HTTP/1.1 and HTTP/2 connections, under limits that axum's `serve` does
//! not set.
//!
//! HTTP/2 is served in clear text to clients that start with its preface (prior knowledge, "h2c":
//! `curl --http2-prior-knowledge`, Go's and reqwest's h2c clients); TLS in front (a proxy) serves it
//! with ALPN. Its streams share one connection, so many long polls cost one connection's buffers, not
//! one each.
//!
//! - **Header timeout** (`server.header_timeout_ms`): an HTTP/1.1 connection must send a complete request
//!   head within this time of being opened or of its previous answer. hyper runs one timer for both, so
//!   it closes idle keep-alive connections and slow senders (slowloris) alike; axum's `serve` sets no
//!   timer, and without one hyper enforces neither. An HTTP/2 connection is pinged every 20 s and
//!   closed when a ping goes unanswered for 20 s.
//! - **Connection cap** (`server.max_connections`): beyond it a connection gets one 503 `overloaded`
//!   answer and is closed, so the process never runs out of file descriptors or memory to clients that
//!   only connect.
//!
//! Each connection is served by a clone of one [`Router`] (an `Arc`): axum's `serve` rebuilds the
//! router's route table per connection, about 16 KiB each, which dominated what an idle connection or
//! a waiting long poll cost. On shutdown the listener stops accepting, idle connections close, and
//! requests in flight get `shutdown.grace_ms` to finish.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;

/// How often an HTTP/2 connection is pinged, and how long a ping may go unanswered.
const H2_PING: Duration = Duration::from_secs(20);

/// Streams (requests, long polls included) at once on one HTTP/2 connection; more wait in the client.
const H2_STREAMS: u32 = 1024;

/// What the listener enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Time to receive a complete request head, from the connection's opening or its previous answer.
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long requests in flight may finish after shutdown begins.
    pub grace: Duration,
}

/// Serves `app` on `listener` until `shutdown`, then drains.
pub async fn serve(
    listener: TcpListener,
    app: crate::App,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    raise_open_files(limits.max_connections);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .keep_alive_interval(H2_PING)
        .keep_alive_timeout(H2_PING)
        .max_concurrent_streams(H2_STREAMS);
    // A connection beyond the cap gets one HTTP/1.1 answer; an HTTP/2 one is closed unanswered.
    let mut refusing = http1::Builder::new();
    refusing
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(false);
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
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let (h1, h2, watcher) = (h1.clone(), h2.clone(), graceful.watcher());
                let service = TowerToHyperService::new(app.clone());
                let header_timeout = limits.header_timeout;
                metrics::gauge!("dq_http_connections").increment(1.0);
                tokio::spawn(async move {
                    // Each version's connection its own task type: one that could be either holds the
                    // larger HTTP/2 state for every HTTP/1.1 connection too (about 9 KiB each).
                    let served = match speaks_h2(&stream, header_timeout).await {
                        Some(true) => watcher.watch(h2.serve_connection(TokioIo::new(stream), service)).await,
                        Some(false) => watcher.watch(h1.serve_connection(TokioIo::new(stream), service)).await,
                        None => Ok(()),
                    };
                    if let Err(e) = served {
                        tracing::debug!(cause = %e, "connection ended with an error");
                    }
                    metrics::gauge!("dq_http_connections").decrement(1.0);
                    drop(permit);
                });
            }
            Err(_) => {
                metrics::counter!("dq_http_connections_refused_total").increment(1);
                let max = limits.max_connections;
                let answer = hyper::service::service_fn(move |_| async move {
                    Ok::<_, Infallible>(
                        ApiError::overloaded(format!(
                            "the server holds as many connections as it may (server.max_connections = {})",
                            max
                        ))
                        .into_response(),
                    )
                });
                let conn = graceful.watch(refusing.serve_connection(TokioIo::new(stream), answer));
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.grace) => {
            tracing::warn!(grace_ms = limits.grace.as_millis() as u64, "requests still in flight after the grace period; exiting");
        }
    }
    Ok(())
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
