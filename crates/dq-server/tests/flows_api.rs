//! Flow keys over HTTP: a push with `flow_key` shows it on look-up and in the reserve answer; a topic's
//! `flow` limits hold for pull reserves; `GET /v1/topics/{topic}/flows` shows the busiest keys.

mod common;

use common::TestServer;
use serde_json::json;

#[tokio::test]
async fn flow_keys_over_http() {
    let s = TestServer::start().await;
    let (status, _) = s
        .call("PUT", "/v1/topics/f", Some(json!({"flow": {"concurrency": 1}})))
        .await;
    assert_eq!(status.as_u16(), 200);
    let (_, topic) = s.call("GET", "/v1/topics/f", None).await;
    assert_eq!(topic["config"]["flow"], json!({"concurrency": 1}), "{topic}");
    // Three jobs of key a, one of key b; every process reads the registry again within its refresh, so
    // wait until the limit holds (a reserve takes one of each key).
    for i in 0..3 {
        s.push(json!({"topic": "f", "body": i, "flow_key": "a"})).await;
    }
    let b = s.push(json!({"topic": "f", "body": "b", "flow_key": "b"})).await;
    let id = b["id"].as_str().unwrap();
    let (_, job) = s.call("GET", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(job["flow_key"], "b", "{job}");

    let (_, flows) = s.call("GET", "/v1/topics/f/flows", None).await;
    assert_eq!(flows["keys"], 2, "{flows}");
    assert_eq!(
        flows["busiest"][0],
        json!({"key": "a", "ready": 3, "reserved": 0}),
        "{flows}"
    );
    let (_, top) = s.call("GET", "/v1/topics/f/flows?limit=1", None).await;
    assert_eq!(top["busiest"].as_array().unwrap().len(), 1, "{top}");

    let got = s.reserve(&["f"], 10, 0).await;
    let mut keys: Vec<&str> = got.iter().map(|j| j["flow_key"].as_str().unwrap()).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b"], "one job of each key at concurrency 1: {got:?}");
    assert!(s.reserve(&["f"], 10, 0).await.is_empty());
    let (_, flows) = s.call("GET", "/v1/topics/f/flows", None).await;
    assert_eq!(
        flows["busiest"][0],
        json!({"key": "a", "ready": 2, "reserved": 1}),
        "{flows}"
    );
    // The ack frees key a's slot.
    let a = got.iter().find(|j| j["flow_key"] == "a").unwrap();
    let (status, _) = s
        .call(
            "POST",
            &format!("/v1/jobs/{}/ack", a["id"].as_str().unwrap()),
            Some(json!({"receipt": a["receipt"]})),
        )
        .await;
    assert_eq!(status.as_u16(), 204);
    let next = s.reserve(&["f"], 10, 0).await;
    assert_eq!(next.len(), 1, "{next:?}");
    assert_eq!(next[0]["flow_key"], "a");
}
