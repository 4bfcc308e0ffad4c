//! `bs_numbers.lua`: a dq-server's block of beanstalkd numbers in one partition (see its header for KEYS
//! and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// A dq-server's block of beanstalkd numbers in one partition, from a least one on.
    SCRIPT,
    "bs_numbers.lua"
);

/// One `bs_numbers.lua` call: takes `size` values of partition `p`'s sequence, the first of them no
/// lower than `least` (at least 1). Returns the last k of the block (the block is
/// `last - size + 1 ..= last`).
pub(crate) async fn call(store: &Store, p: u16, size: u64, least: u64) -> Result<u64> {
    let least = least.max(1);
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.partition_keys(p).bs_seq())
        .arg(size)
        .arg(least)
        .arg(least - 1 + size);
    // As the INCRBY it replaces: no wait for replicas (the puts that use the numbers wait).
    match store.run::<i64>(p, &inv).await? {
        last if last >= 0 => Ok(last as u64),
        other => Err(Error::unexpected(Some(p), format!("bs_numbers returned {other}"))),
    }
}
