//! `dq-bench coalesce`: coalescing end to end, through dq-server, dq-timer and dq-consumer (running
//! separately; the bench talks HTTP). It starts an in-process callback that records every delivery's
//! job id, body and arrival, registers a fresh topic with it, pushes, waits, and checks:
//!
//! * `--mode last` (debounce): `--pushes` pushes to one key, evenly over `--over-ms`, with `window_ms`
//!   `--window-ms`. Exactly one job must be delivered (a delivery again of that job is allowed: at least
//!   once), with the last push's body; the report gives how long after the last push's answer it came.
//! * `--mode merge`: `--pushes` pushes over `--keys` keys from `-c` connections, each with an id of its
//!   own (`item-<i>`, its push id). Every item must be delivered, each inside exactly one job (never in
//!   two, never twice in one); the report gives the jobs, the items per job, and the time to the last.
//!
//! The run fails on a violated check. Pushes go through dq-client, which sends a push again after an
//! unknown outcome with the same id, so each item is pushed once however the network behaves.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use dq_api::{Coalesce, CoalesceMode, PushRequest};
use serde_json::{Value, json};

use crate::due;
use crate::http::Target;
use crate::ledger::{Callback, Delivery, Ledger};
use crate::report::{self, Errors, Report};

/// Options of `dq-bench coalesce`.
#[derive(Debug, Args)]
pub struct CoalesceArgs {
    /// `last` (debounce, one key) or `merge` (items over many keys).
    #[arg(long, value_enum, default_value_t = Mode::Last)]
    pub mode: Mode,
    /// Pushes in all.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub pushes: u64,
    /// `last`: spread the pushes evenly over this long, ms.
    #[arg(long, default_value_t = 10_000)]
    pub over_ms: u64,
    /// `merge`: keys the pushes go to, in turn.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// The coalescing window, ms.
    #[arg(long, default_value_t = 500)]
    pub window_ms: u64,
    /// `merge`: concurrent pushers.
    #[arg(short = 'c', long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Wait this long after the last push for the deliveries, ms (then the checks).
    #[arg(long, default_value_t = 30_000)]
    pub deadline_ms: u64,
    /// After everything arrived, wait this long for deliveries that should not come, ms.
    #[arg(long, default_value_t = 2000)]
    pub linger_ms: u64,
    /// Address of the in-process callback.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sink_listen: SocketAddr,
}

/// The coalescing mode measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Debounce.
    Last,
    /// Batching.
    Merge,
}

/// Runs `dq-bench coalesce`.
pub async fn run(target: &Arc<Target>, args: &CoalesceArgs) -> Result<Report> {
    let callback = Callback::start(args.sink_listen).await?;
    let ledger = &callback.ledger;
    let client = target.client()?;
    let topic = due::random_topic("bench-coalesce");
    client
        .put_topic_json(
            &topic,
            &json!({"callback": {"url": callback.url, "timeout_ms": 5000, "concurrency": 32},
                    "retry": {"max_attempts": 0, "backoff_ms": [200]}}),
        )
        .await
        .context("cannot register the topic")?;
    // dq-consumer reads the registry every `topics.refresh_ms` (1 s by default).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = match args.mode {
        Mode::Last => debounce(&client, &topic, args, ledger).await,
        Mode::Merge => merge(&client, &topic, args, ledger).await,
    };
    let _ = client.delete_topic(&topic).await;
    report
}

fn coalesce(mode: CoalesceMode, window_ms: u64) -> Coalesce {
    Coalesce {
        mode,
        window_ms: window_ms as i64,
        max_wait_ms: None,
        max_items: None,
    }
}

async fn debounce(client: &dq_client::Client, topic: &str, args: &CoalesceArgs, ledger: &Ledger) -> Result<Report> {
    let gap = Duration::from_micros(args.over_ms * 1000 / args.pushes);
    let started = Instant::now();
    let errors = Errors::default();
    let mut hist = report::new_hist();
    let mut ids = HashSet::new();
    let mut last_at = started;
    for i in 0..args.pushes {
        let due_at = started + gap * i as u32;
        tokio::time::sleep_until(due_at.into()).await;
        let push =
            PushRequest::new(topic, json!({"push": i})).coalesce("doc", coalesce(CoalesceMode::Last, args.window_ms));
        let t = Instant::now();
        match client.push(&push).await {
            Ok(a) => {
                ids.insert(a.id);
                last_at = Instant::now();
                report::record(&mut hist, t.elapsed());
            }
            Err(e) => errors.add(1, || format!("push {i}: {e}")),
        }
    }
    let pushed_for = started.elapsed();
    let deadline = last_at + Duration::from_millis(args.deadline_ms);
    while ledger.lock().expect("not poisoned").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(args.linger_ms)).await;
    let got = ledger.lock().expect("not poisoned").clone();
    let distinct: HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
    let after_last_ms = got
        .first()
        .map(|d| d.at.saturating_duration_since(last_at).as_secs_f64() * 1000.0);
    let mut report = Report::new("coalesce-last", args.pushes, pushed_for, "push", &hist, &errors)
        .with("pushes", args.pushes)
        .with("over_ms", args.over_ms)
        .with("window_ms", args.window_ms)
        .with("jobs_answered", ids.len())
        .with("deliveries", got.len())
        .with("jobs_delivered", distinct.len())
        .with("delivered_after_last_push_ms", after_last_ms.unwrap_or(-1.0));
    let last_body = json!({"push": args.pushes - 1});
    if distinct.len() != 1 {
        report = report.failed(format!("{} jobs delivered, not one", distinct.len()));
    } else if got.iter().any(|d| d.body != last_body) {
        report = report.failed(format!("the delivered body is {}, not the last push's", got[0].body));
    } else if ids.len() != 1 {
        report = report.failed(format!("the pushes were answered with {} jobs, not one", ids.len()));
    }
    Ok(report)
}

async fn merge(client: &dq_client::Client, topic: &str, args: &CoalesceArgs, ledger: &Ledger) -> Result<Report> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (client, topic, next, errors) = (
            client.clone(),
            topic.to_string(),
            Arc::clone(&next),
            Arc::clone(&errors),
        );
        let (n, keys, window) = (args.pushes, args.keys, args.window_ms);
        tasks.push(tokio::spawn(async move {
            let mut hist = report::new_hist();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break hist;
                }
                let push = PushRequest::new(topic.as_str(), json!(i))
                    .id(format!("item-{i}"))
                    .coalesce(format!("k{}", i % keys), coalesce(CoalesceMode::Merge, window));
                let t = Instant::now();
                match client.push(&push).await {
                    Ok(_) => report::record(&mut hist, t.elapsed()),
                    Err(e) => errors.add(1, || format!("push {i}: {e}")),
                }
            }
        }));
    }
    let mut hists = Vec::new();
    for t in tasks {
        hists.push(t.await?);
    }
    let hist = report::merge(&hists);
    let pushed_for = started.elapsed();
    let deadline = Instant::now() + Duration::from_millis(args.deadline_ms);
    let items_in = |got: &[Delivery]| {
        let mut seen = HashSet::new();
        for d in got {
            if let Some(items) = d.body["items"].as_array() {
                seen.extend(items.iter().filter_map(Value::as_u64));
            }
        }
        seen.len() as u64
    };
    while items_in(&ledger.lock().expect("not poisoned")) < args.pushes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_in = started.elapsed();
    tokio::time::sleep(Duration::from_millis(args.linger_ms)).await;
    let got = ledger.lock().expect("not poisoned").clone();
    // Each job once (a job delivered again is the same job), then each item's jobs.
    let mut jobs: HashMap<&str, &Value> = HashMap::new();
    for d in &got {
        jobs.entry(d.id.as_str()).or_insert(&d.body);
    }
    let mut homes: HashMap<u64, Vec<&str>> = HashMap::new();
    let mut malformed = 0;
    for (id, body) in &jobs {
        match body["items"].as_array() {
            Some(items) => {
                for item in items {
                    match item.as_u64() {
                        Some(i) => homes.entry(i).or_default().push(id),
                        None => malformed += 1,
                    }
                }
            }
            None => malformed += 1,
        }
    }
    let missing = (0..args.pushes).filter(|i| !homes.contains_key(i)).count();
    let twice = homes.values().filter(|h| h.len() > 1).count();
    let sizes: Vec<usize> = jobs
        .values()
        .filter_map(|b| b["items"].as_array().map(Vec::len))
        .collect();
    let mut report = Report::new("coalesce-merge", args.pushes, pushed_for, "push", &hist, &errors)
        .with("pushes", args.pushes)
        .with("keys", args.keys)
        .with("window_ms", args.window_ms)
        .with("connections", args.connections)
        .with("deliveries", got.len())
        .with("jobs_delivered", jobs.len())
        .with("items_delivered", homes.len())
        .with("items_per_job_max", sizes.iter().copied().max().unwrap_or(0))
        .with("items_missing", missing)
        .with("items_in_two_jobs_or_twice", twice)
        .with("all_delivered_after_s", all_in.as_secs_f64());
    if missing > 0 || twice > 0 || malformed > 0 {
        report = report.failed(format!(
            "{missing} items missing, {twice} items in more than one place, {malformed} malformed"
        ));
    }
    if errors.count() > 0 {
        bail!("pushes failed: {}", errors.first().unwrap_or("?"));
    }
    Ok(report)
}
