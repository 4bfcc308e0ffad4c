//! Reading job records: every role that shows jobs reads them here (`get.lua`).

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::shared::Core;
use crate::store::decode::{ParseJob, parse_job};
use crate::store::scripts::get;

impl Core {
    /// Looks jobs up by id, in one `get.lua` call per partition (side by side): each job in the order of
    /// `ids`, `None` for an id without a record.
    pub(crate) async fn get_many(&self, ids: &[String]) -> Result<Vec<Option<Job>>> {
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
                        return Err(Error::unexpected(Some(p), format!("job {id}: {what}")));
                    }
                };
            }
        }
        Ok(jobs)
    }

    /// Reads job records of partition `p`, decoded by `get.lua` (a record is one packed string): for each
    /// key, its fields by name, empty when there is no record. `fields` names the fields wanted; none
    /// means all.
    pub(crate) async fn read_records(&self, p: u16, keys: &[String], fields: &[&str]) -> Result<Vec<get::Fields>> {
        get::call(&self.store, p, keys, fields).await
    }

    /// The first job of `topic`'s ready queue in partition `p`, as (id, score).
    pub(crate) async fn ready_head(&self, p: u16, topic: &str) -> Result<Option<(String, f64)>> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(self.partition_keys(p).ready(topic))
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        let head: Vec<(String, f64)> = self.query(p, &cmd).await?;
        Ok(head.into_iter().next())
    }
}
