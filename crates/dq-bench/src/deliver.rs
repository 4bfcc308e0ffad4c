//! `dq-bench deliver`: push delivery end to end, through dq-server, dq-timer
//! and dq-consumer (all running separately; the bench only talks HTTP).
//!
//! The bench starts an in-process [`Sink`], registers a fresh topic whose
//! callback is the sink (`PUT /v1/topics/{topic}`, `--concurrency` parallel
//! callbacks), waits until the topic is visible and dq-consumer has had time
//! to pick it up, then pushes N jobs with ids `<topic>-<i>` in batches of 500:
//!
//! * throughput mode (`--rate 0`, the default): all jobs ready at once, as
//!   fast as the connections push them; throughput is N over the time from
//!   the start of pushing to the last new job reaching the sink;
//! * rate mode (`--rate R`): job `i` due at `start + lead + i·1000/R` ms, as
//!   in `lateness`, to see lateness at a steady rate.
//!
//! The sink records every callback's lateness (arrival − `run_at`). The run
//! ends when every job arrived, or `--deadline-ms` after pushing (throughput
//! mode) or after the last due time (rate mode); after `--linger-ms` to catch
//! late duplicates the topic is deregistered (`DELETE`). Jobs never delivered
//! fail the run; duplicates are allowed (delivery is at least once) but
//! reported. SIGINT/SIGTERM stop the run early, still deregistering the topic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use hyper::{StatusCode, Uri};
use serde_json::json;

use crate::due::{self, Pushed, Spread};
use crate::http::{Conn, Target, encode_segment};
use crate::report::{Errors, Report};
use crate::sink::{Answer, Expect, Shared, Sink, StopSignal};

/// Jobs per push request.
const PUSH_BATCH: u64 = 500;
/// The callback timeout written into the topic, in ms.
const CALLBACK_TIMEOUT_MS: u64 = 5000;
/// Delivery attempts written into the topic.
const RETRY_MAX_ATTEMPTS: u32 = 10;
/// Retry backoff written into the topic, in ms.
const RETRY_BACKOFF_MS: u64 = 1000;
/// How long to wait for a registered topic to be readable.
const VISIBLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between checks of the sink's progress.
const POLL: Duration = Duration::from_millis(5);
/// Interval between progress lines on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Options of `dq-bench deliver`.
#[derive(Debug, Args)]
pub struct DeliverArgs {
    /// Jobs to push and have delivered.
    #[arg(short = 'n', long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jobs: u64,
    /// Parallel callbacks, written into the topic's callback config.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// 0: push all jobs ready at once and measure throughput; R > 0: jobs fall due at R per second.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub rate: u64,
    /// Rate mode: time from the start of pushing to the first due time, in ms.
    #[arg(long, default_value_t = 3000)]
    pub lead_ms: u64,
    /// Connections used to push the jobs (batches of up to 500).
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub connections: u32,
    /// Topic to use (default: `bench-deliver-<random>`, so runs don't mix).
    #[arg(long)]
    pub topic: Option<String>,
    /// Give up this long after pushing (throughput mode) or after the last due time (rate mode), in ms.
    #[arg(long, default_value_t = 60_000)]
    pub deadline_ms: u64,
    /// Address of the in-process callback sink.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sink_listen: SocketAddr,
    /// Callback URL written into the topic (default: `http://<sink address>/hook`).
    #[arg(long)]
    pub callback_url: Option<String>,
    /// The sink waits this long before answering each callback, in ms (a slow receiver).
    #[arg(long, default_value_t = 0)]
    pub sink_delay_ms: u64,
    /// Once the topic is registered, wait this long for dq-consumer to pick it up, in ms.
    #[arg(long, default_value_t = 2000)]
    pub settle_ms: u64,
    /// After the last job arrived, keep the topic and sink this long to count late duplicates, in ms.
    #[arg(long, default_value_t = 1000)]
    pub linger_ms: u64,
    /// Write `callback.rate_per_s` into the topic, and report the rate achieved: (jobs − burst) over the
    /// time from the first delivery to the last.
    #[arg(long)]
    pub rate_limit: Option<f64>,
    /// With `--rate-limit`: `callback.burst`.
    #[arg(long, default_value_t = 10, requires = "rate_limit")]
    pub burst: u32,
}

/// The `PUT /v1/topics/{topic}` body: callback to `url` with `concurrency`, and a rate limit (per
/// second, and burst) if given.
pub fn topic_config(url: &str, concurrency: u32, rate_limit: Option<(f64, u32)>) -> Bytes {
    let mut config = json!({
        "callback": {"url": url, "timeout_ms": CALLBACK_TIMEOUT_MS, "concurrency": concurrency},
        "retry": {"max_attempts": RETRY_MAX_ATTEMPTS, "backoff_ms": [RETRY_BACKOFF_MS]},
    });
    if let Some((rate, burst)) = rate_limit {
        config["callback"]["rate_per_s"] = json!(rate);
        config["callback"]["burst"] = json!(burst);
    }
    Bytes::from(config.to_string())
}

/// What the registered phase did.
struct Outcome {
    pushed: Pushed,
    /// Wall clock when pushing began, Unix µs.
    push_start_us: i64,
    /// The due times (rate mode).
    schedule: Option<Spread>,
    /// How far pushing ran past the first due time, in ms (rate mode).
    push_overran_ms: i64,
    /// `all-received` or `deadline`.
    stopped: &'static str,
}

/// Runs `dq-bench deliver`.
pub async fn run(target: &Arc<Target>, args: &DeliverArgs) -> Result<Report> {
    let topic = args.topic.clone().unwrap_or_else(|| due::random_topic("bench-deliver"));
    let n = args.jobs;
    let mut signal = StopSignal::new()?;
    let answer = Answer {
        delay: Duration::from_millis(args.sink_delay_ms),
        ..Answer::default()
    };
    let expect = Expect {
        topic: topic.clone(),
        jobs: n,
    };
    let sink = Sink::start(args.sink_listen, answer, Some(expect)).await?;
    let ledger = Arc::clone(sink.ledger());
    let callback = args.callback_url.clone().unwrap_or_else(|| sink.url("/hook"));
    eprintln!("deliver: sink listening on http://{}", sink.addr());

    let registered = async {
        let uri = target.uri(&format!("/v1/topics/{}", encode_segment(&topic)))?;
        let mut conn = Conn::connect(Arc::clone(target)).await?;
        let reply = conn
            .put_json(
                uri.clone(),
                topic_config(&callback, args.concurrency, args.rate_limit.map(|r| (r, args.burst))),
            )
            .await
            .context("registering the topic")?;
        if !reply.is_success() {
            bail!("registering topic `{topic}` failed: {}", reply.describe());
        }
        Ok((uri, conn))
    }
    .await;
    let (topic_uri, mut conn) = match registered {
        Ok(r) => r,
        Err(e) => {
            let _ = sink.shutdown().await;
            return Err(e);
        }
    };
    eprintln!(
        "deliver: {n} jobs on `{topic}` ({}), callback {callback} with concurrency {}",
        match args.rate {
            0 => "ready at once".to_string(),
            r => format!("due at {r} per s from {} ms on", args.lead_ms),
        },
        args.concurrency
    );

    let outcome = tokio::select! {
        r = registered_phase(target, args, &topic, &mut conn, &topic_uri, &ledger) => Ok(r),
        name = signal.recv() => Err(name),
    };

    // Whatever happened, leave no callback behind. A fresh connection: the
    // other one sat idle (or was cut off mid-request by a signal).
    let errors = Errors::default();
    let deleted = match Conn::connect(Arc::clone(target)).await {
        Ok(mut c) => c.delete(topic_uri).await,
        Err(e) => Err(e),
    };
    match deleted {
        Ok(r) if r.is_success() || r.status == StatusCode::NOT_FOUND => {}
        Ok(r) => errors.add(1, || format!("deregistering topic `{topic}`: {}", r.describe())),
        Err(e) => errors.add(1, || format!("deregistering topic `{topic}`: {e:#}")),
    }
    sink.shutdown().await?;
    let outcome = match outcome {
        Ok(r) => r?,
        Err(name) => match errors.first() {
            None => bail!("stopped by {name} (topic `{topic}` deregistered)"),
            Some(e) => bail!("stopped by {name}; {e}"),
        },
    };

    let l = ledger.lock();
    let pushed = &outcome.pushed;
    errors.add(pushed.errors.count(), || {
        pushed.errors.first().unwrap_or_default().to_string()
    });
    errors.add(l.invalid, || {
        format!(
            "callback without a job id: {}",
            l.first_invalid.as_deref().unwrap_or("?")
        )
    });
    let (missing, missing_sample) = l.missing();
    let elapsed_us = window_us(outcome.schedule.as_ref(), outcome.push_start_us, l.last_new_us);
    let report = Report::new(
        "deliver",
        l.expected_unique,
        Duration::from_micros(elapsed_us),
        "lateness",
        &l.lateness,
        &errors,
    )
    .with_latency("first", &l.first_lateness)
    .with_latency("push", &pushed.hist)
    .with(
        "mode",
        if outcome.schedule.is_some() {
            "rate"
        } else {
            "throughput"
        },
    )
    .with("expected", n)
    .with("unique", l.expected_unique)
    .with("missing", missing)
    .with("received", l.deliveries)
    .with("duplicates", l.duplicates())
    .with("unexpected", l.unexpected);
    let mut report = l
        .with_details(report)
        .with("stopped", outcome.stopped)
        .with("pushed", pushed.ok)
        .with("push_seconds", (pushed.elapsed.as_secs_f64() * 1000.0).round() / 1000.0)
        .with("concurrency", args.concurrency)
        .with("connections", args.connections)
        .with("rate", args.rate);
    if let (Some(limit), Some(first)) = (args.rate_limit, l.first_us) {
        let seconds = (l.last_new_us - first) as f64 / 1e6;
        let achieved = (l.expected_unique.saturating_sub(u64::from(args.burst))) as f64 / seconds;
        report = report
            .with("rate_limit", limit)
            .with("burst", args.burst)
            .with("achieved_per_s", (achieved * 10.0).round() / 10.0);
    }
    if outcome.schedule.is_some() {
        report = report
            .with("lead_ms", args.lead_ms)
            .with("push_overran_ms", outcome.push_overran_ms);
    }
    report = report
        .with("deadline_ms", args.deadline_ms)
        .with("sink_delay_ms", args.sink_delay_ms)
        .with("topic", topic.as_str())
        .with("callback", callback.as_str());
    let dups = l.duplicate_sample();
    if !dups.is_empty() {
        eprintln!("note: jobs delivered more than once, e.g. {}", dups.join(", "));
    }
    if missing > 0 {
        eprintln!("note: the undelivered jobs stay in topic `{topic}`, which has no callback any more");
    }
    if l.unexpected > 0 {
        eprintln!(
            "note: {} callbacks for ids this run did not push (is another producer using `{topic}`?)",
            l.unexpected
        );
    }
    Ok(match missing_verdict(missing, n, &missing_sample) {
        Some(reason) => report.failed(reason),
        None => report,
    })
}

/// The part of the run while the topic is registered: wait for dq-consumer,
/// push, wait for the sink to see every job.
async fn registered_phase(
    target: &Arc<Target>,
    args: &DeliverArgs,
    topic: &str,
    conn: &mut Conn,
    topic_uri: &Uri,
    ledger: &Shared,
) -> Result<Outcome> {
    wait_visible(conn, topic_uri, topic).await?;
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;

    let n = args.jobs;
    let push_start_us = due::unix_us();
    let schedule = (args.rate > 0).then(|| Spread {
        start_ms: push_start_us.div_euclid(1000),
        lead_ms: args.lead_ms,
        rate: args.rate,
        jobs: n,
    });
    let run_at: Arc<dyn Fn(u64) -> Option<i64> + Send + Sync> = match schedule {
        Some(s) => Arc::new(move |i| Some(s.due_ms(i))),
        None => Arc::new(|_| None),
    };
    let pushed = due::push_all(target, args.connections as usize, topic, n, PUSH_BATCH, run_at).await?;
    let pushed_at = due::unix_ms();
    let push_overran_ms = schedule.map_or(0, |s| (pushed_at - s.first_due_ms()).max(0));
    eprintln!(
        "pushed {} jobs in {:.3} s{}{}",
        pushed.ok,
        pushed.elapsed.as_secs_f64(),
        match pushed.errors.first() {
            Some(e) => format!(", {} failed (first: {e})", pushed.errors.count()),
            None => String::new(),
        },
        if push_overran_ms > 0 {
            format!(
                " — {push_overran_ms} ms past the first due time, so early jobs' lateness includes pushing (raise --lead-ms)"
            )
        } else {
            String::new()
        }
    );

    // Jobs whose push failed will not come; wait for the others.
    let give_up_ms = schedule.map_or(pushed_at, |s| s.last_due_ms()) + args.deadline_ms as i64;
    let stopped = wait_for(ledger, pushed.ok, n, give_up_ms).await;
    if stopped == "all-received" && args.linger_ms > 0 {
        tokio::time::sleep(Duration::from_millis(args.linger_ms)).await;
    }
    Ok(Outcome {
        pushed,
        push_start_us,
        schedule,
        push_overran_ms,
        stopped,
    })
}

/// Polls `GET /v1/topics/{topic}` until it answers 200 with a config.
async fn wait_visible(conn: &mut Conn, uri: &Uri, topic: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let last = match conn.get(uri.clone()).await {
            Ok(r) if r.status == StatusCode::OK && has_config(&r.body) => return Ok(()),
            Ok(r) => r.describe(),
            Err(e) => format!("{e:#}"),
        };
        if start.elapsed() >= VISIBLE_TIMEOUT {
            bail!(
                "topic `{topic}` was not readable {} s after registering it; last answer: {last}",
                VISIBLE_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a `GET /v1/topics/{topic}` answer shows the topic's config: not
/// when its `config` is null (the server also describes topics that merely
/// have jobs); an answer without a `config` field is taken as registered.
pub fn has_config(body: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) => !v.get("config").is_some_and(serde_json::Value::is_null),
        Err(_) => true,
    }
}

/// Waits until the sink saw `want` distinct expected jobs (of `n`), or the
/// wall clock reaches `give_up_ms`; says which.
async fn wait_for(ledger: &Shared, want: u64, n: u64, give_up_ms: i64) -> &'static str {
    let mut next_progress = Instant::now() + PROGRESS_EVERY;
    loop {
        let (got, dups) = {
            let l = ledger.lock();
            (l.expected_unique, l.duplicates())
        };
        if got >= want {
            return "all-received";
        }
        if due::unix_ms() >= give_up_ms {
            return "deadline";
        }
        if Instant::now() >= next_progress {
            eprintln!("  {got} of {n} delivered, {dups} duplicates");
            next_progress += PROGRESS_EVERY;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The measured window in µs: from the start of pushing (throughput mode) or
/// the first due time (rate mode) to the last new job's arrival (0 if none).
pub fn window_us(schedule: Option<&Spread>, push_start_us: i64, last_new_us: i64) -> u64 {
    if last_new_us == 0 {
        return 0;
    }
    let from_us = schedule.map_or(push_start_us, |s| s.first_due_ms().saturating_mul(1000));
    u64::try_from(last_new_us - from_us).unwrap_or(0)
}

/// Why the run failed, if jobs were never delivered.
pub fn missing_verdict(missing: u64, n: u64, sample: &[String]) -> Option<String> {
    (missing > 0).then(|| {
        format!(
            "{missing} of {n} jobs not delivered by the deadline (e.g. {})",
            sample.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn topic_config_has_callback_and_retry() {
        let v: Value = serde_json::from_slice(&topic_config("http://127.0.0.1:9/hook", 64, None)).unwrap();
        assert_eq!(
            v,
            json!({"callback":{"url":"http://127.0.0.1:9/hook","timeout_ms":5000,"concurrency":64},
                "retry":{"max_attempts":10,"backoff_ms":[1000]}})
        );
        let v: Value = serde_json::from_slice(&topic_config("http://x/", 8, Some((1000.0, 10)))).unwrap();
        assert_eq!(v["callback"]["rate_per_s"], 1000.0);
        assert_eq!(v["callback"]["burst"], 10);
    }

    #[test]
    fn registration_shows_in_the_config() {
        assert!(has_config(
            br#"{"topic":"t","config":{"callback":{"url":"u"}},"counts":{}}"#
        ));
        assert!(!has_config(br#"{"topic":"t","config":null,"counts":{"ready":3}}"#));
        assert!(has_config(br#"{"topic":"t"}"#));
        assert!(has_config(b"ok"));
    }

    #[test]
    fn windows() {
        // Throughput mode: from the start of pushing.
        assert_eq!(window_us(None, 1_000_000, 3_500_000), 2_500_000);
        assert_eq!(window_us(None, 1_000_000, 0), 0);
        // Rate mode: from the first due time (3 s after the start).
        let s = Spread {
            start_ms: 1000,
            lead_ms: 3000,
            rate: 100,
            jobs: 500,
        };
        assert_eq!(window_us(Some(&s), 1_000_000, 9_000_000), 5_000_000);
        // Nothing new after the first due time.
        assert_eq!(window_us(Some(&s), 1_000_000, 2_000_000), 0);
    }

    #[test]
    fn verdicts() {
        assert_eq!(missing_verdict(0, 10, &[]), None);
        assert_eq!(
            missing_verdict(2, 10, &["t-3".into(), "t-7".into()]).as_deref(),
            Some("2 of 10 jobs not delivered by the deadline (e.g. t-3, t-7)")
        );
    }
}
