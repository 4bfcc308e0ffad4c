//! What dq asks each Redis node itself (not a partition's keys): the primaries, a round trip, `INFO`, and
//! whether RDB snapshots are on.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::connection::Node;

/// Every primary as the topology shows it now (the configured URLs as one node when it cannot be read).
pub(crate) async fn primaries(store: &Store) -> Vec<Node> {
    match store.redis.primaries().await {
        Ok(nodes) => nodes,
        Err(_) => vec![Node {
            name: store.redis.names().join(","),
            addr: None,
        }],
    }
}

/// PINGs `node`: its round trip.
pub(crate) async fn ping(store: &Store, node: &Node, timeout: Duration) -> Result<Duration> {
    store
        .redis
        .ping(node, timeout)
        .await
        .map_err(|e| Error::from_redis(None, e))
}

/// `node`'s `INFO`: the default sections, or only `section`, as Redis writes it.
pub(crate) async fn info(store: &Store, node: &Node, section: Option<&str>) -> Result<String> {
    let mut cmd = redis::cmd("INFO");
    if let Some(section) = section {
        cmd.arg(section);
    }
    store
        .redis
        .query_node(node, cmd)
        .await
        .map_err(|e| Error::from_redis(None, e))
}

/// `node`'s `save` setting (its RDB snapshot rules; empty for none), when it answers with one.
pub(crate) async fn save_rules(store: &Store, node: &Node) -> Result<Option<String>> {
    let save: Vec<String> = store
        .redis
        .query_node(node, redis::cmd("CONFIG").arg("GET").arg("save").clone())
        .await
        .map_err(|e| Error::from_redis(None, e))?;
    Ok(save.into_iter().nth(1))
}
