//! What dq-checker keeps to alert once per event: the alert states it last sent (`{<prefix>}:alerts`),
//! and the removal of a hook (`<prefix>:{<tag>}:dead_hooks`, `…:success_hooks`). The lease and the events' and
//! hooks' hand-outs are scripts (`lease.lua`, `events_take.lua`, `hooks_take.lua` …).

use std::collections::HashMap;

use crate::error::Result;
use crate::store::Store;

/// The alert states the checkers last sent: field → state.
pub(crate) async fn sent(store: &Store) -> Result<HashMap<String, String>> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(store.keys().alerts_sent());
    store.query_unpartitioned(&cmd).await
}

/// Records that the alert state `field` is now `value`.
pub(crate) async fn set_sent(store: &Store, field: &str, value: &str) -> Result<()> {
    let mut cmd = redis::cmd("HSET");
    cmd.arg(store.keys().alerts_sent()).arg(field).arg(value);
    store.query_unpartitioned(&cmd).await
}

/// Removes the hook stored as `entry` from partition `p`'s hooks set `hooks` (one command: atomic on
/// its own).
pub(crate) async fn forget_hook(store: &Store, p: u16, hooks: String, entry: &str) -> Result<()> {
    let mut cmd = redis::cmd("ZREM");
    cmd.arg(hooks).arg(entry);
    store.query::<i64>(p, &cmd).await.map(drop)
}
