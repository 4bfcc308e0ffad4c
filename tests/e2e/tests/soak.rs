//! Soak: every dq binary as a real process under a steady mix of pushes, push deliveries (some failing
//! to death), pull reserves and acks on ever new topic names, long polls on names nothing is pushed to,
//! and topics registered and deleted. Afterwards nothing that would grow without bound is left: no
//! counts field of a topic without jobs, no job record, dead jobs within their cap and retention, no
//! registry tombstone. Redis's memory and each process's RSS are sampled and their growth per hour
//! printed (for the suite's short run, a figure with little meaning; `scripts/soak.sh` runs it long).
//!
//! `DQ_SOAK_SECS` (40) sets how long the load runs; `DQ_SOAK_TOPICS` cycles the pulled topics over that
//! many names (0, the default: a new name every round). Every process keeps a Prometheus series per
//! topic it handled, so ever new names grow dq-server's RSS by design; a bounded set tells that apart
//! from a leak. Memory is reported, not asserted: allocators keep what they took, and a short run on a
//! shared machine is noise.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{env, start_on};
use dq_harness::{RedisServer, free_port};
use serde_json::{Value, json};

/// Most dead jobs kept per topic, and for how long (ms).
const DEAD_CAP: u64 = 20;
const DEAD_RETENTION_MS: u64 = 4000;

/// A callback that answers `/ok` with 200 and `/fail` with 500.
async fn sink() -> String {
    let app = axum::Router::new()
        .route("/ok", axum::routing::post(|| async { "{}" }))
        .route(
            "/fail",
            axum::routing::post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "no") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// Resident set size of a process, in bytes.
fn rss(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb * 1024.0)
}

fn used_memory(redis: &RedisServer) -> f64 {
    let info: String = redis::cmd("INFO").arg("memory").query(&mut redis.conn()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Growth per hour of a series of (seconds, value): the least-squares slope × 3600.
fn per_hour(samples: &[(f64, f64)]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (
        samples.iter().map(|s| s.0).sum::<f64>() / n,
        samples.iter().map(|s| s.1).sum::<f64>() / n,
    );
    let cov: f64 = samples.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = samples.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var * 3600.0 }
}

/// Every field of every partition's counts hash.
fn count_fields(redis: &RedisServer) -> HashMap<String, i64> {
    let mut c = redis.conn();
    let mut all = HashMap::new();
    for key in redis::cmd("KEYS")
        .arg("dq:{*}:counts")
        .query::<Vec<String>>(&mut c)
        .unwrap()
    {
        let h: HashMap<String, i64> = redis::cmd("HGETALL").arg(&key).query(&mut c).unwrap();
        for (f, n) in h {
            *all.entry(f).or_default() += n;
        }
    }
    all
}

fn keys(redis: &RedisServer, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS").arg(pattern).query(&mut redis.conn()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_mixed_load_leaves_nothing_that_grows() {
    let secs: u64 = std::env::var("DQ_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let names: u64 = std::env::var("DQ_SOAK_TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let redis = RedisServer::start();
    let extra = [
        ("DQ__JOBS__DONE_RETENTION_MS", "0".to_string()),
        ("DQ__JOBS__DEAD_RETENTION_MS", DEAD_RETENTION_MS.to_string()),
        ("DQ__JOBS__DEAD_MAX_PER_TOPIC", DEAD_CAP.to_string()),
        ("DQ__TOPICS__REFRESH_MS", "200".to_string()),
        ("DQ__CHECKER__INTERVAL_MS", "200".to_string()),
        ("DQ__CHECKER__HOUSEKEEPING_INTERVAL_MS", "1000".to_string()),
    ];
    let mut procs = Vec::new();
    for name in ["dq-server", "dq-timer", "dq-consumer", "dq-checker"] {
        let port = free_port();
        let mut vars = env(&[&redis], port);
        vars.extend(extra.iter().cloned());
        procs.push((name, start_on(name, port, vars).await));
    }
    let api = format!("http://127.0.0.1:{}", procs[0].1.port);
    let http = reqwest::Client::new();
    let hook = sink().await;
    for (topic, path) in [("soak.ok", "ok"), ("soak.fail", "fail")] {
        let status = http
            .put(format!("{api}/v1/topics/{topic}"))
            .json(&json!({"callback": {"url": format!("{hook}/{path}")}, "retry": {"max_attempts": 1}}))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }

    // Memory and the server's ready index, sampled every second while the load runs.
    let running = Arc::new(AtomicBool::new(true));
    let pids: Vec<(&'static str, u32)> = procs.iter().map(|(n, r)| (*n, r.process.pid())).collect();
    let server_port = procs[0].1.port;
    let sampler = {
        let (running, pids, port) = (running.clone(), pids.clone(), server_port);
        let url = redis.url();
        tokio::spawn(async move {
            let client = redis::Client::open(url).unwrap();
            let mut series: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
            let began = Instant::now();
            while running.load(Ordering::Relaxed) {
                let at = began.elapsed().as_secs_f64();
                if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                    let info: String = redis::cmd("INFO")
                        .arg("memory")
                        .query_async(&mut c)
                        .await
                        .unwrap_or_default();
                    if let Some(v) = info.lines().find_map(|l| l.strip_prefix("used_memory:")) {
                        series
                            .entry("redis used_memory".into())
                            .or_default()
                            .push((at, v.trim().parse().unwrap_or(0.0)));
                    }
                }
                for (name, pid) in &pids {
                    series.entry(format!("{name} RSS")).or_default().push((at, rss(*pid)));
                }
                let index = common::metrics(port).await.get("dq_ready_index_topics").copied();
                if let Some(v) = index {
                    series
                        .entry("dq-server ready index topics".into())
                        .or_default()
                        .push((at, v));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            series
        })
    };

    let began = Instant::now();
    let mut round = 0u64;
    let (mut pushed, mut pulled) = (0u64, 0u64);
    while began.elapsed() < Duration::from_secs(secs) {
        round += 1;
        let fresh = format!("pull.{}", if names > 0 { round % names } else { round });
        let mut jobs: Vec<Value> = (0..20)
            .map(|i| json!({"topic": "soak.ok", "body": {"round": round, "i": i}}))
            .collect();
        jobs.extend((0..5).map(|i| json!({"topic": "soak.fail", "body": i})));
        jobs.extend((0..10).map(|i| json!({"topic": fresh, "body": i})));
        let http = &http;
        let call = |method: &'static str, path: String, body: Option<Value>| async move {
            common::call(http, server_port, method, &path, body).await
        };
        let (status, _) = call("POST", "/v1/jobs/batch".into(), Some(json!({"jobs": jobs}))).await;
        assert_eq!(status, 200);
        pushed += 35;
        // The fresh topic's jobs, reserved and acked; then a short long poll on a name nothing is pushed to.
        let mut left = 10;
        while left > 0 {
            let reserve = json!({"topics": [fresh], "count": 10, "timeout_ms": 1000});
            let (_, got) = call("POST", "/v1/reserve".into(), Some(reserve)).await;
            for job in got["jobs"].as_array().unwrap() {
                let ack = format!("/v1/jobs/{}/ack", job["id"].as_str().unwrap());
                let (status, _) = call("POST", ack, Some(json!({"receipt": job["receipt"]}))).await;
                assert_eq!(status, 204);
                left -= 1;
                pulled += 1;
            }
        }
        let ghost = json!({"topics": [format!("ghost.{round}")], "timeout_ms": 20});
        let (_, ghost) = call("POST", "/v1/reserve".into(), Some(ghost)).await;
        assert_eq!(ghost["jobs"], json!([]));
        // A topic registered and deleted now and then.
        if round.is_multiple_of(10) {
            let temp = format!("/v1/topics/temp.{round}");
            assert_eq!(call("PUT", temp.clone(), Some(json!({}))).await.0, 200);
            assert_eq!(call("DELETE", temp, None).await.0, 204);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let load = began.elapsed();

    // Everything is delivered, acked or dead; the dead go with their retention.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = keys(&redis, "dq:{*}:job:*");
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let mut what = Vec::new();
            for id in left.iter().take(10) {
                let id = id.rsplit_once(":job:").unwrap().1;
                let job: Value = http
                    .get(format!("{api}/v1/jobs/{id}"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                what.push(job);
            }
            panic!(
                "{} jobs left in Redis, such as {what:#?}; counts {:?}",
                left.len(),
                count_fields(&redis)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.store(false, Ordering::Relaxed);
    let series = sampler.await.unwrap();

    // The scripts leave counts at 0; the checker's housekeeping removes them.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !count_fields(&redis).is_empty() {
        assert!(
            Instant::now() < deadline,
            "counts fields left without jobs: {:?}",
            count_fields(&redis)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let registry: HashMap<String, String> = redis::cmd("HGETALL")
        .arg("{dq}:topics")
        .query(&mut redis.conn())
        .unwrap();
    let mut names: Vec<&String> = registry.keys().collect();
    names.sort();
    assert_eq!(names, ["soak.fail", "soak.ok"], "no tombstone of the deleted topics");
    let dead_keys = keys(&redis, "dq:{*}:dead:*");
    assert!(dead_keys.is_empty(), "dead lists left: {dead_keys:?}");
    let checker = procs.iter().find(|(n, _)| *n == "dq-checker").unwrap().1.port;
    let dropped = common::metric_sum(checker, "dq_dead_jobs_dropped_total").await;
    assert!(dropped > 0.0, "the dead jobs went by the checker's retention or cap");

    println!(
        "soak: {:.0} s of load, {round} rounds, {pushed} jobs pushed, {pulled} pulled, {dropped} dead jobs dropped by the checker",
        load.as_secs_f64()
    );
    println!("redis used_memory at the end: {:.0} B", used_memory(&redis));
    let mut names: Vec<&String> = series.keys().collect();
    names.sort();
    for name in names {
        let s = &series[name];
        let (first, last) = (s.first().map_or(0.0, |v| v.1), s.last().map_or(0.0, |v| v.1));
        let peak = s.iter().map(|v| v.1).fold(0.0, f64::max);
        // The second half only: the first holds the warm-up (connections, caches, scripts).
        let half = &s[s.len() / 2..];
        println!(
            "{name}: first {first:.0}, last {last:.0}, peak {peak:.0}, growth per hour over the second half {:+.0}",
            per_hour(half)
        );
    }
}
