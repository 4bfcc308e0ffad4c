//! The web admin pages: a dashboard (activity charts, Redis nodes and their memory), topics with their counts, pause and resume, schedules, and dead letters with
//! requeue and delete. Server-rendered (maud escapes everything it prints), with a few lines of
//! script that call the JSON API, so the pages can do nothing the API cannot. With tokens configured,
//! the pages need the `admin` scope: the login form takes an admin token and keeps it in an
//! `HttpOnly; Secure; SameSite=Strict` cookie, which the pages' calls to the API then carry.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};

mod dashboard;
mod overview;
mod topic;

pub use overview::overview;
pub use topic::topic;

use crate::AppState;
use crate::auth::{COOKIE, is_admin};

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

/// A page of the admin: the shell around `body`.
pub(crate) fn page(title: &str, body: Markup) -> Markup {
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
