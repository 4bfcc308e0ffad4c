//! The job types of the API: a push, its answer, a job as looked up, a reservation.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A job to push (`POST /v1/jobs`, or one entry of `POST /v1/jobs/batch`). Build it with
/// [`NewJob::new`] and the setters; every field left unset takes dq's default (the topic's, then the
/// server's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// The topic.
    pub topic: String,
    /// The body, any JSON value.
    pub body: Value,
    /// The id, an idempotency key for the job's life. [`crate::Client::push`] makes one (a ULID) when it is
    /// unset, so that a push it sends again cannot make a second job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Due this long after the push (Redis's clock). At most one of `delay_ms` and `run_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Due at this Unix time in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<u64>,
    /// Time to run: how long a reservation lasts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    /// Deliveries before the job goes dead (0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// A deduplication key: a second push with it within `dedup_ms` answers the first job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The deduplication window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_ms: Option<u64>,
    /// Retries end this long after the job's first due time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<u64>,
    /// The job's own backoff list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
}

impl NewJob {
    /// A job of `topic` with `body`, due now (or after the topic's default delay).
    pub fn new(topic: impl Into<String>, body: Value) -> Self {
        NewJob {
            topic: topic.into(),
            body,
            id: None,
            delay_ms: None,
            run_at: None,
            ttr_ms: None,
            max_attempts: None,
            dedup_key: None,
            dedup_ms: None,
            max_age_ms: None,
            backoff_ms: None,
        }
    }

    /// Sets the id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Due `ms` after the push.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }

    /// Due at Unix time `ms`.
    pub fn run_at(mut self, ms: u64) -> Self {
        self.run_at = Some(ms);
        self
    }

    /// Sets the time to run.
    pub fn ttr_ms(mut self, ms: u64) -> Self {
        self.ttr_ms = Some(ms);
        self
    }

    /// Sets the number of deliveries before the job goes dead.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Deduplicates by `key` for `window_ms`.
    pub fn dedup(mut self, key: impl Into<String>, window_ms: u64) -> Self {
        self.dedup_key = Some(key.into());
        self.dedup_ms = Some(window_ms);
        self
    }

    /// Sets the retry age.
    pub fn max_age_ms(mut self, ms: u64) -> Self {
        self.max_age_ms = Some(ms);
        self
    }

    /// Sets the job's own backoff list.
    pub fn backoff_ms(mut self, delays: Vec<u64>) -> Self {
        self.backoff_ms = Some(delays);
        self
    }
}

/// The answer to a push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushed {
    /// The job's id.
    pub id: String,
    /// `delayed` or `ready` (or, for a duplicate, the first job's state now).
    pub state: String,
    /// When the job is due, Unix ms on Redis's clock.
    pub run_at: u64,
    /// The topic (absent in a batch's results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// True when the push found its `dedup_key` held and answered the first job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// A job as looked up (`GET /v1/jobs/{id}`), and as the dead list shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The id.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The body.
    pub body: Value,
    /// `delayed`, `ready`, `reserved`, `done` or `dead`.
    pub state: String,
    /// When it is (or was) due, Unix ms.
    pub run_at: u64,
    /// Its time to run.
    pub ttr_ms: u64,
    /// Reservations so far.
    pub attempts: u32,
    /// Deliveries before it goes dead (0: unlimited).
    pub max_attempts: u32,
    /// When it was pushed, Unix ms.
    pub created_at: u64,
    /// What the last failed delivery said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When its reservation ends, while it is reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// When its retries end, for a job with a retry age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_until: Option<u64>,
    /// Its own backoff list, when it was pushed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
}

/// When a rescheduled job is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// This long from now.
    DelayMs(u64),
    /// At this Unix time in ms.
    RunAt(u64),
}

/// A reserve request (`POST /v1/reserve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reserve {
    /// Topics, highest priority first.
    pub topics: Vec<String>,
    /// Most jobs to take (1 ..= 100 by default limits).
    pub count: u32,
    /// How long to wait for a job when none is ready (a long poll, ≤ 30 s by default limits).
    pub timeout_ms: u64,
}

impl Reserve {
    /// One job of `topics`, without waiting.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Reserve {
            topics: topics.into_iter().map(Into::into).collect(),
            count: 1,
            timeout_ms: 0,
        }
    }

    /// Takes up to `n` jobs.
    pub fn count(mut self, n: u32) -> Self {
        self.count = n;
        self
    }

    /// Waits up to `ms` for a job.
    pub fn wait_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = ms;
        self
    }
}

/// A reserved job: it is the caller's until `deadline`, and settled with its `receipt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reserved {
    /// The id.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The body.
    pub body: Value,
    /// This delivery's number (1 for the first).
    pub attempt: u32,
    /// The receipt that ack, nack and touch must present.
    pub receipt: String,
    /// When the reservation ends, Unix ms on Redis's clock.
    pub deadline: u64,
    /// How long the reservation lasts from when it was made: touch after half of it, by this
    /// machine's clock, to keep a long job (0 from a server older than this field).
    #[serde(default)]
    pub ttr_ms: u64,
    /// The job's due time.
    pub run_at: u64,
}

/// A failed delivery (`POST /v1/jobs/{id}/nack`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Nack {
    /// Retry after this long; unset: the job's backoff list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// What went wrong, kept as the job's `last_error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
