//! One job by id: look up, cancel, reschedule.

use redis::Value;

use super::Producer;
use crate::error::{Error, Result};
use crate::job::{Due, Job, State};
use crate::store::decode::{int, text};
use crate::store::scripts;

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
        let keys = self.partition_keys(p);
        let mut inv = scripts::CANCEL.prepare_invoke();
        inv.key(keys.job(id))
            .key(keys.delayed())
            .key(keys.reserved())
            .key(keys.counts())
            .arg(keys.prefix())
            .arg(id);
        match self.write::<i64>(p, &inv).await? {
            1 => Ok(()),
            _ => Err(Error::NotFound(id.to_string())),
        }
    }

    /// Gives a delayed or ready job a new due time and returns it.
    pub async fn reschedule(&self, id: &str, schedule: Due) -> Result<Job> {
        let p = self.partitions.of_id(id);
        let keys = self.partition_keys(p);
        let mut inv = self.script(&scripts::RESCHEDULE).prepare_invoke();
        inv.key(keys.job(id))
            .key(keys.delayed())
            .key(keys.counts())
            .arg(keys.prefix())
            .arg(id);
        match schedule {
            Due::Delay(d) => inv.arg(d).arg(""),
            Due::At(at) => inv.arg("").arg(at),
        };
        inv.arg(keys.ready_channel()).arg(keys.timer_channel());
        let out: Vec<Value> = self.write(p, &inv).await?;
        if out.first().and_then(int) != Some(1) {
            let state = out.get(1).and_then(text).unwrap_or_default();
            if state == "not_found" {
                return Err(Error::NotFound(id.to_string()));
            }
            return Err(Error::Conflict(format!(
                "job `{id}` is {state}; only delayed or ready jobs can be rescheduled"
            )));
        }
        let job = self.get(id).await?;
        if job.state == State::Ready {
            self.ready.mark_own(&job.topic, p);
        }
        Ok(job)
    }
}
