//! The errors of the queue API, each of which maps to one error code of the HTTP API.

/// Why a queue operation did not happen. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request is malformed or outside the limits (`invalid_argument`, 400).
    #[error("{0}")]
    Invalid(String),
    /// Something is larger than its limit (`payload_too_large`, 413).
    #[error("{0}")]
    TooLarge(String),
    /// No live job has this id (`not_found`, 404).
    #[error("job `{0}` not found")]
    NotFound(String),
    /// No topic of this name is registered or has jobs (`not_found`, 404).
    #[error("topic `{0}` not found")]
    TopicNotFound(String),
    /// The request conflicts with the job's state, e.g. a push of a live id (`conflict`, 409).
    #[error("{0}")]
    Conflict(String),
    /// The receipt does not name the job's current reservation (`stale_receipt`, 409).
    #[error("the receipt does not match the job's current reservation (it expired, or the job was handed out again)")]
    StaleReceipt,
    /// The shard that holds (or would hold) the job cannot be reached (`unavailable`, 503).
    #[error("shard {shard} is unavailable: {reason}")]
    Unavailable {
        /// Index of the shard in `redis.shards`.
        shard: usize,
        /// What failed.
        reason: String,
    },
    /// Redis answered something dq did not expect: a bug, reported as 500.
    #[error("unexpected answer from shard {shard}: {message}")]
    Redis {
        /// Index of the shard in `redis.shards`.
        shard: usize,
        /// What was unexpected.
        message: String,
    },
}

/// Result of a queue operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Sorts a Redis error: connection trouble makes the shard unavailable, anything else is unexpected.
    pub(crate) fn from_redis(shard: usize, err: redis::RedisError) -> Self {
        if is_connection_error(&err) {
            Error::Unavailable {
                shard,
                reason: err.to_string(),
            }
        } else {
            Error::Redis {
                shard,
                message: err.to_string(),
            }
        }
    }
}

/// Whether an error means the connection (or the server) is gone, rather than a command's own failure.
pub(crate) fn is_connection_error(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
        || matches!(err.code(), Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN"))
}
