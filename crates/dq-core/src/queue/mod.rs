//! The typed queue API: every operation on jobs, each one script on one partition.
//!
//! Split by role: [`activity`] (the dashboard's per-minute counts), [`push`] (storing jobs, with the group commit), `ack` (acks, with the same group
//! commit), [`jobs`] (look up, delete, reschedule), [`reserve`] (reserve, nack, touch, release),
//! [`timer`] (promote, expire, the timers' heartbeat), [`handoff`] (promotions that reserve for waiting
//! dq-consumer workers), [`limit`] (a topic's delivery limits across
//! consumers), [`dead`] (dead lists), [`stats`] (counts and health), [`layout`] (the partition count
//! stored in Redis), [`quarantine`] (records that could not be decoded), [`alerting`] (what dq-checker
//! keeps to alert once), [`schedules`] (the schedules' registry), [`dead_hooks`] (the hooks of
//! `callback.on_dead_url` waiting to be sent) and [`decode`] (script answers into types).

mod ack;
pub mod activity;
pub mod alerting;
pub mod beanstalkd;
pub mod browse;
pub mod dead;
pub mod dead_hooks;
pub mod handoff;
pub mod jobs;
pub mod limit;
pub mod push;
pub mod quarantine;
pub mod ready;
pub mod reserve;
pub mod schedules;
pub mod stats;
pub mod timer;

use std::sync::Arc;

use redis::{FromRedisValue, ScriptInvocation};

use crate::config::{EgressSettings, JobDefaults, Limits, RedisMode, Settings};
use crate::egress::Policy;
use crate::error::{Error, Result};
use crate::job::{NewJob, PushRequest, Reservation};
use crate::sealed::Sealer;
use crate::store::coalesce::Coalescer;
use crate::store::connection::Redis;
use crate::store::keys::{Keys, PartitionKeys};
use crate::store::layout;
use crate::store::partition::{Partitions, slot_of};

pub use self::browse::JobPage;
pub use self::dead_hooks::DeadHook;
pub use self::handoff::Waiting;
pub use self::limit::{LimitAsk, LimitGrant};
pub use self::quarantine::Quarantined;
pub use self::ready::ReadyIndex;
pub use self::reserve::ReserveOptions;
pub use self::stats::{NodeStats, NodeWatch, Stats};
pub use self::timer::{Balance, Expired, Promoted};

/// The queue: the connection, the partitions, key names, limits and defaults. Cheap to clone: one
/// reference count (every request clones it, often more than once, for the group commits' tasks), and
/// clones share everything.
#[derive(Debug, Clone)]
pub struct Queue(Arc<QueueParts>);

impl std::ops::Deref for Queue {
    type Target = QueueParts;

    fn deref(&self) -> &QueueParts {
        &self.0
    }
}

/// What a [`Queue`] holds, shared by its clones. Its fields are the queue module's own.
#[derive(Debug)]
pub struct QueueParts {
    /// Where jobs live.
    redis: Redis,
    /// How many partitions, their tags, which ones answer.
    partitions: Partitions,
    /// Names of the keys that are not a job's.
    keys: Keys,
    /// Each partition's key names, by partition.
    partition_keys: Arc<[PartitionKeys]>,
    /// Bounds on requests; replaced whole by [`Queue::set_limits`] (SIGHUP).
    limits: std::sync::RwLock<Arc<Limits>>,
    /// Values for what a push leaves out.
    defaults: JobDefaults,
    /// Where callbacks may go (`egress.*`); replaced whole by [`Queue::set_egress`] (SIGHUP).
    egress: std::sync::RwLock<Arc<EgressSettings>>,
    /// Seals callback secrets and header values in the registry (`secrets.keys`).
    sealer: Arc<Sealer>,
    /// The group commit of pushes.
    pushes: Arc<Coalescer<push::PushGroup, push::PushOutcome>>,
    /// The group commit of acks.
    acks: Arc<Coalescer<ack::AckOp, Result<()>>>,
    /// The group commit of reserves.
    reserves: Arc<Coalescer<reserve::ReserveOp, Result<Vec<Reservation>>>>,
    /// Which partitions may hold ready jobs of which topics, so reserves go straight to them.
    ready: Arc<ReadyIndex>,
    /// On a cluster: wake-ups go over sharded pub/sub (see [`crate::store::scripts::Waking`]).
    sharded: bool,
    /// What this process counted for the dashboard and has not yet added to Redis.
    activity: Arc<crate::activity::Activity>,
}

impl Queue {
    /// A queue over the configured Redis, with the installation's partition count: read from Redis (and
    /// checked against `redis.partitions` when that is set), or stored there for a new installation.
    /// Refuses the layout dq used before partitions, naming the command that converts it.
    pub async fn connect(settings: &Settings) -> Result<Self> {
        let redis = Redis::new(&settings.redis)?;
        let keys = Keys::new(settings.redis.prefix.clone());
        let count = layout::ensure(&redis, &keys, settings.redis.partitions).await?;
        if settings.redis.mode == RedisMode::Cluster {
            layout::require_sharded_pubsub(&redis).await?;
        }
        layout::require_noeviction(&redis, settings.redis.allow_eviction).await?;
        for script in crate::store::scripts::all(settings.redis.mode == RedisMode::Cluster) {
            // Only saves the first calls a round trip; a script missing later is loaded on NOSCRIPT.
            if let Err(e) = redis.load_script(script).await {
                tracing::debug!(cause = %e, "cannot load a script ahead");
            }
        }
        Ok(Self::with_partitions(settings, redis, count))
    }

    /// A queue over `count` partitions, without looking at Redis (the layout was checked already).
    pub fn with_partitions(settings: &Settings, redis: Redis, count: u32) -> Self {
        let keys = Keys::new(settings.redis.prefix.clone());
        let partitions = Partitions::new(count);
        let partition_keys = partitions.all().map(|p| keys.partition(partitions.tag(p))).collect();
        // On a cluster, calls to different primaries proceed side by side.
        let in_flight = if settings.redis.mode == RedisMode::Cluster {
            8
        } else {
            2
        };
        Queue(Arc::new(QueueParts {
            redis,
            partitions,
            keys,
            partition_keys,
            limits: std::sync::RwLock::new(Arc::new(settings.limits.clone())),
            defaults: settings.jobs.clone(),
            egress: std::sync::RwLock::new(Arc::new(settings.egress.clone())),
            sealer: Arc::new(settings.secrets.sealer()),
            pushes: Arc::new(Coalescer::new(push::PUSH_GROUP_JOBS, in_flight)),
            acks: Arc::new(Coalescer::new(ack::ACK_GROUP, in_flight)),
            reserves: Arc::new(Coalescer::new(reserve::RESERVE_GROUP, in_flight)),
            ready: Arc::new(ReadyIndex::default()),
            sharded: settings.redis.mode == RedisMode::Cluster,
            activity: Arc::default(),
        }))
    }

    /// The build of a script that publishes wake-ups for this installation's shape.
    pub fn script(&self, script: &'static crate::store::scripts::Waking) -> &'static redis::Script {
        script.get(self.sharded)
    }

    /// Whether wake-ups go over sharded pub/sub (a cluster) or classic pub/sub.
    pub fn sharded(&self) -> bool {
        self.sharded
    }

    /// The connection.
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    /// The partitions.
    pub fn partitions(&self) -> &Partitions {
        &self.partitions
    }

    /// Names of the keys that are not a job's.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Partition `p`'s key names.
    pub fn partition_keys(&self, p: u16) -> &PartitionKeys {
        &self.partition_keys[p as usize]
    }

    /// The index of partitions with ready jobs that reserves in this process follow.
    pub fn ready_index(&self) -> &Arc<ReadyIndex> {
        &self.ready
    }

    /// What seals callback secrets and header values in the registry.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// The limits in force (those at start, or of the last [`Queue::set_limits`]).
    pub fn limits(&self) -> Arc<Limits> {
        self.limits.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `limits` in force for every request from now on (dq-server's SIGHUP).
    pub fn set_limits(&self, limits: Limits) {
        *self.limits.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(limits);
    }

    /// Puts the egress lists of `egress` in force for the registrations checked from now on (dq-server's
    /// SIGHUP).
    pub fn set_egress(&self, egress: EgressSettings) {
        *self.egress.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(egress);
    }

    /// Job defaults (`jobs.*`).
    pub fn defaults(&self) -> &JobDefaults {
        &self.defaults
    }

    /// The callback egress policy (`egress.*`), with the addresses of the Redis nodes this queue uses as
    /// the topology shows them now (names resolved). Asks Redis and DNS: make it when needed, not per
    /// delivery.
    pub async fn egress(&self) -> Policy {
        let nodes = crate::egress::resolve(&self.redis.node_addresses().await).await;
        let egress = self.egress.read().unwrap_or_else(|e| e.into_inner()).clone();
        Policy::new(&egress, nodes)
    }

    /// Checks a push and fills in defaults; nothing touches Redis.
    pub fn validate(&self, req: PushRequest) -> Result<NewJob> {
        NewJob::from_request(req, &self.limits(), &self.defaults, None, crate::clock::unix_ms())
    }

    /// Runs a script on partition `p`, noting whether the partition answered.
    pub async fn run<T: FromRedisValue>(&self, p: u16, inv: &ScriptInvocation<'_>) -> Result<T> {
        let r = self.redis.invoke(inv).await;
        self.settle(p, r)
    }

    /// Runs a command on partition `p` (its key names the partition), noting whether it answered.
    pub async fn query<T: FromRedisValue>(&self, p: u16, cmd: &redis::Cmd) -> Result<T> {
        let r = self.redis.query(cmd).await;
        self.settle(p, r)
    }

    /// Runs a script that writes on partition `p` and, with `redis.wait_replicas`, answers only once that
    /// many replicas have the write: `unavailable` when fewer confirm in time (what was written stays).
    pub async fn write<T: FromRedisValue>(&self, p: u16, inv: &ScriptInvocation<'_>) -> Result<T> {
        let out = self.run(p, inv).await?;
        self.confirm(p).await?;
        Ok(out)
    }

    /// Waits for `redis.wait_replicas` replicas to have what was written on partition `p` so far.
    pub(crate) async fn confirm(&self, p: u16) -> Result<()> {
        // Most installations do not wait: skip the slot's hash on every write.
        if !self.redis.waits_for_replicas() {
            return Ok(());
        }
        let r = self.redis.wait_replicas(slot_of(self.partitions.tag(p))).await;
        match self.settle(p, r)? {
            Some((want, got)) if got < want => {
                metrics::counter!("dq_writes_not_replicated_total").increment(1);
                Err(Error::NotReplicated {
                    partition: p,
                    want,
                    got,
                })
            }
            _ => Ok(()),
        }
    }

    fn settle<T>(&self, p: u16, r: redis::RedisResult<T>) -> Result<T> {
        match r {
            Ok(v) => {
                self.partitions.set_up(p, true);
                Ok(v)
            }
            Err(e) => {
                let e = Error::from_redis(Some(p), e);
                // Pushes without an id avoid it until it answers again.
                if matches!(e, Error::Unavailable { .. } | Error::Indeterminate { .. }) {
                    self.partitions.set_up(p, false);
                }
                Err(e)
            }
        }
    }
}
