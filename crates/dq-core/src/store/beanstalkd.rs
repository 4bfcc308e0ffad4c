//! The beanstalkd protocol's keys beside the jobs (see [`crate::beanstalkd`]): in the `{<prefix>}` slot
//! the tube names of made topics, the paused tubes, every server's counters and gauges; in each partition
//! the number index. Its moves of jobs and its numbers are scripts (`bs_*.lua`).

use std::collections::HashMap;

use crate::error::Result;
use crate::store::Store;

/// A `{<prefix>}`-slot hash, as stored.
pub(crate) type Hash = HashMap<String, String>;

/// Stores the tube name of the made topic `topic`.
pub(crate) async fn set_tube_name(store: &Store, topic: &str, name: &str) -> Result<()> {
    let mut cmd = redis::cmd("HSET");
    cmd.arg(store.keys().bs_tubes()).arg(topic).arg(name);
    store.query_unpartitioned(&cmd).await
}

/// The tube name stored for the made topic `topic`, if any.
pub(crate) async fn tube_name(store: &Store, topic: &str) -> Result<Option<String>> {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(store.keys().bs_tubes()).arg(topic);
    store.query_unpartitioned(&cmd).await
}

/// Stores the pause of `topic` as `value` (`<until ms> <secs>`).
pub(crate) async fn set_pause(store: &Store, topic: &str, value: &str) -> Result<()> {
    let mut cmd = redis::cmd("HSET");
    cmd.arg(store.keys().bs_paused()).arg(topic).arg(value);
    store.query_unpartitioned(&cmd).await
}

/// The stored pauses: topic → `<until ms> <secs>`.
pub(crate) async fn pauses(store: &Store) -> Result<Hash> {
    hash(store, &store.keys().bs_paused()).await
}

/// Forgets the pause of `topic`.
pub(crate) async fn forget_pause(store: &Store, topic: &str) -> Result<()> {
    let mut cmd = redis::cmd("HDEL");
    cmd.arg(store.keys().bs_paused()).arg(topic);
    store.query_unpartitioned(&cmd).await
}

/// The counters every server has written: name → count.
pub(crate) async fn counters(store: &Store) -> Result<Hash> {
    hash(store, &store.keys().bs_stats()).await
}

/// The servers whose entries have not expired at `now_ms`.
pub(crate) async fn live_servers(store: &Store, now_ms: i64) -> Result<Vec<String>> {
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(store.keys().bs_servers())
        .arg(now_ms)
        .arg("+inf")
        .arg("BYSCORE");
    store.query_unpartitioned(&cmd).await
}

/// Server `id`'s gauges as it last wrote them.
pub(crate) async fn server_gauges(store: &Store, id: &str) -> Result<Hash> {
    hash(store, &store.keys().bs_server(id)).await
}

/// One write of server `id`'s counts (added to every server's) and gauges (replacing its own, kept
/// `ttl_ms` from `now_ms`); `gauges: None` takes its gauges and its entry away.
pub(crate) async fn write_counters(
    store: &Store,
    id: &str,
    counts: &HashMap<String, i64>,
    gauges: Option<Vec<(String, i64)>>,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<()> {
    let keys = store.keys();
    let own = keys.bs_server(id);
    let mut pipe = redis::pipe();
    for (field, n) in counts {
        pipe.cmd("HINCRBY").arg(keys.bs_stats()).arg(field).arg(n).ignore();
    }
    pipe.cmd("DEL").arg(&own).ignore();
    match gauges {
        None => {
            pipe.cmd("ZREM").arg(keys.bs_servers()).arg(id).ignore();
        }
        Some(fields) => {
            pipe.cmd("HSET").arg(&own).arg(fields).ignore();
            pipe.cmd("PEXPIRE").arg(&own).arg(ttl_ms).ignore();
            pipe.cmd("ZADD")
                .arg(keys.bs_servers())
                .arg(now_ms + ttl_ms)
                .arg(id)
                .ignore();
            pipe.cmd("ZREMRANGEBYSCORE")
                .arg(keys.bs_servers())
                .arg("-inf")
                .arg(now_ms)
                .ignore();
        }
    }
    store.pipe_unpartitioned(&pipe).await
}

/// The id partition `p`'s number index holds for number `n` (a job pushed over HTTP, numbered later).
pub(crate) async fn id_of_number(store: &Store, p: u16, n: u64) -> Result<Option<String>> {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(store.partition_keys(p).bs_ids()).arg(n);
    store.query(p, &cmd).await
}

async fn hash(store: &Store, key: &str) -> Result<Hash> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(key);
    store.query_unpartitioned(&cmd).await
}
