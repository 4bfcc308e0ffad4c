//! The admin pages clicked through in headless Chromium (WebDriver), as an operator uses them: log in,
//! find a job by id and run it now, read a dead job's attempts, select delayed jobs and delete them,
//! requeue every dead job, edit a topic's registration (and see a bad edit refused), and the read-only
//! mode. A screenshot of each page is kept as a test artefact (`browser/admin-*.png` under the tests'
//! temp dir; the copies in `docs/` come from it).

mod common;

use std::time::Duration;

use common::webdriver::{assert_screenshot, browser, keep_artefact, submit_login, wait_for_text};
use common::{call, env, start_on};
use dq_harness::{RedisServer, eventually, free_port};
use fantoccini::Locator;
use serde_json::{Value, json};

const TOKEN: &str = "operator-admin-token-0123456789";

/// A dq-server with an admin token (and `extra` settings), a client that sends the token, and seeded
/// jobs: 5 delayed, 2 ready, 2 dead, on topic `shop`.
async fn seeded(extra: &[(&'static str, &str)]) -> (RedisServer, common::Running, reqwest::Client) {
    let redis = RedisServer::start();
    let port = free_port();
    let mut vars = env(&[&redis], port);
    vars.push(("DQ__AUTH__ADMIN_TOKEN", TOKEN.into()));
    vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let server = start_on("dq-server", port, vars).await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().unwrap(),
    );
    let http = reqwest::Client::builder().default_headers(headers).build().unwrap();
    let p = server.port;
    call(
        &http,
        p,
        "PUT",
        "/v1/topics/shop",
        Some(json!({"retry": {"max_attempts": 3}})),
    )
    .await;
    for i in 0..5 {
        let job = json!({"topic": "shop", "id": format!("later-{i}"), "body": {"order": i}, "delay_ms": 3_600_000 + i * 1000});
        assert_eq!(call(&http, p, "POST", "/v1/jobs", Some(job)).await.0, 201);
    }
    for i in 0..2 {
        let job = json!({"topic": "shop", "id": format!("doomed-{i}"), "body": {"doomed": i}, "max_attempts": 1});
        call(&http, p, "POST", "/v1/jobs", Some(job)).await;
    }
    let (_, r) = call(
        &http,
        p,
        "POST",
        "/v1/reserve",
        Some(json!({"topics": ["shop"], "count": 10})),
    )
    .await;
    for job in r["jobs"].as_array().unwrap() {
        let path = format!("/v1/jobs/{}/nack", job["id"].as_str().unwrap());
        call(
            &http,
            p,
            "POST",
            &path,
            Some(json!({"receipt": job["receipt"], "error": "card declined"})),
        )
        .await;
    }
    for i in 0..2 {
        let job = json!({"topic": "shop", "id": format!("now-{i}"), "body": {"now": i}});
        call(&http, p, "POST", "/v1/jobs", Some(job)).await;
    }
    (redis, server, http)
}

async fn state_of(http: &reqwest::Client, port: u16, id: &str) -> Value {
    let (status, job) = call(http, port, "GET", &format!("/v1/jobs/{id}"), None).await;
    if status == 404 {
        json!("gone")
    } else {
        job["state"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_selects_acts_and_edits() {
    let (_redis, server, http) = seeded(&[]).await;
    let p = server.port;
    let dq = format!("http://127.0.0.1:{p}");
    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;

    client.goto(&format!("{dq}/admin")).await.unwrap();
    wait_for_text(&client, "Admin token").await;
    keep_artefact("admin-login.png", &client.screenshot().await.unwrap());
    submit_login(&client, TOKEN).await;
    wait_for_text(&client, "Find a job by id").await;
    keep_artefact(
        "admin-overview.png",
        &checked(&client.screenshot().await.unwrap(), "the overview"),
    );

    // Find a job by id, then run it now.
    let field = client.find(Locator::Css("input[name=id]")).await.unwrap();
    field.send_keys("later-0").await.unwrap();
    field.send_keys("\u{E007}").await.unwrap(); // Enter submits the form
    wait_for_text(&client, "Job later-0").await;
    keep_artefact(
        "admin-job.png",
        &checked(&client.screenshot().await.unwrap(), "a job's page"),
    );
    client
        .find(Locator::Css("button[data-body='{\"delay_ms\":0}']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "run now made later-0 ready", || async {
        state_of(&http, p, "later-0").await == "ready"
    })
    .await;

    // The delayed tab: select two jobs and delete them (the page asks first).
    client
        .goto(&format!("{dq}/admin/topics/shop?state=delayed"))
        .await
        .unwrap();
    wait_for_text(&client, "later-4").await;
    for id in ["later-1", "later-2"] {
        client
            .find(Locator::Css(&format!("input.pick[value='{id}']")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }
    keep_artefact(
        "admin-topic.png",
        &checked(&client.screenshot().await.unwrap(), "a topic's page"),
    );
    client
        .find(Locator::Css("button[data-call='DELETE /v1/jobs/{id}']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the page asks before deleting", || async {
        client.get_alert_text().await.is_ok()
    })
    .await;
    client.accept_alert().await.unwrap();
    eventually(Duration::from_secs(30), "the two selected jobs are deleted", || async {
        state_of(&http, p, "later-1").await == "gone" && state_of(&http, p, "later-2").await == "gone"
    })
    .await;
    assert_eq!(
        state_of(&http, p, "later-3").await,
        "delayed",
        "an unselected job stays"
    );

    // A dead job's page: its attempts, the nack that used its last one.
    client.goto(&format!("{dq}/admin/jobs/doomed-0")).await.unwrap();
    wait_for_text(&client, "Attempts").await;
    let row: Vec<String> = {
        let mut cells = Vec::new();
        for td in client.find_all(Locator::Css("table tr:nth-child(2) td")).await.unwrap() {
            cells.push(td.text().await.unwrap());
        }
        cells
    };
    assert_eq!((row[0].as_str(), row[1].as_str()), ("1", "nacked"), "{row:?}");
    assert_eq!(row[6], "card declined", "{row:?}");

    // The dead tab: select all, requeue.
    client
        .goto(&format!("{dq}/admin/topics/shop?state=dead"))
        .await
        .unwrap();
    wait_for_text(&client, "card declined").await;
    client
        .find(Locator::Css("input.pick-all"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The page reloads after a call succeeds: a mark on this page tells the reloaded one apart.
    client.execute("window.dqBefore = true;", vec![]).await.unwrap();
    client
        .find(Locator::Css("button[data-call='POST /v1/topics/shop/dead/requeue']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "both dead jobs requeued", || async {
        state_of(&http, p, "doomed-0").await == "ready" && state_of(&http, p, "doomed-1").await == "ready"
    })
    .await;
    eventually(Duration::from_secs(30), "the page reloaded", || async {
        let js = "return window.dqBefore === undefined && document.readyState === 'complete' \
                  && document.getElementById('registration') !== null;";
        client.execute(js, vec![]).await.is_ok_and(|v| v == json!(true))
    })
    .await;

    // The registration: a bad edit is refused with dq's message and changes nothing; a good one is saved.
    let editor = client.find(Locator::Css("textarea#registration")).await.unwrap();
    let set = |text: &str| {
        client.execute(
            "document.getElementById('registration').value = arguments[0];",
            vec![json!(text)],
        )
    };
    set(r#"{"retry": {"max_attempt": 9}}"#).await.unwrap();
    client
        .find(Locator::Css("button[data-body-from=registration]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the refusal is shown", || async {
        client.get_alert_text().await.is_ok_and(|t| t.contains("max_attempt"))
    })
    .await;
    client.accept_alert().await.unwrap();
    let (_, topic) = call(&http, p, "GET", "/v1/topics/shop", None).await;
    assert_eq!(
        topic["config"]["retry"]["max_attempts"], 3,
        "the bad edit changed nothing"
    );
    drop(editor);
    client.goto(&format!("{dq}/admin/topics/shop")).await.unwrap();
    wait_for_text(&client, "Registration").await;
    set(r#"{"retry": {"max_attempts": 7}, "defaults": {"ttr_ms": 45000}}"#)
        .await
        .unwrap();
    client
        .find(Locator::Css("button[data-body-from=registration]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the edit is saved", || async {
        let (_, topic) = call(&http, p, "GET", "/v1/topics/shop", None).await;
        topic["config"]["retry"]["max_attempts"] == 7 && topic["config"]["defaults"]["ttr_ms"] == 45000
    })
    .await;
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_admin_shows_and_changes_nothing() {
    let (_redis, server, http) = seeded(&[("DQ__SERVER__ADMIN_READ_ONLY", "true")]).await;
    let p = server.port;
    let dq = format!("http://127.0.0.1:{p}");
    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;
    client.goto(&format!("{dq}/admin")).await.unwrap();
    submit_login(&client, TOKEN).await;
    wait_for_text(&client, "read-only").await;
    client
        .goto(&format!("{dq}/admin/topics/shop?state=delayed"))
        .await
        .unwrap();
    wait_for_text(&client, "later-0").await;
    assert!(
        client
            .find_all(Locator::Css("button[data-call]"))
            .await
            .unwrap()
            .is_empty(),
        "no controls"
    );
    keep_artefact(
        "admin-read-only.png",
        &checked(&client.screenshot().await.unwrap(), "the read-only topic page"),
    );
    // The page's own origin, with the session cookie, cannot change anything either.
    let answer = client
        .execute_async(
            "fetch('/v1/jobs/later-0', {method: 'DELETE'}).then((r) => arguments[0](r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(answer, json!(403));
    assert_eq!(state_of(&http, p, "later-0").await, "delayed");
    client.close().await.unwrap();
}

/// The screenshot, checked not blank.
fn checked(png: &[u8], what: &str) -> Vec<u8> {
    assert_screenshot(png, None, what);
    png.to_vec()
}
