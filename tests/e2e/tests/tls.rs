//! dq over TLS (`rediss://`, a private CA, a client certificate) as an ACL user, in every Redis shape:
//! dq-server, dq-timer and dq-checker as processes, a delayed job through the timer (pub/sub wake-ups
//! over TLS too), and a dq that does not trust the CA reaching nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{call, env_for, metrics, start_on};
use dq_harness::{RedisCluster, RedisOptions, RedisSentinelSet, RedisServer, TestCerts, eventually, free_port};
use serde_json::json;

fn options() -> RedisOptions {
    RedisOptions::default()
        .with_tls(Arc::new(TestCerts::generate()))
        .with_user("dq", "s3cret-pass")
}

/// The TLS files as dq reads them from its environment.
fn tls_env(certs: &TestCerts) -> Vec<(&'static str, String)> {
    vec![
        ("DQ__REDIS__TLS_CA_FILE", certs.ca_file().display().to_string()),
        (
            "DQ__REDIS__TLS_CERT_FILE",
            certs.client_cert_file().display().to_string(),
        ),
        ("DQ__REDIS__TLS_KEY_FILE", certs.client_key_file().display().to_string()),
    ]
}

/// Starts dq-server, dq-timer and dq-checker on `mode` at `urls` over TLS, and takes a delayed job
/// through push, the timer, a long poll and an ack; the checker sees every primary up.
async fn round_trip(mode: &str, urls: &[String], certs: &TestCerts, extra: &[(&'static str, &str)]) {
    let with_tls = |port: u16| {
        let mut vars = env_for(mode, urls, port, extra);
        vars.extend(tls_env(certs));
        vars
    };
    let (sp, tp, cp) = (free_port(), free_port(), free_port());
    let server = start_on("dq-server", sp, with_tls(sp)).await;
    let _timer = start_on("dq-timer", tp, with_tls(tp)).await;
    let checker = start_on("dq-checker", cp, with_tls(cp)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    let (status, out) = call(
        &http,
        server.port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "tls-1", "topic": "t", "body": {"over": "tls"}, "delay_ms": 200})),
    )
    .await;
    assert_eq!(status, 201, "{out}");
    let (status, out) = call(
        &http,
        server.port,
        "POST",
        "/v1/reserve",
        Some(json!({"topics": ["t"], "timeout_ms": 20000})),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    let job = &out["jobs"][0];
    assert_eq!(
        job["id"], "tls-1",
        "the timer promoted it and the wake-up reached the long poll: {out}"
    );
    assert_eq!(job["body"], json!({"over": "tls"}));
    let (status, _) = call(
        &http,
        server.port,
        "POST",
        "/v1/jobs/tls-1/ack",
        Some(json!({"receipt": job["receipt"]})),
    )
    .await;
    assert_eq!(status, 204);
    let (_, stats) = call(&http, server.port, "GET", "/v1/stats", None).await;
    assert_eq!(stats["redis"]["mode"], mode);
    assert_eq!(stats["redis"]["partitions_down"], json!([]), "{stats}");

    eventually(
        Duration::from_secs(30),
        "the checker sees every primary up over TLS",
        || async {
            let m = metrics(checker.port).await;
            let up: Vec<f64> = m
                .iter()
                .filter(|(k, _)| k.starts_with("dq_redis_up"))
                .map(|(_, v)| *v)
                .collect();
            !up.is_empty() && up.iter().all(|v| *v == 1.0)
        },
    )
    .await;
}

/// Without the CA, dq does not trust the server's certificate: it reaches nothing (503), it does not
/// fall back to an unverified connection.
async fn untrusted_ca_reaches_nothing(urls: &[String]) {
    let sp = free_port();
    let vars = env_for("standalone", urls, sp, &[]);
    let server = dq_harness::DqProcess::spawn("dq-server", &vars, &[]);
    let http = reqwest::Client::new();
    // The server cannot read or create the layout without Redis: it never serves, and says why.
    let mut server = server;
    let exited = tokio::task::block_in_place(|| server.wait(Duration::from_secs(30)));
    let log = server.log();
    match exited {
        Some(status) => assert!(!status.success(), "{log}"),
        None => {
            let (status, _) = call(&http, sp, "POST", "/v1/jobs", Some(json!({"topic": "t", "body": 1}))).await;
            assert_ne!(status, 201, "a push went through without trusting the CA\n{log}");
        }
    }
    assert!(
        log.to_lowercase().contains("certificate") || log.to_lowercase().contains("tls"),
        "the log says the certificate was not trusted:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_over_tls_as_an_acl_user() {
    let opts = options();
    let redis = RedisServer::start_with(&opts);
    let certs = opts.tls.clone().unwrap();
    assert!(redis.url().starts_with("rediss://dq:"), "{}", redis.url());
    round_trip("standalone", &[redis.url()], &certs, &[]).await;
    untrusted_ca_reaches_nothing(&[redis.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_as_an_acl_user() {
    let opts = options();
    let set = RedisSentinelSet::start_with(&opts);
    let certs = opts.tls.clone().unwrap();
    round_trip(
        "sentinel",
        &set.sentinel_urls(),
        &certs,
        &[("DQ__REDIS__SENTINEL_MASTER", set.master_name())],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_tls_as_an_acl_user() {
    let opts = options();
    let cluster = RedisCluster::start_with(&opts);
    let certs = opts.tls.clone().unwrap();
    round_trip("cluster", &cluster.urls(), &certs, &[]).await;
}
