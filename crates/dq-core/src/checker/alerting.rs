//! What dq-checker keeps in Redis to alert once per event however many checkers run: the lease that
//! says which one sends, the states it last sent, and the dead-job events, handed out and kept pending
//! until their alert went out.

use std::collections::HashMap;

use super::Checker;
use crate::error::{Error, Result};
use crate::store::scripts;

impl Checker {
    /// Takes or keeps the checkers' lease for `ttl_ms` as `who`; whether `who` holds it now.
    pub async fn take_checker_lease(&self, who: &str, ttl_ms: u64) -> Result<bool> {
        let mut inv = scripts::LEASE.prepare_invoke();
        inv.key(self.keys.checker_lease()).arg(who).arg(ttl_ms);
        let held: i64 = self.redis.invoke(&inv).await.map_err(|e| Error::from_redis(None, e))?;
        Ok(held == 1)
    }

    /// The alert states the checkers last sent.
    pub async fn alerts_sent(&self) -> Result<HashMap<String, String>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys.alerts_sent());
        self.redis.query(&cmd).await.map_err(|e| Error::from_redis(None, e))
    }

    /// Records that the alert state `field` is now `value` (sent).
    pub async fn set_alert_sent(&self, field: &str, value: &str) -> Result<()> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys.alerts_sent()).arg(field).arg(value);
        self.redis
            .query::<()>(&cmd)
            .await
            .map_err(|e| Error::from_redis(None, e))
    }

    /// Up to `max` of partition `p`'s dead-job events, oldest first, kept in its pending list until
    /// [`Queue::events_sent`]; the pending ones of a checker that died first. New events moved to the
    /// pending list whose topic is one of `hooked` (those with a `callback.on_dead_url`) have their
    /// hook queued in the same step (see [`Queue::take_dead_hooks`]).
    pub async fn take_events(&self, p: u16, max: usize, hooked: &[String]) -> Result<Vec<String>> {
        let keys = self.partition_keys(p);
        let mut inv = scripts::EVENTS_TAKE.prepare_invoke();
        inv.key(keys.events())
            .key(keys.events_pending())
            .key(keys.dead_hooks())
            .arg(max)
            .arg(hooked);
        self.run(p, &inv).await
    }

    /// The alert for the `n` events [`Queue::take_events`] handed out of partition `p` went out.
    pub async fn events_sent(&self, p: u16, n: usize) -> Result<()> {
        let mut inv = scripts::EVENTS_DONE.prepare_invoke();
        inv.key(self.partition_keys(p).events_pending()).arg(n);
        self.run::<i64>(p, &inv).await.map(drop)
    }
}
