//! The fault loop: kill -9 and restart of dq processes, Redis kills and stalls, SCRIPT FLUSH, and the
//! recovery of each binary after a Redis fault.

use super::*;

/// One Redis fault and how long each process took to work again after Redis was back.
pub(crate) struct Recovery {
    pub(crate) kind: &'static str,
    pub(crate) at_ms: u64,
    /// From the kill (or SIGSTOP) to Redis answering PING again.
    pub(crate) outage: Duration,
    /// Per process label: `None` when no signal came within [`RECOVERY_DEADLINE`] (or the load ended).
    pub(crate) by: Vec<(String, &'static str, Option<Duration>)>,
}

/// What the fault loop did.
pub(crate) struct FaultReport {
    pub(crate) procs: Vec<Proc>,
    pub(crate) counts: BTreeMap<String, usize>,
    pub(crate) recoveries: Vec<Recovery>,
    /// (binary, time from its start to `/healthz`) after each kill.
    pub(crate) restarts: Vec<(&'static str, Duration)>,
    pub(crate) crashes: Vec<String>,
}

pub(crate) enum Fault {
    Kill(usize),
    RedisRestart,
    RedisPause,
    ScriptFlush,
}

pub(crate) struct Faults {
    pub(crate) shared: Arc<Shared>,
    pub(crate) redis: Arc<Mutex<RedisServer>>,
    pub(crate) redis_url: String,
    pub(crate) procs: Vec<Proc>,
    pub(crate) http: reqwest::Client,
    pub(crate) logs: PathBuf,
    pub(crate) every: Duration,
    pub(crate) pause: Duration,
    pub(crate) verbose: bool,
    pub(crate) rng: Rng,
}

/// Waits until Redis answers PING with PONG (its AOF loaded).
pub(crate) fn wait_pong(url: &str) {
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
    pub(crate) async fn run(mut self) -> FaultReport {
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
    pub(crate) async fn restart_crashed(&mut self, report: &mut FaultReport) {
        for p in &mut self.procs {
            if let Some(why) = p.exited(&self.logs) {
                self.shared.fault(format!("CRASH: {why}"), true);
                report.crashes.push(why);
                p.start(&self.http, &self.logs).await;
            }
        }
    }

    /// Each process's recovery metric, read while Redis is down or stopped: nothing can raise it then.
    pub(crate) async fn baseline(&self) -> Vec<f64> {
        let mut out = Vec::new();
        for p in &self.procs {
            let m = scrape(&self.http, p.port).await.unwrap_or_default();
            out.push(metric_sum(&m, recovery_metrics(p.bin)));
        }
        out
    }

    /// How long after `back` each process showed it works again: dq-server the first push acknowledged
    /// of those sent after `cut`, the others their recovery metric moving away from `baseline`.
    pub(crate) async fn watch_recovery(
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

    pub(crate) fn record(
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
