//! An in-process callback that keeps every delivery it gets (job id, body, arrival) for a benchmark to
//! check afterwards, answering each at once with a 2xx: `coalesce` and `flow` use it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::Value;

/// One delivery the callback got.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The job's id.
    pub id: String,
    /// The job's body.
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
}

/// Every delivery so far, in arrival order.
pub type Ledger = Arc<Mutex<Vec<Delivery>>>;

/// A running callback: its URL and what it got.
pub struct Callback {
    /// `http://<address>/hook`.
    pub url: String,
    /// What it got.
    pub ledger: Ledger,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Callback {
    /// Listens on `listen` (port 0: any).
    pub async fn start(listen: SocketAddr) -> Result<Self> {
        let ledger: Ledger = Arc::default();
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .context("cannot listen for the callback")?;
        let addr = crate::sink::reachable(listener.local_addr()?);
        let app = Router::new().route("/hook", post(hook)).with_state(Arc::clone(&ledger));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Callback {
            url: format!("http://{addr}/hook"),
            ledger,
            server,
        })
    }

    /// A copy of what it got.
    pub fn got(&self) -> Vec<Delivery> {
        self.ledger.lock().expect("not poisoned").clone()
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn hook(State(ledger): State<Ledger>, body: axum::body::Bytes) -> &'static str {
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        let id = v["id"].as_str().unwrap_or_default().to_string();
        ledger.lock().expect("not poisoned").push(Delivery {
            id,
            body: v["body"].clone(),
            at: Instant::now(),
        });
    }
    r#"{"ok":true}"#
}
