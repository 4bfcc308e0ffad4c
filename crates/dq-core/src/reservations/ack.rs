//! Acks, in groups: the acks that arrive while calls are out travel together in the next one, one
//! `ack.lua` call per partition, the group commit pushes use ([`crate::store::group_commit`]). A lone ack goes out
//! at once; a worker that settles a crowd of deliveries shares calls. Each ack gets its own answer,
//! exactly as if it had gone alone.

use std::collections::HashMap;

use super::Reservations;
use crate::attempt::{self, Note, Outcome};
use crate::error::{Error, Result};
use crate::job::{JobRef, NewJob, child_id};
use crate::store::scripts::ack::{self, AckReply};

/// The most acks one call carries (its keys and arguments go onto Lua's stack).
pub(crate) const ACK_GROUP: usize = 500;

/// One ack waiting for its call.
#[derive(Debug)]
pub(crate) struct AckOp {
    /// The job.
    id: String,
    /// The receipt of its reservation.
    receipt: String,
    /// How long its done record stays, ms (0: deleted at once).
    retention_ms: u64,
    /// Its attempt's entry for the job's history (`attempt.rs`; empty: none is kept).
    entry: Vec<u8>,
    /// The jobs it pushes, packed ([`crate::graph::pack_pushes`]; empty: none).
    pushes: Vec<u8>,
    /// The callback's answer its success hook carries (empty: no hook).
    answer: Vec<u8>,
}

/// What a success brings besides the ack itself.
#[derive(Debug, Default)]
pub struct Success<'a> {
    /// What the attempt was, for the job's history.
    pub note: Note,
    /// Jobs to store with the ack (checked by [`crate::Producer::prepare_pushes`]).
    pub push: &'a [NewJob],
    /// The callback's answer for the topic's success hook (`callback.on_success_url`), as JSON
    /// `{status, headers, body}`: with it, the ack queues the hook (dq-checker sends it).
    pub hook_answer: Option<Vec<u8>>,
}

impl Reservations {
    /// Finishes a reservation: the job is done, its record kept for `jobs.done_retention_ms`.
    /// `NotFound` when the job is gone, `StaleReceipt` when the reservation `receipt` names is over.
    pub async fn ack(&self, id: &str, receipt: &str) -> Result<()> {
        self.ack_noting(id, receipt, &Note::default()).await
    }

    /// [`Reservations::ack`], with what `note` tells of the attempt for the job's history (who made
    /// it, the callback's answer, when it began).
    pub async fn ack_noting(&self, id: &str, receipt: &str, note: &Note) -> Result<()> {
        let success = Success {
            note: note.clone(),
            ..Default::default()
        };
        self.ack_with(id, receipt, &success).await.map(drop)
    }

    /// [`Reservations::ack_noting`] with what `success` brings: its jobs are stored with the ack (they
    /// exist if and only if the ack succeeded, with ids `<id>~<index>`, a fan-out's children
    /// `<id>~<index>~<topic>`, so an ack sent again after an unknown outcome stores none twice), and its
    /// success hook is queued with the answer. Answers the jobs pushed, in order, each fan-out's
    /// children after it.
    pub async fn ack_with(&self, id: &str, receipt: &str, success: &Success<'_>) -> Result<Vec<JobRef>> {
        let jobs = success.push;
        let entry = self.entry(&success.note, receipt, Outcome::Acked, None);
        let pushes = if jobs.is_empty() {
            Vec::new()
        } else {
            crate::graph::pack_pushes(jobs, self.defaults.done_retention_ms)
        };
        let answer = success.hook_answer.clone().unwrap_or_default();
        self.ack_kept(id, receipt, self.defaults.done_retention_ms, entry, pushes, answer)
            .await?;
        let mut pushed = Vec::new();
        for (i, job) in jobs.iter().enumerate() {
            let child = child_id(id, &i.to_string());
            let grandchildren: Vec<JobRef> = job
                .fanout
                .iter()
                .map(|g| JobRef {
                    id: child_id(&child, &g.topic),
                    topic: g.topic.clone(),
                    state: None,
                })
                .collect();
            pushed.push(JobRef {
                id: child,
                topic: job.topic.clone(),
                state: None,
            });
            pushed.extend(grandchildren);
        }
        if !jobs.is_empty() {
            for job in jobs {
                metrics::counter!("dq_jobs_pushed_total", "topic" => job.topic.clone()).increment(1);
                for child in &job.fanout {
                    metrics::counter!("dq_jobs_pushed_total", "topic" => child.topic.clone()).increment(1);
                }
            }
            self.activity.pushed(pushed.len() as u64);
        }
        Ok(pushed)
    }

    /// Finishes a reservation and deletes the job at once, keeping no done record (beanstalkd's
    /// `delete`, whose clients look nothing up after it and delete at rates where retained records
    /// would cost memory). Answers as [`Reservations::ack`].
    pub async fn ack_deleting(&self, id: &str, receipt: &str) -> Result<()> {
        self.ack_kept(id, receipt, 0, Vec::new(), Vec::new(), Vec::new()).await
    }

    /// The history entry of an attempt under `receipt` that ended as `outcome` (see [`attempt::entry`]).
    pub(crate) fn entry(&self, note: &Note, receipt: &str, outcome: Outcome, error: Option<&str>) -> Vec<u8> {
        attempt::entry(self.defaults.attempt_history, note, receipt, outcome, error)
    }

    async fn ack_kept(
        &self,
        id: &str,
        receipt: &str,
        retention_ms: u64,
        entry: Vec<u8>,
        pushes: Vec<u8>,
        answer: Vec<u8>,
    ) -> Result<()> {
        let op = AckOp {
            id: id.to_string(),
            receipt: receipt.to_string(),
            retention_ms,
            entry,
            pushes,
            answer,
        };
        let me = self.clone();
        let flush = move |ops: Vec<AckOp>| send(me.clone(), ops);
        let r = self
            .acks
            .submit(op, 1, flush)
            .await
            .unwrap_or_else(|| Err(Error::unexpected(None, "the ack call ended without an answer")));
        if r.is_ok() {
            metrics::counter!("dq_jobs_acked_total").increment(1);
            self.activity.delivered();
        }
        r
    }
}

/// Sends gathered acks: one `ack.lua` call per node and retention (of at most [`ACK_GROUP`]) for the
/// partitions the node serves (on a single Redis, standalone or Sentinel, one for them all; on a
/// cluster, as far as [`crate::store::Store::nodes`] knows), side by side, so a call's fixed cost is
/// paid once per node. Answers per ack, in order.
async fn send(queue: Reservations, ops: Vec<AckOp>) -> Vec<Result<()>> {
    let nodes = queue.store.nodes();
    // Each ack's partition, and its group by its partition's node; a call is sent to its first ack's
    // partition.
    let homes: Vec<u16> = ops.iter().map(|op| queue.partitions.of_id(&op.id)).collect();
    let mut groups: HashMap<(u32, u64), Vec<usize>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        groups
            .entry((nodes[homes[i] as usize], op.retention_ms))
            .or_default()
            .push(i);
    }
    let calls = groups
        .into_iter()
        .flat_map(|(group, members)| {
            members
                .chunks(ACK_GROUP)
                .map(|c| (group, c.to_vec()))
                .collect::<Vec<_>>()
        })
        .map(|((_, retention_ms), members)| {
            let (queue, ops, homes) = (&queue, &ops, &homes);
            let p = homes[members[0]];
            async move {
                let acks = members.iter().map(|&i| {
                    let op = &ops[i];
                    (
                        homes[i],
                        op.id.as_str(),
                        op.receipt.as_str(),
                        op.entry.as_slice(),
                        op.pushes.as_slice(),
                        op.answer.as_slice(),
                    )
                });
                let out = ack::call(&queue.store, p, retention_ms, acks).await;
                (members, out)
            }
        });
    let mut answers: Vec<Option<Result<()>>> = (0..ops.len()).map(|_| None).collect();
    for (members, out) in futures_util::future::join_all(calls).await {
        match out {
            Ok(replies) => {
                for (i, reply) in members.into_iter().zip(replies) {
                    answers[i] = Some(match reply {
                        Err(e) => Err(e),
                        Ok(AckReply::Acked) => Ok(()),
                        Ok(AckReply::NoJob) => Err(Error::NotFound(ops[i].id.clone())),
                        Ok(AckReply::StaleReceipt) => Err(Error::StaleReceipt),
                    });
                }
            }
            Err(e) => {
                for i in members {
                    answers[i] = Some(Err(e.duplicate()));
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(Error::unexpected(None, "ack returned too few answers"))))
        .collect()
}
