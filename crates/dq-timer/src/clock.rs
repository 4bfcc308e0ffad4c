//! Redis's clock as seen from here. Due times are Redis's (invariant 2), but a timer sleeps on its own
//! clock, so it keeps the offset between the two from the `now` every script returns.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Offset of Redis's clock from ours.
#[derive(Debug, Default, Clone, Copy)]
pub struct RedisClock {
    /// Redis's Unix ms minus ours, at the last observation.
    offset_ms: i64,
}

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl RedisClock {
    /// Notes Redis's time as a script just reported it.
    pub fn observe(&mut self, redis_now_ms: i64) {
        self.offset_ms = redis_now_ms - local_ms();
    }

    /// Redis's time now, estimated.
    pub fn now(&self) -> i64 {
        local_ms() + self.offset_ms
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
}
