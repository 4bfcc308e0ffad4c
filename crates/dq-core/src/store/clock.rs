//! Redis's clock: due times, schedules and retention count by it, never by a process's own (invariant 2).

use redis::Value;

use super::Store;
use super::decode::int;
use crate::error::{Error, Result};

impl Store {
    /// Redis's clock (`TIME`), Unix ms.
    pub(crate) async fn now_ms(&self) -> Result<i64> {
        let t: Vec<Value> = self
            .redis
            .query(&redis::cmd("TIME"))
            .await
            .map_err(|e| Error::from_redis(None, e))?;
        match (t.first().and_then(int), t.get(1).and_then(int)) {
            (Some(s), Some(us)) => Ok(s * 1000 + us / 1000),
            _ => Err(Error::unexpected(None, "TIME returned a malformed answer")),
        }
    }
}
