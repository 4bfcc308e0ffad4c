//! `bs_number.lua`: the beanstalkd number of a job pushed over HTTP, given when the protocol first shows
//! it (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// The beanstalkd number of a job pushed over HTTP.
    SCRIPT,
    record + "bs_number.lua"
);

/// What one numbering came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BsNumberReply {
    /// The job's number (given now, or before).
    Numbered(u64),
    /// No job has this id, or it is done.
    NoJob,
}

/// One `bs_number.lua` call for job `id` (in its partition `p`).
pub(crate) async fn call(store: &Store, p: u16, id: &str) -> Result<BsNumberReply> {
    let keys = store.partition_keys(p);
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.bs_seq())
        .key(keys.bs_ids())
        .arg(id)
        .arg(store.partitions().count())
        .arg(p);
    match store.write::<i64>(p, &inv).await? {
        0 => Ok(BsNumberReply::NoJob),
        n if n > 0 => Ok(BsNumberReply::Numbered(n as u64)),
        other => Err(Error::unexpected(Some(p), format!("bs_number returned {other}"))),
    }
}
