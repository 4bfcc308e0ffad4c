//! `promote.lua`: move one partition's due jobs to ready, or hand them, reserved, to waiting dq-consumer
//! workers (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::reservations::Waiting;
use crate::store::Store;
use crate::store::decode::{int, text};
use crate::trace::TraceContext;

script!(
    /// Move due jobs of one bucket to ready (the timer).
    SCRIPT,
    record + flow + publish + "handoff.lua" + "promote.lua"
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

/// One `promote.lua` call on partition `p`: moves up to `limit` due jobs to ready, or hands them, reserved,
/// to the `waiting` workers of their topics (see [`crate::reservations::handoff`]).
pub(crate) async fn call(store: &Store, p: u16, limit: u32, waiting: &[Waiting]) -> Result<Promoted> {
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
        .arg(if crate::telemetry::spans::exporting() { "1" } else { "" });
    for w in waiting {
        inv.arg(&w.topic)
            .arg(keys.handoff_channel(&w.consumer))
            .arg(w.slots)
            .arg(w.least_ttr_ms);
    }
    let out: Vec<Value> = store.run(p, &inv).await?;
    let bad = || Error::unexpected(Some(p), "promote returned a malformed answer");
    let ints = |vs: &[Value]| vs.iter().map(|v| int(v).ok_or_else(bad)).collect::<Result<Vec<i64>>>();
    let head = ints(out.get(..4).ok_or_else(bad)?)?;
    let (moved, waiters) = (head[0].max(0) as usize, head[3].max(0) as usize);
    let handed = ints(out.get(4..4 + waiters).ok_or_else(bad)?)?;
    let lateness = ints(out.get(4 + waiters..4 + waiters + moved).ok_or_else(bad)?)?;
    if handed.len() != waiting.len() {
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
