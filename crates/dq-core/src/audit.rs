//! The consistency audit: checks invariant 1 (every live job is in exactly the structure its state names,
//! and has its record) by scanning a shard, and repairs what it finds. A record in no structure goes back
//! to ready (delivering twice beats losing a job); an id without a record is dropped. Each repair is a
//! script that checks again atomically, so jobs moving during the scan are left alone.

use redis::Value;

use crate::error::Result;
use crate::queue::Queue;
use crate::scripts;
use crate::shard::Shard;

/// What one audit found (and repaired).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditReport {
    /// Job records looked at.
    pub records: u64,
    /// Ids in structures looked at.
    pub ids: u64,
    /// Records that were in no structure, put back in their ready queue.
    pub orphan_records: u64,
    /// Ids that had no record, removed from their structure.
    pub dangling_ids: u64,
}

const SCAN_COUNT: usize = 1000;

impl Queue {
    /// Audits every shard that answers and repairs what it finds; a shard that fails is skipped (and
    /// logged), the others are still audited. Fails only when no shard could be audited.
    pub async fn audit(&self) -> Result<AuditReport> {
        let mut report = AuditReport::default();
        let mut last_err = None;
        let mut audited = 0;
        for shard in self.shards().all() {
            let done = async {
                self.audit_records(shard, &mut report).await?;
                self.audit_structures(shard, &mut report).await
            };
            match done.await {
                Ok(()) => audited += 1,
                Err(e) => {
                    tracing::warn!(shard = shard.index, cause = %e, "audit of this shard failed; skipped");
                    last_err = Some(e);
                }
            }
        }
        match last_err {
            Some(e) if audited == 0 => Err(e),
            _ => Ok(report),
        }
    }

    /// Keys matching `pattern` on one shard.
    async fn scan_keys(&self, shard: &Shard, pattern: &str) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = shard
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_COUNT),
                )
                .await?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    async fn audit_records(&self, shard: &Shard, report: &mut AuditReport) -> Result<()> {
        let job_prefix = self.keys().job("");
        let keys = self.scan_keys(shard, &format!("{job_prefix}*")).await?;
        for chunk in keys.chunks(SCAN_COUNT) {
            let recs = self.read_records(shard, chunk, &["t", "s"]).await?;
            let mut check = redis::pipe();
            let mut candidates = Vec::new();
            let text = |v: Option<Vec<u8>>| v.and_then(|v| String::from_utf8(v).ok());
            for (key, mut rec) in chunk.iter().zip(recs) {
                let (Some(topic), Some(state)) = (text(rec.remove("t")), text(rec.remove("s"))) else {
                    continue;
                };
                let id = &key[job_prefix.len()..];
                let structure = match state.as_str() {
                    "delayed" => self.keys().delayed(self.shards().bucket_of(id)),
                    "ready" => self.keys().ready(&topic),
                    "reserved" => self.keys().reserved(),
                    "dead" => self.keys().dead(&topic),
                    _ => continue,
                };
                check.cmd("ZSCORE").arg(structure).arg(id);
                candidates.push(id.to_string());
            }
            report.records += chunk.len() as u64;
            if candidates.is_empty() {
                continue;
            }
            let scores: Vec<Value> = shard.pipe(&check).await?;
            for (id, score) in candidates.iter().zip(scores) {
                if score != Value::Nil {
                    continue;
                }
                let mut inv = scripts::REPAIR_RECORD.prepare_invoke();
                inv.key(self.keys().job(id))
                    .key(self.keys().delayed(self.shards().bucket_of(id)))
                    .key(self.keys().reserved())
                    .key(self.keys().counts())
                    .arg(self.keys().prefix())
                    .arg(id)
                    .arg(self.keys().ready_channel());
                if shard.invoke::<i64>(&inv).await? == 1 {
                    tracing::warn!(shard = shard.index, %id, "audit: job record in no structure; put back in its ready queue");
                    report.orphan_records += 1;
                }
            }
        }
        Ok(())
    }

    async fn audit_structures(&self, shard: &Shard, report: &mut AuditReport) -> Result<()> {
        let mut structures: Vec<String> = (0..self.shards().buckets()).map(|b| self.keys().delayed(b)).collect();
        structures.push(self.keys().reserved());
        structures.extend(self.scan_keys(shard, &format!("{}*", self.keys().ready(""))).await?);
        structures.extend(self.scan_keys(shard, &format!("{}*", self.keys().dead(""))).await?);
        for structure in structures {
            let mut cursor: u64 = 0;
            loop {
                let (next, flat): (u64, Vec<String>) = shard
                    .query(
                        redis::cmd("ZSCAN")
                            .arg(&structure)
                            .arg(cursor)
                            .arg("COUNT")
                            .arg(SCAN_COUNT),
                    )
                    .await?;
                let ids: Vec<&String> = flat.iter().step_by(2).collect();
                report.ids += ids.len() as u64;
                if !ids.is_empty() {
                    let mut pipe = redis::pipe();
                    for id in &ids {
                        pipe.cmd("EXISTS").arg(self.keys().job(id));
                    }
                    let exists: Vec<i64> = shard.pipe(&pipe).await?;
                    for (id, e) in ids.iter().zip(exists) {
                        if e == 1 {
                            continue;
                        }
                        let mut inv = scripts::REPAIR_MEMBER.prepare_invoke();
                        inv.key(&structure).key(self.keys().job(id)).arg(id.as_str());
                        if shard.invoke::<i64>(&inv).await? == 1 {
                            tracing::warn!(shard = shard.index, %id, %structure, "audit: id without a job record; removed");
                            report.dangling_ids += 1;
                        }
                    }
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }
}
