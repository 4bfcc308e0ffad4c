//! Test harness for dq: a private `redis-server` per test, and dq binaries run as real processes.
//!
//! Each [`RedisServer`] runs on its own free port in its own temp dir, so tests run in parallel without
//! sharing state; it is killed on drop, and its log is printed when the test fails (panics).
//! [`RedisCluster`] (3 primaries, 3 replicas) and [`RedisSentinelSet`] (a primary, a replica, 3 sentinels)
//! are the same for the other two shapes of Redis, with failover to provoke. Each starts plain (`start()`) or
//! with TLS and/or an ACL user ([`RedisOptions`], `start_with()`), with certificates from [`TestCerts`].

pub mod cluster;
mod hook_sink;
pub mod https;
mod options;
pub mod sentinel;
pub mod tls;

pub use cluster::RedisCluster;
pub use hook_sink::{HookRequest, HookSink, dead_hooks_waiting, hooks_waiting};
pub use https::{HttpsCa, ServerCert};
pub use options::RedisOptions;
pub use sentinel::RedisSentinelSet;
pub use tls::TestCerts;

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of a test's own.
pub struct RedisServer {
    /// The running server, `None` while stopped.
    child: Option<Child>,
    /// Its port, kept across restarts so that URLs stay valid.
    port: u16,
    /// Working dir (and log file); removed on drop.
    dir: tempfile::TempDir,
    /// TLS and the user, kept for restarts and for reaching it.
    options: RedisOptions,
    /// Whether it keeps an AOF (fsync on every write), so that a restart finds the data again.
    aof: bool,
}

/// A port nobody listens on right now, and one this process was not given before: a test picks the
/// ports of its processes before it starts them, and the kernel may hand the same free port out twice
/// in a row (a dq-consumer then found its port taken by the dq-server started just before it).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

impl RedisServer {
    /// Starts a plaintext server without a password on a free port and waits until it answers.
    pub fn start() -> Self {
        Self::start_with(&RedisOptions::default())
    }

    /// Starts a server secured as `options` say on a free port (its TLS port with TLS, then it has no plaintext
    /// port) and waits until it answers.
    pub fn start_with(options: &RedisOptions) -> Self {
        Self::start_as(options, false)
    }

    /// Starts a plaintext server that keeps an AOF, fsynced on every write: [`RedisServer::restart`]
    /// then brings every key back, as a Redis restarted on its AOF does.
    pub fn start_persistent() -> Self {
        Self::start_as(&RedisOptions::default(), true)
    }

    fn start_as(options: &RedisOptions, aof: bool) -> Self {
        for _ in 0..10 {
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                dir: tempfile::tempdir().expect("temp dir"),
                options: options.clone(),
                aof,
            };
            if server.spawn().is_ok() {
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? scripts/test.sh installs it)");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.args(self.options.data_node(self.port).args())
            .args(["--bind", "127.0.0.1", "--save", ""])
            .args(if self.aof {
                ["--appendonly", "yes", "--appendfsync", "always"].as_slice()
            } else {
                ["--appendonly", "no"].as_slice()
            })
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path());
        self.child = Some(spawn_redis(&mut cmd, self.port, &self.options)?);
        Ok(())
    }

    /// `redis://127.0.0.1:<port>`; with TLS `rediss://`, with a user `name:password@` after the scheme (see
    /// [`RedisOptions::url`]).
    pub fn url(&self) -> String {
        self.options.url(self.port)
    }

    /// The options it was started with (their certificates, for a client over TLS).
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// The port (the TLS port with TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A synchronous connection, for a test to look at (or damage) what is stored.
    pub fn conn(&self) -> redis::Connection {
        self.options
            .client(self.port)
            .get_connection()
            .expect("connect to test redis")
    }

    /// Kills the server (SIGKILL), as a crash or a network cut would look to dq.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): it keeps its connections and answers nothing until
    /// [`RedisServer::resume`], as a Redis stalled by a slow disk, a long fork or a VM pause looks to dq.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT): it then runs what it was sent meanwhile.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {pid} failed");
    }

    /// Starts it again on the same port: empty, unless it keeps an AOF ([`RedisServer::start_persistent`]).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("cannot restart redis-server: {e}"),
                // The port may linger for a moment after the kill.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- redis-server :{} log ----\n{}", self.port, self.log());
        }
        self.stop();
    }
}

/// Starts `cmd` (a `redis-server`, in Sentinel mode or not, logging to a file of its own), its output discarded, and
/// waits up to 10 s until 127.0.0.1:`port` answers (as `options` say to ask) as this very process (another
/// test's server may hold the port). An error if it exits first, a taken port most often, or never answers; it
/// is not left running then.
pub(crate) fn spawn_redis(cmd: &mut Command, port: u16, options: &RedisOptions) -> Result<Child, String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{program} on port {port} exited: {status}"));
        }
        let pid = info(options, port, "server").and_then(|i| info_field(&i, "process_id").and_then(|p| p.parse().ok()));
        if pid == Some(child.id()) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("{program} on port {port} did not answer within 10 s"))
}

/// INFO `section` of 127.0.0.1:`port` (reached as `options` say), if it answers.
pub(crate) fn info(options: &RedisOptions, port: u16, section: &str) -> Option<String> {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut options.quick_conn(port)?)
        .ok()
}

/// `field`'s value in an INFO (or CLUSTER INFO) reply, made of `field:value` lines.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Polls `check` every 50 ms until it gives a value, or panics after `timeout` with `what` and the last reason
/// `check` gave for not being there yet. The sync sibling of [`eventually`], for the harness's own waits.
#[track_caller]
pub(crate) fn wait_for<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) if Instant::now() > deadline => panic!("timed out after {timeout:?} waiting for {what}: {why}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One `redis-server`/`redis-sentinel` of a [`RedisCluster`] or [`RedisSentinelSet`]: its port, its temp dir
/// (its log, config files, `nodes.conf`), the command line that starts it again there, and how it is reached;
/// killed on drop.
pub(crate) struct RedisProcess {
    /// The port, the same across restarts.
    pub(crate) port: u16,
    /// Working dir; kept while the process is down so that a restart finds its state.
    pub(crate) dir: tempfile::TempDir,
    /// What runs, and its arguments.
    program: &'static str,
    args: Vec<std::ffi::OsString>,
    /// TLS and the user, to tell when it answers.
    options: RedisOptions,
    /// `None` while killed.
    child: Option<Child>,
}

impl RedisProcess {
    /// Starts `program args` for `port` in `dir` (whose [`RedisProcess::log_path`] `args` should name as the
    /// log file), and waits until it answers, reached as `options` say. An error as [`spawn_redis`] gives.
    pub(crate) fn start(
        program: &'static str,
        args: Vec<std::ffi::OsString>,
        port: u16,
        dir: tempfile::TempDir,
        options: &RedisOptions,
    ) -> Result<Self, String> {
        let child = spawn_redis(Command::new(program).args(&args), port, options)?;
        Ok(RedisProcess {
            port,
            dir,
            program,
            args,
            options: options.clone(),
            child: Some(child),
        })
    }

    /// The log file of a process living in `dir`.
    pub(crate) fn log_path(dir: &Path) -> PathBuf {
        dir.join("redis.log")
    }

    /// Whether it runs (it has not been killed).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, leaving its dir as it is.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again with the same command line, retrying for 20 s while the port lingers after a kill.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match spawn_redis(Command::new(self.program).args(&self.args), self.port, &self.options) {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                Err(e) if Instant::now() > deadline => panic!("cannot restart {} :{}: {e}", self.program, self.port),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Its log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(Self::log_path(self.dir.path())).unwrap_or_default()
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The directory holding the workspace's binaries (`target/debug` for tests): `DQ_BIN_DIR`, else the
/// parent of the test executable's `deps/` dir. `scripts/test.sh` builds the binaries first.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("DQ_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("exe dir");
    if deps.ends_with("deps") {
        deps.parent().expect("target dir").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// A dq binary running as a real process, with its stderr in a temp file; killed on drop, its log
/// printed when the test fails.
pub struct DqProcess {
    /// Which binary, for messages.
    name: String,
    /// The process (`None` once reaped).
    child: Option<Child>,
    /// Holds the log file.
    dir: tempfile::TempDir,
}

impl DqProcess {
    /// Starts binary `name` from [`bin_dir`] with extra environment variables and arguments.
    pub fn spawn(name: &str, env: &[(&str, String)], args: &[&str]) -> Self {
        let path = bin_dir().join(name);
        assert!(
            path.exists(),
            "{} is missing: build the workspace's binaries first (scripts/test.sh does)",
            path.display()
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let log = std::fs::File::create(dir.path().join("log")).expect("log file");
        let mut cmd = Command::new(&path);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
        DqProcess {
            name: name.to_string(),
            child: Some(child),
            dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal by name (`TERM`, `INT`, `USR2`, `KILL`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {} failed", self.pid());
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut()?.try_wait().expect("try_wait") {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("log")
    }
}

impl Drop for DqProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- {} log ----\n{}", self.name, self.log());
        }
    }
}

/// Waits until `check` holds, polling every 20 ms, or panics naming `what` after `timeout`. Tests wait
/// for conditions, never for fixed times: the machines are shared and noisy.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A minimal SMTP server for tests: accepts every message and keeps its DATA, so a test can see the
/// e-mail a dq process sent over a real SMTP conversation.
pub struct SmtpSink {
    /// `smtp://127.0.0.1:<port>`.
    pub url: String,
    /// Every message's DATA, in order.
    pub messages: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl SmtpSink {
    /// Listens on a free port (call from inside a tokio runtime).
    pub async fn start() -> SmtpSink {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind smtp sink");
        let url = format!("smtp://{}", listener.local_addr().expect("addr"));
        let messages: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let kept = messages.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    let _ = write.write_all(b"220 sink ESMTP\r\n").await;
                    let mut data: Option<String> = None;
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Some(body) = data.as_mut() {
                            if line == "." {
                                kept.lock().expect("smtp sink lock").push(std::mem::take(body));
                                data = None;
                                let _ = write.write_all(b"250 OK queued\r\n").await;
                            } else {
                                body.push_str(&line);
                                body.push('\n');
                            }
                            continue;
                        }
                        let verb = line.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
                        let reply: &[u8] = match verb.as_str() {
                            "EHLO" | "HELO" => b"250-sink\r\n250 8BITMIME\r\n",
                            "DATA" => {
                                data = Some(String::new());
                                b"354 go ahead\r\n"
                            }
                            "QUIT" => {
                                let _ = write.write_all(b"221 bye\r\n").await;
                                return;
                            }
                            _ => b"250 OK\r\n",
                        };
                        let _ = write.write_all(reply).await;
                    }
                });
            }
        });
        SmtpSink { url, messages }
    }

    /// Messages received so far.
    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().expect("smtp sink lock").clone()
    }
}

/// An HTTP endpoint for tests that keeps every JSON body POSTed to it (alert webhooks).
pub struct WebhookSink {
    /// `http://127.0.0.1:<port>/alerts`.
    pub url: String,
    /// Every body received, in order.
    pub received: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl WebhookSink {
    /// Listens on a free port (call from inside a tokio runtime).
    pub async fn start() -> WebhookSink {
        Self::start_failing(0).await
    }

    /// Listens on a free port, and answers the first `failures` requests 503 without keeping them, as a
    /// webhook receiver that is down for a moment.
    pub async fn start_failing(failures: usize) -> WebhookSink {
        let received: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Default::default();
        let kept = received.clone();
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/alerts",
            axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
                let (kept, refused) = (kept.clone(), refused.clone());
                async move {
                    if refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < failures {
                        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down for a moment");
                    }
                    kept.lock().expect("webhook sink lock").push(body);
                    (axum::http::StatusCode::OK, "ok")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind webhook sink");
        let url = format!("http://{}/alerts", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        WebhookSink { url, received }
    }

    /// The bodies whose `kind` field is `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<serde_json::Value> {
        self.received
            .lock()
            .expect("webhook sink lock")
            .iter()
            .filter(|a| a["kind"] == kind)
            .cloned()
            .collect()
    }
}
