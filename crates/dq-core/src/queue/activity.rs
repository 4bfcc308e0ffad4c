//! The dashboard's activity counts in Redis: adding what this process counted, and reading minutes
//! back (see [`crate::activity`]).

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use super::Queue;
use crate::activity::{Activity, FLUSH_EVERY, KEEP_SECS, MinuteActivity};
use crate::error::{Error, Result};
use crate::scripts;

/// The most minutes one read returns: the minute hashes are kept about a day.
pub const MAX_MINUTES: u32 = 24 * 60;

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
        let mut inv = scripts::ACTIVITY_ADD.prepare_invoke();
        inv.arg(KEEP_SECS);
        for (minute, fields) in &flush {
            inv.key(self.keys.activity(*minute)).arg(fields.len());
            for (field, n) in fields {
                inv.arg(field).arg(*n);
            }
        }
        match self.redis.invoke::<i64>(&inv).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let dropped = self.activity.restore(taken);
                if dropped > 0 {
                    tracing::warn!(minutes = dropped, "activity counts older than a day dropped unflushed");
                }
                Err(Error::from_redis(None, e))
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

    /// The activity of the last `minutes` minutes (the current one included, by this machine's clock),
    /// oldest first, one entry per minute (zeros where nothing was counted): one pipeline of HGETALL.
    pub async fn activity(&self, minutes: u32) -> Result<Vec<MinuteActivity>> {
        if minutes == 0 || minutes > MAX_MINUTES {
            return Err(Error::Invalid(format!(
                "minutes must be between 1 and {MAX_MINUTES}, not {minutes}"
            )));
        }
        let now = crate::clock::unix_ms().div_euclid(60_000);
        let first = now - i64::from(minutes) + 1;
        let mut pipe = redis::pipe();
        for m in first..=now {
            pipe.cmd("HGETALL").arg(self.keys.activity(m));
        }
        let hashes: Vec<HashMap<String, i64>> = self.redis.pipe(&pipe).await.map_err(|e| Error::from_redis(None, e))?;
        Ok((first..=now)
            .zip(hashes)
            .map(|(m, fields)| MinuteActivity::from_fields(m, &fields))
            .collect())
    }
}
