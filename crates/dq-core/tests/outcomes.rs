//! Failures by kind, on a real Redis made to fail: a push whose answer was lost (Redis paused past the
//! answer timeout) is never stored twice, Redis out of memory is `OutOfMemory` with nothing written, a
//! replica's READONLY is `Unavailable` (never a 500), and a Redis that may evict keys is refused at start.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dq_core::{Error, PushRequest, Queue, Settings};
use dq_harness::RedisServer;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(16);
    s.redis.response_timeout_ms = 300;
    s.redis.connect_timeout_ms = 300;
    s
}

fn job(q: &Queue, json: serde_json::Value) -> dq_core::NewJob {
    q.producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap()
}

/// Body → how many job records hold it.
fn bodies(redis: &RedisServer) -> HashMap<String, usize> {
    let mut c = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("dq:{*}:job:*").query(&mut c).unwrap();
    let mut out = HashMap::new();
    for chunk in keys.chunks(500) {
        let mut read = dq_core::store::scripts::get::SCRIPT.prepare_invoke();
        for key in chunk {
            read.key(key);
        }
        let recs: Vec<HashMap<String, String>> = read.arg("b").invoke(&mut c).unwrap();
        for rec in recs {
            *out.entry(rec["b"].clone()).or_default() += 1;
        }
    }
    out
}

/// Pushes without ids, single and grouped and in batches, while Redis stalls twice for longer than the
/// answer timeout: every push answered stored is stored once, and none is stored twice. A push whose
/// outcome stayed unknown names its id; it is stored at most once (the retries, with that id, cannot add
/// a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_whose_answer_was_lost_is_never_stored_twice() {
    let redis = Arc::new(RedisServer::start());
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let stall = {
        let redis = redis.clone();
        tokio::spawn(async move {
            // Once shorter than dq's retries of a push, once longer.
            for stalled in [900, 3000] {
                tokio::time::sleep(Duration::from_millis(300)).await;
                redis.pause();
                tokio::time::sleep(Duration::from_millis(stalled)).await;
                redis.resume();
            }
        })
    };
    let mut tasks = Vec::new();
    for t in 0..16 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for n in 0..40 {
                // Every fourth request a batch of 20, the others single pushes (grouped with each other).
                let size = if n % 4 == 0 { 20 } else { 1 };
                let jobs: Vec<_> = (0..size)
                    .map(|k| job(&q, serde_json::json!({"topic": "t", "body": format!("{t}-{n}-{k}")})))
                    .collect();
                let bodies: Vec<String> = (0..size).map(|k| format!("\"{t}-{n}-{k}\"")).collect();
                for (body, r) in bodies.into_iter().zip(q.producer().push_many(jobs).await) {
                    answers.push((body, r));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.extend(t.await.unwrap());
    }
    stall.await.unwrap();
    let stored = bodies(&redis);
    let (mut ok, mut unknown, mut refused) = (0, 0, 0);
    for (body, r) in &answers {
        let n = stored.get(body).copied().unwrap_or(0);
        assert!(n <= 1, "{body} is stored {n} times");
        match r {
            Ok(_) => {
                ok += 1;
                assert_eq!(n, 1, "{body} was answered stored");
            }
            Err(Error::Indeterminate { reason, .. }) => {
                unknown += 1;
                assert!(reason.contains("push again with \"id\""), "{reason}");
            }
            Err(e) if e.did_not_run() => {
                refused += 1;
                assert_eq!(n, 0, "{body} was refused, yet stored: {e}");
            }
            Err(e) => panic!("{body}: {e}"),
        }
    }
    eprintln!(
        "{} pushes: {ok} stored, {unknown} outcome unknown, {refused} refused",
        answers.len()
    );
    assert!(ok > 0 && unknown > 0, "the long stall left some outcomes unknown");
}

/// Redis at its memory limit refuses writes: a push is `OutOfMemory` (503 naming memory) and nothing of
/// it is written; once memory is given back, pushes work again.
#[tokio::test]
async fn redis_out_of_memory_refuses_the_push_whole() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    q.producer()
        .push(job(&q, serde_json::json!({"topic": "t", "body": 1})))
        .await
        .unwrap();
    let used: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
    let used: u64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used / 2)
        .query(&mut c)
        .unwrap();
    let before = bodies(&redis);
    let jobs = (0..10)
        .map(|i| {
            job(
                &q,
                serde_json::json!({"id": format!("oom{i}"), "topic": "t", "body": i}),
            )
        })
        .collect();
    for r in q.producer().push_many(jobs).await {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        assert!(e.to_string().contains("out of memory"), "{e}");
    }
    assert_eq!(bodies(&redis), before, "nothing written");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut c)
        .unwrap();
    q.producer()
        .push(job(&q, serde_json::json!({"id": "oom0", "topic": "t", "body": 0})))
        .await
        .unwrap();
}

/// A Redis that became a replica answers writes with READONLY: dq sends the call again for a while (a
/// failover may be under way), then answers `Unavailable`, not an unexpected error.
#[tokio::test]
async fn a_demoted_primary_is_unavailable_not_an_internal_error() {
    let primary = RedisServer::start();
    let other = RedisServer::start();
    let q = Queue::connect(&settings(&primary)).await.unwrap();
    q.producer()
        .push(job(&q, serde_json::json!({"topic": "t", "body": 1})))
        .await
        .unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port())
        .query(&mut primary.conn())
        .unwrap();
    let e = q
        .producer()
        .push(job(&q, serde_json::json!({"id": "ro", "topic": "t", "body": 2})))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    assert!(e.to_string().to_lowercase().contains("read only"), "{e}");
}

/// A Redis whose maxmemory-policy could evict dq's keys is refused at start, naming the setting and the
/// override; with the override the process starts.
#[tokio::test]
async fn a_redis_that_may_evict_jobs_is_refused_at_start() {
    let redis = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut redis.conn())
        .unwrap();
    let mut s = settings(&redis);
    let e = Queue::connect(&s).await.unwrap_err().to_string();
    assert!(
        e.contains("allkeys-lru") && e.contains("noeviction") && e.contains("redis.allow_eviction"),
        "{e}"
    );
    s.redis.allow_eviction = true;
    Queue::connect(&s).await.unwrap();
}
