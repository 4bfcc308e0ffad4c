//! A real browser (Debian's Chromium, headless) against dq-server's open API on loopback: a page of
//! another site cannot pause a topic, push, requeue dead jobs or read anything, by script or by form;
//! the admin pages render for the operator on the server's own origin (a screenshot, checked).
//!
//! The open API is the case a browser matters most for: anyone's browser on the machine (or a page
//! that rebinds its name to 127.0.0.1) reaches it with no token at all, so only the cross-site refusal
//! and the host check stand in the way. With tokens, the same refusal protects the admin cookie.

mod common;

use std::process::Command;

use common::{call, start};
use dq_harness::RedisServer;
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
/// tries every state change by script and reads by script, and writes what it saw into the page.
fn attacker_page(dq: &str) -> String {
    format!(
        r#"<!doctype html><html><body><pre id="out"></pre>
<form id="f" method="POST" action="{dq}/v1/topics/victim/pause" target="sink"></form>
<iframe name="sink"></iframe>
<script>
const out = document.getElementById('out');
const log = (s) => {{ out.textContent += s + '\n'; }};
const tries = [
  ['pause', '{dq}/v1/topics/victim/pause', {{method: 'POST', mode: 'no-cors'}}],
  ['push', '{dq}/v1/jobs', {{method: 'POST', mode: 'no-cors', headers: {{'content-type': 'text/plain'}},
                              body: JSON.stringify({{topic: 'victim', body: 'evil'}})}}],
  ['push-json', '{dq}/v1/jobs', {{method: 'POST', headers: {{'content-type': 'application/json'}},
                              body: JSON.stringify({{topic: 'victim', body: 'evil'}})}}],
  ['requeue', '{dq}/v1/topics/victim/dead/requeue', {{method: 'POST', mode: 'no-cors'}}],
  ['read-job', '{dq}/v1/jobs/secret-job', {{}}],
  ['read-topics', '{dq}/v1/topics', {{}}],
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_site_changes_and_reads_nothing_and_the_admin_renders() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let dq = format!("http://127.0.0.1:{}", server.port);
    let http = reqwest::Client::new();
    // A topic to pause, a job whose body must not leak, a dead job to requeue.
    let (status, _) = call(&http, server.port, "PUT", "/v1/topics/victim", Some(json!({}))).await;
    assert_eq!(status, 200);
    let (status, _) = call(
        &http,
        server.port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "secret-job", "topic": "victim", "body": "the-secret-body", "delay_ms": 600000})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(
        &http,
        server.port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "dead-job", "topic": "victim", "body": 1, "max_attempts": 1})),
    )
    .await;
    assert_eq!(status, 201);
    let (_, out) = call(
        &http,
        server.port,
        "POST",
        "/v1/reserve",
        Some(json!({"topics": ["victim"], "timeout_ms": 5000})),
    )
    .await;
    let (status, _) = call(
        &http,
        server.port,
        "POST",
        "/v1/jobs/dead-job/nack",
        Some(json!({"receipt": out["jobs"][0]["receipt"]})),
    )
    .await;
    assert_eq!(status, 204);

    // The attacker's site.
    let page = attacker_page(&dq);
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move { axum::response::Html(page) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil = format!("http://localhost:{}/", listener.local_addr().unwrap().port());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dom = tokio::task::block_in_place(|| chromium(&evil, &["--dump-dom"]));
    assert!(dom.contains("done"), "the attacker's script ran to its end:\n{dom}");
    assert!(!dom.contains("the-secret-body"), "the page read a job:\n{dom}");
    assert!(!dom.contains("\"victim\""), "the page read the topics:\n{dom}");

    // Nothing changed.
    let (_, topic) = call(&http, server.port, "GET", "/v1/topics/victim", None).await;
    assert_eq!(topic["config"]["paused"], false, "paused by another site: {topic}");
    assert_eq!(topic["counts"]["ready"], 0, "{topic}");
    assert_eq!(topic["counts"]["delayed"], 1, "a job pushed by another site: {topic}");
    assert_eq!(topic["counts"]["dead"], 1, "requeued by another site: {topic}");
    let refused = common::metric_sum(server.port, "dq_auth_refusals_total").await;
    assert!(
        refused >= 4.0,
        "the cross-site requests reached dq and were refused there ({refused})"
    );

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
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (1200, 800));
    // A blank page compresses to a few hundred bytes; one with the page's text and tables does not.
    assert!(
        bytes.len() > 10_000,
        "the screenshot looks blank ({} bytes): {}",
        bytes.len(),
        png.display()
    );
    drop(shot);
}
