//! Where ready jobs are: the counts of a partition's ready jobs per topic, which the ready index syncs
//! from; and the ready queue's order, its score (the Lua side is `rec_score` in record.lua).

use super::Store;
use crate::error::Result;

/// 2⁴²: a ready score's due time is below it (Unix ms until the year 2109).
const DUE_SPAN: f64 = 4_398_046_511_104.0;

/// The score of a job of `priority` due at `at_ms` in its ready queue: priority first, then due time
/// (exact to the ms for priorities up to 2047; see `rec_score`).
pub(crate) fn ready_score(priority: u32, at_ms: i64) -> f64 {
    priority as f64 * DUE_SPAN + at_ms as f64
}

/// The lowest score a job of `priority` can have: jobs scored below it are more urgent.
pub(crate) fn priority_floor(priority: u32) -> f64 {
    priority as f64 * DUE_SPAN
}

/// The due time (Unix ms) in a ready score. `None` for the score an earlier release gave a beanstalkd
/// job (its bare priority, below 2³²: no due time in it).
pub(crate) fn due_of_score(score: f64) -> Option<i64> {
    let due = score.rem_euclid(DUE_SPAN);
    (score >= DUE_SPAN || due >= 4_294_967_296.0).then_some(due as i64)
}

impl Store {
    /// The ready jobs of each of `topics` in partition `p`, as its counts hash says, in the order of
    /// `topics` (0 for a topic it has no count of).
    pub(crate) async fn ready_counts(&self, p: u16, topics: &[String]) -> Result<Vec<i64>> {
        let fields: Vec<String> = topics.iter().map(|t| format!("{t}:ready")).collect();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.partition_keys(p).counts()).arg(&fields);
        let counts: Vec<Option<i64>> = self.query(p, &cmd).await?;
        Ok(counts.into_iter().map(|n| n.unwrap_or(0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_order_by_priority_then_due_time() {
        let now = 1_764_000_000_000;
        assert!(ready_score(0, now + 60_000) < ready_score(1, now));
        assert!(ready_score(1024, now) < ready_score(1024, now + 1));
        assert!(ready_score(2047, now) < ready_score(2047, now + 1));
        assert!(ready_score(u32::MAX - 1, now + 10_000_000) < ready_score(u32::MAX, 0));
        assert!(ready_score(1023, now) < priority_floor(1024));
        assert!(priority_floor(1024) <= ready_score(1024, 0));
    }

    #[test]
    fn the_due_time_comes_back_out() {
        let now = 1_764_000_000_123;
        for p in [0, 1, 1024, 2047] {
            assert_eq!(due_of_score(ready_score(p, now)), Some(now));
        }
        // A score from before priorities: the due time alone.
        assert_eq!(due_of_score(now as f64), Some(now));
        // An earlier release's beanstalkd score: a bare priority.
        assert_eq!(due_of_score(1024.0), None);
    }
}
