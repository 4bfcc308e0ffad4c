//! The typed queue API: every operation on jobs, each one script (or one command) on one shard.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use redis::Value;
use serde_json::value::RawValue;

use crate::coalesce::Coalescer;
use crate::config::{JobDefaults, Limits, Settings};
use crate::error::{Error, Result};
use crate::job::{Job, NewJob, PushRequest, Pushed, Reservation, Schedule, State};
use crate::keys::Keys;
use crate::scripts;
use crate::shard::{Shard, Shards};

/// The queue: shards, key names, limits and defaults. Cheap to clone; clones share the pools.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Where jobs live.
    shards: Shards,
    /// Key and channel names.
    keys: Keys,
    /// Bounds on requests.
    limits: Limits,
    /// Values for what a push leaves out.
    defaults: JobDefaults,
    /// Per shard, in shard order: the group commit of pushes.
    pushes: Arc<[Arc<Coalescer<PushGroup, PushOutcome>>]>,
}

/// The most jobs one coalesced push call carries: big enough that a crowd of single pushes costs Redis a
/// few calls, small enough that one call holds Redis for only a few milliseconds.
const PUSH_GROUP_JOBS: usize = 1000;

/// A request with at least this many jobs for a shard is its own call: it already shares the call's cost
/// among its jobs, and waiting to be grouped would only hold it back (and leave Redis idle between calls).
const PUSH_ALONE_JOBS: usize = 16;

/// Push calls out at once per shard. Two lets one group gather while the other is on the wire; more only
/// splits the crowd into smaller groups.
const PUSH_CALLS_IN_FLIGHT: usize = 2;

/// The jobs of one push request bound for one shard: the request's jobs (shared between its shards) and
/// which of them go here, with their ids.
#[derive(Debug)]
struct PushGroup {
    /// Every job of the request.
    jobs: Arc<Vec<NewJob>>,
    /// Index into `jobs` and id, for the jobs placed on this shard.
    picks: Vec<(usize, String)>,
}

/// A push group's answer: per job, its state and due time, or a conflict; or why the call failed.
type PushOutcome = Result<Vec<Result<(State, i64)>>>;

/// What a promotion call did on one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// Jobs moved to ready.
    pub moved: usize,
    /// Earliest due time left in the bucket, Unix ms (Redis's clock).
    pub next_due: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
    /// For each moved job, how late it was moved (now − due), ms.
    pub lateness_ms: Vec<i64>,
}

/// What an expiry call did on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Jobs whose reservation expired and that went back to ready.
    pub to_ready: usize,
    /// Jobs whose reservation expired on their last attempt.
    pub to_dead: usize,
    /// Earliest deadline left, Unix ms.
    pub next_deadline: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
}

/// A timer's share of one shard after a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    /// Redis's clock, Unix ms.
    pub now: i64,
    /// Live timers on the shard, this one included.
    pub timers: usize,
    /// Buckets this timer holds.
    pub buckets: Vec<u32>,
}

/// Counts and health of one shard.
#[derive(Debug, Clone)]
pub struct ShardStats {
    /// Position in `redis.shards`.
    pub index: usize,
    /// URL without password.
    pub name: String,
    /// Whether it answered.
    pub up: bool,
    /// Round trip of a PING, when it answered.
    pub latency: Option<Duration>,
    /// Job counts by topic, then state.
    pub counts: HashMap<String, HashMap<State, i64>>,
}

impl Queue {
    /// A queue over the configured shards. Connects lazily.
    pub fn new(settings: &Settings) -> Result<Self> {
        Ok(Queue {
            shards: Shards::new(&settings.redis)?,
            keys: Keys::new(settings.redis.prefix.clone()),
            limits: settings.limits.clone(),
            defaults: settings.jobs.clone(),
            pushes: settings
                .redis
                .shards
                .iter()
                .map(|_| Arc::new(Coalescer::new(PUSH_GROUP_JOBS, PUSH_CALLS_IN_FLIGHT)))
                .collect(),
        })
    }

    /// The shards.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// Key names.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Request limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Job defaults (`jobs.*`).
    pub fn defaults(&self) -> &JobDefaults {
        &self.defaults
    }

    /// Checks a push and fills in defaults; nothing touches Redis.
    pub fn validate(&self, req: PushRequest) -> Result<NewJob> {
        NewJob::from_request(req, &self.limits, &self.defaults, unix_ms())
    }

    /// Records the bucket count on every reachable shard, or refuses when a shard was set up with another
    /// count (its jobs would sit in buckets no timer serves). Unreachable shards are skipped.
    pub async fn check_layout(&self) -> Result<()> {
        for shard in self.shards.all() {
            let mut cmd = redis::cmd("HSETNX");
            cmd.arg(self.keys.meta()).arg("buckets").arg(self.shards.buckets());
            if let Err(e) = shard.query::<i64>(&cmd).await {
                tracing::warn!(shard = shard.index, cause = %e, "cannot check the shard's layout now");
                continue;
            }
            let have: u32 = shard
                .query(redis::cmd("HGET").arg(self.keys.meta()).arg("buckets"))
                .await?;
            if have != self.shards.buckets() {
                return Err(Error::Invalid(format!(
                    "shard {} ({}) was set up with redis.buckets = {have}, this process has {}",
                    shard.index,
                    shard.name,
                    self.shards.buckets()
                )));
            }
        }
        Ok(())
    }

    /// Picks an id for a job that came without one: a ULID, drawn again until it falls on a shard that
    /// was up at last contact (when any is), so pushes avoid a shard that is down.
    fn fresh_id(&self, avoid: Option<usize>) -> String {
        let all = self.shards.all();
        let any_up = all.iter().any(|s| s.is_up() && Some(s.index) != avoid);
        let mut id = ulid::Ulid::new().to_string();
        for _ in 0..64 {
            let s = self.shards.for_id(&id);
            if (!any_up || s.is_up()) && Some(s.index) != avoid {
                break;
            }
            id = ulid::Ulid::new().to_string();
        }
        id
    }

    /// Stores one job.
    pub async fn push(&self, job: NewJob) -> Result<Pushed> {
        self.push_many(vec![job]).await.pop().expect("one result per job")
    }

    /// Stores many jobs: one script call per shard, shared with other requests' pushes to that shard that
    /// arrive at the same moment (see [`crate::coalesce`]). The results are in the order of `jobs`; a job
    /// whose id is live gets `Conflict`, one whose shard is down `Unavailable` (jobs without a given id are
    /// moved to another shard first).
    pub async fn push_many(&self, jobs: Vec<NewJob>) -> Vec<Result<Pushed>> {
        let mut results: Vec<Option<Result<Pushed>>> = (0..jobs.len()).map(|_| None).collect();
        let mut ids: Vec<String> = Vec::with_capacity(jobs.len());
        let mut generated = Vec::with_capacity(jobs.len());
        for job in &jobs {
            generated.push(job.id.is_none());
            ids.push(job.id.clone().unwrap_or_else(|| self.fresh_id(None)));
        }
        let jobs = Arc::new(jobs);
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        for round in 0..=self.shards.all().len() {
            let mut by_shard: HashMap<usize, Vec<usize>> = HashMap::new();
            for &i in &pending {
                by_shard.entry(self.shards.for_id(&ids[i]).index).or_default().push(i);
            }
            let calls = by_shard.into_iter().map(|(s, idx)| {
                let group = PushGroup {
                    jobs: jobs.clone(),
                    picks: idx.iter().map(|&i| (i, ids[i].clone())).collect(),
                };
                async move { (s, idx, self.push_grouped(s, group).await) }
            });
            let mut retry = Vec::new();
            for (s, idx, r) in futures_util::future::join_all(calls).await {
                match r {
                    Ok(outs) => {
                        for (i, out) in idx.into_iter().zip(outs) {
                            results[i] = Some(out.map(|(state, run_at)| Pushed {
                                id: ids[i].clone(),
                                state,
                                run_at,
                            }));
                        }
                    }
                    Err(e) => {
                        for i in idx {
                            if generated[i] && round < self.shards.all().len() && matches!(e, Error::Unavailable { .. })
                            {
                                ids[i] = self.fresh_id(Some(s));
                                retry.push(i);
                            } else {
                                results[i] = Some(Err(clone_err(&e)));
                            }
                        }
                    }
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
                        shard: 0,
                        reason: "no shard took the job".into(),
                    })
                })
            })
            .collect()
    }

    /// Stores one group on shard `s`: a big one in a call of its own, a small one in one script call with
    /// whatever other small groups wait for that shard.
    async fn push_grouped(&self, s: usize, group: PushGroup) -> PushOutcome {
        let weight = group.picks.len();
        if weight >= PUSH_ALONE_JOBS {
            let jobs = group.picks.iter().map(|(i, id)| (id, &group.jobs[*i]));
            return push_on(&self.shards, &self.keys, &self.shards.all()[s], jobs).await;
        }
        let (shards, keys) = (self.shards.clone(), self.keys.clone());
        let flush = move |groups: Vec<PushGroup>| {
            let (shards, keys) = (shards.clone(), keys.clone());
            async move {
                let shard = &shards.all()[s];
                let mut jobs: Vec<(&String, &NewJob)> = Vec::new();
                for g in &groups {
                    jobs.extend(g.picks.iter().map(|(i, id)| (id, &g.jobs[*i])));
                }
                match push_on(&shards, &keys, shard, jobs.into_iter()).await {
                    Ok(mut outs) => groups
                        .iter()
                        .map(|g| Ok(outs.drain(..g.picks.len()).collect()))
                        .collect(),
                    Err(e) => groups.iter().map(|_| Err(clone_err(&e))).collect(),
                }
            }
        };
        self.pushes[s].submit(group, weight, flush).await.unwrap_or_else(|| {
            Err(Error::Redis {
                shard: s,
                message: "the push call ended without an answer".into(),
            })
        })
    }

    /// Looks a job up by id.
    pub async fn get(&self, id: &str) -> Result<Job> {
        let ids = [id.to_string()];
        let mut jobs = self.get_many(&ids).await?;
        jobs.pop().flatten().ok_or_else(|| Error::NotFound(id.to_string()))
    }

    /// Looks jobs up by id, in one `get.lua` call per shard: each job in the order of `ids`, `None` for
    /// an id without a record.
    pub async fn get_many(&self, ids: &[String]) -> Result<Vec<Option<Job>>> {
        let mut by_shard: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            by_shard.entry(self.shards.for_id(id).index).or_default().push(i);
        }
        let mut jobs: Vec<Option<Job>> = ids.iter().map(|_| None).collect();
        for (s, positions) in by_shard {
            let keys: Vec<String> = positions.iter().map(|&i| self.keys.job(&ids[i])).collect();
            let records = self.read_records(&self.shards.all()[s], &keys, &[]).await?;
            for (i, fields) in positions.into_iter().zip(records) {
                let id = &ids[i];
                jobs[i] = match parse_job(id, fields) {
                    Ok(job) => Some(job),
                    Err(ParseJob::Missing) => None,
                    Err(ParseJob::Bad(what)) => {
                        return Err(Error::Redis {
                            shard: s,
                            message: format!("job {id}: {what}"),
                        });
                    }
                };
            }
        }
        Ok(jobs)
    }

    /// Reads job records on one shard, decoded by `get.lua` (a record is one packed string): for each key,
    /// its fields by name, empty when there is no record. `fields` names the fields wanted; none means all.
    pub async fn read_records(
        &self,
        shard: &Shard,
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
        shard.invoke(&inv).await
    }

    /// Removes a job from whatever state it is in.
    pub async fn delete(&self, id: &str) -> Result<()> {
        let shard = self.shards.for_id(id);
        let mut inv = scripts::DELETE.prepare_invoke();
        inv.key(self.keys.job(id))
            .key(self.keys.delayed(self.shards.bucket_of(id)))
            .key(self.keys.reserved())
            .key(self.keys.counts())
            .arg(self.keys.prefix())
            .arg(id);
        match shard.invoke::<i64>(&inv).await? {
            1 => Ok(()),
            _ => Err(Error::NotFound(id.to_string())),
        }
    }

    /// Gives a delayed or ready job a new due time and returns it.
    pub async fn reschedule(&self, id: &str, schedule: Schedule) -> Result<Job> {
        let shard = self.shards.for_id(id);
        let mut inv = scripts::RESCHEDULE.prepare_invoke();
        inv.key(self.keys.job(id))
            .key(self.keys.delayed(self.shards.bucket_of(id)))
            .key(self.keys.counts())
            .arg(self.keys.prefix())
            .arg(id);
        match schedule {
            Schedule::Delay(d) => inv.arg(d).arg(""),
            Schedule::At(at) => inv.arg("").arg(at),
        };
        inv.arg(self.keys.ready_channel()).arg(self.keys.timer_channel());
        let out: Vec<Value> = shard.invoke(&inv).await?;
        if out.first().and_then(int) != Some(1) {
            let state = out.get(1).and_then(text).unwrap_or_default();
            if state == "not_found" {
                return Err(Error::NotFound(id.to_string()));
            }
            return Err(Error::Conflict(format!(
                "job `{id}` is {state}; only delayed or ready jobs can be rescheduled"
            )));
        }
        self.get(id).await
    }

    /// Reserves up to `count` ready jobs of `topics` (highest priority first), without waiting. Shards
    /// are asked in an order that starts at a random one, so reservers spread over shards; within a shard
    /// the topics' priority holds exactly.
    pub async fn reserve(&self, topics: &[String], count: usize) -> Result<Vec<Reservation>> {
        self.reserve_with(topics, count, None).await
    }

    /// [`Queue::reserve`], with each reservation lasting at least `least_ttr_ms` (dq-consumer's
    /// reservations must outlive the callback's timeout, whatever the job's own TTR).
    pub async fn reserve_with(
        &self,
        topics: &[String],
        count: usize,
        least_ttr_ms: Option<u64>,
    ) -> Result<Vec<Reservation>> {
        let all = self.shards.all();
        let start = if all.len() > 1 {
            rand::rng().random_range(0..all.len())
        } else {
            0
        };
        let mut out = Vec::new();
        let mut last_err = None;
        for k in 0..all.len() {
            if out.len() >= count {
                break;
            }
            let shard = &all[(start + k) % all.len()];
            match self.reserve_on(shard, topics, count - out.len(), least_ttr_ms).await {
                Ok(mut got) => out.append(&mut got),
                Err(e) => last_err = Some(e),
            }
        }
        match last_err {
            // Jobs reserved elsewhere are handed out; a shard down only fails the call when it got nothing.
            Some(e) if out.is_empty() && all.iter().all(|s| !s.is_up()) => Err(e),
            _ => {
                for r in &out {
                    metrics::counter!("dq_jobs_reserved_total", "topic" => r.topic.clone()).increment(1);
                }
                Ok(out)
            }
        }
    }

    async fn reserve_on(
        &self,
        shard: &Shard,
        topics: &[String],
        count: usize,
        least_ttr_ms: Option<u64>,
    ) -> Result<Vec<Reservation>> {
        let mut inv = scripts::RESERVE.prepare_invoke();
        inv.key(self.keys.reserved()).key(self.keys.counts());
        for t in topics {
            inv.key(self.keys.ready(t));
        }
        let nonce: u64 = rand::rng().random();
        inv.arg(self.keys.prefix()).arg(count).arg(format!("{nonce:016x}"));
        match least_ttr_ms {
            Some(t) => inv.arg(t),
            None => inv.arg(""),
        };
        let out: Vec<Value> = shard.invoke(&inv).await?;
        let bad = || Error::Redis {
            shard: shard.index,
            message: "reserve returned a malformed job".into(),
        };
        out.chunks(7)
            .map(|c| {
                if c.len() != 7 {
                    return Err(bad());
                }
                let body = text(&c[2]).ok_or_else(bad)?;
                Ok(Reservation {
                    id: text(&c[0]).ok_or_else(bad)?,
                    topic: text(&c[1]).ok_or_else(bad)?,
                    body: RawValue::from_string(body).map_err(|_| bad())?,
                    attempt: int(&c[3]).ok_or_else(bad)? as u32,
                    receipt: text(&c[4]).ok_or_else(bad)?,
                    deadline: int(&c[5]).ok_or_else(bad)?,
                    run_at: int(&c[6]).ok_or_else(bad)?,
                })
            })
            .collect()
    }

    /// Finishes a reservation: the job is done.
    pub async fn ack(&self, id: &str, receipt: &str) -> Result<()> {
        let shard = self.shards.for_id(id);
        let mut inv = scripts::ACK.prepare_invoke();
        inv.key(self.keys.job(id))
            .key(self.keys.reserved())
            .key(self.keys.counts())
            .arg(id)
            .arg(receipt)
            .arg(self.defaults.done_retention_ms);
        match shard.invoke::<i64>(&inv).await? {
            1 => {
                metrics::counter!("dq_jobs_acked_total").increment(1);
                Ok(())
            }
            0 => Err(Error::NotFound(id.to_string())),
            _ => Err(Error::StaleReceipt),
        }
    }

    /// Fails a reservation: the job backs off (by `delay_ms`, else `backoff_ms`, else the default
    /// schedule) or goes dead after its last attempt. Returns its new state and due time.
    pub async fn nack(
        &self,
        id: &str,
        receipt: &str,
        delay_ms: Option<u64>,
        error: Option<&str>,
        backoff_ms: Option<&[u64]>,
    ) -> Result<(State, i64)> {
        let shard = self.shards.for_id(id);
        let mut inv = scripts::NACK.prepare_invoke();
        inv.key(self.keys.job(id))
            .key(self.keys.reserved())
            .key(self.keys.delayed(self.shards.bucket_of(id)))
            .key(self.keys.counts())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(id)
            .arg(receipt)
            .arg(error.unwrap_or(""));
        match delay_ms {
            Some(d) => inv.arg(d),
            None => inv.arg(""),
        };
        inv.arg(self.keys.ready_channel()).arg(self.keys.timer_channel());
        for d in backoff_ms.unwrap_or(&self.defaults.backoff_ms) {
            inv.arg(*d);
        }
        let out: Vec<Value> = shard.invoke(&inv).await?;
        match out.first().and_then(int) {
            Some(1) => {
                let state = out.get(1).and_then(text).and_then(|s| State::parse(&s));
                let run_at = out.get(2).and_then(int);
                let (Some(state), Some(run_at)) = (state, run_at) else {
                    return Err(Error::Redis {
                        shard: shard.index,
                        message: "nack returned a malformed answer".into(),
                    });
                };
                metrics::counter!("dq_jobs_nacked_total").increment(1);
                if state == State::Dead {
                    metrics::counter!("dq_jobs_dead_total").increment(1);
                }
                Ok((state, run_at))
            }
            Some(0) => Err(Error::NotFound(id.to_string())),
            _ => Err(Error::StaleReceipt),
        }
    }

    /// Extends a reservation to now + `ttr_ms` (else the job's TTR); returns the new deadline.
    pub async fn touch(&self, id: &str, receipt: &str, ttr_ms: Option<u64>) -> Result<i64> {
        let shard = self.shards.for_id(id);
        let mut inv = scripts::TOUCH.prepare_invoke();
        inv.key(self.keys.job(id))
            .key(self.keys.reserved())
            .arg(id)
            .arg(receipt);
        match ttr_ms {
            Some(t) => inv.arg(t),
            None => inv.arg(""),
        };
        match shard.invoke::<i64>(&inv).await? {
            0 => Err(Error::NotFound(id.to_string())),
            -1 => Err(Error::StaleReceipt),
            deadline => Ok(deadline),
        }
    }

    /// Moves up to `limit` due jobs of one bucket to ready.
    pub async fn promote(&self, shard: &Shard, bucket: u32, limit: u32) -> Result<Promoted> {
        let mut inv = scripts::PROMOTE.prepare_invoke();
        inv.key(self.keys.delayed(bucket))
            .key(self.keys.counts())
            .arg(self.keys.prefix())
            .arg(limit)
            .arg(self.keys.ready_channel());
        let out: Vec<i64> = shard.invoke(&inv).await?;
        if out.len() < 3 {
            return Err(Error::Redis {
                shard: shard.index,
                message: "promote returned too little".into(),
            });
        }
        Ok(Promoted {
            moved: out[0] as usize,
            next_due: (out[1] >= 0).then_some(out[1]),
            now: out[2],
            lateness_ms: out[3..].to_vec(),
        })
    }

    /// Ends up to `limit` expired reservations on one shard.
    pub async fn expire(&self, shard: &Shard, limit: u32) -> Result<Expired> {
        let mut inv = scripts::EXPIRE.prepare_invoke();
        inv.key(self.keys.reserved())
            .key(self.keys.counts())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(limit)
            .arg(self.keys.ready_channel());
        let out: Vec<i64> = shard.invoke(&inv).await?;
        if out.len() != 4 {
            return Err(Error::Redis {
                shard: shard.index,
                message: "expire returned a malformed answer".into(),
            });
        }
        Ok(Expired {
            to_ready: out[0] as usize,
            to_dead: out[1] as usize,
            next_deadline: (out[2] >= 0).then_some(out[2]),
            now: out[3],
        })
    }

    /// A timer's heartbeat on one shard: returns Redis's clock, the number of live timers, and the
    /// buckets this timer holds now. `release` gives all of them up (drain).
    pub async fn balance(&self, shard: &Shard, timer_id: &str, lease_ms: u64, release: bool) -> Result<Balance> {
        let mut inv = scripts::BALANCE.prepare_invoke();
        inv.key(self.keys.timers())
            .key(self.keys.leases())
            .arg(timer_id)
            .arg(lease_ms)
            .arg(self.shards.buckets())
            .arg(if release { "1" } else { "0" });
        let out: Vec<i64> = shard.invoke(&inv).await?;
        if out.len() < 2 {
            return Err(Error::Redis {
                shard: shard.index,
                message: "balance returned too little".into(),
            });
        }
        Ok(Balance {
            now: out[0],
            timers: out[1] as usize,
            buckets: out[2..].iter().map(|b| *b as u32).collect(),
        })
    }

    /// Counts by topic and state, and health, of every shard.
    pub async fn stats(&self) -> Vec<ShardStats> {
        let calls = self.shards.all().iter().map(|shard| async move {
            let latency = shard.ping(Duration::from_millis(1000)).await.ok();
            let mut counts: HashMap<String, HashMap<State, i64>> = HashMap::new();
            if latency.is_some() {
                let raw: HashMap<String, i64> = shard
                    .query(redis::cmd("HGETALL").arg(self.keys.counts()))
                    .await
                    .unwrap_or_default();
                for (field, n) in raw {
                    if let Some((topic, state)) = field.rsplit_once(':')
                        && let Some(state) = State::parse(state)
                    {
                        *counts.entry(topic.to_string()).or_default().entry(state).or_default() += n;
                    }
                }
            }
            ShardStats {
                index: shard.index,
                name: shard.name.clone(),
                up: latency.is_some(),
                latency,
                counts,
            }
        });
        futures_util::future::join_all(calls).await
    }
}

/// The current Unix time in ms on this machine, for bounds checks only (due times are Redis's).
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs push.lua once on `shard` for `jobs` (id and job each), answering per job.
async fn push_on<'a>(
    shards: &Shards,
    keys: &Keys,
    shard: &Shard,
    jobs: impl Iterator<Item = (&'a String, &'a NewJob)>,
) -> Result<Vec<Result<(State, i64)>>> {
    let mut inv = scripts::PUSH.prepare_invoke();
    inv.key(keys.counts());
    inv.arg(keys.ready_channel()).arg(keys.timer_channel());
    let mut n = 0;
    for (id, job) in jobs {
        n += 1;
        inv.key(keys.job(id))
            .key(keys.delayed(shards.bucket_of(id)))
            .key(keys.ready(&job.topic));
        inv.arg(id).arg(&job.topic).arg(&job.body);
        match job.schedule {
            Schedule::Delay(d) => inv.arg(d).arg(""),
            Schedule::At(at) => inv.arg("").arg(at),
        };
        inv.arg(job.ttr_ms)
            .arg(job.max_attempts)
            .arg(if job.id.is_some() { "1" } else { "0" });
    }
    let out: Vec<Value> = shard.invoke(&inv).await?;
    let bad = |what: &str| Error::Redis {
        shard: shard.index,
        message: format!("push returned {what}"),
    };
    if out.len() != 3 * n {
        return Err(bad("the wrong number of values"));
    }
    out.chunks(3)
        .map(|c| {
            if int(&c[0]) == Some(0) {
                return Ok(Err(Error::Conflict("a live job already has this id".into())));
            }
            let state = text(&c[1])
                .and_then(|s| State::parse(&s))
                .ok_or_else(|| bad("an unknown state"))?;
            Ok(Ok((state, int(&c[2]).ok_or_else(|| bad("no run_at"))?)))
        })
        .collect()
}

fn clone_err(e: &Error) -> Error {
    match e {
        Error::Unavailable { shard, reason } => Error::Unavailable {
            shard: *shard,
            reason: reason.clone(),
        },
        Error::Redis { shard, message } => Error::Redis {
            shard: *shard,
            message: message.clone(),
        },
        other => Error::Redis {
            shard: 0,
            message: other.to_string(),
        },
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

enum ParseJob {
    Missing,
    Bad(&'static str),
}

fn parse_job(id: &str, mut f: HashMap<String, Vec<u8>>) -> std::result::Result<Job, ParseJob> {
    if f.is_empty() {
        return Err(ParseJob::Missing);
    }
    let mut take = |k: &str| f.remove(k).and_then(|v| String::from_utf8(v).ok());
    let num = |v: Option<String>, what| v.and_then(|s| s.parse::<i64>().ok()).ok_or(ParseJob::Bad(what));
    let topic = take("t").ok_or(ParseJob::Bad("no topic"))?;
    let body = take("b").ok_or(ParseJob::Bad("no body"))?;
    let state = take("s")
        .and_then(|s| State::parse(&s))
        .ok_or(ParseJob::Bad("no state"))?;
    Ok(Job {
        id: id.to_string(),
        topic,
        body: RawValue::from_string(body).map_err(|_| ParseJob::Bad("body is not JSON"))?,
        state,
        run_at: num(take("r"), "no run_at")?,
        ttr_ms: num(take("ttr"), "no ttr")? as u64,
        // Absent until the first reservation.
        attempts: take("a").map_or(Ok(0), |a| num(Some(a), "bad attempts"))? as u32,
        max_attempts: num(take("m"), "no max_attempts")? as u32,
        created_at: num(take("c"), "no created_at")?,
        last_error: take("e"),
        deadline: take("d")
            .and_then(|s| s.parse().ok())
            .filter(|_| state == State::Reserved),
    })
}
