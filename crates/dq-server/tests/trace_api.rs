//! A push's W3C trace context through the API, on a real server and Redis: as headers or as fields (a
//! field wins; a batch's entries without their own take the headers'), shown by look-up and in the
//! reserve answer; every malformed one is a 400 that writes nothing.

mod common;

use common::{TestServer, assert_error};
use reqwest::StatusCode;
use serde_json::{Value, json};

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

/// POSTs `body` to `path` with `headers`; status and JSON answer.
async fn post(s: &TestServer, path: &str, headers: &[(&str, &str)], body: Value) -> (StatusCode, Value) {
    let mut req = s.http.post(s.url(path)).json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

async fn lookup(s: &TestServer, id: &Value) -> Value {
    let (status, job) = s.call("GET", &format!("/v1/jobs/{}", id.as_str().unwrap()), None).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    job
}

#[tokio::test]
async fn headers_and_fields_put_a_job_in_a_trace() {
    let s = TestServer::start().await;
    // Headers.
    let (status, pushed) = post(
        &s,
        "/v1/jobs",
        &[
            ("traceparent", TP),
            ("tracestate", "congo=t61rcWkgMzE"),
            ("tracestate", "rojo=1;2"),
        ],
        json!({"topic": "t", "body": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{pushed}");
    let job = lookup(&s, &pushed["id"]).await;
    assert_eq!(job["traceparent"], TP);
    assert_eq!(
        job["tracestate"], "congo=t61rcWkgMzE,rojo=1;2",
        "several headers are one list"
    );

    // A field wins over the headers.
    let (_, pushed) = post(
        &s,
        "/v1/jobs",
        &[("traceparent", TP), ("tracestate", "congo=x")],
        json!({"topic": "t", "body": 2, "traceparent": OTHER}),
    )
    .await;
    let job = lookup(&s, &pushed["id"]).await;
    assert_eq!((&job["traceparent"], &job["tracestate"]), (&json!(OTHER), &Value::Null));

    // No trace, a lone tracestate header (ignored, as W3C says), an empty traceparent: no fields at all.
    for headers in [vec![], vec![("tracestate", "congo=x")], vec![("traceparent", "")]] {
        let (status, pushed) = post(&s, "/v1/jobs", &headers, json!({"topic": "t", "body": 3})).await;
        assert_eq!(status, StatusCode::CREATED);
        let job = lookup(&s, &pushed["id"]).await;
        assert!(
            job.get("traceparent").is_none() && job.get("tracestate").is_none(),
            "{job}"
        );
    }

    // A batch: entries without fields of their own take the headers'.
    let (status, out) = post(
        &s,
        "/v1/jobs/batch",
        &[("traceparent", TP)],
        json!({"jobs": [{"topic": "b", "body": 1},
                        {"topic": "b", "body": 2, "traceparent": OTHER, "tracestate": "k=v"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let first = lookup(&s, &out["results"][0]["id"]).await;
    let second = lookup(&s, &out["results"][1]["id"]).await;
    assert_eq!(
        (&first["traceparent"], &first["tracestate"]),
        (&json!(TP), &Value::Null)
    );
    assert_eq!(
        (&second["traceparent"], &second["tracestate"]),
        (&json!(OTHER), &json!("k=v"))
    );

    // The reserve answer carries them.
    let mut jobs = s.reserve(&["b"], 2, 0).await;
    jobs.sort_by_key(|j| j["body"].as_i64());
    assert_eq!((&jobs[0]["traceparent"], jobs[0].get("tracestate")), (&json!(TP), None));
    assert_eq!(
        (&jobs[1]["traceparent"], &jobs[1]["tracestate"]),
        (&json!(OTHER), &json!("k=v"))
    );
}

/// A refused request: path, headers, body, and what the message says.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Value, &'a str);

#[tokio::test]
async fn a_malformed_trace_context_is_refused_and_writes_nothing() {
    let s = TestServer::start().await;
    s.push(json!({"id": "live", "topic": "t", "body": 1})).await;
    let push = json!({"topic": "t", "body": 1});
    let with = |extra: Value| {
        let mut p = push.clone();
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    let long_state = (0..30)
        .map(|i| format!("k{i:02}={}", "v".repeat(14)))
        .collect::<Vec<_>>()
        .join(",");
    let (upper, version_01) = (TP.to_uppercase(), TP.replace("00-", "01-"));
    let cases: Vec<Case> = vec![
        (
            "/v1/jobs",
            vec![("traceparent", "00-abc-def-01")],
            push.clone(),
            "traceparent",
        ),
        ("/v1/jobs", vec![("traceparent", &upper)], push.clone(), "traceparent"),
        (
            "/v1/jobs",
            vec![("traceparent", &version_01)],
            push.clone(),
            "traceparent",
        ),
        (
            "/v1/jobs",
            vec![("traceparent", TP), ("traceparent", TP)],
            push.clone(),
            "more than once",
        ),
        (
            "/v1/jobs",
            vec![("traceparent", TP), ("tracestate", "Bad=1")],
            push.clone(),
            "tracestate",
        ),
        (
            "/v1/jobs",
            vec![("traceparent", TP), ("tracestate", &long_state)],
            push.clone(),
            "512",
        ),
        (
            "/v1/jobs",
            vec![("tracestate", "no-equals")],
            push.clone(),
            "tracestate",
        ),
        // A malformed header is refused even when a field would win.
        (
            "/v1/jobs",
            vec![("traceparent", "nope")],
            with(json!({"traceparent": TP})),
            "traceparent",
        ),
        (
            "/v1/jobs",
            vec![],
            with(json!({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"})),
            "traceparent",
        ),
        (
            "/v1/jobs",
            vec![],
            with(json!({"traceparent": TP, "tracestate": "k=1,k=2"})),
            "twice",
        ),
        (
            "/v1/jobs",
            vec![],
            with(json!({"tracestate": "k=v"})),
            "needs a `traceparent`",
        ),
        ("/v1/jobs", vec![], with(json!({"traceparent": 7})), "traceparent"),
        (
            "/v1/jobs/batch",
            vec![("traceparent", TP)],
            json!({"jobs": [push.clone(), with(json!({"traceparent": "00-1-2-3"}))]}),
            "jobs[1]",
        ),
        (
            "/v1/jobs/batch",
            vec![("traceparent", "x")],
            json!({"jobs": [push.clone()]}),
            "traceparent",
        ),
    ];
    let before = s.snapshot();
    for (path, headers, body, says) in cases {
        let (status, out) = post(&s, path, &headers, body.clone()).await;
        assert_error(status, &out, 400, "invalid_argument");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{path} {headers:?} {body}: {message}");
        assert_eq!(s.snapshot(), before, "{path} {headers:?} {body} wrote something");
    }
}
