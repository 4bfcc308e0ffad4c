//! Sharded pub/sub on a Redis Cluster: every partition's channel subscribed on the node that serves its
//! slot, through a cluster connection of redis-rs's (RESP3, messages pushed to a channel).
//!
//! redis-rs subscribes again by itself after it reconnects to a node or rebuilds its slot map; those
//! confirmations arrive as `ssubscribe` pushes, and since messages may have been lost meanwhile, a burst of
//! them is reported as one [`Wake::Subscribed`]. When a slot moves to another node, Redis unsubscribes its
//! channels there (an `sunsubscribe` push), and the listener subscribes them again, which reaches the new
//! owner.
//!
//! Every few seconds the listener counts its subscriptions on the primaries (`CLIENT INFO`, `ssub=`):
//! redis-rs takes a push that Redis sends unasked (that `sunsubscribe`) for the answer to whatever
//! request is in flight on the node, so an `SSUBSCRIBE` sent during a reshard could look confirmed when
//! Redis had refused it (MOVED). Fewer subscriptions than channels means some were lost: it subscribes
//! every channel again (a no-op for the ones in place) and reports [`Wake::Subscribed`]. The same check
//! tells when the connection stops answering (the stall `connection/cluster.rs` describes); then it is
//! made afresh.

use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{PushKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Backoff, OnWake, Wake, message};
use crate::queue::Queue;
use crate::store::keys::WakeKind;

/// How often the connection is checked and failed subscriptions are tried again.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// Checks in a row without an answer before the connection is made afresh.
const SILENT_CHECKS: u32 = 2;
/// Subscriptions sent at once.
const SUBSCRIBE_IN_FLIGHT: usize = 16;
/// How long a burst of re-subscriptions is gathered before it is reported as one.
const RESUBSCRIBED_SETTLE: Duration = Duration::from_millis(100);
/// How soon a channel that Redis unsubscribed (its slot moved) is subscribed again.
const LOST_RETRY: Duration = Duration::from_millis(100);

/// Subscribes every partition's channel of `kind` and reports what comes, until `shutdown`.
pub(super) async fn listen(queue: &Queue, kind: WakeKind, shutdown: CancellationToken, on_wake: OnWake) {
    let channels: Vec<String> = queue
        .partitions()
        .all()
        .map(|p| kind.channel(queue.partition_keys(p)))
        .collect();
    let answer_timeout = Duration::from_millis(queue.redis().response_timeout_ms());
    let mut backoff = Backoff::default();
    while !shutdown.is_cancelled() {
        let (tx, mut pushes) = mpsc::unbounded_channel();
        let mut conn = match queue.redis().sharded_subscriber(tx).await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(cause = %e, "sharded pub/sub connection failed");
                if !backoff.wait(&shutdown).await {
                    return;
                }
                continue;
            }
        };
        let mut missing = subscribe(&conn, channels.clone()).await;
        if missing.len() == channels.len() {
            tracing::debug!("no sharded subscription took");
            if !backoff.wait(&shutdown).await {
                return;
            }
            continue;
        }
        backoff.reset();
        on_wake(Wake::Subscribed);
        let mut check = tokio::time::interval_at(Instant::now() + CHECK_EVERY, CHECK_EVERY);
        let mut retry_at = (!missing.is_empty()).then(|| Instant::now() + CHECK_EVERY);
        let mut settle_at: Option<Instant> = None;
        let mut silent = 0;
        loop {
            let retry = sleep_until_some(retry_at);
            let settle = sleep_until_some(settle_at);
            tokio::select! {
                push = pushes.recv() => {
                    let Some(push) = push else { break };
                    match push.kind {
                        PushKind::SMessage => {
                            if let [channel, payload, ..] = &push.data[..] {
                                message(&text(channel), bytes(payload), &on_wake);
                            }
                        }
                        // redis-rs subscribed again (a reconnect, a new slot map), or our own subscribing:
                        // messages may have been lost, so look again once the burst is over.
                        PushKind::SSubscribe => {
                            settle_at.get_or_insert_with(|| Instant::now() + RESUBSCRIBED_SETTLE);
                        }
                        // Redis dropped a channel whose slot moved away: subscribe it again soon, which
                        // reaches the slot's new node.
                        PushKind::SUnsubscribe => {
                            if let Some(channel) = push.data.first().map(text) {
                                tracing::debug!(%channel, "sharded channel unsubscribed by Redis; subscribing again");
                                missing.push(channel);
                                retry_at = Some(retry_at.map_or(Instant::now() + LOST_RETRY, |r| r.min(Instant::now() + LOST_RETRY)));
                            }
                        }
                        _ => {}
                    }
                }
                _ = retry => {
                    let was = missing.len();
                    missing = subscribe(&conn, std::mem::take(&mut missing)).await;
                    retry_at = (!missing.is_empty()).then(|| Instant::now() + CHECK_EVERY);
                    if missing.len() < was {
                        settle_at.get_or_insert_with(|| Instant::now() + RESUBSCRIBED_SETTLE);
                    }
                }
                _ = settle => {
                    settle_at = None;
                    on_wake(Wake::Subscribed);
                }
                _ = check.tick() => {
                    match subscriptions(&mut conn, answer_timeout).await {
                        Some(n) => {
                            silent = 0;
                            if n < channels.len() && missing.is_empty() {
                                tracing::info!(subscribed = n, channels = channels.len(), "sharded subscriptions lost; subscribing again");
                                missing = channels.clone();
                                retry_at = Some(Instant::now());
                            }
                        }
                        None => {
                            silent += 1;
                            if silent >= SILENT_CHECKS {
                                tracing::warn!("sharded pub/sub connection answers nothing; making a new one");
                                break;
                            }
                        }
                    }
                }
                _ = shutdown.cancelled() => return,
            }
        }
        if !backoff.wait(&shutdown).await {
            return;
        }
    }
}

/// Subscribes `channels`, a few at a time; gives back those that failed (their node does not answer).
async fn subscribe(conn: &ClusterConnection, channels: Vec<String>) -> Vec<String> {
    futures_util::stream::iter(channels)
        .map(|channel| {
            let mut conn = conn.clone();
            async move {
                match conn.ssubscribe(&channel).await {
                    Ok(()) => None,
                    Err(e) => {
                        tracing::debug!(%channel, cause = %e, "cannot subscribe a sharded channel");
                        Some(channel)
                    }
                }
            }
        })
        .buffer_unordered(SUBSCRIBE_IN_FLIGHT)
        .filter_map(|failed| async move { failed })
        .collect()
        .await
}

/// How many shard channels this connection is subscribed to, summed over the primaries (`ssub=` of
/// `CLIENT INFO` on each node's connection); `None` when they do not all answer in time.
async fn subscriptions(conn: &mut ClusterConnection, timeout: Duration) -> Option<usize> {
    let info = conn.route_command(
        redis::cmd("CLIENT").arg("INFO").clone(),
        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
    );
    let Ok(Ok(Value::Map(nodes))) = tokio::time::timeout(timeout, info).await else {
        return None;
    };
    nodes.iter().map(|(_, info)| ssub(&text(info))).sum()
}

/// The `ssub=<n>` field of a `CLIENT INFO` line.
fn ssub(info: &str) -> Option<usize> {
    info.split_whitespace()
        .find_map(|f| f.strip_prefix("ssub="))?
        .parse()
        .ok()
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A message's payload as Redis sent it (a hand-off's MessagePack is not text).
fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => s.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ssub_is_read_from_client_info() {
        let line = "id=7 addr=127.0.0.1:5 laddr=127.0.0.1:7000 fd=9 name= age=3 idle=0 flags=P db=0 sub=0 psub=0 ssub=85 multi=-1";
        assert_eq!(super::ssub(line), Some(85));
        assert_eq!(super::ssub("id=7 sub=0"), None);
    }
}
