//! A job's page: its fields (its flow key among them), body, graph (the job that started it and the jobs
//! it started) and delivery attempts, and what can be done to it (run now, reschedule, delete, requeue).

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use dq_core::State as JobState;
use dq_core::attempt::{Attempt, Outcome};
use dq_core::config::Scope;
use dq_core::job::validate_id;
use maud::{Markup, html};
use serde::Deserialize;

use super::{html_page, job_href, page, read_only, topic_href, utc};
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// `GET /admin/jobs` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Find {
    /// The job's id.
    id: String,
}

/// `GET /admin/jobs?id=`: the search by id; goes to the job's page.
pub async fn find(query: Result<Query<Find>, axum::extract::rejection::QueryRejection>) -> Result<Response, ApiError> {
    let Query(f) = query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
    let id = f.id.trim();
    validate_id(id)?;
    Ok(Redirect::to(&job_href(id)).into_response())
}

/// `GET /admin/jobs/{id}`.
pub async fn job(State(app): State<AppState>, caller: Caller, Path(id): Path<String>) -> Result<Response, ApiError> {
    validate_id(&id)?;
    let job = app.queue.producer().get(&id).await?;
    caller.allow(Scope::Admin, &job.topic)?;
    let (deliveries, history) = app.queue.producer().attempts(&id).await?;
    let body = serde_json::from_str::<serde_json::Value>(job.body.get())
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| job.body.get().to_string());
    let topic_page = topic_href(&job.topic);
    let movable = matches!(job.state, JobState::Delayed | JobState::Ready);
    Ok(html_page(page(
        &app,
        &format!("Job {id}"),
        html! {
            dl {
                dt { "topic" } dd { a href=(topic_page) { (job.topic) } }
                dt { "state" } dd { (job.state.as_str()) }
                dt { "due (UTC)" } dd { (utc(job.run_at)) }
                dt { "priority" } dd { (job.priority) @if job.priority == dq_api::DEFAULT_PRIORITY { " (default)" } }
                @if let Some(k) = &job.flow_key { dt { "flow key" } dd { code { (k) } } }
                @if let Some(d) = job.deadline { dt { "reserved until (UTC)" } dd { (utc(d)) } }
                dt { "attempts" } dd { (job.attempts) " of " @if job.max_attempts == 0 { "unlimited" } @else { (job.max_attempts) } }
                dt { "time to run" } dd { (job.ttr_ms) " ms" }
                @if let Some(u) = job.retry_until { dt { "retries end (UTC)" } dd { (utc(u)) } }
                @if let Some(b) = &job.backoff_ms { dt { "backoff (ms)" } dd { (format!("{b:?}")) } }
                dt { "pushed (UTC)" } dd { (utc(job.created_at)) }
                @if let Some(e) = &job.last_error { dt { "last error" } dd { (e) } }
                // The trace id is what a tracing UI (Jaeger, Tempo) searches by.
                @if let Some(t) = &job.traceparent {
                    dt { "trace id" } dd { code { (t.get(3..35).unwrap_or(t)) } }
                    dt { "traceparent" } dd { code { (t) } }
                }
                @if let Some(t) = &job.tracestate { dt { "tracestate" } dd { code { (t) } } }
            }
            h2 { "Body" }
            pre { (body) }
            @if job.parent.is_some() || !job.children.is_empty() {
                h2 { "Graph" }
                (graph(&job))
            }
            h2 { "Attempts" }
            (attempts(deliveries, &history))
            @if !read_only(&app) {
                h2 { "Actions" }
                p {
                    @if movable {
                        button data-call={ "PATCH /v1/jobs/" (id) } data-body=r#"{"delay_ms":0}"# { "run now" }
                        label { "in " input id="delay-s" type="number" min="0" step="any" value="60"; " s " }
                        button data-call={ "PATCH /v1/jobs/" (id) } data-delay-from="delay-s" { "reschedule" }
                        label { " priority " input id="priority" type="number" min="0" max="4294967295" step="1" value=(job.priority); }
                        button data-call={ "PATCH /v1/jobs/" (id) } data-priority-from="priority" { "set priority" }
                    }
                    @if job.state == JobState::Dead {
                        button data-call={ "POST /v1/topics/" (job.topic) "/dead/requeue" } data-body=(serde_json::json!({"ids": [&id]}).to_string()) { "requeue" }
                    }
                    button data-call={ "DELETE /v1/jobs/" (id) } data-confirm="Delete this job?" data-go=(topic_page) { "delete" }
                }
            }
        },
    )))
}

/// The job's place in its graph: the job that started it, and the jobs it started with their states
/// (see docs/api.md, "Jobs that start jobs"), each linked to its page.
fn graph(job: &dq_core::Job) -> Markup {
    html! {
        @if let Some(parent) = &job.parent {
            p { "Started by " a href=(job_href(parent)) { code { (parent) } } }
        }
        @if !job.children.is_empty() {
            table {
                thead { tr { th { "started" } th { "topic" } th { "state" } } }
                tbody {
                    @for child in &job.children {
                        tr {
                            td { a href=(job_href(&child.id)) { code { (child.id) } } }
                            td { (child.topic) }
                            td { (child.state.map_or("gone", |s| s.as_str())) }
                        }
                    }
                }
            }
        }
    }
}

/// The longest answer a cell shows (characters); the whole kept answer (512 bytes) is in its title.
const ANSWER_CHARS: usize = 120;

/// The job's attempts, newest first: how each ended, when, for how long, and who made it, so that an
/// operator sees why a job keeps failing, not only its last error. Errors and answers are other
/// systems' text: maud escapes them like everything else.
fn attempts(deliveries: u32, history: &[Attempt]) -> Markup {
    html! {
        @if history.is_empty() {
            p class="note" {
                @if deliveries == 0 { "No delivery yet." }
                @else if deliveries == 1 { "1 delivery, not on record (see " code { "jobs.attempt_history" } ")." }
                @else { (deliveries) " deliveries, none on record (see " code { "jobs.attempt_history" } ")." }
            }
        } @else {
            @if (history.len() as u64) < u64::from(deliveries) {
                p class="note" { "The newest " (history.len()) " of " (deliveries) " attempts." }
            }
            table {
                tr {
                    th { "#" } th { "outcome" } th { "started (UTC)" } th { "duration" } th { "status" }
                    th { "consumer" } th { "error" } th { "answer" }
                }
                @for a in history {
                    tr {
                        td class="num" { (a.attempt) }
                        td class=[failed(a.outcome).then_some("down")] { (a.outcome.as_str()) }
                        td { (utc(a.started_at)) }
                        td class="num" { (a.duration_ms) " ms" }
                        td class="num" { @if let Some(s) = a.status { (s) } }
                        td { @if let Some(c) = &a.consumer { code { (c) } } }
                        td { (a.error.as_deref().unwrap_or("")) }
                        td title=[a.answer.as_deref()] { @if let Some(t) = &a.answer { code { (shortened(t)) } } }
                    }
                }
            }
        }
    }
}

/// Whether the attempt did not deliver the job: shown in the pages' colour for trouble.
fn failed(o: Outcome) -> bool {
    !matches!(o, Outcome::Acked)
}

/// `text` cut to [`ANSWER_CHARS`] characters, `…` the last when cut.
fn shortened(text: &str) -> String {
    if text.chars().count() <= ANSWER_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(ANSWER_CHARS - 1).collect();
    format!("{head}…")
}
