//! Producers' verbs: push, push many, look up (a job, and its attempts), cancel, reschedule.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dq_api::{Attempts, BatchAnswer, BatchPushed, BatchRequest, PushAnswer, PushResult, RescheduleRequest};
use dq_core::config::Scope;
use dq_core::job::validate_id;
use dq_core::{Due, Job, NewJob, PushRequest};

use crate::AppState;
use crate::auth::Caller;
use crate::body::JsonBody;
use crate::error::{ApiError, ErrorBody};
use crate::trace::{self, TraceHeaders, TraceParams};

/// `POST /v1/jobs`: 201 `{id, topic, state, run_at}` for a new job, or 200 with `"coalesced": true` and
/// the job the push went into: the first job of its `dedup_key` (then `"duplicate": true` too) or of a
/// `first` `coalesce_key` inside its window, or the pending job of a `last` or `merge` key.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", operation_id = "push",
    summary = "Push a job",
    params(TraceParams),
    request_body = PushRequest,
    responses(
        (status = 201, description = "Stored: `delayed`, or `ready` when already due.", body = PushAnswer),
        (status = 200, description = "The push went into an existing job, with `\"coalesced\": true`: the job of its `dedup_key` or `first` `coalesce_key` inside the window (also `\"duplicate\": true`; nothing was stored), or the pending job of its `last` or `merge` `coalesce_key` (its body replaced or appended to).", body = PushAnswer),
        (status = 409, description = "`conflict`: the id already has a record (live, `done` or `dead`); nothing is overwritten.", body = ErrorBody),
    ))]
pub async fn push(
    State(app): State<AppState>,
    caller: Caller,
    headers: TraceHeaders,
    JsonBody(mut req): JsonBody<PushRequest>,
) -> Result<Response, ApiError> {
    caller.allow(Scope::Produce, &req.topic)?;
    headers.fill(&mut req);
    let registry = app.topics.snapshot();
    let mut job = app.queue.producer().prepare(req, &registry)?;
    let topic = job.topic.clone();
    let span = trace::start_push(&mut job);
    let pushed = app.queue.producer().push(job).await.map_err(ApiError::from);
    let status = match &pushed {
        Ok(p) if p.coalesced => StatusCode::OK,
        _ => StatusCode::CREATED,
    };
    trace::end_push(span, pushed.as_ref().map(|p| (p.id.as_str(), status)));
    let pushed = pushed?;
    let body = PushAnswer {
        id: pushed.id,
        topic,
        state: pushed.state,
        run_at: pushed.run_at,
        duplicate: pushed.duplicate,
        coalesced: pushed.coalesced,
        children: pushed.children,
    };
    Ok((status, Json(body)).into_response())
}

/// `POST /v1/jobs/batch`: 200 `{results: [...]}` in order. Any malformed entry refuses the whole batch
/// (nothing is written); a live id or an unavailable partition fails only its own entry.
#[utoipa::path(post, path = "/v1/jobs/batch", tag = "jobs", operation_id = "push_many",
    summary = "Push many jobs",
    params(TraceParams),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "One result per entry, in order (even when every entry failed).", body = BatchAnswer),
    ))]
pub async fn push_many(
    State(app): State<AppState>,
    caller: Caller,
    headers: TraceHeaders,
    JsonBody(req): JsonBody<BatchRequest>,
) -> Result<Json<BatchAnswer>, ApiError> {
    caller.allow_scope(Scope::Produce)?;
    let max = app.queue.limits().max_batch;
    if req.jobs.is_empty() {
        return Err(ApiError::invalid("`jobs` must hold at least one job"));
    }
    if req.jobs.len() > max {
        return Err(ApiError::invalid(format!(
            "`jobs` holds {} jobs, the limit is {max}",
            req.jobs.len()
        )));
    }
    let registry = app.topics.snapshot();
    let mut jobs: Vec<NewJob> = Vec::with_capacity(req.jobs.len());
    for (i, raw) in req.jobs.iter().enumerate() {
        // serde would fill a push from an array too (`[topic, body]`); an entry is an object.
        if !raw.get().starts_with('{') {
            return Err(ApiError::invalid(format!("jobs[{i}]: each job must be a JSON object")));
        }
        let mut parsed: PushRequest =
            serde_json::from_str(raw.get()).map_err(|e| ApiError::invalid(format!("jobs[{i}]: {e}")))?;
        headers.fill(&mut parsed);
        // A topic the token may not use refuses the whole batch, before anything is written.
        caller
            .allow(Scope::Produce, &parsed.topic)
            .map_err(|e| e.in_entry("jobs", i))?;
        let job = app
            .queue
            .producer()
            .prepare(parsed, &registry)
            .map_err(|e| ApiError::from(e).in_entry("jobs", i))?;
        jobs.push(job);
    }
    let spans: Vec<_> = jobs.iter_mut().map(trace::start_push).collect();
    let results = app
        .queue
        .producer()
        .push_many(jobs)
        .await
        .into_iter()
        .zip(spans)
        .map(|(r, span)| match r {
            Ok(p) => {
                trace::end_push(span, Ok((&p.id, StatusCode::OK)));
                PushResult::Pushed(BatchPushed {
                    id: p.id,
                    state: p.state,
                    run_at: p.run_at,
                    duplicate: p.duplicate,
                    coalesced: p.coalesced,
                    children: p.children,
                })
            }
            Err(e) => {
                let e = ApiError::from(e);
                trace::end_push(span, Err(&e));
                PushResult::Failed(e.body())
            }
        })
        .collect();
    Ok(Json(BatchAnswer { results }))
}

fn checked_id(id: &str) -> Result<(), ApiError> {
    validate_id(id).map_err(ApiError::from)
}

/// `GET /v1/jobs/{id}`: the job.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", operation_id = "lookup",
    summary = "Look up a job",
    params(("id" = String, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job.", body = Job),
        (status = 400, description = "`invalid_argument`: not a valid job id.", body = ErrorBody),
        (status = 404, description = "`not_found`: no job with this id (or its `done` record expired).", body = ErrorBody),
    ))]
pub async fn lookup(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    checked_id(&id)?;
    let job = app.queue.producer().get(&id).await?;
    caller.allow(Scope::Read, &job.topic)?;
    Ok(Json(job))
}

/// `GET /v1/jobs/{id}/attempts`: the job's delivery attempts, newest first (at most 20).
#[utoipa::path(get, path = "/v1/jobs/{id}/attempts", tag = "jobs", operation_id = "attempts",
    summary = "A job's delivery attempts",
    params(("id" = String, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job's deliveries so far and its newest 20 attempts, newest first (empty with `jobs.attempt_history` off).", body = Attempts),
        (status = 400, description = "`invalid_argument`: not a valid job id.", body = ErrorBody),
        (status = 404, description = "`not_found`: no job with this id (or its `done` record expired).", body = ErrorBody),
    ))]
pub async fn attempts(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Attempts>, ApiError> {
    caller.allow_scope(Scope::Read)?;
    checked_id(&id)?;
    allow_job(&app, &caller, Scope::Read, &id).await?;
    let (attempts, history) = app.queue.producer().attempts(&id).await?;
    Ok(Json(Attempts { id, attempts, history }))
}

/// 403 unless `caller` may use job `id`'s topic with `scope`. A token for every topic needs no look-up;
/// one limited to some topics costs a read of the job (404 when there is none).
pub async fn allow_job(app: &AppState, caller: &Caller, scope: Scope, id: &str) -> Result<(), ApiError> {
    caller.allow_scope(scope)?;
    if caller.limited() {
        let job = app.queue.producer().get(id).await?;
        caller.allow(scope, &job.topic)?;
    }
    Ok(())
}

/// `DELETE /v1/jobs/{id}`: 204, or 404.
#[utoipa::path(delete, path = "/v1/jobs/{id}", tag = "jobs", operation_id = "cancel",
    summary = "Cancel a job (in any state)",
    params(("id" = String, Path, description = "The job's id.")),
    responses(
        (status = 204, description = "The job and its record are gone."),
        (status = 400, description = "`invalid_argument`: not a valid job id.", body = ErrorBody),
        (status = 404, description = "`not_found`: no job with this id.", body = ErrorBody),
    ))]
pub async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.allow_scope(Scope::Produce)?;
    checked_id(&id)?;
    allow_job(&app, &caller, Scope::Produce, &id).await?;
    app.queue.producer().cancel(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PATCH /v1/jobs/{id}`: a new due time, a new priority, or both; 200 job, only while delayed or ready
/// (else 409).
#[utoipa::path(patch, path = "/v1/jobs/{id}", tag = "jobs", operation_id = "reschedule",
    summary = "Reschedule or reprioritise a delayed or ready job",
    params(("id" = String, Path, description = "The job's id.")),
    request_body = RescheduleRequest,
    responses(
        (status = 200, description = "The job with its new `state`, `run_at` and `priority`.", body = Job),
        (status = 404, description = "`not_found`: no job with this id.", body = ErrorBody),
        (status = 409, description = "`conflict`: the job is `reserved`, `done` or `dead`.", body = ErrorBody),
    ))]
pub async fn reschedule(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<RescheduleRequest>,
) -> Result<Json<Job>, ApiError> {
    caller.allow_scope(Scope::Produce)?;
    checked_id(&id)?;
    let horizon = app.queue.limits().max_delay_ms;
    let schedule = match (req.delay_ms, req.run_at) {
        (None, None) if req.priority.is_some() => None,
        (Some(d), None) if d >= 0 && d as u64 <= horizon => Some(Due::Delay(d as u64)),
        (Some(d), None) => {
            return Err(ApiError::invalid(format!(
                "`delay_ms` must be between 0 and {horizon}, got {d}"
            )));
        }
        (None, Some(at)) if at >= 0 && at <= dq_core::clock::unix_ms().saturating_add(horizon as i64) => {
            Some(Due::At(at))
        }
        (None, Some(at)) => {
            return Err(ApiError::invalid(format!(
                "`run_at` must be a Unix time in ms at most {horizon} ms from now, got {at}"
            )));
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give either `delay_ms` or `run_at`, not both"));
        }
        (None, None) => {
            return Err(ApiError::invalid("give `delay_ms` or `run_at`, `priority`, or both"));
        }
    };
    let priority = req
        .priority
        .map(|p| dq_core::job::check_priority(p, "priority"))
        .transpose()?;
    allow_job(&app, &caller, Scope::Produce, &id).await?;
    Ok(Json(app.queue.producer().reschedule(&id, schedule, priority).await?))
}
