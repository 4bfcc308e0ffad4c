//! Every malformed request gets the JSON error and writes nothing (invariant 5).

mod common;

use common::{TestServer, assert_error};
use serde_json::json;

#[tokio::test]
async fn bad_requests_get_a_clear_error_and_write_nothing() {
    let s = TestServer::start().await;
    // A live, reserved job to aim the per-job verbs at.
    s.push(json!({"id": "live", "topic": "t", "body": 1})).await;
    let receipt = s.reserve(&["t"], 1, 0).await[0]["receipt"]
        .as_str()
        .unwrap()
        .to_string();
    let big_body = format!(r#"{{"topic":"t","body":"{}"}}"#, "x".repeat(70 * 1024));
    let huge_request = format!(
        r#"{{"jobs":[{{"topic":"t","body":"{}"}}]}}"#,
        "y".repeat(9 * 1024 * 1024)
    );
    let too_many = json!({"jobs": (0..1001).map(|i| json!({"topic": "t", "body": i})).collect::<Vec<_>>()}).to_string();
    let one_bad_in_batch =
        json!({"jobs": [{"topic": "t", "body": 1}, {"topic": "t", "body": 2, "delay_ms": -1}]}).to_string();
    let one_wrong_type_in_batch = json!({"jobs": [{"topic": "t", "body": 1}, {"topic": 7, "body": 2}]}).to_string();
    let big_in_batch = format!(
        r#"{{"jobs":[{{"topic":"t","body":1}},{{"topic":"t","body":"{}"}}]}}"#,
        "z".repeat(70 * 1024)
    );
    let long_error = json!({"receipt": receipt, "error": "e".repeat(5000)}).to_string();
    // An id of the producer's that is not in its flow key's place (the server's 256 partitions).
    let partitions = dq_core::store::partition::Partitions::new(256);
    let elsewhere = (0..)
        .map(|i| format!("order-{i}"))
        .find(|id| partitions.of_id(id) != partitions.of_key("t", "k"))
        .unwrap();
    // A merge item within the body limit (64 KiB) but past it once framed as `{"items":[…]}`.
    let big_item = json!({"topic": "t", "body": "i".repeat(64 * 1024 - 8), "coalesce_key": "k",
                          "coalesce": {"mode": "merge", "window_ms": 1000}})
    .to_string();
    let coalesced = |extra: serde_json::Value| {
        let mut push =
            json!({"topic": "t", "body": 1, "coalesce_key": "k", "coalesce": {"mode": "last", "window_ms": 1000}});
        for (k, v) in extra.as_object().unwrap() {
            push[k] = v.clone();
        }
        push.to_string()
    };
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let deep_body = format!(r#"{{"topic":"t","body":{deep}}}"#);
    let deep_in_batch = format!(r#"{{"jobs":[{{"topic":"t","body":1}},{{"topic":"t","body":{deep}}}]}}"#);

    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        // push
        ("POST", "/v1/jobs", "{not json".into(), 400, "invalid_argument"),
        ("POST", "/v1/jobs", "".into(), 400, "invalid_argument"),
        ("POST", "/v1/jobs", "[]".into(), 400, "invalid_argument"),
        // Nested past serde_json's limit of 128, inside a body kept as raw text.
        ("POST", "/v1/jobs", deep_body, 400, "invalid_argument"),
        ("POST", "/v1/jobs/batch", deep_in_batch, 400, "invalid_argument"),
        ("POST", "/v1/jobs", r#"{"body":1}"#.into(), 400, "invalid_argument"),
        ("POST", "/v1/jobs", r#"{"topic":"t"}"#.into(), 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":5,"body":1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"","body":1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"a b","body":1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            format!(r#"{{"topic":"{}","body":1}}"#, "t".repeat(129)),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"id":""}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"id":"a/b"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"id":7}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"delay_ms":-1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"delay_ms":"10"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"delay_ms":1.5}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"delay_ms":99999999999999}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"run_at":99999999999999}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"run_at":-1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"delay_ms":1,"run_at":1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"ttr_ms":0}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"ttr_ms":999999999999}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"max_attempts":-1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"max_attempts":5000}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dedup_key":"k"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dedup_ms":1000}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"id":"i","dedup_key":"k","dedup_ms":1000}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dedup_key":"a b","dedup_ms":1000}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"max_age_ms":0}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"backoff_ms":[]}"#.into(),
            400,
            "invalid_argument",
        ),
        // coalescing
        ("POST", "/v1/jobs", coalesced(json!({"coalesce": {"mode": "sometimes", "window_ms": 1000}})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"coalesce": {"mode": "last", "window_ms": 0}})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"coalesce": {"mode": "last"}})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"coalesce": {"mode": "last", "window_ms": 5, "extra": 1}})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"coalesce_key": "a b"})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"coalesce_key": null})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"delay_ms": 5})), 400, "invalid_argument"),
        ("POST", "/v1/jobs", coalesced(json!({"dedup_key": "d", "dedup_ms": 5})), 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs",
            coalesced(json!({"coalesce": {"mode": "first", "window_ms": 5}, "id": "x"})),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            coalesced(json!({"coalesce": {"mode": "merge", "window_ms": 5, "max_items": 0}})),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            coalesced(json!({"coalesce": {"mode": "merge", "window_ms": 5, "max_wait_ms": 10}})),
            400,
            "invalid_argument",
        ),
        ("POST", "/v1/jobs", big_item, 400, "invalid_argument"),
        // priority: 0 ..= 2^32 - 1, an integer
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"priority":-1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"priority":4294967296}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"priority":"high"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"priority":1.5}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/batch",
            r#"{"jobs":[{"topic":"t","body":1},{"topic":"t","body":2,"priority":-3}]}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"backoff_ms":[-1]}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"backoff_ms":"1000"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dedup_key":"k","dedup_ms":0}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dedup_key":"k","dedup_ms":"1000"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dedup_key":7,"dedup_ms":1000}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/batch",
            r#"{"jobs":[{"topic":"t","body":1,"dedup_key":"k","dedup_ms":1000},{"topic":"t","body":2,"dedup_key":"k"}]}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            r#"{"topic":"t","body":1,"dealy_ms":5}"#.into(),
            400,
            "invalid_argument",
        ),
        ("POST", "/v1/jobs", big_body, 413, "payload_too_large"),
        // push many
        ("POST", "/v1/jobs/batch", "{".into(), 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs/batch",
            r#"{"jobs":[]}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/batch",
            r#"{"jobs":{}}"#.into(),
            400,
            "invalid_argument",
        ),
        ("POST", "/v1/jobs/batch", r#"{}"#.into(), 400, "invalid_argument"),
        ("POST", "/v1/jobs/batch", too_many, 400, "invalid_argument"),
        ("POST", "/v1/jobs/batch", one_bad_in_batch, 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs/batch",
            one_wrong_type_in_batch,
            400,
            "invalid_argument",
        ),
        ("POST", "/v1/jobs/batch", big_in_batch, 413, "payload_too_large"),
        ("POST", "/v1/jobs/batch", huge_request, 413, "payload_too_large"),
        // look up, cancel, reschedule
        ("GET", "/v1/jobs/a%20b", "".into(), 400, "invalid_argument"),
        ("GET", "/v1/jobs/unknown", "".into(), 404, "not_found"),
        ("DELETE", "/v1/jobs/unknown", "".into(), 404, "not_found"),
        ("DELETE", "/v1/jobs/a%2Fb", "".into(), 400, "invalid_argument"),
        ("PATCH", "/v1/jobs/live", r#"{}"#.into(), 400, "invalid_argument"),
        (
            "PATCH",
            "/v1/jobs/live",
            r#"{"delay_ms":1,"run_at":1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "PATCH",
            "/v1/jobs/live",
            r#"{"delay_ms":-5}"#.into(),
            400,
            "invalid_argument",
        ),
        ("PATCH", "/v1/jobs/live", r#"{"delay_ms":5}"#.into(), 409, "conflict"),
        ("PATCH", "/v1/jobs/live", r#"{"priority":5}"#.into(), 409, "conflict"),
        (
            "PATCH",
            "/v1/jobs/live",
            r#"{"priority":-5}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "PATCH",
            "/v1/jobs/live",
            r#"{"priority":4294967296,"delay_ms":5}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "PATCH",
            "/v1/jobs/live",
            r#"{"priority":null}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "PATCH",
            "/v1/jobs/unknown",
            r#"{"delay_ms":5}"#.into(),
            404,
            "not_found",
        ),
        ("PATCH", "/v1/jobs/live", "nope".into(), 400, "invalid_argument"),
        // reserve
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":[]}"#.into(),
            400,
            "invalid_argument",
        ),
        ("POST", "/v1/reserve", r#"{}"#.into(), 400, "invalid_argument"),
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":"t"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":["bad topic"]}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":["t"],"count":0}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":["t"],"count":101}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":["t"],"timeout_ms":-1}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/reserve",
            r#"{"topics":["t"],"timeout_ms":30001}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/reserve",
            json!({"topics": (0..33).map(|i| format!("t{i}")).collect::<Vec<_>>()}).to_string(),
            400,
            "invalid_argument",
        ),
        // ack, nack, touch
        ("POST", "/v1/jobs/live/ack", r#"{}"#.into(), 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs/live/ack",
            r#"{"receipt":""}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/live/ack",
            r#"{"receipt":5}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/live/ack",
            r#"{"receipt":"wrong"}"#.into(),
            409,
            "stale_receipt",
        ),
        (
            "POST",
            "/v1/jobs/unknown/ack",
            r#"{"receipt":"r"}"#.into(),
            404,
            "not_found",
        ),
        (
            "POST",
            "/v1/jobs/a%20b/ack",
            r#"{"receipt":"r"}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/live/nack",
            json!({"receipt": receipt, "delay_ms": -1}).to_string(),
            400,
            "invalid_argument",
        ),
        ("POST", "/v1/jobs/live/nack", long_error, 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs/live/nack",
            r#"{"receipt":"wrong"}"#.into(),
            409,
            "stale_receipt",
        ),
        (
            "POST",
            "/v1/jobs/live/touch",
            json!({"receipt": receipt, "ttr_ms": 1}).to_string(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/live/touch",
            r#"{"receipt":"wrong"}"#.into(),
            409,
            "stale_receipt",
        ),
        // A nested object written as an array (serde would fill the struct from it in order; found by
        // schemathesis), and a batch or ack entry written as one.
        (
            "PUT",
            "/v1/topics/t",
            r#"{"retry":[null,null]}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            "PUT",
            "/v1/topics/t",
            r#"{"callback":["http://hooks.example/x"]}"#.into(),
            400,
            "invalid_argument",
        ),
        ("PUT", "/v1/topics/t", r#"{"defaults":[1000]}"#.into(), 400, "invalid_argument"),
        ("POST", "/v1/jobs/batch", r#"{"jobs":[["t",1]]}"#.into(), 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs/ack",
            json!({"acks": [["live", receipt]]}).to_string(),
            400,
            "invalid_argument",
        ),
        // flow keys: a job id's syntax; an id of the producer's only in the key's place
        ("POST", "/v1/jobs", r#"{"topic":"t","body":1,"flow_key":"a b"}"#.into(), 400, "invalid_argument"),
        ("POST", "/v1/jobs", r#"{"topic":"t","body":1,"flow_key":7}"#.into(), 400, "invalid_argument"),
        (
            "POST",
            "/v1/jobs",
            json!({"topic": "t", "body": 1, "flow_key": "k".repeat(129)}).to_string(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs",
            json!({"topic": "t", "body": 1, "flow_key": "k", "id": elsewhere}).to_string(),
            400,
            "invalid_argument",
        ),
        (
            "POST",
            "/v1/jobs/batch",
            r#"{"jobs":[{"topic":"t","body":1,"flow_key":"k"},{"topic":"t","body":2,"flow_key":""}]}"#.into(),
            400,
            "invalid_argument",
        ),
        // a topic's flow limits
        ("PUT", "/v1/topics/t", r#"{"flow":{"concurrency":0}}"#.into(), 400, "invalid_argument"),
        ("PUT", "/v1/topics/t", r#"{"flow":{"concurrency":-1}}"#.into(), 400, "invalid_argument"),
        ("PUT", "/v1/topics/t", r#"{"flow":{"rate_per_s":0}}"#.into(), 400, "invalid_argument"),
        ("PUT", "/v1/topics/t", r#"{"flow":{"burst":5}}"#.into(), 400, "invalid_argument"),
        ("PUT", "/v1/topics/t", r#"{"flow":{"per_key":5}}"#.into(), 400, "invalid_argument"),
        ("PUT", "/v1/topics/t", r#"{"flow":[5]}"#.into(), 400, "invalid_argument"),
        ("GET", "/v1/topics/t/flows?limit=0", "".into(), 400, "invalid_argument"),
        ("GET", "/v1/topics/t/flows?limit=101", "".into(), 400, "invalid_argument"),
        ("GET", "/v1/topics/t/flows?top=5", "".into(), 400, "invalid_argument"),
        ("GET", "/v1/topics/a%20b/flows", "".into(), 400, "invalid_argument"),
        // routes
        ("GET", "/v1/nothing", "".into(), 404, "not_found"),
        ("PUT", "/v1/jobs", "{}".into(), 405, "invalid_argument"),
    ];
    let before = s.snapshot();
    for (method, path, body, status, code) in cases {
        let shown = if body.len() > 80 {
            format!("{}…", &body[..80])
        } else {
            body.clone()
        };
        let (got, out) = s.raw(method, path, body).await;
        assert_eq!(got.as_u16(), status, "{method} {path} {shown}: {out}");
        assert_error(got, &out, status, code);
        assert_eq!(s.snapshot(), before, "{method} {path} {shown} wrote something");
    }
}

/// A body must say it is JSON: a form or plain text (what a page of another site can send without a
/// preflight) is refused before anything is parsed, and nothing is written.
#[tokio::test]
async fn a_body_that_is_not_declared_json_is_refused() {
    let s = TestServer::start().await;
    let before = s.snapshot();
    for ct in [None, Some("text/plain"), Some("application/x-www-form-urlencoded")] {
        let mut req = s.http.post(s.url("/v1/jobs")).body(r#"{"topic":"t","body":1}"#);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let out: serde_json::Value = resp.json().await.unwrap();
        assert_error(status, &out, 400, "invalid_argument");
        assert!(
            out["error"]["message"].as_str().unwrap().contains("Content-Type"),
            "{out}"
        );
    }
    assert_eq!(s.snapshot(), before);
    // Without a body (pause, requeue all) none is needed.
    let (status, _) = s.call("POST", "/v1/topics/t/pause", None).await;
    assert_eq!(status, 200);
}
