//! One tour of dq in a Redis shape, the same for all three: every API verb, dq-timer, dq-consumer and
//! dq-checker as processes, and the checker's audit at the end. The shapes' own tests add what only
//! their shape shows.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use dq_harness::{DqProcess, WebhookSink, eventually, free_port};
use serde_json::{Value, json};

use super::{Api, Running, env_for, start_on};

/// What a tour leaves for the shape's own checks.
pub struct Toured {
    /// `GET /v1/stats` at the end.
    pub stats: Value,
    /// dq-checker's metrics at the end.
    pub checker_metrics: HashMap<String, f64>,
    /// The processes, still running.
    pub processes: Vec<Running>,
}

/// The job ids a sink received.
pub fn sink_ids(sink: &WebhookSink) -> HashSet<String> {
    sink.received
        .lock()
        .unwrap()
        .iter()
        .filter_map(|b| b["id"].as_str().map(String::from))
        .collect()
}

/// Runs the tour against Redis in `mode` at `urls` (with `extra` settings for every process), whose
/// data lives on `primaries` primaries: the stats and the checker's health gauges must name each.
pub async fn every_verb(mode: &str, urls: &[String], extra: &[(&'static str, &str)], primaries: usize) -> Toured {
    let env = |port: u16, more: &[(&'static str, &str)]| {
        let mut vars = env_for(mode, urls, port, extra);
        vars.extend(more.iter().map(|(k, v)| (*k, v.to_string())));
        vars
    };
    let sink = WebhookSink::start().await;
    let (sp, tp, cp, kp) = (free_port(), free_port(), free_port(), free_port());
    let server = start_on("dq-server", sp, env(sp, &[])).await;
    let timer = start_on("dq-timer", tp, env(tp, &[])).await;
    let consumer = start_on("dq-consumer", cp, env(cp, &[("DQ__TOPICS__REFRESH_MS", "200")])).await;
    let checker = start_on("dq-checker", kp, env(kp, &[("DQ__CHECKER__INTERVAL_MS", "200")])).await;
    let api = Api::new(server.port);

    // Push delivery through dq-consumer, jobs with and without ids, ready and delayed.
    api.ok("PUT", "/v1/topics/hook", Some(json!({"callback": {"url": sink.url}})))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..40 {
        api.ok(
            "POST",
            "/v1/jobs",
            Some(json!({"id": format!("h{i}"), "topic": "hook", "body": i, "delay_ms": i * 10})),
        )
        .await;
        api.ok("POST", "/v1/jobs", Some(json!({"topic": "hook", "body": 100 + i})))
            .await;
    }
    eventually(Duration::from_secs(60), "80 callbacks", || async {
        sink_ids(&sink).len() == 80
    })
    .await;
    // Due one by one while the consumer waits: the timer hands them to it over pub/sub
    // (sharded pub/sub on a cluster).
    for i in 0..20 {
        api.ok(
            "POST",
            "/v1/jobs",
            Some(json!({"id": format!("handed{i}"), "topic": "hook", "body": i, "delay_ms": 1500 + i * 50})),
        )
        .await;
    }
    eventually(Duration::from_secs(60), "100 callbacks", || async {
        sink_ids(&sink).len() == 100
    })
    .await;
    assert!(
        super::metric_sum(timer.port, "dq_jobs_handed_off_total").await > 0.0,
        "the timer handed due jobs to the waiting consumer"
    );

    // Pull: batch push, reserve, ack, nack, touch, look up, reschedule, cancel.
    let jobs: Vec<Value> = (0..50)
        .map(|i| json!({"id": format!("p{i}"), "topic": "pull", "body": i}))
        .collect();
    let out = api.ok("POST", "/v1/jobs/batch", Some(json!({"jobs": jobs}))).await;
    assert_eq!(out["results"].as_array().unwrap().len(), 50);
    let later = api
        .ok(
            "POST",
            "/v1/jobs",
            Some(json!({"topic": "pull", "body": "x", "delay_ms": 600000})),
        )
        .await;
    let id = later["id"].as_str().unwrap().to_string();
    assert_eq!(api.ok("GET", &format!("/v1/jobs/{id}"), None).await["state"], "delayed");
    assert_eq!(
        api.ok("PATCH", &format!("/v1/jobs/{id}"), Some(json!({"delay_ms": 0})))
            .await["state"],
        "ready"
    );
    let (status, _) = api.call("DELETE", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, 204);
    let mut seen = HashSet::new();
    let mut nacked = false;
    let mut touched = false;
    while seen.len() < 50 {
        let got = api
            .ok(
                "POST",
                "/v1/reserve",
                Some(json!({"topics": ["pull"], "count": 10, "timeout_ms": 5000})),
            )
            .await;
        for j in got["jobs"].as_array().unwrap() {
            let (jid, receipt) = (j["id"].as_str().unwrap(), j["receipt"].clone());
            if !touched {
                let out = api
                    .ok(
                        "POST",
                        &format!("/v1/jobs/{jid}/touch"),
                        Some(json!({"receipt": receipt})),
                    )
                    .await;
                assert!(out["deadline"].as_i64().unwrap() > 0);
                touched = true;
            }
            if !nacked {
                api.ok(
                    "POST",
                    &format!("/v1/jobs/{jid}/nack"),
                    Some(json!({"receipt": receipt, "delay_ms": 0})),
                )
                .await;
                nacked = true;
                continue;
            }
            let (status, _) = api
                .call(
                    "POST",
                    &format!("/v1/jobs/{jid}/ack"),
                    Some(json!({"receipt": receipt})),
                )
                .await;
            assert_eq!(status, 204);
            seen.insert(jid.to_string());
        }
    }

    // A priority, changed by PATCH with the due time kept; two merge pushes of one key, one job.
    let urgent = api
        .ok(
            "POST",
            "/v1/jobs",
            Some(json!({"topic": "prio", "body": 1, "priority": 3, "delay_ms": 600000})),
        )
        .await;
    let path = format!("/v1/jobs/{}", urgent["id"].as_str().unwrap());
    let job = api.ok("PATCH", &path, Some(json!({"priority": 0}))).await;
    assert_eq!(
        (&job["priority"], &job["state"], &job["run_at"]),
        (&json!(0), &json!("delayed"), &urgent["run_at"])
    );
    api.call("DELETE", &path, None).await;
    let merge = |n: u32| {
        json!({"topic": "digest", "body": n, "coalesce_key": "member-7",
               "coalesce": {"mode": "merge", "window_ms": 600000}})
    };
    let first = api.ok("POST", "/v1/jobs", Some(merge(1))).await;
    let (status, second) = api.call("POST", "/v1/jobs", Some(merge(2))).await;
    assert_eq!(
        (status, &second["id"], &second["coalesced"]),
        (200, &first["id"], &json!(true))
    );
    let path = format!("/v1/jobs/{}", first["id"].as_str().unwrap());
    assert_eq!(api.ok("GET", &path, None).await["body"], json!({"items": [1, 2]}));
    api.call("DELETE", &path, None).await;

    // Flow keys: at flow.concurrency 1 a reserve takes one job of each key; the busiest keys; the jobs
    // left ready stay for the audit below (their keys' queues and turns are no damage to repair).
    api.ok("PUT", "/v1/topics/keyed", Some(json!({"flow": {"concurrency": 1}})))
        .await;
    for key in ["a", "a", "a", "b"] {
        api.ok(
            "POST",
            "/v1/jobs",
            Some(json!({"topic": "keyed", "body": key, "flow_key": key})),
        )
        .await;
    }
    let flows = api.ok("GET", "/v1/topics/keyed/flows", None).await;
    assert_eq!(
        (&flows["keys"], &flows["busiest"][0]["key"]),
        (&json!(2), &json!("a")),
        "{flows}"
    );
    let got = api
        .ok("POST", "/v1/reserve", Some(json!({"topics": ["keyed"], "count": 10})))
        .await;
    let mut keys: Vec<&str> = got["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["flow_key"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["a", "b"], "{got}");
    for j in got["jobs"].as_array().unwrap() {
        let path = format!("/v1/jobs/{}/ack", j["id"].as_str().unwrap());
        api.call("POST", &path, Some(json!({"receipt": j["receipt"]}))).await;
    }

    // Dead letters over the partitions: nack on the last attempt, list, requeue.
    for i in 0..5 {
        api.ok(
            "POST",
            "/v1/jobs",
            Some(json!({"id": format!("d{i}"), "topic": "doomed", "body": i, "max_attempts": 1})),
        )
        .await;
    }
    let got = api
        .ok("POST", "/v1/reserve", Some(json!({"topics": ["doomed"], "count": 5})))
        .await;
    for j in got["jobs"].as_array().unwrap() {
        let path = format!("/v1/jobs/{}/nack", j["id"].as_str().unwrap());
        api.ok("POST", &path, Some(json!({"receipt": j["receipt"], "error": "no"})))
            .await;
    }
    let dead = api.ok("GET", "/v1/topics/doomed/dead", None).await;
    assert_eq!(dead["total"], got["jobs"].as_array().unwrap().len());
    api.ok("POST", "/v1/topics/doomed/dead/requeue", Some(json!({}))).await;

    let stats = api.ok("GET", "/v1/stats", None).await;
    assert_eq!(stats["redis"]["mode"], mode);
    assert_eq!(stats["redis"]["partitions"], 256);
    let nodes = stats["redis"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), primaries, "{stats}");
    assert!(nodes.iter().all(|n| n["up"] == true), "{stats}");
    let checker_metrics = super::metrics(kp).await;
    assert_eq!(
        checker_metrics.keys().filter(|k| k.starts_with("dq_redis_up{")).count(),
        primaries,
        "one health gauge per primary"
    );

    let mut audit = DqProcess::spawn("dq-checker", &env(free_port(), &[]), &["audit"]);
    let status = audit.wait(Duration::from_secs(60)).expect("the audit finishes");
    assert_eq!(status.code(), Some(0), "{}", audit.log());
    let log = audit.log();
    let report: Value = serde_json::from_str(log.lines().rev().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(
        (report["orphan_records"].as_u64(), report["dangling_ids"].as_u64()),
        (Some(0), Some(0)),
        "{report}"
    );
    assert!(report["records"].as_u64().unwrap() > 0, "{report}");
    Toured {
        stats,
        checker_metrics,
        processes: vec![server, timer, consumer, checker],
    }
}
