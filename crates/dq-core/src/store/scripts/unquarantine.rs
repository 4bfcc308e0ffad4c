//! `unquarantine.lua`: put a quarantined record back (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Put a quarantined record back (dq-checker quarantine restore).
    SCRIPT,
    "unquarantine.lua"
);

/// What one restore came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnquarantineReply {
    /// The record is the job's again.
    Restored,
    /// No record of this id is quarantined.
    NotQuarantined,
    /// The id has a record again: the quarantined one stays where it is.
    HasRecord,
}

/// One `unquarantine.lua` call for job `id` (in its partition `p`).
pub(crate) async fn call(store: &Store, p: u16, id: &str) -> Result<UnquarantineReply> {
    let keys = store.partition_keys(p);
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.quarantine()).key(keys.job(id)).arg(id);
    match store.write::<i64>(p, &inv).await? {
        1 => Ok(UnquarantineReply::Restored),
        0 => Ok(UnquarantineReply::NotQuarantined),
        -1 => Ok(UnquarantineReply::HasRecord),
        other => Err(Error::unexpected(Some(p), format!("unquarantine returned {other}"))),
    }
}
