//! Reads of the registries in the `{<prefix>}` slot: the topics (`{<prefix>}:topics`) and the schedules
//! with the last occurrence each fired (`{<prefix>}:schedules`, `{<prefix>}:schedules:fired`). Their
//! writes are scripts (`topic_set.lua`, `schedule_set.lua`, `schedule_fired.lua`).

use std::collections::HashMap;

use crate::error::Result;
use crate::store::Store;

/// Every topic's registration as stored: topic → `<version> <config JSON>`.
pub(crate) async fn topics(store: &Store) -> Result<HashMap<String, String>> {
    store
        .query_unpartitioned(redis::cmd("HGETALL").arg(store.keys().topics()))
        .await
}

/// Every schedule as stored (name → `<since ms> <config JSON>`), and the last occurrence each fired
/// (name → Unix ms), read together.
pub(crate) async fn schedules(store: &Store) -> Result<(HashMap<String, String>, HashMap<String, i64>)> {
    let mut pipe = redis::pipe();
    pipe.cmd("HGETALL")
        .arg(store.keys().schedules())
        .cmd("HGETALL")
        .arg(store.keys().schedules_fired());
    store.pipe_unpartitioned(&pipe).await
}

/// Schedule `name` as stored, and the last occurrence it fired, read together.
pub(crate) async fn schedule(store: &Store, name: &str) -> Result<(Option<String>, Option<i64>)> {
    let mut pipe = redis::pipe();
    pipe.cmd("HGET")
        .arg(store.keys().schedules())
        .arg(name)
        .cmd("HGET")
        .arg(store.keys().schedules_fired())
        .arg(name);
    store.pipe_unpartitioned(&pipe).await
}
