//! Counts by topic and state over every partition, and the health of every Redis primary.

use std::collections::HashMap;
use std::time::Duration;

use super::Queue;
use crate::connection::Node;
use crate::job::State;

/// Health of one Redis primary.
#[derive(Debug, Clone)]
pub struct NodeStats {
    /// `host:port` (cluster) or the configured URL without password.
    pub name: String,
    /// Whether it answered PING.
    pub up: bool,
    /// Round trip of the PING, when it answered.
    pub latency: Option<Duration>,
}

/// Counts and health of the whole installation.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Job counts by topic, then state, summed over the partitions that answered.
    pub counts: HashMap<String, HashMap<State, i64>>,
    /// Partitions whose counts could not be read.
    pub partitions_down: Vec<u16>,
    /// Every primary (an empty list when the topology could not be read).
    pub nodes: Vec<NodeStats>,
}

impl Queue {
    /// Counts of every partition (side by side) and the health of every primary.
    pub async fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        let reads = self.partitions.all().map(|p| async move {
            let cmd = redis::cmd("HGETALL").arg(self.partition_keys(p).counts()).clone();
            (p, self.query::<HashMap<String, i64>>(p, &cmd).await)
        });
        for (p, raw) in futures_util::future::join_all(reads).await {
            match raw {
                Ok(raw) => {
                    for (field, n) in raw {
                        if let Some((topic, state)) = field.rsplit_once(':')
                            && let Some(state) = State::parse(state)
                        {
                            *stats
                                .counts
                                .entry(topic.to_string())
                                .or_default()
                                .entry(state)
                                .or_default() += n;
                        }
                    }
                }
                Err(_) => stats.partitions_down.push(p),
            }
        }
        stats.nodes = self.node_health(Duration::from_millis(1000)).await;
        stats
    }

    /// PINGs every primary, side by side.
    pub async fn node_health(&self, timeout: Duration) -> Vec<NodeStats> {
        let nodes = match self.redis.primaries().await {
            Ok(nodes) => nodes,
            Err(_) => vec![Node {
                name: self.redis.names().join(","),
                addr: None,
            }],
        };
        let pings = nodes.into_iter().map(|node| async move {
            let latency = self.redis.ping(&node, timeout).await.ok();
            NodeStats {
                name: node.name,
                up: latency.is_some(),
                latency,
            }
        });
        futures_util::future::join_all(pings).await
    }

    /// PINGs every primary every `every` until `shutdown`, publishing `dq_redis_up{node}` (1 or 0) and
    /// `dq_redis_latency_seconds{node}`, so each process shows the Redis it sees.
    pub fn spawn_health_probe(&self, every: Duration, shutdown: tokio_util::sync::CancellationToken) {
        let queue = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                for node in queue.node_health(every.min(Duration::from_secs(1))).await {
                    match node.latency {
                        Some(rtt) => {
                            metrics::gauge!("dq_redis_up", "node" => node.name.clone()).set(1.0);
                            metrics::gauge!("dq_redis_latency_seconds", "node" => node.name).set(rtt.as_secs_f64());
                        }
                        None => metrics::gauge!("dq_redis_up", "node" => node.name).set(0.0),
                    }
                }
            }
        });
    }
}
