//! Reserves in groups, on a real Redis: concurrent reserves share calls (the group commit), each caller
//! gets jobs of its own topics, at least one while there are jobs and no more than it asked, no job goes to two callers, and the jobs of a
//! caller that stopped waiting are handed back.

use std::collections::HashSet;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use dq_core::{Queue, Settings, State};
use dq_harness::{RedisServer, eventually};

async fn queue(redis: &RedisServer, partitions: u32) -> Queue {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(partitions);
    Queue::connect(&s).await.unwrap()
}

/// Pushes `n` ready jobs of `topic`, ids `<topic>-<i>`.
async fn push_ready(q: &Queue, topic: &str, n: usize) {
    let jobs = (0..n)
        .map(|i| {
            let req =
                serde_json::from_value(serde_json::json!({"id": format!("{topic}-{i}"), "topic": topic, "body": i}))
                    .unwrap();
            q.producer().validate(req).unwrap()
        })
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reserves_each_get_their_own_jobs_once() {
    let redis = RedisServer::start();
    let q = queue(&redis, 8).await;
    // Enough of each topic for every reserve that can take it: 40 of a ask 1 each, 40 of b ask 2, and 40
    // of both ask 3 (b first), so a serves at most 160 and b at most 200.
    push_ready(&q, "a", 250).await;
    push_ready(&q, "b", 250).await;

    // 120 reserves at once: of a, of b, and of both; asking for 1 to 3 jobs.
    let asks: Vec<(Vec<String>, usize)> = (0..120)
        .map(|i| {
            let topics = match i % 3 {
                0 => vec!["a".to_string()],
                1 => vec!["b".to_string()],
                _ => vec!["b".to_string(), "a".to_string()],
            };
            (topics, 1 + i % 3)
        })
        .collect();
    let calls_before = calls(&redis, "evalsha");
    let tasks: Vec<_> = asks
        .iter()
        .cloned()
        .map(|(topics, count)| {
            let q = q.clone();
            tokio::spawn(async move { q.reservations().reserve(&topics, count).await.unwrap() })
        })
        .collect();
    let mut seen = HashSet::new();
    for ((topics, count), task) in asks.iter().zip(tasks) {
        let got = task.await.unwrap();
        // Its topics always hold more jobs than asked for: a reserve that will not wait gets at least one.
        assert!(
            (1..=*count).contains(&got.len()),
            "asked for {count}, got {}",
            got.len()
        );
        for r in got {
            assert!(
                topics.contains(&r.topic),
                "a job of {} for a reserve of {topics:?}",
                r.topic
            );
            assert_eq!(r.attempt, 1);
            assert!(seen.insert(r.id.clone()), "{} reserved twice", r.id);
            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
        }
    }
    let calls = calls(&redis, "evalsha") - calls_before;
    assert!(!seen.is_empty());
    // 120 reserves and their acks, alone, would be at least one call each.
    assert!(
        calls < 120 + seen.len() as u64,
        "{calls} calls for 120 reserves and {} acks: no reserves were grouped",
        seen.len()
    );

    // Every job not handed out is still ready, once.
    let rest = q
        .reservations()
        .reserve(&["a".to_string(), "b".to_string()], 100)
        .await
        .unwrap();
    let mut all: Vec<_> = rest.iter().map(|r| r.id.clone()).collect();
    while all.len() + seen.len() < 500 {
        let more = q
            .reservations()
            .reserve(&["a".to_string(), "b".to_string()], 100)
            .await
            .unwrap();
        assert!(!more.is_empty(), "{} jobs missing", 500 - all.len() - seen.len());
        all.extend(more.into_iter().map(|r| r.id));
    }
    for id in &all {
        assert!(!seen.contains(id), "{id} reserved twice");
    }
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
}

/// A reserve whose caller stops waiting before the answer comes releases what it got. On one thread, so
/// that the call cannot be answered before its caller is gone: the group's call runs in a task of its
/// own, which starts only once the test awaits (with a second thread it could run at once, and a busy
/// machine could then let the whole call finish before the caller's first poll returned).
#[tokio::test]
async fn a_reserve_whose_caller_stopped_waiting_hands_its_job_back() {
    let redis = RedisServer::start();
    let q = queue(&redis, 1).await;
    push_ready(&q, "t", 1).await;

    // The reserve is submitted at its first poll (its call starts once this task awaits); its caller is
    // gone before the answer can come.
    {
        let topics = ["t".to_string()];
        let mut reserve = std::pin::pin!(q.reservations().reserve(&topics, 1));
        let first = std::future::poll_fn(|cx| Poll::Ready(reserve.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "the reserve answered at its first poll");
    }
    eventually(Duration::from_secs(30), "the job is handed back", || async {
        // ZPOPMIN runs in reserves only: the reserve ran, and the job is ready again.
        calls(&redis, "zpopmin") >= 1 && q.producer().get("t-0").await.unwrap().state == State::Ready
    })
    .await;
    assert_eq!(
        q.producer().get("t-0").await.unwrap().attempts,
        0,
        "a hand-back is not a delivery"
    );
    let again = q.reservations().reserve(&["t".to_string()], 1).await.unwrap();
    assert_eq!((again.len(), again[0].attempt), (1, 1));
}

/// Calls of `command` Redis ran so far (scripts' inner calls included).
fn calls(redis: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut redis.conn()).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
