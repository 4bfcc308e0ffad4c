//! Producers' verbs over HTTP: push, push many, look up, cancel, reschedule.

mod common;

use common::{TestServer, assert_error};
use serde_json::json;

#[tokio::test]
async fn push_then_look_up() {
    let s = TestServer::start().await;
    let out = s
        .push(json!({"topic": "orders.close", "body": {"order": 42}, "delay_ms": 60000}))
        .await;
    assert_eq!(out["topic"], "orders.close");
    assert_eq!(out["state"], "delayed");
    let id = out["id"].as_str().unwrap();
    assert_eq!(id.len(), 26, "a ULID: {id}");

    let (status, job) = s.call("GET", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["body"], json!({"order": 42}));
    assert_eq!(job["state"], "delayed");
    assert_eq!(job["attempts"], 0);
    assert_eq!(job["max_attempts"], 10);
    assert_eq!(job["ttr_ms"], 30000);
    assert_eq!(job["run_at"], out["run_at"]);
    let created = job["created_at"].as_i64().unwrap();
    assert_eq!(
        job["run_at"].as_i64().unwrap() - created,
        60000,
        "due time computed on Redis's clock"
    );
}

#[tokio::test]
async fn push_due_now_is_ready_and_past_run_at_too() {
    let s = TestServer::start().await;
    let a = s.push(json!({"topic": "t", "body": 1})).await;
    assert_eq!(a["state"], "ready");
    let b = s.push(json!({"topic": "t", "body": 2, "run_at": 1000})).await;
    assert_eq!(b["state"], "ready");
    assert_eq!(b["run_at"], 1000);
}

#[tokio::test]
async fn given_id_is_an_idempotency_key() {
    let s = TestServer::start().await;
    let out = s
        .push(json!({"id": "order:1", "topic": "t", "body": "first", "delay_ms": 1000}))
        .await;
    assert_eq!(out["id"], "order:1");
    let before = s.snapshot();
    let (status, err) = s
        .call(
            "POST",
            "/v1/jobs",
            Some(json!({"id": "order:1", "topic": "t", "body": "second"})),
        )
        .await;
    assert_error(status, &err, 409, "conflict");
    assert_eq!(s.snapshot(), before, "a conflicting push overwrites nothing");
    let (_, job) = s.call("GET", "/v1/jobs/order:1", None).await;
    assert_eq!(job["body"], "first");
}

#[tokio::test]
async fn a_push_inside_a_dedup_window_answers_200_with_the_first_job() {
    let s = TestServer::start().await;
    let push = json!({"topic": "t", "body": "first", "delay_ms": 60000, "dedup_key": "order:9", "dedup_ms": 60000});
    let (status, first) = s.call("POST", "/v1/jobs", Some(push)).await;
    assert_eq!(status, 201, "{first}");
    assert!(first.get("duplicate").is_none(), "{first}");
    let before = s.snapshot();
    let again = json!({"topic": "t", "body": "second", "dedup_key": "order:9", "dedup_ms": 60000});
    let (status, out) = s.call("POST", "/v1/jobs", Some(again.clone())).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["duplicate"], true);
    for field in ["id", "topic", "state", "run_at"] {
        assert_eq!(out[field], first[field], "{field}: {out} vs {first}");
    }
    assert_eq!(s.snapshot(), before, "a duplicate writes nothing");
    // In a batch, each entry answers for itself.
    let batch = json!({"jobs": [again, {"topic": "t", "body": 3, "dedup_key": "other", "dedup_ms": 60000},
                                {"topic": "t", "body": 4, "dedup_key": "other", "dedup_ms": 60000}]});
    let (status, out) = s.call("POST", "/v1/jobs/batch", Some(batch)).await;
    assert_eq!(status, 200, "{out}");
    let r = out["results"].as_array().unwrap();
    assert_eq!(
        (r[0]["id"].clone(), r[0]["duplicate"].clone()),
        (first["id"].clone(), json!(true))
    );
    assert!(r[1].get("duplicate").is_none(), "{out}");
    assert_eq!(
        (r[2]["id"].clone(), r[2]["duplicate"].clone()),
        (r[1]["id"].clone(), json!(true))
    );
    let (_, job) = s
        .call("GET", &format!("/v1/jobs/{}", first["id"].as_str().unwrap()), None)
        .await;
    assert_eq!(job["body"], "first");
    s.wait_for_metric("dq_jobs_deduplicated_total{topic=\"t\"} 3").await;
}

#[tokio::test]
async fn push_many_answers_in_order_with_per_job_conflicts() {
    let s = TestServer::start().await;
    s.push(json!({"id": "dup", "topic": "t", "body": 0})).await;
    let jobs = json!({"jobs": [
        {"topic": "a", "body": 1, "delay_ms": 5000},
        {"id": "dup", "topic": "t", "body": 2},
        {"id": "new", "topic": "b", "body": 3},
    ]});
    let (status, out) = s.call("POST", "/v1/jobs/batch", Some(jobs)).await;
    assert_eq!(status, 200, "{out}");
    let r = out["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r[0]["state"], "delayed");
    assert_eq!(r[1]["error"]["code"], "conflict");
    assert_eq!(r[2]["id"], "new");
    assert_eq!(r[2]["state"], "ready");
    let (status, _) = s
        .call("GET", &format!("/v1/jobs/{}", r[0]["id"].as_str().unwrap()), None)
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn cancel_removes_the_job_in_any_state() {
    let s = TestServer::start().await;
    let delayed = s.push(json!({"topic": "t", "body": 1, "delay_ms": 60000})).await;
    let ready = s.push(json!({"topic": "t", "body": 2})).await;
    let reserved = s.push(json!({"topic": "r", "body": 3})).await;
    assert_eq!(s.reserve(&["r"], 1, 0).await.len(), 1);
    for job in [&delayed, &ready, &reserved] {
        let path = format!("/v1/jobs/{}", job["id"].as_str().unwrap());
        let (status, _) = s.call("DELETE", &path, None).await;
        assert_eq!(status, 204);
        let (status, body) = s.call("GET", &path, None).await;
        assert_error(status, &body, 404, "not_found");
        let (status, body) = s.call("DELETE", &path, None).await;
        assert_error(status, &body, 404, "not_found");
    }
    // Only the partitions' counts hashes, the deadline announced to the timers (until a timer's expiry
    // call clears it) and the layout record remain.
    let keys: Vec<String> = s.snapshot().into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&"{dq}:layout".to_string()), "{keys:?}");
    assert!(
        keys.iter()
            .all(|k| k == "{dq}:layout" || k.ends_with(":counts") || k.ends_with(":announced")),
        "{keys:?}"
    );
    assert!(s.reserve(&["t", "r"], 10, 0).await.is_empty());
}

#[tokio::test]
async fn reschedule_moves_delayed_and_ready_jobs_only() {
    let s = TestServer::start().await;
    let job = s.push(json!({"topic": "t", "body": 1, "delay_ms": 600000})).await;
    let path = format!("/v1/jobs/{}", job["id"].as_str().unwrap());

    let (status, out) = s.call("PATCH", &path, Some(json!({"delay_ms": 0}))).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["state"], "ready");
    let (status, out) = s.call("PATCH", &path, Some(json!({"delay_ms": 300000}))).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["state"], "delayed");
    assert!(s.reserve(&["t"], 1, 0).await.is_empty(), "delayed again");
    let (_, out) = s.call("PATCH", &path, Some(json!({"run_at": 5}))).await;
    assert_eq!(out["state"], "ready");
    assert_eq!(out["run_at"], 5);

    let got = s.reserve(&["t"], 1, 0).await;
    assert_eq!(got.len(), 1);
    let (status, body) = s.call("PATCH", &path, Some(json!({"delay_ms": 10}))).await;
    assert_error(status, &body, 409, "conflict");
    let (status, body) = s.call("PATCH", "/v1/jobs/nope", Some(json!({"delay_ms": 10}))).await;
    assert_error(status, &body, 404, "not_found");
}

/// Ready jobs go out by priority, then due time; a look-up shows the priority (1024 when the push gave
/// none); PATCH with `priority` alone moves a ready job ahead and keeps its due time. One partition, so
/// the topic has one ready queue and the order is exact (across partitions, see api.md).
#[tokio::test]
async fn priorities_order_what_is_ready() {
    let redis = vec![dq_harness::RedisServer::start()];
    let mut settings = common::settings(&redis);
    settings.redis.partitions = Some(1);
    let s = TestServer::with_settings(redis, settings).await;
    let plain = s.push(json!({"topic": "t", "body": "plain", "run_at": 5})).await;
    let low = s
        .push(json!({"topic": "t", "body": "low", "run_at": 1, "priority": 4000}))
        .await;
    let urgent = s.push(json!({"topic": "t", "body": "urgent", "priority": 0})).await;
    let id = |j: &serde_json::Value| j["id"].as_str().unwrap().to_string();
    let (_, got) = s.call("GET", &format!("/v1/jobs/{}", id(&plain)), None).await;
    assert_eq!(got["priority"], 1024);
    let (_, got) = s.call("GET", &format!("/v1/jobs/{}", id(&urgent)), None).await;
    assert_eq!(got["priority"], 0);

    let (status, out) = s
        .call("PATCH", &format!("/v1/jobs/{}", id(&low)), Some(json!({"priority": 1})))
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        (out["priority"].as_u64(), out["run_at"].as_i64(), out["state"].as_str()),
        (Some(1), Some(1), Some("ready"))
    );

    let mut order = Vec::new();
    for _ in 0..3 {
        let got = s.reserve(&["t"], 1, 0).await;
        order.push(got[0]["body"].as_str().unwrap().to_string());
    }
    assert_eq!(order, ["urgent", "low", "plain"]);
}

/// A coalescing key over HTTP: 201 for the push that makes the job, 200 with `"coalesced": true` and
/// that job's id for the pushes that go into it, in a batch too.
#[tokio::test]
async fn coalesced_pushes_answer_200_with_the_pending_job() {
    let s = TestServer::start().await;
    let merge = |n: u32| {
        json!({"topic": "digest", "body": {"n": n}, "coalesce_key": "member:7",
               "coalesce": {"mode": "merge", "window_ms": 600000}})
    };
    let (status, first) = s.call("POST", "/v1/jobs", Some(merge(1))).await;
    assert_eq!(status, 201, "{first}");
    assert!(first.get("coalesced").is_none(), "{first}");
    let (status, second) = s.call("POST", "/v1/jobs", Some(merge(2))).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!((&second["id"], &second["coalesced"]), (&first["id"], &json!(true)));
    let (status, batch) = s
        .call("POST", "/v1/jobs/batch", Some(json!({"jobs": [merge(3), merge(4)]})))
        .await;
    assert_eq!(status, 200, "{batch}");
    for r in batch["results"].as_array().unwrap() {
        assert_eq!((&r["id"], &r["coalesced"]), (&first["id"], &json!(true)), "{r}");
    }
    let (_, job) = s
        .call("GET", &format!("/v1/jobs/{}", first["id"].as_str().unwrap()), None)
        .await;
    assert_eq!(job["body"], json!({"items": [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]}));
    // A dedup_key duplicate says both.
    let dedup = json!({"topic": "t", "body": 1, "dedup_key": "d", "dedup_ms": 60000});
    s.call("POST", "/v1/jobs", Some(dedup.clone())).await;
    let (status, dup) = s.call("POST", "/v1/jobs", Some(dedup)).await;
    assert_eq!(status, 200);
    assert_eq!((&dup["duplicate"], &dup["coalesced"]), (&json!(true), &json!(true)));
}

#[tokio::test]
async fn stats_count_per_topic_and_state() {
    let s = TestServer::start().await;
    for i in 0..3 {
        s.push(json!({"topic": "a", "body": i, "delay_ms": 60000})).await;
    }
    for i in 0..2 {
        s.push(json!({"topic": "b", "body": i})).await;
    }
    s.reserve(&["b"], 1, 0).await;
    let (status, st) = s.call("GET", "/v1/stats", None).await;
    assert_eq!(status, 200);
    assert_eq!(st["topics"]["a"]["delayed"], 3);
    assert_eq!(st["topics"]["b"]["ready"], 1);
    assert_eq!(st["topics"]["b"]["reserved"], 1);
    assert_eq!(st["redis"]["nodes"][0]["up"], true);
    assert_eq!(st["redis"]["mode"], "standalone");
    assert_eq!(st["redis"]["partitions"], 256);
}

/// A registered topic without jobs, and a topic whose jobs are all gone, stay listed with zeros in
/// `GET /v1/stats` and `GET /v1/topics` (a script waiting for a topic to drain sees it reach 0).
#[tokio::test]
async fn drained_and_registered_topics_stay_listed_with_zeros() {
    let s = TestServer::start().await;
    let (status, body) = s.call("PUT", "/v1/topics/quiet", Some(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    s.push(json!({"id": "d1", "topic": "drained", "body": 1})).await;
    let job = &s.reserve(&["drained"], 1, 0).await[0];
    let (status, _) = s
        .call("POST", "/v1/jobs/d1/ack", Some(json!({"receipt": job["receipt"]})))
        .await;
    assert_eq!(status, 204);
    let zeros = json!({"dead": 0, "delayed": 0, "ready": 0, "reserved": 0});
    let (status, st) = s.call("GET", "/v1/stats", None).await;
    assert_eq!(status, 200, "{st}");
    for topic in ["quiet", "drained"] {
        assert_eq!(st["topics"][topic], zeros, "{topic} in {st}");
    }
    let (status, list) = s.call("GET", "/v1/topics", None).await;
    assert_eq!(status, 200, "{list}");
    for topic in ["quiet", "drained"] {
        let t = list["topics"].as_array().unwrap().iter().find(|t| t["topic"] == topic);
        assert_eq!(t.map(|t| t["counts"].clone()), Some(zeros.clone()), "{topic} in {list}");
    }
}

#[tokio::test]
async fn probes_and_metrics() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "m", "body": 1})).await;
    let (status, body) = s.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.call("GET", "/readyz", None).await;
    assert_eq!(status, 200, "{body}");
    let text = s.text("/metrics").await;
    assert!(text.contains("dq_jobs_pushed_total"), "{text}");
}
