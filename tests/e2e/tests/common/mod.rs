//! Starting dq binaries against a test Redis, and reading what they expose.
#![allow(dead_code, missing_docs)]

pub mod beanstalkd;
pub mod dashboard;
pub mod tour;
pub mod webdriver;

use std::collections::HashMap;
use std::time::Duration;

use dq_harness::{DqProcess, RedisServer, eventually, free_port};

/// A dq binary with its metrics (or API) port.
pub struct Running {
    pub process: DqProcess,
    pub port: u16,
}

pub fn env(redis: &[&RedisServer], port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("DQ__REDIS__URLS", redis[0].url()),
        ("DQ__METRICS__LISTEN", format!("127.0.0.1:{port}")),
        ("DQ__SERVER__LISTEN", format!("127.0.0.1:{port}")),
        ("DQ__SHUTDOWN__GRACE_MS", "5000".into()),
        ("DQ__LIMITS__MIN_TTR_MS", "10".into()),
    ]
}

/// A callback at the returned URL that answers 200 `{"ok":true}` after `delay`, counting the requests.
pub async fn hook(delay: Duration) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                r#"{"ok":true}"#
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, count)
}

/// Starts `name` and waits until its HTTP port answers `/healthz`.
pub async fn start(name: &str, redis: &[&RedisServer]) -> Running {
    let port = free_port();
    start_on(name, port, env(redis, port)).await
}

/// The environment for a dq binary on `port` against Redis in `mode` at `urls`, plus `extra`.
pub fn env_for(mode: &str, urls: &[String], port: u16, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("DQ__REDIS__MODE", mode.to_string()),
        ("DQ__REDIS__URLS", urls.join(",")),
        ("DQ__METRICS__LISTEN", format!("127.0.0.1:{port}")),
        ("DQ__SERVER__LISTEN", format!("127.0.0.1:{port}")),
        ("DQ__SHUTDOWN__GRACE_MS", "5000".into()),
        ("DQ__LIMITS__MIN_TTR_MS", "10".into()),
    ];
    vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    vars
}

/// Starts `name` on `port` with `vars` and waits until it answers `/healthz`.
pub async fn start_on(name: &str, port: u16, vars: Vec<(&'static str, String)>) -> Running {
    let process = DqProcess::spawn(name, &vars, &[]);
    let url = format!("http://127.0.0.1:{port}/healthz");
    eventually(Duration::from_secs(30), &format!("{name} serves {url}"), || async {
        reqwest::get(&url).await.is_ok_and(|r| r.status().is_success())
    })
    .await;
    Running { process, port }
}

/// Scrapes `/metrics` into name{labels} → value.
pub async fn metrics(port: u16) -> HashMap<String, f64> {
    metrics_with(&reqwest::Client::new(), port).await
}

/// Scrapes `/metrics` with `http` (which may carry a token) into name{labels} → value.
pub async fn metrics_with(http: &reqwest::Client, port: u16) -> HashMap<String, f64> {
    let text = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            l.rsplit_once(' ')
                .and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        })
        .collect()
}

/// Sum of a metric over its labels.
pub async fn metric_sum(port: u16, name: &str) -> f64 {
    metric_sum_with(&reqwest::Client::new(), port, name).await
}

/// Sum of a metric over its labels, scraped with `http`.
pub async fn metric_sum_with(http: &reqwest::Client, port: u16, name: &str) -> f64 {
    metrics_with(http, port)
        .await
        .into_iter()
        .filter(|(k, _)| k == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

/// Lease holders on a shard: timer id → bucket count.
pub fn lease_holders(redis: &RedisServer) -> HashMap<String, usize> {
    let leases: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("{dq}:leases")
        .query(&mut redis.conn())
        .unwrap();
    let mut per = HashMap::new();
    for (_, v) in leases {
        *per.entry(v.split(' ').next().unwrap().to_string()).or_default() += 1;
    }
    per
}

pub async fn queue(redis: &[&RedisServer]) -> dq_core::Queue {
    let mut s = dq_core::Settings::default();
    s.redis.urls = vec![redis[0].url()];
    s.limits.min_ttr_ms = 10;
    dq_core::Queue::connect(&s).await.unwrap()
}

pub fn job(q: &dq_core::Queue, json: serde_json::Value) -> dq_core::NewJob {
    q.producer().validate(serde_json::from_value(json).unwrap()).unwrap()
}

/// Reserves and acks everything ready on `topic` until `n` distinct jobs were seen (or the deadline).
/// Panics on a duplicate.
pub async fn drain_exactly(q: &dq_core::Queue, topic: &str, n: usize, timeout: Duration) {
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    eventually(timeout, &format!("{n} distinct jobs of {topic}"), || async {
        for r in q.reservations().reserve(&[topic.to_string()], 100).await.unwrap() {
            assert!(seen.lock().unwrap().insert(r.id.clone()), "{} handed out twice", r.id);
            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
        }
        seen.lock().unwrap().len() >= n
    })
    .await;
    assert_eq!(seen.lock().unwrap().len(), n);
}

/// Sends a request to a dq-server on `port`: its status and JSON answer (`0` and `Null` when the request
/// itself failed, e.g. timed out while Redis fails over).
pub async fn call(
    http: &reqwest::Client,
    port: u16,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = http.request(method.parse().unwrap(), format!("http://127.0.0.1:{port}{path}"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
        }
        Err(_) => (0, serde_json::Value::Null),
    }
}

/// A dq-server's API on a port, with a client whose requests time out after 30 s.
pub struct Api {
    pub port: u16,
    http: reqwest::Client,
}

impl Api {
    pub fn new(port: u16) -> Self {
        Api {
            port,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    /// The status and JSON answer (see [`call`]).
    pub async fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
        call(&self.http, self.port, method, path, body).await
    }

    /// The JSON answer of a call that must succeed (2xx).
    pub async fn ok(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> serde_json::Value {
        let (status, out) = self.call(method, path, body).await;
        assert!((200..300).contains(&status), "{method} {path}: {status} {out}");
        out
    }
}
