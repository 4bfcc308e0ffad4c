//! Each partition's job counts (`<prefix>:{<tag>}:counts`: `<topic>:<state>` → count), which the
//! scripts keep as they move jobs.

use std::collections::HashMap;

use crate::error::Result;
use crate::store::Store;

/// Every counts field of partition `p`, as stored (fields at 0 included).
pub(crate) async fn all(store: &Store, p: u16) -> Result<HashMap<String, i64>> {
    let cmd = redis::cmd("HGETALL").arg(store.partition_keys(p).counts()).clone();
    store.query(p, &cmd).await
}
