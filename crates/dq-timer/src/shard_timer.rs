//! One timer's work on one shard: heartbeat and bucket share, promotion of due jobs, TTR expiry.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dq_core::config::TimerSettings;
use dq_core::queue::{Promoted, Queue};
use dq_core::wake::Wake;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::RedisClock;

/// Serves this timer's share of one shard.
///
/// It never ticks for promotion: it sleeps until the earliest due time among its buckets, or until a
/// script says a bucket's earliest due time moved earlier, or until its next heartbeat. The holder of
/// bucket 0 also ends the shard's expired reservations.
pub struct ShardTimer {
    /// The queue (for the scripts).
    queue: Queue,
    /// Which shard.
    shard: usize,
    /// This timer's id in the heartbeat set and on its leases.
    id: String,
    /// Batch size, lease and heartbeat periods.
    settings: TimerSettings,
    /// Wake-ups from the shard's timer channel.
    wakes: mpsc::Receiver<Wake>,
    /// Set when a wake-up could not be queued: every bucket must be looked at again.
    resync: Arc<AtomicBool>,
    /// Buckets held, each with its earliest due time (`None`: unknown, look now).
    owned: BTreeMap<u32, Option<i64>>,
    /// Earliest reservation deadline, when this timer holds bucket 0.
    next_deadline: Option<i64>,
    /// Redis's clock.
    clock: RedisClock,
}

impl ShardTimer {
    /// A timer for shard `shard`, fed wake-ups by `wakes`.
    pub fn new(
        queue: Queue,
        shard: usize,
        id: String,
        settings: TimerSettings,
        wakes: mpsc::Receiver<Wake>,
        resync: Arc<AtomicBool>,
    ) -> Self {
        ShardTimer {
            queue,
            shard,
            id,
            settings,
            wakes,
            resync,
            owned: BTreeMap::new(),
            next_deadline: None,
            clock: RedisClock::default(),
        }
    }

    /// Runs until `shutdown`; then finishes the batch in hand, gives up its buckets so the other timers
    /// take them at once, and returns.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let renew = Duration::from_millis(self.settings.renew_ms);
        let mut heartbeat_at = Instant::now();
        let label = self.shard.to_string();
        while !shutdown.is_cancelled() {
            if self.resync.swap(false, Ordering::Relaxed) {
                self.on_wake(Wake::Subscribed { shard: self.shard });
            }
            if Instant::now() >= heartbeat_at {
                self.heartbeat(&label).await;
                heartbeat_at = Instant::now() + renew;
                // New reservations do not publish; look for expired ones on every heartbeat.
                self.next_deadline = None;
            }
            let failed = self.promote_due().await | self.expire_due().await;
            let mut wake_at = heartbeat_at;
            if !failed {
                let next = self.owned.values().map(|d| d.unwrap_or(i64::MIN)).min();
                if let Some(due) = next.filter(|d| *d < i64::MAX) {
                    wake_at = wake_at.min(self.clock.instant_of(due));
                    metrics::gauge!("dq_timer_next_due_timestamp_seconds", "shard" => label.clone())
                        .set(due as f64 / 1000.0);
                }
                if let Some(d) = self.next_deadline.filter(|_| self.owned.contains_key(&0)) {
                    wake_at = wake_at.min(self.clock.instant_of(d));
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
        match self
            .queue
            .balance(
                &self.queue.shards().all()[self.shard],
                &self.id,
                self.settings.lease_ms,
                true,
            )
            .await
        {
            Ok(_) => tracing::info!(shard = self.shard, "released buckets"),
            Err(e) => {
                tracing::warn!(shard = self.shard, cause = %e, "cannot release buckets; they lapse after timer.lease_ms")
            }
        }
        metrics::gauge!("dq_timer_buckets_owned", "shard" => label).set(0.0);
    }

    async fn heartbeat(&mut self, label: &str) {
        let shard = &self.queue.shards().all()[self.shard];
        match self.queue.balance(shard, &self.id, self.settings.lease_ms, false).await {
            Ok(b) => {
                self.clock.observe(b.now);
                let before = self.owned.len();
                self.owned.retain(|k, _| b.buckets.contains(k));
                for bucket in &b.buckets {
                    self.owned.entry(*bucket).or_insert(None);
                }
                if self.owned.len() != before {
                    tracing::info!(shard = self.shard, buckets = ?b.buckets, timers = b.timers, "bucket share changed");
                }
                metrics::gauge!("dq_timer_buckets_owned", "shard" => label.to_string()).set(self.owned.len() as f64);
                metrics::gauge!("dq_timer_live_timers", "shard" => label.to_string()).set(b.timers as f64);
            }
            Err(e) => {
                // Without a heartbeat our leases may lapse; promotion stays exact either way, so keep
                // going and let the next heartbeat sort the share out.
                tracing::warn!(shard = self.shard, cause = %e, "heartbeat failed");
            }
        }
    }

    /// Promotes one batch from every owned bucket that is due. A bucket with more due jobs than a batch
    /// stays due, so the loop comes straight back after its heartbeat check: a backlog never starves
    /// the heartbeat (and with it the leases) nor the other buckets. Returns whether Redis failed.
    async fn promote_due(&mut self) -> bool {
        let shard = &self.queue.shards().all()[self.shard];
        let now = self.clock.now();
        let due: Vec<u32> = self
            .owned
            .iter()
            .filter(|(_, d)| d.is_none_or(|d| d <= now))
            .map(|(b, _)| *b)
            .collect();
        for bucket in due {
            match self.queue.promote(shard, bucket, self.settings.batch_size).await {
                Ok(p) => {
                    self.clock.observe(p.now);
                    record(&p);
                    self.owned.insert(bucket, Some(p.next_due.unwrap_or(i64::MAX)));
                }
                Err(e) => {
                    tracing::warn!(shard = self.shard, bucket, cause = %e, "promotion failed; retrying");
                    self.owned.insert(bucket, Some(self.clock.now() + 500));
                    return true;
                }
            }
        }
        false
    }

    /// Ends expired reservations when this timer holds bucket 0. Returns whether Redis failed.
    async fn expire_due(&mut self) -> bool {
        if !self.owned.contains_key(&0) || self.next_deadline.is_some_and(|d| d > self.clock.now()) {
            return false;
        }
        let shard = &self.queue.shards().all()[self.shard];
        match self.queue.expire(shard, self.settings.batch_size).await {
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
                self.next_deadline = Some(x.next_deadline.unwrap_or(i64::MAX));
                false
            }
            Err(e) => {
                tracing::warn!(shard = self.shard, cause = %e, "expiry failed; retrying");
                self.next_deadline = Some(self.clock.now() + 500);
                true
            }
        }
    }

    fn on_wake(&mut self, w: Wake) {
        match w {
            Wake::Subscribed { .. } => {
                // Messages may have been lost while unsubscribed: look at every bucket.
                for due in self.owned.values_mut() {
                    *due = None;
                }
            }
            Wake::Message { payload, .. } => {
                let Some((key, due)) = payload.rsplit_once(' ') else {
                    return;
                };
                let (Some(bucket), Ok(due)) = (key.rsplit(':').next().and_then(|b| b.parse().ok()), due.parse::<i64>())
                else {
                    return;
                };
                if let Some(known) = self.owned.get_mut(&bucket) {
                    *known = Some(known.map_or(due, |k| k.min(due)));
                }
            }
        }
    }
}

fn record(p: &Promoted) {
    if p.moved == 0 {
        return;
    }
    metrics::counter!("dq_jobs_promoted_total").increment(p.moved as u64);
    let h = metrics::histogram!("dq_promotion_lateness_seconds");
    for l in &p.lateness_ms {
        h.record(*l as f64 / 1000.0);
    }
}
