//! Every Redis key and channel name dq uses, built in one place.
//!
//! A job's keys live in its partition: `<prefix>:{<tag>}:…`, where the hash tag puts every key of the
//! partition in one Redis Cluster slot (see [`crate::store::partition`]). Names that a script can know only from
//! a job's record (the ready queue and dead list of the job's topic) are built inside the scripts from the
//! partition's prefix, the same way as here. The few keys that are not a job's (the layout, the topic
//! registry, the schedules, the timers' leases) share the tag `{<prefix>}`. `docs/redis-keys.md` documents the layout.

use std::sync::Arc;

/// Names of the keys that are not a job's, and the partitions' prefixes.
#[derive(Debug, Clone)]
pub struct Keys {
    /// The prefix every key and channel starts with (`dq` by default), so that several installations can
    /// share a Redis.
    prefix: Arc<str>,
}

/// Names of the keys of one partition. Cheap to clone (one per grouped push).
#[derive(Debug, Clone)]
pub struct PartitionKeys {
    /// `<prefix>:{<tag>}`: what every key of the partition starts with, passed to scripts that name keys
    /// from a job's topic.
    prefix: Arc<str>,
}

impl Keys {
    /// Key names under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into().into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of the partition whose hash tag is `tag`.
    pub fn partition(&self, tag: &str) -> PartitionKeys {
        PartitionKeys {
            prefix: format!("{}:{{{tag}}}", self.prefix).into(),
        }
    }

    /// The installation's layout: a hash with the partition count, checked at start so that a process
    /// configured otherwise cannot strand jobs in partitions it does not know.
    pub fn layout(&self) -> String {
        format!("{{{}}}:layout", self.prefix)
    }

    /// The topic registry: a hash of topic → `<version> <config JSON>`.
    pub fn topics(&self) -> String {
        format!("{{{}}}:topics", self.prefix)
    }

    /// The schedules: a hash of schedule name → `<since ms> <config JSON>`, where `since` (Redis's clock)
    /// is when the schedule started counting occurrences (its creation, a change of cron or zone, a
    /// resume): no occurrence at or before it fires.
    pub fn schedules(&self) -> String {
        format!("{{{}}}:schedules", self.prefix)
    }

    /// The last occurrence each schedule fired: a hash of schedule name → occurrence (Unix ms), only ever
    /// raised.
    pub fn schedules_fired(&self) -> String {
        format!("{{{}}}:schedules:fired", self.prefix)
    }

    /// A counter raised by every change of a schedule, which the firing timer reads every 100 ms, so a
    /// change reaches it without reading every schedule that often.
    pub fn schedules_version(&self) -> String {
        format!("{{{}}}:schedules:version", self.prefix)
    }

    /// Live timers: a sorted set of timer id → heartbeat expiry (ms).
    pub fn timers(&self) -> String {
        format!("{{{}}}:timers", self.prefix)
    }

    /// Partition leases: a hash of partition → `<timer id> <expiry ms>`.
    pub fn leases(&self) -> String {
        format!("{{{}}}:leases", self.prefix)
    }

    /// dq-checker's lease: the id of the checker that sends alerts and reads the dead-job events, expiring.
    pub fn checker_lease(&self) -> String {
        format!("{{{}}}:checker", self.prefix)
    }

    /// The alert states dq-checker last sent (a hash: `redis:<node>` → `up`/`down`, `backlog:<topic>` →
    /// `over`/`under`, `quarantined` → a count), so a checker that takes over the lease sends what the
    /// last one had not.
    pub fn alerts_sent(&self) -> String {
        format!("{{{}}}:alerts", self.prefix)
    }

    /// A topic's delivery limits across every dq-consumer (`limit.lua`): slots held, the rate's token
    /// bucket, a pause the callback asked for. Tagged by the topic, so on a cluster the topics' limits
    /// spread over the nodes rather than all landing on the one that holds `{<prefix>}`.
    pub fn limit(&self, topic: &str) -> String {
        format!("{}:{{topic:{topic}}}:limit", self.prefix)
    }

    /// The activity of one minute (`minute`: Unix time in minutes), for the admin dashboard: a hash of
    /// counts (`pushed`, `delivered`, `failed`, `dead`) and lateness buckets (`late:<upper bound ms>`,
    /// `late:inf`), raised by every process's flush of what it counted (see [`crate::activity`]) and
    /// expiring [`crate::activity::KEEP_SECS`] after the last flush. Not per partition: one slot holds
    /// them all, so a dashboard reads hours of them in one pipeline.
    pub fn activity(&self, minute: i64) -> String {
        format!("{{{}}}:activity:{minute}", self.prefix)
    }

    /// The key of the layout dq used before partitions (`redis.shards`), looked for at start.
    pub fn old_layout(&self) -> String {
        format!("{}:meta", self.prefix)
    }
}

impl PartitionKeys {
    /// `<prefix>:{<tag>}`, passed to scripts that name keys from a job's topic.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A job's record: one packed string (see `record.lua`).
    pub fn job(&self, id: &str) -> String {
        format!("{}:job:{id}", self.prefix)
    }

    /// A deduplication key of a topic (`push.lua`): the id of the job first pushed with it, expiring at
    /// the end of its window.
    pub fn dedup(&self, topic: &str, key: &str) -> String {
        format!("{}:dedup:{topic}:{key}", self.prefix)
    }

    /// A coalescing key of a topic (`coalesce.lua`): a hash naming the key's last job (`j`), when its
    /// first push came (`f`, Unix ms) and how many pushes it took (`n`).
    pub fn coalesce(&self, topic: &str, key: &str) -> String {
        format!("{}:coalesce:{topic}:{key}", self.prefix)
    }

    /// One push of a coalescing key (`coalesce.lua`): the id of the job it went into, kept
    /// [`crate::coalesce::PUSH_MEMORY_MS`].
    pub fn coalesced(&self, topic: &str, key: &str, push_id: &str) -> String {
        format!("{}:coalesced:{topic}:{key}:{push_id}", self.prefix)
    }

    /// A flow key's ready jobs (`flow.lua`), scored as a ready queue.
    pub fn flow_queue(&self, topic: &str, key: &str) -> String {
        format!("{}:fq:{topic}:{key}", self.prefix)
    }

    /// A flow key's state (`flow.lua`): a hash of its reserved jobs, token bucket and pause.
    pub fn flow_state(&self, topic: &str, key: &str) -> String {
        format!("{}:fs:{topic}:{key}", self.prefix)
    }

    /// A topic's flow keys with jobs in their own queue in the partition: a sorted set of key -> those
    /// jobs (`flow.lua`).
    pub fn flows(&self, topic: &str) -> String {
        format!("{}:flows:{topic}", self.prefix)
    }

    /// A topic's mark that one of its flow keys may be paused in the partition (`flow.lua`): while it is
    /// there, or `flows` is, moves ask each key for its queue and state.
    pub fn flow_paused(&self, topic: &str) -> String {
        format!("{}:fp:{topic}", self.prefix)
    }

    /// A topic's straight flow keys' starts in the partition: a sorted set of key -> the virtual start of
    /// its last job (`flow.lua`).
    pub fn flow_starts(&self, topic: &str) -> String {
        format!("{}:fv:{topic}", self.prefix)
    }

    /// The delay set: job ids scored by due time (ms).
    pub fn delayed(&self) -> String {
        format!("{}:delayed", self.prefix)
    }

    /// A topic's ready queue: a sorted set of job ids scored by priority, then due time, popped lowest
    /// first.
    pub fn ready(&self, topic: &str) -> String {
        format!("{}:ready:{topic}", self.prefix)
    }

    /// The reserved set: job ids scored by reservation deadline (ms).
    pub fn reserved(&self) -> String {
        format!("{}:reserved", self.prefix)
    }

    /// The earliest reservation deadline announced to the timers (ms, a string): a reserve or touch
    /// announces only a deadline earlier than this, since the timer holding the partition runs expiry by
    /// then and learns the next deadline from it.
    pub fn announced(&self) -> String {
        format!("{}:announced", self.prefix)
    }

    /// A topic's dead list: job ids scored by the time they died.
    pub fn dead(&self, topic: &str) -> String {
        format!("{}:dead:{topic}", self.prefix)
    }

    /// Job counts by topic and state: a hash with fields `<topic>:<state>`.
    pub fn counts(&self) -> String {
        format!("{}:counts", self.prefix)
    }

    /// Records that could not be decoded, moved out of the way (`record.lua`): a hash of id →
    /// `"<Unix ms> <score> <source key>\n"` followed by the raw bytes (`-` for an unknown score or source).
    pub fn quarantine(&self) -> String {
        format!("{}:quarantine", self.prefix)
    }

    /// Events for dq-checker (a job died): a list of JSON objects, newest first, capped at 10,000.
    pub fn events(&self) -> String {
        format!("{}:events", self.prefix)
    }

    /// Dead-job events handed to dq-checker and not yet sent as an alert, oldest first.
    pub fn events_pending(&self) -> String {
        format!("{}:events:pending", self.prefix)
    }

    /// Dead-job hooks waiting to be sent (`callback.on_dead_url`): a sorted set of
    /// `<failed tries> <died at ms> <topic> <id>` scored by the time of the next try (ms); queued by
    /// `events_take.lua` when dq-checker takes the death's event, removed once sent or given up.
    pub fn dead_hooks(&self) -> String {
        format!("{}:dead_hooks", self.prefix)
    }

    /// Success hooks waiting to be sent (`callback.on_success_url`): as [`PartitionKeys::dead_hooks`],
    /// `<failed tries> <acked at ms> <topic> <id>`; queued by the ack that stored the job's answer.
    pub fn success_hooks(&self) -> String {
        format!("{}:success_hooks", self.prefix)
    }

    /// The callback's answer to job `id`'s successful delivery, kept for its success hook (JSON
    /// `{status, headers, body}`), until the hook is sent or given up.
    pub fn answer(&self, id: &str) -> String {
        format!("{}:answer:{id}", self.prefix)
    }
}

/// Wake-up channels: `<prefix>:{<tag>}:wake:ready` and `<prefix>:{<tag>}:wake:timer`, one of each per
/// partition, and `<prefix>:{<tag>}:wake:to:<consumer>`, one per partition and dq-consumer. They carry the partition's hash tag, so on a cluster a sharded channel (SPUBLISH) lives in
/// the partition's slot, on the node that runs its scripts.
impl PartitionKeys {
    /// The channel on which a topic name is published when its ready queue in the partition stops being
    /// empty.
    pub fn ready_channel(&self) -> String {
        format!("{}:wake:ready", self.prefix)
    }

    /// The channel on which `<delay set key> <due ms>` (or `<reserved set key> <deadline ms>`) is
    /// published when the partition's earliest due time (or announced deadline) moves earlier.
    pub fn timer_channel(&self) -> String {
        format!("{}:wake:timer", self.prefix)
    }

    /// The channel on which promote.lua hands due jobs, reserved, to the dq-consumer `consumer` (its
    /// process id) that said it waits for their topic (see `crates/dq-core/src/queue/handoff.rs`).
    pub fn handoff_channel(&self, consumer: &str) -> String {
        format!("{}:wake:to:{consumer}", self.prefix)
    }
}

/// Keys of the beanstalkd protocol (dq-server's listener) in a partition.
impl PartitionKeys {
    /// The partition's beanstalkd sequence: numbers are taken from it (see [`crate::beanstalkd`]).
    pub fn bs_seq(&self) -> String {
        format!("{}:bs:seq", self.prefix)
    }

    /// The partition's number index: a hash of beanstalkd number -> id, for jobs whose id was not made
    /// from their number (pushed over HTTP, numbered when first shown over the protocol).
    pub fn bs_ids(&self) -> String {
        format!("{}:bs:ids", self.prefix)
    }
}

/// Keys of the beanstalkd protocol that are not a partition's.
impl Keys {
    /// Tube names that are not topic names: a hash of topic -> tube (see [`crate::beanstalkd`]).
    pub fn bs_tubes(&self) -> String {
        format!("{{{}}}:bs:tubes", self.prefix)
    }

    /// Paused tubes: a hash of topic -> Unix ms (Redis's clock) the pause ends.
    pub fn bs_paused(&self) -> String {
        format!("{{{}}}:bs:paused", self.prefix)
    }

    /// The protocol's command counters, summed over every dq-server (a hash of `cmd-…` -> count, and
    /// per topic `<topic>:cmd-delete`, `<topic>:cmd-pause-tube`, `<topic>:total-jobs`).
    pub fn bs_stats(&self) -> String {
        format!("{{{}}}:bs:stats", self.prefix)
    }

    /// The dq-servers that serve the protocol: a sorted set of server id -> Unix ms its entry expires.
    pub fn bs_servers(&self) -> String {
        format!("{{{}}}:bs:servers", self.prefix)
    }

    /// One server's connection gauges (`current-connections`, `using:<topic>`, …), rewritten every
    /// second while it runs and expiring when it stops.
    pub fn bs_server(&self, id: &str) -> String {
        format!("{{{}}}:bs:server:{id}", self.prefix)
    }
}

impl Keys {
    /// A pattern matching every partition's channel of `kind` (classic pub/sub, standalone and
    /// Sentinel; Redis's glob treats the braces as plain characters).
    pub fn wake_pattern(&self, kind: &WakeKind) -> String {
        format!("{}:{{*}}:wake:{}", self.prefix, kind.name())
    }

    /// The partition number in a wake-up channel's name (the `<n>` of its tag `{<n>.<k>}`).
    pub fn channel_partition(channel: &str) -> Option<u16> {
        let tag = channel.split_once('{')?.1;
        tag.split_once('.')?.0.parse().ok()
    }
}

/// The kinds of wake-up channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeKind {
    /// A ready queue stopped being empty (dq-server, dq-consumer).
    Ready,
    /// A due time or deadline moved earlier, or a dq-consumer worker waits for a topic (dq-timer).
    Timer,
    /// Due jobs handed, reserved, to the dq-consumer with this process id.
    Handoff(Arc<str>),
}

impl WakeKind {
    fn name(&self) -> String {
        match self {
            WakeKind::Ready => "ready".into(),
            WakeKind::Timer => "timer".into(),
            WakeKind::Handoff(consumer) => format!("to:{consumer}"),
        }
    }

    /// A partition's channel of this kind.
    pub fn channel(&self, keys: &PartitionKeys) -> String {
        match self {
            WakeKind::Ready => keys.ready_channel(),
            WakeKind::Timer => keys.timer_channel(),
            WakeKind::Handoff(consumer) => keys.handoff_channel(consumer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_stable() {
        let k = Keys::new("dq");
        let p = k.partition("17.403");
        assert_eq!(p.prefix(), "dq:{17.403}");
        assert_eq!(p.job("01J"), "dq:{17.403}:job:01J");
        assert_eq!(p.delayed(), "dq:{17.403}:delayed");
        assert_eq!(p.ready("orders.close"), "dq:{17.403}:ready:orders.close");
        assert_eq!(p.reserved(), "dq:{17.403}:reserved");
        assert_eq!(p.announced(), "dq:{17.403}:announced");
        assert_eq!(p.dead("t"), "dq:{17.403}:dead:t");
        assert_eq!(p.counts(), "dq:{17.403}:counts");
        assert_eq!(p.events(), "dq:{17.403}:events");
        assert_eq!(p.quarantine(), "dq:{17.403}:quarantine");
        assert_eq!(p.events_pending(), "dq:{17.403}:events:pending");
        assert_eq!(p.dead_hooks(), "dq:{17.403}:dead_hooks");
        assert_eq!(k.checker_lease(), "{dq}:checker");
        assert_eq!(k.alerts_sent(), "{dq}:alerts");
        assert_eq!(k.layout(), "{dq}:layout");
        assert_eq!(k.topics(), "{dq}:topics");
        assert_eq!(k.timers(), "{dq}:timers");
        assert_eq!(k.schedules(), "{dq}:schedules");
        assert_eq!(k.schedules_fired(), "{dq}:schedules:fired");
        assert_eq!(k.schedules_version(), "{dq}:schedules:version");
        assert_eq!(k.leases(), "{dq}:leases");
        assert_eq!(p.ready_channel(), "dq:{17.403}:wake:ready");
        assert_eq!(p.timer_channel(), "dq:{17.403}:wake:timer");
        assert_eq!(k.wake_pattern(&WakeKind::Ready), "dq:{*}:wake:ready");
        assert_eq!(k.wake_pattern(&WakeKind::Timer), "dq:{*}:wake:timer");
        assert_eq!(k.wake_pattern(&WakeKind::Handoff("C1".into())), "dq:{*}:wake:to:C1");
        assert_eq!(p.handoff_channel("C1"), "dq:{17.403}:wake:to:C1");
        assert_eq!(Keys::channel_partition("dq:{17.403}:wake:timer"), Some(17));
        assert_eq!(Keys::channel_partition("dq:wake:timer"), None);
        assert_eq!(k.old_layout(), "dq:meta");
        assert_eq!(k.activity(29_000_000), "{dq}:activity:29000000");
        assert_eq!(Keys::new("x").partition("0.1").job("a"), "x:{0.1}:job:a");
    }
}
