//! The callback egress policy with the real dq-consumer: callbacks the policy refuses at connect time
//! never reach their target, and an answer far beyond the cap leaves dq-consumer's memory flat.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::{env, job, queue, start_on};
use dq_core::topic::TopicRules;
use dq_core::{Queue, State, TopicConfig};
use dq_harness::{RedisServer, eventually, free_port};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TCP listener on 127.0.0.1 that only counts the connections it gets.
async fn target() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((_conn, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, count)
}

/// Registers `topic` with a callback to `url`, checked as dq-server checks it (`checked`) or written as
/// a permissive dq-server would have accepted it; pushes one job that goes dead at its first failure.
async fn register_and_push(q: &Queue, topic: &str, url: &str, checked: bool) -> String {
    let config: TopicConfig = serde_json::from_value(json!({"callback": {"url": url, "timeout_ms": 2000}})).unwrap();
    if checked {
        config.validate(&q.limits(), &q.egress().await).unwrap();
    }
    q.admin().put_topic(topic, &config).await.unwrap();
    let pushed = q
        .producer()
        .push(job(q, json!({"topic": topic, "body": 1, "max_attempts": 1})))
        .await
        .unwrap();
    pushed.id
}

/// The job's `last_error` once it is dead.
async fn dead_with_error(q: &Queue, id: &str) -> String {
    eventually(Duration::from_secs(30), &format!("{id} dead"), || async {
        q.producer().get(id).await.unwrap().state == State::Dead
    })
    .await;
    q.producer().get(id).await.unwrap().last_error.unwrap_or_default()
}

// Multi-threaded: the target listeners must keep accepting while the test waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_refused_at_connect_never_reach_their_target() {
    let redis = RedisServer::start();
    let q = queue(&[&redis]).await;
    let (port, connections) = target().await;
    let redis_port = redis.port();
    // Names pass registration (they are checked on what they resolve to, at connect); the literal IPs
    // are written as a registration made under a permissive policy would be.
    let cases = [
        (
            "by-name",
            format!("http://localhost:{port}/hook"),
            true,
            "egress.deny 127.0.0.0/8".to_string(),
        ),
        (
            "redis-by-name",
            format!("http://localhost:{redis_port}/"),
            true,
            format!("redis node 127.0.0.1:{redis_port}"),
        ),
        (
            "literal",
            format!("http://127.0.0.1:{port}/hook"),
            false,
            "egress.deny 127.0.0.0/8".into(),
        ),
        (
            "mapped",
            format!("http://[::ffff:127.0.0.1]:{port}/hook"),
            false,
            "egress.deny 127.0.0.0/8".into(),
        ),
        (
            "decimal",
            format!("http://2130706433:{port}/hook"),
            false,
            "egress.deny 127.0.0.0/8".into(),
        ),
        (
            "redis-literal",
            format!("http://127.0.0.1:{redis_port}/"),
            false,
            format!("redis node 127.0.0.1:{redis_port}"),
        ),
        (
            "metadata",
            "http://169.254.169.254/latest/meta-data/".into(),
            false,
            "link-local".into(),
        ),
    ];
    let mut ids = Vec::new();
    for (topic, url, checked, _) in &cases {
        ids.push(register_and_push(&q, topic, url, *checked).await);
    }

    let metrics_port = free_port();
    let mut vars = env(&[&redis], metrics_port);
    vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
    vars.push(("DQ__EGRESS__DENY", "127.0.0.0/8,::1".into()));
    let consumer = start_on("dq-consumer", metrics_port, vars).await;

    for ((topic, url, _, rule), id) in cases.iter().zip(&ids) {
        let error = dead_with_error(&q, id).await;
        assert!(error.contains(rule), "{topic} ({url}): `{error}` names {rule}");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0, "no callback reached the target");
    assert!(
        !redis.log().contains("SECURITY ATTACK"),
        "Redis saw no HTTP request: {}",
        redis.log()
    );
    let refused = common::metrics(metrics_port)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with("dq_deliveries_total{") && k.contains(r#"outcome="egress_refused""#))
        .map(|(_, v)| v)
        .sum::<f64>();
    assert_eq!(refused, cases.len() as f64, "counted as egress_refused");
    drop(consumer);
}

/// A callback that answers 200 with an endless chunked body, up to `total` bytes; counts what it sent.
async fn flood(total: u64) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = vec![0; 64 * 1024];
                let _ = conn.read(&mut head).await;
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if conn.write_all(head).await.is_err() {
                    return;
                }
                let chunk = [b'x'; 64 * 1024];
                let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                let mut left = total;
                while left > 0 {
                    if conn.write_all(&frame).await.is_err() {
                        return;
                    }
                    counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                    left = left.saturating_sub(chunk.len() as u64);
                }
                let _ = conn.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    (url, sent)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_200_mib_fails_as_too_large_and_memory_stays_flat() {
    let redis = RedisServer::start();
    let q = queue(&[&redis]).await;
    let (url, sent) = flood(200 << 20).await;
    let metrics_port = free_port();
    let mut vars = env(&[&redis], metrics_port);
    vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
    let mut consumer = start_on("dq-consumer", metrics_port, vars).await;
    let pid = consumer.process.pid();
    // Idle: started, serving, following an empty registry.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = status_kib(pid, "VmRSS");

    let id = register_and_push(&q, "flood", &url, true).await;
    let error = dead_with_error(&q, &id).await;
    assert!(error.contains("larger than 65536 bytes"), "{error}");
    assert!(
        sent.load(Ordering::SeqCst) > 65536,
        "the callback did send more than the cap"
    );
    let peak = status_kib(pid, "VmHWM");
    eprintln!("dq-consumer: idle RSS {idle} KiB, peak {peak} KiB");
    assert!(
        peak < idle + 32 * 1024,
        "peak RSS {peak} KiB is more than 32 MiB above the idle {idle} KiB"
    );
    assert!(consumer.process.is_running(), "still running");
}
