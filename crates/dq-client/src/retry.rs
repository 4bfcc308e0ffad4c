//! When a failed call is sent again.
//!
//! A call whose first try surely did nothing (no connection could be made, or dq answered
//! `overloaded`) may always be sent again. A call whose outcome is unknown (a time-out, a broken
//! connection, a 503 `unavailable` from a Redis partition that did not answer in time) is sent again
//! only when doing it twice is harmless: reads, registrations (a PUT replaces), deletes, and pushes,
//! which carry an id, so that the second try meets the first (409 `conflict`, which the client then
//! answers with the stored job). A job with a flow key carries no id of the client's (dq makes it): its
//! push is sent again with the id dq names in a 503, and otherwise only when the try surely did nothing.
//! An ack sent again after an unknown outcome that finds its receipt stale looks the job up: `done` (or
//! gone) means the first ack went through.

use std::time::Duration;

/// How many times, and how far apart, a call is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (1: never again).
    pub tries: u32,
    /// The wait before the second try; it doubles for each further try.
    pub first_backoff: Duration,
    /// The longest wait between tries.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 4 tries, 100, 200 and 400 ms apart: as dq-server retries its own Redis writes.
    fn default() -> Self {
        RetryPolicy {
            tries: 4,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Never try again.
    pub fn none() -> Self {
        RetryPolicy {
            tries: 1,
            ..RetryPolicy::default()
        }
    }

    /// The wait after failed try number `try_no` (1 for the first).
    pub(crate) fn backoff(&self, try_no: u32) -> Duration {
        let factor = 1u32 << try_no.saturating_sub(1).min(16);
        self.first_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Whether a verb may be sent twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotence {
    /// Doing it twice is the same as once: sent again after an unknown outcome too.
    Safe,
    /// Sent again only when the first try surely did nothing.
    Unsafe,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            tries: 10,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        let waits: Vec<u128> = (1..=5).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 400, 500, 500]);
    }
}
