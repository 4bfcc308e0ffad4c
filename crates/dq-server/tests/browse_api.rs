//! `GET /v1/topics/{topic}/jobs`: a page of a topic's jobs in each state, in order, over every partition;
//! bad queries refused.

mod common;

use common::{TestServer, assert_error};
use serde_json::{Value, json};

fn ids(page: &Value) -> Vec<&str> {
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn each_state_lists_the_topics_jobs_in_order() {
    let s = TestServer::start().await;
    // Delayed jobs of two topics, mixed in the partitions' delay sets; ids spread them over partitions.
    for i in 0..30u64 {
        let topic = if i % 3 == 0 { "mine" } else { "other" };
        s.push(json!({"topic": topic, "id": format!("d{i:02}"), "body": {"i": i}, "delay_ms": 3_600_000 + i * 1000}))
            .await;
    }
    // Ready jobs, due in the past in a known order.
    for i in 0..12u64 {
        s.push(json!({"topic": "mine", "id": format!("r{i:02}"), "body": i, "run_at": 1_000_000 + i * 1000}))
            .await;
    }
    let (status, page) = s.call("GET", "/v1/topics/mine/jobs?state=delayed&limit=4", None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        ids(&page),
        ["d00", "d03", "d06", "d09"],
        "the topic's delayed jobs by due time"
    );
    assert_eq!(
        (page["total"].clone(), page["complete"].clone()),
        (json!(10), json!(true))
    );
    assert_eq!(page["jobs"][0]["state"], "delayed");
    assert_eq!(page["jobs"][0]["body"], json!({"i": 0}));
    let (_, page) = s
        .call("GET", "/v1/topics/mine/jobs?state=delayed&offset=8&limit=4", None)
        .await;
    assert_eq!(ids(&page), ["d24", "d27"]);

    let (_, page) = s
        .call("GET", "/v1/topics/mine/jobs?state=ready&offset=2&limit=3", None)
        .await;
    assert_eq!(
        ids(&page),
        ["r02", "r03", "r04"],
        "ready jobs by due time across partitions"
    );
    assert_eq!(page["total"], 12);

    // Reserve three (reserve keeps no order across partitions), then nack one job to death (one attempt).
    let reserved = s.reserve(&["mine"], 3, 0).await;
    assert_eq!(reserved.len(), 3);
    let mut want: Vec<&str> = reserved.iter().map(|j| j["id"].as_str().unwrap()).collect();
    want.sort();
    let (status, page) = s.call("GET", "/v1/topics/mine/jobs?state=reserved", None).await;
    assert_eq!(status, 200);
    let mut got: Vec<&str> = ids(&page);
    got.sort();
    assert_eq!(got, want);
    assert!(
        page["jobs"][0]["deadline"].as_u64().is_some(),
        "a reserved job shows its deadline"
    );
    s.push(json!({"topic": "mine", "id": "x", "body": 0, "max_attempts": 1}))
        .await;
    let rest = s.reserve(&["mine"], 100, 0).await;
    let x = rest.iter().find(|j| j["id"] == "x").expect("x reserved");
    let (status, _) = s
        .call("POST", "/v1/jobs/x/nack", Some(json!({"receipt": x["receipt"]})))
        .await;
    assert_eq!(status, 204);
    let (_, page) = s.call("GET", "/v1/topics/mine/jobs?state=dead", None).await;
    assert_eq!(ids(&page), ["x"]);
    assert_eq!(page["total"], 1);

    // A topic with nothing: an empty, complete page.
    let (status, page) = s.call("GET", "/v1/topics/none/jobs?state=ready", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        (page["jobs"].clone(), page["total"].clone(), page["complete"].clone()),
        (json!([]), json!(0), json!(true))
    );
}

#[tokio::test]
async fn bad_queries_are_refused_and_write_nothing() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "t", "body": 1})).await;
    let before = s.snapshot();
    for (query, says) in [
        ("", "state"),
        ("?state=done", "state"),
        ("?state=ready&limit=0", "`limit` must be between 1 and 1000"),
        ("?state=ready&limit=1001", "`limit` must be between 1 and 1000"),
        ("?state=ready&offset=1000001", "`offset` must be at most 1000000"),
        ("?state=ready&offset=-1", "offset"),
        ("?state=ready&colour=red", "colour"),
    ] {
        let (status, body) = s.call("GET", &format!("/v1/topics/t/jobs{query}"), None).await;
        assert_error(status, &body, 400, "invalid_argument");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
    let (status, body) = s.call("GET", "/v1/topics/bad%20name/jobs?state=ready", None).await;
    assert_error(status, &body, 400, "invalid_argument");
    assert_eq!(s.snapshot(), before, "nothing was written");
}
