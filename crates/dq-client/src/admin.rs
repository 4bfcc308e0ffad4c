//! The types of topics, dead letters and schedules that carry a job's body, as a client reads them:
//! dq-api's, with the body a `serde_json::Value`. (The others are dq-api's as they are.)

use serde_json::Value;

/// A page of a topic's jobs in one state (`GET /v1/topics/{topic}/jobs`).
pub type JobPage = dq_api::JobPage<Value>;

/// A page of a topic's dead list.
pub type DeadPage = dq_api::DeadPage<Value>;

/// A schedule's registration (`PUT /v1/schedules/{name}`).
pub type ScheduleConfig = dq_api::ScheduleConfig<Value>;

/// A schedule as dq shows it.
pub type ScheduleView = dq_api::ScheduleView<Value>;
