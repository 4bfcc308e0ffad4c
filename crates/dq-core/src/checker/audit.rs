//! The consistency audit: checks invariant 1 (every live job is in exactly the structure its state names,
//! and has its record) partition by partition, and repairs what it finds. A record in no structure goes
//! back to ready (delivering twice beats losing a job); an id without a record is dropped. Each repair is
//! a script that checks again atomically, so jobs moving during the scan are left alone.

use std::collections::BTreeMap;

use super::Checker;
use crate::error::Result;
use crate::job::State;
use crate::shared::Core;
use crate::store::audit;
use crate::store::scripts::repair_member::{self, MemberRepair};
use crate::store::scripts::repair_record::{self, RecordRepair};
use crate::store::structures::Structure;

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

const BATCH: usize = 1000;

impl Checker {
    /// Audits every partition and repairs what it finds; a partition that fails is skipped (and logged),
    /// the others are still audited. Fails only when no partition could be audited.
    pub async fn audit(&self) -> Result<AuditReport> {
        run(&self.0).await
    }
}

/// See [`Checker::audit`].
async fn run(queue: &Core) -> Result<AuditReport> {
    let scan = |what: &'static str| audit::keys_of(&queue.store, what);
    // Keys by partition, read back from their hash tags.
    let mut records: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    let mut structures: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for key in scan("job").await? {
        if let Some(p) = partition_of_key(queue, &key) {
            records.entry(p).or_default().push(key);
        }
    }
    for key in scan("ready")
        .await?
        .into_iter()
        .chain(scan("dead").await?)
        .chain(scan("fq").await?)
    {
        if let Some(p) = partition_of_key(queue, &key) {
            structures.entry(p).or_default().push(key);
        }
    }
    let mut report = AuditReport::default();
    let mut last_err = None;
    let mut audited = 0;
    for p in queue.partitions().all() {
        let keys = queue.partition_keys(p);
        let mut mine = structures.remove(&p).unwrap_or_default();
        mine.push(keys.delayed());
        mine.push(keys.reserved());
        let done = async {
            audit_records(queue, p, records.get(&p).map_or(&[][..], |r| &r[..]), &mut report).await?;
            audit_structures(queue, p, &mine, &mut report).await
        };
        match done.await {
            Ok(()) => audited += 1,
            Err(e) => {
                tracing::warn!(partition = p, cause = %e.chain(), "audit of this partition failed; skipped");
                last_err = Some(e);
            }
        }
    }
    match last_err {
        Some(e) if audited == 0 => Err(e),
        _ => Ok(report),
    }
}

/// The partition a key belongs to, from its hash tag.
fn partition_of_key(queue: &Core, key: &str) -> Option<u16> {
    let open = key.find('{')?;
    let close = open + key[open..].find('}')?;
    queue.partitions().of_tag(&key[open + 1..close])
}

async fn audit_records(queue: &Core, p: u16, records: &[String], report: &mut AuditReport) -> Result<()> {
    let keys = queue.partition_keys(p);
    let job_prefix = keys.job("");
    for chunk in records.chunks(BATCH) {
        let recs = queue.read_records(p, chunk, &["t", "s", "f"]).await?;
        let mut candidates = Vec::new();
        let text = |v: Option<Vec<u8>>| v.and_then(|v| String::from_utf8(v).ok());
        for (key, mut rec) in chunk.iter().zip(recs) {
            let (Some(topic), Some(state)) = (text(rec.remove("t")), text(rec.remove("s"))) else {
                continue;
            };
            let flow = text(rec.remove("f"));
            // A done job (or a state dq did not write) is in no structure.
            let Some(state) = State::parse(&state).filter(|s| *s != State::Done) else {
                continue;
            };
            candidates.push((topic, state, flow, &key[job_prefix.len()..]));
        }
        report.records += chunk.len() as u64;
        if candidates.is_empty() {
            continue;
        }
        let members: Vec<(Structure, &str)> = candidates
            .iter()
            .filter_map(|(topic, state, flow, id)| Some((Structure::of(*state, topic, flow.as_deref())?, *id)))
            .collect();
        let mut listed = audit::listed(&queue.store, p, &members).await?;
        // A ready job of a straight flow key is in its topic's ready queue, not its key's (flow.lua).
        let straight: Vec<(usize, (Structure, &str))> = members
            .iter()
            .zip(&listed)
            .enumerate()
            .filter_map(|(i, ((structure, id), listed))| match structure {
                Structure::Flow(topic, _) if !listed => Some((i, (Structure::Ready(topic), *id))),
                _ => None,
            })
            .collect();
        if !straight.is_empty() {
            let again: Vec<(Structure, &str)> = straight.iter().map(|(_, m)| *m).collect();
            for ((i, _), found) in straight.iter().zip(audit::listed(&queue.store, p, &again).await?) {
                listed[*i] = found;
            }
        }
        for ((_, id), listed) in members.iter().zip(listed) {
            if listed {
                continue;
            }
            if repair_record::call(&queue.store, p, id).await? == RecordRepair::PutBack {
                tracing::warn!(partition = p, %id, "audit: job record in no structure; put back in its ready queue");
                report.orphan_records += 1;
            }
        }
    }
    Ok(())
}

async fn audit_structures(queue: &Core, p: u16, structures: &[String], report: &mut AuditReport) -> Result<()> {
    for structure in structures {
        let mut cursor: u64 = 0;
        loop {
            let (next, ids) = audit::members(&queue.store, p, structure, cursor, BATCH).await?;
            report.ids += ids.len() as u64;
            if !ids.is_empty() {
                let have = audit::have_records(&queue.store, p, &ids).await?;
                for (id, has_record) in ids.iter().zip(have) {
                    // A flow key's turn (`~<key>`, in a ready queue or the delay set) is no job.
                    if has_record || id.starts_with('~') {
                        continue;
                    }
                    if repair_member::call(&queue.store, p, structure, id).await? == MemberRepair::Removed {
                        tracing::warn!(partition = p, %id, %structure, "audit: id without a job record; removed");
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
