//! `requeue.lua`: dead jobs of a topic back to its ready queue, with fresh attempts (see its header for
//! KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Dead jobs back to ready.
    SCRIPT,
    record + flow + publish + "requeue.lua"
);

/// Which dead jobs one call requeues.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which<'a, S> {
    /// These ids (those in the dead list).
    Ids(&'a [S]),
    /// The oldest deaths, at most this many.
    Oldest(u32),
}

/// What one requeue call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Requeued {
    /// Jobs now ready.
    pub(crate) requeued: u64,
    /// Ids taken off the dead list: more than `requeued` by the dead ids that had lost their record.
    pub(crate) removed: u64,
}

/// One `requeue.lua` call on partition `p`, for `topic`'s dead list.
pub(crate) async fn call<S: AsRef<str>>(store: &Store, p: u16, topic: &str, which: Which<'_, S>) -> Result<Requeued> {
    let (limit, ids) = match which {
        // No ids would mean the oldest deaths to the script.
        Which::Ids([]) => {
            return Ok(Requeued {
                requeued: 0,
                removed: 0,
            });
        }
        // The script reads no limit when it has ids.
        Which::Ids(ids) => (ids.len() as u32, ids),
        Which::Oldest(limit) => (limit, &[][..]),
    };
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.dead(topic))
        .key(keys.ready(topic))
        .key(keys.counts())
        .arg(keys.prefix())
        .arg(topic)
        .arg(keys.ready_channel())
        .arg(limit);
    for id in ids {
        inv.arg(id.as_ref());
    }
    match store.write::<Vec<u64>>(p, &inv).await?[..] {
        [requeued, removed] => Ok(Requeued { requeued, removed }),
        _ => Err(Error::unexpected(Some(p), "requeue returned a malformed answer")),
    }
}
