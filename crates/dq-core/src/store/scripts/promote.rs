//! `promote.lua`: move one partition's due jobs to ready, or hand them, reserved, to waiting dq-consumer
//! workers (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::reservations::Waiting;
use crate::store::Store;

script!(
    /// Move due jobs of one bucket to ready (the timer).
    SCRIPT,
    record + flow + publish + "promote.lua"
);

/// What a promotion call did in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// Jobs moved, to ready or handed to a waiting worker.
    pub moved: usize,
    /// Earliest due time left in the delay set, Unix ms (Redis's clock).
    pub next_due: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
    /// Jobs handed to each waiting worker, in the order they were given.
    pub handed: Vec<u32>,
    /// For each moved job, how late it was moved (now − due), ms.
    pub lateness_ms: Vec<i64>,
}

/// One `promote.lua` call on partition `p`: moves up to `limit` due jobs to ready, or hands them, reserved,
/// to the `waiting` workers of their topics (see [`crate::reservations::handoff`]).
pub(crate) async fn call(store: &Store, p: u16, limit: u32, waiting: &[Waiting]) -> Result<Promoted> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.delayed())
        .key(keys.counts())
        .key(keys.reserved())
        .key(keys.announced())
        .arg(keys.prefix())
        .arg(limit)
        .arg(keys.ready_channel())
        .arg(keys.timer_channel())
        .arg(crate::attempt::receipt_nonce());
    for w in waiting {
        inv.arg(&w.topic)
            .arg(keys.handoff_channel(&w.consumer))
            .arg(w.slots)
            .arg(w.least_ttr_ms);
    }
    let out: Vec<i64> = store.run(p, &inv).await?;
    let bad = || Error::unexpected(Some(p), "promote returned a malformed answer");
    let (head, rest) = out.split_at_checked(4).ok_or_else(bad)?;
    let (handed, lateness) = rest.split_at_checked(head[3] as usize).ok_or_else(bad)?;
    if handed.len() != waiting.len() {
        return Err(bad());
    }
    Ok(Promoted {
        moved: head[0] as usize,
        next_due: (head[1] >= 0).then_some(head[1]),
        now: head[2],
        handed: handed.iter().map(|n| *n as u32).collect(),
        lateness_ms: lateness.to_vec(),
    })
}
