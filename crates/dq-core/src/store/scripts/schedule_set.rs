//! `schedule_set.lua`: write or delete one schedule (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Write (or delete) a schedule, stamping when it starts counting occurrences.
    SCRIPT,
    "schedule_set.lua"
);

/// What one write of a schedule came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScheduleSetReply {
    /// When the schedule counts occurrences from (Redis's clock, Unix ms); 0 for a deletion.
    pub(crate) since: i64,
    /// Whether the schedule existed before.
    pub(crate) existed: bool,
}

/// One `schedule_set.lua` call: `json` as schedule `name`'s registration (`None` deletes it); with
/// `restart`, it counts occurrences from now.
pub(crate) async fn call(store: &Store, name: &str, json: Option<&str>, restart: bool) -> Result<ScheduleSetReply> {
    let keys = store.keys();
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.schedules())
        .key(keys.schedules_fired())
        .key(keys.schedules_version())
        .arg(name)
        .arg(json.unwrap_or(""))
        .arg(if restart { "1" } else { "0" });
    match store.run_unpartitioned::<Vec<i64>>(&inv).await?[..] {
        [since, existed] => Ok(ScheduleSetReply {
            since,
            existed: existed == 1,
        }),
        _ => Err(Error::unexpected(None, "schedule_set returned a malformed answer")),
    }
}
