//! A JSON body extractor whose every refusal is our JSON error: axum's own answers in plain text and
//! insists on a `Content-Type`, which curl users forget.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The request body parsed as `T`: 413 when over the size limit, 400 when not JSON or not of `T`'s shape.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large("request body is larger than the limit")
            } else {
                ApiError::invalid(format!("cannot read the request body: {}", e.body_text()))
            }
        })?;
        if bytes.is_empty() {
            return Err(ApiError::invalid("a JSON body is required"));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))
    }
}
