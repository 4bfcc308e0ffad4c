//! `dq-checker migrate` (see dq-checker): converts the layout of releases before partitions (`redis.shards`: standalone
//! Redis instances, each with `<prefix>:job:<id>`, `<prefix>:delayed:<bucket>`, `<prefix>:ready:<topic>`
//! …) into the partitioned layout of the configured Redis (any shape).
//!
//! Every job keeps its id, body, state, due time, attempts, receipt, deadline and last error: its record
//! moves byte for byte (DUMP and RESTORE) into the partition its id maps to, and into the structure its
//! state names with the same score. Each job is taken in by one script that does nothing when the job is
//! there already, and only then removed from the old Redis, so a conversion that stopped half-way (a
//! crash, a kill) is finished by running it again. The old layout's marker (`<prefix>:meta`) goes last;
//! until it is gone, dq's processes refuse to start on that Redis.

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;

use crate::config::{Settings, redact};
use crate::error::Error;
use crate::job::{DEFAULT_PRIORITY, State};
use crate::queue::Queue;
use crate::store::ready::ready_score;
use crate::store::scripts;
use crate::store::scripts::adopt::{self, AdoptReply, Place};

/// Why a conversion stopped. Running it again finishes what was left.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// An old shard could not be reached or read.
    #[error("{url}: {source}")]
    Old {
        /// The old shard, its credentials masked.
        url: String,
        /// What Redis said.
        #[source]
        source: redis::RedisError,
    },
    /// A topic registration of the old layout could not be read.
    #[error("topic {topic}: unreadable registration")]
    Topic {
        /// The topic.
        topic: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The new layout refused a write, or could not be reached.
    #[error(transparent)]
    Target(#[from] Error),
}

/// What a conversion did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct MigrateReport {
    /// Jobs taken into the new layout.
    pub jobs: u64,
    /// Jobs that were in the new layout already (an earlier, interrupted run took them).
    pub already: u64,
    /// Jobs by state.
    pub by_state: HashMap<String, u64>,
    /// Topic registrations carried over.
    pub topics: u64,
    /// Ids in old structures that had no record (dropped, as the audit would).
    pub dangling_ids: u64,
}

/// Jobs read and converted per round trip.
const BATCH: usize = 500;

/// Converts every old shard in `from` into the configured installation.
pub async fn run(settings: &Settings, from: &[String]) -> Result<MigrateReport, MigrateError> {
    let mut target = settings.clone();
    // The target must not be refused for the old layout it may itself still hold: the conversion is
    // what removes it. Its partition count is still checked (or set) as usual.
    let queue = connect_target(&mut target).await?;
    let mut report = MigrateReport::default();
    for url in from {
        let old_error = |source| MigrateError::Old {
            url: redact(url),
            source,
        };
        let client = redis::Client::open(url.as_str()).map_err(old_error)?;
        let mut old = client.get_multiplexed_async_connection().await.map_err(old_error)?;
        convert(&queue, &settings.redis.prefix, &mut old, &mut report)
            .await
            .map_err(|e| match e {
                Converting::Old(source) => old_error(source),
                Converting::Other(e) => e,
            })?;
        tracing::info!(from = %redact(url), jobs = report.jobs, "old shard converted");
    }
    Ok(report)
}

async fn connect_target(settings: &mut Settings) -> Result<Queue, Error> {
    let redis = crate::store::connection::Redis::new(&settings.redis)?;
    let keys = crate::store::keys::Keys::new(settings.redis.prefix.clone());
    // Hide the old marker from the layout check by creating the new layout first when absent.
    let want = crate::store::layout::Layout::wanted(&settings.redis)?;
    crate::store::layout::create(&redis, &keys, want).await?;
    Queue::connect(settings).await
}

/// Why converting one old shard stopped: its own Redis, or anything else.
enum Converting {
    Old(redis::RedisError),
    Other(MigrateError),
}

impl From<redis::RedisError> for Converting {
    fn from(e: redis::RedisError) -> Self {
        Converting::Old(e)
    }
}

impl From<Error> for Converting {
    fn from(e: Error) -> Self {
        Converting::Other(MigrateError::Target(e))
    }
}

async fn convert(
    queue: &Queue,
    prefix: &str,
    old: &mut MultiplexedConnection,
    report: &mut MigrateReport,
) -> Result<(), Converting> {
    // Topics first, so consumers find callbacks for the jobs as soon as they start.
    let topics: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("{prefix}:topics"))
        .query_async(old)
        .await?;
    for (topic, value) in &topics {
        let json = value.split_once(' ').map_or("", |(_, j)| j);
        if json.is_empty() || queue.admin().topics().await?.contains_key(topic) {
            continue;
        }
        // Registrations of releases before partitions carry no format mark: their conditions are read
        // with the meaning they had then.
        let config = crate::admin::topics::stored_config(json).map_err(|source| {
            Converting::Other(MigrateError::Topic {
                topic: topic.clone(),
                source,
            })
        })?;
        queue.admin().put_topic(topic, &config).await?;
        report.topics += 1;
    }

    let job_prefix = format!("{prefix}:job:");
    let keys = scan(old, &format!("{job_prefix}*")).await?;
    for chunk in keys.chunks(BATCH) {
        let mut get = scripts::get::SCRIPT.prepare_invoke();
        for key in chunk {
            get.key(key);
        }
        for field in ["t", "s", "r", "d"] {
            get.arg(field);
        }
        let records: Vec<HashMap<String, String>> = get.invoke_async(old).await?;
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("DUMP").arg(key).cmd("PTTL").arg(key);
        }
        let dumps: Vec<(Option<Vec<u8>>, i64)> = pipe.query_async(old).await?;
        for ((key, rec), (dump, pttl)) in chunk.iter().zip(records).zip(dumps) {
            let (Some(dump), Some(topic), Some(state)) = (dump, rec.get("t"), rec.get("s")) else {
                continue; // gone since the scan
            };
            let id = &key[job_prefix.len()..];
            let p = queue.partitions().of_id(id);
            // The old structure of each state, and the score there.
            let (old_structure, score): (Option<String>, Option<f64>) = match state.as_str() {
                "delayed" => (None, rec.get("r").and_then(|r| r.parse().ok())),
                "reserved" => (
                    Some(format!("{prefix}:reserved")),
                    rec.get("d").and_then(|d| d.parse().ok()),
                ),
                "ready" | "dead" => {
                    let k = format!("{prefix}:{state}:{topic}");
                    let s: Option<f64> = redis::cmd("ZSCORE").arg(&k).arg(id).query_async(old).await?;
                    let s = s.or_else(|| rec.get("r").and_then(|r| r.parse().ok()));
                    // The old layout scored a ready job by its due time alone, and had no priorities.
                    let s = match state.as_str() {
                        "ready" => s.map(|due| ready_score(DEFAULT_PRIORITY, due as i64)),
                        _ => s,
                    };
                    (Some(k), s)
                }
                _ => (None, None),
            };
            let place = State::parse(state).map(|state| Place {
                topic,
                state,
                score: score.unwrap_or(0.0),
            });
            match adopt::call(&queue.store, p, id, &dump, pttl, place).await? {
                AdoptReply::Adopted => {
                    report.jobs += 1;
                    *report.by_state.entry(state.clone()).or_default() += 1;
                }
                AdoptReply::AlreadyHere => report.already += 1,
            }
            // Only now, with the job safe in its new place, it leaves the old one.
            let mut forget = redis::pipe();
            forget.cmd("DEL").arg(key).ignore();
            if let Some(k) = &old_structure {
                forget.cmd("ZREM").arg(k).arg(id).ignore();
            }
            forget.query_async::<()>(old).await?;
        }
    }
    // What is left of the old structures are ids without records (and the delay buckets' members, whose
    // records moved above): count the dangling ones, then drop the structures, and the marker last.
    for pattern in ["ready:*", "dead:*"] {
        for k in scan(old, &format!("{prefix}:{pattern}")).await? {
            let n: u64 = redis::cmd("ZCARD").arg(&k).query_async(old).await?;
            report.dangling_ids += n;
            redis::cmd("DEL").arg(&k).query_async::<()>(old).await?;
        }
    }
    let n: u64 = redis::cmd("ZCARD")
        .arg(format!("{prefix}:reserved"))
        .query_async(old)
        .await?;
    report.dangling_ids += n;
    let mut rest = scan(old, &format!("{prefix}:delayed:*")).await?;
    rest.extend(
        ["reserved", "counts", "events", "timers", "leases", "topics"]
            .iter()
            .map(|k| format!("{prefix}:{k}")),
    );
    for k in rest {
        redis::cmd("DEL").arg(&k).query_async::<()>(old).await?;
    }
    redis::cmd("DEL")
        .arg(format!("{prefix}:meta"))
        .query_async::<()>(old)
        .await?;
    Ok(())
}

async fn scan(conn: &mut MultiplexedConnection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}
