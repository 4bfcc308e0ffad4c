//! What a call can fail with, keeping the kind: an answer of dq's (its status, code and message), a
//! request that never reached dq, one whose outcome is unknown, or an answer the client cannot read.

/// An error answer of dq's: `{"error": {"code", "message", "id"?}}` with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// The HTTP status (400, 401, 403, 404, 409, 413, 429, 503, 500), or 200 for one entry of a batch.
    pub status: u16,
    /// dq's error code: `invalid_argument`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `stale_receipt`, `payload_too_large`, `overloaded`, `unavailable`, `internal`.
    pub code: String,
    /// The message, written for people.
    pub message: String,
    /// For a push whose outcome dq could not learn: the id to push again with.
    pub id: Option<String>,
}

impl ApiError {
    /// Whether dq says nothing was done and the same request may simply be sent again later: the
    /// server was full (`overloaded`).
    pub fn nothing_done(&self) -> bool {
        self.code == "overloaded"
    }

    /// Whether another try may succeed: the server was full or a Redis partition did not answer.
    pub fn is_transient(&self) -> bool {
        self.status == 503 || self.status == 429
    }
}

/// The error of a client call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// dq answered with an error.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The request never reached dq (no connection could be made): nothing was done.
    #[error("could not connect to dq: {0}")]
    Connect(#[source] reqwest::Error),
    /// The request was sent but no answer came back (a time-out, a connection that broke): it may or may
    /// not have been carried out.
    #[error("no answer from dq, the outcome is unknown: {0}")]
    Unknown(#[source] reqwest::Error),
    /// dq answered something this client cannot read.
    #[error("unexpected answer from dq (HTTP {status}): {detail}")]
    Decode {
        /// The HTTP status of the answer.
        status: u16,
        /// What was wrong with it.
        detail: String,
    },
    /// The client was built with a bad base URL, or a bad argument was given to a call.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// The API error, if dq answered with one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(e) => Some(e),
            _ => None,
        }
    }

    /// Whether dq answered with this error code.
    pub fn is_code(&self, code: &str) -> bool {
        self.api().is_some_and(|e| e.code == code)
    }

    /// Whether the request surely did nothing, so that any request may be sent again.
    pub(crate) fn nothing_done(&self) -> bool {
        match self {
            Error::Connect(_) => true,
            Error::Api(e) => e.nothing_done(),
            _ => false,
        }
    }

    /// Whether another try may succeed, though the first may have been carried out.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Connect(_) | Error::Unknown(_) => true,
            Error::Api(e) => e.is_transient(),
            _ => false,
        }
    }

    pub(crate) fn from_reqwest(e: reqwest::Error) -> Error {
        if e.is_connect() {
            Error::Connect(e)
        } else if e.is_builder() {
            Error::Usage(e.to_string())
        } else {
            Error::Unknown(e)
        }
    }
}

impl ApiError {
    /// dq's error answer `detail`, with the HTTP status it came with.
    pub(crate) fn from_detail(detail: dq_api::ErrorDetail, status: u16) -> ApiError {
        ApiError {
            status,
            code: detail.code.as_str().to_string(),
            message: detail.message,
            id: detail.id,
        }
    }

    /// dq's error shape with a code that [`dq_api::ErrorCode`] does not name (a newer server's): read
    /// field by field, so the caller still gets the status, code and message.
    pub(crate) fn from_unknown_code(body: &[u8], status: u16) -> Option<ApiError> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let error = value.get("error")?;
        Some(ApiError {
            status,
            code: error.get("code")?.as_str()?.to_string(),
            message: error.get("message")?.as_str()?.to_string(),
            id: error.get("id").and_then(|id| id.as_str()).map(str::to_string),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ApiError;

    #[test]
    fn an_error_code_this_client_does_not_know_is_still_an_api_error() {
        let body = br#"{"error": {"code": "rate_limited", "message": "slow down", "id": "j1"}}"#;
        let e = ApiError::from_unknown_code(body, 429).expect("dq's error shape");
        assert_eq!(
            e,
            ApiError {
                status: 429,
                code: "rate_limited".into(),
                message: "slow down".into(),
                id: Some("j1".into()),
            }
        );
        assert!(ApiError::from_unknown_code(b"<html>bad gateway</html>", 502).is_none());
        assert!(ApiError::from_unknown_code(br#"{"error": "text"}"#, 500).is_none());
    }
}
