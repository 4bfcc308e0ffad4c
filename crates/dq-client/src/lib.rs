//! A typed async client for dq's HTTP API (`docs/api.md`).
//!
//! - [`Client`] has one method per verb: jobs (push, push many, look up, attempts, cancel, reschedule), pull
//!   consumption (reserve with long poll, ack, ack many, nack, touch), topics and their busiest flow
//!   keys, dead letters, schedules and stats. Errors keep their kind ([`Error`]): dq's own answer, a
//!   request that never got through, or one whose outcome is unknown.
//! - Retries are safe: a push carries an id (the client makes a ULID when the job has none), so a push
//!   sent again after a time-out finds the first one instead of making a second job; a job with a flow
//!   key, whose id dq makes, is sent again only with the id dq named for it; verbs that are not
//!   idempotent are sent again only when the first try surely did nothing ([`RetryPolicy`]).
//! - The requests and answers are dq-api's (re-exported here), those that carry a job's body with it as a
//!   `serde_json::Value` ([`Job`], [`Reservation`], [`PushRequest`], [`ScheduleConfig`] …).
//! - [`Worker`] is the pull consumer's loop: reserve a batch (long poll), run a handler per job, ack the
//!   successes in one request, nack the failures, touch jobs that run long, and stop cleanly.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dq_client::Error> {
//! use dq_client::{Client, PushRequest};
//! let client = Client::builder("http://127.0.0.1:6789").token(std::env::var("DQ_TOKEN").ok()).build()?;
//! let pushed = client.push(&PushRequest::new("orders.close", serde_json::json!({"order": 42})).delay_ms(30_000)).await?;
//! println!("{} due at {}", pushed.id, pushed.run_at);
//! # Ok(()) }
//! ```

mod admin;
mod client;
mod error;
mod graph;
mod jobs;
mod manage;
mod push;
mod retry;
mod worker;

pub use admin::{DeadPage, JobPage, ScheduleConfig, ScheduleView};
pub use client::{Client, ClientBuilder};
pub use dq_api::{
    Attempt, Attempts, BatchPushed, Callback, Coalesce, CoalesceMode, Counts, DEFAULT_PRIORITY, ErrorCode, Flow,
    FlowKey, FlowKeys, JobRef, Node, Outcome, PushAnswer, RedisMode, RedisStats, RescheduleRequest, ReserveRequest,
    Retry, State, Stats, TopicConfig, TopicDefaults, TopicView,
};
pub use error::{ApiError, Error};
pub use jobs::{Job, Nack, PushRequest, Reservation, When};
pub use retry::RetryPolicy;
pub use worker::{Failed, Worker, WorkerStats};

/// Every operation of dq's OpenAPI document (`GET /openapi.json`, by `operationId`) and the client
/// method that calls it; the probes a client has no use for say so. A test compares it with the served
/// document, so an operation added to the API without a client method fails it.
pub const OPERATIONS: &[(&str, &str)] = &[
    ("push", "push"),
    ("push_many", "push_many"),
    ("lookup", "get"),
    ("attempts", "attempts"),
    ("cancel", "cancel"),
    ("reschedule", "reschedule"),
    ("reserve", "reserve"),
    ("ack", "ack"),
    ("ack_many", "ack_many"),
    ("nack", "nack"),
    ("touch", "touch"),
    ("list_topics", "topics"),
    ("get_topic", "topic"),
    ("put_topic", "put_topic"),
    ("delete_topic", "delete_topic"),
    ("pause_topic", "pause_topic"),
    ("resume_topic", "resume_topic"),
    ("list_jobs", "list_jobs"),
    ("list_flow_keys", "flow_keys"),
    ("list_dead", "dead"),
    ("requeue_dead", "requeue_dead"),
    ("delete_dead", "delete_dead"),
    ("list_schedules", "schedules"),
    ("get_schedule", "schedule"),
    ("put_schedule", "put_schedule"),
    ("delete_schedule", "delete_schedule"),
    ("pause_schedule", "pause_schedule"),
    ("resume_schedule", "resume_schedule"),
    ("stats", "stats"),
    ("healthz", "healthz"),
    ("readyz", "none: a probe for load balancers"),
    ("metrics", "none: Prometheus scrapes it"),
    ("openapi", "none: the document itself"),
];
