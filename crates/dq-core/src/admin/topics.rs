//! The topic registry: registrations in one hash (`{<prefix>}:topics`), written with versions so the
//! newest write wins, and a cache that every process refreshes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Admin;
use crate::condition::Condition;
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::store::registry;
use crate::store::scripts::topic_set::{self, TopicSetReply};
use crate::topic::{TopicConfig, TopicRules};

/// Topic name → registration.
pub type Topics = BTreeMap<String, TopicConfig>;

/// The key that marks a stored registration's format, and this release's format: 2, conditions with the
/// seed's meaning (`{res…}` the JSON answer, `{http.status}`, `{http.body}`). A registration without the
/// key was stored before: its condition meant `{res.code}` the HTTP status, `{res.body}` the raw body and
/// `{res.data…}` the JSON answer, and is read as the same condition in today's terms.
pub const FORMAT_KEY: &str = "dq_format";
/// See [`FORMAT_KEY`].
pub const FORMAT: u64 = 2;

/// A registration as the registry holds it (its sealed values still sealed), in this release's terms:
/// the format mark removed, and a condition stored before format 2 rewritten to mean what it meant.
pub fn stored_config(json: &str) -> serde_json::Result<TopicConfig> {
    let mut value: serde_json::Value = serde_json::from_str(json)?;
    if let Some(map) = value.as_object_mut()
        && map.remove(FORMAT_KEY).is_none()
        && let Some(condition) = map
            .get_mut("retry")
            .and_then(|r| r.get_mut("condition"))
            .filter(|c| c.is_string())
        && let Some(rewritten) = condition.as_str().and_then(|c| Condition::parse_legacy(c).ok())
    {
        *condition = rewritten.to_string().into();
    }
    serde_json::from_value(value)
}

impl Admin {
    /// Registers (or replaces) a topic; its secrets and header values are sealed with `secrets.keys`.
    pub async fn put_topic(&self, name: &str, config: &TopicConfig) -> Result<()> {
        let json = self.stored_form(name, config)?;
        self.write_topic(name, Some(&json), None).await.map(|_| ())
    }

    /// The JSON the registry holds for `config`: sealed, and marked with [`FORMAT`].
    pub(crate) fn stored_form(&self, name: &str, config: &TopicConfig) -> Result<String> {
        let invalid = |e: serde_json::Error| Error::Invalid(e.to_string());
        let mut json = serde_json::to_value(config.sealed(name, self.sealer())).map_err(invalid)?;
        if let Some(map) = json.as_object_mut() {
            map.insert(FORMAT_KEY.into(), FORMAT.into());
        }
        serde_json::to_string(&json).map_err(invalid)
    }

    /// Deletes a topic's registration (its jobs stay). `NotFound` when it was not registered.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        if !self.topics().await?.contains_key(name) {
            return Err(Error::TopicNotFound(name.to_string()));
        }
        self.write_topic(name, None, None).await.map(|_| ())
    }

    /// Writes `json` as `name`'s registration (`None` deletes it); with `only_if`, only while the entry
    /// is still exactly that. Returns whether it wrote.
    pub(crate) async fn write_topic(&self, name: &str, json: Option<&str>, only_if: Option<&str>) -> Result<bool> {
        let reply = topic_set::call(&self.store, name, json, only_if).await?;
        Ok(reply != TopicSetReply::Changed)
    }

    /// Every registration as stored: topic → `<version> <config JSON>`.
    pub(crate) async fn raw_topics(&self) -> Result<HashMap<String, String>> {
        registry::topics(&self.store).await
    }

    /// All registered topics, their sealed values opened.
    pub async fn topics(&self) -> Result<Topics> {
        let mut topics = Topics::new();
        for (topic, value) in self.raw_topics().await? {
            let (_, json) = value.split_once(' ').unwrap_or((value.as_str(), ""));
            // An empty config is a deleted topic's tombstone, left by an older release; a registration that
            // does not parse, or whose sealed values this process cannot open, is skipped.
            match stored_config(json).map(|c| c.opened(&topic, self.sealer())) {
                Ok(Ok(config)) => {
                    topics.insert(topic, config);
                }
                Ok(Err(e)) => tracing::warn!(%topic, cause = %e, "topic registration skipped: its secrets do not open"),
                Err(_) if json.is_empty() => {}
                Err(_) => tracing::warn!(%topic, "unreadable topic registration skipped"),
            }
        }
        Ok(topics)
    }
}

/// The registry as this process last read it, refreshed in the background so that registration changes
/// reach every process within `refresh` without a restart, at the cost of one read of the registry.
#[derive(Debug, Default)]
pub struct TopicCache {
    /// The last merged registry.
    topics: RwLock<Arc<Topics>>,
    /// The queue whose reserves send the topics' flow limits ([`crate::flow::Flows`]), kept current
    /// with the registry.
    queue: Option<Queue>,
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

    /// Replaces the cached registry (after a read, or a write by this process), and tells the metrics
    /// which topics are registered ([`crate::series::registered`]).
    pub fn set(&self, topics: Topics) {
        crate::series::registered(topics.keys());
        if let Some(queue) = &self.queue {
            queue.flows.set(&topics);
        }
        *self.topics.write().expect("topic cache lock") = Arc::new(topics);
    }

    /// Reads the registry now, then every `refresh` until `shutdown`.
    pub async fn start(queue: Queue, refresh: Duration, shutdown: CancellationToken) -> Arc<TopicCache> {
        let cache = Arc::new(TopicCache {
            topics: RwLock::default(),
            queue: Some(queue.clone()),
        });
        match queue.admin().topics().await {
            Ok(t) => cache.set(t),
            Err(e) => tracing::warn!(cause = %e.chain(), "cannot read the topic registry yet"),
        }
        let me = cache.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(refresh) => {}
                    _ = shutdown.cancelled() => return,
                }
                match queue.admin().topics().await {
                    Ok(t) => me.set(t),
                    Err(e) => tracing::debug!(cause = %e.chain(), "topic registry refresh failed"),
                }
            }
        });
        cache
    }
}
