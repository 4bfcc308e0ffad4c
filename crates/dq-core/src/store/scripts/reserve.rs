//! `reserve.lua`: reserve ready jobs of one partition over topics in priority order (see its header for
//! KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};
use serde_json::value::RawValue;

use super::Waking;
use crate::error::{Error, Result};
use crate::flow::FlowLimits;
use crate::job::Reservation;
use crate::store::Store;
use crate::store::decode::{int, text};
use crate::trace::TraceContext;

script!(
    /// Reserve ready jobs over topics in priority order.
    SCRIPT,
    record + flow + publish + "reserve.lua"
);

/// What a reserve took in one partition.
#[derive(Debug)]
pub(crate) struct ReserveReply {
    /// The jobs reserved, in the order taken.
    pub(crate) jobs: Vec<Reservation>,
    /// The queues may still hold jobs (false: they are empty).
    pub(crate) more: bool,
}

/// One `reserve.lua` call on partition `p`: up to `count` ready jobs of `topics` (highest priority first;
/// with `best_first`, the queue whose first job comes first instead), each reservation lasting at least
/// `least_ttr_ms`. `flows`: each topic's flow limits, in the order of `topics`.
pub(crate) async fn call(
    store: &Store,
    p: u16,
    topics: &[String],
    flows: &[FlowLimits],
    count: usize,
    least_ttr_ms: Option<u64>,
    best_first: bool,
) -> Result<ReserveReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.reserved()).key(keys.counts()).key(keys.announced());
    for t in topics {
        inv.key(keys.ready(t));
    }
    // Receipts carry the time they were made (the attempt's start in the job's history).
    inv.arg(keys.prefix()).arg(count).arg(crate::attempt::receipt_nonce());
    match least_ttr_ms {
        Some(t) => inv.arg(t),
        None => inv.arg(""),
    };
    inv.arg(keys.timer_channel()).arg(if best_first { "1" } else { "" });
    for f in flows {
        inv.arg(f.arg());
    }
    let out: Vec<Value> = store.run(p, &inv).await?;
    let bad = || Error::unexpected(Some(p), "reserve returned a malformed job");
    let (more, jobs) = out.split_last().ok_or_else(bad)?;
    let jobs = jobs
        .chunks(10)
        .map(|c| {
            if c.len() != 10 {
                return Err(bad());
            }
            let body = text(&c[2]).ok_or_else(bad)?;
            let trace = text(&c[9]).and_then(|tc| TraceContext::from_stored(&tc));
            Ok(Reservation {
                id: text(&c[0]).ok_or_else(bad)?,
                topic: text(&c[1]).ok_or_else(bad)?,
                body: RawValue::from_string(body).map_err(|_| bad())?,
                attempt: int(&c[3]).ok_or_else(bad)? as u32,
                receipt: text(&c[4]).ok_or_else(bad)?,
                deadline: int(&c[5]).ok_or_else(bad)?,
                run_at: int(&c[6]).ok_or_else(bad)?,
                ttr_ms: int(&c[7]).ok_or_else(bad)? as u64,
                flow_key: text(&c[8]).filter(|k| !k.is_empty()),
                traceparent: trace.as_ref().map(|t| t.traceparent.clone()),
                tracestate: trace.and_then(|t| t.tracestate),
            })
        })
        .collect::<Result<_>>()?;
    Ok(ReserveReply {
        jobs,
        more: int(more).ok_or_else(bad)? != 0,
    })
}
