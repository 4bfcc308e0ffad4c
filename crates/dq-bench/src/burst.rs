//! `dq-bench burst`: how fast does a burst of jobs due in the same instant
//! become ready?
//!
//! N jobs are pushed (batches of 1000) all with `run_at = due`, where due is
//! `--lead-ms` after the push starts; if pushing takes longer than that the
//! run fails, since jobs would be due before they were all in. At `due` the
//! bench polls `GET /v1/stats` every `--poll-ms` until the topic's ready (plus
//! reserved and dead, though nothing reserves them) count reaches N, and
//! reports when the first job and when all of them were ready, relative to
//! `due`. The times are those of the poll answers, so they are upper bounds
//! with the poll interval plus one stats request as resolution.
//!
//! With `--promoted-from` (the timers' `/metrics` URLs) the bench polls the
//! timers' `dq_jobs_promoted_total` instead, counted from just before the due
//! time: a scrape costs Redis nothing, while a stats request reads every
//! partition's counts (256 `HGETALL`s), waits behind the promotion it measures
//! (about 4 answers a second with 256 partitions) and adds to its load. Only
//! the burst may fall due meanwhile, since the counter counts every topic. A
//! timer adds to its counter when a whole pass over its partitions has
//! ended, so "first ready" is then when the first pass ended, not when the
//! first job was ready; "all ready" is exact to a poll.
//! Afterwards (`--cleanup`, on by default) the topic is drained over 16
//! connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::{ArgAction, Args};
use serde_json::Value;

use dq_api::Counts;

use crate::due;
use crate::http::{Conn, Target};
use crate::report::{self, Errors, Report};

/// Jobs per push request.
const PUSH_BATCH: u64 = 1000;
/// Connections that drain the topic afterwards.
const DRAIN_CONNECTIONS: usize = 16;
/// Long poll of the drain when not everything was ready (the timer may still be promoting).
const DRAIN_WAIT_MS: u64 = 1000;

/// Options of `dq-bench burst`.
#[derive(Debug, Args)]
pub struct BurstArgs {
    /// Jobs in the burst, all due in the same ms.
    #[arg(short = 'n', long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jobs: u64,
    /// Time from the start of pushing to the due time, in ms; pushing must end before it.
    #[arg(long, default_value_t = 10_000)]
    pub lead_ms: u64,
    /// Topic to use (default: `bench-burst-<random>`, so runs don't mix).
    #[arg(long)]
    pub topic: Option<String>,
    /// Connections used to push the jobs.
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub connections: u32,
    /// Give up waiting for all jobs to be ready this long after the due time, in ms.
    #[arg(long, default_value_t = 30_000)]
    pub deadline_ms: u64,
    /// Interval between stats polls, in ms.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub poll_ms: u64,
    /// The dq-timers' `/metrics` URLs, comma-separated: read the promotion from their
    /// `dq_jobs_promoted_total` instead of `GET /v1/stats` (see above).
    #[arg(long = "promoted-from", value_delimiter = ',')]
    pub promoted_from: Vec<String>,
    /// Drain the topic afterwards (reserve and ack everything), leaving Redis clean.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub cleanup: bool,
}

/// What these benchmarks read of dq-api's `Counts` (a topic's job counts, as `GET /v1/stats` reports
/// them).
pub trait CountsExt: Sized {
    /// The counts of `topic` in a stats answer (all zero when it is not listed), read as JSON so that a
    /// stats answer with more in it still reads.
    fn of(stats: &Value, topic: &str) -> Self;

    /// Jobs that are due and were promoted: ready, or past ready.
    fn promoted(&self) -> u64;
}

impl CountsExt for Counts {
    fn of(stats: &Value, topic: &str) -> Self {
        let t = &stats["topics"][topic];
        let n = |state: &str| t[state].as_i64().unwrap_or(0);
        Counts {
            delayed: n("delayed"),
            ready: n("ready"),
            reserved: n("reserved"),
            dead: n("dead"),
        }
    }

    fn promoted(&self) -> u64 {
        (self.ready + self.reserved + self.dead).max(0) as u64
    }
}

/// Runs `dq-bench burst`.
pub async fn run(target: &Arc<Target>, args: &BurstArgs) -> Result<Report> {
    let topic = args.topic.clone().unwrap_or_else(|| due::random_topic("bench-burst"));
    let n = args.jobs;
    let mut stats_conn = Conn::connect(Arc::clone(target)).await?;
    let stats_uri = target.uri("/v1/stats")?;

    let due = due::unix_ms() + args.lead_ms as i64;
    eprintln!("burst: {n} jobs on `{topic}`, all due in {} ms", args.lead_ms);
    let pushed = due::push_all(
        target,
        args.connections as usize,
        &topic,
        n,
        PUSH_BATCH,
        Arc::new(move |_| Some(due)),
    )
    .await?;
    let pushed_at = due::unix_ms();
    let push_seconds = pushed.elapsed.as_secs_f64();
    let problem = if let Some(e) = pushed.errors.first() {
        Some(format!(
            "pushing failed for {} of {n} jobs (topic `{topic}`); first error: {e}",
            pushed.errors.count()
        ))
    } else if pushed_at >= due {
        Some(format!(
            "pushing {n} jobs took {push_seconds:.3} s, longer than --lead-ms {} (the jobs were due before all \
             were pushed); raise --lead-ms or lower -n",
            args.lead_ms
        ))
    } else {
        None
    };
    if let Some(problem) = problem {
        if args.cleanup {
            cleanup(target, &topic, DRAIN_WAIT_MS).await;
        }
        bail!(problem);
    }
    eprintln!(
        "pushed {n} jobs in {push_seconds:.3} s ({:.0} jobs/s); {} ms to the due time",
        n as f64 / push_seconds.max(f64::MIN_POSITIVE),
        due - pushed_at
    );

    let mut timers = Vec::new();
    for url in &args.promoted_from {
        let t = Target::parse_with(url, None)?;
        let uri = t.uri("")?;
        timers.push((Conn::connect(t).await?, uri));
    }
    let errors = Errors::default();
    let base = if timers.is_empty() {
        0
    } else {
        promoted(&mut timers, &errors).await?
    };
    due::sleep_until_unix_ms(due).await;
    let mut poll_hist = report::new_hist();
    let mut ticker = tokio::time::interval(Duration::from_millis(args.poll_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let give_up_us = (due + args.deadline_ms as i64) * 1000;
    let mut first_ready_us = None;
    let mut all_ready_us = None;
    let mut last = Counts::default();
    loop {
        ticker.tick().await;
        let t0 = Instant::now();
        let promoted_now = if timers.is_empty() {
            read_counts(&mut stats_conn, &stats_uri, &topic, &errors)
                .await
                .map(|c| {
                    last = c;
                    c.promoted()
                })
        } else {
            promoted(&mut timers, &errors)
                .await
                .ok()
                .map(|p| p.saturating_sub(base))
        };
        let now_us = due::unix_us();
        report::record(&mut poll_hist, t0.elapsed());
        if let Some(p) = promoted_now {
            let since_due = now_us - due * 1000;
            if p > 0 && first_ready_us.is_none() {
                first_ready_us = Some(since_due);
            }
            if p >= n {
                all_ready_us = Some(since_due);
                break;
            }
        }
        if now_us >= give_up_us {
            break;
        }
    }
    if !timers.is_empty() {
        // The counts for the report, read once the timers are done.
        if let Some(c) = read_counts(&mut stats_conn, &stats_uri, &topic, &errors).await {
            last = c;
        }
    }
    let secs = |us: i64| (us as f64 / 1e6 * 1e4).round() / 1e4;
    let elapsed_us = all_ready_us.unwrap_or(give_up_us - due * 1000).max(0);
    let mut report = Report::new(
        "burst",
        last.promoted(),
        Duration::from_micros(elapsed_us as u64),
        "stats-poll",
        &poll_hist,
        &errors,
    )
    .with_latency("push", &pushed.hist)
    .with("expected", n)
    .with("push_seconds", secs((push_seconds * 1e6) as i64))
    .with("first_ready_seconds", first_ready_us.map(secs))
    .with("all_ready_seconds", all_ready_us.map(secs))
    .with("ready", last.ready)
    .with("delayed", last.delayed)
    .with("polls", poll_hist.len())
    .with("poll_ms", args.poll_ms)
    .with("source", if timers.is_empty() { "stats" } else { "timers" })
    .with("lead_ms", args.lead_ms)
    .with("deadline_ms", args.deadline_ms)
    .with("connections", args.connections)
    .with("topic", topic.as_str());
    if all_ready_us.is_none() {
        report = report.failed(format!(
            "only {} of {n} jobs ready {} ms after the due time ({} still delayed)",
            last.promoted(),
            args.deadline_ms,
            last.delayed
        ));
    }
    if args.cleanup {
        let wait = if all_ready_us.is_some() { 0 } else { DRAIN_WAIT_MS };
        let drained = cleanup(target, &topic, wait).await;
        if drained < n {
            eprintln!(
                "cleanup: {} jobs of `{topic}` were not ready and are left in Redis",
                n - drained
            );
        }
        report = report.with("drained", drained);
    }
    Ok(report)
}

/// `topic`'s counts from `GET /v1/stats`; `None` (and an error counted) when the request fails.
async fn read_counts(conn: &mut Conn, uri: &hyper::Uri, topic: &str, errors: &Errors) -> Option<Counts> {
    match conn.get(uri.clone()).await {
        Ok(reply) if reply.is_success() => match serde_json::from_slice::<Value>(&reply.body) {
            Ok(v) => Some(Counts::of(&v, topic)),
            Err(e) => {
                errors.add(1, || format!("stats: unreadable answer ({e}): {}", reply.describe()));
                None
            }
        },
        Ok(reply) => {
            errors.add(1, || format!("stats: {}", reply.describe()));
            None
        }
        Err(e) => {
            errors.add(1, || format!("stats: {e:#}"));
            None
        }
    }
}

/// The sum of the timers' `dq_jobs_promoted_total`; a timer that does not answer fails the poll.
async fn promoted(timers: &mut [(Conn, hyper::Uri)], errors: &Errors) -> Result<u64> {
    let mut sum = 0;
    for (conn, uri) in timers.iter_mut() {
        match conn.get(uri.clone()).await {
            Ok(reply) if reply.is_success() => {
                sum += metric(&String::from_utf8_lossy(&reply.body), "dq_jobs_promoted_total")
            }
            Ok(reply) => {
                errors.add(1, || format!("timer metrics: {}", reply.describe()));
                bail!("a timer's metrics did not answer");
            }
            Err(e) => {
                errors.add(1, || format!("timer metrics: {e:#}"));
                bail!("a timer's metrics did not answer");
            }
        }
    }
    Ok(sum)
}

/// The value of an unlabelled counter in a Prometheus text page (0 when absent).
fn metric(page: &str, name: &str) -> u64 {
    page.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Drains `topic`, reporting problems on stderr (they don't fail the run).
async fn cleanup(target: &Arc<Target>, topic: &str, wait_ms: u64) -> u64 {
    let t0 = Instant::now();
    match due::drain(target, topic, DRAIN_CONNECTIONS, wait_ms).await {
        Ok(d) => {
            eprintln!(
                "cleanup: drained {} jobs in {:.3} s",
                d.acked,
                t0.elapsed().as_secs_f64()
            );
            if let Some(e) = d.errors.first() {
                eprintln!("cleanup: {} errors; first: {e}", d.errors.count());
            }
            d.acked
        }
        Err(e) => {
            eprintln!("cleanup failed: {e:#}");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_an_unlabelled_counter() {
        let page = "# TYPE dq_jobs_promoted_total counter\ndq_jobs_promoted_total 1234\ndq_jobs_promoted_total_x 9\n";
        assert_eq!(metric(page, "dq_jobs_promoted_total"), 1234);
        assert_eq!(metric("", "dq_jobs_promoted_total"), 0);
    }

    #[test]
    fn reads_topic_counts() {
        let stats = json!({"topics": {
            "a": {"delayed": 5, "ready": 7, "reserved": 1, "dead": 2},
            "b": {"ready": 3}
        }, "shards": []});
        let a = Counts::of(&stats, "a");
        assert_eq!(
            a,
            Counts {
                delayed: 5,
                ready: 7,
                reserved: 1,
                dead: 2
            }
        );
        assert_eq!(a.promoted(), 10);
        assert_eq!(Counts::of(&stats, "b").promoted(), 3);
        assert_eq!(Counts::of(&stats, "c"), Counts::default());
        assert_eq!(Counts::of(&json!({}), "a"), Counts::default());
    }
}
