//! The topic registry and dead letters: registrations kept whole on every shard (so any shard can answer
//! while another is down), a cache that every process refreshes, and the dead-list verbs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::job::{Job, NewJob, PushRequest};
use crate::queue::{Queue, unix_ms};
use crate::scripts;
use crate::topic::TopicConfig;

/// Topic name → registration, as merged from the shards.
pub type Topics = BTreeMap<String, TopicConfig>;

/// A page of a topic's dead list.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeadPage {
    /// Dead jobs, oldest death first.
    pub jobs: Vec<Job>,
    /// Dead jobs of the topic in all.
    pub total: u64,
}

/// One shard's registry entries: topic → (version, config or `None` when deleted).
type Entries = HashMap<String, (u64, Option<TopicConfig>)>;

impl Queue {
    /// Registers (or replaces) a topic on every shard that answers. Fails only when none does.
    pub async fn put_topic(&self, name: &str, config: &TopicConfig) -> Result<()> {
        let json = serde_json::to_string(config).map_err(|e| Error::Invalid(e.to_string()))?;
        self.write_topic(name, &json).await
    }

    /// Deletes a topic's registration (its jobs stay). `NotFound` when it was not registered.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        if !self.topics().await?.contains_key(name) {
            return Err(Error::TopicNotFound(name.to_string()));
        }
        self.write_topic(name, "").await
    }

    async fn write_topic(&self, name: &str, json: &str) -> Result<()> {
        // Versions order writes: above both the clock and anything seen, so a later write always wins.
        let seen = self
            .read_entries()
            .await?
            .into_iter()
            .filter_map(|e| e.get(name).map(|(v, _)| *v))
            .max();
        let version = (unix_ms() as u64 * 1000).max(seen.map_or(0, |v| v + 1));
        let mut wrote = false;
        let mut last_err = None;
        for shard in self.shards().all() {
            let mut inv = scripts::TOPIC_SET.prepare_invoke();
            inv.key(self.keys().topics()).arg(name).arg(version).arg(json);
            match shard.invoke::<i64>(&inv).await {
                Ok(_) => wrote = true,
                Err(e) => last_err = Some(e),
            }
        }
        match (wrote, last_err) {
            (false, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Every shard's registry that answers (at least one must).
    async fn read_entries(&self) -> Result<Vec<Entries>> {
        let reads = self.shards().all().iter().map(|shard| async move {
            let raw: HashMap<String, String> = shard.query(redis::cmd("HGETALL").arg(self.keys().topics())).await?;
            let mut entries = Entries::new();
            for (topic, value) in raw {
                let (v, json) = value.split_once(' ').unwrap_or((value.as_str(), ""));
                let Ok(v) = v.parse::<u64>() else { continue };
                let config = if json.is_empty() {
                    None
                } else {
                    serde_json::from_str(json).ok()
                };
                entries.insert(topic, (v, config));
            }
            Ok::<_, Error>(entries)
        });
        let results = futures_util::future::join_all(reads).await;
        let mut ok = Vec::new();
        let mut last_err = None;
        for r in results {
            match r {
                Ok(e) => ok.push(e),
                Err(e) => last_err = Some(e),
            }
        }
        if ok.is_empty() {
            return Err(last_err.unwrap_or_else(|| Error::Unavailable {
                shard: 0,
                reason: "no shard".into(),
            }));
        }
        Ok(ok)
    }

    /// All registered topics, merged over the shards that answer: for each topic, the newest write wins.
    /// A shard found behind is brought up to date (it missed a write while it was down).
    pub async fn topics(&self) -> Result<Topics> {
        let per_shard = self.read_entries().await?;
        let mut newest: HashMap<String, (u64, Option<TopicConfig>)> = HashMap::new();
        for entries in &per_shard {
            for (topic, (v, config)) in entries {
                if newest.get(topic).is_none_or(|(have, _)| v > have) {
                    newest.insert(topic.clone(), (*v, config.clone()));
                }
            }
        }
        let behind = per_shard.iter().any(|e| {
            newest
                .iter()
                .any(|(t, (v, _))| e.get(t).is_none_or(|(have, _)| have < v))
        });
        if behind && per_shard.len() == self.shards().all().len() {
            for (topic, (v, config)) in &newest {
                let json = config
                    .as_ref()
                    .map(|c| serde_json::to_string(c).unwrap_or_default())
                    .unwrap_or_default();
                for shard in self.shards().all() {
                    let mut inv = scripts::TOPIC_SET.prepare_invoke();
                    inv.key(self.keys().topics()).arg(topic).arg(*v).arg(&json);
                    let _ = shard.invoke::<i64>(&inv).await;
                }
            }
        }
        Ok(newest.into_iter().filter_map(|(t, (_, c))| c.map(|c| (t, c))).collect())
    }

    /// Checks a push and fills in defaults from its topic's registration, then the global ones.
    pub fn validate_for(&self, req: PushRequest, topic: Option<&TopicConfig>) -> Result<NewJob> {
        let mut defaults = self.defaults().clone();
        let mut req = req;
        if let Some(t) = topic {
            if let Some(ttr) = t.defaults.ttr_ms {
                defaults.ttr_ms = ttr;
            }
            if let Some(m) = t.retry.max_attempts {
                defaults.max_attempts = m;
            }
            if let (Some(d), None, None) = (t.defaults.delay_ms, req.delay_ms, req.run_at) {
                req.delay_ms = Some(d as i64);
            }
        }
        NewJob::from_request(req, self.limits(), &defaults, unix_ms())
    }

    /// A page of a topic's dead list over all shards, oldest death first.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<DeadPage> {
        let key = self.keys().dead(topic);
        let mut all: Vec<(f64, String)> = Vec::new();
        let mut total = 0u64;
        for shard in self.shards().all() {
            let n: u64 = shard.query(redis::cmd("ZCARD").arg(&key)).await?;
            total += n;
            let page: Vec<(String, f64)> = shard
                .query(
                    redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg((offset + limit) as i64 - 1)
                        .arg("WITHSCORES"),
                )
                .await?;
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
        self.dead_op(ids, |shard_ids, all_limit| {
            let mut inv = scripts::REQUEUE.prepare_invoke();
            inv.key(self.keys().dead(topic))
                .key(self.keys().ready(topic))
                .key(self.keys().counts())
                .arg(self.keys().prefix())
                .arg(topic)
                .arg(self.keys().ready_channel())
                .arg(all_limit);
            for id in shard_ids {
                inv.arg(id);
            }
            inv
        })
        .await
    }

    /// Deletes dead jobs of `topic`: the given ids, else all of them.
    pub async fn purge_dead(&self, topic: &str, ids: Option<&[String]>) -> Result<u64> {
        self.dead_op(ids, |shard_ids, all_limit| {
            let mut inv = scripts::PURGE.prepare_invoke();
            inv.key(self.keys().dead(topic))
                .key(self.keys().counts())
                .arg(self.keys().prefix())
                .arg(topic)
                .arg(all_limit);
            for id in shard_ids {
                inv.arg(id);
            }
            inv
        })
        .await
    }

    /// Runs a dead-list script per shard: with the ids that live there, or in batches until the list is empty.
    async fn dead_op<'a>(
        &self,
        ids: Option<&[String]>,
        build: impl Fn(&[&String], u32) -> redis::ScriptInvocation<'a>,
    ) -> Result<u64> {
        const BATCH: u32 = 1000;
        let mut total = 0;
        for shard in self.shards().all() {
            match ids {
                Some(ids) => {
                    let mine: Vec<&String> = ids
                        .iter()
                        .filter(|id| self.shards().for_id(id).index == shard.index)
                        .collect();
                    for chunk in mine.chunks(BATCH as usize) {
                        let [done, _]: [u64; 2] = shard.invoke(&build(chunk, BATCH)).await?;
                        total += done;
                    }
                }
                // A full batch taken off the list means there may be more.
                None => loop {
                    let [done, removed]: [u64; 2] = shard.invoke(&build(&[], BATCH)).await?;
                    total += done;
                    if removed < BATCH as u64 {
                        break;
                    }
                },
            }
        }
        Ok(total)
    }

    /// Hands a reservation back unfinished: ready again at once, the delivery not counted.
    pub async fn release(&self, id: &str, receipt: &str) -> Result<()> {
        let shard = self.shards().for_id(id);
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(self.keys().job(id))
            .key(self.keys().reserved())
            .key(self.keys().counts())
            .arg(self.keys().prefix())
            .arg(id)
            .arg(receipt)
            .arg(self.keys().ready_channel());
        match shard.invoke::<i64>(&inv).await? {
            1 => Ok(()),
            0 => Err(Error::NotFound(id.to_string())),
            _ => Err(Error::StaleReceipt),
        }
    }
}

/// The registry as this process last read it, refreshed in the background so that registration changes
/// reach every process within `refresh` without a restart, at the cost of one HGETALL per shard.
#[derive(Debug, Default)]
pub struct TopicCache {
    /// The last merged registry.
    topics: RwLock<Arc<Topics>>,
}

impl TopicCache {
    /// The registry as last read.
    pub fn snapshot(&self) -> Arc<Topics> {
        self.topics.read().expect("topic cache lock").clone()
    }

    /// One topic's registration, if any.
    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.snapshot().get(topic).cloned()
    }

    /// Replaces the cached registry (after a read, or a write by this process).
    pub fn set(&self, topics: Topics) {
        *self.topics.write().expect("topic cache lock") = Arc::new(topics);
    }

    /// Reads the registry now, then every `refresh` until `shutdown`.
    pub async fn start(queue: Queue, refresh: Duration, shutdown: CancellationToken) -> Arc<TopicCache> {
        let cache = Arc::new(TopicCache::default());
        match queue.topics().await {
            Ok(t) => cache.set(t),
            Err(e) => tracing::warn!(cause = %e, "cannot read the topic registry yet"),
        }
        let me = cache.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(refresh) => {}
                    _ = shutdown.cancelled() => return,
                }
                match queue.topics().await {
                    Ok(t) => me.set(t),
                    Err(e) => tracing::debug!(cause = %e, "topic registry refresh failed"),
                }
            }
        });
        cache
    }
}
