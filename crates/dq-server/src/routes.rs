//! The router, from two lists: [`api`], every route of the API, each registered through utoipa-axum's
//! `routes!` from a handler that carries its `#[utoipa::path]` (so the router and the OpenAPI document
//! are one list and cannot differ), and [`pages`], the routes for people (the admin pages, Swagger UI),
//! which the document leaves out. No route is registered anywhere else: `clippy.toml` forbids
//! `Router::route` in this crate but here, and `tests/openapi.rs` checks the list of pages.

use axum::Router;
use axum::extract::Path;
use axum::routing::{MethodRouter, get};
use utoipa::openapi::path::Paths;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::{AppState, admin, browse, error, jobs, probes, reserve, schedules, spec, topics};

/// Every route of the API, with its description: the one list the OpenAPI document is made of.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(spec::base())
        .routes(routes!(jobs::push))
        .routes(routes!(jobs::push_many))
        .routes(also_the_job("batch"))
        .routes(routes!(reserve::ack_many))
        .routes(also_the_job("ack"))
        .routes(routes!(jobs::lookup, jobs::cancel, jobs::reschedule))
        .routes(routes!(reserve::ack))
        .routes(routes!(reserve::nack))
        .routes(routes!(reserve::touch))
        .routes(routes!(reserve::reserve))
        .routes(routes!(topics::list))
        .routes(routes!(topics::get, topics::put, topics::delete))
        .routes(routes!(topics::pause))
        .routes(routes!(topics::resume))
        .routes(routes!(browse::jobs))
        .routes(routes!(topics::dead, topics::purge))
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

/// `/v1/jobs/batch` and `/v1/jobs/ack` are push many and ack many (POST), and `batch` and `ack` are also
/// valid job ids: the static path wins over `/v1/jobs/{id}`, so it serves that job's look up, cancel and
/// reschedule too. Described as those of `/v1/jobs/{id}`, without the path parameter.
fn also_the_job(id: &'static str) -> UtoipaMethodRouter<AppState> {
    let (schemas, by_id, _) = routes!(jobs::lookup, jobs::cancel, jobs::reschedule);
    let mut paths = Paths::new();
    for (_, mut item) in by_id.paths {
        for op in [&mut item.get, &mut item.delete, &mut item.patch].into_iter().flatten() {
            op.parameters = None;
            op.operation_id = op.operation_id.take().map(|o| format!("{o}_{id}"));
            op.summary = op.summary.take().map(|s| format!("{s} whose id is `{id}`"));
        }
        paths.paths.insert(format!("/v1/jobs/{id}"), item);
    }
    let method_router = MethodRouter::new()
        .get(move |st, c| jobs::lookup(st, c, Path(id.into())))
        .delete(move |st, c| jobs::cancel(st, c, Path(id.into())))
        .patch(move |st, c, body| jobs::reschedule(st, c, Path(id.into()), body));
    (schemas, paths, method_router)
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
