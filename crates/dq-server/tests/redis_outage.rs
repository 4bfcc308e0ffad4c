//! Redis going away and coming back: quick 503s, /readyz says so, service resumes by itself.

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, assert_error};
use serde_json::json;

#[tokio::test]
async fn redis_down_gives_quick_503_and_service_resumes() {
    let mut s = TestServer::start().await;
    s.push(json!({"topic": "t", "body": 1})).await;

    s.redis[0].stop();
    // The client's own timeout is 40 s: an answer at all proves the server does not hang on a dead Redis.
    for (method, path, body) in [
        ("POST", "/v1/jobs", Some(json!({"topic": "t", "body": 2}))),
        ("GET", "/v1/jobs/x", None),
        ("POST", "/v1/reserve", Some(json!({"topics": ["t"]}))),
        ("POST", "/v1/jobs/x/ack", Some(json!({"receipt": "r"}))),
    ] {
        let started = Instant::now();
        let (status, out) = s.call(method, path, body).await;
        assert_error(status, &out, 503, "unavailable");
        eprintln!("{method} {path}: 503 after {:?}", started.elapsed());
    }
    let (status, out) = s.call("GET", "/readyz", None).await;
    assert_eq!(status, 503, "{out}");
    assert_eq!(out["nodes"][0]["up"], false);
    let (status, _) = s.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "alive even without Redis");

    s.redis[0].restart();
    dq_harness::eventually(Duration::from_secs(30), "pushes work again", || async {
        s.call("POST", "/v1/jobs", Some(json!({"topic": "t", "body": 3})))
            .await
            .0
            == 201
    })
    .await;
    let (status, _) = s.call("GET", "/readyz", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        s.reserve(&["t"], 10, 0).await.len(),
        1,
        "the restarted Redis is empty but for the new push"
    );
}

#[tokio::test]
async fn long_poll_survives_a_redis_restart() {
    let mut s = TestServer::start().await;
    s.redis[0].stop();
    s.redis[0].restart();
    // After the pub/sub listener resubscribes, a long poll is woken by a push as before.
    dq_harness::eventually(Duration::from_secs(30), "pushes work again", || async {
        s.call("POST", "/v1/jobs", Some(json!({"topic": "warm", "body": 0})))
            .await
            .0
            == 201
    })
    .await;
    let waiter = {
        let (http, url) = (s.http.clone(), s.url("/v1/reserve"));
        tokio::spawn(async move {
            http.post(url)
                .json(&json!({"topics": ["after"], "timeout_ms": 30000}))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    dq_harness::eventually(Duration::from_secs(30), "the listener resubscribed", || async {
        let mut c = s.redis[0].conn();
        let n: i64 = redis::cmd("PUBSUB").arg("NUMPAT").query(&mut c).unwrap();
        n >= 1
    })
    .await;
    s.push(json!({"id": "a1", "topic": "after", "body": 1})).await;
    let out = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(out["jobs"][0]["id"], "a1");
}

/// Redis stalls (SIGSTOP) past every retry of a push: the answer is 503 with the id dq gave the job and a
/// message saying the outcome is unknown. Pushing again with that id, once Redis goes on, is 201 or 409
/// (the stalled attempt ran after all), and there is one job either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_with_an_unknown_outcome_names_its_id_and_is_stored_once() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "t", "body": 0})).await;
    s.redis[0].pause();
    let (status, out) = s
        .call("POST", "/v1/jobs", Some(json!({"topic": "t", "body": "lost?"})))
        .await;
    s.redis[0].resume();
    assert_error(status, &out, 503, "unavailable");
    let id = out["error"]["id"]
        .as_str()
        .expect("the id to push again with")
        .to_string();
    assert!(out["error"]["message"].as_str().unwrap().contains("unknown"), "{out}");
    let (status, out) = s
        .call(
            "POST",
            "/v1/jobs",
            Some(json!({"id": id, "topic": "t", "body": "lost?"})),
        )
        .await;
    assert!(status == 201 || status == 409, "{status} {out}");
    let (status, job) = s.call("GET", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["body"], "lost?");
    let jobs = s.reserve(&["t"], 10, 0).await;
    assert_eq!(jobs.len(), 2, "the first job and this one, once: {jobs:?}");
}

/// Fragments of redis-rs's and its connection pool's own error text, none of which may reach a client.
const REDIS_RS_TEXT: &[&str] = &[
    "os error",
    "Connection refused",
    "connection refused",
    "IoError",
    "- Io",
    "not sent",
    "bb8",
    "timed out",
    "Timed out",
    "broken pipe",
    "Broken pipe",
];

/// An `unavailable` answer (or, for a batch, each entry's) whose message is dq's own words (which
/// partition, and whether the call did not run or its outcome is unknown), never redis-rs's text: that
/// goes to the server's log.
fn assert_unavailable_in_dq_words(what: &str, status: reqwest::StatusCode, out: &serde_json::Value) {
    let errors: Vec<&serde_json::Value> = match out["results"].as_array() {
        Some(entries) if status == 200 => entries.iter().collect(),
        _ => {
            assert_error(status, out, 503, "unavailable");
            vec![out]
        }
    };
    assert!(!errors.is_empty(), "{what}: {out}");
    for e in errors {
        assert_eq!(e["error"]["code"], "unavailable", "{what}: {out}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        for fragment in REDIS_RS_TEXT {
            assert!(!message.contains(fragment), "{what}: {fragment:?} is redis-rs's: {out}");
        }
        assert!(
            message.contains("unavailable")
                || message.contains("outcome is unknown")
                || message.contains("out of memory"),
            "{what}: {out}"
        );
        eprintln!("{what}: {message}");
    }
}

/// Redis stopped, then stalled (SIGSTOP): every 503 says in dq's words what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_answer_is_in_dq_words_not_redis_rs_text() {
    let mut s = TestServer::start().await;
    s.push(json!({"id": "j1", "topic": "t", "body": 1})).await;
    let calls = [
        ("POST", "/v1/jobs", Some(json!({"topic": "t", "body": 2}))),
        ("POST", "/v1/jobs", Some(json!({"id": "j2", "topic": "t", "body": 2}))),
        (
            "POST",
            "/v1/jobs/batch",
            Some(json!({"jobs": [{"topic": "t", "body": 3}]})),
        ),
        ("GET", "/v1/jobs/j1", None),
        ("POST", "/v1/reserve", Some(json!({"topics": ["t"]}))),
        ("POST", "/v1/jobs/j1/ack", Some(json!({"receipt": "r"}))),
        ("DELETE", "/v1/jobs/j1", None),
    ];

    s.redis[0].stop();
    for (method, path, body) in calls.clone() {
        let (status, out) = s.call(method, path, body).await;
        assert_unavailable_in_dq_words(&format!("stopped: {method} {path}"), status, &out);
    }

    s.redis[0].restart();
    dq_harness::eventually(Duration::from_secs(30), "pushes work again", || async {
        s.call("POST", "/v1/jobs", Some(json!({"id": "j1", "topic": "t", "body": 1})))
            .await
            .0
            == 201
    })
    .await;
    s.redis[0].pause();
    for (method, path, body) in calls {
        let (status, out) = s.call(method, path, body).await;
        assert_unavailable_in_dq_words(&format!("stalled: {method} {path}"), status, &out);
    }
    s.redis[0].resume();
}
