//! HTTPS served by dq-server itself (`server.tls_cert`, `server.tls_key`): a job pushed and looked up
//! over HTTP/1.1 and HTTP/2 (chosen by ALPN), plain HTTP refused on the TLS port, the header timeout
//! over a handshake, the connection cap's 503 over TLS, HTTP/2's idle close, and start-up refused on
//! bad files with the key named. (The reload on SIGHUP, the CLI and dq-client: tests/e2e/tests/https.rs.)

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::settings;
use dq_harness::{HttpsCa, RedisServer, ServerCert};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

/// dq-server over HTTPS on its own Redis, stopped on drop.
struct HttpsServer {
    _redis: RedisServer,
    addr: SocketAddr,
    ca: HttpsCa,
    shutdown: CancellationToken,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl HttpsServer {
    async fn start(edit: impl FnOnce(&mut dq_core::Settings)) -> Self {
        let ca = HttpsCa::generate("dq test CA");
        let cert = ca.issue("server");
        let redis = RedisServer::start();
        let mut s = settings(std::slice::from_ref(&redis));
        s.server.tls_cert = Some(cert.cert_file);
        s.server.tls_key = Some(cert.key_file);
        edit(&mut s);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(dq_server::serve(listener, s, shutdown.clone()));
        let server = HttpsServer {
            _redis: redis,
            addr,
            ca,
            shutdown,
        };
        let http = server.reqwest();
        dq_harness::eventually(
            Duration::from_secs(10),
            "server answers /healthz over https",
            || async { http.get(server.url("/healthz")).send().await.is_ok() },
        )
        .await;
        server
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    /// reqwest trusting the test CA (HTTP/1.1: the workspace's reqwest is built without HTTP/2).
    fn reqwest(&self) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(self.ca.ca_pem().as_bytes()).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    /// A TLS connection of the test's own offering `alpn`.
    async fn connect(&self, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        TlsConnector::from(self.ca.client_config(alpn))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .expect("a TLS handshake")
    }
}

/// An HTTP/2 request on `sender`; the answer's status and JSON body.
async fn h2_call(
    sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let req = hyper::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.map(|b| b.to_string()).unwrap_or_default())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_job_is_pushed_and_looked_up_over_https_on_http1_and_http2() {
    let s = HttpsServer::start(|_| {}).await;

    // HTTP/1.1: reqwest, trusting the CA.
    let http = s.reqwest();
    let pushed = http
        .post(s.url("/v1/jobs"))
        .json(&json!({"id": "over-h1", "topic": "tls", "body": {"n": 1}, "delay_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(pushed.version(), reqwest::Version::HTTP_11);
    assert_eq!(pushed.status(), 201);
    let job: Value = http
        .get(s.url("/v1/jobs/over-h1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (job["body"].clone(), job["state"].clone()),
        (json!({"n": 1}), json!("delayed"))
    );

    // HTTP/2: offered h2 and HTTP/1.1, the server picks h2.
    let tls = s.connect(&[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("an HTTP/2 handshake");
    tokio::spawn(conn);
    let (status, out) = h2_call(
        &mut sender,
        "POST",
        &s.url("/v1/jobs"),
        Some(json!({"id": "over-h2", "topic": "tls", "body": {"n": 2}, "delay_ms": 60_000})),
    )
    .await;
    assert_eq!(status, 201, "{out}");
    let (status, job) = h2_call(&mut sender, "GET", &s.url("/v1/jobs/over-h2"), None).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["body"], json!({"n": 2}));
    // Each sees the other's job: one queue behind both.
    let (status, job) = h2_call(&mut sender, "GET", &s.url("/v1/jobs/over-h1"), None).await;
    assert_eq!((status, job["id"].clone()), (200, json!("over-h1")));

    // A client that offers only HTTP/1.1 gets it.
    let tls = s.connect(&[b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
}

/// Reads until the peer closes (or resets) the connection; what it sent. Panics after 30 s.
async fn read_until_closed(conn: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf)).await {
            Err(_) => panic!(
                "the connection is still open after 30 s; got {:?}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn plain_http_and_unfinished_handshakes_are_closed() {
    let s = HttpsServer::start(|s| s.server.header_timeout_ms = 300).await;

    // Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/healthz", s.addr.port()))
        .send()
        .await;
    assert!(plain.is_err(), "a plain-HTTP request got an answer: {plain:?}");
    let mut raw = TcpStream::connect(s.addr).await.unwrap();
    raw.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut raw).await;
    assert!(!answer.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&answer));

    // A connection that never starts its handshake is closed after the header timeout.
    let mut silent = TcpStream::connect(s.addr).await.unwrap();
    assert_eq!(read_until_closed(&mut silent).await, b"");

    // The server still serves.
    let status = s.reqwest().get(s.url("/healthz")).send().await.unwrap().status();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn connections_beyond_the_cap_get_a_503_over_tls() {
    let s = HttpsServer::start(|s| s.server.max_connections = 2).await;
    let mut held = Vec::new();
    // The test's reqwest client may hold a place for a while: keep opening until one is refused.
    let refused = 'open: {
        for _ in 0..4 {
            // Offered h2 too: a refused connection is offered HTTP/1.1 alone, so it can be told why.
            let mut c = s.connect(&[b"h2", b"http/1.1"]).await;
            if c.get_ref().1.alpn_protocol() == Some(&b"http/1.1"[..]) {
                c.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .await
                    .unwrap();
                break 'open String::from_utf8_lossy(&read_until_closed(&mut c).await).into_owned();
            }
            held.push(c);
        }
        panic!("four connections were all served with a cap of two");
    };
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.contains("overloaded") && refused.contains("server.max_connections"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_http2_connection_without_a_stream_for_the_header_timeout_is_closed() {
    let s = HttpsServer::start(|s| s.server.header_timeout_ms = 500).await;
    let tls = s.connect(&[b"h2"]).await;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("an HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    // A long poll of four header timeouts is an open stream: the connection stays for its answer.
    let (status, out) = h2_call(
        &mut sender,
        "POST",
        &s.url("/v1/reserve"),
        Some(json!({"topics": ["idle"], "timeout_ms": 2000})),
    )
    .await;
    assert_eq!((status, out["jobs"].clone()), (200, json!([])), "{out}");
    // Then nothing: the server closes the connection (the client's connection task ends).
    tokio::time::timeout(Duration::from_secs(30), conn)
        .await
        .expect("the server closed the idle HTTP/2 connection")
        .unwrap()
        .expect("closed cleanly (GOAWAY)");
    assert!(sender.is_closed() || sender.ready().await.is_err());
}

/// `dq_server::serve`'s error with `edit` applied to TLS settings (no Redis is reached: the files are
/// read first).
async fn start_error(edit: impl FnOnce(&mut dq_core::Settings, &ServerCert, &ServerCert)) -> String {
    let ca = HttpsCa::generate("dq test CA");
    let (cert, other) = (ca.issue("server"), ca.issue("other"));
    let mut s = dq_core::Settings::default();
    s.server.tls_cert = Some(cert.cert_file.clone());
    s.server.tls_key = Some(cert.key_file.clone());
    edit(&mut s, &cert, &other);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        dq_server::serve(listener, s, CancellationToken::new()),
    )
    .await
    .expect("start-up ends");
    format!("{:#}", result.expect_err("start-up refused"))
}

#[tokio::test]
async fn bad_files_stop_start_up_naming_the_key() {
    let err = start_error(|s, _, _| s.server.tls_cert = Some("/nonexistent/cert.pem".into())).await;
    assert!(
        err.contains("server.tls_cert") && err.contains("/nonexistent/cert.pem"),
        "{err}"
    );
    let err = start_error(|s, _, _| s.server.tls_key = Some("/nonexistent/key.pem".into())).await;
    assert!(err.contains("server.tls_key") && err.contains("cannot read"), "{err}");
    // The key given as the certificate: no certificate in it.
    let err = start_error(|s, c, _| s.server.tls_cert = Some(c.key_file.clone())).await;
    assert!(
        err.contains("server.tls_cert") && err.contains("no PEM certificate"),
        "{err}"
    );
    // The certificate given as the key: no key in it.
    let err = start_error(|s, c, _| s.server.tls_key = Some(c.cert_file.clone())).await;
    assert!(
        err.contains("server.tls_key") && err.contains("no PEM private key"),
        "{err}"
    );
    // Another certificate's key.
    let err = start_error(|s, _, o| s.server.tls_key = Some(o.key_file.clone())).await;
    assert!(
        err.contains("server.tls_key") && err.contains("not the private key"),
        "{err}"
    );
    // A PEM block that is not a certificate inside.
    let err = start_error(|s, c, _| {
        let garbage = c.cert_file.with_file_name("garbage.crt");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        s.server.tls_cert = Some(garbage);
    })
    .await;
    assert!(err.contains("server.tls_cert"), "{err}");
}
