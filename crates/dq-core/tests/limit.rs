//! `limit.lua`: a topic's delivery limits shared by every dq-consumer worker (slots on a lease, the rate's
//! token bucket, a pause the callback asked for), against a real Redis.

use std::time::Duration;

use dq_core::reservations::{LimitAsk, LimitGrant};
use dq_core::{Queue, Settings};
use dq_harness::{RedisServer, eventually};

async fn queue(redis: &RedisServer) -> Queue {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(4);
    Queue::connect(&s).await.unwrap()
}

/// An ask of `start` deliveries with `in_use` running, holding `hold`, under concurrency 4 and no rate.
fn ask(in_use: u32, hold: u32, start: i64) -> LimitAsk {
    LimitAsk {
        in_use,
        hold,
        start,
        concurrency: 4,
        lease_ms: 60_000,
        rate_per_s: None,
        burst: 1,
        pause_ms: 0,
    }
}

#[tokio::test]
async fn slots_are_shared_by_every_holder_and_never_exceed_the_concurrency() {
    let redis = RedisServer::start();
    let q = queue(&redis).await;
    let a = q.reservations().limit("t", "a", ask(0, 3, 3)).await.unwrap();
    assert_eq!((a.held, a.start), (3, 3));
    let b = q.reservations().limit("t", "b", ask(0, 3, 3)).await.unwrap();
    assert_eq!((b.held, b.start), (1, 1), "only what a leaves");
    let c = q.reservations().limit("t", "c", ask(0, 2, 2)).await.unwrap();
    assert_eq!(
        c,
        LimitGrant {
            held: 0,
            start: 0,
            wait_ms: 0,
            paused: false
        },
        "nothing left"
    );
    // a finishes two deliveries and gives their slots back: c gets them.
    let a = q.reservations().limit("t", "a", ask(1, 1, 0)).await.unwrap();
    assert_eq!((a.held, a.start), (1, 0));
    let c = q.reservations().limit("t", "c", ask(0, 2, 2)).await.unwrap();
    assert_eq!((c.held, c.start), (2, 2));
    // Another topic has slots of its own.
    let other = q.reservations().limit("u", "a", ask(0, 4, 4)).await.unwrap();
    assert_eq!((other.held, other.start), (4, 4));
}

#[tokio::test]
async fn slots_in_use_are_kept_when_the_concurrency_is_lowered() {
    let redis = RedisServer::start();
    let q = queue(&redis).await;
    q.reservations().limit("t", "a", ask(0, 4, 4)).await.unwrap();
    let lowered = LimitAsk {
        concurrency: 2,
        ..ask(4, 4, 1)
    };
    let a = q.reservations().limit("t", "a", lowered).await.unwrap();
    assert_eq!(
        (a.held, a.start),
        (4, 0),
        "running deliveries keep their slots; none starts"
    );
    let b = q
        .reservations()
        .limit(
            "t",
            "b",
            LimitAsk {
                concurrency: 2,
                ..ask(0, 1, 1)
            },
        )
        .await
        .unwrap();
    assert_eq!((b.held, b.start), (0, 0));
}

#[tokio::test]
async fn the_slots_of_a_holder_that_stops_renewing_go_back_when_its_lease_ends() {
    let redis = RedisServer::start();
    let q = queue(&redis).await;
    let short = LimitAsk {
        lease_ms: 300,
        ..ask(0, 4, 4)
    };
    assert_eq!(q.reservations().limit("t", "dead", short).await.unwrap().held, 4);
    assert_eq!(q.reservations().limit("t", "b", ask(0, 4, 4)).await.unwrap().start, 0);
    eventually(Duration::from_secs(10), "the lease to end", || async {
        q.reservations().limit("t", "b", ask(0, 4, 4)).await.unwrap().start == 4
    })
    .await;
}

#[tokio::test]
async fn the_rate_hands_out_the_burst_then_one_token_at_a_time_and_takes_back_unused_ones() {
    let redis = RedisServer::start();
    let q = queue(&redis).await;
    let rated = |hold: u32, start: i64| LimitAsk {
        concurrency: 1000,
        rate_per_s: Some(0.5),
        burst: 5,
        ..ask(0, hold, start)
    };
    let first = q.reservations().limit("t", "a", rated(100, 100)).await.unwrap();
    assert_eq!(first.start, 5, "the burst");
    assert!(
        first.wait_ms > 0 && first.wait_ms <= 2000,
        "the next token within 2 s: {first:?}"
    );
    let b = q.reservations().limit("t", "b", rated(100, 100)).await.unwrap();
    assert_eq!(b.start, 0, "the bucket is shared: {b:?}");
    // a reserved only 2 of its 5: it gives 3 back, and b can start them.
    q.reservations()
        .limit(
            "t",
            "a",
            LimitAsk {
                in_use: 2,
                ..rated(2, -3)
            },
        )
        .await
        .unwrap();
    let b = q.reservations().limit("t", "b", rated(100, 100)).await.unwrap();
    assert_eq!(b.start, 3, "{b:?}");
    // Tokens never exceed free slots: one slot free, one token handed out.
    let few = LimitAsk {
        concurrency: 1,
        rate_per_s: Some(1000.0),
        burst: 50,
        ..ask(0, 10, 10)
    };
    let g = q.reservations().limit("v", "a", few).await.unwrap();
    assert_eq!((g.held, g.start), (1, 1));
}

#[tokio::test]
async fn a_pause_asked_by_the_callback_stops_every_holder_until_it_ends() {
    let redis = RedisServer::start();
    let q = queue(&redis).await;
    let paused = q
        .reservations()
        .limit(
            "t",
            "a",
            LimitAsk {
                pause_ms: 60_000,
                ..ask(0, 0, 0)
            },
        )
        .await
        .unwrap();
    assert!(paused.paused && paused.wait_ms > 50_000, "{paused:?}");
    let b = q.reservations().limit("t", "b", ask(0, 2, 2)).await.unwrap();
    assert!(b.paused && b.start == 0 && b.wait_ms > 50_000, "{b:?}");
    assert_eq!(b.held, 2, "slots are held through the pause");
    let short = q
        .reservations()
        .limit(
            "u",
            "a",
            LimitAsk {
                pause_ms: 200,
                ..ask(0, 0, 0)
            },
        )
        .await
        .unwrap();
    assert!(short.paused);
    eventually(Duration::from_secs(10), "the pause to end", || async {
        q.reservations().limit("u", "b", ask(0, 1, 1)).await.unwrap().start == 1
    })
    .await;
}
