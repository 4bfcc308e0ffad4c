//! One job by id: look up, cancel, reschedule.

use super::Producer;
use crate::error::{Error, Result};
use crate::job::{Due, Job, State};
use crate::store::scripts::cancel::{self, CancelReply};
use crate::store::scripts::reschedule::{self, RescheduleReply};

impl Producer {
    /// Looks a job up by id, with the topics and states of the jobs it started.
    pub async fn get(&self, id: &str) -> Result<Job> {
        let ids = [id.to_string()];
        let mut jobs = self.get_many(&ids).await?;
        let mut job = jobs.pop().flatten().ok_or_else(|| Error::NotFound(id.to_string()))?;
        if !job.children.is_empty() {
            // In the job's partition, as every job it started (`partition_of`): one more read.
            let p = self.partitions.of_id(id);
            let keys = self.partition_keys(p);
            let records: Vec<String> = job.children.iter().map(|c| keys.job(&c.id)).collect();
            let fields = self.read_records(p, &records, &["s", "t"]).await?;
            for (child, mut f) in job.children.iter_mut().zip(fields) {
                let mut text = |k: &str| f.remove(k).and_then(|v| String::from_utf8(v).ok());
                child.state = text("s").and_then(|s| State::parse(&s));
                // A child that is gone: a fan-out's is named by its topic; a pushed one's topic is lost.
                let suffix = child.id.rsplit(crate::job::CHILD_SEPARATOR).next().unwrap_or_default();
                let named = (!suffix.bytes().all(|b| b.is_ascii_digit())).then(|| suffix.to_string());
                child.topic = text("t").or(named).unwrap_or_default();
            }
        }
        Ok(job)
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
