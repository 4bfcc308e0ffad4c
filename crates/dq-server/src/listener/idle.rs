//! HTTP/2's idle close: a connection with no open stream for `server.header_timeout_ms` is closed, as
//! hyper's header timeout closes an idle HTTP/1.1 keep-alive connection.
//!
//! hyper's HTTP/2 server has no such timer (its pings only find dead peers, and a live idle client
//! answers them), so an idle connection would hold its file descriptor, its permit under
//! `server.max_connections` and its buffers for as long as the client keeps it. [`Counted`] counts a
//! stream open from its request until its answer's body is sent or dropped; [`idle`] waits for the
//! count to stay at 0 that long. The listener then closes the connection gracefully (GOAWAY): a
//! request that races it is refused in a way clients retry on a new connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::HttpBody;
use hyper::{Request, Response};
use tokio::sync::watch;

/// Streams open on one connection.
#[derive(Debug, Clone)]
pub(super) struct Streams(Arc<watch::Sender<usize>>);

impl Streams {
    /// A count at 0, and the receiver that [`idle`] watches.
    pub(super) fn new() -> (Streams, watch::Receiver<usize>) {
        let (tx, rx) = watch::channel(0);
        (Streams(Arc::new(tx)), rx)
    }

    fn open(&self) -> Open {
        self.0.send_modify(|n| *n += 1);
        Open(self.0.clone())
    }
}

/// One open stream; closed when dropped.
#[derive(Debug)]
struct Open(Arc<watch::Sender<usize>>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Returns once no stream has been open for `limit`.
pub(super) async fn idle(mut open: watch::Receiver<usize>, limit: Duration) {
    loop {
        if open.wait_for(|&n| n == 0).await.is_err() {
            return;
        }
        match tokio::time::timeout(limit, open.changed()).await {
            // A stream opened (it may have closed again): the wait starts over at the next idle moment.
            Ok(Ok(())) => continue,
            Ok(Err(_)) | Err(_) => return,
        }
    }
}

/// A hyper service whose requests count as open streams until their answers are sent.
#[derive(Debug, Clone)]
pub(super) struct Counted<S> {
    /// The service answering the requests.
    pub(super) inner: S,
    /// The connection's count.
    pub(super) streams: Streams,
}

impl<S, Q, B> hyper::service::Service<Request<Q>> for Counted<S>
where
    S: hyper::service::Service<Request<Q>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<CountedBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, request: Request<Q>) -> Self::Future {
        // Opened before the handler runs: a long poll that waits is an open stream.
        let open = self.streams.open();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| CountedBody { body, _open: open }))
        })
    }
}

/// An answer's body that keeps its stream counted open until it is sent (or dropped, on a reset).
#[derive(Debug)]
pub(super) struct CountedBody<B> {
    body: B,
    _open: Open,
}

impl<B: HttpBody + Unpin> HttpBody for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
