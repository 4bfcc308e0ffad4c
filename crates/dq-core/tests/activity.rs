//! The dashboard's activity counts on a real Redis: what processes count (pushes, acks, nacks, deaths
//! by nack and by TTR expiry, the lateness of first deliveries) is added to the minute hashes by their
//! flushes, summed over processes, read back per minute with the lateness percentiles of the buckets,
//! and the hashes expire; a flush that Redis refused keeps its counts for the next one.

use std::time::Duration;

use dq_core::activity::{KEEP_SECS, MinuteActivity};
use dq_core::clock::unix_ms;
use dq_core::{PushRequest, Queue, Settings};
use dq_harness::{RedisServer, eventually};
use serde_json::json;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(1);
    s.redis.response_timeout_ms = 1000;
    s.redis.connect_timeout_ms = 500;
    s
}

fn job(q: &Queue, json: serde_json::Value) -> dq_core::NewJob {
    q.producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap()
}

/// The minutes' counts summed: (pushed, delivered, failed, dead, first deliveries).
fn totals(minutes: &[MinuteActivity]) -> (u64, u64, u64, u64, u64) {
    minutes.iter().fold((0, 0, 0, 0, 0), |t, m| {
        (
            t.0 + m.pushed,
            t.1 + m.delivered,
            t.2 + m.failed,
            t.3 + m.dead,
            t.4 + m.first_deliveries,
        )
    })
}

#[tokio::test]
async fn counts_are_flushed_summed_over_processes_read_back_per_minute_and_expire() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let other = Queue::connect(&settings(&redis)).await.unwrap();

    // 100 jobs due in the past by known amounts, in the middle of their lateness buckets so the
    // moments the test takes cannot move them: 60 by 40 s (bucket ≤ 50 s), 39 by 400 s (≤ 500 s),
    // 1 by 4,000 s (≤ 5,000 s). The first group has one attempt, so a nack kills it.
    let now = unix_ms();
    let mut jobs = Vec::new();
    for i in 0..100 {
        let (late, attempts) = match i {
            0..60 => (40_000, 1),
            60..99 => (400_000, 5),
            _ => (4_000_000, 5),
        };
        jobs.push(job(
            &q,
            json!({"id": format!("j{i}"), "topic": "late", "body": i, "run_at": now - late, "max_attempts": attempts}),
        ));
    }
    assert!(q.producer().push_many(jobs).await.iter().all(|r| r.is_ok()));
    let got = q.reservations().reserve(&["late".to_string()], 100).await.unwrap();
    assert_eq!(got.len(), 100, "one reserve takes the 100 ready jobs");
    let (mut acked, mut failed, mut dead) = (0, 0, 0);
    for r in &got {
        let i: usize = r.id[1..].parse().unwrap();
        match i {
            // 45 acked and 15 nacked on their last attempt: dead.
            0..45 => q
                .reservations()
                .ack(&r.id, &r.receipt)
                .await
                .map(|_| acked += 1)
                .unwrap(),
            45..60 => {
                let (state, _) = q
                    .reservations()
                    .nack(&r.id, &r.receipt, None, Some("no"), None)
                    .await
                    .unwrap();
                assert_eq!(state, dq_core::State::Dead);
                dead += 1;
            }
            // 9 acked, 30 nacked to be retried.
            60..69 | 99 => q
                .reservations()
                .ack(&r.id, &r.receipt)
                .await
                .map(|_| acked += 1)
                .unwrap(),
            _ => {
                let (state, _) = q
                    .reservations()
                    .nack(&r.id, &r.receipt, None, Some("no"), None)
                    .await
                    .unwrap();
                assert_eq!(state, dq_core::State::Delayed);
                failed += 1;
            }
        }
    }
    assert_eq!((acked, failed, dead), (55, 30, 15));

    // One more dies by TTR expiry, the timer's way, counted by the process that expired it.
    other
        .producer()
        .push(job(
            &other,
            json!({"id": "ttr", "topic": "ttr", "body": 0, "ttr_ms": 1000, "max_attempts": 1}),
        ))
        .await
        .unwrap();
    assert_eq!(
        other
            .reservations()
            .reserve(&["ttr".to_string()], 1)
            .await
            .unwrap()
            .len(),
        1
    );
    let expired = std::sync::atomic::AtomicUsize::new(0);
    eventually(Duration::from_secs(30), "the reservation expired to dead", || async {
        let n = other.timer().expire(0, 10).await.unwrap().to_dead;
        expired.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n == 1
    })
    .await;

    // Nothing reaches Redis before a flush.
    assert_eq!(totals(&q.admin().activity(10).await.unwrap()), (0, 0, 0, 0, 0));
    q.flush_activity().await.unwrap();
    other.flush_activity().await.unwrap();
    // A flush with nothing counted since changes nothing.
    q.flush_activity().await.unwrap();

    let minutes = q.admin().activity(10).await.unwrap();
    assert_eq!(minutes.len(), 10);
    assert!(
        minutes.windows(2).all(|w| w[1].minute == w[0].minute + 1),
        "oldest first, every minute"
    );
    assert_eq!(minutes.last().unwrap().minute, unix_ms().div_euclid(60_000));
    assert_eq!(totals(&minutes), (101, 55, 30, 16, 101));
    // The 100 were reserved in one call, so counted in one minute: its percentiles are the buckets'.
    let busy = minutes
        .iter()
        .find(|m| m.first_deliveries >= 100)
        .expect("the reserve's minute");
    assert_eq!(busy.lateness_p50_ms, Some(50_000), "{busy:?}");
    assert_eq!(busy.lateness_p99_ms, Some(500_000), "{busy:?}");
    assert!(
        minutes
            .iter()
            .filter(|m| m.first_deliveries == 0)
            .all(|m| m.lateness_p50_ms.is_none())
    );

    // Every minute hash written expires within KEEP_SECS (and was not written without a TTL).
    let mut c = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("{dq}:activity:*").query(&mut c).unwrap();
    assert!(!keys.is_empty());
    for key in &keys {
        let ttl: i64 = redis::cmd("TTL").arg(key).query(&mut c).unwrap();
        assert!(ttl > 0 && ttl <= KEEP_SECS as i64, "{key}: TTL {ttl}");
    }

    // Bad windows are refused before anything is read.
    assert!(matches!(q.admin().activity(0).await, Err(dq_core::Error::Invalid(_))));
    assert!(matches!(
        q.admin().activity(24 * 60 + 1).await,
        Err(dq_core::Error::Invalid(_))
    ));
}

#[tokio::test]
async fn a_flush_that_failed_keeps_its_counts_for_the_next() {
    let mut redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let jobs = (0..3)
        .map(|i| job(&q, json!({"topic": "t", "body": i, "delay_ms": 60_000})))
        .collect();
    assert!(q.producer().push_many(jobs).await.iter().all(|r| r.is_ok()));

    redis.stop();
    assert!(q.flush_activity().await.is_err(), "Redis is down");
    q.activity_counts().pushed(2);
    redis.restart();
    eventually(Duration::from_secs(30), "a flush once Redis is back", || async {
        q.flush_activity().await.is_ok()
    })
    .await;
    let minutes = q.admin().activity(10).await.unwrap();
    assert_eq!(totals(&minutes).0, 5, "{minutes:?}");
}
