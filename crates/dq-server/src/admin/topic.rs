//! A topic's page: its registration, counts and dead letters.

use axum::extract::{Path, State};
use axum::response::Response;
use dq_core::config::Scope;
use dq_core::job::validate_topic;
use maud::html;

use super::{html_page, page};
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::topics::counts;

/// `GET /admin/topics/{topic}`: a topic's registration, counts and first dead letters.
pub async fn topic(
    State(app): State<AppState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Response, ApiError> {
    validate_topic(&topic)?;
    caller.allow(Scope::Admin, &topic)?;
    let config = app.queue.topics().await?.remove(&topic);
    let counts = counts(&app).await.remove(&topic).unwrap_or_default();
    let dead = app.queue.dead(&topic, 0, 100).await?;
    let config_json = config
        .as_ref()
        .map(|c| serde_json::to_string_pretty(&c.redacted()).unwrap_or_default());
    Ok(html_page(page(
        &format!("Topic {topic}"),
        html! {
            p { (counts.iter().map(|(state, n)| format!("{state}: {n}")).collect::<Vec<_>>().join(" · ")) }
            h2 { "Registration" }
            @match config_json {
                Some(json) => { pre { (json) } }
                None => { p { "Not registered: pulled through the API with the global defaults." } }
            }
            h2 { "Dead letters (" (dead.total) ")" }
            @if dead.total > 0 {
                p {
                    button data-call={ "POST /v1/topics/" (topic) "/dead/requeue" } { "requeue all" }
                    button data-call={ "DELETE /v1/topics/" (topic) "/dead" } data-confirm="Delete every dead job of this topic?" { "delete all" }
                }
                table {
                    tr { th { "id" } th { "attempts" } th { "last error" } th { "body" } th {} }
                    @for job in &dead.jobs {
                        tr {
                            td { code { (job.id) } } td class="num" { (job.attempts) }
                            td { (job.last_error.as_deref().unwrap_or("")) }
                            td { code { (job.body.get().chars().take(120).collect::<String>()) } }
                            td {
                                button data-call={ "POST /v1/topics/" (topic) "/dead/requeue" } data-body=(ids_body(&job.id)) { "requeue" }
                                button data-call={ "DELETE /v1/topics/" (topic) "/dead" } data-body=(ids_body(&job.id)) { "delete" }
                            }
                        }
                    }
                }
                @if dead.total as usize > dead.jobs.len() { p { "Showing the oldest " (dead.jobs.len()) "; the API pages through the rest." } }
            }
        },
    )))
}

/// `{"ids":[id]}`, the body of a button that acts on one dead job (escaped by maud as an attribute).
fn ids_body(id: &str) -> String {
    serde_json::json!({ "ids": [id] }).to_string()
}
