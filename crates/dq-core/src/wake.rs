//! Wake-ups over Redis pub/sub: scripts publish on their partition's channel when a ready queue stops
//! being empty or the delay set's earliest due time (or the announced deadline) moves earlier, so long
//! polls and timers wait for an event instead of polling Redis.
//!
//! Two ways to listen, by shape (see [`crate::store::scripts::Waking`] for the two ways to publish):
//!
//! - **Standalone and Sentinel**: classic pub/sub. One connection to the primary subscribes to every
//!   partition's channel with one pattern (`PSUBSCRIBE <prefix>:{*}:wake:<kind>`), or, for a
//!   dq-consumer's hand-off channels, by name. With Sentinel it is the primary Sentinel names now.
//! - **Cluster**: sharded pub/sub (Redis 7.0). Each partition's channel carries the partition's hash tag,
//!   so it lives in the partition's slot, and its scripts' `SPUBLISH` reaches the subscribers of that
//!   node directly. A classic `PUBLISH` would travel to every node over the cluster bus instead: it costs
//!   every node a message per wake-up and arrived up to 40 ms late on a local cluster (Nagle's algorithm
//!   on the bus). redis-rs's cluster connection sends each `SSUBSCRIBE` to the node that serves the
//!   channel and subscribes again after a reconnect or a slot-map change.
//!
//! Messages sent while a listener is not subscribed are lost, so after every (re)subscription it
//! reports [`Wake::Subscribed`] and whoever waits looks again.

mod long_polls;
mod sharded;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::RedisMode;
use crate::queue::Queue;
use crate::store::keys::{Keys, WakeKind};

pub use self::long_polls::serve_long_polls;

/// What a listener reports.
#[derive(Debug, Clone)]
pub enum Wake {
    /// A message on partition `partition`'s channel.
    Message {
        /// The partition whose script published.
        partition: u16,
        /// The payload: text (a topic, or `<delay set key> <due ms>`), or a hand-off's MessagePack.
        payload: Vec<u8>,
    },
    /// The listener (re)subscribed: messages sent while it was away are lost, so whoever waits must look
    /// again.
    Subscribed,
}

/// What a listener calls for every wake-up.
pub type OnWake = Arc<dyn Fn(Wake) + Send + Sync>;

/// Listens on the hand-off channels of the process `process_id` (see [`crate::reservations::handoff`]) until
/// `shutdown`, and gives each message's jobs (all of one topic) to `on_jobs`. A message that cannot be
/// read is logged: its jobs return when their reservation ends.
pub fn listen_handoffs(
    queue: &Queue,
    process_id: &str,
    shutdown: CancellationToken,
    on_jobs: impl Fn(Vec<crate::job::Reservation>) + Send + Sync + 'static,
) -> JoinHandle<()> {
    let on_wake: OnWake = Arc::new(move |wake| {
        if let Wake::Message { payload, .. } = wake {
            match crate::reservations::handoff::decode_handoff(&payload) {
                Ok(jobs) => on_jobs(jobs),
                Err(e) => {
                    tracing::warn!(cause = %e.chain(), "cannot read a hand-off; its jobs return when their reservation ends")
                }
            }
        }
    });
    listen(queue, WakeKind::Handoff(process_id.into()), shutdown, on_wake)
}

/// Listens to every partition's channel of `kind` and calls `on_wake` for every message; reconnects with
/// backoff until `shutdown`.
pub fn listen(queue: &Queue, kind: WakeKind, shutdown: CancellationToken, on_wake: OnWake) -> JoinHandle<()> {
    let queue = queue.clone();
    tokio::spawn(async move {
        if queue.redis().mode() == RedisMode::Cluster {
            sharded::listen(&queue, kind, shutdown, on_wake).await
        } else {
            listen_classic(&queue, kind, shutdown, on_wake).await
        }
    })
}

/// Classic pub/sub on the primary: one pattern for every partition; for a process's hand-off channels,
/// every partition's channel by name instead (one `SUBSCRIBE`), because an ACL user's channel rules
/// compare a pattern literally, and a pattern holding a process id could not be allowed in advance,
/// while the names are covered by `&<prefix>:*`.
async fn listen_classic(queue: &Queue, kind: WakeKind, shutdown: CancellationToken, on_wake: OnWake) {
    let pattern = queue.keys().wake_pattern(&kind);
    let by_name: Option<Vec<String>> = matches!(kind, WakeKind::Handoff(_)).then(|| {
        queue
            .partitions()
            .all()
            .map(|p| kind.channel(queue.partition_keys(p)))
            .collect()
    });
    let mut backoff = Backoff::default();
    while !shutdown.is_cancelled() {
        match queue.redis().pubsub_client().await {
            Ok(client) => match client.get_async_pubsub().await {
                Ok(mut pubsub) => match match &by_name {
                    Some(channels) => pubsub.subscribe(channels).await,
                    None => pubsub.psubscribe(&pattern).await,
                } {
                    Ok(()) => {
                        backoff.reset();
                        on_wake(Wake::Subscribed);
                        let mut messages = pubsub.on_message();
                        loop {
                            tokio::select! {
                                msg = messages.next() => match msg {
                                    Some(msg) => {
                                        message(msg.get_channel_name(), msg.get_payload_bytes().to_vec(), &on_wake);
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
            },
            Err(e) => tracing::debug!(cause = %e, "cannot find the primary for pub/sub"),
        }
        if !backoff.wait(&shutdown).await {
            return;
        }
    }
}

/// Reports a message on `channel`, if it names a partition.
fn message(channel: &str, payload: Vec<u8>, on_wake: &OnWake) {
    if let Some(partition) = Keys::channel_partition(channel) {
        on_wake(Wake::Message { partition, payload });
    }
}

/// Waits between attempts to subscribe: 100 ms, doubling up to 2 s.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(100))
    }
}

impl Backoff {
    fn reset(&mut self) {
        *self = Backoff::default();
    }

    /// Waits the current delay and doubles it; `false` when `shutdown` came first.
    async fn wait(&mut self, shutdown: &CancellationToken) -> bool {
        let delay = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = shutdown.cancelled() => false,
        }
    }
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
        WakeKind::Ready,
        shutdown,
        Arc::new(move |wake| match wake {
            // `<topic>`, or `<topic> <priority>` for an urgent job (a topic name has no space).
            Wake::Message { partition, payload } => {
                let payload = String::from_utf8_lossy(&payload);
                match payload.split_once(' ') {
                    Some((topic, priority)) => {
                        index.mark(topic, partition);
                        if let Ok(priority) = priority.parse() {
                            index.hint(topic, partition, priority);
                        }
                    }
                    None => index.mark(&payload, partition),
                }
            }
            Wake::Subscribed => index.resync(),
        }),
    )
}
