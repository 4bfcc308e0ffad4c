//! The OpenAPI document of the API, served at `GET /openapi.json`, and Swagger UI over it at `/docs`.
//!
//! **Why utoipa (with utoipa-axum), not aide.** Both describe an axum API from the code. utoipa puts the
//! description on the handler (`#[utoipa::path]`: verb, path, parameters, every answer with its status)
//! and on the types (`#[derive(ToSchema)]`, which reads serde's attributes), and leaves the handlers'
//! signatures and the router's shape as they are: our own extractors (`JsonBody`, `Caller`), the guard
//! layer and the JSON fallbacks stay. utoipa-axum's `routes!` then registers each handler at the path
//! its description names, so the router and the document are one list ([`crate::routes::api`]). aide
//! instead wants every route registered through its own `ApiRouter` with `*_with` closures and every
//! extractor and answer type implementing its traits (`OperationInput`, `OperationOutput`), which our
//! custom extractors would each need by hand; and aide derives schemas through schemars, a second
//! derive on every dq-core type. utoipa is also the more used of the two, and has Swagger UI with its
//! assets inside a registry crate (`utoipa-swagger-ui`'s `vendored` feature): the build downloads
//! nothing and the page loads nothing from elsewhere.
//!
//! **What the types cannot say** (a body is any JSON, `delay_ms` xor `run_at`, limits from the settings,
//! name patterns) [`rules`] writes into the document when the server starts, from the same settings
//! the handlers check against; so the document describes this server as configured.
//!
//! **No token.** The document and `/docs` describe the API, not data, so they are served without a
//! token, like `/healthz` (the host check still applies). Every route that needs one says so
//! (`bearer`).

mod rules;

pub use rules::{ID, TOPIC};

use std::sync::{Arc, LazyLock};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get};
use dq_core::config::Limits;
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa_swagger_ui::Config;

use crate::AppState;
use crate::error::{ErrorBody, ErrorCode};

/// What the document says besides the routes: title, tags, the error shape, the bearer scheme.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "dq",
        description = "dq's HTTP API v1: a distributed delay queue on Redis. Times are Unix ms (`run_at`, \
            `deadline`, `created_at` on Redis's clock); durations are ms. Request bodies are JSON objects sent \
            with `Content-Type: application/json`, and refuse unknown fields; an integer is written without a fraction \
            or exponent (`1000`, not `1000.0`). Every failure answers \
            `{\"error\": {\"code\", \"message\"}}`; nothing is written unless the whole request is valid. \
            Limits shown here (`minimum`, `maximum`, `maxItems`) are this server's settings (`limits.*`). \
            See docs/api.md for the prose.",
        license(name = "MIT"),
    ),
    tags(
        (name = "jobs", description = "Producers: push, push many, look up, cancel, reschedule (`produce`; look up: `read`)."),
        (name = "consume", description = "Pull consumers: reserve, ack, ack many, nack, touch (`consume`)."),
        (name = "topics", description = "The topic registry, pause and resume (`admin`; look up and list: `read`)."),
        (name = "dead", description = "Dead letters (`admin`; list: `read`)."),
        (name = "schedules", description = "Schedules: a cron pattern that pushes one job per occurrence (`admin`; look up and list: `read`)."),
        (name = "operations", description = "Stats, probes, metrics and this document."),
    ),
    components(schemas(ErrorBody, ErrorCode)),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
struct ApiDoc;

/// The `bearer` security scheme: `Authorization: Bearer <token>` (see `auth`).
struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "An API token (`auth.admin_token`, or one of `auth.tokens` with its scopes: `produce`, `consume`, \
             `read`, `admin`). Without any token configured the API is open (and listens on loopback only)."
                .into(),
        );
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The document before the routes are added ([`crate::routes::api`] adds them).
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The whole document for a server with `limits`, whose clock reads `now_ms` when it starts (the latest
/// `run_at` it takes is `now + limits.max_delay_ms`; a bound read at start is one it keeps).
pub fn document(limits: &Limits, now_ms: i64) -> serde_json::Value {
    let (_, openapi) = crate::routes::api().split_for_parts();
    let mut doc = serde_json::to_value(&openapi).expect("the OpenAPI document serializes");
    rules::apply(&mut doc, limits, now_ms);
    doc
}

/// The document as `GET /openapi.json` serves it, for `limits`.
pub fn served(limits: &Limits) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&document(limits, dq_core::clock::unix_ms())).expect("the OpenAPI document serializes"),
    )
}

/// `GET /openapi.json`: the document, as made at start or at the last SIGHUP.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", operation_id = "openapi",
    summary = "This document (OpenAPI 3.1); no token needed",
    responses((status = 200, description = "The OpenAPI document of this server.", body = Object)))]
pub async fn openapi_json(State(app): State<AppState>) -> Response {
    let doc = app.openapi.read().unwrap_or_else(|e| e.into_inner()).clone();
    ([(header::CONTENT_TYPE, "application/json")], doc).into_response()
}

/// Swagger UI's settings: the document at `/openapi.json`, and no validator badge (Swagger UI would
/// fetch it from validator.swagger.io: the page loads nothing from elsewhere).
static SWAGGER: LazyLock<Arc<Config<'static>>> = LazyLock::new(|| {
    Arc::new(
        Config::new(["/openapi.json"])
            .validator_url("none")
            .persist_authorization(true)
            .try_it_out_enabled(true),
    )
});

/// `GET /docs`: to `/docs/`, where the page's relative links resolve.
pub async fn docs_redirect() -> Redirect {
    Redirect::permanent("/docs/")
}

/// `GET /docs/`: Swagger UI's page.
pub fn docs_index() -> MethodRouter<AppState> {
    get(|| async { swagger_file("") })
}

/// `GET /docs/{file}`: Swagger UI's files, from the copy built into the binary.
pub fn docs_files() -> MethodRouter<AppState> {
    get(|Path(file): Path<String>| async move { swagger_file(&file) })
}

fn swagger_file(file: &str) -> Response {
    match utoipa_swagger_ui::serve(file, SWAGGER.clone()) {
        Ok(Some(f)) => ([(header::CONTENT_TYPE, f.content_type)], f.bytes.into_owned()).into_response(),
        Ok(None) => crate::error::ApiError {
            status: StatusCode::NOT_FOUND,
            code: crate::error::ErrorCode::NotFound,
            message: "no such route".into(),
            id: None,
        }
        .into_response(),
        Err(e) => {
            tracing::warn!(cause = %e, file, "cannot serve a Swagger UI file");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
