//! Dead-job hooks (`callback.on_dead_url`) with the real binaries: jobs that a failing callback drives to
//! their last attempt each hook once, signed; a dq-checker killed (-9) with a hook queued and not sent
//! loses nothing: the next one sends it once the receiver is up.

mod common;

use std::time::Duration;

use common::{env, start};
use dq_harness::{DqProcess, HookSink, RedisServer, dead_hooks_waiting, eventually, free_port};
use serde_json::{Value, json};

const SECRET: &str = "e2e-s3cret";

fn checker_env(redis: &RedisServer) -> Vec<(&'static str, String)> {
    let mut vars = env(&[redis], free_port());
    vars.push(("DQ__CHECKER__INTERVAL_MS", "100".into()));
    vars.push((
        "DQ__CHECKER__DEAD_HOOK_BACKOFF_MS",
        "200,200,200,200,200,200,200,200,200,200".into(),
    ));
    vars
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_a_failing_callback_drives_dead_each_hook_once_signed() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let _timer = start("dq-timer", &[&redis]).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    let callback = HookSink::start_failing(usize::MAX).await;
    let on_dead = HookSink::start_failing(0).await;
    let resp = http
        .put(format!("{base}/v1/topics/fragile"))
        .json(
            &json!({"callback": {"url": callback.url, "secret": SECRET, "on_dead_url": on_dead.url},
                      "retry": {"max_attempts": 2, "backoff_ms": [50]}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let mut vars = env(&[&redis], free_port());
    vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
    let _consumer = DqProcess::spawn("dq-consumer", &vars, &[]);
    let _checker = DqProcess::spawn("dq-checker", &checker_env(&redis), &[]);
    let mut ids = Vec::new();
    for i in 0..2 {
        let out: Value = http
            .post(format!("{base}/v1/jobs"))
            .json(&json!({"topic": "fragile", "body": {"n": i}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(out["id"].as_str().unwrap().to_string());
    }
    eventually(Duration::from_secs(60), "a hook per dead job", || async {
        on_dead.received().len() >= 2
    })
    .await;
    // Settle: a second POST for a death would come within a few checker rounds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hooks = on_dead.received();
    assert_eq!(hooks.len(), 2, "one per dead job: {hooks:?}");
    let mut hooked: Vec<String> = hooks.iter().map(|h| h.header("x-dq-job-id").to_string()).collect();
    hooked.sort();
    ids.sort();
    assert_eq!(hooked, ids);
    for hook in &hooks {
        assert!(hook.signed_with(SECRET), "{hook:?}");
        let job = hook.json();
        assert_eq!(job["id"], hook.header("x-dq-job-id"));
        assert_eq!(job["state"], "dead");
        assert_eq!(job["attempts"], 2);
        assert_eq!(job["last_error"], "HTTP 500", "{job}");
        assert_eq!(hook.header("x-dq-event"), "dead");
        assert_eq!(
            callback
                .received()
                .iter()
                .filter(|c| c.json()["id"] == job["id"])
                .count(),
            2
        );
    }
    assert!(dead_hooks_waiting(&redis).is_empty(), "sent hooks are forgotten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_killed_with_a_hook_unsent_loses_nothing() {
    let redis = RedisServer::start();
    let q = common::queue(&[&redis]).await;
    // The receiver is down: its port is chosen now, and it comes up later.
    let port = free_port();
    let on_dead_url = format!("http://127.0.0.1:{port}/hook");
    let config: dq_core::TopicConfig = serde_json::from_value(json!({
        "callback": {"url": "http://127.0.0.1:9/unused", "secret": SECRET, "on_dead_url": on_dead_url}
    }))
    .unwrap();
    q.admin().put_topic("orders", &config).await.unwrap();
    let id = q
        .producer()
        .push(common::job(
            &q,
            json!({"topic": "orders", "body": 1, "max_attempts": 1}),
        ))
        .await
        .unwrap()
        .id;
    let r = q.reservations().reserve(&["orders".into()], 1).await.unwrap().remove(0);
    q.reservations()
        .nack(&r.id, &r.receipt, None, Some("gave up"), None)
        .await
        .unwrap();

    let mut checker = DqProcess::spawn("dq-checker", &checker_env(&redis), &[]);
    eventually(Duration::from_secs(30), "the hook queued and a try failed", || async {
        dead_hooks_waiting(&redis)
            .iter()
            .any(|h| !h.starts_with("0 ") && h.ends_with(&format!(" orders {id}")))
    })
    .await;
    checker.signal("KILL");
    checker.wait(Duration::from_secs(10)).expect("killed");

    let sink = HookSink::start_at(format!("127.0.0.1:{port}").parse().unwrap(), 0).await;
    let _checker = DqProcess::spawn("dq-checker", &checker_env(&redis), &[]);
    eventually(Duration::from_secs(60), "the hook sent by the next checker", || async {
        !sink.received().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hooks = sink.received();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert!(hooks[0].signed_with(SECRET));
    assert_eq!(hooks[0].json()["id"], id.as_str());
    assert_eq!(hooks[0].json()["last_error"], "gave up");
    assert!(dead_hooks_waiting(&redis).is_empty());
}
