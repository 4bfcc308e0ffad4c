//! The job types of the API, as a client reads them: dq-api's, with a job's body a `serde_json::Value`;
//! and the options of a reschedule and a nack.

use serde_json::Value;

/// A job to push (`POST /v1/jobs`, or one entry of `POST /v1/jobs/batch`). Build it with
/// [`PushRequest::new`](dq_api::PushRequest::new) and the setters; every field left unset takes dq's
/// default (the topic's, then the server's). [`crate::Client::push`] gives a job without an id a ULID,
/// so that a push it sends again cannot make a second job.
pub type PushRequest = dq_api::PushRequest<Value>;

/// A job as looked up (`GET /v1/jobs/{id}`), and as the dead list shows it.
pub type Job = dq_api::Job<Value>;

/// A reserved job: it is the caller's until `deadline`, and settled with its `receipt`.
pub type Reservation = dq_api::Reservation<Value>;

/// When a rescheduled job is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// This long from now.
    DelayMs(u64),
    /// At this Unix time in ms.
    RunAt(i64),
}

impl From<When> for dq_api::RescheduleRequest {
    fn from(when: When) -> Self {
        match when {
            When::DelayMs(ms) => dq_api::RescheduleRequest {
                delay_ms: Some(i64::try_from(ms).unwrap_or(i64::MAX)),
                run_at: None,
                priority: None,
            },
            When::RunAt(at) => dq_api::RescheduleRequest {
                delay_ms: None,
                run_at: Some(at),
                priority: None,
            },
        }
    }
}

/// What a failed delivery says (`POST /v1/jobs/{id}/nack`, with the reservation's receipt).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nack {
    /// Retry after this long; unset: the job's backoff list.
    pub delay_ms: Option<u64>,
    /// What went wrong, kept as the job's `last_error`.
    pub error: Option<String>,
}

impl Nack {
    /// The request body for the reservation of `receipt`, from `consumer`.
    pub(crate) fn request(&self, receipt: &str, consumer: Option<String>) -> dq_api::NackRequest {
        dq_api::NackRequest {
            receipt: receipt.to_string(),
            delay_ms: self.delay_ms.map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
            error: self.error.clone(),
            consumer,
        }
    }
}
