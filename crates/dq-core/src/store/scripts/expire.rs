//! `expire.lua`: end one partition's expired reservations (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// End expired reservations (the timer).
    SCRIPT,
    record + flow + publish + "expire.lua"
);

/// What an expiry call did in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Jobs whose reservation expired and that went back to ready.
    pub to_ready: usize,
    /// Jobs whose reservation expired on their last attempt.
    pub to_dead: usize,
    /// Earliest deadline left, Unix ms.
    pub next_deadline: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
}

/// One `expire.lua` call on partition `p`: ends up to `limit` expired reservations; `history`: each
/// gets an `expired` attempt in its job's history (`jobs.attempt_history`).
pub(crate) async fn call(store: &Store, p: u16, limit: u32, history: bool) -> Result<Expired> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.reserved())
        .key(keys.counts())
        .key(keys.events())
        .key(keys.announced())
        .arg(keys.prefix())
        .arg(limit)
        .arg(keys.ready_channel())
        .arg(if history { "1" } else { "" });
    let out: Vec<i64> = store.run(p, &inv).await?;
    match out[..] {
        [to_ready, to_dead, next_deadline, now] if to_ready >= 0 && to_dead >= 0 => Ok(Expired {
            to_ready: to_ready as usize,
            to_dead: to_dead as usize,
            next_deadline: (next_deadline >= 0).then_some(next_deadline),
            now,
        }),
        _ => Err(Error::unexpected(Some(p), "expire returned a malformed answer")),
    }
}
