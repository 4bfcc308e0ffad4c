//! `counts_prune.lua`: remove counts fields that are 0 (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::Result;
use crate::store::Store;

script!(
    /// Remove counts fields that are 0 (dq-checker's housekeeping).
    SCRIPT,
    "counts_prune.lua"
);

/// One `counts_prune.lua` call on partition `p`: removes those of `fields` that are still 0. Returns how
/// many went.
pub(crate) async fn call(store: &Store, p: u16, fields: &[String]) -> Result<u64> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.partition_keys(p).counts());
    for f in fields {
        inv.arg(f);
    }
    store.write(p, &inv).await
}
