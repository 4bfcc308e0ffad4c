//! Where ready jobs are: the counts of a partition's ready jobs per topic, which the ready index syncs
//! from.

use super::Store;
use crate::error::Result;

impl Store {
    /// The ready jobs of each of `topics` in partition `p`, as its counts hash says, in the order of
    /// `topics` (0 for a topic it has no count of).
    pub(crate) async fn ready_counts(&self, p: u16, topics: &[String]) -> Result<Vec<i64>> {
        let fields: Vec<String> = topics.iter().map(|t| format!("{t}:ready")).collect();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.partition_keys(p).counts()).arg(&fields);
        let counts: Vec<Option<i64>> = self.query(p, &cmd).await?;
        Ok(counts.into_iter().map(|n| n.unwrap_or(0)).collect())
    }
}
