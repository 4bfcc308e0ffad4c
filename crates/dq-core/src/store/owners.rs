//! Which node of a Redis Cluster serves each partition, so that the calls that may carry several
//! partitions' jobs (`push.lua`, `ack.lua`) go one per node instead of one per partition: a group of
//! 500 pushes with producers' ids touches about 220 of 256 partitions, and each call's own cost
//! (Redis's clock, the counts, the wake-ups) was most of the cost of the one or two jobs it carried.
//!
//! The map is read from `CLUSTER SLOTS` when the process connects, then at most every [`FRESH_FOR`] by a
//! task of its own (a caller never waits for it), and again after a call found one of its partitions
//! elsewhere ([`Owners::stale`]). It may be out of date (a slot moves at any time), and nothing depends
//! on it being right: a call over several partitions first checks, before its first
//! write, that its node serves each of them and that none is moving (add.lua's `add_served`), and if
//! not it writes nothing and answers so; its jobs are then sent a partition at a time, as they were
//! before, by calls that follow MOVED and ASK. On a single Redis (standalone, Sentinel) every partition
//! is on the one node, and the map is never read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::Store;
use super::connection::Redis;
use super::partition::{Partitions, slot_of};
use crate::error::{Error, Result};

/// How long a map read from the cluster is used before it is read again.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(5);

/// A partition's node as [`Owners::nodes`] gives it: every partition whose node is not known gets a
/// value of its own from here on (its own partition's number added), so it goes in calls of its own.
const UNKNOWN: u32 = 1 << 20;

/// The node of each partition on a cluster, read in the background when first needed and again once
/// [`FRESH_FOR`] old.
#[derive(Debug)]
pub(crate) struct Owners {
    /// Every partition alone (no two with one value): the map until one is read, and after a call
    /// found it wrong.
    alone: Arc<[u32]>,
    state: Mutex<Read>,
}

#[derive(Debug, Default)]
struct Read {
    /// The last map read: per partition, its node's index among the nodes that serve slots, or
    /// [`UNKNOWN`] and more.
    map: Option<Arc<[u32]>>,
    /// When it was read (or its reading failed); `None`: read it at the next call.
    at: Option<Instant>,
    /// A reading is under way.
    reading: bool,
}

impl Owners {
    /// Owners of `partitions`, none known yet.
    pub(crate) fn new(partitions: &Partitions) -> Self {
        Owners {
            alone: partitions.all().map(|p| UNKNOWN + p as u32).collect(),
            state: Mutex::new(Read::default()),
        }
    }

    /// Per partition, the node that serves it: equal values, one node. Never waits: when the map is
    /// older than [`FRESH_FOR`] (or was found wrong), a task reads the cluster's slots again
    /// (`CLUSTER SLOTS`, one round trip), and meanwhile the map in hand answers, or, before the first
    /// reading, every partition alone (calls a partition at a time, as a failover finds them). A
    /// partition whose node cannot be told (a slot without an owner) has a value no other has.
    pub(crate) fn nodes(self: &Arc<Self>, redis: &Redis, partitions: &Partitions) -> Arc<[u32]> {
        let mut read = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !read.reading && read.at.is_none_or(|at| at.elapsed() >= FRESH_FOR) {
            read.reading = true;
            let (me, redis, partitions) = (self.clone(), redis.clone(), partitions.clone());
            tokio::spawn(async move { me.read(&redis, &partitions).await });
        }
        read.map.clone().unwrap_or_else(|| self.alone.clone())
    }

    /// Reads the cluster's slots now (at start, so that the first calls carry every partition of a
    /// primary), unless a reading is under way.
    pub(crate) async fn read_now(&self, redis: &Redis, partitions: &Partitions) {
        {
            let mut read = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if read.reading {
                return;
            }
            read.reading = true;
        }
        self.read(redis, partitions).await;
    }

    /// Reads the map (`reading` set by the caller), keeping the one in hand when the reading fails.
    async fn read(&self, redis: &Redis, partitions: &Partitions) {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let map = match redis.query::<Value>(&cmd).await {
            Ok(slots) => Some(by_partition(&slots, partitions).into()),
            Err(e) => {
                tracing::debug!(cause = %e, "CLUSTER SLOTS failed; the nodes are read again later");
                None
            }
        };
        let mut read = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if map.is_some() {
            read.map = map;
        }
        read.at = Some(Instant::now());
        read.reading = false;
    }

    /// A call found a partition not served where the map said: every partition alone until the map is
    /// read again, which the next call starts.
    pub(crate) fn stale(&self) {
        let mut read = self.state.lock().unwrap_or_else(|e| e.into_inner());
        read.map = None;
        read.at = None;
    }
}

/// What a call over several partitions of one node does when it answered `moved` (one of them is not
/// served there, or is moving; it wrote nothing): the map is read again at the next call, and `items`
/// are sent again a partition at a time, side by side, by `call`, each of whose calls is then one
/// partition's and follows MOVED and ASK. Answers per item, in order: a partition's call that fails is
/// its own items' error, not the others'.
pub(crate) async fn apart<T: Copy, R, F, Fut>(
    store: &Store,
    items: &[T],
    partition: impl Fn(&T) -> u16,
    call: F,
) -> Vec<Result<R>>
where
    F: Fn(Vec<T>) -> Fut,
    Fut: Future<Output = Result<Vec<R>>>,
{
    store.nodes_moved();
    tracing::debug!("a call over several partitions found one not served by its node; sent a partition at a time");
    // Each partition's items, in order, and the partitions in the order first met.
    let mut of: HashMap<u16, usize> = HashMap::new();
    let mut parts: Vec<Vec<usize>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let k = *of.entry(partition(item)).or_insert_with(|| {
            parts.push(Vec::new());
            parts.len() - 1
        });
        parts[k].push(i);
    }
    let outs =
        futures_util::future::join_all(parts.iter().map(|idx| call(idx.iter().map(|&i| items[i]).collect()))).await;
    let mut answers: Vec<Option<Result<R>>> = items.iter().map(|_| None).collect();
    for (idx, out) in parts.iter().zip(outs) {
        match out {
            Ok(rs) if rs.len() == idx.len() => {
                for (&i, r) in idx.iter().zip(rs) {
                    answers[i] = Some(Ok(r));
                }
            }
            Ok(_) => {
                for &i in idx {
                    answers[i] = Some(Err(Error::unexpected(
                        None,
                        "a call answered the wrong number of values",
                    )));
                }
            }
            Err(e) => {
                for &i in idx {
                    answers[i] = Some(Err(e.duplicate()));
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.expect("every item went in its partition's call"))
        .collect()
}

/// Whether a script's answer is the `moved` of a call over several partitions (see [`apart`]).
pub(crate) fn is_moved(v: &Value) -> bool {
    match v {
        Value::BulkString(b) => b == b"moved",
        Value::SimpleString(s) => s == "moved",
        _ => false,
    }
}

/// Each partition's node index in a `CLUSTER SLOTS` answer (`[[start, end, [host, port, id, ...],
/// replicas ...], ...]`): nodes are told apart by their id, or host and port.
fn by_partition(slots: &Value, partitions: &Partitions) -> Vec<u32> {
    // (first slot, last slot, node index)
    let mut ranges: Vec<(i64, i64, u32)> = Vec::new();
    let mut nodes: Vec<Vec<u8>> = Vec::new();
    if let Value::Array(entries) = slots {
        for entry in entries {
            let Value::Array(e) = entry else { continue };
            let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(primary))) =
                (e.first(), e.get(1), e.get(2))
            else {
                continue;
            };
            let name: Vec<u8> = primary.iter().take(3).flat_map(node_part).collect();
            let index = match nodes.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    nodes.push(name);
                    nodes.len() - 1
                }
            };
            ranges.push((*lo, *hi, index as u32));
        }
    }
    partitions
        .all()
        .map(|p| {
            let slot = slot_of(partitions.tag(p)) as i64;
            ranges
                .iter()
                .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
                .map_or(UNKNOWN + p as u32, |r| r.2)
        })
        .collect()
}

/// A value of a node's entry (host, port or id) as bytes, with a separator after it.
fn node_part(v: &Value) -> Vec<u8> {
    let mut out = match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::Int(i) => i.to_string().into_bytes(),
        _ => Vec::new(),
    };
    out.push(b' ');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    #[test]
    fn partitions_take_the_node_of_their_slot() {
        let parts = Partitions::new(16);
        let slots = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(5460), node("10.0.0.1", 7000, "a")]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("10.0.0.2", 7001, "b"),
                node("10.0.0.4", 7003, "d"),
            ]),
            // Two ranges of one node: one index.
            Value::Array(vec![Value::Int(10923), Value::Int(12000), node("10.0.0.1", 7000, "a")]),
            // 12001..=16383 has no owner.
        ]);
        let map = by_partition(&slots, &parts);
        for p in parts.all() {
            let slot = slot_of(parts.tag(p));
            let want = match slot {
                0..=5460 | 10923..=12000 => 0,
                5461..=10922 => 1,
                _ => UNKNOWN + p as u32,
            };
            assert_eq!(map[p as usize], want, "partition {p}, slot {slot}");
        }
        assert!(map.contains(&0) && map.contains(&1) && map.iter().any(|&n| n >= UNKNOWN));
    }

    #[test]
    fn an_answer_that_is_not_a_slot_map_leaves_every_partition_alone() {
        let parts = Partitions::new(8);
        let map = by_partition(&Value::Nil, &parts);
        let expected: Vec<u32> = parts.all().map(|p| UNKNOWN + p as u32).collect();
        assert_eq!(map, expected);
    }
}
