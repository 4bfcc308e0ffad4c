//! Hand-offs to long polls: the timers reserve due jobs for the long polls of this process that wait
//! for their topic, as they do for a dq-consumer's workers (see [`crate::queue::handoff`]), and publish
//! them to the process; the index keeps them per topic until a reserve of the topic takes them.
//!
//! - A long poll counts as waiting, with the jobs it would take, only while it sleeps in line
//!   ([`super::Waiter::wait`]). [`ReadyIndex::to_tell`] says, per topic, when the timers must be told how
//!   many jobs this process's long polls wait for (see [`Told`]).
//! - Jobs handed to the process ([`ReadyIndex::handed`]) wake one waiter each. Any reserve of the
//!   topic in this process takes them first ([`ReadyIndex::take_handed`]), before it asks Redis.
//! - Jobs nobody took within [`HANDED_HOLD`] (the long polls went away) are handed back to the ready
//!   queue by whoever serves the hand-offs ([`ReadyIndex::stale_handed`]), and so is everything when
//!   the process stops.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::ReadyIndex;
use crate::job::Reservation;

/// How long a handed job waits in the process for a reserve of its topic before it is handed back.
pub const HANDED_HOLD: Duration = Duration::from_secs(1);

/// How often the timers are told again while long polls wait, although nothing changed (they forget a
/// waiter after [`crate::queue::handoff::WAITING_FOR_MS`]).
const TELL_EVERY: Duration = Duration::from_secs(1);

/// The least time between two messages about one topic.
const TELL_GAP: Duration = Duration::from_millis(10);

/// The hand-off side of a topic's entry in the index.
#[derive(Debug, Default)]
pub(super) struct Handed {
    /// The jobs the long polls of this topic now waiting would take (the sum of their counts).
    pub(super) waiting: Arc<AtomicU32>,
    /// Jobs handed to this process and not taken yet, with when they came.
    pub(super) jobs: VecDeque<(Instant, Reservation)>,
    /// What the timers were told.
    pub(super) told: Told,
}

impl Handed {
    /// Whether the entry must stay in the index although no reserve used it lately.
    pub(super) fn busy(&self) -> bool {
        !self.jobs.is_empty() || self.told.slots > 0 || self.waiting.load(Ordering::Relaxed) > 0
    }
}

/// What the timers were last told of a topic's waiting long polls, and what they handed since. A timer
/// takes each job it hands off the slots it was told of, so it believes `slots - handed` are still
/// waiting.
///
/// The timers are told again when the long polls waiting differ from what they believe (at most every
/// [`TELL_GAP`]: polls come and go with every job), and every [`TELL_EVERY`] while any wait, so they do
/// not forget them. When none waits any more, they are told 0 once.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Told {
    /// The slots last told.
    pub(super) slots: u32,
    /// When (`None`: never).
    pub(super) at: Option<Instant>,
    /// Jobs handed since.
    pub(super) handed: u32,
}

impl Told {
    /// The slots to tell the timers at `now`, when it is time to.
    pub(super) fn due(&self, waiting: u32, now: Instant) -> Option<u32> {
        let believed = self.slots.saturating_sub(self.handed);
        let Some(at) = self.at else {
            return (waiting > 0).then_some(waiting);
        };
        let since = now.saturating_duration_since(at);
        if since < TELL_GAP || (waiting == 0 && self.slots == 0) {
            return None;
        }
        (waiting != believed || since >= TELL_EVERY).then_some(waiting)
    }
}

impl ReadyIndex {
    /// A timer handed `jobs` (all of one topic) to this process: kept for the topic's reserves, each
    /// waking one waiter of the topic.
    pub fn handed(&self, jobs: Vec<Reservation>) {
        let Some(topic) = jobs.first().map(|j| j.topic.clone()) else {
            return;
        };
        let now = Instant::now();
        let n = jobs.len();
        let line = {
            let mut t = self.lock();
            let entry = t.by_topic.entry(topic).or_default();
            entry.handed.told.handed = entry.handed.told.handed.saturating_add(n as u32);
            entry.handed.jobs.extend(jobs.into_iter().map(|j| (now, j)));
            self.held.fetch_add(n, Ordering::Relaxed);
            entry.waiters.clone()
        };
        for _ in 0..n {
            line.notify_one();
        }
    }

    /// Takes up to `count` handed jobs of `topics`, highest priority first.
    pub fn take_handed(&self, topics: &[String], count: usize) -> Vec<Reservation> {
        // A job handed while this reads 0 wakes a waiter, whose reserve finds it.
        if self.held.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut t = self.lock();
        let mut out = Vec::new();
        for topic in topics {
            let Some(entry) = t.by_topic.get_mut(topic) else {
                continue;
            };
            while out.len() < count {
                match entry.handed.jobs.pop_front() {
                    Some((_, job)) => out.push(job),
                    None => break,
                }
            }
            if out.len() >= count {
                break;
            }
        }
        if !out.is_empty() {
            self.held.fetch_sub(out.len(), Ordering::Relaxed);
            metrics::counter!("dq_long_polls_handed_total").increment(out.len() as u64);
        }
        out
    }

    /// The topics whose timers must be told now how many jobs this process's long polls wait for, with
    /// that number; each is then counted as told.
    pub fn to_tell(&self) -> Vec<(String, u32)> {
        let now = Instant::now();
        let mut t = self.lock();
        let mut out = Vec::new();
        for (topic, entry) in t.by_topic.iter_mut() {
            let h = &mut entry.handed;
            if let Some(slots) = h.told.due(h.waiting.load(Ordering::Relaxed), now) {
                h.told = Told {
                    slots,
                    at: Some(now),
                    handed: 0,
                };
                out.push((topic.clone(), slots));
            }
        }
        out
    }

    /// Takes the handed jobs that waited [`HANDED_HOLD`] or longer, to be handed back; with `all`, every
    /// one (the process stops).
    pub fn stale_handed(&self, all: bool) -> Vec<Reservation> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let now = Instant::now();
        let mut t = self.lock();
        let mut out = Vec::new();
        for entry in t.by_topic.values_mut() {
            let jobs = &mut entry.handed.jobs;
            while jobs
                .front()
                .is_some_and(|(at, _)| all || now.duration_since(*at) >= HANDED_HOLD)
            {
                out.extend(jobs.pop_front().map(|(_, j)| j));
            }
        }
        self.held.fetch_sub(out.len(), Ordering::Relaxed);
        out
    }

    /// The topics whose timers believe long polls of this process wait, each then counted as told 0:
    /// the process stops serving hand-offs, and the caller tells the timers so.
    pub fn untell_all(&self) -> Vec<String> {
        let mut t = self.lock();
        t.by_topic
            .iter_mut()
            .filter(|(_, e)| e.handed.told.slots > 0)
            .map(|(topic, e)| {
                e.handed.told = Told::default();
                topic.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timers_are_told_of_new_polls_at_once_and_of_changes_after_a_gap() {
        let t0 = Instant::now();
        assert_eq!(Told::default().due(0, t0), None, "nobody waits: nothing to say");
        assert_eq!(Told::default().due(3, t0), Some(3), "first waiters: at once");
        let told = Told {
            slots: 3,
            at: Some(t0),
            handed: 0,
        };
        assert_eq!(told.due(5, t0 + Duration::from_millis(2)), None, "within the gap");
        assert_eq!(told.due(5, t0 + TELL_GAP), Some(5), "more waiters than believed");
        assert_eq!(told.due(3, t0 + TELL_GAP), None, "as believed");
        let handed = Told { handed: 2, ..told };
        assert_eq!(handed.due(3, t0 + TELL_GAP), Some(3), "the timers believe 1");
        assert_eq!(told.due(3, t0 + TELL_EVERY), Some(3), "told again every second");
        assert_eq!(told.due(0, t0 + TELL_GAP), Some(0), "nobody waits any more: told 0");
        let zero = Told {
            slots: 0,
            at: Some(t0),
            handed: 0,
        };
        assert_eq!(zero.due(0, t0 + TELL_EVERY * 5), None, "0 is told once");
    }
}
