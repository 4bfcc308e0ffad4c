//! A reserve of one topic whose ready jobs are spread over many partitions asks them side by side, each
//! for its share of the jobs wanted, and asks again those that gave their whole share: it gets all it
//! asked for while there are jobs, each job once, on a single Redis and on a cluster.

use std::collections::{HashMap, HashSet};

use dq_core::{Queue, Settings, State};
use dq_harness::{RedisCluster, RedisServer};

mod common;

/// Ids of `topic` for 20 jobs in one partition and one job in each of 9 others.
fn uneven_ids(q: &Queue, topic: &str) -> Vec<String> {
    let big = q.partitions().of_id(&format!("{topic}-0"));
    let (mut in_big, mut others) = (Vec::new(), HashMap::new());
    for i in 0.. {
        let id = format!("{topic}-{i}");
        let p = q.partitions().of_id(&id);
        if p == big {
            if in_big.len() < 20 {
                in_big.push(id);
            }
        } else if others.len() < 9 {
            others.entry(p).or_insert(id);
        }
        if in_big.len() == 20 && others.len() == 9 {
            break;
        }
    }
    in_big.into_iter().chain(others.into_values()).collect()
}

async fn push_ready(q: &Queue, topic: &str, ids: &[String]) {
    let jobs = ids
        .iter()
        .map(|id| {
            let req = serde_json::from_value(serde_json::json!({"id": id, "topic": topic, "body": 1})).unwrap();
            q.producer().validate(req).unwrap()
        })
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
}

/// 29 jobs, 20 of them in one partition: a reserve of 25 gets 25, the next the 4 left, each job once.
async fn spread_thin(q: &Queue) {
    let topic = "spread";
    let ids = uneven_ids(q, topic);
    assert_eq!(ids.len(), 29);
    push_ready(q, topic, &ids).await;
    let topics = [topic.to_string()];
    let first = q.reservations().reserve(&topics, 25).await.unwrap();
    assert_eq!(first.len(), 25, "every job asked for, while there are more");
    let second = q.reservations().reserve(&topics, 10).await.unwrap();
    assert_eq!(second.len(), 4, "the jobs left");
    assert!(q.reservations().reserve(&topics, 10).await.unwrap().is_empty());
    let got: HashSet<&str> = first.iter().chain(&second).map(|r| r.id.as_str()).collect();
    assert_eq!(got.len(), 29, "no job twice");
    assert_eq!(got, ids.iter().map(String::as_str).collect::<HashSet<_>>());
    for r in first.iter().chain(&second) {
        assert_eq!(
            q.producer().get(&r.id).await.unwrap().state,
            State::Reserved,
            "{}",
            r.id
        );
    }
}

#[tokio::test]
async fn a_reserve_spread_over_partitions_gets_all_it_asked_for_on_a_single_redis() {
    let redis = RedisServer::start();
    let mut s: Settings = common::standalone(&redis);
    s.redis.partitions = Some(64);
    spread_thin(&Queue::connect(&s).await.unwrap()).await;
}

#[tokio::test]
async fn a_reserve_spread_over_partitions_gets_all_it_asked_for_on_a_cluster() {
    let cluster = RedisCluster::start();
    let mut s: Settings = common::cluster(&cluster);
    s.redis.partitions = Some(64);
    spread_thin(&Queue::connect(&s).await.unwrap()).await;
}
