//! dq-api: the wire types of dq's HTTP API v1, one definition of each request and answer.
//!
//! dq-server takes and answers them (and describes them in its OpenAPI document: feature `openapi`),
//! dq-client and the `dq` command line send and read them, dq-bench builds and parses them, and dq-core
//! checks the requests it is given and stores the registrations. What to do with them (limits, defaults
//! from the settings, Redis) is dq-core's; this crate holds their shape only.
//!
//! - [`attempt`]: a job's history of delivery attempts.
//! - [`job`]: a push and its answers, a job as looked up, a reservation, a reschedule.
//! - [`consume`]: reserve, ack, ack many, nack and touch.
//! - [`topic`]: a topic's registration (callback, retry policy, defaults), how the API shows it, and its
//!   job counts; dead letters and the pages of a topic's jobs.
//! - [`schedule`]: a schedule's registration and how the API shows it.
//! - [`ops`]: stats and the probes.
//! - [`error`]: every failure's JSON body, `{"error": {"code", "message"}}`.
//! - [`strict`]: nested request objects read from JSON objects only.
//!
//! **The body.** Types that carry a job's body take its type as a parameter `B`: the server keeps the
//! producer's JSON text as it came (`Box<RawValue>`, the default: neither parsed again nor reordered on
//! its way out), a client reads it as a `serde_json::Value`. The shape on the wire is one.
//!
//! All times on the wire are Unix ms ([`unix_ms`] reads this machine's clock in that unit); durations are
//! ms.

pub mod attempt;
pub mod consume;
pub mod error;
pub mod job;
pub mod ops;
pub mod schedule;
pub mod strict;
pub mod topic;

pub use attempt::{Attempt, Attempts, Outcome};
pub use consume::{
    AckEntry, AckManyAnswer, AckManyRequest, AckPushed, AckRequest, AckResult, Acked, NackRequest, ReserveAnswer,
    ReserveRequest, TouchRequest, Touched,
};
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use job::{
    BatchAnswer, BatchPushed, BatchRequest, Coalesce, CoalesceMode, DEFAULT_PRIORITY, Job, JobRef, PushAnswer,
    PushRequest, PushResult, RescheduleRequest, Reservation, State,
};
pub use ops::{Health, Node, NotReady, Ready, RedisMode, RedisStats, Stats};
pub use schedule::{ScheduleConfig, ScheduleList, ScheduleView};
pub use topic::{
    BrowseQuery, Callback, Counts, DeadIds, DeadPage, DeadQuery, Deleted, Flow, FlowKey, FlowKeys, FlowsQuery, JobPage,
    Listed, Requeued, Retry, TopicConfig, TopicDefaults, TopicList, TopicView,
};

/// A job's body as the server keeps it: the producer's JSON text, untouched.
pub type RawBody = Box<serde_json::value::RawValue>;

/// The current Unix time in ms on this machine, the unit of every time on the wire. For bounds checks,
/// logs and what a tool prints: due times and deadlines are Redis's clock, never this one.
pub fn unix_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
