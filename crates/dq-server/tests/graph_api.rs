//! Jobs that start jobs over HTTP: a fan-out topic's push answers its children; an ack's `push` is
//! stored with it and answered; look-ups show a job's parent and children; every bad request is a 4xx
//! JSON error with nothing written.

mod common;

use common::{TestServer, assert_error, send, server};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Reserves the one ready job of `topic`: its id and receipt.
async fn reserve_one(s: &TestServer, topic: &str) -> (String, String) {
    let jobs = s.reserve(&[topic], 1, 5000).await;
    let job = jobs.first().unwrap_or_else(|| panic!("no job of {topic}"));
    (
        job["id"].as_str().unwrap().into(),
        job["receipt"].as_str().unwrap().into(),
    )
}

#[tokio::test]
async fn a_fan_out_push_and_an_ack_that_pushes() {
    let s = TestServer::start().await;
    let (status, out) = s
        .call(
            "PUT",
            "/v1/topics/order.paid",
            Some(json!({"fanout": ["mail", "ledger"]})),
        )
        .await;
    assert!(status.is_success(), "{out}");
    let (status, topic) = s.call("GET", "/v1/topics/order.paid", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(topic["config"]["fanout"], json!(["mail", "ledger"]), "{topic}");

    let out = s
        .push(json!({"topic": "order.paid", "id": "o-1", "body": {"order": 1}}))
        .await;
    assert_eq!(out["state"], "done");
    assert_eq!(
        out["children"],
        json!([{"id": "o-1~mail", "topic": "mail", "state": "ready"},
               {"id": "o-1~ledger", "topic": "ledger", "state": "ready"}])
    );
    // The same id again: 409, and no second child.
    let (status, body) = s
        .call(
            "POST",
            "/v1/jobs",
            Some(json!({"topic": "order.paid", "id": "o-1", "body": 2})),
        )
        .await;
    assert_error(status, &body, 409, "conflict");
    // Push many carries fan-outs too.
    let (status, out) = s
        .call(
            "POST",
            "/v1/jobs/batch",
            Some(json!({"jobs": [{"topic": "order.paid", "body": 3}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["results"][0]["children"].as_array().unwrap().len(), 2);

    let (id, receipt) = reserve_one(&s, "mail").await;
    assert!(id.ends_with("~mail"));
    let (status, out) = s
        .call(
            "POST",
            &format!("/v1/jobs/{id}/ack"),
            Some(json!({"receipt": receipt, "push": [
                {"topic": "receipt", "body": {"n": 1}, "delay_ms": 600_000},
                {"topic": "order.paid", "body": {"n": 2}},
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let pushed: Vec<&str> = out["pushed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    let expected = [
        format!("{id}~0"),
        format!("{id}~1"),
        format!("{id}~1~mail"),
        format!("{id}~1~ledger"),
    ];
    assert_eq!(pushed, expected);

    let (status, job) = s.call("GET", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["state"], "done");
    // (Either push's child: o-1's, or the batch's.)
    assert_eq!(job["parent"], id.trim_end_matches("~mail"));
    assert_eq!(
        job["children"],
        json!([{"id": format!("{id}~0"), "topic": "receipt", "state": "delayed"},
               {"id": format!("{id}~1"), "topic": "order.paid", "state": "done"}])
    );
    let (status, child) = s.call("GET", &format!("/v1/jobs/{id}~1~ledger"), None).await;
    assert_eq!(status, StatusCode::OK, "{child}");
    assert_eq!(child["parent"], format!("{id}~1"));
    // An ack without `push` answers 204 as before.
    let (id, receipt) = reserve_one(&s, "ledger").await;
    let (status, _) = s
        .call("POST", &format!("/v1/jobs/{id}/ack"), Some(json!({"receipt": receipt})))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn bad_graph_requests_are_refused_and_write_nothing() {
    let s = TestServer::start().await;
    let (status, _) = s
        .call("PUT", "/v1/topics/fan", Some(json!({"fanout": ["a", "b"]})))
        .await;
    assert!(status.is_success());
    s.push(json!({"topic": "w", "id": "w-1", "body": 1})).await;
    let (id, receipt) = reserve_one(&s, "w").await;
    let many: Vec<Value> = (0..101).map(|_| json!({"topic": "x", "body": 1})).collect();
    let topic = |config: Value| ("PUT", "/v1/topics/t".to_string(), config);
    let ack = |push: Value| {
        (
            "POST",
            format!("/v1/jobs/{id}/ack"),
            json!({"receipt": receipt, "push": push}),
        )
    };
    let cases = [
        topic(json!({"fanout": ["a", "a"]})),
        topic(json!({"fanout": ["bad name"]})),
        topic(json!({"fanout": (0..33).map(|i| format!("t{i}")).collect::<Vec<_>>()})),
        topic(json!({"fanout": ["a"], "callback": {"url": "http://hooks.example/"}})),
        topic(json!({"callback": {"url": "http://hooks.example/", "allow_push": ["a["]}})),
        ack(json!([{"topic": "x", "body": 1, "id": "mine"}])),
        ack(json!([{"topic": "x", "body": 1, "flow_key": "k"}])),
        ack(json!([{"topic": "x", "body": 1, "coalesce_key": "k", "coalesce": {"mode": "last", "window_ms": 5}}])),
        ack(json!([{"topic": "x", "body": 1, "delay_ms": -5}])),
        ack(json!([["x", 1]])),
        ack(json!(many)),
        ack(json!({"topic": "x"})),
        (
            "POST",
            "/v1/jobs".into(),
            json!({"topic": "fan", "body": 1, "flow_key": "k"}),
        ),
        ("POST", "/v1/jobs".into(), json!({"topic": "x", "id": "a~0", "body": 1})),
    ];
    let before = s.snapshot();
    for (method, path, body) in cases {
        let (status, out) = s.call(method, &path, Some(body.clone())).await;
        assert_error(status, &out, 400, "invalid_argument");
        assert_eq!(s.snapshot(), before, "{method} {path} {body} wrote something");
    }
    for path in [
        "/v1/jobs/a~~b",
        "/v1/jobs/~a",
        &format!("/v1/jobs/{}", "a~b".repeat(200)),
    ] {
        let (status, out) = s.call("GET", path, None).await;
        assert_error(status, &out, 400, "invalid_argument");
    }
    // The job is still reserved: the refused acks did not ack it.
    let (_, job) = s.call("GET", "/v1/jobs/w-1", None).await;
    assert_eq!(job["state"], "reserved");
}

#[tokio::test]
async fn a_pull_acks_pushes_are_its_tokens_pushes() {
    let s = server().await;
    let token = |name: &str| format!("{name}-secret");
    let root = Some(common::ROOT);
    let (status, _) = send(
        &s,
        root,
        "POST",
        "/v1/jobs",
        Some(&json!({"topic": "orders.a", "body": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    // `orders` may consume orders.* and produce to orders.* only.
    let orders = token("orders");
    let (status, out) = send(
        &s,
        Some(&orders),
        "POST",
        "/v1/reserve",
        Some(&json!({"topics": ["orders.a"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let job = &out["jobs"][0];
    let path = format!("/v1/jobs/{}/ack", job["id"].as_str().unwrap());
    let before = s.snapshot();
    let refused =
        json!({"receipt": job["receipt"], "push": [{"topic": "orders.b", "body": 1}, {"topic": "billing", "body": 2}]});
    let (status, out) = send(&s, Some(&orders), "POST", &path, Some(&refused)).await;
    assert_error(status, &out, 403, "forbidden");
    assert!(out["error"]["message"].as_str().unwrap().contains("push[1]"), "{out}");
    assert_eq!(s.snapshot(), before, "a refused ack writes nothing");
    let allowed = json!({"receipt": job["receipt"], "push": [{"topic": "orders.b", "body": 1}]});
    let (status, out) = send(&s, Some(&orders), "POST", &path, Some(&allowed)).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["pushed"][0]["topic"], "orders.b");
}
