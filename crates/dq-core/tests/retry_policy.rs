//! A job's own retry policy, kept in its record so every caller of nack and expiry follows it: its
//! backoff list (over the caller's), and the end of its retries (its first due time plus its max age),
//! after which a failure or an expired reservation makes it dead however many attempts remain.

use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings, State, TopicConfig};
use dq_harness::{RedisServer, eventually};
use serde_json::json;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(4);
    s.limits.min_ttr_ms = 10;
    s
}

fn request(json: serde_json::Value) -> PushRequest {
    serde_json::from_value(json).unwrap()
}

/// Redis's clock in ms.
fn redis_now(redis: &RedisServer) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut redis.conn()).unwrap();
    s * 1000 + us / 1000
}

/// Reserves the one ready job of `t`; its receipt.
async fn reserve_one(q: &Queue, id: &str) -> String {
    let got = q.reservations().reserve(&["t".into()], 1).await.unwrap();
    assert_eq!(got.len(), 1, "a ready job to reserve");
    assert_eq!(got[0].id, id);
    got[0].receipt.clone()
}

/// Nacks `id` with the caller's list `[1]` (as dq-consumer passes its topic's); the new state and the
/// delay it was given, bounded by Redis's clock read before and after.
async fn nack(q: &Queue, redis: &RedisServer, id: &str, receipt: &str) -> (State, i64, i64) {
    let before = redis_now(redis);
    let (state, run_at) = q
        .reservations()
        .nack(id, receipt, None, Some("failed"), Some(&[1]))
        .await
        .unwrap();
    let after = redis_now(redis);
    (state, run_at - after, run_at - before)
}

#[tokio::test]
async fn a_jobs_own_backoff_list_wins_over_the_callers_and_its_last_delay_repeats() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let job = q
        .producer()
        .validate(request(
            json!({"id": "j", "topic": "t", "body": 1, "backoff_ms": [0, 60000, 120000]}),
        ))
        .unwrap();
    q.producer().push(job).await.unwrap();
    let looked = q.producer().get("j").await.unwrap();
    assert_eq!(looked.backoff_ms, Some(vec![0, 60000, 120000]));
    // First failure: 0 ms, straight back to ready.
    let receipt = reserve_one(&q, "j").await;
    let (state, _, _) = nack(&q, &redis, "j", &receipt).await;
    assert_eq!(state, State::Ready);
    // Second: 60 s (not the caller's 1 ms).
    let receipt = reserve_one(&q, "j").await;
    let (state, low, high) = nack(&q, &redis, "j", &receipt).await;
    assert_eq!(state, State::Delayed);
    assert!(low <= 60000 && 60000 <= high, "{low}..{high}");
    // Third and later: 120 s, the last one, again and again.
    for _ in 0..2 {
        q.producer()
            .reschedule("j", Some(dq_core::Due::Delay(0)), None)
            .await
            .unwrap();
        let receipt = reserve_one(&q, "j").await;
        let (state, low, high) = nack(&q, &redis, "j", &receipt).await;
        assert_eq!(state, State::Delayed);
        assert!(low <= 120000 && 120000 <= high, "{low}..{high}");
    }
    assert_eq!(q.producer().get("j").await.unwrap().attempts, 4);
}

#[tokio::test]
async fn a_failure_whose_retry_would_come_after_the_max_age_is_dead() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    // Retried 60 s apart with unlimited attempts: for 90 s after the first due time, the first retry is
    // inside the age; for 50 s, it would come after it.
    for (id, age) in [("inside", 90000), ("past", 50000)] {
        let job = q
            .producer()
            .validate(request(json!({"id": id, "topic": "t", "body": 1, "max_attempts": 0,
                                     "max_age_ms": age, "backoff_ms": [60000]})))
            .unwrap();
        let pushed = q.producer().push(job).await.unwrap();
        assert_eq!(
            q.producer().get(id).await.unwrap().retry_until,
            Some(pushed.run_at + age)
        );
        let receipt = reserve_one(&q, id).await;
        nack(&q, &redis, id, &receipt).await;
    }
    assert_eq!(q.producer().get("inside").await.unwrap().state, State::Delayed);
    let dead = q.producer().get("past").await.unwrap();
    assert_eq!((dead.state, dead.attempts), (State::Dead, 1));
    let error = dead.last_error.unwrap();
    assert!(error.contains("failed") && error.contains("max age"), "{error}");
    assert_eq!(q.admin().dead("t", 0, 10).await.unwrap().total, 1);
    // Requeued, it starts its age again from the requeue: its retry is inside it once more.
    let before = redis_now(&redis);
    assert_eq!(
        q.admin().requeue_dead("t", Some(&["past".to_string()])).await.unwrap(),
        1
    );
    let requeued = q.producer().get("past").await.unwrap();
    let until = requeued.retry_until.unwrap();
    assert!(until >= before + 50000 && until <= redis_now(&redis) + 50000, "{until}");
    let receipt = reserve_one(&q, "past").await;
    let (state, _, _) = nack(&q, &redis, "past", &receipt).await;
    assert_eq!(state, State::Dead, "60 s of backoff is still past a 50 s age");
    // With a shorter retry the age allows it.
    let job = q
        .producer()
        .validate(request(
            json!({"id": "short", "topic": "t", "body": 1, "max_attempts": 0,
                                 "max_age_ms": 50000, "backoff_ms": [1000]}),
        ))
        .unwrap();
    q.producer().push(job).await.unwrap();
    let receipt = reserve_one(&q, "short").await;
    assert_eq!(nack(&q, &redis, "short", &receipt).await.0, State::Delayed);
}

#[tokio::test]
async fn an_expired_reservation_past_the_max_age_is_dead() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let job = q
        .producer()
        .validate(request(json!({"id": "old", "topic": "t", "body": 1, "max_attempts": 0,
                                 "max_age_ms": 1, "ttr_ms": 10})))
        .unwrap();
    q.producer().push(job).await.unwrap();
    let job = q
        .producer()
        .validate(request(
            json!({"id": "young", "topic": "t", "body": 2, "max_attempts": 0, "ttr_ms": 10}),
        ))
        .unwrap();
    q.producer().push(job).await.unwrap();
    let got = q.reservations().reserve(&["t".into()], 2).await.unwrap();
    assert_eq!(got.len(), 2);
    // Each expiry call ends what has expired by then: count what all of them ended.
    let ended = std::sync::Mutex::new((0, 0));
    eventually(Duration::from_secs(30), "both reservations ended", || async {
        for p in q.partitions().all() {
            let x = q.timer().expire(p, 100).await.unwrap();
            let mut e = ended.lock().unwrap();
            e.0 += x.to_ready;
            e.1 += x.to_dead;
        }
        *ended.lock().unwrap() == (1, 1)
    })
    .await;
    assert_eq!(q.producer().get("old").await.unwrap().state, State::Dead);
    assert_eq!(q.producer().get("young").await.unwrap().state, State::Ready);
    let error = q.producer().get("old").await.unwrap().last_error.unwrap();
    assert!(error.contains("ttr") && error.contains("max age"), "{error}");
}

#[tokio::test]
async fn a_topics_max_age_is_written_into_its_jobs_at_push_and_a_push_may_set_its_own() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let topic: TopicConfig = serde_json::from_value(json!({"retry": {"max_age_ms": 3600000}})).unwrap();
    let inherits = q
        .producer()
        .validate_for(request(json!({"id": "a", "topic": "t", "body": 1})), Some(&topic))
        .unwrap();
    let own = q
        .producer()
        .validate_for(
            request(json!({"id": "b", "topic": "t", "body": 1, "max_age_ms": 5000})),
            Some(&topic),
        )
        .unwrap();
    let plain = q
        .producer()
        .validate_for(request(json!({"id": "c", "topic": "t", "body": 1})), None)
        .unwrap();
    assert_eq!(
        (inherits.max_age_ms, own.max_age_ms, plain.max_age_ms),
        (Some(3600000), Some(5000), None)
    );
    for job in [inherits, own, plain] {
        q.producer().push(job).await.unwrap();
    }
    let run_at = q.producer().get("a").await.unwrap().run_at;
    assert_eq!(q.producer().get("a").await.unwrap().retry_until, Some(run_at + 3600000));
    assert_eq!(
        q.producer().get("b").await.unwrap().retry_until,
        Some(q.producer().get("b").await.unwrap().run_at + 5000)
    );
    assert_eq!(q.producer().get("c").await.unwrap().retry_until, None);
}
