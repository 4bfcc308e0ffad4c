//! `release.lua`: hand a reservation back unfinished (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Hand a reservation back unfinished (drain).
    SCRIPT,
    record + flow + publish + "release.lua"
);

/// What a release came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The job is ready again, in its place by priority and due time.
    Released,
    /// No job has this id.
    NoJob,
    /// The receipt does not name the job's current reservation: nothing changed.
    StaleReceipt,
}

/// One `release.lua` call for job `id` of partition `p` under `receipt`; `counted`: the delivery counts
/// as an attempt (beanstalkd's `reserves`), else it is taken back.
pub(crate) async fn call(store: &Store, p: u16, id: &str, receipt: &str, counted: bool) -> Result<ReleaseReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.reserved())
        .key(keys.counts())
        .arg(keys.prefix())
        .arg(id)
        .arg(receipt)
        .arg(keys.ready_channel())
        .arg(if counted { "1" } else { "" });
    match store.write::<i64>(p, &inv).await? {
        1 => Ok(ReleaseReply::Released),
        0 => Ok(ReleaseReply::NoJob),
        -1 => Ok(ReleaseReply::StaleReceipt),
        other => Err(Error::unexpected(Some(p), format!("release returned {other}"))),
    }
}
