//! `dq-bench waiters`: what W waiting long polls cost dq-server, and what one push then costs Redis.
//!
//! W connections each long-poll `POST /v1/reserve` on one topic (and poll again when theirs returns
//! empty); with `--http2-connections N`, W HTTP/2 streams spread over N connections instead. Once all are sent and the server's memory has settled, the bench reads dq-server's resident
//! memory (`/proc/<pid>/status`, so the server must run on this machine: `--server-pid`) and reports
//! the growth per waiter. Then it counts Redis commands (`INFO stats`, `total_commands_processed`) over
//! two equal windows: one with nothing pushed (the server's own background calls), and one in which a
//! single ready job is pushed and reserved by one waiter. The difference is what one push to a topic
//! with W waiters costs Redis, the push itself included: every command, those run inside scripts
//! included, and apart the script calls (the round trips clients made). Use a standalone Redis with nothing else
//! running against it (no dq-timer, dq-consumer or dq-checker).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::due;
use crate::http::{Conn, H2Conn, Target};
use crate::report::{self, Errors, Report};

/// Options of `dq-bench waiters`.
#[derive(Debug, Args)]
pub struct WaitersArgs {
    /// Long polls waiting at once, each on its own connection.
    #[arg(short = 'w', long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub waiters: u64,
    /// dq-server's process id, to read its memory.
    #[arg(long)]
    pub server_pid: u32,
    /// The Redis dq-server uses (standalone), to count its commands.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis: String,
    /// Long-poll timeout of each reserve, in ms (at most the server's `limits.max_reserve_timeout_ms`).
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Length of each command-counting window, in ms.
    #[arg(long, default_value_t = 1_000)]
    pub window_ms: u64,
    /// Hold the long polls as HTTP/2 streams on this many connections (h2c, prior knowledge), instead
    /// of one HTTP/1.1 connection each (0).
    #[arg(long, default_value_t = 0)]
    pub http2_connections: u64,
}

/// Runs the benchmark.
pub async fn run(target: &Arc<Target>, args: &WaitersArgs) -> Result<Report> {
    let topic = due::random_topic("bench-waiters");
    let idle_kib = rss_kib(args.server_pid, "VmRSS")?;
    let stop = CancellationToken::new();
    let sent = Arc::new(AtomicU64::new(0));
    let got = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let reserve_uri = target.uri("/v1/reserve")?;
    let body = due::reserve_body(&topic, 1, args.timeout_ms);
    let started = Instant::now();
    let mut h2 = Vec::new();
    for _ in 0..args.http2_connections {
        h2.push(H2Conn::connect(Arc::clone(target)).await?);
    }
    for i in 0..args.waiters {
        let conn = match h2.get(i as usize % h2.len().max(1)) {
            Some(shared) => Line::H2(shared.clone()),
            None => Line::H1(Conn::connect(Arc::clone(target)).await?),
        };
        let (uri, body, stop) = (reserve_uri.clone(), body.clone(), stop.clone());
        let (sent, got, errors) = (sent.clone(), got.clone(), errors.clone());
        tokio::spawn(wait_in_line(conn, uri, body, stop, sent, got, errors));
    }
    while sent.load(Ordering::Relaxed) < args.waiters {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connect_s = started.elapsed().as_secs_f64();
    let waiting_kib = settled_rss_kib(args.server_pid).await?;
    let peak_kib = rss_kib(args.server_pid, "VmHWM")?;

    let redis = redis::Client::open(args.redis.as_str()).context("bad --redis URL")?;
    let mut redis = redis
        .get_multiplexed_async_connection()
        .await
        .context("cannot reach --redis")?;
    let window = Duration::from_millis(args.window_ms);
    let quiet = commands_over(&mut redis, window, async {}).await?;
    let mut pusher = Conn::connect(Arc::clone(target)).await?;
    let push_uri = target.uri("/v1/jobs")?;
    let job = Bytes::from(format!(r#"{{"topic":"{topic}","body":{{"n":1}}}}"#));
    let got_before = got.load(Ordering::Relaxed);
    let with_push = commands_over(&mut redis, window, async {
        match pusher.post_json(push_uri, job).await {
            Ok(r) if r.is_success() => {}
            Ok(r) => errors.add(1, || format!("push: {}", r.describe())),
            Err(e) => errors.add(1, || format!("push: {e:#}")),
        }
    })
    .await?;
    let reserved = got.load(Ordering::Relaxed) - got_before;
    stop.cancel();
    if reserved != 1 {
        bail!("the pushed job was reserved {reserved} times within the window (expected 1)");
    }
    let per_waiter = (waiting_kib.saturating_sub(idle_kib) * 1024) as f64 / args.waiters as f64;
    let commands = with_push.0.saturating_sub(quiet.0);
    let script_calls = with_push.1.saturating_sub(quiet.1);
    Ok(Report::new(
        "waiters",
        args.waiters,
        started.elapsed(),
        "none",
        &report::new_hist(),
        &errors,
    )
    .with("waiters", args.waiters)
    .with("http2_connections", args.http2_connections)
    .with("connect_s", connect_s)
    .with("server_rss_idle_kib", idle_kib)
    .with("server_rss_waiting_kib", waiting_kib)
    .with("server_rss_peak_kib", peak_kib)
    .with("bytes_per_waiter", per_waiter.round())
    .with("redis_commands_quiet_window", quiet.0)
    .with("redis_commands_push_window", with_push.0)
    .with("redis_commands_per_push", commands)
    .with("redis_script_calls_per_push", script_calls))
}

/// A waiter's way to the server: a connection of its own, or a stream of a shared HTTP/2 connection.
enum Line {
    H1(Conn),
    H2(H2Conn),
}

impl Line {
    async fn post_json(&mut self, uri: hyper::Uri, body: Bytes) -> Result<crate::http::Reply> {
        match self {
            Line::H1(c) => c.post_json(uri, body).await,
            Line::H2(c) => c.post_json(uri, body).await,
        }
    }
}

/// One waiter: long-polls until `stop`, counting requests sent and jobs received.
async fn wait_in_line(
    mut conn: Line,
    uri: hyper::Uri,
    body: Bytes,
    stop: CancellationToken,
    sent: Arc<AtomicU64>,
    got: Arc<AtomicU64>,
    errors: Arc<Errors>,
) {
    loop {
        sent.fetch_add(1, Ordering::Relaxed);
        let reply = tokio::select! {
            r = conn.post_json(uri.clone(), body.clone()) => r,
            _ = stop.cancelled() => return,
        };
        match reply {
            Ok(r) if r.is_success() => {
                let jobs = serde_json::from_slice::<serde_json::Value>(&r.body)
                    .ok()
                    .and_then(|v| v["jobs"].as_array().map(Vec::len))
                    .unwrap_or(0);
                got.fetch_add(jobs as u64, Ordering::Relaxed);
            }
            Ok(r) => {
                errors.add(1, || format!("reserve: {}", r.describe()));
                return;
            }
            Err(e) => {
                errors.add(1, || format!("reserve: {e:#}"));
                return;
            }
        }
    }
}

/// Commands Redis ran over `window`, with `during` run at its start: all of them (those scripts ran
/// inside included, minus the two INFO calls), and the script calls among them.
async fn commands_over(
    redis: &mut redis::aio::MultiplexedConnection,
    window: Duration,
    during: impl std::future::Future<Output = ()>,
) -> Result<(u64, u64)> {
    let before = command_counts(redis).await?;
    let end = Instant::now() + window;
    during.await;
    tokio::time::sleep_until(end.into()).await;
    let after = command_counts(redis).await?;
    Ok((
        after.0.saturating_sub(before.0).saturating_sub(1),
        after.1.saturating_sub(before.1),
    ))
}

/// `total_commands_processed`, and the calls of EVALSHA and EVAL (`INFO commandstats`).
async fn command_counts(redis: &mut redis::aio::MultiplexedConnection) -> Result<(u64, u64)> {
    let info: String = redis::cmd("INFO").arg("everything").query_async(redis).await?;
    let total = info
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .context("INFO has no total_commands_processed")?;
    let scripts = info
        .lines()
        .filter_map(|l| {
            l.strip_prefix("cmdstat_evalsha:")
                .or_else(|| l.strip_prefix("cmdstat_eval:"))
        })
        .filter_map(|l| l.strip_prefix("calls=")?.split(',').next()?.parse::<u64>().ok())
        .sum();
    Ok((total, scripts))
}

/// The server's resident memory once it stops growing (two reads 500 ms apart within 1%).
async fn settled_rss_kib(pid: u32) -> Result<u64> {
    let mut last = rss_kib(pid, "VmRSS")?;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_kib(pid, "VmRSS")?;
        if now.abs_diff(last) * 100 <= last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// A `kB` field of `/proc/<pid>/status`.
fn rss_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("no process {pid}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("/proc/{pid}/status has no {field}"))
}
