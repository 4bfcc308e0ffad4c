//! The `dq` command line as a user runs it, against a real dq-server and Redis: each command, its JSON
//! and its tables, flow keys (pushed, looked up, the busiest listed), a trace context (given, or taken
//! from `TRACEPARENT`), a job's attempts with the names
//! `--consumer` and `DQ_CONSUMER` gave, errors with a non-zero exit, completions, and `dq tail`
//! following a death.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::start;
use dq_harness::{RedisServer, bin_dir, eventually};
use serde_json::{Value, json};

/// Runs `dq args…` against the server on `port`.
fn dq(port: u16, args: &[&str]) -> Output {
    Command::new(bin_dir().join("dq"))
        .args(args)
        .env("DQ_URL", format!("http://127.0.0.1:{port}"))
        .env_remove("DQ_TOKEN")
        .env_remove("DQ_CONSUMER")
        .env_remove("TRACEPARENT")
        .env_remove("TRACESTATE")
        .output()
        .expect("dq runs")
}

/// Runs a command that must succeed; its standard output.
fn ok(port: u16, args: &[&str]) -> String {
    let out = dq(port, args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "dq {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a command with `--json`; its answer.
fn json_of(port: u16, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(port, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("dq {args:?} printed no JSON ({e}): {text}"))
}

/// Runs a command that must fail; its standard error.
fn fails(port: u16, args: &[&str]) -> String {
    let out = dq(port, args);
    assert!(!out.status.success(), "dq {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[tokio::test]
async fn jobs_from_push_to_ack() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;

    let pushed = json_of(
        p,
        &[
            "push",
            "orders",
            r#"{"order":42}"#,
            "--delay",
            "1h",
            "--max-attempts",
            "3",
            "--priority",
            "10",
        ],
    );
    let id = pushed["id"].as_str().unwrap().to_string();
    assert_eq!(pushed["state"], "delayed");
    let job = json_of(p, &["get", &id]);
    assert_eq!(
        (job["body"].clone(), job["max_attempts"].clone()),
        (json!({"order": 42}), json!(3))
    );
    // The human form names the fields.
    let text = ok(p, &["get", &id]);
    assert!(text.contains("state") && text.contains("delayed"), "{text}");
    assert!(text.contains("0 of 3"), "{text}");
    assert!(text.contains("priority") && text.contains("10"), "{text}");

    // A new priority alone keeps the job delayed; then due now.
    let job = json_of(p, &["reschedule", &id, "--priority", "3"]);
    assert_eq!(
        (job["priority"].clone(), job["state"].clone()),
        (json!(3), json!("delayed"))
    );
    assert_eq!(json_of(p, &["reschedule", &id, "--delay", "0"])["state"], "ready");
    let reserved = json_of(p, &["reserve", "orders", "--count", "5"]);
    let job = &reserved["jobs"][0];
    assert_eq!(job["id"], id.as_str());
    let receipt = job["receipt"].as_str().unwrap();
    assert!(
        json_of(p, &["touch", &id, receipt, "--ttr", "2m"])["deadline"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(ok(p, &["ack", &id, receipt]).contains("done"));
    assert_eq!(json_of(p, &["get", &id])["state"], "done");
    // A second ack: dq's error, non-zero exit.
    let e = fails(p, &["ack", &id, receipt]);
    assert!(e.contains("409 stale_receipt"), "{e}");

    // Body from a file, and a nack.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body.json");
    std::fs::write(&file, r#"{"from":"file"}"#).unwrap();
    let id2 = json_of(
        p,
        &["push", "orders", &format!("@{}", file.display()), "--id", "from-file"],
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(json_of(p, &["get", &id2])["body"], json!({"from": "file"}));
    let r = json_of(p, &["reserve", "orders"]);
    let receipt = r["jobs"][0]["receipt"].as_str().unwrap();
    ok(p, &["nack", &id2, receipt, "--delay", "1h", "--error", "no stock"]);
    let job = json_of(p, &["get", &id2]);
    assert_eq!(
        (job["state"].clone(), job["last_error"].clone()),
        (json!("delayed"), json!("no stock"))
    );
    ok(p, &["cancel", &id2]);
    assert!(fails(p, &["get", &id2]).contains("404 not_found"));

    // Two pushes of one merge key: one job with both items; the human form says the second coalesced.
    fn merge(n: &str) -> Vec<&str> {
        vec![
            "push",
            "digest",
            n,
            "--coalesce-key",
            "member-7",
            "--coalesce",
            "merge",
            "--window",
            "5m",
        ]
    }
    let first = json_of(p, &merge("1"));
    assert!(ok(p, &merge("2")).contains("coalesced"));
    let job = json_of(p, &["get", first["id"].as_str().unwrap()]);
    assert_eq!(job["body"], json!({"items": [1, 2]}));
    assert!(fails(p, &["push", "t", "1", "--coalesce-key", "k"]).contains("--coalesce"));

    // A topic's jobs by state.
    ok(
        p,
        &["push", "listed", r#"{"n":1}"#, "--id", "listed-1", "--delay", "1h"],
    );
    let listed = ok(p, &["jobs", "listed", "--state", "delayed"]);
    assert!(
        listed.contains("listed-1") && listed.contains("1 of 1 delayed jobs"),
        "{listed}"
    );
    assert_eq!(
        json_of(p, &["jobs", "listed", "-s", "delayed"])["jobs"][0]["id"],
        "listed-1"
    );
    assert!(fails(p, &["jobs", "listed", "--state", "done"]).contains("invalid value"));

    // The reserve table; an empty reserve says so.
    ok(p, &["push", "orders", "1"]);
    let table = ok(p, &["reserve", "orders"]);
    assert!(table.contains("receipt") && table.contains("orders"), "{table}");
    assert!(ok(p, &["reserve", "orders"]).contains("no job"));
}

/// The words of `text`'s line that names `key` (a table row, its borders dropped).
fn row_of<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == key))
        .unwrap_or_else(|| panic!("no row of {key}: {text}"));
    line.split_whitespace().filter(|w| *w != "│").collect()
}

#[tokio::test]
async fn flow_keys_pushed_looked_up_and_the_busiest_listed() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;
    let t = json_of(p, &["topics", "put", "sends", r#"{"flow":{"concurrency":2}}"#]);
    assert_eq!(t["config"]["flow"], json!({"concurrency": 2}));

    // dq makes a flow-keyed job's id; the job shows its key, in JSON and for people.
    let mut ids = Vec::new();
    for (n, key) in [(1, "acme"), (2, "acme"), (3, "acme"), (4, "globex")] {
        let pushed = json_of(p, &["push", "sends", &n.to_string(), "--flow-key", key]);
        ids.push(pushed["id"].as_str().unwrap().to_string());
    }
    assert_eq!(json_of(p, &["get", &ids[0]])["flow_key"], "acme");
    let text = ok(p, &["get", &ids[3]]);
    assert_eq!(row_of(&text, "flow_key"), ["flow_key", "globex"], "{text}");
    let plain = json_of(p, &["push", "sends", "5"]);
    let text = ok(p, &["get", plain["id"].as_str().unwrap()]);
    assert!(!text.contains("flow_key"), "a job without a key shows none: {text}");

    // The busiest keys: a table, and the count of keys with ready jobs.
    let text = ok(p, &["topics", "flows", "sends"]);
    assert_eq!(row_of(&text, "key"), ["key", "ready", "reserved"], "{text}");
    assert_eq!(row_of(&text, "acme"), ["acme", "3", "0"], "{text}");
    assert_eq!(row_of(&text, "globex"), ["globex", "1", "0"], "{text}");
    assert!(text.contains("2 flow keys with ready jobs\n"), "{text}");
    let text = ok(p, &["topics", "flows", "sends", "--limit", "1"]);
    assert!(!text.contains("globex"), "{text}");
    assert!(
        text.contains("2 flow keys with ready jobs; the 1 busiest shown"),
        "{text}"
    );
    assert_eq!(
        json_of(p, &["topics", "flows", "sends", "--limit", "1"]),
        json!({"keys": 2, "busiest": [{"key": "acme", "ready": 3, "reserved": 0}]})
    );
    // A page of jobs shows their keys in a column of its own.
    let text = ok(p, &["jobs", "sends"]);
    assert!(row_of(&text, "id").join(" ").contains("flow key"), "{text}");
    assert!(row_of(&text, &ids[3]).contains(&"globex"), "{text}");
    // A reserved job counts against its key (shown while the key has ready jobs left).
    let r = json_of(p, &["reserve", "sends", "-n", "10"]);
    let jobs = r["jobs"].as_array().unwrap();
    let acme = jobs.iter().filter(|j| j["flow_key"] == "acme").count() as u64;
    assert!(acme > 0, "{r}");
    let flows = json_of(p, &["topics", "flows", "sends"]);
    match flows["busiest"].as_array().unwrap().iter().find(|k| k["key"] == "acme") {
        Some(row) => assert_eq!(
            (row["ready"].as_u64(), row["reserved"].as_u64()),
            (Some(3 - acme), Some(acme))
        ),
        None => assert_eq!(acme, 3, "{flows}"),
    }

    assert_eq!(
        ok(p, &["topics", "flows", "quiet"]).trim(),
        "no flow key of quiet has ready jobs"
    );
    // A priority other than the default, and a key, in columns of their own; reserved, the key too.
    json_of(p, &["push", "other", "7", "--flow-key", "initech", "--priority", "5"]);
    let text = ok(p, &["jobs", "other"]);
    assert!(row_of(&text, "id").join(" ").contains("priority flow key"), "{text}");
    let text = ok(p, &["reserve", "other"]);
    assert!(row_of(&text, "id").join(" ").contains("flow key"), "{text}");
    assert!(text.contains("initech"), "{text}");
    // A job in a trace: `--traceparent` (or `TRACEPARENT`), shown by `get`.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = json_of(
        p,
        &[
            "push",
            "sends",
            "6",
            "--traceparent",
            tp,
            "--tracestate",
            "congo=t61rcWkgMzE",
        ],
    );
    let text = ok(p, &["get", traced["id"].as_str().unwrap()]);
    assert_eq!(row_of(&text, "traceparent"), ["traceparent", tp], "{text}");
    assert_eq!(
        row_of(&text, "tracestate"),
        ["tracestate", "congo=t61rcWkgMzE"],
        "{text}"
    );
    let from_env = Command::new(bin_dir().join("dq"))
        .args(["--json", "push", "sends", "7"])
        .env("DQ_URL", format!("http://127.0.0.1:{p}"))
        .env("TRACEPARENT", tp)
        .env_remove("TRACESTATE")
        .output()
        .unwrap();
    let pushed: Value = serde_json::from_slice(&from_env.stdout).unwrap();
    assert_eq!(json_of(p, &["get", pushed["id"].as_str().unwrap()])["traceparent"], tp);
    assert!(fails(p, &["push", "sends", "1", "--traceparent", "00-1-2-3"]).contains("400 invalid_argument"));
    assert!(fails(p, &["push", "sends", "1", "--tracestate", "k=v"]).contains("--traceparent"));
    // dq's 400s: a bad key, a limit out of range.
    assert!(fails(p, &["push", "sends", "1", "--flow-key", "no spaces"]).contains("400 invalid_argument"));
    assert!(fails(p, &["topics", "flows", "sends", "--limit", "0"]).contains("400 invalid_argument"));
}

/// A fan-out's push, a job's graph as `dq get` shows it, and `dq ack --push`.
#[tokio::test]
async fn a_fan_out_and_an_ack_that_pushes() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;
    ok(p, &["topics", "put", "paid", r#"{"fanout":["mail","ledger"]}"#]);
    let pushed = json_of(p, &["push", "paid", r#"{"order":1}"#, "--id", "o-1"]);
    assert_eq!(pushed["children"][1]["id"], "o-1~ledger");
    let text = ok(p, &["get", "o-1"]);
    assert!(text.contains("o-1~mail (mail, ready)"), "{text}");
    let job = json_of(p, &["reserve", "mail"]);
    let receipt = job["jobs"][0]["receipt"].as_str().unwrap().to_string();
    let next = r#"[{"topic":"receipt","body":{"order":1},"delay_ms":600000}]"#;
    let text = ok(p, &["ack", "o-1~mail", &receipt, "--push", next]);
    assert!(text.contains("pushed o-1~mail~0 (receipt)"), "{text}");
    let text = ok(p, &["get", "o-1~mail~0"]);
    assert!(text.contains("parent") && text.contains("o-1~mail"), "{text}");
    let err = fails(p, &["ack", "o-1~ledger", "x", "--push", "{}"]);
    assert!(err.contains("--push"), "{err}");
}

#[tokio::test]
async fn a_jobs_attempts_with_the_consumers_names() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;
    ok(p, &["push", "tries", r#"{"n":1}"#, "--id", "tried"]);
    assert!(ok(p, &["get", "tried", "--attempts"]).ends_with("no delivery yet\n"));

    // A nack named by `--consumer` (no delay: straight back to ready), then an ack named by DQ_CONSUMER.
    let first = json_of(p, &["reserve", "tries"]);
    let stale = first["jobs"][0]["receipt"].as_str().unwrap().to_string();
    ok(
        p,
        &[
            "nack",
            "tried",
            &stale,
            "--delay",
            "0",
            "--error",
            "no stock\nat line 2",
            "--consumer",
            "w1",
        ],
    );
    let second = json_of(p, &["reserve", "tries", "--wait", "20s"]);
    let acked = Command::new(bin_dir().join("dq"))
        .args(["ack", "tried", second["jobs"][0]["receipt"].as_str().unwrap()])
        .env("DQ_URL", format!("http://127.0.0.1:{p}"))
        .env("DQ_CONSUMER", "w2")
        .output()
        .unwrap();
    assert!(acked.status.success(), "{}", String::from_utf8_lossy(&acked.stderr));

    // --json: the API's answer, newest first.
    let seen = json_of(p, &["get", "tried", "--attempts"]);
    assert_eq!(
        (seen["id"].clone(), seen["attempts"].clone()),
        (json!("tried"), json!(2))
    );
    let history = seen["history"].as_array().unwrap();
    let summary: Vec<_> = history
        .iter()
        .map(|a| {
            (
                a["attempt"].clone(),
                a["outcome"].clone(),
                a["consumer"].clone(),
                a["error"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (json!(2), json!("acked"), json!("w2"), Value::Null),
            (json!(1), json!("nacked"), json!("w1"), json!("no stock\nat line 2")),
        ]
    );

    // For people: the job's fields, then one line per attempt, newest first, the error on its line.
    let text = ok(p, &["get", "tried", "--attempts"]);
    assert_eq!(row_of(&text, "state"), ["state", "done"], "{text}");
    assert_eq!(
        row_of(&text, "outcome"),
        [
            "#", "outcome", "started", "duration", "status", "consumer", "error", "/", "answer"
        ],
        "{text}"
    );
    let (newest, oldest) = (row_of(&text, "acked"), row_of(&text, "nacked"));
    assert_eq!(
        (newest[0], newest[5], newest[6], newest[7]),
        ("2", "-", "w2", "-"),
        "{text}"
    );
    assert_eq!(
        (oldest[0], &oldest[5..]),
        ("1", &["-", "w1", "no", "stock", "at", "line", "2"][..]),
        "{text}"
    );
    let started = |row: &[&str]| format!("{} {}", row[2], row[3]);
    assert!(started(&newest) >= started(&oldest), "{text}");
    assert!(
        text.find("acked").unwrap() > text.find("body").unwrap(),
        "the job first: {text}"
    );
    assert!(
        text.find(" acked ").unwrap() < text.find(" nacked ").unwrap(),
        "newest first: {text}"
    );

    // dq's refusals: no such job; a name longer than 128 characters reaches dq and is refused.
    assert!(fails(p, &["get", "nope", "--attempts"]).contains("404 not_found"));
    let long = "w".repeat(129);
    assert!(fails(p, &["ack", "tried", &stale, "--consumer", &long]).contains("400 invalid_argument"));
}

#[tokio::test]
async fn bad_input_is_refused_with_a_message() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;
    // Not JSON: the CLI says how to quote a string; nothing is sent.
    assert!(fails(p, &["push", "t", "hello"]).contains("not JSON"));
    // dq's own 400, with its message.
    let e = fails(p, &["push", "bad topic", "1"]);
    assert!(e.contains("400 invalid_argument"), "{e}");
    // clap refuses a bad duration and a missing choice.
    assert!(fails(p, &["push", "t", "1", "--delay", "5 weeks"]).contains("unknown unit"));
    assert!(fails(p, &["reschedule", "x"]).contains("--priority"));
    assert!(fails(p, &["push", "t", "1", "--priority", "-1"]).contains("-1"));
    assert!(fails(p, &["push", "t", "1", "--priority", "4294967296"]).contains("--priority"));
    // Deleting needs ids or `--all`: never all by accident.
    assert!(fails(p, &["dead", "rm", "t"]).contains("<IDS>"));
    assert_eq!(json_of(p, &["stats"])["topics"], json!({}), "nothing was written");
    // No server: a connection error, not a panic.
    let out = Command::new(bin_dir().join("dq"))
        .args(["--url", "http://127.0.0.1:1", "stats"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("could not connect"));
}

#[tokio::test]
async fn topics_dead_schedules_stats_and_completions() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;

    let t = json_of(
        p,
        &[
            "topics",
            "put",
            "mail",
            r#"{"retry":{"max_attempts":1},"defaults":{"ttr_ms":60000}}"#,
        ],
    );
    assert_eq!(t["config"]["retry"]["max_attempts"], 1);
    assert_eq!(json_of(p, &["topics", "pause", "mail"])["config"]["paused"], true);
    assert!(ok(p, &["topics", "ls"]).contains("paused"));
    assert_eq!(json_of(p, &["topics", "resume", "mail"])["config"]["paused"], false);
    assert!(fails(p, &["topics", "put", "mail", r#"{"retry":{"max_attempt":1}}"#]).contains("max_attempt"));

    for i in 0..3 {
        ok(p, &["push", "mail", &i.to_string(), "--id", &format!("m-{i}")]);
    }
    let r = json_of(p, &["reserve", "mail", "-n", "3"]);
    for job in r["jobs"].as_array().unwrap() {
        ok(
            p,
            &[
                "nack",
                job["id"].as_str().unwrap(),
                job["receipt"].as_str().unwrap(),
                "--error",
                "smtp down",
            ],
        );
    }
    let dead = ok(p, &["dead", "ls", "mail"]);
    assert!(
        dead.contains("smtp down") && dead.contains("3 of 3 dead jobs"),
        "{dead}"
    );
    assert_eq!(json_of(p, &["dead", "requeue", "mail", "m-0"])["requeued"], 1);
    assert_eq!(json_of(p, &["dead", "rm", "mail", "--all"])["deleted"], 2);
    let stats = ok(p, &["stats"]);
    assert!(stats.contains("standalone") && stats.contains("mail"), "{stats}");
    ok(p, &["topics", "rm", "mail"]);

    let s = json_of(
        p,
        &[
            "schedules",
            "put",
            "nightly",
            r#"{"cron":"0 3 * * *","timezone":"Asia/Tokyo","topic":"mail","body":{"k":1}}"#,
        ],
    );
    assert!(s["next_fire_at"].as_u64().is_some());
    assert!(ok(p, &["schedules", "ls"]).contains("Asia/Tokyo"));
    assert!(json_of(p, &["schedules", "pause", "nightly"])["next_fire_at"].is_null());
    ok(p, &["schedules", "resume", "nightly"]);
    ok(p, &["schedules", "rm", "nightly"]);
    assert!(fails(p, &["schedules", "get", "nightly"]).contains("404"));

    for shell in ["bash", "zsh"] {
        let script = ok(p, &["completions", shell]);
        assert!(
            script.contains("dq") && script.contains("reschedule"),
            "{shell} completion"
        );
    }
}

#[tokio::test]
async fn tail_follows_counts_and_deaths() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let p = server.port;
    let mut tail = Command::new(bin_dir().join("dq"))
        .args(["tail", "--every", "200ms", "watched"])
        .env("DQ_URL", format!("http://127.0.0.1:{p}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    ok(p, &["push", "watched", "1", "--id", "doomed", "--max-attempts", "1"]);
    let mut seen = Vec::new();
    let read = |seen: &mut Vec<String>| {
        while let Ok(line) = lines_rx.try_recv() {
            seen.push(line);
        }
    };
    eventually(Duration::from_secs(20), "tail shows the ready job", || {
        read(&mut seen);
        let found = seen.iter().any(|l| l.contains("watched:") && l.contains("ready 1"));
        async move { found }
    })
    .await;
    let r = json_of(p, &["reserve", "watched"]);
    ok(
        p,
        &[
            "nack",
            "doomed",
            r["jobs"][0]["receipt"].as_str().unwrap(),
            "--error",
            "gave up",
        ],
    );
    eventually(Duration::from_secs(20), "tail shows the death", || {
        read(&mut seen);
        let found = seen.iter().any(|l| l.contains("DEAD doomed") && l.contains("gave up"));
        async move { found }
    })
    .await;
    tail.kill().unwrap();
    let _ = tail.wait();
    assert!(seen.iter().any(|l| l.contains("dead 1 (+1)")), "{seen:?}");
}
