//! The dashboard's activity: reading the minute hashes back (see [`crate::activity`]).

use std::collections::HashMap;

use super::Admin;
use crate::activity::MinuteActivity;
use crate::error::{Error, Result};

/// The most minutes one read returns: the minute hashes are kept about a day.
pub const MAX_MINUTES: u32 = 24 * 60;

impl Admin {
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
