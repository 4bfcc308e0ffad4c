//! What operators and load balancers ask: stats, liveness, readiness, metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use dq_core::State as JobState;
use serde_json::json;

use crate::AppState;

/// `GET /v1/stats`: job counts per topic and state over all shards, and each shard's health.
pub async fn stats(State(app): State<AppState>) -> Json<serde_json::Value> {
    let shards = app.queue.stats().await;
    let mut topics: BTreeMap<String, BTreeMap<&'static str, i64>> = BTreeMap::new();
    for s in &shards {
        for (topic, counts) in &s.counts {
            let t = topics.entry(topic.clone()).or_insert_with(|| {
                [JobState::Delayed, JobState::Ready, JobState::Reserved, JobState::Dead]
                    .into_iter()
                    .map(|st| (st.as_str(), 0))
                    .collect()
            });
            for (state, n) in counts {
                *t.entry(state.as_str()).or_default() += n;
            }
        }
    }
    let shards: Vec<_> = shards
        .iter()
        .map(|s| {
            json!({"index": s.index, "name": s.name, "up": s.up,
                   "latency_ms": s.latency.map(|l| l.as_secs_f64() * 1000.0)})
        })
        .collect();
    Json(json!({ "topics": topics, "shards": shards }))
}

/// `GET /healthz`: the process is alive (says nothing of Redis).
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 when at least one shard answers PING (pushes then have somewhere to go), else 503.
pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    let checks = app.queue.shards().all().iter().map(|s| async move {
        let r = s.ping(Duration::from_millis(500)).await;
        json!({"index": s.index, "name": s.name, "up": r.is_ok(), "error": r.err().map(|e| e.to_string())})
    });
    let shards = futures_util::future::join_all(checks).await;
    let up = shards.iter().any(|s| s["up"] == true);
    if app.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"code": "unavailable", "message": "draining"}, "shards": shards})),
        );
    }
    if up {
        (StatusCode::OK, Json(json!({"status": "ready", "shards": shards})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"code": "unavailable", "message": "no Redis shard answers"}, "shards": shards})),
        )
    }
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics() -> impl IntoResponse {
    let body = dq_core::telemetry::prometheus().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
