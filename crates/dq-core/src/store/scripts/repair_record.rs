//! `repair_record.lua`: the audit puts a job record that is in no structure back in its ready queue (see
//! its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Put an orphaned job record back in its ready queue (the audit).
    SCRIPT,
    record + flow + publish + "repair_record.lua"
);

/// What one repair of a record came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordRepair {
    /// The job was in no structure: it is in its ready queue now.
    PutBack,
    /// Nothing to repair (the job moved since the audit looked, or is gone or done).
    Left,
}

/// One `repair_record.lua` call on partition `p`, for job `id`.
pub(crate) async fn call(store: &Store, p: u16, id: &str) -> Result<RecordRepair> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.delayed())
        .key(keys.reserved())
        .key(keys.counts())
        .arg(keys.prefix())
        .arg(id)
        .arg(keys.ready_channel());
    match store.run::<i64>(p, &inv).await? {
        1 => Ok(RecordRepair::PutBack),
        0 => Ok(RecordRepair::Left),
        other => Err(Error::unexpected(Some(p), format!("repair_record returned {other}"))),
    }
}
