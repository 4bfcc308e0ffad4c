//! `bs_kick.lua`: beanstalkd's kick of one buried or delayed job (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use super::Waking;
use crate::error::Result;
use crate::store::Store;

script!(
    /// beanstalkd's kick of one buried or delayed job.
    SCRIPT,
    record + flow + publish + "bs_kick.lua"
);

/// What one kick came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BsKickReply {
    /// The job is in its topic's ready queue now.
    Kicked {
        /// The job's topic.
        topic: String,
    },
    /// The job is neither buried nor delayed, or there is none: nothing changed.
    NotKickable,
}

/// One `bs_kick.lua` call for job `id` (in its partition `p`).
pub(crate) async fn call(store: &Store, p: u16, id: &str) -> Result<BsKickReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.delayed())
        .key(keys.counts())
        .arg(keys.prefix())
        .arg(id)
        .arg(keys.ready_channel());
    let topic: Option<String> = store.write(p, &inv).await?;
    Ok(match topic {
        Some(topic) => BsKickReply::Kicked { topic },
        None => BsKickReply::NotKickable,
    })
}
