//! Schedules over HTTP: every verb, every bad input (400, nothing written), 404s, scopes and topic-limited
//! tokens, the admin overview.

mod common;

use common::{TestServer, assert_error};
use dq_core::config::{Scope, TokenSpec};
use dq_harness::RedisServer;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn nightly() -> Value {
    json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin", "topic": "reports", "body": {"kind": "nightly"},
           "ttr_ms": 60000, "max_attempts": 3})
}

fn stored(s: &TestServer, name: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg("{dq}:schedules")
        .arg(name)
        .query(&mut s.redis[0].conn())
        .unwrap()
}

#[tokio::test]
async fn put_get_list_pause_resume_and_delete() {
    let s = TestServer::start().await;
    let (status, out) = s.call("PUT", "/v1/schedules/nightly", Some(nightly())).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["name"], "nightly");
    assert_eq!(out["config"], {
        let mut c = nightly();
        c["paused"] = json!(false);
        c
    });
    let next = out["next_fire_at"].as_i64().expect("a next fire time");
    assert!(next > dq_core::clock::unix_ms(), "{out}");
    assert_eq!(next % 60_000, 0, "on a whole minute: {out}");
    assert_eq!(out["last_fired_at"], Value::Null);
    let raw = stored(&s, "nightly").expect("stored");
    let (since, json) = raw.split_once(' ').unwrap();
    since.parse::<i64>().expect("the start, Redis's ms");
    assert_eq!(serde_json::from_str::<Value>(json).unwrap()["cron"], "30 2 * * *");

    let (status, got) = s.call("GET", "/v1/schedules/nightly", None).await;
    assert_eq!(status, 200);
    assert_eq!(got, out);

    let every = json!({"cron": "*/10 * * * * *", "topic": "ticks", "body": null});
    let (status, out) = s.call("PUT", "/v1/schedules/a-ticker", Some(every)).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["config"]["timezone"], "UTC", "UTC by default");
    let (status, list) = s.call("GET", "/v1/schedules", None).await;
    assert_eq!(status, 200);
    let names: Vec<_> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a-ticker", "nightly"]);

    let (status, out) = s.call("POST", "/v1/schedules/nightly/pause", None).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["config"]["paused"], true);
    assert_eq!(out["next_fire_at"], Value::Null, "a paused schedule fires nothing");
    let (_, got) = s.call("GET", "/v1/schedules/nightly", None).await;
    assert_eq!(got["config"]["paused"], true);
    let (status, out) = s.call("POST", "/v1/schedules/nightly/resume", None).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["config"]["paused"], false);
    assert!(out["next_fire_at"].as_i64().is_some(), "{out}");

    let (status, body) = s.call("DELETE", "/v1/schedules/nightly", None).await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(stored(&s, "nightly"), None);
    for (method, path) in [
        ("GET", "/v1/schedules/nightly"),
        ("DELETE", "/v1/schedules/nightly"),
        ("POST", "/v1/schedules/nightly/pause"),
        ("POST", "/v1/schedules/nightly/resume"),
    ] {
        let (status, body) = s.call(method, path, None).await;
        assert_error(status, &body, 404, "not_found");
        assert_eq!(
            body["error"]["message"], "schedule `nightly` not found",
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn a_replacement_keeps_its_start_unless_the_cron_changes() {
    let s = TestServer::start().await;
    s.call("PUT", "/v1/schedules/n", Some(nightly())).await;
    let first = stored(&s, "n").unwrap();
    let since = |raw: &str| raw.split_once(' ').unwrap().0.to_string();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let mut body = nightly();
    body["body"] = json!({"kind": "changed"});
    let (status, _) = s.call("PUT", "/v1/schedules/n", Some(body.clone())).await;
    assert_eq!(status, 200);
    assert_eq!(since(&stored(&s, "n").unwrap()), since(&first), "same cron: same start");
    body["cron"] = json!("0 3 * * *");
    s.call("PUT", "/v1/schedules/n", Some(body)).await;
    assert!(
        since(&stored(&s, "n").unwrap()) > since(&first),
        "a new cron starts afresh"
    );
}

#[tokio::test]
async fn bad_schedules_are_refused_and_write_nothing() {
    let s = TestServer::start().await;
    // One schedule already there: a bad replacement must leave it as it is.
    let (status, _) = s.call("PUT", "/v1/schedules/kept", Some(nightly())).await;
    assert_eq!(status, 200);
    let before = s.snapshot();
    let with = |field: &str, value: Value| {
        let mut b = nightly();
        b[field] = value;
        b
    };
    let without = |field: &str| {
        let mut b = nightly();
        b.as_object_mut().unwrap().remove(field);
        b
    };
    let big = "x".repeat(70_000);
    for (name, body, says) in [
        ("kept", with("cron", json!("not a cron")), "cron"),
        ("kept", with("cron", json!("* * * *")), "cron"),
        ("kept", with("cron", json!("0 0 0 * * * 2030")), "cron"),
        ("kept", with("cron", json!("60 * * * *")), "cron"),
        ("kept", with("cron", json!("0 0 30 2 *")), "cron"),
        ("kept", with("cron", json!(5)), "cron"),
        ("kept", without("cron"), "cron"),
        ("kept", with("timezone", json!("Europe/Atlantis")), "timezone"),
        ("kept", with("timezone", json!("")), "timezone"),
        ("kept", with("topic", json!("bad topic")), "topic"),
        ("kept", with("topic", json!("")), "topic"),
        ("kept", without("topic"), "topic"),
        ("kept", without("body"), "body"),
        ("kept", with("body", json!(big)), "body"),
        ("kept", with("ttr_ms", json!(1)), "ttr_ms"),
        ("kept", with("ttr_ms", json!(999_999_999_999i64)), "ttr_ms"),
        ("kept", with("ttr_ms", json!("60000")), "ttr_ms"),
        ("kept", with("max_attempts", json!(-1)), "max_attempts"),
        ("kept", with("max_attempts", json!(1_000_000)), "max_attempts"),
        ("kept", with("priority", json!(-1)), "priority"),
        ("kept", with("priority", json!(4_294_967_296i64)), "priority"),
        ("kept", with("paused", json!("yes")), "paused"),
        ("kept", with("delay_ms", json!(5)), "delay_ms"),
        ("kept", with("id", json!("x")), "id"),
        ("new-one", with("cron", json!("nope")), "cron"),
        ("bad.name!", nightly(), "schedule name"),
        ("-dash", nightly(), "schedule name"),
        (&"n".repeat(129), nightly(), "schedule name"),
        ("kept", json!([]), "JSON object"),
    ] {
        let (status, out) = s
            .call("PUT", &format!("/v1/schedules/{name}"), Some(body.clone()))
            .await;
        assert_error(status, &out, 400, "invalid_argument");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {out}");
    }
    let (status, out) = s.raw("PUT", "/v1/schedules/kept", "{not json").await;
    assert_error(status, &out, 400, "invalid_argument");
    for (method, path) in [
        ("GET", "/v1/schedules/bad%20name"),
        ("DELETE", "/v1/schedules/bad%20name"),
        ("POST", "/v1/schedules/bad%20name/pause"),
        ("POST", "/v1/schedules/bad%20name/resume"),
    ] {
        let (status, out) = s.call(method, path, None).await;
        assert_error(status, &out, 400, "invalid_argument");
        assert!(
            out["error"]["message"].as_str().unwrap().contains("schedule name"),
            "{out}"
        );
    }
    // A body must say it is JSON.
    let resp = s
        .http
        .put(s.url("/v1/schedules/kept"))
        .header("content-type", "text/plain")
        .body(nightly().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(s.snapshot() == before, "a refused request writes nothing");
}

fn spec(name: &str, scopes: &[Scope], topics: Option<&[&str]>) -> TokenSpec {
    TokenSpec {
        name: name.into(),
        sha256: hex::encode(Sha256::digest(format!("{name}-secret").as_bytes())),
        scopes: scopes.to_vec(),
        topics: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
    }
}

async fn send(s: &TestServer, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = s.http.request(method.parse().unwrap(), s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[tokio::test]
async fn schedules_need_the_topic_scope_and_topic_limits_apply() {
    let redis = vec![RedisServer::start()];
    let mut settings = common::settings(&redis);
    settings.auth.admin_token = Some("root".into());
    settings.auth.tokens = vec![
        spec("orders-admin", &[Scope::Admin], Some(&["orders.*"])),
        spec("reader", &[Scope::Read], None),
        spec("producer", &[Scope::Produce], None),
    ];
    let s = TestServer::with_settings(redis, settings).await;
    let on = |topic: &str| json!({"cron": "0 * * * *", "topic": topic, "body": 1});
    let (status, out) = send(&s, "root", "PUT", "/v1/schedules/billing", Some(on("billing"))).await;
    assert_eq!(status, 200, "{out}");
    let before = s.snapshot();
    for (token, method, path, body) in [
        ("orders-admin-secret", "PUT", "/v1/schedules/other", Some(on("billing"))),
        // Moving billing's schedule to an allowed topic is still touching billing's schedule.
        (
            "orders-admin-secret",
            "PUT",
            "/v1/schedules/billing",
            Some(on("orders.x")),
        ),
        ("orders-admin-secret", "DELETE", "/v1/schedules/billing", None),
        ("orders-admin-secret", "POST", "/v1/schedules/billing/pause", None),
        ("orders-admin-secret", "GET", "/v1/schedules/billing", None),
        ("reader-secret", "PUT", "/v1/schedules/x", Some(on("billing"))),
        ("reader-secret", "POST", "/v1/schedules/billing/pause", None),
        ("producer-secret", "PUT", "/v1/schedules/x", Some(on("billing"))),
        ("producer-secret", "GET", "/v1/schedules", None),
    ] {
        let (status, out) = send(&s, token, method, path, body).await;
        assert_eq!(status, 403, "{token} {method} {path}: {out}");
        assert_eq!(out["error"]["code"], "forbidden");
    }
    assert!(s.snapshot() == before, "a refused request writes nothing");
    let (status, out) = send(
        &s,
        "orders-admin-secret",
        "PUT",
        "/v1/schedules/o",
        Some(on("orders.close")),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    let (_, list) = send(&s, "orders-admin-secret", "GET", "/v1/schedules", None).await;
    assert_eq!(
        list["schedules"].as_array().unwrap().len(),
        1,
        "only its topics: {list}"
    );
    assert_eq!(list["schedules"][0]["name"], "o");
    let (status, got) = send(&s, "reader-secret", "GET", "/v1/schedules/billing", None).await;
    assert_eq!(status, 200, "{got}");
    let (_, list) = send(&s, "reader-secret", "GET", "/v1/schedules", None).await;
    assert_eq!(list["schedules"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn the_admin_overview_lists_schedules_with_their_buttons() {
    let s = TestServer::start().await;
    s.call("PUT", "/v1/schedules/nightly", Some(nightly())).await;
    let mut paused = nightly();
    paused["paused"] = json!(true);
    s.call("PUT", "/v1/schedules/quiet", Some(paused)).await;
    let page = s.text("/admin").await;
    for want in [
        "Schedules",
        "<td>nightly</td>",
        "30 2 * * *",
        "Europe/Berlin",
        "data-call=\"POST /v1/schedules/nightly/pause\"",
        "data-call=\"POST /v1/schedules/quiet/resume\"",
    ] {
        assert!(page.contains(want), "{want} in {page}");
    }
}
