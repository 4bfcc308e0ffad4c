//! A topic's page: its counts, its registration (edited in place), its jobs in one state, a page at a
//! time, with a filter on the bodies of the page and actions on the selected jobs, and its flow keys
//! (the limits on each key, and the busiest keys).

use axum::extract::{Path, Query, State};
use axum::response::Response;
use dq_core::State as JobState;
use dq_core::config::Scope;
use dq_core::flow::FlowKeys;
use dq_core::job::validate_topic;
use dq_core::topic::Flow;
use maud::{Markup, html};
use serde::Deserialize;

use super::{html_page, job_href, page, read_only, topic_href, utc};
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::topics::{counts, paging};

/// Jobs a page lists.
const PAGE: usize = 50;

/// Flow keys the page lists, the busiest first.
const BUSIEST: usize = 10;

/// The states a topic's page has a tab for, in the order of a job's life.
const TABS: [JobState; 4] = [JobState::Delayed, JobState::Ready, JobState::Reserved, JobState::Dead];

/// `GET /admin/topics/{topic}` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicQuery {
    /// Which jobs to list (default: ready).
    #[serde(default)]
    state: Option<String>,
    /// Jobs to skip.
    #[serde(default)]
    offset: Option<usize>,
    /// Only the jobs of the page whose body holds this text.
    #[serde(default)]
    q: Option<String>,
}

/// `GET /admin/topics/{topic}?state=&offset=&q=`.
pub async fn topic(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
    query: Result<Query<TopicQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    validate_topic(&topic)?;
    caller.allow(Scope::Admin, &topic)?;
    let Query(q) = query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
    let asked = match q.state.as_deref() {
        None => None,
        Some(asked) => Some(JobState::parse(asked).filter(|s| TABS.contains(s)).ok_or_else(|| {
            ApiError::invalid(format!(
                "`state` must be delayed, ready, reserved or dead, got `{asked}`"
            ))
        })?),
    };
    let (offset, _) = paging(q.offset, None, PAGE)?;
    let config = app.queue.admin().topics().await?.remove(&topic);
    let counts = counts(&app).await.remove(&topic).unwrap_or_default();
    // Without a choice, the first state that has jobs, in the order of a job's life from ready on.
    let state = asked.unwrap_or_else(|| {
        [JobState::Ready, JobState::Delayed, JobState::Reserved, JobState::Dead]
            .into_iter()
            .find(|s| counts.get(*s) > 0)
            .unwrap_or(JobState::Ready)
    });
    let listed = app.queue.admin().browse(&topic, state, offset, PAGE).await?;
    let flows = app.queue.admin().flow_keys(&topic, BUSIEST).await?;
    let filter = q.q.as_deref().filter(|s| !s.is_empty());
    let jobs: Vec<_> = listed
        .jobs
        .iter()
        .filter(|j| filter.is_none_or(|f| j.body.get().contains(f)))
        .collect();
    let editable = config
        .as_ref()
        .map(|c| serde_json::to_string_pretty(&c.redacted()).unwrap_or_default())
        .unwrap_or_else(|| "{}".into());
    let ro = read_only(&app);
    let here = topic_href(&topic);
    let tab = |s: JobState| format!("{here}?state={}", s.as_str());
    Ok(html_page(page(
        &app,
        &format!("Topic {topic}"),
        html! {
            nav class="tabs" {
                @for s in TABS {
                    a href=(tab(s)) class=[(s == state).then_some("on")] {
                        (s.as_str()) " " (counts.get(s))
                    }
                }
            }
            h2 { (state.as_str()) " jobs" }
            form class="inline" method="get" action=(here) {
                input type="hidden" name="state" value=(state.as_str());
                input type="hidden" name="offset" value=(offset);
                label { "Body contains " input name="q" value=[filter]; }
                " " button type="submit" { "filter this page" }
            }
            form class="inline" method="get" action="/admin/jobs" {
                label { "Job id " input name="id" required; } " " button type="submit" { "find" }
            }
            @if !ro { p { (actions(&topic, state)) } }
            (job_table(&jobs, state, ro))
            p class="note" {
                @if listed.jobs.is_empty() { "No " (state.as_str()) " jobs here. " }
                @else { "Jobs " (offset + 1) "–" (offset + listed.jobs.len()) " of " (listed.total) ". " }
                @if let Some(f) = filter { (jobs.len()) " of this page's " (listed.jobs.len()) " hold “" (f) "”. " }
                @if !listed.complete {
                    "Delayed and reserved jobs share their partitions' sets with every topic: this page was looked for among the earliest of them, and some of the topic's may be missing from it. "
                }
                @if offset > 0 { a href={ (tab(state)) "&offset=" (offset.saturating_sub(PAGE)) } { "← earlier" } " " }
                @if (offset + listed.jobs.len()) < listed.total as usize && listed.jobs.len() == PAGE {
                    a href={ (tab(state)) "&offset=" (offset + PAGE) } { "later →" }
                }
            }
            (flow_keys(config.as_ref().and_then(|c| c.flow.as_ref()), &flows))
            h2 { "Registration" }
            @if config.is_none() { p class="note" { "Not registered: pulled through the API with the global defaults." } }
            @if ro {
                pre { (editable) }
            } @else {
                p class="note" { "The whole registration, as PUT /v1/topics/" (topic) " takes it. Values shown as *** keep the stored ones." }
                textarea id="registration" rows="16" { (editable) }
                p {
                    button data-call={ "PUT /v1/topics/" (topic) } data-body-from="registration" { "save" }
                    @if config.as_ref().is_some_and(|c| c.paused) {
                        button data-call={ "POST /v1/topics/" (topic) "/resume" } { "resume" }
                    } @else {
                        button data-call={ "POST /v1/topics/" (topic) "/pause" } { "pause" }
                    }
                    @if config.is_some() {
                        button data-call={ "DELETE /v1/topics/" (topic) } data-confirm="Delete this topic's registration? Its jobs stay." { "delete registration" }
                    }
                }
            }
        },
    )))
}

/// The topic's limits on each flow key, and how many keys have ready jobs with the busiest of them.
fn flow_keys(flow: Option<&Flow>, flows: &FlowKeys) -> Markup {
    html! {
        h2 { "Flow keys" }
        @if let Some(f) = flow {
            p {
                "Limits on each key: concurrency "
                @if let Some(c) = f.concurrency { (c) } @else { "no limit" }
                " · rate "
                @if let Some(r) = f.rate_per_s { (r) " per s" } @else { "no limit" }
                @if f.rate_per_s.is_some() {
                    " · burst " (f.burst_or_default()) @if f.burst.is_none() { " (the default: a second of the rate)" }
                }
            }
        } @else {
            p class="note" { "No flow limits registered: the keys with ready jobs take turns, each unlimited." }
        }
        p {
            @match flows.keys {
                0 => { "No flow key has ready jobs." }
                1 => { "1 flow key has ready jobs." }
                n => { (n) " flow keys have ready jobs." }
            }
            @if (flows.busiest.len() as u64) < flows.keys { " The " (flows.busiest.len()) " busiest:" }
        }
        @if !flows.busiest.is_empty() {
            table {
                tr { th { "key" } th { "ready" } th { "reserved" } }
                @for k in &flows.busiest {
                    tr { td { code { (k.key) } } td class="num" { (k.ready) } td class="num" { (k.reserved) } }
                }
            }
        }
    }
}

/// The buttons that act on the selected jobs of a state.
fn actions(topic: &str, state: JobState) -> Markup {
    html! {
        "Selected jobs: "
        @match state {
            JobState::Dead => {
                button data-call={ "POST /v1/topics/" (topic) "/dead/requeue" } data-ids { "requeue" }
                button data-call={ "DELETE /v1/topics/" (topic) "/dead" } data-ids data-confirm="Delete the selected dead jobs?" { "delete" }
            }
            JobState::Delayed => {
                button data-call="PATCH /v1/jobs/{id}" data-each data-body=r#"{"delay_ms":0}"# { "run now" }
                button data-call="DELETE /v1/jobs/{id}" data-each data-confirm="Delete the selected jobs?" { "delete" }
            }
            _ => {
                button data-call="DELETE /v1/jobs/{id}" data-each data-confirm="Delete the selected jobs?" { "delete" }
            }
        }
    }
}

/// The jobs of a page, each with a box to select it.
fn job_table(jobs: &[&dq_core::Job], state: JobState, ro: bool) -> Markup {
    let when = match state {
        JobState::Reserved => "deadline (UTC)",
        _ => "due (UTC)",
    };
    html! {
        table {
            tr {
                @if !ro { th { input type="checkbox" class="pick-all" title="select all"; } }
                th { "id" } th { (when) } th { "priority" } th { "attempts" } th { "last error" } th { "body" }
            }
            @for job in jobs {
                tr {
                    @if !ro { td { input type="checkbox" class="pick" value=(job.id); } }
                    td { a href=(job_href(&job.id)) { code { (job.id) } } }
                    td { (utc(if state == JobState::Reserved { job.deadline.unwrap_or(job.run_at) } else { job.run_at })) }
                    td class="num" { (job.priority) }
                    td class="num" { (job.attempts) "/" @if job.max_attempts == 0 { "∞" } @else { (job.max_attempts) } }
                    td { (job.last_error.as_deref().unwrap_or("")) }
                    td { code { (job.body.get().chars().take(120).collect::<String>()) } }
                }
            }
        }
    }
}
