//! Every operation of the served OpenAPI document, with a token of each scope, on names that do not
//! exist: a token without the operation's scope gets 403 and never learns whether the job, topic or
//! schedule exists (no 404, no 409), and nothing is written; a token with the scope gets past it.

mod common;

use std::collections::BTreeMap;

use common::{ROOT, send, server};
use serde_json::{Value, json};

/// The scope each operation needs (`None`: public), by operation id. Every operation of the document
/// must be here, so a new route states its scope.
fn scopes() -> BTreeMap<&'static str, Option<&'static str>> {
    BTreeMap::from([
        ("push", Some("produce")),
        ("push_many", Some("produce")),
        ("cancel", Some("produce")),
        ("reschedule", Some("produce")),
        ("lookup", Some("read")),
        ("attempts", Some("read")),
        ("reserve", Some("consume")),
        ("ack", Some("consume")),
        ("ack_many", Some("consume")),
        ("nack", Some("consume")),
        ("touch", Some("consume")),
        ("list_topics", Some("read")),
        ("get_topic", Some("read")),
        ("list_jobs", Some("read")),
        ("list_flow_keys", Some("read")),
        ("list_dead", Some("read")),
        ("list_schedules", Some("read")),
        ("get_schedule", Some("read")),
        ("stats", Some("read")),
        ("metrics", Some("read")),
        ("put_topic", Some("admin")),
        ("delete_topic", Some("admin")),
        ("pause_topic", Some("admin")),
        ("resume_topic", Some("admin")),
        ("delete_dead", Some("admin")),
        ("requeue_dead", Some("admin")),
        ("put_schedule", Some("admin")),
        ("delete_schedule", Some("admin")),
        ("pause_schedule", Some("admin")),
        ("resume_schedule", Some("admin")),
        ("healthz", None),
        ("readyz", None),
        ("openapi", None),
    ])
}

/// A request body the operation takes (valid, so the scope is what decides), for `id`.
fn body(id: &str) -> Option<Value> {
    Some(match id {
        "push" => json!({"topic": "scoped", "body": 1}),
        "push_many" => json!({"jobs": [{"topic": "scoped", "body": 1}]}),
        "reschedule" => json!({"delay_ms": 1000}),
        "reserve" => json!({"topics": ["scoped"]}),
        "ack" | "nack" | "touch" => json!({"receipt": "0000000000000000.1"}),
        "ack_many" => json!({"acks": [{"id": "missing", "receipt": "0000000000000000.1"}]}),
        "put_topic" => json!({}),
        "requeue_dead" => json!({}),
        "put_schedule" => json!({"cron": "*/5 * * * *", "topic": "scoped", "body": 1}),
        _ => return None,
    })
}

#[tokio::test]
async fn every_route_checks_the_scope_before_it_reads_anything() {
    let s = server().await;
    let (_, doc) = send(&s, None, "GET", "/openapi.json", None).await;
    let scopes = scopes();
    let mut seen = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap();
            let need = *scopes
                .get(id)
                .unwrap_or_else(|| panic!("`{id}` ({method} {path}) has no scope in this test's table"));
            seen.push(id);
            // Names nobody made: a job, a topic, a schedule.
            let path = path
                .replace("{id}", "missing")
                .replace("{topic}", "missing.topic")
                .replace("{name}", "missing-schedule");
            let method = method.to_uppercase();
            for token in ["producer", "consumer", "reader", "operator"] {
                let scope = token_scope(token);
                let allowed = need.is_none_or(|need| scope == need || scope == "admin");
                let before = stored(&s);
                let secret = format!("{token}-secret");
                let (status, answer) = send(&s, Some(&secret), &method, &path, body(id).as_ref()).await;
                if allowed {
                    assert_ne!(status, 403, "{token} may {method} {path}: {answer}");
                } else {
                    assert_eq!(status, 403, "{token} ({scope}) on {method} {path} ({id}): {answer}");
                    assert_eq!(answer["error"]["code"], "forbidden", "{method} {path}: {answer}");
                    assert_eq!(stored(&s), before, "{token} on {method} {path} wrote something");
                }
            }
            // The root token has every scope.
            let (status, answer) = send(&s, Some(ROOT), &method, &path, body(id).as_ref()).await;
            assert_ne!(status, 403, "root on {method} {path}: {answer}");
        }
    }
    seen.sort();
    let listed: Vec<&str> = scopes.keys().copied().collect();
    assert_eq!(seen, listed, "the table lists exactly the document's operations");
}

/// What Redis holds, but the dashboard's counts per minute, which the server adds in batches in the
/// background (the pushes of the tokens that may push are counted there whenever the batch goes).
fn stored(s: &common::TestServer) -> Vec<(String, Vec<u8>)> {
    s.snapshot()
        .into_iter()
        .filter(|(k, _)| !k.contains(":activity:"))
        .collect()
}

fn token_scope(token: &str) -> &'static str {
    match token {
        "producer" => "produce",
        "consumer" => "consume",
        "reader" => "read",
        _ => "admin",
    }
}
