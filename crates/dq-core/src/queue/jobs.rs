//! One job by id: look up, delete, reschedule.

use std::collections::HashMap;

use redis::Value;

use super::Queue;
use super::decode::{ParseJob, int, parse_job, text};
use crate::error::{Error, Result};
use crate::job::{Due, Job, State};
use crate::scripts;

impl Queue {
    /// Looks a job up by id.
    pub async fn get(&self, id: &str) -> Result<Job> {
        let ids = [id.to_string()];
        let mut jobs = self.get_many(&ids).await?;
        jobs.pop().flatten().ok_or_else(|| Error::NotFound(id.to_string()))
    }

    /// Looks jobs up by id, in one `get.lua` call per partition (side by side): each job in the order of
    /// `ids`, `None` for an id without a record.
    pub async fn get_many(&self, ids: &[String]) -> Result<Vec<Option<Job>>> {
        let mut by_partition: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            by_partition.entry(self.partitions.of_id(id)).or_default().push(i);
        }
        let reads = by_partition.into_iter().map(|(p, positions)| async move {
            let keys: Vec<String> = positions.iter().map(|&i| self.partition_keys(p).job(&ids[i])).collect();
            let records = self.read_records(p, &keys, &[]).await?;
            Ok::<_, Error>((p, positions, records))
        });
        let mut jobs: Vec<Option<Job>> = ids.iter().map(|_| None).collect();
        for read in futures_util::future::join_all(reads).await {
            let (p, positions, records) = read?;
            for (i, fields) in positions.into_iter().zip(records) {
                let id = &ids[i];
                jobs[i] = match parse_job(id, fields) {
                    Ok(job) => Some(job),
                    Err(ParseJob::Missing) => None,
                    Err(ParseJob::Bad(what)) => {
                        return Err(Error::Redis {
                            partition: Some(p),
                            message: format!("job {id}: {what}"),
                        });
                    }
                };
            }
        }
        Ok(jobs)
    }

    /// Reads job records of partition `p`, decoded by `get.lua` (a record is one packed string): for each
    /// key, its fields by name, empty when there is no record. `fields` names the fields wanted; none
    /// means all.
    pub async fn read_records(
        &self,
        p: u16,
        keys: &[String],
        fields: &[&str],
    ) -> Result<Vec<HashMap<String, Vec<u8>>>> {
        let mut inv = scripts::GET.prepare_invoke();
        for key in keys {
            inv.key(key);
        }
        for field in fields {
            inv.arg(*field);
        }
        self.run(p, &inv).await
    }

    /// Removes a job from whatever state it is in.
    pub async fn delete(&self, id: &str) -> Result<()> {
        let p = self.partitions.of_id(id);
        let keys = self.partition_keys(p);
        let mut inv = scripts::DELETE.prepare_invoke();
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
