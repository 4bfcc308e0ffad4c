//! What the consistency audit reads (see [`crate::checker::audit`]): the keys of every partition by
//! kind, whether ids are in the structures their records name, the members of a structure, and whether
//! ids have records. Its repairs are scripts (`repair_record.lua`, `repair_member.lua`).

use redis::Value;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::structures::Structure;

/// Every key of every partition whose name has `what` after the partition's tag (`job`, `ready`,
/// `dead`: `<prefix>:{<tag>}:<what>:…`), over every node.
pub(crate) async fn keys_of(store: &Store, what: &str) -> Result<Vec<String>> {
    let pattern = format!("{}:{{*}}:{what}:*", store.keys().prefix());
    store.redis.scan(&pattern).await.map_err(|e| Error::from_redis(None, e))
}

/// For each (structure, id) of partition `p`, whether the id is in the structure, in one pipeline.
pub(crate) async fn listed(store: &Store, p: u16, members: &[(Structure<'_>, &str)]) -> Result<Vec<bool>> {
    let keys = store.partition_keys(p);
    let mut pipe = redis::pipe();
    for (structure, id) in members {
        pipe.cmd("ZSCORE").arg(structure.key(keys)).arg(*id);
    }
    let scores: Vec<Value> = store
        .redis
        .pipe(&pipe)
        .await
        .map_err(|e| Error::from_redis(Some(p), e))?;
    Ok(scores.into_iter().map(|score| score != Value::Nil).collect())
}

/// One step of a scan of the sorted set `key` of partition `p`: from `cursor`, about `count` ids and the
/// cursor to go on from (0 at the end).
pub(crate) async fn members(store: &Store, p: u16, key: &str, cursor: u64, count: usize) -> Result<(u64, Vec<String>)> {
    let cmd = redis::cmd("ZSCAN").arg(key).arg(cursor).arg("COUNT").arg(count).clone();
    let (next, flat): (u64, Vec<String>) = store.query(p, &cmd).await?;
    // Members and scores alternate.
    Ok((next, flat.into_iter().step_by(2).collect()))
}

/// For each of `ids` (of partition `p`), whether it has a job record, in one pipeline.
pub(crate) async fn have_records(store: &Store, p: u16, ids: &[String]) -> Result<Vec<bool>> {
    let keys = store.partition_keys(p);
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("EXISTS").arg(keys.job(id));
    }
    let exists: Vec<i64> = store
        .redis
        .pipe(&pipe)
        .await
        .map_err(|e| Error::from_redis(Some(p), e))?;
    Ok(exists.into_iter().map(|e| e == 1).collect())
}
