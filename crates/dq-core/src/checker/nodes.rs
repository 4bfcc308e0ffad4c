//! What dq-checker asks each Redis node and each ready queue directly: a node's round trip, its `INFO`
//! and whether RDB snapshots are on; the oldest ready job of a topic.

use std::time::Duration;

use super::Checker;
use crate::error::{Error, Result};
use crate::store::connection::Node;

impl Checker {
    /// PINGs `node`: its round trip.
    pub async fn ping(&self, node: &Node, timeout: Duration) -> Result<Duration> {
        self.redis
            .ping(node, timeout)
            .await
            .map_err(|e| Error::from_redis(None, e))
    }

    /// `node`'s `INFO` (every default section), as Redis writes it.
    pub async fn info(&self, node: &Node) -> Result<String> {
        self.redis
            .query_node(node, redis::cmd("INFO"))
            .await
            .map_err(|e| Error::from_redis(None, e))
    }

    /// Whether `node` writes RDB snapshots (its `save` has rules).
    pub async fn rdb_on(&self, node: &Node) -> Result<bool> {
        let save: Vec<String> = self
            .redis
            .query_node(node, redis::cmd("CONFIG").arg("GET").arg("save").clone())
            .await
            .map_err(|e| Error::from_redis(None, e))?;
        Ok(save.get(1).is_some_and(|rules| !rules.trim().is_empty()))
    }

    /// The score (due time, Unix ms) of the oldest ready job of `topic` over every partition; partitions
    /// that do not answer are left out.
    pub async fn oldest_ready(&self, topic: &str) -> Option<f64> {
        let heads = self.partitions.all().map(|p| self.0.ready_head(p, topic));
        futures_util::future::join_all(heads)
            .await
            .into_iter()
            .filter_map(|head| head.ok().flatten().map(|(_, score)| score))
            .reduce(f64::min)
    }
}
