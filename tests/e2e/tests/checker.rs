//! dq-checker as a real process: a Redis killed and restarted gives exactly one down and one up alert,
//! by webhook and by e-mail; `dq-checker audit` repairs damage and reports it.

mod common;

use std::time::Duration;

use common::env;
use dq_harness::{DqProcess, RedisServer, SmtpSink, WebhookSink, eventually, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_redis_gives_one_down_and_one_up_alert_by_webhook_and_smtp() {
    let mut flaky = RedisServer::start();
    let smtp = SmtpSink::start().await;
    let alerts = WebhookSink::start().await;
    let mut vars = env(&[&flaky], free_port());
    vars.extend([
        ("DQ__CHECKER__INTERVAL_MS", "100".to_string()),
        ("DQ__CHECKER__WEBHOOK_URL", alerts.url.clone()),
        ("DQ__CHECKER__SMTP_URL", smtp.url.clone()),
        ("DQ__CHECKER__MAIL_TO", "ops@example.com,oncall@example.com".to_string()),
        ("DQ__REDIS__CONNECT_TIMEOUT_MS", "200".to_string()),
    ]);
    let mut checker = DqProcess::spawn("dq-checker", &vars, &[]);
    eventually(Duration::from_secs(30), "the checker runs", || async {
        checker.log().contains("dq-checker starting")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    flaky.stop();
    eventually(Duration::from_secs(30), "redis_down", || async {
        alerts.of_kind("redis_down").len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    flaky.restart();
    eventually(Duration::from_secs(30), "redis_up", || async {
        alerts.of_kind("redis_up").len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        (alerts.of_kind("redis_down").len(), alerts.of_kind("redis_up").len()),
        (1, 1),
        "one alert per transition"
    );
    eventually(Duration::from_secs(30), "both by e-mail", || async {
        let m = smtp.messages();
        m.iter().filter(|m| m.contains("is down")).count() == 1
            && m.iter().filter(|m| m.contains("is back")).count() == 1
    })
    .await;
    assert!(smtp.messages().iter().all(|m| m.contains("oncall@example.com")));

    checker.signal("USR2");
    let status = checker.wait(Duration::from_secs(30)).expect("exits");
    assert_eq!(status.code(), Some(0), "{}", checker.log());
}

#[tokio::test]
async fn dq_checker_audit_repairs_damage_and_prints_its_report() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // A job record in no structure (pushed, then taken out of its ready queue by hand), and an id
    // without a record.
    let q = common::queue(&[&redis]).await;
    q.producer()
        .push(common::job(
            &q,
            serde_json::json!({"id": "lost", "topic": "audit", "body": 1}),
        ))
        .await
        .unwrap();
    let ready_key = q.partition_keys(q.partitions().of_id("lost")).ready("audit");
    let _: () = redis::cmd("DEL").arg(&ready_key).query(&mut c).unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(&ready_key)
        .arg(1)
        .arg("ghost")
        .query(&mut c)
        .unwrap();
    let mut audit = DqProcess::spawn("dq-checker", &env(&[&redis], free_port()), &["audit"]);
    let status = audit.wait(Duration::from_secs(30)).expect("the audit finishes");
    assert_eq!(status.code(), Some(0), "{}", audit.log());
    let log = audit.log();
    let report: serde_json::Value =
        serde_json::from_str(log.lines().rev().find(|l| l.starts_with('{')).expect("a JSON report")).unwrap();
    assert_eq!(report["orphan_records"], 1, "{report}");
    assert_eq!(report["dangling_ids"], 1, "{report}");
    let ready: Vec<String> = redis::cmd("ZRANGE")
        .arg(&ready_key)
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(ready, ["lost"]);
}
