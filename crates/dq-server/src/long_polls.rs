//! The cap on long polls that wait at once (`server.max_long_polls`), and the gauge of those waiting.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The long polls allowed to wait at once (`server.max_long_polls`). A long poll takes its place only
/// when its first look found nothing, and leaves it with its answer.
#[derive(Debug)]
pub struct LongPolls {
    permits: Arc<Semaphore>,
    max: usize,
}

/// A long poll's place; exported as `dq_long_polls_waiting` while held.
pub struct Waiting(#[allow(dead_code)] OwnedSemaphorePermit);

impl LongPolls {
    /// Room for `max` waiting long polls.
    pub fn new(max: usize) -> Self {
        metrics::gauge!("dq_long_polls_waiting").set(0.0);
        metrics::counter!("dq_long_polls_refused_total").increment(0);
        LongPolls {
            permits: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A place to wait in, or 503 `overloaded` when all are taken.
    pub(crate) fn enter(&self) -> Result<Waiting, ApiError> {
        let permit = self.permits.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!("dq_long_polls_refused_total").increment(1);
            ApiError::overloaded(format!(
                "as many long polls wait as the server allows (server.max_long_polls = {})",
                self.max
            ))
        })?;
        metrics::gauge!("dq_long_polls_waiting").increment(1.0);
        Ok(Waiting(permit))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        metrics::gauge!("dq_long_polls_waiting").decrement(1.0);
    }
}
