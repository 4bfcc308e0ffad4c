//! The admin's topic and job pages: jobs by state with their counts, a filter on the page's bodies,
//! paging, the search by id, a job's fields, attempts and actions; a topic's flow limits and busiest
//! flow keys, a job's flow key and trace; the read-only mode; bad queries refused.

mod common;

use common::{TestServer, assert_error, settings};
use dq_harness::RedisServer;
use serde_json::json;

#[tokio::test]
async fn a_topics_jobs_by_state_filtered_and_paged() {
    let s = TestServer::start().await;
    for i in 0..60 {
        s.push(json!({"topic": "shop", "id": format!("late-{i:02}"), "body": {"n": i, "who": if i % 2 == 0 { "alice" } else { "bob" }}, "delay_ms": 3_600_000 + i * 1000})).await;
    }
    s.push(json!({"topic": "shop", "id": "now-1", "body": {"who": "carol"}}))
        .await;

    // Without a state, the first tab with jobs: ready. Counts on the tabs.
    let html = s.text("/admin/topics/shop").await;
    assert!(html.contains(r#"class="on">ready 1</a>"#), "{html}");
    assert!(html.contains(">delayed 60</a>"), "{html}");
    assert!(html.contains(r#"href="/admin/jobs/now-1""#), "{html}");

    // The delayed tab: the first 50 by due time, a link to the next page.
    let html = s.text("/admin/topics/shop?state=delayed").await;
    assert!(html.contains(r#"href="/admin/jobs/late-00""#) && html.contains(r#"href="/admin/jobs/late-49""#));
    assert!(!html.contains(r#"href="/admin/jobs/late-50""#), "50 a page");
    assert!(html.contains("Jobs 1–50 of 60."), "{html}");
    assert!(
        html.contains("state=delayed&amp;offset=50"),
        "a link to the next page: {html}"
    );
    let html = s.text("/admin/topics/shop?state=delayed&offset=50").await;
    assert!(html.contains(r#"href="/admin/jobs/late-50""#) && html.contains(r#"href="/admin/jobs/late-59""#));
    assert!(html.contains("state=delayed&amp;offset=0"), "a link back: {html}");

    // The body filter keeps the page's jobs whose body holds the text.
    let html = s.text("/admin/topics/shop?state=delayed&q=bob").await;
    assert!(html.contains("25 of this page's 50 hold “bob”."), "{html}");
    assert!(html.contains(r#"href="/admin/jobs/late-01""#) && !html.contains(r#"href="/admin/jobs/late-00""#));

    // Actions on the selected delayed jobs: run now, delete.
    assert!(html.contains(r#"data-call="PATCH /v1/jobs/{id}" data-each"#), "{html}");

    // Bad queries: a clear 400, as JSON.
    for q in ["state=done", "state=bogus", "offset=x", "offset=2000000", "colour=red"] {
        let (status, body) = s.call("GET", &format!("/admin/topics/shop?{q}"), None).await;
        assert_error(status, &body, 400, "invalid_argument");
    }
}

#[tokio::test]
async fn a_jobs_page_and_the_search_by_id() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "shop", "id": "order:42", "body": {"order": 42, "note": "<b>fragile</b>"}, "delay_ms": 60_000, "max_attempts": 3})).await;
    let html = s.text("/admin/jobs/order:42").await;
    for want in [
        "delayed",
        "0 of 3",
        r#"href="/admin/topics/shop""#,
        "&lt;b&gt;fragile&lt;/b&gt;",
    ] {
        assert!(html.contains(want), "{want}: {html}");
    }
    assert!(
        html.contains(r#"data-call="PATCH /v1/jobs/order:42" data-body="{&quot;delay_ms&quot;:0}""#),
        "run now: {html}"
    );
    assert!(html.contains(r#"data-delay-from="delay-s""#), "reschedule: {html}");
    assert!(
        html.contains(r#"data-call="DELETE /v1/jobs/order:42""#),
        "delete: {html}"
    );

    // The search goes to the job's page.
    let answer = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(s.url("/admin/jobs?id=order:42"))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_redirection());
    assert_eq!(answer.headers()["location"], "/admin/jobs/order:42");

    let (status, body) = s.call("GET", "/admin/jobs/nope", None).await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = s.call("GET", "/admin/jobs?id=bad%20id", None).await;
    assert_error(status, &body, 400, "invalid_argument");
    let (status, body) = s.call("GET", "/admin/jobs", None).await;
    assert_error(status, &body, 400, "invalid_argument");
}

/// A job's attempts on its page: a pull worker's nack, then a callback's answered ack, newest first,
/// every text from elsewhere escaped and a long answer shortened.
#[tokio::test]
async fn a_jobs_page_lists_its_attempts_newest_first() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "shop", "id": "tried", "body": 1})).await;
    let html = s.text("/admin/jobs/tried").await;
    assert!(
        html.contains("<h2>Attempts</h2><p class=\"note\">No delivery yet.</p>"),
        "{html}"
    );

    let first = s.reserve(&["shop"], 1, 0).await;
    let nack = json!({"receipt": first[0]["receipt"], "delay_ms": 0, "error": "<b>no stock</b>", "consumer": "w<1>"});
    let (status, out) = s.call("POST", "/v1/jobs/tried/nack", Some(nack)).await;
    assert_eq!(status, 204, "{out}");
    // The second attempt as dq-consumer ends one: with the callback's status and answer.
    let second = s.reserve(&["shop"], 1, 20_000).await;
    let queue = dq_core::Queue::connect(&settings(&s.redis)).await.unwrap();
    let note = dq_core::attempt::Note {
        status: Some(200),
        answer: Some(format!("<i>{}</i>", "x".repeat(300))),
        consumer: Some("host:7".into()),
        ..Default::default()
    };
    queue
        .reservations()
        .ack_noting("tried", second[0]["receipt"].as_str().unwrap(), &note)
        .await
        .unwrap();

    let html = s.text("/admin/jobs/tried").await;
    let shown = format!("&lt;i&gt;{}…", "x".repeat(116));
    let newest = r#"<td class="num">2</td><td>acked</td>"#;
    let newest_rest = format!(
        r#"<td class="num">200</td><td><code>host:7</code></td><td></td><td title="&lt;i&gt;{}&lt;/i&gt;"><code>{shown}</code></td>"#,
        "x".repeat(300)
    );
    let oldest = r#"<td class="num">1</td><td class="down">nacked</td>"#;
    let oldest_rest =
        r#"<td class="num"></td><td><code>w&lt;1&gt;</code></td><td>&lt;b&gt;no stock&lt;/b&gt;</td><td></td>"#;
    for want in [newest, &newest_rest, oldest, oldest_rest] {
        assert!(html.contains(want), "{want}: {html}");
    }
    assert!(
        html.find(newest).unwrap() < html.find(oldest).unwrap(),
        "newest first: {html}"
    );
    assert!(
        !html.contains("<b>no stock") && !html.contains("<i>x"),
        "escaped: {html}"
    );
    assert!(!html.contains("The newest"), "every attempt is kept: {html}");
}

/// What a job's page leaves out says so: attempts past the newest 20, and attempts not kept at all
/// (`jobs.attempt_history` off).
#[tokio::test]
async fn a_jobs_page_says_which_attempts_it_leaves_out() {
    let s = TestServer::start().await;
    s.push(json!({"topic": "flaky", "id": "often", "body": 1, "max_attempts": 0}))
        .await;
    for _ in 0..21 {
        let r = s.reserve(&["flaky"], 1, 20_000).await;
        let nack = json!({"receipt": r[0]["receipt"], "delay_ms": 0});
        assert_eq!(s.call("POST", "/v1/jobs/often/nack", Some(nack)).await.0, 204);
    }
    let html = s.text("/admin/jobs/often").await;
    assert!(html.contains("The newest 20 of 21 attempts."), "{html}");
    assert!(html.contains(r#"<td class="num">21</td><td class="down">nacked</td>"#));
    assert!(
        !html.contains(r#"<td class="num">1</td><td class="down">"#),
        "the oldest is dropped: {html}"
    );

    let redis = vec![RedisServer::start()];
    let mut conf = settings(&redis);
    conf.jobs.attempt_history = false;
    let s = TestServer::with_settings(redis, conf).await;
    s.push(json!({"topic": "quiet", "id": "unkept", "body": 1})).await;
    let r = s.reserve(&["quiet"], 1, 0).await;
    let ack = json!({"receipt": r[0]["receipt"]});
    assert_eq!(s.call("POST", "/v1/jobs/unkept/ack", Some(ack)).await.0, 204);
    let html = s.text("/admin/jobs/unkept").await;
    assert!(
        html.contains("1 delivery, not on record (see <code>jobs.attempt_history</code>)."),
        "{html}"
    );
}

#[tokio::test]
async fn a_topics_flow_limits_and_busiest_keys_and_a_jobs_flow_key() {
    let s = TestServer::start().await;
    let (status, out) = s
        .call(
            "PUT",
            "/v1/topics/sends",
            Some(json!({"flow": {"concurrency": 2, "rate_per_s": 2.5}})),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    // 12 keys, key-k with k + 1 ready jobs: the page lists the 10 busiest.
    let mut ids = std::collections::HashMap::new();
    for k in 0..12 {
        for n in 0..=k {
            let pushed = s
                .push(json!({"topic": "sends", "body": {"k": k, "n": n}, "flow_key": format!("key-{k:02}")}))
                .await;
            ids.insert(k, pushed["id"].as_str().unwrap().to_string());
        }
    }
    let html = s.text("/admin/topics/sends").await;
    assert!(
        html.contains(
            "Limits on each key: concurrency 2 · rate 2.5 per s · burst 3 (the default: a second of the rate)"
        ),
        "{html}"
    );
    assert!(html.contains("12 flow keys have ready jobs. The 10 busiest:"), "{html}");
    let row = |k: usize, ready: usize, reserved: usize| {
        format!(r#"<td><code>key-{k:02}</code></td><td class="num">{ready}</td><td class="num">{reserved}</td>"#)
    };
    for k in 2..12 {
        assert!(html.contains(&row(k, k + 1, 0)), "key-{k:02}: {html}");
    }
    assert!(
        !html.contains("<code>key-01</code>") && !html.contains("<code>key-00</code>"),
        "{html}"
    );
    let at = |k: usize| html.find(&format!("<code>key-{k:02}</code>")).unwrap();
    assert!(at(11) < at(10) && at(10) < at(2), "the busiest first");

    // Reserved jobs count against their keys.
    let reserved = s.reserve(&["sends"], 100, 0).await;
    let of = |k: usize| {
        reserved
            .iter()
            .filter(|j| j["flow_key"] == format!("key-{k:02}"))
            .count()
    };
    assert!(of(11) > 0, "{reserved:?}");
    let html = s.text("/admin/topics/sends").await;
    assert!(html.contains(&row(11, 12 - of(11), of(11))), "{html}");

    // A job's page shows its key; one without a key shows none.
    let html = s.text(&format!("/admin/jobs/{}", ids[&3])).await;
    assert!(html.contains("<dt>flow key</dt><dd><code>key-03</code></dd>"), "{html}");
    s.push(json!({"topic": "plain", "id": "unkeyed", "body": 1})).await;
    let html = s.text("/admin/jobs/unkeyed").await;
    assert!(!html.contains("flow key") && !html.contains("trace"), "{html}");
    // A job in a trace shows it, its trace id first (what a tracing UI searches by).
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    s.push(json!({"topic": "plain", "id": "traced", "body": 1, "traceparent": tp, "tracestate": "congo=x"}))
        .await;
    let html = s.text("/admin/jobs/traced").await;
    assert!(
        html.contains("<dt>trace id</dt><dd><code>4bf92f3577b34da6a3ce929d0e0e4736</code></dd>"),
        "{html}"
    );
    assert!(
        html.contains(&format!("<dt>traceparent</dt><dd><code>{tp}</code></dd>")),
        "{html}"
    );
    assert!(
        html.contains("<dt>tracestate</dt><dd><code>congo=x</code></dd>"),
        "{html}"
    );
    // A topic without a flow section or keys says so.
    let html = s.text("/admin/topics/plain").await;
    assert!(html.contains("No flow limits registered"), "{html}");
    assert!(html.contains("No flow key has ready jobs."), "{html}");
}

#[tokio::test]
async fn a_registration_read_and_sent_back_keeps_its_secrets() {
    let s = TestServer::start().await;
    let config =
        json!({"callback": {"url": "http://u:pw@127.0.0.1:9/hook", "secret": "s3cr3t", "headers": {"X-Key": "k"}}});
    let (status, _) = s.call("PUT", "/v1/topics/signed", Some(config)).await;
    assert_eq!(status, 200);
    // What the admin's editor holds: the registration as GET shows it, edited.
    let (_, shown) = s.call("GET", "/v1/topics/signed", None).await;
    let mut edited = shown["config"].clone();
    assert_eq!(edited["callback"]["secret"], "***");
    edited["callback"]["timeout_ms"] = json!(1234);
    let (status, out) = s.call("PUT", "/v1/topics/signed", Some(edited)).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["config"]["callback"]["timeout_ms"], 1234);
    // Stored as they were (the registry holds them in clear without secrets.keys).
    let stored: String = redis::cmd("HGET")
        .arg("{dq}:topics")
        .arg("signed")
        .query(&mut s.redis[0].conn())
        .unwrap();
    for kept in ["s3cr3t", "\"k\"", "u:pw@"] {
        assert!(stored.contains(kept), "{kept}: {stored}");
    }
    // A mask with nothing stored behind it is refused, and writes nothing.
    let before = s.snapshot();
    let (status, body) = s
        .call(
            "PUT",
            "/v1/topics/fresh",
            Some(json!({"callback": {"url": "http://127.0.0.1:9/", "secret": "***"}})),
        )
        .await;
    assert_error(status, &body, 400, "invalid_argument");
    assert!(body["error"]["message"].as_str().unwrap().contains("callback.secret"));
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn read_only_pages_show_no_controls_and_their_changes_are_refused() {
    let redis = vec![RedisServer::start()];
    let mut conf = settings(&redis);
    conf.auth.admin_token = Some("root".into());
    conf.server.admin_read_only = true;
    let s = TestServer::with_settings(redis, conf).await;
    let bearer = |r: reqwest::RequestBuilder| r.header("authorization", "Bearer root");
    let pushed = bearer(s.http.post(s.url("/v1/jobs")))
        .json(&json!({"topic": "t", "id": "keep", "body": 1, "delay_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(pushed.status(), 201);
    for path in ["/admin", "/admin/topics/t?state=delayed", "/admin/jobs/keep"] {
        let html = s
            .http
            .get(s.url(path))
            .header("cookie", "dq_token=root")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(html.contains("read-only"), "{path}: {html}");
        assert!(
            !html.contains("data-call") && !html.contains("<textarea"),
            "{path} has controls: {html}"
        );
    }
    // A change with the login's cookie, or from a page of this origin, is refused; the job stays.
    for header in [("cookie", "dq_token=root"), ("sec-fetch-site", "same-origin")] {
        let answer = s.http.delete(s.url("/v1/jobs/keep")).header(header.0, header.1);
        let answer = if header.0 == "cookie" {
            answer
        } else {
            answer.header("cookie", "dq_token=root")
        };
        let answer = answer.send().await.unwrap();
        assert_eq!(answer.status(), 403, "{header:?}");
        let body: serde_json::Value = answer.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("server.admin_read_only")
        );
    }
    let (status, job) = {
        let r = bearer(s.http.get(s.url("/v1/jobs/keep"))).send().await.unwrap();
        (r.status(), r.json::<serde_json::Value>().await.unwrap())
    };
    assert_eq!((status.as_u16(), job["state"].as_str()), (200, Some("delayed")));
    // A token in the Authorization header still changes things.
    let answer = bearer(s.http.delete(s.url("/v1/jobs/keep"))).send().await.unwrap();
    assert_eq!(answer.status(), 204);
}

/// A job's graph on its page: a fan-out's parent lists its children with their states, each linked;
/// a child links back to its parent.
#[tokio::test]
async fn a_jobs_page_draws_its_graph() {
    let s = TestServer::start().await;
    let (status, _) = s
        .call("PUT", "/v1/topics/paid", Some(json!({"fanout": ["mail", "ledger"]})))
        .await;
    assert!(status.is_success());
    s.push(json!({"topic": "paid", "id": "o-1", "body": 1, "delay_ms": 60_000}))
        .await;
    let html = s.text("/admin/jobs/o-1").await;
    assert!(html.contains("<h2>Graph</h2>"), "{html}");
    for child in ["mail", "ledger"] {
        let row = format!(
            r#"<td><a href="/admin/jobs/o-1~{child}"><code>o-1~{child}</code></a></td><td>{child}</td><td>delayed</td>"#
        );
        assert!(html.contains(&row), "{row}: {html}");
    }
    let html = s.text("/admin/jobs/o-1~mail").await;
    assert!(
        html.contains(r#"Started by <a href="/admin/jobs/o-1"><code>o-1</code></a>"#),
        "{html}"
    );
    // A job without a graph shows none.
    s.push(json!({"topic": "plain", "id": "alone", "body": 1})).await;
    assert!(!s.text("/admin/jobs/alone").await.contains("<h2>Graph</h2>"));
}
