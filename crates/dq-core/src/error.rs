//! The errors of the queue API, each of which maps to one error code of the HTTP API.
//!
//! A failure to reach Redis comes in two kinds, which callers must not confuse (invariant 8):
//! [`Error::Unavailable`], the operation did not run (Redis was not reached, or refused it before
//! running it), so it may be sent elsewhere; and [`Error::Indeterminate`], it was sent and no answer
//! came, so it may have run, and only the same operation may be sent again.

use std::sync::Arc;

/// Why a queue operation did not happen, or may not have. Nothing was written, except where a variant
/// says otherwise ([`Error::Indeterminate`], [`Error::NotReplicated`]).
///
/// The message (`Display`) is dq's own, written for whoever made the request; where Redis's error is
/// the cause, it is the [`source`](std::error::Error::source), for the log ([`Error::chain`]).
/// Cloning is cheap: the copies of one failure share its Redis error.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The caller may not do this (`forbidden`, 403): a pull ack that pushes to a topic its token may
    /// not produce to.
    #[error("{0}")]
    Forbidden(String),
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
        /// What failed, in dq's words.
        reason: String,
        /// Redis's error, when it is the cause.
        #[source]
        source: Option<RedisCause>,
    },
    /// Redis is out of memory (`maxmemory`, with the `noeviction` policy dq requires) and refused the
    /// write before running it (`unavailable`, 503).
    #[error("{} is out of memory (Redis's maxmemory): it refuses writes until memory is freed; nothing was written", place(*partition))]
    OutOfMemory {
        /// The partition, when the operation was on one.
        partition: Option<u16>,
        /// Redis's refusal.
        #[source]
        source: Option<RedisCause>,
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
        /// What failed, in dq's words.
        reason: String,
        /// Redis's error, when it is the cause.
        #[source]
        source: Option<RedisCause>,
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
        /// Redis's error reply, when it was one.
        #[source]
        source: Option<RedisCause>,
    },
}

/// Redis's error as the source of an [`Error`], shared by the copies of one failure (redis-rs's error
/// is not `Clone`): the type to downcast [`std::error::Error::source`] to.
pub type RedisCause = Arc<redis::RedisError>;

/// Result of a queue operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Sorts a Redis error by what it says of the operation: it did not run (unavailable, out of
    /// memory), it may have run (indeterminate), or Redis answered something unexpected. The message is
    /// dq's; Redis's error is kept as the source.
    pub(crate) fn from_redis(partition: Option<u16>, err: redis::RedisError) -> Self {
        match outcome(&err) {
            Outcome::NotRun if err.code() == Some("OOM") => Error::OutOfMemory {
                partition,
                source: Some(Arc::new(err)),
            },
            Outcome::NotRun => Error::Unavailable {
                partition,
                reason: not_run(&err).into(),
                source: Some(Arc::new(err)),
            },
            Outcome::Unknown => Error::Indeterminate {
                partition,
                id: None,
                reason: unknown(&err).into(),
                source: Some(Arc::new(err)),
            },
            Outcome::Answered => Error::Redis {
                partition,
                message: match err.code() {
                    Some(code) => format!("an error reply ({code})"),
                    None => "an answer it could not read".into(),
                },
                source: Some(Arc::new(err)),
            },
        }
    }

    /// Redis answered something dq did not expect (a script's malformed answer): a bug, a 500.
    pub(crate) fn unexpected(partition: Option<u16>, message: impl Into<String>) -> Self {
        Error::Redis {
            partition,
            message: message.into(),
            source: None,
        }
    }

    /// Whether the operation certainly did not run, so that it may be sent elsewhere (a push without an
    /// id, under another id in another partition).
    pub fn did_not_run(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::OutOfMemory { .. })
    }

    /// A copy for each of the callers that share one failed call (a group commit, a batch): the same
    /// kind, message and source.
    pub(crate) fn duplicate(&self) -> Error {
        self.clone()
    }

    /// Redis's error, when it is the cause.
    pub(crate) fn redis_cause(&self) -> Option<RedisCause> {
        match self {
            Error::Unavailable { source, .. }
            | Error::OutOfMemory { source, .. }
            | Error::Indeterminate { source, .. }
            | Error::Redis { source, .. } => source.clone(),
            _ => None,
        }
    }

    /// The message followed by its sources (`…: Redis's error: …`): the detail for a log line.
    pub fn chain(&self) -> Chain<'_> {
        Chain(self)
    }
}

/// An error and its sources on one line, each after a `: `; a source that only repeats the one
/// before it (redis-rs's I/O errors do) is left out.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            let text = e.to_string();
            if text != last {
                write!(f, ": {text}")?;
            }
            last = text;
            next = e.source();
        }
        Ok(())
    }
}

/// Why an operation that did not run did not, in dq's words.
fn not_run(err: &redis::RedisError) -> &'static str {
    match err.code() {
        Some("LOADING") => "Redis is loading its data set",
        Some("BUSY") => "Redis is busy running a script",
        Some("MASTERDOWN") => "the replica has lost its link to the primary",
        Some("TRYAGAIN") => "the keys' slot is being moved",
        Some("CLUSTERDOWN") => "the cluster is down",
        Some("READONLY") => "the node reached is a read only replica",
        _ if err.detail().is_some_and(|d| d.starts_with(NOT_SENT)) => "no connection to Redis",
        _ if err.is_connection_refusal() => "cannot connect to Redis",
        _ => "Redis refused the call before running it",
    }
}

/// Why the outcome of an operation is unknown, in dq's words.
fn unknown(err: &redis::RedisError) -> &'static str {
    if err.is_timeout() {
        "no answer in time"
    } else if err.is_connection_dropped() {
        "the connection broke after the call was sent"
    } else {
        "the connection failed after the call was sent"
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
            Error::OutOfMemory { partition: Some(3), .. }
        ));
        assert!(matches!(Error::from_redis(None, timeout), Error::Indeterminate { .. }));
    }

    /// Every kind of failure, domain and Redis, each from the same Redis error where it has one.
    fn one_of_each(cause: &RedisCause) -> Vec<Error> {
        vec![
            Error::Invalid("bad".into()),
            Error::TooLarge("big".into()),
            Error::NotFound("j1".into()),
            Error::TopicNotFound("t".into()),
            Error::ScheduleNotFound("s".into()),
            Error::Conflict("live".into()),
            Error::StaleReceipt,
            Error::Unavailable {
                partition: Some(1),
                reason: "down".into(),
                source: Some(cause.clone()),
            },
            Error::OutOfMemory {
                partition: Some(2),
                source: Some(cause.clone()),
            },
            Error::Indeterminate {
                partition: Some(3),
                id: Some("j2".into()),
                reason: "no answer in time".into(),
                source: Some(cause.clone()),
            },
            Error::NotReplicated {
                partition: 4,
                want: 2,
                got: 1,
            },
            Error::Redis {
                partition: None,
                message: "odd".into(),
                source: Some(cause.clone()),
            },
        ]
    }

    #[test]
    fn a_duplicate_keeps_the_kind_the_message_and_the_source() {
        let cause: RedisCause = Arc::new(server("ERR something else"));
        for e in one_of_each(&cause) {
            let copy = e.duplicate();
            assert_eq!(std::mem::discriminant(&copy), std::mem::discriminant(&e), "{e}");
            assert_eq!(copy.to_string(), e.to_string());
            assert_eq!(copy.did_not_run(), e.did_not_run(), "{e}");
            match (e.redis_cause(), copy.redis_cause()) {
                (Some(a), Some(b)) => assert!(Arc::ptr_eq(&a, &b), "{e}: the copies share one Redis error"),
                (None, None) => {}
                _ => panic!("{e}: the copy lost or gained a source"),
            }
        }
    }

    #[test]
    fn a_redis_error_is_the_source_not_the_message() {
        use std::error::Error as _;
        let timeout = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the socket timed out",
        ));
        let refused = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused by the peer",
        ));
        for (err, redis_text) in [
            (timeout, "the socket timed out"),
            (refused, "refused by the peer"),
            (
                server("LOADING Redis is loading the dataset in memory"),
                "the dataset in memory",
            ),
            (
                server("OOM command not allowed when used memory > 'maxmemory'"),
                "command not allowed",
            ),
            (server("ERR something else"), "something else"),
        ] {
            let e = Error::from_redis(Some(5), err);
            let source = e.source().unwrap_or_else(|| panic!("{e}: no source"));
            assert!(source.to_string().contains(redis_text), "{source}");
            assert!(
                source.downcast_ref::<RedisCause>().is_some(),
                "{e}: the source is Redis's error"
            );
            assert!(!e.to_string().contains(redis_text), "the message is dq's: {e}");
            assert!(e.to_string().contains("partition 5"), "{e}");
            assert!(
                e.chain().to_string().contains(redis_text),
                "the chain has the detail: {}",
                e.chain()
            );
        }
        let e = Error::from_redis(None, server("READONLY You can't write against a read only replica."));
        assert!(matches!(e, Error::Unavailable { .. }), "{e}");
        assert!(!e.to_string().contains("You can't write"), "{e}");
    }

    #[test]
    fn a_chain_leaves_out_a_source_that_repeats_its_error() {
        let io = redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"));
        let e = Error::from_redis(None, io);
        assert_eq!(
            e.chain().to_string(),
            "Redis did not answer in time: the outcome is unknown (no answer in time): timed out"
        );
    }
}
