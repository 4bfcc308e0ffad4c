//! Every script through the typed API, on a real Redis: moves, fencing, counts, and the one-structure
//! invariant after each.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use dq_core::reservations::Waiting;
use dq_core::{Due, Error, PushRequest, Queue, Settings, State};
use dq_harness::{RedisServer, eventually};
use serde_json::json;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(4);
    s.limits.min_ttr_ms = 10;
    s
}

/// A queue of one partition, so that every job shares its keys.
async fn one_partition(redis: &RedisServer) -> Queue {
    let mut s = settings(redis);
    s.redis.partitions = Some(1);
    Queue::connect(&s).await.unwrap()
}

fn job(queue: &Queue, json: serde_json::Value) -> dq_core::NewJob {
    queue
        .producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap()
}

/// Invariant 1: each live job is in exactly one structure, the one its state names, and the counts hash
/// matches the structures.
fn assert_consistent(redis: &RedisServer) {
    let mut c = redis.conn();
    let jobs: Vec<String> = redis::cmd("KEYS").arg("dq:{*}:job:*").query(&mut c).unwrap();
    let mut members: HashMap<String, Vec<String>> = HashMap::new();
    let structures: Vec<String> = ["dq:{*}:delayed", "dq:{*}:ready:*", "dq:{*}:reserved", "dq:{*}:dead:*"]
        .iter()
        .flat_map(|p| redis::cmd("KEYS").arg(p).query::<Vec<String>>(&mut c).unwrap())
        .collect();
    for key in &structures {
        let ids: Vec<String> = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query(&mut c).unwrap();
        for id in ids {
            members.entry(id).or_default().push(key.clone());
        }
    }
    let mut counted: HashMap<String, i64> = HashMap::new();
    let mut read = dq_core::store::scripts::get::SCRIPT.prepare_invoke();
    for key in &jobs {
        read.key(key);
    }
    let recs: Vec<HashMap<String, String>> = read.arg("t").arg("s").invoke(&mut c).unwrap();
    for (key, rec) in jobs.iter().zip(recs) {
        let (part, id) = key.split_once(":job:").unwrap();
        let (topic, state) = (&rec["t"], &rec["s"]);
        let inside = members.remove(id).unwrap_or_default();
        let want = match state.as_str() {
            "delayed" => format!("{part}:delayed"),
            "ready" => format!("{part}:ready:"),
            "reserved" => format!("{part}:reserved"),
            "dead" => format!("{part}:dead:"),
            "done" => {
                assert!(inside.is_empty(), "done job {id} is still in {inside:?}");
                continue;
            }
            other => panic!("job {id} has unknown state {other}"),
        };
        assert_eq!(inside.len(), 1, "job {id} ({state}) is in {inside:?}");
        assert!(inside[0].starts_with(&want), "job {id} is {state} but in {}", inside[0]);
        *counted.entry(format!("{topic}:{state}")).or_default() += 1;
    }
    assert!(members.is_empty(), "ids without a record: {members:?}");
    let counts = total_counts(redis);
    let nonzero: HashMap<String, i64> = counts.into_iter().filter(|(_, n)| *n != 0).collect();
    assert_eq!(nonzero, counted, "counts hash vs structures");
}

async fn promote_all(q: &Queue) -> usize {
    let mut moved = 0;
    for p in q.partitions().all() {
        moved += q.timer().promote(p, 1000).await.unwrap().moved;
    }
    moved
}

#[tokio::test]
async fn push_and_get_round_trip() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let p = q.producer().push(job(&q, serde_json::json!({"topic": "t", "body": {"a": [1, 2]}, "delay_ms": 5000, "ttr_ms": 2000, "max_attempts": 3}))).await.unwrap();
    assert_eq!(p.state, State::Delayed);
    let j = q.producer().get(&p.id).await.unwrap();
    assert_eq!(j.body.get(), r#"{"a":[1,2]}"#);
    assert_eq!((j.ttr_ms, j.max_attempts, j.attempts), (2000, 3, 0));
    assert_eq!(j.run_at - j.created_at, 5000);
    assert!(matches!(q.producer().get("missing").await, Err(Error::NotFound(_))));
    assert_consistent(&redis);
}

#[tokio::test]
async fn promote_moves_only_due_jobs_and_reports_the_next() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    // A past run_at is ready at push; a 30 ms delay becomes due soon; a 10 minute one stays.
    for i in 0..10 {
        q.producer()
            .push(job(
                &q,
                serde_json::json!({"id": format!("past{i}"), "topic": "t", "body": i, "run_at": 1000 + i}),
            ))
            .await
            .unwrap();
        q.producer()
            .push(job(
                &q,
                serde_json::json!({"id": format!("later{i}"), "topic": "t", "body": i, "delay_ms": 600_000}),
            ))
            .await
            .unwrap();
    }
    for i in 0..5 {
        q.producer()
            .push(job(
                &q,
                serde_json::json!({"id": format!("soon{i}"), "topic": "u", "body": i, "delay_ms": 30}),
            ))
            .await
            .unwrap();
    }
    assert_consistent(&redis);
    let promoted = std::sync::atomic::AtomicUsize::new(0);
    eventually(Duration::from_secs(10), "the five soon jobs are promoted", || async {
        for b in q.partitions().all() {
            let p = q.timer().promote(b, 1000).await.unwrap();
            assert!(p.lateness_ms.iter().all(|l| *l >= 0));
            promoted.fetch_add(p.moved, std::sync::atomic::Ordering::Relaxed);
        }
        promoted.load(std::sync::atomic::Ordering::Relaxed) == 5
    })
    .await;
    assert_eq!(q.reservations().reserve(&["u".into()], 10).await.unwrap().len(), 5);
    // Nothing else is due: the later jobs stay, and each partition reports when its next job is due.
    for b in q.partitions().all() {
        let p = q.timer().promote(b, 1000).await.unwrap();
        assert_eq!(p.moved, 0);
        if let Some(next) = p.next_due {
            assert!(next > p.now + 500_000);
        }
    }
    assert_eq!(
        q.reservations().reserve(&["t".into()], 100).await.unwrap().len(),
        10,
        "the ten past run_at jobs only"
    );
    assert_consistent(&redis);
}

#[tokio::test]
async fn promotion_is_exactly_once_under_racing_promoters() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let n = 3000;
    let jobs: Vec<_> = (0..n)
        .map(|i| job(&q, serde_json::json!({"topic": "race", "body": i, "delay_ms": 200})))
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut moved = 0;
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let mut left = false;
                    for b in q.partitions().all() {
                        let p = q.timer().promote(b, 100).await.unwrap();
                        moved += p.moved;
                        left |= p.next_due.is_some();
                    }
                    if !left || std::time::Instant::now() > deadline {
                        return moved;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    let mut total = 0;
    for r in racers {
        total += r.await.unwrap();
    }
    assert_eq!(total, n, "every job promoted once in total");
    let mut seen = HashSet::new();
    loop {
        let got = q.reservations().reserve(&["race".into()], 100).await.unwrap();
        if got.is_empty() {
            break;
        }
        for r in got {
            assert!(seen.insert(r.id.clone()), "{} handed out twice", r.id);
        }
    }
    assert_eq!(seen.len(), n);
    assert_consistent(&redis);
}

/// Consumer `C1`'s hand-off channels (every partition's), read with a 5 s timeout.
fn handoffs_to_c1<'a>(conn: &'a mut redis::Connection, q: &Queue) -> redis::PubSub<'a> {
    let mut sub = conn.as_pubsub();
    sub.psubscribe(
        q.keys()
            .wake_pattern(&dq_core::store::keys::WakeKind::Handoff("C1".into())),
    )
    .unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sub
}

/// `C1` waits for topic `t`, with 2 slots and a least TTR of 60 s.
fn c1_waits_for_t() -> [Waiting; 1] {
    [Waiting {
        topic: "t".into(),
        consumer: "C1".into(),
        slots: 2,
        least_ttr_ms: 60_000,
    }]
}

/// The jobs of the next hand-off message on `sub`.
fn next_handoff(sub: &mut redis::PubSub<'_>) -> Vec<dq_core::Reservation> {
    let message: Vec<u8> = sub.get_message().unwrap().get_payload().unwrap();
    dq_core::reservations::handoff::decode_handoff(&message).unwrap()
}

/// A promotion given waiting dq-consumer workers reserves their topics' due jobs for them, up to their
/// slots, and publishes them on the worker's hand-off channel; the rest go to ready as before. The
/// handed jobs are reserved like any other: their receipts ack them.
#[tokio::test]
async fn promote_hands_due_jobs_to_waiting_workers_up_to_their_slots() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let mut conn = redis.conn();
    let mut sub = handoffs_to_c1(&mut conn, &q);
    for (id, topic) in [("t1", "t"), ("t2", "t"), ("t3", "t"), ("u1", "u")] {
        q.producer()
            .push(job(
                &q,
                serde_json::json!({"id": id, "topic": topic, "body": {"n": id}, "delay_ms": 20, "ttr_ms": 1000}),
            ))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p = q.timer().promote_for(0, 100, &c1_waits_for_t()).await.unwrap();
    assert_eq!((p.moved, p.handed.clone(), p.lateness_ms.len()), (4, vec![2], 4));
    let handed = next_handoff(&mut sub);
    assert_eq!(handed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["t1", "t2"]);
    for j in &handed {
        assert_eq!((j.topic.as_str(), j.attempt), ("t", 1));
        assert_eq!(j.body.get(), format!(r#"{{"n":"{}"}}"#, j.id));
        assert!(j.deadline >= p.now + 60_000, "the least TTR is kept");
        let rec = q.producer().get(&j.id).await.unwrap();
        assert_eq!((rec.state, rec.attempts), (State::Reserved, 1));
    }
    assert_eq!(
        q.producer().get("t3").await.unwrap().state,
        State::Ready,
        "past the worker's slots"
    );
    assert_eq!(
        q.producer().get("u1").await.unwrap().state,
        State::Ready,
        "nobody waits for u"
    );
    assert_consistent(&redis);
    for j in &handed {
        q.reservations().ack(&j.id, &j.receipt).await.unwrap();
    }
    let t = q.reservations().reserve(&["t".to_string()], 10).await.unwrap();
    assert_eq!(t.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["t3"]);
    assert_consistent(&redis);
}

/// A promotion given a waiting worker hands it the most urgent of its topic's due jobs, up to its slots,
/// as the ready queue would give them out (a job with a priority due after plain ones goes first), and
/// the others go to the ready queue whole, in its order.
#[tokio::test]
async fn a_handoff_takes_the_most_urgent_and_the_rest_go_to_ready_whole() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let mut conn = redis.conn();
    let mut sub = handoffs_to_c1(&mut conn, &q);
    // Due in this order: three plain jobs, then one more urgent than the default and one less.
    for (i, (id, priority)) in [
        ("a1", None),
        ("a2", None),
        ("a3", None),
        ("urgent", Some(5)),
        ("late", Some(2000)),
    ]
    .into_iter()
    .enumerate()
    {
        let mut j = serde_json::json!({"id": id, "topic": "t", "body": {"n": id}, "delay_ms": 20 + i, "ttr_ms": 1000});
        if let Some(p) = priority {
            j["priority"] = p.into();
        }
        q.producer().push(job(&q, j)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p = q.timer().promote_for(0, 100, &c1_waits_for_t()).await.unwrap();
    assert_eq!((p.moved, p.handed.clone()), (5, vec![2]));
    let handed = next_handoff(&mut sub);
    assert_eq!(
        handed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["urgent", "a1"],
        "by priority, then due time"
    );
    for j in &handed {
        assert_eq!(j.body.get(), format!(r#"{{"n":"{}"}}"#, j.id));
        assert_eq!(q.producer().get(&j.id).await.unwrap().state, State::Reserved);
    }
    assert_consistent(&redis);
    let rest = q.reservations().reserve(&["t".to_string()], 10).await.unwrap();
    assert_eq!(
        rest.iter()
            .map(|j| (j.id.as_str(), j.body.get(), j.attempt))
            .collect::<Vec<_>>(),
        [
            ("a2", r#"{"n":"a2"}"#, 1),
            ("a3", r#"{"n":"a3"}"#, 1),
            ("late", r#"{"n":"late"}"#, 1)
        ],
        "the others are ready, whole, in the queue's order"
    );
    assert_consistent(&redis);
}

/// One promotion of more jobs than one ZADD is given at once (promote.lua adds in slices of 1000) moves
/// every one of them, and the counts follow.
#[tokio::test]
async fn a_promotion_larger_than_one_slice_moves_every_job() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let jobs: Vec<_> = (0..2500)
        .map(|i| job(&q, serde_json::json!({"topic": "big", "body": i, "delay_ms": 20})))
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p = q.timer().promote(0, 5000).await.unwrap();
    assert_eq!((p.moved, p.next_due), (2500, None));
    assert_consistent(&redis);
    let mut got = 0;
    loop {
        let r = q.reservations().reserve(&["big".to_string()], 100).await.unwrap();
        if r.is_empty() {
            break;
        }
        got += r.len();
    }
    assert_eq!(got, 2500);
    assert_consistent(&redis);
}

/// Whatever a call moves (nothing, the one due job, one of two due under a limit of one, three), it tells
/// the earliest due time left in the delay set, or none when the set is empty; every moved job is ready.
#[tokio::test]
async fn every_promotion_tells_the_next_due_time_left() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let push = |id: &str, delay_ms: u64| {
        q.producer().push(job(
            &q,
            serde_json::json!({"id": id, "topic": "n", "body": 1, "delay_ms": delay_ms}),
        ))
    };
    let promote = |limit: u32| q.timer().promote(0, limit);
    let p = promote(1000).await.unwrap();
    assert_eq!((p.moved, p.next_due), (0, None));
    let far = push("far", 600_000).await.unwrap().run_at;
    push("soon", 20).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p = promote(1000).await.unwrap();
    assert_eq!((p.moved, p.next_due), (1, Some(far)));
    push("a", 20).await.unwrap();
    let b = push("b", 30).await.unwrap().run_at;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p = promote(1).await.unwrap();
    assert_eq!((p.moved, p.next_due), (1, Some(b)), "the second due job is next");
    let p = promote(1000).await.unwrap();
    assert_eq!((p.moved, p.next_due), (1, Some(far)));
    for id in ["c", "d", "e"] {
        push(id, 20).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p = promote(1000).await.unwrap();
    assert_eq!((p.moved, p.next_due), (3, Some(far)));
    let p = promote(1000).await.unwrap();
    assert_eq!((p.moved, p.next_due), (0, Some(far)));
    assert_consistent(&redis);
    let ready = q.reservations().reserve(&["n".to_string()], 100).await.unwrap();
    let mut ids: Vec<_> = ready.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c", "d", "e", "soon"]);
}

/// A hand-off that reaches nobody (the consumer is gone) leaves its jobs in the ready queue, in the same
/// call: nothing waits for a reservation to end.
#[tokio::test]
async fn a_handoff_nobody_hears_goes_to_the_ready_queue() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    q.producer()
        .push(job(
            &q,
            serde_json::json!({"id": "a", "topic": "t", "body": 1, "delay_ms": 20}),
        ))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting = [Waiting {
        topic: "t".into(),
        consumer: "gone".into(),
        slots: 5,
        least_ttr_ms: 1000,
    }];
    let p = q.timer().promote_for(0, 100, &waiting).await.unwrap();
    assert_eq!((p.moved, p.handed.clone()), (1, vec![0]));
    let a = q.producer().get("a").await.unwrap();
    assert_eq!((a.state, a.attempts), (State::Ready, 0));
    assert_consistent(&redis);
}

#[tokio::test]
async fn expiry_returns_the_job_and_fences_the_old_receipt() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    q.producer()
        .push(job(
            &q,
            serde_json::json!({"id": "e", "topic": "t", "body": 1, "ttr_ms": 50}),
        ))
        .await
        .unwrap();
    let first = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    assert_eq!(first.attempt, 1);
    let p = q.partitions().of_id("e");
    eventually(Duration::from_secs(10), "the reservation expires", || async {
        q.timer().expire(p, 100).await.unwrap().to_ready == 1
    })
    .await;
    assert_consistent(&redis);
    let j = q.producer().get("e").await.unwrap();
    assert_eq!(j.state, State::Ready);
    assert_eq!(j.last_error.as_deref(), Some("reservation expired (ttr)"));
    let second = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    assert_eq!(second.attempt, 2, "the expired reservation counted as a delivery");
    for r in [
        q.reservations().ack("e", &first.receipt).await,
        q.reservations()
            .nack("e", &first.receipt, None, None, None)
            .await
            .map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::StaleReceipt)), "{r:?}");
    }
    assert!(matches!(
        q.reservations().touch("e", &first.receipt, None).await,
        Err(Error::StaleReceipt)
    ));
    q.reservations().ack("e", &second.receipt).await.unwrap();
    assert_eq!(q.producer().get("e").await.unwrap().state, State::Done);
    assert_consistent(&redis);
}

#[tokio::test]
async fn expiry_on_the_last_attempt_is_dead() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    q.producer()
        .push(job(
            &q,
            serde_json::json!({"id": "d", "topic": "t", "body": 1, "ttr_ms": 20, "max_attempts": 1}),
        ))
        .await
        .unwrap();
    q.reservations().reserve(&["t".into()], 1).await.unwrap();
    let p = q.partitions().of_id("d");
    eventually(Duration::from_secs(10), "the reservation expires", || async {
        q.timer().expire(p, 100).await.unwrap().to_dead == 1
    })
    .await;
    assert_eq!(q.producer().get("d").await.unwrap().state, State::Dead);
    assert_consistent(&redis);
}

#[tokio::test]
async fn nack_uses_the_given_backoff_list() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    q.producer()
        .push(job(
            &q,
            serde_json::json!({"id": "b", "topic": "t", "body": 1, "max_attempts": 0}),
        ))
        .await
        .unwrap();
    let backoff = [100_000u64, 200_000];
    let mut delays = Vec::new();
    for _ in 0..3 {
        let r = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
        let (state, run_at) = q
            .reservations()
            .nack("b", &r.receipt, None, Some("x"), Some(&backoff))
            .await
            .unwrap();
        assert_eq!(state, State::Delayed);
        delays.push(run_at - (r.deadline - 30_000));
        q.producer().reschedule("b", Some(Due::Delay(0)), None).await.unwrap();
    }
    // The i-th delay after the i-th failure; the last repeats. (Reserve-to-nack time is added on top.)
    for (d, want) in delays.iter().zip([100_000, 200_000, 200_000]) {
        assert!((*d - want).abs() < 5_000, "{delays:?}");
    }
    assert_consistent(&redis);
}

#[tokio::test]
async fn scripts_reload_after_script_flush() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    q.producer()
        .push(job(&q, serde_json::json!({"topic": "t", "body": 1})))
        .await
        .unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut redis.conn()).unwrap();
    q.producer()
        .push(job(&q, serde_json::json!({"topic": "t", "body": 2})))
        .await
        .unwrap();
    assert_eq!(q.reservations().reserve(&["t".into()], 10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn delete_and_reschedule_keep_counts_right() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let ids: Vec<String> = q
        .producer()
        .push_many(
            (0..20)
                .map(|i| job(&q, serde_json::json!({"topic": "c", "body": i, "delay_ms": 60_000})))
                .collect(),
        )
        .await
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    for id in &ids[..5] {
        q.producer().reschedule(id, Some(Due::Delay(0)), None).await.unwrap();
    }
    let got = q.reservations().reserve(&["c".into()], 3).await.unwrap();
    q.reservations().ack(&got[0].id, &got[0].receipt).await.unwrap();
    q.reservations()
        .nack(&got[1].id, &got[1].receipt, Some(0), None, None)
        .await
        .unwrap();
    for id in &ids[10..15] {
        q.producer().cancel(id).await.unwrap();
    }
    q.producer().cancel(&got[2].id).await.unwrap();
    assert_consistent(&redis);
    assert_eq!(promote_all(&q).await, 0);
}

/// The key `<partition prefix>:<rest>` in the partition of `id`.
/// Writes job `old` as dq wrote records before it packed them (a hash of `fields`), in `structure` with
/// score 1000, counted under `count` (`<topic>:<state>`).
fn plant_hash_record(c: &mut redis::Connection, q: &Queue, fields: &[(&str, &str)], structure: &str, count: &str) {
    let _: () = redis::cmd("HSET")
        .arg(key(q, "old", "job:old"))
        .arg(fields)
        .query(c)
        .unwrap();
    enter(c, q, "old", structure, 1000, count);
}

/// Puts a planted record's `id` in its partition's `structure` at `score`, and counts it under `count`
/// (`<topic>:<state>`), as the scripts would have.
fn enter(c: &mut redis::Connection, q: &Queue, id: &str, structure: &str, score: i64, count: &str) {
    let _: () = redis::cmd("ZADD")
        .arg(key(q, id, structure))
        .arg(score)
        .arg(id)
        .query(c)
        .unwrap();
    let _: () = redis::cmd("HINCRBY")
        .arg(key(q, id, "counts"))
        .arg(count)
        .arg(1)
        .query(c)
        .unwrap();
}

fn key(q: &Queue, id: &str, rest: &str) -> String {
    format!("{}:{rest}", q.partition_keys(q.partitions().of_id(id)).prefix())
}

/// Every partition's counts, added up.
fn total_counts(redis: &RedisServer) -> HashMap<String, i64> {
    let mut c = redis.conn();
    let mut counts: HashMap<String, i64> = HashMap::new();
    for key in redis::cmd("KEYS")
        .arg("dq:{*}:counts")
        .query::<Vec<String>>(&mut c)
        .unwrap()
    {
        let part: HashMap<String, i64> = redis::cmd("HGETALL").arg(&key).query(&mut c).unwrap();
        for (field, n) in part {
            *counts.entry(field).or_default() += n;
        }
    }
    counts
}

#[tokio::test]
async fn the_partition_count_is_fixed_at_creation_and_checked() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    assert_eq!(q.partitions().count(), 4);
    // Unset: the installation's count is adopted.
    let mut unset = settings(&redis);
    unset.redis.partitions = None;
    assert_eq!(Queue::connect(&unset).await.unwrap().partitions().count(), 4);
    let mut other = settings(&redis);
    other.redis.partitions = Some(8);
    let err = Queue::connect(&other).await.unwrap_err();
    assert!(err.to_string().contains("redis.partitions"), "{err}");
    // A new installation without a setting gets the default.
    let fresh = RedisServer::start();
    let mut s = settings(&fresh);
    s.redis.partitions = None;
    assert_eq!(Queue::connect(&s).await.unwrap().partitions().count(), 256);
}

#[tokio::test]
async fn key_partitions_are_fixed_at_creation_and_an_older_installation_keeps_its_placement() {
    let layout = |redis: &RedisServer| -> Vec<Option<u32>> {
        redis::cmd("HMGET")
            .arg("{dq}:layout")
            .arg("partitions")
            .arg("key_partitions")
            .query(&mut redis.conn())
            .unwrap()
    };
    // New, without settings: 256 partitions, a topic's keys over 16 of them.
    let fresh = RedisServer::start();
    let mut s = settings(&fresh);
    s.redis.partitions = None;
    let q = Queue::connect(&s).await.unwrap();
    assert_eq!((q.partitions().count(), q.partitions().key_partitions()), (256, 16));
    assert_eq!(layout(&fresh), [Some(256), Some(16)]);
    // Set otherwise later: refused, naming the setting; unset or equal: adopted.
    s.redis.key_partitions = Some(32);
    let err = Queue::connect(&s).await.unwrap_err().to_string();
    assert!(
        err.contains("redis.key_partitions is 32") && err.contains("16 key partitions"),
        "{err}"
    );
    s.redis.key_partitions = Some(16);
    assert_eq!(Queue::connect(&s).await.unwrap().partitions().key_partitions(), 16);

    // Created with a setting.
    let chosen = RedisServer::start();
    let mut s = settings(&chosen);
    s.redis.key_partitions = Some(2);
    assert_eq!(Queue::connect(&s).await.unwrap().partitions().key_partitions(), 2);
    s.redis.key_partitions = None;
    assert_eq!(Queue::connect(&s).await.unwrap().partitions().key_partitions(), 2);
    assert_eq!(layout(&chosen), [Some(4), Some(2)]);

    // More key partitions than partitions for a new installation: refused, nothing written.
    let bad = RedisServer::start();
    let mut s = settings(&bad);
    s.redis.partitions = None;
    s.redis.key_partitions = Some(300);
    let err = Queue::connect(&s).await.unwrap_err().to_string();
    assert!(err.contains("redis.key_partitions is 300"), "{err}");
    assert_eq!(layout(&bad), [None, None]);

    // An installation from before key partitions (`partitions` alone): its keys stay where they were,
    // a key partition per partition, and that is stored from then on.
    let older = RedisServer::start();
    let _: () = redis::cmd("HSET")
        .arg("{dq}:layout")
        .arg("partitions")
        .arg(64)
        .query(&mut older.conn())
        .unwrap();
    let mut s = settings(&older);
    s.redis.partitions = None;
    let q = Queue::connect(&s).await.unwrap();
    assert_eq!(q.partitions().key_partitions(), 64);
    assert_eq!(layout(&older), [Some(64), Some(64)]);
    assert_eq!(
        q.partitions().of_key("t", "customer-7") as u32,
        dq_core::store::partition::partition_of("t:customer-7", 64)
    );
}

#[tokio::test]
async fn the_old_shard_layout_is_refused_with_the_command_that_converts_it() {
    let redis = RedisServer::start();
    let _: () = redis::cmd("HSET")
        .arg("dq:meta")
        .arg("buckets")
        .arg(16)
        .query(&mut redis.conn())
        .unwrap();
    let err = Queue::connect(&settings(&redis)).await.unwrap_err().to_string();
    assert!(err.contains("dq-checker migrate"), "{err}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis.conn()).unwrap();
    assert_eq!(keys, ["dq:meta"], "nothing written");
}

#[tokio::test]
async fn requeue_and_purge_keep_counts_right_even_for_ids_that_lost_their_record() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    for i in 0..4 {
        q.producer()
            .push(job(
                &q,
                serde_json::json!({"id": format!("d{i}"), "topic": "t", "body": i, "max_attempts": 1}),
            ))
            .await
            .unwrap();
        let r = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
        assert_eq!(
            q.reservations()
                .nack(&r.id, &r.receipt, None, None, None)
                .await
                .unwrap()
                .0,
            State::Dead
        );
    }
    assert_consistent(&redis);
    // Damage by hand: a dead id whose record is gone.
    let _: () = redis::cmd("DEL")
        .arg(key(&q, "d0", "job:d0"))
        .query(&mut redis.conn())
        .unwrap();
    let _: () = redis::cmd("HINCRBY")
        .arg(key(&q, "d0", "counts"))
        .arg("t:dead")
        .arg(0)
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(
        q.admin()
            .requeue_dead("t", Some(&["d0".into(), "d1".into()]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(q.admin().delete_dead("t", Some(&["d2".into()])).await.unwrap(), 1);
    assert_eq!(q.admin().requeue_dead("t", None).await.unwrap(), 1, "d3, the last one");
    let counts = total_counts(&redis);
    assert_eq!(counts.get("t:dead"), Some(&0));
    assert_eq!(counts.get("t:ready"), Some(&2));
    assert_consistent(&redis);
}

#[tokio::test]
async fn the_audit_repairs_every_kind_of_damage_and_leaves_healthy_jobs_alone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    for (id, extra) in [
        ("ready-lost", serde_json::json!({})),
        ("delayed-lost", serde_json::json!({"delay_ms": 600_000})),
        ("healthy-ready", serde_json::json!({})),
        ("healthy-delayed", serde_json::json!({"delay_ms": 600_000})),
    ] {
        let mut j = serde_json::json!({"id": id, "topic": "a", "body": 1});
        j.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        q.producer().push(job(&q, j)).await.unwrap();
    }
    q.producer()
        .push(job(&q, serde_json::json!({"id": "done", "topic": "a", "body": 1})))
        .await
        .unwrap();
    let got = q.reservations().reserve(&["a".into()], 10).await.unwrap();
    for r in &got {
        if r.id == "done" {
            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
        } else {
            q.reservations().release(&r.id, &r.receipt).await.unwrap();
        }
    }
    assert_consistent(&redis);
    assert_eq!(
        q.checker().audit().await.unwrap().orphan_records + q.checker().audit().await.unwrap().dangling_ids,
        0,
        "nothing to repair"
    );

    // Damage by hand, of every kind.
    let mut c = redis.conn();
    let bucket = key(&q, "delayed-lost", "delayed");
    let _: () = redis::cmd("ZREM")
        .arg(key(&q, "ready-lost", "ready:a"))
        .arg("ready-lost")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZREM")
        .arg(&bucket)
        .arg("delayed-lost")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(key(&q, "healthy-ready", "ready:a"))
        .arg(1)
        .arg("ghost-ready")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(key(&q, "healthy-ready", "delayed"))
        .arg(1)
        .arg("ghost-delayed")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(key(&q, "healthy-ready", "dead:a"))
        .arg(1)
        .arg("ghost-dead")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(key(&q, "healthy-ready", "reserved"))
        .arg(1)
        .arg("ghost-reserved")
        .query(&mut c)
        .unwrap();

    let report = q.checker().audit().await.unwrap();
    assert_eq!(report.orphan_records, 2, "{report:?}");
    assert_eq!(report.dangling_ids, 4, "{report:?}");
    assert!(report.records >= 5 && report.ids >= 4, "{report:?}");
    // The counts hash still says "delayed" for the job that was delayed; the audit moved it and its count.
    assert_consistent(&redis);
    for id in ["ready-lost", "delayed-lost"] {
        let j = q.producer().get(id).await.unwrap();
        assert_eq!(j.state, State::Ready, "{id}");
        assert_eq!(j.last_error.as_deref(), Some("restored by the consistency audit"));
    }
    assert_eq!(q.producer().get("healthy-delayed").await.unwrap().state, State::Delayed);
    assert_eq!(q.producer().get("done").await.unwrap().state, State::Done);
    assert_eq!(
        q.checker().audit().await.unwrap(),
        dq_core::checker::audit::AuditReport {
            records: 5,
            ids: 4,
            ..Default::default()
        }
    );
}

/// Concurrent pushes share script calls (group commit), yet each caller gets its own answer: every job is
/// stored once with its own id, and of several pushes racing on one producer id exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_each_get_their_own_answer() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..400 {
        let q = q.clone();
        let req = match i % 4 {
            // Every fourth push races for one of ten ids: ten winners, the rest conflicts.
            0 => serde_json::json!({"topic": "race", "body": i, "id": format!("same-{}", i % 40 / 4)}),
            1 => serde_json::json!({"topic": "now", "body": i}),
            _ => serde_json::json!({"topic": "later", "body": i, "delay_ms": 60_000 + i}),
        };
        let new = job(&q, req);
        tasks.push(tokio::spawn(async move { (i, q.producer().push(new).await) }));
    }
    let (mut stored, mut conflicts, mut ids) = (0, 0, HashSet::new());
    for t in tasks {
        let (i, r) = t.await.unwrap();
        match r {
            Ok(p) => {
                stored += 1;
                assert!(ids.insert(p.id.clone()), "id {} answered twice", p.id);
                let want = if i % 4 < 2 { State::Ready } else { State::Delayed };
                assert_eq!(p.state, want, "push {i}");
                let got = q.producer().get(&p.id).await.unwrap();
                assert_eq!(got.body.get(), i.to_string(), "push {i} answered with another job's id");
            }
            Err(Error::Conflict(_)) => {
                assert_eq!(i % 4, 0, "push {i} had no reason to conflict");
                conflicts += 1;
            }
            Err(e) => panic!("push {i}: {e}"),
        }
    }
    assert_eq!((stored, conflicts), (310, 90));
    assert_consistent(&redis);
}

/// Script calls Redis ran so far (`EVALSHA` in `INFO commandstats`).
fn evalsha_calls(redis: &RedisServer) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut redis.conn()).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|l| l.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// On a single Redis every partition is on the one node, so a batch whose jobs spread over the partitions
/// (producers' ids, flow keys) is one `push.lua` call, not one per partition; each job still lands in
/// its own partition, counted in that partition's counts hash, and a job due at once wakes that
/// partition's reservers.
#[tokio::test]
async fn a_batch_spread_over_partitions_is_one_call_on_a_single_redis() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.redis.partitions = Some(256);
    let q = Queue::connect(&s).await.unwrap();
    let mut c = redis.conn();
    let mut listener = redis.conn();
    let mut wake = listener.as_pubsub();
    wake.psubscribe("dq:{*}:wake:ready").unwrap();
    wake.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // 150 ids of the producer's, 50 with a flow key each: about 150 partitions; one job due at once.
    let mut jobs: Vec<_> = (0..150)
        .map(|i| {
            job(
                &q,
                json!({"id": format!("order-{i}"), "topic": "t", "body": i, "delay_ms": 60_000}),
            )
        })
        .collect();
    jobs.extend((0..50).map(|i| {
        job(
            &q,
            json!({"topic": "t", "body": i, "delay_ms": 60_000, "flow_key": format!("k{i}")}),
        )
    }));
    jobs.push(job(&q, json!({"id": "now", "topic": "u", "body": 0})));
    let spread: HashSet<u16> = (0..150).map(|i| q.partitions().of_id(&format!("order-{i}"))).collect();
    assert!(spread.len() > 50, "the ids spread: {}", spread.len());
    let before = evalsha_calls(&redis);
    let pushed = q.producer().push_many(jobs).await;
    assert_eq!(evalsha_calls(&redis) - before, 1, "one call");
    for (i, r) in pushed.iter().enumerate() {
        let p = r.as_ref().unwrap_or_else(|e| panic!("job {i}: {e}"));
        // Each in its own partition's delay set (or ready queue), and counted there.
        let (structure, field) = if p.id == "now" {
            ("ready:u", "u:ready")
        } else {
            ("delayed", "t:delayed")
        };
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key(&q, &p.id, structure))
            .arg(&p.id)
            .query(&mut c)
            .unwrap();
        assert!(score.is_some(), "{} is in its partition's {structure}", p.id);
        let counted: i64 = redis::cmd("HGET")
            .arg(key(&q, &p.id, "counts"))
            .arg(field)
            .query(&mut c)
            .unwrap();
        assert!(counted >= 1, "{} is counted in its partition", p.id);
    }
    assert_consistent(&redis);
    let counts = total_counts(&redis);
    assert_eq!((counts["t:delayed"], counts["u:ready"]), (200, 1));
    // The job due at once woke its own partition's reservers.
    let msg = wake.get_message().unwrap();
    assert_eq!(
        msg.get_channel_name(),
        format!("{}:wake:ready", key(&q, "now", "").trim_end_matches(':'))
    );
    assert_eq!(msg.get_payload::<String>().unwrap(), "u");
}

/// Acks of jobs in many partitions, sent at the same moment, share `ack.lua` calls on a single Redis (one
/// per group, not one per partition), and each job is done in its own partition: out of its reserved
/// set, counted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_spread_over_partitions_share_calls_on_a_single_redis() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.redis.partitions = Some(256);
    let q = Queue::connect(&s).await.unwrap();
    let jobs = (0..120)
        .map(|i| job(&q, json!({"id": format!("a-{i}"), "topic": "t", "body": i})))
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    let mut held = Vec::new();
    while held.len() < 120 {
        let got = q.reservations().reserve(&["t".to_string()], 120).await.unwrap();
        assert!(!got.is_empty(), "all 120 are ready");
        held.extend(got);
    }
    let touched: HashSet<u16> = held.iter().map(|r| q.partitions().of_id(&r.id)).collect();
    assert!(touched.len() > 60, "the ids spread: {}", touched.len());
    let before = evalsha_calls(&redis);
    let acks = held.iter().map(|r| q.reservations().ack(&r.id, &r.receipt));
    for r in futures_util::future::join_all(acks).await {
        r.unwrap();
    }
    let calls = evalsha_calls(&redis) - before;
    assert!(
        calls * 4 < touched.len() as u64,
        "{calls} ack calls for {} partitions",
        touched.len()
    );
    for r in &held {
        assert_eq!(q.producer().get(&r.id).await.unwrap().state, State::Done, "{}", r.id);
    }
    assert_consistent(&redis);
    assert_eq!(total_counts(&redis).get("t:reserved").copied().unwrap_or(0), 0);
}

/// Concurrent batches of producer-given ids that spread thin over the partitions share each partition's
/// `push.lua` call (group commit), yet each entry gets its own answer: an id two batches both carry is
/// stored once, and the other batch's entry is a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_of_spread_ids_share_calls() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.redis.partitions = Some(64);
    let q = Queue::connect(&s).await.unwrap();
    let parts = dq_core::store::partition::Partitions::new(64);
    // 20 batches of 40 ids (1 to 3 a partition, so each may be grouped); batch k also carries "shared".
    let batches: Vec<Vec<String>> = (0..20)
        .map(|k| {
            let mut ids: Vec<String> = (0..39).map(|i| format!("b{k}-{i}")).collect();
            ids.push("shared".into());
            ids
        })
        .collect();
    let alone: usize = batches
        .iter()
        .map(|ids| ids.iter().map(|id| parts.of_id(id)).collect::<HashSet<_>>().len())
        .sum();
    let before = evalsha_calls(&redis);
    let pushes = batches.iter().map(|ids| {
        let jobs = ids
            .iter()
            .map(|id| job(&q, serde_json::json!({"id": id, "topic": "t", "body": id})))
            .collect();
        q.producer().push_many(jobs)
    });
    let answers = futures_util::future::join_all(pushes).await;
    let calls = evalsha_calls(&redis) - before;
    assert!(
        calls * 2 < alone as u64,
        "{calls} calls, {alone} if each batch went alone"
    );
    let mut shared_stored = 0;
    for (ids, results) in batches.iter().zip(answers) {
        for (id, r) in ids.iter().zip(results) {
            match r {
                Ok(p) if id == "shared" => {
                    assert_eq!(p.id, "shared");
                    shared_stored += 1;
                }
                Err(Error::Conflict(_)) if id == "shared" => {}
                Ok(p) => assert_eq!(&p.id, id),
                Err(e) => panic!("{id}: {e}"),
            }
        }
    }
    assert_eq!(shared_stored, 1, "the id both batches carry is stored once");
    for ids in &batches {
        for id in ids {
            assert_eq!(q.producer().get(id).await.unwrap().body.get(), format!("\"{id}\""));
        }
    }
    assert_consistent(&redis);
}

/// Concurrent acks share script calls (group commit), yet each gets its own answer: the right receipt
/// acks, a stale one or a second ack of the same job is refused, a job that is gone is not found, and the
/// counts stay right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_each_get_their_own_answer() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let jobs: Vec<_> = (0..300)
        .map(|i| job(&q, serde_json::json!({"topic": "t", "body": i})))
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    let mut held = Vec::new();
    while held.len() < 300 {
        held.extend(q.reservations().reserve(&["t".into()], 100).await.unwrap());
    }
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut redis.conn()).unwrap();
    let mut tasks = Vec::new();
    for (i, r) in held.iter().enumerate() {
        let q = q.clone();
        let (id, receipt) = (r.id.clone(), r.receipt.clone());
        tasks.push(tokio::spawn(async move {
            // Every third job: a wrong receipt first, then its own, then its own again.
            let mut answers = Vec::new();
            if i % 3 == 0 {
                answers.push(q.reservations().ack(&id, "nonce.1").await.map_err(|e| e.to_string()));
            }
            answers.push(q.reservations().ack(&id, &receipt).await.map_err(|e| e.to_string()));
            if i % 3 == 0 {
                answers.push(q.reservations().ack(&id, &receipt).await.map_err(|e| e.to_string()));
            }
            (i, answers)
        }));
    }
    let stale = Error::StaleReceipt.to_string();
    for t in tasks {
        let (i, answers) = t.await.unwrap();
        if i % 3 == 0 {
            assert_eq!(answers, [Err(stale.clone()), Ok(()), Err(stale.clone())], "job {i}");
        } else {
            assert_eq!(answers, [Ok(())], "job {i}");
        }
    }
    let calls = evalsha_calls(&redis);
    assert!(calls < 500, "500 acks shared calls: {calls} calls");
    for r in &held {
        assert_eq!(q.producer().get(&r.id).await.unwrap().state, State::Done);
    }
    assert!(matches!(
        q.reservations().ack("gone", "x.1").await,
        Err(Error::NotFound(_))
    ));
    // The same ack twice in one call: side by side, so they likely share one.
    q.producer()
        .push(job(&q, serde_json::json!({"topic": "u", "body": 1, "id": "twice"})))
        .await
        .unwrap();
    let r = q.reservations().reserve(&["u".into()], 1).await.unwrap().remove(0);
    let (a, b) = tokio::join!(
        q.reservations().ack("twice", &r.receipt),
        q.reservations().ack("twice", &r.receipt)
    );
    let mut outcomes = [a.is_ok(), b.is_ok()];
    outcomes.sort();
    assert_eq!(
        outcomes,
        [false, true],
        "one ack takes effect, the other finds the job done"
    );
    assert_consistent(&redis);
}

/// A record is one packed string (record.lua): every field survives each move the scripts make, and the
/// body comes back byte for byte, whatever its size or content.
#[tokio::test]
async fn the_record_keeps_every_field_and_the_exact_body_through_every_move() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let bodies = [
        "1".to_string(),
        format!("\"{}\"", "x".repeat(62)),
        format!("\"{}\"", "x".repeat(63)),
        r#"{ "name" : "Zoë 😀", "esc": "a\"b\\c\u0000\n", "n": [1, 2.5e3, null, true] }"#.to_string(),
        format!("\"{}\"", "y".repeat(60 * 1024)),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let text = format!(r#"{{"id":"b{i}","topic":"t","body":{body},"ttr_ms":30000,"max_attempts":2}}"#);
        q.producer()
            .push(q.producer().validate(serde_json::from_str(&text).unwrap()).unwrap())
            .await
            .unwrap();
        assert_eq!(q.producer().get(&format!("b{i}")).await.unwrap().body.get(), body);
    }
    let mut held = HashMap::new();
    for r in q.reservations().reserve(&["t".into()], 10).await.unwrap() {
        let i: usize = r.id[1..].parse().unwrap();
        assert_eq!(r.body.get(), bodies[i]);
        assert_eq!(r.attempt, 1);
        held.insert(r.id.clone(), r);
    }
    assert_eq!(held.len(), bodies.len());
    assert_consistent(&redis);

    let fresh = q.producer().get("b3").await.unwrap();
    assert_eq!(
        (fresh.state, fresh.attempts, fresh.max_attempts, fresh.ttr_ms),
        (State::Reserved, 1, 2, 30000)
    );
    assert_eq!(fresh.deadline, Some(held["b3"].deadline));
    let unchanged = |j: &dq_core::Job| {
        assert_eq!(j.body.get(), bodies[3]);
        assert_eq!(
            (j.topic.as_str(), j.created_at, j.ttr_ms),
            ("t", fresh.created_at, 30000)
        );
    };
    let deadline = q
        .reservations()
        .touch("b3", &held["b3"].receipt, Some(90_000))
        .await
        .unwrap();
    assert_eq!(q.producer().get("b3").await.unwrap().deadline, Some(deadline));

    q.reservations()
        .nack("b3", &held["b3"].receipt, Some(0), Some("boom"), None)
        .await
        .unwrap();
    let j = q.producer().get("b3").await.unwrap();
    assert_eq!((j.state, j.attempts, j.deadline), (State::Ready, 1, None));
    assert_eq!(j.last_error.as_deref(), Some("boom"));
    unchanged(&j);

    let r = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    assert_eq!((r.id.as_str(), r.attempt), ("b3", 2));
    q.reservations().release("b3", &r.receipt).await.unwrap();
    let j = q.producer().get("b3").await.unwrap();
    assert_eq!(
        (j.state, j.attempts, j.deadline),
        (State::Ready, 1, None),
        "a release does not count"
    );

    let r = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    assert_eq!(
        q.reservations()
            .nack("b3", &r.receipt, None, None, None)
            .await
            .unwrap()
            .0,
        State::Dead
    );
    let j = q.producer().get("b3").await.unwrap();
    assert_eq!((j.state, j.attempts), (State::Dead, 2));
    assert_eq!(
        j.last_error.as_deref(),
        Some("boom"),
        "a nack without an error keeps the last one"
    );
    unchanged(&j);

    assert_eq!(q.admin().requeue_dead("t", Some(&["b3".into()])).await.unwrap(), 1);
    let j = q.producer().get("b3").await.unwrap();
    assert_eq!((j.state, j.attempts), (State::Ready, 0));
    unchanged(&j);
    let r = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    q.reservations().ack("b3", &r.receipt).await.unwrap();
    let j = q.producer().get("b3").await.unwrap();
    assert_eq!((j.state, j.attempts, j.deadline), (State::Done, 1, None));
    unchanged(&j);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key(&q, "b3", "job:b3"))
        .query(&mut redis.conn())
        .unwrap();
    assert!(ttl > 0, "a done record expires after the retention period");

    q.reservations().ack("b4", &held["b4"].receipt).await.unwrap();
    assert_eq!(q.producer().get("b4").await.unwrap().body.get(), bodies[4]);
    assert_consistent(&redis);
}

/// promote.lua reads a record's topic from its first bytes when it only moves the job to its ready
/// queue (`rec_topic`), and unpacks the records that function leaves alone: topics of every string
/// length, records of every field count, a job with a priority, traced jobs (and one written as before,
/// with its trace context in the array) and a record written as a hash all reach their ready queue whole.
#[tokio::test]
async fn promotion_moves_records_of_every_shape_whole() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    // A one-byte string header up to 31 bytes, a two-byte one from 32 on.
    let topics = ["a".to_string(), "b".repeat(31), "c".repeat(32), "d".repeat(128)];
    for (i, t) in topics.iter().enumerate() {
        q.producer()
            .push(job(
                &q,
                serde_json::json!({"id": format!("t{i}"), "topic": t, "body": i, "delay_ms": 30}),
            ))
            .await
            .unwrap();
    }
    // A retry age and a backoff list: 14 fields.
    let full = serde_json::json!({"id": "full", "topic": "a", "body": "x", "delay_ms": 30, "max_age_ms": 600_000, "backoff_ms": [5, 10]});
    q.producer().push(job(&q, full)).await.unwrap();
    // A priority: 15 fields, and its ready queue scores it by the priority, then the due time.
    let prio = job(
        &q,
        serde_json::json!({"id": "prio", "topic": "a", "body": 1, "delay_ms": 30, "priority": 7}),
    );
    q.producer().push(prio).await.unwrap();
    // A record written as a hash, as dq wrote them before it packed them.
    let fields = [
        ("t", "a"),
        ("b", "2"),
        ("r", "1000"),
        ("ttr", "30000"),
        ("m", "3"),
        ("c", "900"),
        ("s", "delayed"),
    ];
    plant_hash_record(&mut c, &q, &fields, "delayed", "a:delayed");
    // A trace context follows the array, which stays as short as an untraced job's (its topic is read
    // from the first bytes); with a priority too, the array is 15 fields long and is unpacked.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (id, more) in [
        ("traced", serde_json::json!({})),
        ("traced-prio", serde_json::json!({"priority": 9})),
    ] {
        let mut push = serde_json::json!({"id": id, "topic": "a", "body": 3, "delay_ms": 30, "traceparent": tp});
        push.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        q.producer().push(job(&q, push)).await.unwrap();
    }
    let state: Vec<u8> = redis::cmd("GETRANGE")
        .arg(key(&q, "traced", "job:traced"))
        .arg(0)
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        state,
        [0x97, 1 + 8],
        "a fixarray of 7, state delayed, a trace context after it"
    );
    // As records were written before the trace context left the array: field 19 of 19 (a three-byte
    // header, an array16).
    let _: () = redis::cmd("EVAL")
        .arg(
            "local f = {} for i = 8, 18 do f[i] = false end \
             redis.call('SET', KEYS[1], cmsgpack.pack({1, 'a', '4', tonumber(ARGV[1]), 30000, 3, 60, f[8], f[9], \
             f[10], f[11], f[12], f[13], f[14], f[15], f[16], f[17], f[18], ARGV[2]}))",
        )
        .arg(1)
        .arg(key(&q, "traced-before", "job:traced-before"))
        .arg(1_700_000_000_000_i64)
        .arg(tp)
        .query(&mut c)
        .unwrap();
    enter(&mut c, &q, "traced-before", "delayed", 1_700_000_000_000, "a:delayed");
    assert_consistent(&redis);

    let moved = std::sync::atomic::AtomicUsize::new(0);
    eventually(Duration::from_secs(10), "all ten are promoted", || async {
        moved.fetch_add(promote_all(&q).await, std::sync::atomic::Ordering::Relaxed);
        moved.load(std::sync::atomic::Ordering::Relaxed) == 10
    })
    .await;
    for (id, body, priority) in [
        ("traced", "3", 1024),
        ("traced-prio", "3", 9),
        ("traced-before", "4", 1024),
    ] {
        let j = q.producer().get(id).await.unwrap();
        assert_eq!(
            (j.state, j.body.get(), j.priority, j.traceparent.as_deref()),
            (State::Ready, body, priority, Some(tp)),
            "{id}"
        );
    }
    for (i, t) in topics.iter().enumerate() {
        let j = q.producer().get(&format!("t{i}")).await.unwrap();
        assert_eq!(
            (j.state, j.topic.as_str(), j.body.get()),
            (State::Ready, t.as_str(), i.to_string().as_str())
        );
    }
    let j = q.producer().get("full").await.unwrap();
    assert_eq!(
        (j.state, j.body.get(), j.backoff_ms.as_deref()),
        (State::Ready, "\"x\"", Some(&[5u64, 10][..]))
    );
    assert!(j.retry_until.is_some());
    let prio = q.producer().get("prio").await.unwrap();
    assert_eq!((prio.state, prio.priority), (State::Ready, 7));
    let score: f64 = redis::cmd("ZSCORE")
        .arg(key(&q, "prio", "ready:a"))
        .arg("prio")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        score,
        7.0 * 2f64.powi(42) + prio.run_at as f64,
        "a job with a priority is scored by it, then by its due time"
    );
    let j = q.producer().get("old").await.unwrap();
    assert_eq!((j.state, j.body.get(), j.created_at), (State::Ready, "2", 900));
    assert_consistent(&redis);
    let mut got: Vec<String> = Vec::new();
    for t in &topics {
        got.extend(
            q.reservations()
                .reserve(std::slice::from_ref(t), 10)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id),
        );
    }
    got.sort();
    assert_eq!(
        got,
        [
            "full",
            "old",
            "prio",
            "t0",
            "t1",
            "t2",
            "t3",
            "traced",
            "traced-before",
            "traced-prio"
        ]
    );
    // Reserved (whole records written again), each keeps its trace context.
    for id in ["traced", "traced-prio", "traced-before"] {
        let j = q.producer().get(id).await.unwrap();
        assert_eq!((j.state, j.traceparent.as_deref()), (State::Reserved, Some(tp)), "{id}");
    }
    // The one written as before is now written as any other: an array of 10 (the reservation's
    // attempt, deadline and receipt), state reserved, its trace context after the array.
    let head: Vec<u8> = redis::cmd("GETRANGE")
        .arg(key(&q, "traced-before", "job:traced-before"))
        .arg(0)
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(head, [0x9a, 3 + 8]);
}

/// promote.lua moves a call of plain jobs (no flow key, no priority, no worker waiting) without the
/// tables the rest needs, and a call with any other kind of job the general way, which reads the records
/// again: both give the same result. Two partitions: one of plain jobs (a traced one among them, and an
/// id without a record), one where a keyed job and a job with a priority come after plain ones.
#[tokio::test]
async fn a_call_of_plain_jobs_and_a_mixed_one_promote_alike() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // The keyed job first: dq makes its id, in its key's partition, which is the mixed one.
    let keyed = q
        .producer()
        .push(job(
            &q,
            serde_json::json!({"topic": "t", "body": 8, "delay_ms": 50, "flow_key": "k"}),
        ))
        .await
        .unwrap()
        .id;
    let pb = q.partitions().of_id(&keyed);
    let pa = (0..)
        .map(|i| q.partitions().of_id(&format!("plain-{i}")))
        .find(|p| *p != pb)
        .unwrap();
    // Ids of the two partitions: five plain, and four more in the mixed one.
    let pick = |stem: &str, p: u16, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{stem}-{i}"))
            .filter(|id| q.partitions().of_id(id) == p)
            .take(n)
            .collect()
    };
    let plain = pick("plain", pa, 5);
    let mut mixed = pick("mixed", pb, 4);
    mixed.insert(3, keyed.clone());
    for (i, id) in plain.iter().chain(&mixed).enumerate() {
        if *id == keyed {
            continue;
        }
        let mut push = serde_json::json!({"id": id, "topic": "t", "body": i, "delay_ms": 50});
        if i == 1 {
            push["traceparent"] = tp.into();
        } else if i == 9 {
            push["priority"] = 5.into();
        }
        q.producer().push(job(&q, push)).await.unwrap();
    }
    // An id without a record in each delay set (deleted half-way by hand): it leaves, nothing moves.
    for (p, ghost) in [(pa, "ghost-a"), (pb, "ghost-b")] {
        let _: () = redis::cmd("ZADD")
            .arg(format!("{}:delayed", q.partition_keys(p).prefix()))
            .arg(1)
            .arg(ghost)
            .query(&mut c)
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    for p in [pa, pb] {
        let moved = std::sync::atomic::AtomicUsize::new(0);
        eventually(Duration::from_secs(10), "the five are due and moved", || async {
            let n = q.timer().promote(p, 1000).await.unwrap().moved;
            moved.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n == 5
        })
        .await;
    }
    for (i, id) in plain.iter().chain(&mixed).enumerate() {
        let j = q.producer().get(id).await.unwrap();
        assert_eq!((j.state, j.body.get()), (State::Ready, i.to_string().as_str()), "{id}");
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key(&q, id, "ready:t"))
            .arg(id)
            .query(&mut c)
            .unwrap();
        // (A straight key's job is scored by its key's place in line, flow.lua.)
        if *id != keyed {
            let priority = if i == 9 { 5.0 } else { 1024.0 };
            assert_eq!(score, Some(priority * 2f64.powi(42) + j.run_at as f64), "{id}");
        }
        assert!(score.is_some(), "{id} is in its ready queue");
    }
    let traced = q.producer().get(&plain[1]).await.unwrap();
    assert_eq!(traced.traceparent.as_deref(), Some(tp));
    assert_eq!(
        head_of(&mut c, &q, &plain[1])[..2],
        [0x97, 2 + 8],
        "ready, a trace context after"
    );
    assert_eq!(q.producer().get(&keyed).await.unwrap().flow_key.as_deref(), Some("k"));
    assert_consistent(&redis);
}

/// The first bytes of job `id`'s record.
fn head_of(c: &mut redis::Connection, q: &Queue, id: &str) -> Vec<u8> {
    redis::cmd("GETRANGE")
        .arg(key(q, id, &format!("job:{id}")))
        .arg(0)
        .arg(7)
        .query(c)
        .unwrap()
}

/// A flow key is stored in front of the record's array (record.lua), so a keyed job's array is as short
/// as any other's and promote.lua reads its topic and key from the first bytes. Keyed records of every
/// shape (the key alone, with a priority, with a trace context, a long key, and one written as before,
/// with the key as field 18 of an array16) are promoted into their keys' queues, reserved and acked
/// whole, and keep their key.
#[tokio::test]
async fn keyed_records_carry_their_flow_key_in_front_through_every_move() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let long = "k".repeat(128);
    let shapes = [
        ("alone", json!({"flow_key": "acme"})),
        ("prio", json!({"flow_key": "acme", "priority": 9})),
        ("traced", json!({"flow_key": "beta", "traceparent": tp})),
        ("long", json!({"flow_key": long})),
        ("before", json!({"flow_key": "gamma"})),
    ];
    let mut ids = HashMap::new();
    for (name, more) in &shapes {
        let mut push = json!({"topic": "a", "body": name, "delay_ms": 30});
        push.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        ids.insert(*name, q.producer().push(job(&q, push)).await.unwrap().id);
    }
    let head = |c: &mut redis::Connection, name: &str| -> Vec<u8> {
        redis::cmd("GETRANGE")
            .arg(key(&q, &ids[name], &format!("job:{}", ids[name])))
            .arg(0)
            .arg(6)
            .query(c)
            .unwrap()
    };
    assert_eq!(
        head(&mut c, "alone"),
        [0xa4, b'a', b'c', b'm', b'e', 0x97, 1],
        "the key (a fixstr), then a fixarray of 7, state delayed"
    );
    assert_eq!(
        &head(&mut c, "long")[..3],
        [0xd9, 128, b'k'],
        "a key of 128 bytes is a str8"
    );
    // As records were written before the flow key left the array: field 18 of 18 (an array16).
    let before = key(&q, &ids["before"], &format!("job:{}", ids["before"]));
    let _: () = redis::cmd("EVAL")
        .arg(
            "local f = {} for i = 8, 17 do f[i] = false end \
             redis.call('SET', KEYS[1], cmsgpack.pack({1, 'a', '\"before\"', tonumber(ARGV[1]), 30000, 3, 60, f[8], \
             f[9], f[10], f[11], f[12], f[13], f[14], f[15], f[16], f[17], 'gamma'}))",
        )
        .arg(1)
        .arg(&before)
        .arg(1_700_000_000_000_i64)
        .query(&mut c)
        .unwrap();
    assert_eq!(head(&mut c, "before")[0], 0xdc, "an array16");

    let moved = std::sync::atomic::AtomicUsize::new(0);
    eventually(Duration::from_secs(10), "all five are promoted", || async {
        moved.fetch_add(promote_all(&q).await, std::sync::atomic::Ordering::Relaxed);
        moved.load(std::sync::atomic::Ordering::Relaxed) == 5
    })
    .await;
    let want = |name: &str| match name {
        "prio" => ("acme", 9, None),
        "traced" => ("beta", 1024, Some(tp)),
        "long" => (long.as_str(), 1024, None),
        "before" => ("gamma", 1024, None),
        _ => ("acme", 1024, None),
    };
    for (name, _) in &shapes {
        let j = q.producer().get(&ids[*name]).await.unwrap();
        let (k, priority, trace) = want(name);
        assert_eq!(
            (
                j.state,
                j.body.get(),
                j.flow_key.as_deref(),
                j.priority,
                j.traceparent.as_deref()
            ),
            (State::Ready, format!("\"{name}\"").as_str(), Some(k), priority, trace),
            "{name}"
        );
        // A topic without flow limits: its keys are straight, their jobs in its ready queue (flow.lua).
        let queued: Option<f64> = redis::cmd("ZSCORE")
            .arg(key(&q, &ids[*name], "ready:a"))
            .arg(&ids[*name])
            .query(&mut c)
            .unwrap();
        assert!(queued.is_some(), "{name} waits in its topic's ready queue");
    }
    assert_eq!(
        head(&mut c, "alone")[6],
        2,
        "the state byte, behind the key, says ready"
    );

    // Four keys, five jobs: the first reserves give a job of each key, then acme's second.
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(q.reservations().reserve(&["a".to_string()], 10).await.unwrap());
        if got.len() == 5 {
            break;
        }
    }
    assert_eq!(got.len(), 5);
    for r in &got {
        let name = shapes.iter().find(|(n, _)| ids[*n] == r.id).unwrap().0;
        assert_eq!(r.flow_key.as_deref(), Some(want(name).0), "{name}");
        q.reservations().ack(&r.id, &r.receipt).await.unwrap();
        let j = q.producer().get(&r.id).await.unwrap();
        assert_eq!(
            (j.state, j.flow_key.as_deref()),
            (State::Done, Some(want(name).0)),
            "{name}"
        );
    }
    // Reserved, the record was written whole: the old one too has its key in front now.
    let h = head(&mut c, "before");
    assert_eq!(h[..6], [0xa5, b'g', b'a', b'm', b'm', b'a']);
    assert!((0x90..=0x9f).contains(&h[6]), "then a fixarray: {h:?}");
}

/// A record's Redis memory follows its body's length: there is no step at 64 bytes, where a hash record
/// would leave Redis's compact encoding and more than double (docs/redis-keys.md).
#[tokio::test]
async fn a_records_memory_follows_its_body_without_a_step() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut usage = HashMap::new();
    for n in [64, 65, 200] {
        let body = format!("\"{}\"", "x".repeat(n - 2));
        let text = format!(r#"{{"id":"m{n}","topic":"t","body":{body},"delay_ms":60000}}"#);
        q.producer()
            .push(q.producer().validate(serde_json::from_str(&text).unwrap()).unwrap())
            .await
            .unwrap();
        let bytes: i64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key(&q, &format!("m{n}"), &format!("job:m{n}")))
            .query(&mut redis.conn())
            .unwrap();
        usage.insert(n, bytes);
    }
    // Allocations come in size classes, so one more byte costs at most a class step (16 bytes here).
    assert!(usage[&65] - usage[&64] <= 16, "{usage:?}");
    assert!(usage[&200] - usage[&64] <= 200, "{usage:?}");
}

/// created_at is stored as the delay before run_at, so a typical record (a 64-byte body, an hour's delay)
/// packs into 92 bytes and takes the allocator's 96-byte class, not the 112-byte one; records packed
/// before that, with the full created_at, still read right.
#[tokio::test]
async fn records_store_created_at_as_a_delay_and_read_the_full_times_written_before() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    let body = format!("\"{}\"", "x".repeat(62));
    let text = format!(r#"{{"id":"small","topic":"bench","body":{body},"delay_ms":3600000}}"#);
    let pushed = q
        .producer()
        .push(q.producer().validate(serde_json::from_str(&text).unwrap()).unwrap())
        .await
        .unwrap();
    let len: usize = redis::cmd("STRLEN")
        .arg(key(&q, "small", "job:small"))
        .query(&mut c)
        .unwrap();
    assert!(len <= 92, "the record is {len} bytes");
    let j = q.producer().get("small").await.unwrap();
    assert_eq!(j.run_at, pushed.run_at);
    assert_eq!(j.created_at, pushed.run_at - 3_600_000);

    // As the previous release packed it: state ready, topic, body, run_at, ttr, max_attempts, the full
    // created_at, attempts.
    let (run_at, created_at) = (1_795_000_060_000_i64, 1_795_000_000_000_i64);
    let _: () = redis::cmd("EVAL")
        .arg("redis.call('SET', KEYS[1], cmsgpack.pack({2, 't', '7', tonumber(ARGV[1]), 30000, 3, tonumber(ARGV[2]), 1}))")
        .arg(1)
        .arg(key(&q, "before", "job:before"))
        .arg(run_at)
        .arg(created_at)
        .query(&mut c)
        .unwrap();
    enter(&mut c, &q, "before", "ready:t", run_at, "t:ready");
    let j = q.producer().get("before").await.unwrap();
    assert_eq!((j.run_at, j.created_at, j.attempts), (run_at, created_at, 1));
    // Written back by a move, it keeps its times.
    q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    let j = q.producer().get("before").await.unwrap();
    assert_eq!(
        (j.state, j.run_at, j.created_at, j.attempts),
        (State::Reserved, run_at, created_at, 2)
    );
    assert_consistent(&redis);
}

/// Records written before dq packed them are hashes. They are still read, and the first script that
/// changes one writes it back packed, so an upgrade needs no migration step.
#[tokio::test]
async fn records_written_as_hashes_are_still_read_and_are_packed_when_changed() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    let fields = [
        ("t", "t"),
        ("b", r#"{"a": 1}"#),
        ("r", "1000"),
        ("ttr", "30000"),
        ("m", "3"),
        ("c", "900"),
        ("s", "ready"),
        ("a", "1"),
        ("e", "earlier failure"),
    ];
    plant_hash_record(&mut c, &q, &fields, "ready:t", "t:ready");
    assert_consistent(&redis);

    let j = q.producer().get("old").await.unwrap();
    assert_eq!(
        (j.state, j.run_at, j.created_at, j.ttr_ms),
        (State::Ready, 1000, 900, 30000)
    );
    assert_eq!((j.attempts, j.max_attempts), (1, 3));
    assert_eq!(j.last_error.as_deref(), Some("earlier failure"));

    let r = q.reservations().reserve(&["t".into()], 1).await.unwrap().remove(0);
    assert_eq!(
        (r.id.as_str(), r.body.get(), r.attempt, r.run_at),
        ("old", r#"{"a": 1}"#, 2, 1000)
    );
    let kind: String = redis::cmd("TYPE").arg(key(&q, "old", "job:old")).query(&mut c).unwrap();
    assert_eq!(kind, "string", "the reservation wrote the record back packed");
    let j = q.producer().get("old").await.unwrap();
    assert_eq!((j.state, j.attempts, j.created_at), (State::Reserved, 2, 900));
    assert_eq!(j.last_error.as_deref(), Some("earlier failure"));
    q.reservations().ack("old", &r.receipt).await.unwrap();
    assert_eq!(q.producer().get("old").await.unwrap().state, State::Done);
    assert_consistent(&redis);
}

/// A reserve in the process that just made a job ready finds it, without waiting for the wake-up: here
/// the index is told a listener feeds it but none runs, so only the process's own writes can mark it.
#[tokio::test]
async fn a_reserve_sees_what_its_own_process_just_made_ready() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    q.reservations().ready_index().set_listening(true);
    let t = vec!["t".to_string()];
    assert!(
        q.reservations().reserve(&t, 1).await.unwrap().is_empty(),
        "the index is synced, and empty"
    );

    let pushed = q
        .producer()
        .push(job(&q, serde_json::json!({"topic": "t", "body": 1})))
        .await
        .unwrap();
    let r = q.reservations().reserve(&t, 1).await.unwrap();
    assert_eq!(r.len(), 1, "a pushed job is reserved at once");
    assert_eq!(r[0].id, pushed.id);

    let (state, _) = q
        .reservations()
        .nack(&pushed.id, &r[0].receipt, Some(0), None, None)
        .await
        .unwrap();
    assert_eq!(state, State::Ready);
    let r = q.reservations().reserve(&t, 1).await.unwrap();
    assert_eq!(r.len(), 1, "a job nacked with no delay is reserved at once");

    let later = q
        .producer()
        .push(job(
            &q,
            serde_json::json!({"topic": "t", "body": 2, "delay_ms": 600_000}),
        ))
        .await
        .unwrap();
    q.producer()
        .reschedule(&later.id, Some(Due::Delay(0)), None)
        .await
        .unwrap();
    let r = q.reservations().reserve(&t, 1).await.unwrap();
    assert_eq!(r.len(), 1, "a job rescheduled to now is reserved at once");
    assert_eq!(r[0].id, later.id);
    assert_consistent(&redis);
}

/// A queue entry whose record is gone (deleted by hand) is dropped by promote, reserve and expire, and
/// the entries around it still move: the scripts read every record before they change anything.
#[tokio::test]
async fn entries_without_a_record_are_dropped_and_the_others_move() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let push = |id: &str, delay: u64, ttr: u64| {
        q.producer().push(job(
            &q,
            serde_json::json!({"id": id, "topic": "t", "body": 1, "delay_ms": delay, "ttr_ms": ttr}),
        ))
    };
    let mut c = redis.conn();
    let drop_record = |c: &mut redis::Connection, id: &str| {
        let _: () = redis::cmd("DEL")
            .arg(key(&q, id, &format!("job:{id}")))
            .query(c)
            .unwrap();
    };

    for id in ["d1", "d2", "d3"] {
        push(id, 1, 30_000).await.unwrap();
    }
    drop_record(&mut c, "d2");
    let moved = std::sync::atomic::AtomicUsize::new(0);
    eventually(
        Duration::from_secs(10),
        "the two jobs with records are promoted",
        || async {
            moved.fetch_add(promote_all(&q).await, std::sync::atomic::Ordering::Relaxed);
            moved.load(std::sync::atomic::Ordering::Relaxed) >= 2
        },
    )
    .await;
    assert_eq!(moved.into_inner(), 2);
    let delayed: i64 = redis::cmd("ZCARD").arg(key(&q, "d1", "delayed")).query(&mut c).unwrap();
    assert_eq!(delayed, 0, "the entry without a record left the delay set too");
    for id in ["d1", "d3"] {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Ready);
    }

    for id in ["r1", "r2", "r3"] {
        push(id, 0, 10).await.unwrap();
    }
    drop_record(&mut c, "r2");
    let got: HashSet<String> = q
        .reservations()
        .reserve(&["t".into()], 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(got, ["d1", "d3", "r1", "r3"].map(String::from).into());
    let ready: i64 = redis::cmd("ZCARD").arg(key(&q, "r1", "ready:t")).query(&mut c).unwrap();
    assert_eq!(ready, 0, "the entry without a record left the ready queue too");

    drop_record(&mut c, "r1");
    eventually(Duration::from_secs(10), "the 10 ms reservations expire", || async {
        q.timer().expire(0, 100).await.unwrap().to_ready > 0
    })
    .await;
    assert_eq!(q.producer().get("r3").await.unwrap().state, State::Ready);
    let reserved: Vec<String> = redis::cmd("ZRANGE")
        .arg(key(&q, "r1", "reserved"))
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        reserved,
        ["d1", "d3"],
        "every expired entry left the reserved set; the others stay"
    );
}

/// Reserve and touch tell the timers (on the partition's timer channel) when they set a reservation
/// deadline earlier than any in the reserved set, so expiry runs on time without sweeping: the first
/// reservation, a shorter one, and a touch that shortens one are announced; a later one is not.
#[tokio::test]
async fn reservation_deadlines_earlier_than_known_are_announced_to_the_timers() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let mut sub = redis.conn();
    let mut sub = sub.as_pubsub();
    sub.psubscribe(q.keys().wake_pattern(&dq_core::store::keys::WakeKind::Timer))
        .unwrap();
    sub.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut next = || -> Option<String> { sub.get_message().ok().map(|m| m.get_payload::<String>().unwrap()) };
    let reserved_key = key(&q, "a", "reserved");
    let push = |id: &str, ttr: u64| {
        q.producer().push(job(
            &q,
            serde_json::json!({"id": id, "topic": "t", "body": 1, "ttr_ms": ttr}),
        ))
    };
    let t = vec!["t".to_string()];

    push("a", 60_000).await.unwrap();
    let a = q.reservations().reserve(&t, 1).await.unwrap().remove(0);
    assert_eq!(
        next(),
        Some(format!("{reserved_key} {}", a.deadline)),
        "the first reservation"
    );
    push("b", 120_000).await.unwrap();
    q.reservations().reserve(&t, 1).await.unwrap();
    assert_eq!(next(), None, "a later deadline says nothing");
    push("c", 10_000).await.unwrap();
    let c = q.reservations().reserve(&t, 1).await.unwrap().remove(0);
    assert_eq!(
        next(),
        Some(format!("{reserved_key} {}", c.deadline)),
        "an earlier deadline"
    );
    let touched = q.reservations().touch("a", &a.receipt, Some(1_000)).await.unwrap();
    assert_eq!(
        next(),
        Some(format!("{reserved_key} {touched}")),
        "a touch that shortens one"
    );
    q.reservations().touch("a", &a.receipt, Some(600_000)).await.unwrap();
    assert_eq!(next(), None, "a touch that lengthens one says nothing");

    // Once every reservation ended, a new one later than the announced deadline still says nothing:
    // the timer runs expiry by the announced deadline anyway and learns the next one from it.
    for id in ["a", "b", "c"] {
        q.producer().cancel(id).await.unwrap();
    }
    push("d", 120_000).await.unwrap();
    q.reservations().reserve(&t, 1).await.unwrap();
    assert_eq!(next(), None, "later than the one announced");
    // The timer's expiry call: what it returns is now what the timers know, so the next earlier
    // deadline is announced again.
    let p = q.partitions().of_id("d");
    let e = q.timer().expire(p, 100).await.unwrap();
    assert!(e.next_deadline.is_some());
    push("e", 30_000).await.unwrap();
    let r = q.reservations().reserve(&t, 1).await.unwrap().remove(0);
    assert_eq!(
        next(),
        Some(format!("{reserved_key} {}", r.deadline)),
        "earlier than the one learned"
    );
    q.producer().cancel("d").await.unwrap();
    q.producer().cancel("e").await.unwrap();
    assert_eq!(q.timer().expire(p, 100).await.unwrap().next_deadline, None);
    push("f", 600_000).await.unwrap();
    let r = q.reservations().reserve(&t, 1).await.unwrap().remove(0);
    assert_eq!(
        next(),
        Some(format!("{reserved_key} {}", r.deadline)),
        "none known: any is announced"
    );
}

/// reserve.lua's last value says whether the queues may hold more: from the topic's count when it says
/// so, and from the queues themselves when the count says none, so a count that drifted low never hides
/// ready jobs from a process's ready index.
#[tokio::test]
async fn reserve_says_whether_jobs_are_left_even_when_the_count_is_too_low() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    for id in ["a", "b", "c"] {
        q.producer()
            .push(job(&q, serde_json::json!({"id": id, "topic": "t", "body": 1})))
            .await
            .unwrap();
    }
    let keys = q.partition_keys(0);
    let mut c = redis.conn();
    let mut reserve_one = || -> (usize, i64) {
        let out: Vec<redis::Value> = dq_core::store::scripts::reserve::SCRIPT
            .get(false)
            .prepare_invoke()
            .key(keys.reserved())
            .key(keys.counts())
            .key(keys.announced())
            .key(keys.ready("t"))
            .arg(keys.prefix())
            .arg(1)
            .arg("n")
            .arg("")
            .arg(keys.timer_channel())
            .arg("")
            .invoke(&mut c)
            .unwrap();
        let more = match out.last() {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("not a flag: {other:?}"),
        };
        ((out.len() - 1) / 8, more)
    };
    assert_eq!(reserve_one(), (1, 1), "two left, as counted");
    // The count drifts to 0 with one job still in the queue: the queue itself is looked at.
    let _: () = redis::cmd("HSET")
        .arg(keys.counts())
        .arg("t:ready")
        .arg(1)
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(reserve_one(), (1, 1), "one left, though the count says none");
    assert_eq!(reserve_one(), (1, 0), "none left");
    assert_eq!(reserve_one(), (0, 0), "nothing to take");
}
