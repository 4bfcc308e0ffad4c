//! `reschedule.lua`: give a delayed or ready job a new due time, a new priority, or both (see its header
//! for KEYS and ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::job::{Due, State};
use crate::store::Store;
use crate::store::decode::{int, text};

script!(
    /// Give a delayed or ready job a new due time or priority.
    SCRIPT,
    record + flow + publish + "reschedule.lua"
);

/// What a reschedule came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RescheduleReply {
    /// The job is due at `run_at` now, in `state` (delayed, or ready when already due).
    Moved {
        /// Delayed or ready.
        state: State,
        /// The new due time, Unix ms (Redis's clock).
        run_at: i64,
    },
    /// No job has this id.
    NoJob,
    /// The job is in a state that has no due time to change: nothing changed.
    NotMovable {
        /// The state it is in, as stored.
        state: String,
    },
}

/// One `reschedule.lua` call for job `id` of partition `p`: due after a delay, or at a time (`None`: the
/// due time stays), and a new priority (`None`: it stays).
pub(crate) async fn call(
    store: &Store,
    p: u16,
    id: &str,
    schedule: Option<Due>,
    priority: Option<u32>,
) -> Result<RescheduleReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.delayed())
        .key(keys.counts())
        .arg(keys.prefix())
        .arg(id);
    match schedule {
        Some(Due::Delay(d)) => inv.arg(d).arg(""),
        Some(Due::At(at)) => inv.arg("").arg(at),
        None => inv.arg("").arg(""),
    };
    inv.arg(keys.ready_channel())
        .arg(keys.timer_channel())
        .arg(priority.map(|p| p.to_string()).unwrap_or_default());
    let out: Vec<Value> = store.write(p, &inv).await?;
    let malformed = || Error::unexpected(Some(p), "reschedule returned a malformed answer");
    match out.first().and_then(int) {
        Some(1) => {
            let state = out.get(1).and_then(text).and_then(|s| State::parse(&s));
            match (state, out.get(2).and_then(int)) {
                (Some(state), Some(run_at)) => Ok(RescheduleReply::Moved { state, run_at }),
                _ => Err(malformed()),
            }
        }
        Some(0) => match out.get(1).and_then(text) {
            Some(state) if state == "not_found" => Ok(RescheduleReply::NoJob),
            Some(state) => Ok(RescheduleReply::NotMovable { state }),
            None => Err(malformed()),
        },
        _ => Err(malformed()),
    }
}
