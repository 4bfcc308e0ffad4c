//! `activity_add.lua`: add a process's activity counts to the dashboard's minute hashes (see its header for
//! KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::activity::Flush;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Add a process's activity counts to the dashboard's per-minute hashes.
    SCRIPT,
    "activity_add.lua"
);

/// One `activity_add.lua` call: raises the fields of each minute of `flush`, each minute hash then kept
/// `keep_secs` seconds. Its keys are no partition's, so the call leaves the partitions' health alone.
/// Answers how many fields were raised.
pub(crate) async fn call(store: &Store, flush: &Flush, keep_secs: u64) -> Result<u64> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.arg(keep_secs);
    for (minute, fields) in flush {
        inv.key(store.keys.activity(*minute)).arg(fields.len());
        for (field, n) in fields {
            inv.arg(field).arg(*n);
        }
    }
    store.redis.invoke(&inv).await.map_err(|e| Error::from_redis(None, e))
}
