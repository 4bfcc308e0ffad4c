//! `ack.lua`: finish reservations (see its header for KEYS and ARGV): of one partition per call on a
//! cluster, of any on a single Redis.

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Finish reservations.
    SCRIPT,
    record + flow + add + publish + "ack.lua"
);

/// What one ack came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckReply {
    /// The job is done.
    Acked,
    /// No job has this id.
    NoJob,
    /// The receipt does not name the job's current reservation: nothing changed.
    StaleReceipt,
}

/// One ack as `ack.lua` takes it: the job's partition, its id, its receipt, its history entry, the jobs
/// it pushes ([`crate::graph::pack_pushes`]) and the answer its success hook carries; empty: none.
pub(crate) type AckArgs<'a> = (u16, &'a str, &'a str, &'a [u8], &'a [u8], &'a [u8]);

/// One `ack.lua` call, sent to partition `p`: the acks in order (on a cluster all of `p`, on a single
/// Redis of any partitions), done records kept `done_retention_ms` (0: deleted at once). Answers per
/// ack, in order.
pub(crate) async fn call<'a>(
    store: &Store,
    p: u16,
    done_retention_ms: u64,
    acks: impl Iterator<Item = AckArgs<'a>> + Clone,
) -> Result<Vec<AckReply>> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.reserved()).key(keys.counts()).key(keys.bs_ids());
    for (q, id, ..) in acks.clone() {
        debug_assert!(!store.sharded() || q == p, "a cluster's call is one partition's");
        inv.key(store.partition_keys(q).job(id));
    }
    inv.arg(done_retention_ms);
    for (_, id, receipt, entry, pushes, answer) in acks {
        inv.arg(id).arg(receipt).arg(entry).arg(pushes).arg(answer);
    }
    let codes: Vec<i64> = store.write(p, &inv).await?;
    codes
        .into_iter()
        .map(|code| match code {
            1 => Ok(AckReply::Acked),
            0 => Ok(AckReply::NoJob),
            -1 => Ok(AckReply::StaleReceipt),
            other => Err(Error::unexpected(Some(p), format!("ack returned {other}"))),
        })
        .collect()
}
