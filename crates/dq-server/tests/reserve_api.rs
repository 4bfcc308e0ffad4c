//! Pull consumers' verbs over HTTP: reserve, long poll, ack, nack, touch, receipts.

mod common;

use std::time::Duration;

use common::{TestServer, assert_error};
use serde_json::json;

#[tokio::test]
async fn reserve_takes_topics_in_priority_order_and_count() {
    let s = TestServer::start().await;
    for i in 0..3 {
        s.push(json!({"topic": "low", "body": i})).await;
    }
    for i in 0..2 {
        s.push(json!({"topic": "high", "body": i})).await;
    }
    let jobs = s.reserve(&["high", "low"], 3, 0).await;
    let topics: Vec<_> = jobs.iter().map(|j| j["topic"].as_str().unwrap()).collect();
    assert_eq!(topics, ["high", "high", "low"]);
    for j in &jobs {
        assert_eq!(j["attempt"], 1);
        assert!(j["receipt"].as_str().is_some_and(|r| !r.is_empty()));
        assert!(j["deadline"].as_i64().unwrap() > 0);
    }
    let receipts: std::collections::HashSet<_> = jobs.iter().map(|j| j["receipt"].as_str().unwrap()).collect();
    assert_eq!(receipts.len(), 3, "each reservation has its own receipt");
    assert_eq!(s.reserve(&["high", "low"], 10, 0).await.len(), 2);
    assert!(s.reserve(&["high", "low"], 10, 0).await.is_empty());
}

/// Within a partition, a topic's ready jobs come out by due time (across partitions there is no global
/// order: docs/architecture.md#ordering); one partition makes every job share it.
#[tokio::test]
async fn ready_jobs_come_out_in_due_order() {
    let redis = vec![dq_harness::RedisServer::start()];
    let mut settings = common::settings(&redis);
    settings.redis.partitions = Some(1);
    let s = TestServer::with_settings(redis, settings).await;
    s.push(json!({"id": "late", "topic": "t", "body": 1, "run_at": 3000}))
        .await;
    s.push(json!({"id": "early", "topic": "t", "body": 1, "run_at": 1000}))
        .await;
    s.push(json!({"id": "mid", "topic": "t", "body": 1, "run_at": 2000}))
        .await;
    let ids: Vec<_> = s
        .reserve(&["t"], 3, 0)
        .await
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["early", "mid", "late"]);
}

#[tokio::test]
async fn ack_finishes_and_keeps_the_record_as_done() {
    let s = TestServer::start().await;
    s.push(json!({"id": "j1", "topic": "t", "body": {"x": 1}})).await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    let (status, _) = s
        .call("POST", "/v1/jobs/j1/ack", Some(json!({"receipt": job["receipt"]})))
        .await;
    assert_eq!(status, 204);
    let (_, got) = s.call("GET", "/v1/jobs/j1", None).await;
    assert_eq!(got["state"], "done");
    assert_eq!(got["attempts"], 1);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(s.key("j1", "job:j1"))
        .query(&mut s.redis[0].conn())
        .unwrap();
    assert!(ttl > 0, "done records expire after the retention period");
    let (status, body) = s
        .call("POST", "/v1/jobs/j1/ack", Some(json!({"receipt": job["receipt"]})))
        .await;
    assert_error(status, &body, 409, "stale_receipt");
}

#[tokio::test]
async fn ack_many_answers_per_entry_in_order() {
    let s = TestServer::start().await;
    for id in ["a", "b", "c"] {
        s.push(json!({"id": id, "topic": "t", "body": 1})).await;
    }
    let jobs = s.reserve(&["t"], 3, 0).await;
    let receipt = |id: &str| jobs.iter().find(|j| j["id"] == id).unwrap()["receipt"].clone();
    let acks = json!({"acks": [
        {"id": "a", "receipt": receipt("a")},
        {"id": "b", "receipt": "not-the-receipt"},
        {"id": "gone", "receipt": "r"},
        {"id": "c", "receipt": receipt("c")},
        {"id": "a", "receipt": receipt("a")},
    ]});
    let (status, out) = s.call("POST", "/v1/jobs/ack", Some(acks)).await;
    assert_eq!(status, 200, "{out}");
    let r = out["results"].as_array().unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(r[1]["error"]["code"], "stale_receipt");
    assert_eq!(r[2]["error"]["code"], "not_found");
    assert_eq!(r[3], json!({}));
    // The same ack twice in one request: one of the two finished the job, the other is stale.
    let mut twice = [&r[0], &r[4]].map(|e| e["error"]["code"].as_str().unwrap_or("ok").to_string());
    twice.sort();
    assert_eq!(twice, ["ok", "stale_receipt"], "{out}");
    for (id, state) in [("a", "done"), ("b", "reserved"), ("c", "done")] {
        let (_, job) = s.call("GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(job["state"], state, "{id}: {job}");
    }
    // A malformed entry refuses the whole request: nothing acked.
    let before = s.snapshot();
    for bad in [
        json!({"acks": []}),
        json!({"acks": [{"id": "b", "receipt": receipt("b")}, {"id": "a b", "receipt": "r"}]}),
        json!({"acks": [{"id": "b", "receipt": receipt("b")}, {"id": "c", "receipt": ""}]}),
        json!({"acks": [{"id": "b", "receipt": receipt("b")}, {"id": "c"}]}),
        json!({"acks": [{"id": "b", "receipt": receipt("b"), "extra": 1}]}),
        json!({"acks": (0..1001).map(|i| json!({"id": format!("j{i}"), "receipt": "r"})).collect::<Vec<_>>()}),
        json!({"ack": []}),
    ] {
        let (status, body) = s.call("POST", "/v1/jobs/ack", Some(bad.clone())).await;
        assert_error(status, &body, 400, "invalid_argument");
        assert_eq!(s.snapshot(), before, "{bad} wrote something");
    }
}

/// `ack` and `batch` name routes (`POST /v1/jobs/ack`, `POST /v1/jobs/batch`): a push may not give them
/// as ids, alone or in a batch, and nothing is written; the paths serve only their own verbs.
#[tokio::test]
async fn the_ids_ack_and_batch_are_refused_at_push() {
    let s = TestServer::start().await;
    let before = s.snapshot();
    for id in ["ack", "batch"] {
        let (status, body) = s
            .call("POST", "/v1/jobs", Some(json!({"id": id, "topic": "t", "body": 1})))
            .await;
        assert_error(status, &body, 400, "invalid_argument");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("names a route"),
            "{body}"
        );
        let (status, body) = s
            .call(
                "POST",
                "/v1/jobs/batch",
                Some(json!({"jobs": [{"topic": "t", "body": 1}, {"id": id, "topic": "t", "body": 2}]})),
            )
            .await;
        assert_error(status, &body, 400, "invalid_argument");
        for method in ["GET", "DELETE", "PATCH"] {
            let (status, body) = s.call(method, &format!("/v1/jobs/{id}"), None).await;
            assert_eq!(status.as_u16(), 405, "{method} /v1/jobs/{id}: {body}");
        }
    }
    assert_eq!(s.snapshot(), before, "a refused id wrote something");
    // Ids that only start so are ids like any other.
    s.push(json!({"id": "acks", "topic": "t", "body": 1})).await;
    let (status, job) = s.call("GET", "/v1/jobs/acks", None).await;
    assert_eq!((status.as_u16(), job["id"].clone()), (200, json!("acks")), "{job}");
}

/// The reserve answer carries the reservation's length, so a worker touches at half of it without
/// comparing its clock to Redis's `deadline`.
#[tokio::test]
async fn a_reservation_says_its_ttr() {
    let s = TestServer::start().await;
    s.push(json!({"id": "j", "topic": "t", "body": 1, "ttr_ms": 45000}))
        .await;
    s.push(json!({"id": "k", "topic": "t", "body": 1})).await;
    let jobs = s.reserve(&["t"], 2, 0).await;
    let ttr = |id: &str| jobs.iter().find(|j| j["id"] == id).unwrap()["ttr_ms"].clone();
    assert_eq!(ttr("j"), json!(45000), "{jobs:?}");
    assert_eq!(ttr("k"), json!(30000), "the default TTR: {jobs:?}");
}

#[tokio::test]
async fn wrong_receipt_is_refused_and_changes_nothing() {
    let s = TestServer::start().await;
    s.push(json!({"id": "j", "topic": "t", "body": 1})).await;
    s.reserve(&["t"], 1, 0).await;
    let before = s.snapshot();
    for verb in ["ack", "nack", "touch"] {
        let (status, body) = s
            .call(
                "POST",
                &format!("/v1/jobs/j/{verb}"),
                Some(json!({"receipt": "not-it"})),
            )
            .await;
        assert_error(status, &body, 409, "stale_receipt");
    }
    assert_eq!(s.snapshot(), before);
    for verb in ["ack", "nack", "touch"] {
        let (status, body) = s
            .call("POST", &format!("/v1/jobs/nope/{verb}"), Some(json!({"receipt": "r"})))
            .await;
        assert_error(status, &body, 404, "not_found");
    }
}

#[tokio::test]
async fn nack_backs_off_then_goes_dead_after_max_attempts() {
    let s = TestServer::start().await;
    s.push(json!({"id": "n", "topic": "t", "body": 1, "max_attempts": 2}))
        .await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    let (status, _) = s
        .call(
            "POST",
            "/v1/jobs/n/nack",
            Some(json!({"receipt": job["receipt"], "error": "boom"})),
        )
        .await;
    assert_eq!(status, 204);
    let (_, got) = s.call("GET", "/v1/jobs/n", None).await;
    assert_eq!(got["state"], "delayed");
    assert_eq!(got["last_error"], "boom");
    // Default backoff: 1 minute after the first failure.
    assert!(got["run_at"].as_i64().unwrap() >= job["deadline"].as_i64().unwrap() - 30_000 + 60_000 - 1000);

    // A nack with delay 0 comes straight back to ready.
    s.call("PATCH", "/v1/jobs/n", Some(json!({"delay_ms": 0}))).await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    assert_eq!(job["attempt"], 2);
    let (status, _) = s
        .call(
            "POST",
            "/v1/jobs/n/nack",
            Some(json!({"receipt": job["receipt"], "delay_ms": 0})),
        )
        .await;
    assert_eq!(status, 204);
    let (_, got) = s.call("GET", "/v1/jobs/n", None).await;
    assert_eq!(got["state"], "dead", "second failure of max 2 attempts");
    let dead: Vec<String> = redis::cmd("ZRANGE")
        .arg(s.key("n", "dead:t"))
        .arg(0)
        .arg(-1)
        .query(&mut s.redis[0].conn())
        .unwrap();
    assert_eq!(dead, ["n"]);
}

#[tokio::test]
async fn nack_with_zero_delay_is_ready_at_once() {
    let s = TestServer::start().await;
    s.push(json!({"id": "z", "topic": "t", "body": 1})).await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    s.call(
        "POST",
        "/v1/jobs/z/nack",
        Some(json!({"receipt": job["receipt"], "delay_ms": 0})),
    )
    .await;
    let again = s.reserve(&["t"], 1, 0).await;
    assert_eq!(again[0]["attempt"], 2);
    assert_ne!(again[0]["receipt"], job["receipt"]);
}

#[tokio::test]
async fn touch_extends_the_deadline() {
    let s = TestServer::start().await;
    s.push(json!({"id": "x", "topic": "t", "body": 1, "ttr_ms": 5000}))
        .await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    let (status, out) = s
        .call(
            "POST",
            "/v1/jobs/x/touch",
            Some(json!({"receipt": job["receipt"], "ttr_ms": 600000})),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert!(out["deadline"].as_i64().unwrap() >= job["deadline"].as_i64().unwrap() + 590_000);
    let score: f64 = redis::cmd("ZSCORE")
        .arg(s.key("x", "reserved"))
        .arg("x")
        .query(&mut s.redis[0].conn())
        .unwrap();
    assert_eq!(score as i64, out["deadline"].as_i64().unwrap());
}

#[tokio::test]
async fn long_poll_returns_when_a_job_is_pushed() {
    let s = TestServer::start().await;
    let waiter = {
        let (http, url) = (s.http.clone(), s.url("/v1/reserve"));
        tokio::spawn(async move {
            let resp = http
                .post(url)
                .json(&json!({"topics": ["lp"], "timeout_ms": 30000}))
                .send()
                .await
                .unwrap();
            resp.json::<serde_json::Value>().await.unwrap()
        })
    };
    // Let the waiter reach its wait: it subscribes before it looks, so any order is correct.
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.push(json!({"id": "woken", "topic": "lp", "body": 1})).await;
    let out = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("long poll answered")
        .unwrap();
    assert_eq!(out["jobs"][0]["id"], "woken", "{out}");
}

#[tokio::test]
async fn long_poll_returns_an_empty_list_at_its_timeout() {
    let s = TestServer::start().await;
    let jobs = s.reserve(&["quiet"], 1, 300).await;
    assert!(jobs.is_empty());
}

#[tokio::test]
async fn many_long_polls_share_few_jobs_without_duplicates() {
    let s = TestServer::start().await;
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let (http, url) = (s.http.clone(), s.url("/v1/reserve"));
            tokio::spawn(async move {
                let resp = http
                    .post(url)
                    .json(&json!({"topics": ["many"], "timeout_ms": 3000}))
                    .send()
                    .await
                    .unwrap();
                resp.json::<serde_json::Value>().await.unwrap()
            })
        })
        .collect();
    for i in 0..5 {
        s.push(json!({"id": format!("m{i}"), "topic": "many", "body": i})).await;
    }
    let mut got = Vec::new();
    for w in waiters {
        for j in w.await.unwrap()["jobs"].as_array().unwrap() {
            got.push(j["id"].as_str().unwrap().to_string());
        }
    }
    got.sort();
    assert_eq!(got, ["m0", "m1", "m2", "m3", "m4"]);
}

/// Every pull attempt is on record with its job, newest first: a nack and an ack, each with the name the
/// worker gave; a job that does not exist is a 404, a bad id a 400.
#[tokio::test]
async fn attempts_show_each_pull_delivery() {
    let s = TestServer::start().await;
    s.push(json!({"id": "h1", "topic": "t", "body": 1})).await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    let (status, _) = s
        .call(
            "POST",
            "/v1/jobs/h1/nack",
            Some(json!({"receipt": job["receipt"], "delay_ms": 0, "error": "not now", "consumer": "worker-7"})),
        )
        .await;
    assert_eq!(status, 204);
    let job = &s.reserve(&["t"], 1, 0).await[0];
    let (status, body) = s
        .call(
            "POST",
            "/v1/jobs/ack",
            Some(json!({"acks": [{"id": "h1", "receipt": job["receipt"], "consumer": "worker-8"}]})),
        )
        .await;
    assert_eq!((status.as_u16(), &body["results"][0]), (200, &json!({})));
    let (status, got) = s.call("GET", "/v1/jobs/h1/attempts", None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!((&got["id"], &got["attempts"]), (&json!("h1"), &json!(2)));
    let history = got["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        (&history[0]["attempt"], &history[0]["outcome"], &history[0]["consumer"]),
        (&json!(2), &json!("acked"), &json!("worker-8"))
    );
    assert_eq!(
        (&history[1]["outcome"], &history[1]["error"], &history[1]["consumer"]),
        (&json!("nacked"), &json!("not now"), &json!("worker-7"))
    );
    for a in history {
        assert!(
            a["started_at"].as_i64().unwrap() > 0 && a["duration_ms"].as_u64().is_some(),
            "{a}"
        );
        assert!(a.get("status").is_none() && a.get("answer").is_none(), "{a}");
    }
    let (status, body) = s.call("GET", "/v1/jobs/nope/attempts", None).await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = s.call("GET", "/v1/jobs/b%20d/attempts", None).await;
    assert_error(status, &body, 400, "invalid_argument");
}

/// A `consumer` name that is empty, too long or holds control characters is a 400, and the reservation
/// is left as it was.
#[tokio::test]
async fn a_bad_consumer_name_is_refused_and_changes_nothing() {
    let s = TestServer::start().await;
    s.push(json!({"id": "c1", "topic": "t", "body": 1})).await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    let before = s.snapshot();
    for bad in [json!(""), json!("x".repeat(129)), json!("tab\there"), json!(7)] {
        for (path, body) in [
            ("/v1/jobs/c1/ack", json!({"receipt": job["receipt"], "consumer": bad})),
            ("/v1/jobs/c1/nack", json!({"receipt": job["receipt"], "consumer": bad})),
            (
                "/v1/jobs/ack",
                json!({"acks": [{"id": "c1", "receipt": job["receipt"], "consumer": bad}]}),
            ),
        ] {
            let (status, got) = s.call("POST", path, Some(body)).await;
            assert_error(status, &got, 400, "invalid_argument");
        }
    }
    assert_eq!(s.snapshot(), before);
}
