//! `nack.lua`: a reservation failed: the job backs off, or goes dead (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::job::State;
use crate::store::Store;
use crate::store::decode::{int, text};

script!(
    /// Fail a reservation: back off, or dead.
    SCRIPT,
    record + flow + publish + "nack.lua"
);

/// What a nack came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NackReply {
    /// The reservation is over: the job is delayed (its backoff), ready (no delay) or dead.
    Moved {
        /// Delayed, ready or dead.
        state: State,
        /// When it is due again (for a dead job: when it died), Unix ms (Redis's clock).
        run_at: i64,
        /// The job's topic.
        topic: String,
    },
    /// No job has this id.
    NoJob,
    /// The receipt does not name the job's current reservation: nothing changed.
    StaleReceipt,
}

/// How a nack fails its job.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NackAsk<'a> {
    /// Back off this long (else the job's own backoff list, else `backoff_ms`).
    pub(crate) delay_ms: Option<u64>,
    /// Kept as its last error.
    pub(crate) error: Option<&'a str>,
    /// The i-th delay after the i-th failure, the last repeating.
    pub(crate) backoff_ms: &'a [u64],
    /// The job's flow key, if it has one, gets no reservation for this long (0: none).
    pub(crate) pause_ms: u64,
    /// The attempt's entry for the job's history (`attempt.rs`; empty: none is kept).
    pub(crate) entry: &'a [u8],
}

/// One `nack.lua` call for job `id` of partition `p` under `receipt`, as `ask` says.
pub(crate) async fn call(store: &Store, p: u16, id: &str, receipt: &str, ask: NackAsk<'_>) -> Result<NackReply> {
    let NackAsk {
        delay_ms,
        error,
        backoff_ms,
        pause_ms,
        entry,
    } = ask;
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.reserved())
        .key(keys.delayed())
        .key(keys.counts())
        .key(keys.events())
        .arg(keys.prefix())
        .arg(id)
        .arg(receipt)
        .arg(error.unwrap_or(""));
    match delay_ms {
        Some(d) => inv.arg(d),
        None => inv.arg(""),
    };
    inv.arg(keys.ready_channel())
        .arg(keys.timer_channel())
        .arg(pause_ms)
        .arg(entry);
    for d in backoff_ms {
        inv.arg(*d);
    }
    let out: Vec<Value> = store.write(p, &inv).await?;
    match out.first().and_then(int) {
        Some(1) => {
            let state = out.get(1).and_then(text).and_then(|s| State::parse(&s));
            match (state, out.get(2).and_then(int), out.get(3).and_then(text)) {
                (Some(state), Some(run_at), Some(topic)) => Ok(NackReply::Moved { state, run_at, topic }),
                _ => Err(malformed(p)),
            }
        }
        Some(0) => Ok(NackReply::NoJob),
        Some(-1) => Ok(NackReply::StaleReceipt),
        _ => Err(malformed(p)),
    }
}

fn malformed(p: u16) -> Error {
    Error::unexpected(Some(p), "nack returned a malformed answer")
}
