//! A job's history: one entry per delivery attempt, push or pull (`GET /v1/jobs/{id}/attempts`).

use serde::{Deserialize, Serialize};

/// How many attempts a job keeps: the newest.
pub const KEPT_ATTEMPTS: usize = 20;

/// How many bytes of a callback's answer an attempt keeps.
pub const ANSWER_BYTES: usize = 512;

/// How a delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acked: the callback answered 2xx (push), or the worker acked (pull).
    Acked,
    /// Nacked by a pull worker (`POST /v1/jobs/{id}/nack`).
    Nacked,
    /// The callback answered something other than success, or could not be reached.
    Failed,
    /// The callback gave no answer within `callback.timeout_ms`.
    TimedOut,
    /// The reservation ended at its deadline with no ack or nack (the worker died or hung).
    Expired,
}

impl Outcome {
    /// Every outcome, in the order of their codes (1 ..= 5) in a stored attempt.
    pub const ALL: [Outcome; 5] = [
        Outcome::Acked,
        Outcome::Nacked,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::Expired,
    ];

    /// The outcome as the API names it (`acked`, `timed_out`, …), for what people read.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acked => "acked",
            Outcome::Nacked => "nacked",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Expired => "expired",
        }
    }

    /// The outcome's code in a stored attempt (1 ..= 5).
    pub fn code(self) -> u8 {
        Outcome::ALL.iter().position(|o| *o == self).expect("listed") as u8 + 1
    }

    /// The outcome of a stored code.
    pub fn of_code(code: u64) -> Option<Outcome> {
        Outcome::ALL.get((code as usize).checked_sub(1)?).copied()
    }
}

/// One delivery attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// Which delivery it was (1 for the first).
    pub attempt: u32,
    /// When it began, Unix ms: the callback's request sent (push), or the reservation made (pull; for
    /// an expired reservation, its deadline minus the job's TTR when the reservation's time is unknown).
    pub started_at: i64,
    /// How long it took, ms: to the callback's answer (push), or to the ack, nack or deadline.
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The callback's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What went wrong, as the job's `last_error` said then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first 512 bytes of the callback's answer (whole characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Who made it: the dq-consumer instance (`<host>:<pid>`), or the name a pull worker gave with its
    /// ack or nack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

/// `GET /v1/jobs/{id}/attempts` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempts {
    /// The job's id.
    pub id: String,
    /// Deliveries so far (the job's `attempts`); older ones than the kept 20 are counted here only.
    pub attempts: u32,
    /// The newest attempts first, at most 20.
    pub history: Vec<Attempt>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_codes_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::of_code(o.code() as u64), Some(o));
        }
        assert_eq!(Outcome::of_code(0), None);
        assert_eq!(Outcome::of_code(6), None);
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_string(&o).unwrap(), format!("\"{}\"", o.as_str()));
        }
    }
}
