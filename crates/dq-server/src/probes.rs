//! What operators and load balancers ask: stats, liveness, readiness, metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use dq_core::admin::NodeStats;
use dq_core::config::RedisMode;
use dq_core::config::Scope;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, ErrorDetail};
use crate::topics::zero_counts;

/// `GET /v1/stats` answer.
#[derive(Serialize, ToSchema)]
pub struct Stats {
    /// Job counts per topic (that the token may see) and state, summed over the partitions that answered.
    #[schema(value_type = BTreeMap<String, BTreeMap<String, i64>>)]
    topics: BTreeMap<String, BTreeMap<&'static str, i64>>,
    /// The shape and health of Redis.
    redis: RedisStats,
}

/// Redis as `GET /v1/stats` shows it.
#[derive(Serialize, ToSchema)]
pub struct RedisStats {
    /// `redis.mode`.
    mode: RedisMode,
    /// The installation's partition count.
    partitions: u16,
    /// The partitions whose counts did not answer (left out of `topics`).
    partitions_down: Vec<u16>,
    /// Every Redis primary.
    nodes: Vec<Node>,
}

/// One Redis primary's health.
#[derive(Serialize, ToSchema)]
pub struct Node {
    /// `host:port` (cluster), the URL with its password masked (standalone), `sentinel/<URLs>` (sentinel).
    name: String,
    /// Whether it answered PING in time.
    up: bool,
    /// The PING's round trip in ms; `null` when it did not answer.
    latency_ms: Option<f64>,
}

/// `GET /v1/stats`: job counts per topic and state over every partition, the partitions that did not
/// answer, and each Redis primary's health.
#[utoipa::path(get, path = "/v1/stats", tag = "operations", operation_id = "stats",
    summary = "Job counts per topic and state, and Redis's health",
    responses((status = 200, description = "Counts and health.", body = Stats)))]
pub async fn stats(State(app): State<AppState>, caller: Caller) -> Result<Json<Stats>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    let (stats, registry) = tokio::join!(app.queue.admin().stats(), app.queue.admin().topics());
    let mut topics: BTreeMap<String, BTreeMap<&'static str, i64>> = BTreeMap::new();
    // Registered topics are listed with their zeros, as `GET /v1/topics` lists them. Stats still
    // answer when the registry cannot be read (they report Redis's health): without those zeros.
    for topic in registry.unwrap_or_default().into_keys().filter(|t| caller.sees(t)) {
        topics.insert(topic, zero_counts());
    }
    // So are topics whose jobs left lately (their counts fields are at 0 until the checker removes them).
    for topic in stats.drained().filter(|t| caller.sees(t)) {
        topics.entry(topic.to_string()).or_insert_with(zero_counts);
    }
    for (topic, counts) in stats.counts.iter().filter(|(t, _)| caller.sees(t)) {
        let t = topics.entry(topic.clone()).or_insert_with(zero_counts);
        for (state, n) in counts {
            *t.entry(state.as_str()).or_default() += n;
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

/// `GET /healthz` answer.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(value_type = String, pattern = "^ok$")]
    status: &'static str,
}

/// `GET /healthz`: the process is alive (says nothing of Redis).
#[utoipa::path(get, path = "/healthz", tag = "operations", operation_id = "healthz",
    summary = "Liveness: the process serves HTTP (says nothing of Redis)",
    responses((status = 200, description = "Alive.", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// `GET /readyz` answer when ready.
#[derive(Serialize, ToSchema)]
pub struct Ready {
    /// Always `ready`.
    #[schema(value_type = String, pattern = "^ready$")]
    status: &'static str,
    /// Every Redis primary, PINGed with a 500 ms deadline.
    nodes: Vec<Node>,
}

/// `GET /readyz` answer when not ready: the error, and the primaries.
#[derive(Serialize, ToSchema)]
pub struct NotReady {
    /// `unavailable`: `no Redis primary answers`, or `draining`.
    error: ErrorDetail,
    /// Every Redis primary, PINGed with a 500 ms deadline.
    nodes: Vec<Node>,
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
        Json(Ready { status: "ready", nodes }).into_response()
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
