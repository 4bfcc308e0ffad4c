//! Adding what this process counted for the dashboard to Redis (see [`crate::activity`]); every process
//! does it, so it is the queue's own, not a role's.

use tokio_util::sync::CancellationToken;

use super::Queue;
use crate::activity::{Activity, FLUSH_EVERY, KEEP_SECS};
use crate::error::Result;
use crate::store::scripts::activity_add;

impl Queue {
    /// What this process counted and has not yet added to Redis.
    pub fn activity_counts(&self) -> &Activity {
        &self.activity
    }

    /// Adds what this process counted to the minute hashes: one script call, or none when nothing was
    /// counted. On failure the counts stay for the next flush (the newest day of them).
    pub async fn flush_activity(&self) -> Result<()> {
        let taken = self.activity.take();
        if taken.is_empty() {
            return Ok(());
        }
        let flush = Activity::fields(&taken);
        match activity_add::call(&self.store, &flush, KEEP_SECS).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let dropped = self.activity.restore(taken);
                if dropped > 0 {
                    tracing::warn!(minutes = dropped, "activity counts older than a day dropped unflushed");
                }
                Err(e)
            }
        }
    }

    /// Flushes this process's activity counts every [`FLUSH_EVERY`] until `stop`, then once more. Await
    /// the handle after the drain, so the last counts reach Redis.
    pub fn spawn_activity_flush(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let queue = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let stopping = tokio::select! {
                    _ = tick.tick() => false,
                    _ = stop.cancelled() => true,
                };
                if let Err(e) = queue.flush_activity().await {
                    tracing::warn!(cause = %e.chain(), "cannot add activity counts to Redis; keeping them for the next try");
                }
                if stopping {
                    return;
                }
            }
        })
    }
}
