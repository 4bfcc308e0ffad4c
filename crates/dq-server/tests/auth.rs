//! Tokens and scopes: every route against no token, a wrong token, each scope and a token limited to
//! some topics; refusals are JSON errors that write nothing; the admin login.

mod common;

use common::TestServer;
use dq_core::config::Scope;
use serde_json::{Value, json};

use common::{ROOT, send, server};

/// A fresh ready job of `topic`, reserved (by root) when `reserved`: (id, receipt).
async fn job(s: &TestServer, topic: &str, reserved: bool) -> (String, String) {
    let (status, out) = send(
        s,
        Some(ROOT),
        "POST",
        "/v1/jobs",
        Some(&json!({"topic": topic, "body": 1})),
    )
    .await;
    assert_eq!(status, 201, "{out}");
    let id = out["id"].as_str().unwrap().to_string();
    if !reserved {
        return (id, String::new());
    }
    loop {
        let (_, got) = send(
            s,
            Some(ROOT),
            "POST",
            "/v1/reserve",
            Some(&json!({"topics": [topic], "count": 100})),
        )
        .await;
        if let Some(j) = got["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id.as_str()) {
            return (id, j["receipt"].as_str().unwrap().to_string());
        }
        // Another job of the topic came first: finish it and look again.
        for j in got["jobs"].as_array().unwrap() {
            send(
                s,
                Some(ROOT),
                "POST",
                &format!("/v1/jobs/{}/ack", j["id"].as_str().unwrap()),
                Some(&json!({"receipt": j["receipt"]})),
            )
            .await;
        }
    }
}

/// One request of the matrix, made fresh for each caller (a job to act on, when it needs one).
async fn request(s: &TestServer, route: &str, topic: &str) -> (&'static str, String, Option<Value>) {
    match route {
        "push" => ("POST", "/v1/jobs".into(), Some(json!({"topic": topic, "body": 1}))),
        "push many" => (
            "POST",
            "/v1/jobs/batch".into(),
            Some(json!({"jobs": [{"topic": topic, "body": 1}]})),
        ),
        "look up" => ("GET", format!("/v1/jobs/{}", job(s, topic, false).await.0), None),
        "reschedule" => (
            "PATCH",
            format!("/v1/jobs/{}", job(s, topic, false).await.0),
            Some(json!({"delay_ms": 1000})),
        ),
        "cancel" => ("DELETE", format!("/v1/jobs/{}", job(s, topic, false).await.0), None),
        "reserve" => ("POST", "/v1/reserve".into(), Some(json!({"topics": [topic]}))),
        "ack" | "nack" | "touch" => {
            let (id, receipt) = job(s, topic, true).await;
            (
                "POST",
                format!("/v1/jobs/{id}/{route}"),
                Some(json!({"receipt": receipt})),
            )
        }
        "register" => ("PUT", format!("/v1/topics/{topic}"), Some(json!({}))),
        "topic" => ("GET", format!("/v1/topics/{topic}"), None),
        "unregister" => ("DELETE", format!("/v1/topics/{topic}"), None),
        "pause" => ("POST", format!("/v1/topics/{topic}/pause"), None),
        "resume" => ("POST", format!("/v1/topics/{topic}/resume"), None),
        "dead" => ("GET", format!("/v1/topics/{topic}/dead"), None),
        "requeue" => ("POST", format!("/v1/topics/{topic}/dead/requeue"), None),
        "purge" => ("DELETE", format!("/v1/topics/{topic}/dead"), None),
        "admin topic" => ("GET", format!("/admin/topics/{topic}"), None),
        "register schedule" => (
            "PUT",
            format!("/v1/schedules/s-{topic}"),
            Some(json!({"cron": "0 * * * *", "topic": topic, "body": 1})),
        ),
        "schedule" | "delete schedule" | "pause schedule" | "resume schedule" => {
            // A schedule of the topic to act on, made by root.
            let path = format!("/v1/schedules/s-{topic}");
            let body = json!({"cron": "0 * * * *", "topic": topic, "body": 1});
            let (status, out) = send(s, Some(ROOT), "PUT", &path, Some(&body)).await;
            assert_eq!(status, 200, "{out}");
            match route {
                "schedule" => ("GET", path, None),
                "delete schedule" => ("DELETE", path, None),
                "pause schedule" => ("POST", format!("{path}/pause"), None),
                _ => ("POST", format!("{path}/resume"), None),
            }
        }
        other => panic!("no route {other}"),
    }
}

/// Routes about one topic, with the scope each needs.
const TOPIC_ROUTES: &[(&str, Scope)] = &[
    ("push", Scope::Produce),
    ("push many", Scope::Produce),
    ("look up", Scope::Read),
    ("reschedule", Scope::Produce),
    ("cancel", Scope::Produce),
    ("reserve", Scope::Consume),
    ("ack", Scope::Consume),
    ("nack", Scope::Consume),
    ("touch", Scope::Consume),
    ("register", Scope::Admin),
    ("topic", Scope::Read),
    ("unregister", Scope::Admin),
    ("pause", Scope::Admin),
    ("resume", Scope::Admin),
    ("dead", Scope::Read),
    ("requeue", Scope::Admin),
    ("purge", Scope::Admin),
    ("admin topic", Scope::Admin),
    ("register schedule", Scope::Admin),
    ("schedule", Scope::Read),
    ("delete schedule", Scope::Admin),
    ("pause schedule", Scope::Admin),
    ("resume schedule", Scope::Admin),
];

#[tokio::test]
async fn every_route_answers_by_token_scope_and_topic() {
    let s = server().await;
    let tokens: [(&str, &[Scope]); 4] = [
        ("producer", &[Scope::Produce]),
        ("consumer", &[Scope::Consume]),
        ("reader", &[Scope::Read]),
        ("operator", &[Scope::Admin]),
    ];
    for (route, needs) in TOPIC_ROUTES {
        for (who, token) in [("no token", None), ("a wrong token", Some("guess"))] {
            let (method, path, body) = request(&s, route, "orders.x").await;
            let (status, out) = send(&s, token, method, &path, body.as_ref()).await;
            if route.starts_with("admin") {
                assert!(status.is_redirection(), "{route} with {who}: {status}");
            } else {
                assert_eq!(status, 401, "{route} with {who}: {out}");
                assert_eq!(out["error"]["code"], "unauthorized");
            }
        }
        for (name, scopes) in tokens {
            let (method, path, body) = request(&s, route, "orders.x").await;
            let secret = format!("{name}-secret");
            let (status, out) = send(&s, Some(&secret), method, &path, body.as_ref()).await;
            let allowed = scopes.contains(needs) || scopes.contains(&Scope::Admin);
            if allowed {
                assert!(status != 401 && status != 403, "{route} with {name}: {status} {out}");
            } else {
                assert_eq!(status, 403, "{route} with {name}: {out}");
                assert_eq!(out["error"]["code"], "forbidden");
                assert!(
                    out["error"]["message"].as_str().unwrap().contains(needs.as_str()),
                    "{out}"
                );
            }
        }
        // Limited to orders.*: its own scopes there, nothing elsewhere.
        let mine = [Scope::Produce, Scope::Consume, Scope::Read].contains(needs);
        for (topic, allowed) in [("orders.x", mine), ("billing", false)] {
            let (method, path, body) = request(&s, route, topic).await;
            let (status, out) = send(&s, Some("orders-secret"), method, &path, body.as_ref()).await;
            if allowed {
                assert!(
                    status != 401 && status != 403,
                    "{route} on {topic} with orders: {status} {out}"
                );
            } else {
                assert_eq!(status, 403, "{route} on {topic} with orders: {out}");
            }
        }
        // The admin token can do everything.
        let (method, path, body) = request(&s, route, "billing").await;
        let (status, out) = send(&s, Some(ROOT), method, &path, body.as_ref()).await;
        assert!(status != 401 && status != 403, "{route} with root: {status} {out}");
    }

    // Ack many: the consume scope for the request, the topic for each entry (an entry of a topic the
    // token may not use fails alone, with forbidden).
    for (who, topic, whole, entry) in [
        ("producer-secret", "orders.x", 403, None),
        ("consumer-secret", "orders.x", 200, Some(json!({}))),
        ("orders-secret", "orders.x", 200, Some(json!({}))),
        ("orders-secret", "billing", 200, Some(json!("forbidden"))),
    ] {
        let (id, receipt) = job(&s, topic, true).await;
        let body = json!({"acks": [{"id": id, "receipt": receipt}]});
        let (status, out) = send(&s, Some(who), "POST", "/v1/jobs/ack", Some(&body)).await;
        assert_eq!(status, whole, "ack many on {topic} with {who}: {out}");
        match entry {
            Some(Value::String(code)) => assert_eq!(out["results"][0]["error"]["code"], code.as_str(), "{out}"),
            Some(v) => assert_eq!(out["results"][0], v, "{out}"),
            None => assert_eq!(out["error"]["code"], "forbidden", "{out}"),
        }
    }

    // Routes over every topic.
    for (method, path, needs) in [
        ("GET", "/v1/topics", Scope::Read),
        ("GET", "/v1/stats", Scope::Read),
        ("GET", "/metrics", Scope::Read),
        ("GET", "/admin", Scope::Admin),
    ] {
        assert!(
            matches!(send(&s, None, method, path, None).await.0.as_u16(), 401 | 303 | 307),
            "{path}"
        );
        for (name, scopes) in tokens {
            let status = send(&s, Some(&format!("{name}-secret")), method, path, None).await.0;
            let allowed = scopes.contains(&needs) || scopes.contains(&Scope::Admin);
            assert_eq!(status == 403, !allowed, "{path} with {name}: {status}");
        }
    }
    // A limited token sees only its topics in listings, and no metrics (they span every topic).
    let (status, list) = send(&s, Some("orders-secret"), "GET", "/v1/topics", None).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"orders.x") && !names.contains(&"billing"), "{names:?}");
    let (_, stats) = send(&s, Some("orders-secret"), "GET", "/v1/stats", None).await;
    assert!(
        stats["topics"].get("billing").is_none() && stats["topics"].get("orders.x").is_some(),
        "{stats}"
    );
    assert_eq!(send(&s, Some("orders-secret"), "GET", "/metrics", None).await.0, 403);
    // Probes need no token.
    assert_eq!(send(&s, None, "GET", "/healthz", None).await.0, 200);
    assert_eq!(send(&s, None, "GET", "/readyz", None).await.0, 200);
}

#[tokio::test]
async fn a_refused_request_writes_nothing() {
    let s = server().await;
    let before = s.snapshot();
    let push = json!({"id": "x1", "topic": "billing", "body": 1});
    assert_eq!(send(&s, None, "POST", "/v1/jobs", Some(&push)).await.0, 401);
    assert_eq!(
        send(&s, Some("reader-secret"), "POST", "/v1/jobs", Some(&push)).await.0,
        403
    );
    assert_eq!(
        send(&s, Some("orders-secret"), "POST", "/v1/jobs", Some(&push)).await.0,
        403
    );
    // One job of a topic the token may not use refuses the whole batch.
    let batch = json!({"jobs": [{"topic": "orders.a", "body": 1}, {"topic": "billing", "body": 2}]});
    let (status, out) = send(&s, Some("orders-secret"), "POST", "/v1/jobs/batch", Some(&batch)).await;
    assert_eq!(status, 403, "{out}");
    assert!(
        out["error"]["message"].as_str().unwrap().starts_with("jobs[1]"),
        "{out}"
    );
    assert_eq!(
        send(
            &s,
            Some("producer-secret"),
            "PUT",
            "/v1/topics/billing",
            Some(&json!({}))
        )
        .await
        .0,
        403
    );
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn the_admin_login_sets_a_strict_cookie_that_opens_the_pages() {
    let s = server().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = |token: &'static str| {
        client
            .post(s.url("/admin/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    assert_eq!(
        login("producer-secret").await.unwrap().status(),
        401,
        "not an admin token"
    );
    assert_eq!(login("guess").await.unwrap().status(), 401);
    let ok = login("operator-secret").await.unwrap();
    assert!(ok.status().is_redirection());
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    for part in ["dq_token=operator-secret", "HttpOnly", "Secure", "SameSite=Strict"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap();
    let page = client.get(s.url("/admin")).header("cookie", pair).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Topics"));
    // The pages' buttons call the API with the same cookie.
    let pause = client
        .post(s.url("/v1/topics/t/pause"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    assert_eq!(pause.status(), 200);
    assert!(
        client
            .get(s.url("/admin"))
            .send()
            .await
            .unwrap()
            .status()
            .is_redirection()
    );
}

#[tokio::test]
async fn a_page_of_another_site_cannot_change_anything() {
    let s = server().await;
    let before = s.snapshot();
    let client = reqwest::Client::new();
    for (origin, fetch_site) in [
        (Some("http://evil.example"), None),
        (None, Some("cross-site")),
        (Some("null"), None),
    ] {
        let mut req = client
            .post(s.url("/v1/topics/orders.x/pause"))
            .header("cookie", "dq_token=operator-secret");
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(f) = fetch_site {
            req = req.header("sec-fetch-site", f);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 403, "{origin:?} {fetch_site:?}");
        assert_eq!(resp.headers()["x-frame-options"], "DENY");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "forbidden");
    }
    assert_eq!(s.snapshot(), before, "nothing written");
    // The same request from the server's own origin (the admin pages) goes through.
    let host = s.base.trim_start_matches("http://").to_string();
    let ok = client
        .post(s.url("/v1/topics/orders.x/pause"))
        .header("cookie", "dq_token=operator-secret")
        .header("origin", format!("http://{host}"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // Reads are not state changes; every answer forbids framing.
    let answer = client.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(answer.headers()["content-security-policy"], "frame-ancestors 'none'");
    let page = client.get(s.url("/admin/login")).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
}

/// DNS rebinding: a page whose name now points at 127.0.0.1 reaches an open API only by that name,
/// which the API does not answer to.
#[tokio::test]
async fn an_open_api_does_not_answer_to_other_host_names() {
    let s = TestServer::start().await;
    let port = s.base.rsplit(':').next().unwrap().to_string();
    let push = json!({"topic": "t", "body": 1});
    let before = s.snapshot();
    let resp = s
        .http
        .post(s.url("/v1/jobs"))
        .header("host", format!("rebound.example:{port}"))
        .json(&push)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("host name"),
        "{body}"
    );
    assert_eq!(s.snapshot(), before, "nothing written");
    let ok = s
        .http
        .post(s.url("/v1/jobs"))
        .header("host", format!("localhost:{port}"))
        .json(&push)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
}
