//! Storing jobs: push and push many, with the group commit.
//!
//! Pushes that arrive at the same moment share `push.lua` calls (see [`crate::store::group_commit`]). A job without
//! an id gets one minted when its group is sent, in the partition the group goes to (the next one, in
//! turn, that answers), so a crowd of pushes without ids shares one call; jobs with producer-given ids go
//! to their own partitions, shared with the other requests of the group: one call per node, for the
//! partitions it serves (one for all on a single Redis, standalone or Sentinel).
//!
//! A job with a deduplication key goes to the partition its topic and key hash to (minted ids included),
//! so that every push with that key meets the key in one place, atomically with the push. So does a job
//! with a flow key (by the flow key: a deduplication key it also has is then one within the flow key).
//!
//! A call that fails is sent again by what its failure says (invariant 8). One that did not run
//! ([`Error::did_not_run`]) may go elsewhere: its jobs without an id get fresh ids in another partition.
//! One whose outcome is unknown ([`Error::Indeterminate`]: a timeout, a connection lost after sending)
//! may still run, so its jobs keep their ids, minted ones included, and only the same write is sent
//! again, to the same partition, as a retry: `push.lua` answers a retry that finds the id stored with the
//! same topic and body as stored, so neither attempt can make a second job. A job that still has no
//! certain answer after that gets [`Error::Indeterminate`] naming its id, for the producer to push again
//! with it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Producer;
use crate::error::{Error, Result};
use crate::job::{JobRef, NewJob, Pushed, State, child_id};
use crate::store::scripts::push::{self, Mode, PushReply};

/// The most jobs one grouped push call carries: big enough that a crowd of single pushes costs Redis a
/// few calls, small enough that one call holds Redis for only a few milliseconds.
pub(crate) const PUSH_GROUP_JOBS: usize = 1000;

/// A request that puts at least this many jobs in one partition is sent alone: its calls already share
/// their cost among its jobs, and waiting to be grouped would only hold it back (and leave Redis idle
/// between calls). A request whose producer-given ids spread thinner (1,000 ids over 256 partitions are
/// about 4 jobs a call) is grouped with the requests that arrive meanwhile, so that each call carries
/// the jobs of several requests for its partition.
const PUSH_ALONE_JOBS: usize = 16;

/// Rounds of a push: a job without an id whose call did not run is tried in up to 3 partitions; a job
/// whose outcome is unknown is sent again, as a retry, up to 3 times (waiting 100, 200, 400 ms first).
const MAX_ROUNDS: usize = 6;
const FRESH_ROUNDS: usize = 3;
const RETRY_WAITS_MS: [u64; 3] = [100, 200, 400];

/// The jobs of one push request (shared between its calls) and which of them this group carries.
#[derive(Debug)]
pub(crate) struct PushGroup {
    /// Every job of the request.
    jobs: Arc<Vec<NewJob>>,
    /// Indexes into `jobs` of the jobs this group carries, each with the id an earlier attempt whose
    /// outcome is unknown gave it: then this is a retry of that write, with that id.
    picks: Vec<(usize, Option<String>)>,
}

/// What became of one job of a push group: the id it was sent with, and the answer.
#[derive(Debug)]
pub(crate) struct Attempt {
    /// The id the job went out with (minted for a job without one).
    id: String,
    /// The answer.
    result: Result<Pushed>,
}

/// A push group's answer, per job in `picks` order.
pub(crate) type PushOutcome = Vec<Attempt>;

impl Producer {
    /// Stores one job.
    pub async fn push(&self, job: NewJob) -> Result<Pushed> {
        self.push_many(vec![job]).await.pop().expect("one result per job")
    }

    /// Stores many jobs. The results are in the order of `jobs`; a job whose id is live gets `Conflict`,
    /// one whose partition is down `Unavailable` (a job without an id is tried in other partitions first),
    /// one whose outcome stayed unknown after the retries `Indeterminate` with its id.
    pub async fn push_many(&self, jobs: Vec<NewJob>) -> Vec<Result<Pushed>> {
        let jobs = Arc::new(jobs);
        let mut results: Vec<Option<Result<Pushed>>> = (0..jobs.len()).map(|_| None).collect();
        // Each job, with the id of an earlier attempt whose outcome is unknown (then it is only retried).
        let mut pending: Vec<(usize, Option<String>)> = (0..jobs.len()).map(|i| (i, None)).collect();
        // Pushes of a coalescing key go one at a time, in order: each meets its key's pending job as the
        // one before left it.
        for (i, job) in jobs.iter().enumerate() {
            if let Some(c) = &job.coalesce {
                results[i] = Some(self.push_coalesced(job, c).await);
            }
        }
        // A job with a flow key lives in its key's partition: an id of its own must be one dq made there
        // (the one a 503 named for pushing again).
        for (i, job) in jobs.iter().enumerate() {
            if let (Some(id), Some(key), None) = (&job.id, &job.flow_key, &job.coalesce)
                && self.partitions.of_id(id) != self.partitions.of_key(&job.topic, key)
            {
                results[i] = Some(Err(Error::Invalid(format!(
                    "`id` `{id}` cannot go with `flow_key` `{key}`: a job with a flow key has an id dq makes in \
                     the key's place (give no `id`, or the one an earlier push's answer named; `dedup_key` makes \
                     a push idempotent)"
                ))));
            }
        }
        pending.retain(|(i, _)| jobs[*i].coalesce.is_none() && results[*i].is_none());
        let (mut fresh_rounds, mut retries) = (vec![0usize; jobs.len()], vec![0usize; jobs.len()]);
        for _ in 0..MAX_ROUNDS {
            if pending.is_empty() {
                break;
            }
            if pending.iter().any(|(_, fixed)| fixed.is_some()) {
                let tries = pending.iter().map(|(i, _)| retries[*i]).max().unwrap_or(1);
                let wait = RETRY_WAITS_MS[(tries.max(1) - 1).min(RETRY_WAITS_MS.len() - 1)];
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            let group = PushGroup {
                jobs: jobs.clone(),
                picks: pending.clone(),
            };
            // Retries and requests with many jobs per partition go alone; a retry must not wait behind a
            // crowd.
            let weight = self.most_in_one_partition(&jobs, &pending);
            let alone = weight >= PUSH_ALONE_JOBS || pending.iter().any(|(_, fixed)| fixed.is_some());
            let outs = if alone {
                send(self.clone(), vec![group]).await.pop().unwrap_or_default()
            } else {
                let me = self.clone();
                let flush = move |groups: Vec<PushGroup>| send(me.clone(), groups);
                self.pushes.submit(group, weight, flush).await.unwrap_or_default()
            };
            let mut again = Vec::new();
            for ((i, fixed), out) in pending
                .iter()
                .cloned()
                .zip(outs.into_iter().map(Some).chain(std::iter::repeat_with(|| None)))
            {
                let Some(Attempt { id, result }) = out else {
                    results[i] = Some(Err(Error::unexpected(None, "the push call ended without an answer")));
                    continue;
                };
                // Whether this write may have run: its outcome is unknown, or an earlier attempt's was.
                let unknown = fixed.is_some() || matches!(result, Err(Error::Indeterminate { .. }));
                match result {
                    // From now on only the same write, with this id, as a retry.
                    Err(e) if unknown && (e.did_not_run() || matches!(e, Error::Indeterminate { .. })) => {
                        if retries[i] < RETRY_WAITS_MS.len() {
                            retries[i] += 1;
                            again.push((i, Some(id)));
                        } else {
                            results[i] = Some(Err(Error::Indeterminate {
                                partition: Some(self.partitions.of_id(&id)),
                                id: Some(id.clone()),
                                reason: format!(
                                    "{e}; push again with \"id\": \"{id}\" (409 conflict then means it was stored)"
                                ),
                                source: e.redis_cause(),
                            }));
                        }
                    }
                    // It did not run: a job without an id (or a deduplication or flow key, which has
                    // its partition) may go to another partition.
                    Err(e)
                        if jobs[i].id.is_none()
                            && jobs[i].dedup.is_none()
                            && jobs[i].flow_key.is_none()
                            && e.did_not_run()
                            && fresh_rounds[i] + 1 < FRESH_ROUNDS =>
                    {
                        fresh_rounds[i] += 1;
                        again.push((i, None));
                    }
                    other => results[i] = Some(other),
                }
            }
            if again.is_empty() {
                break;
            }
            pending = again;
        }
        let mut stored = 0;
        // (push_coalesced counted its own.)
        for (r, job) in results
            .iter()
            .zip(jobs.iter())
            .filter(|(_, job)| job.coalesce.is_none())
        {
            match r {
                Some(Ok(p)) if p.duplicate => {
                    metrics::counter!("dq_jobs_deduplicated_total", "topic" => job.topic.clone()).increment(1)
                }
                Some(Ok(_)) => {
                    metrics::counter!("dq_jobs_pushed_total", "topic" => job.topic.clone()).increment(1);
                    stored += 1;
                }
                _ => {}
            }
        }
        if stored > 0 {
            self.activity.pushed(stored);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::Unavailable {
                        partition: None,
                        reason: "no partition took the job".into(),
                        source: None,
                    })
                })
            })
            .collect()
    }

    /// The most jobs of `pending` that one call will carry: those with an id (or a deduplication key) in
    /// their partition, those without together in one. It is the request's weight in the group commit,
    /// whose cap ([`PUSH_GROUP_JOBS`]) is then a cap on every call of a group.
    fn most_in_one_partition(&self, jobs: &[NewJob], pending: &[(usize, Option<String>)]) -> usize {
        let all: usize = pending.iter().map(|(i, _)| push::weight(&jobs[*i])).sum();
        if all < PUSH_ALONE_JOBS {
            return all;
        }
        let mut fresh = 0;
        let mut placed: HashMap<u16, usize> = HashMap::new();
        for (i, fixed) in pending {
            let w = push::weight(&jobs[*i]);
            match self.home(&jobs[*i], fixed.as_ref()) {
                Some(p) => *placed.entry(p).or_default() += w,
                None => fresh += w,
            }
        }
        placed.into_values().max().unwrap_or(0).max(fresh)
    }

    /// The partition a job must go to: its id's (`fixed`, the id of an earlier attempt, or the
    /// producer's), or for a job with a flow key its topic and key's (its deduplication key, if any,
    /// goes there too), or for a job with a deduplication key its topic and key's; `None` for a job
    /// that may go anywhere (it gets an id where it goes).
    fn home(&self, job: &NewJob, fixed: Option<&String>) -> Option<u16> {
        if let Some(id) = fixed.or(job.id.as_ref()) {
            return Some(self.partitions.of_id(id));
        }
        let key = job.flow_key.as_ref().or(job.dedup.as_ref().map(|d| &d.key))?;
        Some(self.partitions.of_key(&job.topic, key))
    }
}

/// Sends gathered groups: jobs without an id get ids in one partition, the others go to theirs; one
/// `push.lua` call per node for the partitions it serves (on a single Redis, standalone or Sentinel,
/// one for them all; on a cluster, as far as [`crate::store::Store::nodes`] knows), side by side, so a
/// group whose jobs spread over the partitions (producers' ids, flow keys) pays a call's fixed cost
/// once per node. Answers per group, per job.
async fn send(queue: Producer, groups: Vec<PushGroup>) -> Vec<PushOutcome> {
    let fresh = queue.partitions.next_up(None);
    let nodes = queue.store.nodes();
    // (group, pick position) → (id, partition)
    let mut placed: Vec<Vec<(String, u16)>> = Vec::with_capacity(groups.len());
    // The calls' jobs, by the node of their partition (all on one on a single Redis).
    let mut by_call: HashMap<u32, Vec<(usize, usize)>> = HashMap::new();
    for (g, group) in groups.iter().enumerate() {
        let mut ids = Vec::with_capacity(group.picks.len());
        for (k, (i, fixed)) in group.picks.iter().enumerate() {
            let job = &group.jobs[*i];
            let p = queue.home(job, fixed.as_ref()).unwrap_or(fresh);
            let id = match fixed.as_ref().or(job.id.as_ref()) {
                Some(id) => id.clone(),
                None => queue.partitions.fresh_in(p),
            };
            by_call.entry(nodes[p as usize]).or_default().push((g, k));
            ids.push((id, p));
        }
        placed.push(ids);
    }
    // A call carries at most PUSH_GROUP_JOBS jobs: Lua unpacks a call's sorted-set adds onto its stack.
    // A fan-out's children count, and go in the call of their parent.
    let calls = by_call.into_values().flat_map(|members| {
        let mut chunks: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut filled = PUSH_GROUP_JOBS;
        for (g, k) in members {
            let w = push::weight(&groups[g].jobs[groups[g].picks[k].0]);
            if filled + w > PUSH_GROUP_JOBS {
                chunks.push(Vec::new());
                filled = 0;
            }
            filled += w;
            chunks.last_mut().expect("a chunk was opened").push((g, k));
        }
        chunks
    });
    let calls = calls.map(|members| {
        let jobs: Vec<(u16, &str, &NewJob, Mode)> = members
            .iter()
            .map(|&(g, k)| {
                let (i, fixed) = &groups[g].picks[k];
                let job = &groups[g].jobs[*i];
                let mode = match (fixed, &job.id) {
                    (Some(_), _) => Mode::Retry,
                    (None, Some(_)) => Mode::Given,
                    (None, None) => Mode::Minted,
                };
                (placed[g][k].1, placed[g][k].0.as_str(), job, mode)
            })
            .collect();
        let queue = &queue;
        async move {
            let out = push_on(queue, &jobs).await;
            (members, out)
        }
    });
    let mut answers: Vec<Vec<Option<Attempt>>> = groups
        .iter()
        .map(|g| (0..g.picks.len()).map(|_| None).collect())
        .collect();
    for (members, out) in futures_util::future::join_all(calls).await {
        match out {
            Ok(outs) => {
                for ((g, k), r) in members.into_iter().zip(outs) {
                    let id = placed[g][k].0.clone();
                    answers[g][k] = Some(Attempt {
                        result: r.map(|(state, run_at, first, states)| {
                            let job = &groups[g].jobs[groups[g].picks[k].0];
                            let children = if first.is_some() {
                                Vec::new()
                            } else {
                                job.fanout
                                    .iter()
                                    .zip(states)
                                    .map(|(child, state)| JobRef {
                                        id: child_id(&id, &child.topic),
                                        topic: child.topic.clone(),
                                        state,
                                    })
                                    .collect()
                            };
                            Pushed {
                                duplicate: first.is_some(),
                                coalesced: first.is_some(),
                                id: first.unwrap_or_else(|| id.clone()),
                                state,
                                run_at,
                                children,
                            }
                        }),
                        id,
                    });
                }
            }
            Err(e) => {
                for (g, k) in members {
                    answers[g][k] = Some(Attempt {
                        id: placed[g][k].0.clone(),
                        result: Err(e.duplicate()),
                    });
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|g| g.into_iter().map(|a| a.expect("every job answered")).collect())
        .collect()
}

/// What push.lua made of one job: its state and due time, for a duplicate the first job's id, and a
/// fan-out's children's states.
type Stored = (State, i64, Option<String>, Vec<Option<State>>);

/// Runs push.lua once for `jobs` (partition, id, job and mode each), answering per job.
async fn push_on(queue: &Producer, jobs: &[(u16, &str, &NewJob, Mode)]) -> Result<Vec<Result<Stored>>> {
    let answers: Vec<Result<Stored>> = push::call(&queue.store, jobs, queue.defaults.done_retention_ms)
        .await?
        .into_iter()
        .map(|reply| match reply? {
            PushReply::Stored {
                state,
                run_at,
                children,
            } => Ok((state, run_at, None, children)),
            PushReply::Duplicate { first, state, run_at } => Ok((state, run_at, Some(first), Vec::new())),
            PushReply::Conflict => Err(Error::Conflict("a live job already has this id".into())),
        })
        .collect();
    // This process's next reserve must see what it just made ready, without waiting for the wake-up.
    let mut marked = std::collections::HashSet::new();
    for (&(p, _, job, _), answer) in jobs.iter().zip(&answers) {
        // (A fan-out's children: ready with their parent's due time.)
        let ready = match answer {
            Ok((State::Ready, _, None, _)) => vec![job.topic.as_str()],
            Ok((State::Done, _, None, states)) => job
                .fanout
                .iter()
                .zip(states)
                .filter(|(_, s)| **s == Some(State::Ready))
                .map(|(c, _)| c.topic.as_str())
                .collect(),
            _ => continue,
        };
        for topic in ready {
            if marked.insert((topic, p)) {
                queue.ready.mark_own(topic, p);
            }
        }
        if !matches!(answer, Ok((State::Ready, _, None, _))) {
            continue;
        }
        if let Some(urgent) = job.priority.filter(|&pr| pr < crate::job::DEFAULT_PRIORITY) {
            queue.ready.hint(&job.topic, p, urgent);
        }
    }
    Ok(answers)
}
