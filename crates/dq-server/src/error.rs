//! The JSON error answer: `{"error":{"code":"…","message":"…"}}`, one code per kind of failure.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failed request, as the client sees it.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What was wrong, for people.
    pub message: String,
}

impl ApiError {
    /// 400 `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_argument",
            message: message.into(),
        }
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "payload_too_large",
            message: message.into(),
        }
    }

    /// The `{"error":{…}}` object, also used for per-item errors of a batch.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message}})
    }
}

impl From<dq_core::Error> for ApiError {
    fn from(e: dq_core::Error) -> Self {
        use dq_core::Error as E;
        let (status, code) = match &e {
            E::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_argument"),
            E::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            E::NotFound(_) | E::TopicNotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            E::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            E::StaleReceipt => (StatusCode::CONFLICT, "stale_receipt"),
            E::Unavailable { .. } | E::NotReplicated { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        if status.is_server_error() {
            tracing::warn!(cause = %e, "request failed");
        }
        ApiError {
            status,
            code,
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// Unknown path: 404 in the same JSON shape.
pub async fn no_route() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "not_found",
        message: "no such route".into(),
    }
}

/// Known path, wrong method: 405 in the same JSON shape.
pub async fn no_method() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "invalid_argument",
        message: "method not allowed on this route".into(),
    }
}
