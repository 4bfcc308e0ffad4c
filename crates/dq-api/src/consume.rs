//! Pull consumers on the wire: reserve (with a long poll), ack, ack many, nack, touch.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::RawBody;
use crate::error::ErrorBody;
#[cfg(feature = "openapi")]
use crate::job::PushRequest;
use crate::job::{JobRef, Reservation};

/// `POST /v1/reserve` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReserveRequest {
    /// Topics, highest priority first.
    pub topics: Vec<String>,
    /// Most jobs to take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Long poll: how long to wait for a job when none is ready (0 = answer at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
}

impl ReserveRequest {
    /// One job of `topics`, without waiting.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ReserveRequest {
            topics: topics.into_iter().map(Into::into).collect(),
            count: None,
            timeout_ms: None,
        }
    }

    /// Takes up to `n` jobs.
    pub fn count(mut self, n: u32) -> Self {
        self.count = Some(n.into());
        self
    }

    /// Waits up to `ms` for a job when none is ready (a long poll).
    pub fn wait_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(i64::try_from(ms).unwrap_or(i64::MAX));
        self
    }

    /// How long the reserve may wait, ms (0: it answers at once).
    pub fn wait(&self) -> u64 {
        self.timeout_ms.map_or(0, |t| t.max(0) as u64)
    }
}

/// `POST /v1/reserve` answer. A typed struct, not `json!`: that would turn each job's raw body into a
/// `serde_json::Value`, parsing it again on every reserve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// The document has called it `Reserved` since v1; in Rust that name would say "a reserved job".
#[cfg_attr(feature = "openapi", schema(as = Reserved, bound = ""))]
pub struct ReserveAnswer<B = RawBody> {
    /// The reserved jobs; empty when none became ready in time.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Reservation>))]
    pub jobs: Vec<Reservation<B>>,
}

/// `POST /v1/jobs/{id}/ack` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    /// The receipt of the current reservation.
    pub receipt: String,
    /// Who worked on the job, for its history (`consumer` of the attempt; at most 128 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Jobs to push with the ack (at most 100, each a push request without `id`, `dedup_key`,
    /// `coalesce_key` or `flow_key`): stored together with the job's success, once, with ids
    /// `<job id>~<index>`; the token needs `produce` on their topics. The answer is then 200 with
    /// their ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<PushRequest>>))]
    pub push: Option<Vec<RawBody>>,
}

/// `POST /v1/jobs/{id}/ack` answer when the ack pushed jobs: their ids, in the order given (a fan-out
/// topic's job with its children).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AckPushed {
    /// The jobs the ack pushed.
    pub pushed: Vec<JobRef>,
}

/// `POST /v1/jobs/ack` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckManyRequest {
    /// The reservations to finish.
    #[serde(deserialize_with = "crate::strict::objects")]
    pub acks: Vec<AckEntry>,
}

/// One entry of `POST /v1/jobs/ack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckEntry {
    /// The job's id.
    pub id: String,
    /// The receipt of its current reservation.
    pub receipt: String,
    /// Who worked on the job, for its history (`consumer` of the attempt; at most 128 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

/// The entry that finishes a reservation.
impl<B> From<&Reservation<B>> for AckEntry {
    fn from(r: &Reservation<B>) -> Self {
        AckEntry {
            id: r.id.clone(),
            receipt: r.receipt.clone(),
            consumer: None,
        }
    }
}

/// `POST /v1/jobs/ack` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AckManyAnswer {
    /// One result per entry, in order.
    pub results: Vec<AckResult>,
}

/// One entry of the `POST /v1/jobs/ack` answer.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum AckResult {
    /// The job is done: `{}`.
    Acked(Acked),
    /// This ack failed (`stale_receipt`, `not_found`, `forbidden`, `unavailable`, `internal`); the others stand.
    Failed(ErrorBody),
}

/// An entry with an `error` is a failure; any other (`{}`) an ack that finished its job. (Derived, the
/// empty `Acked` would match every entry.)
impl<'de> Deserialize<'de> for AckResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entry = serde_json::Value::deserialize(d)?;
        if entry.get("error").is_some() {
            ErrorBody::deserialize(entry)
                .map(AckResult::Failed)
                .map_err(D::Error::custom)
        } else {
            Ok(AckResult::Acked(Acked {}))
        }
    }
}

/// An ack that finished its job: an empty object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Acked {}

/// `POST /v1/jobs/{id}/nack` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NackRequest {
    /// The receipt of the current reservation.
    pub receipt: String,
    /// Wait this long before the next delivery (else the backoff schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// Why it failed, kept as the job's `last_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who worked on the job, for its history (`consumer` of the attempt; at most 128 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

/// `POST /v1/jobs/{id}/touch` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TouchRequest {
    /// The receipt of the current reservation.
    pub receipt: String,
    /// New TTR from now (else the job's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<i64>,
}

/// `POST /v1/jobs/{id}/touch` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Touched {
    /// The reservation's new end, Unix ms (Redis's clock).
    pub deadline: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_entries_are_done_or_an_error() {
        let answer: AckManyAnswer =
            serde_json::from_str(r#"{"results": [{}, {"error": {"code": "stale_receipt", "message": "m"}}]}"#).unwrap();
        assert!(matches!(answer.results[0], AckResult::Acked(_)));
        assert!(matches!(&answer.results[1], AckResult::Failed(e) if e.error.message == "m"));
    }

    #[test]
    fn a_reserve_sends_what_is_set() {
        let r = ReserveRequest::new(["a"]).count(5);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"topics": ["a"], "count": 5})
        );
        assert_eq!((r.wait(), r.wait_ms(100).wait()), (0, 100));
    }
}
