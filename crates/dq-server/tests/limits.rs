//! The server's limits: header timeout (idle and slow connections closed), the connection cap, the
//! long-poll cap, and a body refused by its `Content-Length` before it is read.

mod common;

use std::time::Duration;

use common::{TestServer, assert_error, settings};
use dq_harness::RedisServer;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn server_with(edit: impl FnOnce(&mut dq_core::Settings)) -> TestServer {
    let redis = vec![RedisServer::start()];
    let mut s = settings(&redis);
    edit(&mut s);
    TestServer::with_settings(redis, s).await
}

async fn connect(s: &TestServer) -> TcpStream {
    TcpStream::connect(s.base.trim_start_matches("http://")).await.unwrap()
}

/// Reads until the server closes the connection (or resets it); what it sent before. Panics after 20 s.
async fn read_until_closed(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), conn.read(&mut buf)).await {
            Err(_) => panic!(
                "the connection is still open after 20 s; got so far: {:?}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&out).into_owned(),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// The JSON body of a raw HTTP/1.1 answer (no chunked encoding: ours carry a `Content-Length`).
fn json_of(answer: &str) -> Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"))
}

#[tokio::test]
async fn idle_and_slow_connections_are_closed_after_the_header_timeout() {
    let s = server_with(|s| s.server.header_timeout_ms = 300).await;

    // Opened and never used.
    let mut idle = connect(&s).await;
    assert_eq!(read_until_closed(&mut idle).await, "");

    // Kept alive after an answer, then idle.
    let mut kept = connect(&s).await;
    let host = s.base.trim_start_matches("http://").to_string();
    kept.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_until_closed(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Slowloris: a request head sent a byte at a time, never finished. The server must close the
    // connection while the sender still has bytes to send (the head below would take 60 s).
    let mut slow = connect(&s).await;
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nX-Padding: {}",
        "a".repeat(600)
    );
    let mut closed = false;
    for byte in head.as_bytes() {
        if slow.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        // A closed connection shows as a read of 0 (or an error) before the next write fails.
        let mut buf = [0u8; 256];
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await {
            match r {
                Ok(0) | Err(_) => {
                    closed = true;
                    break;
                }
                Ok(_) => {}
            }
        }
    }
    assert!(closed, "a head trickled over 60 s was still being read");

    // The server still serves (on a new connection: the client's pooled one was closed as idle).
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let status = fresh.get(s.url("/healthz")).send().await.unwrap().status();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn connections_beyond_the_cap_get_a_503_and_are_closed() {
    let s = server_with(|s| s.server.max_connections = 2).await;
    // The test's own HTTP client keeps a connection alive: stop it holding a place.
    let host = s.base.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    // Two connections hold the places (the client's pooled one may hold one of them for a while, so
    // keep opening until one is refused).
    let refused = 'open: {
        for _ in 0..4 {
            let mut c = connect(&s).await;
            c.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
                .await
                .expect("an answer")
                .unwrap();
            let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
            if answer.starts_with("HTTP/1.1 503") {
                let rest = read_until_closed(&mut c).await;
                break 'open answer + &rest;
            }
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            held.push(c);
        }
        panic!("four connections were all served with a cap of two");
    };
    let lower = refused.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 1"), "{refused}");
    let body = json_of(&refused);
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.max_connections")
    );

    // A place freed is a place taken again.
    held.clear();
    dq_harness::eventually(Duration::from_secs(10), "a new connection is served", || async {
        let Ok(mut c) = TcpStream::connect(&host).await else {
            return false;
        };
        if c.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .is_err()
        {
            return false;
        }
        read_until_closed(&mut c).await.starts_with("HTTP/1.1 200")
    })
    .await;
}

/// The servers of this file's tests share one process, so one `dq_long_polls_waiting` gauge: the tests
/// that count long polls by it take turns.
static LONG_POLL_GAUGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn long_polls_beyond_the_cap_get_a_503_and_the_rest_still_get_jobs() {
    let _turn = LONG_POLL_GAUGE.lock().await;
    let s = server_with(|s| s.server.max_long_polls = 2).await;
    let reserve = json!({"topics": ["capped"], "timeout_ms": 20_000});
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (http, url, body) = (s.http.clone(), s.url("/v1/reserve"), reserve.clone());
            tokio::spawn(async move {
                http.post(url)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    s.wait_for_metric("dq_long_polls_waiting 2").await;
    let (status, body) = s
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["capped"], "timeout_ms": 100})),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.max_long_polls")
    );
    // A reserve that does not wait is not capped.
    let (status, body) = s
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["capped"], "timeout_ms": 0})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The waiting ones are served.
    s.push(json!({"topic": "capped", "body": 1})).await;
    s.push(json!({"topic": "capped", "body": 2})).await;
    let mut got = 0;
    for w in waiting {
        got += w.await.unwrap()["jobs"].as_array().unwrap().len();
    }
    assert_eq!(got, 2);
}

/// Every route that takes a body (each one of the served document, and the admin login form), over
/// HTTP/1.1 and HTTP/2, with no token, a wrong one and the right one: a `Content-Length` over the limit
/// is answered 413 from the request head alone, before any of the body is sent, and nothing is written.
#[tokio::test]
async fn a_body_too_large_is_refused_by_its_content_length_before_it_is_sent() {
    let s = server_with(|s| s.auth.admin_token = Some("limits-token".into())).await;
    let before = s.snapshot();
    let (_, doc) = s.call("GET", "/openapi.json", None).await;
    let mut routes = vec![("POST".to_string(), "/admin/login".to_string())];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if op["requestBody"].is_object() {
                let path = path.replace("{id}", "j").replace("{topic}", "t").replace("{name}", "n");
                routes.push((method.to_uppercase(), path));
            }
        }
    }
    assert!(routes.len() > 10, "{routes:?}");
    for (method, path) in &routes {
        for token in [None, Some("wrong"), Some("limits-token")] {
            let (status, body) = head_only_h1(&s, method, path, token).await;
            assert_error(status, &body, 413, "payload_too_large");
            let (status, body) = head_only_h2(&s, method, path, token).await;
            assert_error(status, &body, 413, "payload_too_large");
        }
    }
    assert_eq!(s.snapshot(), before);
}

/// Sends only the head of `method path` announcing 100 MB, over HTTP/1.1: the answer, had the server
/// one before the body (were it reading the body, it would wait for it until the test timed out).
async fn head_only_h1(s: &TestServer, method: &str, path: &str, token: Option<&str>) -> (reqwest::StatusCode, Value) {
    let host = s.base.trim_start_matches("http://").to_string();
    let mut c = connect(s).await;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    c.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: an answer before the body is sent"))
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(0);
    (reqwest::StatusCode::from_u16(status).unwrap(), json_of(&answer))
}

/// The same over HTTP/2 (prior knowledge): a request stream whose body never comes.
async fn head_only_h2(s: &TestServer, method: &str, path: &str, token: Option<&str>) -> (reqwest::StatusCode, Value) {
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};
    let host = s.base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&host).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 handshake with prior knowledge");
    tokio::spawn(conn);
    let never = futures_util::stream::pending::<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>>();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{host}{path}"))
        .header("content-type", "application/json")
        .header("content-length", "100000000");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        sender.send_request(req.body(StreamBody::new(never)).unwrap()),
    )
    .await
    .unwrap_or_else(|_| panic!("{method} {path} (HTTP/2): an answer before the body is sent"))
    .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (
        reqwest::StatusCode::from_u16(status).unwrap(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// HTTP/2 in clear text (prior knowledge): many long polls share one connection, each a stream, and a
/// push on the same connection serves one of them.
#[tokio::test]
async fn http2_carries_many_long_polls_on_one_connection() {
    let _turn = LONG_POLL_GAUGE.lock().await;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    let s = server_with(|_| {}).await;
    let host = s.base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&host).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 handshake with prior knowledge");
    tokio::spawn(conn);
    let post = |path: &str, body: Value| {
        let mut sender = sender.clone();
        let req = hyper::Request::post(format!("http://{host}{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        async move {
            let resp = sender.send_request(req).await.unwrap();
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&body).unwrap())
        }
    };
    let polls: Vec<_> = (0..50)
        .map(|_| tokio::spawn(post("/v1/reserve", json!({"topics": ["h2"], "timeout_ms": 20_000}))))
        .collect();
    s.wait_for_metric("dq_long_polls_waiting 50").await;
    for n in 0..50 {
        let (status, out) = post("/v1/jobs", json!({"topic": "h2", "body": n})).await;
        assert_eq!(status, 201, "{out}");
    }
    let mut bodies = Vec::new();
    for p in polls {
        let (status, out) = p.await.unwrap();
        assert_eq!(status, 200, "{out}");
        bodies.push(out["jobs"][0]["body"].as_i64().unwrap());
    }
    bodies.sort();
    assert_eq!(bodies, (0..50).collect::<Vec<_>>(), "each job to exactly one long poll");
}
