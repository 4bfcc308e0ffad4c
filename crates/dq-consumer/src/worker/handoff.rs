//! Hand-offs on dq-consumer's side (see `dq_core::reservations::handoff`): a waiting worker tells the timers
//! so, and starts the jobs they hand it as it starts the jobs it reserves.

use std::collections::VecDeque;
use std::sync::Arc;

use dq_core::Reservation;
use dq_core::reservations::Waiting;
use tokio::sync::Semaphore;

use super::{Shared, TopicWorker};
use crate::limiter::{Admit, Limiter};
use crate::plan::Plan;

impl Shared {
    /// Gives jobs a timer handed to this process to their topic's worker; hands them back to the ready
    /// queue when the topic has none (it was paused or lost its callback, or the process drains).
    pub fn handed(self: &Arc<Self>, jobs: Vec<Reservation>) {
        let Some(topic) = jobs.first().map(|j| j.topic.clone()) else {
            return;
        };
        let left = {
            let inboxes = self.handoffs.lock().expect("never poisoned");
            match inboxes.get(&topic) {
                Some(inbox) => inbox.send(jobs).err().map(|e| e.0),
                None => Some(jobs),
            }
        };
        if let Some(jobs) = left {
            self.tracker.spawn(self.clone().release_all(jobs));
        }
    }

    /// Hands reserved jobs back to the ready queue at once, for another delivery.
    pub(super) async fn release_all(self: Arc<Self>, jobs: impl IntoIterator<Item = Reservation>) {
        for job in jobs {
            match self.queue.reservations().release(&job.id, &job.receipt).await {
                Ok(()) => tracing::debug!(id = %job.id, topic = %job.topic, "released a job handed to this process"),
                Err(e) => {
                    tracing::debug!(id = %job.id, cause = %e.chain(), "cannot release a handed job; it returns after its reservation")
                }
            }
        }
    }
}

/// A handed job is delivered only while its reservation outlasts the callback's timeout by this much;
/// later it is handed back, so no delivery runs past its reservation's end.
const HANDED_MARGIN_MS: i64 = 1000;

impl TopicWorker {
    /// Tells the timers this worker waits with `slots` free (0: no longer waits).
    pub(super) async fn announce(&self, slots: u32, least_ttr_ms: u64) {
        let w = Waiting {
            topic: self.topic.clone(),
            consumer: self.shared.process_id.clone(),
            slots,
            least_ttr_ms,
        };
        tracing::debug!(topic = %self.topic, slots, "telling the timers this worker waits");
        if let Err(e) = self.shared.queue.reservations().announce_waiting(&w).await {
            tracing::debug!(topic = %self.topic, cause = %e.chain(), "cannot tell the timers this worker waits");
        }
    }

    /// Starts deliveries of jobs a timer handed to this worker, within the topic's limits and this
    /// worker's slots as a reserve would; hands back the ones it cannot start before their reservation
    /// runs short, and those left when it is stopped.
    pub(super) async fn start_handed(
        &self,
        jobs: Vec<Reservation>,
        plan: &Arc<Plan>,
        limiter: &Arc<Limiter>,
        slots: &Arc<Semaphore>,
    ) {
        self.shared.queue.reservations().count_reserved(&jobs);
        metrics::counter!("dq_consumer_handed_total", "topic" => self.topic.clone()).increment(jobs.len() as u64);
        let mut left: VecDeque<Reservation> = jobs.into();
        let cb = &plan.callback;
        loop {
            let now = dq_core::clock::unix_ms();
            let (fresh, late): (VecDeque<_>, VecDeque<_>) = left
                .into_iter()
                .partition(|j| j.deadline - now > cb.timeout_ms as i64 + HANDED_MARGIN_MS);
            left = fresh;
            if !late.is_empty() {
                self.shared.clone().release_all(late).await;
            }
            if left.is_empty() {
                return;
            }
            let first = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("never closed"),
                _ = self.stop.cancelled() => break,
            };
            let mut permits = vec![first];
            while permits.len() < left.len() {
                match slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            match limiter.admit(cb, permits.len() as u32).await {
                Ok(Admit::Start(n)) => {
                    permits.truncate(n as usize);
                    limiter.started(cb, n, n).await;
                    for permit in permits {
                        let job = left.pop_front().expect("a permit per job at most");
                        self.start(plan, limiter, job, permit);
                    }
                }
                Ok(Admit::Wait(wait, reason)) => {
                    drop(permits);
                    metrics::counter!("dq_consumer_limit_waits_total", "topic" => self.topic.clone(), "reason" => reason)
                        .increment(1);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.stop.cancelled() => break,
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic, cause = %e.chain(), "cannot read the topic's limits; handing back handed jobs");
                    break;
                }
            }
        }
        self.shared.clone().release_all(left).await;
    }
}
