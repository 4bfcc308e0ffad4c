//! A job's history of delivery attempts (see [`crate::attempt`]).

use super::Producer;
use crate::attempt::{self, Attempt};
use crate::error::{Error, Result};

impl Producer {
    /// The job's deliveries so far and its kept attempts, the newest first (at most 20). `NotFound`
    /// when there is no such job.
    pub async fn attempts(&self, id: &str) -> Result<(u32, Vec<Attempt>)> {
        let p = self.partitions.of_id(id);
        let key = self.partition_keys(p).job(id);
        let mut records = self.read_records(p, &[key], &["s", "a", "h"]).await?;
        let fields = records.pop().unwrap_or_default();
        if !fields.contains_key("s") {
            return Err(Error::NotFound(id.to_string()));
        }
        let count = fields
            .get("a")
            .and_then(|a| std::str::from_utf8(a).ok()?.parse().ok())
            .unwrap_or(0);
        let history = fields.get("h").map(|h| attempt::unpack(h)).unwrap_or_default();
        Ok((count, history))
    }
}
