//! What every role handle shares: the store (the way to Redis), limits, defaults, the group commits and
//! the ready index. One [`Core`] per process, cloned into each handle (one reference count);
//! its fields and methods are the crate's own, so that no caller outside dq-core reaches Redis but through
//! a role's verbs.

use std::sync::Arc;

use crate::config::{EgressSettings, JobDefaults, Limits, RedisMode, Settings};
use crate::egress::Policy;
use crate::error::Result;
use crate::job::Reservation;
use crate::reservations::ReadyIndex;
use crate::sealed::Sealer;
use crate::store::Store;
use crate::store::connection::Redis;
use crate::store::group_commit::GroupCommit;
use crate::store::keys::Keys;
use crate::store::layout;
use crate::store::partition::Partitions;

/// The core: the connection, the partitions, key names, limits and defaults. Cheap to clone: one
/// reference count (every request clones it, often more than once, for the group commits' tasks), and
/// clones share everything.
#[derive(Debug, Clone)]
pub struct Core(Arc<Parts>);

impl std::ops::Deref for Core {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// The parts read the store's fields and calls directly (`self.partitions`, `self.write(…)`).
impl std::ops::Deref for Parts {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

/// What a [`Core`] holds, shared by its clones.
#[derive(Debug)]
pub struct Parts {
    /// The way to Redis: connection, partitions, key names, scripts.
    pub(crate) store: Store,
    /// Bounds on requests; replaced whole by [`Core::set_limits`] (SIGHUP).
    pub(crate) limits: std::sync::RwLock<Arc<Limits>>,
    /// Values for what a push leaves out.
    pub(crate) defaults: JobDefaults,
    /// Where callbacks may go (`egress.*`); replaced whole by [`Core::set_egress`] (SIGHUP).
    pub(crate) egress: std::sync::RwLock<Arc<EgressSettings>>,
    /// Seals callback secrets and header values in the registry (`secrets.keys`).
    pub(crate) sealer: Arc<Sealer>,
    /// The group commit of pushes.
    pub(crate) pushes: Arc<GroupCommit<crate::producer::push::PushGroup, crate::producer::push::PushOutcome>>,
    /// The group commit of acks.
    pub(crate) acks: Arc<GroupCommit<crate::reservations::ack::AckOp, Result<()>>>,
    /// The group commit of reserves.
    pub(crate) reserves: Arc<GroupCommit<crate::reservations::reserve::ReserveOp, Result<Vec<Reservation>>>>,
    /// Which partitions may hold ready jobs of which topics, so reserves go straight to them.
    pub(crate) ready: Arc<ReadyIndex>,
    /// What this process counted for the dashboard and has not yet added to Redis.
    pub(crate) activity: Arc<crate::activity::Activity>,
    /// The topics' flow limits, as this process last read the registry; reserves send them.
    pub(crate) flows: crate::flow::Flows,
}

impl Core {
    /// A queue over the configured Redis, with the installation's layout (partitions and key
    /// partitions): read from Redis (and checked against `redis.partitions` and `redis.key_partitions` where
    /// set), or stored there for a new installation.
    /// Refuses the layout dq used before partitions, naming the command that converts it.
    pub(crate) async fn connect(settings: &Settings) -> Result<Self> {
        let redis = Redis::new(&settings.redis)?;
        let keys = Keys::new(settings.redis.prefix.clone());
        let layout = layout::ensure(&redis, &keys, &settings.redis).await?;
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
        let core = Self::with_layout(settings, redis, layout);
        // On a cluster, which primary serves each partition: read now, so that the first pushes and acks
        // carry every partition of a primary in one call.
        core.store.read_nodes().await;
        Ok(core)
    }

    /// A queue over the installation's `layout`, without looking at Redis (it was checked already).
    fn with_layout(settings: &Settings, redis: Redis, layout: layout::Layout) -> Self {
        let keys = Keys::new(settings.redis.prefix.clone());
        let partitions = Partitions::with_key_partitions(layout.partitions, layout.key_partitions);
        // On a cluster, calls to different primaries proceed side by side.
        let in_flight = if settings.redis.mode == RedisMode::Cluster {
            8
        } else {
            2
        };
        Core(Arc::new(Parts {
            store: Store::new(redis, partitions, keys, settings.redis.mode == RedisMode::Cluster),
            limits: std::sync::RwLock::new(Arc::new(settings.limits.clone())),
            defaults: settings.jobs.clone(),
            egress: std::sync::RwLock::new(Arc::new(settings.egress.clone())),
            sealer: Arc::new(settings.secrets.sealer()),
            pushes: Arc::new(GroupCommit::new(crate::producer::push::PUSH_GROUP_JOBS, in_flight)),
            acks: Arc::new(GroupCommit::new(crate::reservations::ack::ACK_GROUP, in_flight)),
            reserves: Arc::new(GroupCommit::new(crate::reservations::reserve::RESERVE_GROUP, in_flight)),
            ready: Arc::new(ReadyIndex::default()),
            activity: Arc::default(),
            flows: Default::default(),
        }))
    }

    /// The index of partitions with ready jobs that reserves in this process follow.
    pub(crate) fn ready_index(&self) -> &Arc<ReadyIndex> {
        &self.ready
    }

    /// What seals callback secrets and header values in the registry.
    pub(crate) fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// The limits in force (those at start, or of the last [`Core::set_limits`]).
    pub(crate) fn limits(&self) -> Arc<Limits> {
        self.limits.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `limits` in force for every request from now on (dq-server's SIGHUP).
    pub(crate) fn set_limits(&self, limits: Limits) {
        *self.limits.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(limits);
    }

    /// Puts the egress lists of `egress` in force for the registrations checked from now on (dq-server's
    /// SIGHUP).
    pub(crate) fn set_egress(&self, egress: EgressSettings) {
        *self.egress.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(egress);
    }

    /// Job defaults (`jobs.*`).
    pub(crate) fn defaults(&self) -> &JobDefaults {
        &self.defaults
    }

    /// The callback egress policy (`egress.*`), with the addresses of the Redis nodes this queue uses as
    /// the topology shows them now (names resolved). Asks Redis and DNS: make it when needed, not per
    /// delivery.
    pub(crate) async fn egress(&self) -> Policy {
        let nodes = crate::egress::resolve(&self.redis.node_addresses().await).await;
        let egress = self.egress.read().unwrap_or_else(|e| e.into_inner()).clone();
        Policy::new(&egress, nodes)
    }
}

/// Declares a role handle: a clone of the [`Core`] whose verbs are the role's. It dereferences to the
/// core so that the role's code reads the shared parts directly; outside dq-core nothing of the core is
/// reachable.
macro_rules! role {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub(crate) crate::shared::Core);

        impl std::ops::Deref for $name {
            type Target = crate::shared::Core;

            fn deref(&self) -> &crate::shared::Core {
                &self.0
            }
        }
    };
}
pub(crate) use role;
