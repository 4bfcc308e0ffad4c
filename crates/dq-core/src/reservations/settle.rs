//! Settling a reservation other than by an ack ([`super::ack`]): nack (fail: back off, or dead), touch
//! (extend) and release (hand back unfinished).

use super::Reservations;
use crate::attempt::{Note, Outcome};
use crate::error::{Error, Result};
use crate::job::State;
use crate::store::scripts::nack::{self, NackAsk, NackReply};
use crate::store::scripts::release::{self, ReleaseReply};
use crate::store::scripts::touch::{self, TouchReply};

/// How a nack fails its job, and what it tells of the attempt it ends ([`Reservations::nack_with`]).
#[derive(Debug, Clone, Default)]
pub struct Failure<'a> {
    /// Back off this long (else the job's own backoff list, else `backoff_ms`).
    pub delay_ms: Option<u64>,
    /// Kept as its last error (and in its attempt).
    pub error: Option<&'a str>,
    /// The i-th delay after the i-th failure, the last repeating (else `jobs.backoff_ms`).
    pub backoff_ms: Option<&'a [u64]>,
    /// The job's flow key, if it has one, gets no reservation for this long, ms (its callback answered
    /// 429 or 503 with `Retry-After`): the pause applies to that key only. 0: none.
    pub pause_ms: u64,
    /// The attempt, for the job's history (its outcome `nacked` unless it says otherwise).
    pub note: Note,
}

impl Reservations {
    /// Fails a reservation: the job backs off (by `delay_ms`, else `backoff_ms`, else the default
    /// schedule) or goes dead after its last attempt. Returns its new state and due time.
    pub async fn nack(
        &self,
        id: &str,
        receipt: &str,
        delay_ms: Option<u64>,
        error: Option<&str>,
        backoff_ms: Option<&[u64]>,
    ) -> Result<(State, i64)> {
        let failure = Failure {
            delay_ms,
            error,
            backoff_ms,
            ..Default::default()
        };
        self.nack_with(id, receipt, &failure).await
    }

    /// [`Reservations::nack`], as `failure` says: a pause of the job's flow key, and what it tells of
    /// the attempt for the job's history.
    pub async fn nack_with(&self, id: &str, receipt: &str, failure: &Failure<'_>) -> Result<(State, i64)> {
        let p = self.partitions.of_id(id);
        let entry = self.entry(&failure.note, receipt, Outcome::Nacked, failure.error);
        let ask = NackAsk {
            delay_ms: failure.delay_ms,
            error: failure.error,
            backoff_ms: failure.backoff_ms.unwrap_or(&self.defaults.backoff_ms),
            pause_ms: failure.pause_ms,
            entry: &entry,
        };
        match nack::call(&self.store, p, id, receipt, ask).await? {
            NackReply::Moved { state, run_at, topic } => {
                // This process's next reserve must see the job it just made ready again.
                if state == State::Ready {
                    self.ready.mark_own(&topic, p);
                }
                metrics::counter!("dq_jobs_nacked_total").increment(1);
                if state == State::Dead {
                    metrics::counter!("dq_jobs_dead_total").increment(1);
                    self.activity.dead(1);
                } else {
                    self.activity.failed();
                }
                Ok((state, run_at))
            }
            NackReply::NoJob => Err(Error::NotFound(id.to_string())),
            NackReply::StaleReceipt => Err(Error::StaleReceipt),
        }
    }

    /// Extends a reservation to now + `ttr_ms` (else the job's TTR); returns the new deadline.
    pub async fn touch(&self, id: &str, receipt: &str, ttr_ms: Option<u64>) -> Result<i64> {
        let p = self.partitions.of_id(id);
        match touch::call(&self.store, p, id, receipt, ttr_ms).await? {
            TouchReply::Extended { deadline } => Ok(deadline),
            TouchReply::NoJob => Err(Error::NotFound(id.to_string())),
            TouchReply::StaleReceipt => Err(Error::StaleReceipt),
        }
    }

    /// Hands a reservation back unfinished: ready again at once, the delivery not counted.
    pub async fn release(&self, id: &str, receipt: &str) -> Result<()> {
        self.hand_back(id, receipt, false).await
    }

    /// Hands a reservation back: ready again at once; `counted`: the delivery stays counted in its
    /// attempts (beanstalkd's `reserves` counts every reservation, one its client saw and dropped too).
    pub async fn hand_back(&self, id: &str, receipt: &str, counted: bool) -> Result<()> {
        let p = self.partitions.of_id(id);
        match release::call(&self.store, p, id, receipt, counted).await? {
            ReleaseReply::Released => Ok(()),
            ReleaseReply::NoJob => Err(Error::NotFound(id.to_string())),
            ReleaseReply::StaleReceipt => Err(Error::StaleReceipt),
        }
    }
}
