//! Hand-offs with the real processes: a timer hands due jobs straight to the dq-consumer that waits for
//! their topic (no ready queue, no reserve call), every job is delivered exactly once, and a consumer
//! killed with -9 while jobs are handed to it loses none.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Running, call, env, metric_sum, start, start_on};
use dq_harness::{RedisServer, WebhookSink, eventually, free_port};
use serde_json::{Value, json};

/// How many times the sink received each job id.
fn received(sink: &WebhookSink) -> HashMap<String, usize> {
    let mut per = HashMap::new();
    for body in sink.received.lock().unwrap().iter() {
        if let Some(id) = body["id"].as_str() {
            *per.entry(id.to_string()).or_default() += 1;
        }
    }
    per
}

async fn push_spread(http: &reqwest::Client, base: &str, topic: &str, n: u64, first_ms: u64, step_ms: u64) {
    for i in 0..n {
        let resp = http
            .post(format!("{base}/v1/jobs"))
            .json(&json!({"id": format!("{topic}-{i}"), "topic": topic, "body": i, "delay_ms": first_ms + i * step_ms}))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    }
}

async fn consumer_vars(redis: &RedisServer, port: u16) -> Vec<(&'static str, String)> {
    let mut vars = env(&[redis], port);
    vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
    vars
}

/// A Redis, dq-server, dq-timer and a dq-consumer, and `topic` registered with `callback` (its `url` set to
/// a sink's).
struct Setup {
    redis: RedisServer,
    timer: Running,
    consumer: Running,
    sink: WebhookSink,
    base: String,
    http: reqwest::Client,
    _server: Running,
}

async fn setup(topic: &str, mut callback: Value) -> Setup {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let timer = start("dq-timer", &[&redis]).await;
    let cp = free_port();
    let consumer = start_on("dq-consumer", cp, consumer_vars(&redis, cp).await).await;
    let sink = WebhookSink::start().await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    callback["url"] = json!(sink.url);
    let resp = http
        .put(format!("{base}/v1/topics/{topic}"))
        .json(&json!({ "callback": callback }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    Setup {
        redis,
        timer,
        consumer,
        sink,
        base,
        http,
        _server: server,
    }
}

/// Waits until the `n` jobs `<topic>-<i>` were received by the sink and are `done`.
async fn all_done(s: &Setup, topic: &str, n: u64) {
    eventually(Duration::from_secs(90), &format!("{n} jobs delivered"), || async {
        received(&s.sink).len() == n as usize
    })
    .await;
    for id in (0..n).map(|i| format!("{topic}-{i}")) {
        eventually(Duration::from_secs(60), &format!("{id} is done"), || async {
            let job: Value = s
                .http
                .get(format!("{}/v1/jobs/{id}", s.base))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            job["state"] == "done"
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_consumer_gets_due_jobs_handed_and_each_is_delivered_once() {
    let s = setup("spread", json!({})).await;
    // Due one by one, from 1.5 s on: the consumer waits between them.
    push_spread(&s.http, &s.base, "spread", 40, 1500, 50).await;
    all_done(&s, "spread", 40).await;
    let per = received(&s.sink);
    assert!(per.values().all(|n| *n == 1), "delivered more than once: {per:?}");
    let handed = metric_sum(s.timer.port, "dq_jobs_handed_off_total").await;
    let taken = metric_sum(s.consumer.port, "dq_consumer_handed_total").await;
    assert!(handed > 0.0, "the timer handed no job to the waiting consumer");
    assert_eq!(handed, taken, "every job handed reached the consumer");
    eprintln!("handed {handed} of 40");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_while_jobs_are_handed_to_it_loses_none() {
    let mut s = setup("kill", json!({"timeout_ms": 1000})).await;
    push_spread(&s.http, &s.base, "kill", 60, 1500, 50).await;
    eventually(Duration::from_secs(60), "the first jobs are handed", || async {
        metric_sum(s.timer.port, "dq_jobs_handed_off_total").await >= 10.0
    })
    .await;
    s.consumer.process.signal("KILL");
    s.consumer.process.wait(Duration::from_secs(10)).expect("killed");
    let cp2 = free_port();
    let _second = start_on("dq-consumer", cp2, consumer_vars(&s.redis, cp2).await).await;
    // Jobs handed to the dead process come back when their reservation ends (timeout + 5 s).
    all_done(&s, "kill", 60).await;
}

/// Long polls of a dq-server are handed due jobs too: each job is reserved once, and every job the timer
/// handed off was taken by a long poll or handed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_long_polls_get_due_jobs_handed_and_each_is_reserved_once() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let timer = start("dq-timer", &[&redis]).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    push_spread(&http, &base, "polled", 40, 1500, 50).await;
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let (http, port, got) = (http.clone(), server.port, got.clone());
            tokio::spawn(async move {
                while got.lock().unwrap().len() < 40 {
                    let body = json!({"topics": ["polled"], "timeout_ms": 1000});
                    let (status, resp) = call(&http, port, "POST", "/v1/reserve", Some(body)).await;
                    assert_eq!(status, 200, "{resp}");
                    for job in resp["jobs"].as_array().unwrap() {
                        let id = job["id"].as_str().unwrap();
                        let receipt = json!({"receipt": job["receipt"]});
                        let (status, _) = call(&http, port, "POST", &format!("/v1/jobs/{id}/ack"), Some(receipt)).await;
                        assert_eq!(status, 204);
                        got.lock().unwrap().push(id.to_string());
                    }
                }
            })
        })
        .collect();
    for p in pollers {
        tokio::time::timeout(Duration::from_secs(90), p)
            .await
            .expect("all 40 reserved")
            .unwrap();
    }
    let mut ids = got.lock().unwrap().clone();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!((n, ids.len()), (40, 40), "each job reserved once");
    let handed = metric_sum(timer.port, "dq_jobs_handed_off_total").await;
    assert!(handed > 0.0, "the timer handed no job to the waiting long polls");
    eventually(
        Duration::from_secs(30),
        "every handed job taken or handed back",
        || async {
            let taken = metric_sum(server.port, "dq_long_polls_handed_total").await;
            let back = metric_sum(server.port, "dq_long_polls_handed_back_total").await;
            taken + back == handed
        },
    )
    .await;
    eprintln!(
        "handed {handed} of 40, taken {}",
        metric_sum(server.port, "dq_long_polls_handed_total").await
    );
}
