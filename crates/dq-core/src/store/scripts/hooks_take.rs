//! `hooks_take.lua`: hand out a partition's due hooks (dead-job or success), each claimed while it is
//! sent (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::checker::HookKind;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::decode::{int, text};

script!(
    /// Hand out due hooks, claimed while they are sent (dq-checker).
    SCRIPT,
    "hooks_take.lua"
);

/// What one take handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DueHooks {
    /// The due hooks' entries as stored, earliest first.
    pub(crate) due: Vec<String>,
    /// How many hooks the partition holds, due or not.
    pub(crate) held: u64,
}

/// One `hooks_take.lua` call on partition `p`: up to `max` due hooks of `kind`, each claimed for
/// `claim_ms`.
pub(crate) async fn call(store: &Store, p: u16, kind: HookKind, max: usize, claim_ms: u64) -> Result<DueHooks> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(kind.key(store.partition_keys(p))).arg(max).arg(claim_ms);
    let reply: Vec<Value> = store.run(p, &inv).await?;
    let malformed = || Error::unexpected(Some(p), "hooks_take returned a malformed answer");
    let (held, due) = reply.split_first().ok_or_else(malformed)?;
    Ok(DueHooks {
        held: int(held).ok_or_else(malformed)?.max(0) as u64,
        due: due
            .iter()
            .map(|e| text(e).ok_or_else(malformed))
            .collect::<Result<_>>()?,
    })
}
