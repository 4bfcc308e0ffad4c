//! Flow keys on a real Redis, standalone and cluster: keys with ready jobs take turns, so a big key's
//! backlog does not hold the others back; a key at its concurrency, out of tokens or paused waits while
//! the others go on, counted over every reserve; its jobs keep their key through every move (nack,
//! expiry, release, cancel, reschedule); the busiest keys are shown; the audit leaves keys' queues and
//! turns alone.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use dq_core::admin::topics::TopicCache;
use dq_core::topic::Flow;
use dq_core::{PushRequest, Queue, Reservation, State, TopicConfig};
use dq_harness::{RedisCluster, RedisServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::{cluster, push, standalone};

/// Runs `body` (which ends in a bool) until it is true, failing after `secs` seconds: a loop rather than
/// `eventually`, as the bodies fill the test's own collections.
macro_rules! wait_for {
    ($secs:expr, $what:expr, $body:block) => {{
        let deadline = tokio::time::Instant::now() + Duration::from_secs($secs);
        loop {
            if $body {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {}",
                $what
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

/// Registers `topic` with `flow` and returns a topic cache that keeps the queue's flow limits current
/// (as every binary's does).
async fn with_flow(q: &Queue, topic: &str, flow: Flow) -> (Arc<TopicCache>, CancellationToken) {
    let config = TopicConfig {
        flow: Some(flow),
        ..Default::default()
    };
    q.admin().put_topic(topic, &config).await.unwrap();
    let stop = CancellationToken::new();
    let cache = TopicCache::start(q.clone(), Duration::from_secs(3600), stop.clone()).await;
    (cache, stop)
}

async fn reserve(q: &Queue, topic: &str, n: usize) -> Vec<Reservation> {
    q.reservations().reserve(&[topic.to_string()], n).await.unwrap()
}

/// Reserves and acks the topic's jobs one at a time until none is left: their flow keys in order.
async fn drain_keys(q: &Queue, topic: &str, total: usize) -> Vec<String> {
    let mut order = Vec::new();
    wait_for!(30, "every job is reserved", {
        for job in reserve(q, topic, 1).await {
            q.reservations().ack(&job.id, &job.receipt).await.unwrap();
            order.push(job.flow_key.clone().unwrap_or_default());
        }
        order.len() >= total
    });
    order
}

/// 200 jobs of one key, then 5 each of 5 keys: the small keys' jobs go out while the big key still has
/// most of its backlog, and every job goes out once.
async fn keys_take_turns(q: &Queue) {
    for i in 0..200 {
        push(q, json!({"topic": "t", "body": i, "flow_key": "big"})).await;
    }
    for k in 0..5 {
        for i in 0..5 {
            push(q, json!({"topic": "t", "body": i, "flow_key": format!("small-{k}")})).await;
        }
    }
    let order = drain_keys(q, "t", 225).await;
    assert_eq!(order.len(), 225);
    let last_small = order.iter().rposition(|k| k != "big").unwrap();
    let big_before = order[..last_small].iter().filter(|k| *k == "big").count();
    assert!(
        big_before < 100,
        "{big_before} jobs of the big key went out before the last small one: {order:?}"
    );
    assert_eq!(reserve(q, "t", 10).await.len(), 0);
    let keys = q.admin().flow_keys("t", 10).await.unwrap();
    assert_eq!(keys.keys, 0, "{keys:?}");
}

#[tokio::test]
async fn keys_take_turns_behind_a_big_backlog() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    // One partition: the turns alone make it fair (no partitions taken in turn to help).
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    keys_take_turns(&q).await;
}

#[tokio::test]
async fn keys_take_turns_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    keys_take_turns(&q).await;
}

/// A key at its concurrency gets nothing more until one of its reservations ends, however it ends;
/// other keys go on; jobs without a key are not limited.
async fn concurrency_per_key(q: &Queue) {
    let (_cache, stop) = with_flow(
        q,
        "c",
        Flow {
            concurrency: Some(2),
            ..Default::default()
        },
    )
    .await;
    for i in 0..6 {
        push(q, json!({"topic": "c", "body": i, "flow_key": "a", "ttr_ms": 1000})).await;
    }
    for i in 0..3 {
        push(q, json!({"topic": "c", "body": i, "flow_key": "b"})).await;
    }
    push(q, json!({"topic": "c", "body": "free"})).await;
    let mut held: Vec<Reservation> = Vec::new();
    wait_for!(10, "two of each key and the free job", {
        held.extend(reserve(q, "c", 20).await);
        held.len() >= 5
    });
    let count = |held: &[Reservation], k: &str| held.iter().filter(|j| j.flow_key.as_deref() == Some(k)).count();
    assert_eq!(count(&held, "a"), 2, "{held:?}");
    assert_eq!(count(&held, "b"), 2, "{held:?}");
    assert_eq!(held.iter().filter(|j| j.flow_key.is_none()).count(), 1);
    assert!(reserve(q, "c", 20).await.is_empty());
    // The page of ready jobs shows the held keys' jobs too (their turns are out of line).
    let page = q.admin().browse("c", State::Ready, 0, 50).await.unwrap();
    assert_eq!((page.jobs.len(), page.total, page.complete), (5, 5, true), "{page:?}");
    let stats = q.admin().flow_keys("c", 10).await.unwrap();
    assert_eq!(stats.keys, 2);
    assert_eq!(
        (
            stats.busiest[0].key.as_str(),
            stats.busiest[0].ready,
            stats.busiest[0].reserved
        ),
        ("a", 4, 2)
    );
    assert_eq!((stats.busiest[1].key.as_str(), stats.busiest[1].ready), ("b", 1));

    // An ack frees a slot of its key.
    let a: Vec<_> = held
        .iter()
        .filter(|j| j.flow_key.as_deref() == Some("a"))
        .cloned()
        .collect();
    q.reservations().ack(&a[0].id, &a[0].receipt).await.unwrap();
    let got = reserve(q, "c", 20).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].flow_key.as_deref(), Some("a"));
    // A nack (back to ready at once), a release, and an expiry each free one too.
    q.reservations()
        .nack(&got[0].id, &got[0].receipt, Some(0), Some("again"), None)
        .await
        .unwrap();
    let got = reserve(q, "c", 20).await;
    assert_eq!(got.len(), 1, "{got:?}");
    q.reservations().release(&got[0].id, &got[0].receipt).await.unwrap();
    let got = reserve(q, "c", 20).await;
    assert_eq!(got.len(), 1, "{got:?}");
    // a[1] and got[0] are held; both run out (ttr 1 s): their key gets two slots back.
    wait_for!(20, "expired reservations free their key's slots", {
        for p in q.partitions().all() {
            q.timer().expire(p, 100).await.unwrap();
        }
        let got = reserve(q, "c", 20).await;
        let n = got.len();
        for j in got {
            q.reservations().ack(&j.id, &j.receipt).await.unwrap();
        }
        n > 0
    });
    stop.cancel();
}

#[tokio::test]
async fn a_key_at_its_concurrency_waits_and_the_others_go_on() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    concurrency_per_key(&q).await;
}

#[tokio::test]
async fn concurrency_per_key_holds_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    concurrency_per_key(&q).await;
}

/// A key's bucket: its burst goes out at once, then nothing until a token comes; the others go on. A
/// pause asked for one key holds that key only, until it ends (its turn parked in the delay set, put
/// back by the timer).
#[tokio::test]
async fn rate_and_pause_hold_one_key() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let (_cache, stop) = with_flow(
        &q,
        "r",
        Flow {
            rate_per_s: Some(0.001),
            burst: Some(2),
            ..Default::default()
        },
    )
    .await;
    for i in 0..5 {
        push(&q, json!({"topic": "r", "body": i, "flow_key": "slow"})).await;
        push(&q, json!({"topic": "r", "body": i, "flow_key": "other"})).await;
    }
    let mut got = Vec::new();
    wait_for!(10, "the burst of both keys", {
        got.extend(reserve(&q, "r", 20).await);
        got.len() >= 4
    });
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(reserve(&q, "r", 20).await.is_empty(), "no token is left for either key");
    // Both turns wait in the delay set for their next token (16 minutes away at 0.001/s).
    let counts = q.admin().counts().await.counts["r"].clone();
    assert_eq!(counts.get(&State::Ready), Some(&6), "{counts:?}");

    // A pause: a topic without limits, one key paused for a minute by its callback.
    for i in 0..3 {
        push(&q, json!({"topic": "p", "body": i, "flow_key": "paused"})).await;
        push(&q, json!({"topic": "p", "body": i, "flow_key": "free"})).await;
    }
    let first = reserve(&q, "p", 1).await.remove(0);
    let paused_key = first.flow_key.clone().unwrap();
    q.reservations()
        .nack_with(&first.id, &first.receipt, &pause(60_000))
        .await
        .unwrap();
    // The topic is marked as having a paused key in the key's partition, for as long as its state lasts.
    let marked = q
        .partition_keys(q.partitions().of_key("p", &paused_key))
        .flow_paused("p");
    let ttl: i64 = redis::cmd("PTTL").arg(&marked).query(&mut redis.conn()).unwrap();
    assert!((59_000..=61_000).contains(&ttl), "{ttl}");
    let mut rest = Vec::new();
    wait_for!(10, "the other key's jobs", {
        rest.extend(reserve(&q, "p", 20).await);
        rest.iter()
            .filter(|j| j.flow_key.as_deref() != Some(&paused_key))
            .count()
            >= 3
    });
    assert!(
        rest.iter().all(|j| j.flow_key.as_deref() != Some(&paused_key)),
        "the paused key got a job: {rest:?}"
    );
    let other = reserve(&q, "p", 20).await;
    assert!(other.is_empty(), "{other:?}");

    // A short pause ends, and the timer gives the key its turn back (topic q).
    for i in 0..3 {
        push(&q, json!({"topic": "q", "body": i, "flow_key": "k"})).await;
    }
    let first = reserve(&q, "q", 1).await.remove(0);
    q.reservations()
        .nack_with(&first.id, &first.receipt, &pause(200))
        .await
        .unwrap();
    let mut seen = HashSet::new();
    wait_for!(20, "every job of the key after its pause", {
        for p in q.partitions().all() {
            q.timer().promote(p, 100).await.unwrap();
        }
        for j in reserve(&q, "q", 20).await {
            q.reservations().ack(&j.id, &j.receipt).await.unwrap();
            seen.insert(j.id);
        }
        seen.len() >= 3
    });
    stop.cancel();
}

/// A ready job of a key cancelled or rescheduled leaves the key's queue; its key's turn goes with its
/// last job; a job due later joins its key when promoted; the look-up shows the key.
#[tokio::test]
async fn keyed_jobs_move_like_others() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let a = push(&q, json!({"topic": "m", "body": 1, "flow_key": "k"})).await;
    let b = push(&q, json!({"topic": "m", "body": 2, "flow_key": "k"})).await;
    let later = push(&q, json!({"topic": "m", "body": 3, "flow_key": "k", "delay_ms": 300})).await;
    let job = q.producer().get(&a).await.unwrap();
    assert_eq!(job.flow_key.as_deref(), Some("k"));
    assert_eq!(job.state, State::Ready);
    // b goes back to delayed, a is cancelled: the key has no ready job, and no turn.
    q.producer()
        .reschedule(&b, Some(dq_core::Due::Delay(600_000)), None)
        .await
        .unwrap();
    q.producer().cancel(&a).await.unwrap();
    assert!(reserve(&q, "m", 10).await.is_empty());
    assert_eq!(q.admin().flow_keys("m", 10).await.unwrap().keys, 0);
    // The delayed one comes due and is reserved through its key.
    let mut got = Vec::new();
    wait_for!(10, "the delayed job of the key", {
        for p in q.partitions().all() {
            q.timer().promote(p, 100).await.unwrap();
        }
        got.extend(reserve(&q, "m", 10).await);
        !got.is_empty()
    });
    assert_eq!(got[0].id, later);
    assert_eq!(got[0].flow_key.as_deref(), Some("k"));
    // b, made ready again by a new due time, too.
    q.producer()
        .reschedule(&b, Some(dq_core::Due::Delay(0)), None)
        .await
        .unwrap();
    let got = reserve(&q, "m", 10).await;
    assert_eq!(got.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), [b.as_str()]);
    // Nothing for the audit to repair: keys' queues and turns are where jobs are.
    push(&q, json!({"topic": "m", "body": 4, "flow_key": "k2"})).await;
    let report = q.checker().audit().await.unwrap();
    assert_eq!((report.orphan_records, report.dangling_ids), (0, 0), "{report:?}");
}

/// A nack at once that pauses the job's flow key for `ms` (a 429 with `Retry-After`).
fn pause(ms: u64) -> dq_core::reservations::Failure<'static> {
    dq_core::reservations::Failure {
        delay_ms: Some(0),
        error: Some("429"),
        pause_ms: ms,
        ..Default::default()
    }
}

/// Priorities hold within and across keys: a key's turn goes back in line with the priority of the job
/// it gave, and when its next job is less urgent, that job waits behind other keys' more urgent ones.
#[tokio::test]
async fn priorities_hold_within_a_key() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    let a1 = push(&q, json!({"topic": "p", "body": 1, "flow_key": "a", "priority": 1})).await;
    let a2 = push(&q, json!({"topic": "p", "body": 2, "flow_key": "a", "priority": 2000})).await;
    let b1 = push(&q, json!({"topic": "p", "body": 3, "flow_key": "b"})).await;
    let c1 = push(&q, json!({"topic": "p", "body": 4})).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let got = reserve(&q, "p", 1).await;
        assert_eq!(got.len(), 1, "after {order:?}");
        order.push(got[0].id.clone());
    }
    // b1 and c1 have one priority: pushed in one ms, the job may go before the turn (ids sort before `~`).
    assert_eq!((&order[0], &order[3]), (&a1, &a2), "{order:?}");
    assert_eq!(HashSet::from([&order[1], &order[2]]), HashSet::from([&b1, &c1]));
    assert!(reserve(&q, "p", 1).await.is_empty());
    // A more urgent job of a key whose turn is in line moves the turn ahead.
    let d1 = push(&q, json!({"topic": "p", "body": 5, "flow_key": "d", "priority": 3000})).await;
    let e1 = push(&q, json!({"topic": "p", "body": 6, "priority": 100})).await;
    let d2 = push(&q, json!({"topic": "p", "body": 7, "flow_key": "d", "priority": 5})).await;
    let got: Vec<String> = reserve(&q, "p", 3).await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, [d2, e1, d1]);
    assert_eq!(q.admin().flow_keys("p", 10).await.unwrap().keys, 0);
}

/// A flow key is a job id's syntax; an id of the producer's goes with a flow key only when it is in the
/// key's place (one dq made for it).
#[tokio::test]
async fn flow_keys_are_checked() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let bad = serde_json::from_value::<PushRequest>(json!({"topic": "v", "body": 1, "flow_key": "a b"})).unwrap();
    assert!(matches!(q.producer().validate(bad), Err(dq_core::Error::Invalid(_))));
    let long = "k".repeat(129);
    let bad = serde_json::from_value::<PushRequest>(json!({"topic": "v", "body": 1, "flow_key": long})).unwrap();
    assert!(matches!(q.producer().validate(bad), Err(dq_core::Error::Invalid(_))));
    // An id of another partition (256 partitions: some of these ids are elsewhere).
    let p = q.partitions().of_key("v", "k");
    let elsewhere = (0..)
        .map(|i| format!("order-{i}"))
        .find(|id| q.partitions().of_id(id) != p)
        .unwrap();
    let job = q
        .producer()
        .validate(serde_json::from_value(json!({"topic": "v", "id": elsewhere, "body": 1, "flow_key": "k"})).unwrap())
        .unwrap();
    assert!(matches!(q.producer().push(job).await, Err(dq_core::Error::Invalid(_))));
    assert!(q.producer().get(&elsewhere).await.is_err());
    // One in the key's place goes in.
    let here = (0..)
        .map(|i| format!("order-{i}"))
        .find(|id| q.partitions().of_id(id) == p)
        .unwrap();
    let job = q
        .producer()
        .validate(serde_json::from_value(json!({"topic": "v", "id": here, "body": 1, "flow_key": "k"})).unwrap())
        .unwrap();
    assert_eq!(q.producer().push(job).await.unwrap().id, here);
}

/// The keys' names of partition 0 of a one-partition queue that match `pattern` (after the prefix).
fn keys_like(redis: &RedisServer, q: &Queue, pattern: &str) -> Vec<String> {
    let prefix = q.partition_keys(0).prefix().to_string();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:{pattern}"))
        .query(&mut redis.conn())
        .unwrap();
    keys.sort();
    keys
}

/// A topic without limits keeps no queue and no state for its keys: their jobs wait straight in its
/// ready queue, scored by their virtual starts, so a big key gets one job a round and each key's jobs
/// go out in their order; the starts are kept only while the keys have jobs ahead, and expire.
#[tokio::test]
async fn straight_keys_share_the_ready_queue_in_rounds_and_keep_their_order() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    for i in 0..30 {
        push(&q, json!({"topic": "s", "body": i, "flow_key": "big"})).await;
    }
    for i in 0..3 {
        push(&q, json!({"topic": "s", "body": i, "flow_key": "small"})).await;
    }
    // Jobs, not turns, in the ready queue; no key has a queue or a state; both have a start.
    let ready: Vec<String> = redis::cmd("ZRANGE")
        .arg(q.partition_keys(0).ready("s"))
        .arg(0)
        .arg(-1)
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(ready.len(), 33);
    assert!(ready.iter().all(|m| !m.starts_with('~')), "{ready:?}");
    assert!(keys_like(&redis, &q, "fq:*").is_empty());
    assert!(keys_like(&redis, &q, "fs:*").is_empty());
    let fv = format!("{}:fv:s", q.partition_keys(0).prefix());
    let starts: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(&fv)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(
        starts.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["small", "big"],
        "the big key's last start is 27 rounds past the small one's: {starts:?}"
    );
    let ttl: i64 = redis::cmd("PTTL").arg(&fv).query(&mut redis.conn()).unwrap();
    assert!((1..=60_000).contains(&ttl), "{ttl}");
    let stats = q.admin().flow_keys("s", 10).await.unwrap();
    assert_eq!((stats.keys, stats.busiest[0].ready, stats.busiest[1].ready), (2, 30, 3));

    // Out one at a time: the small key's three within the first rounds, every key's in its order.
    let mut bodies: Vec<(String, i64)> = Vec::new();
    wait_for!(30, "every job", {
        for j in reserve(&q, "s", 1).await {
            let body = q.producer().get(&j.id).await.unwrap().body.get().parse().unwrap();
            bodies.push((j.flow_key.clone().unwrap(), body));
            q.reservations().ack(&j.id, &j.receipt).await.unwrap();
        }
        bodies.len() >= 33
    });
    let last_small = bodies.iter().rposition(|(k, _)| k == "small").unwrap();
    assert!(last_small < 8, "the small key waited behind the big one: {bodies:?}");
    for key in ["big", "small"] {
        let mine: Vec<i64> = bodies.iter().filter(|(k, _)| k == key).map(|(_, b)| *b).collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "{key}'s jobs out of order");
    }
    assert_eq!(q.admin().flow_keys("s", 10).await.unwrap().keys, 0);
    // A later job starts at the head (the queue is empty: Redis's clock, once past the big key's last
    // start): the old starts are dropped.
    let big_last = starts[1].1 as i64;
    wait_for!(10, "Redis's clock past the big key's last start", {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut redis.conn()).unwrap();
        secs * 1000 + micros / 1000 > big_last
    });
    push(&q, json!({"topic": "s", "body": 99, "flow_key": "late"})).await;
    let starts: Vec<String> = redis::cmd("ZRANGE")
        .arg(&fv)
        .arg(0)
        .arg(-1)
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(starts, ["late"]);
}

/// Jobs that went straight into the ready queue before their topic had limits are held by the limits
/// once they are set: reserved one at a time under a concurrency of 1, each key's in its own queue
/// from then on, and counted right throughout.
#[tokio::test]
async fn limits_set_later_hold_the_jobs_already_straight() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    for i in 0..4 {
        push(&q, json!({"topic": "l", "body": i, "flow_key": "a", "ttr_ms": 60000})).await;
        push(&q, json!({"topic": "l", "body": i, "flow_key": "b", "ttr_ms": 60000})).await;
    }
    assert!(keys_like(&redis, &q, "fq:*").is_empty(), "straight before the limits");
    let (_cache, stop) = with_flow(
        &q,
        "l",
        Flow {
            concurrency: Some(1),
            ..Default::default()
        },
    )
    .await;
    let got = reserve(&q, "l", 20).await;
    let mut keys: Vec<_> = got.iter().map(|j| j.flow_key.clone().unwrap()).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b"], "one job of each key: {got:?}");
    assert!(
        reserve(&q, "l", 20).await.is_empty(),
        "both keys are at their concurrency"
    );
    let stats = q.admin().flow_keys("l", 10).await.unwrap();
    assert_eq!(
        (stats.keys, stats.busiest[0].ready, stats.busiest[0].reserved),
        (2, 3, 1),
        "{stats:?}"
    );
    // Each ack lets one more of its key go, in order, until all are done.
    let mut bodies: Vec<(String, i64)> = Vec::new();
    let mut held = got;
    wait_for!(30, "every job, one at a time a key", {
        for j in std::mem::take(&mut held) {
            let body = q.producer().get(&j.id).await.unwrap().body.get().parse().unwrap();
            bodies.push((j.flow_key.clone().unwrap(), body));
            q.reservations().ack(&j.id, &j.receipt).await.unwrap();
        }
        held = reserve(&q, "l", 20).await;
        assert!(held.len() <= 2, "{held:?}");
        bodies.len() >= 8
    });
    for key in ["a", "b"] {
        let mine: Vec<i64> = bodies.iter().filter(|(k, _)| k == key).map(|(_, b)| *b).collect();
        assert_eq!(mine, [0, 1, 2, 3], "{key}");
    }
    assert_eq!(q.admin().flow_keys("l", 10).await.unwrap().keys, 0);
    // Nothing ready or reserved is counted (a topic whose counts are all 0 may be left out).
    let counts = q.admin().counts().await.counts;
    let l = counts.get("l").cloned().unwrap_or_default();
    assert_eq!(
        (
            l.get(&State::Ready).copied().unwrap_or(0),
            l.get(&State::Reserved).copied().unwrap_or(0)
        ),
        (0, 0),
        "{l:?}"
    );
    stop.cancel();
}

/// A long straight backlog under limits set later is moved into its key's queue over several reserves,
/// at most 1,000 jobs a call, each answering that the queue may hold more; the key is held throughout.
#[tokio::test]
async fn a_long_straight_backlog_moves_into_its_queue_a_bounded_call_at_a_time() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    let jobs = (0..1500)
        .map(|i| {
            let push = json!({"topic": "b", "body": i, "flow_key": "big", "ttr_ms": 60000});
            q.producer()
                .validate(serde_json::from_value::<PushRequest>(push).unwrap())
                .unwrap()
        })
        .collect();
    for pushed in q.producer().push_many(jobs).await {
        pushed.unwrap();
    }
    let (_cache, stop) = with_flow(
        &q,
        "b",
        Flow {
            concurrency: Some(1),
            ..Default::default()
        },
    )
    .await;
    let keys = q.partition_keys(0);
    let sizes = |c: &mut redis::Connection| -> (u64, u64) {
        let ready: u64 = redis::cmd("ZCARD").arg(keys.ready("b")).query(c).unwrap();
        let queued: u64 = redis::cmd("ZCARD").arg(keys.flow_queue("b", "big")).query(c).unwrap();
        (ready, queued)
    };
    let mut c = redis.conn();
    let first = reserve(&q, "b", 10).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let (ready, queued) = sizes(&mut c);
    assert!(ready > 0 && queued >= 999, "one call moved {queued}, left {ready}");
    // The next reserves move the rest (the key is at its concurrency: nothing more is taken).
    wait_for!(10, "the whole backlog in the key's queue", {
        assert!(reserve(&q, "b", 10).await.is_empty());
        sizes(&mut c) == (0, 1499)
    });
    q.reservations().ack(&first[0].id, &first[0].receipt).await.unwrap();
    let next = reserve(&q, "b", 10).await;
    assert_eq!(next.len(), 1);
    assert_eq!(q.producer().get(&next[0].id).await.unwrap().body.get(), "1");
    stop.cancel();
}

/// A key's count of queued jobs (`flows`) is what a reserve goes by to put its turn back in line: a
/// count too low (one an earlier release kept, or one gone wrong) is checked against the queue, so no job
/// is left in a queue without a turn, and the count is set right.
#[tokio::test]
async fn a_count_too_low_strands_no_job_in_its_queue() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    let (_cache, stop) = with_flow(
        &q,
        "h",
        Flow {
            concurrency: Some(1),
            ..Default::default()
        },
    )
    .await;
    for i in 0..3 {
        push(&q, json!({"topic": "h", "body": i, "flow_key": "a", "ttr_ms": 60000})).await;
    }
    let mut held = reserve(&q, "h", 10).await;
    assert_eq!(held.len(), 1, "{held:?}");
    let flows = q.partition_keys(0).flows("h");
    let mut c = redis.conn();
    let count: f64 = redis::cmd("ZSCORE").arg(&flows).arg("a").query(&mut c).unwrap();
    assert_eq!(count, 2.0, "the key's queue holds the two it was not given");
    let _: () = redis::cmd("ZADD").arg(&flows).arg(1).arg("a").query(&mut c).unwrap();
    let mut bodies = Vec::new();
    wait_for!(10, "every job of the key", {
        for j in std::mem::take(&mut held) {
            bodies.push(q.producer().get(&j.id).await.unwrap().body.get().to_string());
            q.reservations().ack(&j.id, &j.receipt).await.unwrap();
        }
        // One at a time: a reserve that wants more would find the key at its concurrency and hold its
        // turn, which an ack gives back whatever the count says.
        held = reserve(&q, "h", 1).await;
        bodies.len() >= 3
    });
    assert_eq!(bodies, ["0", "1", "2"]);
    let left: u64 = redis::cmd("ZCARD").arg(&flows).query(&mut c).unwrap();
    assert_eq!(left, 0);
    stop.cancel();
}

/// A straight key (its topic has no limits) is counted nowhere: its ready jobs are read from its place in
/// line, a round at a time; a count an earlier release kept for it goes when it next has a job.
#[tokio::test]
async fn straight_keys_are_counted_from_their_place_in_line() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    let flows = q.partition_keys(0).flows("s");
    let mut c = redis.conn();
    // As an earlier release left it: a count of straight jobs.
    let _: () = redis::cmd("ZADD").arg(&flows).arg(7).arg("y").query(&mut c).unwrap();
    for i in 0..3 {
        push(&q, json!({"topic": "s", "body": i, "flow_key": "x"})).await;
    }
    for i in 0..2 {
        push(&q, json!({"topic": "s", "body": i, "flow_key": "y"})).await;
    }
    let counted: u64 = redis::cmd("ZCARD").arg(&flows).query(&mut c).unwrap();
    assert_eq!(counted, 0, "no count of a straight key, and the old one is gone");
    let shown = |f: &dq_core::flow::FlowKeys| {
        (
            f.keys,
            f.busiest.iter().map(|k| (k.key.clone(), k.ready)).collect::<Vec<_>>(),
        )
    };
    let stats = q.admin().flow_keys("s", 10).await.unwrap();
    assert_eq!(shown(&stats), (2, vec![("x".into(), 3), ("y".into(), 2)]));
    // The first round (one job of each key) taken: one fewer each.
    let round = reserve(&q, "s", 2).await;
    let mut keys: Vec<_> = round.iter().map(|j| j.flow_key.clone().unwrap()).collect();
    keys.sort();
    assert_eq!(keys, ["x", "y"]);
    let stats = q.admin().flow_keys("s", 10).await.unwrap();
    assert_eq!(shown(&stats), (2, vec![("x".into(), 2), ("y".into(), 1)]));
    assert_eq!(reserve(&q, "s", 10).await.len(), 3);
    assert_eq!(shown(&q.admin().flow_keys("s", 10).await.unwrap()), (0, vec![]));
}

/// On a cluster, each straight key is read from its place in its own partition's line (its topic's keys
/// spread over the key partitions, each with its own queue head); once every job is out, no key is shown.
#[tokio::test]
async fn busiest_keys_are_read_over_the_key_partitions_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    let names: Vec<String> = (0..6).map(|k| format!("k{k}")).collect();
    for (k, name) in names.iter().enumerate() {
        for i in 0..=k {
            push(&q, json!({"topic": "s", "body": i, "flow_key": name})).await;
        }
    }
    let stats = q.admin().flow_keys("s", 3).await.unwrap();
    let shown: Vec<_> = stats.busiest.iter().map(|k| (k.key.as_str(), k.ready)).collect();
    assert_eq!(stats.keys, 6, "{stats:?}");
    assert_eq!(shown, [("k5", 6), ("k4", 5), ("k3", 4)]);
    let mut out = 0;
    wait_for!(30, "every job", {
        out += reserve(&q, "s", 100).await.len();
        out >= 21
    });
    assert_eq!(out, 21);
    let stats = q.admin().flow_keys("s", 3).await.unwrap();
    assert_eq!((stats.keys, stats.busiest.len()), (0, 0), "{stats:?}");
}
