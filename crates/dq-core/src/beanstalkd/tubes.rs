//! What the protocol listener keeps beside the jobs, all in the `{<prefix>}` slot (keys of no
//! partition, so no partition is marked up or down by the answer): the tube names of made topics, the
//! paused tubes, every server's counters and gauges, and the head of a tube's ready queue.

use std::collections::HashMap;

use super::Beanstalkd;
use crate::error::{Error, Result};

/// A `{<prefix>}`-slot hash, as stored.
type Hash = HashMap<String, String>;

impl Beanstalkd {
    /// Stores the tube name of the made topic `topic` (see [`super::topic_of_tube`]).
    pub async fn store_tube_name(&self, topic: &str, name: &str) -> Result<()> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys.bs_tubes()).arg(topic).arg(name);
        self.slot_query(&cmd).await
    }

    /// The tube name stored for the made topic `topic`, if any.
    pub async fn stored_tube_name(&self, topic: &str) -> Result<Option<String>> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.bs_tubes()).arg(topic);
        self.slot_query(&cmd).await
    }

    /// `pause-tube`: stores that `topic` is paused until `until` (Redis's clock, Unix ms) for `secs`.
    pub async fn pause(&self, topic: &str, until: i64, secs: u32) -> Result<()> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys.bs_paused()).arg(topic).arg(format!("{until} {secs}"));
        self.slot_query(&cmd).await
    }

    /// The stored pauses: topic → `<until ms> <secs>`.
    pub async fn pauses(&self) -> Result<Hash> {
        self.hash(&self.keys.bs_paused()).await
    }

    /// Forgets the pause of `topic` (long over).
    pub async fn forget_pause(&self, topic: &str) -> Result<()> {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.keys.bs_paused()).arg(topic);
        self.slot_query(&cmd).await
    }

    /// The counters every server has written: name → count.
    pub async fn written_counters(&self) -> Result<Hash> {
        self.hash(&self.keys.bs_stats()).await
    }

    /// The servers whose gauges have not expired at `now_ms`.
    pub async fn live_servers(&self, now_ms: i64) -> Result<Vec<String>> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(self.keys.bs_servers()).arg(now_ms).arg("+inf").arg("BYSCORE");
        self.slot_query(&cmd).await
    }

    /// Server `id`'s gauges as it last wrote them.
    pub async fn server_gauges(&self, id: &str) -> Result<Hash> {
        self.hash(&self.keys.bs_server(id)).await
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
        let keys = &self.keys;
        let own = keys.bs_server(id);
        let mut pipe = redis::pipe();
        for (field, n) in counts {
            pipe.cmd("HINCRBY").arg(keys.bs_stats()).arg(field).arg(n).ignore();
        }
        pipe.cmd("DEL").arg(&own).ignore();
        match gauges {
            None => {
                pipe.cmd("ZREM").arg(keys.bs_servers()).arg(id).ignore();
            }
            Some(fields) => {
                pipe.cmd("HSET").arg(&own).arg(fields).ignore();
                pipe.cmd("PEXPIRE").arg(&own).arg(ttl_ms).ignore();
                pipe.cmd("ZADD")
                    .arg(keys.bs_servers())
                    .arg(now_ms + ttl_ms)
                    .arg(id)
                    .ignore();
                pipe.cmd("ZREMRANGEBYSCORE")
                    .arg(keys.bs_servers())
                    .arg("-inf")
                    .arg(now_ms)
                    .ignore();
            }
        }
        self.redis
            .pipe::<()>(&pipe)
            .await
            .map_err(|e| Error::from_redis(None, e))
    }

    /// The first ready job of `topic` in its home partition `p`, as (score, id): what a reserve of it
    /// would take first.
    pub async fn ready_head(&self, p: u16, topic: &str) -> Result<Option<(f64, String)>> {
        Ok(self.0.ready_head(p, topic).await?.map(|(id, score)| (score, id)))
    }

    /// Ready jobs of `topic` with a priority below `below`, over every partition.
    pub async fn ready_below(&self, topic: &str, below: u64) -> Result<u64> {
        let reads = self.partitions.all().map(|p| async move {
            let mut cmd = redis::cmd("ZCOUNT");
            cmd.arg(self.partition_keys(p).ready(topic)).arg("-inf").arg(below - 1);
            self.query::<u64>(p, &cmd).await
        });
        let mut n = 0;
        for r in futures_util::future::join_all(reads).await {
            n += r?;
        }
        Ok(n)
    }

    async fn hash(&self, key: &str) -> Result<Hash> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(key);
        self.slot_query(&cmd).await
    }

    async fn slot_query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.redis.query(cmd).await.map_err(|e| Error::from_redis(None, e))
    }
}
