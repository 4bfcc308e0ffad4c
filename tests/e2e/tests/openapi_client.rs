//! A Python client generated from the served `/openapi.json` by openapi-python-client (from .venv, as a
//! user would make one) pushes, looks up, reserves, acks, registers topics, puts a schedule and reads
//! stats against a real dq-server, each 2xx answer parsed into the model the document names
//! (tests/e2e/clients/openapi/generated_client.py). A document that a generator reads differently from
//! what the server sends fails here.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use dq_harness::{RedisServer, free_port};

const TOKEN: &str = "generated-client-token";

#[tokio::test]
async fn a_generated_python_client_works_against_the_server() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut vars = common::env(&[&redis], port);
    vars.push(("DQ__AUTH__ADMIN_TOKEN", TOKEN.into()));
    let server = common::start_on("dq-server", port, vars).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let doc = reqwest::get(format!("{base}/openapi.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let doc_path = dir.path().join("openapi.json");
    std::fs::write(&doc_path, &doc).unwrap();
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin");
    let generator = venv.join("openapi-python-client");
    assert!(
        generator.exists(),
        "{} is missing: run scripts/ensure-python.sh (scripts/test.sh does)",
        generator.display()
    );
    // The venv first on PATH, so the generator formats its output with the ruff it installed.
    let path = format!("{}:{}", venv.display(), std::env::var("PATH").unwrap_or_default());
    let package = dir.path().join("generated");
    let generated = run(tokio::process::Command::new(&generator)
        .args(["generate", "--path"])
        .arg(&doc_path)
        .arg("--output-path")
        .arg(&package)
        .env("PATH", &path))
    .await;
    assert!(
        generated.status.success(),
        "openapi-python-client failed:\n{}",
        output(&generated)
    );
    assert!(
        package.join("dq_client/api/jobs/push.py").exists(),
        "{}",
        output(&generated)
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/openapi/generated_client.py");
    let ran = run(tokio::process::Command::new(venv.join("python"))
        .arg(&script)
        .arg(&package)
        .arg(&base)
        .arg(TOKEN))
    .await;
    let text = output(&ran);
    assert!(ran.status.success(), "the generated client failed:\n{text}");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).lines().last(),
        Some("ok"),
        "{text}"
    );
}

/// Runs `cmd` to its end, within a generous deadline.
async fn run(cmd: &mut tokio::process::Command) -> std::process::Output {
    let out = cmd.stdin(Stdio::null()).kill_on_drop(true).output();
    tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("finished within 120 s")
        .expect("the program starts")
}

fn output(out: &std::process::Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
