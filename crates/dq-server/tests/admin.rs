//! The admin pages render what the API holds, escaped.

mod common;

use common::TestServer;
use serde_json::json;

#[tokio::test]
async fn overview_and_topic_pages_show_shards_topics_and_dead_letters() {
    let s = TestServer::start().await;
    s.call(
        "PUT",
        "/v1/topics/orders.close",
        Some(json!({"callback": {"url": "http://127.0.0.1:9/hook", "secret": "s3cr3t"}})),
    )
    .await;
    s.push(json!({"id": "d1", "topic": "orders.close", "body": {"n": 1}, "max_attempts": 1}))
        .await;
    let job = &s.reserve(&["orders.close"], 1, 0).await[0];
    s.call(
        "POST",
        "/v1/jobs/d1/nack",
        Some(json!({"receipt": job["receipt"], "error": "<script>alert(1)</script>"})),
    )
    .await;
    s.push(json!({"topic": "pulled", "body": 1})).await;

    let overview = s.http.get(s.url("/admin")).send().await.unwrap();
    assert_eq!(overview.status(), 200);
    assert!(
        overview.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = overview.text().await.unwrap();
    for want in [
        "orders.close",
        "pulled",
        "POST http://127.0.0.1:9/hook",
        "redis://127.0.0.1",
        ">up<",
    ] {
        assert!(html.contains(want), "overview lacks {want}: {html}");
    }

    let html = s.text("/admin/topics/orders.close").await;
    assert!(html.contains("d1"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "errors are escaped: {html}"
    );
    assert!(!html.contains("<script>alert(1)"), "{html}");
    assert!(!html.contains("s3cr3t"), "the secret is never shown");

    let (status, _) = s.raw("GET", "/admin/topics/bad%20name", "").await;
    assert_eq!(status, 400);
}

/// The pages run no inline script or style: a Content-Security-Policy forbids it, and the buttons name
/// their API call in data attributes for the page's script file.
#[tokio::test]
async fn the_pages_allow_only_their_own_files() {
    let s = TestServer::start().await;
    s.push(json!({"id": "d1", "topic": "t", "body": 1, "max_attempts": 1}))
        .await;
    let job = &s.reserve(&["t"], 1, 0).await[0];
    s.call("POST", "/v1/jobs/d1/nack", Some(json!({"receipt": job["receipt"]})))
        .await;
    for path in ["/admin", "/admin/topics/t", "/admin/login"] {
        let resp = s.http.get(s.url(path)).send().await.unwrap();
        let csp = resp.headers()["content-security-policy"].to_str().unwrap().to_string();
        for part in ["script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
            assert!(csp.contains(part), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        let html = resp.text().await.unwrap();
        assert!(!html.contains("onclick") && !html.contains("<style>"), "{path}: {html}");
    }
    // The topic opens on its dead jobs (its only ones): each with a box to select it, and buttons that
    // send the selected ids.
    let html = s.text("/admin/topics/t").await;
    assert!(
        html.contains(r#"data-call="POST /v1/topics/t/dead/requeue" data-ids"#),
        "{html}"
    );
    assert!(html.contains(r#"class="pick" value="d1""#), "{html}");
    let js = s.http.get(s.url("/admin/static/admin.js")).send().await.unwrap();
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(js.text().await.unwrap().contains("d.call.split"));
}
