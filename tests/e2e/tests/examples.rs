//! The client examples in `examples/` against a real dq (Redis, dq-server with scoped tokens, dq-timer,
//! dq-consumer), run as the programs a user would run: the Python and the Node ones. The producer pushes
//! jobs; the worker reserves them, acks them (ack many), nacks the one that fails, touches the one that
//! outlives its TTR, and stops cleanly on SIGTERM and on SIGINT; the receiver takes the deliveries
//! dq-consumer signs during a key rotation, and refuses with 401 what is not signed with a key it holds:
//! a tampered body, a wrong key, a timestamp outside the replay window, no signature.
//! (The Go and PHP examples are not run here, to keep CI free of their toolchains.)

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_harness::{DqProcess, RedisServer, eventually, free_port};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const ADMIN_TOKEN: &str = "examples-admin-token";
const PRODUCER_TOKEN: &str = "examples-producer-token";
const WORKER_TOKEN: &str = "examples-worker-token";

/// A language the examples are written in: the program that runs them and their file extension.
struct Lang {
    program: &'static str,
    dir: &'static str,
    ext: &'static str,
}

const PYTHON: Lang = Lang {
    program: "python3",
    dir: "python",
    ext: "py",
};

const NODE: Lang = Lang {
    program: "node",
    dir: "node",
    ext: "mjs",
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One example program running, its stdout and stderr in files; killed on drop, its output printed when
/// the test fails.
struct Example {
    what: String,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Example {
    fn spawn(lang: &Lang, script: &str, args: &[&str], env: &[(&str, String)]) -> Example {
        let path = repo()
            .join("examples")
            .join(lang.dir)
            .join(format!("{script}.{}", lang.ext));
        let dir = tempfile::tempdir().unwrap();
        let out = std::fs::File::create(dir.path().join("stdout")).unwrap();
        let err = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let mut cmd = Command::new(lang.program);
        cmd.arg(&path).args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run {} {}: {e} (scripts/test.sh installs node with scripts/ensure-node.sh)",
                lang.program,
                path.display()
            )
        });
        Example {
            what: format!("{} {}", lang.program, path.display()),
            child: Some(child),
            dir,
        }
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        self.read("stdout")
    }

    fn stderr(&self) -> String {
        self.read("stderr")
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} {pid}");
    }

    /// Waits for it to exit, and panics with its output if it does not within `timeout`.
    async fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().expect("running").try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}",
                self.what
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for it to exit and asserts it exited 0.
    async fn succeeds(&mut self, timeout: Duration) {
        let status = self.wait(timeout).await;
        assert!(status.success(), "{} exited with {status}", self.what);
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- {} stdout ----\n{}\n---- stderr ----\n{}",
                self.what,
                self.stdout(),
                self.stderr()
            );
        }
    }
}

/// A dq installation of the test's own, reached through its API with the admin token.
struct Dq {
    _redis: RedisServer,
    _processes: Vec<DqProcess>,
    _config: tempfile::TempDir,
    url: String,
    http: reqwest::Client,
}

impl Dq {
    /// Redis, a dq-server that knows a producer token (`produce`) and a worker token (`consume`), a
    /// dq-timer and a dq-consumer.
    async fn start() -> Dq {
        let redis = RedisServer::start();
        let config = tempfile::tempdir().unwrap();
        let path = config.path().join("dq.toml");
        let sha = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
        let mut file = std::fs::File::create(&path).unwrap();
        write!(
            file,
            "[[auth.tokens]]\nname = \"producer\"\nsha256 = \"{}\"\nscopes = [\"produce\"]\n\n\
             [[auth.tokens]]\nname = \"worker\"\nsha256 = \"{}\"\nscopes = [\"consume\"]\n",
            sha(PRODUCER_TOKEN),
            sha(WORKER_TOKEN)
        )
        .unwrap();
        let port = free_port();
        let mut vars = common::env(&[&redis], port);
        vars.push(("DQ__AUTH__ADMIN_TOKEN", ADMIN_TOKEN.into()));
        let server = DqProcess::spawn("dq-server", &vars, &["--config", path.to_str().unwrap()]);
        let url = format!("http://127.0.0.1:{port}");
        eventually(Duration::from_secs(30), "dq-server serves /healthz", || async {
            reqwest::get(format!("{url}/healthz"))
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        let timer = common::start("dq-timer", &[&redis]).await.process;
        let mut vars = common::env(&[&redis], free_port());
        vars.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
        let consumer = DqProcess::spawn("dq-consumer", &vars, &[]);
        Dq {
            _redis: redis,
            _processes: vec![server, timer, consumer],
            _config: config,
            url,
            http: reqwest::Client::new(),
        }
    }

    /// A call with the admin token: the status and the JSON answer (`Null` for none).
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn push(&self, job: Value) -> String {
        let (status, out) = self.call("POST", "/v1/jobs", Some(job)).await;
        assert_eq!(status, 201, "{out}");
        out["id"].as_str().unwrap().to_string()
    }

    async fn job(&self, id: &str) -> Value {
        let (status, job) = self.call("GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{id}: {job}");
        job
    }

    /// The environment of an example: where dq is, and `token`.
    fn env(&self, token: &str) -> Vec<(&'static str, String)> {
        vec![("DQ_URL", self.url.clone()), ("DQ_TOKEN", token.to_string())]
    }

    /// Runs the producer example: `count` jobs to `topic`, their ids as it printed them.
    async fn produce(&self, lang: &Lang, topic: &str, count: usize) -> Vec<String> {
        let mut producer = Example::spawn(
            lang,
            "producer",
            &[topic, &count.to_string()],
            &self.env(PRODUCER_TOKEN),
        );
        producer.succeeds(Duration::from_secs(60)).await;
        let ids: Vec<String> = producer.stdout().lines().map(str::to_string).collect();
        assert_eq!(ids.len(), count, "one id per job: {ids:?}");
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), count, "distinct ids: {ids:?}");
        ids
    }
}

/// The producer pushes, the worker takes every job once: acks all that succeed, nacks the one that fails
/// (dead after its one attempt, with the worker's error), keeps the one that outlives its TTR by touching
/// it; then it stops on SIGTERM, and an idle worker on SIGINT, both exiting 0.
async fn producer_and_worker(lang: &Lang) {
    let dq = Dq::start().await;
    let ids = dq.produce(lang, "orders", 50).await;
    for id in &ids {
        let job = dq.job(id).await;
        assert_eq!(job["topic"], "orders", "{job}");
        assert_eq!(job["state"], "ready", "{job}");
    }
    let failing = dq
        .push(json!({"topic": "orders", "body": {"fail": "card declined"}, "max_attempts": 1}))
        .await;
    // Handled for 8 s with a TTR of 3 s: without touches dq-timer would hand it out again.
    let long = dq
        .push(json!({"topic": "orders", "body": {"sleep_ms": 8000}, "ttr_ms": 3000}))
        .await;

    let mut env = dq.env(WORKER_TOKEN);
    env.extend([("DQ_COUNT", "10".to_string()), ("DQ_WAIT_MS", "1000".to_string())]);
    let mut worker = Example::spawn(lang, "worker", &["orders"], &env);
    let mut idle = Example::spawn(lang, "worker", &["nothing.here"], &env);

    eventually(Duration::from_secs(120), "every job of orders settled", || async {
        for id in ids.iter().chain([&long]) {
            if dq.job(id).await["state"] != "done" {
                return false;
            }
        }
        dq.job(&failing).await["state"] == "dead"
    })
    .await;
    for id in ids.iter().chain([&long]) {
        let job = dq.job(id).await;
        assert_eq!(job["attempts"], 1, "handed out once: {job}");
    }
    let dead = dq.job(&failing).await;
    assert_eq!(dead["attempts"], 1, "{dead}");
    assert!(
        dead["last_error"].as_str().unwrap().contains("card declined"),
        "the worker's error is kept: {dead}"
    );
    let handled: HashSet<String> = worker
        .stdout()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for id in ids.iter().chain([&long]) {
        assert!(handled.contains(id), "the worker printed {id}");
    }

    worker.signal("TERM");
    idle.signal("INT");
    for (name, w) in [("worker (SIGTERM)", &mut worker), ("idle worker (SIGINT)", &mut idle)] {
        let status = w.wait(Duration::from_secs(30)).await;
        assert!(status.success(), "{name} exited with {status}");
        assert!(w.stderr().contains("stopped"), "{name}: {}", w.stderr());
    }
}

/// `X-DQ-Signature` for `body` signed at `t` with `keys`, as dq-consumer makes it.
fn signature(keys: &[&str], t: u64, body: &[u8]) -> String {
    dq_core::sign::signature(keys, t, body)
}

/// The receiver takes what dq-consumer delivers, signed with a new and an old key while it holds only
/// the old one, and refuses deliveries of a topic whose key it does not hold (the job goes dead with
/// `HTTP 401`), and requests with a tampered body, a wrong key, a stale or future timestamp, or none.
async fn receiver(lang: &Lang) {
    let dq = Dq::start().await;
    let port = free_port();
    let env = [("PORT", port.to_string()), ("DQ_SECRETS", "k-old".to_string())];
    let mut receiver = Example::spawn(lang, "receiver", &[], &env);
    let url = format!("http://127.0.0.1:{port}/hook");
    eventually(Duration::from_secs(30), "the receiver listens", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;

    let (status, out) = dq
        .call(
            "PUT",
            "/v1/topics/hooks",
            Some(json!({"callback": {"url": url, "secret": "k-new", "previous_secret": "k-old"}})),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let (status, out) = dq
        .call(
            "PUT",
            "/v1/topics/forged",
            Some(json!({"callback": {"url": url, "secret": "k-unknown"}, "retry": {"max_attempts": 1}})),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let ids = dq.produce(lang, "hooks", 5).await;
    let refused = dq.push(json!({"topic": "forged", "body": {"n": 1}})).await;
    eventually(Duration::from_secs(60), "the deliveries settled", || async {
        for id in &ids {
            if dq.job(id).await["state"] != "done" {
                return false;
            }
        }
        dq.job(&refused).await["state"] == "dead"
    })
    .await;
    assert_eq!(dq.job(&refused).await["last_error"], "HTTP 401");
    let taken: HashSet<String> = receiver
        .stdout()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(taken, ids.iter().cloned().collect(), "each delivery handled once");

    // Whole seconds, read before the requests: the stale and ahead cases stay 30 s clear of the receivers'
    // 300 s window, so the truncation and the time the requests take cannot bring them inside it (with
    // 301 s a CI run saw the receiver accept the ahead case: up to a second lost to truncation, plus the
    // time the earlier cases took).
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let body = br#"{"id":"direct-1","topic":"hooks","body":{"amount":10},"attempt":1,"run_at":0}"#;
    let tampered = br#"{"id":"direct-1","topic":"hooks","body":{"amount":99},"attempt":1,"run_at":0}"#;
    let cases: [(&str, Option<String>, &[u8], u16); 7] = [
        (
            "signed with the key it holds",
            Some(signature(&["k-old"], now, body)),
            body,
            200,
        ),
        (
            "signed during a rotation",
            Some(signature(&["k-new", "k-old"], now, body)),
            body,
            200,
        ),
        ("a tampered body", Some(signature(&["k-old"], now, body)), tampered, 401),
        (
            "a key it does not hold",
            Some(signature(&["k-new"], now, body)),
            body,
            401,
        ),
        (
            "a stale timestamp",
            Some(signature(&["k-old"], now - 330, body)),
            body,
            401,
        ),
        (
            "a timestamp ahead",
            Some(signature(&["k-old"], now + 330, body)),
            body,
            401,
        ),
        ("no signature", None, body, 401),
    ];
    let http = reqwest::Client::new();
    for (what, header, sent, want) in cases {
        let mut req = http
            .post(&url)
            .header("content-type", "application/json")
            .body(sent.to_vec());
        if let Some(h) = header {
            req = req.header("x-dq-signature", h);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let answer = resp.text().await.unwrap();
        assert_eq!(status, want, "{what}: {answer}");
        assert!(
            !answer.trim().is_empty(),
            "{what}: dq counts an empty answer as a failure"
        );
    }

    receiver.signal("TERM");
    let status = receiver.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "the receiver exits 0 on SIGTERM: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_producer_and_worker() {
    producer_and_worker(&PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_receiver() {
    receiver(&PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_producer_and_worker() {
    producer_and_worker(&NODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_receiver() {
    receiver(&NODE).await;
}
