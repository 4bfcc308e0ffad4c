//! When a waiting worker tells the timers again that it waits (see `dq_core::reservations::handoff`).

use std::time::Duration;

use tokio::time::Instant;

/// How often a waiting worker tells the timers again that it waits (they forget it after
/// `dq_core::reservations::handoff::WAITING_FOR_MS`).
const WAITING_EVERY: Duration = Duration::from_secs(1);

/// The least time between two such messages of a worker, which it sends sooner than [`WAITING_EVERY`]
/// once the timers handed it half the slots it told them of.
const WAITING_GAP: Duration = Duration::from_millis(10);

/// When a waiting worker tells the timers again. A timer takes every job it hands off the slots it was
/// told of, so a worker whose jobs end quickly tells again once half of them were handed (at most every
/// [`WAITING_GAP`]), and otherwise every [`WAITING_EVERY`]: the messages follow the flow of jobs, not
/// the number of times the worker goes idle.
#[derive(Debug, Default)]
pub(super) struct Telling {
    /// The slots last told.
    pub(super) told: u32,
    /// When.
    pub(super) at: Option<Instant>,
    /// Jobs handed to the worker since.
    pub(super) handed: u32,
}

impl Telling {
    /// When to tell next; `None`: now (never told).
    pub(super) fn next_at(&self) -> Option<Instant> {
        let at = self.at?;
        Some(if self.told > 0 && self.handed * 2 >= self.told {
            at + WAITING_GAP
        } else {
            at + WAITING_EVERY
        })
    }

    pub(super) fn told(&mut self, slots: u32) {
        *self = Telling {
            told: slots,
            at: Some(Instant::now()),
            handed: 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_worker_tells_again_soon_once_half_its_slots_were_handed() {
        let mut t = Telling::default();
        assert_eq!(t.next_at(), None, "never told: at once");
        t.told(64);
        let at = t.at.unwrap();
        t.handed = 31;
        assert_eq!(t.next_at(), Some(at + WAITING_EVERY));
        t.handed = 32;
        assert_eq!(t.next_at(), Some(at + WAITING_GAP));
        t.told(0);
        assert_eq!(t.next_at(), Some(t.at.unwrap() + WAITING_EVERY), "no slots: no hurry");
    }
}
