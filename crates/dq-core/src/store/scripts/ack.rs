//! `ack.lua`: finish reservations (see its header for KEYS and ARGV): of the partitions of one node per
//! call (any on a single Redis).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::store::{Store, owners};

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

/// Finishes `acks` (in order) with one `ack.lua` call sent to partition `p`: the acks must be of
/// partitions on `p`'s node (on a single Redis any are; on a cluster, see [`Store::nodes`]). A cluster's
/// call that finds one of its partitions elsewhere, having done nothing, is sent again a partition at a
/// time ([`owners::apart`]). Done records are kept `done_retention_ms` (0: deleted at once). Answers
/// per ack, in order.
pub(crate) async fn call<'a>(
    store: &Store,
    p: u16,
    done_retention_ms: u64,
    acks: impl Iterator<Item = AckArgs<'a>> + Clone,
) -> Result<Vec<Result<AckReply>>> {
    let spread = store.sharded() && acks.clone().any(|a| a.0 != p);
    if let Some(replies) = send(store, p, done_retention_ms, acks.clone(), spread).await? {
        return Ok(replies.into_iter().map(Ok).collect());
    }
    let acks: Vec<AckArgs<'a>> = acks.collect();
    Ok(owners::apart(
        store,
        &acks,
        |a| a.0,
        |part| async move {
            let q = part[0].0;
            let out = send(store, q, done_retention_ms, part.into_iter(), false).await?;
            out.ok_or_else(|| Error::unexpected(Some(q), "a call of one partition answered moved"))
        },
    )
    .await)
}

/// One `ack.lua` call; with `spread` (a cluster's call of several partitions) the records' keys go in
/// ARGV (add.lua's `add_spread`). `None`: the call answered `moved`.
async fn send<'a>(
    store: &Store,
    p: u16,
    done_retention_ms: u64,
    acks: impl Iterator<Item = AckArgs<'a>> + Clone,
    spread: bool,
) -> Result<Option<Vec<AckReply>>> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.reserved()).key(keys.counts()).key(keys.bs_ids());
    if spread {
        inv.arg("").arg(acks.clone().count());
    }
    for (q, id, ..) in acks.clone() {
        let record = store.partition_keys(q).job(id);
        if spread {
            inv.arg(record);
        } else {
            inv.key(record);
        }
    }
    inv.arg(done_retention_ms);
    for (_, id, receipt, entry, pushes, answer) in acks {
        inv.arg(id).arg(receipt).arg(entry).arg(pushes).arg(answer);
    }
    let out: Value = store.write(p, &inv).await?;
    if owners::is_moved(&out) {
        return Ok(None);
    }
    let codes: Vec<i64> =
        redis::from_redis_value(out).map_err(|e| Error::unexpected(Some(p), format!("ack returned {e}")))?;
    let replies: Result<Vec<AckReply>> = codes
        .into_iter()
        .map(|code| match code {
            1 => Ok(AckReply::Acked),
            0 => Ok(AckReply::NoJob),
            -1 => Ok(AckReply::StaleReceipt),
            other => Err(Error::unexpected(Some(p), format!("ack returned {other}"))),
        })
        .collect();
    replies.map(Some)
}
