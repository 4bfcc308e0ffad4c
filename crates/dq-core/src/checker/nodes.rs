//! What dq-checker asks each Redis node and each ready queue directly: a node's round trip, its `INFO`
//! and whether RDB snapshots are on; the oldest ready job of a topic.

use std::time::Duration;

use super::Checker;
use crate::error::Result;
use crate::store::connection::Node;
use crate::store::nodes;
use crate::store::ready::due_of_score;

impl Checker {
    /// PINGs `node`: its round trip.
    pub async fn ping(&self, node: &Node, timeout: Duration) -> Result<Duration> {
        nodes::ping(&self.store, node, timeout).await
    }

    /// `node`'s `INFO` (every default section), as Redis writes it.
    pub async fn info(&self, node: &Node) -> Result<String> {
        nodes::info(&self.store, node, None).await
    }

    /// Whether `node` writes RDB snapshots (its `save` has rules).
    pub async fn rdb_on(&self, node: &Node) -> Result<bool> {
        let rules = nodes::save_rules(&self.store, node).await?;
        Ok(rules.is_some_and(|rules| !rules.trim().is_empty()))
    }

    /// The earliest due time (Unix ms) of the jobs first in line in `topic`'s ready queues, over every
    /// partition (the first in line is the most urgent by priority: with priorities in use, an older job
    /// of a lower priority may wait behind it); partitions that do not answer are left out.
    pub async fn oldest_ready(&self, topic: &str) -> Option<f64> {
        let heads = self.partitions.all().map(|p| self.0.ready_head(p, topic));
        futures_util::future::join_all(heads)
            .await
            .into_iter()
            .filter_map(|head| head.ok().flatten().and_then(|(_, score)| due_of_score(score)))
            .map(|due| due as f64)
            .reduce(f64::min)
    }
}
