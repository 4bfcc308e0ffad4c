//! Redis's clock as seen from here. Due times are Redis's (invariant 2), but a timer sleeps on its own
//! clock, so it keeps the offset between the two from the `now` every script returns.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Offset of Redis's clock from ours.
///
/// Every sample is low: Redis floors its time to the ms and the answer takes a while to arrive. So the
/// estimate is the highest sample of the last few seconds (which tracks drift between machines), not the
/// last one; otherwise the timer would sleep up to a millisecond past each due time.
#[derive(Debug, Clone, Copy)]
pub struct RedisClock {
    /// Redis's Unix ms minus ours: the highest sample since `since`.
    offset_ms: i64,
    /// When the current window of samples began.
    since: Instant,
}

impl Default for RedisClock {
    fn default() -> Self {
        RedisClock {
            offset_ms: i64::MIN,
            since: Instant::now(),
        }
    }
}

/// How long a high sample is trusted before the window starts over.
const WINDOW: Duration = Duration::from_secs(5);

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl RedisClock {
    /// Notes Redis's time as a script just reported it.
    pub fn observe(&mut self, redis_now_ms: i64) {
        let sample = redis_now_ms - local_ms();
        if sample > self.offset_ms || self.since.elapsed() > WINDOW {
            self.offset_ms = sample;
            self.since = Instant::now();
        }
    }

    /// Redis's time now, estimated (our own clock until the first observation).
    pub fn now(&self) -> i64 {
        local_ms() + if self.offset_ms == i64::MIN { 0 } else { self.offset_ms }
    }

    /// The local instant at which Redis's clock reads `due_ms`.
    pub fn instant_of(&self, due_ms: i64) -> Instant {
        let wait = (due_ms - self.now()).max(0) as u64;
        Instant::now() + Duration::from_millis(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_observed_offset() {
        let mut c = RedisClock::default();
        c.observe(local_ms() + 10_000);
        assert!((c.now() - local_ms() - 10_000).abs() < 50);
        let at = c.instant_of(c.now() + 1000);
        let wait = at - Instant::now();
        assert!(
            wait <= Duration::from_millis(1000) && wait >= Duration::from_millis(900),
            "{wait:?}"
        );
        assert!(c.instant_of(0) <= Instant::now(), "past due times are now");
    }

    #[test]
    fn keeps_the_highest_recent_sample() {
        let mut c = RedisClock::default();
        assert!((c.now() - local_ms()).abs() < 50, "no sample yet: our own clock");
        c.observe(local_ms() + 100);
        c.observe(local_ms() + 90);
        assert!(
            (c.now() - local_ms() - 100).abs() < 5,
            "a lower sample does not pull it back"
        );
    }
}
