//! The reservations one connection holds, by job number, and the soonest of their ends.
//!
//! Every `reserve` asks for the soonest end (for `DEADLINE_SOON` and for how long it may wait), and a
//! pipelining client reserves a hundred jobs before it deletes any: a scan of every reservation per
//! reserve made those hundred cost ten thousand steps (4% of dq-server's CPU in a pipelined reserve +
//! delete). So the ends are also kept in a heap, and a reservation that was deleted, released or
//! touched leaves its old entry there until the entry comes to the top (or the heap is rebuilt, once
//! stale entries outnumber live ones).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use tokio::time::Instant;

/// A job this connection reserved.
#[derive(Debug)]
pub struct Held {
    /// The job's dq id.
    pub id: String,
    /// The topic its tube maps to.
    pub topic: String,
    /// The reservation's receipt, which fences the ack, release or touch.
    pub receipt: String,
    /// When the reservation ends, on this server's clock.
    pub deadline: Instant,
}

/// A connection's reservations that have not ended.
#[derive(Debug, Default)]
pub struct HeldJobs {
    jobs: HashMap<u64, Held>,
    /// (end, number) of every reservation, and of some that were deleted or whose end moved since.
    ends: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl HeldJobs {
    /// Keeps reservation `n`.
    pub fn insert(&mut self, n: u64, held: Held) {
        self.ends.push(Reverse((held.deadline, n)));
        self.jobs.insert(n, held);
        self.compact();
    }

    /// Reservation `n`, if it has not ended (one that has is forgotten: dq-timer hands its job out again).
    pub fn get(&mut self, n: u64) -> Option<&Held> {
        if self.jobs.get(&n).is_some_and(|h| h.deadline <= Instant::now()) {
            self.jobs.remove(&n);
        }
        self.jobs.get(&n)
    }

    /// Takes reservation `n` out, if it has not ended.
    pub fn remove(&mut self, n: u64) -> Option<Held> {
        self.jobs.remove(&n).filter(|h| h.deadline > Instant::now())
    }

    /// Moves reservation `n`'s end (a `touch`).
    pub fn set_deadline(&mut self, n: u64, deadline: Instant) {
        if let Some(h) = self.jobs.get_mut(&n) {
            h.deadline = deadline;
            self.ends.push(Reverse((deadline, n)));
            self.compact();
        }
    }

    /// When the soonest reservation ends, if one has not ended; the ended ones are forgotten.
    pub fn soonest(&mut self) -> Option<Instant> {
        let now = Instant::now();
        while let Some(&Reverse((end, n))) = self.ends.peek() {
            match self.jobs.get(&n) {
                Some(h) if h.deadline == end => {
                    if end > now {
                        return Some(end);
                    }
                    self.jobs.remove(&n);
                }
                // Deleted, released, or touched since: the entry is stale.
                _ => {}
            }
            self.ends.pop();
        }
        None
    }

    /// Every reservation still kept (the connection ends).
    pub fn drain(&mut self) -> impl Iterator<Item = Held> + '_ {
        self.ends.clear();
        self.jobs.drain().map(|(_, h)| h)
    }

    /// Rebuilds the heap from the live reservations once stale entries outnumber them.
    fn compact(&mut self) {
        if self.ends.len() > 2 * self.jobs.len() + 64 {
            self.ends = self.jobs.iter().map(|(&n, h)| Reverse((h.deadline, n))).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn held(deadline: Instant) -> Held {
        Held {
            id: "1".into(),
            topic: "t".into(),
            receipt: "r".into(),
            deadline,
        }
    }

    #[test]
    fn the_soonest_end_skips_deleted_touched_and_ended_reservations() {
        let now = Instant::now();
        let mut jobs = HeldJobs::default();
        jobs.insert(1, held(now + Duration::from_secs(10)));
        jobs.insert(2, held(now + Duration::from_secs(20)));
        jobs.insert(3, held(now + Duration::from_secs(30)));
        jobs.insert(4, held(now - Duration::from_secs(1)));
        assert_eq!(jobs.soonest(), Some(now + Duration::from_secs(10)));
        // The ended one is forgotten.
        assert!(jobs.get(4).is_none());
        assert!(jobs.remove(1).is_some());
        assert_eq!(jobs.soonest(), Some(now + Duration::from_secs(20)));
        jobs.set_deadline(2, now + Duration::from_secs(40));
        assert_eq!(jobs.soonest(), Some(now + Duration::from_secs(30)));
        assert!(jobs.remove(3).is_some());
        assert_eq!(jobs.soonest(), Some(now + Duration::from_secs(40)));
        assert_eq!(jobs.drain().count(), 1);
        assert_eq!(jobs.soonest(), None);
    }

    #[test]
    fn stale_ends_do_not_pile_up() {
        let now = Instant::now();
        let mut jobs = HeldJobs::default();
        for n in 0..10_000 {
            jobs.insert(n, held(now + Duration::from_secs(60)));
            jobs.remove(n);
        }
        assert!(jobs.ends.len() <= 64 + 1, "{} entries kept", jobs.ends.len());
        assert_eq!(jobs.soonest(), None);
    }
}
