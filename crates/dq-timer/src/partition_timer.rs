//! One timer's work: heartbeat and partition share, promotion of due jobs, TTR expiry.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dq_core::Queue;
use dq_core::config::TimerSettings;
use dq_core::reservations::Waiting;
use dq_core::timer::Promoted;
use dq_core::wake::Wake;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::RedisClock;
use crate::waiting::{HandoffsRefused, WaitingWorkers};

/// Calls out at once while promoting or expiring: they pipeline on the connection (and run side by side
/// on a cluster's primaries) without holding one partition's batch behind another's.
const CALLS_IN_FLIGHT: usize = 16;

/// Groups the expiry sweep is split into (see `schedule_sweep`).
const SWEEP_GROUPS: usize = 16;

/// Heartbeats between two expiry sweeps of every held partition (20 × 250 ms = 5 s by default).
const SWEEP_EVERY_HEARTBEATS: u64 = 20;

/// What this timer knows of a partition it holds.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// Earliest due time in the delay set (`None`: unknown, look now).
    next_due: Option<i64>,
    /// Earliest reservation deadline (`None`: unknown, look now).
    next_deadline: Option<i64>,
    /// When expiry last ran here (Redis ms): it runs at most once per `renew_ms` per partition (unless a
    /// full batch left more behind), however many deadlines are announced.
    expired_at: i64,
    /// Calls on this partition that failed in a row: the next is tried after [`retry_after`] of them.
    failures: u32,
}

/// How long after its `failures`-th failure in a row a partition is tried again, in ms: 50, 100, 200,
/// then 400 ms. Short at first, so a timer is back within about a tenth of a second of Redis answering
/// again (a restart, a failover, a stall past the answer timeout); longer after that, so a Redis that
/// stays away is not asked in a tight loop (each call already waits up to `redis.response_timeout_ms`,
/// or fails at once when the connection is refused).
fn retry_after(failures: u32) -> i64 {
    50 << failures.clamp(1, 4).saturating_sub(1)
}

/// Serves this timer's share of the partitions.
///
/// It never ticks for promotion: it sleeps until the earliest due time among its partitions, or until a
/// script says a partition's earliest due time moved earlier, or until its next heartbeat.
pub struct PartitionTimer {
    /// The queue (for the scripts).
    queue: Queue,
    /// This timer's id in the heartbeat set and on its leases.
    id: String,
    /// Batch size, lease and heartbeat periods.
    settings: TimerSettings,
    /// Wake-ups from the timer channels.
    wakes: mpsc::Receiver<Wake>,
    /// Set when a wake-up could not be queued: every partition must be looked at again.
    resync: Arc<AtomicBool>,
    /// Partitions held.
    held: BTreeMap<u16, Held>,
    /// Redis's clock.
    clock: RedisClock,
    /// Whether this timer holds partition 0, and with it the firing of schedules (see
    /// [`crate::schedules`]).
    schedule_lead: watch::Sender<bool>,
    /// When a heartbeat last succeeded: past `lease_ms` without one, the leases may have gone to others.
    last_beat: Instant,
    /// dq-consumer workers waiting for jobs: promotion hands them their topics' due jobs.
    waiting: WaitingWorkers,
    /// Until when promotion hands nothing off, after Redis refused a hand-off.
    handoffs_refused: HandoffsRefused,
}

impl PartitionTimer {
    /// A timer fed wake-ups by `wakes`.
    pub fn new(
        queue: Queue,
        id: String,
        settings: TimerSettings,
        wakes: mpsc::Receiver<Wake>,
        resync: Arc<AtomicBool>,
    ) -> Self {
        PartitionTimer {
            queue,
            id,
            settings,
            wakes,
            resync,
            held: BTreeMap::new(),
            clock: RedisClock::default(),
            schedule_lead: watch::Sender::new(false),
            last_beat: Instant::now(),
            waiting: WaitingWorkers::default(),
            handoffs_refused: HandoffsRefused::default(),
        }
    }

    /// Follows whether this timer fires the schedules: it does while it holds partition 0's lease.
    pub fn schedule_lead(&self) -> watch::Receiver<bool> {
        self.schedule_lead.subscribe()
    }

    /// Runs until `shutdown`; then finishes the batch in hand, gives up its partitions so the other
    /// timers take them at once, and returns.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let renew = Duration::from_millis(self.settings.renew_ms);
        let mut heartbeat_at = Instant::now();
        let mut beats: u64 = 0;
        // Served from the start, so a timer that hands nothing shows 0 rather than nothing.
        metrics::counter!("dq_jobs_handed_off_total").increment(0);
        while !shutdown.is_cancelled() {
            if self.resync.swap(false, Ordering::Relaxed) {
                self.on_wake(Wake::Subscribed);
            }
            if Instant::now() >= heartbeat_at {
                self.heartbeat().await;
                heartbeat_at = Instant::now() + renew;
                beats += 1;
                if beats.is_multiple_of(SWEEP_EVERY_HEARTBEATS) {
                    self.schedule_sweep();
                }
            }
            let failed = self.promote_due().await | self.expire_due().await;
            let mut wake_at = heartbeat_at;
            if !failed {
                let next = self
                    .held
                    .values()
                    .flat_map(|h| [h.next_due, h.next_deadline])
                    .map(|d| d.unwrap_or(i64::MIN))
                    .min();
                if let Some(due) = next.filter(|d| *d < i64::MAX) {
                    wake_at = wake_at.min(self.clock.instant_of(due));
                }
                if let Some(due) = self
                    .held
                    .values()
                    .filter_map(|h| h.next_due)
                    .filter(|d| *d < i64::MAX)
                    .min()
                {
                    metrics::gauge!("dq_timer_next_due_timestamp_seconds").set(due as f64 / 1000.0);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(wake_at) => {}
                Some(w) = self.wakes.recv() => {
                    self.on_wake(w);
                    while let Ok(w) = self.wakes.try_recv() {
                        self.on_wake(w);
                    }
                }
                _ = shutdown.cancelled() => {}
            }
        }
        self.schedule_lead.send_replace(false);
        match self.queue.timer().balance(&self.id, self.settings.lease_ms, true).await {
            Ok(_) => tracing::info!("released partitions"),
            Err(e) => tracing::warn!(cause = %e.chain(), "cannot release partitions; they lapse after timer.lease_ms"),
        }
        metrics::gauge!("dq_timer_partitions_owned").set(0.0);
    }

    async fn heartbeat(&mut self) {
        match self
            .queue
            .timer()
            .balance(&self.id, self.settings.lease_ms, false)
            .await
        {
            Ok(b) => {
                self.clock.observe(b.now);
                let before = self.held.len();
                self.held.retain(|k, _| b.partitions.contains(k));
                for p in &b.partitions {
                    self.held.entry(*p).or_default();
                }
                if self.held.len() != before {
                    tracing::info!(
                        partitions = self.held.len(),
                        timers = b.timers,
                        "partition share changed"
                    );
                }
                metrics::gauge!("dq_timer_partitions_owned").set(self.held.len() as f64);
                self.last_beat = Instant::now();
                let leads = self.held.contains_key(&0);
                self.schedule_lead
                    .send_if_modified(|lead| std::mem::replace(lead, leads) != leads);
                metrics::gauge!("dq_timer_live_timers").set(b.timers as f64);
            }
            Err(e) => {
                // Without a heartbeat our leases may lapse; promotion stays exact either way, so keep
                // going and let the next heartbeat sort the share out.
                tracing::warn!(cause = %e.chain(), "heartbeat failed");
                if self.last_beat.elapsed() > Duration::from_millis(self.settings.lease_ms) {
                    // Another timer may hold partition 0 by now.
                    self.schedule_lead
                        .send_if_modified(|lead| std::mem::replace(lead, false));
                }
            }
        }
    }

    /// Promotes one batch in every held partition that is due. A partition with more due jobs than a
    /// batch stays due, so the loop comes straight back after its heartbeat check: a backlog never starves
    /// the heartbeat (and with it the leases) nor the other partitions. Returns whether Redis failed.
    async fn promote_due(&mut self) -> bool {
        let (queue, batch) = (&self.queue, self.settings.batch_size);
        let due = self.due(|h| h.next_due);
        if due.is_empty() {
            return false;
        }
        let waiting: Vec<Waiting> = if self.handoffs_refused.now() {
            Vec::new()
        } else {
            self.waiting.current()
        };
        // The partitions due now share calls, one per node (promote_many shares the workers' slots out).
        let mut results = queue.timer().promote_many(&due, batch, &waiting).await;
        // A hand-off Redis refused (an ACL user without the hand-off channels may not publish there) must
        // not hold promotion up: promote without, and stop handing off for a while.
        if !waiting.is_empty() {
            let refused = &self.handoffs_refused;
            let again: Vec<u16> = results
                .iter()
                .filter(|(_, r)| matches!(r, Err(dq_core::Error::Redis { .. })))
                .map(|(p, _)| *p)
                .collect();
            for (p, plain) in each(again, |p| queue.timer().promote(p, batch)).await {
                if let Some(slot) = results.iter_mut().find(|(q, _)| *q == p) {
                    if let (Err(e), true) = (&slot.1, plain.is_ok()) {
                        refused.refuse(e);
                    }
                    slot.1 = plain;
                }
            }
        }
        let mut failed = false;
        for (p, r) in results {
            match r {
                Ok(x) => {
                    self.clock.observe(x.now);
                    record(&x);
                    self.waiting.handed(&waiting, &x.handed);
                    if let Some(h) = self.held.get_mut(&p) {
                        h.next_due = Some(x.next_due.unwrap_or(i64::MAX));
                        h.failures = 0;
                    }
                }
                Err(e) => {
                    tracing::warn!(partition = p, cause = %e.chain(), "promotion failed; retrying");
                    let now = self.clock.now();
                    if let Some(h) = self.held.get_mut(&p) {
                        h.failures += 1;
                        h.next_due = Some(now + retry_after(h.failures));
                    }
                    failed = true;
                }
            }
        }
        failed
    }

    /// A safety net under the deadline wake-ups (reserve and touch publish a deadline earlier than the
    /// earliest known): every held partition is looked at for expired reservations once per
    /// `SWEEP_EVERY_HEARTBEATS` heartbeats, spread over a heartbeat period in `SWEEP_GROUPS` groups rather
    /// than all at once, so the sweep never holds promotions (or Redis) for the time of hundreds of calls.
    fn schedule_sweep(&mut self) {
        let (now, n) = (self.clock.now(), self.held.len().max(1));
        let renew = self.settings.renew_ms as i64;
        for (i, h) in self.held.values_mut().enumerate() {
            let at = now + (i * SWEEP_GROUPS / n) as i64 * renew / SWEEP_GROUPS as i64;
            h.next_deadline = Some(h.next_deadline.map_or(at, |d| d.min(at)));
        }
    }

    /// Ends expired reservations in every held partition whose earliest deadline has passed. Returns
    /// whether Redis failed.
    async fn expire_due(&mut self) -> bool {
        let (queue, batch) = (&self.queue, self.settings.batch_size);
        let renew = self.settings.renew_ms as i64;
        let results = each(self.due(|h| h.next_deadline), |p| queue.timer().expire(p, batch)).await;
        let mut failed = false;
        for (p, r) in results {
            match r {
                Ok(x) => {
                    self.clock.observe(x.now);
                    if x.to_ready > 0 {
                        metrics::counter!("dq_jobs_expired_total", "outcome" => "ready").increment(x.to_ready as u64);
                    }
                    if x.to_dead > 0 {
                        metrics::counter!("dq_jobs_expired_total", "outcome" => "dead").increment(x.to_dead as u64);
                        metrics::counter!("dq_jobs_dead_total").increment(x.to_dead as u64);
                    }
                    // A full batch leaves expired ones behind: their deadline has passed, so come back at once.
                    if let Some(h) = self.held.get_mut(&p) {
                        // Soonest again: at once after a full batch, else one heartbeat period on.
                        let next = x.next_deadline.unwrap_or(i64::MAX);
                        h.expired_at = x.now;
                        h.failures = 0;
                        h.next_deadline = Some(if next <= x.now { next } else { next.max(x.now + renew) });
                    }
                }
                Err(e) => {
                    tracing::warn!(partition = p, cause = %e.chain(), "expiry failed; retrying");
                    let now = self.clock.now();
                    if let Some(h) = self.held.get_mut(&p) {
                        h.failures += 1;
                        h.next_deadline = Some(now + retry_after(h.failures));
                    }
                    failed = true;
                }
            }
        }
        failed
    }

    /// The held partitions whose known time (`of`: due time or deadline) has come or is unknown.
    fn due(&self, of: impl Fn(&Held) -> Option<i64>) -> Vec<u16> {
        let now = self.clock.now();
        self.held
            .iter()
            .filter(|(_, h)| of(h).is_none_or(|d| d <= now))
            .map(|(p, _)| *p)
            .collect()
    }

    fn on_wake(&mut self, w: Wake) {
        match w {
            Wake::Subscribed => {
                // Messages may have been lost while unsubscribed: look at every partition. Waiting
                // workers say so again within a second.
                self.waiting.clear();
                for h in self.held.values_mut() {
                    h.next_due = None;
                    h.next_deadline = None;
                }
            }
            // `<delay set key> <due ms>` from push, nack and reschedule; `<reserved set key> <deadline ms>`
            // from reserve and touch.
            // A dq-consumer worker waits for jobs (on partition 0's channel, which every timer hears).
            Wake::Message { payload, .. } if payload.starts_with(b"waiting ") => {
                if let Some(w) = Waiting::parse(&String::from_utf8_lossy(&payload)) {
                    self.waiting.heard(w);
                }
            }
            Wake::Message { partition, payload } => {
                let payload = String::from_utf8_lossy(&payload);
                let Some((key, at)) = payload.rsplit_once(' ') else {
                    return;
                };
                let (Ok(at), Some(h)) = (at.parse::<i64>(), self.held.get_mut(&partition)) else {
                    return;
                };
                let (known, at) = if key.ends_with(":reserved") {
                    (
                        &mut h.next_deadline,
                        at.max(h.expired_at + self.settings.renew_ms as i64),
                    )
                } else {
                    (&mut h.next_due, at)
                };
                *known = Some(known.map_or(at, |k| k.min(at)));
            }
        }
    }
}

fn record(p: &Promoted) {
    if p.moved == 0 {
        return;
    }
    metrics::counter!("dq_jobs_promoted_total").increment(p.moved as u64);
    let handed: u32 = p.handed.iter().sum();
    if handed > 0 {
        metrics::counter!("dq_jobs_handed_off_total").increment(u64::from(handed));
    }
    let h = metrics::histogram!("dq_promotion_lateness_seconds");
    for l in &p.lateness_ms {
        h.record(*l as f64 / 1000.0);
    }
}

/// Runs `call` for each partition, `CALLS_IN_FLIGHT` at a time; answers in completion order.
async fn each<T, F, Fut>(partitions: Vec<u16>, call: F) -> Vec<(u16, T)>
where
    F: Fn(u16) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    futures_util::stream::iter(partitions)
        .map(|p| {
            let fut = call(p);
            async move { (p, fut.await) }
        })
        .buffer_unordered(CALLS_IN_FLIGHT)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::retry_after;

    #[test]
    fn a_failed_partition_is_tried_again_soon_then_less_often() {
        let waits: Vec<i64> = (1..=6).map(retry_after).collect();
        assert_eq!(waits, [50, 100, 200, 400, 400, 400]);
    }
}
