//! Pull consumers' verbs: reserve (with long poll), ack, ack many, nack, touch.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dq_api::{
    AckManyAnswer, AckManyRequest, AckPushed, AckRequest, AckResult, Acked, NackRequest, ReserveAnswer, ReserveRequest,
    TouchRequest, Touched,
};
use dq_core::Reservation;
use dq_core::attempt::{MAX_CONSUMER_CHARS, Note};
use dq_core::config::Scope;
use dq_core::job::{validate_id, validate_topic};
use dq_core::reservations::{Failure, ReserveOptions, Success};

use crate::AppState;
use crate::auth::Caller;
use crate::body::JsonBody;
use crate::error::{ApiError, ErrorBody};
use crate::jobs::allow_job;

/// `POST /v1/reserve`: 200 `{jobs: [...]}`, an empty list when nothing became ready within `timeout_ms`.
///
/// Waiting costs Redis nothing: the reserver takes its place in line for its topics, tries once, and
/// sleeps until a script publishes that one of its topics' queues stopped being empty (which wakes one
/// waiter of the topic in this process, not all).
#[utoipa::path(post, path = "/v1/reserve", tag = "consume", operation_id = "reserve",
    summary = "Reserve jobs (with a long poll)",
    request_body = ReserveRequest,
    responses(
        (status = 200, description = "Up to `count` jobs, each now `reserved` with a fresh receipt; an empty list when none became ready within `timeout_ms`.", body = ReserveAnswer),
    ))]
pub async fn reserve(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<ReserveRequest>,
) -> Result<Json<ReserveAnswer>, ApiError> {
    caller.allow_scope(Scope::Consume)?;
    let limits = app.queue.limits();
    if req.topics.is_empty() {
        return Err(ApiError::invalid("`topics` must name at least one topic"));
    }
    if req.topics.len() > limits.max_reserve_topics {
        return Err(ApiError::invalid(format!(
            "`topics` names {} topics, the limit is {}",
            req.topics.len(),
            limits.max_reserve_topics
        )));
    }
    for t in &req.topics {
        validate_topic(t)?;
        caller.allow(Scope::Consume, t)?;
    }
    let mut topics: Vec<String> = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        if !topics.contains(&t) {
            topics.push(t);
        }
    }
    let count = match req.count {
        None => 1,
        Some(c) if c >= 1 && c as usize <= limits.max_reserve_count => c as usize,
        Some(c) => {
            return Err(ApiError::invalid(format!(
                "`count` must be between 1 and {}, got {c}",
                limits.max_reserve_count
            )));
        }
    };
    let timeout = match req.timeout_ms {
        None => 0,
        Some(t) if t >= 0 && t as u64 <= limits.max_reserve_timeout_ms => t as u64,
        Some(t) => {
            return Err(ApiError::invalid(format!(
                "`timeout_ms` must be between 0 and {}, got {t}",
                limits.max_reserve_timeout_ms
            )));
        }
    };

    // A paused topic hands out nothing; when all are paused, the long poll just runs out.
    {
        // Not held while waiting: that would keep a registry the cache has since replaced.
        let registry = app.topics.snapshot();
        topics.retain(|t| !registry.get(t).is_some_and(|c| c.paused));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout);
    // Held while waiting, released with the answer.
    let mut permit = None;
    loop {
        // In line before looking, so a wake-up sent while this reserve runs is not missed.
        let mut waiter = (timeout > 0).then(|| app.queue.reservations().ready_index().waiter(&topics, count as u32));
        let jobs: Vec<Reservation> = if topics.is_empty() {
            Vec::new()
        } else {
            let options = ReserveOptions {
                best_first: false,
                least_ttr_ms: None,
                waits: waiter.is_some(),
            };
            app.queue.reservations().reserve_with(&topics, count, options).await?
        };
        let Some(waiter) = waiter.as_mut().filter(|_| jobs.is_empty()) else {
            return Ok(Json(ReserveAnswer { jobs }));
        };
        if permit.is_none() {
            permit = Some(app.long_polls.enter()?);
        }
        tokio::select! {
            _ = waiter.wait() => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(Json(ReserveAnswer { jobs: Vec::new() })),
            _ = app.shutdown.cancelled() => return Ok(Json(ReserveAnswer { jobs: Vec::new() })),
        }
    }
}

fn check(id: &str, receipt: &str) -> Result<(), ApiError> {
    validate_id(id)?;
    // Characters, not bytes: the limit the OpenAPI document can state (`maxLength`).
    if receipt.is_empty() || receipt.chars().count() > 128 {
        return Err(ApiError::invalid("`receipt` must be the receipt reserve returned"));
    }
    Ok(())
}

/// What an ack or nack says of its attempt, for the job's history: who made it. A `consumer` is 1 to 128
/// characters without control characters.
fn note(consumer: &Option<String>) -> Result<Note, ApiError> {
    if let Some(c) = consumer
        && (c.is_empty() || c.chars().count() > MAX_CONSUMER_CHARS || c.chars().any(char::is_control))
    {
        return Err(ApiError::invalid(format!(
            "`consumer` must be 1 to {MAX_CONSUMER_CHARS} characters without control characters"
        )));
    }
    Ok(Note {
        consumer: consumer.clone(),
        ..Default::default()
    })
}

/// `POST /v1/jobs/{id}/ack`: 204; with `push`, 200 and the ids of the jobs stored with the ack; 409
/// `stale_receipt` when the reservation is over (then nothing is pushed).
#[utoipa::path(post, path = "/v1/jobs/{id}/ack", tag = "consume", operation_id = "ack",
    summary = "Ack a reserved job: it is done",
    params(("id" = String, Path, description = "The job's id.")),
    request_body = AckRequest,
    responses(
        (status = 200, description = "The job is `done`, and the jobs of `push` are stored with it (ids `<id>~<index>`; a fan-out topic's job with its children).", body = AckPushed),
        (status = 204, description = "The job is `done`."),
        (status = 403, description = "`forbidden`: the token may not consume the job's topic, or not produce to a topic of `push`; nothing changed.", body = ErrorBody),
        (status = 404, description = "`not_found`: the job does not exist (any more).", body = ErrorBody),
        (status = 409, description = "`stale_receipt`: the receipt is not the job's current reservation; nothing changed.", body = ErrorBody),
    ))]
pub async fn ack(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<AckRequest>,
) -> Result<Response, ApiError> {
    caller.allow_scope(Scope::Consume)?;
    check(&id, &req.receipt)?;
    let note = note(&req.consumer)?;
    let Some(push) = &req.push else {
        allow_job(&app, &caller, Scope::Consume, &id).await?;
        app.queue.reservations().ack_noting(&id, &req.receipt, &note).await?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    // The jobs are checked before anything is written: a pull worker's pushes are its token's.
    let registry = app.topics.snapshot();
    let may_push = |topic: &str| {
        caller.allow(Scope::Produce, topic).map_err(|_| {
            dq_core::Error::Forbidden(format!("this token may not push to topic `{topic}` (scope `produce`)"))
        })
    };
    // One look-up, on this path only: the jobs join the acked job's trace, when it has one, and a token
    // limited to some topics is checked against the job's (what `allow_job` would look up again).
    let looked_up = app.queue.producer().get(&id).await;
    let trace = looked_up.as_ref().ok().and_then(|job| {
        dq_core::trace::TraceContext::from_fields(job.traceparent.as_deref(), job.tracestate.as_deref())
            .ok()
            .flatten()
    });
    let jobs = app
        .queue
        .producer()
        .prepare_pushes(&id, trace.as_ref(), push, &registry, may_push)?;
    if caller.limited() {
        caller.allow(Scope::Consume, &looked_up?.topic)?;
    }
    let pushed = app
        .queue
        .reservations()
        .ack_with(
            &id,
            &req.receipt,
            &Success {
                note,
                push: &jobs,
                hook_answer: None,
            },
        )
        .await?;
    Ok(Json(AckPushed { pushed }).into_response())
}

/// `POST /v1/jobs/ack`: 200 `{results: [{} | {error}]}` in order. A malformed entry refuses the whole
/// request (nothing is acked); a stale receipt, a job that is gone, a topic the token may not use or a
/// partition that does not answer fails only its own entry. The acks run side by side, so the group
/// commit carries those of one partition in one script call: a worker that reserved a batch settles it
/// in one request and few calls.
#[utoipa::path(post, path = "/v1/jobs/ack", tag = "consume", operation_id = "ack_many",
    summary = "Ack many reserved jobs",
    request_body = AckManyRequest,
    responses(
        (status = 200, description = "One result per entry, in order: `{}` for a job now done, or the error the single ack would answer.", body = AckManyAnswer),
    ))]
pub async fn ack_many(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<AckManyRequest>,
) -> Result<Json<AckManyAnswer>, ApiError> {
    caller.allow_scope(Scope::Consume)?;
    let max = app.queue.limits().max_batch;
    if req.acks.is_empty() || req.acks.len() > max {
        return Err(ApiError::invalid(format!(
            "`acks` must hold 1 to {max} entries, got {}",
            req.acks.len()
        )));
    }
    let mut notes = Vec::with_capacity(req.acks.len());
    for (i, a) in req.acks.iter().enumerate() {
        check(&a.id, &a.receipt).map_err(|e| e.in_entry("acks", i))?;
        notes.push(note(&a.consumer).map_err(|e| e.in_entry("acks", i))?);
    }
    let (app, caller) = (&app, &caller);
    let acks = req.acks.iter().zip(&notes).map(|(a, note)| async move {
        allow_job(app, caller, Scope::Consume, &a.id).await?;
        app.queue.reservations().ack_noting(&a.id, &a.receipt, note).await?;
        Ok::<(), ApiError>(())
    });
    let results = futures_util::future::join_all(acks)
        .await
        .into_iter()
        .map(|r| match r {
            Ok(()) => AckResult::Acked(Acked {}),
            Err(e) => AckResult::Failed(e.body()),
        })
        .collect();
    Ok(Json(AckManyAnswer { results }))
}

/// `POST /v1/jobs/{id}/nack`: 204; the job backs off, or goes dead after its last attempt.
#[utoipa::path(post, path = "/v1/jobs/{id}/nack", tag = "consume", operation_id = "nack",
    summary = "Nack a reserved job: retry it later, or dead after its last attempt",
    params(("id" = String, Path, description = "The job's id.")),
    request_body = NackRequest,
    responses(
        (status = 204, description = "The job is `delayed`, `ready` (delay 0) or `dead`."),
        (status = 404, description = "`not_found`: the job does not exist (any more).", body = ErrorBody),
        (status = 409, description = "`stale_receipt`: the receipt is not the job's current reservation; nothing changed.", body = ErrorBody),
    ))]
pub async fn nack(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<NackRequest>,
) -> Result<StatusCode, ApiError> {
    caller.allow_scope(Scope::Consume)?;
    check(&id, &req.receipt)?;
    let note = note(&req.consumer)?;
    allow_job(&app, &caller, Scope::Consume, &id).await?;
    let limits = app.queue.limits();
    let delay = match req.delay_ms {
        None => None,
        Some(d) if d >= 0 && d as u64 <= limits.max_delay_ms => Some(d as u64),
        Some(d) => {
            return Err(ApiError::invalid(format!(
                "`delay_ms` must be between 0 and {}, got {d}",
                limits.max_delay_ms
            )));
        }
    };
    if let Some(e) = &req.error
        && e.len() > limits.max_error_bytes
    {
        return Err(ApiError::invalid(format!(
            "`error` is {} bytes, the limit is {}",
            e.len(),
            limits.max_error_bytes
        )));
    }
    let failure = Failure {
        delay_ms: delay,
        error: req.error.as_deref(),
        note,
        ..Default::default()
    };
    app.queue.reservations().nack_with(&id, &req.receipt, &failure).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/jobs/{id}/touch`: 200 `{deadline}`.
#[utoipa::path(post, path = "/v1/jobs/{id}/touch", tag = "consume", operation_id = "touch",
    summary = "Extend a reservation",
    params(("id" = String, Path, description = "The job's id.")),
    request_body = TouchRequest,
    responses(
        (status = 200, description = "The reservation's new deadline.", body = Touched),
        (status = 404, description = "`not_found`: the job does not exist (any more).", body = ErrorBody),
        (status = 409, description = "`stale_receipt`: the receipt is not the job's current reservation; nothing changed.", body = ErrorBody),
    ))]
pub async fn touch(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<TouchRequest>,
) -> Result<Json<Touched>, ApiError> {
    caller.allow_scope(Scope::Consume)?;
    check(&id, &req.receipt)?;
    allow_job(&app, &caller, Scope::Consume, &id).await?;
    let limits = app.queue.limits();
    let ttr = match req.ttr_ms {
        None => None,
        Some(t) if t >= limits.min_ttr_ms as i64 && t <= limits.max_ttr_ms as i64 => Some(t as u64),
        Some(t) => {
            return Err(ApiError::invalid(format!(
                "`ttr_ms` must be between {} and {}, got {t}",
                limits.min_ttr_ms, limits.max_ttr_ms
            )));
        }
    };
    let deadline = app.queue.reservations().touch(&id, &req.receipt, ttr).await?;
    Ok(Json(Touched { deadline }))
}
