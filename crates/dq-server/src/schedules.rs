//! Schedules: `PUT/GET/DELETE /v1/schedules/{name}`, `GET /v1/schedules`, pause and resume.
//!
//! A schedule pushes jobs to its topic, so it needs what registering that topic needs: the `admin` scope,
//! and a token limited to some topics may touch only schedules of those topics (the one it replaces
//! included). Reading one needs `read` on its topic. dq-timer fires them (`dq_timer::schedules`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use dq_api::{ScheduleList, ScheduleView};
use dq_core::admin::schedules::StoredSchedule;
use dq_core::config::Scope;
use dq_core::schedule::{Cadence, ScheduleConfig, ScheduleRules, validate_name};

use crate::AppState;
use crate::auth::Caller;
use crate::body::JsonBody;
use crate::error::{ApiError, ErrorBody};

/// The view of `stored` at `now` (Redis's clock, Unix ms).
pub(crate) fn view(stored: StoredSchedule, now: i64) -> ScheduleView {
    let next_fire_at = match Cadence::parse(&stored.config.cron, &stored.config.timezone) {
        Ok(c) if !stored.config.paused => c.next_fire(stored.fired_through(), now),
        _ => None,
    };
    ScheduleView {
        name: stored.name,
        last_fired_at: stored.last_fired,
        config: stored.config,
        next_fire_at,
    }
}

/// The schedule `name`, or 404; 403 unless the caller has `scope` on its topic. A token without
/// `scope` at all gets 403 before anything is read, so it never learns which names exist.
async fn existing(app: &AppState, caller: &Caller, name: &str, scope: Scope) -> Result<StoredSchedule, ApiError> {
    caller.allow_scope(scope)?;
    validate_name(name)?;
    let stored = app
        .queue
        .admin()
        .schedule(name)
        .await?
        .ok_or_else(|| dq_core::Error::ScheduleNotFound(name.to_string()))?;
    caller.allow(scope, &stored.config.topic)?;
    Ok(stored)
}

/// Writes `config` as `name` and answers its view.
async fn store(app: &AppState, name: &str, config: ScheduleConfig, restart: bool) -> Result<ScheduleView, ApiError> {
    let since = app.queue.admin().put_schedule(name, &config, restart).await?;
    let stored = app.queue.admin().schedule(name).await?.unwrap_or(StoredSchedule {
        name: name.to_string(),
        config,
        since,
        last_fired: None,
    });
    Ok(view(stored, app.queue.redis_now_ms().await?))
}

/// `PUT /v1/schedules/{name}`: registers or replaces a schedule; 400 names what is wrong, and writes
/// nothing. A new schedule, or one whose cron or zone changes, fires from its next occurrence.
#[utoipa::path(put, path = "/v1/schedules/{name}", tag = "schedules", operation_id = "put_schedule",
    summary = "Register or replace a schedule",
    params(("name" = String, Path, description = "The schedule's name.")),
    request_body = ScheduleConfig,
    responses(
        (status = 200, description = "The schedule as stored, with its next and last firing.", body = ScheduleView),
    ))]
pub async fn put(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(config): JsonBody<ScheduleConfig>,
) -> Result<Json<ScheduleView>, ApiError> {
    caller.allow_scope(Scope::Admin)?;
    config.validate(&name, &app.queue.limits())?;
    caller.allow(Scope::Admin, &config.topic)?;
    let old = app.queue.admin().schedule(&name).await?;
    if let Some(old) = &old {
        caller.allow(Scope::Admin, &old.config.topic)?;
    }
    let restart = old.is_none_or(|o| {
        o.config.cron != config.cron || o.config.timezone != config.timezone || (o.config.paused && !config.paused)
    });
    Ok(Json(store(&app, &name, config, restart).await?))
}

/// `GET /v1/schedules/{name}`: the registration, next fire and last fired; 404 when there is none.
#[utoipa::path(get, path = "/v1/schedules/{name}", tag = "schedules", operation_id = "get_schedule",
    summary = "Look up a schedule",
    params(("name" = String, Path, description = "The schedule's name.")),
    responses(
        (status = 200, description = "The schedule.", body = ScheduleView),
        (status = 400, description = "`invalid_argument`: not a valid schedule name.", body = ErrorBody),
        (status = 404, description = "`not_found`: no schedule of this name.", body = ErrorBody),
    ))]
pub async fn get(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let stored = existing(&app, &caller, &name, Scope::Read).await?;
    Ok(Json(view(stored, app.queue.redis_now_ms().await?)))
}

/// `DELETE /v1/schedules/{name}`: 204, or 404. The jobs it pushed stay.
#[utoipa::path(delete, path = "/v1/schedules/{name}", tag = "schedules", operation_id = "delete_schedule",
    summary = "Delete a schedule (the jobs it pushed stay)",
    params(("name" = String, Path, description = "The schedule's name.")),
    responses(
        (status = 204, description = "The schedule is gone."),
        (status = 400, description = "`invalid_argument`: not a valid schedule name.", body = ErrorBody),
        (status = 404, description = "`not_found`: no schedule of this name.", body = ErrorBody),
    ))]
pub async fn delete(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    existing(&app, &caller, &name, Scope::Admin).await?;
    app.queue.admin().delete_schedule(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/schedules`: every schedule of a topic the caller may see.
#[utoipa::path(get, path = "/v1/schedules", tag = "schedules", operation_id = "list_schedules",
    summary = "List schedules",
    responses(
        (status = 200, description = "Every schedule of a topic the token may see, by name.", body = ScheduleList),
    ))]
pub async fn list(State(app): State<AppState>, caller: Caller) -> Result<Json<ScheduleList>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    let now = app.queue.redis_now_ms().await?;
    let schedules = app
        .queue
        .admin()
        .schedules()
        .await?
        .into_iter()
        .filter(|s| caller.sees(&s.config.topic))
        .map(|s| view(s, now))
        .collect();
    Ok(Json(ScheduleList { schedules }))
}

async fn set_paused(app: AppState, caller: Caller, name: String, paused: bool) -> Result<Json<ScheduleView>, ApiError> {
    let mut stored = existing(&app, &caller, &name, Scope::Admin).await?;
    // Resuming starts the count afresh: nothing that fell while paused fires.
    let restart = stored.config.paused && !paused;
    stored.config.paused = paused;
    Ok(Json(store(&app, &name, stored.config, restart).await?))
}

/// `POST /v1/schedules/{name}/pause`: fires nothing until resumed.
#[utoipa::path(post, path = "/v1/schedules/{name}/pause", tag = "schedules", operation_id = "pause_schedule",
    summary = "Pause a schedule",
    params(("name" = String, Path, description = "The schedule's name.")),
    responses(
        (status = 200, description = "The schedule, now paused.", body = ScheduleView),
        (status = 400, description = "`invalid_argument`: not a valid schedule name.", body = ErrorBody),
        (status = 404, description = "`not_found`: no schedule of this name.", body = ErrorBody),
    ))]
pub async fn pause(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(app, caller, name, true).await
}

/// `POST /v1/schedules/{name}/resume`: fires again from the next occurrence (none of those that fell
/// while paused).
#[utoipa::path(post, path = "/v1/schedules/{name}/resume", tag = "schedules", operation_id = "resume_schedule",
    summary = "Resume a schedule from its next occurrence",
    params(("name" = String, Path, description = "The schedule's name.")),
    responses(
        (status = 200, description = "The schedule, no longer paused.", body = ScheduleView),
        (status = 400, description = "`invalid_argument`: not a valid schedule name.", body = ErrorBody),
        (status = 404, description = "`not_found`: no schedule of this name.", body = ErrorBody),
    ))]
pub async fn resume(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(app, caller, name, false).await
}
