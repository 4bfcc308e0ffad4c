//! A record that cannot be decoded stalls nothing (invariant 9): the scripts move it to its partition's
//! quarantine and carry on with every other job; it can be listed, dropped or put back.

use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings, State};
use dq_harness::{RedisServer, eventually};

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    // One partition, so that every job meets the poisoned one.
    s.redis.partitions = Some(1);
    s
}

async fn push(q: &Queue, id: &str, delay_ms: u64) {
    let req: PushRequest =
        serde_json::from_value(serde_json::json!({"id": id, "topic": "t", "body": id, "delay_ms": delay_ms})).unwrap();
    q.producer().push(q.producer().validate(req).unwrap()).await.unwrap();
}

/// Overwrites a job's record with bytes no decoder takes.
fn poison(redis: &RedisServer, q: &Queue, id: &str) {
    let key = q.partition_keys(0).job(id);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(b"\xc1\xff not msgpack".as_slice())
        .query(&mut redis.conn())
        .unwrap();
}

#[tokio::test]
async fn a_poisoned_record_in_a_delay_set_is_quarantined_and_the_others_move() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    for id in ["a", "bad", "c"] {
        push(&q, id, 50).await;
    }
    poison(&redis, &q, "bad");
    // The jobs fall due one after the other: count what every promotion moved.
    let moved = std::sync::atomic::AtomicUsize::new(0);
    eventually(
        Duration::from_secs(30),
        "the two good delayed jobs were promoted",
        || async {
            let n = q.timer().promote(0, 100).await.unwrap().moved;
            moved.fetch_add(n as usize, std::sync::atomic::Ordering::SeqCst) + n as usize == 2
        },
    )
    .await;
    let got: Vec<String> = q
        .reservations()
        .reserve(&["t".into()], 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(got.len(), 2);
    assert!(got.contains(&"a".to_string()) && got.contains(&"c".to_string()));
    let quarantined = q.admin().quarantined().await.unwrap();
    assert_eq!(quarantined.len(), 1);
    let bad = &quarantined[0];
    assert_eq!(bad.id, "bad");
    assert_eq!(bad.raw, b"\xc1\xff not msgpack");
    assert_eq!(bad.source.as_deref(), Some(q.partition_keys(0).delayed().as_str()));
    assert!(bad.score.is_some());
    assert!(matches!(
        q.producer().get("bad").await,
        Err(dq_core::Error::NotFound(_))
    ));
    assert_eq!(q.admin().quarantined_count().await, 1);
}

#[tokio::test]
async fn a_poisoned_record_in_a_ready_queue_is_skipped_by_reserve_and_the_audit_completes() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    for id in ["bad", "b", "c"] {
        push(&q, id, 0).await;
    }
    push(&q, "later", 3_600_000).await;
    poison(&redis, &q, "bad");
    poison(&redis, &q, "later");
    let got = q.reservations().reserve(&["t".into()], 10).await.unwrap();
    assert_eq!(got.len(), 2, "the two readable ready jobs");
    // The audit reads every record: it quarantines the second poisoned one, and finishes.
    let report = q.checker().audit().await.unwrap();
    assert_eq!(
        report.dangling_ids, 1,
        "the delay set's id of the quarantined record: {report:?}"
    );
    let mut ids: Vec<String> = q
        .admin()
        .quarantined()
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["bad", "later"]);
}

#[tokio::test]
async fn a_quarantined_record_can_be_dropped_or_put_back() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    push(&q, "x", 50).await;
    push(&q, "y", 50).await;
    let good = redis::cmd("GET")
        .arg(q.partition_keys(0).job("x"))
        .query::<Vec<u8>>(&mut redis.conn())
        .unwrap();
    poison(&redis, &q, "x");
    poison(&redis, &q, "y");
    eventually(Duration::from_secs(10), "the jobs are due and looked at", || async {
        q.timer().promote(0, 100).await.unwrap();
        q.admin().quarantined_count().await == 2
    })
    .await;
    assert!(q.admin().drop_quarantined("y").await.unwrap());
    assert!(!q.admin().drop_quarantined("y").await.unwrap());
    // Say an operator mended x's bytes in the quarantine: restoring puts the record and its id back.
    let entry_key = q.partition_keys(0).quarantine();
    let entry: Vec<u8> = redis::cmd("HGET")
        .arg(&entry_key)
        .arg("x")
        .query(&mut redis.conn())
        .unwrap();
    let head_end = entry.iter().position(|b| *b == b'\n').unwrap() + 1;
    let mended = [&entry[..head_end], &good[..]].concat();
    let _: () = redis::cmd("HSET")
        .arg(&entry_key)
        .arg("x")
        .arg(mended)
        .query(&mut redis.conn())
        .unwrap();
    q.admin().restore_quarantined("x").await.unwrap();
    assert_eq!(q.admin().quarantined_count().await, 0);
    assert_eq!(q.producer().get("x").await.unwrap().state, State::Delayed);
    eventually(Duration::from_secs(10), "x is promoted again", || async {
        q.timer().promote(0, 100).await.unwrap().moved == 1
    })
    .await;
    assert_eq!(q.reservations().reserve(&["t".into()], 10).await.unwrap()[0].id, "x");
}
