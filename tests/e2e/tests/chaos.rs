//! Chaos: every dq binary as a real process (dq-server, two dq-timers, two dq-consumers, dq-checker) on a
//! Redis that keeps an AOF fsynced on every write, while a fault loop kills them (-9), kills and restarts
//! Redis on its AOF, stalls Redis (SIGSTOP past `redis.response_timeout_ms`) and flushes its script cache.
//! Jobs with ids of the test's own go half to a pull topic (reserved and acked over HTTP by the test) and
//! half to a push topic (POSTed by dq-consumer to a sink in the test). Afterwards: no job lost, none
//! delivered that was not pushed, the audit repairs nothing, no job left in any queue. Duplicates are
//! counted, not refused: at-least-once delivery allows them. See docs/chaos.md.
//!
//! Sizes come from the environment: `DQ_CHAOS_JOBS` (2000), `DQ_CHAOS_RATE` (pushes per second, 50),
//! `DQ_CHAOS_FAULT_MS` (between faults, 1000), `DQ_CHAOS_PAUSE_MS` (the shortest Redis stall, 1000; each
//! lasts 1 to 3 times this), `DQ_CHAOS_SETTLE_S` (how long to wait for the last deliveries, 300),
//! `DQ_CHAOS_SEED` (random by default, printed), `DQ_CHAOS_LOG_DIR` (keep every process's logs there),
//! `DQ_CHAOS_VERBOSE=1` (print every fault). `scripts/chaos.sh` runs the long version against release
//! binaries.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_harness::{DqProcess, RedisServer, free_port};
use serde_json::{Value, json};

/// The topic the test's pull workers reserve.
const PULL: &str = "chaos.pull";
/// The topic whose callback is the test's sink, delivered by dq-consumer.
const PUSH: &str = "chaos.push";
/// TTR of every job: how long a reservation lost with a killed process (or a lost answer) waits.
const TTR_MS: u64 = 5000;
/// The push topic's callback timeout; dq-consumer reserves for at least this + 5 s.
const CALLBACK_TIMEOUT_MS: u64 = 1000;
/// `redis.response_timeout_ms` (and `connect_timeout_ms`) of every process: a stall longer than this is
/// an outage to dq.
const RESPONSE_TIMEOUT_MS: u64 = 500;
/// How long the fault loop waits for every process to show it works again after a Redis fault.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(30);
/// How often recovery signals are looked at (their resolution).
const RECOVERY_POLL: Duration = Duration::from_millis(50);

/// A setting from the environment, or its default.
fn setting<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
        _ => default,
    }
}

/// The run's sizes.
struct Plan {
    jobs: usize,
    rate: f64,
    fault_every: Duration,
    pause: Duration,
    settle: Duration,
    seed: u64,
    verbose: bool,
}

impl Plan {
    fn from_env() -> Plan {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64;
        Plan {
            jobs: setting("DQ_CHAOS_JOBS", 2000usize),
            rate: setting("DQ_CHAOS_RATE", 50.0f64),
            fault_every: Duration::from_millis(setting("DQ_CHAOS_FAULT_MS", 1000u64)),
            pause: Duration::from_millis(setting("DQ_CHAOS_PAUSE_MS", 1000u64)),
            settle: Duration::from_secs(setting("DQ_CHAOS_SETTLE_S", 300u64)),
            seed: setting("DQ_CHAOS_SEED", now),
            verbose: setting("DQ_CHAOS_VERBOSE", 0u8) == 1,
        }
    }
}

/// SplitMix64: reproducible from the printed seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How a job reached the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// dq-consumer POSTed it to the sink.
    Callback,
    /// A pull worker reserved it.
    Pull,
}

#[derive(Default)]
struct PushStats {
    created: u64,
    /// 409 on a retry of an id whose earlier attempt had no certain outcome: it was stored.
    conflict_on_retry: u64,
    /// 409 on an id's first attempt: the id had a record before the test pushed it.
    conflict_first: Vec<String>,
    unavailable: u64,
    /// 503s that said the outcome is unknown (and named the id to push again with).
    unknown_outcome: u64,
    /// 503s whose `id` was not the id pushed.
    wrong_id: Vec<String>,
    connection_errors: u64,
    internal: u64,
}

#[derive(Default)]
struct AckStats {
    acked: u64,
    retried: u64,
    stale: u64,
    not_found: Vec<String>,
    gave_up: u64,
}

/// What every task of the test records.
struct Shared {
    start: Instant,
    /// Ids whose push was acknowledged (201, or 409 on a retry).
    pushed: Mutex<HashSet<String>>,
    push_stats: Mutex<PushStats>,
    /// (sent, answered) of every acknowledged push attempt: dq-server's recovery signal.
    push_ok: Mutex<Vec<(Instant, Instant)>>,
    /// Ids that needed more than one attempt: (ms, status) of each.
    retried_pushes: Mutex<HashMap<String, Vec<(u64, u16)>>>,
    /// Every delivery: id → (ms, how).
    deliveries: Mutex<HashMap<String, Vec<(u64, Via)>>>,
    acks: Mutex<AckStats>,
    /// (ms, what) of every fault, in order.
    faults: Mutex<Vec<(u64, String)>>,
    pushes_done: AtomicBool,
    stop_pulling: AtomicBool,
}

impl Shared {
    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn delivered(&self, id: &str, via: Via) {
        let ms = self.ms();
        self.deliveries
            .lock()
            .unwrap()
            .entry(id.to_string())
            .or_default()
            .push((ms, via));
    }

    fn fault(&self, what: String, verbose: bool) {
        let ms = self.ms();
        if verbose {
            println!("chaos: fault at {:>7.1} s: {what}", ms as f64 / 1000.0);
        }
        self.faults.lock().unwrap().push((ms, what));
    }

    /// When the first push sent after `cut` was acknowledged. The list is in the order of the answers,
    /// so only its tail, answered after `cut`, can hold such pushes.
    fn first_push_ok_after(&self, cut: Instant) -> Option<Instant> {
        self.push_ok
            .lock()
            .unwrap()
            .iter()
            .rev()
            .take_while(|(_, answered)| *answered >= cut)
            .filter(|(sent, _)| *sent >= cut)
            .map(|(_, answered)| *answered)
            .min()
    }
}

/// Where the processes' logs go: every life of every process, one file each. Kept when the test fails (or
/// when `DQ_CHAOS_LOG_DIR` names the place).
struct LogDir {
    temp: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl LogDir {
    fn new() -> LogDir {
        match std::env::var("DQ_CHAOS_LOG_DIR") {
            Ok(dir) if !dir.is_empty() => {
                std::fs::create_dir_all(&dir).expect("DQ_CHAOS_LOG_DIR");
                LogDir {
                    temp: None,
                    path: PathBuf::from(dir),
                }
            }
            _ => {
                let temp = tempfile::Builder::new()
                    .prefix("dq-chaos-")
                    .tempdir()
                    .expect("temp dir");
                let path = temp.path().to_path_buf();
                LogDir { temp: Some(temp), path }
            }
        }
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(t) = self.temp.take() {
                let _ = t.keep();
            }
            eprintln!("chaos: every process's logs are kept in {}", self.path.display());
        }
    }
}

/// One dq process of the installation, restarted in place (same port, same environment) after each kill.
struct Proc {
    bin: &'static str,
    label: String,
    port: u16,
    vars: Vec<(&'static str, String)>,
    process: Option<DqProcess>,
    /// Processes started so far under this label.
    lives: usize,
}

impl Proc {
    fn new(bin: &'static str, label: &str, redis: &RedisServer, extra: &[(&'static str, String)]) -> Proc {
        let port = free_port();
        let mut vars = common::env(&[redis], port);
        vars.extend(extra.iter().cloned());
        Proc {
            bin,
            label: label.to_string(),
            port,
            vars,
            process: None,
            lives: 0,
        }
    }

    /// Starts it and waits until it answers `/healthz`. One that exits first (it reads the layout from
    /// Redis before it serves) is started again. Returns how long it took.
    async fn start(&mut self, http: &reqwest::Client, logs: &Path) -> Duration {
        let began = Instant::now();
        let deadline = began + Duration::from_secs(60);
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        loop {
            self.lives += 1;
            let mut p = DqProcess::spawn(self.bin, &self.vars, &[]);
            while p.is_running() {
                if http.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                    self.process = Some(p);
                    return began.elapsed();
                }
                assert!(
                    Instant::now() < deadline,
                    "{} does not answer {url} after 60 s:\n{}",
                    self.label,
                    p.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.archive(&p, logs, "exited before it served");
            assert!(
                Instant::now() < deadline,
                "{} keeps exiting at start:\n{}",
                self.label,
                p.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// kill -9, and its log kept.
    fn kill(&mut self, logs: &Path) {
        if let Some(mut p) = self.process.take() {
            p.signal("KILL");
            p.wait(Duration::from_secs(10)).expect("a killed process exits");
            self.archive(&p, logs, "killed (SIGKILL)");
        }
    }

    /// Whether it exited by itself; its log is kept then.
    fn exited(&mut self, logs: &Path) -> Option<String> {
        let p = self.process.as_mut()?;
        if p.is_running() {
            return None;
        }
        let p = self.process.take().expect("checked");
        self.archive(&p, logs, "exited by itself");
        let log = p.log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        Some(format!(
            "{} (life {}) exited by itself; last lines:\n{}",
            self.label,
            self.lives,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }

    fn archive(&self, p: &DqProcess, logs: &Path, how: &str) {
        let file = logs.join(format!("{}.{}.log", self.label, self.lives));
        let _ = std::fs::write(
            file,
            format!("# {} life {}: {how}\n{}", self.label, self.lives, p.log()),
        );
    }

    /// Keeps the log of the running process (at the end).
    fn archive_running(&self, logs: &Path) {
        if let Some(p) = &self.process {
            self.archive(p, logs, "running at the end");
        }
    }
}

/// Scrapes a process's `/metrics`; `None` when it does not answer.
async fn scrape(http: &reqwest::Client, port: u16) -> Option<HashMap<String, f64>> {
    let text = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                l.rsplit_once(' ')
                    .and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            })
            .collect(),
    )
}

/// The metrics whose change shows that a process of kind `bin` works against Redis again:
/// dq-consumer an ack landed, dq-timer a promotion or an expiry ran, dq-checker a PING was answered (the
/// gauge holds the round trip of the last answered one, so any change is a new answer).
fn recovery_metrics(bin: &str) -> &'static [&'static str] {
    match bin {
        "dq-consumer" => &["dq_jobs_acked_total"],
        "dq-timer" => &["dq_jobs_promoted_total", "dq_jobs_expired_total"],
        "dq-checker" => &["dq_redis_latency_seconds"],
        _ => &[],
    }
}

fn metric_sum(m: &HashMap<String, f64>, names: &[&str]) -> f64 {
    m.iter()
        .filter(|(k, _)| {
            names
                .iter()
                .any(|n| k.as_str() == *n || k.starts_with(&format!("{n}{{")))
        })
        .map(|(_, v)| v)
        .sum()
}

/// One Redis fault and how long each process took to work again after Redis was back.
struct Recovery {
    kind: &'static str,
    at_ms: u64,
    /// From the kill (or SIGSTOP) to Redis answering PING again.
    outage: Duration,
    /// Per process label: `None` when no signal came within [`RECOVERY_DEADLINE`] (or the load ended).
    by: Vec<(String, &'static str, Option<Duration>)>,
}

/// What the fault loop did.
struct FaultReport {
    procs: Vec<Proc>,
    counts: BTreeMap<String, usize>,
    recoveries: Vec<Recovery>,
    /// (binary, time from its start to `/healthz`) after each kill.
    restarts: Vec<(&'static str, Duration)>,
    crashes: Vec<String>,
}

enum Fault {
    Kill(usize),
    RedisRestart,
    RedisPause,
    ScriptFlush,
}

struct Faults {
    shared: Arc<Shared>,
    redis: Arc<Mutex<RedisServer>>,
    redis_url: String,
    procs: Vec<Proc>,
    http: reqwest::Client,
    logs: PathBuf,
    every: Duration,
    pause: Duration,
    verbose: bool,
    rng: Rng,
}

/// Waits until Redis answers PING with PONG (its AOF loaded).
fn wait_pong(url: &str) {
    let client = redis::Client::open(url).expect("redis url");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(1)) {
            let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut c);
            if pong.is_ok_and(|p| p == "PONG") {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis does not answer PING 60 s after its restart"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Faults {
    async fn run(mut self) -> FaultReport {
        let mut report = FaultReport {
            procs: Vec::new(),
            counts: BTreeMap::new(),
            recoveries: Vec::new(),
            restarts: Vec::new(),
            crashes: Vec::new(),
        };
        loop {
            tokio::time::sleep(self.every).await;
            if self.shared.pushes_done.load(Ordering::SeqCst) {
                break;
            }
            self.restart_crashed(&mut report).await;
            let fault = match self.rng.below(4) {
                0 => Fault::Kill(self.rng.below(self.procs.len() as u64) as usize),
                1 => Fault::RedisRestart,
                2 => Fault::RedisPause,
                _ => Fault::ScriptFlush,
            };
            match fault {
                Fault::Kill(i) => {
                    let p = &mut self.procs[i];
                    *report.counts.entry(format!("kill -9 {}", p.bin)).or_default() += 1;
                    p.kill(&self.logs);
                    let took = p.start(&self.http, &self.logs).await;
                    report.restarts.push((p.bin, took));
                    let what = format!("kill -9 {}, restarted, serving after {} ms", p.label, took.as_millis());
                    self.shared.fault(what, self.verbose);
                }
                Fault::RedisRestart => {
                    *report
                        .counts
                        .entry("kill -9 redis, restart on its AOF".into())
                        .or_default() += 1;
                    let at_ms = self.shared.ms();
                    let r = self.redis.clone();
                    tokio::task::spawn_blocking(move || r.lock().unwrap().stop())
                        .await
                        .unwrap();
                    let cut = Instant::now();
                    let baseline = self.baseline().await;
                    let (r, url) = (self.redis.clone(), self.redis_url.clone());
                    let back = tokio::task::spawn_blocking(move || {
                        r.lock().unwrap().restart();
                        wait_pong(&url);
                        Instant::now()
                    })
                    .await
                    .unwrap();
                    let by = self.watch_recovery(cut, back, &baseline).await;
                    self.record("redis restart", at_ms, back - cut, by, &mut report);
                }
                Fault::RedisPause => {
                    *report.counts.entry("SIGSTOP redis, SIGCONT".into()).or_default() += 1;
                    let at_ms = self.shared.ms();
                    self.redis.lock().unwrap().pause();
                    let cut = Instant::now();
                    let baseline = self.baseline().await;
                    // From `pause` (past the response timeout: calls fail) to 3 × `pause` (past dq-server's
                    // own re-sends of a push: it answers 503 with the id to push again with).
                    let pause =
                        self.pause + Duration::from_millis(self.rng.below(2 * self.pause.as_millis() as u64 + 1));
                    tokio::time::sleep(pause.saturating_sub(cut.elapsed())).await;
                    self.redis.lock().unwrap().resume();
                    let back = Instant::now();
                    let by = self.watch_recovery(cut, back, &baseline).await;
                    self.record("redis pause", at_ms, back - cut, by, &mut report);
                }
                Fault::ScriptFlush => {
                    *report.counts.entry("SCRIPT FLUSH".into()).or_default() += 1;
                    let url = self.redis_url.clone();
                    tokio::task::spawn_blocking(move || {
                        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
                    })
                    .await
                    .unwrap();
                    self.shared.fault("SCRIPT FLUSH".into(), self.verbose);
                }
            }
        }
        self.restart_crashed(&mut report).await;
        report.procs = self.procs;
        report
    }

    /// Starts again any process that exited by itself, and records it: a dq process should never.
    async fn restart_crashed(&mut self, report: &mut FaultReport) {
        for p in &mut self.procs {
            if let Some(why) = p.exited(&self.logs) {
                self.shared.fault(format!("CRASH: {why}"), true);
                report.crashes.push(why);
                p.start(&self.http, &self.logs).await;
            }
        }
    }

    /// Each process's recovery metric, read while Redis is down or stopped: nothing can raise it then.
    async fn baseline(&self) -> Vec<f64> {
        let mut out = Vec::new();
        for p in &self.procs {
            let m = scrape(&self.http, p.port).await.unwrap_or_default();
            out.push(metric_sum(&m, recovery_metrics(p.bin)));
        }
        out
    }

    /// How long after `back` each process showed it works again: dq-server the first push acknowledged
    /// of those sent after `cut`, the others their recovery metric moving away from `baseline`.
    async fn watch_recovery(
        &self,
        cut: Instant,
        back: Instant,
        baseline: &[f64],
    ) -> Vec<(String, &'static str, Option<Duration>)> {
        let mut seen: Vec<Option<Instant>> = vec![None; self.procs.len()];
        let deadline = back + RECOVERY_DEADLINE;
        loop {
            for (i, p) in self.procs.iter().enumerate() {
                if seen[i].is_some() {
                    continue;
                }
                if p.bin == "dq-server" {
                    seen[i] = self.shared.first_push_ok_after(cut);
                } else if let Some(m) = scrape(&self.http, p.port).await
                    && metric_sum(&m, recovery_metrics(p.bin)) != baseline[i]
                {
                    seen[i] = Some(Instant::now());
                }
            }
            if seen.iter().all(Option::is_some)
                || Instant::now() > deadline
                || self.shared.pushes_done.load(Ordering::SeqCst)
            {
                break;
            }
            tokio::time::sleep(RECOVERY_POLL).await;
        }
        self.procs
            .iter()
            .zip(seen)
            .map(|(p, t)| (p.label.clone(), p.bin, t.map(|t| t.saturating_duration_since(back))))
            .collect()
    }

    fn record(
        &self,
        kind: &'static str,
        at_ms: u64,
        outage: Duration,
        by: Vec<(String, &'static str, Option<Duration>)>,
        report: &mut FaultReport,
    ) {
        let times: Vec<String> = by
            .iter()
            .map(|(label, _, d)| match d {
                Some(d) => format!("{label} {} ms", d.as_millis()),
                None => format!("{label} -"),
            })
            .collect();
        let what = format!(
            "{kind}: redis answered after {} ms; working again after: {}",
            outage.as_millis(),
            times.join(", ")
        );
        self.shared.fault(what, self.verbose);
        report.recoveries.push(Recovery {
            kind,
            at_ms,
            outage,
            by,
        });
    }
}

/// How long the work on a job takes, 0 to `max_ms` - 1 ms by its id: deliveries and pull jobs are in
/// flight for a while, so that kills and Redis faults land between a delivery and its ack.
fn work_time(id: &str, max_ms: u64) -> Duration {
    // FNV-1a.
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    Duration::from_millis(h % max_ms)
}

/// The callback: records each job's id, takes up to 50 ms, answers 200 with a body (a delivery that
/// succeeds).
async fn start_sink(shared: Arc<Shared>) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let shared = shared.clone();
            async move {
                let id = body["id"].as_str().unwrap_or("<no id>");
                shared.delivered(id, Via::Callback);
                tokio::time::sleep(work_time(id, 50)).await;
                r#"{"ok":true}"#
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// One job the test pushes.
struct Job {
    id: String,
    topic: &'static str,
    delay_ms: u64,
}

/// Pushes jobs off the shared list, job `i` no earlier than `i / rate` s after the start, each until it is
/// acknowledged: a 503 or a broken connection is pushed again with the same id, and a 409 then means the
/// earlier attempt stored it (docs/api.md, Push).
async fn pusher(shared: Arc<Shared>, jobs: Arc<Vec<Job>>, next: Arc<AtomicUsize>, rate: f64, port: u16) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let began = Instant::now();
    loop {
        let i = next.fetch_add(1, Ordering::SeqCst);
        let Some(job) = jobs.get(i) else { return };
        tokio::time::sleep_until((began + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        let body = json!({
            "id": job.id, "topic": job.topic, "body": {"n": i}, "delay_ms": job.delay_ms,
            "ttr_ms": TTR_MS, "max_attempts": 0,
        });
        let mut history: Vec<(u64, u16)> = Vec::new();
        loop {
            let sent = Instant::now();
            let (status, out) = common::call(&http, port, "POST", "/v1/jobs", Some(body.clone())).await;
            history.push((shared.ms(), status));
            let stored = {
                let mut s = shared.push_stats.lock().unwrap();
                match status {
                    201 => {
                        s.created += 1;
                        true
                    }
                    409 if history.len() > 1 => {
                        s.conflict_on_retry += 1;
                        true
                    }
                    409 => {
                        s.conflict_first.push(job.id.clone());
                        true
                    }
                    503 => {
                        s.unavailable += 1;
                        if let Some(id) = out["error"]["id"].as_str() {
                            s.unknown_outcome += 1;
                            if id != job.id {
                                s.wrong_id.push(format!("{} answered with id {id}", job.id));
                            }
                        }
                        false
                    }
                    0 => {
                        s.connection_errors += 1;
                        false
                    }
                    500 => {
                        s.internal += 1;
                        false
                    }
                    _ => panic!("push {}: unexpected answer {status} {out}", job.id),
                }
            };
            if stored {
                shared.push_ok.lock().unwrap().push((sent, Instant::now()));
                shared.pushed.lock().unwrap().insert(job.id.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if history.len() > 1 {
            shared.retried_pushes.lock().unwrap().insert(job.id.clone(), history);
        }
    }
}

/// A pull consumer over HTTP: long-poll reserves of the pull topic, each job recorded, worked on (up to
/// 20 ms) and acked. An ack
/// that gets no answer (or a 503) is sent again with the same receipt for 10 s; a 409 means the
/// reservation is over (the job comes back, or was acked by an earlier attempt).
async fn puller(shared: Arc<Shared>, port: u16) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    while !shared.stop_pulling.load(Ordering::SeqCst) {
        let (status, out) = common::call(
            &http,
            port,
            "POST",
            "/v1/reserve",
            Some(json!({"topics": [PULL], "count": 10, "timeout_ms": 1000})),
        )
        .await;
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for job in out["jobs"].as_array().cloned().unwrap_or_default() {
            let id = job["id"].as_str().expect("a reserved job has an id").to_string();
            shared.delivered(&id, Via::Pull);
            tokio::time::sleep(work_time(&id, 20)).await;
            let receipt = job["receipt"].as_str().expect("a receipt");
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut tries = 0;
            loop {
                tries += 1;
                let (status, _) = common::call(
                    &http,
                    port,
                    "POST",
                    &format!("/v1/jobs/{id}/ack"),
                    Some(json!({"receipt": receipt})),
                )
                .await;
                let late = Instant::now() > deadline;
                let done = {
                    let mut a = shared.acks.lock().unwrap();
                    if tries > 1 {
                        a.retried += 1;
                    }
                    match status {
                        204 => a.acked += 1,
                        409 => a.stale += 1,
                        404 => a.not_found.push(id.clone()),
                        _ if late => a.gave_up += 1,
                        _ => {}
                    }
                    matches!(status, 204 | 409 | 404) || late
                };
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The two topics' counts from `GET /v1/stats`, and the partitions that did not answer.
async fn stats(http: &reqwest::Client, port: u16) -> Option<(BTreeMap<String, i64>, Vec<Value>)> {
    let (status, out) = common::call(http, port, "GET", "/v1/stats", None).await;
    if status != 200 {
        return None;
    }
    let mut counts = BTreeMap::new();
    for topic in [PULL, PUSH] {
        for state in ["delayed", "ready", "reserved", "dead"] {
            let n = out["topics"][topic][state].as_i64().unwrap_or(0);
            counts.insert(format!("{topic}:{state}"), n);
        }
    }
    let down = out["redis"]["partitions_down"].as_array().cloned().unwrap_or_default();
    Some((counts, down))
}

/// Sum of `cmd` (ZCARD, HLEN) over the keys matching `pattern`.
fn sum_over_keys(c: &mut redis::Connection, pattern: &str, cmd: &str) -> (usize, i64) {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(c).unwrap();
    let mut total = 0;
    for k in &keys {
        let n: i64 = redis::cmd(cmd).arg(k).query(c).unwrap();
        total += n;
    }
    (keys.len(), total)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn job_plan(n: usize, rng: &mut Rng) -> Vec<Job> {
    (0..n)
        .map(|i| Job {
            id: format!("chaos-{i:06}"),
            topic: if i % 2 == 0 { PULL } else { PUSH },
            // A third due at once, the rest spread over 2 s, so that the timers matter.
            delay_ms: if rng.below(3) == 0 { 0 } else { 1 + rng.below(2000) },
        })
        .collect()
}

// Multi-threaded: the sink must answer while the fault loop blocks on a Redis restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_loses_no_job_and_leaves_nothing_to_repair() {
    let plan = Plan::from_env();
    println!(
        // On a line of its own: cargo test's "test … ..." has no newline yet.
        "\nchaos: {} jobs (half pull, half push), {} pushes/s, a fault every {} ms, redis stalls of {} to {} ms, \
         seed {} (DQ_CHAOS_SEED={} to run it again)",
        plan.jobs,
        plan.rate,
        plan.fault_every.as_millis(),
        plan.pause.as_millis(),
        3 * plan.pause.as_millis(),
        plan.seed,
        plan.seed
    );
    let began = Instant::now();
    let mut rng = Rng(plan.seed);
    let logs = LogDir::new();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // The installation: Redis on an AOF fsynced at every write, one server, two timers, two consumers, one
    // checker, each with short periods so that it recovers quickly.
    let redis = RedisServer::start_persistent();
    let redis_url = redis.url();
    let t = |ms: u64| ms.to_string();
    let extra: Vec<(&'static str, String)> = vec![
        ("DQ__REDIS__RESPONSE_TIMEOUT_MS", t(RESPONSE_TIMEOUT_MS)),
        ("DQ__REDIS__CONNECT_TIMEOUT_MS", t(RESPONSE_TIMEOUT_MS)),
        ("DQ__TOPICS__REFRESH_MS", t(100)),
        ("DQ__TIMER__LEASE_MS", t(1000)),
        ("DQ__TIMER__RENEW_MS", t(200)),
        ("DQ__CHECKER__INTERVAL_MS", t(200)),
        ("DQ__CHECKER__AUDIT_INTERVAL_MS", t(5000)),
    ];
    let mut procs = vec![
        Proc::new("dq-server", "dq-server", &redis, &extra),
        Proc::new("dq-timer", "dq-timer#1", &redis, &extra),
        Proc::new("dq-timer", "dq-timer#2", &redis, &extra),
        Proc::new("dq-consumer", "dq-consumer#1", &redis, &extra),
        Proc::new("dq-consumer", "dq-consumer#2", &redis, &extra),
        Proc::new("dq-checker", "dq-checker", &redis, &extra),
    ];
    for p in &mut procs {
        p.start(&http, &logs.path).await;
    }
    let port = procs[0].port;
    let checker_vars = procs[5].vars.clone();

    let shared = Arc::new(Shared {
        start: Instant::now(),
        pushed: Default::default(),
        push_stats: Default::default(),
        push_ok: Default::default(),
        retried_pushes: Default::default(),
        deliveries: Default::default(),
        acks: Default::default(),
        faults: Default::default(),
        pushes_done: AtomicBool::new(false),
        stop_pulling: AtomicBool::new(false),
    });
    let sink = start_sink(shared.clone()).await;
    let (status, out) = common::call(
        &http,
        port,
        "PUT",
        &format!("/v1/topics/{PUSH}"),
        Some(json!({
            "callback": {"url": sink, "timeout_ms": CALLBACK_TIMEOUT_MS, "concurrency": 16},
            "retry": {"max_attempts": 0, "backoff_ms": [200]},
        })),
    )
    .await;
    assert_eq!(status, 200, "register {PUSH}: {out}");
    let (status, out) = common::call(
        &http,
        port,
        "PUT",
        &format!("/v1/topics/{PULL}"),
        Some(json!({"retry": {"max_attempts": 0}})),
    )
    .await;
    assert_eq!(status, 200, "register {PULL}: {out}");

    // Load and faults.
    let redis = Arc::new(Mutex::new(redis));
    let jobs = Arc::new(job_plan(plan.jobs, &mut rng));
    let next = Arc::new(AtomicUsize::new(0));
    let pushers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(pusher(shared.clone(), jobs.clone(), next.clone(), plan.rate, port)))
        .collect();
    let pullers: Vec<_> = (0..2).map(|_| tokio::spawn(puller(shared.clone(), port))).collect();
    let mut faults = tokio::spawn(
        Faults {
            shared: shared.clone(),
            redis: redis.clone(),
            redis_url: redis_url.clone(),
            procs,
            http: http.clone(),
            logs: logs.path.clone(),
            every: plan.fault_every,
            pause: plan.pause,
            verbose: plan.verbose,
            rng: Rng(rng.next()),
        }
        .run(),
    );
    let mut pushing = tokio::spawn(async move {
        for p in pushers {
            p.await.unwrap();
        }
    });
    tokio::select! {
        done = &mut pushing => done.unwrap(),
        // The fault loop ends only after the pushes, unless it failed (a process that never came back):
        // its panic, rather than pushers retrying for ever.
        failed = &mut faults => match failed {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            other => panic!("the fault loop ended before the pushes: {:?}", other.map(|_| ())),
        },
    }
    shared.pushes_done.store(true, Ordering::SeqCst);
    let pushed_in = began.elapsed();
    let report = faults.await.unwrap();
    let mut procs = report.procs;
    println!(
        "chaos: all {} pushes acknowledged after {:.1} s; faults stopped",
        plan.jobs,
        pushed_in.as_secs_f64()
    );

    // Every pushed job delivered and nothing left in the queues (a generous deadline; lost reservations
    // come back after their TTR).
    let settle_began = Instant::now();
    let pushed: HashSet<String> = shared.pushed.lock().unwrap().clone();
    let mut last_state;
    let settled = loop {
        let missing = {
            let d = shared.deliveries.lock().unwrap();
            pushed.iter().filter(|id| !d.contains_key(*id)).count()
        };
        let counts = stats(&http, port).await;
        let left: i64 = counts
            .as_ref()
            .map(|(c, down)| c.values().map(|n| n.abs()).sum::<i64>() + down.len() as i64)
            .unwrap_or(-1);
        last_state = format!("{missing} pushed jobs not delivered; counts {counts:?}");
        if missing == 0 && left == 0 {
            break true;
        }
        if settle_began.elapsed() > plan.settle {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "chaos: {} after faults stopped: {:.1} s ({last_state})",
        if settled { "settled" } else { "NOT settled" },
        settle_began.elapsed().as_secs_f64()
    );
    shared.stop_pulling.store(true, Ordering::SeqCst);
    for p in pullers {
        p.await.unwrap();
    }

    // The figures.
    let deliveries = shared.deliveries.lock().unwrap().clone();
    let topic_of: HashMap<&str, &str> = jobs.iter().map(|j| (j.id.as_str(), j.topic)).collect();
    let lost: Vec<&String> = {
        let mut l: Vec<&String> = pushed.iter().filter(|id| !deliveries.contains_key(*id)).collect();
        l.sort();
        l
    };
    let mut unexpected: Vec<String> = deliveries.keys().filter(|id| !pushed.contains(*id)).cloned().collect();
    unexpected.sort();
    let misrouted: Vec<String> = deliveries
        .iter()
        .filter(|(id, ds)| {
            let want = if topic_of.get(id.as_str()) == Some(&PULL) {
                Via::Pull
            } else {
                Via::Callback
            };
            ds.iter().any(|(_, via)| *via != want)
        })
        .map(|(id, _)| id.clone())
        .collect();
    let mut duplicates: Vec<(&String, &Vec<(u64, Via)>)> = deliveries.iter().filter(|(_, ds)| ds.len() > 1).collect();
    duplicates.sort_by(|a, b| a.0.cmp(b.0));
    let extra_deliveries: usize = duplicates.iter().map(|(_, ds)| ds.len() - 1).sum();
    let dup_by_via = |via: Via| duplicates.iter().filter(|(_, ds)| ds[0].1 == via).count();
    let process_kills: usize = report
        .counts
        .iter()
        .filter(|(k, _)| k.starts_with("kill -9 dq-"))
        .map(|(_, n)| n)
        .sum();
    let redis_kills = report
        .counts
        .get("kill -9 redis, restart on its AOF")
        .copied()
        .unwrap_or(0);
    let kills = process_kills + redis_kills;
    let faults_total: usize = report.counts.values().sum();

    // Every job's record says done.
    let mut not_done: Vec<String> = Vec::new();
    {
        let ids: Vec<String> = pushed.iter().cloned().collect();
        let mut set = tokio::task::JoinSet::new();
        for chunk in ids.chunks(ids.len().div_ceil(8).max(1)) {
            let (chunk, http) = (chunk.to_vec(), http.clone());
            set.spawn(async move {
                let mut bad = Vec::new();
                for id in chunk {
                    let (status, job) = common::call(&http, port, "GET", &format!("/v1/jobs/{id}"), None).await;
                    if status != 200 || job["state"] != "done" {
                        bad.push(format!("{id}: {status} {job}"));
                    }
                }
                bad
            });
        }
        while let Some(bad) = set.join_next().await {
            not_done.extend(bad.unwrap());
        }
        not_done.sort();
    }

    // The counts, and the structures themselves.
    let final_counts = stats(&http, port).await;
    let structures = tokio::task::spawn_blocking({
        let url = redis_url.clone();
        move || {
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut out = BTreeMap::new();
            for (what, pattern, cmd) in [
                ("delay sets", "dq:{*}:delayed", "ZCARD"),
                ("reserved sets", "dq:{*}:reserved", "ZCARD"),
                ("ready queues", "dq:{*}:ready:*", "ZCARD"),
                ("dead lists", "dq:{*}:dead:*", "ZCARD"),
                ("quarantines", "dq:{*}:quarantine", "HLEN"),
            ] {
                out.insert(what, sum_over_keys(&mut c, pattern, cmd));
            }
            out
        }
    })
    .await
    .unwrap();

    // `dq-checker audit`, with the installation's environment.
    let mut audit_vars = checker_vars.clone();
    let audit_port = free_port();
    audit_vars.retain(|(k, _)| *k != "DQ__METRICS__LISTEN" && *k != "DQ__SERVER__LISTEN");
    audit_vars.push(("DQ__METRICS__LISTEN", format!("127.0.0.1:{audit_port}")));
    audit_vars.push(("DQ__SERVER__LISTEN", format!("127.0.0.1:{audit_port}")));
    let mut audit = DqProcess::spawn("dq-checker", &audit_vars, &["audit"]);
    let status = tokio::task::spawn_blocking(move || {
        let status = audit.wait(Duration::from_secs(600));
        (status, audit.log())
    })
    .await
    .unwrap();
    let (audit_status, audit_log) = status;
    assert_eq!(
        audit_status.and_then(|s| s.code()),
        Some(0),
        "dq-checker audit:\n{audit_log}"
    );
    let audit_report: Value = serde_json::from_str(
        audit_log
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .expect("a JSON report"),
    )
    .unwrap();

    // The processes: none died by itself; the periodic audits of every checker life repaired nothing.
    let mut exited_at_end = Vec::new();
    for p in &mut procs {
        if let Some(why) = p.exited(&logs.path) {
            exited_at_end.push(why);
        }
        p.archive_running(&logs.path);
    }
    let (mut audits_clean, mut audits_repaired) = (0, Vec::new());
    for entry in std::fs::read_dir(&logs.path).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("dq-checker") {
            continue;
        }
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        audits_clean += log.matches("audit found nothing to repair").count();
        audits_repaired.extend(
            log.lines()
                .filter(|l| l.contains("audit repaired") || l.contains("audit: "))
                .map(|l| format!("{}: {l}", path.display())),
        );
    }

    // The report.
    let ps = shared.push_stats.lock().unwrap();
    let acks = shared.acks.lock().unwrap();
    let count_via = |via: Via| deliveries.values().flatten().filter(|(_, v)| *v == via).count();
    println!(
        "chaos: pushes: {} created (201), {} stored by an earlier attempt (409 on a retry), {} answered 503 \
         ({} of them 'outcome unknown, push again with the id'), {} connection errors, {} answered 500, {} ids \
         needed a retry",
        ps.created,
        ps.conflict_on_retry,
        ps.unavailable,
        ps.unknown_outcome,
        ps.connection_errors,
        ps.internal,
        shared.retried_pushes.lock().unwrap().len()
    );
    println!(
        "chaos: delivered: {} ids by callback in {} deliveries, {} ids by pull in {} reservations; pull acks: {} \
         done, {} stale (409), {} sent again, {} given up, {} not found",
        deliveries.values().filter(|d| d[0].1 == Via::Callback).count(),
        count_via(Via::Callback),
        deliveries.values().filter(|d| d[0].1 == Via::Pull).count(),
        count_via(Via::Pull),
        acks.acked,
        acks.stale,
        acks.retried,
        acks.gave_up,
        acks.not_found.len()
    );
    println!("chaos: faults: {faults_total} in all");
    for (kind, n) in &report.counts {
        println!("chaos:   {n:>5}  {kind}");
    }
    println!("chaos: kills: {kills} ({process_kills} dq processes, {redis_kills} redis)");
    println!(
        "chaos: lost: {}   unexpected: {}   misrouted: {}",
        lost.len(),
        unexpected.len(),
        misrouted.len()
    );
    let per_kill = |n: usize| {
        if kills == 0 {
            0.0
        } else {
            n as f64 * 1000.0 / kills as f64
        }
    };
    println!(
        "chaos: duplicates: {} ids delivered more than once ({} by callback, {} by pull), {} extra deliveries; \
         per 1,000 kills: {:.1} ids, {:.1} extra deliveries",
        duplicates.len(),
        dup_by_via(Via::Callback),
        dup_by_via(Via::Pull),
        extra_deliveries,
        per_kill(duplicates.len()),
        per_kill(extra_deliveries)
    );
    {
        let faults = shared.faults.lock().unwrap();
        for (id, ds) in duplicates.iter().take(10) {
            let first = ds[0].0;
            let before: Vec<String> = faults
                .iter()
                .filter(|(ms, _)| *ms + 10_000 >= first && *ms <= ds[ds.len() - 1].0)
                .map(|(ms, f)| format!("{:.1} s {}", *ms as f64 / 1000.0, f.split(';').next().unwrap_or(f)))
                .collect();
            let at: Vec<String> = ds
                .iter()
                .map(|(ms, via)| format!("{:.1} s ({via:?})", *ms as f64 / 1000.0))
                .collect();
            println!(
                "chaos:   duplicate {id} delivered at {}; faults from 10 s before the first delivery to the last: {}",
                at.join(", "),
                before.join(" | ")
            );
        }
    }
    let restart_by: BTreeMap<&str, Vec<Duration>> = report.restarts.iter().fold(BTreeMap::new(), |mut m, (b, d)| {
        m.entry(*b).or_insert_with(Vec::new).push(*d);
        m
    });
    for (bin, mut ds) in restart_by {
        ds.sort();
        println!(
            "chaos: {bin} after kill -9: serving again (/healthz) in median {} ms, max {} ms ({} restarts)",
            percentile(&ds, 0.5).as_millis(),
            ds[ds.len() - 1].as_millis(),
            ds.len()
        );
    }
    for kind in ["redis restart", "redis pause"] {
        let rs: Vec<&Recovery> = report.recoveries.iter().filter(|r| r.kind == kind).collect();
        if rs.is_empty() {
            continue;
        }
        let mut outages: Vec<Duration> = rs.iter().map(|r| r.outage).collect();
        outages.sort();
        println!(
            "chaos: recovery after {} {kind}s (ms from redis answering PING again; redis was out for median {} ms, \
             max {} ms):",
            rs.len(),
            percentile(&outages, 0.5).as_millis(),
            outages[outages.len() - 1].as_millis()
        );
        for bin in ["dq-server", "dq-consumer", "dq-timer", "dq-checker"] {
            let mut ds: Vec<Duration> = Vec::new();
            let mut none = 0;
            for r in &rs {
                for (_, b, d) in &r.by {
                    if *b == bin {
                        match d {
                            Some(d) => ds.push(*d),
                            None => none += 1,
                        }
                    }
                }
            }
            ds.sort();
            if ds.is_empty() {
                println!("chaos:   {bin:<12} no signal ({none} without one)");
                continue;
            }
            println!(
                "chaos:   {bin:<12} n {:>4}  min {:>5}  median {:>5}  p90 {:>5}  max {:>5}  (no signal within {} s or \
                 before the load ended: {none})",
                ds.len(),
                ds[0].as_millis(),
                percentile(&ds, 0.5).as_millis(),
                percentile(&ds, 0.9).as_millis(),
                ds[ds.len() - 1].as_millis(),
                RECOVERY_DEADLINE.as_secs()
            );
        }
        if plan.verbose || rs.len() <= 20 {
            for r in &rs {
                let by: Vec<String> =
                    r.by.iter()
                        .map(|(l, _, d)| format!("{l} {}", d.map_or("-".into(), |d| d.as_millis().to_string())))
                        .collect();
                println!(
                    "chaos:     at {:>6.1} s, out {:>4} ms: {}",
                    r.at_ms as f64 / 1000.0,
                    r.outage.as_millis(),
                    by.join(", ")
                );
            }
        }
    }
    println!("chaos: dq-checker audit: {audit_report}");
    println!(
        "chaos: periodic audits during the run: {audits_clean} found nothing, {} repair lines",
        audits_repaired.len()
    );
    println!("chaos: counts at the end: {final_counts:?}");
    println!("chaos: structures at the end (keys, members): {structures:?}");
    println!(
        "chaos: total {:.1} s; process logs in {}{}",
        began.elapsed().as_secs_f64(),
        logs.path.display(),
        if logs.temp.is_some() {
            " (removed unless the test fails; DQ_CHAOS_LOG_DIR keeps them)"
        } else {
            ""
        }
    );

    // Evidence for whatever fails below.
    let evidence = |ids: &[&String]| -> String {
        let retried = shared.retried_pushes.lock().unwrap();
        let faults = shared.faults.lock().unwrap();
        let mut s = String::new();
        for id in ids.iter().take(20) {
            s.push_str(&format!(
                "\n  {id}: push attempts (ms, status) {:?}; deliveries {:?}",
                retried.get(*id),
                deliveries.get(*id)
            ));
        }
        s.push_str("\n  faults (ms, what):");
        for (ms, f) in faults.iter() {
            s.push_str(&format!("\n    {ms:>8} {f}"));
        }
        s
    };
    let lookups: Vec<String> = not_done.iter().take(20).cloned().collect();

    assert!(
        report.crashes.is_empty() && exited_at_end.is_empty(),
        "dq processes exited by themselves: {:#?} {:#?}",
        report.crashes,
        exited_at_end
    );
    assert!(
        lost.is_empty(),
        "{} jobs acknowledged at push were never delivered; their records: {lookups:#?}{}",
        lost.len(),
        evidence(&lost)
    );
    assert!(unexpected.is_empty(), "delivered but never pushed: {unexpected:?}");
    assert!(misrouted.is_empty(), "delivered through the other topic: {misrouted:?}");
    assert!(
        ps.conflict_first.is_empty() && ps.wrong_id.is_empty(),
        "pushes answered about another job: 409 on a first attempt {:?}; a 503 naming another id {:?}",
        ps.conflict_first,
        ps.wrong_id
    );
    assert!(
        acks.not_found.is_empty(),
        "acks of reserved jobs answered 404 (no record): {:?}",
        acks.not_found
    );
    assert!(
        settled,
        "the queues did not empty within {:?}: {last_state}",
        plan.settle
    );
    assert!(not_done.is_empty(), "jobs whose record is not done: {lookups:#?}");
    let (counts, down) = final_counts.expect("stats answer");
    assert!(
        counts.values().all(|n| *n == 0) && down.is_empty(),
        "counts left for the two topics: {counts:?}, partitions down: {down:?}"
    );
    assert!(
        structures.values().all(|(_, n)| *n == 0),
        "jobs left in Redis's structures (or quarantined): {structures:?}"
    );
    assert_eq!(
        (
            audit_report["orphan_records"].as_u64(),
            audit_report["dangling_ids"].as_u64()
        ),
        (Some(0), Some(0)),
        "dq-checker audit repaired something: {audit_report}\n{audit_log}"
    );
    assert!(
        audits_repaired.is_empty(),
        "periodic audits repaired something:\n{}",
        audits_repaired.join("\n")
    );
    assert!(
        audit_report["records"].as_u64() >= Some(plan.jobs as u64),
        "{audit_report}"
    );
}
