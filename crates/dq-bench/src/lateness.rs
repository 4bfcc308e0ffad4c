//! `dq-bench lateness`: how late are jobs delivered when they fall due at a
//! steady rate?
//!
//! N = R·S jobs are pushed up front (batches of 500, ids `<topic>-<i>`), job
//! `i` due at `start + lead + i·1000/R` ms, so they fall due at R jobs/s over
//! S seconds. W workers long-poll reserve the topic from before the first due
//! time; for every job received, lateness = the wall clock when the reserve
//! answer arrived − the job's `run_at`. Each worker acks on a second
//! connection fed by a channel, so acks don't hold up its next reserve. The
//! run stops when every job was received, or `--deadline-ms` after the last
//! due time; then it counts jobs never received (missing) and received more
//! than once (duplicates) — either fails the run. With `--kill-pid` a process
//! (a dq-timer) is killed with SIGKILL part way through the window, to see
//! what a timer dying mid-run does to lateness and delivery.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use hyper::Uri;
use tokio::sync::{Notify, mpsc, watch};

use crate::due::{self, ReserveReply, Seen, Spread, Tally};
use crate::http::{Conn, Target};
use crate::report::{self, Errors, Hist, Report};

/// Jobs per push request.
const PUSH_BATCH: u64 = 500;
/// Jobs per reserve request.
const RESERVE_COUNT: u32 = 100;
/// Long-poll timeout of each reserve, in ms.
const RESERVE_TIMEOUT_MS: u64 = 1000;
/// Pause after a failed reserve before the next one.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Options of `dq-bench lateness`.
#[derive(Debug, Args)]
pub struct LatenessArgs {
    /// Jobs falling due per second.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rate: u64,
    /// Seconds over which the due times are spread (N = rate × seconds jobs).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub seconds: u64,
    /// Time from the start of pushing to the first due time, in ms.
    #[arg(long, default_value_t = 3000)]
    pub lead_ms: u64,
    /// Topic to use (default: `bench-late-<random>`, so runs don't mix).
    #[arg(long)]
    pub topic: Option<String>,
    /// Long-poll reserve workers (each with a second connection for acks).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub workers: u32,
    /// Connections used to push the jobs.
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub connections: u32,
    /// Give up this long after the last due time, in ms.
    #[arg(long, default_value_t = 30_000)]
    pub deadline_ms: u64,
    /// Send SIGKILL to this process (e.g. a dq-timer) during the window.
    #[arg(long)]
    pub kill_pid: Option<u32>,
    /// When to kill `--kill-pid`: this fraction of the way through the window.
    #[arg(long, default_value_t = 0.5, value_parser = fraction, requires = "kill_pid")]
    pub kill_at: f64,
}

/// Parses a fraction between 0 and 1.
pub fn fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s.parse().map_err(|e| format!("`{s}` is not a number: {e}"))?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("`{s}` is not between 0 and 1"))
    }
}

/// State shared by the workers and the coordinator.
struct Shared {
    seen: Seen,
    errors: Errors,
    /// Notified when the last expected job arrives.
    all_received: Notify,
    /// When the latest first delivery arrived, Unix µs.
    last_new_us: AtomicI64,
}

/// What one worker measured.
struct WorkerTally {
    lateness: Hist,
    ack: Hist,
    early: u64,
    acked: u64,
    reserves: u64,
    empty_reserves: u64,
}

/// Runs `dq-bench lateness`.
pub async fn run(target: &Arc<Target>, args: &LatenessArgs) -> Result<Report> {
    let topic = args.topic.clone().unwrap_or_else(|| due::random_topic("bench-late"));
    let n = args.rate * args.seconds;
    let shared = Arc::new(Shared {
        seen: Seen::new(&topic, n),
        errors: Errors::default(),
        all_received: Notify::new(),
        last_new_us: AtomicI64::new(0),
    });

    // Workers first, so they are waiting before anything falls due.
    let (stop_tx, stop_rx) = watch::channel(false);
    let reserve_uri = target.uri("/v1/reserve")?;
    let reserve_body = due::reserve_body(&topic, RESERVE_COUNT, RESERVE_TIMEOUT_MS);
    let mut workers = Vec::with_capacity(args.workers as usize);
    for _ in 0..args.workers {
        let conn = Conn::connect(Arc::clone(target)).await?;
        let ack_conn = Conn::connect(Arc::clone(target)).await?;
        workers.push(tokio::spawn(worker(
            conn,
            ack_conn,
            Arc::clone(target),
            reserve_uri.clone(),
            reserve_body.clone(),
            Arc::clone(&shared),
            stop_rx.clone(),
        )));
    }

    let schedule = Spread::new(due::unix_ms(), args.lead_ms, args.rate, args.seconds);
    eprintln!(
        "lateness: {n} jobs on `{topic}`, {} per s over {} s, first due in {} ms; {} workers",
        args.rate, args.seconds, args.lead_ms, args.workers
    );
    let kill = args.kill_pid.map(|pid| {
        let at = schedule.at_fraction(args.seconds, args.kill_at);
        tokio::spawn(async move {
            due::sleep_until_unix_ms(at).await;
            let result = due::kill_9(pid).await;
            (due::unix_ms(), result)
        })
    });

    let pushed = due::push_all(
        target,
        args.connections as usize,
        &topic,
        n,
        PUSH_BATCH,
        Arc::new(move |i| Some(schedule.due_ms(i))),
    )
    .await?;
    let pushed_at = due::unix_ms();
    if let Some(e) = pushed.errors.first() {
        bail!(
            "pushing failed for {} of {n} jobs (topic `{topic}`); first error: {e}",
            pushed.errors.count()
        );
    }
    let push_overran_ms = (pushed_at - schedule.first_due_ms()).max(0);
    eprintln!(
        "pushed {} jobs in {:.3} s{}",
        pushed.ok,
        pushed.elapsed.as_secs_f64(),
        if push_overran_ms > 0 {
            format!(
                " — {push_overran_ms} ms past the first due time, so early jobs' lateness includes pushing (raise --lead-ms)"
            )
        } else {
            String::new()
        }
    );

    let give_up_ms = schedule.last_due_ms() + args.deadline_ms as i64;
    let stopped = tokio::select! {
        _ = shared.all_received.notified() => "all-received",
        _ = due::sleep_until_unix_ms(give_up_ms) => "deadline",
    };
    let _ = stop_tx.send(true);

    let mut tallies = Vec::with_capacity(workers.len());
    for w in workers {
        tallies.push(w.await.context("a worker panicked")?);
    }

    let mut report_kill = None;
    if let (Some(handle), Some(pid)) = (kill, args.kill_pid) {
        if handle.is_finished() {
            let (at, result) = handle.await.context("the kill task panicked")?;
            match result {
                Ok(()) => {
                    eprintln!("killed {pid} at +{} ms into the window", at - schedule.first_due_ms());
                    report_kill = Some(at - schedule.first_due_ms());
                }
                Err(e) => shared.errors.add(1, || format!("{e:#}")),
            }
        } else {
            handle.abort();
            shared.errors.add(1, || {
                format!("the run ended before the time to kill {pid}; it was not killed")
            });
        }
    }

    let tally = shared.seen.tally();
    let lateness = report::merge(tallies.iter().map(|t| &t.lateness));
    let ack = report::merge(tallies.iter().map(|t| &t.ack));
    let sum = |f: fn(&WorkerTally) -> u64| tallies.iter().map(f).sum::<u64>();
    let last_new_us = shared.last_new_us.load(Ordering::Relaxed);
    let elapsed_us = (last_new_us - schedule.first_due_ms() * 1000).max(0);
    let mut report = Report::new(
        "lateness",
        tally.received,
        Duration::from_micros(elapsed_us as u64),
        "lateness",
        &lateness,
        &shared.errors,
    )
    .with_latency("push", &pushed.hist)
    .with_latency("ack", &ack)
    .with("expected", n)
    .with("received", tally.received)
    .with("missing", tally.missing)
    .with("duplicates", tally.duplicates)
    .with("redeliveries", tally.deliveries - tally.received)
    .with("unexpected", tally.unexpected)
    .with("early", sum(|t| t.early))
    .with("acked", sum(|t| t.acked))
    .with("reserves", sum(|t| t.reserves))
    .with("empty_reserves", sum(|t| t.empty_reserves))
    .with("stopped", stopped)
    .with("rate", args.rate)
    .with("window_seconds", args.seconds)
    .with("lead_ms", args.lead_ms)
    .with("deadline_ms", args.deadline_ms)
    .with("workers", args.workers)
    .with("connections", args.connections)
    .with("topic", topic.as_str())
    .with("push_seconds", (pushed.elapsed.as_secs_f64() * 1000.0).round() / 1000.0)
    .with("push_overran_ms", push_overran_ms);
    if let Some(pid) = args.kill_pid {
        report = report.with("kill_pid", pid).with("kill_at", args.kill_at);
        if let Some(at) = report_kill {
            report = report.with("killed_at_ms", at);
        }
    }
    if tally.unexpected > 0 {
        eprintln!(
            "note: {} deliveries of ids this run did not push (is another producer using `{topic}`?)",
            tally.unexpected
        );
    }
    match verdict(&tally) {
        Some(reason) => Ok(report.failed(reason)),
        None => Ok(report),
    }
}

/// Why the run failed, if jobs went missing or were delivered twice.
pub fn verdict(t: &Tally) -> Option<String> {
    let mut parts = Vec::new();
    if t.missing > 0 {
        parts.push(format!(
            "{} of {} jobs missing (e.g. {})",
            t.missing,
            t.expected,
            t.missing_sample.join(", ")
        ));
    }
    if t.duplicates > 0 {
        parts.push(format!(
            "{} jobs delivered more than once (e.g. {})",
            t.duplicates,
            t.duplicate_sample.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// One consumer: long-poll reserve in a loop, hand each job to its ack task.
async fn worker(
    mut conn: Conn,
    mut ack_conn: Conn,
    target: Arc<Target>,
    reserve_uri: Uri,
    reserve_body: Bytes,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> WorkerTally {
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, String)>();
    let acker = {
        let (shared, target) = (Arc::clone(&shared), Arc::clone(&target));
        tokio::spawn(async move {
            let mut hist = report::new_hist();
            let mut acked = 0;
            while let Some((id, receipt)) = rx.recv().await {
                let t0 = Instant::now();
                if due::ack(&mut ack_conn, &target, &id, &receipt, &shared.errors).await {
                    acked += 1;
                }
                report::record(&mut hist, t0.elapsed());
            }
            (hist, acked)
        })
    };

    let mut t = WorkerTally {
        lateness: report::new_hist(),
        ack: report::new_hist(),
        early: 0,
        acked: 0,
        reserves: 0,
        empty_reserves: 0,
    };
    loop {
        let result = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => break,
            r = conn.post_json(reserve_uri.clone(), reserve_body.clone()) => r,
        };
        let arrived_us = due::unix_us();
        t.reserves += 1;
        let reply = match result {
            Ok(r) if r.is_success() => r,
            Ok(r) => {
                shared.errors.add(1, || format!("reserve: {}", r.describe()));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => {
                shared.errors.add(1, || format!("reserve: {e:#}"));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        let jobs = match serde_json::from_slice::<ReserveReply>(&reply.body) {
            Ok(r) => r.jobs,
            Err(e) => {
                shared
                    .errors
                    .add(1, || format!("reserve: unreadable answer ({e}): {}", reply.describe()));
                continue;
            }
        };
        if jobs.is_empty() {
            t.empty_reserves += 1;
            continue;
        }
        for job in jobs {
            let late_us = arrived_us - job.run_at.saturating_mul(1000);
            if late_us < 0 {
                t.early += 1;
            }
            report::record(&mut t.lateness, Duration::from_micros(late_us.max(0) as u64));
            if shared.seen.record(&job.id) {
                shared.last_new_us.fetch_max(arrived_us, Ordering::Relaxed);
                if shared.seen.all_received() {
                    shared.all_received.notify_one();
                }
            }
            // The acker outlives this loop, so sending cannot fail.
            let _ = tx.send((job.id, job.receipt));
        }
    }
    drop(tx);
    match acker.await {
        Ok((hist, acked)) => {
            t.ack = hist;
            t.acked = acked;
        }
        Err(e) => shared.errors.add(1, || format!("an ack task panicked: {e}")),
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions() {
        assert_eq!(fraction("0.25"), Ok(0.25));
        assert_eq!(fraction("1"), Ok(1.0));
        assert!(fraction("1.5").is_err());
        assert!(fraction("-0.1").is_err());
        assert!(fraction("x").is_err());
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(&Tally::default()), None);
        let seen = Seen::new("t", 4);
        for id in ["t-0", "t-1", "t-1", "t-3"] {
            seen.record(id);
        }
        assert_eq!(
            verdict(&seen.tally()).as_deref(),
            Some("1 of 4 jobs missing (e.g. t-2); 1 jobs delivered more than once (e.g. t-1×2)")
        );
        seen.record("t-2");
        let t = seen.tally();
        assert_eq!(
            verdict(&t).as_deref(),
            Some("1 jobs delivered more than once (e.g. t-1×2)")
        );
    }
}
