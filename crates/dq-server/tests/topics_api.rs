//! The topic registry, pause, topic defaults and dead letters over HTTP.

mod common;

use common::{TestServer, assert_error};
use serde_json::json;

#[tokio::test]
async fn register_look_up_list_and_delete() {
    let s = TestServer::start().await;
    let config = json!({"callback": {"url": "http://127.0.0.1:9/hook", "timeout_ms": 2000, "concurrency": 4, "rate_per_s": 2.5, "burst": 5, "secret": "s3cr3t",
                                     "on_dead_url": "http://t0ken@127.0.0.1:9/dead"},
                        "retry": {"max_attempts": 3, "backoff_ms": [1000, 5000], "condition": "{res.code} != 200 && {res.data.status} != 2"},
                        "defaults": {"ttr_ms": 5000}});
    let (status, out) = s.call("PUT", "/v1/topics/orders", Some(config)).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["topic"], "orders");
    assert_eq!(out["config"]["callback"]["secret"], "***", "the secret is never shown");
    assert_eq!(
        out["config"]["callback"]["on_dead_url"], "http://***@127.0.0.1:9/dead",
        "credentials in the hook's URL are masked"
    );
    assert_eq!(out["config"]["retry"]["max_attempts"], 3);
    assert_eq!(out["config"]["callback"]["rate_per_s"], 2.5);
    assert_eq!(out["config"]["callback"]["burst"], 5);
    let (status, got) = s.call("GET", "/v1/topics/orders", None).await;
    assert_eq!(status, 200);
    assert_eq!(got["config"], out["config"]);
    assert_eq!(got["counts"]["ready"], 0);

    s.push(json!({"topic": "pulled", "body": 1})).await;
    let (_, list) = s.call("GET", "/v1/topics", None).await;
    let names: Vec<_> = list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders", "pulled"], "registered topics and topics with jobs");
    assert_eq!(list["topics"][1]["config"], serde_json::Value::Null);
    assert_eq!(list["topics"][1]["counts"]["ready"], 1);

    let (status, _) = s.call("DELETE", "/v1/topics/orders", None).await;
    assert_eq!(status, 204);
    let (status, body) = s.call("GET", "/v1/topics/orders", None).await;
    assert_error(status, &body, 404, "not_found");
    assert_eq!(body["error"]["message"], "topic `orders` not found");
    let (status, body) = s.call("DELETE", "/v1/topics/orders", None).await;
    assert_error(status, &body, 404, "not_found");
}

#[tokio::test]
async fn bad_registrations_are_refused_and_write_nothing() {
    let s = TestServer::start().await;
    let before = s.snapshot();
    for (body, says) in [
        (json!({"callback": {"url": "ftp://x"}}), "callback.url"),
        (
            json!({"callback": {"url": "http://x", "on_dead_url": "ftp://x/dead"}}),
            "callback.on_dead_url",
        ),
        (
            json!({"callback": {"url": "http://x", "on_dead_url": "/dead"}}),
            "callback.on_dead_url",
        ),
        (
            json!({"callback": {"url": "http://x", "timeout_ms": 0}}),
            "callback.timeout_ms",
        ),
        (
            json!({"callback": {"url": "http://x", "concurrency": 100000}}),
            "callback.concurrency",
        ),
        (
            json!({"callback": {"url": "http://x", "rate_per_s": 0}}),
            "callback.rate_per_s",
        ),
        (
            json!({"callback": {"url": "http://x", "rate_per_s": "fast"}}),
            "rate_per_s",
        ),
        (json!({"callback": {"url": "http://x", "burst": 10}}), "callback.burst"),
        (
            json!({"callback": {"url": "http://x", "rate_per_s": 5, "burst": 0}}),
            "callback.burst",
        ),
        (json!({"retry": {"condition": "{res.code} = 200"}}), "retry.condition"),
        (
            json!({"retry": {"condition": "{res.code} == 200 &&"}}),
            "retry.condition",
        ),
        (json!({"retry": {"backoff_ms": []}}), "retry.backoff_ms"),
        (json!({"retry": {"max_age_ms": 0}}), "retry.max_age_ms"),
        (json!({"retry": {"max_age_ms": -1}}), "max_age_ms"),
        (json!({"retry": {"max_attempts": -1}}), "max_attempts"),
        (json!({"defaults": {"ttr_ms": 1}}), "defaults.ttr_ms"),
        (json!({"callbak": {}}), "callbak"),
        (json!([]), "JSON object"),
    ] {
        let (status, out) = s.call("PUT", "/v1/topics/t", Some(body.clone())).await;
        assert_error(status, &out, 400, "invalid_argument");
        assert!(
            out["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {out}"
        );
    }
    let (status, out) = s.call("PUT", "/v1/topics/bad%20name", Some(json!({}))).await;
    assert_error(status, &out, 400, "invalid_argument");
    let (status, out) = s.raw("PUT", "/v1/topics/t", "{nope").await;
    assert_error(status, &out, 400, "invalid_argument");
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn callbacks_the_egress_policy_refuses_are_400_naming_the_rule_and_write_nothing() {
    let redis = dq_harness::RedisServer::start();
    let port = redis.port();
    let mut settings = common::settings(std::slice::from_ref(&redis));
    settings.egress.deny = vec!["10.0.0.0/8".into()];
    let s = TestServer::with_settings(vec![redis], settings).await;
    let before = s.snapshot();
    let redis_node = format!("redis node 127.0.0.1:{port}");
    for (url, rule) in [
        ("http://169.254.169.254/latest/meta-data/".to_string(), "link-local"),
        ("http://[::ffff:169.254.169.254]/".into(), "link-local"),
        ("http://2852039166/".into(), "link-local"),
        ("http://0251.0376.0251.0376/".into(), "link-local"),
        ("http://[fe80::1]:8080/".into(), "link-local"),
        ("http://0.0.0.0:8080/".into(), "unspecified"),
        ("http://224.0.0.1/".into(), "multicast"),
        (format!("http://127.0.0.1:{port}/"), &redis_node),
        (format!("http://[::ffff:127.0.0.1]:{port}/"), &redis_node),
        (format!("http://2130706433:{port}/"), &redis_node),
        (format!("http://[::1]:{port}/"), &redis_node),
        ("http://10.1.2.3/hook".into(), "egress.deny 10.0.0.0/8"),
        ("https://[::ffff:10.0.0.1]/hook".into(), "egress.deny 10.0.0.0/8"),
    ] {
        let (status, out) = s
            .call("PUT", "/v1/topics/t", Some(json!({"callback": {"url": url}})))
            .await;
        assert_error(status, &out, 400, "invalid_argument");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("callback.url") && message.contains(&format!("({rule})")),
            "{url}: {out}"
        );
        // The failure hook's URL goes through the same checks.
        let config = json!({"callback": {"url": "http://192.168.1.5/hook", "on_dead_url": url}});
        let (status, out) = s.call("PUT", "/v1/topics/t", Some(config)).await;
        assert_error(status, &out, 400, "invalid_argument");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("callback.on_dead_url") && message.contains(&format!("({rule})")),
            "{url}: {out}"
        );
    }
    assert_eq!(s.snapshot(), before, "nothing written");
    // Still serving; names are checked by dq-consumer at connect, and other addresses pass.
    for url in [
        format!("http://localhost:{port}/"),
        "http://127.0.0.1:9/hook".to_string(),
        "http://192.168.1.5/".into(),
    ] {
        let (status, out) = s
            .call("PUT", "/v1/topics/t", Some(json!({"callback": {"url": url}})))
            .await;
        assert_eq!(status, 200, "{url}: {out}");
    }
}

#[tokio::test]
async fn topic_defaults_apply_to_pushes() {
    let s = TestServer::start().await;
    s.call(
        "PUT",
        "/v1/topics/d",
        Some(json!({"retry": {"max_attempts": 3}, "defaults": {"ttr_ms": 7000, "delay_ms": 60000}})),
    )
    .await;
    let out = s.push(json!({"topic": "d", "body": 1})).await;
    assert_eq!(out["state"], "delayed", "the topic's default delay");
    let (_, job) = s
        .call("GET", &format!("/v1/jobs/{}", out["id"].as_str().unwrap()), None)
        .await;
    assert_eq!(job["ttr_ms"], 7000);
    assert_eq!(job["max_attempts"], 3);
    let out = s
        .push(json!({"topic": "d", "body": 1, "delay_ms": 0, "ttr_ms": 2000, "max_attempts": 5}))
        .await;
    assert_eq!(out["state"], "ready", "the push's own values win");
    let (_, job) = s
        .call("GET", &format!("/v1/jobs/{}", out["id"].as_str().unwrap()), None)
        .await;
    assert_eq!(
        (job["ttr_ms"].as_i64(), job["max_attempts"].as_i64()),
        (Some(2000), Some(5))
    );
}

#[tokio::test]
async fn paused_topics_are_not_handed_out_until_resumed() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "p", "body": 1})).await;
    let (status, out) = s.call("POST", "/v1/topics/p/pause", None).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["config"]["paused"], true);
    assert!(s.reserve(&["p"], 1, 0).await.is_empty());
    let (_, out) = s.call("POST", "/v1/topics/p/resume", None).await;
    assert_eq!(out["config"]["paused"], false);
    assert_eq!(s.reserve(&["p"], 1, 0).await.len(), 1);
}

async fn make_dead(s: &TestServer, topic: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            s.push(json!({"topic": topic, "body": i, "max_attempts": 1})).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        let job = &s.reserve(&[topic], 1, 0).await[0];
        let path = format!("/v1/jobs/{}/nack", job["id"].as_str().unwrap());
        s.call(
            "POST",
            &path,
            Some(json!({"receipt": job["receipt"], "error": format!("failure {i}")})),
        )
        .await;
    }
    ids
}

#[tokio::test]
async fn dead_letters_can_be_listed_requeued_and_deleted() {
    let s = TestServer::with_shards(1).await;
    let ids = make_dead(&s, "dl", 5).await;
    let (status, page) = s.call("GET", "/v1/topics/dl/dead?limit=2", None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 5);
    let first: Vec<_> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(first.len(), 2);
    assert_eq!(page["jobs"][0]["state"], "dead");
    let (_, rest) = s.call("GET", "/v1/topics/dl/dead?offset=2&limit=100", None).await;
    let mut all: Vec<String> = first.clone();
    all.extend(
        rest["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_string()),
    );
    let mut sorted = all.clone();
    sorted.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(sorted, want, "pages cover every dead job once");

    let (status, out) = s
        .call("POST", "/v1/topics/dl/dead/requeue", Some(json!({"ids": [ids[0]]})))
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["requeued"], 1);
    let (_, job) = s.call("GET", &format!("/v1/jobs/{}", ids[0]), None).await;
    assert_eq!(job["state"], "ready");
    assert_eq!(job["attempts"], 0);

    let (_, out) = s
        .call("DELETE", "/v1/topics/dl/dead", Some(json!({"ids": [ids[1]]})))
        .await;
    assert_eq!(out["deleted"], 1);
    let (status, _) = s.call("GET", &format!("/v1/jobs/{}", ids[1]), None).await;
    assert_eq!(status, 404);

    let (_, out) = s.raw("POST", "/v1/topics/dl/dead/requeue", "").await;
    assert_eq!(out["requeued"], 3, "all that are left");
    assert_eq!(s.reserve(&["dl"], 10, 0).await.len(), 4);
    let (_, page) = s.call("GET", "/v1/topics/dl/dead", None).await;
    assert_eq!(page["total"], 0);
}

#[tokio::test]
async fn bad_dead_letter_requests_write_nothing() {
    let s = TestServer::start().await;
    make_dead(&s, "x", 1).await;
    let before = s.snapshot();
    for (method, path, body, code) in [
        ("GET", "/v1/topics/x/dead?limit=0", "", 400),
        ("GET", "/v1/topics/x/dead?limit=5000", "", 400),
        ("GET", "/v1/topics/x/dead?limit=abc", "", 400),
        ("GET", "/v1/topics/x/dead?bogus=1", "", 400),
        ("POST", "/v1/topics/x/dead/requeue", r#"{"ids": []}"#, 400),
        ("POST", "/v1/topics/x/dead/requeue", r#"{"ids": ["a b"]}"#, 400),
        ("POST", "/v1/topics/x/dead/requeue", r#"{"id": ["a"]}"#, 400),
        ("DELETE", "/v1/topics/x/dead", "{", 400),
        ("DELETE", "/v1/topics/x/dead", "[]", 400),
        ("POST", "/v1/topics/x/dead/requeue", "[]", 400),
        ("POST", "/v1/topics/bad%20topic/dead/requeue", "", 400),
    ] {
        let (status, out) = s.raw(method, path, body).await;
        assert_error(status, &out, code, "invalid_argument");
    }
    assert_eq!(s.snapshot(), before);
}

/// With `secrets.keys`, what Redis holds of a registration has no secret, previous secret or header
/// value in clear; the API and the admin pages show all of them, and a URL's credentials, masked.
#[tokio::test]
async fn secrets_are_sealed_in_redis_and_masked_everywhere_they_are_shown() {
    let redis = dq_harness::RedisServer::start();
    let mut settings = common::settings(std::slice::from_ref(&redis));
    settings.secrets.keys = vec!["AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=".into()];
    let s = TestServer::with_settings(vec![redis], settings).await;
    let config = json!({"callback": {"url": "http://hookuser:hookpass@127.0.0.1:9/hook?token=query-token&channel=ops",
                                     "secret": "cur-secret", "previous_secret": "prev-secret",
                                     "headers": {"X-Api-Key": "hdr-value"},
                                     "on_dead_url": "http://127.0.0.1:9/dead?key=dead-key"}});
    let (status, out) = s.call("PUT", "/v1/topics/sealed", Some(config)).await;
    assert_eq!(status, 200, "{out}");
    let (_, got) = s.call("GET", "/v1/topics/sealed", None).await;
    let (_, list) = s.call("GET", "/v1/topics", None).await;
    let page = s.text("/admin").await;
    let topic_page = s.text("/admin/topics/sealed").await;
    let mut conn = s.redis[0].conn();
    let stored: String = redis::cmd("HGET")
        .arg("{dq}:topics")
        .arg("sealed")
        .query(&mut conn)
        .unwrap();
    for clear in ["cur-secret", "prev-secret", "hdr-value"] {
        assert!(!stored.contains(clear), "{clear} in Redis: {stored}");
    }
    for (place, text) in [
        ("PUT", out.to_string()),
        ("GET", got.to_string()),
        ("list", list.to_string()),
        ("admin", page),
        ("admin topic", topic_page),
    ] {
        for clear in [
            "hookpass",
            "cur-secret",
            "prev-secret",
            "hdr-value",
            "query-token",
            "dead-key",
        ] {
            assert!(!text.contains(clear), "{clear} shown by {place}: {text}");
        }
    }
    assert_eq!(
        got["config"]["callback"]["url"],
        "http://hookuser:***@127.0.0.1:9/hook?token=***&channel=***"
    );
    assert_eq!(
        got["config"]["callback"]["on_dead_url"],
        "http://127.0.0.1:9/dead?key=***"
    );
    // The stored URL stays exact (deliveries go to it), and the config sent back as shown keeps it.
    assert!(stored.contains("token=query-token"), "{stored}");
    let (status, out) = s.call("PUT", "/v1/topics/sealed", Some(got["config"].clone())).await;
    assert_eq!(status, 200, "{out}");
    let kept: String = redis::cmd("HGET")
        .arg("{dq}:topics")
        .arg("sealed")
        .query(&mut conn)
        .unwrap();
    assert!(
        kept.contains("token=query-token") && kept.contains("key=dead-key"),
        "{kept}"
    );
    assert_eq!(got["config"]["callback"]["previous_secret"], "***");
}
