//! `schedule_fired.lua`: note the last occurrence a schedule fired (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Note the last occurrence a schedule fired (only ever raised).
    SCRIPT,
    "schedule_fired.lua"
);

/// What one note of a firing came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScheduleFiredReply {
    /// The last occurrence fired, after the call (Unix ms): the one noted, or a later one noted before.
    LastFired(i64),
    /// The schedule does not exist (deleted meanwhile): nothing noted.
    NoSchedule,
}

/// One `schedule_fired.lua` call: schedule `name` fired its occurrence at `occurrence_ms`.
pub(crate) async fn call(store: &Store, name: &str, occurrence_ms: i64) -> Result<ScheduleFiredReply> {
    let keys = store.keys();
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.schedules())
        .key(keys.schedules_fired())
        .arg(name)
        .arg(occurrence_ms);
    match store.run_unpartitioned::<i64>(&inv).await? {
        -1 => Ok(ScheduleFiredReply::NoSchedule),
        last if last >= 0 => Ok(ScheduleFiredReply::LastFired(last)),
        other => Err(Error::unexpected(None, format!("schedule_fired returned {other}"))),
    }
}
