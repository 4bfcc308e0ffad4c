//! dq-core: what every dq process shares.
//!
//! - [`job`]: the job model and the checks on what producers send (the requests themselves are dq-api's).
//! - [`condition`]: retry conditions on a callback's answer, parsed once and evaluated safely.
//! - [`keys`]: the Redis key layout; [`scripts`]: the Lua scripts, one per atomic operation.
//! - [`connection`]: Redis in its three shapes (standalone, Sentinel, Cluster) behind one type;
//!   [`partition`]: the partitions and which one holds a job; [`group_commit`]: group commit, so concurrent
//!   pushes share script calls.
//! - [`queue`]: the typed async API over the scripts, by role; [`activity`]: the dashboard's counts per
//!   minute, gathered in each process and added to Redis in batches; [`registry`]: the topic registry and its
//!   cache.
//! - [`flow`]: flow keys, each limited apart and taking turns with the others.
//! - [`graph`]: jobs that start jobs: fan-out topics, and the jobs a success pushes.
//! - [`trace`]: a job's W3C trace context (`traceparent`, `tracestate`), checked at push, stored with the
//!   job and handed on with each delivery.
//! - [`topic`]: a topic's registration (callback, retry policy, defaults) and its checks;
//!   [`egress`]: which addresses its callback may reach, and the HTTP clients that apply that;
//!   [`sign`]: the `X-DQ-Signature` of what dq POSTs.
//! - [`schedule`]: schedules, a cron pattern that pushes one job per occurrence (stored by
//!   [`queue::schedules`], fired by dq-timer).
//! - [`wake`]: pub/sub wake-ups for long polls and timers; [`audit`]: the consistency audit and repair.
//! - [`process`]: the start-up every binary shares.
//! - [`config`], [`signals`], [`telemetry`], [`systemd`]: settings, drain on signals, logs and metrics,
//!   readiness and watchdog for systemd; [`reload`]: the configuration read again on SIGHUP;
//!   [`series`]: counters served from the start, and the counters of a topic whose registration went
//!   left out.

pub mod activity;
pub mod admin;
pub mod attempt;
pub mod beanstalkd;
pub mod checker;
pub mod clock;
pub mod coalesce;
pub mod condition;
pub mod config;
pub mod egress;
pub mod error;
pub mod flow;
pub mod graph;
pub mod job;
pub mod process;
pub mod producer;
pub mod queue;
pub mod reload;
pub mod reservations;
pub mod schedule;
pub mod sealed;
pub mod series;
mod shared;
pub mod sign;
pub mod signals;
pub mod store;
pub mod systemd;
pub mod telemetry;
pub mod timer;
pub mod topic;
pub mod trace;
pub mod wake;

pub use admin::Admin;
pub use beanstalkd::Beanstalkd;
pub use checker::Checker;
pub use config::Settings;
/// Nested request objects read from JSON objects only (dq-api's, where the request types are).
pub use dq_api::strict;
pub use error::{Error, Result};
pub use job::{Due, Job, NewJob, PushRequest, Pushed, Reservation, State};
pub use producer::Producer;
pub use queue::Queue;
pub use reservations::Reservations;
pub use timer::Timer;
pub use topic::TopicConfig;
