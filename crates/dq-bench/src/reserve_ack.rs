//! `dq-bench reserve-ack`: how fast can consumers drain a topic?
//!
//! First (untimed) the topic is filled with N ready jobs by batch pushes, so
//! the timed phase measures only the consumer path. Then C workers, each on
//! its own keep-alive connection, loop reserve-one → ack until N jobs are
//! taken or the topic runs dry; with `--batch B`, reserve up to B → ack them
//! all in one `POST /v1/jobs/ack`. Reserve, ack and the whole per-job cycle are
//! timed separately: the cycle is what a real consumer with no work to do
//! would see, the two parts show where that time goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use dq_api::AckEntry;
use hyper::Uri;

use crate::wire::{ReserveReply, ack_body, ack_many_body};

use crate::http::{Conn, Target, encode_segment};
use crate::push::{self, MAX_TRANSPORT_FAILURES, PushPlan};
use crate::report::{self, Errors, Hist, Report};

/// Jobs per request when filling the topic.
const FILL_BATCH: usize = 500;
/// Connections used to fill the topic.
const FILL_CONNECTIONS: usize = 8;

/// Options of `dq-bench reserve-ack`.
#[derive(Debug, Args)]
pub struct ReserveAckArgs {
    /// Jobs to reserve and ack in the timed phase (and to push first).
    #[arg(short = 'n', long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jobs: u64,
    /// Concurrent workers (one connection each).
    #[arg(short = 'c', long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Topic to fill and drain.
    #[arg(long, default_value = "bench-ra")]
    pub topic: String,
    /// Size of each job's body: a JSON string whose JSON text is exactly this many bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(2..))]
    pub body_bytes: u32,
    /// Don't push N jobs first: drain what the topic already holds.
    #[arg(long)]
    pub no_fill: bool,
    /// Jobs per reserve (`count`); above 1 a worker acks what it reserved in one ack-many request.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub batch: u32,
    /// Drain with dq-client's worker loop (`dq_client::Worker`: C loops, `--batch` jobs per reserve,
    /// acks in one request, a handler that does nothing) instead of the bare HTTP loops.
    #[arg(long)]
    pub worker: bool,
}

/// Runs `dq-bench reserve-ack`.
pub async fn run(target: &Arc<Target>, args: &ReserveAckArgs) -> Result<Report> {
    let fill_seconds = if args.no_fill {
        None
    } else {
        Some(fill(target, args).await?)
    };

    if args.worker {
        return client_worker(target, args, fill_seconds).await;
    }
    let reserve_uri = target.uri("/v1/reserve")?;
    // `batch` jobs per reserve, no long poll.
    let reserve_body = crate::due::reserve_body(&args.topic, args.batch, 0);
    let conns = Conn::connect_many(target, args.connections as usize).await?;
    let shared = Arc::new(Shared {
        claimed: AtomicU64::new(0),
        total: args.jobs,
        batch: args.batch as u64,
        errors: Errors::default(),
    });

    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            tokio::spawn(worker(
                conn,
                Arc::clone(target),
                reserve_uri.clone(),
                reserve_body.clone(),
                Arc::clone(&shared),
            ))
        })
        .collect();
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        tallies.push(task.await.context("a worker panicked")?);
    }
    let elapsed = start.elapsed();

    let cycle = report::merge(tallies.iter().map(|t| &t.cycle));
    let reserve = report::merge(tallies.iter().map(|t| &t.reserve));
    let ack = report::merge(tallies.iter().map(|t| &t.ack));
    let acked: u64 = tallies.iter().map(|t| t.acked).sum();
    let empty: u64 = tallies.iter().map(|t| t.empty_reserves).sum();
    let mut report = Report::new("reserve-ack", acked, elapsed, "cycle", &cycle, &shared.errors)
        .with_latency("reserve", &reserve)
        .with_latency("ack", &ack)
        .with("connections", args.connections)
        .with("batch", args.batch)
        .with("body_bytes", args.body_bytes)
        .with("topic", args.topic.as_str())
        .with("reserves", reserve.len())
        .with("empty_reserves", empty);
    if let Some(s) = fill_seconds {
        report = report.with("fill_seconds", (s * 1000.0).round() / 1000.0);
    }
    if acked < args.jobs && shared.errors.count() == 0 {
        eprintln!("note: the topic ran dry after {acked} of {} jobs", args.jobs);
    }
    Ok(report)
}

/// Drains the topic with dq-client's worker loop: stops it once N jobs were handled, and counts the ones
/// it acked.
async fn client_worker(target: &Arc<Target>, args: &ReserveAckArgs, fill_seconds: Option<f64>) -> Result<Report> {
    let client = target.client()?;
    let handled = Arc::new(AtomicU64::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let handler = {
        let (handled, stop, total) = (handled.clone(), stop.clone(), args.jobs);
        move |_job: dq_client::Reservation| {
            if handled.fetch_add(1, Ordering::Relaxed) + 1 >= total {
                stop.cancel();
            }
            std::future::ready(Ok(()))
        }
    };
    let worker = dq_client::Worker::new(client, [args.topic.clone()])
        .batch(args.batch)
        .loops(args.connections as usize)
        .wait_ms(200);
    let start = Instant::now();
    let stats = worker.run(handler, stop).await;
    let elapsed = start.elapsed();
    let errors = Errors::default();
    let unsettled = stats.unsettled.load(Ordering::Relaxed) + stats.reserve_errors.load(Ordering::Relaxed);
    errors.add(unsettled, || "acks, nacks or reserves that failed (see the log)".into());
    let acked = stats.acked.load(Ordering::Relaxed);
    let mut report = Report::new("reserve-ack", acked, elapsed, "cycle", &report::new_hist(), &errors)
        .with("client", "dq_client::Worker")
        .with("connections", args.connections)
        .with("batch", args.batch)
        .with("topic", args.topic.as_str());
    if let Some(s) = fill_seconds {
        report = report.with("fill_seconds", (s * 1000.0).round() / 1000.0);
    }
    Ok(report)
}

/// Pushes N ready jobs in batches; fails if any push fails.
async fn fill(target: &Arc<Target>, args: &ReserveAckArgs) -> Result<f64> {
    eprintln!("filling topic `{}` with {} ready jobs ...", args.topic, args.jobs);
    let plan = Arc::new(PushPlan::new(
        target,
        &args.topic,
        push::body_of_size(args.body_bytes as usize),
        0,
        FILL_BATCH,
    )?);
    let conns = Conn::connect_many(target, FILL_CONNECTIONS).await?;
    let done = push::push_phase(conns, &plan, args.jobs).await?;
    if let Some(e) = done.errors.first() {
        bail!(
            "filling the topic failed ({} of {} jobs); first error: {e}",
            done.errors.count(),
            args.jobs
        );
    }
    let secs = done.elapsed.as_secs_f64();
    eprintln!(
        "filled {} jobs in {secs:.3} s ({:.0} jobs/s)",
        done.jobs_ok,
        done.jobs_ok as f64 / secs.max(f64::MIN_POSITIVE)
    );
    Ok(secs)
}

/// How many entries of an ack-many answer finished their job (`{}`).
fn count_acked(body: &[u8]) -> u64 {
    // Read as JSON, not as dq-api's answer: an entry counts when it is `{}`, whatever else holds.
    serde_json::from_slice::<serde_json::Value>(body).map_or(0, |a| {
        a["results"].as_array().map_or(0, |r| {
            r.iter().filter(|e| e.as_object().is_some_and(|o| o.is_empty())).count() as u64
        })
    })
}

impl Shared {
    /// Claims a batch of the budget; false when it is used up. A worker that finds it used up adds
    /// nothing, so slots given back after a short answer can be claimed again.
    fn claim(&self) -> bool {
        self.claimed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                (c < self.total).then_some(c + self.batch)
            })
            .is_ok()
    }
}

/// State shared by the workers.
struct Shared {
    /// Jobs claimed so far; a worker claims a batch before each reserve.
    claimed: AtomicU64,
    /// N.
    total: u64,
    /// Jobs per reserve.
    batch: u64,
    errors: Errors,
}

/// What one worker measured.
struct Tally {
    reserve: Hist,
    ack: Hist,
    cycle: Hist,
    acked: u64,
    empty_reserves: u64,
}

/// One consumer: reserve one job, ack it, repeat.
///
/// A worker claims slots of the shared budget before each reserve (and gives back
/// those the answer left empty), so no more than N jobs are reserved in all; it
/// stops when the budget is used up, when a reserve comes back empty (topic
/// drained), or when the server is gone.
async fn worker(
    mut conn: Conn,
    target: Arc<Target>,
    reserve_uri: Uri,
    reserve_body: Bytes,
    shared: Arc<Shared>,
) -> Tally {
    let mut t = Tally {
        reserve: report::new_hist(),
        ack: report::new_hist(),
        cycle: report::new_hist(),
        acked: 0,
        empty_reserves: 0,
    };
    let errors = &shared.errors;
    let mut transport_failures = 0;
    let ack_many_uri = target.uri("/v1/jobs/ack").ok();
    while shared.claim() {
        if transport_failures >= MAX_TRANSPORT_FAILURES {
            break;
        }
        let t0 = Instant::now();
        let reply = match conn.post_json(reserve_uri.clone(), reserve_body.clone()).await {
            Ok(r) => r,
            Err(e) => {
                errors.add(1, || format!("reserve: {e:#}"));
                transport_failures += 1;
                continue;
            }
        };
        transport_failures = 0;
        report::record(&mut t.reserve, t0.elapsed());
        if !reply.is_success() {
            errors.add(1, || format!("reserve: {}", reply.describe()));
            continue;
        }
        let jobs = match serde_json::from_slice::<ReserveReply>(&reply.body) {
            Ok(r) => r.jobs,
            Err(e) => {
                errors.add(1, || format!("reserve: unreadable answer ({e}): {}", reply.describe()));
                continue;
            }
        };
        if jobs.is_empty() {
            t.empty_reserves += 1;
            break;
        }
        // A reserve may answer fewer jobs than it asked for (it takes what the partitions it asked held):
        // the slots it did not fill go back to the budget.
        let got = jobs.len() as u64;
        if got < shared.batch {
            shared.claimed.fetch_sub(shared.batch - got, Ordering::Relaxed);
        }
        if shared.batch > 1 {
            let Some(uri) = ack_many_uri.clone() else {
                errors.add(1, || "ack many: no URI".to_string());
                break;
            };
            let t1 = Instant::now();
            match conn
                .post_json(uri, ack_many_body(&jobs.iter().map(AckEntry::from).collect::<Vec<_>>()))
                .await
            {
                Ok(reply) if reply.is_success() => {
                    report::record(&mut t.ack, t1.elapsed());
                    let done = count_acked(&reply.body);
                    for _ in 0..done {
                        report::record(&mut t.cycle, t0.elapsed());
                    }
                    t.acked += done;
                    if done < jobs.len() as u64 {
                        errors.add(jobs.len() as u64 - done, || format!("ack many: {}", reply.describe()));
                    }
                }
                Ok(reply) => errors.add(1, || format!("ack many: {}", reply.describe())),
                Err(e) => {
                    errors.add(1, || format!("ack many: {e:#}"));
                    transport_failures += 1;
                }
            }
            continue;
        }
        for job in &jobs {
            let uri = match target.uri(&format!("/v1/jobs/{}/ack", encode_segment(&job.id))) {
                Ok(u) => u,
                Err(e) => {
                    errors.add(1, || format!("ack: {e:#}"));
                    continue;
                }
            };
            let t1 = Instant::now();
            match conn.post_json(uri, ack_body(&job.receipt)).await {
                Ok(reply) => {
                    report::record(&mut t.ack, t1.elapsed());
                    if reply.is_success() {
                        report::record(&mut t.cycle, t0.elapsed());
                        t.acked += 1;
                    } else {
                        errors.add(1, || format!("ack {}: {}", job.id, reply.describe()));
                    }
                }
                Err(e) => {
                    errors.add(1, || format!("ack {}: {e:#}", job.id));
                    transport_failures += 1;
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bodies() {
        assert_eq!(
            crate::due::reserve_body("bench-ra", 1, 0),
            Bytes::from_static(br#"{"topics":["bench-ra"],"count":1,"timeout_ms":0}"#)
        );
        assert_eq!(ack_body("r\"1"), Bytes::from_static(br#"{"receipt":"r\"1"}"#));
        let jobs = [
            AckEntry {
                id: "a".into(),
                receipt: "r1".into(),
                consumer: None,
            },
            AckEntry {
                id: "b".into(),
                receipt: "r\"2".into(),
                consumer: None,
            },
        ];
        assert_eq!(
            ack_many_body(&jobs),
            Bytes::from_static(br#"{"acks":[{"id":"a","receipt":"r1"},{"id":"b","receipt":"r\"2"}]}"#)
        );
        assert_eq!(
            count_acked(br#"{"results":[{},{"error":{"code":"stale_receipt"}},{}]}"#),
            2
        );
    }

    #[test]
    fn reads_reserve_answers() {
        let body = br#"{"jobs":[{"id":"01J0","topic":"bench-ra","body":{"a":[1,"x"]},
            "attempt":1,"receipt":"rc\"pt","deadline":1700000000000,"run_at":1699999990000}]}"#;
        let r: ReserveReply = serde_json::from_slice(body).unwrap();
        assert_eq!(r.jobs.len(), 1);
        assert_eq!(r.jobs[0].id, "01J0");
        assert_eq!(r.jobs[0].receipt, "rc\"pt");
        let r: ReserveReply = serde_json::from_slice(br#"{"jobs":[]}"#).unwrap();
        assert!(r.jobs.is_empty());
    }
}
