//! `promote.lua`: move one partition's due jobs to ready, or hand them, reserved, to waiting dq-consumer
//! workers (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use futures_util::StreamExt;
use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::reservations::Waiting;
use crate::store::decode::{int, text};
use crate::store::{Store, owners};
use crate::trace::TraceContext;

script!(
    /// Move due jobs of one bucket to ready (the timer).
    SCRIPT,
    record + flow + publish + ("promote_plain.lua", "handoff.lua") + "promote.lua"
);

/// What a promotion call did in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// Jobs moved, to ready or handed to a waiting worker.
    pub moved: usize,
    /// Earliest due time left in the delay set, Unix ms (Redis's clock).
    pub next_due: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
    /// Jobs handed to each waiting worker, in the order they were given.
    pub handed: Vec<u32>,
    /// For each moved job, how late it was moved (now − due), ms.
    pub lateness_ms: Vec<i64>,
    /// The moved jobs that carry a trace context (dq-timer makes a span for each), when this process
    /// exports spans; else none.
    pub traced: Vec<TracedMove>,
}

/// A moved job with a trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedMove {
    /// The job's id.
    pub id: String,
    /// Its topic.
    pub topic: String,
    /// Its trace context, as stored.
    pub trace: TraceContext,
    /// How late it was moved (now − due), ms.
    pub lateness_ms: i64,
    /// Handed, reserved, to a waiting worker (else moved to its ready queue).
    pub handed: bool,
}

/// Most partitions one `promote.lua` call takes: each may move up to a batch of jobs, and a call holds
/// Redis for its whole length.
pub(crate) const MOST_PARTITIONS_PER_CALL: usize = 16;

/// Most `promote.lua` calls of one [`call_many`] out at once (a cluster's partitions before its map is
/// read each go alone).
const CALLS_IN_FLIGHT: usize = 16;

/// One `promote.lua` call on partition `p`: moves up to `limit` due jobs to ready, or hands them, reserved,
/// to the `waiting` workers of their topics (see [`crate::reservations::handoff`]).
pub(crate) async fn call(store: &Store, p: u16, limit: u32, waiting: &[Waiting]) -> Result<Promoted> {
    let mut out = send(store, &[p], limit, waiting, false)
        .await?
        .ok_or_else(|| Error::unexpected(Some(p), "a promotion of one partition answered moved"))?;
    out.pop()
        .ok_or_else(|| Error::unexpected(Some(p), "promote returned no answer"))
}

/// Promotes every partition of `parts` with as few `promote.lua` calls as their nodes allow: one per
/// node (every partition on a single Redis; on a cluster, per primary as [`Store::nodes`] last read
/// them) and at most [`MOST_PARTITIONS_PER_CALL`] partitions, the calls side by side. The `waiting`
/// workers' slots are shared out among the calls (each at least 1), and within a call among its
/// partitions in turn. A cluster's call that finds one of its partitions elsewhere, having written
/// nothing, is sent again a partition at a time, and so is a call Redis answered with an error.
/// Answers per partition, in the order of `parts`.
pub(crate) async fn call_many(
    store: &Store,
    parts: &[u16],
    limit: u32,
    waiting: &[Waiting],
) -> Vec<(u16, Result<Promoted>)> {
    let nodes = store.nodes();
    let mut groups: Vec<Vec<u16>> = Vec::new();
    let mut of_node: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for &p in parts {
        let node = nodes.get(p as usize).copied().unwrap_or(u32::MAX - p as u32);
        let g = match of_node.get(&node) {
            Some(&g) if groups[g].len() < MOST_PARTITIONS_PER_CALL => g,
            _ => {
                groups.push(Vec::new());
                of_node.insert(node, groups.len() - 1);
                groups.len() - 1
            }
        };
        groups[g].push(p);
    }
    let share = &shares(waiting, groups.len());
    let calls = groups
        .into_iter()
        .map(|group| promote_group(store, group, limit, share));
    let answers: Vec<Vec<(u16, Result<Promoted>)>> = futures_util::stream::iter(calls)
        .buffered(CALLS_IN_FLIGHT)
        .collect()
        .await;
    answers.into_iter().flatten().collect()
}

/// One call of [`call_many`] for the partitions of `group` (one node's), or, when it answered `moved`,
/// one call for each.
async fn promote_group(
    store: &Store,
    group: Vec<u16>,
    limit: u32,
    waiting: &[Waiting],
) -> Vec<(u16, Result<Promoted>)> {
    let spread = store.sharded() && group.len() > 1;
    match send(store, &group, limit, waiting, spread).await {
        Ok(Some(outs)) if outs.len() == group.len() => group.into_iter().zip(outs.into_iter().map(Ok)).collect(),
        Ok(Some(_)) => group
            .into_iter()
            .map(|p| {
                (
                    p,
                    Err(Error::unexpected(
                        Some(p),
                        "promote answered the wrong number of partitions",
                    )),
                )
            })
            .collect(),
        Ok(None) => {
            store.nodes_moved();
            tracing::debug!(
                "a promotion over several partitions found one not served by its node; sent a partition at a time"
            );
            alone(store, group, limit, waiting).await
        }
        // An error Redis answered may be one partition's (a key of the wrong type, say): the others must
        // not wait behind it, so each goes alone, and only its own call fails.
        Err(Error::Redis { .. }) if group.len() > 1 => alone(store, group, limit, waiting).await,
        Err(e) => group.into_iter().map(|p| (p, Err(e.duplicate()))).collect(),
    }
}

/// A call for each partition of `group`, one after another, each with an even share of the `waiting`
/// workers' slots (at least 1).
async fn alone(store: &Store, group: Vec<u16>, limit: u32, waiting: &[Waiting]) -> Vec<(u16, Result<Promoted>)> {
    let share = shares(waiting, group.len());
    let mut answers = Vec::with_capacity(group.len());
    for p in group {
        answers.push((p, call(store, p, limit, &share).await));
    }
    answers
}

/// The `waiting` workers with an `n`th of their slots each (at least 1), for `n` calls.
fn shares(waiting: &[Waiting], n: usize) -> Vec<Waiting> {
    waiting
        .iter()
        .map(|w| Waiting {
            slots: w.slots.div_ceil(n.max(1) as u32),
            ..w.clone()
        })
        .collect()
}

/// One `promote.lua` call for `parts` (the first's keys declared, the others named by their prefixes;
/// with `spread`, a cluster's call, checked to be served by the node). `None`: it answered `moved`.
async fn send(
    store: &Store,
    parts: &[u16],
    limit: u32,
    waiting: &[Waiting],
    spread: bool,
) -> Result<Option<Vec<Promoted>>> {
    let p = parts[0];
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.delayed())
        .key(keys.counts())
        .key(keys.reserved())
        .key(keys.announced())
        .arg(keys.prefix())
        .arg(limit)
        .arg(keys.ready_channel())
        .arg(keys.timer_channel())
        .arg(crate::attempt::receipt_nonce())
        .arg(if crate::telemetry::spans::exporting() { "1" } else { "" })
        .arg(parts.len() - 1)
        .arg(if spread { "1" } else { "" });
    for &q in &parts[1..] {
        inv.arg(store.partition_keys(q).prefix());
    }
    for w in waiting {
        inv.arg(&w.topic)
            .arg(keys.handoff_channel(&w.consumer))
            .arg(w.slots)
            .arg(w.least_ttr_ms);
    }
    let out: Value = store.run(p, &inv).await?;
    if owners::is_moved(&out) {
        return Ok(None);
    }
    let Value::Array(outs) = out else {
        return Err(Error::unexpected(Some(p), "promote returned no array"));
    };
    if outs.len() != parts.len() {
        return Err(Error::unexpected(
            Some(p),
            "promote answered the wrong number of partitions",
        ));
    }
    parts
        .iter()
        .zip(outs)
        .map(|(&q, out)| match out {
            Value::Array(out) => parse(q, &out, waiting.len()),
            _ => Err(Error::unexpected(Some(q), "promote returned a malformed answer")),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// One partition's answer.
fn parse(p: u16, out: &[Value], waiters_given: usize) -> Result<Promoted> {
    let bad = || Error::unexpected(Some(p), "promote returned a malformed answer");
    let ints = |vs: &[Value]| vs.iter().map(|v| int(v).ok_or_else(bad)).collect::<Result<Vec<i64>>>();
    let head = ints(out.get(..4).ok_or_else(bad)?)?;
    let (moved, waiters) = (head[0].max(0) as usize, head[3].max(0) as usize);
    let handed = ints(out.get(4..4 + waiters).ok_or_else(bad)?)?;
    let lateness = ints(out.get(4 + waiters..4 + waiters + moved).ok_or_else(bad)?)?;
    if handed.len() != waiters_given {
        return Err(bad());
    }
    let rest = &out[4 + waiters + moved..];
    if !rest.len().is_multiple_of(5) {
        return Err(bad());
    }
    let traced = rest
        .chunks(5)
        .filter_map(|c| {
            // A trace that does not read back is no trace: the job moved all the same.
            let trace = text(&c[2]).and_then(|tc| TraceContext::from_stored(&tc))?;
            Some(TracedMove {
                id: text(&c[0])?,
                topic: text(&c[1])?,
                trace,
                lateness_ms: int(&c[3])?,
                handed: int(&c[4])? == 1,
            })
        })
        .collect();
    Ok(Promoted {
        moved,
        next_due: (head[1] >= 0).then_some(head[1]),
        now: head[2],
        handed: handed.iter().map(|n| *n as u32).collect(),
        lateness_ms: lateness,
        traced,
    })
}
