//! dq-server and dq-timer as processes together: a delayed job reaches a long-polling consumer; the
//! server drains on signals. And the tour of every verb, the timer, the consumer and the checker on one
//! standalone Redis, as `cluster.rs` and `sentinel.rs` take it on theirs.

mod common;

use std::time::Duration;

use common::start;
use dq_harness::RedisServer;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_the_timer_the_consumer_and_the_checker_work_on_standalone() {
    let redis = RedisServer::start();
    common::tour::every_verb("standalone", &[redis.url()], &[], 1).await;
}

#[tokio::test]
async fn a_delayed_job_reaches_a_long_poll_through_server_and_timer() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let _timer = start("dq-timer", &[&redis]).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    let pushed: Value = http
        .post(format!("{base}/v1/jobs"))
        .json(&json!({"topic": "e2e", "body": {"hello": "world"}, "delay_ms": 500}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pushed["state"], "delayed");
    let mut got = Vec::new();
    for _ in 0..10 {
        let out: Value = http
            .post(format!("{base}/v1/reserve"))
            .json(&json!({"topics": ["e2e"], "timeout_ms": 5000}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        got = out["jobs"].as_array().unwrap().clone();
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1, "the job was delivered");
    assert_eq!(got[0]["id"], pushed["id"]);
    assert_eq!(got[0]["body"], json!({"hello": "world"}));
    let resp = http
        .post(format!("{base}/v1/jobs/{}/ack", got[0]["id"].as_str().unwrap()))
        .json(&json!({"receipt": got[0]["receipt"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
}

#[tokio::test]
async fn server_answers_in_flight_long_polls_and_exits_0_on_signals() {
    let redis = RedisServer::start();
    for sig in ["TERM", "INT", "USR2"] {
        let mut server = start("dq-server", &[&redis]).await;
        let url = format!("http://127.0.0.1:{}/v1/reserve", server.port);
        let poll = tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .json(&json!({"topics": ["idle"], "timeout_ms": 30000}))
                .send()
                .await
        });
        // Give the long poll time to arrive; the outcome is checked either way below.
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.process.signal(sig);
        let status = server
            .process
            .wait(Duration::from_secs(30))
            .expect("exits after the signal");
        assert_eq!(status.code(), Some(0), "SIG{sig}: {}", server.process.log());
        let answered = poll.await.unwrap().expect("the in-flight long poll got an answer");
        assert_eq!(answered.status(), 200);
        let body: Value = answered.json().await.unwrap();
        assert_eq!(body["jobs"], json!([]));
    }
}

/// Without a token, dq-server refuses to serve the open API on a non-loopback address, naming
/// `auth.insecure`; with `auth.insecure` it serves.
#[tokio::test]
async fn an_open_api_is_refused_beyond_loopback() {
    let redis = RedisServer::start();
    let port = dq_harness::free_port();
    let mut vars = common::env(&[&redis], port);
    vars.retain(|(k, _)| *k != "DQ__SERVER__LISTEN");
    vars.push(("DQ__SERVER__LISTEN", format!("0.0.0.0:{port}")));
    let mut refused = dq_harness::DqProcess::spawn("dq-server", &vars, &[]);
    let status = refused.wait(Duration::from_secs(30)).expect("exits");
    assert!(!status.success());
    assert!(refused.log().contains("auth.insecure"), "{}", refused.log());
    vars.push(("DQ__AUTH__INSECURE", "true".into()));
    let served = common::start_on("dq-server", port, vars).await;
    drop(served);
}

/// SIGHUP reads the settings file again: a token added there works, one removed gets 401, without a
/// restart.
#[tokio::test]
async fn sighup_reloads_the_tokens_from_the_settings_file() {
    use sha2::{Digest, Sha256};
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dq.toml");
    let write = |name: &str, token: &str| {
        let hash = hex::encode(Sha256::digest(token.as_bytes()));
        std::fs::write(
            &file,
            format!("[[auth.tokens]]\nname = \"{name}\"\nsha256 = \"{hash}\"\nscopes = [\"read\"]\n"),
        )
        .unwrap();
    };
    write("old", "old-token");
    let port = dq_harness::free_port();
    let config = file.to_str().unwrap().to_string();
    let process = dq_harness::DqProcess::spawn("dq-server", &common::env(&[&redis], port), &["--config", &config]);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let stats = |token: &'static str| http.get(format!("{base}/v1/stats")).bearer_auth(token).send();
    dq_harness::eventually(Duration::from_secs(30), "the server answers the old token", || async {
        stats("old-token").await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert_eq!(stats("new-token").await.unwrap().status(), 401);
    write("new", "new-token");
    process.signal("HUP");
    dq_harness::eventually(Duration::from_secs(30), "the new token works", || async {
        stats("new-token").await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert_eq!(stats("old-token").await.unwrap().status(), 401);
    let log = process.log();
    assert!(log.contains("tokens read again") && !log.contains("new-token"), "{log}");
}

/// Logging never holds up a drain: with stderr a pipe nobody reads (full after 64 KiB of trace lines)
/// or a pipe whose reader is gone, every binary still exits 0 on SIGTERM.
#[tokio::test]
async fn a_drain_ends_whatever_becomes_of_stderr() {
    use std::process::{Command, Stdio};
    let redis = RedisServer::start();
    for name in ["dq-server", "dq-timer", "dq-consumer", "dq-checker"] {
        for closed in [false, true] {
            let port = dq_harness::free_port();
            let mut cmd = Command::new(dq_harness::bin_dir().join(name));
            cmd.envs(common::env(&[&redis], port))
                .env("DQ__LOG__LEVEL", "trace")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("spawn");
            let stderr = child.stderr.take();
            let _unread = if closed {
                drop(stderr);
                None
            } else {
                stderr
            };
            let url = format!("http://127.0.0.1:{port}/metrics");
            dq_harness::eventually(Duration::from_secs(30), &format!("{name} serves {url}"), || async {
                reqwest::get(&url).await.is_ok_and(|r| r.status().is_success())
            })
            .await;
            // Traffic, so there is something to log at the moment of the signal.
            for _ in 0..20 {
                let _ = reqwest::get(&url).await;
            }
            let killed = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    panic!(
                        "{name} (stderr {}) did not exit within 30 s of SIGTERM",
                        if closed { "closed" } else { "stalled" }
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            assert_eq!(
                status.code(),
                Some(0),
                "{name} (stderr {})",
                if closed { "closed" } else { "stalled" }
            );
        }
    }
}
