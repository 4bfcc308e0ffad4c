//! Storing jobs: push and push many, with the group commit.
//!
//! Pushes that arrive at the same moment share `push.lua` calls (see [`crate::coalesce`]). A job without
//! an id gets one minted when its group is sent, in the partition the group goes to (the next one, in
//! turn, that answers), so a crowd of pushes without ids shares one call; jobs with producer-given ids go
//! to their own partitions, one call per partition touched.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;

use super::Queue;
use super::decode::{int, text};
use crate::error::{Error, Result};
use crate::job::{NewJob, Pushed, Schedule, State};
use crate::scripts;

/// The most jobs one coalesced push call carries: big enough that a crowd of single pushes costs Redis a
/// few calls, small enough that one call holds Redis for only a few milliseconds.
pub(crate) const PUSH_GROUP_JOBS: usize = 1000;

/// A request with at least this many jobs is its own call: it already shares the call's cost among its
/// jobs, and waiting to be grouped would only hold it back (and leave Redis idle between calls).
const PUSH_ALONE_JOBS: usize = 16;

/// The jobs of one push request (shared between its calls) and which of them this group carries.
#[derive(Debug)]
pub(crate) struct PushGroup {
    /// Every job of the request.
    jobs: Arc<Vec<NewJob>>,
    /// Indexes into `jobs` of the jobs this group carries.
    picks: Vec<usize>,
}

/// A push group's answer, per job in `picks` order.
pub(crate) type PushOutcome = Vec<Result<Pushed>>;

impl Queue {
    /// Stores one job.
    pub async fn push(&self, job: NewJob) -> Result<Pushed> {
        self.push_many(vec![job]).await.pop().expect("one result per job")
    }

    /// Stores many jobs. The results are in the order of `jobs`; a job whose id is live gets `Conflict`,
    /// one whose partition is down `Unavailable` (a job without an id is tried in other partitions first).
    pub async fn push_many(&self, jobs: Vec<NewJob>) -> Vec<Result<Pushed>> {
        let jobs = Arc::new(jobs);
        let mut results: Vec<Option<Result<Pushed>>> = (0..jobs.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        // Each round marks the partitions that failed as down, so the next one mints ids elsewhere.
        for round in 0..3 {
            let group = PushGroup {
                jobs: jobs.clone(),
                picks: pending.clone(),
            };
            let outs = if pending.len() >= PUSH_ALONE_JOBS {
                send(self.clone(), vec![group]).await.pop().unwrap_or_default()
            } else {
                let me = self.clone();
                let flush = move |groups: Vec<PushGroup>| send(me.clone(), groups);
                self.pushes
                    .submit(group, pending.len(), flush)
                    .await
                    .unwrap_or_default()
            };
            let mut retry = Vec::new();
            for (i, out) in pending
                .iter()
                .copied()
                .zip(outs.into_iter().map(Some).chain(std::iter::repeat_with(|| None)))
            {
                let out = out.unwrap_or_else(|| {
                    Err(Error::Redis {
                        partition: None,
                        message: "the push call ended without an answer".into(),
                    })
                });
                if jobs[i].id.is_none() && round < 2 && matches!(out, Err(Error::Unavailable { .. })) {
                    retry.push(i);
                } else {
                    results[i] = Some(out);
                }
            }
            if retry.is_empty() {
                break;
            }
            pending = retry;
        }
        for (r, job) in results.iter().zip(jobs.iter()) {
            if let Some(Ok(_)) = r {
                metrics::counter!("dq_jobs_pushed_total", "topic" => job.topic.clone()).increment(1);
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::Unavailable {
                        partition: None,
                        reason: "no partition took the job".into(),
                    })
                })
            })
            .collect()
    }
}

/// Sends gathered groups: jobs without an id get ids in one partition, the others go to theirs; one
/// `push.lua` call per partition, side by side. Answers per group, per job.
async fn send(queue: Queue, groups: Vec<PushGroup>) -> Vec<PushOutcome> {
    let fresh = queue.partitions.next_up(None);
    // (group, pick position) → (id, partition)
    let mut placed: Vec<Vec<(String, u16)>> = Vec::with_capacity(groups.len());
    let mut by_partition: HashMap<u16, Vec<(usize, usize)>> = HashMap::new();
    for (g, group) in groups.iter().enumerate() {
        let mut ids = Vec::with_capacity(group.picks.len());
        for (k, &i) in group.picks.iter().enumerate() {
            let (id, p) = match &group.jobs[i].id {
                Some(id) => (id.clone(), queue.partitions.of_id(id)),
                None => (queue.partitions.fresh_in(fresh), fresh),
            };
            by_partition.entry(p).or_default().push((g, k));
            ids.push((id, p));
        }
        placed.push(ids);
    }
    // A call carries at most PUSH_GROUP_JOBS jobs: Lua unpacks a call's sorted-set adds onto its stack.
    let calls = by_partition.into_iter().flat_map(|(p, members)| {
        members
            .chunks(PUSH_GROUP_JOBS)
            .map(|c| (p, c.to_vec()))
            .collect::<Vec<_>>()
    });
    let calls = calls.map(|(p, members)| {
        let jobs: Vec<(&str, &NewJob)> = members
            .iter()
            .map(|&(g, k)| (placed[g][k].0.as_str(), &groups[g].jobs[groups[g].picks[k]]))
            .collect();
        let queue = &queue;
        async move {
            let out = push_on(queue, p, &jobs).await;
            (members, out)
        }
    });
    let mut answers: Vec<Vec<Option<Result<Pushed>>>> = groups
        .iter()
        .map(|g| (0..g.picks.len()).map(|_| None).collect())
        .collect();
    for (members, out) in futures_util::future::join_all(calls).await {
        match out {
            Ok(outs) => {
                for ((g, k), r) in members.into_iter().zip(outs) {
                    answers[g][k] = Some(r.map(|(state, run_at)| Pushed {
                        id: placed[g][k].0.clone(),
                        state,
                        run_at,
                    }));
                }
            }
            Err(e) => {
                for (g, k) in members {
                    answers[g][k] = Some(Err(e.duplicate()));
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|g| g.into_iter().map(|a| a.expect("every job answered")).collect())
        .collect()
}

/// Runs push.lua once on partition `p` for `jobs` (id and job each), answering per job.
async fn push_on(queue: &Queue, p: u16, jobs: &[(&str, &NewJob)]) -> Result<Vec<Result<(State, i64)>>> {
    let keys = queue.partition_keys(p);
    let mut inv = queue.script(&scripts::PUSH).prepare_invoke();
    inv.key(keys.counts());
    inv.arg(keys.ready_channel()).arg(keys.timer_channel());
    let delayed = keys.delayed();
    for (id, job) in jobs {
        inv.key(keys.job(id)).key(&delayed).key(keys.ready(&job.topic));
        inv.arg(*id).arg(&job.topic).arg(&job.body);
        match job.schedule {
            Schedule::Delay(d) => inv.arg(d).arg(""),
            Schedule::At(at) => inv.arg("").arg(at),
        };
        inv.arg(job.ttr_ms)
            .arg(job.max_attempts)
            .arg(if job.id.is_some() { "1" } else { "0" });
    }
    let out: Vec<Value> = queue.write(p, &inv).await?;
    let bad = |what: &str| Error::Redis {
        partition: Some(p),
        message: format!("push returned {what}"),
    };
    if out.len() != 3 * jobs.len() {
        return Err(bad("the wrong number of values"));
    }
    let answers: Vec<Result<(State, i64)>> = out
        .chunks(3)
        .map(|c| {
            if int(&c[0]) == Some(0) {
                return Ok(Err(Error::Conflict("a live job already has this id".into())));
            }
            let state = text(&c[1])
                .and_then(|s| State::parse(&s))
                .ok_or_else(|| bad("an unknown state"))?;
            Ok(Ok((state, int(&c[2]).ok_or_else(|| bad("no run_at"))?)))
        })
        .collect::<Result<_>>()?;
    // This process's next reserve must see what it just made ready, without waiting for the wake-up.
    let mut marked = std::collections::HashSet::new();
    for ((_, job), answer) in jobs.iter().zip(&answers) {
        if matches!(answer, Ok((State::Ready, _))) && marked.insert(job.topic.as_str()) {
            queue.ready.mark(&job.topic, p);
        }
    }
    Ok(answers)
}
