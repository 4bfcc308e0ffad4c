//! Reads of a partition's structures, the sorted sets that hold job ids: the delay set, the ready queues,
//! the reserved set and the dead lists. Their writes are scripts.

use crate::error::Result;
use crate::job::State;
use crate::store::Store;
use crate::store::keys::PartitionKeys;

/// A sorted set's entries as Redis gives them: (id, score).
pub(crate) type Entries = Vec<(String, f64)>;

/// One of a partition's structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Structure<'a> {
    /// The delay set: ids by due time.
    Delayed,
    /// A topic's ready queue: ids by priority or due time, and its flow keys' turns (`~<key>`).
    Ready(&'a str),
    /// A flow key's ready jobs while it takes turns (topic, key): ids by priority or due time (`flow.lua`;
    /// a straight key's are in [`Structure::Ready`]).
    Flow(&'a str, &'a str),
    /// The reserved set: ids by deadline.
    Reserved,
    /// A topic's dead list: ids by time of death.
    Dead(&'a str),
}

impl<'a> Structure<'a> {
    /// The structure that `state` names for a job of `topic` with flow key `flow` (a done job is in none).
    pub(crate) fn of(state: State, topic: &'a str, flow: Option<&'a str>) -> Option<Self> {
        match state {
            State::Delayed => Some(Structure::Delayed),
            State::Ready => Some(flow.map_or(Structure::Ready(topic), |k| Structure::Flow(topic, k))),
            State::Reserved => Some(Structure::Reserved),
            State::Dead => Some(Structure::Dead(topic)),
            State::Done => None,
        }
    }

    /// Its key in the partition of `keys`.
    pub(crate) fn key(&self, keys: &PartitionKeys) -> String {
        match self {
            Structure::Delayed => keys.delayed(),
            Structure::Ready(topic) => keys.ready(topic),
            Structure::Flow(topic, key) => keys.flow_queue(topic, key),
            Structure::Reserved => keys.reserved(),
            Structure::Dead(topic) => keys.dead(topic),
        }
    }
}

/// `structure`'s entries of partition `p` from the lowest score to index `stop` (inclusive; a negative
/// `stop` counts from the end, as ZRANGE does).
pub(crate) async fn head(store: &Store, p: u16, structure: Structure<'_>, stop: i64) -> Result<Entries> {
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(structure.key(store.partition_keys(p)))
        .arg(0)
        .arg(stop)
        .arg("WITHSCORES");
    store.query(p, &cmd).await
}

/// How many entries `structure` holds in partition `p`, and its [`head`] to `stop`, read together.
pub(crate) async fn len_and_head(store: &Store, p: u16, structure: Structure<'_>, stop: i64) -> Result<(u64, Entries)> {
    let key = structure.key(store.partition_keys(p));
    let mut pipe = redis::pipe();
    pipe.cmd("ZCARD")
        .arg(&key)
        .cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(stop)
        .arg("WITHSCORES");
    store.pipe(p, &pipe).await
}

/// `structure`'s [`head`] to `stop` in partition `p`, and the partition's counts field `field` (as
/// stored, if any), read together.
pub(crate) async fn head_and_count(
    store: &Store,
    p: u16,
    structure: Structure<'_>,
    stop: i64,
    field: &str,
) -> Result<(Entries, Option<i64>)> {
    let keys = store.partition_keys(p);
    let mut pipe = redis::pipe();
    pipe.cmd("ZRANGE")
        .arg(structure.key(keys))
        .arg(0)
        .arg(stop)
        .arg("WITHSCORES")
        .cmd("HGET")
        .arg(keys.counts())
        .arg(field);
    store.pipe(p, &pipe).await
}

/// How many entries of `structure` in partition `p` have a score below `below`.
pub(crate) async fn count_below(store: &Store, p: u16, structure: Structure<'_>, below: f64) -> Result<u64> {
    let mut cmd = redis::cmd("ZCOUNT");
    // Rust writes a float without an exponent, which Redis reads; `(` makes the bound exclusive.
    cmd.arg(structure.key(store.partition_keys(p)))
        .arg("-inf")
        .arg(format!("({below}"));
    store.query(p, &cmd).await
}
