//! The router, from two lists: [`api`], every route of the API, each registered through utoipa-axum's
//! `routes!` from a handler that carries its `#[utoipa::path]` (so the router and the OpenAPI document
//! are one list and cannot differ), and [`pages`], the routes for people (the admin pages, Swagger UI),
//! which the document leaves out. No route is registered anywhere else: `clippy.toml` forbids
//! `Router::route` in this crate but here, and `tests/openapi.rs` checks the list of pages.

use axum::Router;
use axum::routing::{MethodRouter, get};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AppState, admin, browse, error, flows, jobs, probes, reserve, schedules, spec, topics};

/// Every route of the API, with its description: the one list the OpenAPI document is made of.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(spec::base())
        .routes(routes!(jobs::push))
        .routes(routes!(jobs::push_many))
        .routes(routes!(reserve::ack_many))
        .routes(routes!(jobs::lookup, jobs::cancel, jobs::reschedule))
        .routes(routes!(jobs::attempts))
        .routes(routes!(reserve::ack))
        .routes(routes!(reserve::nack))
        .routes(routes!(reserve::touch))
        .routes(routes!(reserve::reserve))
        .routes(routes!(topics::list))
        .routes(routes!(topics::get, topics::put, topics::delete))
        .routes(routes!(topics::pause))
        .routes(routes!(topics::resume))
        .routes(routes!(browse::jobs))
        .routes(routes!(flows::flows))
        .routes(routes!(topics::dead, topics::delete_dead))
        .routes(routes!(topics::requeue))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::get, schedules::put, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(probes::stats))
        .routes(routes!(probes::healthz))
        .routes(routes!(probes::readyz))
        .routes(routes!(probes::metrics))
        .routes(routes!(spec::openapi_json))
}

/// The routes for people, left out of the OpenAPI document: the admin pages (HTML, a form login) and
/// Swagger UI at `/docs` (its own files).
pub fn pages() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/admin", get(admin::overview)),
        ("/admin/login", get(admin::login_form).post(admin::login)),
        ("/admin/static/admin.js", get(admin::script)),
        ("/admin/static/admin.css", get(admin::style)),
        ("/admin/topics/{topic}", get(admin::topic)),
        ("/admin/jobs", get(admin::find)),
        ("/admin/jobs/{id}", get(admin::job)),
        ("/docs", get(spec::docs_redirect)),
        ("/docs/", spec::docs_index()),
        ("/docs/{*file}", spec::docs_files()),
    ]
}

/// The whole router: [`api`] and [`pages`], JSON 404 and 405 answers (the guard goes around it: see
/// [`crate::app`]).
pub fn router(state: AppState) -> Router {
    let (mut router, _) = api().split_for_parts();
    for (path, method_router) in pages() {
        #[allow(clippy::disallowed_methods)] // the one place a route is registered outside `api()`
        {
            router = router.route(path, method_router);
        }
    }
    router
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::no_method)
        .with_state(state)
}
