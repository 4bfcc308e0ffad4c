//! Pieces shared by the benchmarks that measure the timer end to end
//! (`lateness` and `burst`, and `deliver` through dq-consumer).
//!
//! They push jobs with an id `<topic>-<i>` and an explicit `run_at` (Unix ms,
//! wall clock; only `deliver`'s throughput mode leaves it out), so a received
//! job tells which one it is and when it was due; they read the wall clock to
//! compare with those due times (server, timer and bench share one machine,
//! hence one clock); `lateness` and `burst` can kill a process and leave the
//! topic empty afterwards. The pure parts — the due-time schedule
//! and the accounting of missing and duplicated ids — are unit tested here.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use hyper::Uri;
use serde_json::value::RawValue;

use dq_api::{BatchRequest, PushRequest};

use crate::http::{Conn, Reply, Target, encode_segment};
use crate::push::{self, MAX_TRANSPORT_FAILURES};
use crate::report::{self, Errors, Hist};
pub use crate::wire::{ReserveReply, ack_body, reserve_body};

/// The body of every job these benchmarks push.
const JOB_BODY: &str = "{}";

/// The wall clock, Unix µs.
pub fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The wall clock, Unix ms (dq-api's, the workspace's one).
pub use dq_api::unix_ms;

/// Sleeps until the wall clock reaches `at_ms` (Unix ms); returns at once if it has.
pub async fn sleep_until_unix_ms(at_ms: i64) {
    let wait_us = at_ms.saturating_mul(1000) - unix_us();
    if wait_us > 0 {
        tokio::time::sleep(Duration::from_micros(wait_us as u64)).await;
    }
}

/// A topic name `<prefix>-<8 random hex digits>`, so runs don't mix.
pub fn random_topic(prefix: &str) -> String {
    // `RandomState` is seeded randomly per process: no dependency needed.
    let mut h = RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    format!("{prefix}-{:08x}", h.finish() as u32)
}

/// The id of job `i` of `topic`.
pub fn job_id(topic: &str, i: u64) -> String {
    format!("{topic}-{i}")
}

/// The index `i` of an id made by [`job_id`] for `topic`, if it is one.
pub fn index_of(topic: &str, id: &str) -> Option<u64> {
    let digits = id.strip_prefix(topic)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Due times spread evenly: job `i` is due at `start + lead + i·1000/rate` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    /// Wall clock when pushing began, Unix ms.
    pub start_ms: i64,
    /// Time between `start_ms` and the first due time, in ms.
    pub lead_ms: u64,
    /// Jobs per second.
    pub rate: u64,
    /// How many jobs.
    pub jobs: u64,
}

impl Spread {
    /// `rate` jobs/s over `seconds` s, the first due `lead_ms` after `start_ms`.
    pub fn new(start_ms: i64, lead_ms: u64, rate: u64, seconds: u64) -> Self {
        assert!(rate > 0, "the rate is at least 1 job/s");
        Self {
            start_ms,
            lead_ms,
            rate,
            jobs: rate.saturating_mul(seconds),
        }
    }

    /// The due time of job `i`, Unix ms (floored to the ms).
    pub fn due_ms(&self, i: u64) -> i64 {
        let offset = u128::from(i) * 1000 / u128::from(self.rate);
        self.first_due_ms() + i64::try_from(offset).unwrap_or(i64::MAX)
    }

    /// The due time of job 0.
    pub fn first_due_ms(&self) -> i64 {
        self.start_ms + self.lead_ms as i64
    }

    /// The due time of the last job (of job 0 when there are none).
    pub fn last_due_ms(&self) -> i64 {
        self.due_ms(self.jobs.saturating_sub(1))
    }

    /// The wall clock `fraction` (0..=1) of the way through the window of
    /// `seconds` s that starts at the first due time.
    pub fn at_fraction(&self, seconds: u64, fraction: f64) -> i64 {
        self.first_due_ms() + (seconds as f64 * 1000.0 * fraction.clamp(0.0, 1.0)).round() as i64
    }
}

/// Counts deliveries per job id, from any number of tasks at once.
pub struct Seen {
    topic: String,
    /// Deliveries of job `i`.
    counts: Vec<AtomicU32>,
    /// Jobs delivered at least once.
    distinct: AtomicU64,
    /// Deliveries of ids that are not `<topic>-<i>` with `i` < N.
    unexpected: AtomicU64,
}

/// What [`Seen`] found, once the run is over.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    /// N.
    pub expected: u64,
    /// Jobs delivered at least once.
    pub received: u64,
    /// All deliveries of expected ids (`received` plus redeliveries).
    pub deliveries: u64,
    /// Jobs never delivered.
    pub missing: u64,
    /// Jobs delivered more than once.
    pub duplicates: u64,
    /// Deliveries of ids that were not pushed by this run.
    pub unexpected: u64,
    /// The first few missing ids, for the report.
    pub missing_sample: Vec<String>,
    /// The first few duplicated ids, for the report.
    pub duplicate_sample: Vec<String>,
}

/// How many ids a [`Tally`] lists as examples.
const SAMPLE: usize = 5;

impl Seen {
    /// Expects jobs `<topic>-0` … `<topic>-<n-1>`.
    pub fn new(topic: &str, n: u64) -> Self {
        Self {
            topic: topic.to_string(),
            counts: (0..n).map(|_| AtomicU32::new(0)).collect(),
            distinct: AtomicU64::new(0),
            unexpected: AtomicU64::new(0),
        }
    }

    /// Counts one delivery of `id`; true if it is the first of an expected job.
    pub fn record(&self, id: &str) -> bool {
        let slot = index_of(&self.topic, id).and_then(|i| self.counts.get(usize::try_from(i).ok()?));
        match slot {
            Some(c) if c.fetch_add(1, Ordering::Relaxed) == 0 => {
                self.distinct.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(_) => false,
            None => {
                self.unexpected.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Jobs delivered at least once so far.
    pub fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Relaxed)
    }

    /// Whether every expected job was delivered.
    pub fn all_received(&self) -> bool {
        self.distinct() >= self.counts.len() as u64
    }

    /// Counts missing and duplicated jobs.
    pub fn tally(&self) -> Tally {
        let mut t = Tally {
            expected: self.counts.len() as u64,
            unexpected: self.unexpected.load(Ordering::Relaxed),
            ..Tally::default()
        };
        for (i, c) in self.counts.iter().enumerate() {
            let c = u64::from(c.load(Ordering::Relaxed));
            t.deliveries += c;
            match c {
                0 => {
                    t.missing += 1;
                    if t.missing_sample.len() < SAMPLE {
                        t.missing_sample.push(job_id(&self.topic, i as u64));
                    }
                }
                1 => t.received += 1,
                _ => {
                    t.received += 1;
                    t.duplicates += 1;
                    if t.duplicate_sample.len() < SAMPLE {
                        t.duplicate_sample
                            .push(format!("{}×{c}", job_id(&self.topic, i as u64)));
                    }
                }
            }
        }
        t
    }
}

/// The `POST /v1/jobs/batch` body for jobs `first..first + n` of `topic`,
/// job `i` due at `run_at(i)` (`None`: no due time, so ready at once).
pub fn batch_body(topic: &str, first: u64, n: u64, run_at: impl Fn(u64) -> Option<i64>) -> Bytes {
    let body: &RawValue = serde_json::from_str(JOB_BODY).expect("the job body is valid JSON");
    let jobs = (first..first + n)
        .map(|i| {
            let job = PushRequest::new(topic, body).id(job_id(topic, i));
            match run_at(i) {
                Some(at) => job.run_at(at),
                None => job,
            }
        })
        .collect();
    Bytes::from(serde_json::to_vec(&BatchRequest { jobs }).expect("a batch always serializes"))
}

/// What [`push_all`] did.
pub struct Pushed {
    /// Jobs the server accepted.
    pub ok: u64,
    /// Wall time of the push.
    pub elapsed: Duration,
    /// Request latencies.
    pub hist: Hist,
    /// Failed jobs and requests.
    pub errors: Errors,
}

/// Pushes jobs `0..n` of `topic` over `connections` connections, `batch` per
/// request, job `i` due at `run_at(i)` (`None`: ready at once); jobs are
/// claimed in index order.
pub async fn push_all(
    target: &Arc<Target>,
    connections: usize,
    topic: &str,
    n: u64,
    batch: u64,
    run_at: Arc<dyn Fn(u64) -> Option<i64> + Send + Sync>,
) -> Result<Pushed> {
    let conns = Conn::connect_many(target, connections).await?;
    let uri = target.uri("/v1/jobs/batch")?;
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let topic: Arc<str> = Arc::from(topic);
    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (uri, next, errors, topic, run_at) = (
                uri.clone(),
                Arc::clone(&next),
                Arc::clone(&errors),
                Arc::clone(&topic),
                Arc::clone(&run_at),
            );
            tokio::spawn(async move {
                let mut hist = report::new_hist();
                let mut ok = 0;
                let mut transport_failures = 0;
                loop {
                    let first = next.fetch_add(batch, Ordering::Relaxed);
                    if first >= n {
                        break;
                    }
                    let count = batch.min(n - first);
                    let body = batch_body(&topic, first, count, &*run_at);
                    let t0 = Instant::now();
                    match conn.post_json(uri.clone(), body).await {
                        Ok(reply) => {
                            report::record(&mut hist, t0.elapsed());
                            transport_failures = 0;
                            ok += check_batch(&reply, count, &errors);
                        }
                        Err(e) => {
                            errors.add(count, || format!("push: {e:#}"));
                            transport_failures += 1;
                            if transport_failures >= MAX_TRANSPORT_FAILURES {
                                break;
                            }
                        }
                    }
                }
                (hist, ok)
            })
        })
        .collect();
    let mut hists = Vec::with_capacity(tasks.len());
    let mut ok = 0;
    for task in tasks {
        let (hist, n) = task.await.context("a push task panicked")?;
        hists.push(hist);
        ok += n;
    }
    let elapsed = start.elapsed();
    Ok(Pushed {
        ok,
        elapsed,
        hist: report::merge(&hists),
        errors: Arc::into_inner(errors).expect("all push tasks are done"),
    })
}

/// Counts the accepted jobs of a batch answer; reports the rest to `errors`.
fn check_batch(reply: &Reply, n: u64, errors: &Errors) -> u64 {
    if !reply.is_success() {
        errors.add(n, || format!("push: {}", reply.describe()));
        return 0;
    }
    match push::count_batch_results(&reply.body, n as usize) {
        Ok((ok, failed)) => {
            errors.add(failed, || {
                format!("push: batch item failed: {}", push::first_item_error(&reply.body))
            });
            ok
        }
        Err(e) => {
            errors.add(n, || format!("push: {e:#}: {}", reply.describe()));
            0
        }
    }
}

/// The ack URI of job `id`.
pub fn ack_uri(target: &Target, id: &str) -> Result<Uri> {
    target.uri(&format!("/v1/jobs/{}/ack", encode_segment(id)))
}

/// Acks one reservation; errors (transport or status) go to `errors`.
pub async fn ack(conn: &mut Conn, target: &Target, id: &str, receipt: &str, errors: &Errors) -> bool {
    let uri = match ack_uri(target, id) {
        Ok(u) => u,
        Err(e) => {
            errors.add(1, || format!("ack {id}: {e:#}"));
            return false;
        }
    };
    match conn.post_json(uri, ack_body(receipt)).await {
        Ok(reply) if reply.is_success() => true,
        Ok(reply) => {
            errors.add(1, || format!("ack {id}: {}", reply.describe()));
            false
        }
        Err(e) => {
            errors.add(1, || format!("ack {id}: {e:#}"));
            false
        }
    }
}

/// What [`drain`] did.
pub struct Drained {
    /// Jobs reserved and acked.
    pub acked: u64,
    /// Failed requests.
    pub errors: Errors,
}

/// Empties `topic`: `connections` tasks reserve up to 100 jobs at a time
/// (waiting up to `timeout_ms` for one) and ack them, until a reserve comes
/// back empty. Jobs still delayed after that are left alone.
pub async fn drain(target: &Arc<Target>, topic: &str, connections: usize, timeout_ms: u64) -> Result<Drained> {
    let conns = Conn::connect_many(target, connections).await?;
    let uri = target.uri("/v1/reserve")?;
    let body = reserve_body(topic, 100, timeout_ms);
    let errors = Arc::new(Errors::default());
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (target, uri, body, errors) = (Arc::clone(target), uri.clone(), body.clone(), Arc::clone(&errors));
            tokio::spawn(async move {
                let mut acked = 0u64;
                let mut failures = 0;
                while failures < MAX_TRANSPORT_FAILURES {
                    let reply = match conn.post_json(uri.clone(), body.clone()).await {
                        Ok(r) if r.is_success() => r,
                        Ok(r) => {
                            errors.add(1, || format!("drain reserve: {}", r.describe()));
                            failures += 1;
                            continue;
                        }
                        Err(e) => {
                            errors.add(1, || format!("drain reserve: {e:#}"));
                            failures += 1;
                            continue;
                        }
                    };
                    let jobs = match serde_json::from_slice::<ReserveReply>(&reply.body) {
                        Ok(r) => r.jobs,
                        Err(e) => {
                            errors.add(1, || format!("drain reserve: unreadable answer ({e})"));
                            break;
                        }
                    };
                    if jobs.is_empty() {
                        break;
                    }
                    for job in &jobs {
                        if ack(&mut conn, &target, &job.id, &job.receipt, &errors).await {
                            acked += 1;
                        }
                    }
                }
                acked
            })
        })
        .collect();
    let mut acked = 0;
    for task in tasks {
        acked += task.await.context("a drain task panicked")?;
    }
    Ok(Drained {
        acked,
        errors: Arc::into_inner(errors).expect("all drain tasks are done"),
    })
}

/// Sends SIGKILL to `pid` with `kill -9`.
pub async fn kill_9(pid: u32) -> Result<()> {
    let out = tokio::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .output()
        .await
        .context("cannot run `kill`")?;
    if !out.status.success() {
        bail!(
            "`kill -9 {pid}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn schedule_spreads_due_times() {
        let s = Spread::new(1_000_000, 3000, 2000, 10);
        assert_eq!(s.jobs, 20_000);
        assert_eq!(s.first_due_ms(), 1_003_000);
        assert_eq!(s.due_ms(0), 1_003_000);
        // 2000 jobs/s: two jobs per ms.
        assert_eq!(s.due_ms(1), 1_003_000);
        assert_eq!(s.due_ms(2), 1_003_001);
        assert_eq!(s.due_ms(1999), 1_003_999);
        assert_eq!(s.due_ms(2000), 1_004_000);
        assert_eq!(s.last_due_ms(), 1_003_000 + 9_999);
        assert_eq!(s.at_fraction(10, 0.5), 1_008_000);
        assert_eq!(s.at_fraction(10, 0.0), 1_003_000);
        assert_eq!(s.at_fraction(10, 2.0), 1_013_000);

        // Slower than one per ms: 3 jobs/s are 333 ms apart (floored).
        let s = Spread::new(0, 0, 3, 2);
        let due: Vec<i64> = (0..s.jobs).map(|i| s.due_ms(i)).collect();
        assert_eq!(due, [0, 333, 666, 1000, 1333, 1666]);
        // Due times never go backwards.
        let s = Spread::new(5, 7, 7919, 3);
        assert!((1..s.jobs).all(|i| s.due_ms(i) >= s.due_ms(i - 1)));
        assert!(s.last_due_ms() < s.first_due_ms() + 3000);
        assert_eq!(Spread::new(5, 7, 1, 0).last_due_ms(), 12);
    }

    #[test]
    fn ids_round_trip() {
        assert_eq!(job_id("bench-late-0a1b", 42), "bench-late-0a1b-42");
        assert_eq!(index_of("bench-late-0a1b", "bench-late-0a1b-42"), Some(42));
        for other in [
            "bench-late-0a1b",
            "bench-late-0a1b-",
            "bench-late-0a1b-+4",
            "bench-late-0a1b-4x",
            "x-1",
        ] {
            assert_eq!(index_of("bench-late-0a1b", other), None, "{other}");
        }
        // A topic that is a prefix of another one's does not match it.
        assert_eq!(index_of("t", "t-1-2"), None);
        let t = random_topic("bench-burst");
        assert!(
            t.starts_with("bench-burst-") && t.len() == "bench-burst-".len() + 8,
            "{t}"
        );
    }

    #[test]
    fn seen_counts_missing_and_duplicates() {
        let seen = Seen::new("t", 6);
        assert!(seen.record("t-0"));
        assert!(seen.record("t-1"));
        assert!(!seen.record("t-1"));
        assert!(!seen.record("t-1"));
        assert!(seen.record("t-3"));
        assert!(seen.record("t-5"));
        assert!(!seen.record("t-5"));
        assert!(!seen.record("t-6")); // out of range
        assert!(!seen.record("u-0")); // another topic
        assert_eq!(seen.distinct(), 4);
        assert!(!seen.all_received());
        assert_eq!(
            seen.tally(),
            Tally {
                expected: 6,
                received: 4,
                deliveries: 7,
                missing: 2,
                duplicates: 2,
                unexpected: 2,
                missing_sample: vec!["t-2".into(), "t-4".into()],
                duplicate_sample: vec!["t-1×3".into(), "t-5×2".into()],
            }
        );
        assert!(seen.record("t-2"));
        assert!(seen.record("t-4"));
        assert!(seen.all_received());
        let t = seen.tally();
        assert_eq!((t.received, t.missing, t.duplicates), (6, 0, 2));
    }

    #[test]
    fn seen_is_shared_by_tasks() {
        let seen = Arc::new(Seen::new("t", 1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || (0..1000).filter(|i| seen.record(&format!("t-{i}"))).count())
            })
            .collect();
        let firsts: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(firsts, 1000);
        let t = seen.tally();
        assert_eq!(
            (t.received, t.missing, t.duplicates, t.deliveries),
            (1000, 0, 1000, 4000)
        );
    }

    #[test]
    fn batch_bodies_carry_ids_and_due_times() {
        let body = batch_body("t", 10, 3, |i| Some(1000 + i as i64));
        let v: Value = serde_json::from_slice(&body).unwrap();
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(
            jobs[0],
            serde_json::json!({"topic":"t","id":"t-10","body":{},"run_at":1010})
        );
        assert_eq!(jobs[2]["id"], "t-12");
        assert_eq!(jobs[2]["run_at"], 1012);
        // Without a due time the field is left out: the job is ready at once.
        let body = batch_body("t", 0, 1, |_| None);
        assert_eq!(
            body,
            Bytes::from_static(br#"{"jobs":[{"topic":"t","id":"t-0","body":{}}]}"#)
        );
    }

    #[test]
    fn reserve_requests_and_answers() {
        assert_eq!(
            reserve_body("t", 100, 1000),
            Bytes::from_static(br#"{"topics":["t"],"count":100,"timeout_ms":1000}"#)
        );
        let body = br#"{"jobs":[{"id":"t-1","topic":"t","body":{"a":[1]},"attempt":1,
            "receipt":"r\"1","deadline":1700000030000,"run_at":1700000000000}]}"#;
        let r: ReserveReply = serde_json::from_slice(body).unwrap();
        assert_eq!(r.jobs.len(), 1);
        assert_eq!(
            (&*r.jobs[0].id, &*r.jobs[0].receipt, r.jobs[0].run_at),
            ("t-1", "r\"1", 1_700_000_000_000)
        );
        let target = Target::parse("http://127.0.0.1:1").unwrap();
        assert_eq!(ack_uri(&target, "t-1").unwrap(), "/v1/jobs/t-1/ack");
    }

    #[test]
    fn wall_clock_units_agree() {
        let (ms, us) = (unix_ms(), unix_us());
        assert!((us / 1000 - ms).abs() <= 1000, "{ms} {us}");
        assert!(ms > 1_600_000_000_000);
    }
}
