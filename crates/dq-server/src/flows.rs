//! `GET /v1/topics/{topic}/flows?limit=`: a topic's flow keys with ready jobs: how many, and the busiest
//! (the admin's topic page shows them too). Never one entry per key: a topic may have a million.

use axum::Json;
use axum::extract::{Path, Query, State};
use dq_api::{FlowKeys, FlowsQuery};
use dq_core::config::Scope;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::topics::checked;

/// The busiest keys shown when the query names no `limit`.
const DEFAULT_TOP: usize = 10;

/// `GET /v1/topics/{topic}/flows`: the topic's flow keys with ready jobs, the busiest first.
#[utoipa::path(get, path = "/v1/topics/{topic}/flows", tag = "topics", operation_id = "list_flow_keys",
    summary = "Show a topic's busiest flow keys",
    params(("topic" = String, Path, description = "The topic's name."), FlowsQuery),
    responses(
        (status = 200, description = "How many flow keys of the topic have ready jobs, and the busiest of them (most ready jobs first), each with its ready and reserved jobs.", body = FlowKeys),
        (status = 400, description = "`invalid_argument`: a bad topic name, an unknown query parameter, or a `limit` out of range.", body = ErrorBody),
    ))]
pub async fn flows(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    query: Result<Query<FlowsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<FlowKeys>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Read, &topic)?;
    let Query(q) = query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
    let top = q.limit.unwrap_or(DEFAULT_TOP);
    if !(1..=100).contains(&top) {
        return Err(ApiError::invalid(format!(
            "`limit` must be between 1 and 100, got {top}"
        )));
    }
    Ok(Json(app.queue.admin().flow_keys(&topic, top).await?))
}
