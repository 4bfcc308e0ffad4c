//! One topic's delivery loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq_core::admin::TopicCache;
use dq_core::reservations::ReserveOptions;
use dq_core::series::Counter;
use dq_core::{Queue, Reservation};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::answer;
use crate::deliver::{self, Outcome, Posted};
use crate::egress::Egress;
use crate::limiter::{Admit, Limiter};
use crate::plan::Plan;

mod handoff;
mod telling;

use self::telling::Telling;

/// What a topic's worker counts, served at 0 from its start.
const TOPIC_COUNTERS: &[Counter] = &[
    Counter::labelled(
        "dq_deliveries_total",
        &[(
            "outcome",
            &[
                "ok",
                "timeout",
                "connect_error",
                "egress_refused",
                "http_error",
                "too_large",
                "empty",
                "condition",
                "handed_back",
            ],
        )],
    ),
    Counter::plain("dq_jobs_reserved_total"),
    Counter::plain("dq_consumer_settle_retries_total"),
    Counter::plain("dq_consumer_handed_total"),
    Counter::labelled(
        "dq_consumer_limit_waits_total",
        &[("reason", &["slots", "rate", "paused"])],
    ),
    Counter::plain("dq_consumer_pauses_total"),
];

/// What every worker of this process shares.
pub struct Shared {
    /// The queue.
    pub queue: Queue,
    /// The egress policy and the HTTP clients that apply it (connections to each callback host are
    /// reused).
    pub egress: Arc<Egress>,
    /// Every delivery in flight, so the drain can wait for them.
    pub tracker: TaskTracker,
    /// Cancelled when the drain's grace period is over: deliveries still running release their job.
    pub release_now: CancellationToken,
    /// `jobs.backoff_ms`, for topics without their own.
    pub backoff_default: Vec<u64>,
    /// This process's name in the topics' limits and its hand-off channels (a fresh ULID per start).
    pub process_id: String,
    /// This process's name in the jobs' attempts: `<host>:<pid>`.
    pub consumer_name: String,
    /// Each topic worker's in-box for jobs a timer handed to it (see `dq_core::reservations::handoff`).
    pub handoffs: Mutex<HashMap<String, mpsc::UnboundedSender<Vec<Reservation>>>>,
    /// The topics' registrations: the defaults of the jobs an answer pushes.
    pub topics: Arc<TopicCache>,
}

/// Reserves and delivers one topic's jobs, within the topic's limits over every consumer: at most
/// `callback.concurrency` at a time and `callback.rate_per_s`.
pub struct TopicWorker {
    /// The topic.
    topic: String,
    /// What all workers share.
    shared: Arc<Shared>,
    /// The topic's current plan.
    plan: watch::Receiver<Arc<Plan>>,
    /// Stops reserving.
    stop: CancellationToken,
    /// Jobs a timer handed to this worker.
    handoffs: mpsc::UnboundedReceiver<Vec<Reservation>>,
}

/// How long a reservation lasts beyond the callback's timeout, so it outlives the call.
const TTR_MARGIN_MS: u64 = 5000;

impl TopicWorker {
    /// A worker for `topic`, with its in-box for handed jobs in `shared`.
    pub fn new(topic: String, shared: Arc<Shared>, plan: watch::Receiver<Arc<Plan>>, stop: CancellationToken) -> Self {
        let (tx, handoffs) = mpsc::unbounded_channel();
        shared
            .handoffs
            .lock()
            .expect("never poisoned")
            .insert(topic.clone(), tx);
        TopicWorker {
            topic,
            shared,
            plan,
            stop,
            handoffs,
        }
    }

    /// Loops until stopped: waits for a free slot, asks the topic's limits how many deliveries may start,
    /// reserves that many jobs (without polling: an empty queue waits for its wake-up, and tells the
    /// timers it waits, so they hand it due jobs directly), and starts a delivery for each. Once stopped,
    /// hands back the jobs handed to it that it did not start.
    pub async fn run(mut self) {
        let announced = self.serve().await;
        let topic = self.topic.clone();
        self.shared.handoffs.lock().expect("never poisoned").remove(&topic);
        if announced {
            self.announce(0, 0).await;
        }
        self.handoffs.close();
        let mut left = Vec::new();
        while let Ok(jobs) = self.handoffs.try_recv() {
            left.extend(jobs);
        }
        if !left.is_empty() {
            self.shared.clone().release_all(left).await;
        }
    }

    /// The loop of [`TopicWorker::run`]; returns whether it ever told the timers it waits.
    async fn serve(&mut self) -> bool {
        let mut announced = false;
        let mut telling = Telling::default();
        let topics = [self.topic.clone()];
        let limiter = Arc::new(Limiter::new(
            self.shared.queue.clone(),
            self.topic.clone(),
            &self.shared.process_id,
        ));
        // Tracked, so the drain waits for it to give the slots back after the last delivery.
        let keep_stop = CancellationToken::new();
        self.shared
            .tracker
            .spawn(limiter.clone().keep(self.plan.clone(), keep_stop.clone()));
        let _stop_keeping = keep_stop.drop_guard();
        // Shown from the start, so a rate over it reads 0 rather than nothing.
        dq_core::series::serve_for_topic(&self.topic, TOPIC_COUNTERS);
        let mut slots_for = self.plan.borrow().callback.concurrency;
        let mut slots = Arc::new(Semaphore::new(slots_for as usize));
        let mut retry = RESERVE_RETRY_FIRST;
        loop {
            let plan = self.plan.borrow_and_update().clone();
            if plan.callback.concurrency != slots_for {
                // Deliveries in flight keep their permits of the old semaphore.
                slots_for = plan.callback.concurrency;
                slots = Arc::new(Semaphore::new(slots_for as usize));
            }
            let first = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("never closed"),
                Some(jobs) = self.handoffs.recv() => {
                    telling.handed += jobs.len() as u32;
                    self.start_handed(jobs, &plan, &limiter, &slots).await;
                    continue;
                }
                _ = self.stop.cancelled() => return announced,
                _ = self.plan.changed() => continue,
            };
            let want = (1 + slots.available_permits()).min(100) as u32;
            let admitted = match limiter.admit(&plan.callback, want).await {
                Ok(Admit::Start(n)) => n,
                Ok(Admit::Wait(wait, reason)) => {
                    drop(first);
                    metrics::counter!("dq_consumer_limit_waits_total", "topic" => self.topic.clone(), "reason" => reason)
                        .increment(1);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.plan.changed() => {}
                        _ = self.stop.cancelled() => return announced,
                    }
                    continue;
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic, cause = %e.chain(), retry_ms = retry.as_millis() as u64, "cannot read the topic's limits");
                    drop(first);
                    if !self.back_off(&mut retry).await {
                        return announced;
                    }
                    continue;
                }
            };
            // In line before looking, so a wake-up sent while this reserve runs is not missed.
            let mut waiter = self.shared.queue.reservations().ready_index().waiter(&topics, 0);
            let least_ttr = plan.callback.timeout_ms + TTR_MARGIN_MS;
            let options = ReserveOptions {
                best_first: false,
                least_ttr_ms: Some(least_ttr),
                waits: true,
            };
            let reserved = self
                .shared
                .queue
                .reservations()
                .reserve_with(&topics, admitted as usize, options)
                .await;
            let started = reserved.as_ref().map_or(0, |jobs| jobs.len() as u32);
            limiter.started(&plan.callback, started, admitted).await;
            let jobs = match reserved {
                Ok(jobs) => {
                    retry = RESERVE_RETRY_FIRST;
                    jobs
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic, cause = %e.chain(), retry_ms = retry.as_millis() as u64, "reserve failed");
                    drop(first);
                    if !self.back_off(&mut retry).await {
                        return announced;
                    }
                    continue;
                }
            };
            if jobs.is_empty() {
                drop(first);
                // Timers hand due jobs straight to a waiting worker, except for a topic with a rate
                // limit (a job handed must be able to start, and tokens are not held while waiting).
                let tells = plan.callback.rate_per_s.is_none();
                let woke = waiter.wait();
                tokio::pin!(woke);
                loop {
                    if tells && telling.next_at().is_none_or(|at| Instant::now() >= at) {
                        let free = admitted.min(slots.available_permits() as u32);
                        self.announce(free, least_ttr).await;
                        announced = true;
                        telling.told(free);
                    }
                    tokio::select! {
                        _ = &mut woke => break,
                        Some(jobs) = self.handoffs.recv() => {
                            telling.handed += jobs.len() as u32;
                            self.start_handed(jobs, &plan, &limiter, &slots).await;
                            break;
                        }
                        _ = tokio::time::sleep_until(telling.next_at().unwrap_or_else(Instant::now)), if tells => {}
                        _ = self.plan.changed() => break,
                        _ = self.stop.cancelled() => return announced,
                    }
                }
                continue;
            }
            let mut permits = vec![first];
            while permits.len() < jobs.len() {
                // Only this loop takes permits, so the ones counted above are still there.
                permits.push(slots.clone().try_acquire_owned().expect("counted free slots"));
            }
            for (job, permit) in jobs.into_iter().zip(permits) {
                self.start(&plan, &limiter, job, permit);
            }
        }
    }

    /// Starts the delivery of a reserved (or handed) job on the process's tracker, holding `permit`.
    fn start(&self, plan: &Arc<Plan>, limiter: &Arc<Limiter>, job: Reservation, permit: OwnedSemaphorePermit) {
        let (shared, plan, limiter) = (self.shared.clone(), plan.clone(), limiter.clone());
        self.shared
            .tracker
            .spawn(deliver_one(shared, plan, limiter, job, permit));
    }

    /// Waits `retry` after a failed call to Redis, then doubles it up to [`RESERVE_RETRY_MAX`] (soon
    /// after a short outage, seldom during a long one). False when the worker was stopped meanwhile.
    async fn back_off(&self, retry: &mut Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(*retry) => {}
            _ = self.stop.cancelled() => return false,
        }
        *retry = (*retry * 2).min(RESERVE_RETRY_MAX);
        true
    }
}

/// The wait after a failed reserve, doubled after each further failure up to [`RESERVE_RETRY_MAX`]:
/// a worker is back within about 100 ms of Redis's return after a short outage, and within about half
/// a second after a long one.
const RESERVE_RETRY_FIRST: Duration = Duration::from_millis(100);
const RESERVE_RETRY_MAX: Duration = Duration::from_millis(400);

/// Waits before sending an ack or nack again that got no certain answer: a redelivery avoided is one
/// duplicate less for the callback.
/// Short at first and never longer than 400 ms, so an ack lands soon after Redis answers again; about
/// 1.5 s in all, the length of a Redis restart or failover.
const SETTLE_RETRY_WAITS_MS: [u64; 6] = [50, 100, 200, 400, 400, 400];

/// Acks or nacks a delivered job by its outcome. One that failed on Redis (not reached, refused for now,
/// no answer in time) is sent again with the same receipt; a stale receipt after such a retry means the
/// earlier attempt took effect. The job is never lost either way: unsettled, it comes back after its TTR.
/// `pause_key`: the job's flow key gets no deliveries for this long (its callback's `Retry-After`).
async fn settle(
    shared: &Shared,
    plan: &Plan,
    job: &Reservation,
    posted: &Posted,
    pause_key: Option<Duration>,
    children: &[dq_core::NewJob],
) -> dq_core::Result<()> {
    let topic = &job.topic;
    let outcome = &posted.outcome;
    // The attempt, for the job's history.
    let note = dq_core::attempt::Note {
        outcome: Some(match outcome {
            Outcome::Delivered => dq_core::attempt::Outcome::Acked,
            Outcome::Failed { kind: "timeout", .. } => dq_core::attempt::Outcome::TimedOut,
            Outcome::Failed { .. } => dq_core::attempt::Outcome::Failed,
        }),
        started_at: Some(posted.started_at),
        status: posted.status,
        answer: posted.answer.clone(),
        consumer: Some(shared.consumer_name.clone()),
    };
    let mut waits = SETTLE_RETRY_WAITS_MS.iter();
    let mut retried = false;
    loop {
        let r = match outcome {
            Outcome::Delivered => {
                let success = dq_core::reservations::Success {
                    note: note.clone(),
                    push: children,
                    hook_answer: posted.hook_answer.clone(),
                };
                shared
                    .queue
                    .reservations()
                    .ack_with(&job.id, &job.receipt, &success)
                    .await
                    .map(drop)
            }
            Outcome::Failed { reason, .. } => {
                let failure = dq_core::reservations::Failure {
                    delay_ms: None,
                    error: Some(reason),
                    backoff_ms: Some(plan.config.backoff(&shared.backoff_default)),
                    pause_ms: pause_key.map_or(0, |w| w.as_millis().max(1) as u64),
                    note: note.clone(),
                };
                match shared
                    .queue
                    .reservations()
                    .nack_with(&job.id, &job.receipt, &failure)
                    .await
                {
                    Ok((dq_core::State::Dead, _)) => {
                        tracing::warn!(id = %job.id, %topic, attempts = job.attempt, %reason, "job is dead");
                        Ok(())
                    }
                    Ok(_) => {
                        tracing::debug!(id = %job.id, %topic, attempt = job.attempt, %reason, "delivery failed; retrying");
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match r {
            Err(dq_core::Error::StaleReceipt) if retried => {
                tracing::debug!(id = %job.id, %topic, "settled by an earlier attempt whose answer was lost");
                return Ok(());
            }
            Err(e) if e.did_not_run() || matches!(e, dq_core::Error::Indeterminate { .. }) => match waits.next() {
                Some(ms) => {
                    metrics::counter!("dq_consumer_settle_retries_total", "topic" => topic.clone()).increment(1);
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                }
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// Delivers one reserved job and settles it: ack, nack (backoff or dead), or, when the drain's grace
/// period ends first, release for immediate redelivery.
async fn deliver_one(
    shared: Arc<Shared>,
    plan: Arc<Plan>,
    limiter: Arc<Limiter>,
    job: Reservation,
    _permit: OwnedSemaphorePermit,
) {
    let topic = job.topic.clone();
    let in_flight = metrics::gauge!("dq_consumer_in_flight", "topic" => topic.clone());
    in_flight.increment(1.0);
    if job.attempt == 1 {
        let now = dq_core::clock::unix_ms();
        metrics::histogram!("dq_delivery_lateness_seconds", "topic" => topic.clone())
            .record((now - job.run_at).max(0) as f64 / 1000.0);
    }
    let posted = tokio::select! {
        r = deliver::post(&shared.egress, &job, &plan.url, &plan.callback, plan.condition.as_ref()) => Some(r),
        _ = shared.release_now.cancelled() => None,
    };
    in_flight.decrement(1.0);
    limiter.finished();
    let Some(posted) = posted else {
        match shared.queue.reservations().release(&job.id, &job.receipt).await {
            Ok(()) => tracing::info!(id = %job.id, %topic, "released unfinished"),
            Err(e) => {
                tracing::warn!(id = %job.id, %topic, cause = %e.chain(), "cannot release; it returns after its TTR")
            }
        }
        metrics::counter!("dq_deliveries_total", "topic" => topic, "outcome" => "handed_back").increment(1);
        return;
    };
    // A job with a flow key pauses its key only (with its nack, below); any other, its topic.
    let pause_key = match (posted.retry_after, &job.flow_key) {
        (Some(wait), Some(key)) => {
            tracing::info!(%topic, flow_key = %key, pause_ms = wait.as_millis() as u64, "the callback asked for a pause of the flow key");
            Some(wait)
        }
        (Some(wait), None) => {
            limiter.pause(&plan.callback, wait).await;
            None
        }
        (None, _) => None,
    };
    // The jobs the answer pushes, stored with the ack; refused, they fail the delivery.
    let mut posted = posted;
    let pushes = std::mem::take(&mut posted.pushes);
    let children = match answer::checked(
        shared.queue.producer(),
        &plan,
        &shared.topics.snapshot(),
        &job.id,
        posted.trace.as_ref(),
        &pushes,
    ) {
        Ok(children) => children,
        Err(reason) => {
            posted.outcome = Outcome::Failed {
                kind: "push_refused",
                reason,
            };
            Vec::new()
        }
    };
    // The outcome is final now: the attempt's span says it.
    posted.end_span();
    metrics::histogram!("dq_callback_duration_seconds", "topic" => topic.clone()).record(posted.took.as_secs_f64());
    metrics::counter!("dq_deliveries_total", "topic" => topic.clone(), "outcome" => posted.outcome.label())
        .increment(1);
    let settled = settle(&shared, &plan, &job, &posted, pause_key, &children).await;
    if let Err(e) = settled {
        // Most likely the reservation expired and the job went to another delivery: it is not lost.
        tracing::warn!(id = %job.id, %topic, cause = %e.chain(), "cannot settle the delivery");
    }
}
