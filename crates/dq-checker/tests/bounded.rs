//! What would grow without bound is kept bounded by dq-checker, against a real Redis: dead jobs past
//! `jobs.dead_retention_ms` and the oldest over `jobs.dead_max_per_topic` go, records and counts with
//! them; counts fields at 0 and deleted topics' tombstones left by older releases go.

use std::collections::HashMap;
use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings, State};
use dq_harness::{RedisServer, eventually};
use tokio_util::sync::CancellationToken;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(8);
    s.metrics.listen = Some("127.0.0.1:0".into());
    s.checker.interval_ms = 100;
    s
}

/// Kills `n` jobs of `topic` (ids `<topic>-<i>`), then gives job i the time of death `deaths(i)` (ms),
/// by hand, so the test decides which deaths are old and in which order they came.
async fn kill(redis: &RedisServer, q: &Queue, topic: &str, n: usize, deaths: impl Fn(usize) -> i64) {
    for i in 0..n {
        let json = serde_json::json!({"id": format!("{topic}-{i}"), "topic": topic, "body": i, "max_attempts": 1});
        q.producer()
            .push(
                q.producer()
                    .validate(serde_json::from_value::<PushRequest>(json).unwrap())
                    .unwrap(),
            )
            .await
            .unwrap();
    }
    let mut left = n;
    while left > 0 {
        for r in q.reservations().reserve(&[topic.to_string()], 100).await.unwrap() {
            assert_eq!(
                q.reservations()
                    .nack(&r.id, &r.receipt, None, None, None)
                    .await
                    .unwrap()
                    .0,
                State::Dead
            );
            left -= 1;
        }
    }
    let mut c = redis.conn();
    for i in 0..n {
        let id = format!("{topic}-{i}");
        let key = q.partition_keys(q.partitions().of_id(&id)).dead(topic);
        let _: () = redis::cmd("ZADD")
            .arg(&key)
            .arg("XX")
            .arg(deaths(i))
            .arg(&id)
            .query(&mut c)
            .unwrap();
    }
}

/// The ids in `topic`'s dead list, and what the counts hashes say it holds.
async fn dead(redis: &RedisServer, q: &Queue, topic: &str) -> (Vec<String>, i64) {
    let page = q.admin().dead(topic, 0, 1000).await.unwrap();
    let mut ids: Vec<String> = page.jobs.into_iter().map(|j| j.id).collect();
    ids.sort();
    let mut counted = 0;
    let mut c = redis.conn();
    for key in redis::cmd("KEYS")
        .arg("dq:{*}:counts")
        .query::<Vec<String>>(&mut c)
        .unwrap()
    {
        let h: HashMap<String, i64> = redis::cmd("HGETALL").arg(&key).query(&mut c).unwrap();
        counted += h.get(&format!("{topic}:dead")).copied().unwrap_or(0);
    }
    (ids, counted)
}

fn records(redis: &RedisServer, topic: &str) -> usize {
    redis::cmd("KEYS")
        .arg(format!("dq:{{*}}:job:{topic}-*"))
        .query::<Vec<String>>(&mut redis.conn())
        .unwrap()
        .len()
}

fn dropped(reason: &str, topic: &str) -> f64 {
    let text = dq_core::telemetry::prometheus().render();
    let series = format!("dq_dead_jobs_dropped_total{{topic=\"{topic}\",reason=\"{reason}\"}}");
    let series_swapped = format!("dq_dead_jobs_dropped_total{{reason=\"{reason}\",topic=\"{topic}\"}}");
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(k, _)| *k == series || *k == series_swapped)
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_past_their_retention_are_dropped_and_younger_ones_stay() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.jobs.dead_retention_ms = 3_600_000;
    s.jobs.dead_max_per_topic = 0;
    let q = Queue::connect(&s).await.unwrap();
    // Jobs 0..4 died two hours ago, 4..8 just now.
    let now = now_ms();
    kill(&redis, &q, "old", 8, |i| if i < 4 { now - 7_200_000 } else { now }).await;
    assert_eq!(dead(&redis, &q, "old").await.1, 8);

    let stop = CancellationToken::new();
    let task = tokio::spawn(dq_checker::run(s.clone(), stop.clone()));
    eventually(Duration::from_secs(30), "the old deaths dropped", || async {
        dead(&redis, &q, "old").await.1 == 4
    })
    .await;
    let (ids, counted) = dead(&redis, &q, "old").await;
    assert_eq!(ids, ["old-4", "old-5", "old-6", "old-7"]);
    assert_eq!(counted, 4);
    assert_eq!(records(&redis, "old"), 4, "the dropped jobs' records go with them");
    assert_eq!(dropped("retention", "old"), 4.0);
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_keeps_at_most_its_cap_of_dead_jobs_and_the_oldest_go_first() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.jobs.dead_retention_ms = 0;
    s.jobs.dead_max_per_topic = 10;
    let q = Queue::connect(&s).await.unwrap();
    // 40 deaths, one a second apart, spread over the 8 partitions by their ids; another topic under
    // the cap is left alone.
    let now = now_ms();
    kill(&redis, &q, "capped", 40, |i| now - 100_000 + 1000 * i as i64).await;
    kill(&redis, &q, "small", 3, |_| now).await;

    let stop = CancellationToken::new();
    let task = tokio::spawn(dq_checker::run(s.clone(), stop.clone()));
    eventually(Duration::from_secs(30), "the topic down to its cap", || async {
        dead(&redis, &q, "capped").await.1 == 10
    })
    .await;
    let (ids, counted) = dead(&redis, &q, "capped").await;
    let mut newest: Vec<String> = (30..40).map(|i| format!("capped-{i}")).collect();
    newest.sort();
    assert_eq!(ids, newest, "the 10 latest deaths stay");
    assert_eq!(counted, 10);
    assert_eq!(records(&redis, "capped"), 10);
    assert_eq!(dropped("cap", "capped"), 30.0);
    assert_eq!(dead(&redis, &q, "small").await.1, 3);
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_topic_leaves_nothing_and_old_tombstones_are_pruned() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let config: dq_core::TopicConfig = serde_json::from_value(serde_json::json!({})).unwrap();
    q.admin().put_topic("kept", &config).await.unwrap();
    q.admin().put_topic("gone", &config).await.unwrap();
    q.admin().delete_topic("gone").await.unwrap();
    let registry = |redis: &RedisServer| -> HashMap<String, String> {
        redis::cmd("HGETALL")
            .arg("{dq}:topics")
            .query(&mut redis.conn())
            .unwrap()
    };
    assert_eq!(registry(&redis).keys().collect::<Vec<_>>(), ["kept"]);
    // Tombstones as an older release wrote them for each deleted topic.
    for i in 0..50 {
        let _: () = redis::cmd("HSET")
            .arg("{dq}:topics")
            .arg(format!("old{i}"))
            .arg(format!("{} ", 1_700_000_000_000_000u64 + i))
            .query(&mut redis.conn())
            .unwrap();
    }
    assert_eq!(
        q.admin().topics().await.unwrap().len(),
        1,
        "a tombstone is no registration"
    );

    let stop = CancellationToken::new();
    let task = tokio::spawn(dq_checker::run(s.clone(), stop.clone()));
    eventually(Duration::from_secs(30), "the tombstones pruned", || async {
        registry(&redis).len() == 1
    })
    .await;
    assert!(
        q.admin().topics().await.unwrap().contains_key("kept"),
        "a registration is no tombstone"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_fields_at_zero_are_removed_and_a_topic_used_once_leaves_nothing() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.checker.housekeeping_interval_ms = 100;
    let q = Queue::connect(&s).await.unwrap();
    for i in 0..20 {
        let json = serde_json::json!({"topic": format!("once{i}"), "body": i});
        q.producer()
            .push(
                q.producer()
                    .validate(serde_json::from_value::<PushRequest>(json).unwrap())
                    .unwrap(),
            )
            .await
            .unwrap();
        let r = q
            .reservations()
            .reserve(&[format!("once{i}")], 1)
            .await
            .unwrap()
            .remove(0);
        q.reservations().ack(&r.id, &r.receipt).await.unwrap();
    }
    let json = serde_json::json!({"topic": "kept", "body": 1});
    q.producer()
        .push(
            q.producer()
                .validate(serde_json::from_value::<PushRequest>(json).unwrap())
                .unwrap(),
        )
        .await
        .unwrap();
    // The scripts leave the fields at 0; readers already ignore them.
    assert!(dead(&redis, &q, "once0").await.1 == 0);
    let fields = |redis: &RedisServer| {
        let mut c = redis.conn();
        let mut all: Vec<(String, i64)> = Vec::new();
        for key in redis::cmd("KEYS")
            .arg("dq:{*}:counts")
            .query::<Vec<String>>(&mut c)
            .unwrap()
        {
            let h: HashMap<String, i64> = redis::cmd("HGETALL").arg(&key).query(&mut c).unwrap();
            all.extend(h);
        }
        all
    };
    assert!(fields(&redis).iter().any(|(f, n)| f.starts_with("once") && *n == 0));
    let stats = q.admin().stats().await;
    assert_eq!(
        stats.counts.keys().collect::<Vec<_>>(),
        ["kept"],
        "zeros are not counts"
    );

    let stop = CancellationToken::new();
    let task = tokio::spawn(dq_checker::run(s.clone(), stop.clone()));
    eventually(Duration::from_secs(30), "only the topic with a job left", || async {
        fields(&redis) == [("kept:ready".to_string(), 1)]
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
}
