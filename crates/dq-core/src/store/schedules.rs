//! The schedules' marks dq-timer reads outside a script: the registry's version and the last occurrence
//! each schedule fired (see [`crate::admin::schedules`] for the registry and its format).

use super::Store;
use crate::error::{Error, Result};

impl Store {
    /// The schedules' version: raised by every change of a schedule (0 before the first).
    pub(crate) async fn schedules_version(&self) -> Result<i64> {
        let v: Option<i64> = self
            .redis
            .query(redis::cmd("GET").arg(self.keys.schedules_version()))
            .await
            .map_err(|e| Error::from_redis(None, e))?;
        Ok(v.unwrap_or(0))
    }

    /// The last occurrence schedule `name` fired, as Redis holds it now.
    pub(crate) async fn schedule_last_fired(&self, name: &str) -> Result<Option<i64>> {
        self.redis
            .query(redis::cmd("HGET").arg(self.keys.schedules_fired()).arg(name))
            .await
            .map_err(|e| Error::from_redis(None, e))
    }
}
