//! Every delivery attempt on record with its job, on a real Redis: acks, nacks and expired reservations
//! each add one, newest first, the newest 20 kept; a history goes with its job, keeps its record readable
//! through every move (flow keys and dead jobs included), and is not kept with `jobs.attempt_history`
//! off.

mod common;

use std::time::Duration;

use dq_core::attempt::{Note, Outcome, reserved_at};
use dq_core::reservations::Failure;
use dq_core::{Queue, State};
use dq_harness::{RedisCluster, RedisServer};
use serde_json::json;

use common::{cluster, push, reserve, standalone};

/// A nack, a failed delivery and an ack: three attempts, newest first, with what each said. Returns the
/// job's id.
async fn three_attempts(q: &Queue) -> String {
    let id = push(q, json!({"topic": "h", "body": {"n": 1}})).await;
    let first = reserve(q, "h").await;
    assert!(reserved_at(&first.receipt).is_some(), "{}", first.receipt);
    q.reservations()
        .nack(&first.id, &first.receipt, Some(0), Some("worker said no"), None)
        .await
        .unwrap();
    let second = reserve(q, "h").await;
    let failure = Failure {
        delay_ms: Some(0),
        error: Some("HTTP 500: oops"),
        note: Note {
            outcome: Some(Outcome::Failed),
            status: Some(500),
            answer: Some("oops".into()),
            consumer: Some("host:42".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    q.reservations()
        .nack_with(&second.id, &second.receipt, &failure)
        .await
        .unwrap();
    let third = reserve(q, "h").await;
    let note = Note {
        status: Some(200),
        answer: Some("{\"ok\":true}".into()),
        consumer: Some("host:42".into()),
        ..Default::default()
    };
    q.reservations()
        .ack_noting(&third.id, &third.receipt, &note)
        .await
        .unwrap();

    let (count, history) = q.producer().attempts(&id).await.unwrap();
    assert_eq!(count, 3);
    let outcomes: Vec<_> = history.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        outcomes,
        [(3, Outcome::Acked), (2, Outcome::Failed), (1, Outcome::Nacked)]
    );
    assert_eq!(history[0].status, Some(200));
    assert_eq!(history[0].answer.as_deref(), Some("{\"ok\":true}"));
    assert_eq!(history[1].error.as_deref(), Some("HTTP 500: oops"));
    assert_eq!(history[1].consumer.as_deref(), Some("host:42"));
    assert_eq!(history[2].error.as_deref(), Some("worker said no"));
    assert_eq!((history[2].status, history[2].consumer.as_deref()), (None, None));
    let now = dq_core::clock::unix_ms();
    for a in &history {
        assert!(a.started_at <= now && a.started_at > now - 60_000, "{a:?}");
    }
    assert!(history[0].started_at >= history[2].started_at);
    // The record reads as before: done, with its body, for its retention.
    let job = q.producer().get(&id).await.unwrap();
    assert_eq!((job.state, job.attempts), (State::Done, 3));
    assert_eq!(job.body.get(), "{\"n\":1}");
    id
}

#[tokio::test]
async fn acks_and_nacks_are_kept_newest_first() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let id = three_attempts(&q).await;
    // The ack wrote the record with one SET: the string holds no room to spare, as one written afresh
    // with the same bytes (an APPEND would have left as much again unused).
    let mut conn = redis.conn();
    let key: String = redis::cmd("KEYS")
        .arg(format!("*:job:{id}"))
        .query::<Vec<String>>(&mut conn)
        .unwrap()
        .pop()
        .unwrap();
    let bytes: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    // And it expires within `jobs.done_retention_ms`.
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
    let retention = standalone(&redis).jobs.done_retention_ms as i64;
    assert!(ttl > 0 && ttl <= retention, "{ttl} ms left of {retention}");
    // A key of the same length, so that the keys' own sizes cancel out.
    let fresh = key.replace(":job:", ":jox:");
    let _: () = redis::cmd("SET").arg(&fresh).arg(&bytes).query(&mut conn).unwrap();
    let usage = |k: &str| -> i64 {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .query(&mut redis.conn())
            .unwrap()
    };
    assert_eq!(usage(&key), usage(&fresh));
    let err = q.producer().attempts("01NOSUCHJOB0000000000000000").await.unwrap_err();
    assert!(matches!(err, dq_core::Error::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn attempts_are_kept_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    three_attempts(&q).await;
}

/// An expired reservation is an attempt too; a job that dies keeps its history in the dead list; a job
/// past 20 attempts keeps the newest 20.
#[tokio::test]
async fn expiries_deaths_and_the_newest_twenty() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let id = push(&q, json!({"topic": "x", "body": 1, "ttr_ms": 1000, "max_attempts": 2})).await;
    let r = reserve(&q, "x").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        for p in q.partitions().all() {
            q.timer().expire(p, 100).await.unwrap();
        }
        if q.producer().get(&id).await.unwrap().state == State::Ready {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the reservation never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, history) = q.producer().attempts(&id).await.unwrap();
    assert_eq!(history.len(), 1);
    let expired = &history[0];
    assert_eq!((expired.attempt, expired.outcome), (1, Outcome::Expired));
    assert_eq!(expired.error.as_deref(), Some("reservation expired (ttr)"));
    assert_eq!(Some(expired.started_at), reserved_at(&r.receipt));
    assert!(expired.duration_ms >= 1000, "{expired:?}");
    // The second attempt fails and is the last: dead, with both attempts.
    let r = reserve(&q, "x").await;
    q.reservations()
        .nack(&r.id, &r.receipt, None, Some("no"), None)
        .await
        .unwrap();
    assert_eq!(q.producer().get(&id).await.unwrap().state, State::Dead);
    let (count, history) = q.producer().attempts(&id).await.unwrap();
    assert_eq!(count, 2);
    assert_eq!(
        history.iter().map(|a| a.outcome).collect::<Vec<_>>(),
        [Outcome::Nacked, Outcome::Expired]
    );

    // 25 attempts: the newest 20 are kept.
    let id = push(&q, json!({"topic": "y", "body": 1, "max_attempts": 0})).await;
    for _ in 0..24 {
        let r = reserve(&q, "y").await;
        q.reservations()
            .nack(&r.id, &r.receipt, Some(0), Some("again"), None)
            .await
            .unwrap();
    }
    let r = reserve(&q, "y").await;
    q.reservations().ack(&r.id, &r.receipt).await.unwrap();
    let (count, history) = q.producer().attempts(&id).await.unwrap();
    assert_eq!(count, 25);
    assert_eq!(history.len(), 20);
    assert_eq!(
        history.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        (6..=25).rev().collect::<Vec<_>>()
    );
    assert_eq!(history[0].outcome, Outcome::Acked);
    assert_eq!(q.producer().get(&id).await.unwrap().state, State::Done);
}

/// A job with a flow key (a record whose state is written at offset 3) and one with a priority keep
/// their history and their fields through their moves.
#[tokio::test]
async fn keyed_and_urgent_jobs_keep_their_history() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    // One partition: the urgent job goes first, and each job's two attempts come one after the other.
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    let keyed = push(&q, json!({"topic": "k", "body": 1, "flow_key": "acme"})).await;
    let urgent = push(&q, json!({"topic": "k", "body": 2, "priority": 3})).await;
    for _ in 0..2 {
        let r = reserve(&q, "k").await;
        q.reservations()
            .nack(&r.id, &r.receipt, Some(0), None, None)
            .await
            .unwrap();
        let again = reserve(&q, "k").await;
        assert_eq!(again.id, r.id, "keyed {keyed} urgent {urgent}");
        q.reservations().ack(&again.id, &again.receipt).await.unwrap();
    }
    for id in [&keyed, &urgent] {
        let (count, history) = q.producer().attempts(id).await.unwrap();
        assert_eq!(count, 2, "{id}");
        assert_eq!(
            history.iter().map(|a| a.outcome).collect::<Vec<_>>(),
            [Outcome::Acked, Outcome::Nacked]
        );
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Done);
    }
    let job = q.producer().get(&keyed).await.unwrap();
    assert_eq!(job.flow_key.as_deref(), Some("acme"));
    assert_eq!(q.producer().get(&urgent).await.unwrap().priority, 3);
}

#[tokio::test]
async fn no_history_is_kept_when_it_is_off() {
    let redis = RedisServer::start();
    let mut s = standalone(&redis);
    s.jobs.attempt_history = false;
    let q = Queue::connect(&s).await.unwrap();
    let id = push(&q, json!({"topic": "o", "body": 1})).await;
    let r = reserve(&q, "o").await;
    q.reservations()
        .nack(&r.id, &r.receipt, Some(0), Some("x"), None)
        .await
        .unwrap();
    let r = reserve(&q, "o").await;
    q.reservations().ack(&r.id, &r.receipt).await.unwrap();
    assert_eq!(q.producer().attempts(&id).await.unwrap(), (2, vec![]));
}

/// beanstalkd's release and bury end an attempt too (`nacked`, saying which); a reserve-job starts one
/// whose receipt says when.
#[tokio::test]
async fn beanstalkd_releases_and_buries_are_attempts() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    let id = push(&q, json!({"topic": "b", "body": 1, "max_attempts": 0})).await;
    let r = q
        .beanstalkd()
        .bs_take(&id)
        .await
        .unwrap()
        .expect("the ready job is taken");
    assert!(reserved_at(&r.receipt).is_some(), "{}", r.receipt);
    q.beanstalkd().bs_release(&id, &r.receipt, 100, Some(0)).await.unwrap();
    let r = reserve(&q, "b").await;
    q.beanstalkd().bs_release(&id, &r.receipt, 100, None).await.unwrap();
    assert_eq!(q.producer().get(&id).await.unwrap().state, State::Dead);
    let (count, history) = q.producer().attempts(&id).await.unwrap();
    assert_eq!(count, 2);
    let seen: Vec<_> = history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (2, Outcome::Nacked, Some("buried")),
            (1, Outcome::Nacked, Some("released"))
        ]
    );
}
