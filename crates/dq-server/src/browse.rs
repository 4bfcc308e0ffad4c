//! `GET /v1/topics/{topic}/jobs?state=&offset=&limit=`: a page of a topic's jobs in one state, for
//! people looking (the admin's job lists). See `dq_core::admin::browse` for how delayed and reserved
//! jobs, which share their partition's sets with every topic, are looked for.

use axum::Json;
use axum::extract::{Path, Query, State};
use dq_api::{BrowseQuery, JobPage};
use dq_core::config::Scope;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::topics::{checked, paging};

/// `GET /v1/topics/{topic}/jobs`: a page of the topic's jobs in one state, each as look up shows it.
#[utoipa::path(get, path = "/v1/topics/{topic}/jobs", tag = "topics", operation_id = "list_jobs",
    summary = "List a page of a topic's jobs in one state",
    params(("topic" = String, Path, description = "The topic's name."), BrowseQuery),
    responses(
        (status = 200, description = "A page of the topic's jobs in that state, in due, deadline or death order; `total` from the counts; `complete` false when a page of delayed or reserved jobs may miss some (their sets are shared by every topic and read only in part).", body = JobPage),
        (status = 400, description = "`invalid_argument`: a bad topic name, a missing or unknown `state`, an unknown query parameter, or a value out of range.", body = ErrorBody),
    ))]
pub async fn jobs(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    query: Result<Query<BrowseQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Read, &topic)?;
    let Query(q) = query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
    let (offset, limit) = paging(q.offset, q.limit, 50)?;
    Ok(Json(
        app.queue.admin().browse(&topic, q.state.into(), offset, limit).await?,
    ))
}
