//! Real beanstalkd clients against dq's beanstalkd listener: greenstalk (Python, from .venv) and Pheanstalk 4
//! (PHP, Debian's php-pda-pheanstalk) each run a producer and a worker through every verb and check each
//! answer (tests/e2e/clients/beanstalkd/); greenstalk also runs its own test of a reserve over several
//! watched tubes, on a dq of many partitions (its tubes have home partitions of their own). Each also runs
//! against the real beanstalkd, which proves the client program itself right.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::beanstalkd::{Beanstalkd, DqBeanstalkd};

/// A client program: what runs it, and its file in tests/e2e/clients/beanstalkd.
struct Client {
    program: PathBuf,
    script: &'static str,
    /// Where it comes from, for the message when it cannot start.
    installed_by: &'static str,
}

fn greenstalk() -> Client {
    Client {
        program: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"),
        script: "greenstalk_client.py",
        installed_by: "scripts/ensure-python.sh",
    }
}

/// greenstalk's own `test_initialize_watch_multiple`.
fn greenstalk_watch_multiple() -> Client {
    Client {
        script: "greenstalk_watch_multiple.py",
        ..greenstalk()
    }
}

fn pheanstalk() -> Client {
    Client {
        program: "php".into(),
        script: "pheanstalk_client.php",
        installed_by: "scripts/ensure-beanstalkd.sh",
    }
}

/// Runs `client` against the server at `addr` and asserts it exits 0 with "ok" as its last line.
async fn passes(client: &Client, addr: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clients/beanstalkd")
        .join(client.script);
    let run = tokio::process::Command::new(&client.program)
        .arg(&script)
        .arg(addr)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("{} against {addr} did not finish within 60 s", client.script))
        .unwrap_or_else(|e| panic!("cannot run {} ({}): {e}", client.program.display(), client.installed_by));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.lines().last() == Some("ok"),
        "{} against {addr}: {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        client.script,
        out.status
    );
}

#[tokio::test]
async fn greenstalk_against_beanstalkd() {
    let beanstalkd = Beanstalkd::start();
    passes(&greenstalk(), &beanstalkd.addr).await;
}

#[tokio::test]
async fn greenstalk_against_dq() {
    let dq = DqBeanstalkd::start().await;
    passes(&greenstalk(), &dq.addr).await;
}

#[tokio::test]
async fn greenstalk_watch_multiple_against_beanstalkd() {
    let beanstalkd = Beanstalkd::start();
    passes(&greenstalk_watch_multiple(), &beanstalkd.addr).await;
}

/// On the default 256 partitions, where `static` and `dynamic` have home partitions of their own (the
/// later put, into `dynamic`, in the lower one).
#[tokio::test]
async fn greenstalk_watch_multiple_against_dq() {
    let dq = DqBeanstalkd::with_partitions(256).await;
    passes(&greenstalk_watch_multiple(), &dq.addr).await;
}

#[tokio::test]
async fn pheanstalk_against_beanstalkd() {
    let beanstalkd = Beanstalkd::start();
    passes(&pheanstalk(), &beanstalkd.addr).await;
}

#[tokio::test]
async fn pheanstalk_against_dq() {
    let dq = DqBeanstalkd::start().await;
    passes(&pheanstalk(), &dq.addr).await;
}
