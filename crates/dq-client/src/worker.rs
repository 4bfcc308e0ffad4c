//! The pull consumer's loop: reserve a batch with a long poll, run the handler on each job side by side,
//! ack the successes in one request, nack the failures, touch jobs that run long, stop cleanly.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use dq_api::ReserveRequest;

use crate::jobs::{Nack, Reservation};

/// What a handler answers for a job it could not do: the job is nacked with `error` (kept as its
/// `last_error`) and retried after `delay_ms`, or after its backoff list when that is unset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// What went wrong.
    pub error: String,
    /// When to retry; unset: the job's backoff list.
    pub delay_ms: Option<u64>,
}

impl Failed {
    /// A failure, retried by the job's backoff list.
    pub fn new(error: impl std::fmt::Display) -> Self {
        Failed {
            error: error.to_string(),
            delay_ms: None,
        }
    }

    /// Retried after `ms` instead.
    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }
}

/// What a worker did, counted as it went.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Jobs reserved.
    pub reserved: AtomicU64,
    /// Jobs acked.
    pub acked: AtomicU64,
    /// Jobs nacked.
    pub nacked: AtomicU64,
    /// Jobs whose ack or nack failed (a stale receipt: the reservation ended first, and the job is or
    /// will be handed out again), or could not be sent.
    pub unsettled: AtomicU64,
    /// Reserves that failed.
    pub reserve_errors: AtomicU64,
}

/// A pull consumer of some topics. See [`Worker::run`].
#[derive(Debug, Clone)]
pub struct Worker {
    /// The client.
    client: Client,
    /// The topics, highest priority first.
    topics: Vec<String>,
    /// Jobs per reserve.
    batch: u32,
    /// Reserve loops running side by side.
    loops: usize,
    /// How long a reserve waits for a job.
    wait_ms: u64,
    /// How often a job still being handled is touched.
    touch_every: Option<Duration>,
}

/// How long a loop waits after a failed reserve.
const RESERVE_RETRY: Duration = Duration::from_millis(500);

impl Worker {
    /// A worker of `topics` (highest priority first): one loop, batches of 10, long polls of 5 s, no
    /// touching.
    pub fn new<I, S>(client: Client, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Worker {
            client,
            topics: topics.into_iter().map(Into::into).collect(),
            batch: 10,
            loops: 1,
            wait_ms: 5000,
            touch_every: None,
        }
    }

    /// Reserves up to `n` jobs at a time (dq's `count`, 1 ..= `limits.max_reserve_count`).
    pub fn batch(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Runs `n` reserve loops side by side: up to `n × batch` jobs are handled at once.
    pub fn loops(mut self, n: usize) -> Self {
        self.loops = n.max(1);
        self
    }

    /// Each reserve waits up to `ms` for a job (a long poll; dq allows 30 s by default). A stop takes
    /// effect once the reserves in flight have answered, so this also bounds how long a stop takes.
    pub fn wait_ms(mut self, ms: u64) -> Self {
        self.wait_ms = ms;
        self
    }

    /// Touches every job still being handled this often, so that a long job keeps its reservation: set
    /// it well under the jobs' TTR.
    pub fn touch_every(mut self, every: Duration) -> Self {
        self.touch_every = Some(every);
        self
    }

    /// Runs until `stop` is cancelled: each loop reserves a batch, runs `handler` on its jobs side by
    /// side, acks the ones that succeeded (in one request when there are several) and nacks the ones
    /// that failed. On a stop, no new reserve starts; jobs already reserved are handled and settled,
    /// then `run` returns what was done.
    pub async fn run<H, F>(self, handler: H, stop: CancellationToken) -> Arc<WorkerStats>
    where
        H: Fn(Reservation) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), Failed>> + Send + 'static,
    {
        let stats = Arc::new(WorkerStats::default());
        let this = Arc::new(self);
        let handler = Arc::new(handler);
        let loops: Vec<_> = (0..this.loops)
            .map(|_| {
                let (this, handler, stats, stop) = (this.clone(), handler.clone(), stats.clone(), stop.clone());
                tokio::spawn(async move { this.reserve_loop(handler.as_ref(), &stats, &stop).await })
            })
            .collect();
        for l in join_all(loops).await {
            if let Err(e) = l {
                tracing::error!(cause = %e, "a worker loop panicked");
            }
        }
        stats
    }

    async fn reserve_loop<H, F>(&self, handler: &H, stats: &WorkerStats, stop: &CancellationToken)
    where
        H: Fn(Reservation) -> F,
        F: Future<Output = Result<(), Failed>>,
    {
        let request = ReserveRequest::new(self.topics.clone())
            .count(self.batch)
            .wait_ms(self.wait_ms);
        while !stop.is_cancelled() {
            let jobs = match self.client.reserve(&request).await {
                Ok(jobs) => jobs,
                Err(e) => {
                    stats.reserve_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(cause = %e, "reserve failed");
                    tokio::select! {
                        _ = tokio::time::sleep(RESERVE_RETRY) => {}
                        _ = stop.cancelled() => {}
                    }
                    continue;
                }
            };
            if jobs.is_empty() {
                continue;
            }
            stats.reserved.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            let outcomes = join_all(jobs.iter().map(|job| self.handle(handler, job))).await;
            self.settle(&jobs, outcomes, stats).await;
        }
    }

    /// Runs the handler on one job, touching it while it runs when asked to.
    async fn handle<H, F>(&self, handler: &H, job: &Reservation) -> Result<(), Failed>
    where
        H: Fn(Reservation) -> F,
        F: Future<Output = Result<(), Failed>>,
    {
        let work = handler(job.clone());
        let Some(every) = self.touch_every else {
            return work.await;
        };
        tokio::pin!(work);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                outcome = &mut work => return outcome,
                _ = ticks.tick() => {
                    if let Err(e) = self.client.touch(&job.id, &job.receipt, None).await {
                        tracing::warn!(id = %job.id, cause = %e, "touch failed");
                    }
                }
            }
        }
    }

    /// Acks the successes (one request for several) and nacks the failures.
    async fn settle(&self, jobs: &[Reservation], outcomes: Vec<Result<(), Failed>>, stats: &WorkerStats) {
        let mut acks = Vec::new();
        for (job, outcome) in jobs.iter().zip(outcomes) {
            match outcome {
                Ok(()) => acks.push((job.id.as_str(), job.receipt.as_str())),
                Err(failed) => {
                    let nack = Nack {
                        delay_ms: failed.delay_ms,
                        error: Some(failed.error),
                    };
                    match self.client.nack(&job.id, &job.receipt, &nack).await {
                        Ok(()) => stats.nacked.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            tracing::warn!(id = %job.id, cause = %e, "nack failed");
                            stats.unsettled.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
        }
        let acked = match acks.as_slice() {
            [] => return,
            [(id, receipt)] => vec![self.client.ack(id, receipt).await.map_err(|e| e.to_string())],
            _ => match self.client.ack_many(&acks).await {
                Ok(results) => results.into_iter().map(|r| r.map_err(|e| e.to_string())).collect(),
                Err(e) => vec![Err(e.to_string()); acks.len()],
            },
        };
        for ((id, _), result) in acks.iter().zip(acked) {
            match result {
                Ok(()) => stats.acked.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!(%id, cause = %e, "ack failed");
                    stats.unsettled.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
    }
}
