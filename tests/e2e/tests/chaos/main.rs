//! Chaos: every dq binary as a real process (dq-server, two dq-timers, two dq-consumers, dq-checker) on a
//! Redis that keeps an AOF fsynced on every write, while a fault loop kills them (-9), kills and restarts
//! Redis on its AOF, stalls Redis (SIGSTOP past `redis.response_timeout_ms`) and flushes its script cache.
//! Jobs with ids of the test's own go half to a pull topic (reserved and acked over HTTP by the test) and
//! half to a push topic (POSTed by dq-consumer to a sink in the test); some are merged, some go to a
//! fan-out topic (4 children each, 2 pulled and 2 pushed), and some to a topic whose callback answers
//! with 2 jobs to push (`{"dq":{"push":[…]}}`). Afterwards: no job lost, none delivered that was not
//! pushed (a started job counts as pushed when its parent was pushed, and a pushed job's only when its
//! parent was delivered), each parent names exactly its children, the audit repairs nothing, no job left
//! in any queue. Duplicates are counted, not refused: at-least-once delivery allows them. See
//! docs/chaos.md.
//!
//! Sizes come from the environment: `DQ_CHAOS_JOBS` (2000), `DQ_CHAOS_RATE` (pushes per second, 50),
//! `DQ_CHAOS_FAULT_MS` (between faults, 1000), `DQ_CHAOS_PAUSE_MS` (the shortest Redis stall, 1000; each
//! lasts 1 to 3 times this), `DQ_CHAOS_SETTLE_S` (how long to wait for the last deliveries, 300),
//! `DQ_CHAOS_SEED` (random by default, printed), `DQ_CHAOS_LOG_DIR` (keep every process's logs there),
//! `DQ_CHAOS_VERBOSE=1` (print every fault). `scripts/chaos.sh` runs the long version against release
//! binaries.

#[path = "../common/mod.rs"]
mod common;
mod faults;
mod load;
mod procs;
mod shared;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_harness::{DqProcess, RedisServer, free_port};
use serde_json::{Value, json};

use faults::*;
use load::*;
use procs::*;
use shared::*;

/// The topic the test's pull workers reserve.
const PULL: &str = "chaos.pull";
/// The topic whose callback is the test's sink, delivered by dq-consumer.
const PUSH: &str = "chaos.push";
/// The topic whose jobs are merged: each push one item, into the pending job of its coalescing key.
const MERGE: &str = "chaos.merge";
/// The merge topic's coalescing keys: each push goes to `m<i % MERGE_KEYS>`.
const MERGE_KEYS: usize = 8;
/// The merge window.
const MERGE_WINDOW_MS: u64 = 500;
/// The fan-out topic, and the topics its pushes fan out to: two pushed to the sink, two pulled.
const FAN: &str = "chaos.fan";
const FAN_TO: [&str; 4] = ["chaos.fan.a", "chaos.fan.b", "chaos.fan.c", "chaos.fan.d"];
/// Of [`FAN_TO`], the pulled ones.
const FAN_PULLED: [&str; 2] = ["chaos.fan.c", "chaos.fan.d"];
/// The topic whose callback answers with two jobs to push, to [`KID`].
const CHAIN: &str = "chaos.chain";
/// The topic of the jobs [`CHAIN`]'s answers push (delivered to the sink).
const KID: &str = "chaos.kid";
/// Jobs each [`CHAIN`] delivery pushes.
const KIDS: usize = 2;
/// TTR of every job: how long a reservation lost with a killed process (or a lost answer) waits.
const TTR_MS: u64 = 5000;
/// The push topic's callback timeout; dq-consumer reserves for at least this + 5 s.
const CALLBACK_TIMEOUT_MS: u64 = 1000;
/// `redis.response_timeout_ms` (and `connect_timeout_ms`) of every process: a stall longer than this is
/// an outage to dq.
const RESPONSE_TIMEOUT_MS: u64 = 500;
/// How long the fault loop waits for every process to show it works again after a Redis fault.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(30);
/// How often recovery signals are looked at (their resolution).
const RECOVERY_POLL: Duration = Duration::from_millis(50);

/// A setting from the environment, or its default.
fn setting<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
        _ => default,
    }
}

/// The run's sizes.
struct Plan {
    jobs: usize,
    rate: f64,
    fault_every: Duration,
    pause: Duration,
    settle: Duration,
    seed: u64,
    verbose: bool,
}

impl Plan {
    fn from_env() -> Plan {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64;
        Plan {
            jobs: setting("DQ_CHAOS_JOBS", 2000usize),
            rate: setting("DQ_CHAOS_RATE", 50.0f64),
            fault_every: Duration::from_millis(setting("DQ_CHAOS_FAULT_MS", 1000u64)),
            pause: Duration::from_millis(setting("DQ_CHAOS_PAUSE_MS", 1000u64)),
            settle: Duration::from_secs(setting("DQ_CHAOS_SETTLE_S", 300u64)),
            seed: setting("DQ_CHAOS_SEED", now),
            verbose: setting("DQ_CHAOS_VERBOSE", 0u8) == 1,
        }
    }
}

/// SplitMix64: reproducible from the printed seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The two topics' counts from `GET /v1/stats`, and the partitions that did not answer.
async fn stats(http: &reqwest::Client, port: u16) -> Option<(BTreeMap<String, i64>, Vec<Value>)> {
    let (status, out) = common::call(http, port, "GET", "/v1/stats", None).await;
    if status != 200 {
        return None;
    }
    let mut counts = BTreeMap::new();
    for topic in [PULL, PUSH, MERGE, FAN, CHAIN, KID].into_iter().chain(FAN_TO) {
        for state in ["delayed", "ready", "reserved", "dead"] {
            let n = out["topics"][topic][state].as_i64().unwrap_or(0);
            counts.insert(format!("{topic}:{state}"), n);
        }
    }
    let down = out["redis"]["partitions_down"].as_array().cloned().unwrap_or_default();
    Some((counts, down))
}

/// Sum of `cmd` (ZCARD, HLEN) over the keys matching `pattern`.
fn sum_over_keys(c: &mut redis::Connection, pattern: &str, cmd: &str) -> (usize, i64) {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(c).unwrap();
    let mut total = 0;
    for k in &keys {
        let n: i64 = redis::cmd(cmd).arg(k).query(c).unwrap();
        total += n;
    }
    (keys.len(), total)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The id of job `i`: `chaos-<i>`, or for a job with a flow key the first of `chaos-<i>`, `chaos-<i>-1`,
/// ... that lives in one of the push topic's key partitions (a producer's id goes with a flow key only in
/// its key's partition, and a topic's keys live in 16 of the 256).
fn id_of(i: usize, keyed: bool) -> String {
    let partitions = dq_core::store::partition::Partitions::new(256);
    let keyed_in = partitions.of_topic_keys(PUSH);
    (0..)
        .map(|j| match j {
            0 => format!("chaos-{i:06}"),
            j => format!("chaos-{i:06}-{j}"),
        })
        .find(|id| !keyed || keyed_in.contains(&partitions.of_id(id)))
        .expect("some id lands in a key partition")
}

/// The flow key of a push-topic job pushed with one (every other one): a key in the job's own partition
/// (a producer's id goes with a flow key only there), one of a few per partition.
fn flow_key_of(id: &str) -> String {
    let partitions = dq_core::store::partition::Partitions::new(256);
    let home = partitions.of_id(id);
    let nth = id.len() % 2;
    (0..)
        .map(|j| format!("f{j}"))
        .take(100_000)
        .filter(|k| partitions.of_key(PUSH, k) == home)
        .nth(nth)
        .expect("every partition has keys")
}

fn job_plan(n: usize, rng: &mut Rng) -> Vec<Job> {
    (0..n)
        .map(|i| Job {
            flow_key: (i % 8 == 1).then(|| flow_key_of(&id_of(i, true))),
            id: id_of(i, i % 8 == 1),
            topic: match (i % 4, i % 8) {
                (3, _) => MERGE,
                (1, _) => PUSH,
                (_, 2) => CHAIN,
                (_, 6) => FAN,
                _ => PULL,
            },
            // A third due at once, the rest spread over 2 s, so that the timers matter.
            delay_ms: if rng.below(3) == 0 { 0 } else { 1 + rng.below(2000) },
            merge_key: (i % 4 == 3).then(|| format!("m{}", i % MERGE_KEYS)),
        })
        .collect()
}

// Multi-threaded: the sink must answer while the fault loop blocks on a Redis restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_loses_no_job_and_leaves_nothing_to_repair() {
    let plan = Plan::from_env();
    println!(
        // On a line of its own: cargo test's "test … ..." has no newline yet.
        "\nchaos: {} jobs (half pull, half push), {} pushes/s, a fault every {} ms, redis stalls of {} to {} ms, \
         seed {} (DQ_CHAOS_SEED={} to run it again)",
        plan.jobs,
        plan.rate,
        plan.fault_every.as_millis(),
        plan.pause.as_millis(),
        3 * plan.pause.as_millis(),
        plan.seed,
        plan.seed
    );
    let began = Instant::now();
    let mut rng = Rng(plan.seed);
    let logs = LogDir::new();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // The installation: Redis on an AOF fsynced at every write, one server, two timers, two consumers, one
    // checker, each with short periods so that it recovers quickly.
    let redis = RedisServer::start_persistent();
    let redis_url = redis.url();
    let t = |ms: u64| ms.to_string();
    let extra: Vec<(&'static str, String)> = vec![
        ("DQ__REDIS__RESPONSE_TIMEOUT_MS", t(RESPONSE_TIMEOUT_MS)),
        ("DQ__REDIS__CONNECT_TIMEOUT_MS", t(RESPONSE_TIMEOUT_MS)),
        ("DQ__TOPICS__REFRESH_MS", t(100)),
        ("DQ__TIMER__LEASE_MS", t(1000)),
        ("DQ__TIMER__RENEW_MS", t(200)),
        ("DQ__CHECKER__INTERVAL_MS", t(200)),
        ("DQ__CHECKER__AUDIT_INTERVAL_MS", t(5000)),
    ];
    let mut procs = vec![
        Proc::new("dq-server", "dq-server", &redis, &extra),
        Proc::new("dq-timer", "dq-timer#1", &redis, &extra),
        Proc::new("dq-timer", "dq-timer#2", &redis, &extra),
        Proc::new("dq-consumer", "dq-consumer#1", &redis, &extra),
        Proc::new("dq-consumer", "dq-consumer#2", &redis, &extra),
        Proc::new("dq-checker", "dq-checker", &redis, &extra),
    ];
    for p in &mut procs {
        p.start(&http, &logs.path).await;
    }
    let port = procs[0].port;
    let checker_vars = procs[5].vars.clone();

    let shared = Arc::new(Shared {
        start: Instant::now(),
        pushed: Default::default(),
        push_stats: Default::default(),
        push_ok: Default::default(),
        retried_pushes: Default::default(),
        deliveries: Default::default(),
        acks: Default::default(),
        faults: Default::default(),
        pushes_done: AtomicBool::new(false),
        stop_pulling: AtomicBool::new(false),
        merged: Default::default(),
        twice_in_one_job: Default::default(),
    });
    let sink = start_sink(shared.clone()).await;
    let (status, out) = common::call(
        &http,
        port,
        "PUT",
        &format!("/v1/topics/{PUSH}"),
        Some(json!({
            "callback": {"url": format!("{sink}/hook"), "timeout_ms": CALLBACK_TIMEOUT_MS, "concurrency": 16},
            "retry": {"max_attempts": 0, "backoff_ms": [200]},
            // Half of its jobs have flow keys: each key at most 2 in flight, counted in Redis.
            "flow": {"concurrency": 2},
        })),
    )
    .await;
    assert_eq!(status, 200, "register {PUSH}: {out}");
    let (status, out) = common::call(
        &http,
        port,
        "PUT",
        &format!("/v1/topics/{MERGE}"),
        Some(json!({
            "callback": {"url": format!("{sink}/merge"), "timeout_ms": CALLBACK_TIMEOUT_MS, "concurrency": 4},
            "retry": {"max_attempts": 0, "backoff_ms": [200]},
        })),
    )
    .await;
    assert_eq!(status, 200, "register {MERGE}: {out}");
    let (status, out) = common::call(
        &http,
        port,
        "PUT",
        &format!("/v1/topics/{PULL}"),
        Some(json!({"retry": {"max_attempts": 0}})),
    )
    .await;
    assert_eq!(status, 200, "register {PULL}: {out}");
    // The graph: a fan-out topic, and a callback whose answers push (to KID, the only topic allowed).
    for (topic, config) in [
        (FAN.to_string(), json!({"fanout": FAN_TO})),
        (
            CHAIN.to_string(),
            json!({"callback": {"url": format!("{sink}/chain"), "timeout_ms": CALLBACK_TIMEOUT_MS, "concurrency": 8,
                                "allow_push": [KID]},
                   "retry": {"max_attempts": 0, "backoff_ms": [200]}}),
        ),
        (
            KID.to_string(),
            json!({"callback": {"url": format!("{sink}/hook"), "timeout_ms": CALLBACK_TIMEOUT_MS, "concurrency": 8},
                   "retry": {"max_attempts": 0, "backoff_ms": [200]}}),
        ),
        (
            FAN_TO[0].to_string(),
            json!({"callback": {"url": format!("{sink}/hook"), "timeout_ms": CALLBACK_TIMEOUT_MS},
                                        "retry": {"max_attempts": 0, "backoff_ms": [200]}}),
        ),
        (
            FAN_TO[1].to_string(),
            json!({"callback": {"url": format!("{sink}/hook"), "timeout_ms": CALLBACK_TIMEOUT_MS},
                                        "retry": {"max_attempts": 0, "backoff_ms": [200]}}),
        ),
        (FAN_TO[2].to_string(), json!({"retry": {"max_attempts": 0}})),
        (FAN_TO[3].to_string(), json!({"retry": {"max_attempts": 0}})),
    ] {
        let (status, out) = common::call(&http, port, "PUT", &format!("/v1/topics/{topic}"), Some(config)).await;
        assert_eq!(status, 200, "register {topic}: {out}");
    }

    // Load and faults.
    let redis = Arc::new(Mutex::new(redis));
    let jobs = Arc::new(job_plan(plan.jobs, &mut rng));
    let next = Arc::new(AtomicUsize::new(0));
    let pushers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(pusher(shared.clone(), jobs.clone(), next.clone(), plan.rate, port)))
        .collect();
    let pullers: Vec<_> = (0..2).map(|_| tokio::spawn(puller(shared.clone(), port))).collect();
    let mut faults = tokio::spawn(
        Faults {
            shared: shared.clone(),
            redis: redis.clone(),
            redis_url: redis_url.clone(),
            procs,
            http: http.clone(),
            logs: logs.path.clone(),
            every: plan.fault_every,
            pause: plan.pause,
            verbose: plan.verbose,
            rng: Rng(rng.next()),
        }
        .run(),
    );
    let mut pushing = tokio::spawn(async move {
        for p in pushers {
            p.await.unwrap();
        }
    });
    tokio::select! {
        done = &mut pushing => done.unwrap(),
        // The fault loop ends only after the pushes, unless it failed (a process that never came back):
        // its panic, rather than pushers retrying for ever.
        failed = &mut faults => match failed {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            other => panic!("the fault loop ended before the pushes: {:?}", other.map(|_| ())),
        },
    }
    shared.pushes_done.store(true, Ordering::SeqCst);
    let pushed_in = began.elapsed();
    let report = faults.await.unwrap();
    let mut procs = report.procs;
    println!(
        "chaos: all {} pushes acknowledged after {:.1} s; faults stopped",
        plan.jobs,
        pushed_in.as_secs_f64()
    );

    // Every pushed job delivered and nothing left in the queues (a generous deadline; lost reservations
    // come back after their TTR).
    let settle_began = Instant::now();
    let pushed: HashSet<String> = shared.pushed.lock().unwrap().clone();
    // What must be delivered: every job pushed but the fan-outs' parents, which are not delivered
    // themselves, and their children, and the jobs each delivered CHAIN job's answer pushed.
    let topic_of_pushed: HashMap<&str, &str> = jobs.iter().map(|j| (j.id.as_str(), j.topic)).collect();
    let mut expected: HashMap<String, &str> = HashMap::new();
    for id in &pushed {
        match topic_of_pushed.get(id.as_str()) {
            Some(&FAN) => {
                for t in FAN_TO {
                    expected.insert(format!("{id}~{t}"), t);
                }
            }
            Some(&CHAIN) => {
                expected.insert(id.clone(), CHAIN);
                for k in 0..KIDS {
                    expected.insert(format!("{id}~{k}"), KID);
                }
            }
            Some(t) => {
                expected.insert(id.clone(), t);
            }
            None => {}
        }
    }
    let mut last_state;
    let settled = loop {
        let missing = {
            let d = shared.deliveries.lock().unwrap();
            expected.keys().filter(|id| !d.contains_key(*id)).count()
        };
        let counts = stats(&http, port).await;
        let left: i64 = counts
            .as_ref()
            .map(|(c, down)| c.values().map(|n| n.abs()).sum::<i64>() + down.len() as i64)
            .unwrap_or(-1);
        last_state = format!("{missing} pushed jobs not delivered; counts {counts:?}");
        if missing == 0 && left == 0 {
            break true;
        }
        if settle_began.elapsed() > plan.settle {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "chaos: {} after faults stopped: {:.1} s ({last_state})",
        if settled { "settled" } else { "NOT settled" },
        settle_began.elapsed().as_secs_f64()
    );
    shared.stop_pulling.store(true, Ordering::SeqCst);
    for p in pullers {
        p.await.unwrap();
    }

    // The figures.
    let deliveries = shared.deliveries.lock().unwrap().clone();
    let topic_of: HashMap<&str, &str> = expected.iter().map(|(id, t)| (id.as_str(), *t)).collect();
    let lost: Vec<&String> = {
        let mut l: Vec<&String> = expected.keys().filter(|id| !deliveries.contains_key(*id)).collect();
        l.sort();
        l
    };
    // A job a CHAIN delivery pushed before its parent's delivery was recorded cannot be: the answer is
    // what pushes it. So a pushed job delivered is one whose parent was delivered first.
    let unborn: Vec<String> = deliveries
        .iter()
        .filter(|(id, _)| topic_of.get(id.as_str()) == Some(&KID))
        .filter(|(id, ds)| {
            let parent = id.rsplit_once('~').map(|(p, _)| p).unwrap_or_default();
            deliveries.get(parent).is_none_or(|pd| pd[0].0 > ds[0].0)
        })
        .map(|(id, _)| id.clone())
        .collect();
    let mut unexpected: Vec<String> = deliveries
        .keys()
        .filter(|id| !expected.contains_key(*id))
        .cloned()
        .collect();
    unexpected.sort();
    let misrouted: Vec<String> = deliveries
        .iter()
        .filter(|(id, ds)| {
            let want = match topic_of.get(id.as_str()) {
                Some(&PULL) => Via::Pull,
                Some(t) if FAN_PULLED.contains(t) => Via::Pull,
                Some(&MERGE) => Via::Merge,
                _ => Via::Callback,
            };
            ds.iter().any(|(_, via)| *via != want)
        })
        .map(|(id, _)| id.clone())
        .collect();
    let mut duplicates: Vec<(&String, &Vec<(u64, Via)>)> = deliveries.iter().filter(|(_, ds)| ds.len() > 1).collect();
    duplicates.sort_by(|a, b| a.0.cmp(b.0));
    let extra_deliveries: usize = duplicates.iter().map(|(_, ds)| ds.len() - 1).sum();
    let dup_by_via = |via: Via| duplicates.iter().filter(|(_, ds)| ds[0].1 == via).count();
    let process_kills: usize = report
        .counts
        .iter()
        .filter(|(k, _)| k.starts_with("kill -9 dq-"))
        .map(|(_, n)| n)
        .sum();
    let redis_kills = report
        .counts
        .get("kill -9 redis, restart on its AOF")
        .copied()
        .unwrap_or(0);
    let kills = process_kills + redis_kills;
    let faults_total: usize = report.counts.values().sum();

    // Merged jobs: each item in exactly one job (a job delivered again is the same job), none twice in one.
    let merged = shared.merged.lock().unwrap().clone();
    let twice_in_one_job = shared.twice_in_one_job.lock().unwrap().clone();
    let mut in_two_jobs: Vec<String> = merged
        .iter()
        .filter(|(_, jobs)| jobs.iter().collect::<HashSet<_>>().len() > 1)
        .map(|(item, jobs)| format!("{item} in {jobs:?}"))
        .collect();
    in_two_jobs.sort();
    let merged_jobs: HashSet<String> = merged.values().flatten().cloned().collect();
    let merge_items = topic_of.values().filter(|t| **t == MERGE).count();
    println!(
        "chaos: merged: {} items pushed in {} jobs delivered ({} items coalesced at push); in two jobs: {}, twice in \
         one job: {}",
        merge_items,
        merged_jobs.len(),
        shared.push_stats.lock().unwrap().coalesced,
        in_two_jobs.len(),
        twice_in_one_job.len()
    );

    let fans = pushed
        .iter()
        .filter(|id| topic_of_pushed.get(id.as_str()) == Some(&FAN))
        .count();
    let chains = pushed
        .iter()
        .filter(|id| topic_of_pushed.get(id.as_str()) == Some(&CHAIN))
        .count();
    let started = |t: &str| {
        topic_of
            .iter()
            .filter(|(id, topic)| **topic == t && id.contains('~'))
            .count()
    };
    println!(
        "chaos: graph: {fans} fan-out pushes made {} children; {chains} chained callbacks pushed {} jobs; \
         each checked below to exist once, named by its parent",
        FAN_TO.iter().map(|t| started(t)).sum::<usize>(),
        started(KID),
    );

    // Every job's record says done (a merge item is a push, not a job: its jobs are looked up instead).
    let mut not_done: Vec<String> = Vec::new();
    {
        let ids: Vec<String> = expected
            .keys()
            .filter(|id| topic_of.get(id.as_str()) != Some(&MERGE))
            .cloned()
            .chain(
                pushed
                    .iter()
                    .filter(|id| topic_of_pushed.get(id.as_str()) == Some(&FAN))
                    .cloned(),
            )
            .chain(merged_jobs.iter().cloned())
            .collect();
        let mut set = tokio::task::JoinSet::new();
        for chunk in ids.chunks(ids.len().div_ceil(8).max(1)) {
            let (chunk, http) = (chunk.to_vec(), http.clone());
            set.spawn(async move {
                let mut bad = Vec::new();
                for id in chunk {
                    // A 503 (a read that got no answer in time, on a machine the suite keeps busy) is asked
                    // again, as a client would, for up to 30 s.
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                    let (status, job) = loop {
                        let (status, job) = common::call(&http, port, "GET", &format!("/v1/jobs/{id}"), None).await;
                        if status != 503 || tokio::time::Instant::now() >= deadline {
                            break (status, job);
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    };
                    if status != 200 || job["state"] != "done" {
                        bad.push(format!("{id}: {status} {job}"));
                    }
                    // A parent names exactly its children: a fan-out's 4, a CHAIN job's 2.
                    let children: Vec<&str> = job["children"]
                        .as_array()
                        .map(|c| c.iter().filter_map(|c| c["id"].as_str()).collect())
                        .unwrap_or_default();
                    let want: Vec<String> = match job["topic"].as_str() {
                        Some(FAN) => FAN_TO.iter().map(|t| format!("{id}~{t}")).collect(),
                        Some(CHAIN) => (0..KIDS).map(|k| format!("{id}~{k}")).collect(),
                        _ => Vec::new(),
                    };
                    if children != want {
                        bad.push(format!("{id}: children {children:?}, not {want:?}"));
                    }
                }
                bad
            });
        }
        while let Some(bad) = set.join_next().await {
            not_done.extend(bad.unwrap());
        }
        not_done.sort();
    }

    // The counts, and the structures themselves.
    let final_counts = stats(&http, port).await;
    let structures = tokio::task::spawn_blocking({
        let url = redis_url.clone();
        move || {
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut out = BTreeMap::new();
            for (what, pattern, cmd) in [
                ("delay sets", "dq:{*}:delayed", "ZCARD"),
                ("reserved sets", "dq:{*}:reserved", "ZCARD"),
                ("ready queues", "dq:{*}:ready:*", "ZCARD"),
                ("flow keys' queues", "dq:{*}:fq:*", "ZCARD"),
                ("flow keys with ready jobs", "dq:{*}:flows:*", "ZCARD"),
                ("dead lists", "dq:{*}:dead:*", "ZCARD"),
                ("quarantines", "dq:{*}:quarantine", "HLEN"),
            ] {
                out.insert(what, sum_over_keys(&mut c, pattern, cmd));
            }
            out
        }
    })
    .await
    .unwrap();

    // `dq-checker audit`, with the installation's environment.
    let mut audit_vars = checker_vars.clone();
    let audit_port = free_port();
    audit_vars.retain(|(k, _)| *k != "DQ__METRICS__LISTEN" && *k != "DQ__SERVER__LISTEN");
    audit_vars.push(("DQ__METRICS__LISTEN", format!("127.0.0.1:{audit_port}")));
    audit_vars.push(("DQ__SERVER__LISTEN", format!("127.0.0.1:{audit_port}")));
    let mut audit = DqProcess::spawn("dq-checker", &audit_vars, &["audit"]);
    let status = tokio::task::spawn_blocking(move || {
        let status = audit.wait(Duration::from_secs(600));
        (status, audit.log())
    })
    .await
    .unwrap();
    let (audit_status, audit_log) = status;
    assert_eq!(
        audit_status.and_then(|s| s.code()),
        Some(0),
        "dq-checker audit:\n{audit_log}"
    );
    let audit_report: Value = serde_json::from_str(
        audit_log
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .expect("a JSON report"),
    )
    .unwrap();

    // The processes: none died by itself; the periodic audits of every checker life repaired nothing.
    let mut exited_at_end = Vec::new();
    for p in &mut procs {
        if let Some(why) = p.exited(&logs.path) {
            exited_at_end.push(why);
        }
        p.archive_running(&logs.path);
    }
    let (mut audits_clean, mut audits_repaired) = (0, Vec::new());
    for entry in std::fs::read_dir(&logs.path).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("dq-checker") {
            continue;
        }
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        audits_clean += log.matches("audit found nothing to repair").count();
        audits_repaired.extend(
            log.lines()
                .filter(|l| l.contains("audit repaired") || l.contains("audit: "))
                .map(|l| format!("{}: {l}", path.display())),
        );
    }

    // The report.
    let ps = shared.push_stats.lock().unwrap();
    let acks = shared.acks.lock().unwrap();
    let count_via = |via: Via| deliveries.values().flatten().filter(|(_, v)| *v == via).count();
    println!(
        "chaos: pushes: {} created (201), {} stored by an earlier attempt (409 on a retry), {} answered 503 \
         ({} of them 'outcome unknown, push again with the id'), {} connection errors, {} answered 500, {} ids \
         needed a retry",
        ps.created,
        ps.conflict_on_retry,
        ps.unavailable,
        ps.unknown_outcome,
        ps.connection_errors,
        ps.internal,
        shared.retried_pushes.lock().unwrap().len()
    );
    println!(
        "chaos: delivered: {} ids by callback in {} deliveries, {} ids by pull in {} reservations; pull acks: {} \
         done, {} stale (409), {} sent again, {} given up, {} not found",
        deliveries.values().filter(|d| d[0].1 == Via::Callback).count(),
        count_via(Via::Callback),
        deliveries.values().filter(|d| d[0].1 == Via::Pull).count(),
        count_via(Via::Pull),
        acks.acked,
        acks.stale,
        acks.retried,
        acks.gave_up,
        acks.not_found.len()
    );
    println!("chaos: faults: {faults_total} in all");
    for (kind, n) in &report.counts {
        println!("chaos:   {n:>5}  {kind}");
    }
    println!("chaos: kills: {kills} ({process_kills} dq processes, {redis_kills} redis)");
    println!(
        "chaos: lost: {}   unexpected: {}   misrouted: {}   pushed before their parent's answer: {}",
        lost.len(),
        unexpected.len(),
        misrouted.len(),
        unborn.len()
    );
    let per_kill = |n: usize| {
        if kills == 0 {
            0.0
        } else {
            n as f64 * 1000.0 / kills as f64
        }
    };
    println!(
        "chaos: duplicates: {} ids delivered more than once ({} by callback, {} by pull), {} extra deliveries; \
         per 1,000 kills: {:.1} ids, {:.1} extra deliveries",
        duplicates.len(),
        dup_by_via(Via::Callback),
        dup_by_via(Via::Pull),
        extra_deliveries,
        per_kill(duplicates.len()),
        per_kill(extra_deliveries)
    );
    {
        let faults = shared.faults.lock().unwrap();
        for (id, ds) in duplicates.iter().take(10) {
            let first = ds[0].0;
            let before: Vec<String> = faults
                .iter()
                .filter(|(ms, _)| *ms + 10_000 >= first && *ms <= ds[ds.len() - 1].0)
                .map(|(ms, f)| format!("{:.1} s {}", *ms as f64 / 1000.0, f.split(';').next().unwrap_or(f)))
                .collect();
            let at: Vec<String> = ds
                .iter()
                .map(|(ms, via)| format!("{:.1} s ({via:?})", *ms as f64 / 1000.0))
                .collect();
            println!(
                "chaos:   duplicate {id} delivered at {}; faults from 10 s before the first delivery to the last: {}",
                at.join(", "),
                before.join(" | ")
            );
        }
    }
    let restart_by: BTreeMap<&str, Vec<Duration>> = report.restarts.iter().fold(BTreeMap::new(), |mut m, (b, d)| {
        m.entry(*b).or_insert_with(Vec::new).push(*d);
        m
    });
    for (bin, mut ds) in restart_by {
        ds.sort();
        println!(
            "chaos: {bin} after kill -9: serving again (/healthz) in median {} ms, max {} ms ({} restarts)",
            percentile(&ds, 0.5).as_millis(),
            ds[ds.len() - 1].as_millis(),
            ds.len()
        );
    }
    for kind in ["redis restart", "redis pause"] {
        let rs: Vec<&Recovery> = report.recoveries.iter().filter(|r| r.kind == kind).collect();
        if rs.is_empty() {
            continue;
        }
        let mut outages: Vec<Duration> = rs.iter().map(|r| r.outage).collect();
        outages.sort();
        println!(
            "chaos: recovery after {} {kind}s (ms from redis answering PING again; redis was out for median {} ms, \
             max {} ms):",
            rs.len(),
            percentile(&outages, 0.5).as_millis(),
            outages[outages.len() - 1].as_millis()
        );
        for bin in ["dq-server", "dq-consumer", "dq-timer", "dq-checker"] {
            let mut ds: Vec<Duration> = Vec::new();
            let mut none = 0;
            for r in &rs {
                for (_, b, d) in &r.by {
                    if *b == bin {
                        match d {
                            Some(d) => ds.push(*d),
                            None => none += 1,
                        }
                    }
                }
            }
            ds.sort();
            if ds.is_empty() {
                println!("chaos:   {bin:<12} no signal ({none} without one)");
                continue;
            }
            println!(
                "chaos:   {bin:<12} n {:>4}  min {:>5}  median {:>5}  p90 {:>5}  max {:>5}  (no signal within {} s or \
                 before the load ended: {none})",
                ds.len(),
                ds[0].as_millis(),
                percentile(&ds, 0.5).as_millis(),
                percentile(&ds, 0.9).as_millis(),
                ds[ds.len() - 1].as_millis(),
                RECOVERY_DEADLINE.as_secs()
            );
        }
        if plan.verbose || rs.len() <= 20 {
            for r in &rs {
                let by: Vec<String> =
                    r.by.iter()
                        .map(|(l, _, d)| format!("{l} {}", d.map_or("-".into(), |d| d.as_millis().to_string())))
                        .collect();
                println!(
                    "chaos:     at {:>6.1} s, out {:>4} ms: {}",
                    r.at_ms as f64 / 1000.0,
                    r.outage.as_millis(),
                    by.join(", ")
                );
            }
        }
    }
    println!("chaos: dq-checker audit: {audit_report}");
    println!(
        "chaos: periodic audits during the run: {audits_clean} found nothing, {} repair lines",
        audits_repaired.len()
    );
    println!("chaos: counts at the end: {final_counts:?}");
    println!("chaos: structures at the end (keys, members): {structures:?}");
    println!(
        "chaos: total {:.1} s; process logs in {}{}",
        began.elapsed().as_secs_f64(),
        logs.path.display(),
        if logs.temp.is_some() {
            " (removed unless the test fails; DQ_CHAOS_LOG_DIR keeps them)"
        } else {
            ""
        }
    );

    // Evidence for whatever fails below.
    let evidence = |ids: &[&String]| -> String {
        let retried = shared.retried_pushes.lock().unwrap();
        let faults = shared.faults.lock().unwrap();
        let mut s = String::new();
        for id in ids.iter().take(20) {
            s.push_str(&format!(
                "\n  {id}: push attempts (ms, status) {:?}; deliveries {:?}",
                retried.get(*id),
                deliveries.get(*id)
            ));
        }
        s.push_str("\n  faults (ms, what):");
        for (ms, f) in faults.iter() {
            s.push_str(&format!("\n    {ms:>8} {f}"));
        }
        s
    };
    let lookups: Vec<String> = not_done.iter().take(20).cloned().collect();

    assert!(
        report.crashes.is_empty() && exited_at_end.is_empty(),
        "dq processes exited by themselves: {:#?} {:#?}",
        report.crashes,
        exited_at_end
    );
    assert!(
        lost.is_empty(),
        "{} jobs acknowledged at push were never delivered; their records: {lookups:#?}{}",
        lost.len(),
        evidence(&lost)
    );
    assert!(unexpected.is_empty(), "delivered but never pushed: {unexpected:?}");
    assert!(unborn.is_empty(), "pushed by an answer before the answer: {unborn:?}");
    assert!(misrouted.is_empty(), "delivered through the other topic: {misrouted:?}");
    assert!(
        ps.conflict_first.is_empty() && ps.wrong_id.is_empty(),
        "pushes answered about another job: 409 on a first attempt {:?}; a 503 naming another id {:?}",
        ps.conflict_first,
        ps.wrong_id
    );
    assert!(
        acks.not_found.is_empty(),
        "acks of reserved jobs answered 404 (no record): {:?}",
        acks.not_found
    );
    assert!(
        settled,
        "the queues did not empty within {:?}: {last_state}",
        plan.settle
    );
    assert!(not_done.is_empty(), "jobs whose record is not done: {lookups:#?}");
    let (counts, down) = final_counts.expect("stats answer");
    assert!(
        counts.values().all(|n| *n == 0) && down.is_empty(),
        "counts left for the two topics: {counts:?}, partitions down: {down:?}"
    );
    assert!(
        structures.values().all(|(_, n)| *n == 0),
        "jobs left in Redis's structures (or quarantined): {structures:?}"
    );
    assert_eq!(
        (
            audit_report["orphan_records"].as_u64(),
            audit_report["dangling_ids"].as_u64()
        ),
        (Some(0), Some(0)),
        "dq-checker audit repaired something: {audit_report}\n{audit_log}"
    );
    assert!(
        audits_repaired.is_empty(),
        "periodic audits repaired something:\n{}",
        audits_repaired.join("\n")
    );
    assert!(
        audit_report["records"].as_u64() >= Some((plan.jobs - merge_items + merged_jobs.len()) as u64),
        "{audit_report}"
    );
    assert!(
        in_two_jobs.is_empty() && twice_in_one_job.is_empty(),
        "merge items in more than one job: {in_two_jobs:?}; twice in one job: {twice_in_one_job:?}"
    );
}
