//! `balance.lua`: a timer's heartbeat, sharing the partitions among live timers (see its header for KEYS
//! and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// A timer's heartbeat: claim its fair share of partitions (the timer).
    SCRIPT,
    "balance.lua"
);

/// A timer's share of the partitions after a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    /// Redis's clock, Unix ms.
    pub now: i64,
    /// Live timers, this one included.
    pub timers: usize,
    /// Partitions this timer holds.
    pub partitions: Vec<u16>,
}

/// One `balance.lua` call: timer `timer_id`'s heartbeat, its lease `lease_ms`; `release` gives up every
/// partition it holds (drain). Its keys are the timers' own, no partition's, so the call leaves the
/// partitions' health alone.
pub(crate) async fn call(store: &Store, timer_id: &str, lease_ms: u64, release: bool) -> Result<Balance> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.keys.timers())
        .key(store.keys.leases())
        .arg(timer_id)
        .arg(lease_ms)
        .arg(store.partitions.count())
        .arg(if release { "1" } else { "0" });
    let out: Vec<i64> = store.redis.invoke(&inv).await.map_err(|e| Error::from_redis(None, e))?;
    if out.len() < 2 {
        return Err(Error::unexpected(None, "balance returned too little"));
    }
    Ok(Balance {
        now: out[0],
        timers: out[1] as usize,
        partitions: out[2..].iter().map(|b| *b as u16).collect(),
    })
}
