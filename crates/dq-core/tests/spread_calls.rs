//! Calls over several partitions of one cluster node (`push.lua` and `ack.lua` as dq-server sends a
//! group's jobs: one call per node, not per partition), on a real Redis Cluster: what such a call stores,
//! that one finding a partition elsewhere or moving writes nothing, and that a group whose partition
//! moved after dq read the slots is still stored whole.

mod common;

use std::collections::HashSet;

use dq_core::store::keys::{Keys, PartitionKeys};
use dq_core::store::partition::{Partitions, slot_of};
use dq_core::{PushRequest, Queue, State};
use dq_harness::RedisCluster;
use redis::Value;
use serde_json::json;

/// The installation's default partitions (the cluster settings leave `redis.partitions` unset).
fn partitions() -> Partitions {
    Partitions::new(256)
}

fn keys_of(parts: &Partitions, p: u16) -> PartitionKeys {
    Keys::new("dq").partition(parts.tag(p))
}

/// Partitions served by the primary on `port` (`on`), or by another (`!on`), in order.
fn served(cluster: &RedisCluster, parts: &Partitions, port: u16, on: bool) -> Vec<u16> {
    parts
        .all()
        .filter(|&p| (cluster.primary_for_slot(slot_of(parts.tag(p))) == port) == on)
        .collect()
}

/// `push.lua`, as a cluster's call over several partitions sends it: the first job's partition's two
/// keys declared, the rest in ARGV after "" and their number; each job (id, partition) delayed a minute.
fn spread_push(conn: &mut redis::Connection, parts: &Partitions, jobs: &[(&str, u16)]) -> Value {
    let first = keys_of(parts, jobs[0].1);
    let mut inv = dq_core::store::scripts::push::SCRIPT.get(true).prepare_invoke();
    inv.key(first.counts()).key(first.delayed());
    inv.arg("").arg(2 * jobs.len());
    for &(id, p) in jobs {
        let k = keys_of(parts, p);
        inv.arg(k.job(id)).arg(k.ready("t"));
    }
    inv.arg(first.ready_channel()).arg(first.timer_channel());
    for &(id, _) in jobs {
        inv.arg(id)
            .arg("t")
            .arg("body")
            .arg(60_000)
            .arg("")
            .arg(30_000)
            .arg(0)
            .arg("1")
            .arg("");
    }
    inv.invoke(conn).unwrap()
}

fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(conn).unwrap() == 1
}

fn moved(v: &Value) -> bool {
    matches!(v, Value::BulkString(b) if b == b"moved")
}

/// A call carrying jobs of two partitions its node serves stores both, each in its own partition's keys;
/// one carrying a partition that another node serves, or whose slot is migrating, answers "moved" and
/// writes nothing, not even the jobs of the partitions that are served.
#[test]
fn a_call_over_a_node_s_partitions_stores_them_all_or_nothing() {
    let cluster = RedisCluster::start();
    let parts = partitions();
    let a = cluster.primaries()[0];
    let here = served(&cluster, &parts, a, true);
    let elsewhere = served(&cluster, &parts, a, false);
    let (p1, p3, p2) = (here[0], here[1], elsewhere[0]);
    let (k1, k3) = (keys_of(&parts, p1), keys_of(&parts, p3));
    let mut conn = cluster.conn(a);

    let out = spread_push(&mut conn, &parts, &[("a1", p1), ("a3", p3)]);
    let Value::Array(out) = out else { panic!("{out:?}") };
    assert_eq!(out.len(), 3, "the clock and one answer per job: {out:?}");
    assert!(exists(&mut conn, &k1.job("a1")) && exists(&mut conn, &k3.job("a3")));
    for k in [&k1, &k3] {
        let delayed: i64 = redis::cmd("ZCARD").arg(k.delayed()).query(&mut conn).unwrap();
        assert_eq!(delayed, 1, "{}", k.delayed());
        let counted: i64 = redis::cmd("HGET")
            .arg(k.counts())
            .arg("t:delayed")
            .query(&mut conn)
            .unwrap();
        assert_eq!(counted, 1, "{}", k.counts());
    }

    // A partition another node serves.
    let out = spread_push(&mut conn, &parts, &[("b1", p1), ("b2", p2)]);
    assert!(moved(&out), "{out:?}");
    assert!(!exists(&mut conn, &k1.job("b1")));
    let delayed: i64 = redis::cmd("ZCARD").arg(k1.delayed()).query(&mut conn).unwrap();
    assert_eq!(delayed, 1, "nothing of the call was written");

    // A partition whose slot is migrating to another node (its keys may be there already).
    let slot = slot_of(parts.tag(p3));
    let to = cluster.node_id(cluster.primary_for_slot(slot_of(parts.tag(p2))));
    let setslot = |how: &[&str]| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot);
        for h in how {
            cmd.arg(*h);
        }
        cmd.query::<()>(&mut cluster.conn(a)).unwrap();
    };
    setslot(&["MIGRATING", &to]);
    let out = spread_push(&mut conn, &parts, &[("c1", p1), ("c3", p3)]);
    setslot(&["STABLE"]);
    assert!(moved(&out), "{out:?}");
    assert!(!exists(&mut conn, &k1.job("c1")) && !exists(&mut conn, &k3.job("c3")));

    // Served again: the same call goes through.
    let out = spread_push(&mut conn, &parts, &[("c1", p1), ("c3", p3)]);
    assert!(matches!(&out, Value::Array(v) if v.len() == 3), "{out:?}");
    assert!(exists(&mut conn, &k1.job("c1")) && exists(&mut conn, &k3.job("c3")));
}

/// EVALSHA calls on the cluster's primaries so far.
fn evalsha_calls(cluster: &RedisCluster) -> u64 {
    common::evalsha_calls(cluster.primaries().into_iter().map(|port| cluster.conn(port)))
}

fn with_id(q: &Queue, id: &str, delay_ms: u64) -> dq_core::NewJob {
    let job = json!({"id": id, "topic": "spread", "body": id, "delay_ms": delay_ms, "ttr_ms": 60_000});
    q.producer()
        .validate(serde_json::from_value::<PushRequest>(job).unwrap())
        .unwrap()
}

/// A push of 300 jobs whose ids spread over most partitions costs a call per node, not per partition,
/// and so do their acks, gathered; every job is stored, reserved once and done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_costs_a_call_per_node() {
    let cluster = RedisCluster::start();
    let q = Queue::connect(&common::cluster(&cluster)).await.unwrap();
    let parts = partitions();
    let ids: Vec<String> = (0..300).map(|i| format!("s{i}")).collect();
    let touched: HashSet<u16> = ids.iter().map(|id| parts.of_id(id)).collect();
    assert!(touched.len() > 100, "{} partitions", touched.len());

    let before = evalsha_calls(&cluster);
    let jobs = ids.iter().map(|id| with_id(&q, id, 0)).collect();
    for r in q.producer().push_many(jobs).await {
        assert_eq!(r.unwrap().state, State::Ready);
    }
    let calls = evalsha_calls(&cluster) - before;
    // One per primary; twice that if a node had to load the script first (NOSCRIPT, then again).
    assert!(calls <= 6, "{calls} calls for {} partitions", touched.len());

    let topics = ["spread".to_string()];
    let mut reserved = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while reserved.len() < ids.len() && tokio::time::Instant::now() < deadline {
        reserved.extend(q.reservations().reserve(&topics, 100).await.unwrap());
    }
    let unique: HashSet<&str> = reserved.iter().map(|r| r.id.as_str()).collect();
    assert_eq!((reserved.len(), unique.len()), (ids.len(), ids.len()));

    let before = evalsha_calls(&cluster);
    let acks = reserved.iter().map(|r| q.reservations().ack(&r.id, &r.receipt));
    for r in futures_util::future::join_all(acks).await {
        r.unwrap();
    }
    let calls = evalsha_calls(&cluster) - before;
    assert!(
        calls < touched.len() as u64 / 2,
        "{calls} ack calls for {} partitions",
        touched.len()
    );
    for id in &ids {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Done, "{id}");
    }
}

/// A partition's slot moves to another node after dq read which node serves what: the call over its old
/// node's partitions answers "moved", and its jobs go a partition at a time, each to where its slot is
/// now. Every job is stored, where its slot is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_partition_moved_is_stored_whole() {
    let cluster = RedisCluster::start();
    let q = Queue::connect(&common::cluster(&cluster)).await.unwrap();
    let parts = partitions();
    let a = cluster.primaries()[0];
    let b = cluster.primaries()[1];
    // A push reads the slots.
    q.producer().push_many(vec![with_id(&q, "warm", 60_000)]).await[0]
        .as_ref()
        .unwrap();
    // The first partition of node a without keys moves to node b (an empty slot moves at once).
    let mut ids: Vec<String> = (0..400).map(|i| format!("m{i}")).collect();
    let warm = parts.of_id("warm");
    let here = served(&cluster, &parts, a, true);
    let p = *here.iter().find(|&&p| p != warm).unwrap();
    let slot = slot_of(parts.tag(p));
    let b_id = cluster.node_id(b);
    for port in [b, a, cluster.primaries()[2]] {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&b_id)
            .query(&mut cluster.conn(port))
            .unwrap();
    }
    cluster.wait_healthy(std::time::Duration::from_secs(30));
    assert_eq!(cluster.primary_for_slot(slot), b);
    ids.retain(|id| here.contains(&parts.of_id(id)));
    assert!(
        ids.iter().any(|id| parts.of_id(id) == p),
        "a job of the moved partition"
    );

    let jobs = ids.iter().map(|id| with_id(&q, id, 60_000)).collect();
    for (id, r) in ids.iter().zip(q.producer().push_many(jobs).await) {
        assert_eq!(r.unwrap_or_else(|e| panic!("{id}: {e}")).state, State::Delayed, "{id}");
    }
    for id in &ids {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Delayed, "{id}");
        let k = keys_of(&parts, parts.of_id(id));
        let owner = if parts.of_id(id) == p { b } else { a };
        assert!(exists(&mut cluster.conn(owner), &k.job(id)), "{id} on :{owner}");
    }
}
