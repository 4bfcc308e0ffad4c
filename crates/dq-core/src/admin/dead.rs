//! Dead lists: a topic's dead jobs over every partition, requeue and delete.

use super::Admin;
use crate::error::Result;
use crate::store::scripts::{dead_delete, requeue};
use crate::store::structures::{self, Structure};

pub use dq_api::DeadPage;

/// Jobs one dead-list script call handles at most.
pub(crate) const BATCH: u32 = 1000;

impl Admin {
    /// A page of a topic's dead list over all partitions, oldest death first.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<DeadPage> {
        let reads = self.partitions.all().map(|p| async move {
            structures::len_and_head(&self.store, p, Structure::Dead(topic), (offset + limit) as i64 - 1).await
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
        self.dead_op(topic, ids, DeadAct::Requeue).await
    }

    /// Deletes dead jobs of `topic`: the given ids, else all of them.
    pub async fn delete_dead(&self, topic: &str, ids: Option<&[String]>) -> Result<u64> {
        self.dead_op(topic, ids, DeadAct::Delete).await
    }

    /// Does `act` per partition: with the ids that live there, or in batches until the list is empty.
    async fn dead_op(&self, topic: &str, ids: Option<&[String]>, act: DeadAct) -> Result<u64> {
        let mut total = 0;
        for p in self.partitions.all() {
            match ids {
                Some(ids) => {
                    let mine: Vec<&String> = ids.iter().filter(|id| self.partitions.of_id(id) == p).collect();
                    for chunk in mine.chunks(BATCH as usize) {
                        let (done, _) = self.dead_batch(p, topic, act, Some(chunk)).await?;
                        total += done;
                    }
                }
                // A full batch taken off the list means there may be more.
                None => loop {
                    let (done, removed) = self.dead_batch(p, topic, act, None).await?;
                    total += done;
                    if removed < BATCH as u64 {
                        break;
                    }
                },
            }
        }
        Ok(total)
    }

    /// One script call of `act` on partition `p`: the given ids, else up to [`BATCH`] of the oldest
    /// deaths. Returns (jobs requeued or deleted, ids taken off the list).
    async fn dead_batch(&self, p: u16, topic: &str, act: DeadAct, ids: Option<&[&String]>) -> Result<(u64, u64)> {
        match act {
            DeadAct::Requeue => {
                let which = match ids {
                    Some(ids) => requeue::Which::Ids(ids),
                    None => requeue::Which::Oldest(BATCH),
                };
                let r = requeue::call(&self.store, p, topic, which).await?;
                Ok((r.requeued, r.removed))
            }
            DeadAct::Delete => {
                let which = match ids {
                    Some(ids) => dead_delete::Which::Ids(ids),
                    None => dead_delete::Which::Oldest(BATCH),
                };
                let d = dead_delete::call(&self.store, p, topic, which).await?;
                Ok((d.deleted, d.removed))
            }
        }
    }
}

/// What a dead-list operation does to each job.
#[derive(Debug, Clone, Copy)]
enum DeadAct {
    /// Back to ready.
    Requeue,
    /// Deleted.
    Delete,
}
