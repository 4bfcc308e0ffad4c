//! The web admin pages: the overview (the dashboard: activity charts, Redis's primaries and their memory;
//! topics with their counts; schedules), a topic's page (its registration, edited in place, and its jobs
//! by state, paged, with actions on the selected ones), and a job's page (its fields, run now,
//! reschedule, delete, requeue). Server-rendered (maud escapes everything it prints), with a few lines of
//! script that call the JSON API, so the pages can do nothing the API cannot. With tokens configured,
//! the pages need the `admin` scope: the login form takes an admin token and keeps it in an
//! `HttpOnly; Secure; SameSite=Strict` cookie, which the pages' calls to the API then carry.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};

mod dashboard;
mod job;
mod overview;
mod topic;

pub use job::{find, job};
pub use overview::overview;
pub use topic::topic;

use crate::AppState;
use crate::auth::{COOKIE, is_admin};

/// The pages' script, served as a file (`/admin/static/admin.js`) so that the Content-Security-Policy
/// can forbid inline script. A button names its API call in `data-` attributes (the file lists them):
/// the script calls the API (once, or once per selected job) and reloads the page, or shows the API's
/// message when it refuses.
pub const SCRIPT: &str = include_str!("static/admin.js");

/// The pages' style sheet (`/admin/static/admin.css`).
pub const STYLE: &str = include_str!("static/admin.css");

/// The pages allow only their own files: no inline script or style, no frames, forms to themselves.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// An admin page with its Content-Security-Policy.
pub(crate) fn html_page(markup: Markup) -> Response {
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

/// A page of the admin: the shell around `body`, with a note when the admin is read-only.
pub(crate) fn page(app: &AppState, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html {
            head {
                meta charset="utf-8"; title { (title) " · dq" }
                link rel="stylesheet" href="/admin/static/admin.css";
                script src="/admin/static/admin.js" defer {}
            }
            body {
                p {
                    a href="/admin" { "dq admin" }
                    @if read_only(app) { " " span class="readonly" { "read-only: nothing can be changed from these pages" } }
                }
                h1 { (title) }
                (body)
            }
        }
    }
}

/// Whether the pages show no controls (`server.admin_read_only`).
pub(crate) fn read_only(app: &AppState) -> bool {
    app.guard.admin_read_only
}

/// `/admin/topics/{topic}`, the link to a topic's page.
pub(crate) fn topic_href(topic: &str) -> String {
    format!("/admin/topics/{topic}")
}

/// `/admin/jobs/{id}`, the link to a job's page (ids may hold `:`, which a path segment keeps).
pub(crate) fn job_href(id: &str) -> String {
    format!("/admin/jobs/{id}")
}

/// A Unix ms time as UTC, for people.
pub(crate) fn utc(ms: i64) -> String {
    dq_core::schedule::rfc3339(ms)
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
