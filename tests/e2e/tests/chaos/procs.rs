//! The dq processes of the chaos test, their logs, and what their metrics say.

use super::*;

/// Where the processes' logs go: every life of every process, one file each. Kept when the test fails (or
/// when `DQ_CHAOS_LOG_DIR` names the place).
pub(crate) struct LogDir {
    pub(crate) temp: Option<tempfile::TempDir>,
    pub(crate) path: PathBuf,
}

impl LogDir {
    pub(crate) fn new() -> LogDir {
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
pub(crate) struct Proc {
    pub(crate) bin: &'static str,
    pub(crate) label: String,
    pub(crate) port: u16,
    pub(crate) vars: Vec<(&'static str, String)>,
    pub(crate) process: Option<DqProcess>,
    /// Processes started so far under this label.
    pub(crate) lives: usize,
}

impl Proc {
    pub(crate) fn new(bin: &'static str, label: &str, redis: &RedisServer, extra: &[(&'static str, String)]) -> Proc {
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
    pub(crate) async fn start(&mut self, http: &reqwest::Client, logs: &Path) -> Duration {
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
    pub(crate) fn kill(&mut self, logs: &Path) {
        if let Some(mut p) = self.process.take() {
            p.signal("KILL");
            p.wait(Duration::from_secs(10)).expect("a killed process exits");
            self.archive(&p, logs, "killed (SIGKILL)");
        }
    }

    /// Whether it exited by itself; its log is kept then.
    pub(crate) fn exited(&mut self, logs: &Path) -> Option<String> {
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

    pub(crate) fn archive(&self, p: &DqProcess, logs: &Path, how: &str) {
        let file = logs.join(format!("{}.{}.log", self.label, self.lives));
        let _ = std::fs::write(
            file,
            format!("# {} life {}: {how}\n{}", self.label, self.lives, p.log()),
        );
    }

    /// Keeps the log of the running process (at the end).
    pub(crate) fn archive_running(&self, logs: &Path) {
        if let Some(p) = &self.process {
            self.archive(p, logs, "running at the end");
        }
    }
}

/// Scrapes a process's `/metrics`; `None` when it does not answer.
pub(crate) async fn scrape(http: &reqwest::Client, port: u16) -> Option<HashMap<String, f64>> {
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
pub(crate) fn recovery_metrics(bin: &str) -> &'static [&'static str] {
    match bin {
        "dq-consumer" => &["dq_jobs_acked_total"],
        "dq-timer" => &["dq_jobs_promoted_total", "dq_jobs_expired_total"],
        "dq-checker" => &["dq_redis_latency_seconds"],
        _ => &[],
    }
}

pub(crate) fn metric_sum(m: &HashMap<String, f64>, names: &[&str]) -> f64 {
    m.iter()
        .filter(|(k, _)| {
            names
                .iter()
                .any(|n| k.as_str() == *n || k.starts_with(&format!("{n}{{")))
        })
        .map(|(_, v)| v)
        .sum()
}
