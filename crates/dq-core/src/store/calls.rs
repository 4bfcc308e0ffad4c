//! [`Store`]: the calls to Redis, and what each answer says of its partition.

use std::sync::Arc;

use redis::{FromRedisValue, ScriptInvocation};

use super::connection::Redis;
use super::keys::{Keys, PartitionKeys};
use super::owners::Owners;
use super::partition::{Partitions, slot_of};
use super::scripts;
use crate::error::{Error, Result};

/// The connection, the partitions and their key names: what every script call and command needs. A
/// `pub` type in a private module: the crate's roles reach it through their core, nobody else can.
#[derive(Debug)]
pub struct Store {
    /// Where jobs live.
    pub(crate) redis: Redis,
    /// How many partitions, their tags, which ones answer.
    pub(crate) partitions: Partitions,
    /// Names of the keys that are not a job's.
    pub(crate) keys: Keys,
    /// Each partition's key names, by partition.
    pub(crate) partition_keys: Arc<[PartitionKeys]>,
    /// On a cluster: wake-ups go over sharded pub/sub (see [`scripts::Waking`]).
    pub(crate) sharded: bool,
    /// On a cluster, which node serves each partition (see [`Store::nodes`]).
    owners: Arc<Owners>,
    /// On a single Redis, the one node of every partition.
    one_node: Arc<[u32]>,
}

impl Store {
    /// The store over `redis` with `partitions`.
    pub(crate) fn new(redis: Redis, partitions: Partitions, keys: Keys, sharded: bool) -> Self {
        let partition_keys = partitions.all().map(|p| keys.partition(partitions.tag(p))).collect();
        let one_node = partitions.all().map(|_| 0).collect();
        let owners = Arc::new(Owners::new(&partitions));
        Store {
            redis,
            partitions,
            keys,
            partition_keys,
            sharded,
            owners,
            one_node,
        }
    }

    /// The build of a script that publishes wake-ups for this installation's shape.
    pub(crate) fn script(&self, script: &'static scripts::Waking) -> &'static redis::Script {
        script.get(self.sharded)
    }

    /// Whether wake-ups go over sharded pub/sub (a cluster) or classic pub/sub.
    pub(crate) fn sharded(&self) -> bool {
        self.sharded
    }

    /// Per partition, the node that serves it, for calls that carry jobs of every partition of one node
    /// (equal values: one node): 0 for all on a single Redis; on a cluster as its slots were last read
    /// ([`super::owners`]), possibly out of date, which such a call checks before it writes.
    pub(crate) fn nodes(&self) -> Arc<[u32]> {
        if !self.sharded {
            return self.one_node.clone();
        }
        self.owners.nodes(&self.redis, &self.partitions)
    }

    /// On a cluster, reads which primary serves each partition now (at start: see [`Store::nodes`]).
    pub(crate) async fn read_nodes(&self) {
        if self.sharded {
            self.owners.read_now(&self.redis, &self.partitions).await;
        }
    }

    /// A call over several partitions found one not served by its node (a slot moved): the nodes are read
    /// again at the next call.
    pub(crate) fn nodes_moved(&self) {
        self.owners.stale();
    }

    /// The connection.
    pub(crate) fn redis(&self) -> &Redis {
        &self.redis
    }

    /// The partitions.
    pub(crate) fn partitions(&self) -> &Partitions {
        &self.partitions
    }

    /// Names of the keys that are not a job's.
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Partition `p`'s key names.
    pub(crate) fn partition_keys(&self, p: u16) -> &PartitionKeys {
        &self.partition_keys[p as usize]
    }

    /// Runs a script on partition `p`, noting whether the partition answered.
    pub(crate) async fn run<T: FromRedisValue>(&self, p: u16, inv: &ScriptInvocation<'_>) -> Result<T> {
        let r = self.redis.invoke(inv).await;
        self.settle(p, r)
    }

    /// Runs a command on partition `p` (its key names the partition), noting whether it answered.
    pub(crate) async fn query<T: FromRedisValue>(&self, p: u16, cmd: &redis::Cmd) -> Result<T> {
        let r = self.redis.query(cmd).await;
        self.settle(p, r)
    }

    /// Runs a script that writes on partition `p` and, with `redis.wait_replicas`, answers only once that
    /// many replicas have the write: `unavailable` when fewer confirm in time (what was written stays).
    pub(crate) async fn write<T: FromRedisValue>(&self, p: u16, inv: &ScriptInvocation<'_>) -> Result<T> {
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

    pub(crate) fn settle<T>(&self, p: u16, r: redis::RedisResult<T>) -> Result<T> {
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

/// Calls on keys of no partition (the `{<prefix>}` slot: the topic registry, the schedules, the checkers'
/// lease and alerts, the beanstalkd protocol's hashes), whose answers mark no partition up or down; and
/// pipelines.
impl Store {
    /// Runs a script whose keys are in no partition.
    pub(crate) async fn run_unpartitioned<T: FromRedisValue>(&self, inv: &ScriptInvocation<'_>) -> Result<T> {
        self.redis.invoke(inv).await.map_err(|e| Error::from_redis(None, e))
    }

    /// Runs a command whose key is in no partition.
    pub(crate) async fn query_unpartitioned<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.redis.query(cmd).await.map_err(|e| Error::from_redis(None, e))
    }

    /// Runs a pipeline whose keys are in no partition.
    pub(crate) async fn pipe_unpartitioned<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        self.redis.pipe(pipe).await.map_err(|e| Error::from_redis(None, e))
    }

    /// Runs a pipeline on partition `p` (its keys name the partition), noting whether it answered.
    pub(crate) async fn pipe<T: FromRedisValue>(&self, p: u16, pipe: &redis::Pipeline) -> Result<T> {
        let r = self.redis.pipe(pipe).await;
        self.settle(p, r)
    }
}
