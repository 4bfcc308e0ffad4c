//! `topic_set.lua`: write or delete one topic's registration in the registry (see its header for KEYS and
//! ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Write a topic's registration unless it holds a newer one.
    SCRIPT,
    "topic_set.lua"
);

/// What one write of the registry came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicSetReply {
    /// The registration was written under this version.
    Written(u64),
    /// The registration was deleted (or there was none).
    Deleted,
    /// The entry was no longer the one the write was conditioned on: nothing changed.
    Changed,
}

/// One `topic_set.lua` call: `json` as `topic`'s registration (`None` deletes it); with `only_if`, only
/// while the entry is still exactly that.
pub(crate) async fn call(
    store: &Store,
    topic: &str,
    json: Option<&str>,
    only_if: Option<&str>,
) -> Result<TopicSetReply> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.keys().topics()).arg(topic).arg(json.unwrap_or(""));
    if let Some(old) = only_if {
        inv.arg(old);
    }
    match store.run_unpartitioned::<i64>(&inv).await? {
        0 => Ok(TopicSetReply::Deleted),
        -1 => Ok(TopicSetReply::Changed),
        version if version > 0 => Ok(TopicSetReply::Written(version as u64)),
        other => Err(Error::unexpected(None, format!("topic_set returned {other}"))),
    }
}
