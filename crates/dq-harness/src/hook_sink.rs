//! An HTTP receiver for tests that keeps every request's headers and raw body (a signature is over the
//! raw bytes), answering 500 to the first few: a callback or `on_dead_url` that is down for a moment.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};

/// One request as the sink received it.
#[derive(Debug, Clone)]
pub struct HookRequest {
    /// Headers, names in lower case (the last value of a repeated one).
    pub headers: HashMap<String, String>,
    /// The body, as sent.
    pub body: Vec<u8>,
    /// What the sink answered.
    pub status: u16,
}

impl HookRequest {
    /// Whether it carries a valid `X-DQ-Signature` over its raw body made with `secret` (any of its
    /// `v1=` values).
    pub fn signed_with(&self, secret: &str) -> bool {
        use hmac::{Hmac, Mac};
        let header = self.header("x-dq-signature");
        let mut parts = header.split(',');
        let Some(t) = parts.next().and_then(|p| p.strip_prefix("t=")) else {
            return false;
        };
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        mac.update(format!("{t}.").as_bytes());
        mac.update(&self.body);
        let expected = hex::encode(mac.finalize().into_bytes());
        parts.any(|v| v.strip_prefix("v1=") == Some(expected.as_str()))
    }

    /// The body as JSON (`null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// A header's value, `""` when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

/// See the module's doc.
pub struct HookSink {
    /// `http://<addr>/hook`.
    pub url: String,
    /// Every request, in order.
    received: Arc<Mutex<Vec<HookRequest>>>,
}

impl HookSink {
    /// Listens on a free port of 127.0.0.1 and answers 500 to the first `failures` requests, 200
    /// `{"ok":true}` after (call from inside a tokio runtime).
    pub async fn start_failing(failures: usize) -> HookSink {
        Self::start_at("127.0.0.1:0".parse().expect("address"), failures).await
    }

    /// [`HookSink::start_failing`] on `addr`: a receiver that comes up at an address given out before.
    pub async fn start_at(addr: SocketAddr, failures: usize) -> HookSink {
        let received: Arc<Mutex<Vec<HookRequest>>> = Default::default();
        let kept = received.clone();
        let seen = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (kept, seen) = (kept.clone(), seen.clone());
                async move {
                    let status = if seen.fetch_add(1, Ordering::SeqCst) < failures {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::OK
                    };
                    let headers = headers
                        .iter()
                        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                        .collect();
                    kept.lock().expect("hook sink lock").push(HookRequest {
                        headers,
                        body: body.to_vec(),
                        status: status.as_u16(),
                    });
                    (status, r#"{"ok":true}"#)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind hook sink");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        HookSink { url, received }
    }

    /// Every request so far, in order.
    pub fn received(&self) -> Vec<HookRequest> {
        self.received.lock().expect("hook sink lock").clone()
    }

    /// The requests answered 200.
    pub fn accepted(&self) -> Vec<HookRequest> {
        self.received().into_iter().filter(|r| r.status == 200).collect()
    }
}

/// The dead-job hooks waiting in every partition of the installation with prefix `dq` on `redis`:
/// `<failed tries> <died at> <topic> <id>`.
pub fn dead_hooks_waiting(redis: &crate::RedisServer) -> Vec<String> {
    hooks_waiting(redis, "dead_hooks")
}

/// The hooks waiting in every partition's set `set` (`dead_hooks`, `success_hooks`) of the installation
/// with prefix `dq` on `redis`: `<failed tries> <at> <topic> <id>`.
pub fn hooks_waiting(redis: &crate::RedisServer, set: &str) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("dq:{{*}}:{set}"))
        .query(&mut redis.conn())
        .unwrap();
    keys.iter()
        .flat_map(|k| {
            redis::cmd("ZRANGE")
                .arg(k)
                .arg(0)
                .arg(-1)
                .query::<Vec<String>>(&mut redis.conn())
                .unwrap()
        })
        .collect()
}
