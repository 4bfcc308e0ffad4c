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
        // serde fills a struct from an array too; every request body of ours is an object.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::invalid("the request body must be a JSON object"));
        }
        // The path names the field in nested bodies (`retry.max_attempts`), which serde's message omits.
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(de).map(JsonBody).map_err(|e| {
            let path = e.path().to_string();
            if path == "." || path.is_empty() {
                ApiError::invalid(format!("invalid request body: {}", e.inner()))
            } else {
                ApiError::invalid(format!("invalid request body at `{path}`: {}", e.inner()))
            }
        })
    }
}
