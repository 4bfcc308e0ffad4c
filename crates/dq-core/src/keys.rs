//! Every Redis key and channel name dq uses, built in one place.
//!
//! The same layout exists on every shard. Names that a script can know only from a job's record (the ready
//! queue and dead list of the job's topic) are built inside the scripts from the prefix, the same way as
//! here; `docs/redis-keys.md` documents the layout and the record's fields.

use std::sync::Arc;

/// Builds key names under one prefix, so that several dq installations can share a Redis.
#[derive(Debug, Clone)]
pub struct Keys {
    /// The prefix every key and channel starts with (`dq` by default). Shared, so a clone (one per
    /// grouped push) costs a reference count, not an allocation.
    prefix: Arc<str>,
}

impl Keys {
    /// Key names under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into().into(),
        }
    }

    /// The prefix, passed to scripts that name keys from a job's topic.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A job's record: a hash of its fields.
    pub fn job(&self, id: &str) -> String {
        format!("{}:job:{id}", self.prefix)
    }

    /// Delay bucket `bucket`: a sorted set of job ids scored by due time (ms).
    pub fn delayed(&self, bucket: u32) -> String {
        format!("{}:delayed:{bucket}", self.prefix)
    }

    /// A topic's ready queue: a sorted set of job ids scored by due time, popped lowest first.
    pub fn ready(&self, topic: &str) -> String {
        format!("{}:ready:{topic}", self.prefix)
    }

    /// The reserved set: job ids scored by reservation deadline (ms).
    pub fn reserved(&self) -> String {
        format!("{}:reserved", self.prefix)
    }

    /// A topic's dead list: job ids scored by the time they died.
    pub fn dead(&self, topic: &str) -> String {
        format!("{}:dead:{topic}", self.prefix)
    }

    /// Job counts by topic and state: a hash with fields `<topic>:<state>`.
    pub fn counts(&self) -> String {
        format!("{}:counts", self.prefix)
    }

    /// Facts about this shard's layout (bucket count), checked at start so a misconfigured process
    /// cannot strand jobs in buckets nobody serves.
    pub fn meta(&self) -> String {
        format!("{}:meta", self.prefix)
    }

    /// The topic registry, kept whole on every shard: a hash of topic → `<version> <config JSON>`.
    pub fn topics(&self) -> String {
        format!("{}:topics", self.prefix)
    }

    /// Events for dq-checker (a job died): a list of JSON objects, newest first, capped at 10,000.
    pub fn events(&self) -> String {
        format!("{}:events", self.prefix)
    }

    /// Live timers: a sorted set of timer id → heartbeat expiry (ms).
    pub fn timers(&self) -> String {
        format!("{}:timers", self.prefix)
    }

    /// Bucket leases: a hash of bucket → `<timer id> <expiry ms>`.
    pub fn leases(&self) -> String {
        format!("{}:leases", self.prefix)
    }

    /// Pub/sub channel on which a topic name is published when its ready queue stops being empty.
    pub fn ready_channel(&self) -> String {
        format!("{}:wake:ready", self.prefix)
    }

    /// Pub/sub channel on which `<bucket key> <due ms>` is published when a bucket's earliest due time
    /// moves earlier.
    pub fn timer_channel(&self) -> String {
        format!("{}:wake:timer", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_stable() {
        let k = Keys::new("dq");
        assert_eq!(k.job("01J"), "dq:job:01J");
        assert_eq!(k.delayed(7), "dq:delayed:7");
        assert_eq!(k.ready("orders.close"), "dq:ready:orders.close");
        assert_eq!(k.reserved(), "dq:reserved");
        assert_eq!(k.dead("t"), "dq:dead:t");
        assert_eq!(k.counts(), "dq:counts");
        assert_eq!(k.meta(), "dq:meta");
        assert_eq!(k.timers(), "dq:timers");
        assert_eq!(k.topics(), "dq:topics");
        assert_eq!(k.events(), "dq:events");
        assert_eq!(k.leases(), "dq:leases");
        assert_eq!(k.ready_channel(), "dq:wake:ready");
        assert_eq!(k.timer_channel(), "dq:wake:timer");
        assert_eq!(Keys::new("x").job("a"), "x:job:a");
    }
}
