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

/// The number in the dashboard's totals cell `data-total="<name>"`, if the page has it.
fn total(html: &str, name: &str) -> Option<u64> {
    let at = html.find(&format!("data-total=\"{name}\">"))? + name.len() + 14;
    html[at..].split('<').next()?.trim().parse().ok()
}

/// After pushes, acks, nacks and a death through the API, the dashboard on `/admin` shows them (once
/// the server's flush has added its counts to Redis) in every window, with the Redis primary's memory;
/// a window it does not offer is a 400 that writes nothing.
#[tokio::test]
async fn the_dashboard_shows_what_was_pushed_delivered_failed_and_dead() {
    let s = TestServer::start().await;
    for i in 0..6 {
        let attempts = if i == 5 { 1 } else { 5 };
        s.push(json!({"id": format!("j{i}"), "topic": "dash", "body": i, "max_attempts": attempts}))
            .await;
    }
    let mut jobs = Vec::new();
    while jobs.len() < 6 {
        jobs.extend(s.reserve(&["dash"], 6, 5000).await);
    }
    for job in &jobs {
        let (id, receipt) = (job["id"].as_str().unwrap(), &job["receipt"]);
        let verb = if ["j0", "j1", "j2"].contains(&id) {
            "ack"
        } else {
            "nack"
        };
        let (status, out) = s
            .call(
                "POST",
                &format!("/v1/jobs/{id}/{verb}"),
                Some(json!({"receipt": receipt})),
            )
            .await;
        assert_eq!(status, 204, "{verb} {id}: {out}");
    }

    // j3 and j4 failed (retried later), j5 went dead.
    let want = [
        ("pushed", 6),
        ("delivered", 3),
        ("failed", 2),
        ("dead", 1),
        ("first deliveries", 6),
    ];
    let page = std::sync::Mutex::new(String::new());
    dq_harness::eventually(std::time::Duration::from_secs(60), "the dashboard counts", || async {
        let html = s.text("/admin").await;
        let shown = want.iter().all(|(name, n)| total(&html, name) == Some(*n));
        *page.lock().unwrap() = html;
        shown
    })
    .await;
    let html = page.into_inner().unwrap();
    assert!(html.contains("<svg"), "the charts are SVG: {html}");
    assert!(html.contains(r#"data-series="pushed""#) && html.contains(r#"data-series="p99""#));
    assert!(!html.contains(" style="), "no inline style under the CSP: {html}");
    let memory = html
        .split("data-used-memory=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(memory.is_some_and(|m| m > 0), "the primary's used_memory: {html}");
    assert!(html.contains(">up<") && html.contains("redis://127.0.0.1"), "{html}");
    for hours in ["1", "6", "24"] {
        let html = s.text(&format!("/admin?hours={hours}")).await;
        for (name, n) in want {
            assert_eq!(total(&html, name), Some(n), "?hours={hours}: {name}");
        }
    }

    let before = s.snapshot();
    for bad in ["abc", "1000", "0", "-1", "", "6.5", "1%00"] {
        let (status, body) = s.raw("GET", &format!("/admin?hours={bad}"), "").await;
        common::assert_error(status, &body, 400, "invalid_argument");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("1, 6 or 24"),
            "{body}"
        );
    }
    assert_eq!(s.snapshot(), before, "a refused page wrote nothing");
}
