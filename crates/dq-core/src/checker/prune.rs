//! What dq-checker removes: dead jobs past their retention, counts fields left at 0, the registry's
//! tombstones; and the registry sealed again under the newest key.

use super::Checker;
use crate::admin::Admin;
use crate::admin::topics::stored_config;
use crate::error::{Error, Result};
use crate::store::scripts::counts_prune;
use crate::store::scripts::dead_delete::{self, Which};
use crate::store::scripts::topic_set::{self, TopicSetReply};
use crate::store::structures::{self, Structure};
use crate::topic::TopicRules;

/// Dead jobs one retention call removes.
const BATCH: u32 = crate::admin::dead::BATCH;

impl Checker {
    /// The admin verbs this role builds on (the registry's and dead lists' own writes).
    fn admin(&self) -> Admin {
        Admin(self.0.clone())
    }

    /// Deletes the dead jobs of `topic` in partition `p` that died at least `age_ms` ago (Redis's
    /// clock), in batches: dq-checker's retention.
    pub async fn delete_dead_older(&self, p: u16, topic: &str, age_ms: u64) -> Result<u64> {
        let mut total = 0;
        loop {
            let which: Which<&str> = Which::OlderThan { limit: BATCH, age_ms };
            let batch = dead_delete::call(&self.store, p, topic, which).await?;
            total += batch.deleted;
            if batch.removed < BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// The `n` oldest deaths of `topic` in partition `p`, as (time of death in ms, id), oldest first.
    pub async fn oldest_dead(&self, p: u16, topic: &str, n: usize) -> Result<Vec<(f64, String)>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let page = structures::head(&self.store, p, Structure::Dead(topic), n as i64 - 1).await?;
        Ok(page.into_iter().map(|(id, at)| (at, id)).collect())
    }

    /// Removes the counts fields of partition `p` among `fields` that are still 0. Returns how many went.
    pub async fn prune_zero_counts(&self, p: u16, fields: &[String]) -> Result<u64> {
        counts_prune::call(&self.store, p, fields).await
    }

    /// Seals again, under the first key of `secrets.keys`, every registration holding a value sealed
    /// under another key or not sealed at all, each only if nobody changed it meanwhile. Returns the
    /// topics rewritten; a registration that cannot be opened here is an error naming it.
    pub async fn rekey_topics(&self) -> Result<Vec<String>> {
        let mut done = Vec::new();
        if !self.sealer().seals() {
            return Err(Error::Invalid("no key to seal with: set secrets.keys".into()));
        }
        for (topic, raw) in self.admin().raw_topics().await? {
            let Some((_, json)) = raw.split_once(' ') else { continue };
            let Ok(stored) = stored_config(json) else {
                continue;
            };
            if !stored.is_stale(self.sealer()) {
                continue;
            }
            let config = stored
                .opened(&topic, self.sealer())
                .map_err(|e| Error::Invalid(format!("topic `{topic}`: {e}")))?;
            if self
                .admin()
                .write_topic(&topic, Some(&self.admin().stored_form(&topic, &config)?), Some(&raw))
                .await?
            {
                done.push(topic);
            }
        }
        Ok(done)
    }

    /// Removes the tombstones (`"<version> "`, a deleted registration) that releases before this one
    /// left in the registry, each only if it is still a tombstone. Returns how many went.
    pub async fn prune_topic_tombstones(&self) -> Result<u64> {
        let raw = self.admin().raw_topics().await?;
        let mut pruned = 0;
        for (topic, value) in raw {
            if value.split_once(' ').is_some_and(|(_, json)| json.is_empty()) {
                let reply = topic_set::call(&self.store, &topic, None, Some(&value)).await?;
                pruned += u64::from(reply == TopicSetReply::Deleted);
            }
        }
        Ok(pruned)
    }
}
