//! The OpenAPI document: served without a token, well formed, and the same list of routes the router
//! serves; Swagger UI at `/docs` from the binary's own files.

mod common;

use std::collections::BTreeSet;

use common::TestServer;
use serde_json::{Value, json};

const TOKEN: &str = "openapi-test-token";

async fn server_with_token() -> TestServer {
    let redis = vec![dq_harness::RedisServer::start()];
    let mut settings = common::settings(&redis);
    settings.auth.admin_token = Some(TOKEN.into());
    TestServer::with_settings(redis, settings).await
}

async fn document(s: &TestServer) -> Value {
    let resp = s.http.get(s.url("/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "served without a token");
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert_eq!(content_type, "application/json");
    resp.json().await.unwrap()
}

/// Every `(METHOD, path)` the document describes.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.push((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

/// Every `$ref` in `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r);
            }
            m.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_served_without_a_token_and_is_well_formed() {
    let s = server_with_token().await;
    let doc = document(&s).await;
    assert_eq!(doc["openapi"], "3.1.0", "{}", doc["openapi"]);
    assert_eq!(doc["info"]["title"], "dq");
    let bearer = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (&bearer["type"], &bearer["scheme"]),
        (&json!("http"), &json!("bearer")),
        "{bearer}"
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    let (status, _) = s.call("GET", "/v1/stats", None).await;
    assert_eq!(status, 401, "the API itself still needs the token");

    let mut all_refs = Vec::new();
    refs(&doc, &mut all_refs);
    assert!(!all_refs.is_empty());
    for r in all_refs {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r}"));
        assert!(doc["components"]["schemas"][name].is_object(), "{r} resolves");
    }

    for route in ["/v1/jobs/ack", "/v1/jobs/batch"] {
        let methods: Vec<&String> = doc["paths"][route].as_object().unwrap().keys().collect();
        assert_eq!(methods, ["post"], "{route} serves only its own verb");
    }
    let id_pattern = doc["components"]["schemas"]["PushRequest"]["properties"]["id"]["pattern"]
        .as_str()
        .unwrap();
    assert!(
        id_pattern.contains("ack|batch"),
        "the push id's pattern refuses them: {id_pattern}"
    );

    let mut ids = BTreeSet::new();
    for (method, path) in operations(&doc) {
        let op = &doc["paths"][&path][method.to_lowercase()];
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has an operationId"));
        assert!(ids.insert(id.to_string()), "{id} is unique");
        // `ack` and `batch` are routes, never job ids: no verb on a job is described twice.
        assert!(
            !(id.ends_with("_ack") || id.ends_with("_batch")),
            "{method} {path}: `{id}` is a job verb described again for a route"
        );
        let answers = op["responses"].as_object().unwrap();
        assert!(
            answers.keys().any(|s| s.starts_with('2')),
            "{method} {path}: a success answer"
        );
        let public = ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str());
        assert_eq!(op["security"] == json!([]), public, "{method} {path}: security");
        if !public {
            assert!(answers.contains_key("401"), "{method} {path}: 401");
        }
        if path.starts_with("/v1/") {
            for status in ["403", "500", "503"] {
                assert!(answers.contains_key(status), "{method} {path}: {status}");
            }
        }
        for (status, answer) in answers {
            if status.starts_with('4') || status.starts_with('5') {
                let schema = &answer["content"]["application/json"]["schema"];
                assert!(schema.is_object(), "{method} {path} {status}: a JSON error");
            }
        }
    }
}

/// Substitutes each `{param}` of a documented path with a valid value.
fn concrete(path: &str) -> String {
    path.replace("{id}", "openapi-probe")
        .replace("{topic}", "openapi.probe")
        .replace("{name}", "openapi-probe")
}

#[tokio::test]
async fn the_router_serves_every_documented_route_and_the_document_every_api_route() {
    let s = server_with_token().await;
    let doc = document(&s).await;
    let ops = operations(&doc);
    let paths: BTreeSet<&str> = ops.iter().map(|(_, p)| p.as_str()).collect();
    // The API as docs/api.md lists it: a route added to the router without a description is not in
    // `routes::api()`, and a route left out of the document fails here.
    for want in [
        "/v1/jobs",
        "/v1/jobs/batch",
        "/v1/jobs/ack",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/ack",
        "/v1/jobs/{id}/nack",
        "/v1/jobs/{id}/touch",
        "/v1/jobs/{id}/attempts",
        "/v1/reserve",
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/pause",
        "/v1/topics/{topic}/resume",
        "/v1/topics/{topic}/dead",
        "/v1/topics/{topic}/dead/requeue",
        "/v1/topics/{topic}/jobs",
        "/v1/topics/{topic}/flows",
        "/v1/schedules",
        "/v1/schedules/{name}",
        "/v1/schedules/{name}/pause",
        "/v1/schedules/{name}/resume",
        "/v1/stats",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains(want), "{want} is documented");
    }
    // 33: the six look up, cancel and reschedule of jobs called `ack` or `batch` are gone (no push
    // may give those ids).
    assert_eq!(ops.len(), 33, "{ops:?}");

    for (method, path) in &ops {
        let mut req = s
            .http
            .request(method.parse().unwrap(), s.url(&concrete(path)))
            .bearer_auth(TOKEN);
        if doc["paths"][path][method.to_lowercase()]["requestBody"].is_object() {
            // An empty object: each route refuses it (or takes it) itself, past the router.
            req = req.json(&json!({}));
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert!(status != 405, "{method} {path}: {status} {body}");
        assert!(!body.contains("no such route"), "{method} {path}: {status} {body}");
    }

    let pages: Vec<&str> = dq_server::routes::pages().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        pages,
        [
            "/admin",
            "/admin/login",
            "/admin/static/admin.js",
            "/admin/static/admin.css",
            "/admin/topics/{topic}",
            "/admin/jobs",
            "/admin/jobs/{id}",
            "/docs",
            "/docs/",
            "/docs/{*file}",
        ],
        "the routes left out of the document are pages for people; an API route belongs in routes::api()"
    );
    for page in pages {
        assert!(!paths.contains(page), "{page} is not in the document");
    }
}

#[tokio::test]
async fn every_integer_a_request_takes_is_bounded() {
    let doc = dq_server::spec::document(&dq_core::config::Limits::default(), 1_700_000_000_000);
    fn walk(name: &str, v: &Value, unbounded: &mut Vec<String>) {
        let Some(m) = v.as_object() else { return };
        let is_int = m.get("type") == Some(&json!("integer"))
            || m.get("type")
                .and_then(Value::as_array)
                .is_some_and(|t| t.contains(&json!("integer")));
        // `run_at`'s upper bound moves with the clock: its description states it.
        let moving = name.ends_with(".run_at");
        if is_int && !(m.contains_key("minimum") && (m.contains_key("maximum") || moving)) {
            unbounded.push(name.to_string());
        }
        for (k, v) in m {
            walk(&format!("{name}.{k}"), v, unbounded);
            if let Some(a) = v.as_array() {
                a.iter().for_each(|v| walk(&format!("{name}.{k}[]"), v, unbounded));
            }
        }
    }
    let mut unbounded = Vec::new();
    for name in [
        "PushRequest",
        "Coalesce",
        "BatchRequest",
        "RescheduleRequest",
        "ReserveRequest",
        "AckRequest",
        "AckManyRequest",
        "AckEntry",
        "NackRequest",
        "TouchRequest",
        "DeadIds",
        "TopicConfig",
        "Callback",
        "Retry",
        "TopicDefaults",
        "ScheduleConfig",
    ] {
        let schema = &doc["components"]["schemas"][name];
        assert!(schema.is_object(), "{name}");
        walk(name, schema, &mut unbounded);
    }
    // What the server checks by hand is in the document: no request integer is left without its limits.
    assert!(
        unbounded.is_empty(),
        "integers without minimum and maximum: {unbounded:?}"
    );
    let push = &doc["components"]["schemas"]["PushRequest"];
    assert_eq!(push["properties"]["ttr_ms"]["minimum"], 1000);
    assert_eq!(push["properties"]["topic"]["pattern"], dq_server::spec::TOPIC);
}

#[tokio::test]
async fn the_trace_context_is_described_as_headers_and_fields() {
    let s = server_with_token().await;
    let doc = document(&s).await;
    let pattern = dq_core::trace::TRACEPARENT_PATTERN;
    for path in ["/v1/jobs", "/v1/jobs/batch"] {
        let params = doc["paths"][path]["post"]["parameters"].as_array().unwrap();
        let header = |name: &str| {
            params
                .iter()
                .find(|p| p["name"] == name && p["in"] == "header")
                .unwrap_or_else(|| panic!("{path} has no {name} header"))
        };
        assert_eq!(
            header("traceparent")["schema"]["pattern"],
            format!("^$|{pattern}"),
            "an empty one is none"
        );
        assert_eq!(header("tracestate")["schema"]["format"], "dq-tracestate");
        assert_eq!(header("tracestate")["schema"]["maxLength"], 512);
    }
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["PushRequest"]["properties"]["traceparent"]["pattern"], pattern);
    assert_eq!(schemas["PushRequest"]["properties"]["tracestate"]["maxLength"], 512);
    let rules = schemas["PushRequest"]["allOf"].to_string();
    assert!(rules.contains("`tracestate` needs `traceparent`"), "{rules}");
    for answer in ["Job", "Reservation"] {
        for field in ["traceparent", "tracestate"] {
            assert!(schemas[answer]["properties"][field].is_object(), "{answer}.{field}");
        }
    }
}

#[tokio::test]
async fn swagger_ui_is_served_from_the_binary_without_a_token() {
    let s = server_with_token().await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = no_redirects.get(s.url("/docs")).send().await.unwrap();
    assert_eq!(resp.status(), 308);
    assert_eq!(resp.headers()["location"], "/docs/");

    let page = s.text("/docs/").await;
    assert!(page.contains("swagger-ui"), "{page}");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "nothing from elsewhere: {page}"
    );
    // Every file the page loads is served here.
    let linked: Vec<&str> = page
        .split(['"', '\''])
        .filter(|s| s.ends_with(".js") || s.ends_with(".css") || s.ends_with(".png"))
        .collect();
    assert!(linked.len() >= 3, "{linked:?}");
    for file in linked {
        let file = file.trim_start_matches("./");
        let resp = s.http.get(s.url(&format!("/docs/{file}"))).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{file}");
    }
    let init = s.text("/docs/swagger-initializer.js").await;
    assert!(init.contains("/openapi.json"), "{init}");
    assert!(!init.contains("https://"), "no validator badge, no other site: {init}");
    let (status, _) = s.call("GET", "/docs/no-such-file.js", None).await;
    assert_eq!(status, 404);
}
