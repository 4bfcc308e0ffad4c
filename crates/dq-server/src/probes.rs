//! What operators and load balancers ask: stats, liveness, readiness, metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use dq_api::{Counts, Health, Node, NotReady, Ready, RedisStats, Stats};
use dq_core::admin::NodeStats;
use dq_core::config::Scope;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, ErrorDetail};

/// `GET /v1/stats`: job counts per topic and state over every partition, the partitions that did not
/// answer, and each Redis primary's health.
#[utoipa::path(get, path = "/v1/stats", tag = "operations", operation_id = "stats",
    summary = "Job counts per topic and state, and Redis's health",
    responses((status = 200, description = "Counts and health.", body = Stats)))]
pub async fn stats(State(app): State<AppState>, caller: Caller) -> Result<Json<Stats>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    let (stats, registry) = tokio::join!(app.queue.admin().stats(), app.queue.admin().topics());
    let mut topics: BTreeMap<String, Counts> = BTreeMap::new();
    // Registered topics are listed with their zeros, as `GET /v1/topics` lists them. Stats still
    // answer when the registry cannot be read (they report Redis's health): without those zeros.
    for topic in registry.unwrap_or_default().into_keys().filter(|t| caller.sees(t)) {
        topics.insert(topic, Counts::default());
    }
    // So are topics whose jobs left lately (their counts fields are at 0 until the checker removes them).
    for topic in stats.drained().filter(|t| caller.sees(t)) {
        topics.entry(topic.to_string()).or_default();
    }
    for (topic, counts) in stats.counts.iter().filter(|(t, _)| caller.sees(t)) {
        let t = topics.entry(topic.clone()).or_default();
        for (state, n) in counts {
            t.add(*state, *n);
        }
    }
    Ok(Json(Stats {
        topics,
        redis: RedisStats {
            mode: app.queue.mode(),
            partitions: app.queue.partitions().count(),
            partitions_down: stats.partitions_down,
            nodes: nodes(&stats.nodes),
        },
    }))
}

fn nodes(nodes: &[NodeStats]) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| Node {
            name: n.name.clone(),
            up: n.up,
            latency_ms: n.latency.map(|l| l.as_secs_f64() * 1000.0),
        })
        .collect()
}

/// `GET /healthz`: the process is alive (says nothing of Redis).
#[utoipa::path(get, path = "/healthz", tag = "operations", operation_id = "healthz",
    summary = "Liveness: the process serves HTTP (says nothing of Redis)",
    responses((status = 200, description = "Alive.", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".into() })
}

/// `GET /readyz`: 200 when at least one Redis primary answers PING (pushes then have somewhere to go),
/// else 503.
#[utoipa::path(get, path = "/readyz", tag = "operations", operation_id = "readyz",
    summary = "Readiness: at least one Redis primary answers",
    responses(
        (status = 200, description = "Ready.", body = Ready),
        (status = 503, description = "No Redis primary answers, or the server is draining.", body = NotReady),
    ))]
pub async fn readyz(State(app): State<AppState>) -> axum::response::Response {
    let nodes = app.queue.admin().node_health(Duration::from_millis(500)).await;
    let up = nodes.iter().any(|n| n.up);
    let nodes = self::nodes(&nodes);
    let not_ready = |message: &str, nodes| {
        let error = ErrorDetail {
            code: ErrorCode::Unavailable,
            message: message.into(),
            id: None,
        };
        (StatusCode::SERVICE_UNAVAILABLE, Json(NotReady { error, nodes })).into_response()
    };
    if app.shutdown.is_cancelled() {
        return not_ready("draining", nodes);
    }
    if up {
        Json(Ready {
            status: "ready".into(),
            nodes,
        })
        .into_response()
    } else {
        not_ready("no Redis primary answers", nodes)
    }
}

/// `GET /metrics`: Prometheus text.
#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "metrics",
    summary = "Prometheus metrics (needs `read` for every topic)",
    responses((status = 200, description = "Prometheus text format 0.0.4.", body = String, content_type = "text/plain")))]
pub async fn metrics(caller: Caller) -> Result<impl IntoResponse, ApiError> {
    caller.allow_everywhere(Scope::Read)?;
    let body = dq_core::series::render();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body))
}
