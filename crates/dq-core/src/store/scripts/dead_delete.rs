//! `dead_delete.lua`: delete dead jobs of a topic, records and all (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Delete dead jobs.
    SCRIPT,
    record + "dead_delete.lua"
);

/// Which dead jobs one call deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which<'a, S> {
    /// These ids (those in the dead list).
    Ids(&'a [S]),
    /// The oldest deaths, at most this many.
    Oldest(u32),
    /// The oldest deaths of at least `age_ms` ago (Redis's clock), at most `limit`: dq-checker's
    /// retention.
    OlderThan {
        /// Most jobs to delete.
        limit: u32,
        /// How long ago they died at least, ms.
        age_ms: u64,
    },
}

/// What one delete call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deleted {
    /// Jobs deleted.
    pub(crate) deleted: u64,
    /// Ids taken off the dead list (as many: the shape of requeue's answer).
    pub(crate) removed: u64,
}

/// One `dead_delete.lua` call on partition `p`, for `topic`'s dead list.
pub(crate) async fn call<S: AsRef<str>>(store: &Store, p: u16, topic: &str, which: Which<'_, S>) -> Result<Deleted> {
    let (limit, age_ms, ids) = match which {
        // No ids would mean the oldest deaths to the script.
        Which::Ids([]) => return Ok(Deleted { deleted: 0, removed: 0 }),
        // The script reads no limit when it has ids.
        Which::Ids(ids) => (ids.len() as u32, None, ids),
        Which::Oldest(limit) => (limit, None, &[][..]),
        Which::OlderThan { limit, age_ms } => (limit, Some(age_ms), &[][..]),
    };
    let keys = store.partition_keys(p);
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.dead(topic))
        .key(keys.counts())
        .key(keys.bs_ids())
        .arg(keys.prefix())
        .arg(topic)
        .arg(limit)
        .arg(age_ms.map(|a| a.to_string()).unwrap_or_default());
    for id in ids {
        inv.arg(id.as_ref());
    }
    match store.write::<Vec<u64>>(p, &inv).await?[..] {
        [deleted, removed] => Ok(Deleted { deleted, removed }),
        _ => Err(Error::unexpected(Some(p), "dead_delete returned a malformed answer")),
    }
}
