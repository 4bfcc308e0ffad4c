//! `events_done.lua`: forget pending dead-job events once their alert went out (see its header for KEYS
//! and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::Result;
use crate::store::Store;

script!(
    /// Forget pending dead-job events once their alert went out (dq-checker).
    SCRIPT,
    "events_done.lua"
);

/// One `events_done.lua` call on partition `p`: the first `n` pending events go. Returns how many went.
pub(crate) async fn call(store: &Store, p: u16, n: usize) -> Result<u64> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.partition_keys(p).events_pending()).arg(n);
    store.run(p, &inv).await
}
