//! Jobs on the wire: a push (`POST /v1/jobs`, and each entry of `POST /v1/jobs/batch`) and its answers, a
//! job as looked up, a reservation, a reschedule.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::RawBody;
use crate::error::ErrorBody;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting in a delay bucket for its due time.
    Delayed,
    /// Due, in its topic's ready queue.
    Ready,
    /// Handed to a consumer until its deadline.
    Reserved,
    /// Acked; the record stays for lookups for the retention period.
    Done,
    /// Used all its attempts; in its topic's dead list.
    Dead,
}

impl State {
    /// Every state, in the order of a job's life.
    pub const ALL: [State; 5] = [State::Delayed, State::Ready, State::Reserved, State::Done, State::Dead];

    /// The name used in Redis, the API and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Delayed => "delayed",
            State::Ready => "ready",
            State::Reserved => "reserved",
            State::Done => "done",
            State::Dead => "dead",
        }
    }

    /// Parses the name stored in Redis.
    pub fn parse(s: &str) -> Option<Self> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state equals its name: `job.state == "done"`.
impl PartialEq<str> for State {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// A state equals its name: `job.state == "done"`.
impl PartialEq<&str> for State {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The priority of a job pushed without one. Lower is more urgent; beanstalkd clients use 1024 too.
pub const DEFAULT_PRIORITY: u32 = 1024;

fn default_priority() -> u32 {
    DEFAULT_PRIORITY
}

/// A push as the API receives it (`POST /v1/jobs`, and each entry of a batch).
//
// (Not in the doc comment, which is the OpenAPI document's description.) Integers are `i64` even where
// only some are valid, so that a negative or out-of-range value is refused with a message naming the field
// and its range (dq-core checks them) rather than a parse error. Build one with [`PushRequest::new`] and
// the setters; a field left unset takes dq's default (the topic's, then the server's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
#[serde(deny_unknown_fields)]
pub struct PushRequest<B = RawBody> {
    /// The job's kind.
    pub topic: String,
    /// Producer-chosen id: the idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Any JSON value, kept as the producer wrote it.
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub body: B,
    /// Due in this many ms from now (Redis's now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// Due at this Unix time in ms; a past time means ready now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<i64>,
    /// Time-to-run of each reservation, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<i64>,
    /// Deliveries before the job goes dead (0 = unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i64>,
    /// Deduplication key: a second push to the topic with this key within `dedup_ms` answers with the
    /// first job instead of making one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The deduplication window in ms, counted from the push that made the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ms: Option<i64>,
    /// Retries end this many ms after the job's first due time (else the topic's `retry.max_age_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<i64>,
    /// The job's own backoff list, in ms (else the topic's, or `jobs.backoff_ms`, at each failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
    /// 0 ..= 4294967295, lower is more urgent (default 1024): within its topic a ready job is
    /// reserved and delivered by priority, then by due time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Coalescing key (a job id's syntax): pushes to the topic with this key while its job is pending
    /// are one job, as `coalesce` says. Only with `coalesce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce_key: Option<String>,
    /// How pushes with `coalesce_key` become one job. Only with `coalesce_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<Coalesce>,
    /// Flow key (a job id's syntax, up to 128 bytes; a customer, a tenant, an endpoint): the topic's
    /// `flow` limits apply to each key separately, and the keys with ready jobs take turns, so one
    /// key's backlog never holds the others back. Not with `id` (dq makes the id, in the key's place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_key: Option<String>,
    /// W3C trace context: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case. The job
    /// joins this trace: it is stored with the job and handed on with each delivery (the callback's
    /// `traceparent` header, the reserve answer). The request's `traceparent` header does the same for
    /// a push without this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// W3C `tracestate` (at most 512 characters, the list syntax), only with `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// How the pushes of one `coalesce_key` become one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Coalesce {
    /// `first`: the first push's job stands for `window_ms` (as `dedup_key`); `last`: each push
    /// replaces the pending job's body and moves it to now + `window_ms` (debounce); `merge`: each
    /// push's body is appended to the pending job's `{"items": […]}`, due `window_ms` after the first.
    pub mode: CoalesceMode,
    /// The window, ms: how long a `first` key holds, the quiet time a `last` job waits for, how long a
    /// `merge` job gathers.
    pub window_ms: i64,
    /// `last` only: the job is due at most this long after the push that started it, however often it
    /// is pushed again (absent: no bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<i64>,
    /// `merge` only: the job is due at once when it holds this many items (absent: by the window only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<i64>,
}

/// A coalescing mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CoalesceMode {
    /// The first push wins for the window (deduplication).
    First,
    /// The last push wins, due a window after it (debounce).
    Last,
    /// Every push is an item of one job (batching).
    Merge,
}

impl CoalesceMode {
    /// Its name in the API and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            CoalesceMode::First => "first",
            CoalesceMode::Last => "last",
            CoalesceMode::Merge => "merge",
        }
    }
}

/// A value for an `i64` field given as a `u64`: one beyond `i64::MAX` stays beyond every limit.
fn wide(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl<B> PushRequest<B> {
    /// A job of `topic` with `body`, due now (or after the topic's default delay).
    pub fn new(topic: impl Into<String>, body: B) -> Self {
        PushRequest {
            topic: topic.into(),
            id: None,
            body,
            delay_ms: None,
            run_at: None,
            ttr_ms: None,
            max_attempts: None,
            dedup_key: None,
            dedup_ms: None,
            max_age_ms: None,
            backoff_ms: None,
            priority: None,
            coalesce_key: None,
            coalesce: None,
            flow_key: None,
            traceparent: None,
            tracestate: None,
        }
    }

    /// Puts the job in a trace: a W3C `traceparent`, and a `tracestate` when there is one.
    pub fn trace(mut self, traceparent: impl Into<String>, tracestate: Option<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self.tracestate = tracestate;
        self
    }

    /// Sets the flow key: the topic's `flow` limits apply to each key separately, and keys take turns.
    pub fn flow_key(mut self, key: impl Into<String>) -> Self {
        self.flow_key = Some(key.into());
        self
    }

    /// Sets the id, an idempotency key for the job's life.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Due `ms` after the push.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(wide(ms));
        self
    }

    /// Due at Unix time `ms`.
    pub fn run_at(mut self, ms: i64) -> Self {
        self.run_at = Some(ms);
        self
    }

    /// Sets the time to run.
    pub fn ttr_ms(mut self, ms: u64) -> Self {
        self.ttr_ms = Some(wide(ms));
        self
    }

    /// Sets the number of deliveries before the job goes dead (0: unlimited).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n.into());
        self
    }

    /// Deduplicates by `key` for `window_ms`.
    pub fn dedup(mut self, key: impl Into<String>, window_ms: u64) -> Self {
        self.dedup_key = Some(key.into());
        self.dedup_ms = Some(wide(window_ms));
        self
    }

    /// Sets the retry age.
    pub fn max_age_ms(mut self, ms: u64) -> Self {
        self.max_age_ms = Some(wide(ms));
        self
    }

    /// Sets the job's own backoff list.
    pub fn backoff_ms(mut self, delays: Vec<u64>) -> Self {
        self.backoff_ms = Some(delays);
        self
    }

    /// Sets the priority (lower is more urgent; default [`DEFAULT_PRIORITY`]).
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority.into());
        self
    }

    /// Coalesces with the other pushes of `key` in the topic, as `coalesce` says.
    pub fn coalesce(mut self, key: impl Into<String>, coalesce: Coalesce) -> Self {
        self.coalesce_key = Some(key.into());
        self.coalesce = Some(coalesce);
        self
    }
}

/// `POST /v1/jobs` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PushAnswer {
    /// Given or generated id.
    pub id: String,
    /// The job's topic.
    pub topic: String,
    /// `delayed` or `ready`.
    pub state: State,
    /// Due time, Unix ms.
    pub run_at: i64,
    /// Present (true) when the push's deduplication key found a job inside its window: this is that
    /// job, and nothing was stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Present (true) when the push went into the pending job of its `coalesce_key` (or its
    /// `dedup_key`): this is that job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub coalesced: bool,
    /// A fan-out topic's push: the jobs it made, one per topic of its `fanout` (this job, their parent,
    /// is `done`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<JobRef>,
}

/// One entry of the `POST /v1/jobs/batch` answer, in the order of the request: the job stored (or found
/// by its deduplication key), or why this entry failed.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum PushResult {
    /// Stored, or a duplicate.
    Pushed(BatchPushed),
    /// This entry failed (`conflict`, `unavailable`, `internal`); the others stand.
    Failed(ErrorBody),
}

/// An entry with an `error` is a failure, any other the job.
impl<'de> Deserialize<'de> for PushResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entry = serde_json::Value::deserialize(d)?;
        if entry.get("error").is_some() {
            ErrorBody::deserialize(entry)
                .map(PushResult::Failed)
                .map_err(D::Error::custom)
        } else {
            BatchPushed::deserialize(entry)
                .map(PushResult::Pushed)
                .map_err(D::Error::custom)
        }
    }
}

/// A stored entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchPushed {
    /// Given or generated id.
    pub id: String,
    /// `delayed` or `ready`.
    pub state: State,
    /// Due time, Unix ms.
    pub run_at: i64,
    /// Present (true) when the entry's deduplication key found a job: this is that job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Present (true) when the entry went into the pending job of its coalescing key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub coalesced: bool,
    /// A fan-out topic's push: the jobs it made (as in [`PushAnswer`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<JobRef>,
}

/// `POST /v1/jobs/batch` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchAnswer {
    /// One result per entry, in order.
    pub results: Vec<PushResult>,
}

/// `POST /v1/jobs/batch` body.
//
// The server reads each entry as raw JSON (`J`'s default) and parses it itself; a client sends
// `PushRequest`s.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
#[serde(deny_unknown_fields)]
pub struct BatchRequest<J = RawBody> {
    /// Each entry a push; parsed one by one so an error can name its index.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<PushRequest>))]
    pub jobs: Vec<J>,
}

/// `PATCH /v1/jobs/{id}` body: a new due time (`delay_ms` or `run_at`, not both), a new `priority`, or
/// both (a `null` counts as absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RescheduleRequest {
    /// New due time relative to now (Redis's now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// New due time, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<i64>,
    /// New priority, 0 ..= 4294967295 (lower is more urgent); the due time stays unless given too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

/// A stored job, as a lookup returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
pub struct Job<B = RawBody> {
    /// Unique id.
    pub id: String,
    /// The job's kind.
    pub topic: String,
    /// The body as the producer wrote it.
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub body: B,
    /// Where the job is.
    pub state: State,
    /// Due time, Unix ms.
    pub run_at: i64,
    /// Time-to-run in ms.
    pub ttr_ms: u64,
    /// Deliveries so far.
    pub attempts: u32,
    /// Deliveries before dead (0 = unlimited).
    pub max_attempts: u32,
    /// When it was pushed, Unix ms (Redis's clock).
    pub created_at: i64,
    /// What the last failed delivery said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// End of the current reservation, Unix ms, while reserved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    /// When its retries end, Unix ms: its first due time plus the max age it was pushed with (from the
    /// push's `max_age_ms` or its topic's `retry.max_age_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_until: Option<i64>,
    /// Its own backoff list, ms, when it was pushed with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
    /// Lower is more urgent (default 1024): ready jobs of a topic go out by priority, then due time.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default = "default_priority")] // absent from a server older than this field
    pub priority: u32,
    /// Its flow key, when it was pushed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_key: Option<String>,
    /// The W3C trace it belongs to, when it was pushed in one: the producer's `traceparent`, or, when
    /// dq-server exports spans, its push span's (same trace id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The trace's W3C `tracestate`, when it was pushed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// The job that started it (a fan-out's parent, or the job whose callback's answer or ack pushed
    /// it), read from its id (`<parent>~<suffix>`); absent for a job a producer pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The jobs it started, with their states: a fan-out's children, or what its answer or ack pushed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<JobRef>,
}

/// A job named with its topic (a job another started, or one it started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRef {
    /// The job's id.
    pub id: String,
    /// Its topic.
    pub topic: String,
    /// Its state when last read; absent when it is gone (its done record expired, or it was deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

/// A job handed out by reserve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
pub struct Reservation<B = RawBody> {
    /// The job's id.
    pub id: String,
    /// The job's kind.
    pub topic: String,
    /// The body as the producer wrote it.
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub body: B,
    /// Which delivery this is (1 for the first).
    pub attempt: u32,
    /// Proof of this reservation, needed by ack, nack and touch.
    pub receipt: String,
    /// When the reservation ends unless touched, Unix ms.
    pub deadline: i64,
    /// The job's due time, Unix ms.
    pub run_at: i64,
    /// How long the reservation lasts from when it was made, ms (`deadline` on Redis's clock minus
    /// Redis's time then): a worker touches at half of it without comparing its clock to Redis's.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)] // 0 from a server older than this field
    pub ttr_ms: u64,
    /// The job's flow key, when it was pushed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_key: Option<String>,
    /// The W3C trace the job belongs to, when it was pushed in one: continue it (a span of the work,
    /// child of this parent) so the work shows up in the producer's trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The trace's W3C `tracestate`, when it was pushed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
            assert_eq!(s, s.as_str());
        }
        assert_eq!(State::parse("x"), None);
    }

    #[test]
    fn a_push_is_sent_without_the_fields_left_unset() {
        let push = PushRequest::new("t", serde_json::json!({"a": 1}))
            .delay_ms(5)
            .max_attempts(2);
        assert_eq!(
            serde_json::to_value(&push).unwrap(),
            serde_json::json!({"topic": "t", "body": {"a": 1}, "delay_ms": 5, "max_attempts": 2})
        );
        let back: PushRequest<serde_json::Value> =
            serde_json::from_value(serde_json::to_value(&push).unwrap()).unwrap();
        assert_eq!(back, push);
        assert_eq!(PushRequest::new("t", 1).delay_ms(u64::MAX).delay_ms, Some(i64::MAX));
    }

    #[test]
    fn a_trace_context_goes_out_and_comes_back_only_when_there_is_one() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let push = PushRequest::new("t", 1).trace(tp, Some("k=v".into()));
        assert_eq!(
            serde_json::to_value(&push).unwrap(),
            serde_json::json!({"topic": "t", "body": 1, "traceparent": tp, "tracestate": "k=v"})
        );
        let r: Reservation<serde_json::Value> = serde_json::from_value(serde_json::json!({
            "id": "a", "topic": "t", "body": 1, "attempt": 1, "receipt": "r", "deadline": 2, "run_at": 1,
            "ttr_ms": 1, "traceparent": tp}))
        .unwrap();
        assert_eq!((r.traceparent.as_deref(), r.tracestate.as_deref()), (Some(tp), None));
        let untraced = serde_json::to_value(Reservation { traceparent: None, ..r }).unwrap();
        assert!(untraced.get("traceparent").is_none() && untraced.get("tracestate").is_none());
    }

    #[test]
    fn batch_entries_are_a_job_or_an_error() {
        let answer: BatchAnswer = serde_json::from_str(
            r#"{"results": [{"id": "a", "state": "ready", "run_at": 5},
                            {"error": {"code": "conflict", "message": "taken"}}]}"#,
        )
        .unwrap();
        assert!(matches!(&answer.results[0], PushResult::Pushed(p) if p.id == "a" && !p.duplicate));
        assert!(matches!(&answer.results[1], PushResult::Failed(e) if e.error.code == crate::ErrorCode::Conflict));
    }
}
