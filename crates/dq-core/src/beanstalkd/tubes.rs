//! What the protocol listener keeps beside the jobs, all in the `{<prefix>}` slot (keys of no
//! partition, so no partition is marked up or down by the answer): the tube names of made topics, the
//! paused tubes, every server's counters and gauges, and the head of a tube's ready queue.

use std::collections::HashMap;

use super::Beanstalkd;
use crate::error::Result;
use crate::store::beanstalkd::{self as store, Hash};
use crate::store::ready::priority_floor;
use crate::store::structures::{self, Structure};

impl Beanstalkd {
    /// Stores the tube name of the made topic `topic` (see [`super::topic_of_tube`]).
    pub async fn store_tube_name(&self, topic: &str, name: &str) -> Result<()> {
        store::set_tube_name(&self.store, topic, name).await
    }

    /// The tube name stored for the made topic `topic`, if any.
    pub async fn stored_tube_name(&self, topic: &str) -> Result<Option<String>> {
        store::tube_name(&self.store, topic).await
    }

    /// `pause-tube`: stores that `topic` is paused until `until` (Redis's clock, Unix ms) for `secs`.
    pub async fn pause(&self, topic: &str, until: i64, secs: u32) -> Result<()> {
        store::set_pause(&self.store, topic, &format!("{until} {secs}")).await
    }

    /// The stored pauses: topic → `<until ms> <secs>`.
    pub async fn pauses(&self) -> Result<Hash> {
        store::pauses(&self.store).await
    }

    /// Forgets the pause of `topic` (long over).
    pub async fn forget_pause(&self, topic: &str) -> Result<()> {
        store::forget_pause(&self.store, topic).await
    }

    /// The counters every server has written: name → count.
    pub async fn written_counters(&self) -> Result<Hash> {
        store::counters(&self.store).await
    }

    /// The servers whose gauges have not expired at `now_ms`.
    pub async fn live_servers(&self, now_ms: i64) -> Result<Vec<String>> {
        store::live_servers(&self.store, now_ms).await
    }

    /// Server `id`'s gauges as it last wrote them.
    pub async fn server_gauges(&self, id: &str) -> Result<Hash> {
        store::server_gauges(&self.store, id).await
    }

    /// One write of server `id`'s counts (added to every server's) and gauges (replacing its own, kept
    /// `ttl_ms` from `now_ms`); `gauges: None` is its last write, which takes its gauges away.
    pub async fn write_counters(
        &self,
        id: &str,
        counts: &HashMap<String, i64>,
        gauges: Option<Vec<(String, i64)>>,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<()> {
        store::write_counters(&self.store, id, counts, gauges, now_ms, ttl_ms).await
    }

    /// The first ready job of `topic` in its home partition `p`, as (score, id): what a reserve of it
    /// would take first.
    pub async fn ready_head(&self, p: u16, topic: &str) -> Result<Option<(f64, String)>> {
        Ok(self.0.ready_head(p, topic).await?.map(|(id, score)| (score, id)))
    }

    /// Ready jobs of `topic` with a priority below `below`, over every partition.
    pub async fn ready_below(&self, topic: &str, below: u32) -> Result<u64> {
        let floor = priority_floor(below);
        let reads = self
            .partitions
            .all()
            .map(|p| structures::count_below(&self.store, p, Structure::Ready(topic), floor));
        let mut n = 0;
        for r in futures_util::future::join_all(reads).await {
            n += r?;
        }
        Ok(n)
    }
}
