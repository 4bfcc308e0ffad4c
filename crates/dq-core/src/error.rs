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
    /// The partition that holds (or would hold) the job cannot be reached, or Redis did not confirm a
    /// write as asked (`unavailable`, 503).
    #[error("{} is unavailable: {reason}", place(*partition))]
    Unavailable {
        /// The partition, when the operation was on one.
        partition: Option<u16>,
        /// What failed.
        reason: String,
    },
    /// The write was made, but fewer replicas than `redis.wait_replicas` confirmed it in time
    /// (`unavailable`, 503). It stays: a retry with the same id is a conflict, never a second job.
    #[error(
        "{} made the write, but only {got} of the {want} replicas asked for (redis.wait_replicas) confirmed it in time; it stays",
        place(Some(*partition))
    )]
    NotReplicated {
        /// The partition written.
        partition: u16,
        /// Replicas asked for.
        want: u32,
        /// Replicas that confirmed.
        got: u32,
    },
    /// Redis answered something dq did not expect: a bug, reported as 500.
    #[error("unexpected answer from {}: {message}", place(*partition))]
    Redis {
        /// The partition, when the operation was on one.
        partition: Option<u16>,
        /// What was unexpected.
        message: String,
    },
}

/// Result of a queue operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Sorts a Redis error: connection trouble makes the partition unavailable, anything else is
    /// unexpected.
    pub(crate) fn from_redis(partition: Option<u16>, err: redis::RedisError) -> Self {
        if is_connection_error(&err) {
            Error::Unavailable {
                partition,
                reason: err.to_string(),
            }
        } else {
            Error::Redis {
                partition,
                message: err.to_string(),
            }
        }
    }

    /// A copy for each of the callers that share one failed call (a group commit, a batch).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Unavailable { partition, reason } => Error::Unavailable {
                partition: *partition,
                reason: reason.clone(),
            },
            Error::Redis { partition, message } => Error::Redis {
                partition: *partition,
                message: message.clone(),
            },
            Error::NotReplicated { partition, want, got } => Error::NotReplicated {
                partition: *partition,
                want: *want,
                got: *got,
            },
            other => Error::Redis {
                partition: None,
                message: other.to_string(),
            },
        }
    }
}

fn place(partition: Option<u16>) -> String {
    partition.map_or_else(|| "Redis".to_string(), |p| format!("partition {p}"))
}

/// Whether an error means the connection (or the server) is gone, rather than a command's own failure.
pub(crate) fn is_connection_error(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
        || matches!(
            err.code(),
            Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "READONLY")
        )
}
