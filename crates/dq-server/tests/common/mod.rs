//! An in-process dq-server on its own Redis, and helpers to look at what is stored.
#![allow(dead_code, missing_docs)]

use std::time::Duration;

use dq_core::config::{Scope, TokenSpec};
use dq_harness::RedisServer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

pub struct TestServer {
    pub redis: Vec<RedisServer>,
    pub base: String,
    pub http: reqwest::Client,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

pub fn settings(redis: &[RedisServer]) -> dq_core::Settings {
    let mut s = dq_core::Settings::default();
    s.redis.urls = vec![redis[0].url()];
    s.redis.connect_timeout_ms = 300;
    s.redis.response_timeout_ms = 1000;
    s.shutdown.grace_ms = 2000;
    s
}

impl TestServer {
    pub async fn start() -> Self {
        Self::with_shards(1).await
    }

    pub async fn with_shards(n: usize) -> Self {
        let redis: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        let s = settings(&redis);
        Self::with_settings(redis, s).await
    }

    pub async fn with_settings(redis: Vec<RedisServer>, settings: dq_core::Settings) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(dq_server::serve(listener, settings, shutdown.clone()));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(40))
            .build()
            .unwrap();
        let server = TestServer {
            redis,
            base,
            http,
            shutdown,
            task,
        };
        dq_harness::eventually(Duration::from_secs(10), "server answers /healthz", || async {
            server.http.get(server.url("/healthz")).send().await.is_ok()
        })
        .await;
        server
    }

    /// The key `<partition prefix>:<rest>` of the partition that holds `id` (the default 256 partitions).
    pub fn key(&self, id: &str, rest: &str) -> String {
        let parts = dq_core::store::partition::Partitions::new(256);
        let keys = dq_core::store::keys::Keys::new("dq")
            .partition(parts.tag(parts.of_id(id)))
            .prefix()
            .to_string();
        format!("{keys}:{rest}")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path`'s body as text (an admin page, `/metrics`).
    pub async fn text(&self, path: &str) -> String {
        self.http
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits until `/metrics` has the line `line` (`name value`).
    pub async fn wait_for_metric(&self, line: &str) {
        dq_harness::eventually(Duration::from_secs(10), line, || async {
            self.text("/metrics").await.lines().any(|l| l == line)
        })
        .await;
    }

    /// Sends a request with a JSON (or raw) body; returns status and parsed JSON (Null when empty).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self.http.request(method.parse().unwrap(), self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }

    pub async fn raw(&self, method: &str, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
        let resp = self
            .http
            .request(method.parse().unwrap(), self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn push(&self, body: Value) -> Value {
        let (status, out) = self.call("POST", "/v1/jobs", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{out}");
        out
    }

    pub async fn reserve(&self, topics: &[&str], count: u32, timeout_ms: u64) -> Vec<Value> {
        let (status, out) = self
            .call(
                "POST",
                "/v1/reserve",
                Some(json!({"topics": topics, "count": count, "timeout_ms": timeout_ms})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{out}");
        out["jobs"].as_array().unwrap().clone()
    }

    /// Every key on every node with its serialized contents (DUMP), to show that a refused request wrote
    /// nothing.
    pub fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        let mut all = Vec::new();
        for r in &self.redis {
            let mut c = r.conn();
            let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
            keys.sort();
            for k in keys {
                let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut c).unwrap();
                all.push((k, dump));
            }
        }
        all
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.task.abort();
    }
}

/// Asserts the error shape: status and code.
pub fn assert_error(status: StatusCode, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status.as_u16(), want_status, "{body}");
    assert_eq!(body["error"]["code"], want_code, "{body}");
    assert!(
        body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

pub const ROOT: &str = "root-token";

pub fn spec(name: &str, scopes: &[Scope], topics: Option<&[&str]>) -> TokenSpec {
    TokenSpec {
        name: name.into(),
        sha256: hex::encode(Sha256::digest(format!("{name}-secret").as_bytes())),
        scopes: scopes.to_vec(),
        topics: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
    }
}

/// A server with the root token and one token per scope (and `orders`, limited to `orders.*`).
pub async fn server() -> TestServer {
    let redis = vec![RedisServer::start()];
    let mut s = settings(&redis);
    s.auth.admin_token = Some(ROOT.into());
    s.auth.tokens = vec![
        spec("producer", &[Scope::Produce], None),
        spec("consumer", &[Scope::Consume], None),
        spec("reader", &[Scope::Read], None),
        spec("operator", &[Scope::Admin], None),
        spec(
            "orders",
            &[Scope::Produce, Scope::Consume, Scope::Read],
            Some(&["orders.*"]),
        ),
    ];
    TestServer::with_settings(redis, s).await
}

/// Sends `method path` with `token` (none: no header) and a JSON `body`; redirects are answers.
pub async fn send(
    s: &TestServer,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    // Redirects are answers here (the admin pages send a caller without a token to the login).
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut req = client.request(method.parse().unwrap(), s.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}
