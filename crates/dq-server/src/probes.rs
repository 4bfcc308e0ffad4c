//! What operators and load balancers ask: stats, liveness, readiness, metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use dq_core::config::Scope;
use dq_core::queue::NodeStats;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::topics::zero_counts;

/// `GET /v1/stats`: job counts per topic and state over every partition, the partitions that did not
/// answer, and each Redis primary's health.
pub async fn stats(State(app): State<AppState>, caller: Caller) -> Result<Json<serde_json::Value>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    let stats = app.queue.stats().await;
    let mut topics: BTreeMap<String, BTreeMap<&'static str, i64>> = BTreeMap::new();
    for (topic, counts) in stats.counts.iter().filter(|(t, _)| caller.sees(t)) {
        let t = topics.entry(topic.clone()).or_insert_with(zero_counts);
        for (state, n) in counts {
            *t.entry(state.as_str()).or_default() += n;
        }
    }
    Ok(Json(json!({
        "topics": topics,
        "redis": {
            "mode": app.queue.redis().mode(),
            "partitions": app.queue.partitions().count(),
            "partitions_down": stats.partitions_down,
            "nodes": nodes_json(&stats.nodes),
        },
    })))
}

fn nodes_json(nodes: &[NodeStats]) -> Vec<serde_json::Value> {
    nodes
        .iter()
        .map(|n| json!({"name": n.name, "up": n.up, "latency_ms": n.latency.map(|l| l.as_secs_f64() * 1000.0)}))
        .collect()
}

/// `GET /healthz`: the process is alive (says nothing of Redis).
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 when at least one Redis primary answers PING (pushes then have somewhere to go),
/// else 503.
pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    let nodes = app.queue.node_health(Duration::from_millis(500)).await;
    let up = nodes.iter().any(|n| n.up);
    let nodes = nodes_json(&nodes);
    if app.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"code": "unavailable", "message": "draining"}, "nodes": nodes})),
        );
    }
    if up {
        (StatusCode::OK, Json(json!({"status": "ready", "nodes": nodes})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"code": "unavailable", "message": "no Redis primary answers"}, "nodes": nodes})),
        )
    }
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics(caller: Caller) -> Result<impl IntoResponse, ApiError> {
    caller.allow_everywhere(Scope::Read)?;
    let body = dq_core::telemetry::prometheus().render();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body))
}
