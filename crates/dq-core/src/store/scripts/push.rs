//! `push.lua`: store new jobs in their partitions (see its header for KEYS and ARGV): the partitions of
//! one node per call (any on a single Redis).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::job::{Due, NewJob, State, child_id};
use crate::store::Store;
use crate::store::decode::{int, text};
use crate::store::{new_record, owners};

script!(
    /// Store new jobs (push and push many).
    SCRIPT,
    record + flow + add + publish + "push.lua"
);

/// How `push.lua` treats a job's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Minted for this push: no live job has it; only this push's own retry could have stored it.
    Minted,
    /// The producer's: a live job with it is a conflict.
    Given,
    /// A retry of a write whose outcome is unknown: the id stored with the same topic and body is this
    /// push, stored by the earlier attempt.
    Retry,
}

impl Mode {
    /// The mode's argument; with `packed`, that the job's record comes packed ([`new_record`]): "4" and
    /// "5" are "0" and "1" so. A retry's is never packed: the script reads its topic and body.
    fn arg(self, packed: bool) -> &'static str {
        match (self, packed) {
            (Mode::Minted, false) => "0",
            (Mode::Given, false) => "1",
            (Mode::Retry, _) => "2",
            (Mode::Minted, true) => "4",
            (Mode::Given, true) => "5",
        }
    }
}

/// What `push.lua` made of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PushReply {
    /// Stored (or, for a retry, found stored by the earlier attempt), in `state`, due at `run_at`.
    Stored {
        /// Delayed, or ready when already due (a fan-out's parent: done).
        state: State,
        /// Its due time, Unix ms (Redis's clock).
        run_at: i64,
        /// A fan-out's children, in order: the state each was stored in by this call (`None`: stored
        /// by the earlier attempt of a retry).
        children: Vec<Option<State>>,
    },
    /// A live job already has the id: nothing of this job was written.
    Conflict,
    /// A live job pushed with the same deduplication key within its window: nothing was written.
    Duplicate {
        /// That first job's id.
        first: String,
        /// Its state.
        state: State,
        /// Its due time, Unix ms.
        run_at: i64,
    },
}

/// The jobs one push of `job` writes: itself, and a fan-out's children after it.
pub(crate) fn weight(job: &NewJob) -> usize {
    1 + job.fanout.len()
}

/// Stores `jobs` (the partition each goes to, the id it goes out with, the job, how its id is treated)
/// with one `push.lua` call, in one round trip, sent to the first job's partition: the jobs must be on
/// that partition's node (on a single Redis any are; on a cluster, see [`Store::nodes`]). A cluster's
/// call that finds one of its partitions elsewhere, having written nothing, is sent again a partition
/// at a time ([`owners::apart`]). A fan-out's parent is stored done, expiring `fanout_ttl_ms` after
/// its due time, with its children after it. Answers per job, in order (a fan-out's as its parent's).
pub(crate) async fn call(
    store: &Store,
    jobs: &[(u16, &str, &NewJob, Mode)],
    fanout_ttl_ms: u64,
) -> Result<Vec<Result<PushReply>>> {
    let Some(&(p, ..)) = jobs.first() else {
        return Ok(Vec::new());
    };
    let spread = store.sharded() && jobs.iter().any(|j| j.0 != p);
    match send(store, jobs, fanout_ttl_ms, spread).await? {
        Some(replies) => Ok(replies.into_iter().map(Ok).collect()),
        None => Ok(owners::apart(
            store,
            jobs,
            |j| j.0,
            |part| async move {
                let out = send(store, &part, fanout_ttl_ms, false).await?;
                out.ok_or_else(|| Error::unexpected(Some(part[0].0), "a call of one partition answered moved"))
            },
        )
        .await),
    }
}

/// One `push.lua` call for `jobs`; with `spread` (a cluster's call of several partitions) their keys
/// after the first partition's go in ARGV (add.lua's `add_spread`). `None`: the call answered `moved`.
async fn send(
    store: &Store,
    jobs: &[(u16, &str, &NewJob, Mode)],
    fanout_ttl_ms: u64,
    spread: bool,
) -> Result<Option<Vec<PushReply>>> {
    let Some(&(p, ..)) = jobs.first() else {
        return Ok(Some(Vec::new()));
    };
    // Each job's record and ready queue (and its children's), then the deduplication keys, in the order
    // of their jobs.
    let mut keys: Vec<String> = Vec::with_capacity(2 * jobs.len());
    for &(q, id, job, _) in jobs {
        let k = store.partition_keys(q);
        keys.push(k.job(id));
        keys.push(k.ready(&job.topic));
        for child in &job.fanout {
            keys.push(k.job(&child_id(id, &child.topic)));
            keys.push(k.ready(&child.topic));
        }
    }
    for &(q, _, job, _) in jobs {
        if let Some(d) = &job.dedup {
            keys.push(store.partition_keys(q).dedup(&job.topic, &d.key));
        }
    }
    let first = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(first.counts()).key(first.delayed());
    if spread {
        inv.arg("").arg(keys.len());
        for k in &keys {
            inv.arg(k);
        }
    } else {
        for k in &keys {
            inv.key(k);
        }
    }
    inv.arg(first.ready_channel()).arg(first.timer_channel());
    let mut add = |id: &str, job: &NewJob, mode: Option<Mode>, fanout_ttl_ms: u64| {
        inv.arg(id).arg(&job.topic);
        // A minted or given id's record is packed here, its three parts where the body, the ttr and
        // max attempts go.
        let parts = mode.filter(|&m| m != Mode::Retry).and_then(|_| new_record::parts(job));
        let options = options_arg(job, fanout_ttl_ms, parts.is_some());
        match &parts {
            Some(p) => inv.arg(&p.head[..]),
            None => inv.arg(&job.body),
        };
        match job.schedule {
            Due::Delay(d) => inv.arg(d).arg(""),
            Due::At(at) => inv.arg("").arg(at),
        };
        match &parts {
            Some(p) => inv.arg(&p.middle[..]).arg(&p.tail[..]),
            None => inv.arg(job.ttr_ms).arg(job.max_attempts),
        };
        // A fan-out's child: "3".
        let mode = mode.map_or("3", |m| m.arg(parts.is_some()));
        inv.arg(mode).arg(options);
    };
    for &(_, id, job, mode) in jobs {
        add(id, job, Some(mode), fanout_ttl_ms);
        for child in &job.fanout {
            add(&child_id(id, &child.topic), child, None, 0);
        }
    }
    let out: Value = store.write(p, &inv).await?;
    if owners::is_moved(&out) {
        return Ok(None);
    }
    let Value::Array(out) = out else {
        return Err(Error::unexpected(Some(p), "push returned no array"));
    };
    let bad = |what: &str| Error::unexpected(Some(p), format!("push returned {what}"));
    if out.len() != 1 + jobs.iter().map(|(_, _, job, _)| weight(job)).sum::<usize>() {
        return Err(bad("the wrong number of values"));
    }
    let now = int(&out[0]).ok_or_else(|| bad("no time"))?;
    // A fan-out's children were stored with it or not at all: its answer is its parent's, with their
    // states.
    let mut replies = out[1..].iter();
    let answers: Result<Vec<PushReply>> = jobs
        .iter()
        .map(|(_, _, job, _)| {
            let reply = replies.next().ok_or_else(|| bad("too few values"))?;
            let Value::Array(c) = reply else {
                // A packed job, stored: its state and due time follow from the clock.
                if int(reply) != Some(1) {
                    return Err(bad("an unknown answer"));
                }
                let run_at = match job.schedule {
                    Due::Delay(d) => now + d as i64,
                    Due::At(at) => at,
                };
                let state = if run_at <= now { State::Ready } else { State::Delayed };
                return Ok(PushReply::Stored {
                    state,
                    run_at,
                    children: Vec::new(),
                });
            };
            if c.len() != 4 {
                return Err(bad("an answer of the wrong length"));
            }
            let children = replies
                .by_ref()
                .take(job.fanout.len())
                .map(|c| match c {
                    Value::Array(c) if c.len() == 4 => text(&c[1]).and_then(|s| State::parse(&s)),
                    _ => None,
                })
                .collect();
            let status = int(&c[0]);
            if status == Some(0) {
                return Ok(PushReply::Conflict);
            }
            let state = text(&c[1])
                .and_then(|s| State::parse(&s))
                .ok_or_else(|| bad("an unknown state"))?;
            let run_at = int(&c[2]).ok_or_else(|| bad("no run_at"))?;
            match status {
                Some(1) => Ok(PushReply::Stored {
                    state,
                    run_at,
                    children,
                }),
                Some(2) => Ok(PushReply::Duplicate {
                    first: text(&c[3]).ok_or_else(|| bad("a duplicate without the first job's id"))?,
                    state,
                    run_at,
                }),
                _ => Err(bad("an unknown status")),
            }
        })
        .collect();
    answers.map(Some)
}

/// A job's options as push.lua takes them in one argument: `""` when it has none, else seven fields,
/// `dedup_ms;max_age_ms;backoff;priority;flow_key;children;trace`, each `""` when absent, the backoff
/// list comma-separated, the children a fan-out's: `<ttl_ms> <topic>,<topic>,...` (its parent stored
/// done, expiring `ttl_ms` after its due time); the trace context comes last, in its stored form
/// ([`crate::trace::TraceContext::stored`]), which the script reads to the end of the string (a
/// `tracestate` may hold `;`). A job whose only option is its trace context, the common case, sends the
/// stored context alone, which the script tells apart by its first character, `A`; one whose only option
/// is its flow key sends `~<key>`, and one whose only option is its priority `!<priority>`. With
/// `packed`, the job's record is packed by the caller ([`new_record`]) and holds its backoff list and
/// trace context, which the script then needs not: they are left out.
pub(crate) fn options_arg(job: &NewJob, fanout_ttl_ms: u64, packed: bool) -> String {
    let priority = job.stored_priority();
    let (backoff, trace) = match packed {
        true => (None, None),
        false => (job.backoff_ms.as_ref(), job.trace.as_ref()),
    };
    if job.dedup.is_none() && job.max_age_ms.is_none() && backoff.is_none() && job.fanout.is_empty() {
        // The commonest options alone are sent bare, so the scripts need not split seven fields: a trace
        // context (its stored form starts with `A`), a flow key as `~<key>` (a flow key, an id, never
        // starts with `~`, nor holds `;`), or a priority as `!<priority>`.
        match (priority, &job.flow_key, trace) {
            (None, None, trace) => return trace.map(|t| t.stored()).unwrap_or_default(),
            (None, Some(key), None) => return format!("~{key}"),
            (Some(p), None, None) => return format!("!{p}"),
            _ => {}
        }
    }
    let field = |v: Option<String>| v.unwrap_or_default();
    let children = if job.fanout.is_empty() {
        String::new()
    } else {
        let topics: Vec<&str> = job.fanout.iter().map(|c| c.topic.as_str()).collect();
        format!("{fanout_ttl_ms} {}", topics.join(","))
    };
    format!(
        "{};{};{};{};{};{children};{}",
        field(job.dedup.as_ref().map(|d| d.window_ms.to_string())),
        field(job.max_age_ms.map(|a| a.to_string())),
        field(backoff.map(|l| l.iter().map(u64::to_string).collect::<Vec<_>>().join(","))),
        field(priority.map(|p| p.to_string())),
        job.flow_key.as_deref().unwrap_or_default(),
        field(trace.map(|t| t.stored())),
    )
}
