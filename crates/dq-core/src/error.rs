//! The errors of the queue API, each of which maps to one error code of the HTTP API.
//!
//! A failure to reach Redis comes in two kinds, which callers must not confuse (invariant 8):
//! [`Error::Unavailable`], the operation did not run (Redis was not reached, or refused it before
//! running it), so it may be sent elsewhere; and [`Error::Indeterminate`], it was sent and no answer
//! came, so it may have run, and only the same operation may be sent again.

/// Why a queue operation did not happen, or may not have. Nothing was written, except where a variant
/// says otherwise ([`Error::Indeterminate`], [`Error::NotReplicated`]).
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
    /// No schedule of this name is registered (`not_found`, 404).
    #[error("schedule `{0}` not found")]
    ScheduleNotFound(String),
    /// The request conflicts with the job's state, e.g. a push of a live id (`conflict`, 409).
    #[error("{0}")]
    Conflict(String),
    /// The receipt does not name the job's current reservation (`stale_receipt`, 409).
    #[error("the receipt does not match the job's current reservation (it expired, or the job was handed out again)")]
    StaleReceipt,
    /// The partition that holds (or would hold) the job cannot be reached, or Redis refused the
    /// operation before running it (loading, busy, read-only, a cluster moving or down): it did not run,
    /// and may be sent again or elsewhere (`unavailable`, 503).
    #[error("{} is unavailable: {reason}", place(*partition))]
    Unavailable {
        /// The partition, when the operation was on one.
        partition: Option<u16>,
        /// What failed.
        reason: String,
    },
    /// Redis is out of memory (`maxmemory`, with the `noeviction` policy dq requires) and refused the
    /// write before running it (`unavailable`, 503).
    #[error("{} is out of memory (Redis's maxmemory): it refuses writes until memory is freed; nothing was written", place(*partition))]
    OutOfMemory {
        /// The partition, when the operation was on one.
        partition: Option<u16>,
    },
    /// The operation was sent, and no answer came (a timeout, or the connection broke after sending):
    /// it may have run or not (`unavailable`, 503). Only the same operation may be sent again, never a
    /// copy under a new id; for a push, again with the same id (a conflict then means it was stored).
    #[error("{} did not answer in time: the outcome is unknown ({reason})", place(*partition))]
    Indeterminate {
        /// The partition, when the operation was on one.
        partition: Option<u16>,
        /// The job whose push it was (its id minted by dq, for a push without one): to push again with.
        id: Option<String>,
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
    /// Sorts a Redis error by what it says of the operation: it did not run (unavailable, out of
    /// memory), it may have run (indeterminate), or Redis answered something unexpected.
    pub(crate) fn from_redis(partition: Option<u16>, err: redis::RedisError) -> Self {
        match outcome(&err) {
            Outcome::NotRun if err.code() == Some("OOM") => Error::OutOfMemory { partition },
            Outcome::NotRun => Error::Unavailable {
                partition,
                reason: err.to_string(),
            },
            Outcome::Unknown => Error::Indeterminate {
                partition,
                id: None,
                reason: err.to_string(),
            },
            Outcome::Answered => Error::Redis {
                partition,
                message: err.to_string(),
            },
        }
    }

    /// Whether the operation certainly did not run, so that it may be sent elsewhere (a push without an
    /// id, under another id in another partition).
    pub fn did_not_run(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::OutOfMemory { .. })
    }

    /// A copy for each of the callers that share one failed call (a group commit, a batch).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Unavailable { partition, reason } => Error::Unavailable {
                partition: *partition,
                reason: reason.clone(),
            },
            Error::OutOfMemory { partition } => Error::OutOfMemory { partition: *partition },
            Error::Indeterminate { partition, id, reason } => Error::Indeterminate {
                partition: *partition,
                id: id.clone(),
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

/// What a failed call says of the operation it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It did not run: Redis was not reached, or refused it before running it.
    NotRun,
    /// It was sent and no answer came: it may have run.
    Unknown,
    /// Redis ran it, or refused it for a reason of its own (an error reply dq did not expect).
    Answered,
}

/// Error replies by which Redis refuses a command before running it, for a while: sending the same
/// command again later (or to the node that serves it now) is safe.
pub(crate) const REFUSED_FOR_NOW: &[&str] = &["LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"];

/// Sorts a failed call: see [`Outcome`].
pub(crate) fn outcome(err: &redis::RedisError) -> Outcome {
    if err.code().is_some_and(|c| REFUSED_FOR_NOW.contains(&c) || c == "OOM") {
        return Outcome::NotRun;
    }
    // Failing to connect, or finding no connection (this module's own "no connection"), comes before
    // anything was sent.
    if err.is_connection_refusal()
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || err.detail().is_some_and(|d| d.starts_with(NOT_SENT))
    {
        return Outcome::NotRun;
    }
    if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() || err.is_unrecoverable_error() {
        return Outcome::Unknown;
    }
    Outcome::Answered
}

/// The start of the detail of an error made for a call that was never sent (no connection to send it
/// on).
pub(crate) const NOT_SENT: &str = "not sent: ";

#[cfg(test)]
mod tests {
    use super::*;

    /// The error Redis answers with `line`, as redis-rs reads it off the wire.
    fn server(line: &str) -> redis::RedisError {
        let reply = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap();
        reply.extract_error().unwrap_err()
    }

    #[test]
    fn refusals_did_not_run_timeouts_may_have() {
        let timeout = redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"));
        let reset = redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        let refused = redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "no"));
        let not_sent = redis::RedisError::from((redis::ErrorKind::Io, "no connection", format!("{NOT_SENT}pool")));
        assert_eq!(outcome(&timeout), Outcome::Unknown);
        assert_eq!(outcome(&reset), Outcome::Unknown);
        assert_eq!(outcome(&refused), Outcome::NotRun);
        assert_eq!(outcome(&not_sent), Outcome::NotRun);
        for line in [
            "LOADING Redis is loading",
            "READONLY You can't write",
            "OOM command not allowed",
            "BUSY running",
        ] {
            assert_eq!(outcome(&server(line)), Outcome::NotRun, "{line}");
        }
        assert_eq!(outcome(&server("ERR something else")), Outcome::Answered);
        assert!(matches!(
            Error::from_redis(Some(3), server("OOM command not allowed")),
            Error::OutOfMemory { partition: Some(3) }
        ));
        assert!(matches!(Error::from_redis(None, timeout), Error::Indeterminate { .. }));
    }
}
