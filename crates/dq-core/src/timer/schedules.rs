//! The schedules' firing: what dq-timer reads and marks in the registry (see [`crate::admin::schedules`]
//! for the registry and its format).

use super::Timer;
use crate::admin::schedules::StoredSchedule;
use crate::error::Result;
use crate::store::scripts::schedule_fired::{self, ScheduleFiredReply};

impl Timer {
    /// The schedules' version: raised by every change of a schedule (0 before the first).
    pub async fn schedules_version(&self) -> Result<i64> {
        self.store.schedules_version().await
    }

    /// Every schedule, by name (see [`crate::admin::Admin::schedules`]).
    pub async fn schedules(&self) -> Result<Vec<StoredSchedule>> {
        self.0.schedules().await
    }

    /// Schedule `name`, if registered.
    pub async fn schedule(&self, name: &str) -> Result<Option<StoredSchedule>> {
        self.0.schedule(name).await
    }

    /// The last occurrence schedule `name` fired, as Redis holds it now.
    pub async fn schedule_last_fired(&self, name: &str) -> Result<Option<i64>> {
        self.store.schedule_last_fired(name).await
    }

    /// Notes that schedule `name` fired its occurrence at `occurrence_ms` (the mark only rises). Returns
    /// the last occurrence fired after the call, `None` when the schedule is gone.
    pub async fn schedule_fired(&self, name: &str, occurrence_ms: i64) -> Result<Option<i64>> {
        match schedule_fired::call(&self.store, name, occurrence_ms).await? {
            ScheduleFiredReply::LastFired(last) => Ok(Some(last)),
            ScheduleFiredReply::NoSchedule => Ok(None),
        }
    }
}
