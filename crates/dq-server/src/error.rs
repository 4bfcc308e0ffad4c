//! The JSON error answer: `{"error":{"code":"…","message":"…"}}`, one code per kind of failure.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use dq_api::error::{ErrorBody, ErrorCode, ErrorDetail};

/// A failed request, as the client sees it.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: ErrorCode,
    /// What was wrong, for people.
    pub message: String,
    /// The job a push with an unknown outcome went out as: push again with this id.
    pub id: Option<String>,
}

impl ApiError {
    /// The same error, its message naming the entry of a list request it is about (`jobs[3]: …`).
    pub fn in_entry(mut self, list: &str, i: usize) -> Self {
        self.message = format!("{list}[{i}]: {}", self.message);
        self
    }

    /// 400 `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: ErrorCode::InvalidArgument,
            message: message.into(),
            id: None,
        }
    }

    /// 401 `unauthorized`: no token, or not a valid one.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: ErrorCode::Unauthorized,
            message: message.into(),
            id: None,
        }
    }

    /// 403 `forbidden`: the token lacks the scope or the topic.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: ErrorCode::Forbidden,
            message: message.into(),
            id: None,
        }
    }

    /// 503 `overloaded`: a cap on connections or waiting long polls is reached; try again in a second.
    pub fn overloaded(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: ErrorCode::Overloaded,
            message: message.into(),
            id: None,
        }
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: ErrorCode::PayloadTooLarge,
            message: message.into(),
            id: None,
        }
    }

    /// The `{"error":{…}}` object, also used for per-item errors of a batch. A push whose outcome is
    /// unknown carries `"id"`, to push again with.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message.clone(),
                id: self.id.clone(),
            },
        }
    }
}

impl From<dq_core::Error> for ApiError {
    fn from(e: dq_core::Error) -> Self {
        use dq_core::Error as E;
        let (status, code) = match &e {
            E::Invalid(_) => (StatusCode::BAD_REQUEST, ErrorCode::InvalidArgument),
            E::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge),
            E::NotFound(_) | E::TopicNotFound(_) | E::ScheduleNotFound(_) => {
                (StatusCode::NOT_FOUND, ErrorCode::NotFound)
            }
            E::Conflict(_) => (StatusCode::CONFLICT, ErrorCode::Conflict),
            E::StaleReceipt => (StatusCode::CONFLICT, ErrorCode::StaleReceipt),
            E::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            E::Unavailable { .. } | E::OutOfMemory { .. } | E::Indeterminate { .. } | E::NotReplicated { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        };
        if status.is_server_error() {
            log_failure(&e);
        }
        // A 500 is dq's own fault: the details go to the log, not to the client. Any other message is
        // dq's own words (Redis's error is only its source, which goes to the log with it).
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            "internal error: the server's log has the details".to_string()
        } else {
            e.to_string()
        };
        let id = match &e {
            E::Indeterminate { id, .. } => id.clone(),
            _ => None,
        };
        ApiError {
            status,
            code,
            message,
            id,
        }
    }
}

/// Logs a failed request with its sources (Redis's error): once per kind of failure every 10 s, with how
/// many more there were since, so that an outage (Redis out of memory, say, failing every push) is a few
/// lines, not one per job.
fn log_failure(e: &dq_core::Error) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static LAST: Mutex<Option<HashMap<&'static str, (Instant, u64)>>> = Mutex::new(None);
    let kind = match e {
        dq_core::Error::Unavailable { .. } => "unavailable",
        dq_core::Error::OutOfMemory { .. } => "out of memory",
        dq_core::Error::Indeterminate { .. } => "outcome unknown",
        dq_core::Error::NotReplicated { .. } => "not replicated",
        _ => "internal",
    };
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let entry = last
        .get_or_insert_with(HashMap::new)
        .entry(kind)
        .or_insert((Instant::now(), 0));
    if entry.1 == 0 || entry.0.elapsed() >= Duration::from_secs(10) {
        let since = entry.1.saturating_sub(1);
        tracing::warn!(cause = %e.chain(), kind, more_since_last = since, "request failed");
        *entry = (Instant::now(), 1);
    } else {
        entry.1 += 1;
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if self.code == ErrorCode::Overloaded {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

/// Unknown path: 404 in the same JSON shape.
pub async fn no_route() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: ErrorCode::NotFound,
        message: "no such route".into(),
        id: None,
    }
}

/// Known path, wrong method: 405 in the same JSON shape.
pub async fn no_method() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: ErrorCode::InvalidArgument,
        message: "method not allowed on this route".into(),
        id: None,
    }
}
