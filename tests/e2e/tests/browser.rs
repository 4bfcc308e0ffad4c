//! A real browser (Debian's Chromium, headless) against dq-server: a page of another site cannot pause
//! a topic, push, requeue dead jobs or read anything, by script or by form, and the admin pages work
//! for the operator on the server's own origin (screenshots, checked and kept as artefacts; with
//! `DQ_UPDATE_DOCS_SCREENSHOTS=1` the dashboard's also becomes `docs/img/admin-dashboard.png`).
//!
//! Two cases. The open API on loopback, which anyone's browser on the machine (or a page that rebinds
//! its name to 127.0.0.1) reaches with no token at all, so only the cross-site refusal and the host
//! check stand in the way; Chromium's command line is enough for it. And a dq-server with an admin
//! token, where an operator logs in through the form and then, with the session cookie held, opens the
//! attacker's page in the same browser; that one fills a form and clicks, so it drives Chromium through
//! chromedriver (WebDriver, `chromium-driver`), both installed by `scripts/ensure-chromium.sh`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::webdriver::{assert_screenshot, browser, keep_artefact, submit_login, wait_for_text};
use common::{call, start, start_on};
use dq_harness::{RedisServer, eventually, free_port};
use serde_json::json;

/// Runs headless Chromium on `url` with `extra` flags (fresh profile each time); its stdout.
fn chromium(url: &str, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Let the page's scripts and their requests finish before the DOM is taken.
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs (scripts/ensure-chromium.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The attacker's page, served from `localhost` (another site than `127.0.0.1`, where dq listens): it
/// tries every state change by script (sending the browser's cookies for dq, should it hold any) and
/// by a form, reads by script, and writes what it saw into the page.
fn attacker_page(dq: &str) -> String {
    format!(
        r#"<!doctype html><html><body><pre id="out"></pre>
<form id="f" method="POST" action="{dq}/v1/topics/victim/pause" target="sink"></form>
<iframe name="sink"></iframe>
<script>
const out = document.getElementById('out');
const log = (s) => {{ out.textContent += s + '\n'; }};
const tries = [
  ['pause', '{dq}/v1/topics/victim/pause', {{method: 'POST', mode: 'no-cors', credentials: 'include'}}],
  ['push', '{dq}/v1/jobs', {{method: 'POST', mode: 'no-cors', credentials: 'include', headers: {{'content-type': 'text/plain'}},
                              body: JSON.stringify({{topic: 'victim', body: 'evil'}})}}],
  ['push-json', '{dq}/v1/jobs', {{method: 'POST', credentials: 'include', headers: {{'content-type': 'application/json'}},
                              body: JSON.stringify({{topic: 'victim', body: 'evil'}})}}],
  ['requeue', '{dq}/v1/topics/victim/dead/requeue', {{method: 'POST', mode: 'no-cors', credentials: 'include'}}],
  ['read-job', '{dq}/v1/jobs/secret-job', {{credentials: 'include'}}],
  ['read-topics', '{dq}/v1/topics', {{credentials: 'include'}}],
];
(async () => {{
  for (const [name, url, opts] of tries) {{
    try {{
      const r = await fetch(url, opts);
      const text = await r.text();
      log(name + ' answered ' + r.type + ' ' + r.status + ' ' + text.slice(0, 200));
    }} catch (e) {{
      log(name + ' failed ' + e);
    }}
  }}
  document.getElementById('f').submit();
  log('done');
}})();
</script></body></html>"#
    )
}

/// A topic to pause, a job whose body must not leak, a dead job to requeue, made through `http` (which
/// carries the token, if the server wants one).
async fn seed(http: &reqwest::Client, port: u16) {
    let (status, _) = call(http, port, "PUT", "/v1/topics/victim", Some(json!({}))).await;
    assert_eq!(status, 200);
    let (status, _) = call(
        http,
        port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "secret-job", "topic": "victim", "body": "the-secret-body", "delay_ms": 600000})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(
        http,
        port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "dead-job", "topic": "victim", "body": 1, "max_attempts": 1})),
    )
    .await;
    assert_eq!(status, 201);
    let (_, out) = call(
        http,
        port,
        "POST",
        "/v1/reserve",
        Some(json!({"topics": ["victim"], "timeout_ms": 5000})),
    )
    .await;
    let (status, _) = call(
        http,
        port,
        "POST",
        "/v1/jobs/dead-job/nack",
        Some(json!({"receipt": out["jobs"][0]["receipt"]})),
    )
    .await;
    assert_eq!(status, 204);
}

/// Serves the attacker's page for dq at `dq` from `localhost` (another site than `127.0.0.1`); its URL.
async fn serve_attacker(dq: &str) -> String {
    let page = attacker_page(dq);
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move { axum::response::Html(page) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://localhost:{}/", listener.local_addr().unwrap().port());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The attacker's page ran to its end and saw nothing of dq's; `dom` is its DOM.
fn assert_read_nothing(dom: &str) {
    // The log's last line, not the word in the script's own text.
    assert!(
        dom.contains("\ndone\n</pre>"),
        "the attacker's script ran to its end:\n{dom}"
    );
    assert!(!dom.contains("the-secret-body"), "the page read a job:\n{dom}");
    assert!(!dom.contains("\"victim\""), "the page read the topics:\n{dom}");
}

/// The seeded topic as [`seed`] left it, and at least `refusals` cross-site requests refused.
async fn assert_nothing_changed(http: &reqwest::Client, port: u16, refusals: f64) {
    let (_, topic) = call(http, port, "GET", "/v1/topics/victim", None).await;
    assert_eq!(topic["config"]["paused"], false, "paused by another site: {topic}");
    assert_eq!(topic["counts"]["ready"], 0, "{topic}");
    assert_eq!(topic["counts"]["delayed"], 1, "a job pushed by another site: {topic}");
    assert_eq!(topic["counts"]["dead"], 1, "requeued by another site: {topic}");
    let refused = common::metric_sum_with(http, port, "dq_auth_refusals_total").await;
    assert!(
        refused >= refusals,
        "the cross-site requests reached dq and were refused there ({refused})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_site_changes_and_reads_nothing_and_the_admin_renders() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let dq = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    seed(&http, server.port).await;

    let evil = serve_attacker(&dq).await;
    let dom = tokio::task::block_in_place(|| chromium(&evil, &["--dump-dom"]));
    assert_read_nothing(&dom);
    assert_nothing_changed(&http, server.port, 4.0).await;

    // The operator's browser on dq's own origin: the admin overview renders, with the topic.
    let admin = tokio::task::block_in_place(|| chromium(&format!("{dq}/admin"), &["--dump-dom"]));
    assert!(admin.contains("victim"), "{admin}");
    let shot = tempfile::tempdir().unwrap();
    let png = shot.path().join("admin.png");
    tokio::task::block_in_place(|| {
        chromium(
            &format!("{dq}/admin/topics/victim"),
            &[&format!("--screenshot={}", png.display()), "--window-size=1200,800"],
        )
    });
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", png.display()));
    assert_screenshot(&bytes, Some((1200, 800)), "the topic page");

    // The dashboard, once dq-server's flush has added what the seed did (2 pushes, 1 dead): its charts
    // are SVG drawn by the server, so Chromium shows them with no script at all.
    eventually(Duration::from_secs(60), "the dashboard counts the seed", || async {
        let html = http
            .get(format!("{dq}/admin?hours=1"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        html.contains(r#"data-total="pushed">2<"#) && html.contains(r#"data-total="dead">1<"#)
    })
    .await;
    let png = shot.path().join("dashboard.png");
    tokio::task::block_in_place(|| {
        chromium(
            &format!("{dq}/admin?hours=1"),
            &[&format!("--screenshot={}", png.display()), "--window-size=1000,1000"],
        )
    });
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", png.display()));
    assert_screenshot(&bytes, Some((1000, 1000)), "the dashboard");
    keep_artefact("admin-dashboard.png", &bytes);
    // The docs' picture of the dashboard, on request.
    if std::env::var_os("DQ_UPDATE_DOCS_SCREENSHOTS").is_some_and(|v| v == "1") {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img/admin-dashboard.png");
        std::fs::write(docs, &bytes).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_in_operator_uses_the_admin_and_a_page_of_another_site_still_cannot() {
    const TOKEN: &str = "operator-admin-token-0123456789";
    let redis = RedisServer::start();
    let port = free_port();
    let mut vars = common::env(&[&redis], port);
    vars.push(("DQ__AUTH__ADMIN_TOKEN", TOKEN.into()));
    let server = start_on("dq-server", port, vars).await;
    let dq = format!("http://127.0.0.1:{}", server.port);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().unwrap(),
    );
    let http = reqwest::Client::builder().default_headers(headers).build().unwrap();
    seed(&http, server.port).await;
    let paused = || async {
        let (_, topic) = call(&http, server.port, "GET", "/v1/topics/victim", None).await;
        topic["config"]["paused"].as_bool()
    };

    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;
    use fantoccini::Locator;

    // The admin without a session goes to the login form; a wrong token is refused there.
    client.goto(&format!("{dq}/admin")).await.unwrap();
    assert_eq!(client.current_url().await.unwrap().path(), "/admin/login");
    submit_login(&client, "not-the-token").await;
    wait_for_text(&client, "That is not an admin token.").await;
    assert!(
        client.get_all_cookies().await.unwrap().is_empty(),
        "a refused login set a cookie"
    );

    // The right token logs in: the session cookie, HttpOnly, Secure and SameSite=Strict, and the overview.
    submit_login(&client, TOKEN).await;
    wait_for_text(&client, "Topics").await;
    assert_eq!(client.current_url().await.unwrap().path(), "/admin");
    let cookie = client.get_named_cookie("dq_token").await.expect("the session cookie");
    assert_eq!(cookie.http_only(), Some(true), "{cookie}");
    assert_eq!(cookie.secure(), Some(true), "{cookie}");
    assert_eq!(
        cookie.same_site().map(|s| s.to_string()).as_deref(),
        Some("Strict"),
        "{cookie}"
    );
    let script_sees = client.execute("return document.cookie", vec![]).await.unwrap();
    assert_eq!(script_sees, json!(""), "the page's script reads the session cookie");

    // The operator pauses and resumes the topic with the overview's buttons (the page's script calls the
    // API with the cookie), and the topic page renders with the dead job.
    for (verb, want) in [("pause", true), ("resume", false)] {
        let button = format!("button[data-call='POST /v1/topics/victim/{verb}']");
        let found = client.wait().for_element(Locator::Css(&button)).await.unwrap();
        found.click().await.unwrap();
        let what = format!("the operator's click on {verb} took effect");
        eventually(Duration::from_secs(30), &what, || async {
            paused().await == Some(want)
        })
        .await;
    }

    // On the delayed job's page the operator gives it another priority; it stays delayed.
    client.goto(&format!("{dq}/admin/jobs/secret-job")).await.unwrap();
    let input = client.wait().for_element(Locator::Id("priority")).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys("7").await.unwrap();
    let button = "button[data-priority-from='priority']";
    client.find(Locator::Css(button)).await.unwrap().click().await.unwrap();
    eventually(Duration::from_secs(30), "the new priority took effect", || async {
        let (_, job) = call(&http, server.port, "GET", "/v1/jobs/secret-job", None).await;
        job["priority"] == 7 && job["state"] == "delayed"
    })
    .await;

    client
        .goto(&format!("{dq}/admin/topics/victim?state=dead"))
        .await
        .unwrap();
    wait_for_text(&client, "dead-job").await;
    let shot = client.screenshot().await.unwrap();
    assert_screenshot(&shot, None, "the topic page, logged in");
    keep_artefact("admin-topic-logged-in.png", &shot);

    // With the session cookie held, the same browser opens the attacker's page: it changes and reads
    // nothing, and dq refused what reached it.
    let before = common::metric_sum_with(&http, server.port, "dq_auth_refusals_total").await;
    let evil = serve_attacker(&dq).await;
    client.goto(&evil).await.unwrap();
    wait_for_text(&client, "\ndone\n</pre>").await;
    // The form's POST lands in the frame after the script's log says done: give it time to arrive.
    eventually(Duration::from_secs(30), "the form's request was refused", || async {
        common::metric_sum_with(&http, server.port, "dq_auth_refusals_total").await >= before + 5.0
    })
    .await;
    let dom = client.source().await.unwrap();
    assert_read_nothing(&dom);
    assert_nothing_changed(&http, server.port, before + 5.0).await;

    // And the operator's session still works on dq's own origin.
    client.goto(&format!("{dq}/admin")).await.unwrap();
    wait_for_text(&client, "victim").await;
    assert_eq!(client.current_url().await.unwrap().path(), "/admin");
    client.close().await.unwrap();
}
