//! Which partitions may hold ready jobs of which topics, as this process knows it, so that a reserve goes
//! straight to partitions with work instead of asking every partition.
//!
//! Fed by the ready wake-ups (a script publishes on its partition's channel when a topic's queue there
//! stops being empty), and emptied by reserves that found a partition's queues empty. A topic this
//! process has not followed yet, or every topic after the subscription was lost (wake-ups may have been
//! missed), is read once from the partitions' counts; after that a reserve costs calls only to the
//! partitions that have ready jobs, whatever the partition count.
//!
//! The index only errs on the safe side: a stale entry costs one empty reserve call, and an entry is
//! dropped only when no wake-up for it arrived since the reserve that found the queue empty was sent.
//!
//! Long polls wait in line per topic ([`Waiter`]). A wake-up wakes **one** waiter of its topic, not all:
//! a queue that just stopped being empty usually holds one job, and waking every waiter would send each
//! of them to Redis to find it gone (with 16 waiters, 13 reserve calls per job were measured). A reserve
//! asking a partition holds a [`Claim`] on it: other reserves of the process leave it alone, and when
//! the claim ends with the partition still listed (it held more than was asked for, or a wake-up came
//! meanwhile) the next waiter is woken for it. A reserve that stopped with partitions it did not ask, or
//! that was cancelled half-way, wakes the next waiter too ([`ReadyIndex::pass_on`]), so no wake-up is
//! lost.
//!
//! An entry that no reserve has used for a sweep interval and that nobody waits on is dropped
//! ([`ReadyIndex::unsynced`] sweeps), so the index holds the topics being reserved now, not every
//! name anyone ever long-polled or that a wake-up named. A dropped topic is read from the counts again
//! at its next reserve, as a topic never followed is.

mod handed;
mod line;
mod listed;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::Notify;

pub use self::handed::HANDED_HOLD;
use self::handed::Handed;
pub use self::line::{Claim, Tried, Waiter};
use self::listed::Listed;

/// How often the index drops entries nobody used: an entry goes after one to two of these without a
/// reserve of its topic.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The index. One per process (shared by every clone of the queue).
#[derive(Debug)]
pub struct ReadyIndex {
    /// Per topic: the partitions that may have ready jobs, and the waiters' line.
    topics: Mutex<Topics>,
    /// Whether a listener feeds the index wake-ups; without one every reserve reads the counts first.
    listening: AtomicBool,
    /// How often unused entries are dropped ([`SWEEP_EVERY`]; shorter in tests).
    sweep_every: Duration,
    /// Handed jobs held, over every topic (see [`handed`]): a reserve looks for them only when some are,
    /// so processes that are handed nothing (dq-consumer) take no lock for it.
    held: AtomicUsize,
}

impl Default for ReadyIndex {
    fn default() -> Self {
        Self::with_sweep(SWEEP_EVERY)
    }
}

#[derive(Debug, Default)]
struct Topics {
    /// Topic → its entry.
    by_topic: HashMap<String, Entry>,
    /// Bumped by every mark, so a clear can tell whether a mark came after the reserve it follows.
    epoch: u64,
    /// Bumped by every sweep; an entry remembers the one in which a reserve last used it.
    generation: u64,
    /// When the last sweep ran.
    swept: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    /// The partitions that may have ready jobs of the topic.
    partitions: Listed,
    /// Whether `partitions` is complete (read from the counts since the last subscription).
    synced: bool,
    /// The topic's long polls, in line: a wake-up wakes the first.
    waiters: Arc<Notify>,
    /// The sweep generation in which a reserve of the topic last used the entry.
    used: u64,
    /// Partition → how many reserves of this process are asking it for this topic now. Per topic, not
    /// per partition: a claim's settle wakes the waiters of its own topics only, so a reserve must
    /// leave a partition only to a claim that covers its topic. Grown on demand.
    busy: Vec<u32>,
    /// While a reserve reads the topic's counts: woken when it is done, for the reserves that wait for
    /// that read instead of making their own (see [`ReadyIndex::sync_turns`]).
    syncing: Option<Arc<Notify>>,
    /// The long polls waiting, and the jobs handed to them (see [`handed`]).
    handed: Handed,
    /// Partition → the most urgent priority (below the default) a wake-up or this process's own push
    /// said arrived there, and the epoch of that mark: a reserve asks these partitions first, most
    /// urgent first, so an urgent job is not left behind a backlog in other partitions. Dropped once a
    /// reserve has asked the partition since (it took the most urgent jobs there first).
    urgent: HashMap<u16, (u32, u64)>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            partitions: Listed::default(),
            synced: false,
            waiters: Arc::new(Notify::new()),
            used: 0,
            busy: Vec::new(),
            syncing: None,
            handed: Handed::default(),
            urgent: HashMap::new(),
        }
    }
}

impl ReadyIndex {
    /// An index that drops unused entries every `sweep_every`.
    pub fn with_sweep(sweep_every: Duration) -> Self {
        ReadyIndex {
            topics: Mutex::default(),
            listening: AtomicBool::default(),
            sweep_every,
            held: AtomicUsize::default(),
        }
    }

    /// How many topics the index holds an entry for.
    pub fn len(&self) -> usize {
        self.lock().by_topic.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Topics> {
        self.topics.lock().expect("ready index lock")
    }

    /// A place in line for `topics`, taken **before** the reserve it may follow, so that a wake-up sent
    /// while that reserve runs is not missed: [`Waiter::wait`] then returns at once. While it waits, it
    /// counts as `slots` jobs wanted of each topic, for the timers' hand-offs.
    pub fn waiter(&self, topics: &[String], slots: u32) -> Waiter {
        let lines: Vec<(Arc<Notify>, Arc<AtomicU32>)> = {
            let mut t = self.lock();
            let generation = t.generation;
            topics
                .iter()
                .map(|topic| {
                    let entry = t.by_topic.entry(topic.clone()).or_default();
                    entry.used = generation;
                    (entry.waiters.clone(), entry.handed.waiting.clone())
                })
                .collect()
        };
        Waiter::new(lines, slots)
    }

    /// Partition `p` may have ready jobs of `topic` (a wake-up, or this process's own write): wakes one
    /// waiter of the topic (or the next one to wait, when none does).
    pub fn mark(&self, topic: &str, p: u16) {
        self.list(topic, p).notify_one();
    }

    /// This process just made jobs of `topic` ready in partition `p`: lists it at once, so the process's
    /// next reserve finds them, but leaves waking a waiter to the wake-up the script published when a
    /// listener follows them. Waking one here too would wake a second waiter for the same jobs: the
    /// wake-up, arriving after the first waiter's ask began, keeps the partition listed past it, and the
    /// second waiter asks it in vain.
    ///
    /// When the partition is listed already it is left as it is: the script's wake-up may have arrived
    /// before the script's answer, and listing it again, newer than the reserve that wake-up sent, would
    /// keep it listed past that reserve for nothing.
    pub fn mark_own(&self, topic: &str, p: u16) {
        if !self.listening.load(Ordering::Relaxed) {
            self.list(topic, p).notify_one();
            return;
        }
        let listed = self
            .lock()
            .by_topic
            .get(topic)
            .is_some_and(|e| e.partitions.contains(p));
        if !listed {
            self.list(topic, p);
        }
    }

    /// A job of `topic` more urgent than the default (`priority` below 1024) became ready in partition `p`
    /// (a wake-up said so, or this process pushed it): lists `p`, and reserves ask it before the
    /// partitions without such a job until one has asked it.
    pub fn hint(&self, topic: &str, p: u16, priority: u32) {
        let mut t = self.lock();
        t.epoch += 1;
        let epoch = t.epoch;
        let entry = t.by_topic.entry(topic.to_string()).or_default();
        entry.partitions.insert(p, epoch);
        let best = entry.urgent.get(&p).map_or(priority, |&(was, _)| was.min(priority));
        entry.urgent.insert(p, (best, epoch));
    }

    /// The partitions hinted for `topic` ([`ReadyIndex::hint`]) and their most urgent priority, by
    /// partition: what the next reserve asks first.
    pub fn hinted(&self, topic: &str) -> Vec<(u16, u32)> {
        let t = self.lock();
        let mut out: Vec<(u16, u32)> = t
            .by_topic
            .get(topic)
            .map(|e| e.urgent.iter().map(|(&p, &(prio, _))| (p, prio)).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Lists `p` for `topic`; answers the topic's line.
    fn list(&self, topic: &str, p: u16) -> Arc<Notify> {
        let mut t = self.lock();
        t.epoch += 1;
        let epoch = t.epoch;
        let entry = match t.by_topic.get_mut(topic) {
            Some(entry) => entry,
            None => t.by_topic.entry(topic.to_string()).or_default(),
        };
        entry.partitions.insert(p, epoch);
        entry.waiters.clone()
    }

    /// A reserve of `topics` was cancelled half-way, or stopped with partitions it had not asked: for
    /// each topic that still has partitions listed, wake one more waiter, since they may hold jobs nobody
    /// else was woken for.
    pub fn pass_on(&self, topics: &[String]) {
        let lines: Vec<Arc<Notify>> = {
            let t = self.lock();
            topics
                .iter()
                .filter_map(|topic| t.by_topic.get(topic))
                .filter(|e| !e.partitions.is_empty())
                .map(|e| e.waiters.clone())
                .collect()
        };
        lines.iter().for_each(|l| l.notify_one());
    }

    /// A reserve of `topics` is about to ask partition `p`: until the claim is settled (or dropped),
    /// other reserves in this process leave `p` to it (see [`ReadyIndex::candidates`]).
    pub fn claim<'a>(&'a self, topics: &'a [String], p: u16) -> Claim<'a> {
        let mut t = self.lock();
        let i = p as usize;
        for topic in topics {
            let entry = t.by_topic.entry(topic.clone()).or_default();
            if entry.busy.len() <= i {
                entry.busy.resize(i + 1, 0);
            }
            entry.busy[i] += 1;
        }
        Claim::new(self, topics, p, t.epoch)
    }

    /// Ends a claim on `p` taken at `epoch` (see [`Claim`]).
    fn settle(&self, topics: &[String], p: u16, epoch: u64, tried: Tried) {
        let lines: Vec<Arc<Notify>> = {
            let mut t = self.lock();
            for topic in topics {
                let Some(entry) = t.by_topic.get_mut(topic) else {
                    continue;
                };
                if let Some(n) = entry.busy.get_mut(p as usize) {
                    *n = n.saturating_sub(1);
                }
                // Asked: it took the partition's most urgent jobs first. A hint newer than the ask stays.
                if tried != Tried::Failed && entry.urgent.get(&p).is_some_and(|&(_, e)| e <= epoch) {
                    entry.urgent.remove(&p);
                }
            }
            if tried == Tried::Emptied {
                clear(&mut t, topics, p, epoch);
            }
            if tried == Tried::Failed {
                return;
            }
            topics
                .iter()
                .filter_map(|topic| t.by_topic.get(topic))
                .filter(|e| e.partitions.contains(p))
                .map(|e| e.waiters.clone())
                .collect()
        };
        lines.iter().for_each(|l| l.notify_one());
    }

    /// Wake-ups may have been lost (the subscription was (re)made): every topic is read again from the
    /// counts before its next reserve, and every waiter looks again.
    pub fn resync(&self) {
        let mut t = self.lock();
        for entry in t.by_topic.values_mut() {
            entry.synced = false;
            entry.waiters.notify_waiters();
        }
    }

    /// A listener now feeds wake-ups (or stopped: `false`).
    pub fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Relaxed);
        self.resync();
    }

    /// The topics among `topics` whose partitions must be read from the counts before a reserve. Called
    /// first by every reserve: marks their entries used, and sweeps the index when it is time.
    pub fn unsynced(&self, topics: &[String]) -> Vec<String> {
        let listening = self.listening.load(Ordering::Relaxed);
        let mut t = self.lock();
        let generation = t.generation;
        let out = topics
            .iter()
            .filter(|topic| match t.by_topic.get_mut(*topic) {
                Some(e) => {
                    e.used = generation;
                    !listening || !e.synced
                }
                None => true,
            })
            .cloned()
            .collect();
        if t.swept.is_none_or(|at| at.elapsed() >= self.sweep_every) {
            sweep(&mut t);
        }
        out
    }

    /// Of `unsynced` (from [`ReadyIndex::unsynced`]), the topics whose counts this reserve reads, and the
    /// reads already under way that it waits for instead. A burst of long polls on a topic the process
    /// has not followed yet (10,000 arriving at once after a restart) so reads its counts once, not once
    /// per reserve: each read asks every partition. Without a listener every reserve reads for itself.
    pub fn sync_turns(&self, unsynced: Vec<String>) -> SyncTurns<'_> {
        let mut turns = SyncTurns {
            index: self,
            mine: Vec::new(),
            others: Vec::new(),
        };
        if !self.listening.load(Ordering::Relaxed) {
            turns.mine = unsynced;
            return turns;
        }
        let mut t = self.lock();
        for topic in unsynced {
            let entry = t.by_topic.entry(topic.clone()).or_default();
            match &entry.syncing {
                Some(done) => {
                    let mut wait = Box::pin(done.clone().notified_owned());
                    wait.as_mut().enable();
                    turns.others.push(wait);
                }
                None => {
                    entry.syncing = Some(Arc::new(Notify::new()));
                    turns.mine.push(topic);
                }
            }
        }
        turns
    }

    /// Ends the reads of `topics`' counts this process made: the reserves waiting for them go on.
    fn end_syncs(&self, topics: &[String]) {
        let mut t = self.lock();
        for topic in topics {
            if let Some(done) = t.by_topic.get_mut(topic).and_then(|e| e.syncing.take()) {
                done.notify_waiters();
            }
        }
    }

    /// Records a read of the counts of `topic` begun at `epoch`: `ready` are its partitions with ready
    /// jobs. Partitions marked since stay.
    pub fn synced(&self, topic: &str, epoch: u64, ready: &[u16]) {
        let mut t = self.lock();
        let generation = t.generation;
        let entry = t.by_topic.entry(topic.to_string()).or_default();
        entry.used = generation;
        entry.partitions.retain_newer(epoch);
        for &p in ready {
            entry.partitions.insert(p, epoch);
        }
        entry.synced = true;
    }

    /// The current epoch, taken before a read of the counts.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Up to `limit` partitions to try for `topics`, highest priority first, leaving out `skip` (those a
    /// reserve asked already): those of the first topic, beginning at a random one (so reservers
    /// spread), then those of the next topic not listed yet, and so on; then the ones met on the way
    /// that another reserve of this process is asking now (each marked `true`). With whether more
    /// partitions not being asked are listed than the answer holds, and how many of the first are the
    /// first topic's partitions hinted to hold urgent jobs. A reserve of one job among 256 listed
    /// partitions so looks at a handful of them, not all.
    pub fn candidates(&self, topics: &[String], skip: &[u16], limit: usize) -> Candidates {
        let t = self.lock();
        let mut out = Candidates::default();
        let mut contested: Vec<(u16, bool)> = Vec::new();
        let mut rng = rand::rng();
        'topics: for (k, topic) in topics.iter().enumerate() {
            let Some(entry) = t.by_topic.get(topic) else { continue };
            if entry.partitions.is_empty() {
                continue;
            }
            let start = rng.random_range(0..entry.partitions.len());
            // Partitions hinted to hold urgent jobs first, the most urgent first; then the others from a
            // random start.
            let mut urgent: Vec<(u32, u16)> = entry
                .urgent
                .iter()
                .filter(|(p, _)| entry.partitions.contains(**p))
                .map(|(&p, &(prio, _))| (prio, p))
                .collect();
            urgent.sort_unstable();
            let order = urgent
                .iter()
                .map(|&(_, p)| p)
                .chain(entry.partitions.from(start).filter(|p| !entry.urgent.contains_key(p)));
            for p in order {
                // Asked already, or listed for a topic before this one: already in.
                let earlier = topics[..k]
                    .iter()
                    .any(|o| t.by_topic.get(o).is_some_and(|e| e.partitions.contains(p)));
                if earlier || skip.contains(&p) {
                    continue;
                }
                if entry.busy.get(p as usize).is_none_or(|&n| n == 0) {
                    if out.list.len() == limit {
                        out.more = true;
                        break 'topics;
                    }
                    if k == 0 && out.urgent == out.list.len() && entry.urgent.contains_key(&p) {
                        out.urgent += 1;
                    }
                    out.list.push((p, false));
                } else {
                    contested.push((p, true));
                }
            }
        }
        out.list.append(&mut contested);
        out
    }

    /// A reserve sent at `epoch` found every queue of `topics` in partition `p` empty: drop `p` for them,
    /// unless a wake-up marked it since.
    pub fn clear(&self, topics: &[String], p: u16, epoch: u64) {
        clear(&mut self.lock(), topics, p, epoch);
    }
}

/// A reserve's part in reading counts ([`ReadyIndex::sync_turns`]): the topics it reads itself, and the
/// reads of others it waits for. Dropped (the reserve done or cancelled), its own reads end.
pub struct SyncTurns<'a> {
    index: &'a ReadyIndex,
    /// The topics whose counts this reserve reads.
    pub mine: Vec<String>,
    /// The reads under way by other reserves.
    others: Vec<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
}

impl SyncTurns<'_> {
    /// Ends this reserve's own reads, then waits for the others'.
    pub async fn wait_for_others(&mut self) {
        self.index.end_syncs(&std::mem::take(&mut self.mine));
        for wait in self.others.drain(..) {
            wait.await;
        }
    }
}

impl Drop for SyncTurns<'_> {
    fn drop(&mut self) {
        if !self.mine.is_empty() {
            self.index.end_syncs(&self.mine);
        }
    }
}

/// What [`ReadyIndex::candidates`] answers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Candidates {
    /// The partitions to ask, in order, each with whether another reserve is asking it now.
    pub list: Vec<(u16, bool)>,
    /// More partitions not being asked are listed than `list` holds.
    pub more: bool,
    /// How many of `list`'s first partitions are hinted to hold urgent jobs of the first topic.
    pub urgent: usize,
}

/// Drops the entries that no reserve used since the sweep before this one, that nobody waits on
/// (their line is held by no [`Waiter`]) and that hold no hand-off business, and publishes how many are left (`dq_ready_index_topics`).
fn sweep(t: &mut Topics) {
    t.generation += 1;
    t.swept = Some(Instant::now());
    let keep_from = t.generation.saturating_sub(1);
    t.by_topic.retain(|_, e| {
        e.used >= keep_from || Arc::strong_count(&e.waiters) > 1 || e.busy.iter().any(|&n| n > 0) || e.handed.busy()
    });
    metrics::gauge!("dq_ready_index_topics").set(t.by_topic.len() as f64);
}

fn clear(t: &mut Topics, topics: &[String], p: u16, epoch: u64) {
    for topic in topics {
        if let Some(entry) = t.by_topic.get_mut(topic) {
            entry.partitions.remove_unless_newer(p, epoch);
        }
    }
}
