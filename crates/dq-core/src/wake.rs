//! Wake-ups over Redis pub/sub: scripts publish when a ready queue stops being empty or a bucket's
//! earliest due time moves earlier, so long polls and timers wait for an event instead of polling Redis.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::shard::Shards;

/// What a listener reports.
#[derive(Debug, Clone)]
pub enum Wake {
    /// A message on the channel, from shard `shard`.
    Message {
        /// Index of the shard that published.
        shard: usize,
        /// The payload (a topic, or `<bucket key> <due ms>`).
        payload: String,
    },
    /// The listener (re)subscribed on a shard: messages sent while it was away are lost, so whoever
    /// waits must look again.
    Subscribed {
        /// Index of the shard.
        shard: usize,
    },
}

/// Subscribes to `channel` on every shard, with its own connection per shard, and calls `on_wake` for
/// every message; reconnects with backoff until `shutdown`.
pub fn listen(
    shards: &Shards,
    channel: String,
    shutdown: CancellationToken,
    on_wake: Arc<dyn Fn(Wake) + Send + Sync>,
) -> Vec<JoinHandle<()>> {
    shards
        .all()
        .iter()
        .map(|shard| {
            let (client, index) = (shard.client().clone(), shard.index);
            let (channel, shutdown, on_wake) = (channel.clone(), shutdown.clone(), on_wake.clone());
            tokio::spawn(async move {
                let mut backoff = Duration::from_millis(100);
                while !shutdown.is_cancelled() {
                    match client.get_async_pubsub().await {
                        Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                            Ok(()) => {
                                backoff = Duration::from_millis(100);
                                on_wake(Wake::Subscribed { shard: index });
                                let mut messages = pubsub.on_message();
                                loop {
                                    tokio::select! {
                                        msg = messages.next() => match msg {
                                            Some(msg) => {
                                                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                                                on_wake(Wake::Message { shard: index, payload });
                                            }
                                            None => break,
                                        },
                                        _ = shutdown.cancelled() => return,
                                    }
                                }
                                tracing::warn!(shard = index, %channel, "pub/sub connection lost, resubscribing");
                            }
                            Err(e) => tracing::warn!(shard = index, cause = %e, "cannot subscribe"),
                        },
                        Err(e) => tracing::debug!(shard = index, cause = %e, "pub/sub connection failed"),
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            })
        })
        .collect()
}

/// Per-topic signals that a ready queue may have jobs, for long-polling reservers in this process.
///
/// A reserver takes a receiver for each of its topics, marks it seen, tries to reserve, and only when
/// that found nothing waits for a change. Scripts publish when a queue goes from empty to non-empty,
/// which is exactly when someone may be waiting on it.
#[derive(Debug, Default)]
pub struct ReadySignals {
    /// One counter per topic anyone waited on; a bump wakes that topic's waiters.
    topics: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl ReadySignals {
    /// A receiver that changes whenever `topic` may have become ready.
    pub fn subscribe(&self, topic: &str) -> watch::Receiver<u64> {
        let mut topics = self.topics.lock().expect("ready signals lock");
        topics
            .entry(topic.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes the waiters of one topic.
    pub fn notify(&self, topic: &str) {
        if let Some(tx) = self.topics.lock().expect("ready signals lock").get(topic) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every waiter (after a reconnect, when messages may have been lost).
    pub fn notify_all(&self) {
        for tx in self.topics.lock().expect("ready signals lock").values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Listens for ready wake-ups on every shard and turns them into signals.
    pub fn listen(
        self: &Arc<Self>,
        shards: &Shards,
        channel: String,
        shutdown: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let me = self.clone();
        listen(
            shards,
            channel,
            shutdown,
            Arc::new(move |wake| match wake {
                Wake::Message { payload, .. } => me.notify(&payload),
                Wake::Subscribed { .. } => me.notify_all(),
            }),
        )
    }
}

/// Waits until any of `receivers` changes.
pub async fn changed_any(receivers: &mut [watch::Receiver<u64>]) {
    if receivers.is_empty() {
        return std::future::pending().await;
    }
    let futs = receivers.iter_mut().map(|r| Box::pin(r.changed()));
    // An error means the sender is gone, which only happens at shutdown: treat it as a wake-up.
    let _ = futures_util::future::select_all(futs).await;
}
