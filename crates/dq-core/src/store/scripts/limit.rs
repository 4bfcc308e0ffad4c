//! `limit.lua`: a topic's delivery limits across every dq-consumer (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// A topic's delivery limits across every dq-consumer: slots, rate, a pause asked by the callback.
    SCRIPT,
    "limit.lua"
);

/// What a dq-consumer worker asks of its topic's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitAsk {
    /// Slots the worker has in use (deliveries running): never taken from it.
    pub in_use: u32,
    /// Slots it wants to hold, at least `in_use`; fewer than it holds gives the rest back.
    pub hold: u32,
    /// Deliveries it wants to start now; negative gives back rate tokens it took and did not use.
    pub start: i64,
    /// `callback.concurrency`: slots over all workers.
    pub concurrency: u32,
    /// How long the slots stay held without a renewal, ms.
    pub lease_ms: u64,
    /// `callback.rate_per_s`, if any.
    pub rate_per_s: Option<f64>,
    /// `callback.burst`: tokens the bucket holds at most.
    pub burst: u32,
    /// The callback asked for a pause of this many ms (429 or 503 with `Retry-After`); 0 for none.
    pub pause_ms: u64,
}

/// What the limits granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitGrant {
    /// Slots the worker holds now (at least its `in_use`).
    pub held: u32,
    /// Deliveries it may start now.
    pub start: u32,
    /// When it may start none, or fewer than asked for lack of tokens: ms until it is worth asking again
    /// (the end of a pause, or the next token). 0 when there is nothing to wait for but a free slot.
    pub wait_ms: u64,
    /// The topic is paused at its callback's request (`wait_ms` is the rest of the pause).
    pub paused: bool,
}

/// One `limit.lua` call: `holder` (one dq-consumer worker) asks `topic`'s limits for slots and
/// deliveries. The topic's key is no partition's, so the call leaves the partitions' health alone.
pub(crate) async fn call(store: &Store, topic: &str, holder: &str, ask: LimitAsk) -> Result<LimitGrant> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.keys.limit(topic))
        .arg(holder)
        .arg(ask.in_use)
        .arg(ask.hold.max(ask.in_use))
        .arg(ask.start)
        .arg(ask.concurrency)
        .arg(ask.lease_ms)
        .arg(ask.rate_per_s.unwrap_or(0.0))
        .arg(ask.burst)
        .arg(ask.pause_ms);
    let out: Vec<i64> = store.redis.invoke(&inv).await.map_err(|e| Error::from_redis(None, e))?;
    match out[..] {
        [held, start, wait, paused] if held >= 0 && start >= 0 && wait >= 0 => Ok(LimitGrant {
            held: held as u32,
            start: start as u32,
            wait_ms: wait as u64,
            paused: paused == 1,
        }),
        _ => Err(Error::unexpected(None, "limit returned a malformed answer")),
    }
}
