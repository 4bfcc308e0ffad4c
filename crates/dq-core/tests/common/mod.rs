//! What several of dq-core's integration tests share: settings for each Redis shape the harness starts,
//! and a push as a producer's JSON.
#![allow(dead_code)] // each test binary uses some of these

use std::time::Duration;

use dq_core::{PushRequest, Queue, Reservation, Settings};
use dq_harness::{RedisCluster, RedisServer};

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

/// Pushes the job `json` describes (a push request, checked as the API checks it); its id.
pub async fn push(q: &Queue, json: serde_json::Value) -> String {
    let job = q
        .producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap();
    q.producer().push(job).await.unwrap().id
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
