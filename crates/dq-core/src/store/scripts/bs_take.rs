//! `bs_take.lua`: beanstalkd's reserve-job, the reservation of one given job (see its header for KEYS and
//! ARGV).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Waking;
use crate::error::{Error, Result};
use crate::job::Reservation;
use crate::store::Store;
use crate::store::decode::{int, text};

script!(
    /// beanstalkd's reserve-job: reserve one given job.
    SCRIPT,
    record + flow + publish + "bs_take.lua"
);

/// What one reserve-job came to.
#[derive(Debug)]
pub(crate) enum BsTakeReply {
    /// The job is reserved now.
    Taken(Reservation),
    /// The job is not ready, delayed or buried, or there is none: nothing changed.
    NotTakeable,
}

/// One `bs_take.lua` call: reserves job `id` (in its partition `p`) under `receipt`.
pub(crate) async fn call(store: &Store, p: u16, id: &str, receipt: &str) -> Result<BsTakeReply> {
    let keys = store.partition_keys(p);
    let mut inv = store.script(&SCRIPT).prepare_invoke();
    inv.key(keys.job(id))
        .key(keys.reserved())
        .key(keys.delayed())
        .key(keys.counts())
        .key(keys.announced())
        .arg(keys.prefix())
        .arg(id)
        .arg(receipt)
        .arg(keys.timer_channel());
    let out: Option<Vec<Value>> = store.write(p, &inv).await?;
    let Some(out) = out else {
        return Ok(BsTakeReply::NotTakeable);
    };
    let bad = || Error::unexpected(Some(p), "reserve-job returned a malformed job");
    let body = out.get(1).and_then(text).ok_or_else(bad)?;
    Ok(BsTakeReply::Taken(Reservation {
        id: id.to_string(),
        topic: out.first().and_then(text).ok_or_else(bad)?,
        body: serde_json::value::RawValue::from_string(body).map_err(|_| bad())?,
        attempt: out.get(2).and_then(int).ok_or_else(bad)? as u32,
        receipt: out.get(3).and_then(text).ok_or_else(bad)?,
        deadline: out.get(4).and_then(int).ok_or_else(bad)?,
        run_at: 0,
        ttr_ms: out.get(5).and_then(int).ok_or_else(bad)? as u64,
        // Only dq-consumer acts on a flow key (a 429 pauses the key); the protocol has none.
        flow_key: None,
        traceparent: None,
        tracestate: None,
    }))
}
