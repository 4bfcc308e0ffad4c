//! What dq-checker removes: dead jobs past their retention, counts fields left at 0, the registry's
//! tombstones; and the registry sealed again under the newest key.

use super::Checker;
use crate::admin::Admin;
use crate::admin::topics::stored_config;
use crate::error::{Error, Result};
use crate::store::scripts;
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
            let inv = self.admin().delete_dead_invocation(p, topic, BATCH, Some(age_ms), &[]);
            let [done, removed]: [u64; 2] = self.write(p, &inv).await?;
            total += done;
            if removed < BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// The `n` oldest deaths of `topic` in partition `p`, as (time of death in ms, id), oldest first.
    pub async fn oldest_dead(&self, p: u16, topic: &str, n: usize) -> Result<Vec<(f64, String)>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let cmd = redis::cmd("ZRANGE")
            .arg(self.partition_keys(p).dead(topic))
            .arg(0)
            .arg(n as i64 - 1)
            .arg("WITHSCORES")
            .clone();
        let page: Vec<(String, f64)> = self.query(p, &cmd).await?;
        Ok(page.into_iter().map(|(id, at)| (at, id)).collect())
    }

    /// Removes the counts fields of partition `p` among `fields` that are still 0. Returns how many went.
    pub async fn prune_zero_counts(&self, p: u16, fields: &[String]) -> crate::error::Result<u64> {
        let mut inv = crate::store::scripts::COUNTS_PRUNE.prepare_invoke();
        inv.key(self.partition_keys(p).counts());
        for f in fields {
            inv.arg(f);
        }
        self.write(p, &inv).await
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
                .write_topic(&topic, &self.admin().stored_form(&topic, &config)?, Some(&raw))
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
                let mut inv = scripts::TOPIC_SET.prepare_invoke();
                inv.key(self.keys().topics()).arg(&topic).arg("").arg(&value);
                let done: i64 = self
                    .redis()
                    .invoke(&inv)
                    .await
                    .map_err(|e| Error::from_redis(None, e))?;
                pruned += u64::from(done == 0);
            }
        }
        Ok(pruned)
    }
}
