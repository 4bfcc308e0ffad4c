//! `repair_member.lua`: the audit drops an id that has no job record from a structure (see its header
//! for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Drop an id that has no job record from a structure (the audit).
    SCRIPT,
    "repair_member.lua"
);

/// What one repair of a structure's member came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberRepair {
    /// The id had no record: it left the structure.
    Removed,
    /// Nothing to repair (the id has a record, or left the structure meanwhile).
    Left,
}

/// One `repair_member.lua` call on partition `p`: id `id` in `structure` (a sorted set of the partition
/// that the audit found, by name).
pub(crate) async fn call(store: &Store, p: u16, structure: &str, id: &str) -> Result<MemberRepair> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(structure).key(store.partition_keys(p).job(id)).arg(id);
    match store.run::<i64>(p, &inv).await? {
        1 => Ok(MemberRepair::Removed),
        0 => Ok(MemberRepair::Left),
        other => Err(Error::unexpected(Some(p), format!("repair_member returned {other}"))),
    }
}
