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

impl Timer {
    /// Moves up to `limit` due jobs of partition `p` to ready.
    pub async fn promote(&self, p: u16, limit: u32) -> Result<Promoted> {
        self.promote_for(p, limit, &[]).await
    }

    /// Moves up to `limit` due jobs of partition `p` to ready, or hands them, reserved, to the `waiting`
    /// workers of their topics (see [`crate::reservations::handoff`]).
    pub async fn promote_for(&self, p: u16, limit: u32, waiting: &[Waiting]) -> Result<Promoted> {
        promote::call(&self.store, p, limit, waiting).await
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
