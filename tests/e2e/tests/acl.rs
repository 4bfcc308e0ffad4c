//! The Redis ACL user that docs/security.md gives ("Redis access") is enough for every dq process and
//! every verb: the test reads the `ACL SETUSER` line from the document itself, creates that user on a
//! real Redis, runs dq-server, dq-timer, dq-consumer and dq-checker (and its one-shot commands) as it,
//! and finds Redis's `ACL LOG` empty: no command, key or channel was refused. The same rule on every
//! node of a Redis Cluster (sharded pub/sub, the `CLUSTER` look-ups) takes the tour of every verb.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{call, env_for, start_on};
use dq_harness::{DqProcess, RedisCluster, RedisServer, eventually, free_port};
use serde_json::json;

/// The `ACL SETUSER …` line of docs/security.md, split into arguments (after `ACL`).
fn documented_rule() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md")).unwrap();
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER dq "))
        .expect("docs/security.md gives an `ACL SETUSER dq …` line");
    line.split_whitespace().skip(1).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_runs_every_process_and_verb() {
    let redis = RedisServer::start();
    let mut admin = redis.conn();
    let mut setuser = redis::cmd("ACL");
    for arg in documented_rule() {
        // The document's placeholder password.
        setuser.arg(arg.replace(">long-random-password", ">acl-test-pass"));
    }
    let _: () = setuser
        .query(&mut admin)
        .expect("the documented ACL rule is accepted by Redis");
    let _: () = redis::cmd("ACL").arg("LOG").arg("RESET").query(&mut admin).unwrap();
    let url = format!("redis://dq:acl-test-pass@127.0.0.1:{}", redis.port());
    let key = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    let extra = [("DQ__SECRETS__KEYS", key), ("DQ__TOPICS__REFRESH_MS", "200")];
    let vars = |port| env_for("standalone", std::slice::from_ref(&url), port, &extra);
    let (sp, tp, cp, kp) = (free_port(), free_port(), free_port(), free_port());
    let server = start_on("dq-server", sp, vars(sp)).await;
    let timer = start_on("dq-timer", tp, vars(tp)).await;
    let consumer = start_on("dq-consumer", cp, vars(cp)).await;
    let _checker = start_on("dq-checker", kp, vars(kp)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let api = |method: &'static str, path: String, body: Option<serde_json::Value>| {
        let http = http.clone();
        async move { call(&http, server.port, method, &path, body).await }
    };

    // Pull: a delayed job through the timer and a long poll, acked; a nack to the dead list, requeued.
    let (status, out) = api(
        "POST",
        "/v1/jobs".into(),
        Some(json!({"id": "a1", "topic": "pull", "body": 1, "delay_ms": 200})),
    )
    .await;
    assert_eq!(status, 201, "{out}");
    let (_, out) = api(
        "POST",
        "/v1/reserve".into(),
        Some(json!({"topics": ["pull"], "timeout_ms": 20000})),
    )
    .await;
    assert_eq!(out["jobs"][0]["id"], "a1", "{out}");
    let (status, _) = api(
        "POST",
        "/v1/jobs/a1/ack".into(),
        Some(json!({"receipt": out["jobs"][0]["receipt"]})),
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = api(
        "POST",
        "/v1/jobs".into(),
        Some(json!({"id": "d1", "topic": "pull", "body": 2, "max_attempts": 1})),
    )
    .await;
    assert_eq!(status, 201);
    let (_, out) = api(
        "POST",
        "/v1/reserve".into(),
        Some(json!({"topics": ["pull"], "timeout_ms": 5000})),
    )
    .await;
    let (status, _) = api(
        "POST",
        "/v1/jobs/d1/nack".into(),
        Some(json!({"receipt": out["jobs"][0]["receipt"], "error": "no"})),
    )
    .await;
    assert_eq!(status, 204);
    let (status, out) = api("GET", "/v1/topics/pull/dead".into(), None).await;
    assert_eq!((status, out["jobs"][0]["id"].clone()), (200, json!("d1")), "{out}");
    let (status, out) = api("POST", "/v1/topics/pull/dead/requeue".into(), Some(json!({}))).await;
    assert_eq!(status, 200, "{out}");
    // The other verbs: look up, reschedule, cancel, batch, stats, topics, pause and resume.
    let (status, _) = api(
        "POST",
        "/v1/jobs/batch".into(),
        Some(json!({"jobs": [{"id": "b1", "topic": "pull", "body": 3, "delay_ms": 60000}]})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(api("GET", "/v1/jobs/b1".into(), None).await.0, 200);
    assert_eq!(
        api("PATCH", "/v1/jobs/b1".into(), Some(json!({"delay_ms": 120000})))
            .await
            .0,
        200
    );
    assert_eq!(api("DELETE", "/v1/jobs/b1".into(), None).await.0, 204);
    assert_eq!(api("GET", "/v1/stats".into(), None).await.0, 200);

    // Push delivery through dq-consumer, with a sealed secret.
    let (hook_url, delivered) = common::hook(Duration::ZERO).await;
    let (status, out) = api(
        "PUT",
        "/v1/topics/pushed".into(),
        Some(json!({"callback": {"url": hook_url, "secret": "s"}})),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(api("POST", "/v1/topics/pushed/pause".into(), None).await.0, 200);
    assert_eq!(api("POST", "/v1/topics/pushed/resume".into(), None).await.0, 200);
    let (status, _) = api("POST", "/v1/jobs".into(), Some(json!({"topic": "pushed", "body": 4}))).await;
    assert_eq!(status, 201);
    eventually(Duration::from_secs(30), "the callback is called", || async {
        delivered.load(Ordering::SeqCst) >= 1
    })
    .await;
    // A delayed one, due while the consumer waits: the timer hands it over on the consumer's channels.
    let (status, _) = api(
        "POST",
        "/v1/jobs".into(),
        Some(json!({"topic": "pushed", "body": 5, "delay_ms": 1500})),
    )
    .await;
    assert_eq!(status, 201);
    eventually(
        Duration::from_secs(30),
        "the delayed job is handed and delivered",
        || async { delivered.load(Ordering::SeqCst) >= 2 },
    )
    .await;
    // The timer handed it to the consumer (and the first pull job to the long poll, when that waited
    // in time): every job handed off reached its process.
    assert_eq!(common::metric_sum(consumer.port, "dq_consumer_handed_total").await, 1.0);
    let to_long_polls = common::metric_sum(server.port, "dq_long_polls_handed_total").await
        + common::metric_sum(server.port, "dq_long_polls_handed_back_total").await;
    assert_eq!(
        common::metric_sum(timer.port, "dq_jobs_handed_off_total").await,
        1.0 + to_long_polls
    );

    // dq-checker's one-shot commands.
    for args in [&["audit"][..], &["secrets", "rekey"], &["quarantine", "ls"]] {
        let mut run = DqProcess::spawn("dq-checker", &vars(free_port()), args);
        let status = tokio::task::block_in_place(|| run.wait(Duration::from_secs(60))).expect("exits");
        assert!(status.success(), "dq-checker {args:?}:\n{}", run.log());
    }
    // Let the checker's rounds, the timer's leases and the consumer's refreshes run a while.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
    assert!(log.is_empty(), "Redis refused dq's user something: {log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_takes_the_tour_on_a_cluster() {
    let cluster = RedisCluster::start();
    for port in cluster.ports() {
        let mut admin = cluster.conn(port);
        let mut setuser = redis::cmd("ACL");
        for arg in documented_rule() {
            setuser.arg(arg.replace(">long-random-password", ">acl-test-pass"));
        }
        let _: () = setuser.query(&mut admin).expect("the documented ACL rule is accepted");
        let _: () = redis::cmd("ACL").arg("LOG").arg("RESET").query(&mut admin).unwrap();
    }
    let urls: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("redis://dq:acl-test-pass@127.0.0.1:{p}"))
        .collect();
    let _toured = common::tour::every_verb("cluster", &urls, &[], 3).await;
    for port in cluster.primaries() {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut cluster.conn(port)).unwrap();
        assert!(
            clients.contains(" user=dq "),
            "dq is not connected to :{port} as its user: {clients}"
        );
    }
    for port in cluster.ports() {
        let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut cluster.conn(port)).unwrap();
        assert!(log.is_empty(), "node :{port} refused dq's user something: {log:?}");
    }
}
