//! Dead lists: a topic's dead jobs over every partition, requeue and delete.

use super::Admin;
use crate::error::Result;
use crate::store::scripts;

pub use dq_api::DeadPage;

/// Jobs one dead-list script call handles at most.
pub(crate) const BATCH: u32 = 1000;

impl Admin {
    /// A page of a topic's dead list over all partitions, oldest death first.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<DeadPage> {
        let reads = self.partitions.all().map(|p| async move {
            let key = self.partition_keys(p).dead(topic);
            let mut pipe = redis::pipe();
            pipe.cmd("ZCARD")
                .arg(&key)
                .cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg((offset + limit) as i64 - 1)
                .arg("WITHSCORES");
            let r: redis::RedisResult<(u64, Vec<(String, f64)>)> = self.redis.pipe(&pipe).await;
            self.settle(p, r)
        });
        let mut all: Vec<(f64, String)> = Vec::new();
        let mut total = 0u64;
        for read in futures_util::future::join_all(reads).await {
            let (n, page) = read?;
            total += n;
            all.extend(page.into_iter().map(|(id, score)| (score, id)));
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let page: Vec<String> = all.into_iter().skip(offset).take(limit).map(|(_, id)| id).collect();
        let jobs = self.get_many(&page).await?.into_iter().flatten().collect();
        Ok(DeadPage { jobs, total })
    }

    /// Moves dead jobs of `topic` back to ready with fresh attempts: the given ids, else all of them.
    /// (A dead id without a record is dropped from the list and not counted.)
    pub async fn requeue_dead(&self, topic: &str, ids: Option<&[String]>) -> Result<u64> {
        self.dead_op(ids, |p, ids, all_limit| {
            let keys = self.partition_keys(p);
            let mut inv = self.script(&scripts::REQUEUE).prepare_invoke();
            inv.key(keys.dead(topic))
                .key(keys.ready(topic))
                .key(keys.counts())
                .arg(keys.prefix())
                .arg(topic)
                .arg(keys.ready_channel())
                .arg(all_limit);
            for id in ids {
                inv.arg(id);
            }
            inv
        })
        .await
    }

    /// Deletes dead jobs of `topic`: the given ids, else all of them.
    pub async fn delete_dead(&self, topic: &str, ids: Option<&[String]>) -> Result<u64> {
        self.dead_op(ids, |p, ids, all_limit| {
            self.delete_dead_invocation(p, topic, all_limit, None, ids)
        })
        .await
    }

    /// `dead_delete.lua` on partition `p`: the given ids, else up to `limit` of the oldest deaths (only those
    /// dead for at least `age_ms`, when given).
    pub(crate) fn delete_dead_invocation<'a>(
        &self,
        p: u16,
        topic: &str,
        limit: u32,
        age_ms: Option<u64>,
        ids: &[&String],
    ) -> redis::ScriptInvocation<'a> {
        let keys = self.partition_keys(p);
        let mut inv = scripts::DEAD_DELETE.prepare_invoke();
        inv.key(keys.dead(topic))
            .key(keys.counts())
            .arg(keys.prefix())
            .arg(topic)
            .arg(limit)
            .arg(age_ms.map(|a| a.to_string()).unwrap_or_default());
        for id in ids {
            inv.arg(id);
        }
        inv
    }

    /// Runs a dead-list script per partition: with the ids that live there, or in batches until the list
    /// is empty.
    async fn dead_op<'a>(
        &'a self,
        ids: Option<&[String]>,
        build: impl Fn(u16, &[&String], u32) -> redis::ScriptInvocation<'a>,
    ) -> Result<u64> {
        let mut total = 0;
        for p in self.partitions.all() {
            match ids {
                Some(ids) => {
                    let mine: Vec<&String> = ids.iter().filter(|id| self.partitions.of_id(id) == p).collect();
                    for chunk in mine.chunks(BATCH as usize) {
                        let [done, _]: [u64; 2] = self.write(p, &build(p, chunk, BATCH)).await?;
                        total += done;
                    }
                }
                // A full batch taken off the list means there may be more.
                None => loop {
                    let [done, removed]: [u64; 2] = self.write(p, &build(p, &[], BATCH)).await?;
                    total += done;
                    if removed < BATCH as u64 {
                        break;
                    }
                },
            }
        }
        Ok(total)
    }
}
