//! Every counter is served from a binary's start, at 0, so an alert rule's series exists before its
//! first event (`increase()` cannot see a series' first value) and a dashboard shows 0, not "no data";
//! a topic's counters from its registration; and a topic's counters leave `/metrics` when its
//! registration is deleted, until it counts something again.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{env, metrics, start, start_on};
use dq_harness::{RedisServer, eventually, free_port};
use serde_json::json;

/// Asserts each of `series` is in `scrape` at 0.
fn at_zero(binary: &str, scrape: &HashMap<String, f64>, series: &[&str]) {
    for s in series {
        assert_eq!(scrape.get(*s), Some(&0.0), "{binary}: {s} at 0 in {scrape:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_are_served_from_the_start_and_a_deleted_topics_go() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    // Registered before the other binaries start; nothing listens on port 9, and nothing is pushed.
    let resp = http
        .put(format!("{base}/v1/topics/known"))
        .json(&json!({"callback": {"url": "http://127.0.0.1:9/x", "on_dead_url": "http://127.0.0.1:9/dead"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    // The first scrape of each binary, right after it answers.
    at_zero(
        "dq-server",
        &metrics(server.port).await,
        &[
            "dq_jobs_acked_total",
            "dq_jobs_nacked_total",
            "dq_jobs_dead_total",
            "dq_writes_not_replicated_total",
            r#"dq_auth_refusals_total{reason="bad_token"}"#,
            r#"dq_jobs_pushed_total{topic="known"}"#,
            r#"dq_jobs_reserved_total{topic="known"}"#,
        ],
    );
    let timer = start("dq-timer", &[&redis]).await;
    at_zero(
        "dq-timer",
        &metrics(timer.port).await,
        &[
            "dq_jobs_promoted_total",
            "dq_jobs_handed_off_total",
            r#"dq_jobs_expired_total{outcome="ready"}"#,
            r#"dq_jobs_expired_total{outcome="dead"}"#,
        ],
    );
    let consumer = start("dq-consumer", &[&redis]).await;
    at_zero(
        "dq-consumer",
        &metrics(consumer.port).await,
        &[
            "dq_jobs_acked_total",
            "dq_jobs_nacked_total",
            "dq_writes_not_replicated_total",
        ],
    );
    let checker_port = free_port();
    let mut vars = env(&[&redis], checker_port);
    vars.extend([
        ("DQ__CHECKER__INTERVAL_MS", "200".to_string()),
        ("DQ__CHECKER__WEBHOOK_URL", "http://127.0.0.1:9/alerts".to_string()),
    ]);
    let checker = start_on("dq-checker", checker_port, vars).await;
    at_zero(
        "dq-checker",
        &metrics(checker.port).await,
        &[
            r#"dq_alerts_failed_total{channel="webhook"}"#,
            r#"dq_alert_retries_total{channel="webhook"}"#,
            r#"dq_alerts_total{kind="dead_jobs"}"#,
            r#"dq_audit_repairs_total{kind="orphan_record"}"#,
            r#"dq_audit_repairs_total{kind="dangling_id"}"#,
        ],
    );

    // Per topic, once each binary has read the registry (its workers, its rounds).
    for (binary, port, series) in [
        (
            "dq-consumer",
            consumer.port,
            vec![
                r#"dq_deliveries_total{topic="known",outcome="timeout"}"#,
                r#"dq_deliveries_total{topic="known",outcome="connect_error"}"#,
                r#"dq_jobs_reserved_total{topic="known"}"#,
            ],
        ),
        (
            "dq-checker",
            checker.port,
            vec![
                r#"dq_dead_hooks_total{topic="known",outcome="given_up"}"#,
                r#"dq_dead_jobs_dropped_total{topic="known",reason="cap"}"#,
            ],
        ),
    ] {
        eventually(
            Duration::from_secs(30),
            &format!("{binary} serves the topic's counters"),
            || {
                let series = series.clone();
                async move {
                    let scrape = metrics(port).await;
                    series.iter().all(|s| scrape.get(*s) == Some(&0.0))
                }
            },
        )
        .await;
    }

    // The registration goes: so do the topic's counters, in the server at once and in the checker at
    // its next round.
    let resp = http.delete(format!("{base}/v1/topics/known")).send().await.unwrap();
    assert_eq!(resp.status(), 204);
    let topic_series = |scrape: HashMap<String, f64>| {
        scrape
            .into_keys()
            .filter(|k| k.contains(r#"topic="known""#) && k.contains("_total"))
            .collect::<Vec<_>>()
    };
    assert_eq!(topic_series(metrics(server.port).await), Vec::<String>::new());
    eventually(
        Duration::from_secs(30),
        "the checker drops the topic's counters",
        || async { topic_series(metrics(checker.port).await).is_empty() },
    )
    .await;
    // A push to it counts again, and is served again.
    let resp = http
        .post(format!("{base}/v1/jobs"))
        .json(&json!({"topic": "known", "body": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let scrape = metrics(server.port).await;
    assert_eq!(
        scrape.get(r#"dq_jobs_pushed_total{topic="known"}"#),
        Some(&1.0),
        "{scrape:?}"
    );
}
