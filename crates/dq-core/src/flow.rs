//! Flow keys: a job's `flow_key` (a customer, a tenant, an endpoint) and its topic's `flow` limits on each
//! key apart.
//!
//! A key's jobs, its state and its turn live in the partition its topic and key hash to
//! ([`crate::store::partition::Partitions::of_key`]), so every move of one of its jobs sees them in one
//! script (`flow.lua`, whose header has the keys). Its ready jobs wait in a queue of the key's own; the
//! topic's ready queue holds one member for the key, its turn, which `reserve.lua` takes like a job and
//! puts back at the end of the line, so keys with ready jobs take turns (docs/architecture.md, "Flow keys").
//!
//! Reserves carry the topics' limits ([`FlowLimits`]) from the registry as this process last read it
//! ([`Flows`]): limits are counted in Redis, per key, over every process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use dq_api::topic::Flow;

use crate::error::Result;
use crate::store::Store;

pub use dq_api::topic::{FlowKey, FlowKeys};

/// A topic's limits on each of its flow keys, as `reserve.lua` takes them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowLimits {
    /// Jobs of one key reserved at once; 0 for no limit.
    pub concurrency: u32,
    /// Jobs of one key reserved per second; 0 for no limit.
    pub rate_per_s: f64,
    /// The bucket's size (with a rate).
    pub burst: u32,
}

impl FlowLimits {
    /// The limits a topic's `flow` section sets.
    pub fn of(flow: &Flow) -> Self {
        FlowLimits {
            concurrency: flow.concurrency.unwrap_or(0),
            rate_per_s: flow.rate_per_s.unwrap_or(0.0),
            burst: if flow.rate_per_s.is_some() {
                flow.burst_or_default()
            } else {
                0
            },
        }
    }

    /// `"<concurrency> <rate_per_s> <burst>"`, one `reserve.lua` argument.
    pub(crate) fn arg(&self) -> String {
        format!("{} {} {}", self.concurrency, self.rate_per_s, self.burst)
    }
}

/// The flow limits of the registered topics, as this process last read the registry; reserves send
/// them with their topics. A topic without a `flow` section has none (its keys still take turns).
#[derive(Debug, Default)]
pub struct Flows(RwLock<Arc<HashMap<String, FlowLimits>>>);

impl Flows {
    /// Replaces them with those of `topics` (a registry read or written).
    pub fn set<'a>(&self, topics: impl IntoIterator<Item = (&'a String, &'a crate::TopicConfig)>) {
        let limits = topics
            .into_iter()
            .filter_map(|(t, c)| Some((t.clone(), FlowLimits::of(c.flow.as_ref()?))))
            .collect();
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(limits);
    }

    /// `topic`'s limits (none: no limits).
    pub fn get(&self, topic: &str) -> FlowLimits {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .copied()
            .unwrap_or_default()
    }
}

impl crate::Admin {
    /// `topic`'s flow keys with ready jobs: how many, and the `top` busiest (see [`busiest`]).
    pub async fn flow_keys(&self, topic: &str, top: usize) -> Result<FlowKeys> {
        busiest(&self.store, topic, top).await
    }
}

/// `topic`'s flow keys with ready jobs: how many there are, and the `top` busiest (most ready jobs, then
/// name), each with its ready and reserved jobs. In each of the topic's key partitions, a key's ready
/// jobs are those in its queue (`<p>:flows:<topic>`, exact: [`keys_with_ready`]) and, for a straight
/// key, those in the ready queue, read from its place in line ([`straight_keys`]: an estimate); then the
/// chosen keys' states.
pub(crate) async fn busiest(store: &Store, topic: &str, top: usize) -> Result<FlowKeys> {
    let reads = store.partitions.of_topic_keys(topic).into_iter().map(|p| async move {
        let keys = store.partition_keys(p);
        let ((queued, firsts), (straight, lines)) = futures_util::future::try_join(
            keys_with_ready(store, p, topic, top),
            straight_keys(store, p, topic, top),
        )
        .await?;
        let mut ready: BTreeMap<String, u64> = BTreeMap::new();
        for (key, n) in firsts.into_iter().chain(lines.into_iter().map(|(k, n)| (k, n as f64))) {
            *ready.entry(key).or_default() += n as u64;
        }
        let mut chosen: Vec<(String, u64)> = ready.into_iter().filter(|(_, n)| *n > 0).collect();
        chosen.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        chosen.truncate(top);
        if chosen.is_empty() {
            return Ok::<_, crate::error::Error>((queued + straight, Vec::new()));
        }
        let mut pipe = redis::pipe();
        for (key, _) in &chosen {
            pipe.cmd("HGET").arg(keys.flow_state(topic, key)).arg("n");
        }
        let reserved: Vec<Option<u64>> = store.pipe(p, &pipe).await?;
        let keys = chosen
            .into_iter()
            .zip(reserved)
            .map(|((key, ready), reserved)| FlowKey {
                key,
                ready,
                reserved: reserved.unwrap_or(0),
            })
            .collect();
        Ok((queued + straight, keys))
    });
    let mut out = FlowKeys::default();
    for r in futures_util::future::join_all(reads).await {
        let (count, keys) = r?;
        out.keys += count;
        out.busiest.extend(keys);
    }
    out.busiest
        .sort_by(|a, b| b.ready.cmp(&a.ready).then_with(|| a.key.cmp(&b.key)));
    out.busiest.truncate(top);
    Ok(out)
}

/// Partition `p`'s keys of `topic` with jobs in their own queue (the keys that take turns): how many,
/// and the `top` busiest with their queued jobs.
pub(crate) async fn keys_with_ready(
    store: &Store,
    p: u16,
    topic: &str,
    top: usize,
) -> Result<(u64, Vec<(String, f64)>)> {
    let keys = store.partition_keys(p);
    let mut pipe = redis::pipe();
    pipe.cmd("ZCARD")
        .arg(keys.flows(topic))
        .cmd("ZRANGE")
        .arg(keys.flows(topic))
        .arg(0)
        .arg(top.max(1) as i64 - 1)
        .arg("REV")
        .arg("WITHSCORES");
    store.pipe(p, &pipe).await
}

/// One priority step of a ready score (`flow.lua`'s `FLOW_STEP`): the score's time part is below it.
const FLOW_STEP: f64 = 4_398_046_511_104.0;

/// Partition `p`'s straight keys of `topic` (keys that take no turns, their jobs straight in the ready
/// queue) with ready jobs: how many, and the `top` busiest with their ready jobs. A straight job is
/// counted nowhere (so taking one writes nothing of its key's), so this reads the keys' places in line:
/// a key's jobs are one a round (one ms of virtual time) apart up to its last start (`<p>:fv:<topic>`),
/// and the line is at its first job's time, so a key has about `last - head + 1`. Exact while its jobs
/// wait their turn; one too many for a key whose job of the round under way is taken; a ready job
/// cancelled or rescheduled is counted until the line passes its start; a job less urgent than the
/// queue's first may be missed (its start fell behind the line).
pub(crate) async fn straight_keys(store: &Store, p: u16, topic: &str, top: usize) -> Result<(u64, Vec<(String, u64)>)> {
    let keys = store.partition_keys(p);
    let mut head = redis::pipe();
    head.cmd("EXISTS")
        .arg(keys.flow_starts(topic))
        .cmd("ZRANGE")
        .arg(keys.ready(topic))
        .arg(0)
        .arg(0)
        .arg("WITHSCORES");
    let (starts, first): (bool, Vec<(String, f64)>) = store.pipe(p, &head).await?;
    let Some((_, score)) = first.first().filter(|_| starts) else {
        return Ok((0, Vec::new()));
    };
    let line = score % FLOW_STEP;
    let mut pipe = redis::pipe();
    pipe.cmd("ZCOUNT")
        .arg(keys.flow_starts(topic))
        .arg(line)
        .arg("+inf")
        .cmd("ZRANGE")
        .arg(keys.flow_starts(topic))
        .arg("+inf")
        .arg(line)
        .arg("BYSCORE")
        .arg("REV")
        .arg("LIMIT")
        .arg(0)
        .arg(top.max(1))
        .arg("WITHSCORES");
    let (count, last): (u64, Vec<(String, f64)>) = store.pipe(p, &pipe).await?;
    Ok((
        count,
        last.into_iter()
            .map(|(key, start)| (key, (start - line) as u64 + 1))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_a_topics_flow_section() {
        let none = FlowLimits::of(&Flow::default());
        assert_eq!(none.arg(), "0 0 0");
        let f = Flow {
            concurrency: Some(3),
            rate_per_s: Some(2.5),
            burst: None,
        };
        // The burst is one second's worth of the rate, rounded up.
        assert_eq!(FlowLimits::of(&f).arg(), "3 2.5 3");
        let f = Flow {
            concurrency: None,
            rate_per_s: Some(10.0),
            burst: Some(1),
        };
        assert_eq!(FlowLimits::of(&f).arg(), "0 10 1");
    }
}
