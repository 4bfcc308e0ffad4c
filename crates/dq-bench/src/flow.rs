//! `dq-bench flow`: flow keys end to end, through dq-server, dq-timer and dq-consumer (running separately;
//! the bench talks HTTP). It starts an in-process callback that answers at once and records every
//! delivery, registers a fresh topic with it, pushes, waits, and reports:
//!
//! * `--mode fair`: `--big` jobs of one key, then `--small-jobs` jobs of each of `--small-keys` keys, all
//!   ready, callback concurrency `--concurrency`. How long each small job waited (its arrival less its
//!   push's answer: p50, p99, max) and how many of the big key's jobs were still to come when the last
//!   small one arrived. `--keyless` pushes the same jobs without flow keys, for the comparison.
//! * `--mode rate`: `--keys` keys of `--jobs-per-key` jobs each under `flow {rate_per_s, burst}`. Each
//!   key's delivered rate (its jobs past the burst over the time from its first arrival to its last:
//!   lowest, highest, mean) and the most arrivals of one key in any stretch of time beyond
//!   `rate × stretch + burst` (the bucket's bound, seen at the callback).
//! * `--mode cost`: `-n` jobs pushed with a delay, all due at once, with `--keys` distinct flow keys
//!   (0: none); the delivery throughput from the due time to the last arrival. `scripts/bench.sh`
//!   reads Redis's CPU around it for the cost per job.
//!
//! Every job must arrive (once; a delivery again is counted and allowed: at least once), or the run fails.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::due;
use crate::http::{Conn, Target};
use crate::ledger::{Callback, Delivery};
use crate::report::{self, Errors, Hist, Report};

/// Jobs per push request.
const BATCH: usize = 500;

/// Options of `dq-bench flow`.
#[derive(Debug, Args)]
pub struct FlowArgs {
    /// `fair`, `rate` or `cost`.
    #[arg(long, value_enum, default_value_t = Mode::Fair)]
    pub mode: Mode,
    /// `fair`: jobs of the big key.
    #[arg(long, default_value_t = 50_000)]
    pub big: u64,
    /// `fair`: keys with a few jobs each.
    #[arg(long, default_value_t = 200)]
    pub small_keys: u64,
    /// `fair`: jobs of each small key.
    #[arg(long, default_value_t = 5)]
    pub small_jobs: u64,
    /// `fair`: push without flow keys (the same jobs, for the comparison).
    #[arg(long)]
    pub keyless: bool,
    /// `rate`, `cost`: distinct keys (`cost`: 0 for none).
    #[arg(long, default_value_t = 20)]
    pub keys: u64,
    /// `rate`: jobs of each key.
    #[arg(long, default_value_t = 100)]
    pub jobs_per_key: u64,
    /// `rate`: `flow.rate_per_s`.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// `rate`: `flow.burst`.
    #[arg(long, default_value_t = 10)]
    pub burst: u32,
    /// `cost`: jobs.
    #[arg(short = 'n', long, default_value_t = 50_000)]
    pub jobs: u64,
    /// `cost`: the jobs are due this long after the push began, ms.
    #[arg(long, default_value_t = 5000)]
    pub lead_ms: u64,
    /// The topic's `callback.concurrency`.
    #[arg(long, default_value_t = 32)]
    pub concurrency: u32,
    /// Concurrent pushers.
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Give up this long after the last push, ms.
    #[arg(long, default_value_t = 120_000)]
    pub deadline_ms: u64,
    /// Address of the in-process callback.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sink_listen: SocketAddr,
}

/// What `dq-bench flow` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// A big key's backlog and many small keys.
    Fair,
    /// Each key's rate under `flow.rate_per_s`.
    Rate,
    /// Delivery throughput with many keys (or none).
    Cost,
}

/// Runs `dq-bench flow`.
pub async fn run(target: &Arc<Target>, args: &FlowArgs) -> Result<Report> {
    let callback = Callback::start(args.sink_listen).await?;
    let client = target.client()?;
    let topic = due::random_topic("bench-flow");
    let mut config = json!({"callback": {"url": callback.url, "timeout_ms": 5000, "concurrency": args.concurrency},
                            "retry": {"max_attempts": 0, "backoff_ms": [200]}});
    if args.mode == Mode::Rate {
        config["flow"] = json!({"rate_per_s": args.rate, "burst": args.burst});
    }
    client
        .put_topic_json(&topic, &config)
        .await
        .context("cannot register the topic")?;
    // dq-consumer reads the registry every `topics.refresh_ms` (1 s by default).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = match args.mode {
        Mode::Fair => fair(target, &topic, args, &callback).await,
        Mode::Rate => rate(target, &topic, args, &callback).await,
        Mode::Cost => cost(target, &topic, args, &callback).await,
    };
    let _ = client.delete_topic(&topic).await;
    report
}

/// Pushes `jobs` (push requests as JSON) in batches over `connections` connections, as they are: no id
/// of the bench's own, so the server makes every id (a job with a flow key gets one in its key's place),
/// with or without keys alike. Returns when each job's push was answered (by index), and the push
/// latencies.
async fn push_all(
    target: &Arc<Target>,
    jobs: Vec<Value>,
    connections: u32,
    errors: &Arc<Errors>,
) -> Result<(Vec<Instant>, Hist)> {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicU64::new(0));
    let uri = target.uri("/v1/jobs/batch")?;
    let mut tasks = Vec::new();
    for mut conn in Conn::connect_many(target, connections as usize).await? {
        let (uri, jobs, next, errors) = (uri.clone(), Arc::clone(&jobs), Arc::clone(&next), Arc::clone(errors));
        tasks.push(tokio::spawn(async move {
            let mut hist = report::new_hist();
            let mut answered = Vec::new();
            loop {
                let first = next.fetch_add(BATCH as u64, Ordering::Relaxed) as usize;
                if first >= jobs.len() {
                    break (hist, answered);
                }
                let slice = &jobs[first..(first + BATCH).min(jobs.len())];
                let body = Bytes::from(json!({"jobs": slice}).to_string());
                let t = Instant::now();
                match conn.post_json(uri.clone(), body).await {
                    Ok(reply) if reply.is_success() => {
                        report::record(&mut hist, t.elapsed());
                        let results: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
                        let failed: Vec<&Value> = results["results"]
                            .as_array()
                            .map(|r| r.iter().filter(|r| r.get("error").is_some()).collect())
                            .unwrap_or_default();
                        if let Some(first) = failed.first() {
                            let n = failed.len();
                            errors.add(n as u64, || format!("{n} jobs of a batch refused: {first}"));
                        }
                        answered.push((first, slice.len(), Instant::now()));
                    }
                    Ok(reply) => errors.add(slice.len() as u64, || format!("push: {}", reply.describe())),
                    Err(e) => errors.add(slice.len() as u64, || format!("push: {e:#}")),
                }
            }
        }));
    }
    let mut at = vec![Instant::now(); jobs.len()];
    let mut hists = Vec::new();
    for t in tasks {
        let (hist, answered) = t.await?;
        hists.push(hist);
        for (first, n, when) in answered {
            at[first..first + n].fill(when);
        }
    }
    Ok((at, report::merge(&hists)))
}

/// Waits until `done(deliveries)` or the deadline.
async fn wait_for(callback: &Callback, deadline: Instant, done: impl Fn(&[Delivery]) -> bool) {
    while !done(&callback.ledger.lock().expect("not poisoned")) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The job index (`i`) of each delivery's body, and how many of them came again.
fn indexes(got: &[Delivery]) -> (HashSet<u64>, u64) {
    let mut seen = HashSet::new();
    let mut again = 0;
    for d in got {
        if let Some(i) = d.body["i"].as_u64()
            && !seen.insert(i)
        {
            again += 1;
        }
    }
    (seen, again)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `q` quantile of `v` (sorted).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
}

async fn fair(target: &Arc<Target>, topic: &str, args: &FlowArgs, callback: &Callback) -> Result<Report> {
    let job = |i: u64, key: String| {
        let mut push = json!({"topic": topic, "body": {"i": i, "k": key}});
        if !args.keyless {
            push["flow_key"] = key.into();
        }
        push
    };
    let big: Vec<Value> = (0..args.big).map(|i| job(i, "big".into())).collect();
    let small: Vec<Value> = (0..args.small_keys * args.small_jobs)
        .map(|s| job(args.big + s, format!("small-{}", s / args.small_jobs)))
        .collect();
    let total = args.big + small.len() as u64;
    let errors = Arc::new(Errors::default());
    let started = Instant::now();
    let (_, big_hist) = push_all(target, big, args.connections, &errors).await?;
    let (small_at, small_hist) = push_all(target, small, args.connections, &errors).await?;
    let pushed_for = started.elapsed();
    let deadline = Instant::now() + Duration::from_millis(args.deadline_ms);
    let first_small = args.big;
    wait_for(callback, deadline, |got| indexes(got).0.len() as u64 >= total).await;
    let got = callback.got();
    let (seen, again) = indexes(&got);
    // Each small job's wait: its first arrival less its push's answer.
    let mut first_arrival: HashMap<u64, Instant> = HashMap::new();
    for d in &got {
        if let Some(i) = d.body["i"].as_u64() {
            first_arrival.entry(i).or_insert(d.at);
        }
    }
    let mut waits: Vec<f64> = (first_small..total)
        .filter_map(|i| {
            let arrived = first_arrival.get(&i)?;
            Some(ms(
                arrived.saturating_duration_since(small_at[(i - first_small) as usize])
            ))
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    let last_small = (first_small..total)
        .filter_map(|i| first_arrival.get(&i))
        .max()
        .copied();
    let big_after = last_small.map_or(0, |t| {
        (0..args.big)
            .filter(|i| first_arrival.get(i).is_some_and(|a| *a > t))
            .count()
    });
    let missing = total - seen.len() as u64;
    let hist = report::merge([&big_hist, &small_hist]);
    let mut report = Report::new("flow-fair", total, pushed_for, "push", &hist, &errors)
        .with("keyless", args.keyless)
        .with("big_jobs", args.big)
        .with("small_keys", args.small_keys)
        .with("small_jobs_each", args.small_jobs)
        .with("concurrency", args.concurrency)
        .with("small_wait_p50_ms", quantile(&waits, 0.5))
        .with("small_wait_p99_ms", quantile(&waits, 0.99))
        .with("small_wait_max_ms", quantile(&waits, 1.0))
        .with("big_jobs_after_the_last_small", big_after)
        .with("delivered_again", again)
        .with("missing", missing);
    if missing > 0 {
        report = report.failed(format!("{missing} jobs never arrived"));
    }
    Ok(report)
}

async fn rate(target: &Arc<Target>, topic: &str, args: &FlowArgs, callback: &Callback) -> Result<Report> {
    let total = args.keys * args.jobs_per_key;
    let jobs: Vec<Value> = (0..total)
        .map(|i| {
            let key = format!("key-{}", i % args.keys);
            json!({"topic": topic, "body": {"i": i, "k": key}, "flow_key": key})
        })
        .collect();
    let errors = Arc::new(Errors::default());
    let started = Instant::now();
    let (_, hist) = push_all(target, jobs, args.connections, &errors).await?;
    let pushed_for = started.elapsed();
    // At the rate, the last job of each key comes (jobs − burst) / rate after its first.
    let expected = Duration::from_secs_f64((args.jobs_per_key as f64 - f64::from(args.burst)).max(0.0) / args.rate);
    let deadline = Instant::now() + expected + Duration::from_millis(args.deadline_ms);
    wait_for(callback, deadline, |got| indexes(got).0.len() as u64 >= total).await;
    let got = callback.got();
    let (seen, again) = indexes(&got);
    let mut by_key: HashMap<String, Vec<Instant>> = HashMap::new();
    let mut firsts = HashSet::new();
    for d in &got {
        if let (Some(i), Some(k)) = (d.body["i"].as_u64(), d.body["k"].as_str())
            && firsts.insert(i)
        {
            by_key.entry(k.to_string()).or_default().push(d.at);
        }
    }
    let burst = f64::from(args.burst);
    let mut rates = Vec::new();
    let mut worst_excess = f64::NEG_INFINITY;
    for times in by_key.values_mut() {
        times.sort();
        let (first, last) = (times[0], times[times.len() - 1]);
        let span = last.duration_since(first).as_secs_f64();
        if span > 0.0 {
            rates.push((times.len() as f64 - burst) / span);
        }
        // The bucket's bound over every stretch between two arrivals of the key.
        for (a, from) in times.iter().enumerate() {
            for (b, to) in times.iter().enumerate().skip(a) {
                let window = to.duration_since(*from).as_secs_f64();
                worst_excess = worst_excess.max((b - a + 1) as f64 - (args.rate * window + burst));
            }
        }
    }
    rates.sort_by(f64::total_cmp);
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    let missing = total - seen.len() as u64;
    let deviation = rates
        .iter()
        .map(|r| ((r - args.rate) / args.rate).abs())
        .fold(0.0, f64::max);
    let mut report = Report::new("flow-rate", total, pushed_for, "push", &hist, &errors)
        .with("keys", args.keys)
        .with("jobs_per_key", args.jobs_per_key)
        .with("rate_per_s", args.rate)
        .with("burst", args.burst)
        .with("key_rate_min", rates.first().copied().unwrap_or(0.0))
        .with("key_rate_max", rates.last().copied().unwrap_or(0.0))
        .with("key_rate_mean", mean)
        .with("key_rate_worst_deviation", deviation)
        .with("most_arrivals_beyond_the_bound", worst_excess)
        .with("delivered_again", again)
        .with("missing", missing);
    if missing > 0 {
        report = report.failed(format!("{missing} jobs never arrived"));
    }
    Ok(report)
}

async fn cost(target: &Arc<Target>, topic: &str, args: &FlowArgs, callback: &Callback) -> Result<Report> {
    let due_at = due::unix_ms() + args.lead_ms as i64;
    let jobs: Vec<Value> = (0..args.jobs)
        .map(|i| {
            let mut push = json!({"topic": topic, "body": {"i": i}, "run_at": due_at});
            if args.keys > 0 {
                push["flow_key"] = format!("key-{}", i % args.keys).into();
            }
            push
        })
        .collect();
    let errors = Arc::new(Errors::default());
    let started = Instant::now();
    let (_, hist) = push_all(target, jobs, args.connections, &errors).await?;
    let pushed_for = started.elapsed();
    if pushed_for >= Duration::from_millis(args.lead_ms) {
        bail!(
            "pushing took {:.1} s, past the due time: give a longer --lead-ms",
            pushed_for.as_secs_f64()
        );
    }
    let due = started + Duration::from_millis(args.lead_ms);
    let deadline = due + Duration::from_millis(args.deadline_ms);
    wait_for(callback, deadline, |got| indexes(got).0.len() as u64 >= args.jobs).await;
    let got = callback.got();
    let (seen, again) = indexes(&got);
    let last = got.iter().map(|d| d.at).max().unwrap_or(due);
    let took = last.saturating_duration_since(due).as_secs_f64();
    let missing = args.jobs - seen.len() as u64;
    let mut report = Report::new("flow-cost", args.jobs, pushed_for, "push", &hist, &errors)
        .with("keys", args.keys)
        .with("concurrency", args.concurrency)
        .with("delivered_per_s", seen.len() as f64 / took.max(1e-9))
        .with("delivery_s", took)
        .with("delivered_again", again)
        .with("missing", missing);
    if missing > 0 {
        report = report.failed(format!("{missing} jobs never arrived"));
    }
    Ok(report)
}
