//! Every failure's JSON body: `{"error": {"code", "message", "id"?}}`, one code per kind of failure. Which
//! failure answers which code and status is dq-server's to decide.

use serde::{Deserialize, Serialize};

/// The stable, machine-readable kind of a failure: `error.code` in every error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400 (or 405 for a known path with the wrong method): bad input; nothing was written.
    InvalidArgument,
    /// 401: no token, or not a valid one.
    Unauthorized,
    /// 403: the token lacks the scope or the topic; a cross-site state change; a host not allowed.
    Forbidden,
    /// 404: no such job, topic, schedule or route.
    NotFound,
    /// 409: the id already has a record; a reschedule of a job that is not delayed or ready.
    Conflict,
    /// 409: the receipt is not the job's current reservation.
    StaleReceipt,
    /// 413: a job body or a request body over its limit.
    PayloadTooLarge,
    /// 503 with `Retry-After: 1`: too many connections or waiting long polls.
    Overloaded,
    /// 503: Redis does not answer, refuses writes, or the outcome of a write is unknown.
    Unavailable,
    /// 500: Redis answered something unexpected (a bug); the server's log has the details.
    Internal,
}

impl ErrorCode {
    /// The code as the wire writes it (`stale_receipt`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::StaleReceipt => "stale_receipt",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// Every error answer: `{"error": {"code", "message", "id"?}}`; also one failed entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// What failed.
    pub error: ErrorDetail,
}

/// The inside of an error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// The kind of failure.
    pub code: ErrorCode,
    /// What was wrong, written for people.
    pub message: String,
    /// Only on a push whose outcome is unknown (503): the id it went out as; push again with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_written_as_named() {
        for code in [
            ErrorCode::InvalidArgument,
            ErrorCode::StaleReceipt,
            ErrorCode::PayloadTooLarge,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        }
    }
}
