//! One job by id: look up, cancel, reschedule.

use super::Producer;
use crate::error::{Error, Result};
use crate::job::{Due, Job, State};
use crate::store::scripts::cancel::{self, CancelReply};
use crate::store::scripts::reschedule::{self, RescheduleReply};

impl Producer {
    /// Looks a job up by id.
    pub async fn get(&self, id: &str) -> Result<Job> {
        let ids = [id.to_string()];
        let mut jobs = self.get_many(&ids).await?;
        jobs.pop().flatten().ok_or_else(|| Error::NotFound(id.to_string()))
    }

    /// Cancels a job: removes it from whatever state it is in, record and all.
    pub async fn cancel(&self, id: &str) -> Result<()> {
        let p = self.partitions.of_id(id);
        match cancel::call(&self.store, p, id).await? {
            CancelReply::Cancelled => Ok(()),
            CancelReply::NoJob => Err(Error::NotFound(id.to_string())),
        }
    }

    /// Gives a delayed or ready job a new due time (`None`: it stays), a new priority (`None`: it stays),
    /// or both, and returns it.
    pub async fn reschedule(&self, id: &str, schedule: Option<Due>, priority: Option<u32>) -> Result<Job> {
        let p = self.partitions.of_id(id);
        match reschedule::call(&self.store, p, id, schedule, priority).await? {
            RescheduleReply::Moved { .. } => {}
            RescheduleReply::NoJob => return Err(Error::NotFound(id.to_string())),
            RescheduleReply::NotMovable { state } => {
                return Err(Error::Conflict(format!(
                    "job `{id}` is {state}; only delayed or ready jobs can be rescheduled or reprioritised"
                )));
            }
        }
        let job = self.get(id).await?;
        if job.state == State::Ready {
            self.ready.mark_own(&job.topic, p);
        }
        Ok(job)
    }
}
