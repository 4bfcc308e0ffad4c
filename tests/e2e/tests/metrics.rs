//! Every binary serves `/metrics`, and every metric `docs/metrics.md` documents is really there, on the
//! binaries the doc names, once the system has done some work; so is every series the Grafana dashboard
//! (`deploy/grafana/dq.json`) queries.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::{env, metrics, start, start_on};
use dq_harness::{DqProcess, RedisServer, eventually, free_port};
use serde_json::{Value, json};

/// Metric names documented in docs/metrics.md (the first column of its tables).
fn documented() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md")).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `dq_"))
        .filter_map(|rest| rest.split('`').next())
        .map(|name| format!("dq_{name}"))
        .collect()
}

/// Names present in a scrape (histograms by their base name).
fn names(scrape: &HashMap<String, f64>) -> Vec<String> {
    let mut out: Vec<String> = scrape
        .keys()
        .map(|k| k.split('{').next().unwrap().to_string())
        .map(|k| {
            for suffix in ["_bucket", "_count", "_sum"] {
                if let Some(base) = k.strip_suffix(suffix) {
                    return base.to_string();
                }
            }
            k
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binary_serves_the_documented_metrics() {
    let redis = RedisServer::start();
    // With the beanstalkd listener, and one connection that stays open and puts a job.
    let (server_port, beanstalkd) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let mut vars = env(&[&redis], server_port);
    vars.push(("DQ__BEANSTALKD__LISTEN", beanstalkd.clone()));
    let server = start_on("dq-server", server_port, vars).await;
    let mut protocol = tokio::net::TcpStream::connect(&beanstalkd).await.unwrap();
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        protocol.write_all(b"put 0 0 60 2\r\nhi\r\n").await.unwrap();
        let mut reply = [0u8; 64];
        assert!(protocol.read(&mut reply).await.unwrap() > 0);
    }
    let timer = start("dq-timer", &[&redis]).await;
    let consumer_port = free_port();
    let mut vars = env(&[&redis], consumer_port);
    vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
    // Span export on (to where nothing listens), so its counter shows.
    vars.push(("DQ__TELEMETRY__OTLP_ENDPOINT", "http://127.0.0.1:9".into()));
    let _consumer = DqProcess::spawn("dq-consumer", &vars, &[]);
    // A checker whose webhook fails (nothing listens on port 9), so every alert metric shows, and which
    // keeps dead jobs for 1 ms, so dq_dead_jobs_dropped_total shows.
    let checker_port = free_port();
    let mut vars = env(&[&redis], checker_port);
    vars.extend([
        ("DQ__CHECKER__INTERVAL_MS", "100".to_string()),
        ("DQ__CHECKER__AUDIT_INTERVAL_MS", "300".to_string()),
        ("DQ__CHECKER__BACKLOG_THRESHOLD", "0".to_string()),
        ("DQ__CHECKER__WEBHOOK_URL", "http://127.0.0.1:9/alerts".to_string()),
        ("DQ__JOBS__DEAD_RETENTION_MS", "1".to_string()),
    ]);
    let _checker = DqProcess::spawn("dq-checker", &vars, &[]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    let call = |method: &str, path: &str, body: Value| {
        http.request(method.parse().unwrap(), format!("{base}{path}"))
            .json(&body)
            .send()
    };

    // A callback that works, and one that does not (nothing listens on port 9): delivered and dead jobs,
    // whose dead-job hooks go to the one that works.
    let app = axum::Router::new().route("/hook", axum::routing::post(|| async { r#"{"ok":true}"# }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    call("PUT", "/v1/topics/good", json!({"callback": {"url": hook}}))
        .await
        .unwrap();
    call(
        "PUT",
        "/v1/topics/bad",
        json!({"callback": {"url": "http://127.0.0.1:9/x", "on_dead_url": hook, "on_success_url": hook}, "retry": {"max_attempts": 1}}),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..5 {
        call("POST", "/v1/jobs", json!({"topic": "good", "body": i, "delay_ms": 100}))
            .await
            .unwrap();
        call("POST", "/v1/jobs", json!({"topic": "bad", "body": i}))
            .await
            .unwrap();
    }
    // A push inside another's deduplication window.
    for _ in 0..2 {
        call(
            "POST",
            "/v1/jobs",
            json!({"topic": "once", "body": 1, "delay_ms": 600000, "dedup_key": "k", "dedup_ms": 600000}),
        )
        .await
        .unwrap();
    }
    // A schedule, every second: the timer fires it.
    call(
        "PUT",
        "/v1/schedules/tick",
        json!({"cron": "* * * * * *", "topic": "ticks", "body": 1}),
    )
    .await
    .unwrap();
    // Pull work: an ack, a nack to dead, and a reservation left to expire.
    for (verb, ttr) in [("ack", 30000), ("nack", 30000), ("expire", 10)] {
        call(
            "POST",
            "/v1/jobs",
            json!({"topic": "pull", "body": verb, "ttr_ms": ttr, "max_attempts": 1}),
        )
        .await
        .unwrap();
        let got: Value = call("POST", "/v1/reserve", json!({"topics": ["pull"]}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let job = &got["jobs"][0];
        if verb != "expire" {
            let path = format!("/v1/jobs/{}/{verb}", job["id"].as_str().unwrap());
            call("POST", &path, json!({"receipt": job["receipt"]})).await.unwrap();
        }
    }

    let want: &[(&str, u16, &[&str])] = &[
        (
            "dq-server",
            server.port,
            &[
                "dq_jobs_pushed_total",
                "dq_jobs_deduplicated_total",
                "dq_jobs_reserved_total",
                "dq_jobs_acked_total",
                "dq_jobs_nacked_total",
                "dq_jobs_dead_total",
                "dq_redis_up",
                "dq_redis_latency_seconds",
                "dq_writes_not_replicated_total",
                "dq_ready_index_topics",
                "dq_auth_refusals_total",
            ],
        ),
        (
            "dq-timer",
            timer.port,
            &[
                "dq_jobs_promoted_total",
                "dq_jobs_expired_total",
                "dq_promotion_lateness_seconds",
                "dq_timer_partitions_owned",
                "dq_timer_live_timers",
                "dq_timer_next_due_timestamp_seconds",
                "dq_schedule_next_fire_timestamp_seconds",
                "dq_schedule_fire_lateness_seconds",
                "dq_schedule_occurrences_fired_total",
                "dq_jobs_dead_total",
                "dq_redis_up",
            ],
        ),
        (
            "dq-consumer",
            consumer_port,
            &[
                "dq_deliveries_total",
                "dq_callback_duration_seconds",
                "dq_delivery_lateness_seconds",
                "dq_consumer_in_flight",
                "dq_spans_export_failed_total",
                "dq_jobs_reserved_total",
                "dq_jobs_acked_total",
                "dq_jobs_nacked_total",
                "dq_jobs_dead_total",
                "dq_redis_up",
            ],
        ),
        (
            "dq-checker",
            checker_port,
            &[
                "dq_redis_up",
                "dq_redis_latency_seconds",
                "dq_redis_used_memory_bytes",
                "dq_redis_maxmemory_bytes",
                "dq_redis_primary",
                "dq_redis_config_ok",
                "dq_queue_depth",
                "dq_oldest_ready_age_seconds",
                "dq_flow_keys",
                "dq_flow_busiest_ready",
                "dq_alerts_total",
                "dq_alerts_failed_total",
                "dq_audit_repairs_total",
                "dq_audit_last_run_timestamp_seconds",
                "dq_dead_jobs_dropped_total",
                "dq_dead_hooks_total",
                "dq_dead_hooks_waiting",
                "dq_success_hooks_total",
                "dq_success_hooks_waiting",
                "dq_quarantined_jobs",
            ],
        ),
    ];
    let mut seen_anywhere: Vec<String> = Vec::new();
    // Series names as served (a histogram's `_bucket`, `_sum` and `_count`), for the dashboard's queries.
    let mut series_anywhere: BTreeSet<String> = BTreeSet::new();
    for (binary, port, expected) in want {
        let seen = std::sync::Mutex::new(Vec::new());
        let series = std::sync::Mutex::new(BTreeSet::new());
        eventually(
            Duration::from_secs(60),
            &format!("{binary} serves {expected:?}"),
            || async {
                let scrape = metrics(*port).await;
                let got = names(&scrape);
                let ok = expected.iter().all(|m| got.iter().any(|g| g == m));
                *seen.lock().unwrap() = got;
                *series.lock().unwrap() = scrape
                    .keys()
                    .map(|k| k.split('{').next().unwrap().to_string())
                    .collect();
                ok
            },
        )
        .await;
        seen_anywhere.extend(seen.into_inner().unwrap());
        series_anywhere.extend(series.into_inner().unwrap());
    }
    let documented = documented();
    for name in &documented {
        assert!(
            seen_anywhere.contains(name),
            "docs/metrics.md documents {name}, which no binary serves"
        );
    }
    for name in seen_anywhere.iter().filter(|n| n.starts_with("dq_")) {
        assert!(
            documented.contains(name),
            "{name} is served but not documented in docs/metrics.md"
        );
    }
    // Every series the Grafana dashboard queries is served by some binary (`up` is Prometheus's own).
    for name in common::dashboard::metric_names(&common::dashboard::load()) {
        assert!(
            name == "up" || series_anywhere.contains(&name),
            "deploy/grafana/dq.json queries {name}, which no binary serves"
        );
    }
}
