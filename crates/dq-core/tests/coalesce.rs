//! Coalescing on a real Redis, standalone and cluster: `last` (debounce) keeps one pending job with the last
//! body, moved a window on by each push, never past `max_wait_ms`; `merge` gathers every push's body as an
//! item of one job, due a window after the first or at `max_items`; a push sent again with its id goes in
//! once; a key whose job has left starts a new one; `first` is deduplication.

use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings, State};
use dq_harness::{RedisCluster, RedisServer, eventually};
use serde_json::{Value, json};

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(16);
    s
}

async fn push(q: &Queue, req: Value) -> dq_core::Pushed {
    let job = q
        .producer()
        .validate(serde_json::from_value::<PushRequest>(req).unwrap())
        .unwrap();
    q.producer().push(job).await.unwrap()
}

fn body(q_job: &dq_core::Job) -> Value {
    serde_json::from_str(q_job.body.get()).unwrap()
}

#[tokio::test]
async fn last_keeps_one_job_with_the_last_body_moved_a_window_on() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let last = |n: u32| {
        json!({"topic": "reindex", "body": {"edit": n}, "coalesce_key": "doc:7",
               "coalesce": {"mode": "last", "window_ms": 60000, "max_wait_ms": 600000}})
    };
    let first = push(&q, last(1)).await;
    assert!(!first.coalesced);
    assert_eq!(first.state, State::Delayed);
    let mut due = first.run_at;
    for n in 2..=5 {
        let again = push(&q, last(n)).await;
        assert!(again.coalesced);
        assert_eq!(again.id, first.id, "one job for the key");
        assert!(again.run_at >= due, "each push moves it a window on");
        due = again.run_at;
    }
    let job = q.producer().get(&first.id).await.unwrap();
    assert_eq!(body(&job), json!({"edit": 5}));
    assert_eq!((job.state, job.run_at), (State::Delayed, due));
    // Another key is another job.
    let other = push(
        &q,
        json!({"topic": "reindex", "body": 1, "coalesce_key": "doc:8", "coalesce": {"mode": "last", "window_ms": 60000}}),
    )
    .await;
    assert_ne!(other.id, first.id);
    assert_eq!(q.admin().stats().await.counts["reindex"][&State::Delayed], 2);
}

#[tokio::test]
async fn last_is_never_due_past_max_wait() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let req = json!({"topic": "t", "body": 1, "coalesce_key": "k",
                     "coalesce": {"mode": "last", "window_ms": 60000, "max_wait_ms": 200}});
    let first = push(&q, req.clone()).await;
    // Due 200 ms after the first push however often it is pushed again: it becomes ready and is
    // delivered, then the next push starts a new job.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let again = push(&q, req.clone()).await;
    assert_eq!(again.id, first.id);
    eventually(Duration::from_secs(10), "the job is promoted at its bound", || async {
        q.timer().promote(q.partitions().of_id(&first.id), 100).await.unwrap();
        q.producer().get(&first.id).await.unwrap().state == State::Ready
    })
    .await;
    let next = push(&q, req).await;
    assert!(!next.coalesced);
    assert_ne!(next.id, first.id, "a key whose job left starts another");
}

#[tokio::test]
async fn merge_gathers_every_body_as_an_item_of_one_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let merge = |n: u32| {
        json!({"topic": "digest", "body": {"event": n}, "coalesce_key": "member:7",
               "coalesce": {"mode": "merge", "window_ms": 300000}})
    };
    let first = push(&q, merge(0)).await;
    for n in 1..10 {
        let p = push(&q, merge(n)).await;
        assert!(p.coalesced);
        assert_eq!(
            (p.id.as_str(), p.run_at),
            (first.id.as_str(), first.run_at),
            "due a window after the first"
        );
    }
    let job = q.producer().get(&first.id).await.unwrap();
    let items: Vec<Value> = (0..10).map(|n| json!({"event": n})).collect();
    assert_eq!(body(&job), json!({ "items": items }));
}

#[tokio::test]
async fn merge_is_ready_at_max_items_and_the_next_push_starts_a_new_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let merge = |n: u32| {
        json!({"topic": "digest", "body": n, "coalesce_key": "k",
               "coalesce": {"mode": "merge", "window_ms": 300000, "max_items": 3}})
    };
    let a = push(&q, merge(1)).await;
    push(&q, merge(2)).await;
    let full = push(&q, merge(3)).await;
    assert_eq!((full.id.as_str(), full.state), (a.id.as_str(), State::Ready));
    let next = push(&q, merge(4)).await;
    assert!(!next.coalesced);
    assert_ne!(next.id, a.id);
    let got = q.reservations().reserve(&["digest".to_string()], 10).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.get(), r#"{"items":[1,2,3]}"#);
    assert_eq!(body(&q.producer().get(&next.id).await.unwrap()), json!({"items": [4]}));
}

#[tokio::test]
async fn a_merge_past_the_body_limit_starts_a_new_job() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.limits.max_body_bytes = 100;
    let q = Queue::connect(&s).await.unwrap();
    let item = format!("\"{}\"", "x".repeat(38)); // 40 bytes
    let merge = json!({"topic": "t", "body": serde_json::from_str::<Value>(&item).unwrap(), "coalesce_key": "k",
                       "coalesce": {"mode": "merge", "window_ms": 300000}});
    let a = push(&q, merge.clone()).await;
    let b = push(&q, merge.clone()).await; // 12 + 40 + 1 + 40 = 93
    assert_eq!(b.id, a.id);
    let c = push(&q, merge).await; // would be 134
    assert!(!c.coalesced);
    assert_ne!(c.id, a.id);
    assert_eq!(q.producer().get(&a.id).await.unwrap().body.get().len(), 93);
}

#[tokio::test]
async fn a_push_sent_again_with_its_id_goes_in_once() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let merge = |id: &str, n: u32| json!({"topic": "t", "id": id, "body": n, "coalesce_key": "k", "coalesce": {"mode": "merge", "window_ms": 300000}});
    let a = push(&q, merge("push-1", 1)).await;
    let b = push(&q, merge("push-2", 2)).await;
    // push-2 again (its answer was lost): the same job, nothing appended.
    let again = push(&q, merge("push-2", 2)).await;
    assert_eq!((again.id.as_str(), again.coalesced), (a.id.as_str(), true));
    assert_eq!(b.id, a.id);
    assert_eq!(q.producer().get(&a.id).await.unwrap().body.get(), r#"{"items":[1,2]}"#);
    // So does the first push, which made the job.
    let first_again = push(&q, merge("push-1", 1)).await;
    assert_eq!(first_again.id, a.id);
    assert_eq!(q.producer().get(&a.id).await.unwrap().body.get(), r#"{"items":[1,2]}"#);
}

#[tokio::test]
async fn first_is_deduplication() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let req = |n: u32| json!({"topic": "t", "body": n, "delay_ms": 60000, "coalesce_key": "k", "coalesce": {"mode": "first", "window_ms": 60000}});
    let a = push(&q, req(1)).await;
    let b = push(&q, req(2)).await;
    assert!(!a.coalesced && b.coalesced && b.duplicate);
    assert_eq!(b.id, a.id);
    assert_eq!(q.producer().get(&a.id).await.unwrap().body.get(), "1");
    // dedup_key and a `first` coalesce_key are one key.
    let c = push(
        &q,
        json!({"topic": "t", "body": 3, "dedup_key": "k", "dedup_ms": 60000}),
    )
    .await;
    assert_eq!((c.id.as_str(), c.coalesced), (a.id.as_str(), true));
}

#[tokio::test]
async fn coalescing_holds_on_a_cluster() {
    let cluster = RedisCluster::start();
    let mut s = Settings::default();
    s.redis.mode = dq_core::config::RedisMode::Cluster;
    s.redis.urls = cluster.urls();
    let q = Queue::connect(&s).await.unwrap();
    let mut ids = std::collections::HashSet::new();
    for key in 0..20 {
        for n in 0..5 {
            let p = push(
                &q,
                json!({"topic": "t", "body": n, "coalesce_key": format!("k{key}"),
                       "coalesce": {"mode": "merge", "window_ms": 300000}}),
            )
            .await;
            ids.insert(p.id);
        }
    }
    assert_eq!(ids.len(), 20, "one job per key");
    for id in ids {
        assert_eq!(
            q.producer().get(&id).await.unwrap().body.get(),
            r#"{"items":[0,1,2,3,4]}"#
        );
    }
    let last = |n: u32| json!({"topic": "t", "body": n, "coalesce_key": "d", "coalesce": {"mode": "last", "window_ms": 300000}});
    let a = push(&q, last(1)).await;
    let b = push(&q, last(2)).await;
    assert_eq!(b.id, a.id);
    assert_eq!(q.producer().get(&a.id).await.unwrap().body.get(), "2");
}

/// A merge with a flow key: the merged job carries the key (sent to the script as the push's only
/// option), and once full it is ready in the key's round and reserved with its key.
#[tokio::test]
async fn a_merged_job_keeps_its_flow_key() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let merge = |n: u32| {
        json!({"topic": "keyed", "body": n, "flow_key": "acme", "coalesce_key": "k",
               "coalesce": {"mode": "merge", "window_ms": 300000, "max_items": 2}})
    };
    let a = push(&q, merge(1)).await;
    let full = push(&q, merge(2)).await;
    assert_eq!((full.id.as_str(), full.state), (a.id.as_str(), State::Ready));
    assert_eq!(q.producer().get(&a.id).await.unwrap().flow_key.as_deref(), Some("acme"));
    let got = q.reservations().reserve(&["keyed".to_string()], 10).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].body.get(), got[0].flow_key.as_deref()),
        (r#"{"items":[1,2]}"#, Some("acme"))
    );
}

/// A coalescing push whose only other option is a priority (sent alone, `!<priority>`) stores its job
/// with that priority, as one with more options does.
#[tokio::test]
async fn a_priority_alone_or_with_other_options_is_kept() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let alone = push(
        &q,
        json!({"topic": "t", "body": 1, "priority": 7, "coalesce_key": "a",
               "coalesce": {"mode": "last", "window_ms": 60000}}),
    )
    .await;
    let with_more = push(
        &q,
        json!({"topic": "t", "body": 1, "priority": 9, "max_age_ms": 600000, "coalesce_key": "b",
               "coalesce": {"mode": "last", "window_ms": 60000}}),
    )
    .await;
    assert_eq!(q.producer().get(&alone.id).await.unwrap().priority, 7);
    assert_eq!(q.producer().get(&with_more.id).await.unwrap().priority, 9);
}
