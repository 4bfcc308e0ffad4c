//! The dashboard's activity: reading the minute hashes back (see [`crate::activity`]).

use super::Admin;
use crate::activity::MinuteActivity;
use crate::error::{Error, Result};
use crate::store::activity;

/// The most minutes one read returns: the minute hashes are kept about a day.
pub const MAX_MINUTES: u32 = 24 * 60;

impl Admin {
    /// The activity of the last `minutes` minutes (the current one included, by this machine's clock),
    /// oldest first, one entry per minute (zeros where nothing was counted), read in one round trip.
    pub async fn activity(&self, minutes: u32) -> Result<Vec<MinuteActivity>> {
        if minutes == 0 || minutes > MAX_MINUTES {
            return Err(Error::Invalid(format!(
                "minutes must be between 1 and {MAX_MINUTES}, not {minutes}"
            )));
        }
        let now = crate::clock::unix_ms().div_euclid(60_000);
        let first = now - i64::from(minutes) + 1;
        let hashes = activity::minutes(&self.store, first..=now).await?;
        Ok((first..=now)
            .zip(hashes)
            .map(|(m, fields)| MinuteActivity::from_fields(m, &fields))
            .collect())
    }
}
