//! `coalesce.lua`: one push of a `last` or `merge` coalescing key (see its header for KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use super::push::options_arg;
use crate::coalesce::{CoalesceMode, Coalescing, PUSH_MEMORY_MS};
use crate::error::{Error, Result};
use crate::job::{NewJob, State};
use crate::store::Store;
use crate::store::decode::{int, text};

script!(
    /// One push of a `last` or `merge` coalescing key.
    SCRIPT,
    record + flow + publish + "coalesce.lua"
);

/// What `coalesce.lua` made of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CoalesceReply {
    /// How the push went in.
    pub outcome: Outcome,
    /// The job it went into.
    pub id: String,
    /// That job's state now (`None`: it is gone, for a push found again after its job left).
    pub state: Option<State>,
    /// Its due time, Unix ms.
    pub run_at: i64,
}

/// How a push went in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It made a new job, the key's pending one.
    New,
    /// It went into the pending job.
    Joined,
    /// It was there already: the same push sent again. Nothing changed.
    Again,
}

/// One `coalesce.lua` call on partition `p` for `job` (whose [`Coalescing`] is `c`), `push_id` its id
/// within the key, `new_id` the id a new job gets.
pub(crate) async fn call(
    store: &Store,
    p: u16,
    job: &NewJob,
    c: &Coalescing,
    push_id: &str,
    new_id: &str,
    max_body_bytes: usize,
) -> Result<CoalesceReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.counts())
        .key(keys.delayed())
        .key(keys.coalesce(&job.topic, &c.key))
        .key(keys.coalesced(&job.topic, &c.key, push_id))
        .key(keys.job(new_id))
        .key(keys.ready(&job.topic));
    inv.arg(keys.ready_channel())
        .arg(keys.timer_channel())
        .arg(match c.mode {
            CoalesceMode::Merge => "merge",
            _ => "last",
        })
        .arg(new_id)
        .arg(&job.topic)
        .arg(&job.body)
        .arg(c.window_ms)
        .arg(c.max_wait_ms.map(|w| w.to_string()).unwrap_or_default())
        .arg(c.max_items.map(|n| n.to_string()).unwrap_or_default())
        .arg(job.ttr_ms)
        .arg(job.max_attempts)
        .arg(options_arg(job, 0, false))
        .arg(max_body_bytes)
        .arg(PUSH_MEMORY_MS);
    let out: Vec<Value> = store.write(p, &inv).await?;
    let bad = |what: &str| Error::unexpected(Some(p), format!("coalesce returned {what}"));
    if out.len() != 4 {
        return Err(bad("the wrong number of values"));
    }
    let outcome = match int(&out[0]) {
        Some(0) => Outcome::New,
        Some(1) => Outcome::Joined,
        Some(2) => Outcome::Again,
        _ => return Err(bad("an unknown status")),
    };
    let state = text(&out[2]).ok_or_else(|| bad("no state"))?;
    Ok(CoalesceReply {
        outcome,
        id: text(&out[1]).ok_or_else(|| bad("no id"))?,
        state: State::parse(&state),
        run_at: int(&out[3]).ok_or_else(|| bad("no due time"))?,
    })
}
