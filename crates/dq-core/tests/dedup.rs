//! Deduplication windows on a real Redis: a push with a `dedup_key` inside the window of an earlier one
//! answers with that job and stores nothing, in single pushes, in batches, in grouped concurrent pushes
//! and across a Redis stall whose answers are lost; the window ends, and a cancelled job frees its key.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings, State};
use dq_harness::{RedisServer, eventually};
use serde_json::json;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(16);
    s
}

fn job(q: &Queue, json: serde_json::Value) -> dq_core::NewJob {
    q.producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap()
}

/// Job records in Redis.
fn records(redis: &RedisServer) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg("dq:{*}:job:*").query(&mut redis.conn()).unwrap();
    keys.len()
}

#[tokio::test]
async fn a_second_push_with_the_key_inside_the_window_is_the_first_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let first = q
        .producer()
        .push(job(
            &q,
            json!({"topic": "orders", "body": 1, "delay_ms": 60000, "dedup_key": "order-7", "dedup_ms": 60000}),
        ))
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.state, State::Delayed);
    // Another body, another delay: still the first job, unchanged.
    let again = q
        .producer()
        .push(job(
            &q,
            json!({"topic": "orders", "body": 2, "dedup_key": "order-7", "dedup_ms": 60000}),
        ))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.id.as_str(), again.state, again.run_at),
        (first.id.as_str(), first.state, first.run_at)
    );
    assert_eq!(q.producer().get(&first.id).await.unwrap().body.get(), "1");
    // The key belongs to its topic; another key is another job.
    let other_topic = q
        .producer()
        .push(job(
            &q,
            json!({"topic": "invoices", "body": 3, "dedup_key": "order-7", "dedup_ms": 60000}),
        ))
        .await
        .unwrap();
    let other_key = q
        .producer()
        .push(job(
            &q,
            json!({"topic": "orders", "body": 4, "dedup_key": "order-8", "dedup_ms": 60000}),
        ))
        .await
        .unwrap();
    assert!(!other_topic.duplicate && !other_key.duplicate);
    assert_eq!(records(&redis), 3);
    let counts = q.admin().counts().await.counts;
    assert_eq!(counts["orders"][&State::Delayed], 1, "{counts:?}");
    assert_eq!(counts["orders"][&State::Ready], 1, "{counts:?}");
}

#[tokio::test]
async fn a_batch_with_one_key_twice_stores_one_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let jobs = vec![
        job(
            &q,
            json!({"topic": "t", "body": "a", "dedup_key": "k", "dedup_ms": 60000}),
        ),
        job(&q, json!({"topic": "t", "body": "b"})),
        job(
            &q,
            json!({"topic": "t", "body": "c", "dedup_key": "k", "dedup_ms": 60000}),
        ),
        job(&q, json!({"topic": "t", "body": "d", "dedup_key": "k", "dedup_ms": 1})),
    ];
    let out: Vec<_> = q
        .producer()
        .push_many(jobs)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(!out[0].duplicate && !out[1].duplicate);
    assert!(out[2].duplicate && out[3].duplicate, "{out:?}");
    assert_eq!(out[2].id, out[0].id);
    assert_eq!(out[3].id, out[0].id);
    assert_eq!(records(&redis), 2);
}

#[tokio::test]
async fn the_window_ends_and_a_cancelled_job_frees_its_key() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let push = |body: i32, ms: u64| {
        let q = q.clone();
        async move {
            q.producer()
                .push(job(
                    &q,
                    json!({"topic": "t", "body": body, "delay_ms": 60000, "dedup_key": "k", "dedup_ms": ms}),
                ))
                .await
                .unwrap()
        }
    };
    let first = push(1, 300).await;
    eventually(Duration::from_secs(30), "the window's key expired", || async {
        let left: Vec<String> = redis::cmd("KEYS")
            .arg("dq:{*}:dedup:t:k")
            .query(&mut redis.conn())
            .unwrap();
        left.is_empty()
    })
    .await;
    let second = push(2, 60000).await;
    assert!(!second.duplicate);
    assert_ne!(second.id, first.id);
    assert!(push(3, 60000).await.duplicate);
    // Cancelled, the job no longer holds the key, though the window runs.
    q.producer().cancel(&second.id).await.unwrap();
    let third = push(4, 60000).await;
    assert!(!third.duplicate);
    assert_ne!(third.id, second.id);
    assert_eq!(records(&redis), 2);
}

/// Many pushes of one key at once, grouped by the group commit into shared calls and sent alone: one
/// job, and every answer names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pushes_of_one_key_make_exactly_one_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..200 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let j = job(
                &q,
                json!({"topic": "t", "body": n, "dedup_key": "once", "dedup_ms": 60000}),
            );
            q.producer().push(j).await.unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut stored = 0;
    for t in tasks {
        let p = t.await.unwrap();
        stored += usize::from(!p.duplicate);
        ids.insert(p.id);
    }
    assert_eq!((stored, ids.len()), (1, 1), "{ids:?}");
    assert_eq!(records(&redis), 1);
}

/// Pushes with keys while Redis stalls past the answer timeout: their retries (the same write, with the
/// same minted id) find their own job under the key, so each key has one job and its pushes answer
/// stored or duplicate of it, never a second job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_whose_answer_was_lost_keeps_one_job_per_key() {
    let redis = Arc::new(RedisServer::start());
    let mut s = settings(&redis);
    s.redis.response_timeout_ms = 300;
    s.redis.connect_timeout_ms = 300;
    let q = Queue::connect(&s).await.unwrap();
    let stall = {
        let redis = redis.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            redis.pause();
            tokio::time::sleep(Duration::from_millis(900)).await;
            redis.resume();
        })
    };
    let mut tasks = Vec::new();
    for t in 0..8 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for n in 0..30 {
                // Each key pushed twice, a moment apart.
                let key = format!("k{t}-{}", n / 2);
                let j = job(
                    &q,
                    json!({"topic": "t", "body": key, "dedup_key": key, "dedup_ms": 60000}),
                );
                answers.push((key, q.producer().push(j).await));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answers
        }));
    }
    let mut by_key: std::collections::HashMap<String, HashSet<String>> = Default::default();
    for t in tasks {
        for (key, r) in t.await.unwrap() {
            if let Ok(p) = r {
                by_key.entry(key).or_default().insert(p.id);
            }
        }
    }
    stall.await.unwrap();
    for (key, ids) in &by_key {
        assert_eq!(ids.len(), 1, "key {key} answered with {ids:?}");
    }
    // However the attempts went, no key has two jobs (each job's body is its key).
    let mut c = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("dq:{*}:job:*").query(&mut c).unwrap();
    let mut read = dq_core::store::scripts::get::SCRIPT.prepare_invoke();
    for key in &keys {
        read.key(key);
    }
    let recs: Vec<std::collections::HashMap<String, String>> = read.arg("b").invoke(&mut c).unwrap();
    let mut bodies = HashSet::new();
    for rec in recs {
        assert!(bodies.insert(rec["b"].clone()), "two jobs for the key {}", rec["b"]);
    }
    assert!(!bodies.is_empty());
}
