//! What several of dq-core's integration tests share: settings for each Redis shape the harness starts,
//! a push as a producer's JSON, and for the tests of one script's way on one partition's keys, that
//! partition and a snapshot of what Redis holds.
#![allow(dead_code)] // each test binary uses some of these

use std::time::Duration;

use dq_core::store::keys::Keys;
use dq_core::store::partition::Partitions;
use dq_core::{PushRequest, Queue, Reservation, Settings};
use dq_harness::{RedisCluster, RedisServer};
use redis::Value;

/// Settings for one standalone Redis.
pub fn standalone(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s
}

/// Settings for a Redis Cluster.
pub fn cluster(c: &RedisCluster) -> Settings {
    let mut s = Settings::default();
    s.redis.mode = dq_core::config::RedisMode::Cluster;
    s.redis.urls = c.urls();
    s
}

/// A queue on one standalone Redis with a single partition, whose jobs may have TTRs down to 10 ms.
pub async fn one_partition(redis: &RedisServer) -> Queue {
    let mut s = standalone(redis);
    s.redis.partitions = Some(1);
    s.limits.min_ttr_ms = 10;
    Queue::connect(&s).await.unwrap()
}

/// The key prefix of [`one_partition`]'s partition.
pub fn one_partition_prefix() -> String {
    Keys::new("dq")
        .partition(Partitions::new(1).tag(0))
        .job("")
        .trim_end_matches(":job:")
        .to_string()
}

/// A call of `script` laid out as promote.lua's on [`one_partition`]'s partition: its four KEYS and
/// its first six ARGV (a batch of 100, nonce `nonce`, spans wanted when `spans`), for the caller to add
/// the waiting workers.
pub fn promote_call(script: &redis::Script, spans: bool) -> redis::ScriptInvocation<'_> {
    let pre = one_partition_prefix();
    let mut call = script.prepare_invoke();
    call.key(format!("{pre}:delayed"))
        .key(format!("{pre}:counts"))
        .key(format!("{pre}:reserved"))
        .key(format!("{pre}:announced"))
        .arg(&pre)
        .arg(100)
        .arg(format!("{pre}:wake:ready"))
        .arg(format!("{pre}:wake:timer"))
        .arg("nonce")
        .arg(if spans { "1" } else { "" });
    call
}

/// Every key matching `pattern`, sorted, with its value: a string's bytes, a sorted set's members and
/// scores, a hash's fields and values.
pub fn snapshot(c: &mut redis::Connection, pattern: &str) -> Vec<(String, Value)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
            let v: Value = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&k).query(c).unwrap(),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(c)
                    .unwrap(),
                "hash" => redis::cmd("HGETALL").arg(&k).query(c).unwrap(),
                _ => Value::Nil,
            };
            (k, v)
        })
        .collect()
}

/// Pushes the job `json` describes (a push request, checked as the API checks it); its id.
pub async fn push(q: &Queue, json: serde_json::Value) -> String {
    let job = q
        .producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap();
    q.producer().push(job).await.unwrap().id
}

/// Pushes job `id` of topic `t` (TTR 1 s), reserves it and nacks it with an error, due again in 10 ms:
/// a job on its second attempt, with the first in its history.
pub async fn push_nacked(q: &Queue, id: &str) {
    push(
        q,
        serde_json::json!({"id": id, "topic": "t", "body": 3, "ttr_ms": 1000}),
    )
    .await;
    let first = q.reservations().reserve(&["t".to_string()], 1).await.unwrap().remove(0);
    q.reservations()
        .nack(&first.id, &first.receipt, Some(10), Some("boom"), None)
        .await
        .unwrap();
}

/// Reserves the one ready job of `topic`, waiting for it with a generous deadline.
pub async fn reserve(q: &Queue, topic: &str) -> Reservation {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = q.reservations().reserve(&[topic.to_string()], 1).await.unwrap().pop() {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "no job of {topic} came ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `EVALSHA` calls the Redis servers behind `conns` ran so far (their `INFO commandstats`, summed).
pub fn evalsha_calls(conns: impl IntoIterator<Item = redis::Connection>) -> u64 {
    conns
        .into_iter()
        .map(|mut c| {
            let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse().unwrap())
        })
        .sum()
}
