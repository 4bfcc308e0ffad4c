//! Wake-ups over Redis pub/sub: scripts publish on their partition's channel when a ready queue stops
//! being empty or the delay set's earliest due time moves earlier, so long polls and timers wait for an
//! event instead of polling Redis.
//!
//! One connection per listener subscribes to a pattern covering every partition's channel. On a cluster a
//! PUBLISH reaches every node, so any node will do: the listener takes the configured nodes in turn and
//! moves on when one fails. With Sentinel it subscribes on the primary Sentinel names now.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::keys::Keys;
use crate::queue::Queue;

/// What a listener reports.
#[derive(Debug, Clone)]
pub enum Wake {
    /// A message on partition `partition`'s channel.
    Message {
        /// The partition whose script published.
        partition: u16,
        /// The payload (a topic, or `<delay set key> <due ms>`).
        payload: String,
    },
    /// The listener (re)subscribed: messages sent while it was away are lost, so whoever waits must look
    /// again.
    Subscribed,
}

/// Subscribes to `pattern` and calls `on_wake` for every message; reconnects (to the next node, on a
/// cluster) with backoff until `shutdown`.
pub fn listen(
    queue: &Queue,
    pattern: String,
    shutdown: CancellationToken,
    on_wake: Arc<dyn Fn(Wake) + Send + Sync>,
) -> JoinHandle<()> {
    let redis = queue.redis().clone();
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        let mut turn = 0usize;
        while !shutdown.is_cancelled() {
            match redis.pubsub_clients().await {
                Ok(clients) if !clients.is_empty() => {
                    let client = &clients[turn % clients.len()];
                    turn += 1;
                    match client.get_async_pubsub().await {
                        Ok(mut pubsub) => match pubsub.psubscribe(&pattern).await {
                            Ok(()) => {
                                backoff = Duration::from_millis(100);
                                on_wake(Wake::Subscribed);
                                let mut messages = pubsub.on_message();
                                loop {
                                    tokio::select! {
                                        msg = messages.next() => match msg {
                                            Some(msg) => {
                                                let Some(partition) = Keys::channel_partition(msg.get_channel_name()) else {
                                                    continue;
                                                };
                                                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                                                on_wake(Wake::Message { partition, payload });
                                            }
                                            None => break,
                                        },
                                        _ = shutdown.cancelled() => return,
                                    }
                                }
                                tracing::warn!(%pattern, "pub/sub connection lost, subscribing again");
                            }
                            Err(e) => tracing::warn!(cause = %e, "cannot subscribe"),
                        },
                        Err(e) => tracing::debug!(cause = %e, "pub/sub connection failed"),
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(cause = %e, "cannot find a node for pub/sub"),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    })
}

/// Feeds the queue's [`crate::queue::ReadyIndex`] with ready wake-ups until `shutdown`, so reserves in
/// this process go to the partitions that have work and long polls wake when a topic becomes ready.
pub fn follow_ready(queue: &Queue, shutdown: CancellationToken) -> JoinHandle<()> {
    let index = queue.ready_index().clone();
    index.set_listening(true);
    let done = index.clone();
    let cancelled = shutdown.clone();
    tokio::spawn(async move {
        cancelled.cancelled().await;
        done.set_listening(false);
    });
    listen(
        queue,
        queue.keys().ready_channels(),
        shutdown,
        Arc::new(move |wake| match wake {
            Wake::Message { partition, payload } => index.mark(&payload, partition),
            Wake::Subscribed => index.resync(),
        }),
    )
}
