//! Dead jobs within bounds: `jobs.dead_retention_ms` (how long a dead job is kept) and
//! `jobs.dead_max_per_topic` (how many a topic keeps; the oldest deaths go first). Enforced by the
//! dq-checker that holds the lease, so dead lists stop growing with every failure ever seen. Every job
//! dropped is counted in `dq_dead_jobs_dropped_total{topic, reason}`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dq_core::Queue;
use dq_core::admin::Stats;
use dq_core::config::JobDefaults;

/// Dead jobs one trimming step drops at most per topic, so a topic far over its cap (say, a lower cap
/// on a long list) is brought down over some rounds without one round taking long.
const STEP: usize = 1000;

/// Steps a topic gets per round.
const STEPS: usize = 20;

/// When retention last ran, so it runs about once a minute (or ten times per retention period, when
/// that is shorter), not every round: each run is one script call per partition and topic with dead jobs.
#[derive(Debug, Default)]
pub struct Retention {
    last: Option<Instant>,
}

impl Retention {
    /// One round: drops the dead jobs past their retention (when due) and those over each topic's cap.
    /// `stats` are this round's counts. Failures are logged and left to the next round.
    pub async fn round(&mut self, queue: &Queue, stats: &Stats, jobs: &JobDefaults, interval: Duration) {
        if jobs.dead_retention_ms > 0 {
            let every = Duration::from_millis(jobs.dead_retention_ms / 10).clamp(interval, Duration::from_secs(60));
            if self.last.is_none_or(|l| l.elapsed() >= every) {
                self.last = Some(Instant::now());
                expire(queue, stats, jobs.dead_retention_ms).await;
                // The counts read before are stale now: the cap waits for the next round's.
                return;
            }
        }
        if jobs.dead_max_per_topic > 0 {
            cap(queue, stats, jobs.dead_max_per_topic).await;
        }
    }
}

/// Drops the dead jobs that died more than `retention_ms` ago, in every partition that has some.
async fn expire(queue: &Queue, stats: &Stats, retention_ms: u64) {
    for (p, topic, _) in &stats.dead {
        match queue.checker().delete_dead_older(*p, topic, retention_ms).await {
            Ok(0) => {}
            Ok(n) => {
                dropped(topic, "retention", n);
                tracing::info!(
                    topic,
                    partition = p,
                    jobs = n,
                    "dropped dead jobs past jobs.dead_retention_ms"
                );
            }
            Err(e) => {
                tracing::warn!(topic, partition = p, cause = %e.chain(), "cannot drop dead jobs past their retention")
            }
        }
    }
}

/// Drops the oldest deaths of every topic with more than `max` dead jobs.
async fn cap(queue: &Queue, stats: &Stats, max: u64) {
    let mut by_topic: HashMap<&str, Vec<(u16, u64)>> = HashMap::new();
    for (p, topic, n) in &stats.dead {
        by_topic.entry(topic).or_default().push((*p, *n));
    }
    for (topic, mut parts) in by_topic {
        let mut total: u64 = parts.iter().map(|(_, n)| n).sum();
        let mut steps = 0;
        while total > max && steps < STEPS {
            steps += 1;
            let want = ((total - max) as usize).min(STEP);
            match step(queue, topic, &parts, total, want).await {
                Ok((0, _)) => break,
                Ok((n, taken)) => {
                    dropped(topic, "cap", n);
                    tracing::info!(
                        topic,
                        jobs = n,
                        cap = max,
                        "dropped the oldest dead jobs over jobs.dead_max_per_topic"
                    );
                    total -= taken.values().sum::<u64>().min(total);
                    for (p, left) in &mut parts {
                        *left -= taken.get(p).copied().unwrap_or(0).min(*left);
                    }
                }
                Err(e) => {
                    tracing::warn!(topic, cause = %e.chain(), "cannot drop dead jobs over the cap");
                    break;
                }
            }
        }
    }
}

/// Deletes up to `want` of the topic's oldest deaths over all partitions. Reads from each partition
/// about its share of `want` (plus one), and deletes only what is certainly among the oldest: deaths no
/// later than the earliest last-read death of a partition that may hold more. Returns the jobs deleted
/// and the ids taken per partition.
async fn step(
    queue: &Queue,
    topic: &str,
    parts: &[(u16, u64)],
    total: u64,
    want: usize,
) -> dq_core::Result<(u64, HashMap<u16, u64>)> {
    let reads = parts.iter().filter(|(_, n)| *n > 0).map(|&(p, n)| async move {
        let share = ((want as u64 * n).div_ceil(total.max(1)) + 1).min(n) as usize;
        (p, share, n as usize, queue.checker().oldest_dead(p, topic, share).await)
    });
    let mut heads = Vec::new();
    for (p, share, n, read) in futures_util::future::join_all(reads).await {
        // A partition that does not answer is left for a later round.
        if let Ok(page) = read {
            heads.push(Head {
                partition: p,
                more: share < n && page.len() == share,
                page,
            });
        }
    }
    let ids = oldest(heads, want);
    let mut taken: HashMap<u16, u64> = HashMap::new();
    for (p, _) in &ids {
        *taken.entry(*p).or_default() += 1;
    }
    let ids: Vec<String> = ids.into_iter().map(|(_, id)| id).collect();
    let n = queue.admin().delete_dead(topic, Some(&ids)).await?;
    Ok((n, taken))
}

/// What one partition's dead list showed: its oldest deaths, and whether it may hold more.
#[derive(Debug)]
struct Head {
    partition: u16,
    more: bool,
    /// (time of death, id), oldest first.
    page: Vec<(f64, String)>,
}

/// Up to `want` of the oldest deaths in `heads`, as (partition, id): only deaths no later than the
/// bound below which every partition's deaths were all read.
fn oldest(heads: Vec<Head>, want: usize) -> Vec<(u16, String)> {
    let bound = heads
        .iter()
        .filter(|h| h.more)
        .filter_map(|h| h.page.last().map(|(at, _)| *at))
        .fold(f64::INFINITY, f64::min);
    let mut all: Vec<(f64, u16, String)> = heads
        .into_iter()
        .flat_map(|h| h.page.into_iter().map(move |(at, id)| (at, h.partition, id)))
        .filter(|(at, _, _)| *at <= bound)
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
    all.into_iter().take(want).map(|(_, p, id)| (p, id)).collect()
}

fn dropped(topic: &str, reason: &'static str, n: u64) {
    metrics::counter!("dq_dead_jobs_dropped_total", "topic" => topic.to_string(), "reason" => reason).increment(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(partition: u16, more: bool, deaths: &[(f64, &str)]) -> Head {
        Head {
            partition,
            more,
            page: deaths.iter().map(|(at, id)| (*at, id.to_string())).collect(),
        }
    }

    #[test]
    fn takes_the_oldest_over_partitions() {
        let heads = vec![
            head(0, false, &[(1.0, "a"), (5.0, "b")]),
            head(1, false, &[(2.0, "c"), (3.0, "d")]),
        ];
        assert_eq!(oldest(heads, 3), [(0, "a".into()), (1, "c".into()), (1, "d".into())]);
    }

    #[test]
    fn never_takes_past_what_a_partition_with_more_may_hold() {
        // Partition 1 showed deaths up to 2.0 and may hold more after: its next could be 2.5, older
        // than partition 0's 3.0, so only deaths up to 2.0 are certain.
        let heads = vec![
            head(0, false, &[(1.0, "a"), (3.0, "b"), (4.0, "e")]),
            head(1, true, &[(1.5, "c"), (2.0, "d")]),
        ];
        assert_eq!(oldest(heads, 4), [(0, "a".into()), (1, "c".into()), (1, "d".into())]);
    }

    #[test]
    fn nothing_when_nothing_shown() {
        assert!(oldest(vec![head(3, false, &[])], 10).is_empty());
    }
}
