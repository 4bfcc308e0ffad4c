//! Priorities on a real Redis, standalone and cluster: ready jobs of a topic go out by priority, then by
//! due time, however they became ready (pushed due, promoted, nacked, handed back, their reservation
//! expired, rescheduled); a new priority moves a delayed or ready job and nothing else; the default
//! priority costs a record nothing; across partitions, an urgent job pushed behind a backlog is the next
//! reserve's, in the process that pushed it and in one that heard its wake-up.

use std::time::Duration;

use dq_core::{Due, PushRequest, Queue, Settings};
use dq_harness::{RedisCluster, RedisServer, eventually};
use serde_json::json;

/// One partition, so a topic has one ready queue and its order is exact (across partitions a reserve
/// takes partitions in turn; see api.md).
fn standalone(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(1);
    s
}

async fn push(q: &Queue, json: serde_json::Value) -> String {
    let job = q
        .producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap();
    q.producer().push(job).await.unwrap().id
}

/// Reserves the topic's jobs one at a time: their ids in the order they came.
async fn drain_order(q: &Queue, topic: &str) -> Vec<String> {
    let topics = [topic.to_string()];
    let mut order = Vec::new();
    loop {
        let got = q.reservations().reserve(&topics, 1).await.unwrap();
        let Some(job) = got.into_iter().next() else { break };
        q.reservations().ack(&job.id, &job.receipt).await.unwrap();
        order.push(job.id);
    }
    order
}

/// Jobs pushed ready, with due times in the past, out of both orders.
async fn push_mixed(q: &Queue, now: i64) {
    for (id, priority, ago) in [
        ("a", None, 3000),
        ("b", Some(5), 2000),
        ("c", Some(5), 1000),
        ("d", Some(2000), 4000),
        ("e", Some(0), 0),
        ("f", Some(1024), 5000),
        ("g", Some(u32::MAX), 6000),
    ] {
        let mut req = json!({"topic": "t", "id": id, "body": 1, "run_at": now - ago});
        if let Some(p) = priority {
            req["priority"] = p.into();
        }
        push(q, req).await;
    }
}

const MIXED_ORDER: [&str; 7] = ["e", "b", "c", "f", "a", "d", "g"];

#[tokio::test]
async fn ready_jobs_go_out_by_priority_then_due_time() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    push_mixed(&q, dq_core::clock::unix_ms()).await;
    assert_eq!(q.producer().get("a").await.unwrap().priority, 1024);
    assert_eq!(q.producer().get("b").await.unwrap().priority, 5);
    assert_eq!(q.producer().get("g").await.unwrap().priority, u32::MAX);
    assert_eq!(drain_order(&q, "t").await, MIXED_ORDER);
}

#[tokio::test]
async fn the_order_holds_on_a_cluster() {
    let cluster = RedisCluster::start();
    let mut s = Settings::default();
    s.redis.mode = dq_core::config::RedisMode::Cluster;
    s.redis.urls = cluster.urls();
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    push_mixed(&q, dq_core::clock::unix_ms()).await;
    assert_eq!(drain_order(&q, "t").await, MIXED_ORDER);
}

/// A backlog in every one of 16 partitions, then one urgent job.
async fn backlog_then_urgent(q: &Queue) -> String {
    let now = dq_core::clock::unix_ms();
    for i in 0..64 {
        push(
            q,
            json!({"topic": "t", "id": format!("d{i}"), "body": i, "run_at": now - 60_000}),
        )
        .await;
    }
    push(q, json!({"topic": "t", "body": "urgent", "priority": 0})).await
}

#[tokio::test]
async fn an_urgent_job_behind_a_backlog_in_other_partitions_goes_next() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(16);
    let q = Queue::connect(&s).await.unwrap();
    let urgent = backlog_then_urgent(&q).await;
    let topics = ["t".to_string()];
    let got = q.reservations().reserve(&topics, 1).await.unwrap();
    assert_eq!(got[0].id, urgent, "this process pushed it: its own hint");

    // Another process, which hears the wake-up.
    let q2 = Queue::connect(&s).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let _listener = dq_core::wake::follow_ready(&q2, stop.clone());
    // Its index reads the partitions once (the first reserve), then follows the wake-ups.
    let first = q2.reservations().reserve(&topics, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    // Urgent jobs until one's wake-up arrives (the subscription may be made after the first).
    let urgent = std::sync::Mutex::new(Vec::new());
    eventually(Duration::from_secs(10), "a wake-up's hint arrives", || async {
        let id = push(&q, json!({"topic": "t", "body": "urgent too", "priority": 5})).await;
        urgent.lock().unwrap().push(id);
        tokio::time::sleep(Duration::from_millis(100)).await;
        !q2.reservations().ready_index().hinted("t").is_empty()
    })
    .await;
    let got = q2.reservations().reserve(&topics, 1).await.unwrap();
    assert!(
        urgent.lock().unwrap().contains(&got[0].id),
        "the wake-up's hint: {}",
        got[0].id
    );
    stop.cancel();
}

#[tokio::test]
async fn promoted_jobs_take_their_place_by_priority() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    // Due in turn: the later ones more urgent.
    for (i, priority) in [3000, 2000, 1000, 0].into_iter().enumerate() {
        push(
            &q,
            json!({"topic": "t", "id": format!("j{i}"), "body": 1, "delay_ms": 50 + 10 * i, "priority": priority}),
        )
        .await;
    }
    eventually(Duration::from_secs(10), "all four promoted", || async {
        q.timer().promote(0, 100).await.unwrap();
        q.producer().get("j3").await.unwrap().state == "ready" && q.producer().get("j0").await.unwrap().state == "ready"
    })
    .await;
    assert_eq!(drain_order(&q, "t").await, ["j3", "j2", "j1", "j0"]);
}

#[tokio::test]
async fn jobs_back_from_a_reservation_keep_their_place() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let now = dq_core::clock::unix_ms();
    let topics = ["t".to_string()];
    push(
        &q,
        json!({"topic": "t", "id": "urgent", "body": 1, "run_at": now - 10, "priority": 1, "ttr_ms": 1000}),
    )
    .await;
    push(
        &q,
        json!({"topic": "t", "id": "plain", "body": 1, "run_at": now - 5000}),
    )
    .await;

    // Nacked without delay: first again.
    let r = q.reservations().reserve(&topics, 1).await.unwrap().remove(0);
    assert_eq!(r.id, "urgent");
    q.reservations()
        .nack(&r.id, &r.receipt, Some(0), None, None)
        .await
        .unwrap();
    // Handed back unfinished: first again.
    let r = q.reservations().reserve(&topics, 1).await.unwrap().remove(0);
    assert_eq!(r.id, "urgent");
    q.reservations().release(&r.id, &r.receipt).await.unwrap();
    // Its reservation expired: first again.
    let r = q.reservations().reserve(&topics, 1).await.unwrap().remove(0);
    assert_eq!(r.id, "urgent");
    eventually(Duration::from_secs(20), "the reservation expired", || async {
        q.timer().expire(0, 100).await.unwrap();
        q.producer().get("urgent").await.unwrap().state == "ready"
    })
    .await;
    assert_eq!(drain_order(&q, "t").await, ["urgent", "plain"]);
}

#[tokio::test]
async fn a_new_priority_moves_a_delayed_or_ready_job_only() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let now = dq_core::clock::unix_ms();
    push(
        &q,
        json!({"topic": "t", "id": "first", "body": 1, "run_at": now - 2000}),
    )
    .await;
    push(
        &q,
        json!({"topic": "t", "id": "second", "body": 1, "run_at": now - 1000}),
    )
    .await;
    push(&q, json!({"topic": "t", "id": "later", "body": 1, "delay_ms": 600000})).await;

    // A ready job moves ahead, its due time kept.
    let before = q.producer().get("second").await.unwrap();
    let job = q.producer().reschedule("second", None, Some(10)).await.unwrap();
    assert_eq!(
        (job.priority, job.run_at, job.state.as_str()),
        (10, before.run_at, "ready")
    );
    // A delayed job stays delayed, due when it was.
    let before = q.producer().get("later").await.unwrap();
    let job = q.producer().reschedule("later", None, Some(0)).await.unwrap();
    assert_eq!(
        (job.priority, job.run_at, job.state.as_str()),
        (0, before.run_at, "delayed")
    );
    // Both at once: due now and most urgent.
    let job = q
        .producer()
        .reschedule("later", Some(Due::Delay(0)), Some(0))
        .await
        .unwrap();
    assert_eq!((job.priority, job.state.as_str()), (0, "ready"));

    // A reserved job cannot be moved, and nothing changes.
    let r = q.reservations().reserve(&["t".to_string()], 1).await.unwrap().remove(0);
    assert_eq!(r.id, "later");
    let err = q.producer().reschedule("later", None, Some(3)).await.unwrap_err();
    assert!(matches!(err, dq_core::Error::Conflict(_)), "{err:?}");
    assert_eq!(q.producer().get("later").await.unwrap().priority, 0);
    let err = q.producer().reschedule("nobody", None, Some(3)).await.unwrap_err();
    assert!(matches!(err, dq_core::Error::NotFound(_)), "{err:?}");
    q.reservations().ack(&r.id, &r.receipt).await.unwrap();

    assert_eq!(drain_order(&q, "t").await, ["second", "first"]);
}

#[tokio::test]
async fn the_default_priority_costs_a_record_nothing() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    push(&q, json!({"topic": "t", "id": "none", "body": 1, "delay_ms": 600000})).await;
    push(
        &q,
        json!({"topic": "t", "id": "dflt", "body": 1, "delay_ms": 600000, "priority": 1024}),
    )
    .await;
    push(
        &q,
        json!({"topic": "t", "id": "some", "body": 1, "delay_ms": 600000, "priority": 7}),
    )
    .await;
    let len = |id: &str| -> usize {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("dq:{{*}}:job:{id}"))
            .query(&mut redis.conn())
            .unwrap();
        redis::cmd("STRLEN").arg(&keys[0]).query(&mut redis.conn()).unwrap()
    };
    assert_eq!(len("none"), len("dflt"));
    assert!(len("some") > len("none"));
    // Set back to the default, it is stored as none again.
    q.producer().reschedule("some", None, Some(1024)).await.unwrap();
    assert_eq!(len("some"), len("none"));
}
