//! `hooks_retry.lua`: a hook's try failed: schedule the next one (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::checker::HookKind;
use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// A hook's try failed: schedule the next one (dq-checker).
    SCRIPT,
    "hooks_retry.lua"
);

/// What one retry came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryReply {
    /// The hook waits for its next try.
    Scheduled,
    /// The hook was no longer there (sent or given up meanwhile): nothing changed.
    Gone,
}

/// One `hooks_retry.lua` call on partition `p`: the hook of `kind` stored as `entry` becomes `next`
/// (one more failed try counted), due in `wait_ms`.
pub(crate) async fn call(
    store: &Store,
    p: u16,
    kind: HookKind,
    entry: &str,
    next: &str,
    wait_ms: u64,
) -> Result<RetryReply> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(kind.key(store.partition_keys(p)))
        .arg(entry)
        .arg(next)
        .arg(wait_ms);
    match store.run::<i64>(p, &inv).await? {
        1 => Ok(RetryReply::Scheduled),
        0 => Ok(RetryReply::Gone),
        other => Err(Error::unexpected(Some(p), format!("hooks_retry returned {other}"))),
    }
}
