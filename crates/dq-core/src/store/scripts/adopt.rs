//! `adopt.lua`: take in one job converted from the layout of releases before partitions (see its header
//! for KEYS and ARGV).

use std::sync::LazyLock;

use redis::Script;

use crate::error::{Error, Result};
use crate::job::State;
use crate::store::Store;

script!(
    /// Take in one job converted from the shard layout (dq-checker migrate).
    SCRIPT,
    "adopt.lua"
);

/// Where an adopted job goes besides its record: the structure its state names, with its score there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    /// The job's topic.
    pub(crate) topic: &'a str,
    /// Its state: delayed, ready, reserved or dead (a done job is only a record: no place).
    pub(crate) state: State,
    /// Its score in the structure.
    pub(crate) score: f64,
}

/// What one adoption came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdoptReply {
    /// The job is here now.
    Adopted,
    /// The job was here already (an earlier, interrupted conversion took it).
    AlreadyHere,
}

/// One `adopt.lua` call on partition `p`: job `id`'s record as DUMPed (`dump`), with `pttl_ms` left to
/// live (0 or less: none), and its place (`None`, or a `Done` state: only the record).
pub(crate) async fn call(
    store: &Store,
    p: u16,
    id: &str,
    dump: &[u8],
    pttl_ms: i64,
    place: Option<Place<'_>>,
) -> Result<AdoptReply> {
    let keys = store.partition_keys(p);
    let structure = place.and_then(|place| {
        let key = match place.state {
            State::Delayed => keys.delayed(),
            State::Ready => keys.ready(place.topic),
            State::Reserved => keys.reserved(),
            State::Dead => keys.dead(place.topic),
            State::Done => return None,
        };
        Some((key, place))
    });
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(keys.job(id)).key(keys.counts());
    if let Some((key, _)) = &structure {
        inv.key(key);
    }
    inv.arg(id)
        .arg(dump)
        .arg(pttl_ms.max(0))
        .arg(structure.as_ref().map_or(0.0, |(_, place)| place.score));
    match &structure {
        Some((_, place)) => inv.arg(format!("{}:{}", place.topic, place.state.as_str())),
        None => inv.arg(""),
    };
    match store.write::<i64>(p, &inv).await? {
        1 => Ok(AdoptReply::Adopted),
        0 => Ok(AdoptReply::AlreadyHere),
        other => Err(Error::unexpected(Some(p), format!("adopt returned {other}"))),
    }
}
