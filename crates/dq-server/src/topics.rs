//! Admins' verbs: the topic registry, pause and resume, and dead letters.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use dq_api::{Counts, DeadIds, DeadPage, DeadQuery, Deleted, Requeued, TopicList, TopicView};
use dq_core::TopicConfig;
use dq_core::config::Scope;
use dq_core::job::{validate_id, validate_topic};
use dq_core::topic::TopicRules;

use crate::AppState;
use crate::auth::Caller;
use crate::body::JsonBody;
use crate::error::{ApiError, ErrorBody};

/// Job counts per topic and state over every partition.
pub(crate) async fn counts(app: &AppState) -> BTreeMap<String, Counts> {
    let mut topics: BTreeMap<String, Counts> = BTreeMap::new();
    let stats = app.queue.admin().counts().await;
    // Topics whose jobs left lately are listed at 0 until the checker removes their counts fields.
    for topic in stats.drained() {
        topics.entry(topic.to_string()).or_default();
    }
    for (topic, counts) in stats.counts {
        let t = topics.entry(topic).or_default();
        for (state, n) in counts {
            t.add(state, n);
        }
    }
    topics
}

/// A page's `offset` (0 ..= 1000000, default 0) and `limit` (1 ..= 1000, default `default_limit`).
pub(crate) fn paging(
    offset: Option<usize>,
    limit: Option<usize>,
    default_limit: usize,
) -> Result<(usize, usize), ApiError> {
    let limit = limit.unwrap_or(default_limit);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "`limit` must be between 1 and 1000, got {limit}"
        )));
    }
    let offset = offset.unwrap_or(0);
    if offset > 1_000_000 {
        return Err(ApiError::invalid("`offset` must be at most 1000000"));
    }
    Ok((offset, limit))
}

pub(crate) fn checked(topic: &str) -> Result<(), ApiError> {
    validate_topic(topic).map_err(ApiError::from)
}

async fn view(app: &AppState, topic: String, config: Option<TopicConfig>) -> TopicView {
    let counts = counts(app).await.remove(&topic).unwrap_or_default();
    TopicView {
        topic,
        config: config.map(|c| c.redacted()),
        counts,
    }
}

/// Writes a registration and refreshes this process's cache, so the change applies here at once.
async fn store(app: &AppState, topic: &str, config: &TopicConfig) -> Result<(), ApiError> {
    app.queue.admin().put_topic(topic, config).await?;
    if let Ok(all) = app.queue.admin().topics().await {
        app.topics.set(all);
    }
    Ok(())
}

/// `PUT /v1/topics/{topic}`: registers or replaces a topic; 400 names what is wrong.
#[utoipa::path(put, path = "/v1/topics/{topic}", tag = "topics", operation_id = "put_topic",
    summary = "Register or replace a topic",
    params(("topic" = String, Path, description = "The topic's name.")),
    request_body = TopicConfig,
    responses(
        (status = 200, description = "The registration as stored (masked) and the topic's counts.", body = TopicView),
    ))]
pub async fn put(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    JsonBody(mut config): JsonBody<TopicConfig>,
) -> Result<Json<TopicView>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Admin, &topic)?;
    // Values sent back as GET shows them (`***`) keep the stored ones.
    if config.callback.is_some() {
        let stored = app.queue.admin().topics().await?.remove(&topic);
        config.keep_masked(stored.as_ref())?;
    }
    // A callback to an IP address the egress policy refuses is refused here; one to a name, at connect.
    config.validate(&app.queue.limits(), &app.queue.egress().await)?;
    store(&app, &topic, &config).await?;
    Ok(Json(view(&app, topic, Some(config)).await))
}

/// `GET /v1/topics/{topic}`: the registration and counts; 404 when neither exists.
#[utoipa::path(get, path = "/v1/topics/{topic}", tag = "topics", operation_id = "get_topic",
    summary = "Look up a topic",
    params(("topic" = String, Path, description = "The topic's name.")),
    responses(
        (status = 200, description = "The registration (masked; `null` when not registered) and counts.", body = TopicView),
        (status = 400, description = "`invalid_argument`: not a valid topic name.", body = ErrorBody),
        (status = 404, description = "`not_found`: neither registered nor ever had jobs.", body = ErrorBody),
    ))]
pub async fn get(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Read, &topic)?;
    let config = app.queue.admin().topics().await?.remove(&topic);
    let counts = counts(&app).await;
    if config.is_none() && !counts.contains_key(&topic) {
        return Err(dq_core::Error::TopicNotFound(topic.clone()).into());
    }
    Ok(Json(view(&app, topic, config).await))
}

/// `DELETE /v1/topics/{topic}`: removes the registration (its jobs stay): 204, or 404.
#[utoipa::path(delete, path = "/v1/topics/{topic}", tag = "topics", operation_id = "delete_topic",
    summary = "Delete a topic's registration (its jobs stay)",
    params(("topic" = String, Path, description = "The topic's name.")),
    responses(
        (status = 204, description = "The registration is gone."),
        (status = 400, description = "`invalid_argument`: not a valid topic name.", body = ErrorBody),
        (status = 404, description = "`not_found`: the topic is not registered.", body = ErrorBody),
    ))]
pub async fn delete(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<StatusCode, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Admin, &topic)?;
    app.queue.admin().delete_topic(&topic).await?;
    if let Ok(all) = app.queue.admin().topics().await {
        app.topics.set(all);
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/topics`: every registered topic and every topic with jobs, with counts per state.
#[utoipa::path(get, path = "/v1/topics", tag = "topics", operation_id = "list_topics",
    summary = "List topics",
    responses(
        (status = 200, description = "Every registered topic and every topic with jobs that the token may see, by name.", body = TopicList),
    ))]
pub async fn list(State(app): State<AppState>, caller: Caller) -> Result<Json<TopicList>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    let mut configs = app.queue.admin().topics().await?;
    let mut counts = counts(&app).await;
    let mut names: Vec<String> = configs
        .keys()
        .chain(counts.keys())
        .filter(|t| caller.sees(t))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    let topics = names
        .into_iter()
        .map(|t| TopicView {
            config: configs.remove(&t).map(|c| c.redacted()),
            counts: counts.remove(&t).unwrap_or_default(),
            topic: t,
        })
        .collect();
    Ok(Json(TopicList { topics }))
}

async fn set_paused(app: AppState, topic: String, paused: bool) -> Result<Json<TopicView>, ApiError> {
    checked(&topic)?;
    let mut config = app.queue.admin().topics().await?.remove(&topic).unwrap_or_default();
    config.paused = paused;
    store(&app, &topic, &config).await?;
    Ok(Json(view(&app, topic, Some(config)).await))
}

/// `POST /v1/topics/{topic}/pause`: stops delivery and reserve of the topic (pushes still go in).
#[utoipa::path(post, path = "/v1/topics/{topic}/pause", tag = "topics", operation_id = "pause_topic",
    summary = "Pause a topic: no delivery, no reserve (pushes still go in)",
    params(("topic" = String, Path, description = "The topic's name.")),
    responses(
        (status = 200, description = "The topic, now paused (registered with the defaults if it was not).", body = TopicView),
        (status = 400, description = "`invalid_argument`: not a valid topic name.", body = ErrorBody),
    ))]
pub async fn pause(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    caller.allow(Scope::Admin, &topic)?;
    set_paused(app, topic, true).await
}

/// `POST /v1/topics/{topic}/resume`: undoes pause.
#[utoipa::path(post, path = "/v1/topics/{topic}/resume", tag = "topics", operation_id = "resume_topic",
    summary = "Resume a paused topic",
    params(("topic" = String, Path, description = "The topic's name.")),
    responses(
        (status = 200, description = "The topic, no longer paused (registered with the defaults if it was not).", body = TopicView),
        (status = 400, description = "`invalid_argument`: not a valid topic name.", body = ErrorBody),
    ))]
pub async fn resume(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    caller.allow(Scope::Admin, &topic)?;
    set_paused(app, topic, false).await
}

/// `GET /v1/topics/{topic}/dead?offset=&limit=`: a page of dead jobs, oldest death first, and the total.
#[utoipa::path(get, path = "/v1/topics/{topic}/dead", tag = "dead", operation_id = "list_dead",
    summary = "List a page of a topic's dead jobs",
    params(("topic" = String, Path, description = "The topic's name."), DeadQuery),
    responses(
        (status = 200, description = "A page of dead jobs, oldest death first, and the topic's total.", body = DeadPage),
        (status = 400, description = "`invalid_argument`: a bad topic name, an unknown query parameter, or a value out of range.", body = ErrorBody),
    ))]
pub async fn dead(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    query: Result<Query<DeadQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeadPage>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Read, &topic)?;
    let Query(q) = query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
    let (offset, limit) = paging(q.offset, q.limit, 100)?;
    Ok(Json(app.queue.admin().dead(&topic, offset, limit).await?))
}

fn dead_ids(body: &Bytes) -> Result<Option<Vec<String>>, ApiError> {
    let parsed: DeadIds = if body.iter().all(u8::is_ascii_whitespace) {
        DeadIds::default()
    } else if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::invalid(
            "the request body must be a JSON object (or empty for all)",
        ));
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?
    };
    if let Some(ids) = &parsed.ids {
        if ids.is_empty() || ids.len() > 1000 {
            return Err(ApiError::invalid(
                "`ids` must hold 1 to 1000 ids (leave it out for all)",
            ));
        }
        for id in ids {
            validate_id(id)?;
        }
    }
    Ok(parsed.ids)
}

/// `POST /v1/topics/{topic}/dead/requeue` `{ids?}`: back to ready with fresh attempts; `{requeued}`.
#[utoipa::path(post, path = "/v1/topics/{topic}/dead/requeue", tag = "dead", operation_id = "requeue_dead",
    summary = "Requeue dead jobs (some, or all)",
    params(("topic" = String, Path, description = "The topic's name.")),
    request_body(content = Option<DeadIds>, description = "Some dead jobs; no body (or `{}`) for all.", content_type = "application/json"),
    responses(
        (status = 200, description = "How many jobs went back to ready (ids not in the dead list are skipped).", body = Requeued),
    ))]
pub async fn requeue(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    body: Bytes,
) -> Result<Json<Requeued>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Admin, &topic)?;
    let ids = dead_ids(&body)?;
    let n = app.queue.admin().requeue_dead(&topic, ids.as_deref()).await?;
    Ok(Json(Requeued { requeued: n }))
}

/// `DELETE /v1/topics/{topic}/dead` `{ids?}`: deletes dead jobs; `{deleted}`.
#[utoipa::path(delete, path = "/v1/topics/{topic}/dead", tag = "dead", operation_id = "delete_dead",
    summary = "Delete dead jobs (some, or all)",
    params(("topic" = String, Path, description = "The topic's name.")),
    request_body(content = Option<DeadIds>, description = "Some dead jobs; no body (or `{}`) for all.", content_type = "application/json"),
    responses(
        (status = 200, description = "How many dead jobs were deleted (ids not in the dead list are skipped).", body = Deleted),
    ))]
pub async fn delete_dead(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    body: Bytes,
) -> Result<Json<Deleted>, ApiError> {
    checked(&topic)?;
    caller.allow(Scope::Admin, &topic)?;
    let ids = dead_ids(&body)?;
    let n = app.queue.admin().delete_dead(&topic, ids.as_deref()).await?;
    Ok(Json(Deleted { deleted: n }))
}
