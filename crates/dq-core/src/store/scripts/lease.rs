//! `lease.lua`: take or keep dq-checker's lease (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::store::Store;

script!(
    /// Take or keep a lease (dq-checker's: who sends alerts).
    SCRIPT,
    "lease.lua"
);

/// Who holds the lease after one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseReply {
    /// The caller: it took or renewed it.
    Held,
    /// Another checker.
    HeldByOther,
}

/// One `lease.lua` call: take or keep the checkers' lease as `who` for `ttl_ms`.
pub(crate) async fn call(store: &Store, who: &str, ttl_ms: u64) -> Result<LeaseReply> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(store.keys().checker_lease()).arg(who).arg(ttl_ms);
    match store.run_unpartitioned::<i64>(&inv).await? {
        1 => Ok(LeaseReply::Held),
        0 => Ok(LeaseReply::HeldByOther),
        other => Err(Error::unexpected(None, format!("lease returned {other}"))),
    }
}
