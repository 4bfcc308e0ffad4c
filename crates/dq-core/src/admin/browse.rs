//! A page of one topic's jobs in one state, for people looking (the admin pages, `GET
//! /v1/topics/{topic}/jobs`).
//!
//! A topic's ready queue and dead list are its own sorted sets in each partition, so their pages are
//! exact: each partition gives its first `offset + limit` entries, merged by score (due time, or time
//! of death); a flow key's ready jobs are in its own queue, and each of a partition's keys with ready
//! jobs (up to [`FLOW_KEYS_EACH`], the busiest, with every key whose turn is in line) gives its first
//! `offset + limit`: with more keys than that in a partition, the page says it may not be `complete`. The delay set and the reserved set of a partition hold every topic's jobs, so a page of
//! one topic's delayed or reserved jobs is looked for: each partition gives its first [`SCAN_EACH`]
//! entries (or `offset + limit`, when more), merged by score (due time, or deadline), and their records
//! are read in that order, [`LOOK_CHUNK`] at a time, keeping the topic's, until the page is full or
//! [`LOOK_MAX`] records were read. Entries up to the lowest score at which some partition's read was
//! cut are in exact order; a page found entirely in that stretch is `complete`, and otherwise more of
//! the topic's jobs may come before or within it (the answer says so, and the admin shows it).

use super::Admin;
use super::dead::DeadPage;
use crate::error::Result;
use crate::job::{Job, State};
use crate::store::structures::{self, Structure};

/// Entries of a shared set each partition gives at least.
pub const SCAN_EACH: usize = 100;
/// Records read at once while looking for a topic's jobs.
const LOOK_CHUNK: usize = 500;
/// Most records read for one page of delayed or reserved jobs.
pub const LOOK_MAX: usize = 10_000;
/// Flow keys with ready jobs whose queues each partition gives for a page of ready jobs (the busiest).
pub const FLOW_KEYS_EACH: usize = 100;

/// What a partition gives: its first entries (score, id), whether it holds more, and the topic's count
/// in the state.
type Firsts = (Vec<(f64, String)>, bool, u64);

pub use dq_api::JobPage;

impl Admin {
    /// A page of `topic`'s jobs in `state` (`delayed`, `ready`, `reserved` or `dead`), from `offset`.
    pub async fn browse(&self, topic: &str, state: State, offset: usize, limit: usize) -> Result<JobPage> {
        match state {
            State::Dead => {
                let DeadPage { jobs, total } = self.dead(topic, offset, limit).await?;
                Ok(JobPage {
                    jobs,
                    total,
                    complete: true,
                })
            }
            State::Ready => self.browse_ready(topic, offset, limit).await,
            State::Delayed | State::Reserved => self.browse_shared(topic, state, offset, limit).await,
            State::Done => Ok(JobPage {
                jobs: Vec::new(),
                total: 0,
                complete: true,
            }),
        }
    }

    /// Reads `count` entries of `structure` from each partition with the topic's count of `state`: per
    /// partition, its entries (score, id), whether the set had more, and the count.
    async fn firsts(&self, structure: Structure<'_>, topic: &str, state: State, count: usize) -> Result<Vec<Firsts>> {
        let field = format!("{topic}:{}", state.as_str());
        let reads = self.partitions.all().map(|p| {
            let field = field.clone();
            async move {
                // Up to index `count`: one more than asked, to tell whether the set holds more.
                let (mut entries, n) =
                    structures::head_and_count(&self.store, p, structure, count as i64, &field).await?;
                let more = entries.len() > count;
                entries.truncate(count);
                let entries = entries.into_iter().map(|(id, score)| (score, id)).collect();
                Ok::<_, crate::error::Error>((entries, more, n.unwrap_or(0).max(0) as u64))
            }
        });
        futures_util::future::join_all(reads).await.into_iter().collect()
    }

    async fn browse_ready(&self, topic: &str, offset: usize, limit: usize) -> Result<JobPage> {
        let firsts = self
            .firsts(Structure::Ready(topic), topic, State::Ready, offset + limit)
            .await?;
        let total = firsts.iter().map(|f| f.2).sum();
        // A flow key's ready jobs are in its own queue: the keys with ready jobs (those with a turn in the
        // ready queue, and the busiest [`FLOW_KEYS_EACH`] of the partition, which hold those whose turn is
        // out) give their firsts in place of their turns. A partition with more keys than that may have
        // ready jobs the page does not see: it is then not `complete`.
        let mut parts = Vec::with_capacity(firsts.len());
        let mut complete = true;
        // Only the topic's key partitions can hold its flow keys.
        let keyed = self.partitions.of_topic_keys(topic);
        for (p, (entries, _, _)) in self.partitions.all().zip(firsts) {
            let (count, busiest) = match keyed.binary_search(&p) {
                Ok(_) => crate::flow::keys_with_ready(&self.store, p, topic, FLOW_KEYS_EACH).await?,
                Err(_) => (0, Vec::new()),
            };
            complete &= count <= FLOW_KEYS_EACH as u64;
            let mut keys: std::collections::BTreeSet<String> = busiest.into_iter().map(|(k, _)| k).collect();
            let mut part = Vec::with_capacity(entries.len());
            for (score, id) in entries {
                match id.strip_prefix('~') {
                    Some(key) => {
                        keys.insert(key.to_string());
                    }
                    None => part.push((score, id)),
                }
            }
            for key in &keys {
                let jobs =
                    structures::head(&self.store, p, Structure::Flow(topic, key), (offset + limit) as i64).await?;
                part.extend(jobs.into_iter().map(|(id, score)| (score, id)));
            }
            parts.push(part);
        }
        let merged = merge(parts.into_iter());
        let page: Vec<String> = merged.into_iter().skip(offset).take(limit).map(|(_, id)| id).collect();
        let jobs = self.get_many(&page).await?.into_iter().flatten().collect();
        Ok(JobPage { jobs, total, complete })
    }

    async fn browse_shared(&self, topic: &str, state: State, offset: usize, limit: usize) -> Result<JobPage> {
        let each = (offset + limit).max(SCAN_EACH);
        let shared = match state {
            State::Delayed => Structure::Delayed,
            _ => Structure::Reserved,
        };
        let firsts = self.firsts(shared, topic, state, each).await?;
        let total: u64 = firsts.iter().map(|f| f.2).sum();
        // Past the lowest last score of a partition that had more, an entry of that partition may be
        // missing from the merge.
        let exact_to = firsts
            .iter()
            .filter(|f| f.1)
            .filter_map(|f| f.0.last().map(|e| e.0))
            .fold(f64::INFINITY, f64::min);
        let merged = merge(firsts.into_iter().map(|f| f.0));
        let want = offset + limit;
        let mut found: Vec<Job> = Vec::new();
        let mut last_score = f64::NEG_INFINITY;
        let mut read = 0;
        for chunk in merged.chunks(LOOK_CHUNK) {
            if found.len() >= want || read >= LOOK_MAX {
                break;
            }
            let ids: Vec<String> = chunk.iter().map(|(_, id)| id.clone()).collect();
            read += ids.len();
            for ((score, _), job) in chunk.iter().zip(self.get_many(&ids).await?) {
                if let Some(job) = job.filter(|j| j.topic == topic && j.state == state) {
                    found.push(job);
                    last_score = *score;
                    if found.len() >= want {
                        break;
                    }
                }
            }
        }
        // Complete when every job of the topic in this state was seen, or when the page ends inside the
        // stretch that is in exact order.
        let complete = found.len() as u64 >= total || (found.len() >= want && last_score <= exact_to);
        Ok(JobPage {
            jobs: found.into_iter().skip(offset).collect(),
            total,
            complete,
        })
    }
}

/// The partitions' entries merged by score, then id.
fn merge(parts: impl Iterator<Item = Vec<(f64, String)>>) -> Vec<(f64, String)> {
    let mut all: Vec<(f64, String)> = parts.flatten().collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    all
}
