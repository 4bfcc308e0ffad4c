//! dq-core: what every dq process shares.
//!
//! - [`job`]: the job model and the checks on what producers send.
//! - [`condition`]: retry conditions on a callback's answer, parsed once and evaluated safely.
//! - [`keys`]: the Redis key layout; [`scripts`]: the Lua scripts, one per atomic operation.
//! - [`shard`]: pools per Redis shard and the placement of jobs on shards and buckets; [`coalesce`]: group
//!   commit, so concurrent pushes to a shard share script calls.
//! - [`queue`]: the typed async API over the scripts; [`registry`]: topics on every shard, dead letters.
//! - [`topic`]: a topic's registration (callback, retry policy, defaults) and its checks.
//! - [`wake`]: pub/sub wake-ups for long polls and timers; [`audit`]: the consistency audit and repair.
//! - [`process`]: the start-up every binary shares.
//! - [`config`], [`signals`], [`telemetry`], [`systemd`]: settings, drain on signals, logs and metrics,
//!   readiness and watchdog for systemd.

pub mod audit;
pub mod coalesce;
pub mod condition;
pub mod config;
pub mod error;
pub mod job;
pub mod keys;
pub mod process;
pub mod queue;
pub mod registry;
pub mod scripts;
pub mod shard;
pub mod signals;
pub mod systemd;
pub mod telemetry;
pub mod topic;
pub mod wake;

pub use config::Settings;
pub use error::{Error, Result};
pub use job::{Job, NewJob, PushRequest, Pushed, Reservation, Schedule, State};
pub use queue::Queue;
pub use topic::TopicConfig;
