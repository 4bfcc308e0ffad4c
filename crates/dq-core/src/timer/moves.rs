//! The timers' verbs: promote due jobs, end expired reservations, and the heartbeat that shares the
//! partitions among live timers.

use super::Timer;
use crate::error::Result;
use crate::reservations::Waiting;
use crate::store::scripts::{balance, expire, promote};
pub use crate::store::scripts::{
    balance::Balance,
    expire::Expired,
    promote::{Promoted, TracedMove},
};
use crate::telemetry::spans;

impl Timer {
    /// Moves up to `limit` due jobs of partition `p` to ready.
    pub async fn promote(&self, p: u16, limit: u32) -> Result<Promoted> {
        self.promote_for(p, limit, &[]).await
    }

    /// Moves up to `limit` due jobs of partition `p` to ready, or hands them, reserved, to the `waiting`
    /// workers of their topics (see [`crate::reservations::handoff`]).
    ///
    /// Each moved job with a trace context gets its promotion span (`promote <topic>`, see
    /// [`crate::telemetry::spans`]), spanning the call, when this process exports spans.
    pub async fn promote_for(&self, p: u16, limit: u32, waiting: &[Waiting]) -> Result<Promoted> {
        let start = std::time::SystemTime::now();
        let promoted = promote::call(&self.store, p, limit, waiting).await?;
        if !promoted.traced.is_empty() {
            let end = std::time::SystemTime::now();
            for t in &promoted.traced {
                spans::promotion(&t.id, &t.topic, &t.trace, t.lateness_ms, t.handed, start, end);
            }
        }
        Ok(promoted)
    }

    /// Promotes each partition of `parts` as [`Timer::promote_for`] does, with as few calls as their
    /// nodes allow (all of them in one on a single Redis, up to 16 a call; on a cluster one per
    /// primary), so that partitions due at the same moment share a call's own cost. The `waiting`
    /// workers' slots are shared among the calls and, within a call, among its partitions in turn.
    /// Answers per partition, in the order of `parts`. An error Redis answered is the failing
    /// partition's alone (its call's partitions are sent again one by one); a call that got no answer
    /// fails each of its partitions.
    pub async fn promote_many(&self, parts: &[u16], limit: u32, waiting: &[Waiting]) -> Vec<(u16, Result<Promoted>)> {
        let start = std::time::SystemTime::now();
        let answers = promote::call_many(&self.store, parts, limit, waiting).await;
        let end = std::time::SystemTime::now();
        for t in answers
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .flat_map(|p| &p.traced)
        {
            spans::promotion(&t.id, &t.topic, &t.trace, t.lateness_ms, t.handed, start, end);
        }
        answers
    }

    /// Ends up to `limit` expired reservations of partition `p`.
    pub async fn expire(&self, p: u16, limit: u32) -> Result<Expired> {
        let expired = expire::call(&self.store, p, limit, self.defaults.attempt_history).await?;
        if expired.to_dead > 0 {
            self.activity.dead(expired.to_dead as u64);
        }
        Ok(expired)
    }

    /// A timer's heartbeat: returns Redis's clock, the number of live timers, and the partitions this
    /// timer holds now. `release` gives all of them up (drain).
    pub async fn balance(&self, timer_id: &str, lease_ms: u64, release: bool) -> Result<Balance> {
        balance::call(&self.store, timer_id, lease_ms, release).await
    }
}
