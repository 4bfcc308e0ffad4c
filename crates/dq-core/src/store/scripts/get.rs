//! `get.lua`: read job records of one partition, decoded (see its header for KEYS and ARGV).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

use crate::error::Result;
use crate::store::Store;

script!(
    /// Read job records (look up, the dead list's pages, the audit).
    SCRIPT,
    record + "get.lua"
);

/// One record's fields, by their names in `record.lua` (every value a string); empty when there is no
/// record.
pub(crate) type Fields = HashMap<String, Vec<u8>>;

/// One `get.lua` call on partition `p`: the records at `records` (job keys of `p`), each with the fields
/// `fields` names (none: every field it has), in the order of `records`.
pub(crate) async fn call(store: &Store, p: u16, records: &[String], fields: &[&str]) -> Result<Vec<Fields>> {
    let mut inv = SCRIPT.prepare_invoke();
    for key in records {
        inv.key(key);
    }
    for field in fields {
        inv.arg(*field);
    }
    store.run(p, &inv).await
}
