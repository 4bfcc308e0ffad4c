//! The quarantine's hash in each partition (`<prefix>:{<tag>}:quarantine`): records that could not be
//! decoded, by id. Scripts fill it (`record.lua`) and restore from it (`unquarantine.lua`).

use crate::error::Result;
use crate::store::Store;

/// Partition `p`'s quarantine entries: (id, entry as stored).
pub(crate) async fn entries(store: &Store, p: u16) -> Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(store.partition_keys(p).quarantine());
    store.query(p, &cmd).await
}

/// How many records partition `p` holds in quarantine.
pub(crate) async fn len(store: &Store, p: u16) -> Result<u64> {
    let mut cmd = redis::cmd("HLEN");
    cmd.arg(store.partition_keys(p).quarantine());
    store.query(p, &cmd).await
}

/// Deletes job `id`'s quarantined record in its partition `p`; whether it was there.
pub(crate) async fn remove(store: &Store, p: u16, id: &str) -> Result<bool> {
    let mut cmd = redis::cmd("HDEL");
    cmd.arg(store.partition_keys(p).quarantine()).arg(id);
    Ok(store.query::<u64>(p, &cmd).await? == 1)
}
