//! Activity counts for the admin dashboard: jobs pushed, delivered, failed and dead per minute, and the
//! lateness of first deliveries as a histogram.
//!
//! Redis CPU per job is a watched figure, so nothing here costs Redis anything per job: each process
//! counts in memory ([`Activity`], held by its [`crate::Queue`]) and a background task adds what it
//! counted to one hash per minute every [`FLUSH_EVERY`], in one script call (`activity_add.lua`)
//! whatever the number of jobs. The dashboard reads the hashes back ([`crate::Queue::activity`]).
//!
//! Minutes are those of each process's own clock (Unix time / 60 s), not Redis's: asking Redis the
//! time per count would be the call per job this avoids, and minute buckets need only clocks kept by
//! NTP. For the same reason the lateness of a delivery is this machine's clock minus the job's due
//! time (which is Redis's), as `dq_delivery_lateness_seconds` is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// How often a process adds what it counted to Redis.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// How long a minute's hash lives after its last flush: the dashboard shows at most 24 hours, with two
/// more for a clock that runs behind.
pub const KEEP_SECS: u64 = 26 * 3600;

/// The most minutes a process keeps counts for while Redis does not take them; older ones are
/// dropped (their hash would have expired anyway).
const MAX_PENDING_MINUTES: usize = (KEEP_SECS / 60) as usize;

/// Upper bounds (inclusive, ms) of the lateness buckets: 1, 2, 3, 5 and 7 per decade from 1 ms to
/// 7,000 s (log-spaced, each about 1.5 times the last, with round numbers a reader can take in),
/// then 10,000 s and a day. A lateness above the last falls in an overflow bucket.
pub const LATENESS_BOUNDS_MS: [u64; 37] = [
    1, 2, 3, 5, 7, 10, 20, 30, 50, 70, 100, 200, 300, 500, 700, 1_000, 2_000, 3_000, 5_000, 7_000, 10_000, 20_000,
    30_000, 50_000, 70_000, 100_000, 200_000, 300_000, 500_000, 700_000, 1_000_000, 2_000_000, 3_000_000, 5_000_000,
    7_000_000, 10_000_000, 86_400_000,
];

/// Buckets: one per bound, then the overflow.
const BUCKETS: usize = LATENESS_BOUNDS_MS.len() + 1;

/// What one process counted in one minute and has not yet added to Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Jobs stored by a push (duplicates of a deduplication key left out).
    pushed: u64,
    /// Deliveries acked.
    delivered: u64,
    /// Deliveries nacked that will be retried.
    failed: u64,
    /// Jobs that went dead (nacked on their last attempt, or their last reservation expired).
    dead: u64,
    /// First deliveries by lateness bucket (index into [`LATENESS_BOUNDS_MS`], then the overflow).
    lateness: [u64; BUCKETS],
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            pushed: 0,
            delivered: 0,
            failed: 0,
            dead: 0,
            lateness: [0; BUCKETS],
        }
    }
}

impl Tally {
    /// Adds `other` into this one (a failed flush's counts back into the pending ones).
    fn merge(&mut self, other: &Tally) {
        self.pushed += other.pushed;
        self.delivered += other.delivered;
        self.failed += other.failed;
        self.dead += other.dead;
        for (a, b) in self.lateness.iter_mut().zip(other.lateness) {
            *a += b;
        }
    }

    /// The hash fields to raise and by how much (fields at 0 left out).
    fn fields(&self) -> Vec<(String, u64)> {
        let counts = [
            ("pushed", self.pushed),
            ("delivered", self.delivered),
            ("failed", self.failed),
            ("dead", self.dead),
        ];
        let mut out: Vec<(String, u64)> = counts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(f, n)| (f.to_string(), n))
            .collect();
        for (i, n) in self.lateness.iter().enumerate().filter(|(_, n)| **n > 0) {
            out.push((bucket_field(i), *n));
        }
        out
    }
}

/// The hash field of lateness bucket `i`: `late:<upper bound ms>`, or `late:inf` for the overflow.
fn bucket_field(i: usize) -> String {
    match LATENESS_BOUNDS_MS.get(i) {
        Some(b) => format!("late:{b}"),
        None => "late:inf".to_string(),
    }
}

/// The bucket a lateness of `ms` falls in.
fn bucket_of(ms: u64) -> usize {
    LATENESS_BOUNDS_MS.partition_point(|b| *b < ms)
}

/// One process's counts not yet in Redis, by minute. Recording takes a short lock and never calls
/// Redis.
#[derive(Debug, Default)]
pub struct Activity {
    /// Unix minute → what was counted in it.
    pending: Mutex<BTreeMap<i64, Tally>>,
}

/// Counts ready to be added to Redis: the minutes and the fields of each.
pub(crate) type Flush = Vec<(i64, Vec<(String, u64)>)>;

impl Activity {
    /// `n` jobs stored by pushes.
    pub fn pushed(&self, n: u64) {
        self.add(|t| t.pushed += n);
    }

    /// One delivery acked.
    pub fn delivered(&self) {
        self.add(|t| t.delivered += 1);
    }

    /// One delivery nacked that will be retried.
    pub fn failed(&self) {
        self.add(|t| t.failed += 1);
    }

    /// `n` jobs that went dead.
    pub fn dead(&self, n: u64) {
        self.add(|t| t.dead += n);
    }

    /// First deliveries (attempt 1) reserved together, each `lateness_ms` after its due time (negative
    /// counts as 0), all in the current minute.
    pub fn first_deliveries(&self, lateness_ms: impl IntoIterator<Item = i64>) {
        let mut late = lateness_ms.into_iter().peekable();
        if late.peek().is_none() {
            return;
        }
        self.add(|t| late.for_each(|ms| t.lateness[bucket_of(ms.max(0) as u64)] += 1));
    }

    fn add(&self, f: impl FnOnce(&mut Tally)) {
        // A poisoned lock (a panic while counting) only costs counts, never the job's operation.
        if let Ok(mut pending) = self.pending.lock() {
            f(pending.entry(crate::clock::unix_ms().div_euclid(60_000)).or_default());
        }
    }

    /// Takes every pending count, to be added to Redis; give them back with [`Activity::restore`] when
    /// that fails.
    pub(crate) fn take(&self) -> BTreeMap<i64, Tally> {
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }

    /// Puts counts that could not be added back in front of what was counted since, keeping only the
    /// newest [`MAX_PENDING_MINUTES`] minutes. Returns how many minutes were dropped.
    pub(crate) fn restore(&self, taken: BTreeMap<i64, Tally>) -> usize {
        let Ok(mut pending) = self.pending.lock() else {
            return 0;
        };
        for (minute, tally) in taken {
            pending.entry(minute).or_default().merge(&tally);
        }
        let mut dropped = 0;
        while pending.len() > MAX_PENDING_MINUTES {
            pending.pop_first();
            dropped += 1;
        }
        dropped
    }

    /// The fields to raise per minute in `taken`.
    pub(crate) fn fields(taken: &BTreeMap<i64, Tally>) -> Flush {
        taken.iter().map(|(m, t)| (*m, t.fields())).collect()
    }
}

/// The activity of one minute, summed over every process, as the dashboard shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MinuteActivity {
    /// Unix time in minutes (`minute * 60` is its first second, UTC).
    pub minute: i64,
    /// Jobs stored by pushes.
    pub pushed: u64,
    /// Deliveries acked.
    pub delivered: u64,
    /// Deliveries nacked that will be retried.
    pub failed: u64,
    /// Jobs that went dead.
    pub dead: u64,
    /// First deliveries counted in the lateness buckets.
    pub first_deliveries: u64,
    /// Median lateness of first deliveries, ms: the upper bound of the bucket the median falls in
    /// (so at most about 1.5 times the true value; a day for the overflow). `None` without deliveries.
    pub lateness_p50_ms: Option<u64>,
    /// 99th percentile of the same, read the same way.
    pub lateness_p99_ms: Option<u64>,
}

impl MinuteActivity {
    /// Reads a minute's hash (`fields` as HGETALL gives them; unknown or malformed fields are skipped,
    /// so buckets of another version of dq do not break the page).
    pub fn from_fields(minute: i64, fields: &HashMap<String, i64>) -> Self {
        let get = |f: &str| fields.get(f).copied().unwrap_or(0).max(0) as u64;
        let mut buckets = [0u64; BUCKETS];
        for (field, n) in fields {
            let Some(bound) = field.strip_prefix("late:") else {
                continue;
            };
            let i = match bound {
                "inf" => BUCKETS - 1,
                b => match b.parse::<u64>() {
                    Ok(b) => bucket_of(b),
                    Err(_) => continue,
                },
            };
            buckets[i] += (*n).max(0) as u64;
        }
        MinuteActivity {
            minute,
            pushed: get("pushed"),
            delivered: get("delivered"),
            failed: get("failed"),
            dead: get("dead"),
            first_deliveries: buckets.iter().sum(),
            lateness_p50_ms: percentile(&buckets, 50),
            lateness_p99_ms: percentile(&buckets, 99),
        }
    }
}

/// The `pct`-th percentile of the lateness `buckets`: the upper bound of the bucket that holds the
/// sample of rank ⌈pct/100 × total⌉ (the last bound for the overflow).
fn percentile(buckets: &[u64; BUCKETS], pct: u64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (total * pct).div_ceil(100).max(1);
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATENESS_BOUNDS_MS[i.min(LATENESS_BOUNDS_MS.len() - 1)]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lateness_falls_in_the_bucket_of_its_upper_bound() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(4), 3);
        assert_eq!(LATENESS_BOUNDS_MS[bucket_of(4)], 5);
        assert_eq!(LATENESS_BOUNDS_MS[bucket_of(250)], 300);
        assert_eq!(bucket_of(86_400_001), BUCKETS - 1);
        assert!(LATENESS_BOUNDS_MS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn percentiles_come_from_the_buckets() {
        let a = Activity::default();
        // 60 at 4 ms (bucket 5), 39 at 150 ms (bucket 200), 1 at 9 s (bucket 10 s).
        a.first_deliveries(std::iter::repeat_n(4, 60));
        a.first_deliveries(std::iter::repeat_n(150, 39).chain([9_000]));
        let taken = a.take();
        // Summed over minutes, should the clock have passed one.
        let mut fields: HashMap<String, i64> = HashMap::new();
        for (f, n) in Activity::fields(&taken).into_iter().flat_map(|(_, f)| f) {
            *fields.entry(f).or_default() += n as i64;
        }
        let m = MinuteActivity::from_fields(7, &fields);
        assert_eq!(m.first_deliveries, 100);
        assert_eq!(m.lateness_p50_ms, Some(5));
        assert_eq!(m.lateness_p99_ms, Some(200));
        fields.insert("late:inf".into(), 5);
        assert_eq!(
            MinuteActivity::from_fields(7, &fields).lateness_p99_ms,
            Some(86_400_000)
        );
        assert_eq!(MinuteActivity::from_fields(7, &HashMap::new()).lateness_p50_ms, None);
    }

    #[test]
    fn a_failed_flush_gives_its_counts_back() {
        let a = Activity::default();
        a.pushed(3);
        a.dead(1);
        let taken = a.take();
        assert!(a.take().is_empty());
        a.pushed(2);
        assert_eq!(a.restore(taken), 0);
        let back = a.take();
        let pushed: u64 = back.values().map(|t| t.pushed).sum();
        let dead: u64 = back.values().map(|t| t.dead).sum();
        assert_eq!((pushed, dead), (5, 1));
    }
}
