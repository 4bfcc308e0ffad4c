//! `bs_release.lua`: beanstalkd's release and bury of a reserved job (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::decode::{int, text};

script!(
    /// beanstalkd's release and bury (the protocol listener in dq-server).
    SCRIPT,
    record + flow + publish + "bs_release.lua"
);

/// What one release or bury came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BsReleaseReply {
    /// Released: in its topic's ready queue now.
    Ready {
        /// The job's topic.
        topic: String,
    },
    /// Released with a delay: in the delay set now.
    Delayed,
    /// Buried: in its topic's dead list now.
    Buried,
    /// No job has this id.
    NoJob,
    /// The job is not reserved under that receipt (its reservation ended): nothing changed.
    StaleReceipt,
}

/// One `bs_release.lua` call for job `id` (in its partition `p`) reserved under `receipt`, with its new
/// `priority`: released after `delay_ms` (0: ready now), or buried (`None`).
pub(crate) async fn call(
    store: &Store,
    p: u16,
    id: &str,
    receipt: &str,
    priority: u32,
    delay_ms: Option<u64>,
    entry: &[u8],
) -> Result<BsReleaseReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.reserved())
        .key(keys.delayed())
        .key(keys.counts())
        .arg(keys.prefix())
        .arg(id)
        .arg(receipt)
        .arg(priority);
    match delay_ms {
        Some(d) => inv.arg(d),
        None => inv.arg(""),
    };
    inv.arg(keys.ready_channel()).arg(keys.timer_channel()).arg(entry);
    let out: Vec<Value> = store.write(p, &inv).await?;
    let malformed = || Error::unexpected(Some(p), "bs_release returned a malformed answer");
    match out.first().and_then(int) {
        Some(1) => match out.get(1).and_then(text).as_deref() {
            Some("ready") => Ok(BsReleaseReply::Ready {
                topic: out.get(2).and_then(text).ok_or_else(malformed)?,
            }),
            Some("delayed") => Ok(BsReleaseReply::Delayed),
            Some("dead") => Ok(BsReleaseReply::Buried),
            _ => Err(malformed()),
        },
        Some(0) => Ok(BsReleaseReply::NoJob),
        Some(-1) => Ok(BsReleaseReply::StaleReceipt),
        _ => Err(malformed()),
    }
}
