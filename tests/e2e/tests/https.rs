//! dq-server's own HTTPS as a process: the certificate read again on SIGHUP (new connections see the new
//! one, an open connection keeps working, a bad file leaves the one in force), bad files stopping
//! start-up with the key named, and the `dq` command line and dq-client over `https://` with a CA file.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use dq_client::{Client, PushRequest};
use dq_harness::{DqProcess, HttpsCa, RedisServer, ServerCert, bin_dir, eventually, free_port};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;

/// dq-server on `port` serving HTTPS with the files at `cert` and `key`.
fn spawn(redis: &RedisServer, port: u16, cert: &Path, key: &Path) -> DqProcess {
    let mut vars = common::env(&[redis], port);
    vars.push(("DQ__SERVER__TLS_CERT", cert.display().to_string()));
    vars.push(("DQ__SERVER__TLS_KEY", key.display().to_string()));
    DqProcess::spawn("dq-server", &vars, &[])
}

/// reqwest trusting `ca`.
fn https_client(ca: &HttpsCa) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem_bundle(ca.ca_pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .tls_certs_merge(ca)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Waits until dq-server answers `/healthz` over HTTPS.
async fn wait_served(ca: &HttpsCa, port: u16) {
    let http = https_client(ca);
    let url = format!("https://127.0.0.1:{port}/healthz");
    eventually(Duration::from_secs(30), &format!("dq-server serves {url}"), || async {
        http.get(&url).send().await.is_ok_and(|r| r.status().is_success())
    })
    .await;
}

/// A TLS connection of the test's own (HTTP/1.1), to hold open and to see the certificate it was shown.
async fn connect(ca: &HttpsCa, port: u16) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    TlsConnector::from(ca.client_config(&[b"http/1.1"]))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .expect("a TLS handshake")
}

/// The certificate the server showed on `conn`, as DER.
fn shown(conn: &TlsStream<TcpStream>) -> Vec<u8> {
    conn.get_ref().1.peer_certificates().expect("a server certificate")[0].to_vec()
}

/// `GET /healthz` on a kept-alive HTTP/1.1 connection; the answer's status line.
async fn healthz(conn: &mut TlsStream<TcpStream>) -> String {
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // Our answers carry a Content-Length: read the head, then that many bytes.
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed mid-answer: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .expect("a Content-Length");
            if body.len() >= length {
                return head.lines().next().unwrap().to_string();
            }
        }
    }
}

/// Copies a certificate and its key over the files dq-server reads.
fn install(from: &ServerCert, cert: &Path, key: &Path) {
    std::fs::copy(&from.cert_file, cert).unwrap();
    std::fs::copy(&from.key_file, key).unwrap();
}

#[tokio::test]
async fn sighup_reads_the_certificate_again_and_open_connections_keep_working() {
    let redis = RedisServer::start();
    let ca = HttpsCa::generate("dq test CA");
    let (first, second) = (ca.issue("first"), ca.issue("second"));
    let (cert, key) = (ca.path("live.crt"), ca.path("live.key"));
    install(&first, &cert, &key);
    let port = free_port();
    let process = spawn(&redis, port, &cert, &key);
    wait_served(&ca, port).await;

    let mut held = connect(&ca, port).await;
    assert_eq!(shown(&held), first.der);
    assert_eq!(healthz(&mut held).await, "HTTP/1.1 200 OK");

    install(&second, &cert, &key);
    process.signal("HUP");
    eventually(
        Duration::from_secs(30),
        "a new connection is shown the new certificate",
        || async { shown(&connect(&ca, port).await) == second.der },
    )
    .await;
    // The connection made before the reload is still served, on the session it made.
    assert_eq!(healthz(&mut held).await, "HTTP/1.1 200 OK");
    assert_eq!(shown(&held), first.der);
    let log = process.log();
    assert!(log.contains("TLS certificate read again"), "{log}");

    // A broken file on reload: logged, and the certificate in force stays.
    std::fs::write(&cert, "not a certificate").unwrap();
    process.signal("HUP");
    eventually(Duration::from_secs(30), "the bad file is logged", || async {
        process.log().contains("cannot use the TLS files")
    })
    .await;
    let mut fresh = connect(&ca, port).await;
    assert_eq!(shown(&fresh), second.der);
    assert_eq!(healthz(&mut fresh).await, "HTTP/1.1 200 OK");
    assert_eq!(healthz(&mut held).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn bad_tls_settings_stop_start_up_naming_the_key() {
    let redis = RedisServer::start();
    let ca = HttpsCa::generate("dq test CA");
    let good = ca.issue("server");
    let missing = ca.path("missing.key");
    let mut unreadable = spawn(&redis, free_port(), &good.cert_file, &missing);
    let status = unreadable.wait(Duration::from_secs(30)).expect("exits");
    assert!(!status.success());
    let log = unreadable.log();
    assert!(log.contains("server.tls_key") && log.contains("missing.key"), "{log}");

    let port = free_port();
    let mut vars = common::env(&[&redis], port);
    vars.push(("DQ__SERVER__TLS_CERT", good.cert_file.display().to_string()));
    let mut alone = DqProcess::spawn("dq-server", &vars, &[]);
    let status = alone.wait(Duration::from_secs(30)).expect("exits");
    assert!(!status.success());
    assert!(alone.log().contains("server.tls_key"), "{}", alone.log());
}

/// Runs `dq args…` against `url` with `vars`.
fn dq(url: &str, vars: &[(&str, &Path)], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(bin_dir().join("dq"));
    cmd.args(args)
        .env("DQ_URL", url)
        .env_remove("DQ_TOKEN")
        .env_remove("DQ_CA_FILE");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().expect("dq runs")
}

#[tokio::test]
async fn the_cli_and_dq_client_work_over_https_with_a_ca_file() {
    let redis = RedisServer::start();
    let ca = HttpsCa::generate("dq test CA");
    let cert = ca.issue("server");
    let port = free_port();
    let _server = spawn(&redis, port, &cert.cert_file, &cert.key_file);
    wait_served(&ca, port).await;
    let url = format!("https://127.0.0.1:{port}");
    let ca_file = ca.ca_file().to_str().unwrap();

    // The command line: --ca-file, or DQ_CA_FILE.
    let out = dq(
        &url,
        &[],
        &["--json", "--ca-file", ca_file, "push", "cli", r#"{"over":"https"}"#],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pushed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = pushed["id"].as_str().unwrap();
    let out = dq(&url, &[("DQ_CA_FILE", ca.ca_file())], &["--json", "get", id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["body"], json!({"over": "https"}));
    // Without the CA, the server's certificate is not trusted.
    let out = dq(&url, &[], &["get", id]);
    assert!(!out.status.success());
    let out = dq(&url, &[("DQ_CA_FILE", Path::new("/nonexistent/ca.pem"))], &["get", id]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ca.pem"));

    // dq-client: the builder's ca_file.
    let client = Client::builder(&url)
        .ca_file(Some(ca.ca_file().into()))
        .build()
        .unwrap();
    let pushed = client.push(&PushRequest::new("client", json!({"n": 1}))).await.unwrap();
    let job = client.get(&pushed.id).await.unwrap();
    assert_eq!(job.body, json!({"n": 1}));
    let untrusting = Client::builder(&url)
        .retry(dq_client::RetryPolicy::none())
        .build()
        .unwrap();
    let err = untrusting.get(&pushed.id).await.unwrap_err();
    assert!(matches!(err, dq_client::Error::Connect(_)), "{err}");
}
