//! SIGHUP as the binaries see it, as real processes on a real Redis: each reads its `--config` file
//! again, applies what can change live (the log level and its own parts), names each changed key that
//! needs a restart, refuses a bad file without changing anything, and goes on until SIGTERM, exiting 0.
//! (dq-server's tokens: tests/e2e/tests/server.rs; its TLS files: tests/e2e/tests/https.rs.)

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{env, hook, job, queue};
use dq_core::{State, TopicConfig};
use dq_harness::{DqProcess, RedisServer, WebhookSink, eventually, free_port};
use serde_json::json;

/// The line every reload that applied logs.
const RELOADED: &str = "SIGHUP: configuration read again; applied: log level";

/// A config file in a directory of its own.
struct ConfigFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ConfigFile {
    fn new(text: &str) -> ConfigFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(&path, text).unwrap();
        ConfigFile { _dir: dir, path }
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
    }
}

/// Starts `name` with `--config file` and the test environment, with `RUST_LOG` empty so that
/// `log.level` decides, and waits until it serves `/metrics`; with the port it serves on (dq-server's
/// API too).
async fn start(name: &str, redis: &RedisServer, file: &Path, extra: &[(&'static str, String)]) -> (DqProcess, u16) {
    let port = free_port();
    let mut vars = env(&[redis], port);
    vars.push(("RUST_LOG", String::new()));
    vars.extend(extra.iter().cloned());
    let process = DqProcess::spawn(name, &vars, &["--config", file.to_str().unwrap()]);
    let url = format!("http://127.0.0.1:{port}/metrics");
    eventually(Duration::from_secs(30), &format!("{name} serves {url}"), || async {
        reqwest::get(&url).await.is_ok_and(|r| r.status().is_success())
    })
    .await;
    (process, port)
}

/// Sends SIGHUP and waits until the `n`-th line containing `line` is logged.
async fn hang_up(process: &DqProcess, line: &str, n: usize) {
    process.signal("HUP");
    eventually(
        Duration::from_secs(30),
        &format!("{line:?} logged {n} times"),
        || async { process.log().matches(line).count() >= n },
    )
    .await;
}

/// Waits until a DEBUG line is logged after the last reload line: the new `log.level` is in force.
async fn debug_lines_follow(process: &DqProcess) {
    eventually(Duration::from_secs(30), "DEBUG lines after the reload", || async {
        let log = process.log();
        log.rsplit_once(RELOADED)
            .is_some_and(|(_, after)| after.lines().any(|l| l.contains("DEBUG")))
    })
    .await;
}

/// SIGTERM, then exit 0 within the deadline.
fn terminates_cleanly(mut process: DqProcess) {
    assert!(
        process.is_running(),
        "still running after the reloads:\n{}",
        process.log()
    );
    process.signal("TERM");
    let status = process.wait(Duration::from_secs(30)).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", process.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_timer_reloads_its_log_level_names_restart_keys_and_refuses_a_bad_file() {
    let redis = RedisServer::start();
    let file = ConfigFile::new("[log]\nlevel = \"info\"\n");
    let (timer, _) = start("dq-timer", &redis, &file.path, &[]).await;
    assert!(!timer.log().contains("DEBUG"), "info at start:\n{}", timer.log());

    file.write("[log]\nlevel = \"debug\"\n[timer]\nbatch_size = 500\n");
    hang_up(&timer, RELOADED, 1).await;
    debug_lines_follow(&timer).await;
    let log = timer.log();
    assert!(
        log.contains("SIGHUP: timer.batch_size changed; it takes effect at the next restart"),
        "{log}"
    );
    assert!(!log.contains("log.level changed"), "applied, not deferred:\n{log}");

    // A bad file changes nothing, and says which key is wrong.
    file.write("[log]\nlevel = \"info\"\n[timer]\nbatch_size = 0\n");
    hang_up(&timer, "SIGHUP: cannot use the configuration; nothing changes", 1).await;
    let log = timer.log();
    let refusal = log.lines().rfind(|l| l.contains("nothing changes")).unwrap();
    assert!(refusal.contains("timer.batch_size"), "{refusal}");
    assert_eq!(log.matches(RELOADED).count(), 1, "{log}");
    terminates_cleanly(timer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_consumer_applies_a_new_egress_policy_on_sighup() {
    let redis = RedisServer::start();
    let q = queue(&[&redis]).await;
    let (url, delivered) = hook(Duration::ZERO).await;
    let config: TopicConfig = serde_json::from_value(json!({"callback": {"url": url, "timeout_ms": 2000}})).unwrap();
    q.admin().put_topic("reload", &config).await.unwrap();
    let file = ConfigFile::new("[log]\nlevel = \"info\"\n");
    let (consumer, _) = start("dq-consumer", &redis, &file.path, &[]).await;
    let push = || async {
        let pushed = q
            .producer()
            .push(job(&q, json!({"topic": "reload", "body": 1, "max_attempts": 1})))
            .await
            .unwrap();
        pushed.id
    };
    let first = push().await;
    eventually(Duration::from_secs(30), "the first job delivered", || async {
        q.producer().get(&first).await.is_ok_and(|j| j.state == State::Done)
    })
    .await;
    let before = delivered.load(std::sync::atomic::Ordering::SeqCst);

    file.write("[log]\nlevel = \"debug\"\n[egress]\ndeny = [\"127.0.0.0/8\"]\n[topics]\nrefresh_ms = 500\n");
    hang_up(&consumer, RELOADED, 1).await;
    debug_lines_follow(&consumer).await;
    let log = consumer.log();
    assert!(log.contains("egress policy"), "{log}");
    assert!(
        log.contains("SIGHUP: topics.refresh_ms changed; it takes effect at the next restart"),
        "{log}"
    );
    let second = push().await;
    eventually(Duration::from_secs(30), "the second job dead", || async {
        q.producer().get(&second).await.is_ok_and(|j| j.state == State::Dead)
    })
    .await;
    let error = q.producer().get(&second).await.unwrap().last_error.unwrap_or_default();
    assert!(error.contains("egress.deny 127.0.0.0/8"), "{error}");
    assert_eq!(
        delivered.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "the refused callback was never called"
    );

    // And back: the policy permits the callback again.
    file.write("[log]\nlevel = \"debug\"\n");
    hang_up(&consumer, RELOADED, 2).await;
    let third = push().await;
    eventually(Duration::from_secs(30), "the third job delivered", || async {
        q.producer().get(&third).await.is_ok_and(|j| j.state == State::Done)
    })
    .await;
    terminates_cleanly(consumer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_checker_sends_alerts_to_the_new_webhook_after_sighup() {
    let redis = RedisServer::start();
    let q = queue(&[&redis]).await;
    let (old, new) = (WebhookSink::start().await, WebhookSink::start().await);
    let config = |level: &str, webhook: &str, audit: u64| {
        format!(
            "[log]\nlevel = \"{level}\"\n[checker]\ninterval_ms = 100\nbacklog_threshold = 1\n\
             audit_interval_ms = {audit}\nwebhook_url = \"{webhook}\"\n"
        )
    };
    let file = ConfigFile::new(&config("info", &old.url, 600_000));
    let (checker, _) = start("dq-checker", &redis, &file.path, &[]).await;
    let backlog = |topic: &'static str| {
        let q = q.clone();
        async move {
            for _ in 0..2 {
                q.producer()
                    .push(job(&q, json!({"topic": topic, "body": 1})))
                    .await
                    .unwrap();
            }
        }
    };
    let topics = |sink: &WebhookSink| -> Vec<String> {
        sink.of_kind("backlog")
            .iter()
            .filter_map(|a| a["topic"].as_str().map(str::to_string))
            .collect()
    };
    backlog("before").await;
    eventually(
        Duration::from_secs(30),
        "the backlog alert at the old webhook",
        || async { topics(&old).contains(&"before".to_string()) },
    )
    .await;

    file.write(&config("debug", &new.url, 0));
    hang_up(&checker, RELOADED, 1).await;
    debug_lines_follow(&checker).await;
    let log = checker.log();
    assert!(log.contains("alert channels"), "{log}");
    assert!(
        log.contains("SIGHUP: checker.audit_interval_ms changed; it takes effect at the next restart"),
        "{log}"
    );
    assert!(
        !log.contains("checker.webhook_url changed"),
        "applied, not deferred:\n{log}"
    );
    backlog("after").await;
    eventually(
        Duration::from_secs(30),
        "the backlog alert at the new webhook",
        || async { topics(&new).contains(&"after".to_string()) },
    )
    .await;
    assert!(!topics(&old).contains(&"after".to_string()), "{:?}", topics(&old));
    assert!(!topics(&new).contains(&"before".to_string()), "{:?}", topics(&new));
    terminates_cleanly(checker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_server_applies_new_limits_and_egress_lists_on_sighup() {
    let redis = RedisServer::start();
    let file = ConfigFile::new("[limits]\nmax_body_bytes = 100\n");
    let (server, port) = start("dq-server", &redis, &file.path, &[]).await;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let push = |bytes: usize| {
        http.post(url("/v1/jobs"))
            .json(&json!({"topic": "limits", "body": "x".repeat(bytes)}))
            .send()
    };
    let register = || {
        http.put(url("/v1/topics/hooked"))
            .json(&json!({"callback": {"url": "http://127.0.0.1:9/hook"}}))
            .send()
    };
    let body_limit = || async {
        let doc: serde_json::Value = http
            .get(url("/openapi.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        doc["components"]["schemas"]["PushRequest"]["properties"]["body"].to_string()
    };
    // (A request over the 8 MiB request limit is answered 413 from its Content-Length before its body
    // is read, and the client, still sending, may see the connection closed instead: tests/limits.rs.)
    assert_eq!(push(200).await.unwrap().status(), 413);
    assert_eq!(
        register().await.unwrap().status(),
        200,
        "loopback is allowed by default"
    );
    assert!(body_limit().await.contains("100"), "{}", body_limit().await);

    // 16 MiB bodies (so requests of 16 MiB + 1 KiB), and no loopback callbacks.
    file.write(
        "[limits]\nmax_body_bytes = 16777216\n[egress]\ndeny = [\"127.0.0.0/8\"]\n[server]\nmax_connections = 5\n",
    );
    hang_up(&server, RELOADED, 1).await;
    let log = server.log();
    let applied = log.lines().find(|l| l.contains(RELOADED)).unwrap();
    assert!(
        applied.contains("limits") && applied.contains("egress policy"),
        "{applied}"
    );
    assert!(
        log.contains("SIGHUP: server.max_connections changed; it takes effect at the next restart"),
        "{log}"
    );
    assert_eq!(push(200).await.unwrap().status(), 201);
    assert_eq!(push(9 << 20).await.unwrap().status(), 201);
    let refused = register().await.unwrap();
    assert_eq!(refused.status(), 400);
    let message = refused.text().await.unwrap();
    assert!(message.contains("egress.deny 127.0.0.0/8"), "{message}");
    assert!(body_limit().await.contains("16777216"), "{}", body_limit().await);
    terminates_cleanly(server);
}
