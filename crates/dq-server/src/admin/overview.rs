//! The overview: the dashboard (activity charts, Redis's primaries), the topics with their counts, the
//! schedules.

use axum::extract::{Query, State};
use axum::response::Response;
use dq_core::config::Scope;
use maud::{Markup, html};

use super::dashboard::{self, DashboardQuery};
use super::{html_page, page, read_only};
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::topics::counts;

/// `GET /admin?hours=1|6|24`: the dashboard over that many hours (6 by default), topics, schedules.
pub async fn overview(
    State(app): State<AppState>,
    caller: Caller,
    Query(query): Query<DashboardQuery>,
) -> Result<Response, ApiError> {
    caller.allow_scope(Scope::Admin)?;
    let hours = query.hours()?;
    // Side by side: each is a round of calls to Redis.
    let (dashboard, registry, counts, schedules) = tokio::join!(
        dashboard::section(&app, hours),
        app.queue.admin().topics(),
        counts(&app),
        schedules_section(&app, &caller)
    );
    let registry = registry.unwrap_or_default();
    let mut names: Vec<&String> = registry
        .keys()
        .chain(counts.keys())
        .filter(|t| caller.sees(t))
        .collect();
    names.sort();
    names.dedup();
    Ok(html_page(page(
        &app,
        "Overview",
        html! {
            (dashboard)
            h2 { "Topics" }
            form class="inline" method="get" action="/admin/jobs" {
                label { "Find a job by id " input name="id" required; } " " button type="submit" { "find" }
            }
            table {
                tr { th { "topic" } th { "delivery" } th { "delayed" } th { "ready" } th { "reserved" } th { "dead" } th {} }
                @for name in &names {
                    @let config = registry.get(*name);
                    @let c = counts.get(*name);
                    @let n = |state: dq_core::State| c.map_or(0, |c| c.get(state));
                    tr {
                        td { a href={ "/admin/topics/" (name) } { (name) } }
                        td {
                            @match config.and_then(|c| c.callback.as_ref()) {
                                Some(cb) => { "POST " (dq_core::topic::masked_url(&cb.url)) }
                                None => { "pull" }
                            }
                            @if config.is_some_and(|c| c.paused) { " (paused)" }
                        }
                        td class="num" { (n(dq_core::State::Delayed)) } td class="num" { (n(dq_core::State::Ready)) }
                        td class="num" { (n(dq_core::State::Reserved)) } td class="num" { (n(dq_core::State::Dead)) }
                        @if !read_only(&app) {
                            td {
                                @if config.is_some_and(|c| c.paused) {
                                    button data-call={ "POST /v1/topics/" (name) "/resume" } { "resume" }
                                } @else {
                                    button data-call={ "POST /v1/topics/" (name) "/pause" } { "pause" }
                                }
                            }
                        }
                    }
                }
            }
            (schedules)
        },
    )))
}

/// The overview's schedules: name, cron, zone, topic, next fire, last fired, paused, with pause and
/// resume buttons. Times are UTC.
async fn schedules_section(app: &AppState, caller: &Caller) -> Markup {
    let listed = match (app.queue.admin().schedules().await, app.queue.redis_now_ms().await) {
        (Ok(all), Ok(now)) => Ok((all, now)),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let time = |ms: Option<i64>| ms.map(dq_core::schedule::rfc3339).unwrap_or_default();
    html! {
        h2 { "Schedules" }
        @match listed {
            Err(e) => { p class="down" { "Cannot read the schedules: " (e) } }
            Ok((all, now)) => {
                table {
                    tr { th { "schedule" } th { "cron" } th { "zone" } th { "topic" } th { "next fire (UTC)" } th { "last fired (UTC)" } th { "paused" } th {} }
                    @for v in all.into_iter().filter(|s| caller.sees(&s.config.topic)).map(|s| crate::schedules::view(s, now)) {
                        @let (name, c) = (&v.name, &v.config);
                        tr {
                            td { (name) }
                            td { code { (c.cron) } }
                            td { (c.timezone) }
                            td { a href={ "/admin/topics/" (c.topic) } { (c.topic) } }
                            td { (time(v.next_fire_at)) }
                            td { (time(v.last_fired_at)) }
                            td { @if c.paused { "paused" } @else { "no" } }
                            @if !read_only(app) {
                                td {
                                    @if c.paused {
                                        button data-call={ "POST /v1/schedules/" (name) "/resume" } { "resume" }
                                    } @else {
                                        button data-call={ "POST /v1/schedules/" (name) "/pause" } { "pause" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
