//! dq-checker in-process against real Redis servers, a real HTTP webhook and a real SMTP sink.

use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings};
use dq_harness::{RedisServer, SmtpSink, WebhookSink, eventually};
use tokio_util::sync::CancellationToken;

async fn settings(redis: &[&RedisServer], smtp: &SmtpSink, hook: &str) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis[0].url()];
    s.redis.connect_timeout_ms = 200;
    s.metrics.listen = Some("127.0.0.1:0".into());
    s.checker.interval_ms = 100;
    s.checker.webhook_url = Some(hook.to_string());
    s.checker.smtp_url = Some(smtp.url.clone());
    s.checker.mail_to = vec!["ops@example.com".into()];
    s.checker.backlog_threshold = Some(1000);
    s
}

fn start(s: &Settings) -> (CancellationToken, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let stop = CancellationToken::new();
    (stop.clone(), tokio::spawn(dq_checker::run(s.clone(), stop)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_and_back_gives_exactly_one_alert_each_way_by_webhook_and_mail() {
    let mut flaky = RedisServer::start();
    let smtp = SmtpSink::start().await;
    let alerts = WebhookSink::start().await;
    let s = settings(&[&flaky], &smtp, &alerts.url).await;
    let (stop, task) = start(&s);
    // Let it see Redis up (no alert for that).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(alerts.of_kind("redis_down").is_empty());

    flaky.stop();
    eventually(Duration::from_secs(30), "a redis_down alert", || async {
        !alerts.of_kind("redis_down").is_empty()
    })
    .await;
    let down = &alerts.of_kind("redis_down")[0];
    assert_eq!(down["node"], flaky.url());
    assert_eq!(down["severity"], "critical");
    // Many checks pass while it stays down: still one alert.
    tokio::time::sleep(Duration::from_millis(800)).await;
    flaky.restart();
    eventually(Duration::from_secs(30), "a redis_up alert", || async {
        !alerts.of_kind("redis_up").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(alerts.of_kind("redis_down").len(), 1, "one alert per transition");
    assert_eq!(alerts.of_kind("redis_up").len(), 1, "one alert per transition");
    eventually(Duration::from_secs(30), "both alerts by e-mail", || async {
        let mails = smtp.messages();
        mails.iter().any(|m| m.contains("is down")) && mails.iter().any(|m| m.contains("is back"))
    })
    .await;
    let mails = smtp.messages();
    assert!(mails.iter().any(|m| m.contains("To: ops@example.com")), "{mails:?}");
    assert_eq!(mails.iter().filter(|m| m.contains("is down")).count(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_and_backlogs_raise_alerts_and_depths_are_published() {
    let redis = RedisServer::start();
    let smtp = SmtpSink::start().await;
    let alerts = WebhookSink::start().await;
    let s = settings(&[&redis], &smtp, &alerts.url).await;
    let q = Queue::connect(&s).await.unwrap();
    let push = |json: serde_json::Value| {
        let q = q.clone();
        async move {
            q.producer()
                .push(
                    q.producer()
                        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
                        .unwrap(),
                )
                .await
                .unwrap()
        }
    };
    push(serde_json::json!({"id": "doomed", "topic": "pay", "body": 1, "max_attempts": 1})).await;
    let r = q.reservations().reserve(&["pay".into()], 1).await.unwrap().remove(0);
    q.reservations()
        .nack(&r.id, &r.receipt, None, Some("remote said 500"), None)
        .await
        .unwrap();
    // A topic's own threshold (3) wins over the checker's default (1000).
    let config: dq_core::TopicConfig = serde_json::from_value(serde_json::json!({"backlog_threshold": 3})).unwrap();
    q.admin().put_topic("busy", &config).await.unwrap();
    for i in 0..5 {
        push(serde_json::json!({"topic": "busy", "body": i})).await;
        push(serde_json::json!({"topic": "calm", "body": i})).await;
    }
    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "dead and backlog alerts", || async {
        !alerts.of_kind("dead_jobs").is_empty() && !alerts.of_kind("backlog").is_empty()
    })
    .await;
    let dead = &alerts.of_kind("dead_jobs")[0];
    assert_eq!(dead["topic"], "pay");
    assert_eq!(dead["details"]["jobs"][0]["id"], "doomed");
    assert_eq!(dead["details"]["jobs"][0]["error"], "remote said 500");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("dq:{*}:events")
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(
        keys.len(),
        0,
        "events are taken, so no second checker reports them again"
    );
    assert_eq!(alerts.of_kind("backlog")[0]["topic"], "busy");
    assert!(
        alerts.of_kind("backlog").iter().all(|a| a["topic"] != "calm"),
        "5 ready is under the default of 1000"
    );

    // Drain the backlog: the alert clears.
    for r in q.reservations().reserve(&["busy".into()], 10).await.unwrap() {
        q.reservations().ack(&r.id, &r.receipt).await.unwrap();
    }
    eventually(Duration::from_secs(30), "backlog_cleared", || async {
        !alerts.of_kind("backlog_cleared").is_empty()
    })
    .await;
    assert_eq!(alerts.of_kind("backlog").len(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A record that cannot be decoded, quarantined by the script that met it, raises one `quarantined`
/// alert and shows in `dq_quarantined_jobs`; the `quarantine` commands list and drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_record_raises_one_alert_and_the_commands_list_and_drop_it() {
    let redis = RedisServer::start();
    let smtp = SmtpSink::start().await;
    let alerts = WebhookSink::start().await;
    let mut s = settings(&[&redis], &smtp, &alerts.url).await;
    s.redis.partitions = Some(4);
    let q = Queue::connect(&s).await.unwrap();
    let req: PushRequest = serde_json::from_value(serde_json::json!({"id": "p", "topic": "t", "body": 1})).unwrap();
    q.producer().push(q.producer().validate(req).unwrap()).await.unwrap();
    let key = q.partition_keys(q.partitions().of_id("p")).job("p");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("not a record")
        .query(&mut redis.conn())
        .unwrap();
    let (stop, task) = start(&s);
    // The reserve meets it and moves it aside.
    assert!(q.reservations().reserve(&["t".into()], 1).await.unwrap().is_empty());
    eventually(Duration::from_secs(30), "a quarantined alert", || async {
        !alerts.of_kind("quarantined").is_empty()
    })
    .await;
    let alert = &alerts.of_kind("quarantined")[0];
    assert_eq!(alert["details"]["count"], 1);
    assert_eq!(alert["details"]["records"][0]["id"], "p");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        alerts.of_kind("quarantined").len(),
        1,
        "one alert while nothing changes"
    );
    stop.cancel();
    task.await.unwrap().unwrap();

    let listed = q.admin().quarantined().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].raw, b"not a record");
    dq_checker::quarantine::run(&s, dq_checker::quarantine::Command::Drop { ids: vec!["p".into()] })
        .await
        .unwrap();
    assert_eq!(q.admin().quarantined_count().await, 0);
}

fn dead_event(id: &str) -> String {
    serde_json::json!({"kind": "dead", "topic": "pay", "id": id, "attempts": 3, "error": "boom", "at": 1}).to_string()
}

/// Two checkers on one installation: the one that holds the lease sends, so a primary going down and
/// coming back is one alert each way, and each dead job is in one alert, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_checkers_send_each_alert_once() {
    let mut redis = RedisServer::start_persistent();
    let smtp = SmtpSink::start().await;
    let alerts = WebhookSink::start().await;
    let s = settings(&[&redis], &smtp, &alerts.url).await;
    let q = Queue::connect(&s).await.unwrap();
    let (stop_a, task_a) = start(&s);
    let (stop_b, task_b) = start(&s);
    for id in ["d1", "d2", "d3"] {
        let _: () = redis::cmd("LPUSH")
            .arg(q.partition_keys(q.partitions().of_id(id)).events())
            .arg(dead_event(id))
            .query(&mut redis.conn())
            .unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "the dead jobs alerted and their events forgotten",
        || async {
            let sent: u64 = alerts
                .of_kind("dead_jobs")
                .iter()
                .map(|a| a["details"]["count"].as_u64().unwrap())
                .sum();
            let pending: i64 = ["d1", "d2", "d3"]
                .iter()
                .map(|id| {
                    redis::cmd("LLEN")
                        .arg(q.partition_keys(q.partitions().of_id(id)).events_pending())
                        .query::<i64>(&mut redis.conn())
                        .unwrap()
                })
                .sum();
            sent == 3 && pending == 0
        },
    )
    .await;
    redis.stop();
    eventually(Duration::from_secs(30), "a redis_down alert", || async {
        !alerts.of_kind("redis_down").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    redis.restart();
    eventually(Duration::from_secs(30), "a redis_up alert", || async {
        !alerts.of_kind("redis_up").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(alerts.of_kind("redis_down").len(), 1, "one checker sends");
    assert_eq!(alerts.of_kind("redis_up").len(), 1, "one checker sends");
    let dead: u64 = alerts
        .of_kind("dead_jobs")
        .iter()
        .map(|a| a["details"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(dead, 3, "each dead job once: {:?}", alerts.of_kind("dead_jobs"));
    for (stop, task) in [(stop_a, task_a), (stop_b, task_b)] {
        stop.cancel();
        task.await.unwrap().unwrap();
    }
}

/// A checker that took dead-job events and died before it sent them: they wait in their partition's
/// pending list, and the next checker sends them. A webhook that refuses a few times is tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_job_events_outlive_a_checker_that_died_and_a_webhook_that_refused() {
    let redis = RedisServer::start();
    let smtp = SmtpSink::start().await;
    let alerts = WebhookSink::start_failing(2).await;
    let mut s = settings(&[&redis], &smtp, &alerts.url).await;
    s.checker.smtp_url = None;
    let q = Queue::connect(&s).await.unwrap();
    let p = q.partitions().of_id("lost");
    let _: () = redis::cmd("LPUSH")
        .arg(q.partition_keys(p).events())
        .arg(dead_event("lost"))
        .query(&mut redis.conn())
        .unwrap();
    // Taken, as by a checker that then died before sending.
    assert_eq!(q.checker().take_events(p, 1000, &[]).await.unwrap().len(), 1);
    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "the pending event alerted", || async {
        alerts
            .of_kind("dead_jobs")
            .iter()
            .any(|a| a["details"]["jobs"][0]["id"] == "lost")
    })
    .await;
    eventually(Duration::from_secs(10), "the pending list cleared", || async {
        let n: i64 = redis::cmd("LLEN")
            .arg(q.partition_keys(p).events_pending())
            .query(&mut redis.conn())
            .unwrap();
        n == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(alerts.of_kind("dead_jobs").len(), 1, "sent once");
    stop.cancel();
    task.await.unwrap().unwrap();
}
