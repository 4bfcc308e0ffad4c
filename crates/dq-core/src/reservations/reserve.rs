//! Reserve: the group commit of reserves, and the calls to the partitions the ready index names.

use super::Reservations;
use super::ready::Tried;
use crate::error::{Error, Result};
use crate::job::Reservation;
use crate::store::scripts::reserve;

/// Partitions that may fail in one reserve before it answers with what it has.
const MAX_FAILED_PARTITIONS: usize = 2;

/// Partitions beyond the jobs wanted that one look at the index gives (most partitions listed hold jobs;
/// the others cost one empty call each and a second look).
const CANDIDATE_SLACK: usize = 8;

/// The most jobs one grouped reserve call asks for (see [`Queue::reserve_with`]).
pub(crate) const RESERVE_GROUP: usize = 100;

/// How a reserve asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReserveOptions {
    /// Each reservation lasts at least this long, whatever the job's own TTR: dq-consumer's must
    /// outlive the callback's timeout.
    pub least_ttr_ms: Option<u64>,
    /// The caller waits in line ([`super::ready::Waiter`]) when this reserve finds nothing, so partitions
    /// that another reserve of this process is asking are left to that one, which wakes the next waiter
    /// if it leaves jobs there. A caller that will not wait asks them too when it found nothing else.
    pub waits: bool,
    /// Within a partition, take the queue whose first job comes first (lowest score, then lowest id)
    /// instead of the topics in the order given: beanstalkd's reserve, which takes the best job of every
    /// watched tube.
    pub best_first: bool,
}

impl Reservations {
    /// Reserves up to `count` ready jobs of `topics` (highest priority first), without waiting.
    pub async fn reserve(&self, topics: &[String], count: usize) -> Result<Vec<Reservation>> {
        self.reserve_with(topics, count, ReserveOptions::default()).await
    }

    /// [`Queue::reserve`], as `options` say.
    ///
    /// Jobs a timer handed to this process for its long polls are taken first (see
    /// [`super::ready::HANDED_HOLD`]). The rest goes through the group commit pushes and acks use
    /// ([`crate::store::group_commit`]): a lone reserve goes out at once, and reserves of the same topics (asking
    /// the same way) that arrive while calls are out are sent as one reserve of all their jobs, which
    /// are then dealt out one at a time in arrival order, each caller up to its `count`. Under load most of a
    /// reserve's cost in Redis is the call, not the jobs, so a crowd of single reserves shares calls.
    /// A caller that stops waiting before its group's answer comes gets nothing, and its jobs are
    /// released (ready again, the attempt not counted).
    pub async fn reserve_with(
        &self,
        topics: &[String],
        count: usize,
        options: ReserveOptions,
    ) -> Result<Vec<Reservation>> {
        let mut out = self.ready.take_handed(topics, count);
        if !out.is_empty() {
            self.count_reserved(&out);
        }
        if out.len() >= count {
            return Ok(out);
        }
        let op = ReserveOp {
            topics: topics.to_vec(),
            count: count - out.len(),
            options,
        };
        let (me, back) = (self.clone(), self.clone());
        let flush = move |ops: Vec<ReserveOp>| reserve_group(me.clone(), ops);
        let unclaimed = move |answer: Result<Vec<Reservation>>| {
            if let Ok(jobs) = answer
                && !jobs.is_empty()
            {
                let back = back.clone();
                tokio::spawn(async move { back.release_all(jobs).await });
            }
        };
        let answer = self
            .reserves
            .submit_or_return(op, count - out.len(), flush, unclaimed)
            .await
            .unwrap_or_else(|| Err(Error::unexpected(None, "the reserve call ended without an answer")));
        match answer {
            Ok(mut got) => {
                out.append(&mut got);
                Ok(out)
            }
            // Handed jobs are handed out even when the partitions failed.
            Err(_) if !out.is_empty() => Ok(out),
            Err(e) => Err(e),
        }
    }

    /// Releases reservations nobody will work on (their caller left, or no long poll took them): each
    /// job is ready again, its attempt not counted. One that cannot be released comes back when its
    /// reservation ends.
    pub(crate) async fn release_all(&self, jobs: Vec<Reservation>) {
        for job in jobs {
            if let Err(e) = self.release(&job.id, &job.receipt).await {
                tracing::debug!(id = %job.id, cause = %e.chain(), "cannot release a reservation; the job returns when it ends");
            }
        }
    }

    /// Reserves up to `count` jobs of `topics` in the partitions the [`super::ReadyIndex`] names: those
    /// with ready jobs of the first topic (in random order, so reservers spread), then of the next.
    /// Within a partition the topics' priority holds exactly; across partitions it holds as far as the
    /// index is current. `callers`: how many reserves this one serves (a group's), so that callers that
    /// will not wait each get a job where there are jobs.
    async fn reserve_direct(
        &self,
        topics: &[String],
        count: usize,
        callers: usize,
        options: ReserveOptions,
    ) -> Result<Vec<Reservation>> {
        let mut out = Vec::new();
        // Passes the wake-up on when this reserve stopped with partitions it had not asked (they may hold
        // jobs), or when it is cancelled half-way: it may have been the one waiter woken for them.
        // Wake-ups that arrive while it runs wake waiters of their own.
        let mut turn = PassOn {
            index: &self.ready,
            topics,
            armed: true,
        };
        let unsynced = self.ready.unsynced(topics);
        if !unsynced.is_empty() {
            let mut turns = self.ready.sync_turns(unsynced);
            if !turns.mine.is_empty() {
                self.sync_ready(&turns.mine).await;
            }
            turns.wait_for_others().await;
        }
        let mut failed = None;
        let mut failures = 0;
        // Asked already (skipped by the next look at the index).
        let mut asked: Vec<u16> = Vec::new();
        // A reserve of one topic asks the partitions past those hinted urgent side by side (below), as
        // many at once as the jobs it still wants need at the jobs a partition gave in the last round
        // (`yielded`; 0 before the first: then one partition, asked for all of them).
        let side_by_side = topics.len() == 1 && !options.best_first;
        let mut yielded = 0;
        'looks: loop {
            let look = self.ready.candidates(topics, &asked, count + CANDIDATE_SLACK);
            let mut left = look.list.iter().copied().enumerate().peekable();
            // A partition asked side by side gave all it was asked for and may hold more: asked again.
            let mut again = false;
            loop {
                // This round's partitions. One at a time, each asked for every job still wanted: in
                // the order the index gives, urgent partitions and higher topics first. Past the first
                // topic's urgent partitions, a reserve of one topic whose last partitions each gave a
                // few jobs asks as many partitions at once as it wants jobs at that yield, each for its
                // share: their jobs are of one topic and no more urgent than one another as far as the
                // index knows, and one round trip instead of one a partition is what a worker
                // reserving its free slots' worth from a backlog spread thin over the partitions waits
                // for (docs/architecture.md, "Reserves over several partitions").
                let want = count - out.len();
                let width = if yielded == 0 { 1 } else { want.div_ceil(yielded) };
                let mut round: Vec<u16> = Vec::new();
                let mut stop = false;
                while let Some(&(i, (p, contested))) = left.peek() {
                    // Partitions on a node that is down each take a connect timeout to fail: after a few,
                    // answer with what there is rather than hold the caller for all of them. A partition
                    // another reserve is asking is left to it (it wakes the next waiter if it leaves jobs
                    // there), unless this reserve found too few elsewhere for a job per caller and its
                    // callers will not wait.
                    if want == 0
                        || failures >= MAX_FAILED_PARTITIONS
                        || (contested && (options.waits || out.len() >= callers))
                    {
                        stop = true;
                        break;
                    }
                    let together = side_by_side && i >= look.urgent;
                    if !round.is_empty() && (!together || round.len() >= width) {
                        break;
                    }
                    left.next();
                    asked.push(p);
                    round.push(p);
                    if !together {
                        break;
                    }
                }
                if round.is_empty() {
                    if stop {
                        turn.armed =
                            out.len() >= count && (look.more || again || left.any(|(_, (_, contested))| !contested));
                        break 'looks;
                    }
                    break;
                }
                let k = round.len();
                let share = |j: usize| want / k + usize::from(j < want % k);
                let claims: Vec<_> = round.iter().map(|&p| self.ready.claim(topics, p)).collect();
                let asks = round
                    .iter()
                    .enumerate()
                    .map(|(j, &p)| self.reserve_on(p, topics, share(j), options));
                let answers = futures_util::future::join_all(asks).await;
                let before = out.len();
                for (j, (claim, answer)) in claims.into_iter().zip(answers).enumerate() {
                    match answer {
                        Ok((mut got, more)) => {
                            claim.settle(if more { Tried::Full } else { Tried::Emptied });
                            if more && got.len() >= share(j) && share(j) < want {
                                again = true;
                                asked.retain(|&a| a != round[j]);
                            }
                            out.append(&mut got);
                        }
                        Err(e) => {
                            claim.settle(Tried::Failed);
                            failures += 1;
                            failed = Some(e);
                        }
                    }
                }
                yielded = ((out.len() - before) / k).max(1);
            }
            // Every partition of this look was asked; look again if the index held more, or a partition
            // asked for its share may hold more.
            if !(look.more || again) || out.len() >= count {
                turn.armed = out.len() >= count && (look.more || again);
                break;
            }
        }
        match failed {
            // Jobs reserved elsewhere are handed out; a partition down fails the call only when it got
            // nothing.
            Some(e) if out.is_empty() => Err(e),
            _ => {
                self.count_reserved(&out);
                Ok(out)
            }
        }
    }

    /// Reads which partitions have ready jobs of `topics` from their counts, into the index. A partition
    /// that does not answer is listed as if it had some, so reserves keep trying it.
    async fn sync_ready(&self, topics: &[String]) {
        let epoch = self.ready.epoch();
        let reads = self
            .partitions
            .all()
            .map(|p| async move { (p, self.store.ready_counts(p, topics).await) });
        let mut ready: Vec<Vec<u16>> = topics.iter().map(|_| Vec::new()).collect();
        for (p, counts) in futures_util::future::join_all(reads).await {
            match counts {
                Ok(counts) => {
                    for (k, n) in counts.into_iter().enumerate() {
                        if n > 0 {
                            ready[k].push(p);
                        }
                    }
                }
                Err(_) => ready.iter_mut().for_each(|r| r.push(p)),
            }
        }
        for (topic, ps) in topics.iter().zip(ready) {
            self.ready.synced(topic, epoch, &ps);
        }
    }

    /// Reserves up to `count` jobs of `topics` in partition `p`, with whether their queues there still
    /// hold jobs.
    async fn reserve_on(
        &self,
        p: u16,
        topics: &[String],
        count: usize,
        options: ReserveOptions,
    ) -> Result<(Vec<Reservation>, bool)> {
        let flows: Vec<_> = topics.iter().map(|t| self.flows.get(t)).collect();
        let reply = reserve::call(
            &self.store,
            p,
            topics,
            &flows,
            count,
            options.least_ttr_ms,
            options.best_first,
        )
        .await?;
        Ok((reply.jobs, reply.more))
    }
}

/// One reserve waiting for its group's call.
#[derive(Debug)]
pub(crate) struct ReserveOp {
    topics: Vec<String>,
    count: usize,
    options: ReserveOptions,
}

/// Sends gathered reserves: one reserve per set of ops with the same topics and options, side by side,
/// for all their jobs, which are then dealt to the ops one at a time in arrival order, each up to its
/// count. Answers per op, in order.
async fn reserve_group(queue: Reservations, ops: Vec<ReserveOp>) -> Vec<Result<Vec<Reservation>>> {
    // Ops asking alike, by the index of their first op.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let alike = groups
            .iter_mut()
            .find(|g| ops[g[0]].topics == op.topics && ops[g[0]].options == op.options);
        match alike {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let calls = groups.into_iter().map(|members| {
        let (queue, ops) = (&queue, &ops);
        async move {
            let first = &ops[members[0]];
            let total = members.iter().map(|&i| ops[i].count).sum();
            let got = queue
                .reserve_direct(&first.topics, total, members.len(), first.options)
                .await;
            (members, got)
        }
    });
    let mut answers: Vec<Option<Result<Vec<Reservation>>>> = (0..ops.len()).map(|_| None).collect();
    for (members, got) in futures_util::future::join_all(calls).await {
        match got {
            Ok(jobs) => {
                // Dealt one at a time in arrival order, so each caller gets a job before any gets two.
                let mut hands: Vec<Vec<Reservation>> = members.iter().map(|_| Vec::new()).collect();
                let mut jobs = jobs.into_iter();
                let mut dealt = true;
                while dealt {
                    dealt = false;
                    for (hand, &i) in hands.iter_mut().zip(&members) {
                        if hand.len() < ops[i].count
                            && let Some(job) = jobs.next()
                        {
                            hand.push(job);
                            dealt = true;
                        }
                    }
                }
                for (hand, i) in hands.into_iter().zip(members) {
                    answers[i] = Some(Ok(hand));
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
        .map(|a| a.unwrap_or_else(|| Ok(Vec::new())))
        .collect()
}

/// Wakes the next waiter of each topic that still has partitions listed when a reserve ends, unless
/// disarmed (see [`super::ReadyIndex::pass_on`]).
struct PassOn<'a> {
    index: &'a super::ReadyIndex,
    topics: &'a [String],
    armed: bool,
}

impl Drop for PassOn<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.index.pass_on(self.topics);
        }
    }
}
