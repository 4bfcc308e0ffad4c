//! The queue: dq's connection to Redis, and the role handles over it.
//!
//! [`Queue::connect`] checks the installation's layout and loads the scripts; the verbs are the roles':
//! [`Queue::producer`] (push, look up, cancel, reschedule), [`Queue::reservations`] (reserve, ack,
//! nack, touch, release), [`Queue::timer`] (promote, expire, balance), [`Queue::admin`] (topics, dead
//! letters, schedules, stats, browse, quarantine), [`Queue::checker`] (leases, events, dead hooks,
//! pruning, audit) and [`Queue::beanstalkd`] (the protocol listener's numbers, tubes and moves). Each
//! binary takes the roles it uses. What every process does itself stays here: the limits it enforces
//! (reloaded on SIGHUP) and the dashboard's counts it adds to Redis ([`activity`]).

pub mod activity;
mod health;

use std::sync::Arc;

use crate::admin::Admin;
use crate::beanstalkd::Beanstalkd;
use crate::checker::Checker;
use crate::config::{EgressSettings, Limits, RedisMode, Settings};
use crate::error::Result;
use crate::producer::Producer;
use crate::reservations::Reservations;
use crate::shared::Core;
use crate::store::keys::{Keys, PartitionKeys};
use crate::store::partition::Partitions;
use crate::timer::Timer;

/// The queue: one per process, cheap to clone, and the roles it hands out share everything with it.
#[derive(Debug, Clone)]
pub struct Queue {
    core: Core,
    producer: Producer,
    reservations: Reservations,
    timer: Timer,
    admin: Admin,
    checker: Checker,
    beanstalkd: Beanstalkd,
}

impl std::ops::Deref for Queue {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Queue {
    /// A queue over the configured Redis, with the installation's layout (partitions and key
    /// partitions): read from Redis (and checked against `redis.partitions` and `redis.key_partitions` where
    /// set), or stored there for a new installation.
    /// Refuses the layout dq used before partitions, naming the command that converts it.
    pub async fn connect(settings: &Settings) -> Result<Self> {
        Core::connect(settings).await.map(Queue::over)
    }

    fn over(core: Core) -> Self {
        Queue {
            producer: Producer(core.clone()),
            reservations: Reservations(core.clone()),
            timer: Timer(core.clone()),
            admin: Admin(core.clone()),
            checker: Checker(core.clone()),
            beanstalkd: Beanstalkd(core.clone()),
            core,
        }
    }

    /// The producer's verbs.
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// The consumers' verbs.
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// dq-timer's verbs.
    pub fn timer(&self) -> &Timer {
        &self.timer
    }

    /// The admins' verbs.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// dq-checker's verbs.
    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    /// The beanstalkd protocol listener's verbs.
    pub fn beanstalkd(&self) -> &Beanstalkd {
        &self.beanstalkd
    }

    /// The Redis shape this queue runs on.
    pub fn mode(&self) -> RedisMode {
        self.core.redis.mode()
    }

    /// Whether callback secrets are sealed (`secrets.keys` is set).
    pub fn seals(&self) -> bool {
        self.core.sealer.seals()
    }

    /// The callback egress policy (`egress.*`), with the addresses of the Redis nodes this queue uses as
    /// the topology shows them now (names resolved). Asks Redis and DNS: make it when needed, not per
    /// delivery.
    pub async fn egress(&self) -> crate::egress::Policy {
        self.core.egress().await
    }

    /// The partitions: how many, and which one holds a job.
    pub fn partitions(&self) -> &Partitions {
        &self.core.partitions
    }

    /// Names of the keys that are not a job's (see docs/redis-keys.md).
    pub fn keys(&self) -> &Keys {
        &self.core.keys
    }

    /// Partition `p`'s key names (see docs/redis-keys.md).
    pub fn partition_keys(&self, p: u16) -> &PartitionKeys {
        self.core.partition_keys(p)
    }

    /// Redis's clock, Unix ms: due times, schedules and retention count by it.
    pub async fn redis_now_ms(&self) -> Result<i64> {
        self.core.store.now_ms().await
    }

    /// The limits in force (those at start, or of the last [`Queue::set_limits`]).
    pub fn limits(&self) -> Arc<Limits> {
        self.core.limits()
    }

    /// Puts `limits` in force for every request from now on (dq-server's SIGHUP).
    pub fn set_limits(&self, limits: Limits) {
        self.core.set_limits(limits)
    }

    /// Puts the egress lists of `egress` in force for the registrations checked from now on (dq-server's
    /// SIGHUP).
    pub fn set_egress(&self, egress: EgressSettings) {
        self.core.set_egress(egress)
    }
}
