//! Counts by topic and state over every partition, and the health of every Redis primary.

use std::collections::HashMap;
use std::time::Duration;

use super::Admin;
use crate::job::State;
use crate::store::connection::Node;
use crate::store::{counts, nodes};

/// Health of one Redis primary.
#[derive(Debug, Clone)]
pub struct NodeStats {
    /// `host:port` (cluster) or the configured URL without password.
    pub name: String,
    /// Whether it answered PING.
    pub up: bool,
    /// Round trip of the PING (or of the `INFO memory` of [`Queue::node_memory`]), when it answered.
    pub latency: Option<Duration>,
    /// Memory Redis holds (`used_memory`, bytes), when asked ([`Queue::node_memory`]) and answered.
    pub used_memory: Option<u64>,
    /// Its limit (`maxmemory`, bytes; 0 for none), when asked and answered.
    pub maxmemory: Option<u64>,
}

/// Counts and health of the whole installation.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Job counts by topic, then state, summed over the partitions that answered.
    pub counts: HashMap<String, HashMap<State, i64>>,
    /// Dead jobs by partition and topic (partitions that answered, topics with dead jobs): where
    /// dq-checker's retention has work.
    pub dead: Vec<(u16, String, u64)>,
    /// Counts fields at 0, by partition: left by the scripts, removed by dq-checker's housekeeping.
    /// They are not in `counts`.
    pub zeros: Vec<(u16, Vec<String>)>,
    /// Partitions whose counts could not be read.
    pub partitions_down: Vec<u16>,
    /// Every primary (an empty list when the topology could not be read, or from [`Queue::counts`]).
    pub nodes: Vec<NodeStats>,
}

impl Stats {
    /// The topics whose counts fields are all 0 in some partition and that have no job anywhere: their
    /// jobs left lately (dq-checker's housekeeping removes such fields from time to time).
    pub fn drained(&self) -> impl Iterator<Item = &str> {
        self.zeros
            .iter()
            .flat_map(|(_, fields)| fields.iter())
            .filter_map(|f| {
                f.rsplit_once(':')
                    .filter(|(_, s)| State::parse(s).is_some())
                    .map(|(t, _)| t)
            })
            .filter(|t| !self.counts.contains_key(*t))
    }
}

impl Admin {
    /// Counts of every partition (side by side) and the health of every primary.
    pub async fn stats(&self) -> Stats {
        let mut stats = self.counts().await;
        stats.nodes = self.node_health(Duration::from_millis(1000)).await;
        stats
    }

    /// Counts of every partition, side by side, without the primaries' health (`nodes` empty): what the
    /// topic calls and dq-checker's rounds need (the checker PINGs the nodes itself).
    pub async fn counts(&self) -> Stats {
        let mut stats = Stats::default();
        let reads = self
            .partitions
            .all()
            .map(|p| async move { (p, counts::all(&self.store, p).await) });
        for (p, raw) in futures_util::future::join_all(reads).await {
            match raw {
                Ok(raw) => {
                    let mut zeros = Vec::new();
                    for (field, n) in raw {
                        if n == 0 {
                            zeros.push(field);
                            continue;
                        }
                        if let Some((topic, state)) = field.rsplit_once(':')
                            && let Some(state) = State::parse(state)
                        {
                            if state == State::Dead && n > 0 {
                                stats.dead.push((p, topic.to_string(), n as u64));
                            }
                            *stats
                                .counts
                                .entry(topic.to_string())
                                .or_default()
                                .entry(state)
                                .or_default() += n;
                        }
                    }
                    if !zeros.is_empty() {
                        stats.zeros.push((p, zeros));
                    }
                }
                Err(_) => stats.partitions_down.push(p),
            }
        }
        stats
    }

    /// Every primary as the topology shows it now (the configured URLs as one node when it cannot be
    /// read).
    pub async fn primaries(&self) -> Vec<Node> {
        nodes::primaries(&self.store).await
    }

    /// PINGs every primary, side by side.
    pub async fn node_health(&self, timeout: Duration) -> Vec<NodeStats> {
        self.ping_nodes(self.primaries().await, timeout).await
    }

    /// PINGs `nodes`, side by side.
    pub(crate) async fn ping_nodes(&self, nodes: Vec<Node>, timeout: Duration) -> Vec<NodeStats> {
        let pings = nodes.into_iter().map(|node| async move {
            let latency = nodes::ping(&self.store, &node, timeout).await.ok();
            NodeStats {
                name: node.name,
                up: latency.is_some(),
                latency,
                used_memory: None,
                maxmemory: None,
            }
        });
        futures_util::future::join_all(pings).await
    }

    /// Asks every primary, side by side, for `INFO memory`: one call each, which also tells whether it
    /// is up and its round trip, in place of the PING of [`Queue::node_health`].
    pub async fn node_memory(&self, timeout: Duration) -> Vec<NodeStats> {
        let asks = self.primaries().await.into_iter().map(|node| async move {
            let start = std::time::Instant::now();
            let info = nodes::info(&self.store, &node, Some("memory"));
            let info = match tokio::time::timeout(timeout, info).await {
                Ok(Ok(text)) => Some((start.elapsed(), text)),
                _ => None,
            };
            let field = |name: &str| info.as_ref().and_then(|(_, text)| info_field(text, name));
            NodeStats {
                up: info.is_some(),
                latency: info.as_ref().map(|(rtt, _)| *rtt),
                used_memory: field("used_memory"),
                maxmemory: field("maxmemory"),
                name: node.name,
            }
        });
        futures_util::future::join_all(asks).await
    }
}

/// A number field of an INFO answer (`name:value` lines).
fn info_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.parse().ok())
}

/// The nodes a health probe PINGs: every primary now, and every node that was listed as a primary and
/// no longer is, until it answers once. After a failover the old primary is no longer listed; without
/// this its `dq_redis_up` would stay 0 (and its alert firing) even once it is back as a replica, and a
/// failover quicker than one probe round (a listing that waited for the dead node) would never show
/// the node down at all.
#[derive(Debug, Default)]
pub struct NodeWatch {
    /// Nodes listed as primaries at some listing and not seen answering since they stopped being
    /// listed, by name.
    known: std::collections::BTreeMap<String, Node>,
}

impl NodeWatch {
    /// `primaries`, then the former primaries still watched.
    pub fn nodes(&mut self, primaries: Vec<Node>) -> Vec<Node> {
        for p in &primaries {
            self.known.insert(p.name.clone(), p.clone());
        }
        let former: Vec<Node> = self
            .known
            .values()
            .filter(|k| primaries.iter().all(|p| p.name != k.name))
            .cloned()
            .collect();
        let mut nodes = primaries;
        nodes.extend(former);
        nodes
    }

    /// Records a PING of `node`: a former primary that answers is no longer watched.
    pub fn saw(&mut self, node: &Node, up: bool, primary: bool) {
        if up && !primary {
            self.known.remove(&node.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        Node {
            name: name.into(),
            addr: None,
        }
    }

    #[test]
    fn info_fields_are_read_by_exact_name() {
        let info = "# Memory\r\nused_memory:1024\r\nused_memory_human:1.00K\r\nmaxmemory:0\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1024));
        assert_eq!(info_field(info, "maxmemory"), Some(0));
        assert_eq!(info_field(info, "used_memory_peak"), None);
    }

    #[test]
    fn a_former_primary_is_watched_until_it_answers() {
        let mut w = NodeWatch::default();
        let names = |v: Vec<Node>| v.into_iter().map(|n| n.name).collect::<Vec<_>>();
        assert_eq!(names(w.nodes(vec![node("a"), node("b")])), ["a", "b"]);
        // A failover before a is seen down: b's replica c now serves a's slots; a is still watched.
        assert_eq!(names(w.nodes(vec![node("b"), node("c")])), ["b", "c", "a"]);
        w.saw(&node("a"), false, false);
        assert_eq!(names(w.nodes(vec![node("b"), node("c")])), ["b", "c", "a"]);
        w.saw(&node("b"), true, true);
        w.saw(&node("a"), true, false);
        assert_eq!(names(w.nodes(vec![node("b"), node("c")])), ["b", "c"]);
    }
}
