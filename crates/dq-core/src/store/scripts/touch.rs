//! `touch.lua`: extend a reservation (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Extend a reservation.
    SCRIPT,
    record + publish + "touch.lua"
);

/// What a touch came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TouchReply {
    /// The reservation lasts until `deadline` now, Unix ms (Redis's clock).
    Extended {
        /// The new deadline.
        deadline: i64,
    },
    /// No job has this id.
    NoJob,
    /// The receipt does not name the job's current reservation: nothing changed.
    StaleReceipt,
}

/// One `touch.lua` call for job `id` of partition `p` under `receipt`: its deadline becomes now +
/// `ttr_ms` (else the job's own TTR).
pub(crate) async fn call(store: &Store, p: u16, id: &str, receipt: &str, ttr_ms: Option<u64>) -> Result<TouchReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.reserved())
        .key(keys.announced())
        .arg(id)
        .arg(receipt);
    match ttr_ms {
        Some(t) => inv.arg(t),
        None => inv.arg(""),
    };
    inv.arg(keys.timer_channel());
    match store.write::<i64>(p, &inv).await? {
        0 => Ok(TouchReply::NoJob),
        -1 => Ok(TouchReply::StaleReceipt),
        deadline if deadline > 0 => Ok(TouchReply::Extended { deadline }),
        other => Err(Error::unexpected(Some(p), format!("touch returned {other}"))),
    }
}
