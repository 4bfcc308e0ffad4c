//! The dashboard's minute hashes (`{<prefix>}:activity:<minute>`, see [`crate::activity`]): read back
//! here, added to by `activity_add.lua`.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use crate::error::Result;
use crate::store::Store;

/// The fields of each minute's hash in `minutes` (Unix time in minutes), in order, in one pipeline
/// (empty for a minute without one).
pub(crate) async fn minutes(store: &Store, minutes: RangeInclusive<i64>) -> Result<Vec<HashMap<String, i64>>> {
    let mut pipe = redis::pipe();
    for m in minutes {
        pipe.cmd("HGETALL").arg(store.keys().activity(m));
    }
    store.pipe_unpartitioned(&pipe).await
}
