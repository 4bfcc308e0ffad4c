//! The web admin pages: Redis nodes, topics with their counts, pause and resume, schedules, and dead letters with
//! requeue and delete. Server-rendered (maud escapes everything it prints), with a few lines of
//! script that call the JSON API, so the pages can do nothing the API cannot. With tokens configured,
//! the pages need the `admin` scope: the login form takes an admin token and keeps it in an
//! `HttpOnly; Secure; SameSite=Strict` cookie, which the pages' calls to the API then carry.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use dq_core::config::Scope;
use dq_core::job::validate_topic;
use maud::{DOCTYPE, Markup, html};

use crate::AppState;
use crate::auth::{COOKIE, Caller, is_admin};
use crate::error::ApiError;
use crate::topics::counts;

/// The pages' script, served as a file (`/admin/static/admin.js`) so that the Content-Security-Policy
/// can forbid inline script: a button names its call in `data-call` ("METHOD /path"), with an optional
/// JSON body in `data-body` and a question in `data-confirm`; the script calls the API and reloads the
/// page, or shows the API's error message when it refuses.
pub const SCRIPT: &str = r#"
document.addEventListener('click', async (event) => {
  const button = event.target.closest('button[data-call]');
  if (!button) return;
  if (button.dataset.confirm && !confirm(button.dataset.confirm)) return;
  const [method, path] = button.dataset.call.split(' ');
  const r = await fetch(path, {method, headers: {'content-type': 'application/json'},
                               body: button.dataset.body});
  if (!r.ok) { const e = await r.json().catch(() => ({})); alert((e.error && e.error.message) || r.status); }
  location.reload();
});
"#;

/// The pages' style sheet (`/admin/static/admin.css`).
pub const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}\
td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left}th{background:#f4f4f4}.down{color:#b00}\
.num{text-align:right;font-variant-numeric:tabular-nums}button{margin-right:4px}pre{background:#f8f8f8;padding:8px}";

/// The pages allow only their own files: no inline script or style, no frames, forms to themselves.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// An admin page with its Content-Security-Policy.
fn html_page(markup: Markup) -> Response {
    ([(header::CONTENT_SECURITY_POLICY, POLICY)], markup).into_response()
}

/// `GET /admin/static/admin.js`.
pub async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

/// `GET /admin/static/admin.css`.
pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html {
            head {
                meta charset="utf-8"; title { (title) " · dq" }
                link rel="stylesheet" href="/admin/static/admin.css";
                script src="/admin/static/admin.js" defer {}
            }
            body { p { a href="/admin" { "dq admin" } } h1 { (title) } (body) }
        }
    }
}

/// `GET /admin`: Redis nodes and topics.
pub async fn overview(State(app): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.allow_scope(Scope::Admin)?;
    let nodes = app.queue.node_health(std::time::Duration::from_millis(1000)).await;
    let registry = app.queue.topics().await.unwrap_or_default();
    let counts = counts(&app).await;
    let schedules = schedules_section(&app, &caller).await;
    let mut names: Vec<&String> = registry
        .keys()
        .chain(counts.keys())
        .filter(|t| caller.sees(t))
        .collect();
    names.sort();
    names.dedup();
    Ok(html_page(page(
        "Overview",
        html! {
            h2 { "Redis" }
            p { (format!("{:?}", app.queue.redis().mode()).to_lowercase()) ", " (app.queue.partitions().count()) " partitions" }
            table {
                tr { th { "primary" } th { "state" } th { "PING" } }
                @for s in &nodes {
                    tr {
                        td { (s.name) }
                        @if s.up { td { "up" } } @else { td class="down" { "down" } }
                        td class="num" { @if let Some(l) = s.latency { (format!("{:.2} ms", l.as_secs_f64() * 1000.0)) } }
                    }
                }
            }
            h2 { "Topics" }
            table {
                tr { th { "topic" } th { "delivery" } th { "delayed" } th { "ready" } th { "reserved" } th { "dead" } th {} }
                @for name in &names {
                    @let config = registry.get(*name);
                    @let c = counts.get(*name);
                    @let n = |state: &str| c.and_then(|c| c.get(state)).copied().unwrap_or(0);
                    tr {
                        td { a href={ "/admin/topics/" (name) } { (name) } }
                        td {
                            @match config.and_then(|c| c.callback.as_ref()) {
                                Some(cb) => { "POST " (dq_core::topic::masked_url(&cb.url)) }
                                None => { "pull" }
                            }
                            @if config.is_some_and(|c| c.paused) { " (paused)" }
                        }
                        td class="num" { (n("delayed")) } td class="num" { (n("ready")) }
                        td class="num" { (n("reserved")) } td class="num" { (n("dead")) }
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
            (schedules)
        },
    )))
}

/// The overview's schedules: name, cron, zone, topic, next fire, last fired, paused, with pause and
/// resume buttons. Times are UTC.
async fn schedules_section(app: &AppState, caller: &Caller) -> Markup {
    let listed = match (app.queue.schedules().await, app.queue.redis_now_ms().await) {
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

/// `GET /admin/login`: a form for an admin token.
pub async fn login_form() -> Response {
    html_page(login_page(None))
}

fn login_page(error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html {
            head { meta charset="utf-8"; title { "Log in · dq" } link rel="stylesheet" href="/admin/static/admin.css"; }
            body {
                h1 { "dq admin" }
                @if let Some(e) = error { p class="down" { (e) } }
                form method="post" action="/admin/login" {
                    label { "Admin token " input type="password" name="token" autocomplete="current-password" autofocus; }
                    " " button type="submit" { "Log in" }
                }
            }
        }
    }
}

/// The login form's fields.
#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /admin/login`: with a token that has the `admin` scope, sets the session cookie (the token,
/// `HttpOnly; Secure; SameSite=Strict`, for the browser session) and goes to `/admin`; otherwise 401
/// with the form again.
pub async fn login(State(app): State<AppState>, axum::Form(form): axum::Form<LoginForm>) -> Response {
    let token = form.token.trim();
    // A cookie value cannot hold every byte; such a token could not be sent back anyway.
    let fits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic() && b != b';' && b != b',');
    if !fits || !is_admin(&app.auth, token) {
        metrics::counter!("dq_auth_refusals_total", "reason" => "bad_login").increment(1);
        return (
            StatusCode::UNAUTHORIZED,
            login_page(Some("That is not an admin token.")),
        )
            .into_response();
    }
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; Secure; SameSite=Strict");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/admin")).into_response()
}

/// `{"ids":[id]}`, the body of a button that acts on one dead job (escaped by maud as an attribute).
fn ids_body(id: &str) -> String {
    serde_json::json!({ "ids": [id] }).to_string()
}
