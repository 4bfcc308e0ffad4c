//! Promotion of several partitions in one `promote.lua` call (a timer's partitions due at the same
//! moment share a call per node): on a single Redis and on a real Redis Cluster, every due job moves
//! once, each partition answers for itself, waiting workers' slots are shared across the call's
//! partitions, and a call that finds a partition elsewhere is sent again a partition at a time.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use dq_core::reservations::Waiting;
use dq_core::store::partition::slot_of;
use dq_core::{Queue, State};
use dq_harness::{RedisCluster, RedisServer};
use serde_json::json;

/// One id in each of `n` distinct partitions (`<stem><i>`), with its partition.
fn ids_over_partitions(q: &Queue, stem: &str, n: usize) -> Vec<(String, u16)> {
    let mut seen = HashSet::new();
    (0..)
        .map(|i| format!("{stem}{i}"))
        .filter_map(|id| {
            let p = q.partitions().of_id(&id);
            seen.insert(p).then_some((id, p))
        })
        .take(n)
        .collect()
}

/// Pushes each id to `topic`, due 10 ms later, and waits until they are all due.
async fn push_due(q: &Queue, jobs: &[(String, u16)], topic: &str) {
    for (id, _) in jobs {
        common::push(
            q,
            json!({"id": id, "topic": topic, "body": 1, "delay_ms": 10, "ttr_ms": 60_000}),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Twelve partitions due at once cost one call on a single Redis: each partition answers with its own
/// job, its next due time and no hand-off; every job is ready once, and the delay sets are left with the
/// jobs not yet due.
#[tokio::test]
async fn a_single_redis_promotes_the_partitions_due_together_in_one_call() {
    let redis = RedisServer::start();
    let q = Queue::connect(&common::standalone(&redis)).await.unwrap();
    let jobs = ids_over_partitions(&q, "due", 12);
    let parts: Vec<u16> = jobs.iter().map(|(_, p)| *p).collect();
    // A job in the first partition due in an hour: its next due time comes back.
    let later = (0..)
        .map(|i| format!("later{i}"))
        .find(|id| q.partitions().of_id(id) == parts[0])
        .unwrap();
    common::push(&q, json!({"id": later, "topic": "t", "body": 1, "delay_ms": 3_600_000})).await;
    push_due(&q, &jobs, "t").await;
    // The script is loaded by a first call (an empty partition), so the call counted is the promotion.
    let idle = q.partitions().all().find(|p| !parts.contains(p)).unwrap();
    q.timer().promote(idle, 100).await.unwrap();

    let before = common::evalsha_calls([redis.conn()]);
    let answers = q.timer().promote_many(&parts, 100, &[]).await;
    assert_eq!(
        common::evalsha_calls([redis.conn()]) - before,
        1,
        "one call for {} partitions",
        parts.len()
    );
    assert_eq!(
        answers.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        parts,
        "in the order asked"
    );
    for (i, (p, r)) in answers.into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("partition {p}: {e}"));
        assert_eq!((r.moved, r.lateness_ms.len()), (1, 1), "partition {p}");
        assert!(r.handed.is_empty());
        if i == 0 {
            assert!(
                r.next_due.unwrap() > r.now + 3_000_000,
                "the job due later: {:?}",
                r.next_due
            );
        } else {
            assert_eq!(r.next_due, None, "partition {p} is empty");
        }
    }
    for (id, _) in &jobs {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Ready, "{id}");
    }
    assert_eq!(q.producer().get(&later).await.unwrap().state, State::Delayed);
    // Nothing is due any more: another call moves nothing.
    for (_, r) in q.timer().promote_many(&parts, 100, &[]).await {
        assert_eq!(r.unwrap().moved, 0);
    }
}

/// A partition whose promotion fails (its delay set is a key of another type, written by hand) holds none
/// of the others of its call up: they are promoted, each job once, and only its own answer is the error.
#[tokio::test]
async fn a_partition_that_fails_holds_none_of_the_others_up() {
    let redis = RedisServer::start();
    let q = Queue::connect(&common::standalone(&redis)).await.unwrap();
    let jobs = ids_over_partitions(&q, "f", 3);
    let parts: Vec<u16> = jobs.iter().map(|(_, p)| *p).collect();
    push_due(&q, &[jobs[0].clone(), jobs[2].clone()], "t").await;
    let broken = q.partition_keys(parts[1]).delayed();
    let _: () = redis::cmd("SET")
        .arg(&broken)
        .arg("not a sorted set")
        .query(&mut redis.conn())
        .unwrap();

    let answers = q.timer().promote_many(&parts, 100, &[]).await;
    assert_eq!(answers.len(), 3);
    let answer = |i: usize| &answers.iter().find(|(p, _)| *p == parts[i]).unwrap().1;
    assert!(answer(1).is_err(), "{:?}", answer(1));
    // The partition before it in the call was promoted by the call that failed (a script's writes
    // stay), so its own call found nothing left; the one after it was promoted by its own.
    assert!(answer(0).is_ok(), "{:?}", answer(0));
    assert_eq!(answer(2).as_ref().unwrap().moved, 1);
    for i in [0, 2] {
        assert_eq!(
            q.producer().get(&jobs[i].0).await.unwrap().state,
            State::Ready,
            "{}",
            jobs[i].0
        );
    }
}

/// A worker waiting with 3 slots and 5 partitions due in one call: the call hands it 3 jobs in all (its
/// slots go down from partition to partition), each with a receipt of its own, and the other 2 go to
/// the ready queue. The hand-off messages carry exactly the reserved jobs.
#[tokio::test]
async fn a_call_s_partitions_share_a_waiting_worker_s_slots() {
    let redis = RedisServer::start();
    let q = Queue::connect(&common::standalone(&redis)).await.unwrap();
    let jobs = ids_over_partitions(&q, "w", 5);
    let parts: Vec<u16> = jobs.iter().map(|(_, p)| *p).collect();
    push_due(&q, &jobs, "t").await;
    let mut conn = redis.conn();
    let mut sub = conn.as_pubsub();
    sub.psubscribe(
        q.keys()
            .wake_pattern(&dq_core::store::keys::WakeKind::Handoff("C1".into())),
    )
    .unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let waiting = [Waiting {
        topic: "t".into(),
        consumer: "C1".into(),
        slots: 3,
        least_ttr_ms: 60_000,
    }];

    let answers = q.timer().promote_many(&parts, 100, &waiting).await;
    let mut handed = 0;
    for (p, r) in answers {
        let r = r.unwrap_or_else(|e| panic!("partition {p}: {e}"));
        assert_eq!(r.moved, 1, "partition {p}");
        handed += r.handed[0];
    }
    assert_eq!(handed, 3, "the worker's 3 slots, over the call's partitions");
    let mut messages = Vec::new();
    while messages.len() < 3 {
        let payload: Vec<u8> = sub.get_message().unwrap().get_payload().unwrap();
        messages.extend(dq_core::reservations::handoff::decode_handoff(&payload).unwrap());
    }
    drop(sub);
    let receipts: HashSet<&str> = messages.iter().map(|r| r.receipt.as_str()).collect();
    assert_eq!(receipts.len(), 3, "a receipt each: {receipts:?}");
    let states: HashMap<&str, State> = {
        let mut m = HashMap::new();
        for (id, _) in &jobs {
            m.insert(id.as_str(), q.producer().get(id).await.unwrap().state);
        }
        m
    };
    for r in &messages {
        assert_eq!(states[r.id.as_str()], State::Reserved, "{}", r.id);
        q.reservations().ack(&r.id, &r.receipt).await.unwrap();
    }
    let ready = states.values().filter(|s| **s == State::Ready).count();
    assert_eq!(ready, 2, "the jobs no slot took: {states:?}");
}

/// On a cluster, the partitions due together cost a call per primary; a partition whose slot moved after
/// dq read the slots is promoted all the same (its call answered "moved", and the partitions went one
/// at a time, each where its slot is now).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_promotes_a_call_per_primary_and_follows_a_moved_slot() {
    let cluster = RedisCluster::start();
    let q = Queue::connect(&common::cluster(&cluster)).await.unwrap();
    let jobs = ids_over_partitions(&q, "c", 60);
    let parts: Vec<u16> = jobs.iter().map(|(_, p)| *p).collect();
    push_due(&q, &jobs, "t").await;
    // Each primary loads the script first.
    q.timer()
        .promote_many(
            &q.partitions().all().filter(|p| !parts.contains(p)).collect::<Vec<_>>(),
            100,
            &[],
        )
        .await;

    let conns = || cluster.primaries().into_iter().map(|p| cluster.conn(p));
    let before = common::evalsha_calls(conns());
    let answers = q.timer().promote_many(&parts[..30], 100, &[]).await;
    let calls = common::evalsha_calls(conns()) - before;
    // Per primary, 16 partitions at most a call: 30 partitions over 3 primaries take at least 3 calls.
    assert!((3..=6).contains(&calls), "{calls} calls for 30 partitions");
    for (p, r) in answers {
        assert_eq!(
            r.unwrap_or_else(|e| panic!("partition {p}: {e}")).moved,
            1,
            "partition {p}"
        );
    }

    // A partition of the rest moves to another primary (its job with it), unknown to dq's map.
    let p = parts[30];
    let slot = slot_of(q.partitions().tag(p));
    let from = cluster.primary_for_slot(slot);
    let to = *cluster.primaries().iter().find(|&&port| port != from).unwrap();
    let to_id = cluster.node_id(to);
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(&mut cluster.conn(from))
        .unwrap();
    let from_id = cluster.node_id(from);
    let setslot = |port: u16, how: &[&str]| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot);
        for h in how {
            cmd.arg(*h);
        }
        cmd.query::<()>(&mut cluster.conn(port)).unwrap();
    };
    setslot(to, &["IMPORTING", &from_id]);
    setslot(from, &["MIGRATING", &to_id]);
    let mut migrate = redis::cmd("MIGRATE");
    migrate.arg("127.0.0.1").arg(to).arg("").arg(0).arg(5000).arg("KEYS");
    for k in &keys {
        migrate.arg(k);
    }
    migrate.query::<()>(&mut cluster.conn(from)).unwrap();
    for port in cluster.primaries() {
        setslot(port, &["NODE", &to_id]);
    }
    cluster.wait_healthy(Duration::from_secs(30));

    let rest = &parts[30..];
    let on_from = rest
        .iter()
        .filter(|&&r| r != p && cluster.primary_for_slot(slot_of(q.partitions().tag(r))) == from)
        .count();
    let before = common::evalsha_calls(conns());
    let answers = q.timer().promote_many(rest, 100, &[]).await;
    let calls = common::evalsha_calls(conns()) - before;
    // The call to the old node answered "moved": its partitions went again one call each.
    assert!(
        calls as usize > on_from,
        "{calls} calls, {on_from} partitions left on the old node"
    );
    for (p, r) in answers {
        assert_eq!(
            r.unwrap_or_else(|e| panic!("partition {p}: {e}")).moved,
            1,
            "partition {p}"
        );
    }
    for (id, _) in &jobs {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Ready, "{id}");
    }
}
