//! Waiting in line for ready jobs ([`Waiter`]) and asking a partition on the line's behalf ([`Claim`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use super::ReadyIndex;

/// A long poll's place in line for each of its topics (see [`ReadyIndex::waiter`]).
///
/// Dropped without having waited, a place that a wake-up reached hands it to the next waiter, so a
/// long poll that found jobs (or went away) never swallows a wake-up meant for work still ready.
pub struct Waiter {
    /// One per topic, each enabled: already in line.
    places: Vec<Pin<Box<OwnedNotified>>>,
    /// Per topic, the jobs its waiting long polls want (see [`super::handed`]).
    waiting: Vec<Arc<AtomicU32>>,
    /// What this one wants while it waits.
    slots: u32,
}

impl Waiter {
    /// In line on each of `lines` from now on; wanting `slots` jobs of each while it waits.
    pub(super) fn new(lines: Vec<(Arc<Notify>, Arc<AtomicU32>)>, slots: u32) -> Self {
        let (places, waiting) = lines
            .into_iter()
            .map(|(line, waiting)| {
                let mut place = Box::pin(line.notified_owned());
                place.as_mut().enable();
                (place, waiting)
            })
            .unzip();
        Waiter { places, waiting, slots }
    }

    /// Waits until one of the topics may have become ready (or a timer handed this process a job of
    /// one), counted meanwhile among the topics' waiting long polls. Never returns for no topics.
    pub async fn wait(&mut self) {
        if self.places.is_empty() {
            return std::future::pending().await;
        }
        let _counted = Counted::new(&self.waiting, self.slots);
        let places = self.places.iter_mut().map(|p| p.as_mut());
        futures_util::future::select_all(places).await;
    }

    /// Whether a wake-up reached it, without waiting (for tests).
    #[cfg(test)]
    pub(super) fn woken(&mut self) -> bool {
        use std::future::Future;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        self.places.iter_mut().any(|p| p.as_mut().poll(&mut cx).is_ready())
    }
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").field("topics", &self.places.len()).finish()
    }
}

/// A waiter's slots added to its topics' waiting counts, until dropped (the wait ended, or was
/// cancelled).
struct Counted<'a> {
    waiting: &'a [Arc<AtomicU32>],
    slots: u32,
}

impl<'a> Counted<'a> {
    fn new(waiting: &'a [Arc<AtomicU32>], slots: u32) -> Self {
        for w in waiting {
            w.fetch_add(slots, Ordering::Relaxed);
        }
        Counted { waiting, slots }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        for w in self.waiting {
            w.fetch_sub(self.slots, Ordering::Relaxed);
        }
    }
}

/// How a reserve's ask of one partition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tried {
    /// It got fewer jobs than it asked for: the partition's queues of its topics are empty now.
    Emptied,
    /// It got all it asked for: the partition may hold more.
    Full,
    /// The partition did not answer.
    Failed,
}

/// A reserve's claim on a partition it is asking (see [`ReadyIndex::claim`]). Settled with what the ask
/// found; when the partition is still listed after that (it may hold more, or a wake-up marked it
/// meanwhile), the next waiter of its topics is woken, since the wake-ups for it may have gone to
/// waiters that left it to this claim. A failed ask wakes nobody: the next waiter would fail the same
/// way. Dropped unsettled (the reserve was cancelled), the same as [`Tried::Full`]: nothing is known.
#[derive(Debug)]
pub struct Claim<'a> {
    /// The index it is a claim in.
    index: &'a ReadyIndex,
    /// The topics the reserve asks for.
    topics: &'a [String],
    /// The partition it asks.
    partition: u16,
    /// The index's epoch when the claim was taken: marks after it survive an [`Tried::Emptied`].
    epoch: u64,
    /// Settled already: nothing left to do on drop.
    settled: bool,
}

impl<'a> Claim<'a> {
    pub(super) fn new(index: &'a ReadyIndex, topics: &'a [String], partition: u16, epoch: u64) -> Self {
        Claim {
            index,
            topics,
            partition,
            epoch,
            settled: false,
        }
    }

    /// Ends the claim with what the ask found.
    pub fn settle(mut self, tried: Tried) {
        self.settled = true;
        self.index.settle(self.topics, self.partition, self.epoch, tried);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.index.settle(self.topics, self.partition, self.epoch, Tried::Full);
        }
    }
}
