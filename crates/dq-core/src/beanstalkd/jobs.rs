//! What the beanstalkd protocol listener (dq-server) needs beyond the API's verbs: numbers, jobs by
//! number, release and bury, kick (see [`crate::beanstalkd`] for the names).

use super::Beanstalkd;
use crate::beanstalkd::{id_of_number, number_of_id, partition_of_number};
use crate::error::{Error, Result};
use crate::job::{Reservation, State};
use crate::store::beanstalkd as store;
use crate::store::scripts::bs_kick::{self, BsKickReply};
use crate::store::scripts::bs_number::{self, BsNumberReply};
use crate::store::scripts::bs_numbers;
use crate::store::scripts::bs_release::{self, BsReleaseReply};
use crate::store::scripts::bs_take::{self, BsTakeReply};

/// A job as the protocol shows it (`peek`, `stats-job`).
#[derive(Debug, Clone)]
pub struct BsJob {
    /// dq's id.
    pub id: String,
    /// Its topic.
    pub topic: String,
    /// The body's JSON text.
    pub body: String,
    /// Where it is.
    pub state: State,
    /// Priority (the job's `priority`, whichever protocol pushed it).
    pub priority: u32,
    /// Due time, Unix ms.
    pub run_at: i64,
    /// Created, Unix ms.
    pub created_at: i64,
    /// Time-to-run, ms.
    pub ttr_ms: u64,
    /// Reservations so far (dq's attempts).
    pub attempts: u32,
    /// The end of its reservation, Unix ms, while reserved.
    pub deadline: Option<i64>,
    /// beanstalkd's counters: timeouts, releases, buries, kicks.
    pub counters: [u32; 4],
    /// The delay (seconds) of its last release, or of its put once a kick changed its due time.
    pub delay_s: Option<u64>,
}

/// The outcome of a release or a bury.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Done; the job is now in this state.
    Now(State),
    /// No such job.
    Gone,
    /// The job is not reserved under that receipt (its reservation ended).
    Stale,
}

/// The record fields [`BsJob`] is read from.
const FIELDS: [&str; 11] = ["s", "t", "b", "r", "c", "ttr", "a", "d", "p", "k", "n"];

impl Beanstalkd {
    /// Takes `size` numbers from partition `p`'s sequence, the first of them no lower than the k-th
    /// (`bs_numbers.lua`): the k of the last one (the block is `last - size + 1 ..= last`).
    pub async fn bs_take_numbers(&self, p: u16, size: u64, least: u64) -> Result<u64> {
        bs_numbers::call(&self.store, p, size, least).await
    }

    /// The number of job `id`: the one it was made from, else the one it was given (given now if it has
    /// none). `None` when there is no such job (or it is done).
    pub async fn bs_number(&self, id: &str) -> Result<Option<u64>> {
        let count = self.partitions.count();
        if let Some(n) = number_of_id(id, count) {
            return Ok(Some(n));
        }
        match bs_number::call(&self.store, self.partitions.of_id(id), id).await? {
            BsNumberReply::Numbered(n) => Ok(Some(n)),
            BsNumberReply::NoJob => Ok(None),
        }
    }

    /// The live job (not done) with number `n`.
    pub async fn bs_find(&self, n: u64) -> Result<Option<BsJob>> {
        if n == 0 {
            return Ok(None);
        }
        let count = self.partitions.count();
        let id = id_of_number(n, count);
        if let Some(job) = self.bs_job(&id).await? {
            return Ok(Some(job));
        }
        let p = partition_of_number(n, count);
        match store::id_of_number(&self.store, p, n).await? {
            Some(id) => self.bs_job(&id).await,
            None => Ok(None),
        }
    }

    /// Job `id` as the protocol shows it, unless there is none or it is done.
    pub async fn bs_job(&self, id: &str) -> Result<Option<BsJob>> {
        let p = self.partitions.of_id(id);
        let keys = [self.partition_keys(p).job(id)];
        let mut records = self.read_records(p, &keys, &FIELDS).await?;
        let fields = records.pop().unwrap_or_default();
        let bad = |what: &str| Error::unexpected(Some(p), format!("job {id}: {what}"));
        if fields.is_empty() {
            return Ok(None);
        }
        let get = |f: &str| fields.get(f).map(|v| String::from_utf8_lossy(v).into_owned());
        let num = |f: &str| get(f).and_then(|v| v.parse::<i64>().ok());
        let state: State = match get("s").as_deref() {
            Some("delayed") => State::Delayed,
            Some("ready") => State::Ready,
            Some("reserved") => State::Reserved,
            Some("dead") => State::Dead,
            Some("done") => return Ok(None),
            _ => return Err(bad("no state")),
        };
        let mut counters = [0u32; 4];
        let mut delay_s = None;
        if let Some(k) = get("k") {
            let mut values = k.split(',');
            for (slot, v) in counters.iter_mut().zip(values.by_ref()) {
                *slot = v.parse().unwrap_or(0);
            }
            delay_s = values.next().and_then(|v| v.parse().ok());
        }
        Ok(Some(BsJob {
            id: id.to_string(),
            topic: get("t").ok_or_else(|| bad("no topic"))?,
            body: fields
                .get("b")
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .ok_or_else(|| bad("no body"))?,
            state,
            priority: num("p").map_or(crate::job::DEFAULT_PRIORITY, |p| p as u32),
            run_at: num("r").ok_or_else(|| bad("no due time"))?,
            created_at: num("c").unwrap_or_default(),
            ttr_ms: num("ttr").unwrap_or_default() as u64,
            attempts: num("a").unwrap_or_default() as u32,
            deadline: num("d"),
            counters,
            delay_s,
        }))
    }

    /// beanstalkd's release (`delay_ms` given: back to ready, or delayed that long) or bury (`None`: to
    /// the dead list) of a job reserved under `receipt`, with a new priority.
    pub async fn bs_release(&self, id: &str, receipt: &str, priority: u32, delay_ms: Option<u64>) -> Result<Released> {
        let p = self.partitions.of_id(id);
        // The attempt, for the job's history: given back (release) or given up (bury) by its worker.
        let what = if delay_ms.is_some() { "released" } else { "buried" };
        let entry = crate::attempt::entry(
            self.defaults.attempt_history,
            &crate::attempt::Note::default(),
            receipt,
            crate::attempt::Outcome::Nacked,
            Some(what),
        );
        let reply = bs_release::call(&self.store, p, id, receipt, priority, delay_ms, &entry).await?;
        Ok(match reply {
            BsReleaseReply::Ready { topic } => {
                self.ready.mark_own(&topic, p);
                Released::Now(State::Ready)
            }
            BsReleaseReply::Delayed => Released::Now(State::Delayed),
            BsReleaseReply::Buried => Released::Now(State::Dead),
            BsReleaseReply::NoJob => Released::Gone,
            BsReleaseReply::StaleReceipt => Released::Stale,
        })
    }

    /// beanstalkd's kick of one job: a buried (dead) or delayed job goes to ready now. False when it is
    /// neither (or gone).
    pub async fn bs_kick(&self, id: &str) -> Result<bool> {
        let p = self.partitions.of_id(id);
        match bs_kick::call(&self.store, p, id).await? {
            BsKickReply::Kicked { topic } => {
                self.ready.mark_own(&topic, p);
                Ok(true)
            }
            BsKickReply::NotKickable => Ok(false),
        }
    }

    /// beanstalkd's reserve-job: reserves job `id` when it is ready, delayed or buried (dead).
    pub async fn bs_take(&self, id: &str) -> Result<Option<Reservation>> {
        let receipt = format!("{}.1", crate::attempt::receipt_nonce());
        match bs_take::call(&self.store, self.partitions.of_id(id), id, &receipt).await? {
            BsTakeReply::Taken(reservation) => Ok(Some(reservation)),
            BsTakeReply::NotTakeable => Ok(None),
        }
    }
}
