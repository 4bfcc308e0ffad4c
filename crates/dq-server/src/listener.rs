//! The HTTP listener: hyper's HTTP/1.1 connections, under limits that axum's `serve` does not set.
//!
//! - **Header timeout** (`server.header_timeout_ms`): a connection must send a complete request head
//!   within this time of being opened or of its previous answer. hyper runs one timer for both, so it
//!   closes idle keep-alive connections and slow senders (slowloris) alike; axum's `serve` sets no
//!   timer, and without one hyper enforces neither.
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

use axum::Router;
use axum::response::IntoResponse;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;

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
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    raise_open_files(limits.max_connections);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let mut refusing = http.clone();
    refusing.keep_alive(false);
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
        let io = TokioIo::new(stream);
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let conn = graceful.watch(http.serve_connection(io, TowerToHyperService::new(app.clone())));
                metrics::gauge!("dq_http_connections").increment(1.0);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
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
                let conn = graceful.watch(refusing.serve_connection(io, answer));
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
