//! dq-consumer as a real process with dq-server and dq-timer: drain on signals with deliveries in flight.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{env, start};
use dq_harness::{DqProcess, RedisServer, eventually, free_port};
use serde_json::{Value, json};

// Multi-threaded: waiting for the process blocks a thread, and the callback server must keep answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_finishes_in_flight_deliveries_and_exits_0_on_signals() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let _timer = start("dq-timer", &[&redis]).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    let (url, count) = common::hook(Duration::from_millis(1500)).await;
    // A token in the query, as many webhook URLs carry one: deliveries use it, logs never show it.
    let url = format!("{url}?token=query-secret");
    let resp = http
        .put(format!("{base}/v1/topics/slow"))
        .json(&json!({"callback": {"url": url}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut delivered = 0;
    for sig in ["TERM", "INT", "USR2"] {
        let port = free_port();
        let mut vars = env(&[&redis], port);
        vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
        let mut consumer = DqProcess::spawn("dq-consumer", &vars, &[]);
        let mut ids = Vec::new();
        for i in 0..3 {
            let out: Value = http
                .post(format!("{base}/v1/jobs"))
                .json(&json!({"topic": "slow", "body": i}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            ids.push(out["id"].as_str().unwrap().to_string());
        }
        delivered += 3;
        eventually(Duration::from_secs(30), "three deliveries in flight", || async {
            count.load(Ordering::SeqCst) >= delivered
        })
        .await;
        consumer.signal(sig);
        let status = consumer.wait(Duration::from_secs(30)).expect("exits after the signal");
        assert_eq!(status.code(), Some(0), "SIG{sig}: {}", consumer.log());
        let log = consumer.log();
        assert!(log.contains("token=***") && !log.contains("query-secret"), "{log}");
        for id in &ids {
            let job: Value = http
                .get(format!("{base}/v1/jobs/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                job["state"], "done",
                "SIG{sig}: in-flight delivery finished and acked: {job}"
            );
        }
    }
}
