//! `cancel.lua`: remove a job from whatever state it is in, record and all (see its header for KEYS and
//! ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Cancel a job: remove it from any state.
    SCRIPT,
    record + flow + publish + "cancel.lua"
);

/// What a cancel came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelReply {
    /// The job and its record are gone.
    Cancelled,
    /// No job has this id.
    NoJob,
}

/// One `cancel.lua` call for job `id` of partition `p`.
pub(crate) async fn call(store: &Store, p: u16, id: &str) -> Result<CancelReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.delayed())
        .key(keys.reserved())
        .key(keys.counts())
        .key(keys.bs_ids())
        .arg(keys.prefix())
        .arg(id);
    match store.write::<i64>(p, &inv).await? {
        1 => Ok(CancelReply::Cancelled),
        0 => Ok(CancelReply::NoJob),
        other => Err(Error::unexpected(Some(p), format!("cancel returned {other}"))),
    }
}
