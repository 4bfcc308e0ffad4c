//! Two shards: placement by id, reserve over both, and a shard down costing only its own jobs.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{TestServer, assert_error};
use serde_json::json;

fn count_jobs(r: &dq_harness::RedisServer) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg("dq:job:*").query(&mut r.conn()).unwrap();
    keys.len()
}

#[tokio::test]
async fn jobs_spread_over_shards_and_are_found_by_id() {
    let s = TestServer::with_shards(2).await;
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(
            s.push(json!({"topic": "t", "body": i})).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let (a, b) = (count_jobs(&s.redis[0]), count_jobs(&s.redis[1]));
    assert_eq!(a + b, 200);
    assert!(a > 50 && b > 50, "placement should spread: {a} / {b}");
    for id in ids.iter().take(20) {
        let (status, job) = s.call("GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{job}");
    }
    // Producer ids are placed by hash too, and found again.
    for i in 0..20 {
        s.push(json!({"id": format!("given-{i}"), "topic": "g", "body": i}))
            .await;
        let (status, _) = s.call("GET", &format!("/v1/jobs/given-{i}"), None).await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn reserve_drains_every_shard() {
    let s = TestServer::with_shards(2).await;
    for i in 0..100 {
        s.push(json!({"topic": "d", "body": i})).await;
    }
    let mut seen = HashMap::new();
    loop {
        let jobs = s.reserve(&["d"], 7, 0).await;
        if jobs.is_empty() {
            break;
        }
        for j in jobs {
            let id = j["id"].as_str().unwrap().to_string();
            let (status, _) = s
                .call(
                    "POST",
                    &format!("/v1/jobs/{id}/ack"),
                    Some(json!({"receipt": j["receipt"]})),
                )
                .await;
            assert_eq!(status, 204);
            *seen.entry(id).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), 100);
    assert!(seen.values().all(|n| *n == 1), "no job handed out twice");
}

#[tokio::test]
async fn a_shard_down_costs_only_its_own_jobs() {
    let mut s = TestServer::with_shards(2).await;
    // Find a producer id that lives on shard 1, and push it before the outage.
    let on_second = (0..)
        .map(|i| format!("p{i}"))
        .find(|id| dq_core::shard::shard_of(id, 2) == 1)
        .unwrap();
    s.push(json!({"id": on_second, "topic": "t", "body": 1})).await;
    s.redis[1].stop();

    // Pushes without an id land on the healthy shard (the first may discover the outage).
    let mut ok = 0;
    for i in 0..30 {
        let (status, out) = s.call("POST", "/v1/jobs", Some(json!({"topic": "t", "body": i}))).await;
        assert_eq!(status, 201, "push {i} while shard 1 is down: {out}");
        ok += 1;
    }
    assert_eq!(count_jobs(&s.redis[0]), ok);
    // The job on the down shard is unavailable, not lost or misplaced.
    let (status, out) = s.call("GET", &format!("/v1/jobs/{on_second}"), None).await;
    assert_error(status, &out, 503, "unavailable");
    let (status, out) = s
        .call(
            "POST",
            "/v1/jobs",
            Some(json!({"id": on_second, "topic": "t", "body": 2})),
        )
        .await;
    assert_error(status, &out, 503, "unavailable");
    // Reserve keeps working from the healthy shard.
    assert_eq!(s.reserve(&["t"], 100, 0).await.len(), 30);
    let (status, _) = s.call("GET", "/readyz", None).await;
    assert_eq!(status, 200, "one shard is enough to serve");

    s.redis[1].restart();
    dq_harness::eventually(Duration::from_secs(30), "the shard serves again", || async {
        s.call("GET", &format!("/v1/jobs/{on_second}"), None).await.0 == 404
    })
    .await;
}
