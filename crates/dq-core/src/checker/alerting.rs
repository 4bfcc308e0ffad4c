//! What dq-checker keeps in Redis to alert once per event however many checkers run: the lease that
//! says which one sends, the states it last sent, and the dead-job events, handed out and kept pending
//! until their alert went out.

use std::collections::HashMap;

use super::Checker;
use crate::error::Result;
use crate::store::alerts;
use crate::store::scripts::lease::{self, LeaseReply};
use crate::store::scripts::{events_done, events_take};

impl Checker {
    /// Takes or keeps the checkers' lease for `ttl_ms` as `who`; whether `who` holds it now.
    pub async fn take_checker_lease(&self, who: &str, ttl_ms: u64) -> Result<bool> {
        Ok(lease::call(&self.store, who, ttl_ms).await? == LeaseReply::Held)
    }

    /// The alert states the checkers last sent.
    pub async fn alerts_sent(&self) -> Result<HashMap<String, String>> {
        alerts::sent(&self.store).await
    }

    /// Records that the alert state `field` is now `value` (sent).
    pub async fn set_alert_sent(&self, field: &str, value: &str) -> Result<()> {
        alerts::set_sent(&self.store, field, value).await
    }

    /// Up to `max` of partition `p`'s dead-job events, oldest first, kept in its pending list until
    /// [`Queue::events_sent`]; the pending ones of a checker that died first. New events moved to the
    /// pending list whose topic is one of `hooked` (those with a `callback.on_dead_url`) have their
    /// hook queued in the same step (see [`Queue::take_dead_hooks`]).
    pub async fn take_events(&self, p: u16, max: usize, hooked: &[String]) -> Result<Vec<String>> {
        events_take::call(&self.store, p, max, hooked).await
    }

    /// The alert for the `n` events [`Queue::take_events`] handed out of partition `p` went out.
    pub async fn events_sent(&self, p: u16, n: usize) -> Result<()> {
        events_done::call(&self.store, p, n).await.map(drop)
    }
}
