//! The dq-consumer workers that wait for jobs, as this timer heard of them: promotion hands their
//! topics' due jobs straight to them (see `dq_core::reservations::handoff`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dq_core::reservations::Waiting;
use dq_core::reservations::handoff::WAITING_FOR_MS;

/// Most waiting workers passed to one promotion call (the ones heard from last first): the call's
/// arguments stay small whatever the number of consumers and topics.
const MOST_PER_CALL: usize = 64;

/// Waiting workers by (topic, consumer).
#[derive(Debug, Default)]
pub struct WaitingWorkers {
    workers: HashMap<(String, String), (Waiting, Instant)>,
}

impl WaitingWorkers {
    /// Notes a worker's message: it waits with these slots, or (0 slots) no longer waits.
    pub fn heard(&mut self, w: Waiting) {
        let key = (w.topic.clone(), w.consumer.clone());
        if w.slots == 0 {
            self.workers.remove(&key);
        } else {
            self.workers.insert(key, (w, Instant::now()));
        }
    }

    /// Forgets every worker (the subscription was lost: they say it again within a second).
    pub fn clear(&mut self) {
        self.workers.clear();
    }

    /// The workers to pass to a promotion call: those heard from within [`WAITING_FOR_MS`] that have
    /// slots left.
    pub fn current(&mut self) -> Vec<Waiting> {
        self.current_at(Instant::now())
    }

    fn current_at(&mut self, now: Instant) -> Vec<Waiting> {
        let fresh = Duration::from_millis(WAITING_FOR_MS);
        self.workers
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < fresh);
        let mut live: Vec<&(Waiting, Instant)> = self.workers.values().filter(|(w, _)| w.slots > 0).collect();
        live.sort_by_key(|(_, at)| std::cmp::Reverse(*at));
        live.into_iter().take(MOST_PER_CALL).map(|(w, _)| w.clone()).collect()
    }

    /// Takes the jobs a promotion handed to `given[i]` (`handed[i]`) off their slots, so the next call
    /// does not send them more than they said they take.
    pub fn handed(&mut self, given: &[Waiting], handed: &[u32]) {
        for (w, n) in given.iter().zip(handed) {
            if let Some((known, _)) = self.workers.get_mut(&(w.topic.clone(), w.consumer.clone())) {
                known.slots = known.slots.saturating_sub(*n);
            }
        }
    }
}

/// How long promotion hands nothing off after Redis refused a hand-off.
const REFUSED_FOR: Duration = Duration::from_secs(60);

/// Whether hand-offs are off for now: a promotion call with waiting workers failed where the same call
/// without them succeeded (an ACL user whose channel rules do not allow `<prefix>:{*}:wake:to:*`: the
/// script's publish is refused, and the whole call with it). Promotion then goes on without hand-offs,
/// and tries them again after [`REFUSED_FOR`].
#[derive(Debug, Default)]
pub struct HandoffsRefused {
    until: std::sync::Mutex<Option<Instant>>,
}

impl HandoffsRefused {
    /// Turns hand-offs off for [`REFUSED_FOR`], saying why once.
    pub fn refuse(&self, cause: &dq_core::Error) {
        let mut until = self.until.lock().expect("never poisoned");
        if until.is_none_or(|u| u <= Instant::now()) {
            tracing::warn!(%cause, retry_s = REFUSED_FOR.as_secs(), "Redis refused a hand-off to a waiting dq-consumer; promoting to the ready queues without hand-offs for now (does the ACL user allow the channels <prefix>:{{*}}:wake:to:*?)");
        }
        *until = Some(Instant::now() + REFUSED_FOR);
    }

    /// Whether hand-offs are off now.
    pub fn now(&self) -> bool {
        self.until
            .lock()
            .expect("never poisoned")
            .is_some_and(|u| u > Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(topic: &str, consumer: &str, slots: u32) -> Waiting {
        Waiting {
            topic: topic.into(),
            consumer: consumer.into(),
            slots,
            least_ttr_ms: 15000,
        }
    }

    #[test]
    fn slots_go_down_as_jobs_are_handed_and_zero_means_gone() {
        let mut ws = WaitingWorkers::default();
        ws.heard(w("t", "a", 2));
        ws.heard(w("u", "a", 5));
        let given = ws.current();
        assert_eq!(given.len(), 2);
        let handed: Vec<u32> = given.iter().map(|g| if g.topic == "t" { 2 } else { 1 }).collect();
        ws.handed(&given, &handed);
        let now = ws.current();
        assert_eq!(now, vec![w("u", "a", 4)], "t has no slot left");
        ws.heard(w("u", "a", 0));
        assert!(ws.current().is_empty());
        ws.heard(w("t", "b", 3));
        ws.clear();
        assert!(ws.current().is_empty());
    }

    #[test]
    fn a_worker_not_heard_from_is_forgotten() {
        let mut ws = WaitingWorkers::default();
        ws.heard(w("t", "a", 2));
        let heard = Instant::now();
        assert_eq!(
            ws.current_at(heard + Duration::from_millis(WAITING_FOR_MS - 100)).len(),
            1
        );
        assert!(
            ws.current_at(heard + Duration::from_millis(WAITING_FOR_MS + 100))
                .is_empty()
        );
    }
}
