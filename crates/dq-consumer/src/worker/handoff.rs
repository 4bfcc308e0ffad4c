//! Hand-offs on dq-consumer's side (see `dq_core::queue::handoff`): a waiting worker tells the timers
//! so, and starts the jobs they hand it as it starts the jobs it reserves.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use dq_core::Reservation;
use dq_core::queue::Waiting;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Plan, Shared, TopicWorker};
use crate::limiter::{Admit, Limiter};

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
            self.tracker.spawn(release_all(self.clone(), jobs));
        }
    }
}

/// Hands reserved jobs back to the ready queue at once, for another delivery.
pub(super) async fn release_all(shared: Arc<Shared>, jobs: impl IntoIterator<Item = Reservation>) {
    for job in jobs {
        match shared.queue.release(&job.id, &job.receipt).await {
            Ok(()) => tracing::debug!(id = %job.id, topic = %job.topic, "handed back a job handed to this process"),
            Err(e) => {
                tracing::debug!(id = %job.id, cause = %e.chain(), "cannot hand back a handed job; it returns after its reservation")
            }
        }
    }
}

/// How often a waiting worker tells the timers again that it waits (they forget it after
/// `dq_core::queue::handoff::WAITING_FOR_MS`).
const WAITING_EVERY: Duration = Duration::from_secs(1);

/// The least time between two such messages of a worker, which it sends sooner than [`WAITING_EVERY`]
/// once the timers handed it half the slots it told them of.
const WAITING_GAP: Duration = Duration::from_millis(10);

/// When a waiting worker tells the timers again. A timer takes every job it hands off the slots it was
/// told of, so a worker whose jobs end quickly tells again once half of them were handed (at most every
/// [`WAITING_GAP`]), and otherwise every [`WAITING_EVERY`]: the messages follow the flow of jobs, not
/// the number of times the worker goes idle.
#[derive(Debug, Default)]
pub(super) struct Telling {
    /// The slots last told.
    pub(super) told: u32,
    /// When.
    pub(super) at: Option<Instant>,
    /// Jobs handed to the worker since.
    pub(super) handed: u32,
}

impl Telling {
    /// When to tell next; `None`: now (never told).
    pub(super) fn next_at(&self) -> Option<Instant> {
        let at = self.at?;
        Some(if self.told > 0 && self.handed * 2 >= self.told {
            at + WAITING_GAP
        } else {
            at + WAITING_EVERY
        })
    }

    pub(super) fn told(&mut self, slots: u32) {
        *self = Telling {
            told: slots,
            at: Some(Instant::now()),
            handed: 0,
        };
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
        if let Err(e) = self.shared.queue.announce_waiting(&w).await {
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
        self.shared.queue.count_reserved(&jobs);
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
                release_all(self.shared.clone(), late).await;
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
        release_all(self.shared.clone(), left).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_worker_tells_again_soon_once_half_its_slots_were_handed() {
        let mut t = Telling::default();
        assert_eq!(t.next_at(), None, "never told: at once");
        t.told(64);
        let at = t.at.unwrap();
        t.handed = 31;
        assert_eq!(t.next_at(), Some(at + WAITING_EVERY));
        t.handed = 32;
        assert_eq!(t.next_at(), Some(at + WAITING_GAP));
        t.told(0);
        assert_eq!(t.next_at(), Some(t.at.unwrap() + WAITING_EVERY), "no slots: no hurry");
    }
}
