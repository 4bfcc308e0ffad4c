//! `events_take.lua`: hand out a partition's dead-job events, kept pending until sent (see its header for
//! KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::Result;
use crate::store::Store;

script!(
    /// Hand out a partition's dead-job events, kept pending until sent (dq-checker).
    SCRIPT,
    "events_take.lua"
);

/// One `events_take.lua` call on partition `p`: up to `max` pending events (JSON), oldest first; the
/// hooks of new events whose topic is in `hooked` are queued.
pub(crate) async fn call(store: &Store, p: u16, max: usize, hooked: &[String]) -> Result<Vec<String>> {
    let keys = store.partition_keys(p);
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.events())
        .key(keys.events_pending())
        .key(keys.dead_hooks())
        .arg(max)
        .arg(hooked);
    store.run(p, &inv).await
}
